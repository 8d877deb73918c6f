/* Logging in the manner of NCCL's (bootstrap/log.h).  log.c reads HPCT_DEBUG*
 * once per process, so every case runs in a forked child with its own
 * environment; the child reports through its exit code (never cr_assert in
 * a child) and the parent checks what it wrote to stderr through a pipe. */
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bootstrap/base/log.h"
#include "hpct/hpct.h"

TestSuite(log, .timeout = 30);

struct child {
	pid_t pid;
	int code; /* exit status, or 256 + signal */
	char err[16384];
};

/* Forks; the child clears HPCT_DEBUG*, sets the NULL-terminated "NAME=value"
 * list env, sends its stderr into a pipe and exits with fn(arg). */
static void run_child(struct child *c, const char *const *env, int (*fn)(void *), void *arg)
{
	int p[2];
	cr_assert_eq(pipe(p), 0, "pipe: %s", strerror(errno));
	fflush(NULL);
	pid_t pid = fork();
	cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		close(p[0]);
		if (dup2(p[1], 2) < 0)
			_exit(100);
		close(p[1]);
		unsetenv("HPCT_DEBUG");
		unsetenv("HPCT_DEBUG_SUBSYS");
		unsetenv("HPCT_DEBUG_FILE");
		for (; env && *env; env++)
			if (putenv((char *)*env) != 0)
				_exit(101);
		int rc = fn(arg);
		fflush(NULL);
		_exit(rc);
	}
	close(p[1]);
	memset(c, 0, sizeof(*c));
	c->pid = pid;
	size_t n = 0;
	for (;;) {
		ssize_t r = read(p[0], c->err + n, sizeof(c->err) - 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
		if (n == sizeof(c->err) - 1) {
			char sink[512];
			while (read(p[0], sink, sizeof(sink)) > 0)
				;
			break;
		}
	}
	c->err[n] = '\0';
	close(p[0]);
	int st;
	pid_t w;
	while ((w = waitpid(pid, &st, 0)) < 0 && errno == EINTR)
		;
	cr_assert_eq(w, pid, "waitpid: %s", strerror(errno));
	c->code = WIFEXITED(st) ? WEXITSTATUS(st) : 256 + WTERMSIG(st);
}

/* One line at every level, INIT and NET, and one failure. */
static int log_all(void *arg)
{
	(void)arg;
	HPCT_WARN(HPCT_SUB_INIT, "warn-init %d", 1);
	HPCT_INFO(HPCT_SUB_INIT, "info-init %d", 2);
	HPCT_TRACE(HPCT_SUB_INIT, "trace-init %d", 3);
	HPCT_WARN(HPCT_SUB_NET, "warn-net %d", 4);
	HPCT_INFO(HPCT_SUB_NET, "info-net %d", 5);
	HPCT_TRACE(HPCT_SUB_NET, "trace-net %d", 6);
	hpct__log(HPCT_LOG_INFO, HPCT_SUB_COLL, "direct-info %s", "coll");
	if (hpct__fail(HPCT_EINVAL, HPCT_SUB_INIT, "fail-init %d", 7) != HPCT_EINVAL)
		return 10;
	/* The failure is kept whether or not it was shown. */
	if (strcmp(hpct_last_error(), "fail-init 7") != 0)
		return 11;
	return 0;
}

/* Whether `err` has a line "... HPCT <level> <msg>". */
static int has(const char *err, const char *level, const char *msg)
{
	char want[256];
	snprintf(want, sizeof(want), " HPCT %s %s\n", level, msg);
	return strstr(err, want) != NULL;
}

static void run_all(struct child *c, const char *const *env)
{
	run_child(c, env, log_all, NULL);
	cr_assert_eq(c->code, 0, "child exited %d; its stderr:\n%s", c->code, c->err);
}

