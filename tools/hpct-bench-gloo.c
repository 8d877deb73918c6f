/* hpct-bench-gloo: the rank side of `hpct-bench --scenario gloo`, which
 * starts it; a program of its own so that only these ranks load Gloo.
 * Each rank joins the world, creates a Gloo device and a context over the
 * world group, and finishes one allreduce (1024 f32, sum, checked exactly). */
#include <stdio.h>
#include <string.h>

#include "hpct/gloo.h"
#include "tools/bench_rank.h"

#define GLOO_COUNT 1024

static int gloo_rank(hpct_world *w)
{
	hpct_group *g = hpct_world_group(w);
	int n = hpct_group_size(g), me = hpct_group_rank(g);
	hpct_gloo_device *dev = NULL;
	hpct_gloo_context *ctx = NULL;
	static float buf[GLOO_COUNT];
	int rc = hpct_gloo_device_create(w, &dev);
	if (rc == 0)
		rc = hpct_gloo_context_create(dev, g, &ctx);
	if (rc == 0) {
		/* integers below 2^24 at every step: exact in any summation order */
		for (int i = 0; i < GLOO_COUNT; i++)
			buf[i] = (float)(me + i);
		rc = hpct_gloo_allreduce(ctx, buf, GLOO_COUNT, HPCT_GLOO_F32, HPCT_GLOO_SUM);
	}
	for (int i = 0; i < GLOO_COUNT && rc == 0; i++) {
		float want = (float)n * (float)i + (float)(n * (n - 1) / 2);
		if (buf[i] != want) {
			fprintf(stderr,
			        "hpct-bench: rank %d: allreduce element %d is %.1f, want %.1f\n",
			        me, i, (double)buf[i], (double)want);
			rc = HPCT_EPROTO;
		}
	}
	rc = settle(w, rc);
	hpct_gloo_context_destroy(ctx);
	hpct_gloo_device_destroy(dev);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "--as-rank") == 0)
		return bench_rank_main(gloo_rank);
	fprintf(stderr,
	        "hpct-bench-gloo plays one rank of 'hpct-bench --scenario gloo'; run that\n");
	return 2;
}
