/* Persistent NCCL domains (hpct_nccl_comm_init_persistent), against the
 * real libnccl.so.2 hpct loads (its version picks the tier and the root
 * wire) and hpct's real roots, with the rank-side player in NCCL's ranks'
 * place (no GPU here: NCCL's own init stops at cudaGetDevice).  The
 * members are worlds of one process, one per world rank, each with its
 * own domains, as separate processes would hold them. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/nccl/domain.h"
#include "bootstrap/nccl/player.h"
#include "bootstrap/nccl/root_wire.h"
#include "hpct/hpct.h"
#include "hpct/nccl.h"
#include "tests/harness.h"

TestSuite(nccl_domain, .timeout = 240);

/* Only catches hangs. */
#define HANG_GUARD_S 60.0
#define MAXN         5

/* Ports 32700-32767 (tests/meson.build): hpct's from 32701 (16), NCCL's
 * roots 32720-32767. */
static hpct_world *member(int rank, int n, const char *job)
{
	ht_setenv_world(rank, n, 1, hpct_test_ports(0), 1, 30);
	setenv("HPCT_JOB_ID", job, 1);
	setenv("HPCT_NCCL_PORT_BASE", "32720", 1);
	setenv("HPCT_NCCL_PORT_RANGE", "48", 1);
	hpct_world *w = NULL;
	cr_assert_eq(hpct_world_create(&w), 0, "rank %d: %s", rank, hpct_last_error());
	return w;
}

static const struct hpct_nccl_lib *nccl(void)
{
	const struct hpct_nccl_lib *l = hpct__nccl_lib();
	cr_assert_not_null(l, "%s", hpct_last_error());
	if (!hpct__nccl_wire_for_version(l->version))
		cr_skip_test("hpct's roots do not speak NCCL %d's root wire", l->version);
	return l;
}

/* Every rank was sent its ring neighbour's info. */
static void check_ring(const unsigned char *replies, int n, int version)
{
	unsigned char want[HPCT_NCCL_RING_LEN];
	for (int r = 0; r < n; r++) {
		cr_assert_eq(hpct__nccl_test_answer((r + 1) % n, version, want), 0);
		cr_assert_eq(memcmp(replies + (size_t)r * HPCT_NCCL_RING_LEN, want, sizeof(want)),
		             0, "rank %d of %d was not sent rank %d's ring info", r, n,
		             (r + 1) % n);
	}
}

struct idle {
	hpct_group **g;
	int n;
	uint64_t gen;
};

static int all_idle(void *arg)
{
	struct idle *x = arg;
	for (int r = 0; r < x->n; r++) {
		struct hpct_nccl_domain_stats st;
		if (hpct_nccl_domain_get_stats(x->g[r], x->gen, &st) != 0 || st.busy)
			return 0;
	}
	return 1;
}

/* One communicator over the domain (g[0..n-1], gen) at `tier`: every member
 * leases its key, all see the same ids, the player plays NCCL's ranks
 * against them, every member settles; returns once every member's roots
 * are done.  ids_out (n entries) gets the ids. */
static void one_comm(const struct hpct_nccl_lib *l, hpct_group **g, int n, uint64_t key,
                     uint64_t gen, enum hpct_nccl_tier tier, hpct_nccl_id *ids_out)
{
	struct hpct_nccl_lease ls[MAXN];
	for (int r = 0; r < n; r++)
		cr_assert_eq(hpct__nccl_domain_lease(l, g[r], key, gen, tier, &ls[r]), 0,
		             "member %d: %s", r, hpct_last_error());
	int nids = ls[0].nids;
	cr_assert_eq(nids, tier == HPCT_NCCL_TIER_ROOTLESS ? n : 1);
	for (int r = 1; r < n; r++)
		cr_assert_eq(memcmp(ls[r].ids, ls[0].ids, (size_t)nids * sizeof(hpct_nccl_id)), 0,
		             "members 0 and %d derived different ids", r);
	unsigned char replies[MAXN * HPCT_NCCL_RING_LEN];
	cr_assert_eq(
	        hpct__nccl_play_ranks(ls[0].ids, nids, n, NULL, 30, 0, l->version, replies, NULL),
	        0, "%s", hpct_last_error());
	check_ring(replies, n, l->version);
	memcpy(ids_out, ls[0].ids, (size_t)nids * sizeof(hpct_nccl_id));
	for (int r = 0; r < n; r++)
		hpct__nccl_domain_settle(&ls[r], 1);
	struct idle x = { g, n, gen };
	cr_assert_eq(ht_wait_for(all_idle, &x, HANG_GUARD_S), 0, "a root never finished");
}

