/* hpct-bench: launches local ranks itself and times bootstrap scenarios,
 * side by side for the rootless and the standard path.
 *
 *   hpct-bench --scenario cold|gloo|nccl-root --ranks 64,256 --path rootless,standard
 *              --repeat 5 [--nodes K] [--json FILE] [--timeout S]
 *
 * Every scenario is timed from the first fork until the last rank has done
 * its work; each rank reports its CLOCK_MONOTONIC finish time through a
 * pipe, so process exit is not counted.
 *
 * cold: all N ranks join the world and finish a world allgather and a
 * barrier.
 * gloo: all N ranks join the world, create a Gloo device and a Gloo context
 * connected over the world group, and finish one allreduce (1024 f32, sum,
 * the result checked exactly).  Built only with Gloo (HPCT_HAVE_GLOO).
 * restart, kill-root: see restart_once (--kill K ranks, --seed S).
 * nccl-root: no launch; see nccl_root_once.  "standard" is NCCL's own root,
 * "rootless" hpct's micro-roots.
 *
 * Every rank then waits until all have reported before it tears down: on a
 * cluster a finished rank goes on with its own cores, while here 1024 exits
 * would steal the 2 cores from the ranks still bootstrapping, and the path
 * whose ranks finish at staggered times would pay for it.  Runs of the two
 * paths alternate, so drift in machine speed hits both alike.  Prints
 * median/min/max per path and N, and writes the same as JSON.
 *
 * max_conns is the largest count, over ranks, of hpct's own connections
 * (opened + accepted, hpct_world_get_stats) when the rank reported; Gloo's
 * pairs (N-1 per rank, made by Gloo) are not in it.  On the standard path
 * it is each rank's one connection to the rendezvous (rank 0's server does
 * not count what it accepts).  conn_bound is the rootless bound
 * 2*ceil(log2 N)+2, which the gloo scenario's port alltoall keeps too. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tools/bench_measure.h"
#include "tools/bench_plot.h"
#include "tools/bench_rank.h"
#include "bootstrap/nccl/nccl_internal.h"
#include "hpct/hpct.h"
#include "bootstrap/topo/loopback.h"
#include "tools/shim_path.h"

#define MAX_LIST 16

/* The rootless engine's transport for the ranks launched next (HPCT_TRANSPORT),
 * or NULL for the default. */
static const char *bench_transport;
/* --gate: ranks start their timed work together, once every one of them has
 * started and paid its transport's one-time cost (loading libfabric) */
static int bench_gate;

struct result {
	const char *scenario;
	const char *path;
	int ranks, nodes, repeat, ok;
	double ms[64];
	int max_conns;
	int repl_conns; /* restart --recovery inprocess: the replacements' */
	int run_conns[64], run_repl[64]; /* the same, run by run */
	long msgs;      /* hpct messages sent by all ranks in the last run (cold, gloo) */
	long max_rss;   /* largest resident memory of a rank, kB */
};

static int ceil_log2(int n)
{
	int k = 0;
	while ((1 << k) < n)
		k++;
	return k;
}

/* A world allgather (checked) and a barrier. */
static int world_exercise(hpct_world *w)
{
	hpct_group *g = hpct_world_group(w);
	int n = hpct_group_size(g);
	unsigned char item[64], *all = malloc((size_t)n * sizeof(item));
	memset(item, hpct_group_rank(g) & 0xff, sizeof(item));
	int rc = all ? hpct_allgather(g, item, sizeof(item), all) : HPCT_ENOMEM;
	for (int r = 0; r < n && rc == 0; r++)
		if (all[(size_t)r * sizeof(item)] != (unsigned char)(r & 0xff))
			rc = HPCT_EPROTO;
	if (rc == 0)
		rc = hpct_barrier(g);
	free(all);
	return rc;
}

static int cold_rank(hpct_world *w)
{
	return settle(w, world_exercise(w));
}

/* What the launcher, playing the job's agent, tells a survivor. */
struct agent_msg {
	uint64_t epoch;
	int nreplaced;
	int replaced[64];
};

/* A rank of an in-process restart: reports its cold start, then waits for
 * the agent's word (none: just the release), recovers to the new epoch and
 * reports again with the connections the recovery opened. */
static int recover_rank(hpct_world *w)
{
	int rc = world_exercise(w);
	if (report(rc, conns_of(w), msgs_of(w)) != 0 || rc)
		return settle(w, rc);
	struct agent_msg m;
	ssize_t k;
	while ((k = read(atoi(getenv("HPCT_BENCH_AGENT_FD")), &m, sizeof(m))) < 0 && errno == EINTR)
		;
	if (k != (ssize_t)sizeof(m)) {
		wait_release();
		return 0;
	}
	int before = conns_of(w);
	rc = hpct_world_recover(w, m.epoch, m.replaced, m.nreplaced);
	if (rc == 0)
		rc = world_exercise(w);
	return settle_conns(rc, conns_of(w) - before);
}

/* A scenario's ranks are this program (cold) or a sibling program in the
 * same directory (gloo: hpct-bench-gloo, built only with Gloo). */
