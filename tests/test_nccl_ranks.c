/* Real NCCL ranks to the end of communicator creation ("Init COMPLETE"),
 * with no GPU: the release under test (HPCT_NCCL_LIB, else NCCL_HOME) runs
 * its ranks through the test-only stand-in driver (tests/standin: device
 * memory is host memory and no kernel runs, so what is checked is NCCL's
 * bootstrap and setup, not a collective's result).  8 ranks on 2 loopback
 * nodes, launched by hpct-run:
 *   - the shim under PyTorch's pattern (nccl_job: rank 0 makes the id, the
 *     others receive it): Tier 2 from 2.23, Tier 1 before; stock for
 *     comparison; several ids (ncclCommInitRankScalable);
 *   - hpct's API (nccl_api): communicators over the world, persistent
 *     domains, a subgroup; ncclCommGrow with no store; ncclCommShrink
 *     after a rank's loss;
 *   - a rank SIGKILLed as the others enter NCCL's bootstrap;
 *   - HPCT_SECRET on every rank, and one rank of another job.
 * Paths: HPCT_NCCL_JOB, HPCT_NCCL_API and those of nccl_run.h. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpct/nccl.h"
#include "tests/nccl_release.h"
#include "tests/nccl_run.h"

TestSuite(ranks, .timeout = 240);

#define N 8

struct job {
	char dir[256];
	char out[16384];   /* hpct-run's output */
	char log[131072];  /* hpct's (HPCT_DEBUG=INFO for NCCL) */
	char nccl[262144]; /* NCCL's (NCCL_DEBUG=INFO for INIT) */
	int rc;            /* hpct-run's exit status */
	int version;
	struct nr_saw saw[N];
	int wrote[N]; /* rank r wrote its line */
};

/* Runs `cmd` (a shell command line; "{dir}" in it becomes the run's
 * folder) on N ranks through the stand-in, with `extra` in the
 * environment and hpct-run's `opts`; fills j.  The folder is kept (j->dir)
 * until job_done. */
static void run_cmd(struct job *j, const char *cmd, int port, int timeout, const char *extra,
                    const char *opts)
{
	char full[2048], what[4096], path[512];
	nr_tmpdir(j->dir, sizeof(j->dir), "ranks");
	size_t at = 0;
	for (const char *p = cmd; *p && at + sizeof(j->dir) < sizeof(what); p++) {
		if (strncmp(p, "{dir}", 5) == 0) {
			at += (size_t)snprintf(what + at, sizeof(what) - at, "%s", j->dir);
			p += 4;
		} else {
			what[at++] = *p;
		}
	}
	what[at] = 0;
	snprintf(full, sizeof(full),
	         "HPCT_DEBUG=INFO HPCT_DEBUG_SUBSYS=NCCL HPCT_DEBUG_FILE='%s/log.%%p' "
	         "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT NCCL_DEBUG_FILE='%s/nccl.%%p' %s",
	         j->dir, j->dir, extra);
	j->rc = nr_run(j->dir, N, port, timeout, full, 1, opts, what);
	snprintf(path, sizeof(path), "%s/run.out", j->dir);
	nr_slurp(path, j->out, sizeof(j->out));
	nr_logs(j->dir, "log.", j->log, sizeof(j->log));
	nr_logs(j->dir, "nccl.", j->nccl, sizeof(j->nccl));
	j->version = nr_nccl_version(path, sizeof(path));
	for (int r = 0; r < N; r++)
		j->wrote[r] = nr_read_saw(j->dir, r, &j->saw[r]) == 0;
}

/* Runs nccl_job or nccl_api (prog_env names it) with `args` after the
 * run's folder. */
static void run_job(struct job *j, const char *prog_env, const char *args, int port, int timeout,
                    const char *extra)
{
	char cmd[4096];
	snprintf(cmd, sizeof(cmd), "'%s' '{dir}' %s", getenv(prog_env), args);
	run_cmd(j, cmd, port, timeout, extra, "");
}

/* The same with rank `lost` SIGKILLed along the way (by `extra`): under
 * hpct-run --keep-going, which names it and lets the others go on. */
static void run_losing(struct job *j, const char *prog_env, const char *args, int port, int timeout,
                       const char *extra, int lost)
{
	char cmd[4096], named[32];
	snprintf(cmd, sizeof(cmd), "'%s' '{dir}' %s", getenv(prog_env), args);
	run_cmd(j, cmd, port, timeout, extra, "--keep-going");
	snprintf(named, sizeof(named), "rank %d (pid", lost);
	cr_expect_eq(j->rc, 1, "%s", j->out);
	cr_expect(strstr(j->out, named), "the lost rank is not named:\n%s", j->out);
}

