/* hpct-run: start N local ranks with a torchrun-style environment and
 * supervise them: one failure stops the whole job.  Plain libc + POSIX; it
 * does not link libhpct, it only describes the world through the variables
 * hpct (and torch) read. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap/topo/loopback.h"
#include "tools/common/shim_path.h"

#define MAX_RANKS 65536
#define MAX_NODES 254 /* node k listens on 127.0.0.(k+1) */
#define GRACE_S   3.0
#define LIST_MAX  64 /* ranks named in the timeout line before "... (N more)" */

struct opts {
	int n, nodes, port;
	double timeout; /* 0: none */
	const char *timeout_arg;
	const char *epoch;
	const char *job;
	int rootless;
	int preload; /* --preload: one command, rootless, run as it is */
	int keep_going;
	char **cmd;
};

struct sup {
	int n, alive;
	pid_t *pid;   /* 0 once reaped: a pid is signalled only while it is our unreaped child */
	sigset_t set; /* signals taken with sigtimedwait */
	int stopping, killed, code;
	int keep_going, failed; /* --keep-going: failures seen, none stopping the job */
	double kill_at;
};

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: hpct-run -n N [options] -- CMD [ARGS...]\n"
	        "       hpct-run --preload -- CMD [ARGS...]\n"
	        "Start N local ranks of CMD with a torchrun-style environment and hpct's own\n"
	        "(HPCT_HOSTS, HPCT_TASKS_PER_NODE, HPCT_JOB_ID, HPCT_EPOCH); stop all of them\n"
	        "when one fails.\n"
	        "\n"
	        "  -n N               number of ranks (1 to %d)\n"
	        "  --nodes K          spread the ranks over K loopback nodes 127.0.0.1 ..\n"
	        "                     127.0.0.K in blocks, the first N%%K nodes one rank more\n"
	        "                     (default 1, at most %d and at most N); with K > 1\n"
	        "                     each node's ranks get NCCL_HOSTID=hpct-run-node-<k>\n"
	        "                     (unless it is set), so that NCCL sees the nodes hpct\n"
	        "                     sees rather than one host\n"
	        "  --timeout S        stop all ranks after S seconds (fractions allowed)\n"
	        "  --master-port P    MASTER_PORT (default: $MASTER_PORT, else a free port)\n"
	        "  --epoch E          HPCT_EPOCH and TORCHELASTIC_RESTART_COUNT\n"
	        "                     (default: $HPCT_EPOCH, else 0)\n"
	        "  --job ID           HPCT_JOB_ID and TORCHELASTIC_RUN_ID\n"
	        "                     (default: $HPCT_JOB_ID, else hpct-run-<pid>)\n"
	        "  --rootless         set HPCT_USE_ROOTLESS=1 and add libhpct_preload.so to\n"
	        "                     LD_PRELOAD (an unmodified PyTorch or NCCL job then\n"
	        "                     needs no store, no MASTER_PORT and no root)\n"
	        "  --preload          run CMD itself (no ranks of its own: torchrun,\n"
	        "                     srun, mpirun, a script), rootless: HPCT_USE_ROOTLESS=1\n"
	        "                     and libhpct_preload.so in LD_PRELOAD for CMD and its\n"
	        "                     children; nothing else of the environment changes\n"
	        "  --keep-going       a rank that fails is named, and the others go on (for\n"
	        "                     jobs that survive a rank's loss in place: ncclCommShrink,\n"
	        "                     NVRx's in-process restart, torchft); exit 1 at the end\n"
	        "  -h, --help         print this help\n"
	        "\n"
	        "Exit status: 0 when every rank exits 0; 1 when a rank fails (it is named,\n"
	        "the others get SIGTERM, then SIGKILL after %g s); 124 on timeout; 126/127\n"
	        "when CMD cannot be run; 128+S after signal S (SIGINT, SIGTERM), which is\n"
	        "forwarded to the ranks; 2 for bad arguments.\n",
	        MAX_RANKS, MAX_NODES, GRACE_S);
}

static _Noreturn void bad_usage(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("hpct-run: ", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nTry 'hpct-run --help'.\n", stderr);
	exit(2);
}

static long parse_long(const char *what, const char *s, long lo, long hi)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		bad_usage("bad value '%s' for %s: expected an integer from %ld to %ld", s, what, lo,
		          hi);
	return v;
}

static const char *parse_epoch(const char *what, const char *s)
{
	char *end;
	errno = 0;
	(void)strtoull(s, &end, 10);
	if (errno || end == s || *end || *s < '0' || *s > '9')
		bad_usage("bad value '%s' for %s: expected a non-negative integer", s, what);
	return s;
}