struct scenario {
	const char *name;
	int (*rank)(hpct_world *w); /* run in this program, or */
	const char *program;        /* the sibling program that plays the ranks */
};

static const struct scenario scenarios[] = {
	{ "cold", cold_rank, NULL },
	{ "recover", recover_rank, NULL }, /* ranks of restart --recovery inprocess */
	{ "gloo", NULL, "hpct-bench-gloo" },
	{ "torch", NULL, "hpct-bench-torch.py" },
};

static const struct scenario *find_scenario(const char *name)
{
	for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++)
		if (strcmp(scenarios[i].name, name) == 0)
			return &scenarios[i];
	return NULL;
}

static void setenv_int(const char *name, long v)
{
	char buf[32];
	snprintf(buf, sizeof(buf), "%ld", v);
	setenv(name, buf, 1);
}

/* --scenario torch: stock PyTorch binds its store to the wildcard address,
 * so the runs happen in a network namespace of their own (loopback only);
 * 0, or -1 with the reason printed. */
static int enter_netns(void)
{
	uid_t uid = getuid();
	gid_t gid = getgid();
	if (unshare(CLONE_NEWNET) != 0) {
		char map[64];
		int fd;
		if (unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) {
			fprintf(stderr, "hpct-bench: --scenario torch: cannot make a network namespace "
			                "(unshare: %s); stock PyTorch would bind the wildcard address\n",
			        strerror(errno));
			return -1;
		}
		if ((fd = open("/proc/self/setgroups", O_WRONLY)) >= 0) {
			(void)!write(fd, "deny", 4);
			close(fd);
		}
		snprintf(map, sizeof(map), "0 %u 1", (unsigned)uid);
		if ((fd = open("/proc/self/uid_map", O_WRONLY)) >= 0) {
			(void)!write(fd, map, strlen(map));
			close(fd);
		}
		snprintf(map, sizeof(map), "0 %u 1", (unsigned)gid);
		if ((fd = open("/proc/self/gid_map", O_WRONLY)) >= 0) {
			(void)!write(fd, map, strlen(map));
			close(fd);
		}
	}
	int sk = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	int rc = sk < 0 || ioctl(sk, SIOCGIFFLAGS, &ifr) != 0 ? -1 : 0;
	ifr.ifr_flags |= IFF_UP;
	if (rc == 0)
		rc = ioctl(sk, SIOCSIFFLAGS, &ifr);
	if (sk >= 0)
		close(sk);
	if (rc != 0)
		fprintf(stderr, "hpct-bench: --scenario torch: cannot bring lo up: %s\n",
		        strerror(errno));
	return rc;
}

/* The environment of a torch run's ranks: the same script either way, the
 * shim preloaded for the rootless path. */
static void torch_env(int rootless)
{
	static char lib[8192];
	if (!lib[0])
		hpct_shim_path(lib, sizeof(lib)); /* a missing one fails at exec, named */
	if (rootless)
		setenv("LD_PRELOAD", lib, 1);
	else
		unsetenv("LD_PRELOAD");
	setenv("GLOO_SOCKET_IFNAME", "lo", 1); /* stock Gloo: the namespace's only interface */
	setenv("OMP_NUM_THREADS", "1", 0);
}

/* N ranks of one epoch, launched by this process: their report and
 * release pipes, their pids. */
struct batch {
	int n, rep, rel; /* rep: read end of the reports; rel: write end of the release */
	pid_t *pids;
	int got, bad, max_conns;
	int ready, gate; /* --gate: read end of "started", write end of "go"; else -1 */
	long msgs;   /* messages the ranks reported sending */
	long max_rss; /* the largest resident memory a rank reported, kB */
	double last; /* latest finish time reported */
};

/* Launches N ranks of `scenario` on K nodes at `epoch`; 0 or -1. */
static int launch_ranks(struct batch *b, const char *self, const char *scenario, int n, int nodes,
                        int rootless, int port, int run_id, int epoch, double timeout,
                        const int *only, int nonly);

static int launch(struct batch *b, const char *self, const char *scenario, int n, int nodes,
                  int rootless, int port, int run_id, int epoch, double timeout)
{
	return launch_ranks(b, self, scenario, n, nodes, rootless, port, run_id, epoch, timeout,
	                    NULL, n);
}

