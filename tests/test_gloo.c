/* Gloo through hpct's C API, multi-process over loopback, on both paths
 * (the standard path both with Gloo's connectFullMesh, its default, and
 * with the pool, HPCT_GLOO_CONNECT=pool):
 * every op and dtype of allreduce with exact results, broadcast, allgather,
 * reduce to a non-zero root, barrier; contexts on subgroups while the other
 * ranks work elsewhere; clones; re-creation over the same group; a rank
 * killed mid-job and bad arguments: test_gloo_faults.c.  Children report through their exit code
 * (the number of the check that failed) and say why on stderr. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "hpct/gloo.h"
#include "hpct/hpct.h"
#include "tests/gloo_common.h"
#include "tests/harness.h"

Test(gloo, rootless_n2)
{
	gt_spawn(2, 1, 0, 1, gt_matrix_main, 60);
}
Test(gloo, standard_n2)
{
	gt_spawn(2, 1, 1, 0, gt_matrix_main, 60);
}
Test(gloo, rootless_n8_two_nodes)
{
	gt_spawn(8, 2, 4, 1, gt_matrix_main, 90);
}
Test(gloo, standard_n8_two_nodes)
{
	gt_spawn(8, 2, 5, 0, gt_matrix_main, 90);
}
Test(gloo, rootless_n16_four_nodes)
{
	gt_spawn(16, 4, 6, 1, gt_matrix_main, 120);
}
Test(gloo, standard_n16_four_nodes)
{
	gt_spawn(16, 4, 7, 0, gt_matrix_main, 120);
}

/* The pool on the standard path (HPCT_GLOO_CONNECT=pool): the rootless
 * path's connect, the pair addresses through rank 0's rendezvous instead.
 * With no node list a peer's address cannot be derived: only the address
 * the exchange carried can reach it. */
Test(gloo, standard_pool_n2_no_node_list)
{
	struct cfg c = {
		.n = 2, .nodes = 1, .connect = "pool", .no_hosts = 1, .fn = gt_matrix_main
	};
	gt_spawn_cfg(&c, 24, 60);
}
Test(gloo, standard_pool_n8_two_nodes)
{
	struct cfg c = { .n = 8, .nodes = 2, .connect = "pool", .fn = gt_matrix_main };
	gt_spawn_cfg(&c, 25, 90);
}

/* Subgroups of 8 ranks: the evens and the odds each get a context and work
 * in it at the same time (each half is the other's non-members); then
 * {0, 7}, where ranks 1..6 do a world hpct barrier meanwhile; then the
 * world context, made before any subgroup, still works. */
