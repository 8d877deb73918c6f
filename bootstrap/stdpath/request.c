/* The rendezvous server's requests: the parser, a state machine fed by
 * whatever bytes arrived, and the operations (HELLO, SET, MGET, ADD, WAITGE,
 * BYE) it runs once a request is whole. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/base/bytes.h"
#include "bootstrap/base/log.h"
#include "bootstrap/base/util.h"
#include "bootstrap/stdpath/server_internal.h"
#include "bootstrap/stdpath/stdpath.h"
#include "hpct/hpct.h"

static void refuse(struct conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void refuse(struct conn *c, const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	HPCT_WARN(HPCT_SUB_STD, "rendezvous %s: refused %s claiming rank %u: %s", c->s->addr,
	          c->peer, c->reqrank, msg);
	c->closing = 1;
	hpct__stdsrv_reply_err(c, HPCT_EREFUSED, msg);
}

/* A key that does not exist yet would pass the store's key limit: 0, or
 * refused (and the request's bytes to be dropped). */
static int key_room(struct conn *c, const char *op, const char *k, uint32_t klen)
{
	struct hpct_std_server *s = c->s;
	if (s->tab.count < s->lim.store_keys || hpct__stdsrv_tab_find(&s->tab, k, klen))
		return 0;
	hpct__stdsrv_over_limit(c, HPCT_ENOMEM,
	                        "%s of '%.*s': the store holds %zu keys, its limit "
	                        "(HPCT_STD_STORE_KEYS)",
	                        op, (int)(klen < KEY_SHOWN ? klen : KEY_SHOWN), k,
	                        (size_t)s->tab.count);
	return -1;
}

/* A rank's replacement says HELLO while the connection of the process it
 * replaces may not have been seen to close yet (it was killed a moment
 * ago): 1 when that connection has ended (end of stream or an error),
 * with the error kept for the log. */
static int old_conn_gone(struct conn *old)
{
	char b;
	ssize_t k = recv(old->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	if (k == 0)
		return 1;
	if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
		old->err = errno;
		return 1;
	}
	return 0;
}

static void exec_hello(struct conn *c, const unsigned char *p)
{
	struct hpct_std_server *s = c->s;
	uint32_t magic = hpct__get32(p), size = hpct__get32(p + 4), r = c->reqrank;
	uint64_t job = hpct__get64(p + 8);
	if (magic != HPCT_STD_MAGIC) {
		hpct__stdsrv_conn_bad(c, "not an hpct rendezvous client (magic 0x%08x)", magic);
		return;
	}
	if (job != s->job) {
		refuse(c,
		       "job hash %016llx differs from the rendezvous's %016llx (another job, or a "
		       "stale rank of an earlier run?)",
		       (unsigned long long)job, (unsigned long long)s->job);
		return;
	}
	if (size != (uint32_t)s->nranks) {
		refuse(c, "world size %u differs from the rendezvous's %d", size, s->nranks);
		return;
	}
	if (r >= (uint32_t)s->nranks) {
		refuse(c, "rank %u is out of range for world size %d", r, s->nranks);
		return;
	}
	if (s->by_rank[r] && old_conn_gone(s->by_rank[r]))
		hpct__stdsrv_conn_close(s->by_rank[r]); /* lost: its waits fail first */
	if (s->by_rank[r]) {
		refuse(c, "rank %u is already connected from %s", r, s->by_rank[r]->peer);
		return;
	}
	c->rank = (int)r;
	s->by_rank[r] = c;
	hpct__stdsrv_early_done(c);
	HPCT_TRACE(HPCT_SUB_STD, "rendezvous %s: rank %u joined from %s", s->addr, r, c->peer);
	if (++s->joined == s->nranks)
		HPCT_INFO(HPCT_SUB_STD, "rendezvous %s: all %d ranks connected after %.3f s",
		          s->addr, s->nranks, hpct__now() - s->t0);
	hpct__stdsrv_reply_status(c, 0);
}

static void exec_set(struct conn *c)
{
	struct entry *e = hpct__stdsrv_tab_get(&c->s->tab, hpct__stdsrv_ckey(c, 0), c->klens[0]);
	if (!e) {
		hpct__stdsrv_conn_close(c);
		return;
	}
	int was_absent = !e->present;
	hpct__stdsrv_entry_charge(&c->s->tab, e, -1);
	free(e->val);
	e->val = c->val; /* the entry owns the value from here */
	c->val = NULL;
	c->s->inflight -= c->vcap;
	c->vcap = 0;
	e->vlen = c->vlen;
	e->present = 1;
	hpct__stdsrv_entry_charge(&c->s->tab, e, c->rank);
	e->readers_left = c->readers;
	hpct__stdsrv_req_done(c);
	hpct__stdsrv_reply_status(c, 0);
	hpct__stdsrv_wake(e, was_absent);
}

