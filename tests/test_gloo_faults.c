/* Gloo through hpct's C API when things go wrong, on both paths: a rank
 * killed mid-job is named by the others (also with the pool on the
 * standard path), bad arguments and bad values of HPCT_GLOO_CONNECT are
 * refused with a message, and with a shared secret a stolen pair's connection is refused
 * naming the thief.  Same rank programs and ports as test_gloo.c
 * (gloo_common.c), slots apart. */
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
/* The victim dies once the context is connected, one allreduce worked and
 * every other rank said (shared memory) it enters the next; that next
 * allreduce must fail on every other rank, having seen the victim die rather
 * than waited out HPCT_TIMEOUT (20 s: HPCT_ETIMEDOUT), with a message naming
 * "rank <victim>", and the context stays failed.  Survivors keep their
 * contexts open until all of them have their result: each must find the
 * failure by itself, not because a neighbour that failed first closed its
 * pairs.  They meet through shared memory, not through hpct (on the
 * standard path every rendezvous wait fails once a rank left without
 * goodbye). */
static int wait_shared(int *v, int at_least, double secs)
{
	double until = gt_mono() + secs; /* a hang guard */
	while (__atomic_load_n(v, __ATOMIC_SEQ_CST) < at_least && gt_mono() < until)
		usleep(1000);
	return __atomic_load_n(v, __ATOMIC_SEQ_CST) >= at_least ? 0 : -1;
}

static int killed_main(int r, void *arg)
{
	struct cfg *c = arg;
	struct proc p = { 0 };
	int rc = gt_start(c, &p);
	if (rc)
		return rc;
	if ((rc = gt_quick_sum(p.ctx, 95, 0)) != 0)
		return rc;
	if (r == c->victim) {
		if (wait_shared(&c->shared->entered, c->n - 1, 60) != 0)
			fprintf(stderr, "victim: the others never entered the next allreduce\n");
		raise(SIGKILL);
	}
	float b[1000];
	for (int i = 0; i < 1000; i++)
		b[i] = 1;
	__atomic_add_fetch(&c->shared->entered, 1, __ATOMIC_SEQ_CST);
	rc = hpct_gloo_allreduce(p.ctx, b, 1000, HPCT_GLOO_F32, HPCT_GLOO_SUM);
	char msg[1024];
	snprintf(msg, sizeof(msg), "%s", hpct_last_error());
	fprintf(stderr, "rank %d: %s: %s\n", r, hpct_errname(rc), msg);
	int rc2 = hpct_gloo_allreduce(p.ctx, b, 1000, HPCT_GLOO_F32, HPCT_GLOO_SUM);
	/* every survivor has its result: now the contexts may close */
	__atomic_add_fetch(&c->shared->done, 1, __ATOMIC_SEQ_CST);
	wait_shared(&c->shared->done, c->n - 1, 60);
	hpct_gloo_context_destroy(p.ctx);
	hpct_gloo_device_destroy(p.dev);
	if (rc == 0)
		return gt_why(100, "rank %d: allreduce worked without rank %d", r, c->victim);
	if (rc == HPCT_ETIMEDOUT)
		return gt_why(101, "rank %d: waited out its deadline, did not see rank %d die: %s",
		              r, c->victim, msg);
	if (rc2 == 0)
		return gt_why(103, "rank %d: a failed context worked again", r);
	char want[32];
	snprintf(want, sizeof(want), "rank %d", c->victim);
	/* "rank 2" but not "rank 20" */
	const char *m = strstr(msg, want);
	while (m && m[strlen(want)] >= '0' && m[strlen(want)] <= '9')
		m = strstr(m + 1, want);
	if (!m)
		return gt_why(102, "rank %d: message does not name '%s': %s", r, want, msg);
	/* the world goes without the victim: not waited for here */
	_exit(0);
}

