/* hpct-bench-nccl: the rank of hpct-bench --scenario nccl-init, which
 * starts it, one process a rank.  It joins hpct's world (untimed), meets
 * the others in a barrier, then makes one NCCL communicator over all ranks
 * with the real libnccl.so.2 (HPCT_NCCL_LIB, else the usual search path):
 *
 *   stock     (HPCT_USE_ROOTLESS=0) what PyTorch does: rank 0 calls
 *             ncclGetUniqueId (NCCL's root thread starts), the id goes to
 *             every rank through the standard path's store on rank 0
 *             (hpct_broadcast), and every rank calls ncclCommInitRank;
 *   rootless  (HPCT_USE_ROOTLESS=1) hpct_nccl_comm_init: ids every rank
 *             derives alone, Tier 2 where the release allows (a micro-root
 *             in every rank), no store, no id handed round.
 *
 * Timed from the barrier until ncclCommInitRank* returns.  It prints one
 * line, "nccl-init rank R ok RC ms M conns C accepted A": C the TCP
 * connections the process opened and accepted in that time, A those it
 * accepted (a root takes every rank's report) (NCCL's and hpct's alike:
 * connect, accept and accept4 are counted here, this program exports them
 * to libnccl and libhpct).  NCCL_DEBUG=INFO adds NCCL's own "Bootstrap
 * timings" and "Init timings" to the same output.  Exit 0 when init
 * succeeded. */
#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "hpct/hpct.h"
#include "hpct/nccl.h"

static atomic_int counting, conns, accepts;

static void *next_fn(const char *name)
{
	return dlsym(RTLD_NEXT, name);
}

int connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	static int (*real)(int, const struct sockaddr *, socklen_t);
	if (!real)
		real = (int (*)(int, const struct sockaddr *, socklen_t))next_fn("connect");
	int rc = real(fd, sa, len);
	if (atomic_load(&counting) && (rc == 0 || errno == EINPROGRESS) && sa &&
	    (sa->sa_family == AF_INET || sa->sa_family == AF_INET6))
		atomic_fetch_add(&conns, 1);
	return rc;
}

int accept(int fd, struct sockaddr *sa, socklen_t *len)
{
	static int (*real)(int, struct sockaddr *, socklen_t *);
	if (!real)
		real = (int (*)(int, struct sockaddr *, socklen_t *))next_fn("accept");
	int rc = real(fd, sa, len);
	if (rc >= 0 && atomic_load(&counting)) {
		atomic_fetch_add(&conns, 1);
		atomic_fetch_add(&accepts, 1);
	}
	return rc;
}

int accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
	static int (*real)(int, struct sockaddr *, socklen_t *, int);
	if (!real)
		real = (int (*)(int, struct sockaddr *, socklen_t *, int))next_fn("accept4");
	int rc = real(fd, sa, len, flags);
	if (rc >= 0 && atomic_load(&counting)) {
		atomic_fetch_add(&conns, 1);
		atomic_fetch_add(&accepts, 1);
	}
	return rc;
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

struct nccl {
	int (*get_unique_id)(hpct_nccl_id *);
	int (*init_rank)(void **, int, hpct_nccl_id, int);
	int (*destroy)(void *);
	const char *(*error_string)(int);
};

static int load(struct nccl *l)
{
	const char *path = getenv("HPCT_NCCL_LIB");
	void *h = dlopen(path && *path ? path : "libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
	if (!h) {
		fprintf(stderr, "hpct-bench-nccl: cannot load NCCL: %s\n", dlerror());
		return -1;
	}
	*(void **)&l->get_unique_id = dlsym(h, "ncclGetUniqueId");
	*(void **)&l->init_rank = dlsym(h, "ncclCommInitRank");
	*(void **)&l->destroy = dlsym(h, "ncclCommDestroy");
	*(void **)&l->error_string = dlsym(h, "ncclGetErrorString");
	if (!l->get_unique_id || !l->init_rank || !l->destroy || !l->error_string) {
		fprintf(stderr, "hpct-bench-nccl: %s lacks NCCL's calls\n",
		        path ? path : "libnccl");
		return -1;
	}
	return 0;
}

/* The stock path: rank 0's id, through the store, to ncclCommInitRank. */
static int stock(const struct nccl *l, hpct_group *g, void **comm, char *why, size_t wl)
{
	hpct_nccl_id id;
	int rank = hpct_group_rank(g), rc = 0;
	memset(&id, 0, sizeof(id));
	if (rank == 0 && (rc = l->get_unique_id(&id)) != 0) {
		snprintf(why, wl, "ncclGetUniqueId: %s", l->error_string(rc));
		return rc;
	}
	if ((rc = hpct_broadcast(g, &id, sizeof(id), 0)) != 0) {
		snprintf(why, wl, "the id from rank 0: %s", hpct_last_error());
		return rc;
	}
	if ((rc = l->init_rank(comm, hpct_group_size(g), id, rank)) != 0)
		snprintf(why, wl, "ncclCommInitRank: %s", l->error_string(rc));
	return rc;
}

int main(void)
{
	struct nccl l;
	hpct_world *w;
	if (load(&l) != 0)
		return 2;
	int rc = hpct_world_create(&w);
	if (rc) {
		fprintf(stderr, "hpct-bench-nccl: joining the world: %s\n", hpct_last_error());
		return 3;
	}
	hpct_group *g = hpct_world_group(w);
	struct hpct_world_info info;
	hpct_world_get_info(w, &info);
	if ((rc = hpct_barrier(g)) != 0) {
		fprintf(stderr, "hpct-bench-nccl: barrier: %s\n", hpct_last_error());
		return 3;
	}
	void *comm = NULL;
	char why[512] = "";
	atomic_store(&counting, 1);
	double t0 = now_ms();
	if (info.path == HPCT_PATH_ROOTLESS) {
		rc = hpct_nccl_comm_init(g, 0, NULL, &comm);
		if (rc)
			snprintf(why, sizeof(why), "%s", hpct_last_error());
	} else {
		rc = stock(&l, g, &comm, why, sizeof(why));
	}
	double ms = now_ms() - t0;
	atomic_store(&counting, 0);
	printf("nccl-init rank %d ok %d ms %.3f conns %d accepted %d\n", info.rank, rc, ms,
	       atomic_load(&conns), atomic_load(&accepts));
	if (rc)
		printf("nccl-init rank %d failed: %s\n", info.rank, why);
	fflush(stdout);
	/* the others may still be in their init: meet before anything closes */
	hpct_barrier(g);
	if (comm)
		l.destroy(comm);
	hpct_world_destroy(w);
	return rc ? 1 : 0;
}
