/* Where each member's service is: the one thing the two paths do
 * differently for the exchange, one row of struct xchg_addr_ops each. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/base/bytes.h"
#include "bootstrap/base/util.h"
#include "bootstrap/topo/derive.h"
#include "bootstrap/xchg/xchg_internal.h"

static void set_port(struct sockaddr_storage *ss, int port)
{
	if (ss->ss_family == AF_INET6)
		((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
	else
		((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
}

/* Rootless: world rank r's service is at its node's address and the port
 * number of its TCP listener (UDP is a port space of its own). */
static int derived(struct hpct_world *w, int r, struct sockaddr_storage *ss, socklen_t *len)
{
	int rc = hpct__world_node_addr(w, r, ss, len);
	if (rc < 0)
		return hpct__fail(rc, HPCT_SUB_COLL,
		                  "rank %d: the exchange's service of rank %d: its node's address "
		                  "does not resolve (%s)",
		                  w->topo.rank, r, hpct_strerror(rc));
	set_port(ss, hpct__derive_port(&w->topo, r));
	return 0;
}

static int rl_bind_addr(struct hpct_world *w, struct sockaddr_storage *ss, socklen_t *len)
{
	return derived(w, w->topo.rank, ss, len);
}

static int rl_peers(struct hpct_xchg *x, hpct_group *g)
{
	for (int j = 0; j < x->size; j++) {
		int rc = derived(g->world, x->members[j], &x->addrs[j], &x->addrlens[j]);
		if (rc < 0)
			return rc;
	}
	return 0;
}

const struct xchg_addr_ops hpct__xchg_addr_rootless = {
	.name = "rootless",
	.bind_addr = rl_bind_addr,
	.peers = rl_peers,
};

/* Standard: the address this rank reaches the rendezvous from, any port. */
static int std_bind_addr(struct hpct_world *w, struct sockaddr_storage *ss, socklen_t *len)
{
	return hpct__world_route_source(w, "exchange", ss, len);
}

/* An address in an allgather item: u16 family, u16 port, 16 bytes, u32 scope. */
#define ADDR_ITEM 24

static void addr_put(const struct sockaddr_storage *ss, unsigned char *p)
{
	memset(p, 0, ADDR_ITEM);
	hpct__put16(p, (uint16_t)ss->ss_family);
	if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
		hpct__put16(p + 2, ntohs(a->sin6_port));
		memcpy(p + 4, &a->sin6_addr, 16);
		hpct__put32(p + 20, a->sin6_scope_id);
	} else {
		const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
		hpct__put16(p + 2, ntohs(a->sin_port));
		memcpy(p + 4, &a->sin_addr, 4);
	}
}

static int addr_get(const unsigned char *p, struct sockaddr_storage *ss, socklen_t *len)
{
	memset(ss, 0, sizeof(*ss));
	uint16_t fam = hpct__get16(p);
	if (fam == AF_INET6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons(hpct__get16(p + 2));
		memcpy(&a->sin6_addr, p + 4, 16);
		a->sin6_scope_id = hpct__get32(p + 20);
		*len = sizeof(*a);
	} else if (fam == AF_INET) {
		struct sockaddr_in *a = (struct sockaddr_in *)ss;
		a->sin_family = AF_INET;
		a->sin_port = htons(hpct__get16(p + 2));
		memcpy(&a->sin_addr, p + 4, 4);
		*len = sizeof(*a);
	} else {
		return HPCT_EPROTO;
	}
	return 0;
}

static int std_peers(struct hpct_xchg *x, hpct_group *g)
{
	struct xchg_service *s = x->svc;
	struct sockaddr_storage self;
	socklen_t sl = sizeof(self);
	unsigned char mine[ADDR_ITEM], *all = malloc((size_t)x->size * ADDR_ITEM);
	if (!all)
		return HPCT_ENOMEM;
	int rc = getsockname(s->fd, (struct sockaddr *)&self, &sl) != 0 ? -errno : 0;
	if (rc == 0) {
		addr_put(&self, mine);
		rc = hpct_allgather(g, mine, ADDR_ITEM, all); /* named by the allgather */
	}
	for (int j = 0; rc == 0 && j < x->size; j++)
		if (addr_get(all + (size_t)j * ADDR_ITEM, &x->addrs[j], &x->addrlens[j]) < 0)
			rc = hpct__fail(HPCT_EPROTO, HPCT_SUB_COLL,
			                "rank %d: exchange '%s': group rank %d sent no address",
			                g->world->topo.rank, x->name, j);
	free(all);
	return rc;
}

const struct xchg_addr_ops hpct__xchg_addr_standard = {
	.name = "standard",
	.bind_addr = std_bind_addr,
	.peers = std_peers,
};
