/* Persistent Gloo contexts (domains): reused over 100 create/destroy
 * cycles with no new pair after the first, results checked each time; a
 * member set that differs in one rank rebuilds on every member; misuse
 * refused by name; after a recovery only the replacement's pairs are new;
 * releasing frees the pairs (descriptors and memory flat). */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/gloo_common.h"

TestSuite(gloo_domain, .timeout = 240);

static int stats_are(hpct_gloo_context *c, int base, int pairs_new, int pairs_kept,
                     int exchanged)
{
	struct hpct_gloo_context_stats s;
	if (hpct_gloo_context_get_stats(c, &s) != 0)
		return gt_why(base, "stats: %s", hpct_last_error());
	if (s.pairs_new != pairs_new || s.pairs_kept != pairs_kept || !s.persistent ||
	    (exchanged >= 0 && (s.bytes_exchanged != 0) != (exchanged != 0)))
		return gt_why(base + 1,
		              "rank %d: %d pairs new, %d kept, persistent %d, %llu bytes "
		              "exchanged; want %d new, %d kept%s",
		              hpct_gloo_context_rank(c), s.pairs_new, s.pairs_kept, s.persistent,
		              (unsigned long long)s.bytes_exchanged, pairs_new, pairs_kept,
		              exchanged == 0 ? ", nothing exchanged" : "");
	return 0;
}

/* --- 100 cycles -------------------------------------------------------- */

static int hundred_main(int r, void *arg)
{
	(void)r;
	struct cfg *c = arg;
	struct proc p = { 0 };
	int rc = gt_open(c, &p);
	if (rc)
		return rc;
	hpct_group *g = hpct_world_group(p.w);
	int fds = -1;
	for (int k = 0; k < 100; k++) {
		hpct_gloo_context *ctx;
		if ((rc = hpct_gloo_context_create_persistent(p.dev, g, 7, &ctx)) != 0)
			return gt_why(10, "rank %d: cycle %d: %s", p.rank, k, hpct_last_error());
		if ((rc = stats_are(ctx, 11, k ? 0 : c->n - 1, k ? c->n - 1 : 0, k ? 0 : 1)) ||
		    (rc = gt_quick_sum(ctx, 13, k)))
			return rc;
		if (k == 0 && (rc = gt_exercise(ctx, 20, 5)))
			return rc;
		/* while it is held, neither another nor a release */
		hpct_gloo_context *again = NULL;
		if (k == 1 && (hpct_gloo_context_create_persistent(p.dev, g, 7, &again) !=
		                       HPCT_ESTATE ||
		               !strstr(hpct_last_error(), "live context") ||
		               hpct_gloo_domain_release(p.dev, g, 7) != HPCT_ESTATE))
			return gt_why(15, "rank %d: a held domain was lent again or released: %s",
			              p.rank, hpct_last_error());
		hpct_gloo_context_destroy(ctx);
		if (k == 1)
			fds = ht_open_fds(); /* every pair is up by now */
	}
	if (ht_open_fds() != fds)
		return gt_why(16, "rank %d: %d descriptors after 100 cycles, %d after 2", p.rank,
		              ht_open_fds(), fds);
	/* another generation is another domain: all pairs new */
	hpct_gloo_context *ctx;
	if ((rc = hpct_gloo_context_create_persistent(p.dev, g, 8, &ctx)) != 0)
		return gt_why(17, "rank %d: generation 8: %s", p.rank, hpct_last_error());
	if ((rc = stats_are(ctx, 18, c->n - 1, 0, 1)) || (rc = gt_quick_sum(ctx, 30, 1)))
		return rc;
	hpct_gloo_context_destroy(ctx);
	hpct_gloo_device_destroy(p.dev); /* releases both domains */
	hpct_world_destroy(p.w);
	return 0;
}

Test(gloo_domain, reused_over_100_cycles_rootless)
{
	struct cfg c = { .n = 6, .nodes = 2, .rootless = 1, .fn = hundred_main };
	gt_spawn_cfg(&c, 0, 200);
}

Test(gloo_domain, reused_over_100_cycles_standard)
{
	struct cfg c = { .n = 4, .nodes = 1, .rootless = 0, .connect = "pool",
		         .fn = hundred_main };
	gt_spawn_cfg(&c, 1, 200);
}

