/* Several ids for one communicator (ncclCommInitRankScalable, as PyTorch
 * calls it above 128 ranks), made as the preload shim makes them
 * (hpct__nccl_new_id) and served by the roots it hosts for them
 * (hpct__nccl_host_roots), against the real libnccl.so.2 hpct loads
 * (HPCT_NCCL_LIB, else NCCL_HOME).  No GPU here: what NCCL does after its
 * bootstrap is not reached; its roots are the reference. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/nccl/nccl_internal.h"
#include "bootstrap/nccl/player.h"
#include "hpct/hpct.h"
#include "hpct/nccl.h"
#include "tests/nccl_release.h"

TestSuite(nccl_ids, .timeout = 120);

#define NRANKS 300
#define NIDS   3

/* the player plays the release's wire */
#define PLAY(l, ids, nids, n, order, replies) \
	hpct__nccl_play_ranks(ids, nids, n, order, 60, 0, (l)->version, replies, NULL)

/* Rank 0 of `size` on one loopback node, hpct's ports from `port` (8),
 * NCCL's root ports the 8 after. */
static hpct_world *world(int port, int size)
{
	char buf[32];
	setenv("HPCT_HOSTS", "127.0.0.1", 1);
	snprintf(buf, sizeof(buf), "%d", size);
	setenv("HPCT_TASKS_PER_NODE", buf, 1);
	setenv("WORLD_SIZE", buf, 1);
	setenv("RANK", "0", 1);
	setenv("LOCAL_RANK", "0", 1);
	snprintf(buf, sizeof(buf), "%d", port);
	setenv("HPCT_PORT_BASE", buf, 1);
	setenv("HPCT_PORT_RANGE", "8", 1);
	setenv("HPCT_USE_ROOTLESS", "1", 1);
	setenv("HPCT_TIMEOUT", "60", 0); /* unless the test set its own */
	setenv("HPCT_JOB_ID", "nccl-ids-test", 1);
	hpct_world *w = NULL;
	cr_assert_eq(hpct_world_create(&w), 0, "%s", hpct_last_error());
	return w;
}

static const struct hpct_nccl_lib *nccl(void)
{
	const struct hpct_nccl_lib *l = hpct__nccl_lib();
	cr_assert_not_null(l, "%s", hpct_last_error());
	return l;
}

static void new_ids(const struct hpct_nccl_lib *l, hpct_world *w, hpct_nccl_id *ids, int n)
{
	for (int i = 0; i < n; i++) {
		cr_assert_eq(hpct__nccl_new_id(l, (struct hpct_world *)w, &ids[i]), 0, "%s",
		             hpct_last_error());
		struct hpct_nccl_id_info in;
		cr_assert_eq(hpct_nccl_id_decode(&ids[i], 0, &in), 0, "%s", hpct_last_error());
		cr_expect(in.derived, "id %d has no marker", i);
		cr_expect_str_eq(in.host, "127.0.0.1");
		for (int j = 0; j < i; j++) {
			struct hpct_nccl_id_info jn;
			hpct_nccl_id_decode(&ids[j], 0, &jn);
			cr_expect_neq(in.port, jn.port, "ids %d and %d share port %u", j, i,
			              in.port);
			cr_expect_neq(in.magic, jn.magic, "ids %d and %d share a magic", j, i);
		}
	}
}

static void skip_unless_roots(int v)
{
	if (!nr_scalable(v))
		cr_skip_test("NCCL %d has no ncclCommInitRankScalable: no several ids", v);
	if (!nr_roots_speak(v))
		cr_skip_test("hpct's roots do not speak NCCL %d's root wire", v);
}

/* 3 ids of one process, 300 ranks in random order: hpct's roots answer every
 * rank byte for byte as 3 roots from 3 real ncclGetUniqueId calls do. */
