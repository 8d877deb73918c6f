/* hpct-bench-sim's model of a machine: its parameters, calibrated here at
 * start (or read from an earlier run's JSON), and the standard path's store
 * and NCCL's root, which are modelled rather than simulated. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tools/bench_measure.h"
#include "tools/sim.h"

struct model sim_M;

/* ------------------------------------------------- the modelled roots */

/* The standard path: rank 0's store serves everyone in turn.  Each rank
 * connects and says hello, sets its address (64 bytes), fetches the N-1
 * others' ((N-1) x 64 bytes back: what a rank that derives nothing must
 * learn, N^2 bytes through the store in all), adds to the barrier count and
 * waits for the release.  This is also the cold scenario's allgather +
 * barrier.  The store answers the fetches and releases once the last rank
 * has arrived.  With P shared cores the ranks' own work competes with it (a
 * bound: all CPU spread over P). */
struct sim_result std_model(int n, double spread, int cores, unsigned seed)
{
	struct sim_result res = { .n = n };
	double t = 0, item = 64;
	double req = sim_M.c_recv + sim_M.c_send;
	uint64_t rng = seed * 0x9e3779b97f4a7c15ULL + 1;
	double first = -1;
	for (int i = 0; i < n; i++) {
		double a;
		if (sim_M.c_fork > 0) {
			a = i * sim_M.c_fork + sim_M.c_start;
		} else {
			rng ^= rng << 13;
			rng ^= rng >> 7;
			rng ^= rng << 17;
			a = spread * (double)(rng >> 11) / (double)(1ULL << 53);
		}
		if (first < 0 || a < first)
			first = a;
		a += sim_M.c_conn + sim_M.lat; /* its connect reaches the store */
		/* accept; hello, set and the barrier's add answered at once */
		t = (t > a ? t : a) + sim_M.c_conn + 3 * req;
	}
	/* what waited for the last rank: the fetches and the releases */
	t += n * (req + (n - 1) * item / sim_M.bw) + n * req;
	t += sim_M.lat + sim_M.c_wake + sim_M.c_recv;
	if (cores > 0) {
		/* the ranks' own work shares the cores with the store */
		double cpu = n * (sim_M.c_start + 2 * sim_M.c_conn + 5 * (2 * req + sim_M.c_wake)) +
		             n * (n - 1) * item / sim_M.bw;
		if (cpu / cores > t)
			t = cpu / cores;
	}
	res.ms = (t - (first < 0 ? 0 : first)) * 1000;
	res.busy_msgs = 10L * n; /* 5 requests and 5 answers per rank */
	res.busy_conns = n;
	return res;
}

/* NCCL's bootstrap root: accepts every rank's connection and report
 * (address and ring information), then connects to each rank in turn to
 * send it its ring neighbour's. */
struct sim_result nccl_model(int n, double spread, unsigned seed)
{
	struct sim_result res = { .n = n };
	double t = 0, first = -1;
	uint64_t rng = seed * 0x9e3779b97f4a7c15ULL + 1;
	for (int i = 0; i < n; i++) {
		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		double a = spread * (double)(rng >> 11) / (double)(1ULL << 53);
		if (first < 0 || a < first)
			first = a;
		a += sim_M.c_conn + sim_M.lat + sim_M.c_send + sim_M.lat;
		t = (t > a ? t : a) + sim_M.c_conn + sim_M.c_recv;
	}
	t += n * (sim_M.c_conn + sim_M.c_send) + sim_M.lat + sim_M.c_wake + sim_M.c_recv;
	res.ms = (t - first) * 1000;
	res.busy_msgs = 2L * n;
	res.busy_conns = 2L * n;
	return res;
}

/* ------------------------------------------------------- calibration */

