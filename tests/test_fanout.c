/* hpct_fanout, ranks as processes over loopback, both paths.  Children
 * report through their exit code: 0 ok, otherwise the number of the check
 * that failed.  Every receiver checks every byte against the version it
 * wanted; a byte of another version, or of a chunk misplaced, shows.  A
 * source is killed from inside (the server's test hook raises SIGKILL
 * after it sent a given chunk), so "mid-wave" is an event, not a time.
 * Linked with the internal archive for that hook.
 *
 * Ports: slot k of the program's range (HPCT_TEST_PORT_BASE 10000, 100 a
 * slot), cut into worlds of 20 (MASTER_PORT, then 16 derived ports for 8
 * ranks on one node); the data listeners take the kernel's ports. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/fanout/fanout_internal.h"
#include "hpct/fanout.h"
#include "hpct/hpct.h"
#include "tests/harness.h"

#define N     8
#define CHUNK (64 * 1024)

struct cfg {
	int n, slot, rootless, worlds;
	double timeout;
	const char *budget;
	int kill_member;
	uint32_t kill_after;
	struct ht_event replanned, waited, token;
};

static int port_of(const struct cfg *c, int world)
{
	return hpct_test_ports(0) + c->slot * 100 + world * 20;
}

static void env_cb(int r, void *arg)
{
	struct cfg *c = arg;
	ht_setenv_world(r, c->n, 1, port_of(c, 0), c->rootless, c->timeout);
	if (c->budget)
		setenv("HPCT_INFLIGHT_BYTES", c->budget, 1);
}

static unsigned char byte_of(size_t i, uint64_t v)
{
	uint32_t x = (uint32_t)i * 2654435761u + (uint32_t)v * 0x9e3779b9u;
	return (unsigned char)(x >> 24 ^ x >> 11 ^ (uint32_t)v);
}

static void fill(unsigned char *p, size_t len, uint64_t v)
{
	for (size_t i = 0; i < len; i++)
		p[i] = byte_of(i, v);
}

static int exact(const unsigned char *p, size_t len, uint64_t v)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != byte_of(i, v))
			return 0;
	return 1;
}

static void run(struct cfg *c, ht_rank_fn fn, const int *expect)
{
	ht_event_init(&c->replanned);
	ht_event_init(&c->waited);
	ht_event_init(&c->token);
	ht_event_post(&c->token, 1);
	int codes[N];
	ht_spawn(c->n, env_cb, fn, c, 240, NULL, codes);
	if (!expect) {
		/* a forwarder killed: exactly one, and every other exits 0 */
		int killed = 0;
		for (int r = 0; r < c->n; r++)
			killed += codes[r] == 128 + SIGKILL;
		cr_assert_eq(killed, c->kill_member < 0 ? 1 : 0, "%s", ht_describe(codes, c->n));
	}
	for (int r = 0; r < c->n; r++)
		cr_assert(codes[r] == (expect ? expect[r] : 0) ||
		                  (!expect && c->kill_member < 0 && codes[r] == 128 + SIGKILL),
		          "%s: rank %d: %s", c->rootless ? "rootless" : "standard", r,
		          ht_describe(codes, c->n));
}

/* One fan-out: the first `sources` ranks hold v; all check all bytes. */
static int one(hpct_group *g, const char *name, size_t len, int sources, uint64_t v,
               const struct hpct_fanout_opts *o)
{
	int r = hpct_group_rank(g);
	unsigned char *buf = malloc(len ? len : 1);
	if (!buf)
		return 0;
	uint64_t held = r < sources ? v : 0;
	if (held)
		fill(buf, len, v);
	else
		memset(buf, 0x5a, len);
	struct hpct_fanout_stats st;
	int rc = hpct_fanout(g, name, v, held, buf, len, o, &st);
	/* the plan's shape: waves double the sources (ceil(log2(n / S))), pull
	 * is one wave, the tree a binomial one over the root and receivers */
	int n = hpct_group_size(g), plan = o ? (int)o->plan : HPCT_FANOUT_WAVES, waves = 0;
	for (int have = plan == HPCT_FANOUT_TREE ? 1 : sources,
	         all = plan == HPCT_FANOUT_TREE ? n - sources + 1 : n;
	     have < all; have *= 2)
		waves++;
	if (plan == HPCT_FANOUT_PULL)
		waves = 1;
	int ok = rc == 0 && exact(buf, len, v) && st.sources_first == sources &&
	         st.bytes_recv == (held ? 0 : len) && st.waves == waves &&
	         (held || len == 0 || st.peers >= 1);
	if (!ok)
		fprintf(stderr,
		        "rank %d: %s len %zu sources %d: rc %d (%s) recv %llu waves %d/%d\n", r,
		        name, len, sources, rc, hpct_last_error(),
		        (unsigned long long)st.bytes_recv, st.waves, waves);
	free(buf);
	return ok;
}

