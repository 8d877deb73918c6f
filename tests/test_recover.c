/* In-process recovery (hpct_world_recover): survivors keep their links and
 * results stay right across successive recoveries with replaced ranks; a
 * process of an old epoch is refused; no descriptor leaks over 100
 * recoveries, each of which replaces a rank.  The test process plays the job's agent: it kills,
 * starts replacements and announces each new epoch through shared memory. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hpct/hpct.h"
#include "tests/harness.h"

TestSuite(recover, .timeout = 120);

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

/* --- 100 recoveries, each replacing a rank ------------------------------ */

/* Four ranks; at each of 100 epochs rank 3 is killed and the agent (the
 * test) starts its replacement, and ranks 0-2 recover with it replaced.
 * The survivors' descriptors are the same after as before (the dead links
 * closed), they kept their links to each other (links_kept), and every
 * connection they opened or accepted over the 100 recoveries is one with a
 * replacement: their count equals the replacements' own. */
#define HN      4
#define HUNDRED 100

struct hundred {
	int phase;             /* epoch whose victim must die now */
	int epoch;             /* the newest epoch the agent announced */
	int done[HUNDRED + 1]; /* ranks through their work at each epoch */
	long survivors_new;    /* connections the survivors made over the recoveries */
	long replacements;     /* connections the replacements made */
};

/* A rank in a child process: main(r, epoch) is its exit status. */
static pid_t start_rank(int (*main_fn)(int, int), int r, int epoch)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0)
		_exit(main_fn(r, epoch));
	return pid;
}

static struct hundred *hs;
static int hport;

static void wait_for(volatile int *v, int at_least);

static int hundred_rank(int r, int epoch)
{
	ht_setenv_world(r, HN, 1, hport, 1, 20);
	char e[16];
	snprintf(e, sizeof(e), "%d", epoch);
	setenv("HPCT_EPOCH", e, 1);
	hpct_world *w;
	if (hpct_world_create(&w) != 0)
		return 10;
	if (exercise(w, (uint64_t)epoch, epoch + 1) != 0)
		return 11;
	struct hpct_world_stats before, after;
	hpct_world_get_stats(w, &before);
	if (r == HN - 1) {
		/* every connection of a replacement is one with a survivor */
		if (epoch > 0)
			__atomic_add_fetch(&hs->replacements,
			                   (long)(before.conns_opened + before.conns_accepted),
			                   __ATOMIC_SEQ_CST);
		__atomic_add_fetch(&hs->done[epoch], 1, __ATOMIC_SEQ_CST);
		if (epoch < HUNDRED) {
			wait_for(&hs->phase, epoch + 1);
			raise(SIGKILL);
		}
	} else {
		int fds = ht_open_fds();
		int gone[1] = { HN - 1 };
		__atomic_add_fetch(&hs->done[0], 1, __ATOMIC_SEQ_CST);
		for (int k = 1; k <= HUNDRED; k++) {
			wait_for(&hs->epoch, k);
			if (hpct_world_recover(w, (uint64_t)k, gone, 1) != 0) {
				fprintf(stderr, "rank %d: recover to %d: %s\n", r, k,
				        hpct_last_error());
				return 12;
			}
			int rc = exercise(w, (uint64_t)k, k + 1);
			if (rc)
				return 20 + rc;
			__atomic_add_fetch(&hs->done[k], 1, __ATOMIC_SEQ_CST);
		}
		hpct_world_get_stats(w, &after);
		if (ht_open_fds() != fds)
			return 13; /* a descriptor per recovery would show here */
		__atomic_add_fetch(&hs->survivors_new,
		                   (long)(after.conns_opened + after.conns_accepted -
		                          before.conns_opened - before.conns_accepted),
		                   __ATOMIC_SEQ_CST);
		if (after.links_kept < HUNDRED)
			return 15;
	}
	/* a bad call leaves the world as it was */
	int bad[1] = { r };
	if (hpct_world_recover(w, HUNDRED, NULL, 0) != HPCT_EINVAL ||
	    hpct_world_recover(w, HUNDRED + 1, bad, 1) != HPCT_EINVAL ||
	    exercise(w, HUNDRED, 7) != 0)
		return 16;
	/* HPCT_PORT_RANGE 16 holds 4 windows of 4 ranks: 104 listens where 100 does */
	if (hpct_world_recover(w, HUNDRED + 4, NULL, 0) != HPCT_EBADENV ||
	    !strstr(hpct_last_error(), "ports are those of epoch 100") ||
	    exercise(w, HUNDRED, 8) != 0)
		return 17;
	hpct_world_destroy(w);
	return 0;
}

