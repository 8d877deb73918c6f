/* Where a member's data listener binds: the one thing the two paths do
 * differently for the fan-out, one row each.  The port is the kernel's;
 * members learn each other's in the fan-out's first allgather. */
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/base/log.h"
#include "bootstrap/base/util.h"
#include "bootstrap/fanout/fanout_internal.h"

/* Rootless: this rank's node address, which its peers reach it at. */
static int rl_bind_addr(struct hpct_world *w, struct sockaddr_storage *ss, socklen_t *len)
{
	int rc = hpct__world_node_addr(w, w->topo.rank, ss, len);
	if (rc < 0)
		return hpct__fail(
		        rc, HPCT_SUB_COLL,
		        "rank %d: fan-out: this rank's node address does not resolve (%s)",
		        w->topo.rank, hpct_strerror(rc));
	return 0;
}

/* Standard: the address this rank reaches the rendezvous from. */
static int std_bind_addr(struct hpct_world *w, struct sockaddr_storage *ss, socklen_t *len)
{
	return hpct__world_route_source(w, "fan-out", ss, len);
}

static const struct fo_addr_ops rootless = { "rootless", rl_bind_addr };
static const struct fo_addr_ops standard = { "standard", std_bind_addr };

/* The row of each path: a table indexed by enum hpct_path. */
const struct fo_addr_ops *const hpct__fo_addr[HPCT_PATH_ROOTLESS + 1] = {
	[HPCT_PATH_STANDARD] = &standard,
	[HPCT_PATH_ROOTLESS] = &rootless,
};
