/* hpct-bench's torchrun: a torch job's ranks started by the real torchrun
 * (`python -m torch.distributed.run` of the release measured), on one node,
 * with its static rendezvous on loopback.  There the agent serves the store
 * and its workers open client stores to it (TORCHELASTIC_USE_AGENT_STORE=True
 * in 1.13 and in 2.13; 1.13's c10d rendezvous, what --standalone picks, would
 * leave the store to rank 0 again).
 *
 * torchrun starts its workers with close_fds (2.x in a session of their own
 * too), so the pipes a rank launched by this program inherits cannot reach
 * them that way: each worker, first thing, connects to a unix socket of this
 * process in a private directory and is handed the same pipes (SCM_RIGHTS),
 * under the names of the variables that carry them to a direct rank.  From
 * then on the gate, the reports and the release are those pipes, with the
 * same EOFs, as in a direct launch. */
#include <errno.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tools/bench/bench.h"
#include "tools/common/bench_rank.h"

/* The variables that name the pipes a direct rank inherits (bench_launch.c,
 * bench_torch_once): what a worker is handed, under the same names. */
static const char *const pipe_vars[] = {
	"HPCT_BENCH_FD",      "HPCT_BENCH_RELEASE_FD", "HPCT_BENCH_READY_FD",
	"HPCT_BENCH_GATE_FD", "HPCT_BENCH_GATE2_FD",   "HPCT_BENCH_RELEASE2_FD",
};
#define NPIPES (sizeof(pipe_vars) / sizeof(pipe_vars[0]))

/* What the launcher sets for the ranks it forks, which torchrun sets for its
 * workers itself, and hpct's node list, which a user's torchrun job does
 * without (the shim takes one node from torchrun's variables): none is the
 * agent's (a RANK would make it a rank to the shim). */
static const char *const rank_vars[] = {
	"RANK",        "LOCAL_RANK",  "GROUP_RANK", "WORLD_SIZE",          "LOCAL_WORLD_SIZE",
	"MASTER_ADDR", "MASTER_PORT", "HPCT_HOSTS", "HPCT_TASKS_PER_NODE",
};

struct bench_torchrun {
	char dir[64];    /* private: the socket and torchrun's logs */
	int listener;    /* where the workers fetch their pipes */
	pid_t agent;     /* torchrun, a child of this process */
	int agent_fd;    /* its pidfd: readable once it exited */
	int n, got;      /* workers, and those handed their pipes */
	int *worker_fds; /* pidfds of those, for a kill */
};

static int open_pidfd(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)type;
	(void)ftw;
	remove(path);
	return 0;
}