static void exec_add(struct conn *c)
{
	char why[256];
	if (key_room(c, "ADD", hpct__stdsrv_ckey(c, 0), c->klens[0]) != 0) {
		hpct__stdsrv_req_done(c);
		return;
	}
	if (!hpct__stdsrv_tab_find(&c->s->tab, hpct__stdsrv_ckey(c, 0), c->klens[0]) &&
	    hpct__stdsrv_store_room(c, ENTRY_COST(c->klens[0]) + 8, why, sizeof(why)) != 0) {
		hpct__stdsrv_over_limit(c, HPCT_ENOMEM, "ADD of '%.*s': %s",
		                        (int)(c->klens[0] < KEY_SHOWN ? c->klens[0] : KEY_SHOWN),
		                        hpct__stdsrv_ckey(c, 0), why);
		hpct__stdsrv_req_done(c);
		return;
	}
	struct entry *e = hpct__stdsrv_tab_get(&c->s->tab, hpct__stdsrv_ckey(c, 0), c->klens[0]);
	if (!e) {
		hpct__stdsrv_conn_close(c);
		return;
	}
	if (e->present && e->vlen != 8) {
		char msg[KEY_SHOWN + 80];
		snprintf(msg, sizeof(msg), "key '%.*s' holds a %u-byte value, not a counter",
		         (int)(e->klen < KEY_SHOWN ? e->klen : KEY_SHOWN), e->key, e->vlen);
		hpct__stdsrv_req_done(c);
		hpct__stdsrv_reply_err(c, HPCT_EINVAL, msg);
		return;
	}
	int was_absent = !e->present;
	if (was_absent) {
		e->val = calloc(1, 8);
		if (!e->val) {
			hpct__stdsrv_entry_clear(&c->s->tab, e);
			hpct__stdsrv_conn_close(c);
			return;
		}
		e->vlen = 8;
		e->present = 1;
		e->readers_left = 0;
		hpct__stdsrv_entry_charge(&c->s->tab, e, c->rank);
	}
	uint64_t v = hpct__get64(e->val) + (uint64_t)c->i64; /* wraps instead of overflowing */
	hpct__put64(e->val, v);
	hpct__stdsrv_req_done(c);
	if (hpct__stdsrv_out_reserve(c, 12) == 0) {
		unsigned char b[8];
		hpct__put64(b, v);
		hpct__stdsrv_out32(c, 0);
		hpct__stdsrv_put(c, b, 8);
	}
	hpct__stdsrv_schedule(c);
	hpct__stdsrv_wake(e, was_absent);
}

/* The rank works at a new epoch (an in-process recovery): a loss at an
 * earlier one no longer fails its waits. */
static void exec_epoch(struct conn *c)
{
	hpct__stdsrv_req_done(c);
	if (c->i64 < c->epoch) {
		char why[160];
		snprintf(why, sizeof(why),
		         "rank %d: EPOCH %lld is below the epoch %lld it declared before",
		         c->rank, (long long)c->i64, (long long)c->epoch);
		hpct__stdsrv_reply_err(c, HPCT_EINVAL, why);
		return;
	}
	HPCT_TRACE(HPCT_SUB_STD, "rendezvous %s: rank %d works at epoch %lld now", c->s->addr,
	           c->rank, (long long)c->i64);
	c->epoch = c->i64;
	hpct__stdsrv_reply_status(c, 0);
}

static void exec(struct conn *c)
{
	c->st = ST_OP;
	switch (c->op) {
	case HPCT_STD_SET:
		exec_set(c);
		return;
	case HPCT_STD_MGET:
		hpct__stdsrv_mget_try(c);
		return;
	case HPCT_STD_ADD:
		exec_add(c);
		return;
	case HPCT_STD_WAITGE:
		hpct__stdsrv_waitge_try(c);
		return;
	case HPCT_STD_EPOCH:
		exec_epoch(c);
		return;
	}
}

/* A SET's header is in: refuse it now if the store could never take it, so
 * that none of its bytes is kept. */
static void set_admit(struct conn *c)
{
	char why[256], w[HPCT_ADDRSTRLEN + 24];
	const char *k = hpct__stdsrv_ckey(c, 0);
	int kl = (int)(c->klens[0] < KEY_SHOWN ? c->klens[0] : KEY_SHOWN);
	HPCT_TRACE(HPCT_SUB_STD, "rendezvous %s: %s sets '%.*s', %u bytes announced", c->s->addr,
	           hpct__stdsrv_who(c, w, sizeof(w)), kl, k, c->vlen);
	if (key_room(c, "SET", k, c->klens[0]) != 0) {
		c->discard = 1;
		return;
	}
	if (hpct__stdsrv_store_room(c, ENTRY_COST(c->klens[0]) + c->vlen, why, sizeof(why)) != 0) {
		hpct__stdsrv_over_limit(c, HPCT_ENOMEM, "SET of '%.*s' (%u bytes): %s", kl, k,
		                        c->vlen, why);
		c->discard = 1;
	}
}

