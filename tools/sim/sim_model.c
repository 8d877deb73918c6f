/* hpct-bench-sim's model of a machine: its parameters, one table for
 * printing them, writing them to the JSON and reading them back
 * (--model-from); and the measurements of the network and the CPU per
 * event, from loopback TCP between processes.  The launch and the store
 * are measured on real code (sim_calib.c). */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tools/common/bench_measure.h"
#include "tools/sim/sim.h"

struct model sim_M;

/* Every parameter: its name in the JSON, in the JSON's unit, and what it
 * is.  The launch's are for the model check only. */
static const struct param {
	const char *key;
	double *v;
	double unit; /* seconds (or bytes per second) per JSON unit */
	const char *what;
} params[] = {
	{ "lat_us", &sim_M.lat, 1e-6, "one-way latency on the wire, beyond the CPU" },
	{ "bw_MBps", &sim_M.bw, 1e6, "bandwidth of one stream, and of a node's NIC" },
	{ "send_us", &sim_M.c_send, 1e-6, "CPU per message sent" },
	{ "recv_us", &sim_M.c_recv, 1e-6, "CPU per message received" },
	{ "wake_us", &sim_M.c_wake, 1e-6, "CPU per wakeup of a blocked process" },
	{ "conn_us", &sim_M.c_conn, 1e-6, "CPU per connection end (connect or accept)" },
	{ "engine_us", &sim_M.c_engine, 1e-6,
	  "rootless engine: its own CPU per event beyond those, on busy cores" },
	{ "fork_us", &sim_M.c_fork, 1e-6, "launch: the launcher's CPU per rank it forks" },
	{ "start_ms", &sim_M.c_start, 1e-3,
	  "launch: a real rank's CPU from fork to report (world of 1, rootless)" },
	{ "srv_ms", &sim_M.c_srv, 1e-3, "launch: more for a standard rank 0 (its store server)" },
	{ "start_wall_ms", &sim_M.w_start, 1e-3,
	  "launch: that rootless rank's wall time to its report, machine idle" },
	{ "store_req_us", &sim_M.s_req, 1e-6,
	  "store server: CPU per request beyond receiving and answering it" },
	{ "store_key_us", &sim_M.s_key, 1e-6, "store server: per key of an MGET answered at once" },
	{ "store_rescan_us", &sim_M.s_rescan, 1e-6,
	  "store server: per key looked up on a parked MGET's way" },
	{ "store_resume_us", &sim_M.s_resume, 1e-6,
	  "store server: per wake of a parked MGET by its key" },
	{ "client_req_us", &sim_M.s_client, 1e-6,
	  "store client: CPU per request beyond sending it and receiving the answer, busy cores" },
};
#define NPARAMS (sizeof(params) / sizeof(params[0]))

/* Nine digits: a run on a saved model gives that run's figures again. */
void model_json(FILE *f)
{
	fprintf(f, "\"model\":{");
	for (size_t i = 0; i < NPARAMS; i++)
		fprintf(f, "%s\"%s\":%.9g", i ? "," : "", params[i].key,
		        *params[i].v / params[i].unit);
	fprintf(f, "}");
}

void model_print(FILE *f)
{
	for (size_t i = 0; i < NPARAMS; i++) {
		const char *unit = strrchr(params[i].key, '_') + 1;
		fprintf(f, "  %-72s %9.3f %s\n", params[i].what, *params[i].v / params[i].unit,
		        unit);
	}
}

int model_from(const char *file)
{
	FILE *f = fopen(file, "r");
	if (!f) {
		fprintf(stderr, "hpct-bench: --model-from %s: %s\n", file, strerror(errno));
		return -1;
	}
	char text[8192];
	size_t got = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[got] = 0;
	for (size_t i = 0; i < NPARAMS; i++) {
		char pat[40];
		snprintf(pat, sizeof(pat), "\"%s\":", params[i].key);
		const char *at = strstr(text, pat);
		if (!at) {
			fprintf(stderr,
			        "hpct-bench: --model-from %s: no \"%s\" (want the JSON of "
			        "an earlier --scenario sim run)\n",
			        file, params[i].key);
			return -1;
		}
		*params[i].v = atof(at + strlen(pat)) * params[i].unit;
	}
	return 0;
}

/* ---------------------------------------------------- the network */

