/* Each command of PyTorch's TCPStore (its wire: torch_proto.c) done on
 * hpct's store, for the store served in the rank (torch_store.c).
 *
 * A 2.x client sends WAIT before every GET and blocking QUEUE_POP, and a
 * 1.13 client gives up on one silently; so a WAIT is parked on the key's
 * home in slices, watching the client between them.  A command the version
 * does not have, or a request that does not parse, is logged naming the
 * command and the client and closes the connection (the client raises).
 *
 * PyTorch's store-based barrier (ADD ".../store_based_barrier_key:G" 1,
 * then ADD 0 polled every 10 ms until it reads the world size) is one
 * hpct barrier over the world, done at the ADD 1; both ADDs then answer the
 * world size. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/base/log.h"
#include "bootstrap/base/sock.h"
#include "bootstrap/base/util.h"
#include "bootstrap/shim/torch_store_internal.h"
#include "bootstrap/store/store.h"

#define MAGIC        0x3C85F7CEu
#define WAIT_SLICE_S 0.25 /* a parked WAIT looks at its client this often */

/* ------------------------------------------------------------ commands */

/* A store call failed: the client is told by the closed connection, the
 * log says why (the store's message names key, home rank and host:port). */
static int failed(struct conn *c, const char *what, const char *key, int rc)
{
	hpct__log(HPCT_LOG_WARN, HPCT_SUB_NET,
	          "torch store: client %s (torch %s), %s '%.100s': %s: the connection is closed, "
	          "so PyTorch raises",
	          c->peer, c->p->name, what, key ? key : "",
	          hpct_last_error()[0] ? hpct_last_error() : hpct_strerror(rc));
	return rc;
}

/* SET, APPEND, QUEUE_PUSH: a key and a value, no reply. */
static int key_value(struct conn *c, const char *what,
                     int (*op)(struct hpct_store *, const char *, const void *, size_t))
{
	char *k, *v;
	size_t vl;
	int rc = hpct__torch_recv_str(c, &k, NULL);
	if (rc)
		return rc;
	if ((rc = hpct__torch_recv_str(c, &v, &vl)) == 0) {
		rc = hpct__torch_ensure_store(c, 0);
		if (rc == 0 && (rc = op(hpct__torch_pick(c, k), k, v, vl)) != 0)
			failed(c, what, k, rc);
		free(v);
	}
	free(k);
	return rc;
}

static int do_set(struct conn *c)
{
	return key_value(c, "SET", hpct__store_set);
}

static void free_vals(void **vals, uint64_t n)
{
	for (uint64_t i = 0; vals && i < n; i++)
		free(vals[i]);
	free(vals);
}

void hpct__torch_forget_seen(struct conn *c)
{
	free_vals(c->seen_val, c->seen.n);
	free(c->seen_len);
	hpct__torch_keys_free(&c->seen);
	c->seen_val = NULL;
	c->seen_len = NULL;
}

/* The WAIT just answered fetched exactly these keys, in this order. */
static int seen(const struct conn *c, const struct keys *ks)
{
	if (!c->seen_val || c->seen.n != ks->n)
		return 0;
	for (uint64_t i = 0; i < ks->n; i++)
		if (strcmp(c->seen.k[i], ks->k[i]) != 0)
			return 0;
	return 1;
}

/* Answers a GET or MULTI_GET from what the WAIT fetched (handed over). */
static int reply_seen(struct conn *c)
{
	int rc = 0;
	for (uint64_t i = 0; rc == 0 && i < c->seen.n; i++) {
		rc = hpct__torch_send_bytes(c, c->seen_val[i], c->seen_len[i]);
		free(c->seen_val[i]);
		c->seen_val[i] = NULL;
	}
	return rc;
}

static int reply_value(struct conn *c, void *v, size_t len)
{
	int rc = hpct__torch_send_bytes(c, v, len);
	free(v);
	return rc;
}

