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
	/* set only once the server parked the MGET (its absent entry exists) */
	struct keys_arg k = { s, 1 };
	cr_assert_eq(ht_wait_for(server_holds, &k, 20), 0,
	             "the MGET of 'late' never reached the server");
	cr_expect_eq(__atomic_load_n(&w.done, __ATOMIC_SEQ_CST), 0,
	             "mget returned before the key was set: %s", w.msg);
	cr_assert_eq(hpct__std_set(b, "late", "1234567", 8, 1, hpct__now() + 5), 0, "%s",
	             hpct_last_error());
	pthread_join(th, NULL);
	cr_expect_eq(w.rc, 0, "%s", w.msg);
	cr_expect_str_eq(w.buf, "1234567");
	hpct__std_client_close(a);
	hpct__std_client_close(b);
	hpct__std_server_stop(s, hpct__now() + 5);
}

/* ---- add + wait_ge as a barrier of 16 processes ---- */

#define NB 16

/* The last rank adds only once the others did (the counter says NB - 1),
 * and posts an event just before: a rank whose wait returns finds that
 * event, or its wait did not wait for the last rank. */
struct barrier_arg {
	int port;
	struct ht_event adding; /* the last rank adds now: a token per other rank */
};

static int barrier_rank(int rank, void *arg)
{
	struct barrier_arg *b = arg;
	struct hpct_std_client *c = NULL;
	double dl = hpct__now() + 60; /* a hang guard */
	if (hpct__std_client_connect(HOST, b->port, rank, NB, JOB, NULL, dl, &c) != 0)
		return 1;
	int64_t v = -1;
	if (rank == NB - 1) {
		if (hpct__std_wait_ge(c, "arrive", NB - 1, dl) != 0)
			return 6;
		ht_event_post(&b->adding, NB - 1);
	}
	if (hpct__std_add(c, "arrive", 1, &v, dl) != 0 || v < 1 || v > NB)
		return 2;
	if (hpct__std_wait_ge(c, "arrive", NB, dl) != 0)
		return 3;
	if (hpct__std_add(c, "arrive", 0, &v, dl) != 0 || v != NB)
		return 4;
	if (rank != NB - 1 && !ht_event_try(&b->adding))
		return 5; /* the wait returned before the last rank added */
	hpct__std_client_close(c);
	return 0;
}