Test(nccl_ids, roots_for_three_ids_answer_300_ranks_like_nccls)
{
	const struct hpct_nccl_lib *l = nccl();
	skip_unless_roots(l->version);
	hpct_world *w = world(31600, 1);
	hpct_nccl_id ids[NIDS], real_ids[NIDS];
	int *order = malloc(NRANKS * sizeof(int));
	unsigned char *real = calloc(NRANKS, HPCT_NCCL_RING_LEN);
	unsigned char *ours = calloc(NRANKS, HPCT_NCCL_RING_LEN);
	cr_assert(order && real && ours);
	hpct__nccl_test_order(order, NRANKS, 300);

	new_ids(l, w, ids, NIDS);
	struct hpct_nccl_roots *roots = NULL;
	int hosted = 0;
	cr_assert_eq(hpct__nccl_host_roots(l, (struct hpct_world *)w, ids, NIDS, NRANKS, &roots,
	                                   &hosted),
	             0, "%s", hpct_last_error());
	cr_assert_eq(hosted, NIDS);
	cr_assert_eq(PLAY(l, ids, NIDS, NRANKS, order, ours), 0, "against hpct's roots: %s",
	             hpct_last_error());
	struct hpct_nccl_root_stats st;
	cr_assert_eq(hpct__nccl_roots_wait(roots, &st), 0, "%s", hpct_last_error());
	cr_expect_eq(st.ignored, 0);
	cr_expect_eq(st.accepted, NRANKS + NIDS, "every rank, and each root's first to the last");

	for (int i = 0; i < NIDS; i++)
		cr_assert_eq(l->get_unique_id(&real_ids[i]), 0); /* each starts a root of NCCL's */
	cr_assert_eq(PLAY(l, real_ids, NIDS, NRANKS, order, real), 0, "against NCCL's roots: %s",
	             hpct_last_error());
	for (int r = 0; r < NRANKS; r++)
		cr_expect_eq(memcmp(real + (size_t)r * HPCT_NCCL_RING_LEN,
		                    ours + (size_t)r * HPCT_NCCL_RING_LEN, HPCT_NCCL_RING_LEN),
		             0, "rank %d of %d: hpct's answer differs from NCCL's", r, NRANKS);
	free(order);
	free(real);
	free(ours);
	hpct_world_destroy(w);
}

/* Only the ids this process handed out are hosted here: NCCL's own, or
 * another process's, are not. */
Test(nccl_ids, only_this_processs_ids_are_hosted)
{
	const struct hpct_nccl_lib *l = nccl();
	skip_unless_roots(l->version);
	hpct_world *w = world(31616, 1);
	hpct_nccl_id ids[2];
	cr_assert_eq(l->get_unique_id(&ids[0]), 0);
	struct hpct_nccl_id_info in = { .magic = 0x0123456789abcdefull,
		                        .port = 31631,
		                        .derived = 1 };
	strcpy(in.host, "127.0.0.1");
	cr_assert_eq(hpct_nccl_id_encode(&in, 0, &ids[1]), 0); /* derived, not made here */
	struct hpct_nccl_roots *roots = (void *)1;
	int hosted = -1;
	cr_assert_eq(hpct__nccl_host_roots(l, (struct hpct_world *)w, ids, 2, 4, &roots, &hosted),
	             0, "%s", hpct_last_error());
	cr_expect_eq(hosted, 0);
	cr_expect_null(roots);
	hpct_world_destroy(w);
}

/* A comm of 3 ranks over 2 ids of this process, not the world: NCCL's
 * scalable init with hpct's roots here; NCCL fails (no GPU), its error
 * comes back, the roots are stopped and their ports free. */
Test(nccl_ids, a_failed_init_stops_the_hosted_roots)
{
	const struct hpct_nccl_lib *l = nccl();
	if (!nr_scalable(l->version))
		cr_skip_test("NCCL %d has no ncclCommInitRankScalable", l->version);
	hpct_world *w = world(31632, 1);
	hpct_nccl_id ids[2];
	new_ids(l, w, ids, 2);
	void *comm = NULL;
	int rc = hpct__nccl_comm_init_ids(l, (struct hpct_world *)w, 3, 1, 2, ids, NULL, &comm);
	if (!nr_roots_speak(l->version)) {
		cr_expect_eq(rc, HPCT_ESTATE);
		cr_expect(strstr(hpct_last_error(), "do not speak the root wire of NCCL"), "%s",
		          hpct_last_error());
		cr_expect_eq(hpct__nccl_last_result(), 0, "NCCL was called");
	} else {
		cr_expect_eq(rc, HPCT_ENCCL, "%s", hpct_last_error());
		cr_expect(strstr(hpct_last_error(),
		                 "ncclCommInitRankScalable (hpct's roots) for NCCL ids"),
		          "%s", hpct_last_error());
		cr_expect_eq(hpct__nccl_last_result(), 1,
		             "NCCL's own result (unhandled cuda error)");
	}
	for (int i = 0; i < 2; i++)
		cr_expect_eq(hpct__nccl_port_check(&ids[i]), 0, "id %d's port is still held: %s", i,
		             hpct_last_error());
	/* still outstanding: a retry hosts them again */
	struct hpct_nccl_roots *roots = NULL;
	int hosted = 0;
	if (nr_roots_speak(l->version)) {
		cr_assert_eq(hpct__nccl_host_roots(l, (struct hpct_world *)w, ids, 2, 3, &roots,
		                                   &hosted),
		             0, "%s", hpct_last_error());
		cr_expect_eq(hosted, 2);
		hpct__nccl_roots_stop(roots);
	}
	hpct_world_destroy(w);
}

