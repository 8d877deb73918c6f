/* The standard path's rendezvous store, continued (test_stdpath.c): raw
 * and malformed clients, a server that waits for its clients at stop, a
 * lost rank failing the waiters, the collectives leaving no keys, and a
 * shared secret. */
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

#include "bootstrap/base/bytes.h"
#include "bootstrap/base/util.h"
#include "bootstrap/stdpath/stdpath.h"
#include "hpct/hpct.h"
#include "tests/harness.h"
#include "tests/stdpath_common.h"

/* ---- malformed and slow clients ---- */

static int raw_connect(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	inet_pton(AF_INET, HOST, &sa.sin_addr);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert(fd >= 0);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

static void raw_hello(int fd, int rank, int size)
{
	unsigned char h[21] = { HPCT_STD_HELLO };
	hpct__put32(h + 1, (uint32_t)rank);
	hpct__put32(h + 5, HPCT_STD_MAGIC);
	hpct__put32(h + 9, (uint32_t)size);
	hpct__put32(h + 13, (uint32_t)(JOB >> 32));
	hpct__put32(h + 17, (uint32_t)JOB);
	cr_assert_eq(send(fd, h, sizeof(h), MSG_NOSIGNAL), (ssize_t)sizeof(h));
	unsigned char st[4];
	cr_assert_eq(recv(fd, st, 4, MSG_WAITALL), 4);
	cr_assert_eq(memcmp(st, "\0\0\0\0", 4), 0, "HELLO refused");
}

/* Reads until the server closes; returns the bytes read, -1 if it has not
 * closed after 30 s (a hang guard). */
static ssize_t read_to_eof(int fd, unsigned char *buf, size_t cap)
{
	size_t n = 0;
	double dl = hpct__now() + 30;
	while (hpct__now() < dl) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 100) <= 0)
			continue;
		ssize_t r = recv(fd, buf + n, cap - n, 0);
		if (r <= 0)
			return (ssize_t)n;
		n += (size_t)r;
	}
	return -1;
}

Test(stdpath, malformed_request_closes_only_that_client, .timeout = 30)
{
	int port = hpct_test_ports(8);
	struct hpct_std_server *s = start(port, 4);
	struct hpct_std_client *a = join(port, 0, 4);
	double dl = hpct__now() + 5;
	unsigned char buf[1024];

	/* A key length of 4 GiB: answered HPCT_EPROTO, then closed. */
	int bad = raw_connect(port);
	raw_hello(bad, 1, 4);
	unsigned char req[9] = { HPCT_STD_SET };
	hpct__put32(req + 1, 1);
	hpct__put32(req + 5, 0xfffffff0u);
	send(bad, req, sizeof(req), MSG_NOSIGNAL);
	ssize_t n = read_to_eof(bad, buf, sizeof(buf));
	cr_expect_geq(n, 4, "no close or no reply (%zd)", n);
	cr_expect_eq(
	        (int32_t)((uint32_t)buf[0] << 24 | (uint32_t)buf[1] << 16 | buf[2] << 8 | buf[3]),
	        HPCT_EPROTO);
	close(bad);

	/* Garbage before HELLO: closed too. */
	int junk = raw_connect(port);
	send(junk, "\xee\xee\xee\xee\xee\xee", 6, MSG_NOSIGNAL);
	cr_expect_geq(read_to_eof(junk, buf, sizeof(buf)), 0, "junk client not closed");
	close(junk);

	/* A client stalled mid-request does not hold up anyone else. */
	int slow = raw_connect(port);
	raw_hello(slow, 2, 4);
	unsigned char set[9 + 4 + 8 + 3] = { HPCT_STD_SET };
	hpct__put32(set + 1, 2);
	hpct__put32(set + 5, 4);
	memcpy(set + 9, "slow", 4);
	hpct__put32(set + 13, 0);
	hpct__put32(set + 17, 3);
	memcpy(set + 21, "abc", 3);
	send(slow, set, 7, MSG_NOSIGNAL);
	char v[4] = "";
	cr_expect_eq(hpct__std_set(a, "fast", "ok", 3, 0, dl), 0, "%s", hpct_last_error());
	cr_expect_eq(get_one(a, "fast", v, 3, 5), 0, "%s", hpct_last_error());
	cr_expect_str_eq(v, "ok");
	for (size_t i = 7; i < sizeof(set); i++)
		send(slow, set + i, 1, MSG_NOSIGNAL); /* the rest, a byte at a time */
	unsigned char st[4];
	cr_expect_eq(recv(slow, st, 4, MSG_WAITALL), 4);
	cr_expect_eq(memcmp(st, "\0\0\0\0", 4), 0);
	cr_expect_eq(get_one(a, "slow", v, 3, 5), 0, "%s", hpct_last_error());
	cr_expect_eq(memcmp(v, "abc", 3), 0);
	close(slow);

	/* Rank 1's slot was freed when its connection was dropped. */
	struct hpct_std_client *b = join(port, 1, 4);
	int64_t x;
	cr_expect_eq(hpct__std_add(b, "c", 2, &x, dl), 0, "%s", hpct_last_error());
	hpct__std_client_close(b);
	hpct__std_client_close(a);
	hpct__std_server_stop(s, hpct__now() + 5);
}

