/* The standard path's rendezvous store: server and client together, the
 * store's operations, waits and deadlines.  Raw and malformed clients, stop,
 * lost ranks and the collectives: test_stdpath_wire.c. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/base/util.h"
#include "bootstrap/stdpath/stdpath.h"
#include "hpct/hpct.h"
#include "tests/harness.h"
#include "tests/stdpath_common.h"

/* ---- set/mget across clients (threads) ---- */

#define NT  4
#define BIG (3u << 20)

struct many_arg {
	int port, rank, rc;
};

static void *many_rank(void *p)
{
	struct many_arg *a = p;
	struct hpct_std_client *c = NULL;
	double dl = hpct__now() + 10;
	char key[32], val[24] = "", got[NT][24];
	a->rc = 1;
	if (hpct__std_client_connect(HOST, a->port, a->rank, NT, JOB, NULL, dl, &c) != 0)
		return NULL;
	snprintf(key, sizeof(key), "k/%d", a->rank);
	snprintf(val, sizeof(val), "value-of-%d", a->rank);
	a->rc = 2;
	if (hpct__std_set(c, key, val, sizeof(val), 0, dl) != 0)
		goto out;
	if (a->rank == 0) {
		unsigned char *big = malloc(BIG);
		for (size_t i = 0; i < BIG; i++)
			big[i] = (unsigned char)(i * 7);
		int rc = hpct__std_set(c, "big", big, BIG, NT - 1, dl);
		free(big);
		a->rc = 3;
		if (rc != 0)
			goto out;
	}
	char keys[NT][32];
	const char *kp[NT];
	void *bufs[NT];
	size_t lens[NT];
	for (int i = 0; i < NT; i++) {
		snprintf(keys[i], sizeof(keys[i]), "k/%d", i);
		kp[i] = keys[i];
		bufs[i] = got[i];
		lens[i] = sizeof(got[i]);
	}
	a->rc = 4;
	if (hpct__std_mget(c, kp, NT, bufs, lens, dl) != 0)
		goto out;
	for (int i = 0; i < NT; i++) {
		memset(val, 0, sizeof(val));
		snprintf(val, sizeof(val), "value-of-%d", i);
		a->rc = 5;
		if (memcmp(got[i], val, sizeof(val)) != 0)
			goto out;
	}
	if (a->rank != 0) {
		unsigned char *big = malloc(BIG);
		int rc = get_one(c, "big", big, BIG, 10);
		a->rc = 6;
		for (size_t i = 0; rc == 0 && i < BIG; i++)
			if (big[i] != (unsigned char)(i * 7))
				rc = 7;
		free(big);
		if (rc != 0)
			goto out;
	}
	a->rc = 0;
out:
	hpct__std_client_close(c);
	return NULL;
}

Test(stdpath, set_mget_many_clients, .timeout = 30)
{
	int port = hpct_test_ports(0);
	struct hpct_std_server *s = start(port, NT);
	pthread_t th[NT];
	struct many_arg a[NT];
	for (int r = 0; r < NT; r++) {
		a[r] = (struct many_arg){ .port = port, .rank = r };
		pthread_create(&th[r], NULL, many_rank, &a[r]);
	}
	for (int r = 0; r < NT; r++)
		pthread_join(th[r], NULL);
	for (int r = 0; r < NT; r++)
		cr_expect_eq(a[r].rc, 0, "rank %d failed at step %d", r, a[r].rc);
	/* "big" had readers = NT - 1 and was read that often: it is gone. */
	struct hpct_std_client *c = join(port, 0, NT);
	char b;
	cr_expect_eq(get_one(c, "big", &b, 1, 0.2), HPCT_ETIMEDOUT);
	hpct__std_client_close(c);
	hpct__std_server_stop(s, hpct__now() + 5);
}

/* ---- mget waits for a key set later ---- */