/* Every rank of the world passes the same ids: Tier 2 over the world,
 * whatever the ids' roots; NCCL's error comes back and no root port of
 * the ids is touched. */
Test(nccl_ids, several_ids_over_the_world_take_tier2)
{
	const struct hpct_nccl_lib *l = nccl();
	if (!nr_tier2(l->version))
		cr_skip_test("no Tier 2 with NCCL %d", l->version);
	setenv("HPCT_TIMEOUT", "3", 1); /* rank 1 of this world never comes */
	hpct_world *w = world(31648, 2);
	hpct_nccl_id ids[2];
	new_ids(l, w, ids, 2);
	void *comm = NULL;
	/* Tier 2 over the world: this rank's micro-root listens, then the ranks
	 * meet before any calls NCCL, and rank 1 is missing (real ranks take
	 * it to Init COMPLETE: test_nccl_ranks.c) */
	int rc = hpct__nccl_comm_init_ids(l, (struct hpct_world *)w, 2, 0, 2, ids, NULL, &comm);
	cr_expect_eq(rc, HPCT_ETIMEDOUT, "%s", hpct_last_error());
	cr_expect(strstr(hpct_last_error(), "NCCL ids") &&
	                  strstr(hpct_last_error(), "(2 ids, 2 ranks)") &&
	                  strstr(hpct_last_error(), "wants its roots listening") &&
	                  strstr(hpct_last_error(), "rank 1"),
	          "%s", hpct_last_error());
	hpct_world_destroy(w);
}

/* A mix, as when one root rank ran without the shim: NCCL's own id (its
 * root started by ncclGetUniqueId) and two derived ids of this process,
 * whose roots hpct hosts; 300 ranks in random order get every answer
 * right from the three together. */
Test(nccl_ids, a_mix_of_nccls_and_derived_ids_is_served_by_both_roots)
{
	const struct hpct_nccl_lib *l = nccl();
	skip_unless_roots(l->version);
	hpct_world *w = world(31664, 1);
	hpct_nccl_id ids[NIDS];
	int *order = malloc(NRANKS * sizeof(int));
	unsigned char *got = calloc(NRANKS, HPCT_NCCL_RING_LEN);
	cr_assert(order && got);
	hpct__nccl_test_order(order, NRANKS, 301);
	cr_assert_eq(l->get_unique_id(&ids[0]), 0); /* NCCL's own, with its root */
	new_ids(l, w, ids + 1, NIDS - 1);
	struct hpct_nccl_roots *roots = NULL;
	int hosted = 0;
	cr_assert_eq(hpct__nccl_host_roots(l, (struct hpct_world *)w, ids, NIDS, NRANKS, &roots,
	                                   &hosted),
	             0, "%s", hpct_last_error());
	cr_assert_eq(hosted, NIDS - 1, "NCCL's own id must not be hosted here");
	cr_assert_eq(PLAY(l, ids, NIDS, NRANKS, order, got), 0, "against the mixed roots: %s",
	             hpct_last_error());
	struct hpct_nccl_root_stats st;
	cr_assert_eq(hpct__nccl_roots_wait(roots, &st), 0, "%s", hpct_last_error());
	cr_expect_eq(st.ignored, 0);
	unsigned char want[HPCT_NCCL_RING_LEN];
	for (int r = 0; r < NRANKS; r++) {
		cr_assert_eq(hpct__nccl_test_answer((r + 1) % NRANKS, l->version, want), 0);
		cr_expect_eq(memcmp(got + (size_t)r * HPCT_NCCL_RING_LEN, want, sizeof(want)), 0,
		             "rank %d of %d was not sent rank %d's ring info", r, NRANKS,
		             (r + 1) % NRANKS);
	}
	free(order);
	free(got);
	hpct_world_destroy(w);
}
