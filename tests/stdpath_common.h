/* What the standard path's test programs share (test_stdpath.c,
 * test_stdpath_wire.c): a server, a client joined to it, one key fetched. */
#ifndef HPCT_TESTS_STDPATH_COMMON_H
#define HPCT_TESTS_STDPATH_COMMON_H

#include <criterion/criterion.h>
#include <stddef.h>
#include <stdio.h>

#include "bootstrap/base/util.h"
#include "bootstrap/stdpath/stdpath.h"
#include "hpct/hpct.h"

#define HOST "127.0.0.1"
#define JOB  0x6a6f622d31323334ULL

static inline struct hpct_std_server *start(int port, int nranks)
{
	struct hpct_std_server *s = NULL;
	int rc = hpct__std_server_start(HOST, port, nranks, JOB, NULL, &s);
	cr_assert_eq(rc, 0, "server on %d: %s", port, hpct_last_error());
	return s;
}

static inline struct hpct_std_client *join(int port, int rank, int size)
{
	struct hpct_std_client *c = NULL;
	int rc = hpct__std_client_connect(HOST, port, rank, size, JOB, NULL, hpct__now() + 10, &c);
	cr_assert_eq(rc, 0, "rank %d: %s", rank, hpct_last_error());
	return c;
}

static inline int get_one(struct hpct_std_client *c, const char *key, void *buf, size_t len,
                          double secs)
{
	void *bufs[1] = { buf };
	return hpct__std_mget(c, &key, 1, bufs, &len, hpct__now() + secs);
}

struct wait_arg {
	struct hpct_std_client *c;
	const char *key;
	char buf[8];
	int rc, done;   /* done: the wait returned (atomic) */
	char msg[1024]; /* hpct_last_error() is per thread */
};

/* For ht_wait_for(): the server holds at least `keys` entries.  A key
 * someone waits on exists (absent) from the moment the server parked the
 * wait: this is how a test sees that a wait reached the server. */
struct keys_arg {
	const struct hpct_std_server *s;
	size_t keys;
};

static inline int server_holds(void *p)
{
	const struct keys_arg *k = p;
	return hpct__std_server_keys(k->s) >= k->keys;
}

static inline void *mget_thread(void *p)
{
	struct wait_arg *w = p;
	w->rc = get_one(w->c, w->key, w->buf, sizeof(w->buf), 30);
	snprintf(w->msg, sizeof(w->msg), "%s", hpct_last_error());
	__atomic_store_n(&w->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

#endif
