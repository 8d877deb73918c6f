/* libhpct_preload.so under LD_PRELOAD in programs that know nothing of
 * hpct: nccl_job, which plays PyTorch's part with NCCL (one id, or several
 * as ncclCommInitRankScalable takes them), and nccl_first, whose first
 * statement is ncclGetUniqueId; launched by hpct-run on 2 loopback nodes,
 * or alone with no node list.  Against the NCCL release hpct loads here
 * (HPCT_NCCL_LIB, else NCCL_HOME): the job finds the same library first on
 * its LD_LIBRARY_PATH, and says which it ran.  No GPU and no stand-in
 * driver: NCCL's ranks stop at their first CUDA call, after everything the
 * shim does (test_nccl_ranks.c runs them to the end).  Paths come from the
 * environment: HPCT_NCCL_JOB, HPCT_NCCL_FIRST and those of nccl_run.h. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hpct/nccl.h"
#include "tests/nccl_release.h"
#include "tests/nccl_run.h"

TestSuite(preload, .timeout = 120);

#define N 4

/* Runs `what` (a command line after hpct-run's --) on N ranks over 2
 * nodes, hpct's ports from `port`, with no GPU and no stand-in driver;
 * its output in <dir>/run.out, which a failure shows. */
static void run(const char *dir, int port, const char *extra, const char *what)
{
	char out[4096], path[512];
	int rc = nr_run(dir, N, port, 40, extra, 0, "", what);
	snprintf(path, sizeof(path), "%s/run.out", dir);
	nr_slurp(path, out, sizeof(out));
	cr_assert_eq(rc, 0, "hpct-run exited %d:\n%s", rc, out);
}

/* Runs nccl_job in `mode`; fills saw[] and the ranks' logs (HPCT_DEBUG=INFO,
 * NCCL), and checks every rank ran the release hpct loads here. */
static void run_job(const char *rootless, const char *mode, int port, struct nr_saw *saw, char *log,
                    size_t loglen)
{
	char dir[256], extra[1024], what[1024], path[512], out[4096];
	nr_tmpdir(dir, sizeof(dir), "preload");
	snprintf(extra, sizeof(extra),
	         "HPCT_USE_ROOTLESS=%s HPCT_DEBUG=INFO HPCT_DEBUG_SUBSYS=NCCL "
	         "HPCT_DEBUG_FILE='%s/log.%%p'",
	         rootless, dir);
	snprintf(what, sizeof(what), "'%s' '%s' %s", getenv("HPCT_NCCL_JOB"), dir, mode);
	run(dir, port, extra, what);
	snprintf(path, sizeof(path), "%s/run.out", dir);
	nr_slurp(path, out, sizeof(out));
	int v = nr_nccl_version(path, sizeof(path));
	for (int r = 0; r < N; r++) {
		cr_assert_eq(nr_read_saw(dir, r, &saw[r]), 0, "rank %d wrote nothing:\n%s", r, out);
		cr_assert_eq(saw[r].version, v, "rank %d ran NCCL %d, not the %d hpct loads", r,
		             saw[r].version, v);
	}
	nr_logs(dir, "log.", log, loglen);
	nr_tmpdir_done(dir);
}

/* Tier 2 on every rank: the scalable call with nId = nranks, and the
 * micro-root at the rank's own node (ranks 0,1 on .1, ranks 2,3 on .2). */
static void expect_tier2(const char *log)
{
	char need[160];
	for (int k = 1; k <= 2; k++) {
		snprintf(need, sizeof(need),
		         "Tier 2, ncclCommInitRankScalable with nId %d, micro-root at 127.0.0.%d:",
		         N, k);
		cr_expect_eq(nr_count(log, need), N / 2, "want '%s' %d times in:\n%s", need, N / 2,
		             log);
	}
}