Test(stdpath, mget_waits_for_late_set, .timeout = 30)
{
	int port = hpct_test_ports(1);
	struct hpct_std_server *s = start(port, 2);
	struct hpct_std_client *a = join(port, 0, 2), *b = join(port, 1, 2);
	struct wait_arg w = { .c = a, .key = "late" };
	pthread_t th;
	pthread_create(&th, NULL, mget_thread, &w);
	usleep(200 * 1000);
	cr_assert_eq(hpct__std_set(b, "late", "1234567", 8, 1, hpct__now() + 5), 0, "%s",
	             hpct_last_error());
	pthread_join(th, NULL);
	cr_expect_eq(w.rc, 0, "%s", w.msg);
	cr_expect_str_eq(w.buf, "1234567");
	cr_expect_geq(w.took, 0.15, "mget returned after %.3f s, before the key was set", w.took);
	hpct__std_client_close(a);
	hpct__std_client_close(b);
	hpct__std_server_stop(s, hpct__now() + 5);
}

/* ---- add + wait_ge as a barrier of 16 processes ---- */

#define NB 16

static int barrier_rank(int rank, void *arg)
{
	int port = *(int *)arg;
	struct hpct_std_client *c = NULL;
	double dl = hpct__now() + 20;
	if (hpct__std_client_connect(HOST, port, rank, NB, JOB, NULL, dl, &c) != 0)
		return 1;
	int64_t v = -1;
	if (hpct__std_add(c, "arrive", 1, &v, dl) != 0 || v < 1 || v > NB)
		return 2;
	double t0 = hpct__now();
	if (hpct__std_wait_ge(c, "arrive", NB, dl) != 0)
		return 3;
	double waited = hpct__now() - t0;
	if (hpct__std_add(c, "arrive", 0, &v, dl) != 0 || v != NB)
		return 4;
	/* The last rank starts 300 ms late: everyone else must have waited. */
	if (rank != NB - 1 && waited < 0.15)
		return 5;
	hpct__std_client_close(c);
	return 0;
}

Test(stdpath, barrier_of_16, .timeout = 60)
{
	int port = hpct_test_ports(2);
	struct hpct_std_server *s = start(port, NB);
	int delay[NB] = { 0 }, codes[NB];
	delay[NB - 1] = 300;
	int bad = ht_spawn(NB, NULL, barrier_rank, &port, 40, delay, codes);
	cr_expect_eq(bad, 0, "%s", ht_describe(codes, NB));
	struct hpct_std_client *c = join(port, 0, NB);
	int64_t v = -1;
	cr_expect_eq(hpct__std_add(c, "arrive", 0, &v, hpct__now() + 5), 0, "%s",
	             hpct_last_error());
	cr_expect_eq(v, NB);
	hpct__std_client_close(c);
	double t0 = hpct__now();
	hpct__std_server_stop(s, hpct__now() + 5);
	cr_expect_lt(hpct__now() - t0, 1.0, "stop waited for clients that had left");
}

/* ---- readers-based deletion ---- */

Test(stdpath, readers_delete_key, .timeout = 30)
{
	int port = hpct_test_ports(3);
	struct hpct_std_server *s = start(port, 5);
	struct hpct_std_client *c[5];
	for (int r = 0; r < 5; r++)
		c[r] = join(port, r, 5);
	double dl = hpct__now() + 5;
	char buf[4];
	cr_assert_eq(hpct__std_set(c[0], "once", "abc", 4, 2, dl), 0, "%s", hpct_last_error());
	cr_assert_eq(hpct__std_set(c[0], "keep", "xyz", 4, 0, dl), 0, "%s", hpct_last_error());
	cr_expect_eq(get_one(c[1], "once", buf, 4, 5), 0, "%s", hpct_last_error());
	cr_expect_eq(get_one(c[2], "once", buf, 4, 5), 0, "%s", hpct_last_error());
	cr_expect_str_eq(buf, "abc");
	cr_expect_eq(get_one(c[3], "once", buf, 4, 0.3), HPCT_ETIMEDOUT, "a third read found it");
	for (int r = 1; r < 3; r++) {
		cr_expect_eq(get_one(c[r], "keep", buf, 4, 5), 0, "%s", hpct_last_error());
		cr_expect_eq(get_one(c[r], "keep", buf, 4, 5), 0, "%s", hpct_last_error());
	}
	/* Set again, it is readable again; a waiter parked on it gets it. */
	cr_expect_eq(hpct__std_set(c[0], "once", "def", 4, 1, dl), 0, "%s", hpct_last_error());
	cr_expect_eq(get_one(c[4], "once", buf, 4, 5), 0, "%s", hpct_last_error());
	cr_expect_str_eq(buf, "def");
	for (int r = 0; r < 5; r++)
		hpct__std_client_close(c[r]);
	hpct__std_server_stop(s, hpct__now() + 5);
}

