/* The rootless collectives (coll.c), the rows of the rootless path's table
 * (path.c).  Arguments are checked by group.c before they get here. */
#ifndef HPCT_ROOTLESS_COLL_H
#define HPCT_ROOTLESS_COLL_H

#include <stddef.h>

struct hpct_group;

int hpct__coll_allgather(struct hpct_group *g, const void *item, size_t sz, void *out);
int hpct__coll_barrier(struct hpct_group *g);
int hpct__coll_broadcast(struct hpct_group *g, void *buf, size_t len, int root);
int hpct__coll_alltoall(struct hpct_group *g, const void *items, size_t sz, void *out);

#endif
