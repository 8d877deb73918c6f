/* libhpct_preload.so under LD_PRELOAD in a program that plays PyTorch's
 * part with NCCL and knows nothing of hpct (nccl_job), launched by hpct-run
 * on 2 loopback nodes.  Paths come from the environment: HPCT_RUN_BIN,
 * HPCT_PRELOAD, HPCT_NCCL_JOB (and HPCT_PRELOAD_FIRST, the sanitizer
 * runtime that must come before it in an instrumented build). */
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TestSuite(preload, .timeout = 60);

#define N 4

struct rank_saw {
	int getid, derived, root_thread, init;
	char host[64];
	unsigned port;
};

/* Runs the job; fills saw[] and the ranks' logs (HPCT_DEBUG=INFO, NCCL). */
static void run_job(const char *rootless, const char *dir, struct rank_saw *saw, char *log,
                    size_t loglen)
{
	const char *first = getenv("HPCT_PRELOAD_FIRST");
	char cmd[4096];
	snprintf(cmd, sizeof(cmd),
	         "env LD_PRELOAD='%s%s%s' HPCT_USE_ROOTLESS=%s HPCT_DEBUG=INFO "
	         "HPCT_DEBUG_SUBSYS=NCCL HPCT_DEBUG_FILE='%s/log.%%p' HPCT_PORT_BASE=13401 "
	         "HPCT_PORT_RANGE=8 HPCT_JOB_ID=preload-test '%s' -n %d --nodes 2 --timeout 40 "
	         "-- '%s' '%s' > '%s/run.out' 2>&1",
	         first ? first : "", first ? " " : "", getenv("HPCT_PRELOAD"), rootless, dir,
	         getenv("HPCT_RUN_BIN"), N, getenv("HPCT_NCCL_JOB"), dir, dir);
	int st = system(cmd);
	char out[4096] = "";
	snprintf(cmd, sizeof(cmd), "%s/run.out", dir);
	FILE *f = fopen(cmd, "r");
	if (f) {
		out[fread(out, 1, sizeof(out) - 1, f)] = 0;
		fclose(f);
	}
	cr_assert_eq(st, 0, "hpct-run exited %d:\n%s", st, out);
	for (int r = 0; r < N; r++) {
		snprintf(cmd, sizeof(cmd), "%s/rank.%d", dir, r);
		f = fopen(cmd, "r");
		cr_assert_not_null(f, "rank %d wrote nothing:\n%s", r, out);
		cr_assert_eq(fscanf(f,
		                    "getid=%d derived=%d host=%63s port=%u root_thread=%d init=%d",
		                    &saw[r].getid, &saw[r].derived, saw[r].host, &saw[r].port,
		                    &saw[r].root_thread, &saw[r].init),
		             6);
		fclose(f);
	}
	/* every rank's log, one after the other */
	size_t at = 0;
	log[0] = 0;
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (strncmp(e->d_name, "log.", 4) != 0)
			continue;
		snprintf(cmd, sizeof(cmd), "%s/%s", dir, e->d_name);
		f = fopen(cmd, "r");
		if (f) {
			at += fread(log + at, 1, loglen - 1 - at, f);
			log[at] = 0;
			fclose(f);
		}
	}
	if (d)
		closedir(d);
}

static char *tmpdir(char *buf, size_t len)
{
	const char *t = getenv("TMPDIR");
	snprintf(buf, len, "%s/hpct-preload.XXXXXX", t && *t ? t : "/tmp");
	cr_assert_not_null(mkdtemp(buf), "mkdtemp: %s", strerror(errno));
	return buf;
}

Test(preload, rootless_ids_are_derived_and_no_root_runs)
{
	char dir[256], log[65536];
	struct rank_saw saw[N];
	run_job("1", tmpdir(dir, sizeof(dir)), saw, log, sizeof(log));
	cr_expect_eq(saw[0].getid, 0);
	cr_expect_eq(saw[0].derived, 1, "rank 0's ncclGetUniqueId gave NCCL's own id");
	cr_expect_str_eq(saw[0].host, "127.0.0.1", "the id must hold rank 0's node");
	/* NCCL root ports follow hpct's range: 13401 + 8 .. 13401 + 15 */
	cr_expect(saw[0].port >= 13409 && saw[0].port < 13417, "port %u", saw[0].port);
	for (int r = 0; r < N; r++) {
		cr_expect_eq(saw[r].root_thread, 0, "rank %d runs a root thread of NCCL's", r);
		/* no GPU: NCCL's own 1 (unhandled cuda error), not a code of the shim's */
		cr_expect_eq(saw[r].init, 1, "rank %d: NCCL's own error must come back", r);
	}
	/* Tier 2 on every rank: the scalable call with nId = nranks, and the
	 * micro-root at the rank's own node (ranks 0,1 on .1, ranks 2,3 on .2) */
	const char *node[N] = { "127.0.0.1", "127.0.0.1", "127.0.0.2", "127.0.0.2" };
	char need[128];
	for (int r = 0; r < N; r++) {
		snprintf(need, sizeof(need),
		         "Tier 2, ncclCommInitRankScalable with nId %d, "
		         "micro-root at %s:",
		         N, node[r]);
		cr_expect(strstr(log, need), "missing '%s' in:\n%s", need, log);
	}
	cr_expect(strstr(log, "failed: NCCL error"), "NCCL's error is not named:\n%s", log);
}

Test(preload, without_hpct_use_rootless_nothing_changes)
{
	char dir[256], log[65536];
	struct rank_saw saw[N];
	run_job("0", tmpdir(dir, sizeof(dir)), saw, log, sizeof(log));
	cr_expect_eq(saw[0].getid, 0);
	cr_expect_eq(saw[0].derived, 0, "an id of hpct's without HPCT_USE_ROOTLESS=1");
	cr_expect_eq(saw[0].root_thread, 1, "NCCL's own ncclGetUniqueId starts its root");
	cr_expect_null(strstr(log, "Tier"), "the shim acted:\n%s", log);
	for (int r = 0; r < N; r++)
		cr_expect_eq(saw[r].init, 1);
}
