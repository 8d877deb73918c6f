/* The exchange of per-peer handles (hpct_xchg_*), ranks as processes over
 * loopback, both paths.  Children report through their exit code: 0 ok,
 * otherwise the number of the check that failed.  Order between ranks
 * comes from ht_events (or from a counter a rank reads in its own stats),
 * never from a sleep.  Linked with the internal archive: the forgery test
 * builds datagrams with the library's own encoder and a wrong secret.
 *
 * Ports: two slots of the program's range, each cut into 8 worlds of 25
 * ports (MASTER_PORT, then 16 derived ports: two windows of 8 ranks). */
#include <criterion/criterion.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/base/util.h"
#include "bootstrap/xchg/xchg_internal.h"
#include "hpct/hpct.h"
#include "tests/harness.h"

enum { NEV = 4 };

struct cfg {
	int n, port, rootless;
	double timeout;
	const char *secret;
	size_t item;
	struct ht_event ev[NEV];
};

static void env_cb(int r, void *arg)
{
	struct cfg *c = arg;
	ht_setenv_world(r, c->n, 1, c->port, c->rootless, c->timeout);
	if (c->secret)
		setenv("HPCT_SECRET", c->secret, 1);
}

/* The item src publishes for dst at version v: every byte depends on all
 * three, so a byte of another version or peer shows. */
static void fill(unsigned char *p, size_t len, int src, int dst, uint64_t v)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (unsigned char)(src * 7 + dst * 13 + (int)v * 29 + (int)(i % 251));
}

static int check(const unsigned char *p, size_t len, int src, int dst, uint64_t v)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != (unsigned char)(src * 7 + dst * 13 + (int)v * 29 + (int)(i % 251)))
			return -1;
	return 0;
}

static int publish(hpct_xchg *x, int n, int me, size_t sz, uint64_t v)
{
	unsigned char *all = malloc((size_t)n * sz);
	for (int j = 0; j < n; j++)
		fill(all + (size_t)j * sz, sz, me, j, v);
	int rc = hpct_xchg_publish(x, v, all);
	free(all);
	return rc;
}

/* Fetches version v from every rank (itself included) and checks it. */
static int fetch_all(hpct_xchg *x, int n, int me, size_t sz, uint64_t v)
{
	int peers[64] = { 0 };
	unsigned char *out = malloc((size_t)n * sz);
	for (int j = 0; j < n; j++)
		peers[j] = j;
	int rc = hpct_xchg_fetch(x, v, peers, n, out);
	for (int j = 0; rc == 0 && j < n; j++)
		if (check(out + (size_t)j * sz, sz, j, me, v) != 0)
			rc = -1;
	free(out);
	return rc;
}

static struct hpct_xchg_stats stats(hpct_xchg *x)
{
	struct hpct_xchg_stats st;
	hpct_xchg_get_stats(x, &st);
	return st;
}

/* Waits until this rank's exchange parked `want` requests: the way a rank
 * knows that a peer's request is held here. */
static int wait_parked(hpct_xchg *x, uint64_t want)
{
	double deadline = ht_now() + 30;
	while (stats(x).requests_parked < want)
		if (ht_now() > deadline)
			return -1;
		else
			usleep(1000);
	return 0;
}

static void run(int world, int n, int rootless, double timeout, size_t item, const char *secret,
                ht_rank_fn fn)
{
	struct cfg c = { .n = n,
		         .port = hpct_test_ports(world / 8) + (world % 8) * 25,
		         .rootless = rootless,
		         .timeout = timeout,
		         .secret = secret,
		         .item = item };
	for (int i = 0; i < NEV; i++)
		ht_event_init(&c.ev[i]);
	int codes[64];
	int bad = ht_spawn(n, env_cb, fn, &c, 120, NULL, codes);
	for (int i = 0; i < NEV; i++)
		ht_event_destroy(&c.ev[i]);
	cr_assert_eq(bad, 0, "%s: %s", rootless ? "rootless" : "standard", ht_describe(codes, n));
}

