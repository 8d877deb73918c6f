/* Gloo through hpct's C API, multi-process over loopback, on both paths:
 * every op and dtype of allreduce with exact results, broadcast, allgather,
 * reduce to a non-zero root, barrier; contexts on subgroups while the other
 * ranks work elsewhere; clones; re-creation over the same group; a rank
 * killed mid-job; bad arguments.  Children report through their exit code
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

#include "tests/harness.h"
#include "hpct/gloo.h"
#include "hpct/hpct.h"

struct cfg {
	int n, nodes, port, rootless, victim;
	const char *secret; /* HPCT_SECRET, or NULL */
	double timeout;
	struct shared *shared;
	ht_rank_fn fn; /* what each rank runs, through child() */
};

/* MAP_SHARED between the test and its ranks: the fault test's survivors
 * meet there, and each rank leaves the reason it failed, which the test
 * prints with its assertion (a child's stderr is lost under --tap). */
#define NOTE_LEN 1100
struct shared {
	int done;
	char note[16][NOTE_LEN];
};

static struct shared *shared_map(void)
{
	struct shared *sh =
	        mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert(sh != MAP_FAILED);
	memset(sh, 0, sizeof(*sh));
	return sh;
}

/* The failing ranks' notes, for an assertion's message. */
static const char *notes(const struct shared *sh, const int *codes, int n)
{
	static char buf[16 * (NOTE_LEN + 32)];
	size_t o = 0;
	buf[0] = 0;
	for (int r = 0; r < n; r++)
		if (codes[r] != 0 && sh->note[r][0])
			o += (size_t)snprintf(buf + o, sizeof(buf) - o, "\n    rank %d: %s", r,
			                      sh->note[r]);
	return buf;
}

static struct shared *my_shared;
static int my_rank = -1;

static int child(int r, void *arg)
{
	struct cfg *c = arg;
	my_shared = c->shared;
	my_rank = r;
	return c->fn(r, arg);
}

static void env_cb(int r, void *arg)
{
	struct cfg *c = arg;
	ht_setenv_world(r, c->n, c->nodes, c->port, c->rootless, c->timeout);
	if (c->secret)
		setenv("HPCT_SECRET", c->secret, 1);
}

static double mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Says why on stderr and returns code, for a child's exit status. */
static int __attribute__((format(printf, 2, 3))) why(int code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "[pid %d] check %d failed: %s\n", (int)getpid(), code, msg);
	if (my_shared && my_rank >= 0 && my_rank < 16 && !my_shared->note[my_rank][0])
		snprintf(my_shared->note[my_rank], NOTE_LEN, "check %d: %s", code, msg);
	return code;
}

static const char *const dtype_name[] = { "f32", "f64", "i32", "i64" };
static const char *const op_name[] = { "sum", "min", "max", "prod" };
/* Small counts take hpct's tree reduce, 5000 Gloo's bcube (above 16 KiB),
 * 70000 Gloo's ring (above 256 KiB): each algorithm is checked. */
#define MAXCOUNT 70000
static const size_t counts[] = { 1, 7, 1000, 5000, MAXCOUNT };
#define NCOUNTS (sizeof(counts) / sizeof(counts[0]))

static size_t esize(int dtype)
{
	return dtype == HPCT_GLOO_F32 || dtype == HPCT_GLOO_I32 ? 4 : 8;
}

static void put(void *buf, int dtype, size_t i, int64_t v)
{
	switch (dtype) {
	case HPCT_GLOO_F32:
		((float *)buf)[i] = (float)v;
		break;
	case HPCT_GLOO_F64:
		((double *)buf)[i] = (double)v;
		break;
	case HPCT_GLOO_I32:
		((int32_t *)buf)[i] = (int32_t)v;
		break;
	default:
		((int64_t *)buf)[i] = v;
	}
}

/* Element i of buf equals v exactly (every value used is an integer that
 * each type holds exactly). */
static int is(const void *buf, int dtype, size_t i, int64_t v)
{
	switch (dtype) {
	case HPCT_GLOO_F32:
		return ((const float *)buf)[i] == (float)v;
	case HPCT_GLOO_F64:
		return ((const double *)buf)[i] == (double)v;
	case HPCT_GLOO_I32:
		return ((const int32_t *)buf)[i] == (int32_t)v;
	default:
		return ((const int64_t *)buf)[i] == v;
	}
}

static double get(const void *buf, int dtype, size_t i)
{
	switch (dtype) {
	case HPCT_GLOO_F32:
		return ((const float *)buf)[i];
	case HPCT_GLOO_F64:
		return ((const double *)buf)[i];
	case HPCT_GLOO_I32:
		return ((const int32_t *)buf)[i];
	default:
		return (double)((const int64_t *)buf)[i];
	}
}

/* What rank r contributes at element i for op: small integers, negative
 * ones too; for prod only 1s and a few 2s (at most 4 of 16 ranks). */
static int64_t val(int op, int r, size_t i, int n)
{
	int64_t k = (int64_t)((r + (int)(i % 1024)) % n);
	switch (op) {
	case HPCT_GLOO_SUM:
		return (r + 1) + (int64_t)(i % 5) - 3;
	case HPCT_GLOO_MIN:
	case HPCT_GLOO_MAX:
		return k * 3 - 5 - (int64_t)(i % 2);
	default:
		return (r + (int64_t)i) % 4 == 0 ? 2 : 1;
	}
}

