/* One rank of the soak (tests/test_soak.sh runs it under hpct-run, and a
 * short version under valgrind):
 *
 *   soak GROUPS CONTEXTS
 *
 * GROUPS create/destroy cycles of a subgroup of the world (all ranks, the
 * even ones, everyone but the last, in turn), each used for an allgather
 * whose result is checked; then CONTEXTS create/destroy cycles of a Gloo
 * context over the world group, each used for an allreduce.  Open
 * descriptors and resident memory are printed after a warm-up (the first
 * tenth of the cycles, at least one) and at the end, on one line per rank:
 *
 *   soak rank R groups G fds A -> B rss X -> Y kB contexts C fds A -> B rss X -> Y kB
 *
 * and the rank fails (exit 1) if a descriptor was left open or if resident
 * memory grew by more than HPCT_SOAK_RSS_SLACK_KB (default 2048; "off" on
 * a sanitizer build, whose allocator keeps a quarantine and a record of
 * every thread that ever ran, and whose leak checker runs at exit) over
 * either phase.  Failures name the cycle and the call. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hpct/gloo.h"
#include "hpct/hpct.h"
#include "tests/harness.h"

struct mark {
	int fds;
	long rss;
	char what[1024]; /* the descriptors, for a failure's message */
};

/* "fd:target" of each open descriptor, sockets with their inode */
static void list_fds(char *out, size_t len)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	size_t o = 0;
	out[0] = 0;
	while (d && (e = readdir(d)) && o + 1 < len) {
		char path[300], target[256];
		if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(d))
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		ssize_t k = readlink(path, target, sizeof(target) - 1);
		target[k > 0 ? k : 0] = 0;
		o += (size_t)snprintf(out + o, len - o, " %s:%s", e->d_name, target);
	}
	if (d)
		closedir(d);
}

/* Taken between two barriers, so that no peer is ahead in another phase
 * (opening a link to this rank) while this rank counts. */
static struct mark mark_now(hpct_group *world)
{
	struct mark m = { -1, -1, "" };
	if (hpct_barrier(world) != 0)
		return m;
	m.fds = ht_open_fds();
	m.rss = ht_rss_kb();
	list_fds(m.what, sizeof(m.what));
	if (hpct_barrier(world) != 0)
		m.fds = -1;
	return m;
}

static int fail(int rank, const char *what, long cycle, int rc)
{
	fprintf(stderr, "soak rank %d: %s failed at cycle %ld: %s (%s)\n", rank, what, cycle,
	        hpct_errname(rc), hpct_last_error());
	return 1;
}

/* One subgroup cycle: members chosen by the cycle number, an allgather of
 * (world rank, cycle) on the members, checked. */
static int group_cycle(hpct_group *world, int me, int n, long cycle)
{
	int members[256], k = 0;
	for (int r = 0; r < n; r++) {
		int in = cycle % 3 == 0 ? 1 : cycle % 3 == 1 ? r % 2 == 0 : r < n - 1 || n == 1;
		if (in)
			members[k++] = r;
	}
	hpct_group *g;
	int rc = hpct_group_create(world, members, k, &g);
	if (rc)
		return fail(me, "hpct_group_create", cycle, rc);
	if (!g)
		return 0; /* not a member this time */
	uint64_t item = ((uint64_t)me << 32) | (uint64_t)cycle, all[256];
	rc = hpct_allgather(g, &item, sizeof(item), all);
	if (rc)
		return fail(me, "hpct_allgather", cycle, rc);
	for (int i = 0; i < k; i++)
		if (all[i] != (((uint64_t)members[i] << 32) | (uint64_t)cycle)) {
			fprintf(stderr, "soak rank %d: cycle %ld: item %d is %#llx\n", me, cycle, i,
			        (unsigned long long)all[i]);
			return 1;
		}
	hpct_group_destroy(g);
	return 0;
}