static void destroy(struct bench_torchrun *t)
{
	for (int i = 0; i < t->got; i++)
		close(t->worker_fds[i]);
	if (t->listener >= 0)
		close(t->listener);
	if (t->agent_fd >= 0)
		close(t->agent_fd);
	if (t->dir[0])
		nftw(t->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(t->worker_fds);
	free(t);
}

/* In the forked agent, before exec: none of the pipes (an agent holding a
 * write end would hide the workers' EOF), no rank variable, the socket. */
static void agent_env(const char *sock)
{
	for (size_t i = 0; i < NPIPES; i++) {
		const char *v = getenv(pipe_vars[i]);
		if (v)
			close(atoi(v));
		unsetenv(pipe_vars[i]);
	}
	for (size_t i = 0; i < sizeof(rank_vars) / sizeof(rank_vars[0]); i++)
		unsetenv(rank_vars[i]);
	setenv("HPCT_BENCH_SOCKET", sock, 1);
}

int bench_torchrun_start(const char *python, const char *script, int n, int port,
                         const char *run_id, struct bench_torchrun **out)
{
	struct bench_torchrun *t = calloc(1, sizeof(*t));
	if (!t)
		return -1;
	t->listener = t->agent_fd = -1;
	t->n = n;
	t->worker_fds = calloc((size_t)n, sizeof(int));
	snprintf(t->dir, sizeof(t->dir), "/tmp/hpct-bench-torchrun-XXXXXX");
	if (!t->worker_fds || !mkdtemp(t->dir)) {
		fprintf(stderr, "hpct-bench: torchrun: cannot make a directory %s: %s\n", t->dir,
		        strerror(errno));
		t->dir[0] = 0;
		destroy(t);
		return -1;
	}
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	snprintf(un.sun_path, sizeof(un.sun_path), "%s/pipes", t->dir);
	t->listener = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (t->listener < 0 || bind(t->listener, (struct sockaddr *)&un, sizeof(un)) != 0 ||
	    listen(t->listener, n) != 0) {
		fprintf(stderr, "hpct-bench: torchrun: cannot listen at %s: %s\n", un.sun_path,
		        strerror(errno));
		destroy(t);
		return -1;
	}
	char nproc[16], mport[16], logs[96];
	snprintf(nproc, sizeof(nproc), "%d", n);
	snprintf(mport, sizeof(mport), "%d", port);
	snprintf(logs, sizeof(logs), "%s/logs", t->dir);
	fflush(NULL);
	t->agent = fork();
	if (t->agent == 0) {
		agent_env(un.sun_path);
		/* the underscore spellings, which 1.13 and 2.13 both take;
		 * --redirects/--tee other than 0 (Debian's 1.13 on Python 3.11
		 * fails on 0); a monitor interval of 2.13's default (1.13's 5 s
		 * would only delay each run's end) */
		execl(python, python, "-m", "torch.distributed.run", "--nnodes", "1",
		      "--nproc_per_node", nproc, "--rdzv_backend", "static", "--rdzv_id", run_id,
		      "--master_addr", "127.0.0.1", "--master_port", mport, "--max_restarts", "0",
		      "--monitor_interval", "0.1", "--redirects", "1", "--tee", "1", "--log_dir",
		      logs, script, (char *)NULL);
		fprintf(stderr, "hpct-bench: torchrun: cannot run %s: %s\n", python,
		        strerror(errno));
		_exit(127);
	}
	if (t->agent < 0 || (t->agent_fd = open_pidfd(t->agent)) < 0) {
		fprintf(stderr, "hpct-bench: torchrun: cannot start the agent: %s\n",
		        strerror(errno));
		if (t->agent > 0) {
			kill(t->agent, SIGKILL);
			waitpid(t->agent, NULL, 0);
		}
		destroy(t);
		return -1;
	}
	*out = t;
	return 0;
}

/* Hands one connected worker the pipes; 0 or -1. */
static int hand(struct bench_torchrun *t, int c, const int *fds, const char *names, int nfds)
{
	struct ucred cred;
	socklen_t cl = sizeof(cred);
	if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0)
		return -1;
	/* the worker waits for the answer, so its pid is its own now */
	int pfd = open_pidfd(cred.pid);
	if (pfd < 0)
		return -1;
	union {
		char buf[CMSG_SPACE(NPIPES * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	memset(&ctl, 0, sizeof(ctl));
	struct iovec iov = { .iov_base = (void *)names, .iov_len = strlen(names) };
	struct msghdr m = { .msg_iov = &iov,
		            .msg_iovlen = 1,
		            .msg_control = ctl.buf,
		            .msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int)) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
	memcpy(CMSG_DATA(cm), fds, (size_t)nfds * sizeof(int));
	if (sendmsg(c, &m, MSG_NOSIGNAL) != (ssize_t)iov.iov_len) {
		close(pfd);
		return -1;
	}
	t->worker_fds[t->got++] = pfd;
	return 0;
}

int bench_torchrun_hand_over(struct bench_torchrun *t, double deadline)
{
	int fds[NPIPES], nfds = 0;
	char names[512] = "";
	for (size_t i = 0; i < NPIPES; i++) {
		const char *v = getenv(pipe_vars[i]);
		if (!v)
			continue;
		fds[nfds++] = atoi(v);
		snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s",
		         names[0] ? " " : "", pipe_vars[i]);
	}
	while (t->got < t->n) {
		double left = deadline - mono();
		struct pollfd p[2] = { { .fd = t->listener, .events = POLLIN },
			               { .fd = t->agent_fd, .events = POLLIN } };
		int r = left > 0 ? poll(p, 2, (int)(left * 1000) + 1) : 0;
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			fprintf(stderr,
			        "hpct-bench: torchrun: %d of %d workers came for their pipes "
			        "before the deadline\n",
			        t->got, t->n);
			return -1;
		}
		if (p[1].revents) {
			siginfo_t si = { 0 }; /* left for bench_torchrun_wait to reap */
			waitid(P_PID, (id_t)t->agent, &si, WEXITED | WNOHANG | WNOWAIT);
			fprintf(stderr,
			        "hpct-bench: torchrun's agent (pid %d) %s %d before all its "
			        "workers came for their pipes (%d of %d did)\n",
			        (int)t->agent,
			        si.si_code == CLD_EXITED ? "exited with status"
			                                 : "was killed by signal",
			        si.si_status, t->got, t->n);
			return -1;
		}
		int c = accept4(t->listener, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			continue;
		int rc = hand(t, c, fds, names, nfds);
		int e = errno;
		close(c);
		if (rc < 0) {
			fprintf(stderr,
			        "hpct-bench: torchrun: cannot hand worker %d its pipes: %s\n",
			        t->got, strerror(e));
			return -1;
		}
	}
	return 0;
}

void bench_torchrun_kill(struct bench_torchrun *t)
{
	/* the workers first: the agent may not live to stop them */
	for (int i = 0; i < t->got; i++)
		syscall(SYS_pidfd_send_signal, t->worker_fds[i], SIGKILL, NULL, 0);
	kill(t->agent, SIGKILL);
}

int bench_torchrun_wait(struct bench_torchrun *t, int killed)
{
	int st = 0, rc = 0;
	while (waitpid(t->agent, &st, 0) < 0 && errno == EINTR)
		;
	if (!killed && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
		fprintf(stderr, "hpct-bench: torchrun's agent (pid %d) ended with status %d\n",
		        (int)t->agent, WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
		rc = -1;
	}
	destroy(t);
	return rc;
}
