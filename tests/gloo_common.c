/* The Gloo tests' common ground (gloo_common.h): rank programs run through
 * the harness, exact checks of every op and dtype, and spawning. */
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

struct shared *gt_shared_map(void)
{
	struct shared *sh =
	        mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert(sh != MAP_FAILED);
	memset(sh, 0, sizeof(*sh));
	return sh;
}

/* The failing ranks' notes, for an assertion's message. */
static const char *gt_notes(const struct shared *sh, const int *codes, int n)
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

int gt_child(int r, void *arg)
{
	struct cfg *c = arg;
	my_shared = c->shared;
	my_rank = r;
	return c->fn(r, arg);
}

void gt_env_cb(int r, void *arg)
{
	struct cfg *c = arg;
	ht_setenv_world(r, c->n, c->nodes, c->port, c->rootless, c->timeout);
	if (c->secret)
		setenv("HPCT_SECRET", c->secret, 1);
	if (c->connect)
		setenv("HPCT_GLOO_CONNECT", c->connect, 1);
	else
		unsetenv("HPCT_GLOO_CONNECT");
	if (c->no_hosts) {
		unsetenv("HPCT_HOSTS");
		unsetenv("HPCT_TASKS_PER_NODE");
		unsetenv("GROUP_RANK");
	}
}

double gt_mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Says why on stderr and returns code, for a child's exit status. */
int gt_why(int code, const char *fmt, ...)
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
int gt_is(const void *buf, int dtype, size_t i, int64_t v)
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
					return gt_why(
					        base,
					        "rank %d/%d: allreduce %s %s count %zu: %s: %s", r,
					        n, dtype_name[dt], op_name[op], cnt,
					        hpct_errname(rc), hpct_last_error());
				for (size_t i = 0; i < cnt; i++) {
					int64_t want = fold(op, i, n, 0, 1, n);
					if (!gt_is(buf, dt, i, want))
						return gt_why(
						        base + 1,
						        "rank %d/%d: allreduce %s %s count %zu: "
						        "[%zu] = %g, want %lld",
						        r, n, dtype_name[dt], op_name[op], cnt, i,
						        get(buf, dt, i), (long long)want);
				}
			}
		}
	}
	free(buf);
	return 0;
}