static void stats(hpct_group *g, uint64_t gen, struct hpct_nccl_domain_stats *st)
{
	cr_assert_eq(hpct_nccl_domain_get_stats(g, gen, st), 0, "no domain of generation %llu",
	             (unsigned long long)gen);
}

/* Tier 2 (every member hosts a micro-root): 20 communicators over one
 * domain derive and bind once; a group created apart over the same
 * members takes the same domain; fds flat; release while held refused,
 * then frees every listener. */
Test(nccl_domain, kept_over_cycles_and_released)
{
	const struct hpct_nccl_lib *l = nccl();
	enum { N = 4 };
	hpct_world *w[N];
	hpct_group *g[N], *g2[N];
	for (int r = 0; r < N; r++)
		w[r] = member(r, N, "nccl-domain-kept");
	enum hpct_nccl_tier tier = hpct__nccl_tier_for(l, w[0]);
	if (tier != HPCT_NCCL_TIER_ROOTLESS)
		cr_skip_test("NCCL %d: not Tier 2 here", l->version);
	for (int r = 0; r < N; r++)
		g[r] = hpct_world_group(w[r]);
	int fds0 = ht_open_fds();
	hpct_nccl_id first[N], ids[N];
	one_comm(l, g, N, 0, 7, tier, first);
	int fds1 = ht_open_fds();
	cr_expect_eq(fds1, fds0 + N, "one listener per member: %d fds, then %d", fds0, fds1);
	for (int i = 0; i < 20; i++) {
		one_comm(l, g, N, 0, 7, tier, ids);
		cr_assert_eq(memcmp(ids, first, sizeof(ids)), 0, "cycle %d: the ids changed", i);
		cr_assert_eq(ht_open_fds(), fds1, "cycle %d: fds %d, were %d", i, ht_open_fds(),
		             fds1);
	}
	/* the same members, another group: the same domain */
	int all[N] = { 0, 1, 2, 3 };
	for (int r = 0; r < N; r++)
		cr_assert_eq(hpct_group_create(g[r], all, N, &g2[r]), 0, "%s", hpct_last_error());
	cr_assert_neq(hpct_group_id(g2[0]), hpct_group_id(g[0]));
	one_comm(l, g2, N, 0, 7, tier, ids);
	cr_expect_eq(memcmp(ids, first, sizeof(ids)), 0, "another group, other ids");
	for (int r = 0; r < N; r++) {
		struct hpct_nccl_domain_stats st;
		stats(g[r], 7, &st);
		cr_expect_eq(st.derived, 1, "member %d derived %llu times", r,
		             (unsigned long long)st.derived);
		cr_expect_eq(st.binds, 1, "member %d bound %llu times", r,
		             (unsigned long long)st.binds);
		cr_expect_eq(st.reuses, 21);
		cr_expect_eq(st.keys, 1);
		cr_expect_eq(st.listeners, 1);
	}
	/* held: a second lease of the key and a release are refused, by name */
	struct hpct_nccl_lease ls[N], again;
	for (int r = 0; r < N; r++)
		cr_assert_eq(hpct__nccl_domain_lease(l, g[r], 0, 7, tier, &ls[r]), 0, "%s",
		             hpct_last_error());
	cr_expect_eq(hpct__nccl_domain_lease(l, g[1], 0, 7, tier, &again), HPCT_ESTATE);
	cr_expect(strstr(hpct_last_error(), "key 0") != NULL, "%s", hpct_last_error());
	cr_expect_eq(hpct_nccl_domain_release(g[1], 7), HPCT_ESTATE);
	cr_expect(strstr(hpct_last_error(), "is held") != NULL, "%s", hpct_last_error());
	unsigned char replies[N * HPCT_NCCL_RING_LEN];
	cr_assert_eq(hpct__nccl_play_ranks(ls[0].ids, N, N, NULL, 30, 0, l->version, replies, NULL),
	             0, "%s", hpct_last_error());
	check_ring(replies, N, l->version);
	for (int r = 0; r < N; r++)
		hpct__nccl_domain_settle(&ls[r], 1);
	struct idle x = { g, N, 7 };
	cr_assert_eq(ht_wait_for(all_idle, &x, HANG_GUARD_S), 0, "a root never finished");
	for (int r = 0; r < N; r++) {
		cr_expect_eq(hpct_nccl_domain_release(g2[r], 7), 0, "%s", hpct_last_error());
		struct hpct_nccl_domain_stats st;
		cr_expect_eq(hpct_nccl_domain_get_stats(g[r], 7, &st), 1, "released, still there");
		cr_expect_eq(hpct_nccl_domain_release(g[r], 7), 0, "none left: 0");
	}
	cr_expect_eq(ht_open_fds(), fds0, "released: %d fds, %d before", ht_open_fds(), fds0);
	for (int r = 0; r < N; r++)
		hpct_world_destroy(w[r]);
}

