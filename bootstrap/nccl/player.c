/* The rank side of NCCL's root exchange, for tests and hpct-bench only:
 * plays N NCCL ranks of one release (its wire, root_wire.h) against a set
 * of roots (NCCL's own or hpct's) and collects what each rank is sent.
 * Not part of libhpct.so: built into the static library hpct_nccl_player. */
#include "bootstrap/base/fdtrack.h"
#include "bootstrap/nccl/player.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/base/log.h"
#include "bootstrap/base/util.h"
#include "bootstrap/nccl/root_wire.h"

void hpct__nccl_test_ring(int rank, unsigned char out[HPCT_NCCL_RING_LEN])
{
	/* an AF_INET address no root would invent, then a pattern of the rank */
	memset(out, 0, HPCT_NCCL_RING_LEN);
	struct sockaddr_in in = { .sin_family = AF_INET, .sin_port = htons(40000 + rank % 20000) };
	in.sin_addr.s_addr = htonl(0x0a000000u | ((unsigned)rank & 0xffffff));
	memcpy(out, &in, sizeof(in));
	for (int i = HPCT_NCCL_ADDR_LEN; i < HPCT_NCCL_RING_LEN; i++)
		out[i] = (unsigned char)(rank * 7 + i);
}

int hpct__nccl_test_answer(int rank, int version, unsigned char out[HPCT_NCCL_RING_LEN])
{
	const struct hpct_nccl_wire *w = hpct__nccl_wire_for_version(version);
	if (!w)
		return HPCT_EINVAL;
	hpct__nccl_test_ring(rank, out);
	memset(out + w->reply_len, 0, (size_t)(HPCT_NCCL_RING_LEN - w->reply_len));
	return 0;
}

/* NCCL_UID_STAGGER_THRESHOLD and NCCL_UID_STAGGER_RATE's defaults: ranks of
 * a root with more ranks than this wait local id / rate seconds first. */
#define STAGGER_THRESHOLD 256
#define STAGGER_RATE      7000.0

struct player {
	int lfd, fd; /* our listener for the root's answer; the answer's conn */
	size_t got;
	int done;
	unsigned char buf[HPCT_NCCL_HDR_LEN + HPCT_NCCL_RING_LEN];
};

static int id_addr(const hpct_nccl_id *id, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	memcpy(ss, id->internal + 8, HPCT_NCCL_ADDR_LEN);
	return ss->ss_family == AF_INET || ss->ss_family == AF_INET6 ? 0 : HPCT_EINVAL;
}

static uint64_t id_magic(const hpct_nccl_id *id)
{
	uint64_t m;
	memcpy(&m, id->internal, 8);
	return m;
}

/* Rank `rank` tells root `root` about itself as rank `as`, in wire w's
 * report (offset 0: not a grow). */
static int report(const struct hpct_nccl_wire *w, const hpct_nccl_id *ids, int nids, int nranks,
                  int root, int as, const struct sockaddr_storage *mine, const unsigned char *ring,
                  double deadline)
{
	struct sockaddr_storage to;
	id_addr(&ids[root], &to);
	unsigned char msg[HPCT_NCCL_HDR_LEN + HPCT_NCCL_REPORT_MAX];
	unsigned char *e = msg + HPCT_NCCL_HDR_LEN;
	memset(msg, 0, sizeof(msg));
	hpct__nccl_header(msg, id_magic(&ids[root]), w->report_len);
	hpct__nccl_put32(e, as);
	hpct__nccl_put32(e + 4, nranks);
	if (w->multi_root) {
		hpct__nccl_put32(e + 8, root);
		hpct__nccl_put32(e + 12, nids);
	}
	memcpy(e + w->addr_at, mine, hpct__nccl_addr_len((const struct sockaddr *)mine));
	memcpy(e + w->ring_at, ring, (size_t)w->reply_len);
	int fd, rc;
	double left = deadline - hpct__now();
	if ((rc = hpct__nccl_connect_to((struct sockaddr *)&to, left > 0.05 ? left : 0.05, left,
	                                &fd)) == 0) {
		rc = hpct__nccl_send_all(fd, msg, HPCT_NCCL_HDR_LEN + (size_t)w->report_len);
		close(fd);
	}
	if (rc < 0) {
		char where[80];
		hpct__addr_str((struct sockaddr *)&to, where, sizeof(where));
		return hpct__fail(HPCT_EPEERDEAD, HPCT_SUB_NCCL,
		                  "simulated rank %d: cannot report to NCCL root %d at %s: %s", as,
		                  root, where, hpct_strerror(rc));
	}
	return 0;
}