static int do_cas(struct conn *c)
{
	char *k, *e = NULL, *d = NULL;
	size_t el, dl;
	int rc = hpct__torch_recv_str(c, &k, NULL);
	if (rc)
		return rc;
	if ((rc = hpct__torch_recv_str(c, &e, &el)) == 0 &&
	    (rc = hpct__torch_recv_str(c, &d, &dl)) == 0 &&
	    (rc = hpct__torch_ensure_store(c, 0)) == 0) {
		void *v = NULL;
		size_t vl = 0;
		rc = hpct__store_cas(hpct__torch_pick(c, k), k, e, el, d, dl, &v, &vl);
		rc = rc ? failed(c, "COMPARE_SET", k, rc) : reply_value(c, v, vl);
	}
	free(d);
	free(e);
	free(k);
	return rc;
}

/* The worker counter: a TCPStore server polls GET "init/" every 10 ms
 * until it reads its world size.  The ADD that makes the count sets a
 * mark, and a read of the counter first waits for that mark a little
 * (INIT_SETTLE_S, never longer: a store made for fewer workers than the
 * world reads its count after that), so the server leaves its loop as
 * the last rank arrives, not up to 10 ms later. */
#define INIT_KEY      "init/"
#define INIT_MARK     "hpct:init/complete"
#define INIT_SETTLE_S 0.02

static void init_counted(struct conn *c, int64_t count)
{
	if (count >= hpct__torch_world_size())
		(void)hpct__store_set(c->all, INIT_MARK, "1", 1);
}

static void init_settle(struct conn *c)
{
	void *v = NULL;
	size_t vl = 0;
	if (hpct__store_get_quiet(c->all, INIT_MARK, INIT_SETTLE_S, &v, &vl) == 0)
		free(v);
}

static int do_get(struct conn *c)
{
	char *k;
	int rc = hpct__torch_recv_str(c, &k, NULL);
	if (rc)
		return rc;
	struct keys one = { .k = &k, .n = 1 };
	if (seen(c, &one)) {
		rc = reply_seen(c);
	} else if ((rc = hpct__torch_ensure_store(c, 0)) == 0) {
		void *v = NULL;
		size_t vl = 0;
		if (strcmp(k, INIT_KEY) == 0)
			init_settle(c);
		rc = hpct__store_get(hpct__torch_pick(c, k), k, -1, &v, &vl);
		rc = rc ? failed(c, "GET", k, rc) : reply_value(c, v, vl);
	}
	free(k);
	return rc;
}

/* ".../store_based_barrier_key:G" */
static int is_barrier_key(const char *key)
{
	static const char tag[] = "store_based_barrier_key:";
	const char *at = strstr(key, tag);
	if (!at || (at > key && at[-1] != '/'))
		return 0;
	const char *g = at + sizeof(tag) - 1;
	if (!*g)
		return 0;
	for (; *g; g++)
		if (*g == '/' || *g == ':')
			return 0;
	return 1;
}

static int do_add(struct conn *c)
{
	char *k;
	int64_t delta;
	int rc = hpct__torch_recv_str(c, &k, NULL);
	if (rc)
		return rc;
	if ((rc = hpct__torch_recv_n(c, &delta, sizeof(delta))) == 0 &&
	    (rc = hpct__torch_ensure_store(c, strcmp(k, INIT_KEY) == 0 && delta == 1)) == 0) {
		int64_t v = 0;
		int brc = 0;
		if (c->p->barrier_shortcut && hpct__torch_world_barrier() && is_barrier_key(k) &&
		    (delta == 0 || delta == 1) && hpct__torch_barrier(c, k, delta == 1, &brc)) {
			v = hpct__torch_world_size(); /* every rank has checked in */
		} else if (brc) {
			rc = failed(c, "the store-based barrier of", k, brc);
		} else {
			rc = hpct__store_add(hpct__torch_pick(c, k), k, delta, &v);
			if (rc)
				failed(c, "ADD", k, rc);
			else if (strcmp(k, INIT_KEY) == 0)
				init_counted(c, v);
		}
		if (rc == 0)
			rc = hpct__torch_send_i64(c, v);
	}
	free(k);
	return rc;
}