static int subgroups_main(int r, void *arg)
{
	struct cfg *c = arg;
	struct proc p = { 0 };
	int rc = gt_start(c, &p);
	if (rc)
		return rc;
	hpct_group *world = hpct_world_group(p.w);
	int evens[8], odds[8], ne = 0, no = 0;
	for (int i = 0; i < c->n; i++) {
		if (i % 2)
			odds[no++] = i;
		else
			evens[ne++] = i;
	}
	int ends[2] = { 0, c->n - 1 };
	hpct_group *ge, *go, *gx;
	if (hpct_group_create(world, evens, ne, &ge) != 0 ||
	    hpct_group_create(world, odds, no, &go) != 0 ||
	    hpct_group_create(world, ends, 2, &gx) != 0)
		return gt_why(30, "rank %d: group_create: %s", r, hpct_last_error());
	if ((ge != NULL) != (r % 2 == 0) || (go != NULL) != (r % 2 == 1) ||
	    (gx != NULL) != (r == 0 || r == c->n - 1))
		return gt_why(31, "rank %d: membership wrong: evens %p odds %p ends %p", r,
		              (void *)ge, (void *)go, (void *)gx);
	hpct_group *half = ge ? ge : go;
	hpct_gloo_context *hc;
	if ((rc = hpct_gloo_context_create(p.dev, half, &hc)) != 0)
		return gt_why(32, "rank %d: context on %s: %s: %s", r, ge ? "evens" : "odds",
		              hpct_errname(rc), hpct_last_error());
	if (hpct_gloo_context_size(hc) != (ge ? ne : no) ||
	    hpct_gloo_context_rank(hc) != hpct_group_rank(half))
		return gt_why(33, "rank %d: half context rank %d size %d", r,
		              hpct_gloo_context_rank(hc), hpct_gloo_context_size(hc));
	/* each half sums its world ranks: a context crossing halves would show */
	int32_t s = r, want = 0;
	for (int i = r % 2; i < c->n; i += 2)
		want += i;
	if ((rc = hpct_gloo_allreduce(hc, &s, 1, HPCT_GLOO_I32, HPCT_GLOO_SUM)) != 0)
		return gt_why(34, "rank %d: half allreduce: %s: %s", r, hpct_errname(rc),
		              hpct_last_error());
	if (s != want)
		return gt_why(35, "rank %d: half sum %d, want %d", r, (int)s, (int)want);
	if ((rc = gt_exercise(hc, 40, r % 2)) != 0)
		return rc;
	hpct_gloo_context_destroy(hc);
	if (gx) {
		hpct_gloo_context *xc;
		if ((rc = hpct_gloo_context_create(p.dev, gx, &xc)) != 0)
			return gt_why(36, "rank %d: context on {0, n-1}: %s: %s", r,
			              hpct_errname(rc), hpct_last_error());
		if ((rc = gt_exercise(xc, 50, 7)) != 0)
			return rc;
		hpct_gloo_context_destroy(xc);
	}
	/* the non-members of {0, n-1} waited here all along */
	if ((rc = hpct_barrier(world)) != 0)
		return gt_why(37, "rank %d: world barrier: %s: %s", r, hpct_errname(rc),
		              hpct_last_error());
	if ((rc = gt_quick_sum(p.ctx, 60, 11)) != 0 || (rc = gt_check_barrier(p.ctx, 62)) != 0)
		return rc;
	hpct_group_destroy(ge);
	hpct_group_destroy(go);
	hpct_group_destroy(gx);
	gt_stop(&p);
	return 0;
}

Test(gloo, rootless_subgroups)
{
	gt_spawn(8, 2, 8, 1, subgroups_main, 90);
}
Test(gloo, standard_subgroups)
{
	gt_spawn(8, 2, 9, 0, subgroups_main, 90);
}

/* Clones of the world context: used interleaved with the parent, a clone
 * of a clone, a clone that outlives its parent, and a chain of clones each
 * dropping its parent as soon as it returns ("independent of the parent
 * afterwards"). */
static int clone_main(int r, void *arg)
{
	(void)r;
	struct proc p = { 0 };
	int rc = gt_start(arg, &p);
	if (rc)
		return rc;
	hpct_gloo_context *c1, *c2, *c3;
	if ((rc = hpct_gloo_context_clone(p.ctx, &c1)) != 0)
		return gt_why(70, "rank %d: clone: %s: %s", p.rank, hpct_errname(rc),
		              hpct_last_error());
	if (hpct_gloo_context_rank(c1) != p.rank ||
	    hpct_gloo_context_size(c1) != hpct_gloo_context_size(p.ctx))
		return gt_why(71, "rank %d: clone rank %d size %d", p.rank,
		              hpct_gloo_context_rank(c1), hpct_gloo_context_size(c1));
	for (int i = 0; i < 4; i++) {
		if ((rc = gt_quick_sum(i % 2 ? p.ctx : c1, 72, i)) != 0)
			return rc;
	}
	if ((rc = gt_exercise(c1, 10, 1)) != 0 || (rc = gt_quick_sum(p.ctx, 20, 5)) != 0)
		return rc;
	if ((rc = hpct_gloo_context_clone(c1, &c2)) != 0)
		return gt_why(74, "rank %d: clone of a clone: %s: %s", p.rank, hpct_errname(rc),
		              hpct_last_error());
	if ((rc = gt_quick_sum(c2, 75, 1)) != 0 || (rc = gt_quick_sum(c1, 75, 2)) != 0 ||
	    (rc = gt_quick_sum(p.ctx, 75, 3)) != 0)
		return rc;
	hpct_gloo_context_destroy(c1);
	if ((rc = gt_quick_sum(c2, 77, 4)) != 0 || (rc = gt_quick_sum(p.ctx, 77, 5)) != 0)
		return rc;
	if ((rc = hpct_gloo_context_clone(p.ctx, &c3)) != 0)
		return gt_why(79, "rank %d: second clone: %s: %s", p.rank, hpct_errname(rc),
		              hpct_last_error());
	hpct_gloo_context_destroy(p.ctx);
	p.ctx = NULL;
	if ((rc = gt_quick_sum(c3, 80, 6)) != 0 || (rc = gt_check_barrier(c3, 82)) != 0 ||
	    (rc = gt_quick_sum(c2, 83, 7)) != 0)
		return rc;
	/* a chain: each clone's parent dropped as soon as the clone returns */
	for (int k = 0; k < 6; k++) {
		hpct_gloo_context *next;
		if ((rc = hpct_gloo_context_clone(c3, &next)) != 0)
			return gt_why(85, "rank %d: chained clone %d: %s: %s", p.rank, k,
			              hpct_errname(rc), hpct_last_error());
		hpct_gloo_context_destroy(c3);
		c3 = next;
	}
	if ((rc = gt_quick_sum(c3, 86, 8)) != 0)
		return rc;
	hpct_gloo_context_destroy(c2);
	hpct_gloo_context_destroy(c3);
	gt_stop(&p);
	return 0;
}

