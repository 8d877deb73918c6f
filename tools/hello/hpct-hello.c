/* hpct-hello: the smallest real hpct job, and the demo's rank program.
 *
 *   hpct-run -n 32 --nodes 4 --rootless -- hpct-hello
 *
 * Every rank joins the world, shares who it is with an allgather, meets the
 * others at a barrier, and builds a subgroup of the even ranks to broadcast
 * in.  Rank 0 prints the world as every rank now knows it and how long
 * joining took on the slowest rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hpct/hpct.h"

struct whoami {
	int32_t rank, pid;
	double join_ms; /* world create + allgather + barrier, this rank */
	char host[48];
	char listen[HPCT_ADDRSTRLEN];
};

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int fail(const char *what, int rc)
{
	fprintf(stderr, "hpct-hello: %s: %s (%s)\n", what, hpct_last_error(), hpct_errname(rc));
	return 1;
}

int main(void)
{
	double t0 = now_ms();
	hpct_world *w;
	int rc = hpct_world_create(&w);
	if (rc)
		return fail("joining the world", rc);
	struct hpct_world_info info;
	hpct_world_get_info(w, &info);
	hpct_group *world = hpct_world_group(w);

	struct whoami me = { .rank = info.rank, .pid = (int32_t)getpid() };
	gethostname(me.host, sizeof(me.host) - 1);
	snprintf(me.listen, sizeof(me.listen), "%s", info.listen_addr);
	struct whoami *all = calloc((size_t)info.size, sizeof(*all));
	if ((rc = hpct_allgather(world, &me, sizeof(me), all)) || (rc = hpct_barrier(world)))
		return fail("allgather + barrier", rc);
	me.join_ms = now_ms() - t0;

	/* Times are known only now: a second, small allgather. */
	double *joins = calloc((size_t)info.size, sizeof(*joins));
	if ((rc = hpct_allgather(world, &me.join_ms, sizeof(double), joins)))
		return fail("allgather of timings", rc);

	/* A subgroup: every rank makes the call, the odd ones get NULL. */
	int n_even = (info.size + 1) / 2;
	int *even = calloc((size_t)n_even, sizeof(*even));
	for (int i = 0; i < n_even; i++)
		even[i] = 2 * i;
	hpct_group *evens = NULL;
	if ((rc = hpct_group_create(world, even, n_even, &evens)))
		return fail("creating the group of even ranks", rc);
	char word[32] = "";
	if (evens) {
		if (hpct_group_rank(evens) == 0)
			snprintf(word, sizeof(word), "hello from rank %d", info.rank);
		if ((rc = hpct_broadcast(evens, word, sizeof(word), 0)))
			return fail("broadcast in the even group", rc);
	}

	if (info.rank == 0) {
		double slowest = 0, sum = 0;
		for (int r = 0; r < info.size; r++) {
			sum += joins[r];
			if (joins[r] > slowest)
				slowest = joins[r];
		}
		struct hpct_world_stats st;
		hpct_world_get_stats(w, &st);
		printf("%s path: %d ranks on %d nodes, job '%s' epoch %llu\n",
		       info.path == HPCT_PATH_ROOTLESS ? "rootless" : "standard", info.size,
		       info.nnodes, info.job_name, (unsigned long long)info.epoch);
		printf("  %-5s %-8s %-16s %-22s\n", "rank", "pid", "host", "listens on");
		for (int r = 0; r < info.size; r++) {
			if (r == 4 && info.size > 6) {
				printf("  ... %d more\n", info.size - 5);
				r = info.size - 1;
			}
			printf("  %-5d %-8d %-16s %-22s\n", all[r].rank, all[r].pid, all[r].host,
			       info.path == HPCT_PATH_ROOTLESS ? all[r].listen : "(store client)");
		}
		printf("  join (create + allgather + barrier): slowest rank %.1f ms, mean %.1f "
		       "ms\n",
		       slowest, sum / info.size);
		printf("  even-rank group of %d got: \"%s\"\n", n_even, word);
	}
	hpct_group_destroy(evens);
	hpct_world_destroy(w);
	free(even);
	free(joins);
	free(all);
	return 0;
}
