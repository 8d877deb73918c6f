/* Measuring this machine, shared by hpct-bench (the plot's round trip, the
 * torch scenario's cost of a process start) and hpct-bench-sim (the model's
 * calibration): medians, a loopback TCP pair, the round trip of 1-byte
 * messages to an echoing child process, and fork+exec. */
#ifndef HPCT_BENCH_MEASURE_H
#define HPCT_BENCH_MEASURE_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static inline double measure_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Sorts v and returns its median. */
static inline double median_of(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* A listener on 127.0.0.1 at a port the kernel picks, its address in *a;
 * -1 on failure. */
static inline int loopback_listener(struct sockaddr_in *a)
{
	int l = socket(AF_INET, SOCK_STREAM, 0);
	socklen_t al = sizeof(*a);
	memset(a, 0, sizeof(*a));
	a->sin_family = AF_INET;
	a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (l >= 0 && bind(l, (struct sockaddr *)a, sizeof(*a)) == 0 && listen(l, 512) == 0 &&
	    getsockname(l, (struct sockaddr *)a, &al) == 0)
		return l;
	if (l >= 0)
		close(l);
	return -1;
}

/* Two ends of one loopback TCP connection, Nagle off; 0 or -1. */
static inline int loopback_pair(int fd[2])
{
	struct sockaddr_in a;
	int l = loopback_listener(&a), one = 1;
	if (l < 0)
		return -1;
	fd[0] = socket(AF_INET, SOCK_STREAM, 0);
	if (fd[0] < 0 || connect(fd[0], (struct sockaddr *)&a, sizeof(a)) < 0) {
		if (fd[0] >= 0)
			close(fd[0]);
		close(l);
		return -1;
	}
	fd[1] = accept(l, NULL, NULL);
	close(l);
	if (fd[1] < 0) {
		close(fd[0]);
		return -1;
	}
	setsockopt(fd[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd[1], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return 0;
}

/* Median round trip, seconds, of `reps` 1-byte messages (after 20 to warm
 * up) written to `out` and read back from `in`, echoed by a child process
 * that reads `peer_in` and writes `peer_out` (a socket: the same fd both
 * ways).  With cpu_self and cpu_peer >= 0, this process and the echo run
 * on those cores (this process's own set is restored after): on a VM a
 * round trip between two cores can take 3 times one within a core, and
 * where the scheduler puts them varies from run to run.  Every fd given is
 * closed on return; -1 if it could not be measured. */
static inline double echo_round_trip_on(int out, int in, int peer_in, int peer_out, int reps,
                                        int cpu_self, int cpu_peer)
{
	cpu_set_t was, set;
	int pinned = cpu_self >= 0 && cpu_peer >= 0 && sched_getaffinity(0, sizeof(was), &was) == 0;
	pid_t pid = fork();
	char c = 'x';
	if (pid == 0) {
		if (pinned) {
			CPU_ZERO(&set);
			CPU_SET(cpu_peer, &set);
			sched_setaffinity(0, sizeof(set), &set);
		}
		close(out); /* else the echo's read never sees the end */
		if (in != out)
			close(in);
		while (read(peer_in, &c, 1) == 1 && write(peer_out, &c, 1) == 1)
			;
		_exit(0);
	}
	if (pinned) {
		CPU_ZERO(&set);
		CPU_SET(cpu_self, &set);
		sched_setaffinity(0, sizeof(set), &set);
	}
	close(peer_in);
	if (peer_out != peer_in)
		close(peer_out);
	double *t = calloc((size_t)reps, sizeof(double)), m = -1;
	int ok = pid > 0 && t;
	for (int i = -20; i < reps && ok; i++) {
		double t0 = measure_now();
		ok = write(out, &c, 1) == 1 && read(in, &c, 1) == 1;
		if (ok && i >= 0)
			t[i] = measure_now() - t0;
	}
	close(out);
	if (in != out)
		close(in);
	if (pid > 0)
		waitpid(pid, NULL, 0);
	if (pinned)
		sched_setaffinity(0, sizeof(was), &was);
	if (ok)
		m = median_of(t, reps);
	free(t);
	return m;
}

/* The same wherever the scheduler puts the two. */
static inline double echo_round_trip(int out, int in, int peer_in, int peer_out, int reps)
{
	return echo_round_trip_on(out, in, peer_in, peer_out, reps, -1, -1);
}

/* Median time, seconds, of `reps` fork + exec of `prog` (run with no
 * arguments) until waitpid has its exit, after 10 to warm up; -1 if it could
 * not be measured. */
static inline double fork_exec_cost(const char *prog, int reps)
{
	double *t = calloc((size_t)reps, sizeof(double)), m = -1;
	int ok = t != NULL;
	for (int i = -10; i < reps && ok; i++) {
		int st;
		double t0 = measure_now();
		pid_t pid = fork();
		if (pid == 0) {
			execl(prog, prog, (char *)NULL);
			_exit(127);
		}
		ok = pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) &&
		     WEXITSTATUS(st) == 0;
		if (ok && i >= 0)
			t[i] = measure_now() - t0;
	}
	if (ok)
		m = median_of(t, reps);
	free(t);
	return m;
}

/* Loopback TCP bandwidth, bytes/s, median of `reps`: `pairs` pairs of
 * processes at once, in each a writer sending `bytes` in writes of `chunk`
 * to a reader that reads them (chunk at a time), all started together and
 * timed until the last has exited; the bytes of all pairs over that time.
 * -1 if it could not be measured. */
static inline double loopback_bandwidth(int pairs, size_t bytes, size_t chunk, int reps)
{
	double *t = calloc((size_t)reps, sizeof(double)), m = -1;
	pid_t *pids = calloc((size_t)pairs * 2, sizeof(pid_t));
	int ok = t && pids;
	for (int i = 0; i < reps && ok; i++) {
		int go[2], fd[2], np = 0;
		ok = pipe(go) == 0;
		for (int p = 0; p < pairs && ok; p++) {
			ok = loopback_pair(fd) == 0;
			for (int side = 0; side < 2 && ok; side++) {
				pid_t pid = fork();
				if (pid == 0) {
					char c, *buf = malloc(chunk);
					close(go[1]);
					close(fd[!side]);
					memset(buf, side, chunk);
					while (read(go[0], &c, 1) < 0)
						;
					size_t done = 0;
					while (buf && done < bytes) {
						size_t want =
						        bytes - done < chunk ? bytes - done : chunk;
						ssize_t k = side ? read(fd[1], buf, want)
						                 : write(fd[0], buf, want);
						if (k <= 0)
							_exit(1);
						done += (size_t)k;
					}
					_exit(buf ? 0 : 1);
				}
				ok = pid > 0;
				if (ok)
					pids[np++] = pid;
			}
			close(fd[0]);
			close(fd[1]);
		}
		double t0 = measure_now();
		close(go[1]);
		close(go[0]);
		for (int k = 0; k < np; k++) {
			int st;
			ok = waitpid(pids[k], &st, 0) == pids[k] && WIFEXITED(st) &&
			     WEXITSTATUS(st) == 0 && ok;
		}
		t[i] = (double)bytes * pairs / (measure_now() - t0);
	}
	if (ok)
		m = median_of(t, reps);
	free(t);
	free(pids);
	return m;
}

/* The loopback round trip of a 1-byte message between two processes over
 * TCP, median of 200 after a warm-up: the model floor's unit.  -1 if it
 * could not be measured. */
static inline double bench_rtt_ms(void)
{
	int fd[2];
	if (loopback_pair(fd) < 0)
		return -1;
	double s = echo_round_trip(fd[0], fd[0], fd[1], fd[1], 200);
	return s < 0 ? -1 : s * 1000;
}

/* fork + exec of /bin/true + waitpid, median of 200 after a warm-up: what
 * starting one process costs here; -1 if it could not be measured. */
static inline double bench_fork_exec_ms(void)
{
	double s = fork_exec_cost("/bin/true", 200);
	return s < 0 ? -1 : s * 1000;
}

#endif