/* Skips the test where the release under test lacks `call` (NCCL `since`). */
static void need_release(int min, const char *call, const char *since)
{
	char lib[4096];
	int v = nr_nccl_version(lib, sizeof(lib));
	if (v < min)
		cr_skip_test("NCCL %d has no %s (%s and later)", v, call, since);
}

static void job_done(const struct job *j)
{
	nr_tmpdir_done(j->dir);
}

/* Every rank ran this release and got ncclSuccess: NCCL's "Init COMPLETE"
 * once a rank. */
static void expect_complete(const struct job *j)
{
	cr_assert_eq(j->rc, 0, "hpct-run exited %d:\n%s\n%s", j->rc, j->out, j->log);
	for (int r = 0; r < N; r++) {
		cr_assert(j->wrote[r], "rank %d wrote nothing:\n%s", r, j->out);
		cr_expect_eq(j->saw[r].version, j->version, "rank %d ran NCCL %d, not %d", r,
		             j->saw[r].version, j->version);
		cr_expect_eq(j->saw[r].init, 0, "rank %d: ncclCommInitRank* gave %d:\n%s", r,
		             j->saw[r].init, j->out);
	}
	cr_expect_eq(nr_count(j->nccl, "Init COMPLETE"), N,
	             "NCCL's Init COMPLETE on every rank:\n%s", j->nccl);
}

/* Tier 2 on every rank: the scalable call with nId = N, a micro-root at
 * the rank's own node (ranks 0-3 on .1, 4-7 on .2), and no root thread of
 * NCCL's in any process, before or after init. */
static void expect_tier2(const struct job *j)
{
	char need[160];
	for (int k = 1; k <= 2; k++) {
		snprintf(need, sizeof(need),
		         "Tier 2, ncclCommInitRankScalable with nId %d, micro-root at 127.0.0.%d:",
		         N, k);
		cr_expect_eq(nr_count(j->log, need), N / 2, "want '%s' %d times in:\n%s", need,
		             N / 2, j->log);
	}
	for (int r = 0; r < N; r++)
		cr_expect(j->saw[r].root_thread == 0 && j->saw[r].root_after == 0,
		          "rank %d: a root thread of NCCL's ran (before init %d, after %d)", r,
		          j->saw[r].root_thread, j->saw[r].root_after);
}

Test(ranks, the_shim_takes_pytorchs_pattern_to_init_complete)
{
	static struct job j;
	run_job(&j, "HPCT_NCCL_JOB", "one", 11000, 60, "HPCT_USE_ROOTLESS=1");
	expect_complete(&j);
	for (int r = 0; r < N; r++)
		cr_expect_eq(j.saw[r].derived, 1, "rank %d: the id is not hpct's", r);
	if (nr_tier2(j.version)) {
		expect_tier2(&j);
	} else {
		/* Tier 1 (2.19-2.22): hpct's root on rank 0 at the derived id, up
		 * before any rank calls NCCL (they abort a retried connect) */
		char need[128];
		snprintf(need, sizeof(need), "Tier 1, hpct's root here at 127.0.0.1:%u",
		         j.saw[0].port);
		cr_expect_eq(nr_count(j.log, need), 1, "want '%s' once in:\n%s", need, j.log);
		for (int r = 0; r < N; r++)
			cr_expect_eq(j.saw[r].root_thread, 0, "rank %d: a root before init", r);
	}
	job_done(&j);
}

Test(ranks, stock_nccl_reaches_init_complete_with_its_root_on_rank_0)
{
	static struct job j;
	run_job(&j, "HPCT_NCCL_JOB", "one", 11040, 60, "HPCT_USE_ROOTLESS=0");
	expect_complete(&j);
	cr_expect_eq(j.saw[0].derived, 0, "an id of hpct's without HPCT_USE_ROOTLESS=1");
	cr_expect_eq(j.saw[0].root_thread, 1, "NCCL's ncclGetUniqueId starts its root on rank 0");
	for (int r = 1; r < N; r++)
		cr_expect_eq(j.saw[r].root_thread, 0, "rank %d runs a root", r);
	cr_expect_null(strstr(j.log, "Tier"), "the shim acted:\n%s", j.log);
	job_done(&j);
}

/* PyTorch above TORCH_NCCL_RANKS_PER_ROOT: root ranks 0 and 2 each make an
 * id, every rank passes both to ncclCommInitRankScalable. */
Test(ranks, several_ids_reach_init_complete)
{
	need_release(22300, "ncclCommInitRankScalable", "2.23");
	static struct job j;
	run_job(&j, "HPCT_NCCL_JOB", "world2", 11080, 60, "HPCT_USE_ROOTLESS=1");
	expect_complete(&j);
	if (nr_tier2(j.version))
		expect_tier2(&j);
	job_done(&j);
}