Test(log, info_shows_info_not_trace)
{
	static const char *const env[] = { "HPCT_DEBUG=INFO", NULL };
	struct child c;
	run_all(&c, env);
	cr_assert(has(c.err, "WARN", "warn-init 1"), "no WARN line:\n%s", c.err);
	cr_assert(has(c.err, "INFO", "info-init 2"), "no INFO line:\n%s", c.err);
	cr_assert(has(c.err, "INFO", "direct-info coll"), "hpct__log at INFO not shown:\n%s",
	          c.err);
	cr_assert(has(c.err, "WARN", "fail-init 7"), "hpct__fail not shown at WARN:\n%s", c.err);
	cr_assert_null(strstr(c.err, "trace-"), "TRACE shown at INFO:\n%s", c.err);
}

Test(log, warn_hides_info)
{
	static const char *const env[] = { "HPCT_DEBUG=WARN", NULL };
	struct child c;
	run_all(&c, env);
	cr_assert(has(c.err, "WARN", "warn-init 1"), "no WARN line:\n%s", c.err);
	cr_assert(has(c.err, "WARN", "warn-net 4"), "no WARN line for NET:\n%s", c.err);
	cr_assert(has(c.err, "WARN", "fail-init 7"), "hpct__fail not shown at WARN:\n%s", c.err);
	cr_assert_null(strstr(c.err, "info-"), "INFO shown at WARN:\n%s", c.err);
	cr_assert_null(strstr(c.err, "direct-info"), "hpct__log at INFO shown at WARN:\n%s", c.err);
	cr_assert_null(strstr(c.err, "trace-"), "TRACE shown at WARN:\n%s", c.err);
}

Test(log, default_is_warn)
{
	struct child c;
	run_all(&c, NULL);
	cr_assert(has(c.err, "WARN", "warn-init 1"), "no WARN line by default:\n%s", c.err);
	cr_assert_null(strstr(c.err, "info-"), "INFO shown by default:\n%s", c.err);
}

Test(log, level_is_case_insensitive)
{
	static const char *const env[] = { "HPCT_DEBUG=info", NULL };
	struct child c;
	run_all(&c, env);
	cr_assert(has(c.err, "INFO", "info-init 2"), "HPCT_DEBUG=info did not show INFO:\n%s",
	          c.err);
}

Test(log, bad_level_warns_and_uses_warn)
{
	static const char *const env[] = { "HPCT_DEBUG=LOUD", NULL };
	struct child c;
	run_all(&c, env);
	cr_assert(strstr(c.err, "HPCT_DEBUG='LOUD'"), "bad HPCT_DEBUG not named:\n%s", c.err);
	cr_assert(has(c.err, "WARN", "warn-init 1"), "no WARN line:\n%s", c.err);
	cr_assert_null(strstr(c.err, "info-"), "INFO shown after a bad level:\n%s", c.err);
}

Test(log, none_hides_failures)
{
	static const char *const env[] = { "HPCT_DEBUG=NONE", NULL };
	struct child c;
	run_all(&c, env); /* the child still checks hpct_last_error() */
	cr_assert_str_empty(c.err, "output at HPCT_DEBUG=NONE:\n%s", c.err);
}

Test(log, trace_shows_trace)
{
	static const char *const env[] = { "HPCT_DEBUG=TRACE", NULL };
	struct child c;
	run_all(&c, env);
	cr_assert(has(c.err, "TRACE", "trace-init 3"), "no TRACE line:\n%s", c.err);
	cr_assert(has(c.err, "TRACE", "trace-net 6"), "no TRACE line for NET:\n%s", c.err);
	cr_assert(has(c.err, "INFO", "info-init 2"), "no INFO line at TRACE:\n%s", c.err);
	cr_assert(has(c.err, "WARN", "warn-init 1"), "no WARN line at TRACE:\n%s", c.err);
}

Test(log, subsys_exclude_net)
{
	static const char *const env[] = { "HPCT_DEBUG=INFO", "HPCT_DEBUG_SUBSYS=^NET", NULL };
	struct child c;
	run_all(&c, env);
	cr_assert(has(c.err, "INFO", "info-init 2"), "INIT hidden by ^NET:\n%s", c.err);
	cr_assert(has(c.err, "WARN", "warn-init 1"), "INIT hidden by ^NET:\n%s", c.err);
	cr_assert(has(c.err, "INFO", "direct-info coll"), "COLL hidden by ^NET:\n%s", c.err);
	cr_assert_null(strstr(c.err, "info-net"), "NET shown with ^NET:\n%s", c.err);
	cr_assert_null(strstr(c.err, "warn-net"), "NET shown with ^NET:\n%s", c.err);
}