/* Launches ranks only[0..nonly) (all when only is NULL) of an N-rank job. */
static int launch_ranks(struct batch *b, const char *self, const char *scenario, int n, int nodes,
                        int rootless, int port, int run_id, int epoch, double timeout,
                        const int *only, int nonly)
{
	memset(b, 0, sizeof(*b));
	b->ready = b->gate = -1;
	int pfd[2], rel[2], rdy[2] = { -1, -1 }, go[2] = { -1, -1 };
	if (bench_gate && (pipe(rdy) < 0 || pipe2(go, O_CLOEXEC) < 0 || fcntl(go[0], F_SETFD, 0) < 0))
		return -1;
	if (pipe(pfd) < 0)
		return -1;
	/* only the read end of the release pipe reaches the ranks */
	if (pipe2(rel, O_CLOEXEC) < 0 || fcntl(rel[0], F_SETFD, 0) < 0) {
		close(pfd[0]);
		close(pfd[1]);
		return -1;
	}
	int per = layout_max_local(n, nodes);
	char buf[4096];
	layout_tasks(buf, sizeof(buf), n, nodes);
	setenv("HPCT_TASKS_PER_NODE", buf, 1);
	layout_hosts(buf, sizeof(buf), nodes);
	setenv("HPCT_HOSTS", buf, 1);
	setenv_int("WORLD_SIZE", n);
	setenv("MASTER_ADDR", "127.0.0.1", 1);
	setenv_int("MASTER_PORT", port);
	setenv_int("HPCT_PORT_BASE", port + 1);
	setenv_int("HPCT_PORT_RANGE", 2 * per);
	snprintf(buf, sizeof(buf), "bench-%d-%d", (int)getpid(), run_id);
	setenv("HPCT_JOB_ID", buf, 1);
	setenv_int("HPCT_EPOCH", epoch);
	setenv("HPCT_USE_ROOTLESS", rootless ? "1" : "0", 1);
	if (bench_transport) {
		setenv("HPCT_TRANSPORT", bench_transport, 1);
		setenv("IPATH_NO_BACKTRACE", "1", 0); /* libfabric's libinfinipath */
	} else {
		unsetenv("HPCT_TRANSPORT");
	}
	setenv_int("HPCT_TIMEOUT", (long)timeout);
	setenv_int("HPCT_BENCH_FD", pfd[1]);
	setenv_int("HPCT_BENCH_RELEASE_FD", rel[0]);
	if (bench_gate) {
		setenv_int("HPCT_BENCH_READY_FD", rdy[1]);
		setenv_int("HPCT_BENCH_GATE_FD", go[0]);
	} else {
		unsetenv("HPCT_BENCH_READY_FD");
		unsetenv("HPCT_BENCH_GATE_FD");
	}
	unsetenv("LOCAL_WORLD_SIZE");

	b->pids = calloc((size_t)nonly, sizeof(*b->pids));
	int launched = 0;
	for (int i = 0; i < nonly; i++) {
		int r = only ? only[i] : i, node, local;
		layout_place(n, nodes, r, &node, &local);
		setenv_int("RANK", r);
		setenv_int("LOCAL_RANK", local);
		setenv_int("GROUP_RANK", node);
		pid_t pid = fork();
		if (pid == 0) {
			close(pfd[0]);
			execl(self, self, "--as-rank", scenario, (char *)NULL);
			_exit(127);
		}
		if (pid < 0) {
			fprintf(stderr, "hpct-bench: fork of rank %d failed: %s\n", r,
			        strerror(errno));
			break;
		}
		b->pids[launched++] = pid;
	}
	close(pfd[1]);
	close(rel[0]);
	if (bench_gate) {
		close(rdy[1]);
		close(go[0]);
		b->ready = rdy[0];
		b->gate = go[1];
	}
	b->n = launched;
	b->rep = pfd[0];
	b->rel = rel[1];
	return 0;
}

/* Reads every rank's report (or until all writers are gone). */
static void collect(struct batch *b)
{
	struct record rec;
	while (b->got < b->n) {
		ssize_t k = read(b->rep, &rec, sizeof(rec));
		if (k != (ssize_t)sizeof(rec))
			break; /* every writer is gone */
		b->got++;
		if (rec.rc != 0)
			b->bad++;
		if (rec.done > b->last)
			b->last = rec.done;
		b->msgs += rec.msgs;
		if (rec.rss_kb > b->max_rss)
			b->max_rss = rec.rss_kb;
		if (rec.conns > b->max_conns)
			b->max_conns = rec.conns;
	}
}

/* Releases the ranks (or kills them: kill_all) and reaps them; 0 when all
 * reported success and, unless killed, exited 0. */
