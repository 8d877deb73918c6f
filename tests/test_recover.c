/* In-process recovery (hpct_world_recover): survivors keep their links and
 * results stay right across successive recoveries with replaced ranks; a
 * process of an old epoch is refused; no descriptor leaks over 100
 * recoveries.  The test process plays the job's agent: it kills, starts
 * replacements and announces each new epoch through shared memory. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hpct/hpct.h"
#include "tests/harness.h"

TestSuite(recover, .timeout = 120);

static double mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* World allgather of (rank, epoch, salt) items, checked, then a barrier. */
static int exercise(hpct_world *w, uint64_t epoch, int salt)
{
	hpct_group *g = hpct_world_group(w);
	int n = hpct_group_size(g), me = hpct_group_rank(g);
	uint64_t item[2] = { (uint64_t)me * 1000003u + (uint64_t)salt, epoch }, all[2 * 64];
	if (n > 64 || hpct_allgather(g, item, sizeof(item), all) != 0)
		return 1;
	for (int r = 0; r < n; r++)
		if (all[2 * r] != (uint64_t)r * 1000003u + (uint64_t)salt ||
		    all[2 * r + 1] != epoch)
			return 2;
	return hpct_barrier(g) != 0 ? 3 : 0;
}

/* --- survivors only, 100 times ----------------------------------------- */

struct cfg {
	int n, port;
};

static void env_cb(int r, void *arg)
{
	struct cfg *c = arg;
	ht_setenv_world(r, c->n, 1, c->port, 1, 20);
}

static int hundred_main(int r, void *arg)
{
	(void)r;
	(void)arg;
	hpct_world *w;
	if (hpct_world_create(&w) != 0)
		return 10;
	if (exercise(w, 0, 1) != 0)
		return 11;
	struct hpct_world_stats before, after;
	hpct_world_get_stats(w, &before);
	int fds = ht_open_fds();
	for (uint64_t e = 1; e <= 100; e++) {
		if (hpct_world_recover(w, e, NULL, 0) != 0)
			return 12;
		int rc = exercise(w, e, (int)e);
		if (rc)
			return 20 + rc;
	}
	hpct_world_get_stats(w, &after);
	if (ht_open_fds() != fds)
		return 13; /* a descriptor per recovery would show here */
	if (after.conns_opened + after.conns_accepted !=
	    before.conns_opened + before.conns_accepted)
		return 14; /* survivors opened connections among themselves */
	if (after.links_kept < 100)
		return 15;
	/* a bad call leaves the world as it was */
	int bad[1] = { r };
	if (hpct_world_recover(w, 100, NULL, 0) != HPCT_EINVAL ||
	    hpct_world_recover(w, 101, bad, 1) != HPCT_EINVAL || exercise(w, 100, 7) != 0)
		return 16;
	/* HPCT_PORT_RANGE 16 holds 5 windows of 3 ranks: 105 listens where 100 does */
	if (hpct_world_recover(w, 105, NULL, 0) != HPCT_EBADENV ||
	    !strstr(hpct_last_error(), "ports are those of epoch 100") || exercise(w, 100, 8) != 0)
		return 17;
	hpct_world_destroy(w);
	return 0;
}

Test(recover, survivors_keep_their_links_and_fds_over_100_recoveries)
{
	struct cfg c = { .n = 3, .port = hpct_test_ports(0) };
	int codes[3];
	int bad = ht_spawn(3, env_cb, hundred_main, &c, 100, NULL, codes);
	cr_expect_eq(bad, 0, "%s", ht_describe(codes, 3));
}

/* --- replaced ranks, three times, and a stale process ------------------ */

#define N      6
#define ROUNDS 3

struct shared {
	int phase;     /* round whose victims must die now; 99: all done */
	int epoch;     /* the newest epoch the agent announced */
	int done[8];   /* ranks done with their work at each epoch */
	int failed[N]; /* per rank: the failing check, for the message */
	int new_conns[8];
};

static struct shared *sh;
static const int victims[ROUNDS + 1][N + 1] = {
	{ 0 }, { 1, 3 }, { 1, 0 }, { 2, 1, 5 } /* count, then ranks */
};
static int port_base;

static int is_victim(int round, int r)
{
	for (int i = 1; i <= victims[round][0]; i++)
		if (victims[round][i] == r)
			return 1;
	return 0;
}

static void wait_for(volatile int *v, int at_least)
{
	double until = mono() + 60;
	while (__atomic_load_n(v, __ATOMIC_SEQ_CST) < at_least && mono() < until)
		usleep(2000);
}

/* A rank that starts at `epoch` (0, or a replacement) and lives on as a
 * survivor until it is a victim or all is done. */