Test(log, subsys_list_selects)
{
	static const char *const env[] = { "HPCT_DEBUG=INFO", "HPCT_DEBUG_SUBSYS=net,COLL", NULL };
	struct child c;
	run_all(&c, env);
	cr_assert(has(c.err, "INFO", "info-net 5"), "NET hidden by net,COLL:\n%s", c.err);
	cr_assert(has(c.err, "INFO", "direct-info coll"), "COLL hidden by net,COLL:\n%s", c.err);
	cr_assert_null(strstr(c.err, "-init"), "INIT shown with net,COLL:\n%s", c.err);
}

static char host[64];

static void get_host(void)
{
	memset(host, 0, sizeof(host));
	cr_assert_eq(gethostname(host, sizeof(host) - 1), 0, "gethostname: %s", strerror(errno));
}

static int log_ranked(void *arg)
{
	(void)arg;
	HPCT_WARN(HPCT_SUB_INIT, "before rank");
	hpct__log_set_rank(3);
	HPCT_WARN(HPCT_SUB_INIT, "with rank");
	HPCT_INFO(HPCT_SUB_NET, "info with rank");
	hpct__log_set_rank(-1);
	HPCT_WARN(HPCT_SUB_INIT, "rank cleared");
	return 0;
}

Test(log, prefix_is_host_pid_rank)
{
	static const char *const env[] = { "HPCT_DEBUG=INFO", NULL };
	struct child c;
	get_host();
	run_child(&c, env, log_ranked, NULL);
	cr_assert_eq(c.code, 0, "child exited %d:\n%s", c.code, c.err);
	char want[512];
	snprintf(want, sizeof(want),
	         "%s:%d HPCT WARN before rank\n"
	         "%s:%d [3] HPCT WARN with rank\n"
	         "%s:%d [3] HPCT INFO info with rank\n"
	         "%s:%d HPCT WARN rank cleared\n",
	         host, (int)c.pid, host, (int)c.pid, host, (int)c.pid, host, (int)c.pid);
	cr_assert_str_eq(c.err, want, "stderr:\n%s\nexpected:\n%s", c.err, want);
}

