/* The environment a launcher gives the ranks of one world on loopback
 * nodes, shared by hpct-bench's launcher (bench_launch.c) and the
 * simulator's calibration (sim_calib.c), which runs real worlds the way
 * hpct-bench does.  Program code, not a library. */
#ifndef HPCT_BENCH_ENV_H
#define HPCT_BENCH_ENV_H

#include <stdio.h>
#include <stdlib.h>

#include "bootstrap/topo/loopback.h"

static inline void setenv_int(const char *name, long v)
{
	char buf[32];
	snprintf(buf, sizeof(buf), "%ld", v);
	setenv(name, buf, 1);
}

/* A world of n ranks on `nodes` loopback nodes (127.0.0.1 ..), job `job`
 * at `epoch`: rank 0's rendezvous (standard) at port, the listeners
 * (rootless) from port + 1, two windows of a node's ranks, the store's
 * ports above them, clear of MASTER_PORT (a stock or served TCPStore
 * server binds it on every address).  The per-rank variables are the
 * caller's. */
static inline void bench_world_env(int n, int nodes, int rootless, int port, const char *job,
                                   int epoch, double timeout)
{
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
	setenv_int("HPCT_STORE_PORT_OFFSET", 2 * per);
	setenv("HPCT_JOB_ID", job, 1);
	setenv_int("HPCT_EPOCH", epoch);
	setenv("HPCT_USE_ROOTLESS", rootless ? "1" : "0", 1);
	setenv_int("HPCT_TIMEOUT", (long)timeout);
	unsetenv("LOCAL_WORLD_SIZE");
}

#endif
