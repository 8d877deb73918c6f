/* hpct-bench's main table (hpct-bench.c: options; bench_run.c: the runs;
 * bench_report.c: the table, JSON, summaries and plot): it launches local
 * ranks itself and times bootstrap scenarios, side by side for the rootless
 * and the standard path.
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
 * tools/scripts/torch-venv.sh), in a network namespace of its own; timed from every
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
 * "launch":"direct" or "torchrun", "backend":"gloo" or "nccl" (--backend
 * nccl: rows torch-<release>-nccl, init_process_group("nccl") with
 * device_id, a CUDA torch on a GPU or the stand-in driver, tests/standin,
 * whose all_reduce computes nothing: its value is then not checked).  The output names what starting a
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
#ifndef HPCT_BENCH_TABLE_H
#define HPCT_BENCH_TABLE_H

#include <stdint.h>

#include "tools/bench/bench.h"

#define MAX_LIST 16

struct result {
	const char *scenario; /* the table's: torch-1.13, restart/inprocess */
	const char *kind;     /* the JSON's: torch or torch-reinit; restart, kill-root; else as
	                         scenario */
	const char *recovery; /* restart, kill-root: full or inprocess; else NULL */
	int forced_full;      /* kill-root inprocess, standard: the root died, all restart */
	const char *torch;    /* the torch release, or NULL */
	const char *launch;   /* torch: how its ranks were started (direct, torchrun) */
	const char *backend;  /* torch: the process group's (gloo, nccl) */
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
	/* torch --store-ops: each run's struct bench_torch_times op_us and
	 * cpu_us */
	double op_us[2 * BENCH_STORE_OPS][64];
	double cpu_us[BENCH_STORE_CPU][64];
	int nops;
	double med; /* the median run, once the row is complete (bench_print_row) */
};

#define MAX_SCENARIOS 16
#define MAX_TORCH     4
#define MAX_LAUNCH    2
#define MAX_BACKEND   2

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
	char label[40]; /* the table's name: torch-1.13, torch-2.14-nccl-torchrun-reinit */
	const struct bench_torch *release;
	const struct bench_launch *launch;
	const char *backend; /* torch: gloo or nccl (--backend) */
	char self[4096]; /* the program that plays its ranks */
};

/* The ways a Gloo context is created in gloo-reuse and gloo-replace, both
 * run in every repetition, alternating (HPCT_BENCH_CONTEXT of the ranks). */
extern const char *const bench_contexts[];
#define NCONTEXTS 2
/* gloo's row of Gloo's own connectFullMesh, on the standard path */
#define GLOO_MESH "std-mesh"

/* What main decided from the options: the scenarios, sizes and paths of
 * the table, and how each run goes. */
struct bench_plan {
	struct scen *scens;
	int nscens;
	const int *ranks;
	int nranks;
	const char *const *path_names, *const *path_transport;
	int npaths;
	int repeat, nodes, port, kills, reinit, gate, store_ops;
	double timeout;
	unsigned seed;
	uint64_t state;
	const char *json, *plot;
};

/* bench_run.c: an option's comma list of names (each at most once) as
 * indices into names[0..n); their count, or -1 said, naming opt. */
int bench_parse_names(const char *opt, const char *arg, const char *const *names, int n, int *out);
/* A scenario of the list by name, its rank program beside
 * `exe`; 0, or -1 said. */
int bench_setup_scen(struct scen *s, const char *name, const char *exe);
/* Every run of the plan into res (nscens x nranks x npaths rows), each
 * (scenario, N)'s rows printed as soon as they are complete, and on stderr,
 * every 10 s of a run, which run it is and how far the table is.  1 when a
 * run failed. */
int bench_run_all(const struct bench_plan *plan, struct result *res, double rtt_ms);

/* bench_report.c: the table. */
int bench_row_skipped(const struct result *r);
int bench_on_standard(const char *path);
int bench_table_width(const struct bench_plan *plan);
void bench_print_header(int width);
/* A complete row: its runs sorted, its median kept (med), its line. */
void bench_print_row(struct result *r, int width, double rtt_ms);
/* After the runs: the JSON, the ratios, the summaries and the plot; 1 when
 * something could not be written. */
int bench_report(const struct bench_plan *plan, struct result *res, int nres, double rtt_ms,
                 double fork_exec_ms);

#endif