/* Value of option `name` at argv[*i]: "--name V", "--name=V", and for short
 * options also "-nV".  NULL if argv[*i] is not this option. */
static const char *opt_value(int argc, char **argv, int *i, const char *name)
{
	const char *a = argv[*i];
	size_t len = strlen(name);
	if (strncmp(a, name, len) != 0)
		return NULL;
	if (a[len] == '=' && name[1] == '-')
		return a + len + 1;
	if (a[len] && name[1] != '-')
		return a + len;
	if (a[len])
		return NULL;
	if (*i + 1 >= argc)
		bad_usage("option %s needs a value", name);
	return argv[++*i];
}

static void parse_args(int argc, char **argv, struct opts *o)
{
	const char *v;
	int have_n = 0;
	int i;
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--") == 0) {
			i++;
			break;
		}
		if (a[0] != '-' || a[1] == '\0')
			break;
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			usage(stdout);
			exit(0);
		} else if (strcmp(a, "--rootless") == 0) {
			o->rootless = 1;
		} else if (strcmp(a, "--preload") == 0) {
			o->preload = 1;
		} else if (strcmp(a, "--keep-going") == 0) {
			o->keep_going = 1;
		} else if ((v = opt_value(argc, argv, &i, "-n"))) {
			o->n = (int)parse_long("-n", v, 1, MAX_RANKS);
			have_n = 1;
		} else if ((v = opt_value(argc, argv, &i, "--nodes"))) {
			o->nodes = (int)parse_long("--nodes", v, 1, MAX_NODES);
		} else if ((v = opt_value(argc, argv, &i, "--master-port"))) {
			o->port = (int)parse_long("--master-port", v, 1, 65535);
		} else if ((v = opt_value(argc, argv, &i, "--epoch"))) {
			o->epoch = parse_epoch("--epoch", v);
		} else if ((v = opt_value(argc, argv, &i, "--job"))) {
			if (!*v)
				bad_usage("empty value for --job");
			o->job = v;
		} else if ((v = opt_value(argc, argv, &i, "--timeout"))) {
			char *end;
			errno = 0;
			o->timeout = strtod(v, &end);
			if (errno || end == v || *end || !isfinite(o->timeout) || o->timeout <= 0 ||
			    o->timeout > 1e9)
				bad_usage("bad value '%s' for --timeout: expected seconds > 0, "
				          "e.g. 30 or 0.5",
				          v);
			o->timeout_arg = v;
		} else {
			bad_usage("unknown option '%s'", a);
		}
	}
	if (o->preload) {
		if (have_n || o->nodes > 1 || o->port || o->epoch || o->job || o->timeout_arg ||
		    o->keep_going || o->rootless)
			bad_usage("--preload runs the command as it is: it takes no other option "
			          "(its launcher starts the ranks)");
		if (i >= argc)
			bad_usage("missing the command to run after '--'");
		o->cmd = argv + i;
		return;
	}
	if (!have_n)
		bad_usage("missing -n N (number of ranks)");
	if (o->nodes > o->n)
		bad_usage("--nodes %d is more than -n %d: every node needs a rank", o->nodes, o->n);
	if (i >= argc)
		bad_usage("missing the command to run after '--'");
	o->cmd = argv + i;
}

static void set(const char *name, const char *value)
{
	if (setenv(name, value, 1) != 0) {
		fprintf(stderr, "hpct-run: cannot set %s: %s\n", name, strerror(errno));
		exit(1);
	}
}

/* libhpct_preload.so in this program's build tree, else where it
 * was installed; added to LD_PRELOAD unless already there. */
static void preload_shim(void)
{
	char lib[8192];
	if (hpct_shim_path(lib, sizeof(lib)) != 0) {
		fprintf(stderr,
		        "hpct-run: no libhpct_preload.so beside this program (../lib/), in "
		        "this build tree (bootstrap/shim/) or in %s\n",
		        HPCT_LIBDIR);
		exit(2);
	}
	const char *old = getenv("LD_PRELOAD");
	if (old && strstr(old, lib))
		return;
	char *v = malloc(strlen(lib) + (old ? strlen(old) : 0) + 2);
	if (!v)
		exit(2);
	/* after what is there: a sanitizer's runtime, say, must stay first */
	sprintf(v, "%s%s%s", old && *old ? old : "", old && *old ? ":" : "", lib);
	set("LD_PRELOAD", v);
	free(v);
}

