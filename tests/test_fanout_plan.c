/* The fan-out's planners on their own (bootstrap/fanout/plan.c): pure
 * functions, no sockets.  Every schedule is checked against the rules a
 * plan must keep: each receiver gets exactly one source, which holds the
 * exact version by then (a first source or a receiver of an earlier
 * wave), never one of another version; and the shape of each row. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/fanout/fanout_internal.h"

#define MAXN 300

struct sched {
	int src[MAXN], wave[MAXN], waves, last;
};

static int schedule(int plan, int n, const uint64_t *held, uint64_t want, uint64_t seed,
                    struct sched *s)
{
	return hpct__fo_schedule(&hpct__fo_planners[plan], n, held, want, seed, s->src, s->wave,
	                         &s->waves, &s->last);
}

/* The rules every row keeps; returns the most receivers one source took
 * in one wave. */
static int check_rules(int n, const uint64_t *held, uint64_t want, const struct sched *s)
{
	int most = 0;
	for (int j = 0; j < n; j++) {
		if (held[j] == want) {
			cr_assert_eq(s->src[j], -1, "first source %d was given a source", j);
			cr_assert_eq(s->wave[j], 0);
			continue;
		}
		int k = s->src[j];
		cr_assert(k >= 0 && k < n && k != j, "receiver %d: source %d", j, k);
		cr_assert(held[k] == want || (held[k] != want && s->wave[k] < s->wave[j]),
		          "receiver %d (wave %d) pulls from %d, which has version %llu and "
		          "finishes in wave %d",
		          j, s->wave[j], k, (unsigned long long)held[k], s->wave[k]);
		cr_assert(s->wave[j] >= 1 && s->wave[j] <= s->waves);
		int same = 0;
		for (int i = 0; i < n; i++)
			same += held[i] != want && s->src[i] == k && s->wave[i] == s->wave[j];
		if (same > most)
			most = same;
	}
	return most;
}

static int ceil_log2_ratio(int total, int sources)
{
	int w = 0;
	for (long have = sources; have < total; have *= 2)
		w++;
	return w;
}

Test(plan, waves_double_every_wave)
{
	static uint64_t held[MAXN];
	struct sched s;
	for (int n = 1; n <= 257; n += (n < 20 ? 1 : 37))
		for (int S = 1; S <= n && S <= 9; S++) {
			for (int j = 0; j < n; j++)
				held[j] = (j * 7919) % n < S
				                  ? 5
				                  : (uint64_t)(j % 3); /* spread sources */
			int count = 0;
			for (int j = 0; j < n; j++)
				count += held[j] == 5;
			cr_assert_eq(schedule(HPCT_FANOUT_WAVES, n, held, 5, 42, &s), 0);
			cr_assert_eq(check_rules(n, held, 5, &s), count == n ? 0 : 1,
			             "n %d: a source took two receivers in one wave", n);
			cr_assert_eq(s.waves, ceil_log2_ratio(n, count), "n %d S %d: %d waves", n,
			             count, s.waves);
		}
}

Test(plan, waves_spread_by_identity)
{
	/* 2 sources, 2 receivers: over many fan-outs (seeds) each receiver is
	 * served by each source sometimes, never always the same pairing */
	uint64_t held[4] = { 1, 1, 0, 0 };
	int pair[2][2] = { { 0 } };
	for (uint64_t seed = 1; seed < 200; seed++) {
		struct sched s;
		cr_assert_eq(schedule(HPCT_FANOUT_WAVES, 4, held, 1, seed, &s), 0);
		cr_assert_eq(s.waves, 1);
		cr_assert_neq(s.src[2], s.src[3], "both receivers on one source");
		pair[2 - 2][s.src[2]]++;
		pair[3 - 2][s.src[3]]++;
	}
	for (int r = 0; r < 2; r++)
		for (int k = 0; k < 2; k++)
			cr_assert_gt(pair[r][k], 40,
			             "receiver %d served by %d only %d times of 199", r + 2, k,
			             pair[r][k]);
}