static int64_t fold(int op, size_t i, int n, int first, int step, int nranks)
{
	int64_t acc = val(op, first, i, n);
	for (int k = 1; k < nranks; k++) {
		int64_t v = val(op, first + k * step, i, n);
		switch (op) {
		case HPCT_GLOO_SUM:
			acc += v;
			break;
		case HPCT_GLOO_MIN:
			acc = v < acc ? v : acc;
			break;
		case HPCT_GLOO_MAX:
			acc = v > acc ? v : acc;
			break;
		default:
			acc *= v;
		}
	}
	return acc;
}

/* The contributions are made from a rank label: the context rank, so the
 * expected result depends only on the context's size. */
static int check_allreduce(hpct_gloo_context *ctx, int base)
{
	int n = hpct_gloo_context_size(ctx), r = hpct_gloo_context_rank(ctx);
	void *buf = malloc(MAXCOUNT * 8);
	for (int dt = 0; dt < 4; dt++) {
		for (int op = 0; op < 4; op++) {
			for (size_t ci = 0; ci < NCOUNTS; ci++) {
				size_t cnt = counts[ci];
				for (size_t i = 0; i < cnt; i++)
					put(buf, dt, i, val(op, r, i, n));
				int rc =
				        hpct_gloo_allreduce(ctx, buf, cnt, (enum hpct_gloo_dtype)dt,
				                            (enum hpct_gloo_op)op);
				if (rc)
					return why(base,
					           "rank %d/%d: allreduce %s %s count %zu: %s: %s",
					           r, n, dtype_name[dt], op_name[op], cnt,
					           hpct_errname(rc), hpct_last_error());
				for (size_t i = 0; i < cnt; i++) {
					int64_t want = fold(op, i, n, 0, 1, n);
					if (!is(buf, dt, i, want))
						return why(base + 1,
						           "rank %d/%d: allreduce %s %s count %zu: "
						           "[%zu] = %g, want %lld",
						           r, n, dtype_name[dt], op_name[op], cnt,
						           i, get(buf, dt, i), (long long)want);
				}
			}
		}
	}
	free(buf);
	return 0;
}

static int check_broadcast(hpct_gloo_context *ctx, int base, int salt)
{
	int n = hpct_gloo_context_size(ctx), r = hpct_gloo_context_rank(ctx);
	void *buf = malloc(MAXCOUNT * 8);
	int roots[2] = { 0, n - 1 };
	for (int ri = 0; ri < 2; ri++) {
		int root = roots[ri];
		for (int dt = 0; dt < 4; dt++) {
			for (size_t ci = 0; ci < NCOUNTS; ci++) {
				size_t cnt = counts[ci];
				for (size_t i = 0; i < cnt; i++)
					put(buf, dt, i,
					    r == root ? root * 1000 + (int64_t)i + salt : -1);
				int rc = hpct_gloo_broadcast(ctx, buf, cnt,
				                             (enum hpct_gloo_dtype)dt, root);
				if (rc)
					return why(base,
					           "rank %d/%d: broadcast root %d %s count %zu: "
					           "%s: %s",
					           r, n, root, dtype_name[dt], cnt,
					           hpct_errname(rc), hpct_last_error());
				for (size_t i = 0; i < cnt; i++)
					if (!is(buf, dt, i, root * 1000 + (int64_t)i + salt))
						return why(base + 1,
						           "rank %d/%d: broadcast root %d %s count "
						           "%zu: "
						           "[%zu] = %g",
						           r, n, root, dtype_name[dt], cnt, i,
						           get(buf, dt, i));
			}
		}
	}
	free(buf);
	return 0;
}

static int check_allgather(hpct_gloo_context *ctx, int base, int salt)
{
	int n = hpct_gloo_context_size(ctx), r = hpct_gloo_context_rank(ctx);
	void *in = malloc(MAXCOUNT * 8), *out = malloc((size_t)n * MAXCOUNT * 8);
	for (int dt = 0; dt < 4; dt++) {
		for (size_t ci = 0; ci < NCOUNTS; ci++) {
			size_t cnt = counts[ci];
			for (size_t i = 0; i < cnt; i++)
				put(in, dt, i, r * 1000 + (int64_t)i + salt);
			memset(out, 0xee, (size_t)n * cnt * esize(dt));
			int rc = hpct_gloo_allgather(ctx, in, out, cnt, (enum hpct_gloo_dtype)dt);
			if (rc)
				return why(base, "rank %d/%d: allgather %s count %zu: %s: %s", r, n,
				           dtype_name[dt], cnt, hpct_errname(rc),
				           hpct_last_error());
			for (int k = 0; k < n; k++)
				for (size_t i = 0; i < cnt; i++)
					if (!is(out, dt, (size_t)k * cnt + i,
					        k * 1000 + (int64_t)i + salt))
						return why(base + 1,
						           "rank %d/%d: allgather %s count %zu: "
						           "from rank %d [%zu] = %g",
						           r, n, dtype_name[dt], cnt, k, i,
						           get(out, dt, (size_t)k * cnt + i));
		}
	}
	free(in);
	free(out);
	return 0;
}

