/* hpct-run driven as a program (its path in HPCT_RUN_BIN): the environment
 * each rank sees, stopping on failure, timeout, signals, bad arguments.
 * Ranks are small sh scripts that write into a per-test temp dir, passed to
 * them as $0 so that no path needs quoting. */
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char dir[256];

static void setup(void)
{
	const char *t = getenv("TMPDIR");
	snprintf(dir, sizeof(dir), "%s/hpct-run-test.XXXXXX", t && *t ? t : "/tmp");
	cr_assert_not_null(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
}

static void teardown(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char p[512];
	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		unlink(p);
	}
	if (d)
		closedir(d);
	rmdir(dir);
}

/* Timeouts here only catch a hang; no test asserts how long hpct-run took,
 * except that the grace before SIGKILL was not cut short. */
TestSuite(run, .init = setup, .fini = teardown, .timeout = 120);

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct result {
	int code; /* exit status, or 256 + signal */
	double secs;
	char err[8192], out[8192];
};

static void slurp(const char *name, char *buf, size_t len)
{
	char p[512];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	buf[0] = '\0';
	FILE *f = fopen(p, "r");
	if (!f)
		return;
	buf[fread(buf, 1, len - 1, f)] = '\0';
	fclose(f);
}

/* Starts hpct-run with the NULL-terminated arguments; its stdout and stderr
 * go to files in the temp dir. */