Test(plan, pull_uses_first_sources_only)
{
	static uint64_t held[MAXN];
	struct sched s;
	int n = 100, per[3] = { 0 };
	for (int j = 0; j < n; j++)
		held[j] = j == 10 || j == 50 || j == 90 ? 8 : 7;
	cr_assert_eq(schedule(HPCT_FANOUT_PULL, n, held, 8, 3, &s), 0);
	check_rules(n, held, 8, &s);
	cr_assert_eq(s.waves, 1);
	for (int j = 0; j < n; j++)
		if (held[j] != 8) {
			cr_assert(held[s.src[j]] == 8, "receiver %d pulls from a receiver", j);
			per[s.src[j] == 10 ? 0 : s.src[j] == 50 ? 1 : 2]++;
		}
	for (int k = 0; k < 3; k++)
		cr_assert(per[k] == 32 || per[k] == 33, "source %d serves %d of 97", k, per[k]);
}

Test(plan, tree_is_binomial_from_lowest_source)
{
	static uint64_t held[MAXN];
	struct sched s;
	int n = 64;
	for (int j = 0; j < n; j++)
		held[j] = j == 5 || j == 9 ? 2 : 0;
	cr_assert_eq(schedule(HPCT_FANOUT_TREE, n, held, 2, 3, &s), 0);
	check_rules(n, held, 2, &s);
	/* 63 positions after the root: log2(64) = 6 waves */
	cr_assert_eq(s.waves, 6);
	for (int j = 0; j < n; j++) {
		cr_assert_neq(s.src[j], 9, "the second source serves in TREE (receiver %d)", j);
	}
	/* the root serves one receiver per wave: 6 in all */
	int root = 0;
	for (int j = 0; j < n; j++)
		root += s.src[j] == 5;
	cr_assert_eq(root, 6);
}

Test(plan, nobody_holds_is_estate)
{
	uint64_t held[5] = { 1, 2, 3, 0, 4 };
	struct sched s;
	for (int p = 0; p < 3; p++)
		cr_assert_eq(schedule(p, 5, held, 9, 1, &s), HPCT_ESTATE, "plan %d", p);
	uint64_t all[3] = { 9, 9, 9 };
	for (int p = 0; p < 3; p++) {
		cr_assert_eq(schedule(p, 3, all, 9, 1, &s), 0);
		cr_assert_eq(s.waves, 0);
	}
}

Test(plan, planner_never_gives_a_dead_or_unfinished_source)
{
	uint64_t held[6] = { 4, 4, 3, 0, 0, 5 };
	unsigned char fin[6] = { 1, 1, 0, 0, 0, 0 }, dead[6] = { 1, 0, 0, 0, 0, 0 };
	int assign[6];
	for (int p = 0; p < 3; p++) {
		struct fo_plan_in in = { 6, held, 4, 11, fin, dead, 1 };
		int took = hpct__fo_planners[p].wave(&in, assign);
		cr_assert_geq(took, 1, "plan %d took nobody", p);
		for (int j = 0; j < 6; j++)
			cr_assert(assign[j] == -1 || assign[j] == 1, "plan %d: %d -> %d", p, j,
			          assign[j]);
	}
}

Test(plan, replan_spreads_over_live_first_sources)
{
	uint64_t held[8] = { 6, 6, 6, 0, 0, 0, 0, 5 };
	unsigned char dead[8] = { 0 };
	dead[1] = 1;
	int hits[8] = { 0 };
	for (int me = 3; me < 7; me++)
		for (int a = 0; a < 4; a++) {
			int k = hpct__fo_replan(8, held, 6, 77, dead, me, a);
			cr_assert(k == 0 || k == 2, "replan gave %d", k);
			hits[k]++;
		}
	cr_assert(hits[0] > 0 && hits[2] > 0);
	dead[0] = dead[2] = 1;
	cr_assert_eq(hpct__fo_replan(8, held, 6, 77, dead, 3, 0), -1);
}
