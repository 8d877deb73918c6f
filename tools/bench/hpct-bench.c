/* hpct-bench: launches local ranks itself and times bootstrap scenarios,
 * side by side for the rootless and the standard path.
 *
 *   hpct-bench --scenario cold|gloo|nccl-root --ranks 64,256 --path rootless,standard
 *              --repeat 5 [--nodes K] [--json FILE] [--timeout S]
 *   hpct-bench --scenario nccl-root --ranks 64,256,1024 --nccl LIB,LIB
 *   hpct-bench --scenario torch --torch 1.13,2.13 --path stock,rootless --reinit
 *              [--launch direct,torchrun] [--replicas 1,2] [--store-ops K]
 *   hpct-bench --scenario nvrx [--ranks 4] [--repeat 3]   (bench_nvrx.c)
 *   hpct-bench --scenario nccl-init [--ranks 8,16,32,64]  (bench_nccl_init.c)
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
 * Rows rootless and standard connect the pairs the same way, from hpct's
 * pool of threads (HPCT_GLOO_CONNECT=pool); the standard path brings a
 * third row, std-mesh, with Gloo's own connectFullMesh as stock PyTorch
 * runs it (fullmesh); JSON "connect" says which (gloo_rows).
 * gloo-reuse: the ranks (hpct-bench-gloo) join the world and make a Gloo
 * device; then, twice, they meet in a world barrier, create a context over
 * the world, finish a checked allreduce and destroy it.  Each creation is
 * timed from the first rank out of that barrier (every rank has entered
 * it) until the last rank's allreduce is done.  Two contexts, alternating
 * run by run (contexts[]): persistent (the second creation takes the
 * first's pairs from its domain) and temporary (every pair again, as
 * before domains).  Rows gloo-reuse/<context>/1st and /2nd, on both paths,
 * pairs through hpct's pool; max_conns is the hpct connections a creation
 * opened.  In the JSON "scenario":"gloo-reuse", "context", "creation"
 * (first, second), "context_ms" (the same time here), "pairs_new" and
 * "pairs_kept" (pair ends, summed over ranks), "max_pairs_new" (the most
 * of one rank) and "bytes_exchanged" (pair addresses sent and received
 * through hpct, all ranks; hpct_gloo_context_get_stats).
 * gloo-replace: restart --recovery inprocess (--kill K, never rank 0)
 * where, before the kill, every rank created the context and destroyed it,
 * and after it every rank (survivors recovered, replacements new) meets in
 * a world barrier and creates it again: rows gloo-replace/persistent (only
 * the replaced ranks' pairs are new) and /temporary.  Timed from the kill;
 * "context_ms" from the barrier after the recovery.
 * restart, kill-root: see bench_restart_once (--kill K ranks, --seed S);
 * one row per path and --recovery mode: full (every rank starts again) and
 * inprocess (survivors stay: rootless through hpct_world_recover, standard
 * through rank 0's rendezvous at the next epoch; kill-root's standard row
 * cannot, its root died, and restarts in full, said after the table).
 * Rows restart/full, restart/inprocess ...; in the JSON "scenario":"restart"
 * and "recovery":"full" or "inprocess", "forced_full" true for that row.
 * After the table, per N, the root's ratio (standard/rootless, the same
 * recovery) and the in-process recovery's (full/in-process, the same path).
 * With --state SIZE (restart, kill-root) the time includes each new rank's
 * getting SIZE bytes of state: in-process from the survivors (hpct_fanout),
 * in full from a file on local disk (bench_state.c); JSON "state_bytes".
 * fanout: on its own, see bench_fanout.c.
 * nccl-root: no launch; see bench_nccl_root_once.  "standard" is NCCL's own root,
 * "rootless" hpct's micro-roots.  With --nccl, the same runs against each
 * libnccl.so.2 listed, one table (bench_releases.c).
 * torch: N ranks of an unmodified PyTorch job (hpct-bench-torch.py), run by
 * the Python of each release --torch lists (1.13: Debian's; 2.13: a venv,
 * tools/torch-venv.sh), in a network namespace of its own; timed from every
 * rank having imported torch to the end of init_process_group("gloo"), one
 * new_group and the first all_reduce.  Each release is launched the ways
 * --launch lists (both by default; bench_launch.c's table): "direct", the
 * ranks started together by hpct-bench, rank 0's TCPStore server the store
 * (rows torch-<release>: a client that arrives before that server listens
 * waits, 1.13's a fixed 1 s); "torchrun", the release's own torchrun on one
 * node with its static rendezvous, the agent's store, up before any worker
 * starts, the store (rows torch-<release>-torchrun).  With --reinit, rows
 * <row>-reinit too: the same work again after destroy_process_group, from
 * every rank having destroyed the first (under torchrun: not run, and
 * said why: PyTorch cannot init again over the agent's store, which hpct
 * leaves the job's).  In the
 * JSON: "scenario":"torch" or "torch-reinit", "torch":"<release>" and
 * "launch":"direct" or "torchrun".  The output names what starting a
 * process costs here (fork+exec).  --replicas 1,2: the rootless path
 * becomes a row per HPCT_STORE_REPLICAS (rootless-r1, rootless-r2), the
 * same job.  --store-ops K: after the timed part every rank does K rounds
 * of SET, GET, ADD and WAIT on keys of its own in its process group's
 * store, all ranks at once; after the table, each row's medians (us).
 * nvrx: on its own, see bench_nvrx.c.
 *
 * Every rank then waits until all have reported before it tears down: on a
 * cluster a finished rank goes on with its own cores, while here 1024 exits
 * would steal the 2 cores from the ranks still bootstrapping, and the path
 * whose ranks finish at staggered times would pay for it.  Runs of the two
 * paths alternate, so drift in machine speed hits both alike.  Prints
 * median/min/max per path and N, and writes the same as JSON; beside every
 * rootless row the floor ceil(log2 N) x the loopback round trip, and after
 * the table that round trip and the cost of a fork+exec here.
 *
 * max_conns is the largest count, over ranks, of hpct's own connections
 * (opened + accepted, hpct_world_get_stats) when the rank reported; Gloo's
 * pairs (N-1 per rank, made by Gloo) are not in it.  On the standard path
 * it is each rank's one connection to the rendezvous (rank 0's server does
 * not count what it accepts).  conn_bound is the rootless bound
 * 2*ceil(log2 N)+2, which the gloo scenario's port alltoall keeps too. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hpct/hpct.h"
#include "hpct/nccl.h"
#include "tools/bench.h"
#include "tools/bench_measure.h"
#include "tools/bench_plot.h"
#include "tools/bench_rank.h"

#define MAX_LIST 16

struct result {
	const char *scenario; /* the table's: torch-1.13, restart/inprocess */
	const char *kind;     /* the JSON's: torch or torch-reinit; restart, kill-root; else as
	                         scenario */
	const char *recovery; /* restart, kill-root: full or inprocess; else NULL */
	int forced_full;      /* kill-root inprocess, standard: the root died, all restart */
	const char *torch;    /* the torch release, or NULL */
	const char *launch;   /* torch: how its ranks were started (direct, torchrun) */
	const char *not_run;  /* why this row cannot be run, or NULL */
	const char *path;
	const char *connect; /* gloo: HPCT_GLOO_CONNECT of the row's ranks; else NULL */
	int ranks, nodes, repeat, ok;
	double ms[64];
	int max_conns;
	int repl_conns;                  /* restart --recovery inprocess: the replacements' */
	int run_conns[64], run_repl[64]; /* the same, run by run */
	long msgs;    /* hpct messages sent by all ranks in the last run (cold, gloo) */
	long max_rss; /* largest resident memory of a rank, kB */
	/* gloo-reuse, gloo-replace: the context (persistent or temporary), which
	 * creation (gloo-reuse: first or second), and what the last run's
	 * creation did (struct bench_phase) */
	const char *context, *creation;
	int max_pairs;
	long pairs_new, pairs_kept, bytes;
	double ctx_ms[64]; /* gloo-replace: from the barrier after the recovery */
	int nctx;
	/* torch --store-ops: each run's SET, GET, ADD, WAIT (struct
	 * bench_torch_times) */
	double op_us[4][64];
	int nops;
};