/* ---- deadlines ---- */

Test(stdpath, mget_deadline_names_key, .timeout = 30)
{
	int port = hpct_test_ports(4);
	struct hpct_std_server *s = start(port, 2);
	struct hpct_std_client *c = join(port, 1, 2), *d = join(port, 0, 2);
	char buf[8], addr[64];
	double t0 = hpct__now();
	int rc = get_one(c, "no-such-key-17", buf, sizeof(buf), 0.3);
	double took = hpct__now() - t0;
	cr_expect_eq(rc, HPCT_ETIMEDOUT, "got %s", hpct_errname(rc));
	cr_expect(took >= 0.29 && took < 1.5, "took %.3f s", took);
	const char *msg = hpct_last_error();
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	cr_expect(strstr(msg, "no-such-key-17") && strstr(msg, addr) && strstr(msg, "rank 1"), "%s",
	          msg);
	/* A reply is still owed on that connection: it is unusable now. */
	cr_expect_eq(hpct__std_set(c, "x", "1", 1, 0, hpct__now() + 1), HPCT_ESTATE);
	/* Rank 1 gave up and hung up without BYE: it is lost, and a wait that
	 * cannot be answered at once fails fast, naming it. */
	t0 = hpct__now();
	cr_expect_eq(hpct__std_wait_ge(d, "never", 1, hpct__now() + 5), HPCT_EPEERDEAD);
	cr_expect(strstr(hpct_last_error(), "never") &&
	                  strstr(hpct_last_error(), "rank 1 at 127.0.0.1:"),
	          "%s", hpct_last_error());
	cr_expect_lt(hpct__now() - t0, 1.0);
	hpct__std_client_close(c);
	hpct__std_client_close(d);
	hpct__std_server_stop(s, hpct__now() + 5);

	/* WAITGE's deadline, on a server that lost no rank. */
	s = start(port + 1, 2);
	d = join(port + 1, 0, 2);
	t0 = hpct__now();
	cr_expect_eq(hpct__std_wait_ge(d, "never", 1, hpct__now() + 0.2), HPCT_ETIMEDOUT);
	cr_expect(strstr(hpct_last_error(), "never"), "%s", hpct_last_error());
	cr_expect_lt(hpct__now() - t0, 1.0);
	hpct__std_client_close(d);
	hpct__std_server_stop(s, hpct__now() + 5);
}

/* ---- bind failures ---- */

Test(stdpath, port_taken, .timeout = 30)
{
	int port = hpct_test_ports(5);
	struct hpct_std_server *s = start(port, 2), *s2 = NULL;
	char addr[64];
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	cr_expect_eq(hpct__std_server_start(HOST, port, 2, JOB, NULL, &s2), HPCT_EADDRINUSE);
	cr_expect_null(s2);
	cr_expect(strstr(hpct_last_error(), addr), "%s", hpct_last_error());
	cr_expect_eq(hpct__std_server_start("0.0.0.0", port + 1, 2, JOB, NULL, &s2), HPCT_EINVAL,
	             "bound the wildcard");
	hpct__std_server_stop(s, hpct__now() + 5);
}

