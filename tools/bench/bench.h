/* What hpct-bench's own files share: hpct-bench.c (options, the run loop,
 * the table, JSON and plot), bench_launch.c (launching, collecting and
 * reaping the ranks of one run) and bench_scenarios.c (the scenarios' rank
 * side, the torch environment, nccl-root).  Program code, not a library. */
#ifndef HPCT_BENCH_H
#define HPCT_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "hpct/hpct.h"
#include "tools/common/bench_rank.h"

/* The rootless engine's transport for the ranks launched next (HPCT_TRANSPORT),
 * or NULL for the default. */
extern const char *bench_transport;
/* --gate: ranks start their timed work together, once every one of them has
 * started and paid its transport's one-time cost (loading libfabric) */
extern int bench_gate;

/* What the launcher, playing the job's agent, tells a survivor. */
struct agent_msg {
	uint64_t epoch;
	int nreplaced;
	int replaced[64];
};

/* A scenario's ranks are this program (cold) or a sibling program in the
 * same directory (gloo: hpct-bench-gloo, built only with Gloo). */
struct scenario {
	const char *name;
	int (*rank)(hpct_world *w); /* run in this program, or */
	const char *program;        /* the sibling program that plays the ranks */
};

/* The scenario of that name, or NULL. */
const struct scenario *bench_find_scenario(const char *name);

/* --scenario torch: enters a network namespace of its own (loopback only);
 * 0, or -1 with the reason printed. */
int bench_enter_netns(void);

/* A PyTorch release --torch names, and the Python that runs it. */
struct bench_torch {
	const char *ver; /* "1.13", "2.13": the row's label and JSON "torch" */
	char python[4096];
};

/* --torch VER: the release (1.13, 2.13 or 2.13.0) and its interpreter:
 * HPCT_TORCH_PYTHON_1_13 / _2_13 when set, else Debian's /usr/bin/python3
 * for 1.13 and the venv tools/scripts/torch-venv.sh makes for 2.13.  0, or -1 with
 * the reason printed (an unknown release, or no interpreter there, with
 * how to make one). */
int bench_torch_find(const char *arg, struct bench_torch *out);
/* The Python of venv `venv` in hpct's cache (HPCT_CACHE, else
 * $XDG_CACHE_HOME/hpct, else ~/.cache/hpct), in buf. */
void bench_cache_python(const char *venv, char *buf, size_t len);

/* The environment of a torch run's ranks (the shim preloaded if rootless,
 * before what LD_PRELOAD hpct-bench was started with; the torch version the
 * ranks check they have; the backend they init). */
void bench_torch_env(int rootless, const char *ver, const char *backend);
/* HPCT_STORE_REPLICAS for a row's ranks: N for path rootless-rN
 * (--replicas), else as hpct-bench was started. */
void bench_torch_replicas(const char *path);

/* What one torch run measured: ms from the gate to the last rank's end of
 * the timed work, -1 for a phase that failed or did not run; the largest
 * peak resident memory of a rank, kB; the most established TCP sockets a
 * rank held when it reported (the busiest rank's). */
struct bench_torch_times {
	double init_ms, reinit_ms;
	long init_rss, reinit_rss;
	int init_conns, reinit_conns;
	/* --store-ops: struct record's op_us (medians, then 99th
	 * percentiles) and cpu_us (a round's CPU by thread), the mean over
	 * ranks, microseconds (0: not measured) */
	double op_us[2 * BENCH_STORE_OPS];
	double cpu_us[BENCH_STORE_CPU];
};

/* The ranks of one launch, with their pipes (bench_launch.c). */
struct batch;

/* How a torch run's ranks are started (--launch), one row each of
 * bench_launch.c's table: "direct", forked by hpct-bench together, rank 0's
 * TCPStore server the store; "torchrun", the workers of the release's own
 * torchrun on one node, its agent's store the store (bench_torchrun.c).
 * Every other scenario's ranks are started the direct way. */
