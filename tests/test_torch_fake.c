/* What libhpct_preload.so decides about a TCPStore connect, for torch
 * versions this machine cannot install (tests/test_torch.sh runs a real
 * one).  torch_fake_rank, under the shim, listens on MASTER_PORT, loads a
 * fake torch/_C module beside a version.py written here, and connects to
 * MASTER_PORT from libtorch_fake.so (or from itself); it prints whether its
 * listener got the connection, whether the in-process store answered, and
 * hpct_preload_store_routed().  Each case is one process (the shim decides
 * once per process), ports from slot k of this program's range: MASTER_PORT
 * at its start, then hpct's store (4 ports) and world (HPCT_PORT_BASE, 4
 * ports); slots 0-9 and 31-33, and 10-30 for ranks started together.  Paths from
 * the environment:
 * HPCT_TORCH_FAKE_RANK, HPCT_TORCH_FAKE_LIB (libtorch_fake.so),
 * HPCT_TORCH_FAKE_C (the module), HPCT_PRELOAD (and HPCT_PRELOAD_FIRST,
 * the sanitizer runtime an instrumented shim needs before it). */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/harness.h"

#define DEADLINE_S 60
#define C_NAME     "_C.cpython-311-x86_64-linux-gnu.so"

TestSuite(torch_fake, .timeout = 120);

struct rank_case {
	int slot;
	const char *version;  /* version.py's __version__ */
	const char *from;     /* "lib" (libtorch_fake.so), "self", "parent" */
	const char *rootless; /* HPCT_USE_ROOTLESS, NULL: unset */
	int rank;             /* RANK=0 and friends, or no rank variable at all */
	const char *proto;    /* what to ask a served connection: "2", "1.13", or
	                       * what it must refuse: "2-unknown-op", "2-no-validate" */
};

struct outcome {
	char dir[64]; /* the fake torch's folder: <dir>/torch */
	pid_t pid;
	char out[1024];
	char err[8192];
};

static int copy_file(const char *from, const char *to)
{
	int in = open(from, O_RDONLY | O_CLOEXEC);
	int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
	char buf[65536];
	ssize_t n = -1;
	if (in >= 0 && out >= 0)
		while ((n = read(in, buf, sizeof(buf))) > 0 && write(out, buf, (size_t)n) == n)
			;
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	return n == 0 ? 0 : -1;
}

static void slurp(int fd, char *buf, size_t len)
{
	ssize_t n = pread(fd, buf, len - 1, 0);
	buf[n > 0 ? n : 0] = 0;
}

/* The child's environment, built whole: nothing of this one's (a
 * launcher's RANK or SLURM_*) may leak into the decision. */
static int child_env(const struct rank_case *c, char **envp, char *store, size_t len)
{
	int master = hpct_test_ports(c->slot);
	const char *first = getenv("HPCT_PRELOAD_FIRST"), *preload = getenv("HPCT_PRELOAD");
	if (!preload)
		return -1;
	char *at = store, *end = store + len;
	int n = 0;
#define PUT(...)                                                       \
	do {                                                           \
		int w = snprintf(at, (size_t)(end - at), __VA_ARGS__); \
		if (w <= 0 || w >= end - at)                           \
			return -1;                                     \
		envp[n++] = at;                                        \
		at += w + 1;                                           \
	} while (0)
	PUT("LD_PRELOAD=%s%s%s", first ? first : "", first ? " " : "", preload);
	PUT("PATH=/usr/bin:/bin");
	PUT("HPCT_DEBUG=WARN");
	if (c->rootless)
		PUT("HPCT_USE_ROOTLESS=%s", c->rootless);
	if (c->rank) {
		PUT("RANK=0");
		PUT("LOCAL_RANK=0");
	}
	PUT("WORLD_SIZE=1");
	PUT("LOCAL_WORLD_SIZE=1");
	PUT("HPCT_HOSTS=127.0.0.1");
	PUT("MASTER_ADDR=127.0.0.1");
	PUT("MASTER_PORT=%d", master);
	PUT("HPCT_JOB_ID=torch-fake-%ld-%d", (long)getpid(), c->slot);
	/* the world's ports, and its store's just below them: all in the slot */
	PUT("HPCT_PORT_BASE=%d", master + 5);
	PUT("HPCT_PORT_RANGE=4");
	PUT("HPCT_TIMEOUT=30");
	static const char *const keep[] = { "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS" };
	for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++)
		if (getenv(keep[i]))
			PUT("%s=%s", keep[i], getenv(keep[i]));