static int ceil_log2(int n)
{
	int k = 0;
	while ((1 << k) < n)
		k++;
	return k;
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

/* fork + exec of /bin/true + waitpid, median of 200 after a warm-up: what
 * starting one process costs here; -1 if it could not be measured. */
static double measure_fork_exec_ms(void)
{
	double s = fork_exec_cost("/bin/true", 200);
	return s < 0 ? -1 : s * 1000;
}

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: hpct-bench --scenario S[,S..] --ranks N[,N..] [--path rootless,standard]\n"
	        "                  [--repeat R] [--nodes K] [--json FILE] [--plot FILE.png]\n"
	        "                  [--timeout S] [--port P] [--kill K] [--recovery "
	        "full,inprocess]\n"
	        "                  [--seed S] [--transport tcp,ofi] [--gate]\n"
	        "                  [--state SIZE] (restart, kill-root: the new ranks' state,\n"
	        "                  from the survivors or from a file; --ranks 16 by default)\n"
	        "                  [--nccl LIBNCCL[,LIBNCCL..]] (nccl-root: one table over "
	        "releases)\n"
	        "                  [--torch 1.13,2.13] [--reinit] (torch: the releases, "
	        "and a second\n"
	        "                  incarnation after destroy_process_group)\n"
	        "                  [--launch direct,torchrun] (torch: ranks started together, "
	        "rank 0's\n"
	        "                  server the store; and/or torchrun's workers, its agent's "
	        "store;\n"
	        "                  default both)\n"
	        "                  [--replicas 1,2] (torch: a rootless row per "
	        "HPCT_STORE_REPLICAS)\n"
	        "                  [--store-ops K] (torch: then K SET/GET/ADD/WAIT a rank, "
	        "timed)\n"
	        "scenarios: cold, gloo (the standard path adds a row std-mesh: Gloo's own\n"
	        "connectFullMesh, where standard connects through hpct's pool as rootless\n"
	        "does), gloo-reuse (a persistent and a temporary Gloo context created\n"
	        "twice), gloo-replace (created again after --kill K ranks were replaced in\n"
	        "process), nccl-root, restart, kill-root, torch (paths stock and\n"
	        "rootless: an unmodified PyTorch job, with libhpct_preload.so for rootless);\n"
	        "and sim, fanout, nvrx (NVIDIA Resiliency Extension's restart, a rank\n"
	        "killed) and nccl-init (real NCCL ranks, stock against derived ids) on their\n"
	        "own (hpct-bench --scenario sim --help, ... fanout --help)\n");
}

/* The ways a Gloo context is created in gloo-reuse and gloo-replace, both
 * run in every repetition, alternating (HPCT_BENCH_CONTEXT of the ranks). */
static const char *const contexts[] = { "persistent", "temporary" };
#define NCONTEXTS 2