int gt_check_broadcast(hpct_gloo_context *ctx, int base, int salt)
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
					return gt_why(base,
					              "rank %d/%d: broadcast root %d %s count %zu: "
					              "%s: %s",
					              r, n, root, dtype_name[dt], cnt,
					              hpct_errname(rc), hpct_last_error());
				for (size_t i = 0; i < cnt; i++)
					if (!gt_is(buf, dt, i, root * 1000 + (int64_t)i + salt))
						return gt_why(
						        base + 1,
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
				return gt_why(base, "rank %d/%d: allgather %s count %zu: %s: %s", r,
				              n, dtype_name[dt], cnt, hpct_errname(rc),
				              hpct_last_error());
			for (int k = 0; k < n; k++)
				for (size_t i = 0; i < cnt; i++)
					if (!gt_is(out, dt, (size_t)k * cnt + i,
					           k * 1000 + (int64_t)i + salt))
						return gt_why(base + 1,
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
						return gt_why(base,
						              "rank %d/%d: reduce %s %s count %zu "
						              "root %d: "
						              "%s: %s",
						              r, n, dtype_name[dt], op_name[op],
						              cnt, root, hpct_errname(rc),
						              hpct_last_error());
					if (r != root)
						continue;
					void *res = alias ? in : out;
					for (size_t i = 0; i < cnt; i++) {
						int64_t want = fold(op, i, n, 0, 1, n);
						if (!gt_is(res, dt, i, want))
							return gt_why(
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

int gt_check_barrier(hpct_gloo_context *ctx, int base)
{
	for (int i = 0; i < 3; i++) {
		int rc = hpct_gloo_barrier(ctx);
		if (rc)
			return gt_why(base, "rank %d: barrier %d: %s: %s",
			              hpct_gloo_context_rank(ctx), i, hpct_errname(rc),
			              hpct_last_error());
	}
	return 0;
}

/* One sum allreduce of count ints, each rank contributing rank + salt:
 * a quick "this context works" check. */
int gt_quick_sum(hpct_gloo_context *ctx, int base, int salt)
{
	int n = hpct_gloo_context_size(ctx), r = hpct_gloo_context_rank(ctx);
	int32_t b[7];
	for (int i = 0; i < 7; i++)
		b[i] = r + salt + i;
	int rc = hpct_gloo_allreduce(ctx, b, 7, HPCT_GLOO_I32, HPCT_GLOO_SUM);
	if (rc)
		return gt_why(base, "rank %d/%d: allreduce (salt %d): %s: %s", r, n, salt,
		              hpct_errname(rc), hpct_last_error());
	for (int i = 0; i < 7; i++)
		if (b[i] != n * (n - 1) / 2 + n * (salt + i))
			return gt_why(base + 1,
			              "rank %d/%d: allreduce (salt %d): [%d] = %d, want %d", r, n,
			              salt, i, b[i], n * (n - 1) / 2 + n * (salt + i));
	return 0;
}

/* Everything a context must do right; codes base .. base+9. */
int gt_exercise(hpct_gloo_context *ctx, int base, int salt)
{
	int rc;
	if ((rc = check_allreduce(ctx, base)) || (rc = gt_check_broadcast(ctx, base + 2, salt)) ||
	    (rc = check_allgather(ctx, base + 4, salt)) || (rc = check_reduce(ctx, base + 6)) ||
	    (rc = gt_check_barrier(ctx, base + 8)))
		return rc;
	return 0;
}

int gt_open(struct cfg *c, struct proc *p)
{
	int rc;
	if ((rc = hpct_world_create(&p->w)) != 0)
		return gt_why(2, "world: %s: %s", hpct_errname(rc), hpct_last_error());
	struct hpct_world_info info;
	hpct_world_get_info(p->w, &info);
	p->rank = info.rank;
	if (info.path != (c->rootless ? HPCT_PATH_ROOTLESS : HPCT_PATH_STANDARD))
		return gt_why(3, "rank %d: path %d", info.rank, (int)info.path);
	if ((rc = hpct_gloo_device_create(p->w, &p->dev)) != 0)
		return gt_why(4, "rank %d: device: %s: %s", info.rank, hpct_errname(rc),
		              hpct_last_error());
	return 0;
}

int gt_start(struct cfg *c, struct proc *p)
{
	struct hpct_world_info info;
	int rc = gt_open(c, p);
	if (rc)
		return rc;
	hpct_world_get_info(p->w, &info);
	if ((rc = hpct_gloo_context_create(p->dev, hpct_world_group(p->w), &p->ctx)) != 0)
		return gt_why(5, "rank %d: context: %s: %s", info.rank, hpct_errname(rc),
		              hpct_last_error());
	if (hpct_gloo_context_rank(p->ctx) != info.rank || hpct_gloo_context_size(p->ctx) != c->n)
		return gt_why(6, "rank %d: context rank %d size %d", info.rank,
		              hpct_gloo_context_rank(p->ctx), hpct_gloo_context_size(p->ctx));
	return 0;
}

void gt_stop(struct proc *p)
{
	hpct_gloo_context_destroy(p->ctx);
	hpct_gloo_device_destroy(p->dev);
	hpct_world_destroy(p->w);
}

int gt_matrix_main(int r, void *arg)
{
	(void)r;
	struct proc p = { 0 };
	int rc = gt_start(arg, &p);
	if (rc == 0)
		rc = gt_exercise(p.ctx, 10, 0);
	if (rc == 0 && (rc = gt_quick_sum(p.ctx, 20, 3)) == 0)
		gt_stop(&p);
	return rc;
}

void gt_spawn_cfg(struct cfg *c, int slot, double limit_s)
{
	c->port = hpct_test_ports(slot);
	c->shared = gt_shared_map();
	if (c->timeout <= 0)
		c->timeout = 30;
	int codes[16];
	char how[96];
	snprintf(how, sizeof(how), "%s%s%s%s", c->rootless ? "rootless" : "standard",
	         c->connect ? ", HPCT_GLOO_CONNECT=" : "", c->connect ? c->connect : "",
	         c->no_hosts ? ", no node list" : "");
	double t0 = gt_mono();
	int bad = ht_spawn(c->n, gt_env_cb, gt_child, c, limit_s, NULL, codes);
	cr_expect_eq(bad, 0, "N=%d on %d node(s), %s: %s%s", c->n, c->nodes, how,
	             ht_describe(codes, c->n), gt_notes(c->shared, codes, c->n));
	munmap(c->shared, sizeof(*c->shared));
	cr_log_info("N=%d %s: %.2f s", c->n, how, gt_mono() - t0);
}

/* n ranks of fn on `nodes` nodes, ports of slot, HPCT_TIMEOUT timeout_s,
 * with HPCT_SECRET = secret (NULL: none); all must exit 0. */
void gt_spawn_with(int n, int nodes, int slot, int rootless, ht_rank_fn fn, double limit_s,
                   double timeout_s, const char *secret)
{
	struct cfg c = { .n = n,
		         .nodes = nodes,
		         .rootless = rootless,
		         .timeout = timeout_s,
		         .secret = secret,
		         .fn = fn };
	gt_spawn_cfg(&c, slot, limit_s);
}

void gt_spawn(int n, int nodes, int slot, int rootless, ht_rank_fn fn, double limit_s)
{
	gt_spawn_with(n, nodes, slot, rootless, fn, limit_s, 30, NULL);
}