/* Reduce to roots 1 and n-1 (both non-zero); off the root, out is NULL
 * every other call, a buffer that must stay untouched otherwise; on the
 * root, in == out every other call. */
static int check_reduce(hpct_gloo_context *ctx, int base)
{
	int n = hpct_gloo_context_size(ctx), r = hpct_gloo_context_rank(ctx);
	void *in = malloc(MAXCOUNT * 8), *out = malloc(MAXCOUNT * 8);
	int roots[2] = { 1, n - 1 };
	int calls = 0;
	for (int ri = 0; ri < (n > 2 ? 2 : 1); ri++) {
		int root = roots[ri];
		for (int dt = 0; dt < 4; dt++) {
			for (int op = 0; op < 4; op++) {
				for (size_t ci = 0; ci < NCOUNTS; ci++) {
					size_t cnt = counts[ci];
					int alias = r == root && calls % 2 == 1;
					int null_out = r != root && calls % 2 == 1;
					calls++;
					for (size_t i = 0; i < cnt; i++)
						put(in, dt, i, val(op, r, i, n));
					memset(out, 0xee, cnt * esize(dt));
					int rc = hpct_gloo_reduce(ctx, in,
					                          alias      ? in
					                          : null_out ? NULL
					                                     : out,
					                          cnt, (enum hpct_gloo_dtype)dt,
					                          (enum hpct_gloo_op)op, root);
					if (rc)
						return why(base,
						           "rank %d/%d: reduce %s %s count %zu "
						           "root %d: "
						           "%s: %s",
						           r, n, dtype_name[dt], op_name[op], cnt,
						           root, hpct_errname(rc),
						           hpct_last_error());
					if (r != root)
						continue;
					void *res = alias ? in : out;
					for (size_t i = 0; i < cnt; i++) {
						int64_t want = fold(op, i, n, 0, 1, n);
						if (!is(res, dt, i, want))
							return why(
							        base + 1,
							        "rank %d/%d: reduce %s %s count "
							        "%zu "
							        "root %d%s: [%zu] = %g, want %lld",
							        r, n, dtype_name[dt], op_name[op],
							        cnt, root,
							        alias ? " (in == out)" : "", i,
							        get(res, dt, i), (long long)want);
					}
				}
			}
		}
	}
	free(in);
	free(out);
	return 0;
}

static int check_barrier(hpct_gloo_context *ctx, int base)
{
	for (int i = 0; i < 3; i++) {
		int rc = hpct_gloo_barrier(ctx);
		if (rc)
			return why(base, "rank %d: barrier %d: %s: %s", hpct_gloo_context_rank(ctx),
			           i, hpct_errname(rc), hpct_last_error());
	}
	return 0;
}

/* One sum allreduce of count ints, each rank contributing rank + salt:
 * a quick "this context works" check. */
static int quick_sum(hpct_gloo_context *ctx, int base, int salt)
{
	int n = hpct_gloo_context_size(ctx), r = hpct_gloo_context_rank(ctx);
	int32_t b[7];
	for (int i = 0; i < 7; i++)
		b[i] = r + salt + i;
	int rc = hpct_gloo_allreduce(ctx, b, 7, HPCT_GLOO_I32, HPCT_GLOO_SUM);
	if (rc)
		return why(base, "rank %d/%d: allreduce (salt %d): %s: %s", r, n, salt,
		           hpct_errname(rc), hpct_last_error());
	for (int i = 0; i < 7; i++)
		if (b[i] != n * (n - 1) / 2 + n * (salt + i))
			return why(base + 1, "rank %d/%d: allreduce (salt %d): [%d] = %d, want %d",
			           r, n, salt, i, b[i], n * (n - 1) / 2 + n * (salt + i));
	return 0;
}

/* Everything a context must do right; codes base .. base+9. */
static int exercise(hpct_gloo_context *ctx, int base, int salt)
{
	int rc;
	if ((rc = check_allreduce(ctx, base)) || (rc = check_broadcast(ctx, base + 2, salt)) ||
	    (rc = check_allgather(ctx, base + 4, salt)) || (rc = check_reduce(ctx, base + 6)) ||
	    (rc = check_barrier(ctx, base + 8)))
		return rc;
	return 0;
}

struct proc {
	hpct_world *w;
	hpct_gloo_device *dev;
	hpct_gloo_context *ctx; /* over the world group */
	int rank;
};