static void killed_test(int slot, int rootless, const char *connect)
{
	struct cfg c = { .n = 6,
		         .nodes = 2,
		         .port = hpct_test_ports(slot),
		         .rootless = rootless,
		         .connect = connect,
		         .victim = 2,
		         .timeout = 20,
		         .shared = gt_shared_map(),
		         .fn = killed_main };
	int codes[6];
	ht_spawn(c.n, gt_env_cb, gt_child, &c, 150, NULL, codes);
	for (int r = 0; r < c.n; r++)
		if (r != c.victim)
			cr_expect_eq(codes[r], 0, "%s: rank %d exited %d: %s",
			             rootless ? "rootless" : "standard", r, codes[r],
			             c.shared->note[r]);
	cr_expect_eq(codes[c.victim], 128 + SIGKILL, "victim exited %d", codes[c.victim]);
	munmap(c.shared, sizeof(*c.shared));
}

Test(gloo, rootless_rank_killed_is_named, .timeout = 200)
{
	killed_test(14, 1, NULL);
}
Test(gloo, standard_rank_killed_is_named, .timeout = 200)
{
	killed_test(15, 0, NULL);
}
/* the pool on the standard path: its errors name the peer too */
Test(gloo, standard_pool_rank_killed_is_named, .timeout = 200)
{
	killed_test(27, 0, "pool");
}

/* HPCT_GLOO_CONNECT: a value that names no way, and fullmesh in a rootless
 * world (Gloo's connectFullMesh needs rank 0's store), fail the device
 * with HPCT_EBADENV, the message naming the variable with its value; no
 * device is made.  Then pool, the rootless default named, works. */
static int connect_values_main(int r, void *arg)
{
	(void)arg;
	static const struct {
		const char *value, *why;
	} bad[] = { { "bogus", "want pool or fullmesh" },
		    { "Pool", "want pool or fullmesh" },
		    { "fullmesh", "this world is rootless" } };
	hpct_world *w;
	int rc = hpct_world_create(&w);
	if (rc)
		return gt_why(2, "rank %d: world: %s", r, hpct_last_error());
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char want[64];
		snprintf(want, sizeof(want), "HPCT_GLOO_CONNECT=%s", bad[i].value);
		setenv("HPCT_GLOO_CONNECT", bad[i].value, 1);
		hpct_gloo_device *none = (hpct_gloo_device *)&none;
		rc = hpct_gloo_device_create(w, &none);
		const char *msg = hpct_last_error();
		if (rc != HPCT_EBADENV || none != (hpct_gloo_device *)&none || !strstr(msg, want) ||
		    !strstr(msg, bad[i].why))
			return gt_why(180 + (int)i,
			              "rank %d: %s: got %s, device %s, message '%s' (want "
			              "HPCT_EBADENV naming '%s', saying '%s')",
			              r, want, hpct_errname(rc),
			              none == (hpct_gloo_device *)&none ? "untouched" : "set", msg,
			              want, bad[i].why);
	}
	setenv("HPCT_GLOO_CONNECT", "pool", 1);
	struct proc p = { .w = w, .rank = r };
	if ((rc = hpct_gloo_device_create(w, &p.dev)) != 0 ||
	    (rc = hpct_gloo_context_create(p.dev, hpct_world_group(w), &p.ctx)) != 0)
		return gt_why(185, "rank %d: pool: %s: %s", r, hpct_errname(rc), hpct_last_error());
	if ((rc = gt_quick_sum(p.ctx, 186, 4)) != 0)
		return rc;
	gt_stop(&p);
	return 0;
}

Test(gloo, connect_bad_values_are_named)
{
	struct cfg c = { .n = 2, .nodes = 2, .rootless = 1, .fn = connect_values_main };
	gt_spawn_cfg(&c, 28, 60);
}

/* A bad call returns HPCT_EINVAL naming the argument, and leaves the
 * context as good as it was. */
static int expect_einval(int rc, const char *arg, int code)
{
	const char *msg = hpct_last_error();
	if (rc != HPCT_EINVAL)
		return gt_why(code, "bad %s: got %s (%d): %s", arg, hpct_errname(rc), rc, msg);
	/* the argument's name as a word */
	size_t len = strlen(arg);
	for (const char *m = strstr(msg, arg); m; m = strstr(m + 1, arg)) {
		int before = m == msg || !(m[-1] == '_' || (m[-1] >= 'a' && m[-1] <= 'z'));
		int after = !(m[len] == '_' || (m[len] >= 'a' && m[len] <= 'z'));
		if (before && after)
			return 0;
	}
	return gt_why(code, "bad %s: message does not name it: %s", arg, msg);
}