/* Two domains whose member sets differ in one rank ({0,1,2,3} and
 * {0,1,2,4}), and another generation over the first set: nothing of one
 * is used by another on any member, each serves its own exchange. */
Test(nccl_domain, a_member_set_differing_in_one_rank_reuses_nothing)
{
	const struct hpct_nccl_lib *l = nccl();
	enum { N = 5 };
	hpct_world *w[N];
	hpct_group *a[N] = { 0 }, *b[N] = { 0 };
	for (int r = 0; r < N; r++)
		w[r] = member(r, N, "nccl-domain-differ");
	enum hpct_nccl_tier tier = hpct__nccl_tier_for(l, w[0]);
	cr_assert_neq(tier, HPCT_NCCL_TIER_NONE);
	const int ma[4] = { 0, 1, 2, 3 }, mb[4] = { 0, 1, 2, 4 };
	for (int r = 0; r < N; r++) {
		hpct_group *world = hpct_world_group(w[r]);
		cr_assert_eq(hpct_group_create(world, ma, 4, &a[r]), 0, "%s", hpct_last_error());
		cr_assert_eq(hpct_group_create(world, mb, 4, &b[r]), 0, "%s", hpct_last_error());
	}
	hpct_group *ga[4] = { a[0], a[1], a[2], a[3] }, *gb[4] = { b[0], b[1], b[2], b[4] };
	hpct_nccl_id ida[4], ida2[4], idb[4], idc[4];
	one_comm(l, ga, 4, 0, 1, tier, ida);
	one_comm(l, gb, 4, 0, 1, tier, idb);
	one_comm(l, ga, 4, 0, 1, tier, ida2);
	one_comm(l, ga, 4, 0, 2, tier, idc); /* another generation */
	int nids = tier == HPCT_NCCL_TIER_ROOTLESS ? 4 : 1;
	cr_expect_eq(memcmp(ida, ida2, (size_t)nids * sizeof(hpct_nccl_id)), 0);
	for (int i = 0; i < nids; i++) {
		struct hpct_nccl_id_info x, y, z;
		hpct_nccl_id_decode(&ida[i], 0, &x);
		hpct_nccl_id_decode(&idb[i], 0, &y);
		hpct_nccl_id_decode(&idc[i], 0, &z);
		cr_expect_neq(x.magic, y.magic, "id %d: one magic for two member sets", i);
		cr_expect_neq(x.magic, z.magic, "id %d: one magic for two generations", i);
	}
	for (int r = 0; r < 4; r++) {
		struct hpct_nccl_domain_stats sa, sb, sc;
		stats(ga[r], 1, &sa);
		stats(gb[r], 1, &sb);
		stats(ga[r], 2, &sc);
		cr_expect_eq(sa.reuses, 1, "member %d", r);
		cr_expect_eq(sb.reuses, 0, "member %d reused for {0,1,2,4}", r);
		cr_expect_eq(sb.derived, 1);
		cr_expect_eq(sc.reuses, 0, "member %d reused for generation 2", r);
		cr_expect_eq(sc.derived, 1);
		int hosts = tier == HPCT_NCCL_TIER_ROOTLESS || r == 0;
		cr_expect_eq(sb.binds, (uint64_t)hosts);
		cr_expect_eq(sb.listeners, hosts);
	}
	cr_expect_null(a[4]);
	cr_expect_null(b[3]);
	for (int r = 0; r < N; r++)
		hpct_world_destroy(w[r]); /* releases every domain */
}

/* Tier 1 (HPCT_NCCL_ROOTLESS=0): only the comm's rank 0 keeps a listener,
 * hpct's root in NCCL's place; 50 cycles of create, use and release leave
 * the fds where they were. */