Test(preload, rootless_ids_are_derived_and_no_root_runs)
{
	char log[65536], lib[4096];
	struct nr_saw saw[N];
	int v = nr_nccl_version(lib, sizeof(lib));
	run_job("1", "one", 13401, saw, log, sizeof(log));
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
	cr_expect(strstr(log, "failed: NCCL error"), "NCCL's error is not named:\n%s", log);
	/* the shim set NCCL_ENV_PLUGIN before NCCL read its environment */
	char need[128];
	snprintf(need, sizeof(need), "consults hpct's env plugin (ncclEnvPlugin_v%d)",
	         nr_env_plugin(v));
	cr_expect_eq(nr_count(log, need), nr_env_plugin(v) ? N : 0, "'%s' on every rank:\n%s", need,
	             log);
	if (nr_tier2(v)) {
		expect_tier2(log);
		return;
	}
	/* Tier 1: NCCL's root on rank 0 at the id, NCCL_COMM_ID shown to that
	 * call (env plugin from 2.28.7, the shim's getenv before; before 2.24
	 * hpct's root instead); without a GPU NCCL fails at cudaGetDevice
	 * before it looks the value up */
	snprintf(need, sizeof(need), "rank 0: NCCL id");
	cr_expect(strstr(log, need), "missing '%s' in:\n%s", need, log);
	/* before 2.24 NCCL aborts a connect it retries: hpct's root, up before
	 * any rank calls NCCL, takes the place of NCCL's (started in its init) */
	snprintf(need, sizeof(need), "Tier 1, %sroot here at 127.0.0.1:%u",
	         v < 22400 ? "hpct's " : "", saw[0].port);
	cr_expect_eq(nr_count(log, need), 1, "want '%s' once in:\n%s", need, log);
	cr_expect_null(strstr(log, "Tier 2"), "Tier 2 on NCCL %d:\n%s", v, log);
	if (saw[0].init == 1 && v >= 22400)
		cr_expect_eq(nr_count(log, "NCCL returned without looking up NCCL_COMM_ID"), 1,
		             "NCCL failed before its root: the shim should say so:\n%s", log);
}

Test(preload, without_hpct_use_rootless_nothing_changes)
{
	char log[65536];
	struct nr_saw saw[N];
	run_job("0", "one", 13401, saw, log, sizeof(log));
	cr_expect_eq(saw[0].getid, 0);
	cr_expect_eq(saw[0].derived, 0, "an id of hpct's without HPCT_USE_ROOTLESS=1");
	cr_expect_eq(saw[0].root_thread, 1, "NCCL's own ncclGetUniqueId starts its root");
	cr_expect_null(strstr(log, "Tier"), "the shim acted:\n%s", log);
	for (int r = 0; r < N; r++)
		cr_expect_eq(saw[r].init, 1);
	cr_expect_eq(nr_count(log, "preload: HPCT_USE_ROOTLESS=0, not 1: NCCL left as it is"), N,
	             "one notice a rank:\n%s", log);
	cr_expect_null(strstr(log, "consults hpct's env plugin"), "NCCL was given hpct's:\n%s",
	               log);
}

/* nccl_first on N ranks; its lines and the job's stderr (default HPCT_DEBUG:
 * what any user sees). */
static void run_first(const char *rootless, int *derived, int *root_thread, char *out, size_t len)
{
	char dir[256], extra[256], what[1024], path[512];
	nr_tmpdir(dir, sizeof(dir), "preload");
	snprintf(extra, sizeof(extra), "HPCT_USE_ROOTLESS=%s", rootless);
	snprintf(what, sizeof(what), "'%s' '%s'", getenv("HPCT_NCCL_FIRST"), dir);
	run(dir, 31680, extra, what);
	snprintf(path, sizeof(path), "%s/run.out", dir);
	nr_slurp(path, out, len);
	for (int r = 0; r < N; r++) {
		snprintf(path, sizeof(path), "%s/first.%d", dir, r);
		FILE *f = fopen(path, "r");
		cr_assert_not_null(f, "rank %d wrote nothing:\n%s", r, out);
		int rc = -1;
		cr_assert_eq(fscanf(f, "rc=%d derived=%d root_thread=%d", &rc, &derived[r],
		                    &root_thread[r]),
		             3);
		fclose(f);
		cr_expect_eq(rc, 0, "rank %d: ncclGetUniqueId gave %d", r, rc);
	}
	nr_tmpdir_done(dir);
}

Test(preload, a_first_call_to_ncclGetUniqueId_is_taken_over)
{
	int derived[N], roots[N];
	char out[8192];
	run_first("1", derived, roots, out, sizeof(out));
	for (int r = 0; r < N; r++) {
		cr_expect_eq(derived[r], 1, "rank %d: NCCL's own id, first call not taken", r);
		cr_expect_eq(roots[r], 0, "rank %d runs a root thread of NCCL's", r);
	}
	cr_expect_null(strstr(out, "NCCL left as it is"), "%s", out);
}

