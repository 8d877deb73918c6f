/* The rank side of hpct-bench, shared by the programs that play ranks
 * (hpct-bench itself for 'cold', hpct-bench-gloo for 'gloo', kept apart so
 * that ranks of other scenarios do not load Gloo and its libraries).
 * The launcher passes two pipes: each rank writes one record when its timed
 * work is done, then waits for EOF on the release pipe before it tears down. */
#ifndef HPCT_BENCH_RANK_H
#define HPCT_BENCH_RANK_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap/base/rss.h"
#include "hpct/hpct.h"

#define BENCH_STORE_OPS 6 /* torch: set, get, add, compare_set, wait, multi_get */
#define BENCH_STORE_CPU 4 /* torch: client, listener, server, other threads */

struct record {
	double done; /* CLOCK_MONOTONIC when the scenario's work finished */
	int conns;   /* hpct connections opened + accepted by the rank */
	int rc;
	long msgs;   /* hpct messages the rank sent (hpct_world_stats.msgs_sent) */
	long rss_kb; /* the rank's resident memory when it reported */
	/* a Gloo context's creation (gloo-reuse, gloo-replace), else 0: when
	 * this rank left the world barrier that started it, and what
	 * hpct_gloo_context_get_stats said of it */
	double start;
	long pairs_new, pairs_kept, bytes_exchanged;
	/* fanout: the rank's open descriptors (the most sampled during the
	 * fan-out, or the count when it reported), the waves and peers its
	 * fan-out saw, and the process's in-flight budget: its peak bytes and
	 * the transfers that waited for it (hpct_inflight_get_stats) */
	long fds;
	int waves, peers;
	long inflight_peak, inflight_waits;
	/* torch --store-ops: the rank's median SET, GET, ADD, COMPARE_SET,
	 * WAIT and MULTI_GET on its process group's store, then their 99th
	 * percentiles, microseconds, then the CPU a round took in each of the
	 * rank's threads that call the store, listen for its TCPStore
	 * connections (the shim's), serve its homes' keys and the rest, us
	 * (last in the record: the Python rank packs them at its end) */
	double op_us[2 * BENCH_STORE_OPS];
	double cpu_us[BENCH_STORE_CPU];
};

static inline double mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The rank side.  A scenario's rank function gets the joined world, does
 * the timed work, calls settle() exactly once with its result, then tears
 * down what it made (the world is destroyed by rank_main). */

/* The connections this rank opened and accepted so far. */
static inline int conns_of(hpct_world *w)
{
	struct hpct_world_stats st;
	if (!w || hpct_world_get_stats(w, &st) != 0)
		return 0;
	return (int)(st.conns_opened + st.conns_accepted);
}

static inline long msgs_of(hpct_world *w)
{
	struct hpct_world_stats st;
	if (!w || hpct_world_get_stats(w, &st) != 0)
		return 0;
	return (long)st.msgs_sent;
}

/* Sends a record, its resident memory filled in unless the rank did (one
 * write: the pipe keeps records of different ranks whole); 0 or 3. */
static inline int report_record(struct record *rec)
{
	long kb = rec->rss_kb ? rec->rss_kb : hpct_self_rss_kb();
	rec->rss_kb = kb < 0 ? 0 : kb;
	if (write(atoi(getenv("HPCT_BENCH_FD")), rec, sizeof(*rec)) != (ssize_t)sizeof(*rec))
		return 3;
	return 0;
}

/* Reports this rank's finish time, a connection and a message count, and
 * its resident memory; 0 or 3. */
static inline int report(int rc, int conns, long msgs)
{
	struct record rec = { .done = mono(), .rc = rc, .conns = conns, .msgs = msgs };
	return report_record(&rec);
}

/* Blocks until the launcher has every report (EOF on the release pipe). */
static inline void wait_release(void)
{
	int release = atoi(getenv("HPCT_BENCH_RELEASE_FD"));
	char c;
	while (read(release, &c, 1) < 0 && errno == EINTR)
		;
}

/* Reports this rank's finish time, then blocks until the launcher has every
 * report.  w may be NULL (joining failed). */
static inline int settle(hpct_world *w, int rc)
{
	if (report(rc, conns_of(w), msgs_of(w)) != 0)
		return 3;
	wait_release();
	return rc;
}

int hpct__transport_prepare(void); /* libhpct, private */

/* --gate: pays the transport's one-time cost, says so, and waits until the
 * launcher lets every rank go at once (EOF on the gate pipe). */
static inline void pass_gate(void)
{
	const char *ready = getenv("HPCT_BENCH_READY_FD"), *gate = getenv("HPCT_BENCH_GATE_FD");
	if (!ready || !gate)
		return;
	hpct__transport_prepare();
	char c = 'r';
	if (write(atoi(ready), &c, 1) != 1)
		return;
	close(atoi(ready));
	while (read(atoi(gate), &c, 1) < 0 && errno == EINTR)
		;
}

/* Joins the world and runs one scenario's rank function. */
static inline int bench_rank_main(int (*rank)(hpct_world *w))
{
	pass_gate();
	hpct_world *w = NULL;
	int rc = hpct_world_create(&w);
	if (rc == 0)
		rc = rank(w);
	else
		settle(NULL, rc);
	hpct_world_destroy(w);
	return rc == 0 ? 0 : 1;
}

#endif