static int badargs_main(int r, void *arg)
{
	struct cfg *c = arg;
	struct proc p = { 0 };
	int rc = gt_start(c, &p);
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
		return gt_why(163, "rank %d: context_create on a NULL group: %s, out %s", r,
		              hpct_errname(rc),
		              none == (hpct_gloo_context *)&none ? "untouched" : "set");
#undef BAD
	/* the context is as good as before */
	if ((rc = gt_quick_sum(x, 170, 9)) != 0 || (rc = gt_exercise(x, 10, 0)) != 0)
		return rc;
	gt_stop(&p);
	return 0;
}

/* N = 3 on 2 nodes: the bad calls first, then everything that must work. */
Test(gloo, rootless_n3_two_nodes_bad_arguments)
{
	gt_spawn(3, 2, 2, 1, badargs_main, 60);
}
Test(gloo, standard_n3_two_nodes_bad_arguments)
{
	gt_spawn(3, 2, 3, 0, badargs_main, 60);
}

/* --- a shared secret ---------------------------------------------------- */

Test(gloo, rootless_n8_two_nodes_with_a_secret)
{
	gt_spawn_with(8, 2, 16, 1, gt_matrix_main, 90, 30, "gloo secret");
}

/* A thief in rank 0's own process connects to the first new listening
 * socket it sees (the Gloo pair's, which rank 1 on the other node must
 * connect to; rank 1 comes once the thief says, in shared memory, that it
 * holds the pair): the thief's address, for rank 0's message. */
static struct shared *thief_shared;
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
			struct sockaddr_in to = { .sin_family = AF_INET,
				                  .sin_port = htons((uint16_t)port),
				                  .sin_addr.s_addr = htonl(0x7f000001) };
			if (connect(s, (struct sockaddr *)&to, sizeof(to)) == 0) {
				struct sockaddr_in me;
				socklen_t ml = sizeof(me);
				getsockname(s, (struct sockaddr *)&me, &ml);
				snprintf(thief_from, sizeof(thief_from), "127.0.0.1:%d",
				         ntohs(me.sin_port));
				thief_fd = s;
				__atomic_store_n(&thief_shared->stolen, 1, __ATOMIC_SEQ_CST);
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
	struct cfg *c = arg;
	hpct_world *w;
	hpct_gloo_device *dev;
	hpct_gloo_context *ctx = NULL;
	int rc;
	if ((rc = hpct_world_create(&w)) != 0 || (rc = hpct_gloo_device_create(w, &dev)) != 0)
		return gt_why(2, "rank %d: %s", r, hpct_last_error());
	pthread_t th;
	if (r == 0) {
		thief_shared = c->shared;
		thief(&th); /* the listeners there now */
		pthread_create(&th, NULL, thief, NULL);
	} else if (wait_shared(&c->shared->stolen, 1, 60) != 0) {
		fprintf(stderr, "rank 1: the thief never took a pair; connecting all the same\n");
	}
	rc = hpct_gloo_context_create(dev, hpct_world_group(w), &ctx);
	if (r == 0) {
		thief_stop = 1;
		pthread_join(th, NULL);
		if (!thief_from[0])
			return gt_why(3, "the thief found no pair to take");
		char want[128];
		snprintf(want, sizeof(want), "is connected to %s, not to rank 1", thief_from);
		if (rc != HPCT_EREFUSED || !strstr(hpct_last_error(), want))
			return gt_why(4, "rank 0: %s (%s), wanted HPCT_EREFUSED with '%s'",
			              hpct_errname(rc), hpct_last_error(), want);
		close(thief_fd);
	} else if (rc == 0) {
		return gt_why(5, "rank 1 connected its pair all the same");
	}
	hpct_gloo_context_destroy(ctx);
	hpct_gloo_device_destroy(dev);
	hpct_world_destroy(w);
	return 0;
}

Test(gloo, rootless_secret_a_stolen_pair_is_refused_naming_the_thief, .timeout = 60)
{
	gt_spawn_with(2, 2, 17, 1, stolen_main, 40, 5, "gloo secret");
}
