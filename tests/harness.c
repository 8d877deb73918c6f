#include "tests/harness.h"
#include "bootstrap/base/rss.h"
#include "bootstrap/topo/loopback.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int hpct_test_ports(int slot)
{
	const char *b = getenv("HPCT_TEST_PORT_BASE");
	const char *s = getenv("HPCT_TEST_PORT_STRIDE");
	int base = b ? atoi(b) : 18000;
	int stride = s ? atoi(s) : 200;
	return base + slot * stride;
}

double ht_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int ht_spawn(int n, ht_env_fn env, ht_rank_fn fn, void *arg, double timeout_s, const int *delay_ms,
             int *codes)
{
	pid_t *pids = calloc((size_t)n, sizeof(*pids));
	fflush(NULL);
	for (int r = 0; r < n; r++) {
		codes[r] = 255;
		pid_t pid = fork();
		if (pid == 0) {
			if (env)
				env(r, arg);
			if (delay_ms && delay_ms[r] > 0)
				usleep((useconds_t)delay_ms[r] * 1000);
			_exit(fn(r, arg) & 0xff);
		}
		pids[r] = pid;
	}
	double deadline = ht_now() + timeout_s;
	int left = n;
	while (left > 0) {
		int status;
		pid_t pid = waitpid(-1, &status, WNOHANG);
		if (pid > 0) {
			for (int r = 0; r < n; r++) {
				if (pids[r] != pid)
					continue;
				codes[r] = WIFEXITED(status) ? WEXITSTATUS(status)
				                             : 128 + WTERMSIG(status);
				pids[r] = 0;
				left--;
			}
			continue;
		}
		if (ht_now() > deadline) {
			for (int r = 0; r < n; r++)
				if (pids[r] > 0)
					kill(pids[r], SIGKILL);
			for (int r = 0; r < n; r++) {
				if (pids[r] > 0) {
					waitpid(pids[r], &status, 0);
					codes[r] = 255;
					left--;
				}
			}
			break;
		}
		usleep(2000);
	}
	free(pids);
	int bad = 0;
	for (int r = 0; r < n; r++)
		bad += codes[r] != 0;
	return bad;
}

void ht_setenv_world(int r, int n, int nodes, int port_base, int rootless, double timeout_s)
{
	char buf[4096] = "";
	int per = layout_max_local(n, nodes), node, local;
	layout_place(n, nodes, r, &node, &local);
	layout_tasks(buf, sizeof(buf), n, nodes);
	setenv("HPCT_TASKS_PER_NODE", buf, 1);
	layout_hosts(buf, sizeof(buf), nodes);
	setenv("HPCT_HOSTS", buf, 1);
	snprintf(buf, sizeof(buf), "%d", r);
	setenv("RANK", buf, 1);
	snprintf(buf, sizeof(buf), "%d", local);
	setenv("LOCAL_RANK", buf, 1);
	snprintf(buf, sizeof(buf), "%d", node);
	setenv("GROUP_RANK", buf, 1);
	snprintf(buf, sizeof(buf), "%d", n);
	setenv("WORLD_SIZE", buf, 1);
	setenv("MASTER_ADDR", "127.0.0.1", 1);
	snprintf(buf, sizeof(buf), "%d", port_base);
	setenv("MASTER_PORT", buf, 1);
	snprintf(buf, sizeof(buf), "%d", port_base + 1);
	setenv("HPCT_PORT_BASE", buf, 1);
	snprintf(buf, sizeof(buf), "%d", 2 * per + 1 > 16 ? 2 * per : 16);
	setenv("HPCT_PORT_RANGE", buf, 1);
	snprintf(buf, sizeof(buf), "test-%d", port_base);
	setenv("HPCT_JOB_ID", buf, 1);
	setenv("HPCT_USE_ROOTLESS", rootless ? "1" : "0", 1);
	snprintf(buf, sizeof(buf), "%g", timeout_s);
	setenv("HPCT_TIMEOUT", buf, 1);
}

const char *ht_describe(const int *codes, int n)
{
	static char buf[1024];
	size_t o = 0;
	buf[0] = 0;
	for (int r = 0; r < n && o + 40 < sizeof(buf); r++)
		if (codes[r] != 0)
			o += (size_t)snprintf(buf + o, sizeof(buf) - o,
			                      codes[r] == 255
			                              ? "rank %d hung (killed at the deadline); "
			                              : "rank %d exited %d; ",
			                      r, codes[r]);
	return o ? buf : "all ranks exited 0";
}

int ht_open_fds(void)
{
	int n = 0;
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	if (d)
		closedir(d);
	return n - 1; /* the directory's own */
}

long ht_rss_kb(void)
{
	return hpct_self_rss_kb();
}

int ht_event_init(struct ht_event *ev)
{
	if (pipe(ev->fd) != 0)
		return -1;
	/* several processes may wait on one event: a token another took
	 * must not leave this one blocked in read */
	fcntl(ev->fd[0], F_SETFL, fcntl(ev->fd[0], F_GETFL) | O_NONBLOCK);
	return 0;
}

void ht_event_destroy(struct ht_event *ev)
{
	close(ev->fd[0]);
	close(ev->fd[1]);
}

void ht_event_post(struct ht_event *ev, int n)
{
	char t[64] = { 0 };
	while (n > 0) {
		ssize_t w = write(ev->fd[1], t, (size_t)(n < 64 ? n : 64));
		if (w > 0)
			n -= (int)w;
		else if (errno != EINTR)
			return;
	}
}

int ht_event_try(struct ht_event *ev)
{
	char t;
	return read(ev->fd[0], &t, 1) == 1;
}

int ht_event_wait(struct ht_event *ev, int n, double timeout_s)
{
	double deadline = ht_now() + timeout_s;
	while (n > 0) {
		if (ht_event_try(ev)) {
			n--;
			continue;
		}
		double left = deadline - ht_now();
		if (left <= 0)
			return -1;
		struct pollfd p = { .fd = ev->fd[0], .events = POLLIN };
		poll(&p, 1, (int)(left * 1000) + 1);
	}
	return 0;
}

int ht_wait_for(int (*cond)(void *arg), void *arg, double timeout_s)
{
	double deadline = ht_now() + timeout_s;
	while (!cond(arg)) {
		if (ht_now() > deadline)
			return -1;
		usleep(1000); /* a poll interval, not an ordering */
	}
	return 0;
}

int ht_gettid(void)
{
	return (int)syscall(SYS_gettid);
}

int ht_thread_sleeps(int tid)
{
	char p[64], buf[512];
	snprintf(p, sizeof(p), "/proc/self/task/%d/stat", tid);
	FILE *f = fopen(p, "r");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	/* "tid (comm) S ...": comm may hold spaces and parentheses */
	const char *e = strrchr(buf, ')');
	return e && e[1] == ' ' && (e[2] == 'S' || e[2] == 'D');
}
