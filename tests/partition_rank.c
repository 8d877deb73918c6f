/* One rank of the partition test (tests/test_partition.sh starts each rank
 * inside its "node", a network namespace):
 *
 *   partition_rank DIR ITERS
 *
 * Joins the world and runs a first allgather (the bootstrap), leaves
 * DIR/ready.RANK, then runs ITERS allgathers of (rank, iteration), 10 ms
 * apart, each checked, and a closing barrier.  Prints one line:
 *
 *   rank R ok
 *   rank R failed in bootstrap|collective at T: MESSAGE
 *
 * T is the wall-clock time (seconds, CLOCK_REALTIME) of the failure, so the
 * test can compare it with the moment it cut the link.  Exit 0 or 1.
 *
 * With DIR/hold present at start, the rank leaves DIR/started.RANK and
 * waits for DIR/go before it joins, so that every rank's deadline starts
 * at once, as when a launcher starts a job (at most 120 s: a hang guard). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "hpct/hpct.h"

static double wall(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int failed(int rank, const char *phase, int rc)
{
	printf("rank %d failed in %s at %.3f: %s (%s)\n", rank, phase, wall(), hpct_last_error(),
	       hpct_errname(rc));
	return 1;
}

static int round_of(hpct_group *g, int me, int n, uint32_t iter)
{
	uint64_t item = ((uint64_t)me << 32) | iter, all[1024];
	int rc = hpct_allgather(g, &item, sizeof(item), all);
	if (rc)
		return rc;
	for (int r = 0; r < n; r++)
		if (all[r] != (((uint64_t)r << 32) | iter)) {
			fprintf(stderr, "rank %d: iteration %u: item %d is %#llx\n", me, iter, r,
			        (unsigned long long)all[r]);
			return HPCT_EPROTO;
		}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: partition_rank DIR ITERS (0: until one fails)\n");
		return 2;
	}
	const char *rs = getenv("RANK");
	int me = rs ? atoi(rs) : -1;
	long iters = atol(argv[2]);
	setvbuf(stdout, NULL, _IOLBF, 0);

	char path[4096];
	snprintf(path, sizeof(path), "%s/hold", argv[1]);
	if (access(path, F_OK) == 0) {
		snprintf(path, sizeof(path), "%s/started.%d", argv[1], me);
		FILE *s = fopen(path, "w");
		if (s)
			fclose(s);
		snprintf(path, sizeof(path), "%s/go", argv[1]);
		for (int i = 0; access(path, F_OK) != 0; i++) {
			if (i == 120000) {
				printf("rank %d: no %s within 120 s\n", me, path);
				return 1;
			}
			usleep(1000); /* a poll of the go file, not an ordering sleep */
		}
	}
	hpct_world *w;
	int rc = hpct_world_create(&w);
	if (rc)
		return failed(me, "bootstrap", rc);
	hpct_group *g = hpct_world_group(w);
	int n = hpct_group_size(g);
	if (n > 1024 || (rc = round_of(g, me, n, 0)) != 0)
		return failed(me, "bootstrap", rc ? rc : HPCT_EINVAL);

	snprintf(path, sizeof(path), "%s/ready.%d", argv[1], me);
	FILE *f = fopen(path, "w");
	if (f)
		fclose(f);
	/* ITERS 0: until a collective fails (the test cuts a link) */
	for (long i = 1; iters == 0 || i <= iters; i++) {
		if ((rc = round_of(g, me, n, (uint32_t)i)) != 0)
			return failed(me, "collective", rc);
		usleep(10000); /* pacing, to spare the machine: not an ordering */
	}
	if ((rc = hpct_barrier(g)) != 0)
		return failed(me, "collective", rc);
	printf("rank %d ok\n", me);
	hpct_world_destroy(w);
	return 0;
}