static void setf(const char *name, const char *fmt, ...)
{
	char buf[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	set(name, buf);
}

/* Ask the kernel for a free port.  It is released again before rank 0 binds
 * it, so another process could take it in between; for a local tool that
 * window is a few milliseconds, the kernel does not hand the same ephemeral
 * port out again right away, and if it happens rank 0 fails to bind, the job
 * stops with that rank named, and a rerun picks another port. */
static int free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
		                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int port = -1, e = 0;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		e = errno;
		goto fail;
	}
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
		e = errno;
		goto close_fd;
	}
	port = ntohs(sa.sin_port);
close_fd:
	close(fd);
fail:
	if (port <= 0) {
		fprintf(stderr,
		        "hpct-run: cannot find a free port on 127.0.0.1 (%s); use --master-port\n",
		        strerror(e));
		exit(1);
	}
	return port;
}

/* The environment every rank shares; per-rank variables are set after fork. */
static void set_world_env(const struct opts *o)
{
	int base = o->n / o->nodes, extra = o->n % o->nodes;
	size_t cap = (size_t)o->nodes * 16 + 64;
	char *buf = malloc(cap);
	if (!buf) {
		fputs("hpct-run: out of memory\n", stderr);
		exit(1);
	}
	layout_hosts(buf, cap, o->nodes);
	set("HPCT_HOSTS", buf);
	layout_tasks(buf, cap, o->n, o->nodes);
	set("HPCT_TASKS_PER_NODE", buf);
	free(buf);

	setf("WORLD_SIZE", "%d", o->n);
	setf("ROLE_WORLD_SIZE", "%d", o->n);
	setf("GROUP_WORLD_SIZE", "%d", o->nodes);
	if (extra == 0)
		setf("LOCAL_WORLD_SIZE", "%d", base);
	else
		unsetenv("LOCAL_WORLD_SIZE");
	/* hpct prefers these over everything set here; a stale value from the
	 * caller would give every rank the same identity or another layout. */
	unsetenv("HPCT_RANK");
	unsetenv("HPCT_WORLD_SIZE");
	unsetenv("HPCT_LOCAL_RANK");
	unsetenv("HPCT_HOSTFILE");

	set("MASTER_ADDR", "127.0.0.1");
	const char *env_port = getenv("MASTER_PORT");
	if (o->port)
		setf("MASTER_PORT", "%d", o->port);
	else if (env_port)
		parse_long("MASTER_PORT in the environment", env_port, 1, 65535);
	else
		setf("MASTER_PORT", "%d", free_port());

	const char *job = o->job ? o->job : getenv("HPCT_JOB_ID");
	if (job && *job) {
		set("HPCT_JOB_ID", job);
		set("TORCHELASTIC_RUN_ID", job);
	} else {
		setf("HPCT_JOB_ID", "hpct-run-%ld", (long)getpid());
		setf("TORCHELASTIC_RUN_ID", "hpct-run-%ld", (long)getpid());
	}
	const char *epoch = o->epoch ? o->epoch : getenv("HPCT_EPOCH");
	if (!epoch)
		epoch = "0";
	parse_epoch(o->epoch ? "--epoch" : "HPCT_EPOCH in the environment", epoch);
	set("HPCT_EPOCH", epoch);
	set("TORCHELASTIC_RESTART_COUNT", epoch);
	if (o->rootless) {
		set("HPCT_USE_ROOTLESS", "1");
		preload_shim();
	}
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void signal_all(struct sup *s, int sig)
{
	for (int r = 0; r < s->n; r++)
		if (s->pid[r] > 0)
			kill(s->pid[r], sig);
}

static void begin_stop(struct sup *s, int code, int sig)
{
	s->stopping = 1;
	s->code = code;
	signal_all(s, sig);
	s->kill_at = now() + GRACE_S;
}

static void kill_all(struct sup *s)
{
	signal_all(s, SIGKILL);
	s->killed = 1;
}

static void reap(struct sup *s)
{
	int st;
	pid_t p;
	while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
		int r = 0;
		while (r < s->n && s->pid[r] != p)
			r++;
		if (r == s->n)
			continue; /* inherited from whoever exec'd us: not ours to judge */
		s->pid[r] = 0;
		s->alive--;
		if (s->stopping || (WIFEXITED(st) && WEXITSTATUS(st) == 0))
			continue;
		if (WIFEXITED(st))
			fprintf(stderr, "hpct-run: rank %d (pid %ld) exited with status %d", r,
			        (long)p, WEXITSTATUS(st));
		else
			fprintf(stderr, "hpct-run: rank %d (pid %ld) was killed by signal %d (%s)",
			        r, (long)p, WTERMSIG(st), strsignal(WTERMSIG(st)));
		if (s->keep_going) {
			s->failed++;
			fprintf(stderr, "; %d other rank%s go%s on (--keep-going)\n", s->alive,
			        s->alive == 1 ? "" : "s", s->alive == 1 ? "es" : "");
			continue;
		}
		if (s->alive)
			fprintf(stderr, "; stopping %d other rank%s\n", s->alive,
			        s->alive > 1 ? "s" : "");
		else
			fputc('\n', stderr);
		begin_stop(s, 1, SIGTERM);
	}
}