/* Every rank publishes items for all and fetches all; again from the cache. */
static int all_peers(int r, void *arg)
{
	struct cfg *c = arg;
	hpct_world *w;
	hpct_xchg *x;
	if (hpct_world_create(&w) != 0 || hpct_xchg_create(hpct_world_group(w), "h", c->item, &x))
		return 2;
	for (uint64_t v = 1; v <= 2; v++) {
		if (publish(x, c->n, r, c->item, v) != 0)
			return 3;
		struct hpct_xchg_stats a = stats(x);
		if (fetch_all(x, c->n, r, c->item, v) != 0)
			return 4;
		struct hpct_xchg_stats b = stats(x);
		if (b.misses - a.misses != (uint64_t)c->n - 1 || b.hits - a.hits != 1)
			return 5;
		if (fetch_all(x, c->n, r, c->item, v) != 0)
			return 6;
		struct hpct_xchg_stats d = stats(x);
		if (d.requests_sent != b.requests_sent || d.misses != b.misses ||
		    d.hits - b.hits != (uint64_t)c->n)
			return 7; /* the second fetch sent something */
	}
	/* a rank that leaves takes its items with it: stay until all fetched */
	if (hpct_barrier(hpct_world_group(w)) != 0)
		return 8;
	hpct_xchg_destroy(x);
	hpct_world_destroy(w);
	return 0;
}

Test(xchg, all_peers_rootless)
{
	run(0, 8, 1, 30, 48, NULL, all_peers);
}
Test(xchg, all_peers_standard)
{
	run(1, 8, 0, 30, 48, NULL, all_peers);
}

/* Rank 0 runs a whole run ahead: v1 done, v2 published and fetched while
 * the others are still in v1.  It must read only v2 items (held by the
 * peers until they publish v2), and the others still get v1 from it. */
static int ahead(int r, void *arg)
{
	struct cfg *c = arg;
	struct ht_event *v1_out = &c->ev[0], *ahead_now = &c->ev[1];
	hpct_world *w;
	hpct_xchg *x;
	if (hpct_world_create(&w) != 0 || hpct_xchg_create(hpct_world_group(w), "h", c->item, &x))
		return 2;
	if (publish(x, c->n, r, c->item, 1) != 0)
		return 3;
	if (r == 0) {
		if (ht_event_wait(v1_out, c->n - 1, 60) != 0)
			return 4;
		if (fetch_all(x, c->n, r, c->item, 1) != 0 || publish(x, c->n, r, c->item, 2) != 0)
			return 5;
		ht_event_post(ahead_now, c->n - 1);
		if (fetch_all(x, c->n, r, c->item, 2) != 0)
			return 6; /* a v1 item would fail the check */
		struct hpct_xchg_stats a = stats(x);
		if (fetch_all(x, c->n, r, c->item, 2) != 0 ||
		    stats(x).requests_sent != a.requests_sent)
			return 7;
	} else {
		ht_event_post(v1_out, 1);
		if (ht_event_wait(ahead_now, 1, 60) != 0)
			return 8;
		/* still in run 1: v1 from everyone, rank 0 (at v2 now) included */
		if (fetch_all(x, c->n, r, c->item, 1) != 0)
			return 9;
		/* rank 0's request for v2 is held here before this rank publishes it */
		if (wait_parked(x, 1) != 0)
			return 10;
		if (publish(x, c->n, r, c->item, 2) != 0 || fetch_all(x, c->n, r, c->item, 2) != 0)
			return 11;
	}
	if (hpct_barrier(hpct_world_group(w)) != 0)
		return 12;
	hpct_xchg_destroy(x);
	hpct_world_destroy(w);
	return 0;
}

Test(xchg, ahead_by_a_run_rootless)
{
	run(2, 8, 1, 30, 40, NULL, ahead);
}
Test(xchg, ahead_by_a_run_standard)
{
	run(3, 8, 0, 30, 40, NULL, ahead);
}