Test(preload, a_first_call_left_alone_says_so_once)
{
	int derived[N], roots[N];
	char out[8192];
	run_first("0", derived, roots, out, sizeof(out));
	for (int r = 0; r < N; r++) {
		cr_expect_eq(derived[r], 0, "rank %d: an id of hpct's", r);
		cr_expect_eq(roots[r], 1, "rank %d: NCCL's own ncclGetUniqueId starts its root", r);
	}
	/* one line per process, on stderr */
	cr_expect_eq(nr_count(out, "NCCL left as it is"), N, "%s", out);
	cr_expect_eq(nr_count(out, "preload: HPCT_USE_ROOTLESS=0, not 1: NCCL left as it is"), N,
	             "%s", out);
}

/* torchrun across nodes with no node list: RANK, WORLD_SIZE, LOCAL_RANK,
 * MASTER_ADDR and MASTER_PORT only, PyTorch's TCPStore on MASTER_PORT
 * (here a listener that accepts and never answers).  No hpct world: the
 * store hears nothing, and no rank waits for it. */
Test(preload, without_a_node_list_nccl_is_left_at_once)
{
	const int master = 31700;
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(master) };
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0, "bind %d: %s", master,
	             strerror(errno));
	cr_assert_eq(listen(lfd, 16), 0);
	char dir[256], env[8192], cmd[16384], out[8192], path[512];
	nr_tmpdir(dir, sizeof(dir), "preload");
	for (int r = 0; r < 2; r++) {
		char extra[1024];
		snprintf(extra, sizeof(extra),
		         "-u HPCT_HOSTS -u HPCT_HOSTFILE -u SLURM_JOB_NODELIST -u SLURM_NODELIST "
		         "-u SLURM_STEP_NODELIST -u HPCT_RANK -u HPCT_WORLD_SIZE "
		         "HPCT_USE_ROOTLESS=1 RANK=%d WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 "
		         "MASTER_ADDR=127.0.0.1 MASTER_PORT=%d HPCT_TIMEOUT=300 "
		         "NCCL_SET_THREAD_NAME=1 HPCT_DEBUG=INFO HPCT_DEBUG_SUBSYS=NCCL",
		         r, master);
		nr_job_env(env, sizeof(env), extra, 0);
		/* a hang guard only: a rank that waited would wait HPCT_TIMEOUT */
		snprintf(cmd, sizeof(cmd), "timeout 60 %s '%s' '%s' 2> '%s/err.%d'", env,
		         getenv("HPCT_NCCL_FIRST"), dir, dir, r);
		int st = system(cmd);
		snprintf(path, sizeof(path), "%s/err.%d", dir, r);
		nr_slurp(path, out, sizeof(out));
		cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		          "rank %d: nccl_first exited %d (124: it hung):\n%s", r,
		          WIFEXITED(st) ? WEXITSTATUS(st) : -1, out);
		cr_expect_eq(nr_count(out, "NCCL left as it is"), 1, "rank %d: one line:\n%s", r,
		             out);
		cr_expect(strstr(out, "preload: no node list"), "rank %d: why:\n%s", r, out);
		cr_expect_null(strstr(out, "consults hpct's env plugin"),
		               "rank %d: NCCL was given hpct's env plugin:\n%s", r, out);
		snprintf(path, sizeof(path), "%s/first.%d", dir, r);
		FILE *f = fopen(path, "r");
		cr_assert_not_null(f, "rank %d wrote nothing:\n%s", r, out);
		int rc = -1, derived = -1, roots = -1;
		cr_assert_eq(fscanf(f, "rc=%d derived=%d root_thread=%d", &rc, &derived, &roots),
		             3);
		fclose(f);
		cr_expect_eq(rc, 0);
		cr_expect_eq(derived, 0, "rank %d: an id of hpct's without a node list", r);
		cr_expect_eq(roots, 1, "rank %d: NCCL's own ncclGetUniqueId starts its root", r);
	}
	nr_tmpdir_done(dir);
	int fd = accept(lfd, NULL, NULL);
	cr_expect_eq(fd, -1, "the store on MASTER_PORT was reached");
	if (fd >= 0) {
		char b[64];
		ssize_t k = recv(fd, b, sizeof(b), MSG_DONTWAIT);
		cr_expect(k <= 0, "the store on MASTER_PORT got %zd bytes", k);
		close(fd);
	}
	close(lfd);
}

/* PyTorch above 128 ranks: root ranks 0 and 2 each get an id, every rank
 * passes both to ncclCommInitRankScalable.  The comm is the world: Tier 2
 * over it, nId = 4, on every rank. */