static int start(struct cfg *c, struct proc *p)
{
	int rc;
	if ((rc = hpct_world_create(&p->w)) != 0)
		return why(2, "world: %s: %s", hpct_errname(rc), hpct_last_error());
	struct hpct_world_info info;
	hpct_world_get_info(p->w, &info);
	p->rank = info.rank;
	if (info.path != (c->rootless ? HPCT_PATH_ROOTLESS : HPCT_PATH_STANDARD))
		return why(3, "rank %d: path %d", info.rank, (int)info.path);
	if ((rc = hpct_gloo_device_create(p->w, &p->dev)) != 0)
		return why(4, "rank %d: device: %s: %s", info.rank, hpct_errname(rc),
		           hpct_last_error());
	if ((rc = hpct_gloo_context_create(p->dev, hpct_world_group(p->w), &p->ctx)) != 0)
		return why(5, "rank %d: context: %s: %s", info.rank, hpct_errname(rc),
		           hpct_last_error());
	if (hpct_gloo_context_rank(p->ctx) != info.rank || hpct_gloo_context_size(p->ctx) != c->n)
		return why(6, "rank %d: context rank %d size %d", info.rank,
		           hpct_gloo_context_rank(p->ctx), hpct_gloo_context_size(p->ctx));
	return 0;
}

static void stop(struct proc *p)
{
	hpct_gloo_context_destroy(p->ctx);
	hpct_gloo_device_destroy(p->dev);
	hpct_world_destroy(p->w);
}

static int matrix_main(int r, void *arg)
{
	(void)r;
	struct proc p = { 0 };
	int rc = start(arg, &p);
	if (rc == 0)
		rc = exercise(p.ctx, 10, 0);
	if (rc == 0 && (rc = quick_sum(p.ctx, 20, 3)) == 0)
		stop(&p);
	return rc;
}

/* n ranks of fn on `nodes` nodes, ports of slot, HPCT_TIMEOUT timeout_s,
 * with HPCT_SECRET = secret (NULL: none); all must exit 0. */
static void spawn_with(int n, int nodes, int slot, int rootless, ht_rank_fn fn, double limit_s,
                       double timeout_s, const char *secret)
{
	struct cfg c = { .n = n,
		         .nodes = nodes,
		         .port = hpct_test_ports(slot),
		         .rootless = rootless,
		         .timeout = timeout_s,
		         .secret = secret,
		         .shared = shared_map(),
		         .fn = fn };
	int codes[16];
	double t0 = mono();
	int bad = ht_spawn(n, env_cb, child, &c, limit_s, NULL, codes);
	cr_expect_eq(bad, 0, "N=%d on %d node(s), %s: %s%s", n, nodes,
	             rootless ? "rootless" : "standard", ht_describe(codes, n),
	             notes(c.shared, codes, n));
	munmap(c.shared, sizeof(*c.shared));
	cr_log_info("N=%d %s: %.2f s", n, rootless ? "rootless" : "standard", mono() - t0);
}

static void spawn(int n, int nodes, int slot, int rootless, ht_rank_fn fn, double limit_s)
{
	spawn_with(n, nodes, slot, rootless, fn, limit_s, 30, NULL);
}

Test(gloo, rootless_n2)
{
	spawn(2, 1, 0, 1, matrix_main, 60);
}
Test(gloo, standard_n2)
{
	spawn(2, 1, 1, 0, matrix_main, 60);
}
Test(gloo, rootless_n8_two_nodes)
{
	spawn(8, 2, 4, 1, matrix_main, 90);
}
Test(gloo, standard_n8_two_nodes)
{
	spawn(8, 2, 5, 0, matrix_main, 90);
}
Test(gloo, rootless_n16_four_nodes)
{
	spawn(16, 4, 6, 1, matrix_main, 120);
}
Test(gloo, standard_n16_four_nodes)
{
	spawn(16, 4, 7, 0, matrix_main, 120);
}

/* Subgroups of 8 ranks: the evens and the odds each get a context and work
 * in it at the same time (each half is the other's non-members); then
 * {0, 7}, where ranks 1..6 do a world hpct barrier meanwhile; then the
 * world context, made before any subgroup, still works. */
static int subgroups_main(int r, void *arg)
{
	struct cfg *c = arg;
	struct proc p = { 0 };
	int rc = start(c, &p);
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
		return why(30, "rank %d: group_create: %s", r, hpct_last_error());
	if ((ge != NULL) != (r % 2 == 0) || (go != NULL) != (r % 2 == 1) ||
	    (gx != NULL) != (r == 0 || r == c->n - 1))
		return why(31, "rank %d: membership wrong: evens %p odds %p ends %p", r, (void *)ge,
		           (void *)go, (void *)gx);
	hpct_group *half = ge ? ge : go;
	hpct_gloo_context *hc;
	if ((rc = hpct_gloo_context_create(p.dev, half, &hc)) != 0)
		return why(32, "rank %d: context on %s: %s: %s", r, ge ? "evens" : "odds",
		           hpct_errname(rc), hpct_last_error());
	if (hpct_gloo_context_size(hc) != (ge ? ne : no) ||
	    hpct_gloo_context_rank(hc) != hpct_group_rank(half))
		return why(33, "rank %d: half context rank %d size %d", r,
		           hpct_gloo_context_rank(hc), hpct_gloo_context_size(hc));
	/* each half sums its world ranks: a context crossing halves would show */
	int32_t s = r, want = 0;
	for (int i = r % 2; i < c->n; i += 2)
		want += i;
	if ((rc = hpct_gloo_allreduce(hc, &s, 1, HPCT_GLOO_I32, HPCT_GLOO_SUM)) != 0)
		return why(34, "rank %d: half allreduce: %s: %s", r, hpct_errname(rc),
		           hpct_last_error());
	if (s != want)
		return why(35, "rank %d: half sum %d, want %d", r, (int)s, (int)want);
	if ((rc = exercise(hc, 40, r % 2)) != 0)
		return rc;
	hpct_gloo_context_destroy(hc);
	if (gx) {
		hpct_gloo_context *xc;
		if ((rc = hpct_gloo_context_create(p.dev, gx, &xc)) != 0)
			return why(36, "rank %d: context on {0, n-1}: %s: %s", r, hpct_errname(rc),
			           hpct_last_error());
		if ((rc = exercise(xc, 50, 7)) != 0)
			return rc;
		hpct_gloo_context_destroy(xc);
	}
	/* the non-members of {0, n-1} waited here all along */
	if ((rc = hpct_barrier(world)) != 0)
		return why(37, "rank %d: world barrier: %s: %s", r, hpct_errname(rc),
		           hpct_last_error());
	if ((rc = quick_sum(p.ctx, 60, 11)) != 0 || (rc = check_barrier(p.ctx, 62)) != 0)
		return rc;
	hpct_group_destroy(ge);
	hpct_group_destroy(go);
	hpct_group_destroy(gx);
	stop(&p);
	return 0;
}