/* Adds one run's figures to its row. */
static void add_run(struct result *r, double ms, int conns, int repl, long msgs, long rss)
{
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

/* The gloo scenario's rows, each a path and how its ranks connect Gloo's
 * pairs (HPCT_GLOO_CONNECT): hpct's pair pool on both paths, so that
 * standard against rootless is the path alone; and on the standard path
 * Gloo's own connectFullMesh, what a stock PyTorch job runs, as a row of
 * its own (std-mesh), so that std-mesh against standard is the pool alone.
 * --path standard brings both standard rows. */
#define GLOO_MESH "std-mesh"
static const struct gloo_row {
	const char *path, *connect;
} gloo_rows[] = { { "rootless", "pool" }, { "standard", "pool" }, { GLOO_MESH, "fullmesh" } };

static const char *gloo_connect(const char *scenario, const char *path)
{
	if (strcmp(scenario, "gloo") != 0) /* gloo-reuse, gloo-replace: the pool only */
		return strcmp(path, GLOO_MESH) == 0 ? NULL : "pool";
	for (size_t i = 0; i < sizeof(gloo_rows) / sizeof(gloo_rows[0]); i++)
		if (strcmp(gloo_rows[i].path, path) == 0)
			return gloo_rows[i].connect;
	return NULL; /* --transport's rows: the rootless default */
}

/* std-mesh is a row of the gloo scenario only: in a list of scenarios the
 * others skip it. */
static int skipped(const struct result *r)
{
	return strcmp(r->path, GLOO_MESH) == 0 && !r->connect;
}

/* A row of the standard path: its own name, PyTorch's, or gloo's std-mesh. */
/* After the table, for torch --store-ops: each row's store operations,
 * the median over runs of the ranks' mean of their own medians. */
static void store_ops_summary(struct result *res, int nres, int ops)
{
	int head = 0;
	for (int i = 0; i < nres; i++) {
		struct result *r = &res[i];
		if (!r->nops)
			continue;
		if (!head++)
			printf("store operations, us (%d of each per rank, all ranks at once, on "
			       "the "
			       "process group's store; median over runs of the ranks' mean of "
			       "their "
			       "medians):\n%-26s %-11s %6s %9s %9s %9s %9s\n",
			       ops, "scenario", "path", "ranks", "set", "get", "add", "wait");
		double m[4];
		for (int o = 0; o < 4; o++)
			m[o] = median_of(r->op_us[o], r->nops);
		printf("%-26s %-11s %6d %9.1f %9.1f %9.1f %9.1f\n", r->scenario, r->path, r->ranks,
		       m[0], m[1], m[2], m[3]);
	}
}

static int on_standard(const char *path)
{
	return strcmp(path, "standard") == 0 || strcmp(path, "stock") == 0 ||
	       strcmp(path, GLOO_MESH) == 0;
}

/* `arg`, a comma list of names each at most once, as indices into
 * names[0..n); their count, or -1 with what is wrong said, naming `opt`. */
static int parse_names(const char *opt, const char *arg, const char *const *names, int n, int *out)
{
	char *copy = strdup(arg), *save = NULL;
	int k = 0;
	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		int found = -1;
		for (int i = 0; i < n; i++)
			if (strcmp(t, names[i]) == 0)
				found = i;
		for (int i = 0; i < k && found >= 0; i++)
			if (out[i] == found)
				found = -1;
		if (found < 0 || k == n) {
			fprintf(stderr, "hpct-bench: %s %s: %s: want %s%s%s, each once\n", opt, arg,
			        t, names[0], n > 1 ? " and/or " : "", n > 1 ? names[1] : "");
			free(copy);
			return -1;
		}
		out[k++] = found;
	}
	free(copy);
	if (k == 0)
		fprintf(stderr, "hpct-bench: %s '%s': want %s%s%s\n", opt, arg, names[0],
		        n > 1 ? " and/or " : "", n > 1 ? names[1] : "");
	return k > 0 ? k : -1;
}

/* The row of (scenario, recovery, path, N), or NULL if it did not run. */
static const struct result *find_row(const struct result *res, int nres, const char *scenario,
                                     const char *recovery, const char *path, int n)
{
	for (int i = 0; i < nres; i++)
		if (res[i].ok && res[i].recovery && strcmp(res[i].kind, scenario) == 0 &&
		    strcmp(res[i].recovery, recovery) == 0 && strcmp(res[i].path, path) == 0 &&
		    res[i].ranks == n)
			return &res[i];
	return NULL;
}

/* A Gloo creation's figures (bench_phase) added to its row. */
static void add_phase(struct result *r, double ms, int conns, int repl,
                      const struct bench_phase *ph)
{
	add_run(r, ms, conns, repl, 0, ph->max_rss);
	r->pairs_new = ph->pairs_new;
	r->pairs_kept = ph->pairs_kept;
	r->bytes = ph->bytes;
	if (ph->max_pairs > r->max_pairs)
		r->max_pairs = ph->max_pairs;
	r->ctx_ms[r->nctx++] = ph->ms;
}

/* The row of (JSON scenario, context, creation, path, N), or NULL if it
 * did not run. */
static const struct result *find_gloo_row(const struct result *res, int nres, const char *kind,
                                          const char *context, const char *creation,
                                          const char *path, int n)
{
	for (int i = 0; i < nres; i++)
		if (res[i].ok && res[i].context && strcmp(res[i].kind, kind) == 0 &&
		    strcmp(res[i].context, context) == 0 && strcmp(res[i].path, path) == 0 &&
		    res[i].ranks == n &&
		    (!creation || (res[i].creation && strcmp(res[i].creation, creation) == 0)))
			return &res[i];
	return NULL;
}

/* After the table, for gloo-reuse: per path and N, first against second
 * creation of each context, side by side; for gloo-replace, the persistent
 * context against the temporary one after the same recovery.  Medians are
 * in ms[0] and ctx_ms[0] by now. */
static void gloo_summary(const struct result *res, int nres)
{
	for (int i = 0; i < nres; i++) {
		const struct result *r = &res[i];
		if (!r->ok || !r->context || strcmp(r->context, "persistent") != 0)
			continue;
		if (r->creation && strcmp(r->creation, "first") == 0) {
			printf("gloo-reuse N=%d %s: second/first creation, median:", r->ranks,
			       r->path);
			for (int c = 0; c < NCONTEXTS; c++) {
				const struct result *a = find_gloo_row(res, nres, "gloo-reuse",
				                                       contexts[c], "first",
				                                       r->path, r->ranks),
				                    *b = find_gloo_row(res, nres, "gloo-reuse",
				                                       contexts[c], "second",
				                                       r->path, r->ranks);
				if (a && b)
					printf("%s %s %.3f (%.1f -> %.1f ms; pairs new per rank "
					       "%d -> %d; bytes exchanged %ld -> %ld)",
					       c ? ";" : "", contexts[c], b->ms[0] / a->ms[0],
					       a->ms[0], b->ms[0], a->max_pairs, b->max_pairs,
					       a->bytes, b->bytes);
			}
			printf("\n");
		} else if (!r->creation) {
			const struct result *t = find_gloo_row(
			        res, nres, "gloo-replace", "temporary", NULL, r->path, r->ranks);
			printf("gloo-replace N=%d %s: new pairs after the recovery, persistent "
			       "%ld (%ld pair ends), most per rank %d",
			       r->ranks, r->path, r->pairs_new / 2, r->pairs_new, r->max_pairs);
			if (t)
				printf(", temporary %ld (%ld), most %d; persistent/temporary, "
				       "median: %.3f from the kill (%.1f against %.1f ms), %.3f "
				       "from the barrier after the recovery (%.1f against %.1f "
				       "ms)",
				       t->pairs_new / 2, t->pairs_new, t->max_pairs,
				       r->ms[0] / t->ms[0], r->ms[0], t->ms[0],
				       r->ctx_ms[0] / t->ctx_ms[0], r->ctx_ms[0], t->ctx_ms[0]);
			printf("\n");
		}
	}
}