struct bench_launch {
	const char *name;  /* --launch's word, the JSON's "launch" */
	const char *label; /* after torch-<release> in the table: "" or "-torchrun" */
	int one_node;      /* its ranks share one node, whatever --nodes says */
	/* NULL when PyTorch can init again (--reinit) in the same ranks; else
	 * why not, said in place of those rows (both paths: the store is then
	 * PyTorch's own on both) */
	const char *no_reinit;
	/* Starts N ranks of `script` run by `python`, each holding its ends of
	 * the batch's pipes; 0, or -1 with nothing left running. */
	int (*start)(struct batch *b, const char *python, const char *script, int n, int nodes,
	             int rootless, int port, int run_id, double timeout);
	/* Kills every rank of the batch, at once. */
	void (*kill)(struct batch *b);
	/* Waits until the ranks are gone; how many failed (killed ones never). */
	int (*reap)(struct batch *b, int killed);
};

/* The launch of that name, or NULL. */
const struct bench_launch *bench_launch_find(const char *name);

/* One torch run: N ranks of the PyTorch job `script` run by `python`,
 * started as `how` says, timed from the gate (every rank imported torch) to
 * init_process_group, new_group and all_reduce done by all; with reinit,
 * after every rank destroyed the process group, the same again from a
 * second gate.  A failure is said on stderr and leaves its time at -1. */
void bench_torch_once(const struct bench_launch *how, const char *python, const char *script, int n,
                      int nodes, int rootless, int port, int run_id, double timeout, int reinit,
                      struct bench_torch_times *out);

/* torchrun's side of a launch (bench_torchrun.c). */
struct bench_torchrun;

/* Starts `python -m torch.distributed.run` with N workers running
 * `script`, its static rendezvous (the agent's store) at 127.0.0.1:port;
 * the agent gets this process's environment less the pipes and the rank
 * variables, plus HPCT_BENCH_SOCKET, where its workers fetch the pipes.
 * 0 and *out, or -1 with the reason printed. */
int bench_torchrun_start(const char *python, const char *script, int n, int port,
                         const char *run_id, struct bench_torchrun **out);

/* Hands every worker the pipes this process's HPCT_BENCH_*_FD variables
 * name, as each comes for them; 0 once all N have them, or -1 (the agent
 * exited, or `deadline` passed) with the reason printed. */
int bench_torchrun_hand_over(struct bench_torchrun *t, double deadline);

/* Kills the workers handed their pipes, and the agent. */
void bench_torchrun_kill(struct bench_torchrun *t);

/* Reaps the agent, removes its directory and frees t; 0, or -1 when the
 * agent failed (and was not killed), said on stderr. */
int bench_torchrun_wait(struct bench_torchrun *t, int killed);

/* One run: N ranks of `scenario` on K loopback nodes; returns ms or -1. */
double bench_run_once(const char *self, const char *scenario, int n, int nodes, int rootless,
                      int port, int run_id, double timeout, int *max_conns, long *msgs,
                      long *max_rss);

/* What the ranks reported of one phase of a run that reports a Gloo
 * context's creation (gloo-reuse, gloo-replace). */
struct bench_phase {
	double ms;     /* from the first rank out of the world barrier before the
	                  creation until the last rank's allreduce was done */
	int max_conns; /* hpct connections the creation opened, the most of a rank */
	int max_pairs; /* Gloo pairs it made, the most of a rank */
	long pairs_new, pairs_kept, bytes; /* summed over ranks: pair ends, bytes of
	                                      pair addresses sent + received (fanout:
	                                      bytes received) */
	long max_rss;
	/* fanout: the most of a rank (descriptors, waves, peers, in-flight
	 * bytes at their peak), and the waits for the in-flight budget, summed */
	long max_fds;
	int max_waves, max_peers;
	long inflight_peak, inflight_waits;
};

/* N ranks of `scenario` that report `nphases` times each, every report of a
 * phase before any of the next (a world barrier apart); out[k] gets phase
 * k.  0, or -1 with the failure said. */
int bench_phases_once(const char *self, const char *scenario, int n, int nodes, int rootless,
                      int port, int run_id, double timeout, int nphases, struct bench_phase *out);

/* The scenario names of a restart's ranks (--as-rank): those started first
 * (for an in-process recovery, ranks that survive), and those started at
 * the next epoch. */
struct bench_restart_ranks {
	const char *first, *again;
};

/* restart / kill-root (see bench_launch.c); returns ms or -1.  With `ranks`
 * (in-process only) the ranks are those, and *phase gets the new epoch's
 * reports (gloo-replace); NULL: restart's own. */