Test(recover, survivors_keep_their_links_and_fds_over_100_recoveries, .timeout = 600)
{
	hs = mmap(NULL, sizeof(*hs), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(hs, MAP_FAILED);
	memset(hs, 0, sizeof(*hs));
	hport = hpct_test_ports(0);
	pid_t pids[HN];
	for (int r = 0; r < HN; r++)
		pids[r] = start_rank(hundred_rank, r, 0);
	int st;
	for (int e = 1; e <= HUNDRED; e++) {
		wait_for(&hs->done[e - 1], HN);
		if (hs->done[e - 1] != HN)
			break; /* the ranks' exit codes say why */
		__atomic_store_n(&hs->phase, e, __ATOMIC_SEQ_CST);
		waitpid(pids[HN - 1], &st, 0);
		cr_expect(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
		          "rank 3 of epoch %d ended with %d before it was killed", e - 1,
		          WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
		pids[HN - 1] = start_rank(hundred_rank, HN - 1, e); /* its replacement */
		__atomic_store_n(&hs->epoch, e, __ATOMIC_SEQ_CST);  /* the agent's word */
	}
	wait_for(&hs->done[HUNDRED], HN);
	for (int r = 0; r < HN; r++) {
		if (hs->done[HUNDRED] != HN)
			kill(pids[r], SIGKILL); /* stuck: the codes say where */
		waitpid(pids[r], &st, 0);
		cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d ended with %d", r,
		          WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
	}
	cr_expect_eq(hs->done[HUNDRED], HN, "epoch %d: %d of %d ranks done", HUNDRED,
	             hs->done[HUNDRED], HN);
	cr_expect_gt(hs->replacements, 0, "the replacements made no connection");
	cr_expect_eq(hs->survivors_new, hs->replacements,
	             "survivors made %ld connections, the replacements %ld: survivors "
	             "connected among themselves",
	             hs->survivors_new, hs->replacements);
	munmap(hs, sizeof(*hs));
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

/* libhpct, private: the epoch rank's current process began in, as this
 * rank knows it */
uint64_t hpct__world_rank_born(const hpct_world *world, int rank);

/* After the recovery to `round` of a process that began at `epoch`: every
 * rank is born at `epoch` but those replaced since, at the round of their
 * last replacement; the world keeps only those.  0, or the rank wrong. */
static int born_wrong(hpct_world *w, int epoch, int round)
{
	for (int i = 0; i < N; i++) {
		uint64_t want = (uint64_t)epoch;
		for (int k = epoch + 1; k <= round; k++)
			if (is_victim(k, i))
				want = (uint64_t)k;
		if (hpct__world_rank_born(w, i) != want)
			return i + 1;
	}
	return hpct__world_rank_born(w, N) == UINT64_MAX &&
	                       hpct__world_rank_born(w, -1) == UINT64_MAX
	               ? 0
	               : N + 1;
}

/* Polls shared memory for the agent's (or the ranks') word; 60 s is a
 * hang guard. */
static void wait_for(volatile int *v, int at_least)
{
	double until = ht_now() + 60;
	while (__atomic_load_n(v, __ATOMIC_SEQ_CST) < at_least && ht_now() < until)
		usleep(1000);
}

/* A rank that starts at `epoch` (0, or a replacement) and lives on as a
 * survivor until it is a victim or all is done. */
/* Rank r of n at `epoch` (0, or a replacement's) joins and does the
 * exercise there: 0 with *w, or the exit status of the step that failed. */
static int start_at(int r, int n, int nodes, int port, int rootless, int epoch, hpct_world **w)
{
	ht_setenv_world(r, n, nodes, port, rootless, 20);
	char e[16];
	snprintf(e, sizeof(e), "%d", epoch);
	setenv("HPCT_EPOCH", e, 1);
	if (hpct_world_create(w) != 0)
		return 30;
	int rc = exercise(*w, (uint64_t)epoch, epoch);
	return rc ? 40 + rc : 0;
}

static int rank_main(int r, int epoch)
{
	hpct_world *w;
	int rc = start_at(r, N, 2, port_base, 1, epoch, &w);
	if (rc)
		return rc;
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
		if (born_wrong(w, epoch, round))
			return 80 + round;
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
		pids[r] = start_rank(rank_main, r, 0);
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
			pids[v] = start_rank(rank_main, v, round); /* its replacement */
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

/* --- the standard path: through rank 0's rendezvous --------------------- */

/* Five ranks on the standard path, with and without a shared secret:
 * rank 3 is replaced, then ranks 1 and 4; the survivors recover in process
 * through rank 0's rendezvous, keeping their one connection to it (none
 * new), and every allgather is right.  Then rank 0 dies: the survivors are
 * told plainly that they cannot meet again without it. */
#define SN 5

struct std_shared {
	int phase, epoch;
	int done[4];
	int root_gone; /* survivors told rank 0's loss plainly */
	int new_conns; /* connections the survivors opened in recoveries */
};

static struct std_shared *ss;
static int std_port;
static const int std_victims[4][3] = { { 0 }, { 1, 3 }, { 2, 1, 4 }, { 1, 0 } };

static int std_rank(int r, int epoch)
{
	hpct_world *w;
	int rc = start_at(r, SN, 1, std_port, 0, epoch, &w);
	if (rc)
		return rc;
	__atomic_add_fetch(&ss->done[epoch], 1, __ATOMIC_SEQ_CST);
	for (int round = epoch + 1; round <= 3; round++) {
		wait_for(&ss->phase, round);
		for (int i = 1; i <= std_victims[round][0]; i++)
			if (std_victims[round][i] == r)
				raise(SIGKILL);
		wait_for(&ss->epoch, round);
		struct hpct_world_stats a, b;
		hpct_world_get_stats(w, &a);
		rc = hpct_world_recover(w, (uint64_t)round, &std_victims[round][1],
		                        std_victims[round][0]);
		if (round == 3) {
			/* rank 0's rendezvous died with it */
			if (rc == HPCT_EPEERDEAD &&
			    strstr(hpct_last_error(), "rank 0 was replaced") &&
			    strstr(hpct_last_error(), "restart every rank"))
				__atomic_add_fetch(&ss->root_gone, 1, __ATOMIC_SEQ_CST);
			else
				fprintf(stderr, "rank %d: recover without rank 0 gave %s: %s\n", r,
				        hpct_errname(rc), hpct_last_error());
			break;
		}
		if (rc) {
			fprintf(stderr, "rank %d: recover to %d: %s\n", r, round,
			        hpct_last_error());
			return 50 + round;
		}
		if ((rc = exercise(w, (uint64_t)round, round)) != 0)
			return 60 + rc;
		hpct_world_get_stats(w, &b);
		__atomic_add_fetch(&ss->new_conns, (int)(b.conns_opened - a.conns_opened),
		                   __ATOMIC_SEQ_CST);
		__atomic_add_fetch(&ss->done[round], 1, __ATOMIC_SEQ_CST);
	}
	wait_for(&ss->phase, 99);
	hpct_world_destroy(w);
	return 0;
}

static void std_recoveries(int slot_offset, const char *secret)
{
	ss = mmap(NULL, sizeof(*ss), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(ss, MAP_FAILED);
	memset(ss, 0, sizeof(*ss));
	std_port = hpct_test_ports(1) + slot_offset;
	if (secret)
		setenv("HPCT_SECRET", secret, 1);
	else
		unsetenv("HPCT_SECRET");
	pid_t pids[SN];
	for (int r = 0; r < SN; r++)
		pids[r] = start_rank(std_rank, r, 0);
	int st;
	for (int round = 1; round <= 3; round++) {
		if (round < 3) {
			wait_for(&ss->done[round - 1], SN);
			cr_assert_eq(ss->done[round - 1], SN, "epoch %d: %d of %d ranks done",
			             round - 1, ss->done[round - 1], SN);
		} else {
			wait_for(&ss->done[2], SN);
		}
		__atomic_store_n(&ss->phase, round, __ATOMIC_SEQ_CST);
		for (int i = 1; i <= std_victims[round][0]; i++) {
			int v = std_victims[round][i];
			waitpid(pids[v], &st, 0);
			cr_expect(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
			          "rank %d ended with %d before it was killed", v,
			          WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
			pids[v] = round < 3 ? start_rank(std_rank, v, round) : 0;
		}
		__atomic_store_n(&ss->epoch, round, __ATOMIC_SEQ_CST);
	}
	wait_for(&ss->root_gone, SN - 1);
	__atomic_store_n(&ss->phase, 99, __ATOMIC_SEQ_CST);
	for (int r = 0; r < SN; r++) {
		if (!pids[r])
			continue;
		waitpid(pids[r], &st, 0);
		cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d ended with %d", r,
		          WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
	}
	cr_expect_eq(ss->done[2], SN, "epoch 2: %d of %d ranks done", ss->done[2], SN);
	cr_expect_eq(ss->root_gone, SN - 1, "%d of %d survivors were told rank 0 is gone",
	             ss->root_gone, SN - 1);
	cr_expect_eq(ss->new_conns, 0, "survivors opened %d connections to recover", ss->new_conns);
	unsetenv("HPCT_SECRET");
	munmap(ss, sizeof(*ss));
}

Test(recover, standard_path_survivors_meet_again_through_rank_0s_rendezvous)
{
	std_recoveries(120, NULL);
}

Test(recover, standard_path_recovers_with_a_shared_secret)
{
	std_recoveries(160, "recover-secret");
}