static int finish(struct batch *b, int kill_all)
{
	close(b->rep);
	if (kill_all)
		for (int r = 0; r < b->n; r++)
			if (b->pids[r] > 0)
				kill(b->pids[r], SIGKILL);
	close(b->rel);
	for (int r = 0; r < b->n; r++) {
		int st;
		if (b->pids[r] > 0 && waitpid(b->pids[r], &st, 0) == b->pids[r] && !kill_all &&
		    !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
			b->bad++;
	}
	free(b->pids);
	return b->got < b->n || b->bad ? -1 : 0;
}

static void report_failure(const char *what, int rootless, const struct batch *b, int n)
{
	fprintf(stderr,
	        "hpct-bench: %s %s run with %d ranks failed (%d of %d reported, %d failures)\n",
	        rootless ? "rootless" : "standard", what, n, b->got, n, b->bad);
}

/* One run: N ranks on K loopback nodes; returns ms or -1. */
static double run_once(const char *self, const char *scenario, int n, int nodes, int rootless,
                       int port, int run_id, double timeout, int *max_conns, long *msgs,
                       long *max_rss)
{
	struct batch b;
	double t0 = mono();
	if (launch(&b, self, scenario, n, nodes, rootless, port, run_id, 0, timeout) < 0)
		return -1;
	if (b.gate >= 0) { /* every rank started and ready: all go at once */
		char c;
		for (int k = 0; k < b.n && read(b.ready, &c, 1) == 1; k++)
			;
		close(b.ready);
		t0 = mono();
		close(b.gate);
	}
	collect(&b);
	*max_conns = b.max_conns;
	*msgs = b.msgs;
	*max_rss = b.max_rss;
	double last = b.last;
	if (finish(&b, 0) < 0) {
		report_failure(scenario, rootless, &b, n);
		return -1;
	}
	return (last - t0) * 1000;
}

/* The ranks to kill: rank 0 first for kill-root, the rest at random from
 * the seed, distinct, sorted (the order hpct_world_recover wants). */
static int pick_victims(int n, int kills, int kill_root, unsigned seed, int run_id, int *out)
{
	unsigned x = seed * 2654435761u + (unsigned)run_id;
	int k = 0;
	if (kill_root)
		out[k++] = 0;
	while (k < kills) {
		int v = (int)(((x = x * 1103515245u + 12345u) >> 8) % (unsigned)n), dup = 0;
		for (int i = 0; i < k; i++)
			dup |= out[i] == v;
		if (!dup)
			out[k++] = v;
	}
	for (int i = 1; i < k; i++) /* insertion sort: k is small */
		for (int j = i; j > 0 && out[j - 1] > out[j]; j--) {
			int t = out[j];
			out[j] = out[j - 1];
			out[j - 1] = t;
		}
	return k;
}

/* restart / kill-root: N ranks at steady state (world allgather and barrier
 * done at epoch 0); then the victims die by SIGKILL, and the job recovers
 * at epoch 1: `full`, as torchrun does by default, stops every other rank
 * and starts all N again; `inprocess` starts only the victims' replacements
 * and tells the survivors (this launcher plays the job's agent), which call
 * hpct_world_recover.  Timed from the kill until every rank finished the
 * world allgather and barrier at the new epoch.  *max_conns gets the
 * connections opened by the ranks of the new epoch (inprocess: by the
 * survivors, new ones only; *repl_conns: by the replacements). */
static double restart_once(const char *self, int n, int nodes, int rootless, int port, int run_id,
                           double timeout, int kill_root, int kills, unsigned seed, int inprocess,
                           int *max_conns, int *repl_conns)
{
	int agent[2] = { -1, -1 };
	if (inprocess) {
		if (pipe2(agent, O_CLOEXEC) < 0 || fcntl(agent[0], F_SETFD, 0) < 0)
			return -1;
		setenv_int("HPCT_BENCH_AGENT_FD", agent[0]);
	}
	struct batch a, b;
	int rc = launch(&a, self, inprocess ? "recover" : "cold", n, nodes, rootless, port, run_id,
	                0, timeout);
	if (agent[0] >= 0)
		close(agent[0]);
	if (rc < 0) {
		if (agent[1] >= 0)
			close(agent[1]);
		return -1;
	}
	collect(&a);
	if (a.got < n || a.bad) {
		if (agent[1] >= 0)
			close(agent[1]);
		finish(&a, 1);
		report_failure("steady-state", rootless, &a, n);
		return -1;
	}
	int victims[64];
	kills = pick_victims(n, kills, kill_root, seed, run_id, victims);
	double t0 = mono();
	for (int k = 0; k < kills; k++)
		kill(a.pids[victims[k]], SIGKILL);
	double last;
	if (!inprocess) {
		finish(&a, 1); /* the agent stops the rest: all start again */
		if (launch(&b, self, "cold", n, nodes, rootless, port, run_id, 1, timeout) < 0)
			return -1;
		collect(&b);
		*max_conns = b.max_conns;
		*repl_conns = 0;
		last = b.last;
		if (finish(&b, 0) < 0) {
			report_failure("restarted", rootless, &b, n);
			return -1;
		}
		return (last - t0) * 1000;
	}
	for (int k = 0; k < kills; k++) {
		waitpid(a.pids[victims[k]], NULL, 0);
		a.pids[victims[k]] = 0;
	}
	rc = launch_ranks(&b, self, "cold", n, nodes, rootless, port, run_id, 1, timeout, victims,
	                  kills);
	/* the agent's word to every survivor */
	struct agent_msg m = { .epoch = 1, .nreplaced = kills };
	memcpy(m.replaced, victims, (size_t)kills * sizeof(int));
	for (int i = 0; i < n - kills; i++)
		if (write(agent[1], &m, sizeof(m)) != (ssize_t)sizeof(m))
			rc = -1;
	close(agent[1]);
	a.n = n - kills; /* the survivors' second reports */
	a.got = a.bad = a.max_conns = 0;
	a.last = 0;
	collect(&a);
	if (rc == 0)
		collect(&b);
	last = a.last > b.last ? a.last : b.last;
	*max_conns = a.max_conns;
	*repl_conns = b.max_conns;
	int bad = a.got < a.n || a.bad || b.got < b.n || b.bad;
	a.n = n; /* every pid, the victims' now 0, is reaped */
	a.got = n;
	finish(&a, 0);
	if (rc == 0)
		finish(&b, 0);
	if (bad || rc < 0) {
		report_failure("in-process recovery", rootless, &b, kills);
		return -1;
	}
	return (last - t0) * 1000;
}

static int parse_list(const char *s, int *out)
{
	int n = 0;
	char *copy = strdup(s), *save = NULL;
	for (char *t = strtok_r(copy, ",", &save); t && n < MAX_LIST;
	     t = strtok_r(NULL, ",", &save)) {
		char *end;
		long v = strtol(t, &end, 10);
		if (*end || v < 1 || v > 4096) {
			free(copy);
			return -1;
		}
		out[n++] = (int)v;
	}
	free(copy);
	return n;
}

/* --scenario nccl-root: N simulated ranks (the player the conformance tests
 * use) until every one has its ring neighbour, against NCCL's own root (one,
 * started by ncclGetUniqueId: what the standard path runs) or against hpct's
 * micro-roots (one per rank: Tier 2).  All in this process, no launch: the
 * roots and the ranks are the whole of it.  Ranks report in rank order, and
 * with NCCL's root they hold back as NCCL's ranks do past 256 ranks a root
 * (NCCL_UID_STAGGER_*'s defaults).  max_conns: the busiest root's
 * connections, plus the 3 of the rank living in the same process. */
static double nccl_root_once(int n, int rootless, int port, double timeout, int *conns)
{
	const struct hpct_nccl_lib *l = hpct__nccl_lib();
	if (!l) {
		fprintf(stderr, "hpct-bench: %s\n", hpct_last_error());
		return -1;
	}
	int nids = rootless ? n : 1, rc;
	hpct_nccl_id *ids = calloc((size_t)nids, sizeof(*ids));
	unsigned char *replies = malloc((size_t)n * HPCT_NCCL_RING_LEN);
	struct hpct_nccl_roots *roots = NULL;
	double t0 = mono();
	if (rootless) {
		struct sockaddr_in in = { .sin_family = AF_INET };
		in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		for (int i = 0; i < n; i++) {
			in.sin_port = htons((uint16_t)(port + i));
			hpct__nccl_id_make(0x6863707462656e63ull, (struct sockaddr *)&in, 0, 1,
			                   l->version, &ids[i]);
		}
		rc = hpct__nccl_roots_start(ids, n, n, timeout, 0, &roots);
	} else {
		rc = l->get_unique_id(&ids[0]) == 0 ? 0 : HPCT_ENCCL;
	}
	if (rc == 0)
		rc = hpct__nccl_play_ranks(ids, nids, n, NULL, timeout, !rootless, replies, conns);
	double ms = (mono() - t0) * 1000;
	if (roots) {
		int wrc = rc == 0 ? hpct__nccl_roots_wait(roots, NULL) : 0;
		if (rc)
			hpct__nccl_roots_stop(roots);
		rc = rc ? rc : wrc;
	}
	unsigned char want[HPCT_NCCL_RING_LEN];
	for (int r = 0; r < n && rc == 0; r++) {
		hpct__nccl_test_ring((r + 1) % n, want);
		if (memcmp(replies + (size_t)r * HPCT_NCCL_RING_LEN, want, sizeof(want)) != 0) {
			fprintf(stderr, "hpct-bench: rank %d was not sent rank %d's ring info\n", r,
			        (r + 1) % n);
			rc = HPCT_EPROTO;
		}
	}
	free(ids);
	free(replies);
	if (rc) {
		fprintf(stderr, "hpct-bench: nccl-root with %d ranks (%s): %s\n", n,
		        rootless ? "micro-roots" : "NCCL's root", hpct_last_error());
		return -1;
	}
	*conns += 3;
	return ms;
}

/* The loopback round trip of a 1-byte message between two processes over
 * TCP, median of 200 after a warm-up: the model floor's unit.  -1 if it
 * could not be measured. */
static double measure_rtt_ms(void)
{
	int fd[2];
	if (loopback_pair(fd) < 0)
		return -1;
	double s = echo_round_trip(fd[0], fd[0], fd[1], fd[1], 200);
	return s < 0 ? -1 : s * 1000;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: hpct-bench --scenario S[,S..] --ranks N[,N..] [--path rootless,standard]\n"
	           "                  [--repeat R] [--nodes K] [--json FILE] [--plot FILE.png]\n"
	           "                  [--timeout S] [--port P] [--kill K] [--recovery full|inprocess]\n"
	           "                  [--seed S] [--transport tcp,ofi] [--gate]\n"
	           "scenarios: cold, gloo, nccl-root, restart, kill-root, torch (paths stock and\n"
	           "rootless: an unmodified PyTorch job, with libhpct_preload.so for rootless);\n"
	           "and sim on its own\n"
	           "(hpct-bench --scenario sim --help)\n");
}