/* Rank 0 has all it needs (a cache hit) and goes idle, in no hpct call;
 * rank 1 misses and must still get rank 0's item. */
static int hit_miss(int r, void *arg)
{
	struct cfg *c = arg;
	struct ht_event *published = &c->ev[0], *idle = &c->ev[1], *done = &c->ev[2];
	hpct_world *w;
	hpct_xchg *x;
	if (hpct_world_create(&w) != 0 || hpct_xchg_create(hpct_world_group(w), "h", c->item, &x))
		return 2;
	if (publish(x, 2, r, c->item, 1) != 0)
		return 3;
	unsigned char got[64];
	int peer = 1 - r;
	if (r == 0) {
		if (ht_event_wait(published, 1, 60) != 0)
			return 4;
		if (hpct_xchg_fetch(x, 1, &peer, 1, got) != 0 || check(got, c->item, 1, 0, 1))
			return 5;
		struct hpct_xchg_stats a = stats(x);
		if (hpct_xchg_fetch(x, 1, &peer, 1, got) != 0 ||
		    stats(x).requests_sent != a.requests_sent)
			return 6;
		ht_event_post(idle, 1);
		if (ht_event_wait(done, 1, 60) != 0) /* idle: only the service runs */
			return 7;
		if (stats(x).requests_served != 1)
			return 8;
	} else {
		ht_event_post(published, 1);
		if (ht_event_wait(idle, 1, 60) != 0)
			return 9;
		if (hpct_xchg_fetch(x, 1, &peer, 1, got) != 0 || check(got, c->item, 0, 1, 1))
			return 10;
		ht_event_post(done, 1);
	}
	hpct_xchg_destroy(x);
	hpct_world_destroy(w);
	return 0;
}

Test(xchg, hit_here_miss_there_rootless)
{
	run(4, 2, 1, 30, 64, NULL, hit_miss);
}
Test(xchg, hit_here_miss_there_standard)
{
	run(5, 2, 0, 30, 64, NULL, hit_miss);
}

/* A publisher thread rewrites large items version after version, for as
 * long as the peers fetch: every item that comes is whole, one version's.
 * Its items are made once (version mod 8: the slot a version overwrites
 * holds version - 4, whose bytes differ), so it spends its time copying,
 * which is when a reader could see half of one. */
struct pub_arg {
	hpct_xchg *x;
	unsigned char *items[8];
	volatile int stop;
	int rc;
};

static void *publisher(void *arg)
{
	struct pub_arg *p = arg;
	for (uint64_t v = 1; !p->stop && p->rc == 0; v++)
		p->rc = hpct_xchg_publish(p->x, v, p->items[v % 8]);
	return NULL;
}

static int no_torn(int r, void *arg)
{
	struct cfg *c = arg;
	struct ht_event *ready = &c->ev[0], *done = &c->ev[1];
	enum { ITEMS = 3000 };
	hpct_world *w;
	hpct_xchg *x;
	if (hpct_world_create(&w) != 0 || hpct_xchg_create(hpct_world_group(w), "big", c->item, &x))
		return 2;
	if (r == 0) {
		struct pub_arg p = { .x = x };
		for (int k = 0; k < 8; k++) {
			p.items[k] = malloc((size_t)c->n * c->item);
			for (int j = 0; j < c->n; j++)
				fill(p.items[k] + (size_t)j * c->item, c->item, 0, j, (uint64_t)k);
		}
		pthread_t t;
		if (ht_event_wait(ready, c->n - 1, 60) != 0)
			return 3;
		pthread_create(&t, NULL, publisher, &p);
		int rc = ht_event_wait(done, c->n - 1, 100);
		p.stop = 1;
		pthread_join(t, NULL);
		if (rc != 0)
			return 4;
		if (p.rc != 0)
			return 5;
		for (int k = 0; k < 8; k++)
			free(p.items[k]);
	} else {
		unsigned char *got = malloc(c->item);
		int zero = 0, items = 0;
		ht_event_post(ready, 1);
		/* chase the publisher: after a refusal, the newest version it
		 * holds, as the refusal names it */
		for (uint64_t v = 1; items < ITEMS;) {
			int rc = hpct_xchg_fetch(x, v, &zero, 1, got);
			if (rc == 0) {
				if (check(got, c->item, 0, r, v % 8) != 0)
					return 6; /* half of one version, half of another */
				items++;
				v++;
				continue;
			}
			unsigned long long lo, hi;
			const char *m = strstr(hpct_last_error(), "it holds ");
			if (rc != HPCT_ESTATE || !m ||
			    sscanf(m, "it holds %llu..%llu", &lo, &hi) != 2 || hi <= v)
				return 7;
			v = hi;
		}
		free(got);
		ht_event_post(done, 1);
	}
	hpct_xchg_destroy(x);
	hpct_world_destroy(w);
	return 0;
}