Test(gloo, rootless_clone)
{
	gt_spawn(5, 2, 10, 1, clone_main, 60);
}
Test(gloo, standard_clone)
{
	gt_spawn(5, 2, 11, 0, clone_main, 60);
}

/* Create, use, destroy (no barrier first: ranks leave at their own pace),
 * create again over the same group in the same processes, use; three
 * rounds, each with other values, so a stale pair would show. */
static int recreate_main(int r, void *arg)
{
	struct cfg *c = arg;
	struct proc p = { 0 };
	int rc = gt_start(c, &p);
	if (rc)
		return rc;
	hpct_gloo_context_destroy(p.ctx);
	p.ctx = NULL;
	int members[3] = { 0, 2, 3 };
	hpct_group *g;
	if (hpct_group_create(hpct_world_group(p.w), members, 3, &g) != 0)
		return gt_why(85, "rank %d: group_create: %s", r, hpct_last_error());
	for (int round = 0; round < 3; round++) {
		hpct_gloo_context *ctx;
		if ((rc = hpct_gloo_context_create(p.dev, hpct_world_group(p.w), &ctx)) != 0)
			return gt_why(86, "rank %d: round %d: context: %s: %s", r, round,
			              hpct_errname(rc), hpct_last_error());
		if ((rc = gt_quick_sum(ctx, 87, 100 * round)) != 0 ||
		    (rc = gt_check_broadcast(ctx, 89, round)) != 0)
			return rc;
		hpct_gloo_context_destroy(ctx);
		/* and a subgroup's context, re-made alike */
		if (g) {
			if ((rc = hpct_gloo_context_create(p.dev, g, &ctx)) != 0)
				return gt_why(91, "rank %d: round %d: subgroup context: %s: %s", r,
				              round, hpct_errname(rc), hpct_last_error());
			if ((rc = gt_quick_sum(ctx, 92, 10 * round)) != 0)
				return rc;
			hpct_gloo_context_destroy(ctx);
		}
	}
	hpct_group_destroy(g);
	gt_stop(&p);
	return 0;
}

Test(gloo, rootless_recreate)
{
	gt_spawn(4, 2, 12, 1, recreate_main, 60);
}
Test(gloo, standard_recreate)
{
	gt_spawn(4, 2, 13, 0, recreate_main, 60);
}
/* The pool's contexts destroyed at once, as above: every way of connecting
 * ends at the same meeting (without it a peer's create failed). */
Test(gloo, standard_pool_recreate)
{
	struct cfg c = { .n = 4, .nodes = 2, .connect = "pool", .fn = recreate_main };
	gt_spawn_cfg(&c, 26, 60);
}
