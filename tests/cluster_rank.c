/* One rank of the cluster test (tests/test_cluster.sh), started by a real
 * launcher (srun, mpirun, torchrun) on the nodes tools/cluster/cluster makes:
 *
 *   cluster_rank [gloo] [mpi] [hold FILE]
 *
 * Joins the world from what the launcher provides and prints one line:
 *
 *   rank R of S host H listens ADDR path P nodes N job J epoch E
 *
 * then an allgather of every rank's number, checked.  gloo: a Gloo context
 * over the world and one allreduce, checked ("gloo ok R").  mpi (built with
 * Open MPI only): MPI_Init after hpct's world (hpct has read PMIx first),
 * an MPI_Allreduce checked against hpct's, MPI_Finalize ("mpi ok R").
 * hold FILE: after joining, allgathers every 20 ms until a rank sees FILE
 * (120 s at most).
 * Exit 0, or 1 with the error on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hpct/gloo.h"
#include "hpct/hpct.h"
#ifdef CLUSTER_MPI
#include <mpi.h>
#endif

static int fail(int rank, const char *what, int rc)
{
	fprintf(stderr, "cluster_rank %d: %s: %s (%s)\n", rank, what, hpct_last_error(),
	        hpct_errname(rc));
	return 1;
}

static int run_gloo(hpct_world *w, const struct hpct_world_info *info)
{
	hpct_gloo_device *dev = NULL;
	hpct_gloo_context *ctx = NULL;
	int rc = hpct_gloo_device_create(w, &dev);
	if (rc)
		return fail(info->rank, "Gloo device", rc);
	if ((rc = hpct_gloo_context_create(dev, hpct_world_group(w), &ctx)))
		return fail(info->rank, "Gloo context", rc);
	float v[64];
	for (int i = 0; i < 64; i++)
		v[i] = (float)(info->rank + i);
	if ((rc = hpct_gloo_allreduce(ctx, v, 64, HPCT_GLOO_F32, HPCT_GLOO_SUM)))
		return fail(info->rank, "Gloo allreduce", rc);
	long n = info->size;
	for (int i = 0; i < 64; i++)
		if (v[i] != (float)(n * (n - 1) / 2 + n * i)) {
			fprintf(stderr, "cluster_rank %d: Gloo allreduce: element %d is %g\n",
			        info->rank, i, v[i]);
			return 1;
		}
	hpct_gloo_context_destroy(ctx);
	hpct_gloo_device_destroy(dev);
	printf("gloo ok %d\n", info->rank);
	return 0;
}

static int run_mpi(int rank, long sum)
{
#ifdef CLUSTER_MPI
	if (MPI_Init(NULL, NULL) != MPI_SUCCESS) {
		fprintf(stderr, "cluster_rank %d: MPI_Init failed after hpct's world\n", rank);
		return 1;
	}
	int mrank = -1;
	long msum = 0, mine = rank;
	MPI_Comm_rank(MPI_COMM_WORLD, &mrank);
	MPI_Allreduce(&mine, &msum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	MPI_Finalize();
	if (mrank != rank || msum != sum) {
		fprintf(stderr, "cluster_rank %d: MPI says rank %d, sum %ld (hpct: %ld)\n", rank,
		        mrank, msum, sum);
		return 1;
	}
	printf("mpi ok %d\n", rank);
	return 0;
#else
	(void)sum;
	fprintf(stderr, "cluster_rank %d: built without MPI\n", rank);
	return 1;
#endif
}

/* Allgathers every 20 ms (a world at work: its engine answers whoever
 * knocks only inside a call) until a rank sees FILE, 120 s at most. */
static int hold_busy(hpct_world *w, const struct hpct_world_info *info, const char *file)
{
	struct timespec ts = { 0, 20 * 1000 * 1000 };
	char *seen = calloc((size_t)info->size, 1);
	if (!seen)
		return fail(info->rank, "memory", HPCT_ENOMEM);
	for (int i = 0; i < 6000; i++) {
		char mine = access(file, F_OK) == 0;
		int rc = hpct_allgather(hpct_world_group(w), &mine, 1, seen);
		if (rc) {
			free(seen);
			return fail(info->rank, "allgather while holding", rc);
		}
		if (memchr(seen, 1, (size_t)info->size))
			break;
		nanosleep(&ts, NULL);
	}
	free(seen);
	return 0;
}

int main(int argc, char **argv)
{
	int gloo = 0, mpi = 0;
	const char *hold = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "gloo"))
			gloo = 1;
		else if (!strcmp(argv[i], "mpi"))
			mpi = 1;
		else if (!strcmp(argv[i], "hold") && i + 1 < argc)
			hold = argv[++i];
		else {
			fprintf(stderr, "usage: cluster_rank [gloo] [mpi] [hold FILE]\n");
			return 2;
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	hpct_world *w;
	int rc = hpct_world_create(&w);
	if (rc)
		return fail(-1, "joining the world", rc);
	struct hpct_world_info info;
	hpct_world_get_info(w, &info);
	char host[64] = "";
	gethostname(host, sizeof(host) - 1);
	printf("rank %d of %d host %s listens %s path %s nodes %d job %s epoch %llu\n", info.rank,
	       info.size, host, info.listen_addr,
	       info.path == HPCT_PATH_ROOTLESS ? "rootless" : "standard", info.nnodes,
	       info.job_name, (unsigned long long)info.epoch);
	int *all = calloc((size_t)info.size, sizeof(int));
	if (!all)
		return fail(info.rank, "memory", HPCT_ENOMEM);
	if ((rc = hpct_allgather(hpct_world_group(w), &info.rank, sizeof(int), all)))
		return fail(info.rank, "allgather", rc);
	long sum = 0;
	for (int r = 0; r < info.size; r++) {
		if (all[r] != r) {
			fprintf(stderr, "cluster_rank %d: allgather: slot %d holds %d\n", info.rank,
			        r, all[r]);
			return 1;
		}
		sum += r;
	}
	free(all);
	if (gloo && run_gloo(w, &info))
		return 1;
	if (hold && hold_busy(w, &info, hold))
		return 1;
	if (mpi && run_mpi(info.rank, sum))
		return 1;
	hpct_world_destroy(w);
	printf("done %d\n", info.rank);
	return 0;
}
