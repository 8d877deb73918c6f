/* tests/standin/try_nccl.c: a self-check of the driver stand-in.  Loads the
 * libnccl.so.2 it is given, forks one process per rank and has every rank
 * create a communicator (and, by mode, split, shrink or grow it).  Exit
 * status 0 only if every rank's every call returned ncclSuccess in time.
 *
 *   try_nccl [-p ranks_per_node] [-m mode] [-i ids] [-t seconds] libnccl.so.2 nranks
 *
 * mode: init (ncclCommInitRank; ncclCommInitRankScalable with -i > 1),
 *       split (then ncclCommSplit by rank parity), shrink (then
 *       ncclCommShrink without the last rank), grow (the first nranks-1
 *       ranks, then ncclCommGrow adding the last one).
 * Rank r runs on "node" r / ranks_per_node (NCCL_HOSTID) as device
 * r % ranks_per_node (HPCT_STANDIN_DEVICE).  The parent relays the unique ids
 * (each one a message on a pipe) and waits on the ranks' pipes closing, with
 * one deadline (-t, default 120 s) for the whole run; on it, it kills the
 * ranks it started and names those that hung.  Exit status 77: the release
 * lacks a call the mode needs. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_RANKS        1024
#define MAX_IDS          8
#define GROW_SLOT        (MAX_IDS - 1)
#define EXIT_UNAVAILABLE 77

typedef struct {
	char internal[128];
} nccl_id;
typedef void *nccl_comm;

static struct {
	int (*get_unique_id)(nccl_id *id);
	int (*init_rank)(nccl_comm *comm, int nranks, nccl_id id, int rank);
	int (*init_scalable)(nccl_comm *comm, int nranks, int rank, int nid, nccl_id *ids,
	                     void *cfg);
	int (*split)(nccl_comm comm, int color, int key, nccl_comm *out, void *cfg);
	int (*shrink)(nccl_comm comm, int *excluded, int n, nccl_comm *out, void *cfg, int flags);
	int (*comm_get_unique_id)(nccl_comm comm, nccl_id *id);
	int (*grow)(nccl_comm comm, int nranks, const nccl_id *id, int rank, nccl_comm *out,
	            void *cfg);
	int (*destroy)(nccl_comm comm);
	const char *(*error_string)(int r);
	int (*get_version)(int *v);
} nccl;

/* One message, child to parent and parent to child: id number `slot`. */
struct msg {
	int slot;
	nccl_id id;
};

