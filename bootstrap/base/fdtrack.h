/* Descriptors hpct owns, forgotten in a forked child.  A child of a rank
 * (a data-loader worker, a subprocess before its exec) inherits every
 * socket of the rank's world: links, listeners, store connections.  Held
 * open there, they would keep the rank looking alive to its peers after it
 * died, and let the child talk on its parent's links.  Every socket hpct
 * makes is tracked here (with its inode, so a number the program reused
 * is left alone), and a fork's child handler replaces each with /dev/null
 * at once: the child keeps no link, and its copy of the world fails on
 * use instead of reaching the parent's peers.  Sockets are also
 * close-on-exec. */
#ifndef HPCT_FDTRACK_H
#define HPCT_FDTRACK_H

#include "bootstrap/base/private_api.h"

/* Records `fd` (a socket hpct just made or accepted); the first call
 * installs the fork handler.  Descriptors past 65535 are not tracked. */
HPCT_PRIVATE void hpct__fd_track(int fd);
/* 1 when `fd` is a socket hpct tracks (the same socket: its inode). */
HPCT_PRIVATE int hpct__fd_is_tracked(int fd);
/* 1 in a process forked from one that tracked a descriptor (the child
 * handler ran): it must not use what it inherited. */
HPCT_PRIVATE int hpct__fd_forked(void);

#endif