Test(xchg, publisher_never_tears_an_item, .timeout = 200)
{
	run(6, 4, 1, 30, HPCT_XCHG_MAX_ITEM, NULL, no_torn);
}

/* A peer that never publishes: HPCT_ETIMEDOUT naming it and its address. */
static int silent(int r, void *arg)
{
	struct cfg *c = arg;
	struct ht_event *done = &c->ev[0];
	hpct_world *w;
	hpct_xchg *x;
	if (hpct_world_create(&w) != 0 || hpct_xchg_create(hpct_world_group(w), "h", 16, &x))
		return 2;
	if (r == 0) {
		unsigned char got[16];
		int one = 1;
		char addr[HPCT_ADDRSTRLEN] = "127.0.0.1:", want[128];
		if (c->rootless && hpct_world_peer_addr(w, 1, addr) != 0)
			return 3;
		double t0 = ht_now();
		int rc = hpct_xchg_fetch(x, 1, &one, 1, got);
		double took = ht_now() - t0;
		ht_event_post(done, 1);
		snprintf(want, sizeof(want), "rank 1 at %s", addr);
		if (rc != HPCT_ETIMEDOUT)
			return 4;
		if (!strstr(hpct_last_error(), want) || !strstr(hpct_last_error(), "'h'") ||
		    !strstr(hpct_last_error(), "version 1"))
			return 5;
		if (took < c->timeout * 0.9 || took > c->timeout * 10) /* a hang guard */
			return 6;
	} else if (ht_event_wait(done, 1, 60) != 0) {
		return 7;
	}
	hpct_xchg_destroy(x);
	hpct_world_destroy(w);
	return 0;
}

Test(xchg, silent_peer_times_out_rootless)
{
	run(7, 2, 1, 1.5, 16, NULL, silent);
}
Test(xchg, silent_peer_times_out_standard)
{
	run(8, 2, 0, 1.5, 16, NULL, silent);
}

/* A version older than the history: HPCT_ESTATE, never another item. */
static int history(int r, void *arg)
{
	struct cfg *c = arg;
	struct ht_event *published = &c->ev[0], *done = &c->ev[1];
	hpct_world *w;
	hpct_xchg *x;
	if (hpct_world_create(&w) != 0 || hpct_xchg_create(hpct_world_group(w), "h", 24, &x))
		return 2;
	if (r == 1) {
		for (uint64_t v = 1; v <= 6; v++)
			if (publish(x, 2, 1, 24, v) != 0)
				return 3;
		if (publish(x, 2, 1, 24, 6) != HPCT_EINVAL ||
		    !strstr(hpct_last_error(), "version 6"))
			return 4;
		ht_event_post(published, 1);
		if (ht_event_wait(done, 1, 60) != 0)
			return 5;
	} else {
		unsigned char got[24];
		int one = 1;
		if (ht_event_wait(published, 1, 60) != 0)
			return 6;
		for (uint64_t v = 1; v <= 2; v++)
			if (hpct_xchg_fetch(x, v, &one, 1, got) != HPCT_ESTATE ||
			    !strstr(hpct_last_error(), "holds 3..6"))
				return 7;
		for (uint64_t v = 3; v <= 6; v++)
			if (hpct_xchg_fetch(x, v, &one, 1, got) != 0 || check(got, 24, 1, 0, v))
				return 8;
		ht_event_post(done, 1);
	}
	hpct_xchg_destroy(x);
	hpct_world_destroy(w);
	return 0;
}