static struct {
	int nranks, per_node, nids, deadline_s;
	const char *mode;
	int rank, up, down; /* in a rank: its number and its ends of the pipes */
	nccl_id ids[MAX_IDS];
	int have[MAX_IDS];
} run = { .per_node = 8, .nids = 1, .deadline_s = 120, .mode = "init" };

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int write_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n > 0) {
		ssize_t w = write(fd, c, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

/* ---- in a rank ---- */

static void publish(int slot, const nccl_id *id)
{
	struct msg m = { .slot = slot, .id = *id };
	if (write_all(run.up, &m, sizeof(m)) != 0) {
		fprintf(stderr, "rank %d: cannot hand id %d to the parent: %s\n", run.rank, slot,
		        strerror(errno));
		exit(1);
	}
}

/* Reads relayed ids until id `slot` is there.  The parent's deadline bounds
 * this wait (it kills the rank); alarm() is the backstop. */
static const nccl_id *wait_id(int slot)
{
	while (!run.have[slot]) {
		struct msg m;
		size_t got = 0;
		while (got < sizeof(m)) {
			ssize_t r = read(run.down, (char *)&m + got, sizeof(m) - got);
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0) {
				fprintf(stderr, "rank %d: parent gone before id %d arrived\n",
				        run.rank, slot);
				exit(1);
			}
			got += (size_t)r;
		}
		if (m.slot >= 0 && m.slot < MAX_IDS) {
			run.ids[m.slot] = m.id;
			run.have[m.slot] = 1;
		}
	}
	return &run.ids[slot];
}

/* Prints one call's outcome; exits the rank on failure. */
static void check(const char *what, int r, double t0)
{
	printf("rank %d: %s: %s (%d) in %.2f s\n", run.rank, what,
	       nccl.error_string != NULL ? nccl.error_string(r) : "?", r, now() - t0);
	fflush(stdout);
	if (r != 0)
		exit(1);
}

/* NCCL's rule for which ranks create one of nids ids (user guide,
 * ncclCommInitRankScalable), and which id slot that is. */
static int root_slot(int rank, int nranks, int nids)
{
	int rmr = nranks % nids, rpr = nranks / nids, rlim = rmr * (rpr + 1);
	if (rank < rlim)
		return rank % (rpr + 1) == 0 ? rank / (rpr + 1) : -1;
	return (rank - rlim) % rpr == 0 ? rmr + (rank - rlim) / rpr : -1;
}

static nccl_comm create(int nranks)
{
	int slot = root_slot(run.rank, nranks, run.nids);
	if (slot >= 0) {
		nccl_id id;
		check("ncclGetUniqueId", nccl.get_unique_id(&id), now());
		publish(slot, &id);
	}
	for (int i = 0; i < run.nids; i++)
		wait_id(i);
	nccl_comm comm = NULL;
	double t0 = now();
	if (run.nids == 1)
		check("ncclCommInitRank", nccl.init_rank(&comm, nranks, run.ids[0], run.rank), t0);
	else
		check("ncclCommInitRankScalable",
		      nccl.init_scalable(&comm, nranks, run.rank, run.nids, run.ids, NULL), t0);
	return comm;
}

static void destroy(nccl_comm comm, const char *which)
{
	char what[64];
	snprintf(what, sizeof(what), "ncclCommDestroy(%s)", which);
	if (comm != NULL)
		check(what, nccl.destroy(comm), now());
}

static void rank_main(void)
{
	double t0;
	nccl_comm comm = NULL, other = NULL;
	if (strcmp(run.mode, "grow") == 0) {
		int last = run.nranks - 1;
		if (run.rank < last) {
			comm = create(last);
			const nccl_id *id = NULL;
			if (run.rank == 0) {
				nccl_id gid;
				check("ncclCommGetUniqueId", nccl.comm_get_unique_id(comm, &gid),
				      now());
				publish(GROW_SLOT, &gid);
				id = wait_id(GROW_SLOT);
			}
			t0 = now();
			check("ncclCommGrow(existing)",
			      nccl.grow(comm, run.nranks, id, -1, &other, NULL), t0);
		} else {
			const nccl_id *id = wait_id(GROW_SLOT);
			t0 = now();
			check("ncclCommGrow(new)",
			      nccl.grow(NULL, run.nranks, id, run.rank, &other, NULL), t0);
		}
	} else {
		comm = create(run.nranks);
		if (strcmp(run.mode, "split") == 0) {
			t0 = now();
			check("ncclCommSplit",
			      nccl.split(comm, run.rank % 2, run.rank, &other, NULL), t0);
		} else if (strcmp(run.mode, "shrink") == 0 && run.rank < run.nranks - 1) {
			int excluded = run.nranks - 1;
			t0 = now();
			check("ncclCommShrink", nccl.shrink(comm, &excluded, 1, &other, NULL, 0),
			      t0);
		}
	}
	destroy(other, "derived");
	destroy(comm, "first");
	exit(0);
}

/* ---- the parent ---- */

static int load(const char *path)
{
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		fprintf(stderr, "try_nccl: %s\n", dlerror());
		return -1;
	}
	*(void **)&nccl.get_unique_id = dlsym(h, "ncclGetUniqueId");
	*(void **)&nccl.init_rank = dlsym(h, "ncclCommInitRank");
	*(void **)&nccl.init_scalable = dlsym(h, "ncclCommInitRankScalable");
	*(void **)&nccl.split = dlsym(h, "ncclCommSplit");
	*(void **)&nccl.shrink = dlsym(h, "ncclCommShrink");
	*(void **)&nccl.comm_get_unique_id = dlsym(h, "ncclCommGetUniqueId");
	*(void **)&nccl.grow = dlsym(h, "ncclCommGrow");
	*(void **)&nccl.destroy = dlsym(h, "ncclCommDestroy");
	*(void **)&nccl.error_string = dlsym(h, "ncclGetErrorString");
	*(void **)&nccl.get_version = dlsym(h, "ncclGetVersion");
	int v = 0;
	if (nccl.get_version != NULL)
		nccl.get_version(&v);
	printf("try_nccl: %s: NCCL %d, %d ranks, %d per node, mode %s, %d id(s)\n", path, v,
	       run.nranks, run.per_node, run.mode, run.nids);
	const char *missing = NULL;
	if (nccl.get_unique_id == NULL || nccl.init_rank == NULL || nccl.destroy == NULL)
		missing = "ncclCommInitRank";
	else if (run.nids > 1 && nccl.init_scalable == NULL)
		missing = "ncclCommInitRankScalable";
	else if (strcmp(run.mode, "split") == 0 && nccl.split == NULL)
		missing = "ncclCommSplit";
	else if (strcmp(run.mode, "shrink") == 0 && nccl.shrink == NULL)
		missing = "ncclCommShrink";
	else if (strcmp(run.mode, "grow") == 0 &&
	         (nccl.grow == NULL || nccl.comm_get_unique_id == NULL))
		missing = "ncclCommGrow";
	if (missing != NULL) {
		printf("try_nccl: this release has no %s\n", missing);
		return EXIT_UNAVAILABLE;
	}
	return 0;
}

