/* The standard path's collectives through rank 0's rendezvous (coll.c),
 * the rows of its table (path.c).  Arguments are checked by group.c. */
#ifndef HPCT_STDPATH_COLL_H
#define HPCT_STDPATH_COLL_H

#include <stddef.h>

struct hpct_group;

int hpct__std_allgather(struct hpct_group *g, const void *item, size_t sz, void *out);
int hpct__std_barrier(struct hpct_group *g);
int hpct__std_broadcast(struct hpct_group *g, void *buf, size_t len, int root);
int hpct__std_alltoall(struct hpct_group *g, const void *items, size_t sz, void *out);

#endif
