/* Plays PyTorch's part with NCCL, and knows nothing of hpct.  Files in the
 * directory argv[1] stand in for the store.  Modes (argv[2]):
 *
 *   one     (default) rank 0 gets an id and hands it to the others; every
 *           rank calls ncclCommInitRankConfig
 *   world2  ranks 0 and 2 get one id each (PyTorch's root ranks above 128
 *           ranks, TORCH_NCCL_RANKS_PER_ROOT); every rank calls
 *           ncclCommInitRankScalable(n, rank, 2, ids)
 *   sub2    rank 0 gets two ids; ranks 0 and 1 call
 *           ncclCommInitRankScalable(2, rank, 2, ids), a comm of two of the
 *           world's ranks; the others do nothing
 *
 * Each rank writes what it saw to <dir>/rank.<r>: the NCCL version it runs
 * (ncclGetVersion), its ncclGetUniqueId results, whether every id carries
 * hpct's marker, the first id's address, whether a root thread of NCCL's
 * runs in the process before init, NCCL's init result (without a GPU:
 * NCCL's own error, or 0 through the stand-in driver of tests/standin),
 * whether the ports of the ids it got can be bound again after init (-1:
 * it got none), how long init took (ms), and whether a root thread of
 * NCCL's ran after it.  A communicator made is destroyed.  Exit 0 when it
 * got that far.
 *
 * NCCL_JOB_KILL=<rank>: that rank SIGKILLs itself once it holds its ids,
 * as its peers enter NCCL's bootstrap (a rank lost during init). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tests/nccl_program.h"

static const char *dir;

/* Publishes id k (write, then rename: readers see all of it or nothing). */
static int put_id(int k, const ncclUniqueId *id)
{
	char path[512], tmp[512];
	snprintf(path, sizeof(path), "%s/id.%d", dir, k);
	snprintf(tmp, sizeof(tmp), "%s/id.%d.tmp", dir, k);
	FILE *f = fopen(tmp, "w");
	if (!f || fwrite(id, sizeof(*id), 1, f) != 1 || fclose(f) != 0 || rename(tmp, path) != 0)
		return -1;
	return 0;
}

/* The "store": a poll, 60 s a hang guard. */
static int get_id(int k, ncclUniqueId *id)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/id.%d", dir, k);
	for (int i = 0; i < 6000; i++) {
		FILE *f = fopen(path, "r");
		if (f && fread(id, sizeof(*id), 1, f) == 1) {
			fclose(f);
			return 0;
		}
		if (f)
			fclose(f);
		usleep(10000);
	}
	return -1;
}

/* Can the id's port on its address be bound now (its root gone)? */
static int port_free(const ncclUniqueId *id)
{
	struct sockaddr_in sa;
	memcpy(&sa, id->internal + 8, sizeof(sa));
	if (sa.sin_family != AF_INET)
		return 0;
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	int ok = fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3 || !getenv("RANK") || !getenv("WORLD_SIZE"))
		return 2;
	dir = argv[1];
	const char *mode = argc == 3 ? argv[2] : "one";
	int rank = atoi(getenv("RANK")), n = atoi(getenv("WORLD_SIZE"));
	setenv("NCCL_SET_THREAD_NAME", "1", 1); /* so its root thread can be seen */
	int version = 0;
	ncclGetVersion(&version);
	ncclUniqueId ids[2];
	int got = 0, mine[2] = { 0, 0 }, nid = 1, crank = rank, cn = n, member = 1;
	if (strcmp(mode, "one") == 0) {
		if (rank == 0 && (got = ncclGetUniqueId(&ids[0])) == 0)
			mine[0] = 1;
	} else if (strcmp(mode, "world2") == 0) {
		nid = 2;
		int k = rank == 0 ? 0 : rank == 2 ? 1 : -1;
		if (k >= 0 && (got = ncclGetUniqueId(&ids[k])) == 0)
			mine[k] = 1;
	} else if (strcmp(mode, "sub2") == 0) {
		nid = 2;
		cn = 2;
		member = rank < 2;
		for (int k = 0; k < 2 && rank == 0 && got == 0; k++)
			if ((got = ncclGetUniqueId(&ids[k])) == 0)
				mine[k] = 1;
	} else {
		return 2;
	}
	for (int k = 0; k < nid; k++)
		if (mine[k] && put_id(k, &ids[k]) != 0)
			return 3;
	int init = -1, derived = 1, free_ports = -1;
	if (member) {
		for (int k = 0; k < nid; k++)
			if (!mine[k] && get_id(k, &ids[k]) != 0)
				return 4;
		for (int k = 0; k < nid; k++)
			derived &= memcmp(ids[k].internal + 120, "hpct", 4) == 0;
	}
	int roots = root_thread();
	const char *kill_rank = getenv("NCCL_JOB_KILL");
	if (kill_rank && atoi(kill_rank) == rank)
		raise(SIGKILL);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (member) {
		void *comm = NULL;
		init = nid == 1 ? ncclCommInitRankConfig(&comm, cn, ids[0], crank, NULL)
		                : ncclCommInitRankScalable(&comm, cn, crank, nid, ids, NULL);
		for (int k = 0; k < nid; k++)
			if (mine[k])
				free_ports = (free_ports != 0) & port_free(&ids[k]);
		if (init == 0)
			ncclCommDestroy(comm);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double init_ms =
	        (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
	unsigned short fam = 0, port = 0;
	char host[64] = "-";
	if (member) {
		memcpy(&fam, ids[0].internal + 8, 2);
		memcpy(&port, ids[0].internal + 10, 2);
		if (fam == AF_INET)
			inet_ntop(AF_INET, ids[0].internal + 12, host, sizeof(host));
	}
	char path[512];
	snprintf(path, sizeof(path), "%s/rank.%d", dir, rank);
	FILE *f = fopen(path, "w");
	if (!f)
		return 5;
	fprintf(f,
	        "version=%d getid=%d derived=%d host=%s port=%u root_thread=%d init=%d "
	        "ports_free=%d init_ms=%.0f root_after=%d\n",
	        version, got, member && derived, host, ntohs(port), roots, init, free_ports,
	        init_ms, root_thread());
	return fclose(f) == 0 ? 0 : 6;
}