static void rank_env(int rank)
{
	char value[64];
	snprintf(value, sizeof(value), "%d", rank % run.per_node);
	setenv("HPCT_STANDIN_DEVICE", value, 1);
	snprintf(value, sizeof(value), "%d", run.per_node);
	setenv("HPCT_STANDIN_DEVICES", value, 0);
	if (run.per_node < run.nranks) {
		snprintf(value, sizeof(value), "hpct-standin-node%d", rank / run.per_node);
		setenv("NCCL_HOSTID", value, 1);
	}
}

static int usage(void)
{
	fprintf(stderr, "usage: try_nccl [-p ranks_per_node] [-m init|split|shrink|grow] [-i ids] "
	                "[-t seconds] libnccl.so.2 nranks\n");
	return 2;
}

int main(int argc, char **argv)
{
	int c;
	while ((c = getopt(argc, argv, "p:m:i:t:")) != -1) {
		if (c == 'p')
			run.per_node = atoi(optarg);
		else if (c == 'm')
			run.mode = optarg;
		else if (c == 'i')
			run.nids = atoi(optarg);
		else if (c == 't')
			run.deadline_s = atoi(optarg);
		else
			return usage();
	}
	if (argc - optind != 2)
		return usage();
	run.nranks = atoi(argv[optind + 1]);
	if (run.nranks < 1 || run.nranks > MAX_RANKS || run.per_node < 1 || run.per_node > 32 ||
	    run.nids < 1 || run.nids >= GROW_SLOT || run.nids > run.nranks || run.deadline_s < 1 ||
	    (strcmp(run.mode, "grow") == 0 && (run.nranks < 2 || run.nids != 1)))
		return usage();
	int r = load(argv[optind]);
	if (r != 0)
		return r < 0 ? 1 : r;
	fflush(stdout);
	signal(SIGPIPE, SIG_IGN);

	static pid_t pid[MAX_RANKS];
	static int up[MAX_RANKS], down[MAX_RANKS], open_up[MAX_RANKS];
	double t0 = now();
	for (int i = 0; i < run.nranks; i++) {
		int u[2], d[2];
		if (pipe(u) != 0 || pipe(d) != 0) {
			perror("try_nccl: pipe");
			return 1;
		}
		pid[i] = fork();
		if (pid[i] == 0) {
			for (int j = 0; j < i; j++) {
				close(up[j]);
				close(down[j]);
			}
			close(u[0]);
			close(d[1]);
			run.rank = i;
			run.up = u[1];
			run.down = d[0];
			alarm((unsigned)run.deadline_s + 10);
			rank_env(i);
			rank_main();
		}
		close(u[1]);
		close(d[0]);
		up[i] = u[0];
		down[i] = d[1];
		open_up[i] = 1;
		if (pid[i] < 0) {
			perror("try_nccl: fork");
			return 1;
		}
	}

	/* Relay every id to every rank until all ranks have closed their pipe
	 * (exited) or the deadline passes. */
	static struct pollfd fds[MAX_RANKS];
	int left = run.nranks;
	double deadline = t0 + run.deadline_s;
	while (left > 0) {
		int n = 0;
		for (int i = 0; i < run.nranks; i++)
			if (open_up[i])
				fds[n++] = (struct pollfd){ .fd = up[i], .events = POLLIN };
		int ms = (int)((deadline - now()) * 1000);
		if (ms <= 0)
			break;
		if (poll(fds, (nfds_t)n, ms) < 0 && errno != EINTR) {
			perror("try_nccl: poll");
			break;
		}
		for (int k = 0; k < n; k++) {
			if (fds[k].revents == 0)
				continue;
			int i = 0;
			while (up[i] != fds[k].fd)
				i++;
			struct msg m;
			ssize_t got = read(up[i], &m, sizeof(m));
			if (got == (ssize_t)sizeof(m)) {
				for (int j = 0; j < run.nranks; j++)
					(void)write_all(down[j], &m, sizeof(m));
			} else if (got <= 0) {
				close(up[i]);
				open_up[i] = 0;
				left--;
			}
		}
	}

	int failed = 0;
	for (int i = 0; i < run.nranks; i++) {
		if (open_up[i]) {
			fprintf(stderr,
			        "try_nccl: rank %d (pid %d) still running after %d s: killed\n", i,
			        (int)pid[i], run.deadline_s);
			kill(pid[i], SIGKILL);
		}
	}
	for (int i = 0; i < run.nranks; i++) {
		int status;
		close(down[i]);
		if (waitpid(pid[i], &status, 0) != pid[i] || !WIFEXITED(status) ||
		    WEXITSTATUS(status) != 0) {
			if (WIFSIGNALED(status))
				fprintf(stderr, "try_nccl: rank %d ended by signal %d\n", i,
				        WTERMSIG(status));
			else
				fprintf(stderr, "try_nccl: rank %d exit status %d\n", i,
				        WEXITSTATUS(status));
			failed++;
		}
	}
	printf("try_nccl: %s, %d of %d ranks failed, %.2f s\n", failed ? "FAIL" : "PASS", failed,
	       run.nranks, now() - t0);
	return failed ? 1 : 0;
}
