/* A rank of a job that makes its NCCL communicators through hpct's API,
 * with no store and no id handed round: launched by hpct-run, one process
 * a rank.  Real libnccl ranks; without a GPU they run through the
 * test-only stand-in driver (tests/standin).  `nccl_api DIR MODE`:
 *
 *   api     one after the other, destroying each before the next: the
 *           world's communicator (hpct_nccl_comm_init, key 0); two
 *           persistent ones over the world (generation 7, key 0: the second
 *           derives and binds nothing); one over the even ranks.  Writes
 *           <dir>/api.<rank>: the tier, each NCCL result (0: ncclSuccess),
 *           the domain's counters, whether a root thread of NCCL's ran.
 *   grow    ranks 0..3 make a communicator (a group of the world), then
 *           every rank grows it to the whole world (hpct_nccl_comm_grow,
 *           rank 1 coordinating): writes <dir>/grow.<rank>: the results,
 *           and the grown communicator's size and this rank's rank in it.
 *   world   the world's communicator, once: <dir>/world.<rank> says NCCL's
 *           result (1 when it failed) and how long the call took (ms).
 *   shrink  the world's communicator; the last rank SIGKILLs itself once
 *           every rank has it, and the others shrink it without that rank
 *           (ncclCommShrink, NCCL_SHRINK_ABORT): <dir>/shrink.<rank>.
 *
 * Exit 0 when it could write what it saw. */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hpct/hpct.h"
#include "hpct/nccl.h"
#include "tests/nccl_program.h"

static int roots_seen;

/* One communicator of g (hpct_nccl_comm_init, key 0, or a persistent one
 * of generation 7), kept in *comm: 0, 1 when NCCL failed, or -1000 plus
 * hpct's error when hpct failed before NCCL had a say. */
static int make(hpct_group *g, int persistent, void **comm)
{
	int rc = persistent ? hpct_nccl_comm_init_persistent(g, 0, 7, NULL, comm)
	                    : hpct_nccl_comm_init(g, 0, NULL, comm);
	roots_seen |= root_thread();
	if (rc) {
		fprintf(stderr, "nccl_api: %s\n", hpct_last_error());
		*comm = NULL;
		return rc == HPCT_ENCCL ? 1 : -1000 + rc;
	}
	return 0;
}

static int one_kept(hpct_group *g, void **comm)
{
	return make(g, 0, comm);
}

/* One communicator made and destroyed. */
static int one(hpct_group *g, int persistent)
{
	void *comm = NULL;
	int rc = make(g, persistent, &comm);
	return rc ? rc : ncclCommDestroy(comm);
}

/* NCCL's calls that not every release has, looked up when used. */
static void *nccl_sym(const char *name)
{
	void *p = dlsym(RTLD_DEFAULT, name);
	if (!p)
		fprintf(stderr, "nccl_api: this NCCL has no %s\n", name);
	return p;
}

/* The size of a communicator and this rank's rank in it ("-1 -1" if none). */
static void count_rank(void *comm, int *count, int *rank)
{
	int (*cnt)(void *, int *) = (int (*)(void *, int *))nccl_sym("ncclCommCount");
	int (*usr)(void *, int *) = (int (*)(void *, int *))nccl_sym("ncclCommUserRank");
	*count = *rank = -1;
	if (comm && cnt && usr) {
		cnt(comm, count);
		usr(comm, rank);
	}
}

static int write_line(const char *dir, const char *what, int rank, const char *line)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s.%d", dir, what, rank);
	FILE *f = fopen(path, "w");
	if (!f)
		return 4;
	fputs(line, f);
	return fclose(f) == 0 ? 0 : 5;
}