double bench_restart_once(const char *self, int n, int nodes, int rootless, int port, int run_id,
                          double timeout, int kill_root, int kills, unsigned seed, int rep,
                          int inprocess, const struct bench_restart_ranks *ranks, int *max_conns,
                          int *repl_conns, struct bench_phase *phase);

/* --scenario nccl-root (see bench_scenarios.c); returns ms or -1. */
double bench_nccl_root_once(int n, int rootless, int port, double timeout, int *conns);

/* What the nccl-root rows hold besides the bootstrap: NCCL's own stagger. */
extern const char nccl_stagger_note[];

/* A size: digits with K, M or G (powers of 1024) after them, or none;
 * 0 when it is not one. */
uint64_t bench_parse_size(const char *s);
/* The other way: 64K, 64M, 2G (the largest unit that divides it), in buf. */
const char *bench_size_name(uint64_t b, char *buf, size_t len);

/* MemTotal of /proc/meminfo, bytes; 0 if unknown. */
uint64_t bench_mem_total(void);

/* A deterministic pattern of `len` bytes for `seed` (bench_state.c): the
 * state --state delivers and the buffers of the fanout scenario.  check:
 * 0, or the offset of the first 8-byte word that differs, plus one. */
void bench_pattern_fill(void *buf, size_t len, uint64_t seed);
size_t bench_pattern_check(const void *buf, size_t len, uint64_t seed);

/* restart --state SIZE (bench_state.c): each rank's state, written once
 * to a file on local disk for a full restart to read.  bytes 0: none. */
struct bench_state {
	uint64_t bytes;
	char file[4096];
	long pages;        /* the file's pages */
	long resident_max; /* the most of them still resident after a drop */
	int drops;         /* drops: posix_fadvise each time, */
	int dc_drops;      /* and /proc/sys/vm/drop_caches when pages stayed */
};
extern struct bench_state bench_state;

/* Writes the file (pattern seed 1, fsync) once, after checking that N
 * ranks holding `bytes` each fit in this machine's memory (60% of
 * MemTotal); 0, or -1 with the numbers said. */
int bench_state_setup(uint64_t bytes, int max_ranks);
/* Drops the file's pages from the page cache (before each full restart). */
void bench_state_drop(void);
/* The environment of a restart's ranks: HPCT_BENCH_STATE (0: unset), and
 * the file only for ranks that read it (a full restart's). */
void bench_state_env(int on, int from_file);
/* What the state rows stand on, printed after the table; removes the file. */
void bench_state_finish(int max_ranks);

/* The rank side of --state (HPCT_BENCH_STATE): a survivor holds the state
 * from before the kill (bench_state_hold: NULL when there is none); after
 * the restart every rank of the new epoch gets it, from the file
 * (HPCT_BENCH_STATE_FILE, a full restart) or through hpct_fanout from the
 * survivors (held: this rank's, NULL for a replacement), and verifies it.
 * *done: when the bytes were in place, before the check.  0 or an error,
 * said on stderr. */
void *bench_state_hold(size_t *len);
int bench_state_get(hpct_world *w, void *held, size_t len, double *done);

/* --scenario fanout (bench_fanout.c): its own options, table and JSON;
 * the exit status.  bench_fanout_rank plays one of its ranks. */
int bench_fanout_main(int argc, char **argv);
/* The options of the scenarios that run on their own (bench_own.c): the
 * scenario's defaults in *o (nodes -1: it takes no --nodes), what the
 * user gave out; -1 after printing usage on a bad one. */
struct bench_own_opts {
	const char *ranks, *paths, *json;
	int repeat, nodes, port;
	double timeout;
};
int bench_own_options(int argc, char **argv, struct bench_own_opts *o, const char *usage);

/* --scenario nvrx: its own options and table (bench_nvrx.c). */
int bench_nvrx_main(int argc, char **argv);
/* --scenario nccl-init: real NCCL ranks, stock against hpct's derived ids
 * (bench_nccl_init.c, its rank hpct-bench-nccl). */
int bench_nccl_init_main(int argc, char **argv);
#define BENCH_FANOUT_MAX_CONC 8 /* --concurrent at most */
int bench_fanout_rank(hpct_world *w);

/* --nccl LIB,LIB: nccl-root against each release, one table (see
 * bench_releases.c); 0 when every run succeeded. */
int bench_nccl_releases(int argc, char **argv, const char *libs, const char *json);

#endif