/* The value's buffer is full: grow it by what may arrive next, never more
 * than VAL_WINDOW (or an eighth of what arrived) ahead of the bytes.  0, or
 * -1 once the connection is closed; over the store's limit the request is
 * refused and its bytes dropped. */
static int val_grow(struct conn *c)
{
	struct hpct_std_server *s = c->s;
	size_t step = c->vgot / 8 > VAL_WINDOW ? c->vgot / 8 : VAL_WINDOW;
	size_t cap = c->vlen - c->vgot < step ? c->vlen : c->vgot + step;
	char why[256];
	if (hpct__stdsrv_store_room(c, cap - c->vcap, why, sizeof(why)) != 0) {
		/* others filled the store since the header was admitted */
		hpct__stdsrv_over_limit(c, HPCT_ENOMEM, "SET of '%.*s' (%u bytes, %u received): %s",
		                        (int)(c->klens[0] < KEY_SHOWN ? c->klens[0] : KEY_SHOWN),
		                        hpct__stdsrv_ckey(c, 0), c->vlen, c->vgot, why);
		free(c->val);
		c->val = NULL;
		s->inflight -= c->vcap;
		c->vcap = 0;
		c->discard = 1;
		return 0;
	}
	unsigned char *v = realloc(c->val, cap);
	if (!v) {
		hpct__stdsrv_conn_bad(c, "out of memory for %zu bytes of a %u-byte value", cap,
		                      c->vlen);
		return -1;
	}
	c->val = v;
	s->inflight += cap - c->vcap;
	c->vcap = (uint32_t)cap;
	return 0;
}

/* Appends the key of length c->klen at p to the request's key list. */
static int add_key(struct conn *c, const unsigned char *p)
{
	if (c->nkeys == c->keycap) {
		size_t cap = c->keycap ? c->keycap * 2 : 8;
		size_t *o = realloc(c->koff, cap * sizeof(*o));
		if (o)
			c->koff = o;
		uint32_t *l = realloc(c->klens, cap * sizeof(*l));
		if (l)
			c->klens = l;
		struct entry **e = realloc(c->ents, cap * sizeof(*e));
		if (e)
			c->ents = e;
		if (!o || !l || !e)
			return -1;
		c->keycap = cap;
	}
	if (c->kused + c->klen + 1 > c->kcap) {
		size_t cap = c->kcap ? c->kcap : 256;
		while (cap < c->kused + c->klen + 1)
			cap *= 2;
		char *k = realloc(c->kbuf, cap);
		if (!k)
			return -1;
		c->kbuf = k;
		c->kcap = cap;
	}
	memcpy(c->kbuf + c->kused, p, c->klen);
	c->kbuf[c->kused + c->klen] = 0;
	c->koff[c->nkeys] = c->kused;
	c->klens[c->nkeys++] = c->klen;
	c->kused += c->klen + 1;
	return 0;
}