static int context_cycle(hpct_gloo_device *dev, hpct_group *world, int me, int n, long cycle)
{
	hpct_gloo_context *ctx;
	int rc = hpct_gloo_context_create(dev, world, &ctx);
	if (rc)
		return fail(me, "hpct_gloo_context_create", cycle, rc);
	int64_t v[2] = { me + 1, cycle };
	rc = hpct_gloo_allreduce(ctx, v, 2, HPCT_GLOO_I64, HPCT_GLOO_SUM);
	if (rc)
		return fail(me, "hpct_gloo_allreduce", cycle, rc);
	if (v[0] != (int64_t)n * (n + 1) / 2 || v[1] != (int64_t)n * cycle) {
		fprintf(stderr, "soak rank %d: cycle %ld: allreduce gave %lld %lld\n", me, cycle,
		        (long long)v[0], (long long)v[1]);
		return 1;
	}
	hpct_gloo_context_destroy(ctx);
	return 0;
}

static int grew(int me, const char *phase, struct mark a, struct mark b, long slack)
{
	if (a.fds < 0 || b.fds < 0) {
		fprintf(stderr, "soak rank %d: a barrier around a count in %s failed: %s\n", me,
		        phase, hpct_last_error());
		return 1;
	}
	if (b.fds != a.fds) {
		fprintf(stderr, "soak rank %d: %s left %d descriptors open: before%s; after%s\n",
		        me, phase, b.fds - a.fds, a.what, b.what);
		return 1;
	}
	if (slack >= 0 && b.rss - a.rss > slack) {
		fprintf(stderr,
		        "soak rank %d: %s grew resident memory by %ld kB (more than "
		        "HPCT_SOAK_RSS_SLACK_KB=%ld)\n",
		        me, phase, b.rss - a.rss, slack);
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	char *end;
	long groups = argc == 3 ? strtol(argv[1], &end, 10) : -1;
	long contexts = argc == 3 ? strtol(argv[2], &end, 10) : -1;
	if (groups < 1 || contexts < 1) {
		fprintf(stderr, "usage: soak GROUPS CONTEXTS (both at least 1)\n");
		return 2;
	}
	const char *s = getenv("HPCT_SOAK_RSS_SLACK_KB");
	long slack = !s ? 2048 : strcmp(s, "off") == 0 ? -1 : atol(s);

	hpct_world *w;
	int rc = hpct_world_create(&w);
	if (rc)
		return fail(-1, "hpct_world_create", 0, rc);
	hpct_group *world = hpct_world_group(w);
	int me = hpct_group_rank(world), n = hpct_group_size(world);
	if (n > 256) {
		fprintf(stderr, "soak: at most 256 ranks\n");
		return 2;
	}

	struct mark g0 = { 0 }, g1, c0 = { 0 }, c1;
	long warm = groups / 10 > 0 ? groups / 10 : 1;
	for (long c = 0; c < groups; c++) {
		if (c == warm)
			g0 = mark_now(world);
		if (group_cycle(world, me, n, c))
			return 1;
	}
	if (groups == warm)
		g0 = mark_now(world);
	g1 = mark_now(world);

	hpct_gloo_device *dev;
	if ((rc = hpct_gloo_device_create(w, &dev)) != 0)
		return fail(me, "hpct_gloo_device_create", 0, rc);
	warm = contexts / 10 > 0 ? contexts / 10 : 1;
	for (long c = 0; c < contexts; c++) {
		if (c == warm)
			c0 = mark_now(world);
		if (context_cycle(dev, world, me, n, c))
			return 1;
	}
	if (contexts == warm)
		c0 = mark_now(world);
	c1 = mark_now(world);
	/* every rank is done with every pair before anyone closes the device */
	if ((rc = hpct_barrier(world)) != 0)
		return fail(me, "hpct_barrier", contexts, rc);
	hpct_gloo_device_destroy(dev);

	printf("soak rank %d groups %ld fds %d -> %d rss %ld -> %ld kB contexts %ld fds %d -> %d "
	       "rss %ld -> %ld kB\n",
	       me, groups, g0.fds, g1.fds, g0.rss, g1.rss, contexts, c0.fds, c1.fds, c0.rss,
	       c1.rss);
	fflush(stdout);
	rc = grew(me, "the group cycles", g0, g1, slack) |
	     grew(me, "the context cycles", c0, c1, slack);
	hpct_world_destroy(w);
	return rc;
}