/* ---- stop waits for clients; a server gone mid-request ---- */

struct stop_arg {
	struct hpct_std_server *s;
	double deadline;
	int tid, done; /* done: stop returned (atomic) */
	struct ht_event stopping;
};

static void *stop_thread(void *p)
{
	struct stop_arg *a = p;
	a->tid = ht_gettid();
	ht_event_post(&a->stopping, 1);
	hpct__std_server_stop(a->s, a->deadline);
	__atomic_store_n(&a->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

static int stop_sleeps(void *p)
{
	return ht_thread_sleeps(((struct stop_arg *)p)->tid);
}

/* Stop, called while a client is connected, serves it until it leaves,
 * and returns then (before its deadline); one that never leaves is dropped
 * at the deadline, not before. */
Test(stdpath, stop_waits_for_clients, .timeout = 120)
{
	int port = hpct_test_ports(9);
	struct stop_arg st = { .s = start(port, 2), .deadline = hpct__now() + 60 };
	struct hpct_std_client *a = join(port, 0, 2);
	cr_assert_eq(ht_event_init(&st.stopping), 0);
	pthread_t th;
	pthread_create(&th, NULL, stop_thread, &st);
	cr_assert_eq(ht_event_wait(&st.stopping, 1, 30), 0, "the stop thread never started");
	cr_assert_eq(ht_wait_for(stop_sleeps, &st, 30), 0, "stop never blocked");
	cr_expect_eq(hpct__std_set(a, "still", "here", 4, 0, hpct__now() + 5), 0,
	             "server stopped serving while stopping: %s", hpct_last_error());
	cr_expect_eq(__atomic_load_n(&st.done, __ATOMIC_SEQ_CST), 0,
	             "stop returned while a client was connected");
	hpct__std_client_close(a);
	pthread_join(th, NULL);
	ht_event_destroy(&st.stopping);
	cr_expect_lt(hpct__now(), st.deadline, "stop waited for its deadline, not for the client");

	/* A client that never leaves: stop gives up at its deadline. */
	struct hpct_std_server *s2 = start(port + 1, 2);
	struct hpct_std_client *b = join(port + 1, 1, 2);
	double deadline = hpct__now() + 0.3;
	hpct__std_server_stop(s2, deadline);
	cr_expect_geq(hpct__now(), deadline - 0.01, "stop gave up before its deadline");
	char buf[4];
	cr_expect_eq(get_one(b, "k", buf, 4, 20), HPCT_EPEERDEAD, "%s", hpct_last_error());
	hpct__std_client_close(b);

	/* The server goes away while a client waits: HPCT_EPEERDEAD, not the
	 * wait's deadline (HPCT_ETIMEDOUT). */
	struct hpct_std_server *s3 = start(port + 2, 2);
	struct wait_arg w = { .c = join(port + 2, 0, 2), .key = "never" };
	pthread_create(&th, NULL, mget_thread, &w);
	struct keys_arg k = { s3, 1 };
	cr_assert_eq(ht_wait_for(server_holds, &k, 30), 0, "the MGET never reached the server");
	hpct__std_server_stop(s3, hpct__now());
	pthread_join(th, NULL);
	char addr[64];
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port + 2);
	cr_expect_eq(w.rc, HPCT_EPEERDEAD, "got %s", hpct_errname(w.rc));
	cr_expect(strstr(w.msg, addr) && strstr(w.msg, "never"), "%s", w.msg);
	hpct__std_client_close(w.c);
}

/* The standard path's collectives leave nothing in the store once every rank
 * is through them: a long job does not grow rank 0's memory. */
#include "bootstrap/world.h"

static void coll_env(int r, void *arg)
{
	ht_setenv_world(r, 6, 2, *(int *)arg, 0, 20);
}

static int coll_rank(int r, void *arg)
{
	(void)arg;
	hpct_world *w;
	if (hpct_world_create(&w) != 0)
		return 2;
	hpct_group *g = hpct_world_group(w);
	uint64_t items[6], out[6];
	for (int round = 0; round < 20; round++) {
		uint64_t mine = (uint64_t)r * 1000 + (uint64_t)round;
		if (hpct_allgather(g, &mine, sizeof(mine), out) != 0)
			return 3;
		for (int i = 0; i < 6; i++)
			if (out[i] != (uint64_t)i * 1000 + (uint64_t)round)
				return 4;
		if (hpct_barrier(g) != 0)
			return 5;
		uint64_t b = r == round % 6 ? mine : 0;
		if (hpct_broadcast(g, &b, sizeof(b), round % 6) != 0 ||
		    b != (uint64_t)(round % 6) * 1000 + (uint64_t)round)
			return 6;
		for (int j = 0; j < 6; j++)
			items[j] = (uint64_t)r * 10 + (uint64_t)j;
		if (hpct_alltoall(g, items, sizeof(uint64_t), out) != 0)
			return 7;
		for (int i = 0; i < 6; i++)
			if (out[i] != (uint64_t)i * 10 + (uint64_t)r)
				return 8;
	}
	int rc = 0;
	if (r == 0) {
		/* the others may still be reading the last keys */
		double until = hpct__now() + 30; /* a hang guard */
		while (hpct__std_server_keys(w->server) > 0 && hpct__now() < until)
			usleep(1000);
		if (hpct__std_server_keys(w->server) != 0) {
			fprintf(stderr, "store still holds %zu keys\n",
			        hpct__std_server_keys(w->server));
			rc = 9;
		}
	}
	hpct_world_destroy(w);
	return rc;
}

Test(stdpath, collectives_leave_no_keys, .timeout = 120)
{
	int port = hpct_test_ports(10), codes[6];
	int bad = ht_spawn(6, coll_env, coll_rank, &port, 100, NULL, codes);
	cr_assert_eq(bad, 0, "%s", ht_describe(codes, 6));
}

/* ---- a rank lost mid-wait ---- */

struct waitge_arg {
	struct hpct_std_client *c;
	int rc, done;
	char msg[1024];
};

static void *waitge_thread(void *p)
{
	struct waitge_arg *w = p;
	w->rc = hpct__std_wait_ge(w->c, "n", 5, hpct__now() + 30);
	snprintf(w->msg, sizeof(w->msg), "%s", hpct_last_error());
	__atomic_store_n(&w->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

/* Rank 3 says HELLO and then its socket is reset, while rank 0 waits in an
 * MGET and rank 2 in a WAITGE (both parked on the server: their keys
 * exist): both are answered HPCT_EPEERDEAD naming rank 3, not at their
 * deadline.  Rank 1's BYE before that answered nobody: the server took it
 * (rank 1 may join again) and both still wait. */
Test(stdpath, lost_rank_fails_waiters_fast, .timeout = 120)
{
	int port = hpct_test_ports(11);
	struct hpct_std_server *s = start(port, 4);
	struct hpct_std_client *a = join(port, 0, 4), *b = join(port, 1, 4), *c = join(port, 2, 4);
	int dead = raw_connect(port);
	raw_hello(dead, 3, 4);
	struct wait_arg w = { .c = a, .key = "k" };
	struct waitge_arg g = { .c = c };
	pthread_t th, tg;
	pthread_create(&th, NULL, mget_thread, &w);
	pthread_create(&tg, NULL, waitge_thread, &g);
	struct keys_arg k = { s, 2 };
	cr_assert_eq(ht_wait_for(server_holds, &k, 30), 0, "the MGET and the WAITGE never parked");
	hpct__std_client_close(b); /* BYE: not lost */
	/* the server took the BYE once rank 1's slot is free again */
	double until = hpct__now() + 30;
	b = NULL;
	while (!b && hpct__now() < until)
		if (hpct__std_client_connect(HOST, port, 1, 4, JOB, NULL, until, &b) !=
		    HPCT_EREFUSED)
			cr_assert_not_null(b, "rank 1 again: %s", hpct_last_error());
	cr_assert_not_null(b, "rank 1's BYE was never taken: %s", hpct_last_error());
	cr_expect_eq(__atomic_load_n(&w.done, __ATOMIC_SEQ_CST) +
	                     __atomic_load_n(&g.done, __ATOMIC_SEQ_CST),
	             0, "rank 1's BYE answered a waiter: %s / %s", w.msg, g.msg);
	/* SO_LINGER 0: close sends a reset, as a killed process's socket may */
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };
	setsockopt(dead, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(dead);
	pthread_join(th, NULL);
	pthread_join(tg, NULL);
	char want[64];
	snprintf(want, sizeof(want), "127.0.0.1:%d", port);
	cr_expect_eq(w.rc, HPCT_EPEERDEAD, "got %s: %s", hpct_errname(w.rc), w.msg);
	cr_expect(strstr(w.msg, "rank 0: MGET of 'k'") && strstr(w.msg, want) &&
	                  strstr(w.msg, "rank 3 at 127.0.0.1:") &&
	                  strstr(w.msg, "left without saying goodbye") &&
	                  strstr(w.msg, "Connection reset"),
	          "%s", w.msg);
	cr_expect(!strstr(w.msg, "rank 1"), "%s", w.msg);
	cr_expect_eq(g.rc, HPCT_EPEERDEAD, "got %s: %s", hpct_errname(g.rc), g.msg);
	cr_expect(strstr(g.msg, "rank 2: WAITGE of 'n'") && strstr(g.msg, "rank 3 at 127.0.0.1:"),
	          "%s", g.msg);

	/* The clients stay usable: what can complete completes, what would
	 * wait fails at once (HPCT_EPEERDEAD, not its deadline's HPCT_ETIMEDOUT). */
	double dl = hpct__now() + 20;
	char buf[4];
	int64_t v = 0;
	cr_expect_eq(hpct__std_set(a, "there", "abc", 4, 0, dl), 0, "%s", hpct_last_error());
	cr_expect_eq(get_one(c, "there", buf, 4, 20), 0, "%s", hpct_last_error());
	cr_expect_str_eq(buf, "abc");
	cr_expect_eq(get_one(c, "still-missing", buf, 4, 20), HPCT_EPEERDEAD);
	cr_expect(strstr(hpct_last_error(), "rank 3 at 127.0.0.1:"), "%s", hpct_last_error());
	cr_expect_eq(hpct__std_add(a, "n", 5, &v, dl), 0, "%s", hpct_last_error());
	cr_expect_eq(v, 5);
	cr_expect_eq(hpct__std_wait_ge(c, "n", 5, dl), 0, "%s", hpct_last_error());
	cr_expect_eq(hpct__std_wait_ge(a, "n", 6, dl), HPCT_EPEERDEAD);
	/* no entry left behind by the answered waits: "there" and "n" only */
	cr_expect_eq(hpct__std_server_keys(s), 2);
	hpct__std_client_close(a);
	hpct__std_client_close(b);
	hpct__std_client_close(c);
	double deadline = hpct__now() + 20;
	hpct__std_server_stop(s, deadline);
	cr_expect_lt(hpct__now(), deadline, "the clients' BYE after HPCT_EPEERDEAD was not seen");
}

/* ---- a shared secret ---- */

/* With a secret every client proves it before HELLO: the right one at the
 * right epoch is served; none, another secret or another epoch is
 * refused, each named, and served clients go on. */
Test(stdpath, with_a_secret_only_provers_are_served, .timeout = 30)
{
	int port = hpct_test_ports(12);
	struct hpct_auth_key key = { .secret = "s3cret", .len = 6, .epoch = 3 };
	struct hpct_std_server *s = NULL;
	cr_assert_eq(hpct__std_server_start(HOST, port, 3, JOB, &key, &s), 0, "%s",
	             hpct_last_error());
	double dl = hpct__now() + 5;
	struct hpct_std_client *a = NULL, *b = NULL, *c = NULL;
	cr_assert_eq(hpct__std_client_connect(HOST, port, 0, 3, JOB, &key, dl, &a), 0, "%s",
	             hpct_last_error());

	cr_expect_eq(hpct__std_client_connect(HOST, port, 1, 3, JOB, NULL, dl, &c), HPCT_EREFUSED);
	cr_expect(strstr(hpct_last_error(),
	                 "has a shared secret (HPCT_SECRET) and this rank has none"),
	          "%s", hpct_last_error());
	struct hpct_auth_key other = { .secret = "another", .len = 7, .epoch = 3 };
	cr_expect_eq(hpct__std_client_connect(HOST, port, 1, 3, JOB, &other, dl, &c),
	             HPCT_EREFUSED);
	cr_expect(strstr(hpct_last_error(), "gave a wrong proof of the shared secret"), "%s",
	          hpct_last_error());
	struct hpct_auth_key stale = { .secret = "s3cret", .len = 6, .epoch = 2 };
	cr_expect_eq(hpct__std_client_connect(HOST, port, 1, 3, JOB, &stale, dl, &c),
	             HPCT_EREFUSED);
	cr_expect(strstr(hpct_last_error(), "refused us: another epoch"), "%s", hpct_last_error());
	cr_expect_null(c);

	cr_assert_eq(hpct__std_client_connect(HOST, port, 1, 3, JOB, &key, dl, &b), 0, "%s",
	             hpct_last_error());
	int64_t v;
	cr_expect_eq(hpct__std_add(a, "n", 2, &v, dl), 0, "%s", hpct_last_error());
	cr_expect_eq(hpct__std_add(b, "n", 3, &v, dl), 0, "%s", hpct_last_error());
	cr_expect_eq(v, 5);
	hpct__std_client_close(a);
	hpct__std_client_close(b);
	hpct__std_server_stop(s, hpct__now() + 5);
}