Test(xchg, older_than_history_fails)
{
	run(9, 2, 1, 30, 24, NULL, history);
}

/* Datagrams made by the test itself and sent to rank 0's service: a
 * request whose fields are all right but whose tag is not (a wrong secret),
 * or (no secret) whose epoch is not; dropped and counted, no answer.  The
 * same request made right is answered, so the drop was for that reason. */
static int forge(int r, void *arg)
{
	struct cfg *c = arg;
	struct ht_event *sent = &c->ev[0], *seen = &c->ev[1], *done = &c->ev[2], *up = &c->ev[3];
	hpct_world *w;
	hpct_xchg *x;
	if (hpct_world_create(&w) != 0 || hpct_xchg_create(hpct_world_group(w), "h", 32, &x))
		return 2;
	if (publish(x, 2, r, 32, 1) != 0)
		return 3;
	if (r == 0) {
		ht_event_post(up, 1); /* the service listens: one datagram is enough */
		if (ht_event_wait(sent, 1, 60) != 0)
			return 4;
		double deadline = ht_now() + 30;
		while (stats(x).dropped < 1)
			if (ht_now() > deadline)
				return 5;
			else
				usleep(1000);
		if (stats(x).requests_served != 0)
			return 6;
		ht_event_post(seen, 1);
		if (ht_event_wait(done, 1, 60) != 0)
			return 7;
		if (stats(x).requests_served != 1)
			return 8;
	} else {
		struct hpct_world_info info;
		char addr[HPCT_ADDRSTRLEN], host[HPCT_ADDRSTRLEN];
		int port;
		hpct_world_get_info(w, &info);
		if (hpct_world_peer_addr(w, 0, addr) != 0 ||
		    sscanf(addr, "%63[^:]:%d", host, &port) != 2)
			return 9;
		struct sockaddr_storage to;
		socklen_t tl;
		if (hpct__resolve(host, port, AF_INET, &to, &tl) != 0)
			return 10;
		int fd = socket(AF_INET, SOCK_DGRAM, 0);
		struct xw_hdr h = { .type = XW_REQ,
			            .job = info.job,
			            .epoch = info.epoch,
			            .xid = hpct__hash("h", 1, hpct_group_id(hpct_world_group(w))),
			            .version = 1,
			            .from = 1,
			            .to = 0,
			            .nonce = 42,
			            .item_size = 32 };
		const char *wrong = "not the secret";
		struct hpct_auth_key bad = { .secret = wrong, .len = strlen(wrong) };
		struct hpct_auth_key good = { .secret = c->secret,
			                      .len = c->secret ? strlen(c->secret) : 0 };
		if (!c->secret)
			h.epoch = info.epoch + 7; /* no secret: a stranger from another epoch */
		unsigned char buf[XW_MAX], in[XW_MAX];
		int n = hpct__xw_encode(&h, NULL, c->secret ? &bad : NULL, buf);
		if (n < 0 || ht_event_wait(up, 1, 60) != 0 ||
		    sendto(fd, buf, (size_t)n, 0, (struct sockaddr *)&to, tl) != n)
			return 11;
		ht_event_post(sent, 1);
		if (ht_event_wait(seen, 1, 60) != 0)
			return 12;
		if (recv(fd, in, sizeof(in), MSG_DONTWAIT) >= 0)
			return 13; /* the forgery was answered */
		h.epoch = info.epoch;
		n = hpct__xw_encode(&h, NULL, &good, buf);
		if (n < 0 || sendto(fd, buf, (size_t)n, 0, (struct sockaddr *)&to, tl) != n)
			return 14;
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		struct xw_hdr a;
		const unsigned char *item;
		ssize_t got = poll(&pf, 1, 30000) == 1 ? recv(fd, in, sizeof(in), 0) : -1;
		if (got < 0 || hpct__xw_decode(in, (size_t)got, &good, &a, &item) != 0 ||
		    a.type != XW_ITEM || a.nonce != 42 || check(item, 32, 0, 1, 1) != 0)
			return 15;
		close(fd);
		ht_event_post(done, 1);
	}
	hpct_xchg_destroy(x);
	hpct_world_destroy(w);
	return 0;
}