/* --- a member set that differs in one rank ----------------------------- */

/* A persistent context over g (NULL: not a member) in round 0 (all pairs
 * new) or 1 (all kept), checked; codes base .. base+4. */
static int one_round(struct proc *p, hpct_group *g, const char *name, int round, int base)
{
	hpct_gloo_context *ctx;
	int rc;
	if (!g)
		return 0;
	if (hpct_gloo_context_create_persistent(p->dev, g, 0, &ctx) != 0)
		return gt_why(base, "rank %d: %s: %s", p->rank, name, hpct_last_error());
	if ((rc = stats_are(ctx, base + 1, round ? 0 : 3, round ? 3 : 0, -1)) ||
	    (rc = gt_quick_sum(ctx, base + 3, round)))
		return rc;
	hpct_gloo_context_destroy(ctx);
	return 0;
}

static int differ_main(int r, void *arg)
{
	(void)r;
	struct cfg *c = arg;
	struct proc p = { 0 };
	int rc = gt_open(c, &p);
	if (rc)
		return rc;
	static const int a[] = { 0, 1, 2, 3 }, b[] = { 0, 1, 2, 4 };
	hpct_group *ga, *gb;
	if (hpct_group_create(hpct_world_group(p.w), a, 4, &ga) != 0 ||
	    hpct_group_create(hpct_world_group(p.w), b, 4, &gb) != 0)
		return gt_why(10, "rank %d: groups: %s", p.rank, hpct_last_error());
	hpct_gloo_context *ctx;
	for (int round = 0; round < 2; round++) {
		/* the second round reuses A's domain and B's; ranks 0-2 held
		 * pairs with each other in A: none is reused in B */
		if ((rc = one_round(&p, ga, "A", round, 11)) || (rc = one_round(&p, gb, "B", round, 16)))
			return rc;
	}
	/* released everywhere, A is built anew everywhere */
	if (ga && ((rc = hpct_gloo_domain_release(p.dev, ga, 0)) != 0 ||
	           (rc = hpct_gloo_context_create_persistent(p.dev, ga, 0, &ctx)) != 0 ||
	           (rc = stats_are(ctx, 21, 3, 0, 1)) || (rc = gt_quick_sum(ctx, 23, 9))))
		return rc > 0 && rc < 100 ? rc : gt_why(20, "rank %d: A again: %s", p.rank,
		                                        hpct_last_error());
	if (ga)
		hpct_gloo_context_destroy(ctx);
	hpct_group_destroy(ga);
	hpct_group_destroy(gb);
	gt_stop(&p);
	return 0;
}

Test(gloo_domain, a_member_set_differing_in_one_rank_rebuilds_on_all)
{
	struct cfg c = { .n = 5, .nodes = 1, .rootless = 1, .fn = differ_main };
	gt_spawn_cfg(&c, 2, 120);
}

/* --- release frees everything ------------------------------------------ */

static int release_main(int r, void *arg)
{
	(void)r;
	struct cfg *c = arg;
	struct proc p = { 0 };
	int rc = gt_open(c, &p);
	if (rc)
		return rc;
	hpct_group *g = hpct_world_group(p.w);
	int fds = 0;
	long rss = 0;
	for (int k = 0; k < 30; k++) {
		hpct_gloo_context *ctx;
		if ((rc = hpct_gloo_context_create_persistent(p.dev, g, 1, &ctx)) != 0)
			return gt_why(10, "rank %d: cycle %d: %s", p.rank, k, hpct_last_error());
		if ((rc = stats_are(ctx, 11, c->n - 1, 0, 1)) || (rc = gt_quick_sum(ctx, 13, k)))
			return rc;
		hpct_gloo_context_destroy(ctx);
		if ((rc = hpct_gloo_domain_release(p.dev, g, 1)) != 0)
			return gt_why(15, "rank %d: release: %s", p.rank, hpct_last_error());
		/* a barrier of the world: no peer still closing its side counts */
		if (hpct_barrier(g) != 0)
			return gt_why(16, "rank %d: barrier: %s", p.rank, hpct_last_error());
		if (k == 5) {
			fds = ht_open_fds();
			rss = ht_rss_kb();
		}
	}
	if (ht_open_fds() != fds)
		return gt_why(17, "rank %d: %d descriptors after 30 releases, %d after 6", p.rank,
		              ht_open_fds(), fds);
	/* a sanitizer's allocator keeps a quarantine of what was freed: its
	 * memory grows by design (tests/test_soak.sh says the same) */
	const char *san = getenv("HPCT_SANITIZED");
	if (!(san && strcmp(san, "1") == 0) && ht_rss_kb() > rss + 2048)
		return gt_why(18, "rank %d: resident memory grew from %ld to %ld kB over 24 "
		              "releases", p.rank, rss, ht_rss_kb());
	gt_stop(&p);
	return 0;
}