Test(gloo, rootless_subgroups)
{
	spawn(8, 2, 8, 1, subgroups_main, 90);
}
Test(gloo, standard_subgroups)
{
	spawn(8, 2, 9, 0, subgroups_main, 90);
}

/* Clones of the world context: used interleaved with the parent, a clone
 * of a clone, a clone that outlives its parent, and a chain of clones each
 * dropping its parent as soon as it returns ("independent of the parent
 * afterwards"). */
static int clone_main(int r, void *arg)
{
	(void)r;
	struct proc p = { 0 };
	int rc = start(arg, &p);
	if (rc)
		return rc;
	hpct_gloo_context *c1, *c2, *c3;
	if ((rc = hpct_gloo_context_clone(p.ctx, &c1)) != 0)
		return why(70, "rank %d: clone: %s: %s", p.rank, hpct_errname(rc),
		           hpct_last_error());
	if (hpct_gloo_context_rank(c1) != p.rank ||
	    hpct_gloo_context_size(c1) != hpct_gloo_context_size(p.ctx))
		return why(71, "rank %d: clone rank %d size %d", p.rank, hpct_gloo_context_rank(c1),
		           hpct_gloo_context_size(c1));
	for (int i = 0; i < 4; i++) {
		if ((rc = quick_sum(i % 2 ? p.ctx : c1, 72, i)) != 0)
			return rc;
	}
	if ((rc = exercise(c1, 10, 1)) != 0 || (rc = quick_sum(p.ctx, 20, 5)) != 0)
		return rc;
	if ((rc = hpct_gloo_context_clone(c1, &c2)) != 0)
		return why(74, "rank %d: clone of a clone: %s: %s", p.rank, hpct_errname(rc),
		           hpct_last_error());
	if ((rc = quick_sum(c2, 75, 1)) != 0 || (rc = quick_sum(c1, 75, 2)) != 0 ||
	    (rc = quick_sum(p.ctx, 75, 3)) != 0)
		return rc;
	hpct_gloo_context_destroy(c1);
	if ((rc = quick_sum(c2, 77, 4)) != 0 || (rc = quick_sum(p.ctx, 77, 5)) != 0)
		return rc;
	if ((rc = hpct_gloo_context_clone(p.ctx, &c3)) != 0)
		return why(79, "rank %d: second clone: %s: %s", p.rank, hpct_errname(rc),
		           hpct_last_error());
	hpct_gloo_context_destroy(p.ctx);
	p.ctx = NULL;
	if ((rc = quick_sum(c3, 80, 6)) != 0 || (rc = check_barrier(c3, 82)) != 0 ||
	    (rc = quick_sum(c2, 83, 7)) != 0)
		return rc;
	/* a chain: each clone's parent dropped as soon as the clone returns */
	for (int k = 0; k < 6; k++) {
		hpct_gloo_context *next;
		if ((rc = hpct_gloo_context_clone(c3, &next)) != 0)
			return why(85, "rank %d: chained clone %d: %s: %s", p.rank, k,
			           hpct_errname(rc), hpct_last_error());
		hpct_gloo_context_destroy(c3);
		c3 = next;
	}
	if ((rc = quick_sum(c3, 86, 8)) != 0)
		return rc;
	hpct_gloo_context_destroy(c2);
	hpct_gloo_context_destroy(c3);
	stop(&p);
	return 0;
}

Test(gloo, rootless_clone)
{
	spawn(5, 2, 10, 1, clone_main, 60);
}
Test(gloo, standard_clone)
{
	spawn(5, 2, 11, 0, clone_main, 60);
}

/* Create, use, destroy (no barrier first: ranks leave at their own pace),
 * create again over the same group in the same processes, use; three
 * rounds, each with other values, so a stale pair would show. */