Test(preload, several_ids_over_the_world_are_tier2)
{
	char log[65536], lib[4096];
	struct nr_saw saw[N];
	int v = nr_nccl_version(lib, sizeof(lib));
	if (!nr_scalable(v))
		cr_skip_test("NCCL %d has no ncclCommInitRankScalable", v);
	run_job("1", "world2", 31720, saw, log, sizeof(log));
	for (int r = 0; r < N; r++) {
		cr_expect_eq(saw[r].derived, 1, "rank %d: not every id is hpct's", r);
		cr_expect_eq(saw[r].root_thread, 0, "rank %d runs a root thread of NCCL's", r);
	}
	cr_expect_eq(saw[0].getid, 0);
	cr_expect_eq(saw[2].getid, 0);
	if (nr_tier2(v)) {
		expect_tier2(log);
		cr_expect_eq(nr_count(log,
		                      "every id derived and the comm is the world: Tier 2 over "
		                      "it, in place of the 2 roots"),
		             N, "%s", log);
		for (int r = 0; r < N; r++)
			cr_expect_eq(saw[r].init, 1, "rank %d: NCCL's own error must come back", r);
		return;
	}
	/* no Tier 2 for this release: NCCL's scalable init and hpct's roots
	 * where the ids were made, or, where hpct cannot speak its wire, a
	 * refusal naming the release on the ranks that hold a root */
	for (int r = 0; r < N; r += 2) {
		if (nr_roots_speak(v)) {
			cr_expect_eq(saw[r].init, 1, "rank %d", r);
			cr_expect(strstr(log, "hpct's roots for 1 of 2 ids"), "%s", log);
		} else {
			cr_expect_eq(saw[r].init, 3, "rank %d", r);
			cr_expect(strstr(log, "hpct's roots do not speak the root wire of NCCL"),
			          "%s", log);
		}
	}
	cr_expect_eq(saw[1].init, 1);
	cr_expect_eq(saw[3].init, 1);
}

/* Two of the four ranks make a comm with two ids, both from rank 0: rank
 * 0 hosts both roots for NCCL's scalable init, and when NCCL fails (no
 * GPU) they are stopped and their ports free before the call returns. */
Test(preload, several_ids_of_a_subgroup_have_their_roots_hosted)
{
	char log[65536], lib[4096];
	struct nr_saw saw[N];
	int v = nr_nccl_version(lib, sizeof(lib));
	if (!nr_scalable(v))
		cr_skip_test("NCCL %d has no ncclCommInitRankScalable", v);
	run_job("1", "sub2", 31740, saw, log, sizeof(log));
	cr_expect_eq(saw[0].getid, 0);
	for (int r = 0; r < 2; r++) {
		cr_expect_eq(saw[r].derived, 1, "rank %d: not every id is hpct's", r);
		cr_expect_eq(saw[r].root_thread, 0, "rank %d runs a root thread of NCCL's", r);
	}
	cr_expect_eq(saw[1].init, 1, "rank 1: NCCL's own error must come back");
	cr_expect_eq(saw[2].init, -1);
	cr_expect_eq(saw[3].init, -1);
	cr_expect_null(strstr(log, "Tier 2"), "%s", log);
	if (!nr_roots_speak(v)) {
		cr_expect_eq(saw[0].init, 3);
		cr_expect(strstr(log, "hpct's roots do not speak the root wire of NCCL"), "%s",
		          log);
		return;
	}
	cr_expect_eq(saw[0].init, 1, "rank 0: NCCL's own error must come back");
	cr_expect_eq(saw[0].ports_free, 1, "rank 0's root ports are still held after NCCL failed");
	cr_expect(strstr(log, "rank 0: hpct's roots for 2 of 2 ids (id 0 at 127.0.0.1:"), "%s",
	          log);
	cr_expect(strstr(log, "ncclCommInitRankScalable with nId 2, rank 0, 2 of the roots "
	                      "hosted here"),
	          "%s", log);
	cr_expect(strstr(log, "ncclCommInitRankScalable with nId 2, rank 1, 0 of the roots "
	                      "hosted here"),
	          "%s", log);
	cr_expect(strstr(log, "the 2 roots hosted here are stopped and their ports free"), "%s",
	          log);
	cr_expect(strstr(log, "ncclCommInitRankScalable (hpct's roots) for NCCL ids"), "%s", log);
}