/* Parses and runs whatever complete fields the input buffer holds. */
void hpct__stdsrv_conn_progress(struct conn *c)
{
	while (!c->dead && !c->parked && !c->closing && c->olen - c->opos < OUT_HIGH) {
		size_t avail = c->ilen - c->ipos;
		const unsigned char *p = c->in + c->ipos;
		switch (c->st) {
		case ST_OP:
			if (avail < 5)
				goto more;
			c->op = p[0];
			c->reqrank = hpct__get32(p + 1);
			c->ipos += 5;
			if (c->op == HPCT_STD_HELLO) {
				if (c->rank >= 0) {
					hpct__stdsrv_conn_bad(c, "second HELLO");
					return;
				}
				c->st = ST_HELLO;
				break;
			}
			if (c->rank < 0) {
				hpct__stdsrv_conn_bad(c, "request %u before HELLO", c->op);
				return;
			}
			if (c->op == HPCT_STD_BYE) {
				HPCT_TRACE(HPCT_SUB_STD, "rendezvous %s: rank %d left", c->s->addr,
				           c->rank);
				c->said_bye = 1;
				c->closing = 1;
				hpct__stdsrv_schedule(c);
				return;
			}
			if (c->op == HPCT_STD_MGET)
				c->st = ST_N;
			else if (c->op == HPCT_STD_SET || c->op == HPCT_STD_ADD ||
			         c->op == HPCT_STD_WAITGE)
				c->st = ST_KLEN;
			else if (c->op == HPCT_STD_EPOCH)
				c->st = ST_I64; /* no key: the epoch alone */
			else {
				hpct__stdsrv_conn_bad(c, "unknown request %u", c->op);
				return;
			}
			break;
		case ST_HELLO:
			if (avail < 16)
				goto more;
			c->ipos += 16;
			c->st = ST_OP;
			exec_hello(c, p);
			break;
		case ST_N:
			if (avail < 4)
				goto more;
			c->n = hpct__get32(p);
			c->ipos += 4;
			if (c->n > HPCT_STD_MAX_KEYS) {
				hpct__stdsrv_conn_bad(c, "MGET of %u keys (limit %u)", c->n,
				                      HPCT_STD_MAX_KEYS);
				return;
			}
			c->st = ST_KLEN;
			if (c->n > c->s->lim.mget_keys) {
				hpct__stdsrv_over_limit(
				        c, HPCT_EINVAL,
				        "MGET of %u keys: one MGET may name %u (the "
				        "world size %d + 64)",
				        c->n, c->s->lim.mget_keys, c->s->nranks);
				c->discard = 1;
			}
			if (c->n == 0)
				exec(c);
			break;
		case ST_KLEN:
			if (avail < 4)
				goto more;
			c->klen = hpct__get32(p);
			c->ipos += 4;
			if (c->klen > HPCT_STD_MAX_KEY) {
				hpct__stdsrv_conn_bad(c, "key of %u bytes (limit %u)", c->klen,
				                      HPCT_STD_MAX_KEY);
				return;
			}
			c->st = ST_KEY;
			break;
		case ST_KEY:
			if (avail < c->klen)
				goto more;
			if (c->op == HPCT_STD_MGET && !c->discard &&
			    c->kused + c->klen + 1 > c->s->lim.mget_key_bytes) {
				hpct__stdsrv_over_limit(c, HPCT_EINVAL,
				                        "MGET of %u keys whose names take over %zu "
				                        "bytes (%u keys x 512)",
				                        c->n, c->s->lim.mget_key_bytes,
				                        c->s->lim.mget_keys);
				c->discard = 1;
			}
			if (c->discard) {
				c->ipos += c->klen;
				if (++c->nkeys < c->n) {
					c->st = ST_KLEN;
				} else {
					c->discard = 0;
					hpct__stdsrv_req_done(c);
					c->st = ST_OP;
				}
				break;
			}
			if (add_key(c, p) != 0) {
				hpct__stdsrv_conn_bad(c, "out of memory for %zu keys", c->nkeys);
				return;
			}
			c->ipos += c->klen;
			if (c->op == HPCT_STD_SET)
				c->st = ST_SETHDR;
			else if (c->op != HPCT_STD_MGET)
				c->st = ST_I64;
			else if (c->nkeys < c->n)
				c->st = ST_KLEN;
			else
				exec(c);
			break;
		case ST_SETHDR:
			if (avail < 8)
				goto more;
			c->readers = hpct__get32(p);
			c->vlen = hpct__get32(p + 4);
			c->ipos += 8;
			if (c->vlen > HPCT_STD_MAX_VALUE) {
				hpct__stdsrv_conn_bad(
				        c, "value of %u bytes for key '%.*s' (limit %u)", c->vlen,
				        (int)(c->klens[0] < KEY_SHOWN ? c->klens[0] : KEY_SHOWN),
				        hpct__stdsrv_ckey(c, 0), HPCT_STD_MAX_VALUE);
				return;
			}
			c->vgot = c->vcap = 0;
			c->st = ST_VAL;
			set_admit(c);
			break;
		case ST_VAL:
			if (c->vgot < c->vlen) {
				if (!c->discard && c->vgot == c->vcap && val_grow(c) != 0)
					return; /* closed */
				size_t take = (c->discard ? c->vlen : c->vcap) - c->vgot;
				if (avail == 0)
					goto more;
				if (take > avail)
					take = avail;
				if (!c->discard)
					memcpy(c->val + c->vgot, p, take);
				c->vgot += (uint32_t)take;
				c->ipos += take;
				if (c->vgot < c->vlen)
					break;
			}
			if (c->discard) {
				c->discard = 0;
				hpct__stdsrv_req_done(c);
				c->st = ST_OP;
				break;
			}
			if (!c->val && !(c->val = malloc(1))) { /* an empty value is a buffer too */
				hpct__stdsrv_conn_bad(c, "out of memory for an empty value");
				return;
			}
			exec(c);
			break;
		case ST_I64:
			if (avail < 8)
				goto more;
			c->i64 = (int64_t)hpct__get64(p);
			c->ipos += 8;
			exec(c);
			break;
		}
	}
more:
	if (c->ipos > 0) {
		memmove(c->in, c->in + c->ipos, c->ilen - c->ipos);
		c->ilen -= c->ipos;
		c->ipos = 0;
	}
}
