/* hpct-bench's launcher: starts the ranks of one run on loopback nodes with
 * the environment a launcher would give them (a PyTorch job's may instead be
 * started by torchrun: bench_torchrun.c), collects their reports, releases
 * and reaps them, and times a cold run, a restart or a PyTorch job's init
 * and re-init. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hpct/hpct.h"
#include "tools/bench/bench.h"
#include "tools/common/bench_env.h"
#include "tools/common/bench_rank.h"

/* set by main for the runs that follow (see bench.h) */
const char *bench_transport;
int bench_gate;
/* the torch scenario's Python: ranks run as `interpreter self`; else NULL */
static const char *interpreter;

/* A rank that hangs is killed this long after its own HPCT_TIMEOUT. */
#define GRACE_S 30

/* N ranks of one epoch, launched by this process (forked, or through
 * torchrun): their report and release pipes, how they were started, and
 * what reaps them. */
struct batch {
	int n, rep, rel; /* rep: read end of the reports; rel: write end of the release */
	const struct bench_launch *how;
	pid_t *pids;                  /* direct: the ranks */
	struct bench_torchrun *agent; /* torchrun: its agent and workers */
	int got, bad, max_conns;
	int ready, gate; /* --gate: read end of "started", write end of "go"; else -1 */
	long msgs;       /* messages the ranks reported sending */
	long max_rss;    /* the largest resident memory a rank reported, kB */
	double last;     /* latest finish time reported */
	/* Gloo creations: the earliest start reported (0: none), pairs */
	double first;
	int max_pairs;
	long pairs_new, pairs_kept, bytes;
	/* fanout (struct bench_phase) */
	long max_fds, inflight_peak, inflight_waits;
	int max_waves, max_peers;
	/* torch --store-ops: the ranks' medians, summed, and how many */
	double op_us[2 * BENCH_STORE_OPS];
	double cpu_us[BENCH_STORE_CPU];
	int nops;
};

static const struct bench_launch direct_launch, torchrun_launch;

/* The pipes of one launch, [0] the read end: the reports, the release, and
 * with --gate "started" and "go".  The ranks' ends are inherited across
 * exec; this process's ends are close-on-exec. */
struct pipes {
	int rep[2], rel[2], rdy[2], go[2];
};

static void close_pair(int p[2]);

static int open_pipes(struct pipes *p)
{
	*p = (struct pipes){ { -1, -1 }, { -1, -1 }, { -1, -1 }, { -1, -1 } };
	if ((bench_gate && (pipe2(p->rdy, O_CLOEXEC) < 0 || fcntl(p->rdy[1], F_SETFD, 0) < 0 ||
	                    pipe2(p->go, O_CLOEXEC) < 0 || fcntl(p->go[0], F_SETFD, 0) < 0)) ||
	    pipe2(p->rep, O_CLOEXEC) < 0 || fcntl(p->rep[1], F_SETFD, 0) < 0 ||
	    /* only the read end of the release pipe reaches the ranks */
	    pipe2(p->rel, O_CLOEXEC) < 0 || fcntl(p->rel[0], F_SETFD, 0) < 0) {
		close_pair(p->rep);
		close_pair(p->rel);
		close_pair(p->rdy);
		close_pair(p->go);
		return -1;
	}
	return 0;
}

/* The environment a launcher gives every rank of the job, the ends of the
 * pipes included; RANK and the like are per rank. */
static void job_env(const struct pipes *p, int n, int nodes, int rootless, int port, int run_id,
                    int epoch, double timeout)
{
	char job[64];
	snprintf(job, sizeof(job), "bench-%d-%d", (int)getpid(), run_id);
	bench_world_env(n, nodes, rootless, port, job, epoch, timeout);
	if (bench_transport) {
		setenv("HPCT_TRANSPORT", bench_transport, 1);
		setenv("IPATH_NO_BACKTRACE", "1", 0); /* libfabric's libinfinipath */
	} else {
		unsetenv("HPCT_TRANSPORT");
	}
	setenv_int("HPCT_BENCH_FD", p->rep[1]);
	/* a rank in Python (hpct-bench-torch.py) pads its record to this */
	setenv_int("HPCT_BENCH_RECORD_SIZE", (int)sizeof(struct record));
	setenv_int("HPCT_BENCH_RELEASE_FD", p->rel[0]);
	if (bench_gate) {
		setenv_int("HPCT_BENCH_READY_FD", p->rdy[1]);
		setenv_int("HPCT_BENCH_GATE_FD", p->go[0]);
	} else {
		unsetenv("HPCT_BENCH_READY_FD");
		unsetenv("HPCT_BENCH_GATE_FD");
	}
}