static int sizes(int r, void *arg)
{
	(void)r;
	(void)arg;
	hpct_world *w;
	if (hpct_world_create(&w) != 0)
		return 2;
	hpct_group *g = hpct_world_group(w);
	static const size_t lens[] = { 0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 5 * CHUNK + 3 };
	int k = 0, fds = -1;
	for (int plan = 0; plan < 3; plan++)
		for (int pipe = 0; pipe < 2; pipe++)
			for (int s = 1; s <= 2; s++)
				for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
					struct hpct_fanout_opts o = { CHUNK,
						                      (enum hpct_fanout_plan)plan,
						                      pipe };
					char name[32];
					snprintf(name, sizeof(name), "s%d", k++);
					if (!one(g, name, lens[i], s, (uint64_t)k, &o))
						return 3;
					if (k == 12) /* the world's links are up by now */
						fds = ht_open_fds();
				}
	/* a fan-out leaves no descriptor behind */
	if (ht_open_fds() != fds)
		return 5;
	if (hpct_barrier(g) != 0)
		return 4;
	hpct_world_destroy(w);
	return 0;
}

Test(fanout, sizes_rootless)
{
	struct cfg c = { .n = N, .slot = 0, .rootless = 1, .timeout = 60 };
	run(&c, sizes, NULL);
}
Test(fanout, sizes_standard)
{
	struct cfg c = { .n = N, .slot = 1, .rootless = 0, .timeout = 60 };
	run(&c, sizes, NULL);
}

/* 100 MB from 1 source (rootless) or 2 (standard), default chunk. */
static int big(int r, void *arg)
{
	struct cfg *c = arg;
	(void)r;
	hpct_world *w;
	if (hpct_world_create(&w) != 0)
		return 2;
	if (!one(hpct_world_group(w), "big", 100u << 20, c->rootless ? 1 : 2, 7, NULL))
		return 3;
	hpct_world_destroy(w);
	return 0;
}

Test(fanout, hundred_mb_rootless)
{
	struct cfg c = { .n = N, .slot = 2, .rootless = 1, .timeout = 120 };
	run(&c, big, NULL);
}
Test(fanout, hundred_mb_standard)
{
	struct cfg c = { .n = N, .slot = 3, .rootless = 0, .timeout = 120 };
	run(&c, big, NULL);
}

/* Rank 0 holds v3 (wanted), rank 1 the older v2, rank 2 the newer v4: both
 * are receivers like any other (only an exact version serves), so every
 * member ends with v3's bytes.  Then version 5, which nobody holds. */
