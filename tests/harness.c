#include "tests/harness.h"
#include "bootstrap/base/rss.h"
#include "bootstrap/topo/loopback.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int hpct_test_ports(int slot)
{
	const char *b = getenv("HPCT_TEST_PORT_BASE");
	const char *s = getenv("HPCT_TEST_PORT_STRIDE");
	int base = b ? atoi(b) : 20000;
	int stride = s ? atoi(s) : 300;
	return base + slot * stride;
}

static double mono(void)
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
	double deadline = mono() + timeout_s;
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
		if (mono() > deadline) {
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
			o += (size_t)snprintf(buf + o, sizeof(buf) - o, "rank %d exited %d; ", r,
			                      codes[r]);
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