/* The ranks hold their ends now: this process keeps its own, in b. */
static void keep_launcher_ends(struct batch *b, struct pipes *p, int n)
{
	close(p->rep[1]);
	close(p->rel[0]);
	if (bench_gate) {
		close(p->rdy[1]);
		close(p->go[0]);
		b->ready = p->rdy[0];
		b->gate = p->go[1];
	}
	b->n = n;
	b->rep = p->rep[0];
	b->rel = p->rel[1];
}

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
	b->how = &direct_launch;
	struct pipes p;
	if (open_pipes(&p) < 0)
		return -1;
	job_env(&p, n, nodes, rootless, port, run_id, epoch, timeout);
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
			if (interpreter)
				execl(interpreter, interpreter, self, (char *)NULL);
			else
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
	keep_launcher_ends(b, &p, launched);
	return 0;
}

/* Waits until fd can be read, or `deadline` (CLOCK_MONOTONIC, 0: none)
 * has passed; 1 or 0. */
static int wait_readable(int fd, double deadline)
{
	for (;;) {
		int ms = -1;
		if (deadline > 0) {
			double left = deadline - mono();
			if (left <= 0)
				return 0;
			ms = (int)(left * 1000) + 1;
		}
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int r = poll(&p, 1, ms);
		if (r > 0)
			return 1;
		if (r == 0 || errno != EINTR)
			return 0;
	}
}

/* Reads every rank's report (or until all writers are gone, or the
 * deadline, 0 for none). */
static void collect(struct batch *b, double deadline)
{
	struct record rec;
	while (b->got < b->n) {
		if (!wait_readable(b->rep, deadline))
			break;
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
		if (rec.start > 0 && (b->first == 0 || rec.start < b->first))
			b->first = rec.start;
		if (rec.pairs_new > b->max_pairs)
			b->max_pairs = (int)rec.pairs_new;
		b->pairs_new += rec.pairs_new;
		b->pairs_kept += rec.pairs_kept;
		b->bytes += rec.bytes_exchanged;
		if (rec.fds > b->max_fds)
			b->max_fds = rec.fds;
		if (rec.waves > b->max_waves)
			b->max_waves = rec.waves;
		if (rec.peers > b->max_peers)
			b->max_peers = rec.peers;
		if (rec.inflight_peak > b->inflight_peak)
			b->inflight_peak = rec.inflight_peak;
		b->inflight_waits += rec.inflight_waits;
		if (rec.op_us[0] > 0) {
			for (int i = 0; i < 2 * BENCH_STORE_OPS; i++)
				b->op_us[i] += rec.op_us[i];
			for (int i = 0; i < BENCH_STORE_CPU; i++)
				b->cpu_us[i] += rec.cpu_us[i];
			b->nops++;
		}
	}
}

/* Forgets what was collected: the next reports are another phase's. */
static void next_phase(struct batch *b)
{
	b->got = b->bad = b->max_conns = b->max_pairs = 0;
	b->msgs = b->max_rss = b->pairs_new = b->pairs_kept = b->bytes = 0;
	b->max_fds = b->inflight_peak = b->inflight_waits = 0;
	b->max_waves = b->max_peers = 0;
	b->last = b->first = 0;
}

/* Adds what b collected to *ph, a phase whose ranks may be in more than
 * one batch (a restart's survivors and replacements). */
static void phase_add(struct bench_phase *ph, const struct batch *b)
{
	if (b->max_conns > ph->max_conns)
		ph->max_conns = b->max_conns;
	if (b->max_pairs > ph->max_pairs)
		ph->max_pairs = b->max_pairs;
	if (b->max_rss > ph->max_rss)
		ph->max_rss = b->max_rss;
	ph->pairs_new += b->pairs_new;
	ph->pairs_kept += b->pairs_kept;
	ph->bytes += b->bytes;
	if (b->max_fds > ph->max_fds)
		ph->max_fds = b->max_fds;
	if (b->max_waves > ph->max_waves)
		ph->max_waves = b->max_waves;
	if (b->max_peers > ph->max_peers)
		ph->max_peers = b->max_peers;
	if (b->inflight_peak > ph->inflight_peak)
		ph->inflight_peak = b->inflight_peak;
	ph->inflight_waits += b->inflight_waits;
}