static int mixed(int r, void *arg)
{
	(void)arg;
	hpct_world *w;
	if (hpct_world_create(&w) != 0)
		return 2;
	hpct_group *g = hpct_world_group(w);
	size_t len = 9 * CHUNK + 17;
	unsigned char *buf = malloc(len);
	uint64_t held = r == 0 ? 3 : r == 1 ? 2 : r == 2 ? 4 : 0;
	if (held)
		fill(buf, len, held);
	struct hpct_fanout_opts o = { CHUNK, HPCT_FANOUT_WAVES, 0 };
	struct hpct_fanout_stats st;
	if (hpct_fanout(g, "mixed", 3, held, buf, len, &o, &st) != 0 || !exact(buf, len, 3))
		return 3;
	if (st.sources_first != 1 || (r != 0 && st.bytes_recv != len))
		return 4;
	/* nobody holds 5: every member fails alike, naming group and versions */
	int rc = hpct_fanout(g, "none", 5, held, buf, len, &o, NULL);
	if (rc != HPCT_ESTATE || !strstr(hpct_last_error(), "holds version 5") ||
	    !strstr(hpct_last_error(), "rank 2: 4"))
		return 5;
	/* a member that passes another len is named by all */
	rc = hpct_fanout(g, "len", 3, 3, buf, r == 5 ? len - 1 : len, &o, NULL);
	if (rc != HPCT_EINVAL || !strstr(hpct_last_error(), "member 5 (world rank 5) passed len"))
		return 6;
	free(buf);
	if (hpct_barrier(g) != 0)
		return 7;
	hpct_world_destroy(w);
	return 0;
}

Test(fanout, mixed_versions_never_mixed)
{
	struct cfg c = { .n = N, .slot = 4, .rootless = 1, .timeout = 60 };
	run(&c, mixed, NULL);
}

/* The member c->kill_member dies after it sent chunk c->kill_after; with
 * kill_member -1, the first receiver to forward that chunk and take the
 * one token of c->token dies. */
static struct cfg *hook_cfg;
static void kill_hook(int member, uint32_t chunk)
{
	if (chunk < hook_cfg->kill_after)
		return;
	if (member == hook_cfg->kill_member ||
	    (hook_cfg->kill_member < 0 && member >= 2 && ht_event_try(&hook_cfg->token) == 1))
		raise(SIGKILL);
}

/* Ranks 0 and 1 hold the buffer (64 chunks); rank 0 dies serving its
 * seventh.  Its receivers move to rank 1; all end exact. */
static int killed(int r, void *arg)
{
	struct cfg *c = arg;
	hook_cfg = c;
	hpct__fo_served_hook = kill_hook;
	hpct_world *w;
	if (hpct_world_create(&w) != 0)
		return 2;
	size_t len = 64 * CHUNK;
	unsigned char *buf = malloc(len);
	uint64_t held = r < 2 ? 9 : 0;
	if (held)
		fill(buf, len, 9);
	struct hpct_fanout_opts o = { CHUNK, HPCT_FANOUT_WAVES, 0 };
	struct hpct_fanout_stats st;
	if (hpct_fanout(hpct_world_group(w), "killed", 9, held, buf, len, &o, &st) != 0)
		return 3;
	if (!exact(buf, len, 9))
		return 4;
	if (st.replanned > 0)
		ht_event_post(&c->replanned, 1);
	free(buf);
	hpct_world_destroy(w);
	return 0;
}

static int lost_all(int r, void *arg)
{
	struct cfg *c = arg;
	hook_cfg = c;
	hpct__fo_served_hook = kill_hook;
	hpct_world *w;
	if (hpct_world_create(&w) != 0)
		return 2;
	size_t len = 64 * CHUNK;
	unsigned char *buf = malloc(len);
	uint64_t held = r == 0 ? 9 : 0;
	if (held)
		fill(buf, len, 9);
	struct hpct_fanout_opts o = { CHUNK, HPCT_FANOUT_WAVES, 0 };
	int rc = hpct_fanout(hpct_world_group(w), "lost", 9, held, buf, len, &o, NULL);
	if (rc != HPCT_EPEERDEAD) {
		fprintf(stderr, "rank %d: %d (%s)\n", r, rc, hpct_last_error());
		return 3;
	}
	if (!strstr(hpct_last_error(), "rank 0 at 127.0.0.1:")) {
		fprintf(stderr, "rank %d: %s\n", r, hpct_last_error());
		return 4;
	}
	free(buf);
	hpct_world_destroy(w);
	return 0;
}

Test(fanout, source_killed_mid_wave)
{
	struct cfg c = {
		.n = N, .slot = 5, .rootless = 1, .timeout = 60, .kill_member = 0, .kill_after = 6
	};
	int expect[N] = { 128 + SIGKILL };
	run(&c, killed, expect);
	cr_assert_eq(ht_event_try(&c.replanned), 1, "no survivor re-planned");
}