Test(gloo_domain, release_frees_the_pairs)
{
	struct cfg c = { .n = 4, .nodes = 1, .rootless = 1, .fn = release_main };
	gt_spawn_cfg(&c, 3, 200);
}

/* --- recovery: only the replacement's pairs are new -------------------- */

#define RN     5
#define VICTIM 3

struct rshared {
	int mid;     /* the victim dies while the survivors are in an allreduce */
	int entered; /* survivors about to enter that allreduce */
	int left;    /* survivors out of it (failed) */
	int ready;   /* ranks through epoch 0's work */
	int epoch;   /* 1 once the agent (the test) announced it */
	int done;    /* ranks through epoch 1's work */
	int kept;    /* pairs the survivors kept, summed */
	char why[RN][400];
};

static struct rshared *rs;
static int rport;

static int rwhy(int r, int code, const char *what)
{
	snprintf(rs->why[r], sizeof(rs->why[r]), "%s: %s", what, hpct_last_error());
	return code;
}

static int is_set(void *arg)
{
	return __atomic_load_n((int *)arg, __ATOMIC_SEQ_CST) != 0;
}

static int recover_rank(int r, int epoch)
{
	/* mid: the survivors time out of their broken allreduce in 3 s */
	ht_setenv_world(r, RN, 2, rport, 1, rs->mid ? 3 : 20); /* 2 loopback nodes */
	setenv("HPCT_EPOCH", epoch ? "1" : "0", 1);
	struct proc p = { 0 };
	struct cfg c = { .n = RN, .rootless = 1 };
	int rc = gt_open(&c, &p);
	if (rc)
		return rwhy(r, rc, "start");
	hpct_gloo_context *ctx;
	if (epoch == 0) {
		if (hpct_gloo_context_create_persistent(p.dev, hpct_world_group(p.w), 0, &ctx) ||
		    gt_quick_sum(ctx, 10, 1))
			return rwhy(r, 10, "epoch 0");
		__atomic_add_fetch(&rs->ready, 1, __ATOMIC_SEQ_CST);
		if (r == VICTIM) {
			for (;;)
				pause(); /* the agent kills it */
		}
		/* the survivors keep the context open through the fault */
		if (rs->mid) {
			__atomic_add_fetch(&rs->entered, 1, __ATOMIC_SEQ_CST);
			int32_t v = 1;
			if (hpct_gloo_allreduce(ctx, &v, 1, HPCT_GLOO_I32, HPCT_GLOO_SUM) == 0)
				return rwhy(r, 16, "the allreduce without rank 3 succeeded");
			__atomic_add_fetch(&rs->left, 1, __ATOMIC_SEQ_CST);
		}
		if (ht_wait_for(is_set, &rs->epoch, 60) != 0)
			return rwhy(r, 11, "no epoch 1");
		int gone[1] = { VICTIM };
		if (hpct_world_recover(p.w, 1, gone, 1) != 0)
			return rwhy(r, 12, "recover");
		hpct_gloo_context *next;
		if (hpct_gloo_context_create_persistent(p.dev, hpct_world_group(p.w), 0, &next))
			return rwhy(r, 13, "epoch 1");
		/* the old handle shares the pairs no more */
			if (hpct_gloo_barrier(ctx) != HPCT_ESTATE)
			return rwhy(r, 14, "the old handle still works");
		hpct_gloo_context_destroy(ctx);
		ctx = next;
		struct hpct_gloo_context_stats st;
		hpct_gloo_context_get_stats(ctx, &st);
		snprintf(rs->why[r], sizeof(rs->why[r]), "%d pairs new, %d kept", st.pairs_new,
		         st.pairs_kept);
		/* mid: the pairs the fault closed (Gloo closes a pair whose
		 * receive timed out) are remade with the replacement's */
		if (rs->mid ? st.pairs_new < 1 || st.pairs_new + st.pairs_kept != RN - 1
		            : (rc = stats_are(ctx, 15, 1, RN - 2, 1)) != 0)
			return rwhy(r, 15, "survivor's pairs");
		__atomic_add_fetch(&rs->kept, st.pairs_kept, __ATOMIC_SEQ_CST);
	} else {
		if (hpct_gloo_context_create_persistent(p.dev, hpct_world_group(p.w), 0, &ctx))
			return rwhy(r, 20, "replacement");
		if ((rc = stats_are(ctx, 21, RN - 1, 0, 1)))
			return rwhy(r, rc, "replacement's pairs");
	}
	if ((rc = gt_quick_sum(ctx, 30, 2)) || (rc = gt_exercise(ctx, 40, 3)))
		return rwhy(r, rc, "epoch 1's collectives");
	__atomic_add_fetch(&rs->done, 1, __ATOMIC_SEQ_CST);
	hpct_gloo_context_destroy(ctx);
	gt_stop(&p);
	return 0;
}