#define MAX_SCENARIOS 8

/* What one scenario of the list needs to run. */
struct scen {
	const char *name;
	const struct scenario *sc; /* NULL for nccl-root, restart, kill-root */
	int nccl_root, restart, kill_root, torch;
	char self[4096]; /* the program that plays its ranks */
};

static int setup_scen(struct scen *s, const char *name, const char *exe)
{
	s->name = name;
	s->nccl_root = strcmp(name, "nccl-root") == 0;
	s->kill_root = strcmp(name, "kill-root") == 0;
	s->restart = s->kill_root || strcmp(name, "restart") == 0;
	s->torch = strcmp(name, "torch") == 0;
	s->sc = find_scenario(name);
	if ((!s->sc && !s->nccl_root && !s->restart) || strcmp(name, "recover") == 0) {
		fprintf(stderr,
		        "hpct-bench: --scenario %s: want cold, gloo, nccl-root, restart, "
		        "kill-root or torch (sim runs on its own)\n",
		        name);
		return -1;
	}
	snprintf(s->self, sizeof(s->self), "%s", exe);
	if (s->sc && s->sc->program) { /* the sibling beside this program */
		char *slash = strrchr(s->self, '/');
		snprintf(slash + 1, sizeof(s->self) - (size_t)(slash + 1 - s->self), "%s",
		         s->sc->program);
		if (access(s->self, X_OK) != 0) {
			fprintf(stderr,
			        "hpct-bench: --scenario %s: %s not found (this hpct was built "
			        "without Gloo?)\n",
			        name, s->self);
			return -1;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--as-rank") == 0) {
		const struct scenario *sc = find_scenario(argv[2]);
		return sc && sc->rank ? bench_rank_main(sc->rank) : 2;
	}
	/* --scenario sim is a program of its own (it links libhpct's engine
	 * from the internal archive): hand it the rest of the arguments */
	for (int i = 1; i < argc; i++) {
		int two = strcmp(argv[i], "--scenario") == 0 && i + 1 < argc;
		if ((two && strcmp(argv[i + 1], "sim") == 0) ||
		    strcmp(argv[i], "--scenario=sim") == 0) {
			char prog[4096];
			ssize_t pl = readlink("/proc/self/exe", prog, sizeof(prog) - 1);
			if (pl <= 0)
				return 1;
			prog[pl] = 0;
			char *slash = strrchr(prog, '/');
			snprintf(slash + 1, sizeof(prog) - (size_t)(slash + 1 - prog),
			         "hpct-bench-sim");
			char **args = calloc((size_t)argc + 1, sizeof(char *));
			int n = 0;
			args[n++] = prog;
			for (int j = 1; j < argc; j++)
				if (j != i && !(two && j == i + 1))
					args[n++] = argv[j];
			execv(prog, args);
			fprintf(stderr, "hpct-bench: --scenario sim: cannot run %s: %s\n", prog,
			        strerror(errno));
			return 2;
		}
	}
	const char *scenario_arg = "cold", *paths = "rootless,standard", *json = NULL;
	const char *recovery = "full", *plot = NULL, *transports = NULL;
	int kills = 1;
	unsigned seed = 1;
	int ranks[MAX_LIST], nranks = 0, repeat = 5, nodes = 4, port = 15000;
	double timeout = 120;
	static const struct option opts[] = { { "scenario", required_argument, NULL, 's' },
		                              { "ranks", required_argument, NULL, 'n' },
		                              { "path", required_argument, NULL, 'p' },
		                              { "repeat", required_argument, NULL, 'r' },
		                              { "nodes", required_argument, NULL, 'k' },
		                              { "json", required_argument, NULL, 'j' },
		                              { "plot", required_argument, NULL, 'G' },
		                              { "transport", required_argument, NULL, 'T' },
		                              { "gate", no_argument, NULL, 'g' },
		                              { "timeout", required_argument, NULL, 't' },
		                              { "port", required_argument, NULL, 'P' },
		                              { "kill", required_argument, NULL, 'K' },
		                              { "recovery", required_argument, NULL, 'R' },
		                              { "seed", required_argument, NULL, 'S' },
		                              { "help", no_argument, NULL, 'h' },
		                              { NULL, 0, NULL, 0 } };
	int c;
	while ((c = getopt_long(argc, argv, "s:n:p:r:k:j:G:T:gt:P:K:R:S:h", opts, NULL)) != -1) {
		switch (c) {
		case 'g':
			bench_gate = 1;
			break;
		case 'T':
			transports = optarg;
			break;
		case 's':
			scenario_arg = optarg;
			break;
		case 'n':
			if ((nranks = parse_list(optarg, ranks)) <= 0) {
				fprintf(stderr,
				        "hpct-bench: --ranks %s: want a comma list of 1..4096\n",
				        optarg);
				return 2;
			}
			break;
		case 'p':
			paths = optarg;
			break;
		case 'r':
			repeat = atoi(optarg);
			break;
		case 'k':
			nodes = atoi(optarg);
			break;
		case 'j':
			json = optarg;
			break;
		case 'G':
			plot = optarg;
			break;
		case 't':
			timeout = atof(optarg);
			break;
		case 'P':
			port = atoi(optarg);
			break;
		case 'K':
			kills = atoi(optarg);
			break;
		case 'R':
			recovery = optarg;
			break;
		case 'S':
			seed = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	int inprocess = strcmp(recovery, "inprocess") == 0;
	if (!inprocess && strcmp(recovery, "full") != 0) {
		fprintf(stderr, "hpct-bench: --recovery %s: want full or inprocess\n", recovery);
		return 2;
	}
	if (kills > 64) {
		fprintf(stderr, "hpct-bench: --kill %d: at most 64\n", kills);
		return 2;
	}
	if (plot && (strlen(plot) < 5 || strcmp(plot + strlen(plot) - 4, ".png") != 0)) {
		fprintf(stderr, "hpct-bench: --plot %s: want a file name ending in .png\n", plot);
		return 2;
	}
	char exe[4096];
	ssize_t sl = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (sl <= 0)
		return 1;
	exe[sl] = 0;
	static struct scen scens[MAX_SCENARIOS];
	int nscens = 0;
	char *list = strdup(scenario_arg), *save = NULL;
	for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (nscens == MAX_SCENARIOS) {
			fprintf(stderr, "hpct-bench: --scenario %s: at most %d scenarios\n",
			        scenario_arg, MAX_SCENARIOS);
			free(list);
			return 2;
		}
		if (setup_scen(&scens[nscens++], tok, exe) < 0) {
			free(list);
			return 2;
		}
	}
	if (nscens == 0 || nranks == 0 || repeat < 1 || repeat > 64 || nodes < 1 || nodes > 254 ||
	    timeout <= 0 || port < 1024 || port > 60000 || kills < 1) {
		usage(stderr);
		free(list);
		return 2;
	}
	/* a path, or with --transport the rootless path over each transport */
	const char *path_names[2], *path_transport[2] = { NULL, NULL };
	int npaths = 0;
	if (transports) {
		char *tl = strdup(transports), *tsave = NULL;
		for (char *t = strtok_r(tl, ",", &tsave); t; t = strtok_r(NULL, ",", &tsave)) {
			if ((strcmp(t, "tcp") != 0 && strcmp(t, "ofi") != 0) || npaths == 2) {
				fprintf(stderr, "hpct-bench: --transport %s: want tcp and/or ofi\n",
				        transports);
				free(tl);
				free(list);
				return 2;
			}
			path_transport[npaths] = strcmp(t, "tcp") == 0 ? "tcp" : "ofi";
			path_names[npaths] = path_transport[npaths];
			npaths++;
		}
		free(tl);
	} else {
		if (strstr(paths, "rootless"))
			path_names[npaths++] = "rootless";
		if (strstr(paths, "standard"))
			path_names[npaths++] = "standard";
		else if (strstr(paths, "stock")) /* the standard path, as PyTorch users say */
			path_names[npaths++] = "stock";
	}
	if (npaths == 0) {
		fprintf(stderr, "hpct-bench: --path %s: want rootless and/or standard (or stock)\n",
		        paths);
		free(list);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	int gate_opt = bench_gate;
	for (int si = 0; si < nscens; si++)
		if (scens[si].torch && enter_netns() < 0) {
			free(list);
			return 1;
		}

	int nres = nscens * nranks * npaths;
	struct result *res = calloc((size_t)nres, sizeof(*res));
	int run_id = 0, failed = 0;
	for (int si = 0; si < nscens; si++) {
		const struct scen *s = &scens[si];
		for (int i = 0; i < nranks; i++) {
			int n = ranks[i], k = nodes < n ? nodes : n;
			struct result *row = &res[(si * nranks + i) * npaths];
			for (int p = 0; p < npaths; p++) {
				row[p].scenario = s->name;
				row[p].path = path_names[p];
				row[p].ranks = n;
				row[p].nodes = k;
				row[p].repeat = repeat;
			}
			for (int rep = 0; rep < repeat; rep++) {
				for (int p = 0; p < npaths; p++) {
					struct result *r = &row[p];
					int conns, repl = 0;
					long msgs = 0, rss = 0;
					bench_transport = path_transport[p];
					/* each run its own ports: nothing lingers from the last */
					int base = port + (run_id % 4) * (2 * ((n + k - 1) / k) + 2);
					int rootless = strcmp(r->path, "standard") != 0 &&
					               strcmp(r->path, "stock") != 0;
					if (s->torch)
						torch_env(rootless);
					/* torch: timed once every rank has imported it */
					bench_gate = s->torch || gate_opt;
					double ms =
					        s->nccl_root
					                ? nccl_root_once(n, rootless,
					                                 port + (run_id % 2) * n,
					                                 timeout, &conns)
					        : s->restart
					                ? restart_once(s->self, n, k, rootless, base,
					                               run_id, timeout, s->kill_root,
					                               kills < n ? kills : n, seed,
					                               inprocess && rootless, &conns,
					                               &repl)
					                : run_once(s->self, s->name, n, k, rootless, base,
					                           run_id, timeout, &conns, &msgs, &rss);
					run_id++;
					if (ms < 0) {
						failed = 1;
						continue;
					}
					r->ms[r->ok++] = ms;
					r->msgs = msgs;
					if (rss > r->max_rss)
						r->max_rss = rss;
					r->run_conns[r->ok - 1] = conns;
					r->run_repl[r->ok - 1] = repl;
					if (conns > r->max_conns)
						r->max_conns = conns;
					if (repl > r->repl_conns)
						r->repl_conns = repl;
				}
			}
		}
	}

	/* the floor's unit, measured now that the ranks are gone */
	double rtt = plot || json ? measure_rtt_ms() : -1;
	char detail[64];
	snprintf(detail, sizeof(detail), "kill %d; rootless %s, standard full", kills,
	         inprocess ? "in-process" : "full");
	struct plot_row *rows = calloc((size_t)nres, sizeof(*rows));
	int nrows = 0;
	printf("%-9s %-9s %6s %6s %7s %10s %10s %10s %10s %10s %11s\n", "scenario", "path", "ranks",
	       "nodes", "repeat", "median_ms", "min_ms", "max_ms", "max_conns", "conn_bound",
	       "max_rss_mb");
	FILE *jf = json ? fopen(json, "w") : NULL;
	if (json && !jf)
		fprintf(stderr, "hpct-bench: cannot write %s: %s\n", json, strerror(errno));
	if (jf)
		fprintf(jf, "{\"rtt_ms\":%.4f,\"results\":[", rtt);
	for (int i = 0; i < nres; i++) {
		struct result *r = &res[i];
		int nccl_root = strcmp(r->scenario, "nccl-root") == 0;
		int recov = strcmp(r->scenario, "restart") == 0 || strcmp(r->scenario, "kill-root") == 0;
		if (r->ok == 0) {
			printf("%-9s %-9s %6d %6d %7d %10s\n", r->scenario, r->path, r->ranks,
			       r->nodes, 0, "failed");
			continue;
		}
		qsort(r->ms, (size_t)r->ok, sizeof(double), cmp_double);
		double med = r->ok % 2 ? r->ms[r->ok / 2]
		                       : (r->ms[r->ok / 2 - 1] + r->ms[r->ok / 2]) / 2;
		char bound[16] = "-";
		if (strcmp(r->path, "standard") != 0)
			snprintf(bound, sizeof(bound), "%d",
			         nccl_root ? 6 : 2 * ceil_log2(r->ranks) + 2);
		char rss[16] = "-";
		if (r->max_rss > 0)
			snprintf(rss, sizeof(rss), "%.1f", r->max_rss / 1024.0);
		printf("%-9s %-9s %6d %6d %7d %10.1f %10.1f %10.1f %10d %10s %11s\n", r->scenario,
		       r->path, r->ranks, r->nodes, r->ok, med, r->ms[0], r->ms[r->ok - 1],
		       r->max_conns, bound, rss);
		if (jf)
			fprintf(jf,
			        "%s{\"scenario\":\"%s\",\"path\":\"%s\",\"ranks\":%d,\"nodes\":%d,"
			        "\"median_ms\":%.3f,\"min_ms\":%.3f,\"max_ms\":%.3f,\"repeat\":%d,"
			        "\"max_conns\":%d,\"total_msgs\":%ld,\"max_rss_kb\":%ld}",
			        nrows ? "," : "", r->scenario, r->path, r->ranks, r->nodes, med,
			        r->ms[0], r->ms[r->ok - 1], r->ok, r->max_conns, r->msgs, r->max_rss);
		rows[nrows++] = (struct plot_row){ .scenario = r->scenario,
			                           .path = r->path,
			                           .detail = recov ? detail : NULL,
			                           .ranks = r->ranks,
			                           .median_ms = med,
			                           .min_ms = r->ms[0],
			                           .max_ms = r->ms[r->ok - 1] };
		r->ms[0] = med; /* kept for the ratio line */
	}
	if (jf) {
		fprintf(jf, "]}\n");
		fclose(jf);
	}
	if (npaths == 2)
		for (int i = 0; i < nres; i += 2)
			if (res[i].ok && res[i + 1].ok)
				printf("%s N=%d: %s/%s median ratio %.2f\n", res[i].scenario,
				       res[i].ranks, res[i + 1].path, res[i].path,
				       res[i + 1].ms[0] / res[i].ms[0]);
	for (int si = 0; si < nscens; si++) {
		if (!scens[si].restart || !inprocess)
			continue;
		printf("%s inprocess: rootless survivors kept their processes and links; the "
		       "standard path has no in-process recovery and restarts every rank\n",
		       scens[si].name);
		for (int i = 0; i < nres; i++)
			if (res[i].ok && res[i].scenario == scens[si].name &&
			    strcmp(res[i].path, "standard") != 0) {
				printf("%s N=%d: new connections, at most per survivor %d, per "
				       "replacement %d; run by run (survivor/replacement):",
				       scens[si].name, res[i].ranks, res[i].max_conns,
				       res[i].repl_conns);
				for (int k = 0; k < res[i].ok; k++)
					printf(" %d/%d", res[i].run_conns[k], res[i].run_repl[k]);
				printf("\n");
			}
	}
	if (rtt > 0)
		printf("loopback TCP round trip between two processes: %.1f us (median of 200)\n",
		       rtt * 1000);
	if (plot) {
		if (bench_plot(plot, rows, nrows, rtt) == 0)
			printf("plot written to %s\n", plot);
		else
			failed = 1;
	}
	free(rows);
	free(res);
	free(list);
	return failed ? 1 : 0;
}