static int recreate_main(int r, void *arg)
{
	struct cfg *c = arg;
	struct proc p = { 0 };
	int rc = start(c, &p);
	if (rc)
		return rc;
	hpct_gloo_context_destroy(p.ctx);
	p.ctx = NULL;
	int members[3] = { 0, 2, 3 };
	hpct_group *g;
	if (hpct_group_create(hpct_world_group(p.w), members, 3, &g) != 0)
		return why(85, "rank %d: group_create: %s", r, hpct_last_error());
	for (int round = 0; round < 3; round++) {
		hpct_gloo_context *ctx;
		if ((rc = hpct_gloo_context_create(p.dev, hpct_world_group(p.w), &ctx)) != 0)
			return why(86, "rank %d: round %d: context: %s: %s", r, round,
			           hpct_errname(rc), hpct_last_error());
		if ((rc = quick_sum(ctx, 87, 100 * round)) != 0 ||
		    (rc = check_broadcast(ctx, 89, round)) != 0)
			return rc;
		hpct_gloo_context_destroy(ctx);
		/* and a subgroup's context, re-made alike */
		if (g) {
			if ((rc = hpct_gloo_context_create(p.dev, g, &ctx)) != 0)
				return why(91, "rank %d: round %d: subgroup context: %s: %s", r,
				           round, hpct_errname(rc), hpct_last_error());
			if ((rc = quick_sum(ctx, 92, 10 * round)) != 0)
				return rc;
			hpct_gloo_context_destroy(ctx);
		}
	}
	hpct_group_destroy(g);
	stop(&p);
	return 0;
}

Test(gloo, rootless_recreate)
{
	spawn(4, 2, 12, 1, recreate_main, 60);
}
Test(gloo, standard_recreate)
{
	spawn(4, 2, 13, 0, recreate_main, 60);
}

/* The victim dies once the context is connected and one allreduce worked;
 * every other rank's next allreduce must fail within 10 s (HPCT_TIMEOUT is
 * 20), with a message naming "rank <victim>", and the context stays
 * failed.  Survivors keep their contexts open until all of them have their
 * result: each must find the failure by itself, not because a neighbour that
 * failed first closed its pairs.  They meet through shared memory, not
 * through hpct (on the standard path every rendezvous wait fails once a rank
 * left without goodbye). */
static int killed_main(int r, void *arg)
{
	struct cfg *c = arg;
	struct proc p = { 0 };
	int rc = start(c, &p);
	if (rc)
		return rc;
	if ((rc = quick_sum(p.ctx, 95, 0)) != 0)
		return rc;
	if (r == c->victim) {
		usleep(200000); /* die while the others wait in the next one */
		raise(SIGKILL);
	}
	float b[1000];
	for (int i = 0; i < 1000; i++)
		b[i] = 1;
	double t0 = mono();
	rc = hpct_gloo_allreduce(p.ctx, b, 1000, HPCT_GLOO_F32, HPCT_GLOO_SUM);
	double took = mono() - t0;
	char msg[1024];
	snprintf(msg, sizeof(msg), "%s", hpct_last_error());
	fprintf(stderr, "rank %d: after %.2f s: %s: %s\n", r, took, hpct_errname(rc), msg);
	int rc2 = hpct_gloo_allreduce(p.ctx, b, 1000, HPCT_GLOO_F32, HPCT_GLOO_SUM);
	/* every survivor has its result: now the contexts may close */
	__atomic_add_fetch(&c->shared->done, 1, __ATOMIC_SEQ_CST);
	double t1 = mono();
	while (__atomic_load_n(&c->shared->done, __ATOMIC_SEQ_CST) < c->n - 1 && mono() - t1 < 30)
		usleep(10000);
	hpct_gloo_context_destroy(p.ctx);
	hpct_gloo_device_destroy(p.dev);
	if (rc == 0)
		return why(100, "rank %d: allreduce worked without rank %d", r, c->victim);
	if (took > 10)
		return why(101, "rank %d: failed only after %.1f s", r, took);
	if (rc2 == 0)
		return why(103, "rank %d: a failed context worked again", r);
	char want[32];
	snprintf(want, sizeof(want), "rank %d", c->victim);
	/* "rank 2" but not "rank 20" */
	const char *m = strstr(msg, want);
	while (m && m[strlen(want)] >= '0' && m[strlen(want)] <= '9')
		m = strstr(m + 1, want);
	if (!m)
		return why(102, "rank %d: message does not name '%s': %s", r, want, msg);
	/* the world goes without the victim: not waited for here */
	_exit(0);
}

static void killed_test(int slot, int rootless)
{
	struct cfg c = { .n = 6,
		         .nodes = 2,
		         .port = hpct_test_ports(slot),
		         .rootless = rootless,
		         .victim = 2,
		         .timeout = 20,
		         .shared = shared_map(),
		         .fn = killed_main };
	int codes[6];
	ht_spawn(c.n, env_cb, child, &c, 50, NULL, codes);
	for (int r = 0; r < c.n; r++)
		if (r != c.victim)
			cr_expect_eq(codes[r], 0, "%s: rank %d exited %d: %s",
			             rootless ? "rootless" : "standard", r, codes[r],
			             c.shared->note[r]);
	cr_expect_eq(codes[c.victim], 128 + SIGKILL, "victim exited %d", codes[c.victim]);
	munmap(c.shared, sizeof(*c.shared));
}

