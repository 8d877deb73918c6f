/* Where each member's service is: the one thing the two paths do
 * differently for the exchange, one row of struct xchg_addr_ops each. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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

/* A rank's TCP listener is at its service's address: the kernel takes a
 * connection there while its process lives (whatever that process is
 * busy with), and refuses it once the process is gone or before it
 * started.  The connection is closed at once: a connection that never
 * says HELLO is dropped quietly by the engine.  All at once, wait_s in
 * all. */
static void rl_alive(struct hpct_xchg *x, const int *js, int n, double wait_s, signed char *out)
{
	int *fds = malloc((size_t)n * sizeof(int));
	if (!fds) {
		memset(out, -1, (size_t)n);
		return;
	}
	for (int i = 0; i < n; i++) {
		const struct sockaddr_storage *a = &x->addrs[js[i]];
		out[i] = 0;
		fds[i] = socket(a->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fds[i] < 0) {
			out[i] = -1;
			continue;
		}
		if (connect(fds[i], (const struct sockaddr *)a, x->addrlens[js[i]]) == 0) {
			out[i] = 1;
		} else if (errno != EINPROGRESS) {
			close(fds[i]);
			fds[i] = -1;
		}
	}
	double deadline = hpct__now() + wait_s;
	struct pollfd *pf = calloc((size_t)n, sizeof(*pf));
	for (;;) {
		int waiting = 0;
		for (int i = 0; pf && i < n; i++) {
			pf[i] = (struct pollfd){ .fd = fds[i] >= 0 && out[i] == 0 ? fds[i] : -1,
				                 .events = POLLOUT };
			waiting += pf[i].fd >= 0;
		}
		double left = deadline - hpct__now();
		if (!pf || waiting == 0 || left <= 0 ||
		    poll(pf, (nfds_t)n, (int)(left * 1000) + 1) < 0)
			break;
		for (int i = 0; i < n; i++) {
			if (pf[i].fd < 0 || !pf[i].revents)
				continue;
			int err = 0;
			socklen_t el = sizeof(err);
			getsockopt(fds[i], SOL_SOCKET, SO_ERROR, &err, &el);
			out[i] = err == 0 ? 1 : 0;
			close(fds[i]);
			fds[i] = -1;
		}
	}
	free(pf);
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(fds);
}

const struct xchg_addr_ops hpct__xchg_addr_rootless = {
	.name = "rootless",
	.bind_addr = rl_bind_addr,
	.peers = rl_peers,
	.alive = rl_alive,
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

/* A service's port is ephemeral here, with no listener beside it: no way
 * to tell a late rank from a dead one. */
static void std_alive(struct hpct_xchg *x, const int *js, int n, double wait_s, signed char *out)
{
	(void)x, (void)js, (void)wait_s;
	memset(out, -1, (size_t)n);
}

const struct xchg_addr_ops hpct__xchg_addr_standard = {
	.name = "standard",
	.bind_addr = std_bind_addr,
	.peers = std_peers,
	.alive = std_alive,
};