/* Lets the ranks tear down (EOF on their release pipe) without reaping
 * them: two batches that need each other to tear down (a standard path's
 * rank 0 waits for every client's goodbye, the replacements' too) are both
 * released before either is reaped. */
static void release(struct batch *b)
{
	if (b->rep >= 0)
		close(b->rep);
	if (b->rel >= 0)
		close(b->rel);
	b->rep = b->rel = -1;
}

/* Releases the ranks (or kills them: kill_all) and reaps them; 0 when all
 * reported success and, unless killed, exited 0. */
static int finish(struct batch *b, int kill_all)
{
	if (kill_all)
		b->how->kill(b);
	release(b);
	b->bad += b->how->reap(b, kill_all);
	return b->got < b->n || b->bad ? -1 : 0;
}

static void report_failure(const char *what, int rootless, const struct batch *b, int n)
{
	fprintf(stderr,
	        "hpct-bench: %s %s run with %d ranks failed (%d of %d reported, %d failures)\n",
	        rootless ? "rootless" : "standard", what, n, b->got, n, b->bad);
}

/* One run: N ranks on K loopback nodes; returns ms or -1. */
double bench_run_once(const char *self, const char *scenario, int n, int nodes, int rootless,
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
	collect(&b, 0);
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

int bench_phases_once(const char *self, const char *scenario, int n, int nodes, int rootless,
                      int port, int run_id, double timeout, int nphases, struct bench_phase *out)
{
	struct batch b;
	if (launch(&b, self, scenario, n, nodes, rootless, port, run_id, 0, timeout) < 0)
		return -1;
	int k;
	for (k = 0; k < nphases; k++) {
		next_phase(&b);
		collect(&b, 0);
		if (b.got < b.n || b.bad || b.first == 0)
			break;
		out[k] = (struct bench_phase){ .ms = (b.last - b.first) * 1000 };
		phase_add(&out[k], &b);
	}
	/* a phase short of reports: the others wait in its barrier for ever */
	if (finish(&b, k < nphases) < 0 || k < nphases) {
		report_failure(scenario, rootless, &b, n);
		return -1;
	}
	return 0;
}

/* The ranks to kill: rank 0 for kill-root, never rank 0 for restart (the
 * two scenarios tell a root's death from another rank's), the rest at
 * random from the seed and the repetition, so both paths lose the same
 * ranks; distinct, sorted (the order hpct_world_recover wants). */
static int pick_victims(int n, int kills, int kill_root, unsigned seed, int rep, int *out)
{
	unsigned x = seed * 2654435761u + (unsigned)rep;
	int k = 0;
	if (kill_root)
		out[k++] = 0;
	if (!kill_root && kills > n - 1)
		kills = n - 1;
	while (k < kills) {
		int v = 1 + (int)(((x = x * 1103515245u + 12345u) >> 8) % (unsigned)(n - 1)),
		    dup = 0;
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
 * hpct_world_recover (on the standard path: through rank 0's rendezvous,
 * which must have survived).  Timed from the kill until every rank finished the
 * world allgather and barrier at the new epoch.  *max_conns gets the
 * connections opened by the ranks of the new epoch (inprocess: by the
 * survivors, new ones only; *repl_conns: by the replacements).  `ranks`
 * names other rank scenarios for an in-process recovery (gloo-replace:
 * the work before the kill and after it is theirs, and *phase gets the
 * reports of the new epoch, timed from the first rank's start). */
double bench_restart_once(const char *self, int n, int nodes, int rootless, int port, int run_id,
                          double timeout, int kill_root, int kills, unsigned seed, int rep,
                          int inprocess, const struct bench_restart_ranks *ranks, int *max_conns,
                          int *repl_conns, struct bench_phase *phase)
{
	static const struct bench_restart_ranks restart_ranks = { "recover", "cold" };
	/* --state: restart's own ranks hold it and get it after the kill */
	bench_state_env(!ranks, 0);
	if (!ranks)
		ranks = &restart_ranks;
	int agent[2] = { -1, -1 };
	if (inprocess) {
		if (pipe2(agent, O_CLOEXEC) < 0 || fcntl(agent[0], F_SETFD, 0) < 0)
			return -1;
		setenv_int("HPCT_BENCH_AGENT_FD", agent[0]);
	}
	struct batch a, b;
	int rc = launch(&a, self, inprocess ? ranks->first : "cold", n, nodes, rootless, port,
	                run_id, 0, timeout);
	if (agent[0] >= 0)
		close(agent[0]);
	if (rc < 0) {
		if (agent[1] >= 0)
			close(agent[1]);
		return -1;
	}
	collect(&a, 0);
	if (a.got < n || a.bad) {
		if (agent[1] >= 0)
			close(agent[1]);
		finish(&a, 1);
		report_failure("steady-state", rootless, &a, n);
		return -1;
	}
	int victims[64];
	kills = pick_victims(n, kills, kill_root, seed, rep, victims);
	double t0 = mono();
	for (int k = 0; k < kills; k++)
		kill(a.pids[victims[k]], SIGKILL);
	double last;
	if (!inprocess) {
		finish(&a, 1); /* the agent stops the rest: all start again */
		/* --state: each new rank reads it from disk, not from the page
		 * cache (dropped while the old ranks die, not timed) */
		double t_drop = mono();
		if (bench_state.bytes && getenv("HPCT_BENCH_STATE")) {
			bench_state_drop();
			bench_state_env(1, 1);
		}
		t0 += mono() - t_drop;
		rc = launch(&b, self, "cold", n, nodes, rootless, port, run_id, 1, timeout);
		bench_state_env(0, 0);
		if (rc < 0)
			return -1;
		collect(&b, 0);
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
	rc = launch_ranks(&b, self, ranks->again, n, nodes, rootless, port, run_id, 1, timeout,
	                  victims, kills);
	bench_state_env(0, 0);
	/* the agent's word to every survivor */
	struct agent_msg m = { .epoch = 1, .nreplaced = kills };
	memcpy(m.replaced, victims, (size_t)kills * sizeof(int));
	for (int i = 0; i < n - kills; i++)
		if (write(agent[1], &m, sizeof(m)) != (ssize_t)sizeof(m))
			rc = -1;
	close(agent[1]);
	a.n = n - kills; /* the survivors' second reports */
	next_phase(&a);
	collect(&a, 0);
	if (rc == 0)
		collect(&b, 0);
	last = a.last > b.last ? a.last : b.last;
	*max_conns = a.max_conns;
	*repl_conns = b.max_conns;
	if (phase) {
		double first =
		        a.first > 0 && (b.first == 0 || a.first < b.first) ? a.first : b.first;
		*phase = (struct bench_phase){ .ms = first > 0 ? (last - first) * 1000 : -1 };
		phase_add(phase, &a);
		phase_add(phase, &b);
	}
	int bad = a.got < a.n || a.bad || b.got < b.n || b.bad;
	a.n = n; /* every pid, the victims' now 0, is reaped */
	a.got = n;
	if (rc == 0)
		release(&b);
	finish(&a, 0);
	if (rc == 0)
		finish(&b, 0);
	if (bad || rc < 0) {
		report_failure("in-process recovery", rootless, &b, kills);
		return -1;
	}
	return (last - t0) * 1000;
}

/* Reads the ranks' "ready" bytes until all N have said so; 0, or -1 when
 * one said it failed ('f'), all are gone, or the deadline passed. */
static int await_ready(struct batch *b, double deadline)
{
	char c[64];
	for (int k = 0; k < b->n;) {
		if (!wait_readable(b->ready, deadline))
			return -1;
		size_t want = (size_t)(b->n - k) < sizeof(c) ? (size_t)(b->n - k) : sizeof(c);
		ssize_t got = read(b->ready, c, want);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0 || memchr(c, 'f', (size_t)got))
			return -1;
		k += (int)got;
	}
	return 0;
}

/* Closes the fds of a pipe that are open. */
static void close_pair(int p[2])
{
	for (int i = 0; i < 2; i++)
		if (p[i] >= 0)
			close(p[i]);
	p[0] = p[1] = -1;
}

/* One torch run (see bench.h).  The ranks reuse the report and "ready"
 * pipes for the second incarnation: every first report is in before the
 * first release, every second "ready" after it.  The gate and release of
 * the second are pipes of their own, EOF being the signal. */
void bench_torch_once(const struct bench_launch *how, const char *python, const char *script, int n,
                      int nodes, int rootless, int port, int run_id, double timeout, int reinit,
                      struct bench_torch_times *out)
{
	int go2[2] = { -1, -1 }, rel2[2] = { -1, -1 };
	*out = (struct bench_torch_times){ .init_ms = -1, .reinit_ms = -1 };
	if (reinit) {
		if (pipe2(go2, O_CLOEXEC) < 0 || fcntl(go2[0], F_SETFD, 0) < 0 ||
		    pipe2(rel2, O_CLOEXEC) < 0 || fcntl(rel2[0], F_SETFD, 0) < 0) {
			fprintf(stderr, "hpct-bench: torch: pipe: %s\n", strerror(errno));
			close_pair(go2);
			close_pair(rel2);
			return;
		}
		setenv_int("HPCT_BENCH_GATE2_FD", go2[0]);
		setenv_int("HPCT_BENCH_RELEASE2_FD", rel2[0]);
	} else {
		unsetenv("HPCT_BENCH_GATE2_FD");
		unsetenv("HPCT_BENCH_RELEASE2_FD");
	}
	struct batch b;
	int rc = how->start(&b, python, script, n, nodes, rootless, port, run_id, timeout);
	/* the ranks hold the read ends now; this process keeps the write ends */
	if (go2[0] >= 0) {
		close(go2[0]);
		close(rel2[0]);
		go2[0] = rel2[0] = -1;
	}
	if (rc < 0 || b.gate < 0) {
		if (rc == 0)
			finish(&b, 1);
		close_pair(go2);
		close_pair(rel2);
		return;
	}
	/* first incarnation: from every rank having imported torch (the
	 * imports' own deadline apart: 128 of them on 2 cores take minutes) */
	double deadline = mono() + timeout + GRACE_S, t0 = mono();
	rc = await_ready(&b, deadline);
	if (rc == 0) {
		t0 = mono();
		deadline = t0 + timeout + GRACE_S;
	}
	close(b.gate);
	if (rc == 0)
		collect(&b, deadline);
	out->init_rss = b.max_rss;
	out->init_conns = b.max_conns;
	for (int i = 0; i < 2 * BENCH_STORE_OPS; i++) /* the mean of the ranks' */
		out->op_us[i] = b.nops ? b.op_us[i] / b.nops : 0;
	for (int i = 0; i < BENCH_STORE_CPU; i++)
		out->cpu_us[i] = b.nops ? b.cpu_us[i] / b.nops : 0;
	if (rc < 0 || b.got < b.n || b.bad) {
		close(b.ready);
		close_pair(go2);
		close_pair(rel2);
		/* one hangs or is gone, or (reinit) the others would go on to a
		 * second incarnation without it: no waiting on them */
		finish(&b, reinit || b.got < b.n);
		report_failure(rc < 0 ? "torch (at import)" : "torch", rootless, &b, n);
		return;
	}
	double last = b.last;
	if (!reinit) {
		close(b.ready);
		if (finish(&b, 0) < 0) {
			report_failure("torch (destroy)", rootless, &b, n);
			return;
		}
		out->init_ms = (last - t0) * 1000;
		return;
	}
	out->init_ms = (last - t0) * 1000;
	/* second incarnation: from every rank having destroyed the first */
	close(b.rel);
	b.rel = rel2[1]; /* finish() closes it now */
	b.got = b.bad = 0;
	b.max_rss = 0;
	b.max_conns = 0;
	b.last = 0;
	deadline = mono() + timeout + GRACE_S;
	rc = await_ready(&b, deadline);
	double t1 = mono();
	close(go2[1]);
	if (rc == 0)
		collect(&b, deadline);
	close(b.ready);
	out->reinit_rss = b.max_rss;
	out->reinit_conns = b.max_conns;
	last = b.last;
	int bad = rc < 0 || b.got < b.n || b.bad;
	if (finish(&b, rc < 0 || b.got < b.n) < 0 || bad) {
		report_failure(rc < 0 ? "torch re-init (destroy)" : "torch re-init", rootless, &b,
		               n);
		return;
	}
	out->reinit_ms = (last - t1) * 1000;
}

/* ------------------------------------------------- how ranks start */

static int direct_start(struct batch *b, const char *python, const char *script, int n, int nodes,
                        int rootless, int port, int run_id, double timeout)
{
	unsetenv("HPCT_BENCH_SOCKET"); /* the script's sign of a torchrun launch */
	interpreter = python;
	int rc = launch(b, script, "torch", n, nodes, rootless, port, run_id, 0, timeout);
	interpreter = NULL;
	return rc;
}

static void direct_kill(struct batch *b)
{
	for (int r = 0; r < b->n; r++)
		if (b->pids[r] > 0)
			kill(b->pids[r], SIGKILL);
}

static int direct_reap(struct batch *b, int killed)
{
	int bad = 0;
	for (int r = 0; r < b->n; r++) {
		int st;
		if (b->pids[r] > 0 && waitpid(b->pids[r], &st, 0) == b->pids[r] && !killed &&
		    !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
			bad++;
	}
	free(b->pids);
	b->pids = NULL;
	return bad;
}

/* torchrun on one node: the environment of a direct launch on one node
 * (the agent drops the per-rank part, which torchrun sets itself), the
 * agent started, and the pipes handed to each worker before this process
 * lets go of the workers' ends. */
static int torchrun_start(struct batch *b, const char *python, const char *script, int n, int nodes,
                          int rootless, int port, int run_id, double timeout)
{
	(void)nodes;
	memset(b, 0, sizeof(*b));
	b->ready = b->gate = -1;
	b->how = &torchrun_launch;
	struct pipes p;
	if (open_pipes(&p) < 0)
		return -1;
	job_env(&p, n, 1, rootless, port, run_id, 0, timeout);
	char id[64];
	snprintf(id, sizeof(id), "bench-%d-%d", (int)getpid(), run_id);
	int rc = bench_torchrun_start(python, script, n, port, id, &b->agent);
	if (rc == 0 && bench_torchrun_hand_over(b->agent, mono() + timeout + GRACE_S) < 0) {
		bench_torchrun_kill(b->agent);
		bench_torchrun_wait(b->agent, 1);
		b->agent = NULL;
		rc = -1;
	}
	keep_launcher_ends(b, &p, n);
	if (rc < 0) {
		close(b->rep);
		close(b->rel);
		if (b->gate >= 0) {
			close(b->ready);
			close(b->gate);
		}
		b->ready = b->gate = -1;
	}
	return rc;
}

static void torchrun_kill(struct batch *b)
{
	bench_torchrun_kill(b->agent);
}

static int torchrun_reap(struct batch *b, int killed)
{
	int rc = bench_torchrun_wait(b->agent, killed);
	b->agent = NULL;
	return rc < 0;
}

static const struct bench_launch direct_launch = {
	.name = "direct",
	.label = "",
	.start = direct_start,
	.kill = direct_kill,
	.reap = direct_reap,
};
static const struct bench_launch torchrun_launch = {
	.name = "torchrun",
	.label = "-torchrun",
	.one_node = 1,
	/* seen here: 1.13 fails every time (worker_count=4 of 2); 2.13 at 2
	 * ranks now and then, at 4 every time of four */
	.no_reinit = "PyTorch cannot init again over torchrun's store, which keeps the first "
	             "incarnation's keys under the names the second uses (the group counter "
	             "starts again at 0; stale keys, as in pytorch#55967): 1.13's store-based "
	             "barrier counts past the world size and times out, 2.13's Gloo reads "
	             "peers' old addresses; 2.x's is the agent's, which hpct leaves the job's "
	             "(TORCHELASTIC_USE_AGENT_STORE=True); not timed for 1.13 either, which "
	             "hpct serves",
	.start = torchrun_start,
	.kill = torchrun_kill,
	.reap = torchrun_reap,
};
static const struct bench_launch *const launches[] = { &direct_launch, &torchrun_launch };

const struct bench_launch *bench_launch_find(const char *name)
{
	for (size_t i = 0; i < sizeof(launches) / sizeof(launches[0]); i++)
		if (strcmp(launches[i]->name, name) == 0)
			return launches[i];
	return NULL;
}