Test(gloo, rootless_rank_killed_is_named, .timeout = 60)
{
	killed_test(14, 1);
}
Test(gloo, standard_rank_killed_is_named, .timeout = 60)
{
	killed_test(15, 0);
}

/* A bad call returns HPCT_EINVAL naming the argument, and leaves the
 * context as good as it was. */
static int expect_einval(int rc, const char *arg, int code)
{
	const char *msg = hpct_last_error();
	if (rc != HPCT_EINVAL)
		return why(code, "bad %s: got %s (%d): %s", arg, hpct_errname(rc), rc, msg);
	/* the argument's name as a word */
	size_t len = strlen(arg);
	for (const char *m = strstr(msg, arg); m; m = strstr(m + 1, arg)) {
		int before = m == msg || !(m[-1] == '_' || (m[-1] >= 'a' && m[-1] <= 'z'));
		int after = !(m[len] == '_' || (m[len] >= 'a' && m[len] <= 'z'));
		if (before && after)
			return 0;
	}
	return why(code, "bad %s: message does not name it: %s", arg, msg);
}

static int badargs_main(int r, void *arg)
{
	struct cfg *c = arg;
	struct proc p = { 0 };
	int rc = start(c, &p);
	if (rc)
		return rc;
	hpct_gloo_context *x = p.ctx;
	int n = c->n;
	int32_t b[8] = { 0 }, out[64];
	const enum hpct_gloo_dtype bad_dt = (enum hpct_gloo_dtype)99;
	const enum hpct_gloo_op bad_op = (enum hpct_gloo_op)99;
#define BAD(call, argname, code)                                      \
	do {                                                          \
		if ((rc = expect_einval((call), argname, code)) != 0) \
			return rc;                                    \
	} while (0)
	BAD(hpct_gloo_allreduce(x, NULL, 8, HPCT_GLOO_I32, HPCT_GLOO_SUM), "buf", 140);
	BAD(hpct_gloo_allreduce(x, b, 0, HPCT_GLOO_I32, HPCT_GLOO_SUM), "count", 141);
	BAD(hpct_gloo_allreduce(x, b, 8, bad_dt, HPCT_GLOO_SUM), "dtype", 142);
	BAD(hpct_gloo_allreduce(x, b, 8, HPCT_GLOO_I32, bad_op), "op", 143);
	BAD(hpct_gloo_allreduce(x, b, SIZE_MAX / 2, HPCT_GLOO_I32, HPCT_GLOO_SUM), "count", 144);
	BAD(hpct_gloo_allreduce(x, b, 8, (enum hpct_gloo_dtype) - 1, HPCT_GLOO_SUM), "dtype", 164);
	BAD(hpct_gloo_allreduce(x, b, 8, HPCT_GLOO_F64, (enum hpct_gloo_op) - 1), "op", 165);
	BAD(hpct_gloo_broadcast(x, NULL, 8, HPCT_GLOO_I32, 0), "buf", 145);
	BAD(hpct_gloo_broadcast(x, b, 0, HPCT_GLOO_I32, 0), "count", 146);
	BAD(hpct_gloo_broadcast(x, b, 8, bad_dt, 0), "dtype", 147);
	BAD(hpct_gloo_broadcast(x, b, 8, HPCT_GLOO_I32, n), "root", 148);
	BAD(hpct_gloo_broadcast(x, b, 8, HPCT_GLOO_I32, -1), "root", 149);
	BAD(hpct_gloo_allgather(x, NULL, out, 8, HPCT_GLOO_I32), "in", 150);
	BAD(hpct_gloo_allgather(x, b, NULL, 8, HPCT_GLOO_I32), "out", 151);
	BAD(hpct_gloo_allgather(x, b, out, 0, HPCT_GLOO_I32), "count", 152);
	BAD(hpct_gloo_allgather(x, b, out, 8, bad_dt), "dtype", 153);
	BAD(hpct_gloo_reduce(x, NULL, out, 8, HPCT_GLOO_I32, HPCT_GLOO_SUM, 1), "in", 154);
	BAD(hpct_gloo_reduce(x, b, out, 0, HPCT_GLOO_I32, HPCT_GLOO_SUM, 1), "count", 155);
	BAD(hpct_gloo_reduce(x, b, out, 8, bad_dt, HPCT_GLOO_SUM, 1), "dtype", 156);
	BAD(hpct_gloo_reduce(x, b, out, 8, HPCT_GLOO_I32, bad_op, 1), "op", 157);
	BAD(hpct_gloo_reduce(x, b, out, 8, HPCT_GLOO_I32, HPCT_GLOO_SUM, n), "root", 158);
	BAD(hpct_gloo_reduce(x, b, out, 8, HPCT_GLOO_I32, HPCT_GLOO_SUM, -3), "root", 159);
	if (r == 1) /* out may be NULL off the root only */
		BAD(hpct_gloo_reduce(x, b, NULL, 8, HPCT_GLOO_I32, HPCT_GLOO_SUM, 1), "out", 160);
	BAD(hpct_gloo_allreduce(NULL, b, 8, HPCT_GLOO_I32, HPCT_GLOO_SUM), "context", 161);
	BAD(hpct_gloo_barrier(NULL), "context", 162);
	hpct_gloo_context *none = (hpct_gloo_context *)&none;
	if ((rc = hpct_gloo_context_create(p.dev, NULL, &none)) != HPCT_EINVAL ||
	    none != (hpct_gloo_context *)&none)
		return why(163, "rank %d: context_create on a NULL group: %s, out %s", r,
		           hpct_errname(rc),
		           none == (hpct_gloo_context *)&none ? "untouched" : "set");
#undef BAD
	/* the context is as good as before */
	if ((rc = quick_sum(x, 170, 9)) != 0 || (rc = exercise(x, 10, 0)) != 0)
		return rc;
	stop(&p);
	return 0;
}