/* After the table, for torch --reinit: each row's second incarnation
 * against its first, side by side. */
static void reinit_summary(const struct result *res, int nres, int stride)
{
	for (int i = 0; i + stride < nres; i++) {
		const struct result *a = &res[i], *b = &res[i + stride];
		if (!a->ok || !b->ok || !a->torch || strcmp(b->kind, "torch-reinit") != 0 ||
		    strcmp(a->kind, "torch") != 0)
			continue;
		printf("%s N=%d %s: second/first incarnation, median ratio %.3f (%.1f -> %.1f "
		       "ms)\n",
		       a->scenario, a->ranks, a->path, b->ms[0] / a->ms[0], a->ms[0], b->ms[0]);
	}
}

/* After the table, for restart and kill-root: the connections the
 * in-process recoveries opened, and, per N, which ratio is whose: the
 * root's (standard against rootless, the same recovery on both paths) and
 * the in-process recovery's (full restart against in-process, one path).
 * Medians are in ms[0] by now. */
static void recovery_summary(const struct result *res, int nres)
{
	static const char *const scen[2] = { "restart", "kill-root" };
	static const char *const paths[2] = { "rootless", "standard" };
	for (int i = 0; i < nres; i++) {
		const struct result *r = &res[i];
		if (!r->ok || !r->recovery || strcmp(r->recovery, "inprocess") != 0)
			continue;
		if (r->forced_full) {
			printf("%s N=%d %s: full restart forced: the root died (the standard "
			       "path's rendezvous lived in rank 0)\n",
			       r->scenario, r->ranks, r->path);
			continue;
		}
		printf("%s N=%d %s: new connections, at most per survivor %d, per replacement "
		       "%d; run by run (survivor/replacement):",
		       r->scenario, r->ranks, r->path, r->max_conns, r->repl_conns);
		for (int k = 0; k < r->ok; k++)
			printf(" %d/%d", r->run_conns[k], r->run_repl[k]);
		printf("\n");
	}
	for (int s = 0; s < 2; s++)
		for (int i = 0; i < nres; i++) {
			const struct result *r = &res[i];
			if (!r->ok || !r->recovery || strcmp(r->kind, scen[s]) != 0 ||
			    strcmp(r->path, "rootless") != 0 || strcmp(r->recovery, "full") != 0)
				continue;
			const struct result *v[2][2]; /* [full, inprocess][rootless, standard] */
			int all = 1;
			for (int m = 0; m < 2; m++)
				for (int p = 0; p < 2; p++)
					all &= (v[m][p] = find_row(res, nres, scen[s],
					                           m ? "inprocess" : "full",
					                           paths[p], r->ranks)) != NULL;
			if (!all)
				continue;
			printf("%s N=%d: the root's cost, standard/rootless: %.2f in a full "
			       "restart, %.2f in-process%s; what in-process recovery saves, "
			       "full/in-process: %.2f rootless, %.2f standard\n",
			       scen[s], r->ranks, v[0][1]->ms[0] / v[0][0]->ms[0],
			       v[1][1]->ms[0] / v[1][0]->ms[0],
			       v[1][1]->forced_full ? " (standard forced to restart in full)" : "",
			       v[0][0]->ms[0] / v[1][0]->ms[0], v[0][1]->ms[0] / v[1][1]->ms[0]);
		}
}

#define MAX_SCENARIOS 16
#define MAX_TORCH     4
#define MAX_LAUNCH    2

/* What one scenario of the list needs to run.  torch is one scen per
 * release and launch, and with --reinit one more after each, whose rows its
 * runs fill; restart and kill-root one per --recovery mode. */
struct scen {
	const char *name;
	const struct scenario *sc; /* NULL for nccl-root, restart, kill-root */
	int nccl_root, restart, kill_root, torch;
	int inprocess;   /* restart, kill-root: survivors recover in their processes */
	int reinit_rows; /* torch: the rows of the scen before's second incarnation */
	/* gloo-reuse (4 scens: each context's first and second creation) and
	 * gloo-replace (2: each context): the first scen's runs fill the
	 * others' rows, contexts alternating run by run */
	int gloo_reuse, gloo_replace, gloo_copy;
	char label[32]; /* the table's name: torch-1.13, torch-1.13-torchrun-reinit */
	const struct bench_torch *release;
	const struct bench_launch *launch;
	char self[4096]; /* the program that plays its ranks */
};

