/* What the C++ parts (bootstrap/gloo/) may ask of a world, without seeing
 * its C internals. */
#ifndef HPCT_WORLD_ACCESS_H
#define HPCT_WORLD_ACCESS_H

#include <stddef.h>

#include "hpct/hpct.h"

#ifdef __cplusplus
extern "C" {
#endif

struct hpct_std_client;

/* HPCT_TIMEOUT in seconds. */
double hpct__world_timeout(const hpct_world *world);
/* The standard path's store client, NULL on the rootless path. */
struct hpct_std_client *hpct__world_std_client(hpct_world *world);
/* The numeric address of the node of world rank `rank` ("10.0.0.3",
 * "fd00::3"), resolved once.  HPCT_ESTATE when there is no node list,
 * HPCT_ERESOLVE when it does not resolve. */
int hpct__world_node_host(hpct_world *world, int rank, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