/* N = 3 on 2 nodes: the bad calls first, then everything that must work. */
Test(gloo, rootless_n3_two_nodes_bad_arguments)
{
	spawn(3, 2, 2, 1, badargs_main, 60);
}
Test(gloo, standard_n3_two_nodes_bad_arguments)
{
	spawn(3, 2, 3, 0, badargs_main, 60);
}

/* --- a shared secret ---------------------------------------------------- */

Test(gloo, rootless_n8_two_nodes_with_a_secret)
{
	spawn_with(8, 2, 16, 1, matrix_main, 90, 30, "gloo secret");
}

/* A thief in rank 0's own process connects to the first new listening
 * socket it sees (the Gloo pair's, which rank 1 on the other node must
 * connect to; rank 1 comes 300 ms late): the thief's address, for rank 0's
 * message. */
static char thief_from[64];
static int thief_fd = -1, known[64], nknown;
static volatile int thief_stop;

static int listening_port(int fd)
{
	int on = 0;
	socklen_t ol = sizeof(on);
	struct sockaddr_in a;
	socklen_t al = sizeof(a);
	if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &ol) != 0 || !on ||
	    getsockname(fd, (struct sockaddr *)&a, &al) != 0 || a.sin_family != AF_INET)
		return -1;
	return ntohs(a.sin_port);
}

/* pass 0 (before the thread starts): the listeners there before, the
 * world's own; later passes: take the first new one */
static void *thief(void *arg)
{
	for (int pass = arg ? 0 : 1; !thief_stop; pass++) {
		DIR *d = opendir("/proc/self/fd");
		struct dirent *e;
		while (d && (e = readdir(d))) {
			int fd = atoi(e->d_name), port;
			if (e->d_name[0] == '.' || (port = listening_port(fd)) < 0)
				continue;
			int seen = 0;
			for (int i = 0; i < nknown; i++)
				seen |= known[i] == port;
			if (seen)
				continue;
			if (pass == 0) {
				if (nknown < 64)
					known[nknown++] = port;
				continue;
			}
			int s = socket(AF_INET, SOCK_STREAM, 0);
			struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				                  .sin_addr.s_addr = htonl(0x7f000001) };
			if (connect(s, (struct sockaddr *)&to, sizeof(to)) == 0) {
				struct sockaddr_in me;
				socklen_t ml = sizeof(me);
				getsockname(s, (struct sockaddr *)&me, &ml);
				snprintf(thief_from, sizeof(thief_from), "127.0.0.1:%d", ntohs(me.sin_port));
				thief_fd = s;
				closedir(d);
				return NULL;
			}
			close(s);
		}
		if (d)
			closedir(d);
		if (arg)
			return NULL; /* pass 0 only */
	}
	return NULL;
}

static int stolen_main(int r, void *arg)
{
	(void)arg;
	hpct_world *w;
	hpct_gloo_device *dev;
	hpct_gloo_context *ctx = NULL;
	int rc;
	if ((rc = hpct_world_create(&w)) != 0 || (rc = hpct_gloo_device_create(w, &dev)) != 0)
		return why(2, "rank %d: %s", r, hpct_last_error());
	pthread_t th;
	if (r == 0) {
		thief(&th); /* the listeners there now */
		pthread_create(&th, NULL, thief, NULL);
	}
	else
		usleep(300000);
	rc = hpct_gloo_context_create(dev, hpct_world_group(w), &ctx);
	if (r == 0) {
		thief_stop = 1;
		pthread_join(th, NULL);
		if (!thief_from[0])
			return why(3, "the thief found no pair to take");
		char want[128];
		snprintf(want, sizeof(want), "is connected to %s, not to rank 1", thief_from);
		if (rc != HPCT_EREFUSED || !strstr(hpct_last_error(), want))
			return why(4, "rank 0: %s (%s), wanted HPCT_EREFUSED with '%s'", hpct_errname(rc),
			           hpct_last_error(), want);
		close(thief_fd);
	} else if (rc == 0) {
		return why(5, "rank 1 connected its pair all the same");
	}
	hpct_gloo_context_destroy(ctx);
	hpct_gloo_device_destroy(dev);
	hpct_world_destroy(w);
	return 0;
}

Test(gloo, rootless_secret_a_stolen_pair_is_refused_naming_the_thief, .timeout = 60)
{
	spawn_with(2, 2, 17, 1, stolen_main, 40, 5, "gloo secret");
}