/* nccl_api's line of rank r in <dir>/<what>.<r>, into buf; 0 if there. */
static int api_line(const struct job *j, const char *what, int r, char *buf, size_t len)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s.%d", j->dir, what, r);
	nr_slurp(path, buf, len);
	return buf[0] ? 0 : -1;
}

/* Rank r's line of nccl_api is `want`. */
static void expect_api_line(const struct job *j, const char *what, int r, const char *want)
{
	char line[512];
	cr_assert_eq(api_line(j, what, r, line, sizeof(line)), 0, "rank %d wrote no %s line:\n%s",
	             r, what, j->out);
	cr_expect_str_eq(line, want, "rank %d", r);
}

Test(ranks, hpcts_api_makes_communicators_with_no_store)
{
	static struct job j;
	run_job(&j, "HPCT_NCCL_API", "api", 11120, 60, "HPCT_USE_ROOTLESS=1");
	cr_assert_eq(j.rc, 0, "hpct-run exited %d:\n%s\n%s", j.rc, j.out, j.log);
	int tier2 = nr_tier2(j.version);
	for (int r = 0; r < N; r++) {
		char want[512];
		/* world, persistent twice (the second on kept ids and listener),
		 * the even ranks' subgroup (-1: not a member) */
		snprintf(want, sizeof(want),
		         "tier=%d init=0 persistent=0,0 derived=1 binds=%d reuses=1 sub=%d "
		         "root_thread=0\n",
		         tier2 ? 2 : 1, tier2 || r == 0 ? 1 : 0, r % 2 ? -1 : 0);
		/* Tier 1 (2.19-2.22 here): hpct's root in rank 0, up before any
		 * rank calls NCCL (those releases abort a retried connect) */
		expect_api_line(&j, "api", r, want);
	}
	/* 3 communicators over the world and 1 over the 4 even ranks */
	cr_expect_eq(nr_count(j.nccl, "Init COMPLETE"), 3 * N + N / 2, "%s", j.nccl);
	job_done(&j);
}

/* ncclCommGrow (2.29+): ranks 0-3 have a communicator; ranks 4-7 join it.
 * The id reaches them from rank 1 over hpct's broadcast: no store, no
 * MASTER_PORT, no rank 0. */
Test(ranks, grow_reaches_the_new_ranks_with_no_store)
{
	need_release(22900, "ncclCommGrow", "2.29");
	static struct job j;
	run_job(&j, "HPCT_NCCL_API", "grow", 11160, 60, "HPCT_USE_ROOTLESS=1");
	cr_assert_eq(j.rc, 0, "hpct-run exited %d:\n%s\n%s", j.rc, j.out, j.log);
	for (int r = 0; r < N; r++) {
		char want[256];
		snprintf(want, sizeof(want), "first=%d grow=0 count=%d rank=%d of=%d\n",
		         r < 4 ? 0 : -1, N, r, N);
		expect_api_line(&j, "grow", r, want);
	}
	cr_expect_eq(nr_count(j.log, "ncclCommGrow to 8 ranks"), N, "%s", j.log);
	job_done(&j);
}

/* ncclCommShrink (2.27+) after a rank is lost: the last rank is SIGKILLed
 * once it has its communicator; the others shrink without it. */
Test(ranks, shrink_after_a_rank_is_killed)
{
	need_release(22700, "ncclCommShrink", "2.27");
	static struct job j;
	run_losing(&j, "HPCT_NCCL_API", "shrink", 11200, 60, "HPCT_USE_ROOTLESS=1", 7);
	for (int r = 0; r < N - 1; r++) {
		char want[256];
		snprintf(want, sizeof(want), "first=0 shrink=0 count=%d rank=%d\n", N - 1, r);
		expect_api_line(&j, "shrink", r, want);
	}
	job_done(&j);
}

/* Every rank but `lost` said its init failed, well within HPCT_TIMEOUT
 * (10 s) plus the launch: none hung. */
static void expect_failed_in_time(const struct job *j, int lost)
{
	for (int r = 0; r < N; r++) {
		if (r == lost)
			continue;
		cr_assert(j->wrote[r], "rank %d wrote nothing (it hung?):\n%s\n%s", r, j->out,
		          j->log);
		cr_expect_neq(j->saw[r].init, 0, "rank %d: init succeeded without rank %d", r,
		              lost);
		cr_expect_lt(j->saw[r].init_ms, 25000, "rank %d failed only after %.0f ms", r,
		             j->saw[r].init_ms);
	}
}

/* A rank SIGKILLed as the others enter NCCL's bootstrap (it held the id):
 * no rank waits past the deadline, and what they say names it. */
