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

/* The ports one world of n ranks on `nodes` nodes takes from its port:
 * MASTER_PORT, then hpct's (two windows of a node's ranks), the store's
 * (as many) and NCCL's roots' (one window) above them. */
static inline int bench_world_ports(int n, int nodes)
{
	return 5 * layout_max_local(n, nodes) + 2;
}

/* A world of n ranks on `nodes` loopback nodes (127.0.0.1 ..), job `job`
 * at `epoch`: rank 0's rendezvous (standard) at port, the listeners
 * (rootless) from port + 1, two windows of a node's ranks, the store's
 * ports above them, clear of MASTER_PORT (a stock or served TCPStore
 * server binds it on every address), and NCCL's roots above the store's
 * (its default range, right after hpct's, is where these put the store).
 * The per-rank variables are the caller's. */
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
	if (port + 5 * per <= 65535) { /* else NCCL's defaults, whose check names it */
		setenv_int("HPCT_NCCL_PORT_BASE", port + 1 + 4 * per);
		setenv_int("HPCT_NCCL_PORT_RANGE", per);
	} else {
		unsetenv("HPCT_NCCL_PORT_BASE");
		unsetenv("HPCT_NCCL_PORT_RANGE");
	}
	setenv("HPCT_JOB_ID", job, 1);
	setenv_int("HPCT_EPOCH", epoch);
	setenv("HPCT_USE_ROOTLESS", rootless ? "1" : "0", 1);
	setenv_int("HPCT_TIMEOUT", (long)timeout);
	unsetenv("LOCAL_WORLD_SIZE");
}

#endif