static void report_timeout(struct sup *s, const char *timeout_arg)
{
	int listed = 0;
	fprintf(stderr, "hpct-run: timeout after %s s; ranks still running:", timeout_arg);
	for (int r = 0; r < s->n && listed < LIST_MAX; r++)
		if (s->pid[r] > 0) {
			fprintf(stderr, " %d", r);
			listed++;
		}
	if (s->alive > listed)
		fprintf(stderr, " ... (%d more)", s->alive - listed);
	fputc('\n', stderr);
}

static void on_signal(struct sup *s, int sig, const siginfo_t *si)
{
	const char *name = sig == SIGINT ? "SIGINT" : "SIGTERM";
	if (sig == SIGCHLD) {
		reap(s);
	} else if (!s->stopping) {
		fprintf(stderr, "hpct-run: got %s; stopping %d rank%s\n", name, s->alive,
		        s->alive == 1 ? "" : "s");
		/* From the kernel (^C on the terminal) it went to the whole
		 * foreground process group, ranks included: sending it again
		 * would interrupt their cleanup. */
		begin_stop(s, 128 + sig, si->si_code == SI_KERNEL ? 0 : sig);
	} else if (!s->killed) {
		fprintf(stderr, "hpct-run: got %s again; killing %d rank%s\n", name, s->alive,
		        s->alive == 1 ? "" : "s");
		kill_all(s);
	}
}

static int supervise(struct sup *s, const struct opts *o, double t_end)
{
	reap(s);
	while (s->alive > 0) {
		double deadline = -1;
		if (s->stopping && !s->killed)
			deadline = s->kill_at;
		else if (!s->stopping && o->timeout > 0)
			deadline = t_end;
		struct timespec ts, *tp = NULL;
		if (deadline >= 0) {
			double d = deadline - now();
			if (d < 0)
				d = 0;
			ts.tv_sec = (time_t)d;
			ts.tv_nsec = (long)((d - (double)ts.tv_sec) * 1e9);
			tp = &ts;
		}
		siginfo_t si;
		int sig = sigtimedwait(&s->set, &si, tp);
		if (sig < 0) {
			if (errno != EAGAIN || now() < deadline)
				continue; /* EINTR (e.g. SIGCONT), or woke a little early */
			if (s->stopping) {
				kill_all(s);
			} else {
				report_timeout(s, o->timeout_arg);
				begin_stop(s, 124, SIGTERM);
			}
		} else {
			on_signal(s, sig, &si);
		}
	}
	return s->stopping ? s->code : s->failed ? 1 : 0;
}

static _Noreturn void run_rank(const struct opts *o, int r, const sigset_t *old_mask, pid_t parent,
                               int err_fd)
{
	int node, local;
	layout_place(o->n, o->nodes, r, &node, &local);

	/* hpct-run is single-threaded, so setenv after fork is safe.  With no
	 * supervisor left to escalate, a rank that outlives it would never be
	 * stopped: take it down hard. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
		_exit(127);
	setf("RANK", "%d", r);
	setf("ROLE_RANK", "%d", r);
	setf("LOCAL_RANK", "%d", local);
	setf("GROUP_RANK", "%d", node);
	/* NCCL tells nodes apart by a hash of the host (and of NCCL_HOSTID):
	 * without this, ranks of two loopback nodes would be one node to it,
	 * and its local ranks would clash (the same GPU twice) */
	if (o->nodes > 1 && !getenv("NCCL_HOSTID"))
		setf("NCCL_HOSTID", "hpct-run-node-%d", node);
	sigprocmask(SIG_SETMASK, old_mask, NULL);
	execvp(o->cmd[0], o->cmd);
	int e = errno;
	if (err_fd >= 0 && write(err_fd, &e, sizeof(e)) == (ssize_t)sizeof(e))
		_exit(127);
	dprintf(2, "hpct-run: rank %d: cannot run '%s': %s\n", r, o->cmd[0], strerror(e));
	_exit(e == ENOENT ? 127 : 126);
}