Test(xchg, forged_datagram_dropped)
{
	run(10, 2, 1, 30, 32, "xchg-test-secret", forge);
}
Test(xchg, foreign_epoch_dropped)
{
	run(13, 2, 1, 30, 32, NULL, forge);
}

/* Exchanges made and destroyed, worlds made and destroyed: descriptors flat. */
static int fds(int r, void *arg)
{
	(void)arg;
	int before = ht_open_fds(), inner = -1;
	for (int cycle = 0; cycle < 3; cycle++) {
		hpct_world *w;
		if (hpct_world_create(&w) != 0)
			return 2;
		for (int i = 0; i < 20; i++) {
			char name[32];
			hpct_xchg *x;
			unsigned char got[8];
			int peer = 1 - r;
			snprintf(name, sizeof(name), "c%d", i);
			if (hpct_xchg_create(hpct_world_group(w), name, 8, &x) != 0 ||
			    publish(x, 2, r, 8, 1) != 0 ||
			    hpct_xchg_fetch(x, 1, &peer, 1, got) != 0 ||
			    check(got, 8, peer, r, 1) != 0)
				return 3;
			if (hpct_barrier(hpct_world_group(w)) != 0) /* the peer fetched */
				return 4;
			hpct_xchg_destroy(x);
			/* no growth over 20 exchanges; a link the engine is still
			 * settling (two ranks that connected to each other at
			 * once keep one of the two, closed when the other side
			 * says so) may come or go by one, under load an
			 * exchange or two later */
			int now = ht_open_fds();
			if (inner < 0)
				inner = now;
			else if (now > inner + 1 || now < inner - 1)
				return 5;
		}
		hpct_world_destroy(w);
	}
	return ht_open_fds() == before ? 0 : 6;
}

Test(xchg, fds_flat)
{
	run(11, 2, 1, 30, 8, NULL, fds);
}

/* After hpct_world_recover the old epoch's exchanges fail HPCT_ESTATE and
 * new ones work, served at the new epoch's port. */
static int recover(int r, void *arg)
{
	(void)arg;
	hpct_world *w;
	hpct_xchg *x, *y;
	unsigned char got[8];
	int peer = 1 - r;
	if (hpct_world_create(&w) != 0 || hpct_xchg_create(hpct_world_group(w), "h", 8, &x) != 0 ||
	    publish(x, 2, r, 8, 1) != 0 || hpct_xchg_fetch(x, 1, &peer, 1, got) != 0 ||
	    hpct_barrier(hpct_world_group(w)) != 0)
		return 2;
	if (hpct_world_recover(w, 1, NULL, 0) != 0)
		return 3;
	if (publish(x, 2, r, 8, 2) != HPCT_ESTATE ||
	    hpct_xchg_fetch(x, 1, &peer, 1, got) != HPCT_ESTATE ||
	    !strstr(hpct_last_error(), "epoch 0"))
		return 4;
	if (hpct_xchg_create(hpct_world_group(w), "h", 8, &y) != 0 || publish(y, 2, r, 8, 1) != 0 ||
	    hpct_xchg_fetch(y, 1, &peer, 1, got) != 0 || check(got, 8, peer, r, 1) != 0)
		return 5;
	if (hpct_barrier(hpct_world_group(w)) != 0)
		return 6;
	hpct_xchg_destroy(x);
	hpct_xchg_destroy(y);
	hpct_world_destroy(w);
	return 0;
}

Test(xchg, old_epoch_fails_after_recover)
{
	run(12, 2, 1, 30, 8, NULL, recover);
}
