/* Derivation: what every rank computes alone, identically, from the same
 * inputs.  Nothing here communicates. */
#ifndef HPCT_DERIVE_H
#define HPCT_DERIVE_H

#include <stdint.h>
#include <sys/socket.h>

#include "bootstrap/topo/topo.h"

/* The listen port of `rank`: an explicit port from a host table, else
 * HPCT_PORT_BASE + window * max_local + local index, where the range (less
 * the ports kept at its top) is cut into windows of max_local ports and
 * window = (job + epoch) mod windows, so consecutive epochs never share a
 * port while the range has two windows; torchrun's agents: the range's top
 * port. */
int hpct__derive_port(const struct hpct_topo *topo, int rank);
/* The window index used for `epoch` (for hpct-info). */
int hpct__derive_window(const struct hpct_topo *topo, uint64_t epoch);

/* Identity of the world group and of a child group: a hash of (job, epoch,
 * parent identity, the parent's counter, member world ranks). */
uint64_t hpct__derive_world_group(uint64_t job, uint64_t epoch, int size);
uint64_t hpct__derive_group(uint64_t job, uint64_t epoch, uint64_t parent, uint64_t counter,
                            const int *members, int n);

/* HPCT_SOCKET_IFNAME in NCCL's syntax: comma-separated prefixes, "^" before
 * the list excludes, "=" before the list asks exact names.  Checks that some
 * interface matches and that `addr` (this node's address) is on one of them.
 * HPCT_EBADENV naming the variable, the interfaces seen and the address. */
int hpct__ifname_check(const char *spec, const struct sockaddr *addr);

#endif