static int do_check(struct conn *c)
{
	struct keys ks;
	int rc = hpct__torch_recv_keys(c, &ks);
	if (rc)
		return rc;
	int all = 1;
	struct split sp;
	if ((rc = hpct__torch_ensure_store(c, 0)) == 0 &&
	    (rc = hpct__torch_split_keys(c, &ks, &sp)) == 0) {
		for (int i = 0; i < 2 && rc == 0 && all; i++)
			if (sp.n[i] &&
			    (rc = hpct__store_check(sp.h[i], sp.k[i], sp.n[i], &all)) != 0)
				failed(c, "CHECK", sp.k[i][0], rc);
		hpct__torch_split_free(&sp);
	}
	if (rc == 0)
		rc = hpct__torch_send_u8(c, all ? 0 : 1);
	hpct__torch_keys_free(&ks);
	return rc;
}

/* Values fetched by halves of a split, h[0]'s then h[1]'s, put back in
 * the order the keys were asked (in place); 0, or HPCT_ENOMEM (then
 * nothing moved). */
static int in_order(const struct split *sp, uint64_t n, void **vals, size_t *lens)
{
	if (!sp->of[0] || !sp->of[1])
		return 0; /* all on one handle: in order already */
	void **ov = malloc(n * sizeof(void *));
	size_t *ol = malloc(n * sizeof(size_t));
	if (ov && ol) {
		for (int i = 0, f = 0; i < 2; i++)
			for (int j = 0; j < sp->of[i]; j++, f++) {
				ov[sp->at[i][j]] = vals[f];
				ol[sp->at[i][j]] = lens[f];
			}
		memcpy(vals, ov, n * sizeof(void *));
		memcpy(lens, ol, n * sizeof(size_t));
	}
	int rc = ov && ol ? 0 : HPCT_ENOMEM;
	free(ov);
	free(ol);
	return rc;
}

/* Parks until every key is set: in slices on the keys' homes, watching the
 * client between them (its cancel, or 1.13's next request), and every
 * HPCT_TIMEOUT asking whether a rank is gone (then no one sets them).
 * Answers STOP_WAITING itself; 0, or the failure.  With `keep`, the wait
 * fetches the keys' values, in the one round trip the wait takes anyway,
 * for a GET or MULTI_GET of the same keys that follows (seen_*): PyTorch
 * 2.x gets one key or several with a WAIT and then the GET, and so every
 * home is asked once, not twice. */
static int park(struct conn *c, const char *what, struct keys *ks, int keep)
{
	double limit = hpct__store_timeout(c->st), waited = 0;
	uint64_t n = ks->n ? ks->n : 1;
	struct split sp;
	int rc = hpct__torch_split_keys(c, ks, &sp);
	if (rc)
		return rc;
	void **v = keep ? calloc(n, sizeof(void *)) : NULL;
	size_t *l = keep ? calloc(n, sizeof(size_t)) : NULL;
	if (keep && (!v || !l))
		rc = HPCT_ENOMEM;
	int done = 0; /* the client sent its next request, or its cancel */
	while (rc == 0 && !done) {
		double t0 = hpct__now();
		/* PyTorch's own keys first, then the rest, each in turn until
		 * found (a key once set stays for the wait) */
		for (int i = 0; i < 2 && rc == 0; i++) {
			void **vi = keep ? v + (i ? sp.of[0] : 0) : NULL;
			size_t *li = keep ? l + (i ? sp.of[0] : 0) : NULL;
			if (sp.n[i] &&
			    (rc = keep ? hpct__store_get_many_quiet(sp.h[i], sp.k[i], sp.n[i],
			                                            WAIT_SLICE_S, vi, li)
			               : hpct__store_wait_quiet(sp.h[i], sp.k[i], sp.n[i],
			                                        WAIT_SLICE_S)) == 0)
				sp.n[i] = 0;
		}
		if (rc == 0 && keep && (rc = in_order(&sp, ks->n, v, l)) == 0) {
			hpct__torch_forget_seen(c);
			c->seen = *ks; /* taken */
			*ks = (struct keys){ 0 };
			c->seen_val = v;
			c->seen_len = l;
			v = NULL;
			l = NULL;
		}
		if (rc == 0) {
			rc = hpct__torch_send_u8(c, 0);
			break;
		}
		if (rc != HPCT_ETIMEDOUT) {
			rc = failed(c, what, ks->n ? ks->k[0] : "", rc);
			break;
		}
		rc = 0;
		waited += hpct__now() - t0;
		char dead[600];
		if (waited >= limit && hpct__store_unreachable(c->all, dead, sizeof(dead)) > 0) {
			hpct__log(HPCT_LOG_WARN, HPCT_SUB_NET,
			          "torch store: client %s (torch %s): %s '%.100s' found nothing "
			          "after %.1f s, and ranks whose store does not answer (died or "
			          "never started): %s: the connection is closed, so PyTorch raises",
			          c->peer, c->p->name, what, ks->n ? ks->k[0] : "", waited, dead);
			rc = HPCT_EPEERDEAD;
		} else if (waited >= limit) {
			waited = 0;
		}
		int ready = rc ? 0 : hpct__torch_readable(c);
		if (ready < 0) {
			rc = ready;
		} else if (ready) {
			rc = c->p->interrupted(c);
			rc = rc > 0 ? 0 : rc;
			done = 1;
		}
	}
	hpct__torch_split_free(&sp);
	free_vals(v, keep ? ks->n : 0);
	free(l);
	return rc;
}