static void fork_failed(struct sup *s, const struct opts *o, int r, int e)
{
	struct rlimit rl;
	fprintf(stderr, "hpct-run: cannot start rank %d of %d: fork: %s", r, o->n, strerror(e));
	if (e == EAGAIN && getrlimit(RLIMIT_NPROC, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		fprintf(stderr,
		        " (process limit: 'ulimit -u' is %llu; a cgroup's pids.max may apply too)",
		        (unsigned long long)rl.rlim_cur);
	else if (e == EAGAIN)
		fputs(" (process limit reached; see the cgroup's pids.max)", stderr);
	fprintf(stderr, "; stopping the %d rank%s already started\n", r, r == 1 ? "" : "s");
	begin_stop(s, 1, SIGTERM);
}

/* Returns 0, or the exit status when CMD cannot be run at all. */
static int launch(struct sup *s, const struct opts *o, const sigset_t *old_mask)
{
	pid_t self = getpid();
	fflush(NULL);
	for (int r = 0; r < o->n && !s->stopping; r++) {
		/* Rank 0 reports a failed exec through a close-on-exec pipe, so a
		 * wrong command is one message and no other rank is started. */
		int ep[2] = { -1, -1 };
		if (r == 0 && pipe2(ep, O_CLOEXEC) != 0)
			ep[0] = ep[1] = -1;
		pid_t pid = fork();
		int e = errno;
		if (pid == 0) {
			if (ep[0] >= 0)
				close(ep[0]);
			run_rank(o, r, old_mask, self, ep[1]);
		}
		if (ep[1] >= 0)
			close(ep[1]);
		if (pid < 0) {
			if (ep[0] >= 0)
				close(ep[0]);
			fork_failed(s, o, r, e);
			break;
		}
		s->pid[r] = pid;
		s->alive++;
		if (ep[0] >= 0) {
			ssize_t got = read(ep[0], &e, sizeof(e));
			close(ep[0]);
			if (got == (ssize_t)sizeof(e)) {
				fprintf(stderr, "hpct-run: cannot run '%s': %s\n", o->cmd[0],
				        strerror(e));
				waitpid(pid, NULL, 0);
				return e == ENOENT ? 127 : 126;
			}
		}
		/* A rank that fails (or a ^C) while thousands are still being
		 * started stops the launch too. */
		struct timespec zero = { 0, 0 };
		siginfo_t si;
		int sig;
		while ((sig = sigtimedwait(&s->set, &si, &zero)) > 0)
			on_signal(s, sig, &si);
	}
	return 0;
}

static void sigchld_noop(int sig)
{
	(void)sig;
}

int main(int argc, char **argv)
{
	struct opts o = { .nodes = 1 };
	struct sup s = { 0 };
	sigset_t old_mask;
	parse_args(argc, argv, &o);
	if (o.preload) { /* the command is the launcher: it becomes this process */
		set("HPCT_USE_ROOTLESS", "1");
		preload_shim();
		execvp(o.cmd[0], o.cmd);
		fprintf(stderr, "hpct-run: cannot run '%s': %s\n", o.cmd[0], strerror(errno));
		return errno == ENOENT ? 127 : 126;
	}
	set_world_env(&o);

	/* SIGCHLD needs a handler of its own: ignored (as a caller may leave
	 * it) children are reaped by the kernel and waitpid cannot see their
	 * status.  The handler never runs, the signal stays blocked. */
	struct sigaction sa = { .sa_handler = sigchld_noop };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGCHLD, &sa, NULL);
	sigemptyset(&s.set);
	sigaddset(&s.set, SIGCHLD);
	/* A caller that ignores SIGINT (a background job) keeps it ignored. */
	const int fwd[] = { SIGINT, SIGTERM };
	for (size_t i = 0; i < sizeof(fwd) / sizeof(fwd[0]); i++) {
		struct sigaction cur;
		if (sigaction(fwd[i], NULL, &cur) == 0 && cur.sa_handler != SIG_IGN)
			sigaddset(&s.set, fwd[i]);
	}
	sigprocmask(SIG_BLOCK, &s.set, &old_mask);

	s.n = o.n;
	s.keep_going = o.keep_going;
	s.pid = calloc((size_t)o.n, sizeof(*s.pid));
	if (!s.pid) {
		fputs("hpct-run: out of memory\n", stderr);
		return 1;
	}
	double t_end = now() + o.timeout;
	int code = launch(&s, &o, &old_mask);
	if (code == 0)
		code = supervise(&s, &o, t_end);
	free(s.pid);
	return code;
}