static pid_t spawn_v(const char *first, va_list ap)
{
	const char *bin = getenv("HPCT_RUN_BIN");
	cr_assert_not_null(bin, "HPCT_RUN_BIN is not set");
	const char *argv[32] = { bin };
	int n = 1;
	for (const char *a = first; a && n < 31; a = va_arg(ap, const char *))
		argv[n++] = a;
	argv[n] = NULL;

	char out[512], err[512];
	snprintf(out, sizeof(out), "%s/stdout", dir);
	snprintf(err, sizeof(err), "%s/stderr", dir);
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	pid_t pid;
	int rc = posix_spawn(&pid, bin, &fa, NULL, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	cr_assert_eq(rc, 0, "posix_spawn %s: %s", bin, strerror(rc));
	return pid;
}

static pid_t spawn(const char *first, ...)
{
	va_list ap;
	va_start(ap, first);
	pid_t pid = spawn_v(first, ap);
	va_end(ap);
	return pid;
}

static void finish(pid_t pid, double t0, struct result *res)
{
	int st;
	pid_t p;
	while ((p = waitpid(pid, &st, 0)) < 0 && errno == EINTR)
		;
	cr_assert_eq(p, pid, "waitpid: %s", strerror(errno));
	res->secs = now() - t0;
	res->code = WIFEXITED(st) ? WEXITSTATUS(st) : 256 + WTERMSIG(st);
	slurp("stderr", res->err, sizeof(res->err));
	slurp("stdout", res->out, sizeof(res->out));
}

static void run(struct result *res, const char *first, ...)
{
	va_list ap;
	va_start(ap, first);
	double t0 = now();
	pid_t pid = spawn_v(first, ap);
	va_end(ap);
	finish(pid, t0, res);
}

/* Value of `name` in the file rank r wrote with `env`, or NULL. */
static char *rank_env(int r, const char *name, char *buf, size_t len)
{
	char p[512], line[4096];
	size_t nl = strlen(name);
	snprintf(p, sizeof(p), "%s/env.%d", dir, r);
	FILE *f = fopen(p, "r");
	cr_assert_not_null(f, "rank %d wrote no %s", r, p);
	char *found = NULL;
	while (!found && fgets(line, sizeof(line), f)) {
		if (strncmp(line, name, nl) != 0 || line[nl] != '=')
			continue;
		line[strcspn(line, "\n")] = '\0';
		snprintf(buf, len, "%s", line + nl + 1);
		found = buf;
	}
	fclose(f);
	return found;
}

static void expect_env(int r, const char *name, const char *want)
{
	char buf[4096];
	const char *got = rank_env(r, name, buf, sizeof(buf));
	if (!want)
		cr_expect_null(got, "rank %d: %s should be unset, is '%s'", r, name, got);
	else
		cr_expect(got && strcmp(got, want) == 0, "rank %d: %s is '%s', want '%s'", r, name,
		          got ? got : "(unset)", want);
}

static void expect_envf(int r, const char *name, const char *fmt, ...)
{
	char want[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(want, sizeof(want), fmt, ap);
	va_end(ap);
	expect_env(r, name, want);
}

/* Pid that rank r wrote to pid.<r>, waiting for it (60 s: a hang guard). */
static pid_t rank_pid(int r)
{
	char p[512];
	snprintf(p, sizeof(p), "%s/pid.%d", dir, r);
	for (double end = now() + 60; now() < end; usleep(1000)) {
		FILE *f = fopen(p, "r");
		long v = 0;
		int ok = f && fscanf(f, "%ld", &v) == 1;
		if (f)
			fclose(f);
		if (ok && v > 0)
			return (pid_t)v;
	}
	cr_assert_fail("rank %d never wrote %s", r, p);
	return -1;
}

/* Rank r wrote term.<r>: its TERM trap ran. */
static void expect_termed(int r)
{
	char p[512];
	snprintf(p, sizeof(p), "%s/term.%d", dir, r);
	cr_expect_eq(access(p, F_OK), 0, "rank %d never got SIGTERM (no %s)", r, p);
}

/* A rank that writes its pid, and on SIGTERM writes term.<rank> and exits 0
 * (its sleep in the background, so that the trap runs at once). */
#define RANK_TERMS                                                            \
	"trap 'echo > \"$0/term.$RANK\"; kill $! 2>/dev/null; exit 0' TERM\n" \
	"echo $$ > \"$0/pid.$RANK\"; sleep 60 & wait $!\n"

static void expect_gone(int r)
{
	pid_t pid = rank_pid(r);
	cr_expect(kill(pid, 0) != 0 && errno == ESRCH, "rank %d (pid %ld) is still alive", r,
	          (long)pid);
}

Test(run, layout_5_on_2_nodes)
{
	struct result res;
	/* Stale values that would contradict hpct-run's layout. */
	setenv("HPCT_RANK", "9", 1);
	setenv("LOCAL_WORLD_SIZE", "4", 1);
	run(&res, "-n", "5", "--nodes", "2", "--job", "test-job", "--epoch", "7", "--master-port",
	    "17901", "--rootless", "--", "sh", "-c", "env > \"$0/env.$RANK\"", dir, NULL);
	cr_assert_eq(res.code, 0, "exit %d: %s", res.code, res.err);
	static const int node[] = { 0, 0, 0, 1, 1 }, local[] = { 0, 1, 2, 0, 1 };
	for (int r = 0; r < 5; r++) {
		expect_envf(r, "RANK", "%d", r);
		expect_envf(r, "ROLE_RANK", "%d", r);
		expect_env(r, "WORLD_SIZE", "5");
		expect_envf(r, "LOCAL_RANK", "%d", local[r]);
		expect_envf(r, "GROUP_RANK", "%d", node[r]);
		expect_env(r, "LOCAL_WORLD_SIZE", NULL);
		expect_env(r, "HPCT_RANK", NULL);
		expect_env(r, "HPCT_HOSTS", "127.0.0.1,127.0.0.2");
		expect_env(r, "HPCT_TASKS_PER_NODE", "3,2");
		expect_env(r, "MASTER_ADDR", "127.0.0.1");
		expect_env(r, "MASTER_PORT", "17901");
		expect_env(r, "HPCT_JOB_ID", "test-job");
		expect_env(r, "TORCHELASTIC_RUN_ID", "test-job");
		expect_env(r, "HPCT_EPOCH", "7");
		expect_env(r, "TORCHELASTIC_RESTART_COUNT", "7");
		expect_env(r, "HPCT_USE_ROOTLESS", "1");
	}
}

Test(run, layout_uniform_and_defaults)
{
	struct result res;
	unsetenv("HPCT_JOB_ID");
	unsetenv("MASTER_PORT");
	setenv("HPCT_EPOCH", "4", 1);
	setenv("HPCT_USE_ROOTLESS", "0", 1);
	double t0 = now();
	pid_t pid = spawn("-n", "8", "--nodes", "4", "--", "sh", "-c", "env > \"$0/env.$RANK\"",
	                  dir, NULL);
	finish(pid, t0, &res);
	cr_assert_eq(res.code, 0, "exit %d: %s", res.code, res.err);
	char port[64];
	cr_assert_not_null(rank_env(0, "MASTER_PORT", port, sizeof(port)));
	cr_expect(atoi(port) > 0 && atoi(port) < 65536, "MASTER_PORT '%s'", port);
	for (int r = 0; r < 8; r++) {
		expect_envf(r, "LOCAL_RANK", "%d", r % 2);
		expect_envf(r, "GROUP_RANK", "%d", r / 2);
		expect_env(r, "LOCAL_WORLD_SIZE", "2");
		expect_env(r, "HPCT_TASKS_PER_NODE", "2(x4)");
		expect_env(r, "HPCT_HOSTS", "127.0.0.1,127.0.0.2,127.0.0.3,127.0.0.4");
		expect_env(r, "MASTER_PORT", port);
		expect_envf(r, "HPCT_JOB_ID", "hpct-run-%ld", (long)pid);
		expect_env(r, "HPCT_EPOCH", "4");
		expect_env(r, "TORCHELASTIC_RESTART_COUNT", "4");
		expect_env(r, "HPCT_USE_ROOTLESS", "0");
	}
}

Test(run, layout_uneven_keeps_job_and_port)
{
	struct result res;
	setenv("HPCT_JOB_ID", "from-env", 1);
	setenv("MASTER_PORT", "17902", 1);
	unsetenv("HPCT_EPOCH");
	run(&res, "-n", "8", "--nodes", "3", "--", "sh", "-c", "env > \"$0/env.$RANK\"", dir, NULL);
	cr_assert_eq(res.code, 0, "exit %d: %s", res.code, res.err);
	static const int node[] = { 0, 0, 0, 1, 1, 1, 2, 2 }, local[] = { 0, 1, 2, 0, 1, 2, 0, 1 };
	for (int r = 0; r < 8; r++) {
		expect_envf(r, "LOCAL_RANK", "%d", local[r]);
		expect_envf(r, "GROUP_RANK", "%d", node[r]);
		expect_env(r, "HPCT_TASKS_PER_NODE", "3(x2),2");
		expect_env(r, "HPCT_JOB_ID", "from-env");
		expect_env(r, "TORCHELASTIC_RUN_ID", "from-env");
		expect_env(r, "MASTER_PORT", "17902");
		expect_env(r, "HPCT_EPOCH", "0");
	}
}

Test(run, failing_rank_is_named_and_others_stopped)
{
	struct result res;
	/* Rank 2 fails once the others are up (their pid files: a poll). */
	run(&res, "-n", "4", "--", "sh", "-c",
	    "if [ \"$RANK\" = 2 ]; then\n"
	    "  for r in 0 1 3; do while [ ! -s \"$0/pid.$r\" ]; do sleep 0.01; done; done\n"
	    "  exit 3\n"
	    "fi\n" RANK_TERMS,
	    dir, NULL);
	cr_expect_eq(res.code, 1, "exit %d: %s", res.code, res.err);
	/* SIGTERM alone stopped them: each ran its TERM trap */
	for (int r = 0; r < 4; r++)
		if (r != 2)
			expect_termed(r);
	cr_expect(strncmp(res.err, "hpct-run: rank 2 (pid ", 22) == 0, "stderr: %s", res.err);
	cr_expect(strstr(res.err, ") exited with status 3; stopping 3 other ranks\n"), "stderr: %s",
	          res.err);
	for (int r = 0; r < 4; r++)
		if (r != 2)
			expect_gone(r);
}

Test(run, killed_rank_is_named)
{
	struct result res;
	run(&res, "-n", "3", "--", "sh", "-c",
	    "if [ \"$RANK\" = 1 ]; then\n"
	    "  for r in 0 2; do while [ ! -s \"$0/pid.$r\" ]; do sleep 0.01; done; done\n"
	    "  kill -KILL $$\n"
	    "fi\n" RANK_TERMS,
	    dir, NULL);
	cr_expect_eq(res.code, 1, "exit %d: %s", res.code, res.err);
	expect_termed(0);
	expect_termed(2);
	cr_expect(strncmp(res.err, "hpct-run: rank 1 (pid ", 22) == 0, "stderr: %s", res.err);
	cr_expect(strstr(res.err, "killed by signal 9"), "stderr: %s", res.err);
	expect_gone(0);
	expect_gone(2);
}

Test(run, sigterm_ignored_gets_sigkill_after_grace)
{
	struct result res;
	run(&res, "-n", "3", "--", "sh", "-c",
	    "if [ \"$RANK\" = 0 ]; then\n"
	    "  for r in 1 2; do while [ ! -s \"$0/pid.$r\" ]; do sleep 0.01; done; done\n"
	    "  exit 1\n"
	    "fi\n"
	    "trap 'echo > \"$0/term.$RANK\"; kill $! 2>/dev/null' TERM\n"
	    "echo $$ > \"$0/pid.$RANK\"; while :; do sleep 60 & wait $!; done",
	    dir, NULL);
	cr_expect_eq(res.code, 1, "exit %d: %s", res.code, res.err);
	/* they got SIGTERM and lived on; only SIGKILL can have ended them, and
	 * not before the 3 s grace (a lower bound: a slow machine only adds) */
	expect_termed(1);
	expect_termed(2);
	cr_expect_geq(res.secs, 3.0, "SIGKILL after %.2f s, before the 3 s grace", res.secs);
	expect_gone(1);
	expect_gone(2);
}

Test(run, timeout_exits_124)
{
	struct result res;
	/* 10 s: long enough for rank 1 to have exited and the others to have
	 * written their pid, however slow the machine */
	run(&res, "-n", "3", "--timeout", "10", "--", "sh", "-c",
	    "[ \"$RANK\" = 1 ] && exit 0; echo $$ > \"$0/pid.$RANK\"; exec sleep 60", dir, NULL);
	cr_expect_eq(res.code, 124, "exit %d: %s", res.code, res.err);
	cr_expect_str_eq(res.err, "hpct-run: timeout after 10 s; ranks still running: 0 2\n");
	expect_gone(0);
	expect_gone(2);
}

Test(run, sigterm_is_forwarded)
{
	struct result res;
	double t0 = now();
	pid_t pid = spawn("-n", "3", "--", "sh", "-c", RANK_TERMS, dir, NULL);
	for (int r = 0; r < 3; r++)
		rank_pid(r);
	kill(pid, SIGTERM);
	finish(pid, t0, &res);
	cr_expect_eq(res.code, 128 + SIGTERM, "exit %d: %s", res.code, res.err);
	for (int r = 0; r < 3; r++) {
		expect_termed(r); /* forwarded: each rank got it */
		expect_gone(r);
	}
}

Test(run, all_ok_exits_0)
{
	struct result res;
	run(&res, "-n", "16", "--nodes", "4", "--", "true", NULL);
	cr_expect_eq(res.code, 0, "exit %d: %s", res.code, res.err);
	cr_expect_str_empty(res.err);
}

/* 4096 fork+execs: a minute on a slow machine under ASan; the timeout
 * only catches a hang. */
Test(run, many_ranks, .timeout = 600)
{
	struct result res;
	run(&res, "-n", "4096", "--nodes", "254", "--", "true", NULL);
	cr_expect_eq(res.code, 0, "exit %d: %s", res.code, res.err);
}

Test(run, command_not_found)
{
	struct result res;
	run(&res, "-n", "3", "--", "/nonexistent/hpct-run-test", NULL);
	cr_expect_eq(res.code, 127, "exit %d: %s", res.code, res.err);
	cr_expect_str_eq(
	        res.err,
	        "hpct-run: cannot run '/nonexistent/hpct-run-test': No such file or directory\n");
}

/* --preload: the command itself, its environment only rootless (no ranks,
 * no world variables); it becomes the process (exec: same pid) */
Test(run, preload_runs_the_command_rootless)
{
	struct result res;
	/* LD_PRELOAD as it is (a sanitizer's runtime stays first): the shim after it */
	run(&res, "--preload", "--", "/bin/sh", "-c",
	    "echo \"$HPCT_USE_ROOTLESS|${LD_PRELOAD##*:}|${RANK-none}|${HPCT_HOSTS-none}\"; exit 3",
	    NULL);
	cr_expect_eq(res.code, 3, "exit %d: %s", res.code, res.err);
	cr_expect(strncmp(res.out, "1|", 2) == 0 &&
	                  strstr(res.out, "libhpct_preload.so|none|none\n"),
	          "stdout: %s", res.out);
	char lib[4096];
	cr_assert(sscanf(res.out, "1|%4095[^|]", lib) == 1, "stdout: %s", res.out);
	cr_expect_eq(access(lib, R_OK), 0, "%s: %s", lib, strerror(errno));
	run(&res, "--preload", "--", "/nonexistent/hpct-run-test", NULL);
	cr_expect_eq(res.code, 127, "exit %d: %s", res.code, res.err);
}

Test(run, help)
{
	struct result res;
	run(&res, "--help", NULL);
	cr_expect_eq(res.code, 0);
	cr_expect(strncmp(res.out, "usage: hpct-run", 15) == 0, "stdout: %s", res.out);
}

Test(run, bad_arguments_exit_2)
{
	static const struct {
		const char *args[8];
		const char *want; /* in stderr */
	} cases[] = {
		{ { NULL }, "missing -n" },
		{ { "-n", "0", "--", "true" }, "for -n" },
		{ { "-n", "x", "--", "true" }, "'x' for -n" },
		{ { "-n", "2" }, "command" },
		{ { "-n", "2", "--nodes", "3", "--", "true" }, "--nodes 3" },
		{ { "-n", "300", "--nodes", "255", "--", "true" }, "for --nodes" },
		{ { "-n", "2", "--timeout", "-1", "--", "true" }, "for --timeout" },
		{ { "-n", "2", "--timeout", "soon", "--", "true" }, "for --timeout" },
		{ { "-n", "2", "--master-port", "70000", "--", "true" }, "for --master-port" },
		{ { "-n", "2", "--epoch", "-3", "--", "true" }, "for --epoch" },
		{ { "-n", "2", "--timeout" }, "--timeout needs a value" },
		{ { "-n", "2", "--bogus", "--", "true" }, "'--bogus'" },
		{ { "--preload", "-n", "2", "--", "true" }, "--preload runs the command as it is" },
		{ { "--preload" }, "missing the command" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct result res;
		const char *const *a = cases[i].args;
		run(&res, a[0], a[1], a[2], a[3], a[4], a[5], a[6], NULL);
		cr_expect_eq(res.code, 2, "case %zu (%s ...): exit %d", i, a[0] ? a[0] : "",
		             res.code);
		cr_expect(strstr(res.err, cases[i].want), "case %zu: stderr '%s' lacks '%s'", i,
		          res.err, cases[i].want);
	}
}