static double cpu_time(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU per write and per read of 64 bytes, over fd[0] -> fd[1], in
 * batches that never block. */
static void syscall_cpu(int fd[2], double *w, double *r)
{
	unsigned char msg[64] = { 0 };
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
	*w = ts / (per * batches);
	*r = tr / (per * batches);
}

/* The CPU of one wakeup: a ping-pong of 1-byte messages over pipes with a
 * child, both blocking and both held to one core, so that every message
 * switches from one process to the other there and the core is never
 * idle: the time per message is all CPU.  Less a pipe's write and read,
 * what is left is the switch, as a busy machine pays it (an idle core's
 * wake-up latency is in the latency, below). */
static double wake_cpu(void)
{
	int p1[2], p2[2];
	if (pipe(p1) || pipe(p2))
		return -1;
	double pw, pr;
	int both[2] = { p1[1], p1[0] };
	syscall_cpu(both, &pw, &pr);
	cpu_set_t was, one;
	int cpu = sched_getcpu();
	if (sched_getaffinity(0, sizeof(was), &was) != 0 || cpu < 0)
		return -1;
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	if (sched_setaffinity(0, sizeof(one), &one) != 0)
		return -1;
	int rounds = 4000;
	char c = 'x';
	pid_t pid = fork(); /* held to the same core, as its parent */
	if (pid == 0) {
		close(p1[1]);
		close(p2[0]);
		while (read(p1[0], &c, 1) == 1 && write(p2[1], &c, 1) == 1)
			;
		_exit(0);
	}
	close(p1[0]);
	close(p2[1]);
	int ok = pid > 0;
	for (int i = 0; i < 100 && ok; i++) /* both running before the clock starts */
		ok = write(p1[1], &c, 1) == 1 && read(p2[0], &c, 1) == 1;
	double t0 = measure_now();
	for (int i = 0; i < rounds && ok; i++)
		ok = write(p1[1], &c, 1) == 1 && read(p2[0], &c, 1) == 1;
	double per = (measure_now() - t0) / (2.0 * rounds);
	close(p1[1]);
	close(p2[0]);
	if (pid > 0)
		waitpid(pid, NULL, 0);
	sched_setaffinity(0, sizeof(was), &was);
	return ok ? (per > pw + pr ? per - pw - pr : 0) : -1;
}

double sim_rtt(void)
{
	int fd[2];
	if (loopback_pair(fd) < 0)
		return -1;
	int two = sim_machine_cores() > 1;
	cpu_set_t set;
	int self = sched_getaffinity(0, sizeof(set), &set) == 0 ? sched_getcpu() : -1, peer = -1;
	for (int c = 0; self >= 0 && c < CPU_SETSIZE && peer < 0; c++)
		if (CPU_ISSET(c, &set) && (c != self || !two))
			peer = c;
	return echo_round_trip_on(fd[0], fd[0], fd[1], fd[1], 400, self, peer);
}

static int net(void)
{
	int fd[2];
	if (loopback_pair(fd) < 0) {
		perror("hpct-bench-sim: calibration over loopback TCP");
		return -1;
	}
	syscall_cpu(fd, &sim_M.c_send, &sim_M.c_recv);
	close(fd[0]);
	close(fd[1]);
	/* latency: what a TCP round trip between two cores takes beyond
	 * those (a rank has a core of its own in the projections) */
	double rtt = sim_rtt();
	sim_M.c_wake = wake_cpu();
	if (sim_M.c_wake < 0 || rtt < 0) {
		fprintf(stderr, "hpct-bench-sim: calibration: a round trip failed\n");
		return -1;
	}
	sim_M.lat = rtt / 2 - sim_M.c_send - sim_M.c_recv - sim_M.c_wake;
	if (sim_M.lat < 1e-6)
		sim_M.lat = 1e-6;
	/* a connection: connect, accept and close both ends, per end */
	struct sockaddr_in a;
	int l = loopback_listener(&a);
	if (l < 0) {
		perror("hpct-bench-sim: calibration listener");
		return -1;
	}
	double t0 = cpu_time();
	int conns = 300;
	for (int i = 0; i < conns; i++) {
		int s = socket(AF_INET, SOCK_STREAM, 0);
		if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof(a)) < 0)
			return -1;
		int x = accept(l, NULL, NULL);
		close(x);
		close(s);
	}
	sim_M.c_conn = (cpu_time() - t0) / (2.0 * conns);
	close(l);
	/* bandwidth: 32 MB in 64 KB writes from another process */
	if (loopback_pair(fd) < 0)
		return -1;
	size_t total = 32u << 20, chunk = 64u << 10;
	pid_t pid = fork();
	if (pid == 0) {
		close(fd[1]);
		char *buf = calloc(1, chunk);
		for (size_t sent = 0; buf && sent < total;) {
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
	size_t got = 0;
	while (buf && got < total) {
		ssize_t k = read(fd[1], buf, chunk);
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	sim_M.bw = (double)got / (measure_now() - t0);
	free(buf);
	close(fd[1]);
	waitpid(pid, NULL, 0);
	return got == total ? 0 : -1;
}

int calibrate(const char *bench, int port)
{
	/* The launch first, while this process is as small as the launcher
	 * (hpct-bench: 30 mappings, under 2 MB resident): a fork copies the
	 * parent's page tables and the child's exec tears them down, both on
	 * the CPU measured; the store's calibration touches more memory. */
	if (calib_launch(bench, port) < 0)
		return -1;
	if (net() < 0)
		return -1;
	if (calib_store(port + 8) < 0)
		return -1;
	return calib_work(bench, port + 16);
}