static int rank_main(int r, int epoch)
{
	ht_setenv_world(r, N, 2, port_base, 1, 20);
	char e[16];
	snprintf(e, sizeof(e), "%d", epoch);
	setenv("HPCT_EPOCH", e, 1);
	hpct_world *w;
	if (hpct_world_create(&w) != 0)
		return 30;
	int rc = exercise(w, (uint64_t)epoch, epoch);
	if (rc)
		return 40 + rc;
	__atomic_add_fetch(&sh->done[epoch], 1, __ATOMIC_SEQ_CST);
	for (int round = epoch + 1; round <= ROUNDS; round++) {
		wait_for(&sh->phase, round);
		if (is_victim(round, r))
			raise(SIGKILL);
		wait_for(&sh->epoch, round);
		struct hpct_world_stats a, b;
		hpct_world_get_stats(w, &a);
		if (hpct_world_recover(w, (uint64_t)round, &victims[round][1], victims[round][0]))
			return 50 + round;
		if ((rc = exercise(w, (uint64_t)round, round)) != 0)
			return 60 + rc;
		hpct_world_get_stats(w, &b);
		__atomic_add_fetch(&sh->new_conns[round],
		                   (int)(b.conns_opened + b.conns_accepted - a.conns_opened -
		                         a.conns_accepted),
		                   __ATOMIC_SEQ_CST);
		__atomic_add_fetch(&sh->done[round], 1, __ATOMIC_SEQ_CST);
	}
	/* a stale process of the last epoch knocks: we still work */
	wait_for(&sh->phase, 4);
	if ((rc = exercise(w, ROUNDS, 77)) != 0)
		return 70 + rc;
	__atomic_add_fetch(&sh->done[4], 1, __ATOMIC_SEQ_CST);
	wait_for(&sh->phase, 99);
	hpct_world_destroy(w);
	return 0;
}

static pid_t start(int r, int epoch)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0)
		_exit(rank_main(r, epoch));
	return pid;
}

/* The stale one: rank 4 of epoch ROUNDS - 1 joins and tries a barrier. */
static int stale_main(void)
{
	ht_setenv_world(4, N, 2, port_base, 1, 3);
	char e[16];
	snprintf(e, sizeof(e), "%d", ROUNDS - 1);
	setenv("HPCT_EPOCH", e, 1);
	hpct_world *w;
	if (hpct_world_create(&w) != 0)
		return 0; /* its old port may be unusable: refused all the same */
	int rc = hpct_barrier(hpct_world_group(w));
	hpct_world_destroy(w);
	return rc == HPCT_EREFUSED || rc == HPCT_ETIMEDOUT || rc == HPCT_EABORTED ? 0 : 1;
}

Test(recover, three_recoveries_with_replacements_and_a_stale_process)
{
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(sh, MAP_FAILED);
	memset(sh, 0, sizeof(*sh));
	port_base = hpct_test_ports(1);
	pid_t pids[N];
	for (int r = 0; r < N; r++)
		pids[r] = start(r, 0);
	int lost = 0; /* exit codes of ranks that ended badly */
	for (int round = 1; round <= ROUNDS; round++) {
		wait_for(&sh->done[round - 1], N);
		cr_assert_eq(sh->done[round - 1], N, "epoch %d: %d of %d ranks done", round - 1,
		             sh->done[round - 1], N);
		__atomic_store_n(&sh->phase, round, __ATOMIC_SEQ_CST);
		for (int i = 1; i <= victims[round][0]; i++) {
			int v = victims[round][i], st;
			waitpid(pids[v], &st, 0);
			if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL))
				lost = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
			pids[v] = start(v, round); /* its replacement */
		}
		__atomic_store_n(&sh->epoch, round, __ATOMIC_SEQ_CST); /* the agent's word */
	}
	wait_for(&sh->done[ROUNDS], N);
	cr_expect_eq(sh->done[ROUNDS], N, "epoch %d: %d of %d ranks done", ROUNDS, sh->done[ROUNDS],
	             N);
	pid_t stale = fork();
	if (stale == 0)
		_exit(stale_main());
	__atomic_store_n(&sh->phase, 4, __ATOMIC_SEQ_CST);
	int st;
	waitpid(stale, &st, 0);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the stale process was not refused");
	wait_for(&sh->done[4], N);
	cr_expect_eq(sh->done[4], N, "survivors failed after the stale process knocked");
	__atomic_store_n(&sh->phase, 99, __ATOMIC_SEQ_CST);
	for (int r = 0; r < N; r++) {
		waitpid(pids[r], &st, 0);
		cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d ended with %d", r,
		          WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
	}
	cr_expect_eq(lost, 0, "a victim exited %d before it was killed", lost);
	/* round 1 replaced rank 3 alone: only links to it are new, at most its
	 * tree neighbours' (its parent and children) and its own */
	cr_expect_leq(sh->new_conns[1], 4, "survivors opened %d connections", sh->new_conns[1]);
	munmap(sh, sizeof(*sh));
}