Test(ranks, a_rank_killed_in_the_bootstrap_fails_the_others_in_time)
{
	static struct job j;
	run_losing(&j, "HPCT_NCCL_JOB", "one", 11240, 10, "HPCT_USE_ROOTLESS=1 NCCL_JOB_KILL=5", 5);
	expect_failed_in_time(&j, 5);
	cr_expect(strstr(j.log, "rank 5"), "no rank names rank 5:\n%s", j.log);
	job_done(&j);
}

/* The same with the ranks' meeting skipped (HPCT_NCCL_MEET=0): the rank
 * is lost as the others are inside NCCL's bootstrap, where NCCL waits with
 * no deadline of its own; hpct's watch makes each fail within
 * HPCT_TIMEOUT once its sockets move nothing, and the micro-root of the
 * rank before it names it. */
Test(ranks, a_rank_killed_in_nccls_own_bootstrap_fails_the_others_in_time)
{
	char lib[4096];
	int v = nr_nccl_version(lib, sizeof(lib));
	if (v < 22400) /* without the meeting, they fail at once (ECONNABORTED) */
		cr_skip_test("NCCL %d aborts a retried connect: the meeting cannot be skipped", v);
	static struct job j;
	run_losing(&j, "HPCT_NCCL_JOB", "one", 11360, 10,
	           "HPCT_USE_ROOTLESS=1 HPCT_NCCL_MEET=0 NCCL_JOB_KILL=5", 5);
	expect_failed_in_time(&j, 5);
	if (nr_tier2(j.version))
		cr_expect(strstr(j.log, "not heard from rank 5"), "rank 5 is not named:\n%s",
		          j.log);
	cr_expect(strstr(j.log, "have moved nothing for HPCT_TIMEOUT=10 s"),
	          "the watch did not say so:\n%s", j.log);
	job_done(&j);
}

/* HPCT_SECRET on every rank, PyTorch's pattern: the magics are keyed by it. */
Test(ranks, with_a_secret_every_rank_reaches_init_complete)
{
	static struct job j;
	run_job(&j, "HPCT_NCCL_JOB", "one", 11280, 60,
	        "HPCT_USE_ROOTLESS=1 HPCT_SECRET=s3cr3t-ranks");
	expect_complete(&j);
	if (nr_tier2(j.version))
		expect_tier2(&j);
	job_done(&j);
}

/* hpct's API, where every rank derives the ids alone: rank 7 holds another
 * job's secret.  The ranks meet (their roots up) before any calls NCCL,
 * over links that check the secret: rank 7 is refused there, by name, and
 * no rank waits past the deadline (HPCT_TIMEOUT 10 s).  (Its magic, another
 * job's, is refused by hpct's micro-roots too where it reaches them:
 * test_nccl_roots.c plays such a peer.) */
Test(ranks, a_rank_of_another_job_is_refused)
{
	char lib[4096];
	if (!nr_tier2(nr_nccl_version(lib, sizeof(lib))))
		cr_skip_test("Tier 1 here: NCCL's own root, which drops a stranger silently");
	static struct job j;
	char cmd[1024];
	snprintf(cmd, sizeof(cmd),
	         "sh -c '[ \"$RANK\" = 7 ] && export HPCT_SECRET=another-job; exec \"$0\" \"$@\"' "
	         "'%s' '{dir}' world",
	         getenv("HPCT_NCCL_API"));
	run_cmd(&j, cmd, 11320, 10, "HPCT_USE_ROOTLESS=1 HPCT_SECRET=s3cr3t-ranks", "--keep-going");
	cr_expect_eq(j.rc, 0, "hpct-run exited %d (124: a rank hung):\n%s", j.rc, j.out);
	for (int r = 0; r < N; r++) {
		char line[256];
		double ms = 0;
		int init = 0;
		cr_assert_eq(api_line(&j, "world", r, line, sizeof(line)), 0,
		             "rank %d wrote nothing (it hung?):\n%s\n%s", r, j.out, j.log);
		cr_assert_eq(sscanf(line, "init=%d ms=%lf", &init, &ms), 2, "rank %d: %s", r, line);
		cr_expect_neq(init, 0, "rank %d: init succeeded with a stranger", r);
		cr_expect_lt(ms, 25000, "rank %d returned only after %.0f ms", r, ms);
	}
	cr_expect(strstr(j.log, "wrong proof of the shared secret") ||
	                  strstr(j.log, "keyed by HPCT_SECRET: no secret there, or another one"),
	          "no refusal said:\n%s", j.log);
	cr_expect(strstr(j.log, "not heard from rank 7"), "rank 7 is not named:\n%s", j.log);
	job_done(&j);
}
