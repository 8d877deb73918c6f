/* hpct-bench-sim's calibration on real code: a real rank's start, as
 * hpct-bench launches its ranks, and the standard path's real store server
 * (bootstrap/stdpath) under the requests its collectives make.  What they
 * cost becomes the model's launch and store parameters (sim.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap/base/bytes.h"
#include "bootstrap/base/util.h"
#include "bootstrap/stdpath/stdpath.h"
#include "tools/common/bench_env.h"
#include "tools/common/bench_measure.h"
#include "tools/common/bench_rank.h"
#include "tools/sim/sim.h"

static double clock_s(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* --------------------------------------------------------- the launch */

/* The CPU a process has used so far, s, from the scheduler's own count of
 * each of its threads (/proc/PID/task/TID/schedstat, nanoseconds on the
 * CPU first); -1 when the kernel does not keep it. */
static double proc_cpu_of(pid_t pid)
{
	char dir[64];
	snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	double sum = 0;
	int any = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char path[384];
		snprintf(path, sizeof(path), "%s/%s/schedstat", dir, e->d_name);
		FILE *f = fopen(path, "r");
		unsigned long long ns;
		if (f && fscanf(f, "%llu", &ns) == 1) {
			sum += (double)ns * 1e-9;
			any = 1;
		}
		if (f)
			fclose(f);
	}
	closedir(d);
	return any ? sum : -1;
}

/* The environment bench_launch.c gives the ranks of a world of n on one
 * node, 127.0.0.1: its rendezvous (standard) at port, its listeners
 * (rootless) from port + 1. */
static void world_env(int rootless, int port, int n, int tag)
{
	char job[64];
	snprintf(job, sizeof(job), "sim-calibration-%d-%d", (int)getpid(), tag);
	bench_world_env(n, 1, rootless, port, job, 0, 20);
	unsetenv("HPCT_TRANSPORT");
	unsetenv("HPCT_BENCH_READY_FD");
	unsetenv("HPCT_BENCH_GATE_FD");
}

#define MAX_WORLD 32

/* A real world of n ranks (hpct-bench --as-rank cold: join, a world
 * allgather of 64 bytes, a barrier), forked in turn as hpct-bench launches
 * ranks.  Once every rank has reported: the CPU they used so far, all
 * together, and the wall time from the first fork to the last report.
 * 0, or -1 with the reason printed. */
static int run_world(const char *bench, int rootless, int port, int n, int tag, double *cpu,
                     double *wall)
{
	int rep[2], rel[2];
	pid_t pids[MAX_WORLD];
	if (pipe(rep) < 0)
		return -1;
	if (pipe2(rel, O_CLOEXEC) < 0 || fcntl(rel[0], F_SETFD, 0) < 0) {
		close(rep[0]);
		close(rep[1]);
		return -1;
	}
	world_env(rootless, port, n, tag);
	setenv_int("HPCT_BENCH_FD", rep[1]);
	setenv_int("HPCT_BENCH_RELEASE_FD", rel[0]);
	double t0 = measure_now(), last = 0;
	int made = 0, got = 0, ok = 1;
	for (; made < n; made++) {
		setenv_int("RANK", made);
		setenv_int("LOCAL_RANK", made);
		setenv("GROUP_RANK", "0", 1);
		pid_t pid = fork();
		if (pid == 0) {
			close(rep[0]);
			execl(bench, bench, "--as-rank", "cold", (char *)NULL);
			_exit(127);
		}
		if (pid < 0)
			break;
		pids[made] = pid;
	}
	close(rep[1]);
	close(rel[0]);
	ok = made == n;
	double deadline = measure_now() + 20;
	while (ok && got < n) {
		struct record rec;
		struct pollfd p = { .fd = rep[0], .events = POLLIN };
		int left = (int)((deadline - measure_now()) * 1000);
		ok = left > 0 && poll(&p, 1, left) == 1 &&
		     read(rep[0], &rec, sizeof(rec)) == (ssize_t)sizeof(rec) && rec.rc == 0;
		if (ok && rec.done > last)
			last = rec.done;
		got += ok;
	}
	*cpu = 0;
	for (int i = 0; ok && i < made; i++) { /* each waits for the release now */
		double c = proc_cpu_of(pids[i]);
		ok = c >= 0;
		*cpu += c;
	}
	*wall = last - t0;
	close(rel[1]);
	close(rep[0]);
	int clean = 1;
	for (int i = 0; i < made; i++) {
		int st = 0;
		if (!ok)
			kill(pids[i], SIGKILL);
		waitpid(pids[i], &st, 0);
		clean &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
	}
	if (!ok || !clean) {
		fprintf(stderr,
		        "hpct-bench-sim: calibration: the %d %s rank(s) of a world of %d (%s "
		        "--as-rank cold, port %d) did not all report and exit cleanly (or this "
		        "kernel keeps no /proc/PID/task/*/schedstat)\n",
		        n, rootless ? "rootless" : "standard", n, bench, port);
		return -1;
	}
	return 0;
}