static int setup_scen(struct scen *s, const char *name, const char *exe)
{
	s->name = name;
	s->nccl_root = strcmp(name, "nccl-root") == 0;
	s->kill_root = strcmp(name, "kill-root") == 0;
	s->restart = s->kill_root || strcmp(name, "restart") == 0;
	s->torch = strcmp(name, "torch") == 0;
	s->gloo_reuse = strcmp(name, "gloo-reuse") == 0;
	s->gloo_replace = strcmp(name, "gloo-replace") == 0;
	snprintf(s->label, sizeof(s->label), "%s", name);
	s->sc = bench_find_scenario(name);
	if ((!s->sc && !s->nccl_root && !s->restart) || strcmp(name, "recover") == 0 ||
	    strcmp(name, "fanout") == 0) {
		fprintf(stderr,
		        "hpct-bench: --scenario %s: want cold, gloo, gloo-reuse, gloo-replace, "
		        "nccl-root, restart, kill-root or torch (sim and fanout run on their "
		        "own)\n",
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

/* One run of gloo-reuse or gloo-replace with context c, into the rows of
 * scen r's group (`stride` rows apart: the next scen's); 1 if it failed. */
static int gloo_run(const struct scen *s, struct result *r, int c, int stride, int n, int nodes,
                    int rootless, int port, int run_id, double timeout, int kills, unsigned seed,
                    int rep)
{
	if (s->gloo_reuse) {
		struct bench_phase ph[2];
		if (bench_phases_once(s->self, "gloo-reuse", n, nodes, rootless, port, run_id,
		                      timeout, 2, ph) < 0)
			return 1;
		for (int t = 0; t < 2; t++) /* first, then second creation */
			add_phase(&r[(2 * c + t) * stride], ph[t].ms, ph[t].max_conns, 0, &ph[t]);
		return 0;
	}
	static const struct bench_restart_ranks ranks = { "gloo-replace", "gloo-replacement" };
	struct bench_phase ph;
	int conns = 0, repl = 0;
	double ms = bench_restart_once(s->self, n, nodes, rootless, port, run_id, timeout, 0, kills,
	                               seed, rep, 1, &ranks, &conns, &repl, &ph);
	if (ms < 0 || ph.ms < 0)
		return 1;
	add_phase(&r[c * stride], ms, conns, repl, &ph);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--as-rank") == 0) {
		const struct scenario *sc = bench_find_scenario(argv[2]);
		return sc && sc->rank ? bench_rank_main(sc->rank) : 2;
	}
	for (int i = 1; i < argc; i++) { /* their own options and tables */
		const char *sc = strcmp(argv[i], "--scenario") == 0 && i + 1 < argc ? argv[i + 1]
		                 : strncmp(argv[i], "--scenario=", 11) == 0         ? argv[i] + 11
		                                                                    : "";
		if (strcmp(sc, "fanout") == 0)
			return bench_fanout_main(argc, argv);
		if (strcmp(sc, "nvrx") == 0)
			return bench_nvrx_main(argc, argv);
		if (strcmp(sc, "nccl-init") == 0)
			return bench_nccl_init_main(argc, argv);
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
	const char *recovery_arg = "full", *plot = NULL, *transports = NULL, *nccl_libs = NULL;
	const char *torch_arg = NULL, *launch_arg = NULL, *replicas_arg = NULL;
	int kills = 1, reinit = 0, store_ops = 0;
	uint64_t state = 0;
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
		                              { "nccl", required_argument, NULL, 'N' },
		                              { "torch", required_argument, NULL, 'V' },
		                              { "reinit", no_argument, NULL, 'I' },
		                              { "launch", required_argument, NULL, 'L' },
		                              { "state", required_argument, NULL, 'Z' },
		                              { "store-ops", required_argument, NULL, 'O' },
		                              { "replicas", required_argument, NULL, 'Q' },
		                              { "help", no_argument, NULL, 'h' },
		                              { NULL, 0, NULL, 0 } };
	int c;
	while ((c = getopt_long(argc, argv, "s:n:p:r:k:j:G:T:gt:P:K:R:S:N:V:IL:Z:O:Q:h", opts,
	                        NULL)) != -1) {
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
			recovery_arg = optarg;
			break;
		case 'S':
			seed = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'N':
			nccl_libs = optarg;
			break;
		case 'V':
			torch_arg = optarg;
			break;
		case 'I':
			reinit = 1;
			break;
		case 'L':
			launch_arg = optarg;
			break;
		case 'O':
			if ((store_ops = atoi(optarg)) < 1 || store_ops > 100000) {
				fprintf(stderr, "hpct-bench: --store-ops %s: want 1..100000\n",
				        optarg);
				return 2;
			}
			break;
		case 'Q':
			replicas_arg = optarg;
			break;
		case 'Z':
			if (!(state = bench_parse_size(optarg))) {
				fprintf(stderr, "hpct-bench: --state %s: want a size (256M)\n",
				        optarg);
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	/* --recovery: full and/or inprocess, each its own rows */
	static const char *const recovery_names[] = { "full", "inprocess" };
	int recov_idx[2];
	int nrecov = parse_names("--recovery", recovery_arg, recovery_names, 2, recov_idx);
	if (nrecov < 0)
		return 2;
	const char *recoveries[2];
	for (int i = 0; i < nrecov; i++)
		recoveries[i] = recovery_names[recov_idx[i]];
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
	/* --launch and --torch, checked before anything runs */
	static struct bench_torch releases[MAX_TORCH];
	int ntorch = 0, want_torch = strstr(scenario_arg, "torch") != NULL;
	const char *torch_only = torch_arg      ? "--torch"
	                         : reinit       ? "--reinit"
	                         : launch_arg   ? "--launch"
	                         : store_ops    ? "--store-ops"
	                         : replicas_arg ? "--replicas"
	                                        : NULL;
	if (torch_only && !want_torch) {
		fprintf(stderr, "hpct-bench: %s goes with --scenario torch only\n", torch_only);
		return 2;
	}
	if (store_ops) { /* the ranks measure after the timed init */
		char v[16];
		snprintf(v, sizeof(v), "%d", store_ops);
		setenv("HPCT_BENCH_STORE_OPS", v, 1);
	}

	const struct bench_launch *launches[MAX_LAUNCH];
	int nlaunch = 0;
	if (want_torch) {
		static const char *const launch_names[] = { "direct", "torchrun" };
		int launch_idx[MAX_LAUNCH];
		nlaunch = parse_names("--launch", launch_arg ? launch_arg : "direct,torchrun",
		                      launch_names, 2, launch_idx);
		if (nlaunch < 0)
			return 2;
		for (int i = 0; i < nlaunch; i++)
			launches[i] = bench_launch_find(launch_names[launch_idx[i]]);
		/* --torch: each release with its interpreter */
		char *tl = strdup(torch_arg ? torch_arg : "1.13"), *tsave = NULL;
		for (char *t = strtok_r(tl, ",", &tsave); t; t = strtok_r(NULL, ",", &tsave)) {
			if (ntorch == MAX_TORCH || bench_torch_find(t, &releases[ntorch]) < 0) {
				if (ntorch == MAX_TORCH)
					fprintf(stderr, "hpct-bench: --torch %s: at most %d\n",
					        torch_arg, MAX_TORCH);
				free(tl);
				return 2;
			}
			ntorch++;
		}
		free(tl);
	}
	static struct scen scens[MAX_SCENARIOS];
	int nscens = 0;
	char *list = strdup(scenario_arg), *save = NULL;
	for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		int recov = strcmp(tok, "restart") == 0 || strcmp(tok, "kill-root") == 0;
		int copies = strcmp(tok, "torch") == 0          ? ntorch * nlaunch * (1 + reinit)
		             : recov                            ? nrecov
		             : strcmp(tok, "gloo-reuse") == 0   ? 2 * NCONTEXTS
		             : strcmp(tok, "gloo-replace") == 0 ? NCONTEXTS
		                                                : 1;
		if (nscens + copies > MAX_SCENARIOS) {
			fprintf(stderr, "hpct-bench: --scenario %s: at most %d scenarios\n",
			        scenario_arg, MAX_SCENARIOS);
			free(list);
			return 2;
		}
		for (int copy = 0; copy < copies; copy++) {
			struct scen *s = &scens[nscens++];
			if (setup_scen(s, tok, exe) < 0) {
				free(list);
				return 2;
			}
			if (s->restart) {
				s->inprocess = strcmp(recoveries[copy], "inprocess") == 0;
				snprintf(s->label, sizeof(s->label), "%s/%s", tok,
				         recoveries[copy]);
			}
			s->gloo_copy = copy;
			if (s->gloo_reuse)
				snprintf(s->label, sizeof(s->label), "%s/%s/%s", tok,
				         contexts[copy / 2], copy % 2 ? "2nd" : "1st");
			if (s->gloo_replace)
				snprintf(s->label, sizeof(s->label), "%s/%s", tok, contexts[copy]);
			if (!s->torch)
				continue;
			/* release, then launch, then the second incarnation's rows
			 * right after the first's */
			s->release = &releases[copy / (nlaunch * (1 + reinit))];
			s->launch = launches[copy / (1 + reinit) % nlaunch];
			s->reinit_rows = copy % (1 + reinit);
			snprintf(s->label, sizeof(s->label), "torch-%s%s%s", s->release->ver,
			         s->launch->label, s->reinit_rows ? "-reinit" : "");
		}
	}
	if (state && !strstr(scenario_arg, "restart") && !strstr(scenario_arg, "kill-root")) {
		fprintf(stderr, "hpct-bench: --state goes with --scenario restart or kill-root\n");
		free(list);
		return 2;
	}
	if (state && nranks == 0) /* 16 x the state, not 1024 x */
		ranks[nranks++] = 16;
	if (nscens == 0 || nranks == 0 || repeat < 1 || repeat > 64 || nodes < 1 || nodes > 254 ||
	    timeout <= 0 || port < 1024 || port > 60000 || kills < 1) {
		usage(stderr);
		free(list);
		return 2;
	}
	if (nccl_libs) {
		for (int si = 0; si < nscens; si++)
			if (!scens[si].nccl_root) {
				fprintf(stderr, "hpct-bench: --nccl goes with --scenario nccl-root "
				                "only\n");
				free(list);
				return 2;
			}
		free(list);
		return bench_nccl_releases(argc, argv, nccl_libs, json);
	}
	/* a path, or with --transport the rootless path over each transport */
	const char *path_names[3 + MAX_LIST], *path_transport[3 + MAX_LIST] = { NULL };
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
		int reps[MAX_LIST], nreps = 0;
		static char rnames[MAX_LIST][24];
		if (replicas_arg &&
		    ((nreps = parse_list(replicas_arg, reps)) <= 0 || reps[nreps - 1] > 64)) {
			fprintf(stderr, "hpct-bench: --replicas %s: want a comma list of 1..64\n",
			        replicas_arg);
			free(list);
			return 2;
		}
		/* --replicas: a rootless row per HPCT_STORE_REPLICAS */
		for (int q = 0; strstr(paths, "rootless") && q < (nreps ? nreps : 1); q++) {
			snprintf(rnames[q], sizeof(rnames[q]), "rootless-r%d", nreps ? reps[q] : 0);
			path_names[npaths++] = nreps ? rnames[q] : "rootless";
		}
		int gloo = 0;
		for (int si = 0; si < nscens; si++)
			gloo |= strcmp(scens[si].name, "gloo") == 0;
		if (strstr(paths, "standard")) {
			path_names[npaths++] = "standard";
			if (gloo) /* its rows only (gloo_rows) */
				path_names[npaths++] = GLOO_MESH;
		} else if (strstr(paths, "stock")) /* the standard path, as PyTorch users say */
			path_names[npaths++] = "stock";
	}
	if (npaths == 0) {
		fprintf(stderr, "hpct-bench: --path %s: want rootless and/or standard (or stock)\n",
		        paths);
		free(list);
		return 2;
	}
	int max_ranks = 0;
	for (int i = 0; i < nranks; i++)
		max_ranks = ranks[i] > max_ranks ? ranks[i] : max_ranks;
	if (state && bench_state_setup(state, max_ranks) < 0) {
		free(list);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	int gate_opt = bench_gate;
	if (ntorch && bench_enter_netns() < 0) {
		free(list);
		return 1;
	}

	/* the floor's unit and what starting one process costs, measured
	 * before any rank runs: right after a run of 1024 ranks the kernel is
	 * still tearing down their sockets, and a round trip then took 50 us
	 * where it takes 12 */
	double rtt = measure_rtt_ms();
	double fork_exec = measure_fork_exec_ms();
	int nres = nscens * nranks * npaths;
	struct result *res = calloc((size_t)nres, sizeof(*res));
	int run_id = 0, failed = 0;
	for (int si = 0; si < nscens; si++) {
		const struct scen *s = &scens[si];
		for (int i = 0; i < nranks; i++) {
			int n = ranks[i], k = nodes < n ? nodes : n;
			if (s->torch && s->launch->one_node)
				k = 1;
			struct result *row = &res[(si * nranks + i) * npaths];
			for (int p = 0; p < npaths; p++) {
				row[p].scenario = s->label;
				row[p].kind = s->reinit_rows ? "torch-reinit" : s->name;
				if (s->gloo_reuse) {
					row[p].context = contexts[s->gloo_copy / 2];
					row[p].creation = s->gloo_copy % 2 ? "second" : "first";
				} else if (s->gloo_replace) {
					row[p].context = contexts[s->gloo_copy];
				}
				row[p].torch = s->torch ? s->release->ver : NULL;
				row[p].launch = s->torch ? s->launch->name : NULL;
				row[p].path = path_names[p];
				if (strcmp(s->name, "gloo") == 0 || s->gloo_reuse ||
				    s->gloo_replace)
					row[p].connect = gloo_connect(s->name, path_names[p]);
				row[p].recovery = s->restart ? (s->inprocess ? "inprocess" : "full")
				                  : s->gloo_replace ? "inprocess"
				                                    : NULL;
				/* the standard path's recovery lives in rank 0 */
				row[p].forced_full = s->kill_root && s->inprocess &&
				                     strcmp(path_names[p], "standard") == 0;
				row[p].ranks = n;
				row[p].nodes = k;
				row[p].repeat = repeat;
			}
			for (int rep = 0; rep < repeat && !s->reinit_rows &&
			                  !(s->gloo_copy && (s->gloo_reuse || s->gloo_replace));
			     rep++) {
				for (int p = 0; p < npaths; p++) {
					struct result *r = &row[p];
					if (skipped(r))
						continue;
					int conns, repl = 0;
					long msgs = 0, rss = 0;
					bench_transport = path_transport[p];
					/* each run its own ports: nothing lingers from the last */
					int base =
					        port + (run_id % 4) * (4 * ((n + k - 1) / k) + 2);
					int rootless = !on_standard(r->path);
					if (r->connect)
						setenv("HPCT_GLOO_CONNECT", r->connect, 1);
					else
						unsetenv("HPCT_GLOO_CONNECT");
					if (s->gloo_reuse || s->gloo_replace) {
						bench_gate = 0;
						for (int ci = 0; ci < NCONTEXTS; ci++) {
							setenv("HPCT_BENCH_CONTEXT", contexts[ci],
							       1);
							failed |= gloo_run(
							        s, r, ci, nranks * npaths, n, k,
							        rootless,
							        port + (run_id % 4) *
							                        (4 * ((n + k - 1) /
							                              k) +
							                         2),
							        run_id, timeout,
							        kills < n ? kills : n, seed, rep);
							run_id++;
						}
						continue;
					}
					if (s->torch) {
						/* timed once every rank has imported it */
						bench_gate = 1;
						bench_torch_env(rootless, s->release->ver);
						bench_torch_replicas(r->path);
						int again = reinit && !s->launch->no_reinit;
						if (reinit && !again)
							r[nranks * npaths].not_run =
							        s->launch->no_reinit;
						struct bench_torch_times tt;
						bench_torch_once(s->launch, s->release->python,
						                 s->self, n, k, rootless, base,
						                 run_id, timeout, again, &tt);
						run_id++;
						if (tt.init_ms < 0 || (again && tt.reinit_ms < 0))
							failed = 1;
						if (tt.init_ms >= 0)
							add_run(r, tt.init_ms, 0, 0, 0,
							        tt.init_rss);
						if (tt.init_ms >= 0 && tt.op_us[0] > 0 &&
						    r->nops < 64) {
							for (int o = 0; o < 4; o++)
								r->op_us[o][r->nops] = tt.op_us[o];
							r->nops++;
						}
						if (tt.reinit_ms >= 0) /* the next scen's rows */
							add_run(&r[nranks * npaths], tt.reinit_ms,
							        0, 0, 0, tt.reinit_rss);
						continue;
					}
					bench_gate = gate_opt;
					double ms =
					        s->nccl_root ? bench_nccl_root_once(
					                               n, rootless,
					                               port + (run_id % 2) * n,
					                               timeout, &conns)
					        : s->restart
					                ? bench_restart_once(
					                          s->self, n, k, rootless, base,
					                          run_id, timeout, s->kill_root,
					                          kills < n ? kills : n, seed, rep,
					                          s->inprocess && !r->forced_full,
					                          NULL, &conns, &repl, NULL)
					                : bench_run_once(s->self, s->name, n, k,
					                                 rootless, base, run_id,
					                                 timeout, &conns, &msgs,
					                                 &rss);
					run_id++;
					if (ms < 0) {
						failed = 1;
						continue;
					}
					add_run(r, ms, conns, repl, msgs, rss);
				}
			}
		}
	}

	int w = 9; /* the scenario column: as wide as its longest name */
	for (int si = 0; si < nscens; si++)
		if ((int)strlen(scens[si].label) > w)
			w = (int)strlen(scens[si].label);
	char detail[128];
	snprintf(detail, sizeof(detail),
	         "kill %d; full: every rank starts again; inprocess: survivors stay", kills);
	struct plot_row *rows = calloc((size_t)nres, sizeof(*rows));
	int nrows = 0;
	printf("%-*s %-9s %6s %6s %7s %10s %10s %10s %9s %10s %10s %11s\n", w, "scenario", "path",
	       "ranks", "nodes", "repeat", "median_ms", "min_ms", "max_ms", "floor_ms", "max_conns",
	       "conn_bound", "max_rss_mb");
	FILE *jf = json ? fopen(json, "w") : NULL;
	if (json && !jf)
		fprintf(stderr, "hpct-bench: cannot write %s: %s\n", json, strerror(errno));
	if (jf && fork_exec > 0)
		fprintf(jf, "{\"rtt_ms\":%.4f,\"fork_exec_ms\":%.4f,\"results\":[", rtt, fork_exec);
	else if (jf)
		fprintf(jf, "{\"rtt_ms\":%.4f,\"results\":[", rtt);
	for (int i = 0; i < nres; i++) {
		struct result *r = &res[i];
		int nccl_root = strcmp(r->scenario, "nccl-root") == 0;
		int recov = r->recovery != NULL;
		if (skipped(r))
			continue;
		if (r->ok == 0) {
			printf("%-*s %-9s %6d %6d %7d %10s\n", w, r->scenario, r->path, r->ranks,
			       r->nodes, 0, r->not_run ? "not run" : "failed");
			continue;
		}
		qsort(r->ms, (size_t)r->ok, sizeof(double), cmp_double);
		double med = r->ok % 2 ? r->ms[r->ok / 2]
		                       : (r->ms[r->ok / 2 - 1] + r->ms[r->ok / 2]) / 2;
		char bound[16] = "-", floor[16] = "-";
		double floor_ms = ceil_log2(r->ranks) * rtt;
		if (!on_standard(r->path) && !r->context) { /* a creation joins nothing */
			snprintf(bound, sizeof(bound), "%d",
			         nccl_root ? 6 : 2 * ceil_log2(r->ranks) + 2);
			/* the physical floor of a rootless join: ceil(log2 N)
			 * round trips, one per round of a tree or dissemination */
			if (rtt > 0 && !nccl_root)
				snprintf(floor, sizeof(floor), "%.3f", floor_ms);
		}
		char rss[16] = "-";
		if (r->max_rss > 0)
			snprintf(rss, sizeof(rss), "%.1f", r->max_rss / 1024.0);
		printf("%-*s %-9s %6d %6d %7d %10.1f %10.1f %10.1f %9s %10d %10s %11s\n", w,
		       r->scenario, r->path, r->ranks, r->nodes, r->ok, med, r->ms[0],
		       r->ms[r->ok - 1], floor, r->max_conns, bound, rss);
		char extra[320] = "";
		int nv = 0;
		if (nccl_root && hpct_nccl_version(&nv) == 0)
			snprintf(extra, sizeof(extra), ",\"nccl\":\"%d.%d.%d\"", nv / 10000,
			         nv / 100 % 100, nv % 100);
		else if (r->torch)
			snprintf(extra, sizeof(extra), ",\"torch\":\"%s\",\"launch\":\"%s\"",
			         r->torch, r->launch);
		else if (r->context) {
			r->ctx_ms[0] = median_of(r->ctx_ms, r->nctx);
			snprintf(extra, sizeof(extra),
			         ",\"connect\":\"%s\",\"context\":\"%s\",\"%s\":\"%s\",\"context_"
			         "ms\":%.3f,"
			         "\"pairs_new\":%ld,\"max_pairs_new\":%d,\"pairs_kept\":%ld,"
			         "\"bytes_exchanged\":%ld",
			         r->connect, r->context, r->creation ? "creation" : "recovery",
			         r->creation ? r->creation : r->recovery, r->ctx_ms[0],
			         r->pairs_new, r->max_pairs, r->pairs_kept, r->bytes);
		} else if (r->connect)
			snprintf(extra, sizeof(extra), ",\"connect\":\"%s\"", r->connect);
		else if (r->recovery)
			snprintf(extra, sizeof(extra),
			         ",\"recovery\":\"%s\",\"forced_full\":%s,\"state_bytes\":%llu",
			         r->recovery, r->forced_full ? "true" : "false",
			         (unsigned long long)state);
		if (strcmp(floor, "-") != 0)
			snprintf(extra + strlen(extra), sizeof(extra) - strlen(extra),
			         ",\"floor_ms\":%.4f", floor_ms);
		if (jf)
			fprintf(jf,
			        "%s{\"scenario\":\"%s\",\"path\":\"%s\",\"ranks\":%d,\"nodes\":%d,"
			        "\"median_ms\":%.3f,\"min_ms\":%.3f,\"max_ms\":%.3f,\"repeat\":%d,"
			        "\"max_conns\":%d,\"total_msgs\":%ld,\"max_rss_kb\":%ld%s}",
			        nrows ? "," : "", r->kind, r->path, r->ranks, r->nodes, med,
			        r->ms[0], r->ms[r->ok - 1], r->ok, r->max_conns, r->msgs,
			        r->max_rss, extra);
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
	/* every later row of a scenario and N against each earlier one: with
	 * gloo's three, standard/rootless (the path), std-mesh/rootless (both)
	 * and std-mesh/standard (the pool) */
	for (int i = 0; i < nres; i += npaths)
		for (int a = i; a < i + npaths; a++)
			for (int b = a + 1; b < i + npaths; b++)
				if (res[a].ok && res[b].ok)
					printf("%s N=%d: %s/%s median ratio %.2f\n",
					       res[a].scenario, res[a].ranks, res[b].path,
					       res[a].path, res[b].ms[0] / res[a].ms[0]);
	recovery_summary(res, nres);
	gloo_summary(res, nres);
	store_ops_summary(res, nres, store_ops);
	reinit_summary(res, nres, nranks * npaths);
	for (int si = 0; si < nscens; si++)
		if (scens[si].nccl_root) {
			printf("nccl-root %s\n", nccl_stagger_note);
			break;
		}
	for (int i = 0; i < nres; i++) { /* each reason once, after its rows */
		int said = !res[i].not_run;
		for (int j = 0; j < i && !said; j++)
			said = res[j].not_run == res[i].not_run;
		for (int k = i; k < nres && !said; k++) {
			int dup = res[k].not_run != res[i].not_run;
			for (int j = i; j < k && !dup; j++)
				dup = res[j].not_run == res[i].not_run &&
				      res[j].scenario == res[k].scenario &&
				      strcmp(res[j].path, res[k].path) == 0;
			if (!dup)
				printf("%s%s %s", k > i ? ", " : "", res[k].scenario, res[k].path);
		}
		if (!said)
			printf(": not run: %s\n", res[i].not_run);
	}
	/* what the figures above stand on, measured before the runs */
	if (rtt > 0)
		printf("loopback TCP round trip between two processes: %.1f us (median of 200); "
		       "floor_ms = ceil(log2 N) x that\n",
		       rtt * 1000);
	if (fork_exec > 0)
		printf("fork+exec of /bin/true, to its exit: %.2f ms (median of 200)\n", fork_exec);
	bench_state_finish(max_ranks);
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