Test(log, file_named_by_host_and_pid)
{
	char dir[256], file_env[512];
	const char *t = getenv("TMPDIR");
	snprintf(dir, sizeof(dir), "%s/hpct-log-test.XXXXXX", t && *t ? t : "/tmp");
	cr_assert_not_null(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
	snprintf(file_env, sizeof(file_env), "HPCT_DEBUG_FILE=%s/%%h.%%p.log", dir);
	const char *const env[] = { "HPCT_DEBUG=INFO", file_env, NULL };
	struct child c;
	get_host();
	run_child(&c, env, log_ranked, NULL);

	char path[512], text[4096] = "";
	snprintf(path, sizeof(path), "%s/%s.%d.log", dir, host, (int)c.pid);
	FILE *f = fopen(path, "r");
	int found = f != NULL;
	if (f) {
		text[fread(text, 1, sizeof(text) - 1, f)] = '\0';
		fclose(f);
	}
	/* Clean up before asserting: whatever the child created goes. */
	DIR *d = opendir(dir);
	struct dirent *e;
	char listing[1024] = "", p[600];
	while (d && (e = readdir(d))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		size_t l = strlen(listing);
		snprintf(listing + l, sizeof(listing) - l, " %s", e->d_name);
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		unlink(p);
	}
	if (d)
		closedir(d);
	rmdir(dir);

	cr_assert_eq(c.code, 0, "child exited %d:\n%s", c.code, c.err);
	cr_assert(found, "no log file %s; the directory held:%s", path, listing);
	char want[256];
	snprintf(want, sizeof(want), "%s:%d [3] HPCT INFO info with rank\n", host, (int)c.pid);
	cr_assert(strstr(text, want), "log file lacks '%s':\n%s", want, text);
	cr_assert_null(strstr(c.err, "with rank"), "logged to stderr too:\n%s", c.err);
}

struct thread_arg {
	char seen_before[1024], seen_after[1024];
	int rc;
};

static void *fail_in_thread(void *p)
{
	struct thread_arg *a = p;
	snprintf(a->seen_before, sizeof(a->seen_before), "%s", hpct_last_error());
	a->rc = hpct__fail(HPCT_ETIMEDOUT, HPCT_SUB_NET, "thread: rank %d timed out", 9);
	snprintf(a->seen_after, sizeof(a->seen_after), "%s", hpct_last_error());
	return NULL;
}

/* Exit codes name the check that failed (see last_error_is_per_thread). */
static int last_error_threads(void *arg)
{
	(void)arg;
	if (hpct_last_error() == NULL || hpct_last_error()[0] != '\0')
		return 20;
	if (hpct__fail(HPCT_EINVAL, HPCT_SUB_INIT, "main: bad member %d", 4) != HPCT_EINVAL)
		return 21;
	if (strcmp(hpct_last_error(), "main: bad member 4") != 0)
		return 22;
	struct thread_arg a;
	memset(&a, 0, sizeof(a));
	pthread_t th;
	if (pthread_create(&th, NULL, fail_in_thread, &a) != 0)
		return 23;
	pthread_join(th, NULL);
	if (a.seen_before[0] != '\0')
		return 24; /* the main thread's message leaked into the new thread */
	if (a.rc != HPCT_ETIMEDOUT || strcmp(a.seen_after, "thread: rank 9 timed out") != 0)
		return 25;
	if (strcmp(hpct_last_error(), "main: bad member 4") != 0)
		return 26; /* the thread's failure overwrote the main thread's */
	hpct__fail(HPCT_EPROTO, HPCT_SUB_NET, "main: second failure");
	if (strcmp(hpct_last_error(), "main: second failure") != 0)
		return 27;
	hpct__set_last_error("main: kept, not logged");
	if (strcmp(hpct_last_error(), "main: kept, not logged") != 0)
		return 28;
	return 0;
}

Test(log, last_error_is_per_thread)
{
	static const char *const env[] = { "HPCT_DEBUG=WARN", NULL };
	static const char *const why[] = {
		[20] = "hpct_last_error() not \"\" before any failure",
		[21] = "hpct__fail did not return its code",
		[22] = "hpct_last_error() is not the main thread's failure",
		[23] = "pthread_create failed",
		[24] = "a new thread sees the main thread's last error",
		[25] = "the thread's hpct_last_error() is not its own failure",
		[26] = "the thread's failure replaced the main thread's",
		[27] = "hpct_last_error() is not the last failure",
		[28] = "hpct__set_last_error() not kept",
	};
	struct child c;
	run_child(&c, env, last_error_threads, NULL);
	cr_assert_eq(c.code, 0, "child exited %d (%s):\n%s", c.code,
	             c.code >= 20 && c.code <= 28 ? why[c.code] : "?", c.err);
	cr_assert(has(c.err, "WARN", "main: bad member 4"), "main failure not logged:\n%s", c.err);
	cr_assert(has(c.err, "WARN", "thread: rank 9 timed out"), "thread failure not logged:\n%s",
	          c.err);
	cr_assert_null(strstr(c.err, "kept, not logged"), "hpct__set_last_error logged:\n%s",
	               c.err);
}

/* A typo in HPCT_DEBUG_SUBSYS must not hide every warning: it is named and
 * everything is shown. */
Test(log, unknown_subsys_is_named_and_shows_all)
{
	static const char *const env[] = { "HPCT_DEBUG=INFO", "HPCT_DEBUG_SUBSYS=NETT", NULL };
	struct child c;
	run_all(&c, env);
	cr_assert(strstr(c.err, "HPCT_DEBUG_SUBSYS=NETT: unknown subsystem 'NETT'"),
	          "typo not named:\n%s", c.err);
	cr_assert(has(c.err, "WARN", "warn-net 4"), "warnings hidden by a typo:\n%s", c.err);
	cr_assert(has(c.err, "INFO", "info-init 2"), "INIT hidden by a typo:\n%s", c.err);
}