static pid_t start_rank(int r, int epoch)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0)
		_exit(recover_rank(r, epoch));
	return pid;
}

static int all_ready(void *arg)
{
	(void)arg;
	return __atomic_load_n(&rs->ready, __ATOMIC_SEQ_CST) == RN;
}

static int survivors_entered(void *arg)
{
	(void)arg;
	return __atomic_load_n(&rs->entered, __ATOMIC_SEQ_CST) == RN - 1;
}

static int survivors_left(void *arg)
{
	(void)arg;
	return __atomic_load_n(&rs->left, __ATOMIC_SEQ_CST) == RN - 1;
}

static void recovery(int mid, int slot)
{
	rs = mmap(NULL, sizeof(*rs), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(rs, MAP_FAILED);
	memset(rs, 0, sizeof(*rs));
	rs->mid = mid;
	rport = hpct_test_ports(slot);
	pid_t pids[RN];
	for (int r = 0; r < RN; r++)
		pids[r] = start_rank(r, 0);
	int ok = ht_wait_for(all_ready, NULL, 60) == 0;
	if (ok && mid)
		ok = ht_wait_for(survivors_entered, NULL, 60) == 0;
	kill(pids[VICTIM], SIGKILL);
	int st;
	waitpid(pids[VICTIM], &st, 0);
	/* the agent starts over once every survivor is out of what broke */
	if (ok && mid)
		ok = ht_wait_for(survivors_left, NULL, 60) == 0;
	if (ok) {
		pids[VICTIM] = start_rank(VICTIM, 1);
		__atomic_store_n(&rs->epoch, 1, __ATOMIC_SEQ_CST);
	}
	for (int r = 0; r < RN; r++) {
		if (!ok && r == VICTIM)
			continue;
		if (!ok)
			kill(pids[r], SIGKILL);
		waitpid(pids[r], &st, 0);
		cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d ended with %d: %s", r,
		          WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), rs->why[r]);
	}
	cr_expect(ok, "epoch 0 never finished: %d ranks ready", rs->ready);
	cr_expect_eq(rs->done, RN, "%d of %d ranks through epoch 1", rs->done, RN);
	cr_log_info("the survivors kept %d pair ends", rs->kept);
	if (!mid)
		cr_expect_eq(rs->kept, (RN - 1) * (RN - 2), "the survivors kept %d pair ends",
		             rs->kept);
	munmap(rs, sizeof(*rs));
}

Test(gloo_domain, after_a_recovery_only_the_replacements_pairs_are_new)
{
	recovery(0, 4);
}

/* The survivors' allreduce fails when rank 3 dies under it (one names the
 * dead rank, the others time out): a rank whose collective failed remakes
 * its pairs (Gloo left that collective's receives posted in them), and the
 * new epoch's collectives are right. */
Test(gloo_domain, a_collective_broken_by_the_fault_remakes_its_ranks_pairs)
{
	recovery(1, 5);
}