static int do_wait(struct conn *c)
{
	struct keys ks;
	int rc = hpct__torch_recv_keys(c, &ks);
	if (rc)
		return rc;
	if ((rc = hpct__torch_ensure_store(c, 0)) == 0) {
		if (ks.n == 1 && strcmp(ks.k[0], INIT_KEY) == 0)
			init_settle(c);
		rc = park(c, "WAIT for", &ks, 1);
	}
	hpct__torch_keys_free(&ks);
	return rc;
}

/* 2.13's Store.barrier(key, world_size): every caller counts itself in;
 * the one that makes the count sets a done key, which all park on. */
static int do_barrier(struct conn *c)
{
	char *k;
	int64_t size;
	int rc = hpct__torch_recv_str(c, &k, NULL);
	if (rc)
		return rc;
	if ((rc = hpct__torch_recv_n(c, &size, sizeof(size))) == 0 &&
	    (rc = hpct__torch_ensure_store(c, 0)) == 0) {
		size_t kl = strlen(k);
		char *count = malloc(kl + 32), *done = malloc(kl + 32);
		int64_t n = 0;
		if (!count || !done) {
			rc = HPCT_ENOMEM;
		} else {
			sprintf(count, "%s/hpct_barrier_count", k);
			sprintf(done, "%s/hpct_barrier_done", k);
			struct hpct_store *h = hpct__torch_pick(c, done);
			if ((rc = hpct__store_add(h, count, 1, &n)) != 0)
				failed(c, "BARRIER", k, rc);
			else if (n == size && (rc = hpct__store_set(h, done, "1", 1)) != 0)
				failed(c, "BARRIER", k, rc);
		}
		if (rc == 0) {
			struct keys ks = { &done, 1 };
			rc = park(c, "BARRIER", &ks, 0);
		}
		free(count);
		free(done);
	}
	free(k);
	return rc;
}

static int do_numkeys(struct conn *c)
{
	int64_t n = 0, mine = 0;
	int rc = hpct__torch_ensure_store(c, 0);
	if (rc == 0 && ((rc = hpct__store_num_keys(c->all, &n)) != 0 ||
	                (rc = hpct__store_num_keys(c->st, &mine)) != 0))
		failed(c, "GETNUMKEYS", NULL, rc);
	n += mine;
	return rc ? rc : hpct__torch_send_i64(c, n);
}

static int do_delete(struct conn *c)
{
	char *k;
	int rc = hpct__torch_recv_str(c, &k, NULL);
	if (rc)
		return rc;
	int existed = 0;
	if ((rc = hpct__torch_ensure_store(c, 0)) == 0 &&
	    (rc = hpct__store_delete(hpct__torch_pick(c, k), k, &existed)) != 0)
		failed(c, "DELETE_KEY", k, rc);
	free(k);
	return rc ? rc : hpct__torch_send_i64(c, existed ? 1 : 0);
}

