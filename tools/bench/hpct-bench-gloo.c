/* hpct-bench-gloo: the rank side of hpct-bench's Gloo scenarios, which
 * start it; a program of its own so that only these ranks load Gloo.
 *
 * gloo: each rank joins the world, creates a Gloo device and a context over
 * the world group, and finishes one allreduce (1024 f32, sum, checked
 * exactly).
 * gloo-reuse: with a device made, the ranks meet in a world barrier,
 * create a context over the world, allreduce and report; destroy it, meet
 * again and do the same a second time.  The context is persistent (a
 * domain: the second creation takes the first's pairs) or, as today's
 * contexts are, temporary (every pair again): HPCT_BENCH_CONTEXT says
 * which.
 * gloo-replace: the same first creation, reported, destroyed; then the
 * launcher kills some ranks and starts replacements (gloo-replacement) at
 * the next epoch, the survivors recover in their processes
 * (hpct_world_recover), and every rank meets in a world barrier and
 * creates the context again: a persistent one remakes only the pairs of
 * the replaced ranks.
 * Every creation is reported with the time this rank left the barrier
 * before it, and the context's stats (pairs new and kept, bytes of pair
 * addresses exchanged). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "hpct/gloo.h"
#include "tools/bench/bench.h"
#include "tools/common/bench_rank.h"

#define GLOO_COUNT 1024
#define GLOO_GEN   1 /* the generation of gloo-reuse's and gloo-replace's domain */

/* One allreduce over ctx, its result checked exactly; 0 or an error. */
static int allreduce_checked(hpct_gloo_context *ctx, int n, int me)
{
	static float buf[GLOO_COUNT];
	/* integers below 2^24 at every step: exact in any summation order */
	for (int i = 0; i < GLOO_COUNT; i++)
		buf[i] = (float)(me + i);
	int rc = hpct_gloo_allreduce(ctx, buf, GLOO_COUNT, HPCT_GLOO_F32, HPCT_GLOO_SUM);
	for (int i = 0; i < GLOO_COUNT && rc == 0; i++) {
		float want = (float)n * (float)i + (float)(n * (n - 1) / 2);
		if (buf[i] != want) {
			fprintf(stderr,
			        "hpct-bench: rank %d: allreduce element %d is %.1f, want %.1f\n",
			        me, i, (double)buf[i], (double)want);
			rc = HPCT_EPROTO;
		}
	}
	return rc;
}

static int gloo_rank(hpct_world *w)
{
	hpct_group *g = hpct_world_group(w);
	hpct_gloo_device *dev = NULL;
	hpct_gloo_context *ctx = NULL;
	int rc = hpct_gloo_device_create(w, &dev);
	if (rc == 0)
		rc = hpct_gloo_context_create(dev, g, &ctx);
	if (rc == 0)
		rc = allreduce_checked(ctx, hpct_group_size(g), hpct_group_rank(g));
	rc = settle(w, rc);
	hpct_gloo_context_destroy(ctx);
	hpct_gloo_device_destroy(dev);
	return rc;
}

/* HPCT_BENCH_CONTEXT: persistent (1) or temporary (0); -1 said if neither. */
static int context_kind(void)
{
	const char *v = getenv("HPCT_BENCH_CONTEXT");
	if (v && strcmp(v, "persistent") == 0)
		return 1;
	if (v && strcmp(v, "temporary") == 0)
		return 0;
	fprintf(stderr, "hpct-bench-gloo: HPCT_BENCH_CONTEXT=%s: want persistent or temporary\n",
	        v ? v : "(unset)");
	return -1;
}

/* One timed creation: the world barrier that starts it, the context over
 * the world (kept in *ctx), the checked allreduce, and the report with its
 * stats and the hpct connections opened since `conns0` (-1: since the
 * barrier).  The report's rc is the creation's. */