/* A receiver that forwards dies mid-wave: its receivers move to a first
 * source, and the first sources, told by its own source that it left
 * without BYE, wait for it no longer. */
Test(fanout, forwarder_killed_mid_wave)
{
	struct cfg c = {
		.n = N, .slot = 9, .rootless = 1, .timeout = 60, .kill_member = -1, .kill_after = 6
	};
	run(&c, killed, NULL);
	cr_assert_eq(ht_event_try(&c.replanned), 1, "no survivor re-planned");
}

Test(fanout, only_source_killed_is_named)
{
	struct cfg c = {
		.n = N, .slot = 6, .rootless = 1, .timeout = 60, .kill_member = 0, .kill_after = 6
	};
	int expect[N] = { 128 + SIGKILL };
	run(&c, lost_all, expect);
}

/* Four fan-outs at once in every process, one world (and so one group)
 * each, the budget one chunk: all exact, and the process never had more
 * than one chunk in flight. */
struct one_arg {
	hpct_world *w;
	int k, ok;
};

static void *concurrent_one(void *arg)
{
	struct one_arg *a = arg;
	hpct_group *g = hpct_world_group(a->w);
	int r = hpct_group_rank(g);
	size_t len = 16 * CHUNK + 5;
	unsigned char *buf = malloc(len);
	uint64_t v = 20 + (uint64_t)a->k, held = r == a->k ? v : 0;
	if (held)
		fill(buf, len, v);
	struct hpct_fanout_opts o = { CHUNK, HPCT_FANOUT_WAVES, 0 };
	char name[16];
	snprintf(name, sizeof(name), "c%d", a->k);
	a->ok = hpct_fanout(g, name, v, held, buf, len, &o, NULL) == 0 && exact(buf, len, v) &&
	        hpct_barrier(g) == 0;
	if (!a->ok)
		fprintf(stderr, "rank %d fan-out %d: %s\n", r, a->k, hpct_last_error());
	free(buf);
	return NULL;
}

static int concurrent(int r, void *arg)
{
	struct cfg *c = arg;
	struct one_arg a[4];
	pthread_t t[4];
	for (int k = 0; k < 4; k++) {
		ht_setenv_world(r, c->n, 1, port_of(c, k), c->rootless, c->timeout);
		a[k] = (struct one_arg){ NULL, k, 0 };
		if (hpct_world_create(&a[k].w) != 0)
			return 2;
	}
	for (int k = 0; k < 4; k++)
		pthread_create(&t[k], NULL, concurrent_one, &a[k]);
	for (int k = 0; k < 4; k++)
		pthread_join(t[k], NULL);
	for (int k = 0; k < 4; k++)
		if (!a[k].ok)
			return 3 + k;
	struct hpct_inflight_stats st;
	if (hpct_inflight_get_stats(&st) != 0 || st.bytes_limit != CHUNK)
		return 8;
	if (st.bytes_peak > st.bytes_limit || st.bytes_peak == 0)
		return 9;
	if (st.waits > 0)
		ht_event_post(&c->waited, 1);
	for (int k = 0; k < 4; k++)
		hpct_world_destroy(a[k].w);
	return 0;
}

Test(fanout, four_concurrent_under_one_chunk)
{
	struct cfg c = { .n = N, .slot = 7, .rootless = 1, .timeout = 60, .budget = "65536" };
	run(&c, concurrent, NULL);
	/* the budget was shared: some process had fan-outs wait for it */
	cr_assert_eq(ht_event_try(&c.waited), 1, "no process ever waited for the budget");
}
Test(fanout, four_concurrent_under_one_chunk_standard)
{
	struct cfg c = { .n = N, .slot = 8, .rootless = 0, .timeout = 60, .budget = "65536" };
	run(&c, concurrent, NULL);
	cr_assert_eq(ht_event_try(&c.waited), 1, "no process ever waited for the budget");
}