/* grow: ranks 0..3's communicator, grown to the world. */
static int grow(const char *dir, hpct_group *world)
{
	int rank = hpct_group_rank(world), n = hpct_group_size(world);
	const int four[4] = { 0, 1, 2, 3 };
	hpct_group *g4 = NULL;
	void *parent = NULL, *grown = NULL;
	int rc = hpct_group_create(world, four, 4, &g4), first = -1, res = -1, count, crank;
	if (rc == 0 && g4)
		first = one_kept(g4, &parent);
	if (rc == 0)
		res = hpct_nccl_comm_grow(world, 4, parent, 1, NULL, &grown);
	if (res)
		fprintf(stderr, "nccl_api: grow: %s\n", hpct_last_error());
	roots_seen |= root_thread();
	count_rank(grown, &count, &crank);
	char line[256];
	snprintf(line, sizeof(line), "first=%d grow=%d count=%d rank=%d of=%d\n", first, res, count,
	         crank, n);
	if (grown)
		ncclCommDestroy(grown);
	if (parent)
		ncclCommDestroy(parent);
	hpct_group_destroy(g4);
	return write_line(dir, "grow", rank, line);
}

/* shrink: the world's communicator without its last rank, killed. */
static int shrink(const char *dir, hpct_group *world)
{
	int rank = hpct_group_rank(world), n = hpct_group_size(world);
	void *comm = NULL, *child = NULL;
	int first = one_kept(world, &comm), res = -1, count, crank;
	if (hpct_barrier(world) != 0)
		fprintf(stderr, "nccl_api: shrink: barrier: %s\n", hpct_last_error());
	if (rank == n - 1)
		raise(SIGKILL);
	int (*shr)(void *, int *, int, void **, void *, int) =
	        (int (*)(void *, int *, int, void **, void *, int))nccl_sym("ncclCommShrink");
	int excl[1] = { n - 1 };
	if (comm && shr)
		res = shr(comm, excl, 1, &child, NULL, 1 /* NCCL_SHRINK_ABORT */);
	count_rank(child, &count, &crank);
	char line[256];
	snprintf(line, sizeof(line), "first=%d shrink=%d count=%d rank=%d\n", first, res, count,
	         crank);
	if (child)
		ncclCommDestroy(child);
	return write_line(dir, "shrink", rank, line);
}

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	hpct_world *w;
	if (hpct_world_create(&w) != 0) {
		fprintf(stderr, "nccl_api: %s\n", hpct_last_error());
		return 3;
	}
	hpct_group *world = hpct_world_group(w);
	int rank = hpct_group_rank(world), n = hpct_group_size(world);
	if (strcmp(argv[2], "world") == 0) {
		struct timespec t0, t1;
		void *comm = NULL;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		int res = one_kept(world, &comm);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		char line[128];
		snprintf(line, sizeof(line), "init=%d ms=%.0f\n", res,
		         (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
		                 (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6);
		if (comm)
			ncclCommDestroy(comm);
		hpct_world_destroy(w);
		return write_line(argv[1], "world", rank, line);
	}
	if (strcmp(argv[2], "grow") == 0 || strcmp(argv[2], "shrink") == 0) {
		int rc = argv[2][0] == 'g' ? grow(argv[1], world) : shrink(argv[1], world);
		hpct_world_destroy(w);
		return rc;
	}
	int tier = hpct_nccl_tier(world);
	int first = one(world, 0);
	int p1 = one(world, 1), p2 = one(world, 1);
	struct hpct_nccl_domain_stats st = { 0 };
	hpct_nccl_domain_get_stats(world, 7, &st);
	int evens[64], ne = 0;
	for (int r = 0; r < n && ne < 64; r += 2)
		evens[ne++] = r;
	hpct_group *sub = NULL;
	int subrc = hpct_group_create(world, evens, ne, &sub);
	int sub_init = subrc ? -1000 + subrc : sub ? one(sub, 0) : -1;
	hpct_group_destroy(sub);
	char line[512];
	snprintf(line, sizeof(line),
	         "tier=%d init=%d persistent=%d,%d derived=%llu binds=%llu reuses=%llu sub=%d "
	         "root_thread=%d\n",
	         tier, first, p1, p2, (unsigned long long)st.derived, (unsigned long long)st.binds,
	         (unsigned long long)st.reuses, sub_init, roots_seen);
	hpct_world_destroy(w);
	return write_line(argv[1], "api", rank, line);
}
