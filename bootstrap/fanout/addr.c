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

/* Standard: the address this rank reaches the rendezvous from (the route's
 * source, which a connected UDP socket reports without sending). */
static int std_bind_addr(struct hpct_world *w, struct sockaddr_storage *ss, socklen_t *len)
{
	const struct hpct_topo *t = &w->topo;
	struct sockaddr_storage m;
	socklen_t ml;
	int rc = hpct__resolve(t->master_addr ? t->master_addr : "127.0.0.1", t->master_port,
	                       t->family, &m, &ml);
	if (rc < 0)
		return rc; /* named there */
	int fd = socket(m.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return hpct__fail(-errno, HPCT_SUB_COLL, "rank %d: fan-out: socket: %s", t->rank,
		                  strerror(errno));
	*len = sizeof(*ss);
	if (connect(fd, (struct sockaddr *)&m, ml) != 0 ||
	    getsockname(fd, (struct sockaddr *)ss, len) != 0) {
		int e = errno;
		close(fd);
		return hpct__fail(-e, HPCT_SUB_COLL,
		                  "rank %d: fan-out: no route to the rendezvous %s:%d: %s", t->rank,
		                  t->master_addr, t->master_port, strerror(e));
	}
	close(fd);
	if (ss->ss_family == AF_INET6)
		((struct sockaddr_in6 *)ss)->sin6_port = 0;
	else
		((struct sockaddr_in *)ss)->sin_port = 0;
	return 0;
}

const struct fo_addr_ops hpct__fo_addr_rootless = { "rootless", rl_bind_addr };
const struct fo_addr_ops hpct__fo_addr_standard = { "standard", std_bind_addr };