#undef PUT
	envp[n] = NULL;
	return 0;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Runs torch_fake_rank for one case; reaped before returning, killed when
 * it outlives the deadline.  0, or -1 with why[] (no assert: helper
 * processes run it too). */
static int try_run(const struct rank_case *c, struct outcome *o, char *why, size_t wlen)
{
	char torch[128], module[192], version[192], outp[128], errp[128];
	const char *rank = getenv("HPCT_TORCH_FAKE_RANK"), *lib = getenv("HPCT_TORCH_FAKE_LIB"),
	           *cmod = getenv("HPCT_TORCH_FAKE_C");
	int out = -1, err = -1, alive[2] = { -1, -1 }, rc = -1;
	snprintf(o->dir, sizeof(o->dir), "/tmp/hpct-torchfake.XXXXXX");
	if (!rank || !lib || !cmod) {
		snprintf(why, wlen, "HPCT_TORCH_FAKE_RANK, _LIB or _C is not set");
		return -1;
	}
	if (!mkdtemp(o->dir)) {
		snprintf(why, wlen, "mkdtemp: %s", strerror(errno));
		return -1;
	}
	snprintf(torch, sizeof(torch), "%s/torch", o->dir);
	snprintf(module, sizeof(module), "%s/" C_NAME, torch);
	snprintf(version, sizeof(version), "%s/version.py", torch);
	snprintf(outp, sizeof(outp), "%s/out", o->dir);
	snprintf(errp, sizeof(errp), "%s/err", o->dir);
	/* the fake torch: its module beside a version.py */
	FILE *f = NULL;
	if (mkdir(torch, 0755) != 0 || copy_file(cmod, module) != 0 || !(f = fopen(version, "w")) ||
	    fprintf(f, "__version__ = '%s'\ngit_version = 'fake'\n", c->version) < 0) {
		snprintf(why, wlen, "a fake torch in %s: %s", torch, strerror(errno));
		if (f)
			fclose(f);
		goto remove_torch;
	}
	fclose(f);

	out = open(outp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	err = open(errp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	char *envp[64], store[16384], port[16];
	/* the child's end of this pipe closes when it exits: its EOF is the
	 * event waited for */
	if (out < 0 || err < 0 || pipe2(alive, O_CLOEXEC) != 0) {
		snprintf(why, wlen, "%s/out, err, a pipe: %s", o->dir, strerror(errno));
		goto close_files;
	}
	if (child_env(c, envp, store, sizeof(store)) != 0) {
		snprintf(why, wlen, "HPCT_PRELOAD is not set, or the environment is too long");
		goto close_files;
	}
	snprintf(port, sizeof(port), "%d", hpct_test_ports(c->slot));

	pid_t pid = fork();
	if (pid < 0) {
		snprintf(why, wlen, "fork: %s", strerror(errno));
		goto close_files;
	}
	if (pid == 0) {
		dup2(out, 1);
		dup2(err, 2);
		fcntl(alive[1], F_SETFD, 0);
		execve(rank,
		       (char *[]){ (char *)"torch_fake_rank", (char *)c->from, port, module,
		                   (char *)lib, (char *)c->proto, NULL },
		       envp);
		_exit(127);
	}
	close(alive[1]);
	alive[1] = -1;
	o->pid = pid;
	double until = now_s() + DEADLINE_S;
	int gone = 0;
	while (!gone) {
		int left = (int)((until - now_s()) * 1000);
		struct pollfd p = { .fd = alive[0], .events = POLLIN };
		char b;
		if (left <= 0 || poll(&p, 1, left) == 0)
			break;
		gone = read(alive[0], &b, 1) <= 0;
	}
	if (!gone)
		kill(pid, SIGKILL);
	int status = 0;
	waitpid(pid, &status, 0);
	slurp(out, o->out, sizeof(o->out));
	slurp(err, o->err, sizeof(o->err));
	if (!gone)
		snprintf(why, wlen, "torch_fake_rank (torch %s) did not exit in %d s; stderr:\n%s",
		         c->version, DEADLINE_S, o->err);
	else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		snprintf(why, wlen, "torch_fake_rank (torch %s) failed (status 0x%x); stderr:\n%s",
		         c->version, status, o->err);
	else
		rc = 0;
close_files:
	for (int i = 0; i < 2; i++)
		if (alive[i] >= 0)
			close(alive[i]);
	if (out >= 0)
		close(out);
	if (err >= 0)
		close(err);
	unlink(outp);
	unlink(errp);
remove_torch:
	unlink(module);
	unlink(version);
	rmdir(torch);
	rmdir(o->dir);
	return rc;
}

static void run(const struct rank_case *c, struct outcome *o)
{
	char why[10000];
	cr_assert(try_run(c, o, why, sizeof(why)) == 0, "%s", why);
}

/* PyTorch keeps its store: the listener on MASTER_PORT got the connection,
 * the shim served none, and stderr is `line` exactly ("": nothing). */
static void expect_passed(const struct rank_case *c, const char *line)
{
	struct outcome o;
	run(c, &o);
	cr_expect_str_eq(o.out, "listener=1 answered=0 routed=0\n", "torch %s: %s", c->version,
	                 o.err);
	char want[1024] = "";
	if (*line)
		snprintf(want, sizeof(want), "%s\n", line);
	cr_expect_str_eq(o.err, want, "torch %s: stderr", c->version);
}

/* One line naming the version and where it was read. */
static void expect_unknown(const struct rank_case *c)
{
	struct outcome o;
	run(c, &o);
	cr_expect_str_eq(o.out, "listener=1 answered=0 routed=0\n", "torch %s: %s", c->version,
	                 o.err);
	char want[1024];
	snprintf(want, sizeof(want),
	         "hpct: torch %s at %s/torch: its TCPStore protocol is not one hpct serves "
	         "(torch 1.13 and 2.4 to 2.15): PyTorch keeps its own TCPStore\n",
	         c->version, o.dir);
	cr_expect_str_eq(o.err, want, "torch %s: stderr", c->version);
}

/* Served in the process: the listener saw nothing, the store answered. */
static void expect_served(const struct rank_case *c)
{
	struct outcome o;
	run(c, &o);
	cr_expect_str_eq(o.out, "listener=0 answered=1 routed=1\n", "torch %s: %s", c->version,
	                 o.err);
	cr_expect_null(strstr(o.err, "PyTorch keeps"), "torch %s: stderr:\n%s", c->version, o.err);
}

/* A torch newer than every release known: served on the newest protocol,
 * one line saying so, and `warn` (a refusal: a part of its line) among
 * what it logged, or none. */
static void expect_newer(const struct rank_case *c, const char *warn)
{
	struct outcome o;
	run(c, &o);
	cr_expect_str_eq(o.out, "listener=0 answered=1 routed=1\n", "torch %s (%s): %s", c->version,
	                 c->proto, o.err);
	char want[1024];
	snprintf(want, sizeof(want),
	         "hpct: torch %s at %s/torch is newer than the releases hpct was checked with "
	         "(torch 1.13 and 2.4 to 2.15): its TCPStore is served on the newest one's "
	         "protocol while its connections speak it (a connection that does not is closed, "
	         "saying so; HPCT_USE_ROOTLESS=0 keeps PyTorch's own)\n",
	         c->version, o.dir);
	cr_expect(strncmp(o.err, want, strlen(want)) == 0, "torch %s: stderr, not first:\n%s\n%s",
	          c->version, want, o.err);
	if (warn)
		cr_expect_not_null(strstr(o.err, warn), "torch %s (%s): stderr, without '%s':\n%s",
		                   c->version, c->proto, warn, o.err);
	else
		cr_expect_null(strstr(o.err, "WARN"), "torch %s: stderr:\n%s", c->version, o.err);
}

Test(torch_fake, newer_2_99_served_with_a_line)
{
	expect_newer(&(struct rank_case){ 0, "2.99.0", "lib", "1", 1, "2" }, NULL);
}

/* A command no known torch has: the connection closed at once (PyTorch's
 * client raises), said with what to do. */
Test(torch_fake, newer_unknown_command_closed)
{
	expect_newer(&(struct rank_case){ 32, "3.0.0", "lib", "1", 1, "2-unknown-op" },
	             "sent command 40, which torch newer than 2.15 (served on 2.4-2.15's protocol)'s "
	             "TCPStore protocol does not have: connection closed (this torch's TCPStore "
	             "protocol is not the one hpct knows: HPCT_USE_ROOTLESS=0 runs PyTorch's own "
	             "store");
}

/* A handshake other than 2.x's (VALIDATE first): closed, said. */
Test(torch_fake, newer_other_handshake_closed)
{
	expect_newer(&(struct rank_case){ 33, "2.16.0a0+git1234", "lib", "1", 1, "2-no-validate" },
	             "began with command 13, not VALIDATE as torch newer than 2.15");
}

/* A known release is held to its own table as strictly. */
Test(torch_fake, known_unknown_command_closed)
{
	struct outcome o;
	run(&(struct rank_case){ 31, "2.15.0+cu132", "lib", "1", 1, "2-unknown-op" }, &o);
	cr_expect_str_eq(o.out, "listener=0 answered=1 routed=1\n", "%s", o.err);
	cr_expect_not_null(strstr(o.err, "sent command 40, which torch 2.4-2.15's TCPStore protocol "
	                                 "does not have: connection closed\n"),
	                   "stderr:\n%s", o.err);
}

Test(torch_fake, unknown_2_2_passed)
{
	expect_unknown(&(struct rank_case){ 1, "2.2.0", "lib", "1", 1, "2" });
}

Test(torch_fake, unknown_1_12_passed)
{
	expect_unknown(&(struct rank_case){ 2, "1.12.1", "lib", "1", 1, "2" });
}

Test(torch_fake, known_2_13_cpu_served)
{
	expect_served(&(struct rank_case){ 3, "2.13.0+cpu", "lib", "1", 1, "2" });
}

Test(torch_fake, known_2_14_cuda_served)
{
	expect_served(&(struct rank_case){ 9, "2.14.1+cu130", "lib", "1", 1, "2" });
}

Test(torch_fake, known_1_13_served)
{
	expect_served(&(struct rank_case){ 4, "1.13.1", "lib", "1", 1, "1.13" });
}

Test(torch_fake, rootless_off_passed)
{
	expect_passed(&(struct rank_case){ 5, "2.13.0", "lib", "0", 1, "2" },
	              "hpct: HPCT_USE_ROOTLESS=0: PyTorch keeps its own TCPStore");
}

Test(torch_fake, not_from_torch_passed_silently)
{
	expect_passed(&(struct rank_case){ 6, "2.13.0", "self", "1", 1, "2" }, "");
}

Test(torch_fake, no_rank_passed_silently)
{
	expect_passed(&(struct rank_case){ 7, "2.13.0", "lib", "1", 0, "2" }, "");
}

/* A process a served rank started is no rank: its connect is passed, with
 * one line naming the rank (the mark the rank holds, found from the
 * child). */
Test(torch_fake, child_of_rank_passed)
{
	struct rank_case c = { 8, "2.13.0", "parent", "1", 1, "2" };
	struct outcome o;
	run(&c, &o);
	cr_expect_str_eq(o.out, "listener=0 answered=1 routed=1\nlistener=1 answered=0 routed=0\n",
	                 "stderr:\n%s", o.err);
	char want[256];
	snprintf(want, sizeof(want),
	         "hpct: a child of rank process %ld: PyTorch keeps its own TCPStore\n",
	         (long)o.pid);
	cr_expect_not_null(strstr(o.err, want), "stderr, not naming rank %ld:\n%s", (long)o.pid,
	                   o.err);
}

/* Ranks started together by one parent (torchrun's agent starts a node's)
 * are all served: none takes a sibling's look at the parent for a mark. */
Test(torch_fake, ranks_started_together_served)
{
	enum { N = 21 }; /* slots 10-30 */
	struct outcome *o = calloc(N, sizeof(*o));
	cr_assert(o);
	pid_t kids[N];
	int go[2];
	cr_assert(pipe2(go, O_CLOEXEC) == 0, "pipe: %s", strerror(errno));
	for (int i = 0; i < N; i++) {
		kids[i] = fork();
		cr_assert(kids[i] >= 0, "fork: %s", strerror(errno));
		if (kids[i] == 0) {
			/* a helper: its exit status says it all; it starts its
			 * rank when the parent's end of `go` closes */
			char b;
			close(go[1]);
			if (read(go[0], &b, 1) != 0)
				_exit(1);
			struct rank_case c = { 10 + i, "2.13.0", "lib", "1", 1, "2" };
			char why[10000];
			int rc = try_run(&c, &o[i], why, sizeof(why));
			int ok = rc == 0 &&
			         strcmp(o[i].out, "listener=0 answered=1 routed=1\n") == 0;
			if (rc != 0)
				fprintf(stderr, "rank %d: %s\n", i, why);
			else if (!ok)
				fprintf(stderr, "rank %d: %s%s", i, o[i].out, o[i].err);
			_exit(ok ? 0 : 1);
		}
	}
	close(go[0]);
	close(go[1]);
	int bad = 0;
	for (int i = 0; i < N; i++) {
		int st = 0;
		waitpid(kids[i], &st, 0);
		bad += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	free(o);
	cr_expect_eq(bad, 0, "%d of %d ranks started together were not served", bad, N);
}