static int do_append(struct conn *c)
{
	return key_value(c, "APPEND", hpct__store_append);
}

static int do_mget(struct conn *c)
{
	struct keys ks;
	int rc = hpct__torch_recv_keys(c, &ks);
	if (rc)
		return rc;
	if (seen(c, &ks)) {
		hpct__torch_keys_free(&ks);
		return reply_seen(c);
	}
	void **vals = calloc(ks.n ? ks.n : 1, sizeof(void *));
	size_t *lens = calloc(ks.n ? ks.n : 1, sizeof(size_t));
	if (!vals || !lens)
		rc = HPCT_ENOMEM;
	struct split sp;
	if (rc == 0 && (rc = hpct__torch_ensure_store(c, 0)) == 0 &&
	    (rc = hpct__torch_split_keys(c, &ks, &sp)) == 0) {
		for (int i = 0; i < 2 && rc == 0; i++) {
			void **v = vals + (i ? sp.n[0] : 0);
			size_t *l = lens + (i ? sp.n[0] : 0);
			if (sp.n[i] &&
			    (rc = hpct__store_get_many(sp.h[i], sp.k[i], sp.n[i], -1, v, l)) != 0)
				failed(c, "MULTI_GET", sp.k[i][0], rc);
		}
		if (rc == 0)
			rc = in_order(&sp, ks.n, vals, lens);
		hpct__torch_split_free(&sp);
	}
	for (uint64_t i = 0; rc == 0 && i < ks.n; i++) {
		rc = reply_value(c, vals[i], lens[i]);
		vals[i] = NULL;
	}
	free_vals(vals, ks.n);
	free(lens);
	hpct__torch_keys_free(&ks);
	return rc;
}

static int do_mset(struct conn *c)
{
	uint64_t n;
	int rc = hpct__torch_recv_u64(c, &n);
	if (rc)
		return rc;
	if (n > MAX_KEYS)
		return HPCT_EPROTO;
	for (uint64_t i = 0; rc == 0 && i < n; i++)
		rc = key_value(c, "MULTI_SET", hpct__store_set);
	return rc;
}

/* A CANCEL_WAIT after the WAIT was answered: the client reads
 * STOP_WAITING, then this. */
static int do_cancel(struct conn *c)
{
	return hpct__torch_send_u8(c, 1);
}

static int do_ping(struct conn *c)
{
	uint32_t nonce;
	int rc = hpct__torch_recv_n(c, &nonce, sizeof(nonce));
	return rc ? rc : hpct__torch_send_n(c, &nonce, sizeof(nonce));
}

static int do_validate(struct conn *c)
{
	uint32_t magic;
	int rc = hpct__torch_recv_n(c, &magic, sizeof(magic));
	if (rc)
		return rc;
	if (magic != MAGIC) {
		HPCT_WARN(HPCT_SUB_NET,
		          "torch store: client %s: VALIDATE with magic 0x%08x, not 0x%08x (torch "
		          "%s): connection closed%s",
		          c->peer, magic, MAGIC, c->p->name, hpct__torch_proto_advice(c->p));
		return HPCT_EPROTO;
	}
	return 0;
}

static int do_qpush(struct conn *c)
{
	return key_value(c, "QUEUE_PUSH", hpct__store_queue_push);
}

/* Reply: i64 items taken (1, or 0 when the queue was empty: the client
 * raises QueueEmptyError), then the item.  A pop after a WAIT on its key
 * (block=True) may find it taken by another client first: also 0. */