Test(stdpath, barrier_of_16, .timeout = 120)
{
	struct barrier_arg b = { .port = hpct_test_ports(2) };
	struct hpct_std_server *s = start(b.port, NB);
	int codes[NB];
	cr_assert_eq(ht_event_init(&b.adding), 0);
	int bad = ht_spawn(NB, NULL, barrier_rank, &b, 90, NULL, codes);
	ht_event_destroy(&b.adding);
	cr_expect_eq(bad, 0, "%s", ht_describe(codes, NB));
	struct hpct_std_client *c = join(b.port, 0, NB);
	int64_t v = -1;
	cr_expect_eq(hpct__std_add(c, "arrive", 0, &v, hpct__now() + 5), 0, "%s",
	             hpct_last_error());
	cr_expect_eq(v, NB);
	hpct__std_client_close(c);
	/* every client has left: stop returns without waiting for its deadline */
	double deadline = hpct__now() + 20;
	hpct__std_server_stop(s, deadline);
	cr_expect_lt(hpct__now(), deadline, "stop waited for clients that had left");
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

Test(stdpath, mget_deadline_names_key, .timeout = 120)
{
	int port = hpct_test_ports(4);
	struct hpct_std_server *s = start(port, 2);
	struct hpct_std_client *c = join(port, 1, 2), *d = join(port, 0, 2);
	char buf[8], addr[64];
	double deadline = hpct__now() + 0.3;
	int rc = get_one(c, "no-such-key-17", buf, sizeof(buf), 0.3);
	cr_expect_eq(rc, HPCT_ETIMEDOUT, "got %s", hpct_errname(rc));
	cr_expect_geq(hpct__now(), deadline - 0.01, "gave up before its deadline");
	const char *msg = hpct_last_error();
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	cr_expect(strstr(msg, "no-such-key-17") && strstr(msg, addr) && strstr(msg, "rank 1"), "%s",
	          msg);
	/* A reply is still owed on that connection: it is unusable now. */
	cr_expect_eq(hpct__std_set(c, "x", "1", 1, 0, hpct__now() + 1), HPCT_ESTATE);
	/* Rank 1 gave up and hung up without BYE: it is lost, and a wait that
	 * cannot be answered at once fails, naming it, rather than waiting for
	 * its deadline (HPCT_ETIMEDOUT). */
	cr_expect_eq(hpct__std_wait_ge(d, "never", 1, hpct__now() + 20), HPCT_EPEERDEAD);
	cr_expect(strstr(hpct_last_error(), "never") &&
	                  strstr(hpct_last_error(), "rank 1 at 127.0.0.1:"),
	          "%s", hpct_last_error());
	hpct__std_client_close(c);
	hpct__std_client_close(d);
	hpct__std_server_stop(s, hpct__now() + 5);

	/* WAITGE's deadline, on a server that lost no rank. */
	s = start(port + 1, 2);
	d = join(port + 1, 0, 2);
	deadline = hpct__now() + 0.2;
	cr_expect_eq(hpct__std_wait_ge(d, "never", 1, deadline), HPCT_ETIMEDOUT);
	cr_expect(strstr(hpct_last_error(), "never"), "%s", hpct_last_error());
	cr_expect_geq(hpct__now(), deadline - 0.01, "gave up before its deadline");
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
	int port, rc, tid;
	struct ht_event trying; /* the client is about to connect */
};

static void *early_client(void *p)
{
	struct conn_arg *a = p;
	struct hpct_std_client *c = NULL;
	a->tid = ht_gettid();
	ht_event_post(&a->trying, 1);
	a->rc = hpct__std_client_connect(HOST, a->port, 1, 2, JOB, NULL, hpct__now() + 60, &c);
	if (a->rc == 0)
		a->rc = hpct__std_set(c, "hi", "x", 1, 0, hpct__now() + 5);
	hpct__std_client_close(c);
	return NULL;
}

static int sleeps(void *p)
{
	return ht_thread_sleeps(((struct conn_arg *)p)->tid);
}

/* The server starts once the client tried and sleeps between attempts
 * (nothing listened: it was refused), and the client gets through. */
Test(stdpath, client_before_server, .timeout = 120)
{
	int port = hpct_test_ports(6);
	struct conn_arg a = { .port = port };
	cr_assert_eq(ht_event_init(&a.trying), 0);
	pthread_t th;
	pthread_create(&th, NULL, early_client, &a);
	cr_assert_eq(ht_event_wait(&a.trying, 1, 30), 0, "the client thread never started");
	cr_assert_eq(ht_wait_for(sleeps, &a, 30), 0, "the client never slept between attempts");
	struct hpct_std_server *s = start(port, 2);
	pthread_join(th, NULL);
	ht_event_destroy(&a.trying);
	cr_expect_eq(a.rc, 0, "%s", hpct_errname(a.rc));
	hpct__std_server_stop(s, hpct__now() + 5);

	/* Nobody there: refused until the deadline, and the message says so. */
	struct hpct_std_client *c = NULL;
	double deadline = hpct__now() + 0.3;
	int rc = hpct__std_client_connect(HOST, port + 1, 3, 4, JOB, NULL, deadline, &c);
	char want[96];
	snprintf(want, sizeof(want), "rank 3: no rendezvous at 127.0.0.1:%d", port + 1);
	cr_expect_eq(rc, HPCT_ETIMEDOUT, "got %s", hpct_errname(rc));
	cr_expect(strstr(hpct_last_error(), want) &&
	                  strstr(hpct_last_error(), "Connection refused"),
	          "%s", hpct_last_error());
	cr_expect_geq(hpct__now(), deadline - 0.01, "gave up before its deadline");
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