#define LAUNCHES 15
#define FORKS    64

int calib_launch(const char *bench, int port)
{
	/* a real rank's start on each path, alternating, medians */
	double cpu[2][LAUNCHES], wall[2][LAUNCHES];
	for (int i = 0; i < LAUNCHES; i++)
		for (int p = 0; p < 2; p++)
			if (run_world(bench, p == 0, port + 4 * p, 1, i, &cpu[p][i], &wall[p][i]) <
			    0)
				return -1;
	double rootless_cpu = median_of(cpu[0], LAUNCHES), std_cpu = median_of(cpu[1], LAUNCHES);
	sim_M.c_start = rootless_cpu;
	sim_M.c_srv = std_cpu > rootless_cpu ? std_cpu - rootless_cpu : 0;
	sim_M.w_start = median_of(wall[0], LAUNCHES);
	/* The launcher's CPU per rank: FORKS forks in a row as bench_launch.c
	 * makes them (three variables set, fork), counted on this thread, so
	 * the copy-on-write faults the parent takes after each fork are in;
	 * the children exit at once and are reaped after. */
	pid_t pids[FORKS];
	int made = 0;
	double c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
	for (int i = 0; i < FORKS; i++) {
		setenv_int("RANK", i);
		setenv_int("LOCAL_RANK", i);
		setenv_int("GROUP_RANK", 0);
		pid_t pid = fork();
		if (pid == 0) {
			int dn = open("/dev/null", O_WRONLY);
			dup2(dn, 2);
			execl(bench, bench, "--as-rank", "none", (char *)NULL);
			_exit(127);
		}
		if (pid < 0)
			break;
		pids[made++] = pid;
	}
	double forks_cpu = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
	for (int i = 0; i < made; i++)
		waitpid(pids[i], NULL, 0);
	if (made < FORKS) {
		fprintf(stderr, "hpct-bench-sim: calibration: fork failed: %s\n", strerror(errno));
		return -1;
	}
	sim_M.c_fork = forks_cpu / FORKS;
	return 0;
}

/* ------------------------------------------- the work, on a busy machine */

#define WORK_WORLD 32 /* real ranks of each path, sharing this machine's cores */