/* Takes the answers (of wire w) to every player; 0 when all came. */
static int collect(const struct hpct_nccl_wire *w, const hpct_nccl_id *ids, int nids, int nranks,
                   struct player *p, double deadline)
{
	size_t want_len = HPCT_NCCL_HDR_LEN + (size_t)w->reply_len;
	struct pollfd *pf = calloc((size_t)nranks, sizeof(*pf));
	if (!pf)
		return HPCT_ENOMEM;
	int left = nranks, rc = 0;
	while (left > 0 && rc == 0) {
		for (int r = 0; r < nranks; r++) {
			pf[r].fd = p[r].done ? -1 : p[r].fd >= 0 ? p[r].fd : p[r].lfd;
			pf[r].events = POLLIN;
			pf[r].revents = 0;
		}
		double t = deadline - hpct__now();
		if (t <= 0) {
			int first = -1;
			for (int r = 0; r < nranks && first < 0; r++)
				if (!p[r].done)
					first = r;
			rc = hpct__fail(HPCT_ETIMEDOUT, HPCT_SUB_NCCL,
			                "simulated ranks: %d of %d got no answer from their root "
			                "(rank %d among them)",
			                left, nranks, first);
			break;
		}
		if (poll(pf, (nfds_t)nranks, t > 0.1 ? 100 : (int)(t * 1000) + 1) < 0 &&
		    errno != EINTR) {
			rc = hpct__fail(-errno, HPCT_SUB_NCCL, "simulated ranks: poll: %s",
			                strerror(errno));
			break;
		}
		for (int r = 0; r < nranks && rc == 0; r++) {
			struct player *q = &p[r];
			if (q->done || !pf[r].revents)
				continue;
			if (q->fd < 0) {
				q->fd = accept4(q->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
				hpct__fd_track(q->fd);
				continue;
			}
			ssize_t k = recv(q->fd, q->buf + q->got, want_len - q->got, 0);
			if (k < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			if (k <= 0) {
				rc = hpct__fail(
				        HPCT_EPROTO, HPCT_SUB_NCCL,
				        "simulated rank %d: the root's answer broke off after %zu "
				        "bytes",
				        r, q->got);
				break;
			}
			q->got += (size_t)k;
			if (q->got < want_len)
				continue;
			/* the answer opens with the magic of the rank's root's id
			 * and type 1, its size that of the wire's ring info */
			uint64_t want = id_magic(&ids[hpct__nccl_root_of(r, nranks, nids)]);
			if (memcmp(q->buf, &want, 8) != 0 ||
			    hpct__nccl_get32(q->buf + 8) != HPCT_NCCL_SOCK_TYPE_BOOTSTRAP ||
			    hpct__nccl_get32(q->buf + 12) != w->reply_len)
				rc = hpct__fail(
				        HPCT_EPROTO, HPCT_SUB_NCCL,
				        "simulated rank %d: the root's answer has magic, type or "
				        "size wrong (type %d, size %d; NCCL %s: %d)",
				        r, hpct__nccl_get32(q->buf + 8),
				        hpct__nccl_get32(q->buf + 12), w->releases, w->reply_len);
			q->done = 1;
			left--;
		}
	}
	free(pf);
	return rc;
}

int hpct__nccl_play_ranks(const hpct_nccl_id *ids, int nids, int nranks, const int *order,
                          double timeout_s, int stagger, int version, unsigned char *replies,
                          int *root_conns_out)
{
	const struct hpct_nccl_wire *w = hpct__nccl_wire_for_version(version);
	if (!w)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_NCCL,
		                  "simulated ranks: no known root wire for NCCL version code %d "
		                  "(hpct knows %s to %s)",
		                  version, hpct__nccl_wires[0].releases,
		                  hpct__nccl_wires[HPCT_NCCL_NWIRES - 1].releases);
	if (nids < 1 || nranks < nids)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_NCCL,
		                  "simulated ranks: %d ranks cannot use %d roots", nranks, nids);
	if (!w->multi_root && nids != 1)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_NCCL,
		                  "simulated ranks: NCCL %s ranks report to one root only, not %d "
		                  "(several roots came with ncclCommInitRankScalable in 2.23)",
		                  w->releases, nids);
	double deadline = hpct__now() + timeout_s;
	struct player *p = calloc((size_t)nranks, sizeof(*p));
	struct sockaddr_storage *mine = calloc((size_t)nranks, sizeof(*mine));
	int *per_root = calloc((size_t)nids, sizeof(int)); /* connections, seen from here */
	int rc = p && mine && per_root ? 0 : HPCT_ENOMEM;
	for (int r = 0; p && r < nranks; r++)
		p[r].lfd = p[r].fd = -1;
	/* every rank waits for its root where the root is: the same address */
	for (int r = 0; r < nranks && rc == 0; r++) {
		struct sockaddr_storage *ss = &mine[r];
		if (id_addr(&ids[hpct__nccl_root_of(r, nranks, nids)], ss) < 0) {
			rc = hpct__fail(HPCT_EINVAL, HPCT_SUB_NCCL,
			                "simulated rank %d: bad root id", r);
			break;
		}
		if (ss->ss_family == AF_INET)
			((struct sockaddr_in *)ss)->sin_port = 0;
		else
			((struct sockaddr_in6 *)ss)->sin6_port = 0;
		socklen_t len = hpct__nccl_addr_len((struct sockaddr *)ss);
		p[r].lfd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		hpct__fd_track(p[r].lfd);
		if (p[r].lfd < 0 || bind(p[r].lfd, (struct sockaddr *)ss, len) < 0 ||
		    listen(p[r].lfd, 4) < 0 ||
		    getsockname(p[r].lfd, (struct sockaddr *)ss, &len) < 0)
			rc = hpct__fail(-errno, HPCT_SUB_NCCL, "simulated rank %d: listener: %s", r,
			                strerror(errno));
	}
	unsigned char ring[HPCT_NCCL_RING_LEN];
	double t0 = hpct__now();
	for (int k = 0; k < nranks && rc == 0; k++) {
		int r = order ? order[k] : k;
		int root = hpct__nccl_root_of(r, nranks, nids);
		if (stagger && hpct__nccl_count_of(root, nranks, nids) > STAGGER_THRESHOLD) {
			/* NCCL's ranks hold back by their place in the root's block */
			double at =
			        t0 + (r - hpct__nccl_first_of(root, nranks, nids)) / STAGGER_RATE;
			double wait = at - hpct__now();
			if (wait > 0)
				usleep((useconds_t)(wait * 1e6));
		}
		hpct__nccl_test_ring(r, ring);
		rc = report(w, ids, nids, nranks, root, r, &mine[r], ring, deadline);
		per_root[root]++;
		if (rc == 0 && nids > 1 && r == hpct__nccl_first_of(root, nranks, nids)) {
			int prev = (r - 1 + nranks) % nranks;
			int proot = hpct__nccl_root_of(prev, nranks, nids);
			rc = report(w, ids, nids, nranks, proot, prev + 1, &mine[r], ring,
			            deadline);
			per_root[proot]++;
		}
	}
	if (rc == 0)
		rc = collect(w, ids, nids, nranks, p, deadline);
	for (int r = 0; rc == 0 && r < nranks; r++) {
		unsigned char *slot = replies + (size_t)r * HPCT_NCCL_RING_LEN;
		memset(slot, 0, HPCT_NCCL_RING_LEN);
		memcpy(slot, p[r].buf + HPCT_NCCL_HDR_LEN, (size_t)w->reply_len);
	}
	if (rc == 0 && root_conns_out) {
		/* every answer came: one more connection per rank to its root */
		*root_conns_out = 0;
		for (int r = 0; r < nranks; r++)
			per_root[hpct__nccl_root_of(r, nranks, nids)]++;
		for (int k = 0; k < nids; k++)
			if (per_root[k] > *root_conns_out)
				*root_conns_out = per_root[k];
	}
	for (int r = 0; p && r < nranks; r++) {
		if (p[r].lfd >= 0)
			close(p[r].lfd);
		if (p[r].fd >= 0)
			close(p[r].fd);
	}
	free(p);
	free(mine);
	free(per_root);
	return rc;
}

void hpct__nccl_test_order(int *order, int n, unsigned seed)
{
	for (int i = 0; i < n; i++)
		order[i] = i;
	for (int i = n - 1; i > 0; i--) {
		seed = seed * 1103515245u + 12345u;
		int j = (int)((seed >> 8) % (unsigned)(i + 1)), t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
}