static int creation(hpct_world *w, hpct_gloo_device *dev, int persistent, int conns0,
                    hpct_gloo_context **ctx)
{
	hpct_group *g = hpct_world_group(w);
	int rc = hpct_barrier(g);
	struct record rec = { .start = mono() };
	if (conns0 < 0)
		conns0 = conns_of(w);
	if (rc == 0)
		rc = persistent ? hpct_gloo_context_create_persistent(dev, g, GLOO_GEN, ctx)
		                : hpct_gloo_context_create(dev, g, ctx);
	if (rc == 0)
		rc = allreduce_checked(*ctx, hpct_group_size(g), hpct_group_rank(g));
	rec.done = mono();
	struct hpct_gloo_context_stats st;
	if (rc == 0 && hpct_gloo_context_get_stats(*ctx, &st) == 0) {
		rec.pairs_new = st.pairs_new;
		rec.pairs_kept = st.pairs_kept;
		rec.bytes_exchanged = (long)st.bytes_exchanged;
	}
	if (rc)
		fprintf(stderr, "hpct-bench-gloo: rank %d: %s context: %s\n", hpct_group_rank(g),
		        persistent ? "persistent" : "temporary", hpct_last_error());
	rec.rc = rc;
	rec.conns = conns_of(w) - conns0;
	rec.msgs = msgs_of(w);
	return report_record(&rec) ? 3 : rc;
}

/* The kind of context the run asks for, and a device: 0 or an error. */
static int open_device(hpct_world *w, int *persistent, hpct_gloo_device **dev)
{
	*persistent = context_kind();
	return *persistent < 0 ? HPCT_EBADENV : hpct_gloo_device_create(w, dev);
}

static int reuse_rank(hpct_world *w)
{
	int persistent;
	hpct_gloo_device *dev = NULL;
	hpct_gloo_context *ctx = NULL;
	int rc = open_device(w, &persistent, &dev);
	if (rc)
		return settle(w, rc);
	for (int k = 0; k < 2 && rc == 0; k++) {
		rc = creation(w, dev, persistent, -1, &ctx);
		hpct_gloo_context_destroy(ctx); /* persistent: its pairs stay, in the domain */
		ctx = NULL;
	}
	wait_release();
	hpct_gloo_device_destroy(dev);
	return rc;
}

static int replace_rank(hpct_world *w)
{
	int persistent;
	hpct_gloo_device *dev = NULL;
	hpct_gloo_context *ctx = NULL;
	int rc = open_device(w, &persistent, &dev);
	if (rc)
		return settle(w, rc);
	rc = creation(w, dev, persistent, -1, &ctx);
	hpct_gloo_context_destroy(ctx);
	ctx = NULL;
	/* the agent's word (none when the run failed: just the release) */
	struct agent_msg m;
	ssize_t k = -1;
	while (rc == 0 && (k = read(atoi(getenv("HPCT_BENCH_AGENT_FD")), &m, sizeof(m))) < 0 &&
	       errno == EINTR)
		;
	if (k == (ssize_t)sizeof(m)) {
		int before = conns_of(w);
		rc = hpct_world_recover(w, m.epoch, m.replaced, m.nreplaced);
		if (rc) {
			fprintf(stderr, "hpct-bench-gloo: recover: %s\n", hpct_last_error());
			report(rc, 0, 0);
		} else {
			rc = creation(w, dev, persistent, before, &ctx);
		}
	}
	wait_release();
	hpct_gloo_context_destroy(ctx);
	hpct_gloo_device_destroy(dev);
	return rc;
}

/* A replacement of gloo-replace: a new process at the next epoch, which
 * has no domain and makes every pair. */
static int replacement_rank(hpct_world *w)
{
	int persistent;
	hpct_gloo_device *dev = NULL;
	hpct_gloo_context *ctx = NULL;
	int rc = open_device(w, &persistent, &dev);
	if (rc)
		return settle(w, rc);
	rc = creation(w, dev, persistent, 0, &ctx);
	wait_release();
	hpct_gloo_context_destroy(ctx);
	hpct_gloo_device_destroy(dev);
	return rc;
}

static const struct {
	const char *name;
	int (*rank)(hpct_world *w);
} ranks[] = {
	{ "gloo", gloo_rank },
	{ "gloo-reuse", reuse_rank },
	{ "gloo-replace", replace_rank },
	{ "gloo-replacement", replacement_rank },
};

int main(int argc, char **argv)
{
	for (size_t i = 0;
	     argc == 3 && strcmp(argv[1], "--as-rank") == 0 && i < sizeof(ranks) / sizeof(ranks[0]);
	     i++)
		if (strcmp(argv[2], ranks[i].name) == 0)
			return bench_rank_main(ranks[i].rank);
	fprintf(stderr, "hpct-bench-gloo plays one rank of 'hpct-bench --scenario gloo', "
	                "gloo-reuse or gloo-replace; run that\n");
	return 2;
}
