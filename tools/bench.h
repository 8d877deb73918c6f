/* What hpct-bench's own files share: hpct-bench.c (options, the run loop,
 * the table, JSON and plot), bench_launch.c (launching, collecting and
 * reaping the ranks of one run) and bench_scenarios.c (the scenarios' rank
 * side, the torch environment, nccl-root).  Program code, not a library. */
#ifndef HPCT_BENCH_H
#define HPCT_BENCH_H

#include <stdint.h>

#include "hpct/hpct.h"

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

/* The environment of a torch run's ranks (the shim preloaded if rootless). */
void bench_torch_env(int rootless);

/* One run: N ranks of `scenario` on K loopback nodes; returns ms or -1. */
double bench_run_once(const char *self, const char *scenario, int n, int nodes, int rootless,
                      int port, int run_id, double timeout, int *max_conns, long *msgs,
                      long *max_rss);

/* restart / kill-root (see bench_launch.c); returns ms or -1. */
double bench_restart_once(const char *self, int n, int nodes, int rootless, int port, int run_id,
                          double timeout, int kill_root, int kills, unsigned seed, int inprocess,
                          int *max_conns, int *repl_conns);

/* --scenario nccl-root (see bench_scenarios.c); returns ms or -1. */
double bench_nccl_root_once(int n, int rootless, int port, double timeout, int *conns);

/* --nccl LIB,LIB: nccl-root against each release, one table (see
 * bench_releases.c); 0 when every run succeeded. */
int bench_nccl_releases(int argc, char **argv, const char *libs, const char *json);

#endif