/* ---- client before server ---- */

struct conn_arg {
	int port, rc;
	double took;
};

static void *early_client(void *p)
{
	struct conn_arg *a = p;
	struct hpct_std_client *c = NULL;
	double t0 = hpct__now();
	a->rc = hpct__std_client_connect(HOST, a->port, 1, 2, JOB, NULL, t0 + 5, &c);
	a->took = hpct__now() - t0;
	if (a->rc == 0)
		a->rc = hpct__std_set(c, "hi", "x", 1, 0, hpct__now() + 5);
	hpct__std_client_close(c);
	return NULL;
}

Test(stdpath, client_before_server, .timeout = 30)
{
	int port = hpct_test_ports(6);
	struct conn_arg a = { .port = port };
	pthread_t th;
	pthread_create(&th, NULL, early_client, &a);
	usleep(300 * 1000);
	struct hpct_std_server *s = start(port, 2);
	pthread_join(th, NULL);
	cr_expect_eq(a.rc, 0, "%s", hpct_errname(a.rc));
	cr_expect(a.took >= 0.28 && a.took < 1.0, "connected after %.3f s", a.took);
	hpct__std_server_stop(s, hpct__now() + 5);

	/* Nobody there: refused until the deadline, and the message says so. */
	struct hpct_std_client *c = NULL;
	double t0 = hpct__now();
	int rc = hpct__std_client_connect(HOST, port + 1, 3, 4, JOB, NULL, t0 + 0.3, &c);
	char want[96];
	snprintf(want, sizeof(want), "rank 3: no rendezvous at 127.0.0.1:%d", port + 1);
	cr_expect_eq(rc, HPCT_ETIMEDOUT, "got %s", hpct_errname(rc));
	cr_expect(strstr(hpct_last_error(), want) &&
	                  strstr(hpct_last_error(), "Connection refused"),
	          "%s", hpct_last_error());
	cr_expect_lt(hpct__now() - t0, 1.0);
	cr_expect_null(c);
}

/* ---- refused handshakes ---- */

Test(stdpath, wrong_job_refused, .timeout = 30)
{
	int port = hpct_test_ports(7);
	struct hpct_std_server *s = start(port, 4);
	struct hpct_std_client *c = NULL, *ok;
	double dl = hpct__now() + 5;
	cr_expect_eq(hpct__std_client_connect(HOST, port, 1, 4, JOB + 1, NULL, dl, &c),
	             HPCT_EREFUSED);
	cr_expect(strstr(hpct_last_error(), "job hash"), "%s", hpct_last_error());
	cr_expect_eq(hpct__std_client_connect(HOST, port, 1, 5, JOB, NULL, dl, &c), HPCT_EREFUSED);
	cr_expect(strstr(hpct_last_error(), "world size"), "%s", hpct_last_error());
	ok = join(port, 1, 4);
	cr_expect_eq(hpct__std_client_connect(HOST, port, 1, 4, JOB, NULL, dl, &c), HPCT_EREFUSED);
	cr_expect(strstr(hpct_last_error(), "already connected"), "%s", hpct_last_error());
	cr_expect_null(c);
	int64_t v;
	cr_expect_eq(hpct__std_add(ok, "n", 5, &v, dl), 0, "%s", hpct_last_error());
	cr_expect_eq(v, 5);
	/* A counter op on a plain value is refused, the connection stays usable. */
	cr_expect_eq(hpct__std_set(ok, "plain", "abc", 3, 0, dl), 0);
	cr_expect_eq(hpct__std_add(ok, "plain", 1, &v, dl), HPCT_EINVAL);
	cr_expect(strstr(hpct_last_error(), "plain"), "%s", hpct_last_error());
	cr_expect_eq(hpct__std_add(ok, "n", 1, &v, dl), 0, "%s", hpct_last_error());
	cr_expect_eq(v, 6);
	hpct__std_client_close(ok);
	hpct__std_server_stop(s, hpct__now() + 5);
}