static int do_qpop(struct conn *c)
{
	char *k;
	int rc = hpct__torch_recv_str(c, &k, NULL);
	if (rc)
		return rc;
	int there = 0;
	const char *one[1] = { k };
	if ((rc = hpct__torch_ensure_store(c, 0)) == 0 &&
	    (rc = hpct__store_check(hpct__torch_pick(c, k), one, 1, &there)) != 0)
		failed(c, "QUEUE_POP", k, rc);
	if (rc == 0 && there) {
		void *v = NULL;
		size_t vl = 0;
		rc = hpct__store_queue_pop(hpct__torch_pick(c, k), k, 0.05, &v, &vl);
		if (rc == 0) {
			rc = hpct__torch_send_i64(c, 1);
			rc = rc ? (free(v), rc) : reply_value(c, v, vl);
		} else if (rc == HPCT_ETIMEDOUT) {
			rc = hpct__torch_send_i64(c, 0);
		} else {
			failed(c, "QUEUE_POP", k, rc);
		}
	} else if (rc == 0) {
		rc = hpct__torch_send_i64(c, 0);
	}
	free(k);
	return rc;
}

static int do_qlen(struct conn *c)
{
	char *k;
	int rc = hpct__torch_recv_str(c, &k, NULL);
	if (rc)
		return rc;
	int64_t n = 0;
	if ((rc = hpct__torch_ensure_store(c, 0)) == 0 &&
	    (rc = hpct__store_queue_len(hpct__torch_pick(c, k), k, &n)) != 0)
		failed(c, "QUEUE_LEN", k, rc);
	free(k);
	return rc ? rc : hpct__torch_send_i64(c, n);
}

static int do_list(struct conn *c)
{
	char **keys[2] = { NULL, NULL };
	int64_t n[2] = { 0, 0 };
	int rc = hpct__torch_ensure_store(c, 0);
	if (rc == 0 && ((rc = hpct__store_list(c->all, &keys[0], &n[0])) != 0 ||
	                (rc = hpct__store_list(c->st, &keys[1], &n[1])) != 0))
		failed(c, "LIST_KEYS", NULL, rc);
	if (rc == 0)
		rc = hpct__torch_send_i64(c, n[0] + n[1]);
	for (int h = 0; h < 2; h++) {
		for (int64_t i = 0; i < n[h]; i++) {
			if (rc == 0)
				rc = hpct__torch_send_bytes(c, keys[h][i], strlen(keys[h][i]));
			free(keys[h][i]);
		}
		free(keys[h]);
	}
	return rc;
}

/* A command this store does not offer: said, and the connection closed. */
static int refuse(struct conn *c, enum op op, unsigned code)
{
	if (op == OP_WATCH)
		hpct__log(HPCT_LOG_WARN, HPCT_SUB_NET,
		          "torch store: client %s (torch %s) asked for WATCH_KEY: hpct's rootless "
		          "store has no server to watch at; run with HPCT_USE_ROOTLESS=0 for "
		          "PyTorch's own TCPStore",
		          c->peer, c->p->name);
	else
		hpct__log(HPCT_LOG_WARN, HPCT_SUB_NET,
		          "torch store: client %s sent command %u, which torch %s's TCPStore "
		          "protocol does not have: connection closed%s",
		          c->peer, code, c->p->name, hpct__torch_proto_advice(c->p));
	return HPCT_EPROTO;
}

static int (*const handlers[OP_COUNT])(struct conn *) = {
	[OP_VALIDATE] = do_validate, [OP_SET] = do_set,         [OP_CAS] = do_cas,
	[OP_GET] = do_get,           [OP_ADD] = do_add,         [OP_CHECK] = do_check,
	[OP_WAIT] = do_wait,         [OP_NUMKEYS] = do_numkeys, [OP_DELETE] = do_delete,
	[OP_APPEND] = do_append,     [OP_MGET] = do_mget,       [OP_MSET] = do_mset,
	[OP_CANCEL] = do_cancel,     [OP_PING] = do_ping,       [OP_QPUSH] = do_qpush,
	[OP_QPOP] = do_qpop,         [OP_QLEN] = do_qlen,       [OP_LIST] = do_list,
	[OP_BARRIER] = do_barrier,
};

int hpct__torch_command(struct conn *c, enum op op, unsigned code)
{
	return handlers[op] ? handlers[op](c) : refuse(c, op, code);
}