int sim_machine_cores(void)
{
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
		return CPU_COUNT(&set);
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

/* The CPU a run of `path` costs simulated on this machine's cores with
 * the parameters so far: its ranks' beyond their starts, and its root's. */
static struct sim_result simulated(int path)
{
	struct sim_run run = { .path = &sim_paths[path],
		               .n = WORK_WORLD,
		               .cold = 1,
		               .cores = sim_machine_cores(),
		               .per_node = WORK_WORLD,
		               .launch = 1,
		               .seed = 1 };
	double (*clock_was)(void) = hpct__clock;
	hpct__clock = sim_clock;
	struct sim_result r = simulate(&run);
	hpct__clock = clock_was;
	return r;
}

int calib_work(const char *bench, int port)
{
	/* The transport charges a message's send and receive, a connection's
	 * ends and a wakeup, as measured between two processes on an idle
	 * machine.  Ranks on busy cores pay more per event (their caches
	 * refilled after every switch), and the engine and the store's client
	 * do work of their own per event.  Both measured here: the CPU real
	 * ranks of a world of 32 use for the cold start's work beyond their
	 * starts (a world of 1's CPU each, and rank 0's server), less what the
	 * same run costs simulated, per event of that run: per engine event
	 * (a send, a connect, an event handled) for the rootless path, per
	 * request for the standard path's clients.  Medians of 5 runs each:
	 * a difference of two sums of CPU moves more than either. */
	double real[2][5];
	for (int i = 0; i < 5; i++)
		for (int p = 0; p < 2; p++) {
			double cpu, wall;
			if (run_world(bench, p == 0, port + 80 * p, WORK_WORLD, 100 + 2 * i + p,
			              &cpu, &wall) < 0)
				return -1;
			real[p][i] = cpu - WORK_WORLD * sim_M.c_start - (p ? sim_M.c_srv : 0);
		}
	sim_M.c_engine = sim_M.s_client = 0;
	struct sim_result r = simulated(SIM_ROOTLESS), s = simulated(SIM_STANDARD);
	if (r.failed || s.failed || r.engine_events <= 0 || s.root_requests <= 0) {
		fprintf(stderr, "hpct-bench-sim: calibration: simulated ranks did not finish\n");
		return -1;
	}
	double extra = median_of(real[0], 5) - r.cpu_ranks;
	sim_M.c_engine = extra > 0 ? extra / (double)r.engine_events : 0;
	extra = median_of(real[1], 5) - s.cpu_ranks - s.cpu_root;
	sim_M.s_client = extra > 0 ? extra / (double)s.root_requests : 0;
	return 0;
}

/* ---------------------------------------------------------- the store */

#define KEYS  2048 /* in one MGET */
#define CALLS 2000 /* requests timed one by one */

struct waiter {
	struct hpct_std_client *c;
	const char *const *keys;
	void *const *bufs;
	const size_t *lens;
	int rc;
	double cpu; /* this thread's */
};

static void *mget_thread(void *arg)
{
	struct waiter *w = arg;
	double c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
	w->rc = hpct__std_mget(w->c, w->keys, KEYS, w->bufs, w->lens, hpct__now() + 20);
	w->cpu = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
	return NULL;
}

/* The keys of one round, as coll.c names an allgather's. */
static void name_keys(char (*names)[64], const char **keys, int round)
{
	for (int i = 0; i < KEYS; i++) {
		snprintf(names[i], 64, "e0/g%016" PRIx64 "/%d/ag/%d/-1", (uint64_t)0x5ca1ab1e,
		         round, i);
		keys[i] = names[i];
	}
}

/* An MGET of every key of `round` from another thread, parked on key 0:
 * keys [later, KEYS) are set before it, [0, later) in order after it
 * parked.  The server's CPU over the MGET and those `later` SETs, in s, or
 * -1. */
static double parked_mget(struct hpct_std_server *srv, struct hpct_std_client *setter,
                          struct hpct_std_client *getter, int round, int later)
{
	static char names[KEYS][64];
	static const char *keys[KEYS];
	static unsigned char vals[KEYS][64];
	static void *bufs[KEYS];
	static size_t lens[KEYS];
	unsigned char item[64] = { 0 };
	name_keys(names, keys, round);
	for (int i = 0; i < KEYS; i++) {
		bufs[i] = vals[i];
		lens[i] = sizeof(vals[i]);
	}
	double dl = hpct__now() + 20;
	for (int i = later; i < KEYS; i++)
		if (hpct__std_set(setter, keys[i], item, sizeof(item), 1, dl) != 0)
			return -1;
	size_t before = hpct__std_server_keys(srv);
	struct waiter w = { getter, keys, bufs, lens, -1, 0 };
	pthread_t th;
	double p0 = clock_s(CLOCK_PROCESS_CPUTIME_ID), s0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
	if (pthread_create(&th, NULL, mget_thread, &w) != 0)
		return -1;
	/* parked: the key it waits on is in the table, absent */
	while (hpct__std_server_keys(srv) == before && hpct__now() < dl)
		usleep(100);
	int rc = 0;
	for (int i = 0; i < later && rc == 0; i++)
		rc = hpct__std_set(setter, keys[i], item, sizeof(item), 1, dl);
	pthread_join(th, NULL);
	double self = clock_s(CLOCK_THREAD_CPUTIME_ID) - s0;
	double all = clock_s(CLOCK_PROCESS_CPUTIME_ID) - p0;
	return rc == 0 && w.rc == 0 ? all - self - w.cpu : -1;
}

/* The same, every key set after the MGET parked, back to back from the
 * raw client (below). */
static int raw_sets(int fd, int rank, const char *const *keys, int n, uint32_t readers);
static double parked_mget_raw(struct hpct_std_server *srv, int raw, struct hpct_std_client *getter,
                              int round)
{
	static char names[KEYS][64];
	static const char *keys[KEYS];
	static unsigned char vals[KEYS][64];
	static void *bufs[KEYS];
	static size_t lens[KEYS];
	name_keys(names, keys, round);
	for (int i = 0; i < KEYS; i++) {
		bufs[i] = vals[i];
		lens[i] = sizeof(vals[i]);
	}
	double dl = hpct__now() + 20;
	size_t before = hpct__std_server_keys(srv);
	struct waiter w = { getter, keys, bufs, lens, -1, 0 };
	pthread_t th;
	if (pthread_create(&th, NULL, mget_thread, &w) != 0)
		return -1;
	while (hpct__std_server_keys(srv) == before && hpct__now() < dl)
		usleep(100);
	/* the waiter's own CPU before this (its request) is small beside
	 * the window's, and subtracted with the rest of its */
	double p0 = clock_s(CLOCK_PROCESS_CPUTIME_ID), s0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
	int rc = raw_sets(raw, 2, keys, KEYS, 1);
	pthread_join(th, NULL);
	double self = clock_s(CLOCK_THREAD_CPUTIME_ID) - s0;
	double all = clock_s(CLOCK_PROCESS_CPUTIME_ID) - p0;
	return rc == 0 && w.rc == 0 ? all - self - w.cpu : -1;
}

/* A client of our own on the store's wire (stdpath.h), for what the real
 * client does not do: many requests sent before the first answer, so that
 * the server never waits between them.  The connected socket, or -1. */
static int raw_client(int port, int rank, int size, uint64_t job)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	unsigned char hello[21], st[4];
	hello[0] = HPCT_STD_HELLO;
	hpct__put32(hello + 1, (uint32_t)rank);
	hpct__put32(hello + 5, HPCT_STD_MAGIC);
	hpct__put32(hello + 9, (uint32_t)size);
	hpct__put64(hello + 13, job);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    write(fd, hello, sizeof(hello)) != (ssize_t)sizeof(hello) || read(fd, st, 4) != 4 ||
	    hpct__get32(st) != 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* SETs of keys[0..n) (64 bytes, `readers` reads each), all sent, then all
 * their answers read; 0 or -1. */
static int raw_sets(int fd, int rank, const char *const *keys, int n, uint32_t readers)
{
	size_t cap = (size_t)n * (1 + 4 + 4 + 64 + 4 + 4 + 64), len = 0;
	unsigned char *buf = malloc(cap), item[64] = { 0 };
	if (!buf)
		return -1;
	for (int i = 0; i < n; i++) {
		uint32_t kl = (uint32_t)strlen(keys[i]);
		buf[len] = HPCT_STD_SET;
		hpct__put32(buf + len + 1, (uint32_t)rank);
		hpct__put32(buf + len + 5, kl);
		memcpy(buf + len + 9, keys[i], kl);
		len += 9 + kl;
		hpct__put32(buf + len, readers);
		hpct__put32(buf + len + 4, sizeof(item));
		memcpy(buf + len + 8, item, sizeof(item));
		len += 8 + sizeof(item);
	}
	int ok = 1;
	for (size_t off = 0; ok && off < len;) {
		ssize_t k = write(fd, buf + off, len - off);
		ok = k > 0;
		off += ok ? (size_t)k : 0;
	}
	size_t want = (size_t)n * 4, got = 0;
	while (ok && got < want) {
		ssize_t k = read(fd, buf + got, want - got);
		ok = k > 0;
		got += ok ? (size_t)k : 0;
	}
	for (size_t i = 0; ok && i < want; i += 4)
		ok = hpct__get32(buf + i) == 0;
	free(buf);
	return ok ? 0 : -1;
}

int calib_store(int port)
{
	struct hpct_std_limits lim;
	if (hpct__std_limits_default(3, &lim) != 0)
		return -1;
	lim.mget_keys = KEYS + 64;
	lim.mget_key_bytes = (size_t)lim.mget_keys * 512;
	lim.store_bytes = 256u << 20;
	lim.rank_bytes = lim.store_bytes;
	lim.store_keys = 8 * KEYS;
	uint64_t job = 0x73696d63616c6962ULL;
	struct hpct_std_server *srv = NULL;
	struct hpct_std_client *a = NULL, *b = NULL;
	int raw = -1;
	double dl = hpct__now() + 20;
	int rc = hpct__std_server_start_limits("127.0.0.1", port, 3, job, NULL, &lim, &srv);
	if (rc == 0)
		rc = hpct__std_client_connect("127.0.0.1", port, 0, 3, job, NULL, dl, &a);
	if (rc == 0)
		rc = hpct__std_client_connect("127.0.0.1", port, 1, 3, job, NULL, dl, &b);
	if (rc == 0 && (raw = raw_client(port, 2, 3, job)) < 0)
		rc = -1;
	if (rc != 0) {
		fprintf(stderr, "hpct-bench-sim: calibration: the store at 127.0.0.1:%d: %s\n",
		        port, hpct_last_error());
		goto out;
	}
	/* a request alone: ADDs one after the other, as a rank makes them;
	 * the server's CPU is what the process used beyond this thread's */
	int64_t v;
	double p0 = clock_s(CLOCK_PROCESS_CPUTIME_ID), s0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
	for (int i = 0; i < CALLS && rc == 0; i++)
		rc = hpct__std_add(a, "e0/g000000005ca1ab1e/0/bar/0/0", 1, &v, dl);
	double self = clock_s(CLOCK_THREAD_CPUTIME_ID) - s0;
	double server = clock_s(CLOCK_PROCESS_CPUTIME_ID) - p0 - self;
	double q = server / CALLS; /* a request as the server sees it, all of it */
	/* an MGET of KEYS keys that are all there: per key */
	static char names[KEYS][64];
	static const char *keys[KEYS];
	static unsigned char vals[KEYS][64];
	static void *bufs[KEYS];
	static size_t lens[KEYS];
	for (int i = 0; i < KEYS; i++) {
		bufs[i] = vals[i];
		lens[i] = sizeof(vals[i]);
	}
	double at_once[3], once[3], pipe_set[3], resumed[3];
	for (int round = 0; round < 3 && rc == 0; round++) {
		name_keys(names, keys, round);
		rc = raw_sets(raw, 2, keys, KEYS, 1);
		p0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
		s0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
		if (rc == 0)
			rc = hpct__std_mget(b, keys, KEYS, bufs, lens, dl);
		self = clock_s(CLOCK_THREAD_CPUTIME_ID) - s0;
		at_once[round] = (clock_s(CLOCK_PROCESS_CPUTIME_ID) - p0 - self - q) / KEYS;
	}
	if (rc != 0)
		goto failed;
	sim_M.s_key = median_of(at_once, 3);
	for (int i = 0; i < 3; i++) {
		/* parked on its first key, the others there: every key looked up
		 * on the way and again before the answer, after one SET */
		once[i] = parked_mget(srv, a, b, 10 + i, 1);
		/* SETs back to back, none waited on: a SET's own cost there */
		name_keys(names, keys, 20 + i);
		p0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
		s0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
		rc = raw_sets(raw, 2, keys, KEYS, 1);
		pipe_set[i] = (clock_s(CLOCK_PROCESS_CPUTIME_ID) - p0 -
		               (clock_s(CLOCK_THREAD_CPUTIME_ID) - s0)) /
		              KEYS;
		if (rc == 0)
			rc = hpct__std_mget(b, keys, KEYS, bufs, lens, dl); /* gone again */
		/* the same SETs, each waking an MGET parked on its key */
		resumed[i] = rc == 0 ? parked_mget_raw(srv, raw, b, 30 + i) : -1;
		if (once[i] < 0 || resumed[i] < 0 || rc != 0)
			goto failed;
	}
	/* A request's own work, beyond receiving it and answering (which the
	 * transport charges): a SET's, sent back to back with others, so
	 * that the receives and sends it shares with them are small.
	 * once:    2q + resume + (K+1) rescan + peek + K key
	 * resumed: K set + K resume + (2K-1) rescan + peek + K key + the answer
	 * with q a request sent alone (its receive, answer and the server's
	 * wakeup in), peek a receive's CPU, the answer a send's; the one
	 * resume against K rescans is left out of the first */
	sim_M.s_req = median_of(pipe_set, 3);
	double d = median_of(once, 3) - 2 * q - sim_M.c_recv - KEYS * sim_M.s_key;
	sim_M.s_rescan = d > 0 ? d / (KEYS + 1) : 0;
	if (sim_M.s_rescan > sim_M.s_key)
		sim_M.s_rescan = sim_M.s_key; /* a lookup is part of a key's whole cost */
	double e = median_of(resumed, 3) - KEYS * median_of(pipe_set, 3) - sim_M.c_recv -
	           sim_M.c_send - KEYS * sim_M.s_key - (2 * KEYS - 1) * sim_M.s_rescan;
	sim_M.s_resume = e > 0 ? e / KEYS : 0;
	goto out;
failed:
	fprintf(stderr, "hpct-bench-sim: calibration: a request to the store failed: %s\n",
	        hpct_last_error());
	rc = -1;
out:
	if (raw >= 0) { /* a goodbye, or the server reports rank 2 lost */
		unsigned char bye[5] = { HPCT_STD_BYE, 0, 0, 0, 2 };
		if (write(raw, bye, sizeof(bye)) != (ssize_t)sizeof(bye))
			rc = rc ? rc : -1;
		close(raw);
	}
	hpct__std_client_close(b);
	hpct__std_client_close(a);
	hpct__std_server_stop(srv, hpct__now() + 5);
	return rc == 0 ? 0 : -1;
}