static double cpu_time(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void tcp_pair(int fd[2])
{
	if (loopback_pair(fd) < 0) {
		perror("hpct-bench-sim: calibration over loopback TCP");
		exit(1);
	}
}

void calibrate(const char *rank_prog)
{
	int fd[2];
	unsigned char msg[64] = { 0 };
	/* send and receive CPU: batches through one loopback pair */
	tcp_pair(fd);
	double ts = 0, tr = 0;
	int per = 256, batches = 80;
	for (int b = 0; b < batches; b++) {
		double t0 = cpu_time();
		for (int i = 0; i < per; i++)
			if (write(fd[0], msg, sizeof(msg)) != (ssize_t)sizeof(msg))
				exit(1);
		double t1 = cpu_time();
		for (int i = 0; i < per; i++)
			if (read(fd[1], msg, sizeof(msg)) != (ssize_t)sizeof(msg))
				exit(1);
		ts += t1 - t0;
		tr += cpu_time() - t1;
	}
	close(fd[0]);
	close(fd[1]);
	sim_M.c_send = ts / (per * batches);
	sim_M.c_recv = tr / (per * batches);
	/* wakeup: a pipe ping-pong has no network stack in it */
	int p1[2], p2[2];
	if (pipe(p1) || pipe(p2))
		exit(1);
	double wake_rtt = echo_round_trip(p1[1], p2[0], p1[0], p2[1], 400);
	/* latency: what a TCP round trip has beyond those */
	tcp_pair(fd);
	double rtt = echo_round_trip(fd[0], fd[0], fd[1], fd[1], 400);
	if (wake_rtt < 0 || rtt < 0) {
		fprintf(stderr, "hpct-bench-sim: calibration: a round trip failed\n");
		exit(1);
	}
	sim_M.c_wake = wake_rtt / 2;
	sim_M.lat = rtt / 2 - sim_M.c_send - sim_M.c_recv - sim_M.c_wake;
	if (sim_M.lat < 1e-6)
		sim_M.lat = 1e-6;
	/* a connection: connect, accept and close both ends, per end */
	struct sockaddr_in a;
	int l = loopback_listener(&a);
	if (l < 0) {
		perror("hpct-bench-sim: calibration listener");
		exit(1);
	}
	double t0 = cpu_time();
	int conns = 300;
	for (int i = 0; i < conns; i++) {
		int s = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(s, (struct sockaddr *)&a, sizeof(a)) < 0)
			exit(1);
		int x = accept(l, NULL, NULL);
		close(x);
		close(s);
	}
	sim_M.c_conn = (cpu_time() - t0) / (2.0 * conns);
	close(l);
	/* bandwidth: 32 MB in 64 KB writes from another process */
	tcp_pair(fd);
	size_t total = 32u << 20, chunk = 64u << 10;
	pid_t pid = fork();
	if (pid == 0) {
		close(fd[1]);
		char *buf = calloc(1, chunk);
		for (size_t sent = 0; sent < total;) {
			ssize_t k = write(fd[0], buf, chunk);
			if (k <= 0)
				_exit(1);
			sent += (size_t)k;
		}
		_exit(0);
	}
	close(fd[0]);
	char *buf = malloc(chunk);
	t0 = measure_now();
	for (size_t got = 0; got < total;) {
		ssize_t k = read(fd[1], buf, chunk);
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	sim_M.bw = (double)total / (measure_now() - t0);
	free(buf);
	close(fd[1]);
	waitpid(pid, NULL, 0);
	/* process start: a rank program that exits at once, and the fork */
	double st[20], fk[20];
	for (int i = 0; i < 20; i++) {
		t0 = measure_now();
		pid = fork();
		if (pid == 0) {
			int dn = open("/dev/null", O_WRONLY);
			dup2(dn, 2);
			execl(rank_prog, rank_prog, "--as-rank", "none", (char *)NULL);
			_exit(127);
		}
		fk[i] = measure_now() - t0;
		waitpid(pid, NULL, 0);
		st[i] = measure_now() - t0;
	}
	sim_M.c_fork = median_of(fk, 20);
	sim_M.c_start = median_of(st, 20) - sim_M.c_fork;
}

/* The "model" object of an earlier run's JSON, so that runs can be
 * compared on the same parameters; 0, or -1 naming what is missing. */
int model_from(const char *file)
{
	FILE *f = fopen(file, "r");
	if (!f) {
		fprintf(stderr, "hpct-bench: --model-from %s: %s\n", file, strerror(errno));
		return -1;
	}
	char text[4096];
	size_t got = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[got] = 0;
	static const struct {
		const char *key;
		double *to, scale;
	} keys[] = { { "lat_us", &sim_M.lat, 1e-6 },     { "bw_MBps", &sim_M.bw, 1e6 },
		     { "send_us", &sim_M.c_send, 1e-6 }, { "recv_us", &sim_M.c_recv, 1e-6 },
		     { "wake_us", &sim_M.c_wake, 1e-6 }, { "conn_us", &sim_M.c_conn, 1e-6 },
		     { "fork_us", &sim_M.c_fork, 1e-6 }, { "start_ms", &sim_M.c_start, 1e-3 } };
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		char pat[32];
		snprintf(pat, sizeof(pat), "\"%s\":", keys[i].key);
		const char *at = strstr(text, pat);
		if (!at) {
			fprintf(stderr,
			        "hpct-bench: --model-from %s: no \"%s\" (want the JSON of "
			        "an earlier --scenario sim run)\n",
			        file, keys[i].key);
			return -1;
		}
		*keys[i].to = atof(at + strlen(pat)) * keys[i].scale;
	}
	return 0;
}