Test(nccl_domain, release_frees_over_many_cycles_tier1)
{
	const struct hpct_nccl_lib *l = nccl();
	setenv("HPCT_NCCL_ROOTLESS", "0", 1);
	enum { N = 3 };
	hpct_world *w[N];
	hpct_group *g[N];
	for (int r = 0; r < N; r++) {
		w[r] = member(r, N, "nccl-domain-tier1");
		g[r] = hpct_world_group(w[r]);
	}
	enum hpct_nccl_tier tier = hpct__nccl_tier_for(l, w[0]);
	cr_assert_eq(tier, HPCT_NCCL_TIER_ROOT);
	int fds0 = ht_open_fds();
	hpct_nccl_id id[1];
	for (int i = 0; i < 50; i++) {
		one_comm(l, g, N, 3, 9, tier, id);
		one_comm(l, g, N, 3, 9, tier, id);
		struct hpct_nccl_domain_stats st;
		stats(g[0], 9, &st);
		cr_assert_eq(st.binds, 1);
		cr_assert_eq(st.reuses, 1);
		stats(g[1], 9, &st);
		cr_assert_eq(st.binds, 0, "rank 1 of a Tier 1 comm hosts no root");
		cr_assert_eq(ht_open_fds(), fds0 + 1, "cycle %d", i);
		for (int r = 0; r < N; r++)
			cr_assert_eq(hpct_nccl_domain_release(g[r], 9), 0, "%s", hpct_last_error());
		cr_assert_eq(ht_open_fds(), fds0, "cycle %d: %d fds after release, %d before", i,
		             ht_open_fds(), fds0);
	}
	for (int r = 0; r < N; r++)
		hpct_world_destroy(w[r]);
	unsetenv("HPCT_NCCL_ROOTLESS");
}

/* hpct_world_recover drops the earlier epoch's domains; the same members
 * then derive anew (other magic, the listener bound again). */
Test(nccl_domain, a_recovery_derives_anew)
{
	const struct hpct_nccl_lib *l = nccl();
	hpct_world *w = member(0, 1, "nccl-domain-recover");
	hpct_group *g = hpct_world_group(w);
	enum hpct_nccl_tier tier = hpct__nccl_tier_for(l, w);
	int fds0 = ht_open_fds();
	hpct_nccl_id before[1], after[1];
	one_comm(l, &g, 1, 0, 0, tier, before);
	cr_expect_eq(ht_open_fds(), fds0 + 1);
	cr_assert_eq(hpct_world_recover(w, 2, NULL, 0), 0, "%s", hpct_last_error());
	cr_expect_eq(ht_open_fds(), fds0, "the old epoch's listener is closed");
	g = hpct_world_group(w);
	one_comm(l, &g, 1, 0, 0, tier, after);
	cr_expect_neq(memcmp(before, after, sizeof(before)), 0, "the same id after a recovery");
	struct hpct_nccl_domain_stats st;
	stats(g, 0, &st);
	cr_expect_eq(st.epoch, 2);
	cr_expect_eq(st.derived, 1);
	cr_expect_eq(st.reuses, 0);
	hpct_world_destroy(w);
}

/* The public call with the real NCCL: no GPU, so NCCL fails at its own
 * init (HPCT_ENCCL with NCCL's words); the key's listener goes with it,
 * the domain stays; bad arguments are refused. */
Test(nccl_domain, a_failed_init_keeps_nothing_bound)
{
	nccl();
	hpct_world *w = member(0, 1, "nccl-domain-public");
	hpct_group *g = hpct_world_group(w);
	void *comm = (void *)1;
	cr_expect_eq(hpct_nccl_comm_init_persistent(NULL, 0, 0, NULL, &comm), HPCT_EINVAL);
	cr_expect_eq(hpct_nccl_domain_release(NULL, 0), HPCT_EINVAL);
	int fds0 = ht_open_fds();
	for (int i = 0; i < 3; i++) {
		int rc = hpct_nccl_comm_init_persistent(g, 5, 1, NULL, &comm);
		if (rc == 0)
			cr_skip_test("NCCL made a communicator: a GPU is here");
		cr_expect_eq(rc, HPCT_ENCCL, "%s", hpct_last_error());
		cr_expect_null(comm);
		struct hpct_nccl_domain_stats st;
		stats(g, 1, &st);
		cr_expect_eq(st.keys, 0);
		cr_expect_eq(st.listeners, 0);
		cr_expect_eq(st.binds, (uint64_t)i + 1, "a failure's listener is bound anew");
		cr_expect_eq(ht_open_fds(), fds0, "try %d", i);
	}
	cr_expect_eq(hpct_nccl_domain_release(g, 1), 0);
	hpct_world_destroy(w);
}
