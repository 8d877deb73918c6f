/* Rendezvous server of the standard path: one thread, epoll over
 * non-blocking sockets, a chained hash table of keys. */
#include "bootstrap/stdpath/stdpath.h"

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

#include "hpct/hpct.h"
#include "bootstrap/base/log.h"
#include "bootstrap/base/util.h"
#include "bootstrap/base/bytes.h"

#define IN_CAP          (16 * 1024) /* holds the largest field parsed whole (a key) */
#define OUT_HIGH        (4u << 20)  /* stop parsing a connection while this much is unsent */
#define READS_PER_EVENT 16          /* fairness: one busy sender cannot starve the loop */
#define KEY_SHOWN       200         /* bytes of a key quoted in a log line */

struct conn;

struct entry {
	struct entry *next; /* hash chain */
	uint64_t hash;
	unsigned char *val; /* owned; NULL while absent */
	uint32_t vlen;
	int present;           /* absent entries exist only while someone waits on them */
	uint32_t readers_left; /* reads before deletion; 0: kept */
	int64_t min_wait;      /* lowest WAITGE target parked here (a lower bound) */
	struct conn *waiters;
	uint32_t klen;
	char key[];
};

struct table {
	struct entry **b;
	size_t mask;
	_Atomic size_t count; /* written by the server thread, read by tests */
};

enum { ST_OP, ST_HELLO, ST_N, ST_KLEN, ST_KEY, ST_SETHDR, ST_VAL, ST_I64 };

struct conn {
	struct hpct_std_server *s;
	int fd, rank; /* rank -1 until HELLO */
	int dead, closing, queued, parked, ever_parked;
	int said_bye, dropped; /* left properly; closed by us after a protocol error */
	int err;               /* errno that ended the connection, 0 if none */
	uint32_t evmask;
	char peer[HPCT_ADDRSTRLEN];
	struct conn *prev, *next;   /* every open connection */
	struct conn *wprev, *wnext; /* waiters of wentry */
	struct entry *wentry;
	struct conn *qnext; /* run queue */
	struct conn *dnext; /* dead list */
	/* the request being parsed or parked; keys live in kbuf at koff[i] */
	int st;
	uint8_t op;
	uint32_t reqrank, klen, n, readers, vlen, vgot, cursor;
	int64_t i64;
	unsigned char *val;
	char *kbuf;
	size_t kused, kcap, nkeys, keycap;
	size_t *koff;
	uint32_t *klens;
	struct entry **ents;
	size_t ipos, ilen, opos, olen, ocap;
	unsigned char *out;
	/* with a secret: served once it proved it */
	int admitted;
	struct hpct_auth_srv auth;
	unsigned char in[IN_CAP];
};

struct hpct_std_server {
	int lfd, epfd, evfd, nranks, listen_paused;
	int joined; /* ranks connected now */
	uint64_t job;
	/* with a secret (a copy): what clients prove */
	unsigned char *secret;
	size_t slen;
	struct hpct_auth_id auth_id;
	char addr[HPCT_ADDRSTRLEN];
	pthread_t thread;
	struct table tab;
	struct conn *conns, *runq, *deadq, **by_rank;
	double t0;
	/* The first rank whose connection closed without BYE: from then on no
	 * wait can be trusted to end, so none is parked (lost_rank -1: none). */
	int lost_rank, final;
	char lost_why[HPCT_ADDRSTRLEN + 160];
	pthread_mutex_t lock; /* guards stopping and stop_deadline */
	int stopping;
	double stop_deadline;
};




/* ---- hash table ---- */

static uint64_t key_hash(const char *k, uint32_t klen)
{
	return hpct__hash(k, klen, 0x5354445041544831ULL);
}

static struct entry *tab_find(struct table *t, const char *k, uint32_t klen)
{
	uint64_t h = key_hash(k, klen);
	for (struct entry *e = t->b[h & t->mask]; e; e = e->next)
		if (e->hash == h && e->klen == klen && memcmp(e->key, k, klen) == 0)
			return e;
	return NULL;
}

/* Finds or creates (absent) the entry of k; NULL when out of memory. */
static struct entry *tab_get(struct table *t, const char *k, uint32_t klen)
{
	struct entry *e = tab_find(t, k, klen);
	if (e)
		return e;
	if (t->count >= t->mask + 1) {
		/* Load factor 1, doubling: amortised O(1), entries never move. */
		size_t nb = (t->mask + 1) * 2;
		struct entry **b = calloc(nb, sizeof(*b));
		if (!b)
			return NULL;
		for (size_t i = 0; i <= t->mask; i++) {
			while (t->b[i]) {
				struct entry *x = t->b[i];
				t->b[i] = x->next;
				x->next = b[x->hash & (nb - 1)];
				b[x->hash & (nb - 1)] = x;
			}
		}
		free(t->b);
		t->b = b;
		t->mask = nb - 1;
	}
	e = calloc(1, sizeof(*e) + klen + 1);
	if (!e)
		return NULL;
	e->hash = key_hash(k, klen);
	e->klen = klen;
	e->min_wait = INT64_MAX;
	memcpy(e->key, k, klen);
	e->next = t->b[e->hash & t->mask];
	t->b[e->hash & t->mask] = e;
	t->count++;
	return e;
}

static void tab_remove(struct table *t, struct entry *e)
{
	struct entry **pp = &t->b[e->hash & t->mask];
	while (*pp != e)
		pp = &(*pp)->next;
	*pp = e->next;
	t->count--;
	free(e->val);
	free(e);
}

/* Drops the value; the entry itself stays while someone waits on it. */
static void entry_clear(struct table *t, struct entry *e)
{
	free(e->val);
	e->val = NULL;
	e->vlen = 0;
	e->present = 0;
	if (!e->waiters)
		tab_remove(t, e);
}

/* ---- connections ---- */

static const char *ckey(const struct conn *c, size_t i)
{
	return c->kbuf + c->koff[i];
}

static void schedule(struct conn *c)
{
	if (c->queued || c->dead)
		return;
	c->queued = 1;
	c->qnext = c->s->runq;
	c->s->runq = c;
}

static void unpark(struct conn *c)
{
	struct entry *e = c->wentry;
	if (!e)
		return;
	if (c->wprev)
		c->wprev->wnext = c->wnext;
	else
		e->waiters = c->wnext;
	if (c->wnext)
		c->wnext->wprev = c->wprev;
	c->wentry = NULL;
	c->wprev = c->wnext = NULL;
	c->parked = 0;
	if (!e->present && !e->waiters)
		tab_remove(&c->s->tab, e);
}

static void rank_lost(struct conn *c);

static void conn_close(struct conn *c)
{
	struct hpct_std_server *s = c->s;
	if (c->dead)
		return;
	c->dead = 1;
	unpark(c);
	if (c->rank >= 0 && s->by_rank[c->rank] == c) {
		s->by_rank[c->rank] = NULL;
		s->joined--;
	}
	if (c->rank >= 0 && !c->said_bye && !s->final)
		rank_lost(c);
	epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	if (c->prev)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	/* Freed at the end of the loop iteration: epoll may still hold events for it. */
	c->dnext = s->deadq;
	s->deadq = c;
	if (s->listen_paused) {
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &s->lfd };
		if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->lfd, &ev) == 0)
			s->listen_paused = 0;
	}
}

static void conn_free(struct conn *c)
{
	free(c->val);
	free(c->kbuf);
	free(c->koff);
	free(c->klens);
	free(c->ents);
	free(c->out);
	free(c);
}

static int out_reserve(struct conn *c, size_t n)
{
	if (c->opos > 0 && c->opos == c->olen)
		c->opos = c->olen = 0;
	if (c->olen + n <= c->ocap)
		return 0;
	if (c->opos > 0) {
		memmove(c->out, c->out + c->opos, c->olen - c->opos);
		c->olen -= c->opos;
		c->opos = 0;
		if (c->olen + n <= c->ocap)
			return 0;
	}
	size_t cap = c->ocap ? c->ocap : 256;
	while (cap < c->olen + n)
		cap *= 2;
	unsigned char *p = realloc(c->out, cap);
	if (!p)
		return -1;
	c->out = p;
	c->ocap = cap;
	return 0;
}

static void put(struct conn *c, const void *p, size_t n)
{
	memcpy(c->out + c->olen, p, n);
	c->olen += n;
}

static void out32(struct conn *c, uint32_t v)
{
	unsigned char b[4] = { (unsigned char)(v >> 24), (unsigned char)(v >> 16),
		               (unsigned char)(v >> 8), (unsigned char)v };
	put(c, b, 4);
}

static void reply_status(struct conn *c, int status)
{
	if (out_reserve(c, 4) == 0)
		out32(c, (uint32_t)status);
	else
		conn_close(c);
	schedule(c);
}

static void reply_err(struct conn *c, int code, const char *msg)
{
	size_t len = strlen(msg);
	if (out_reserve(c, 8 + len) == 0) {
		out32(c, (uint32_t)code);
		out32(c, (uint32_t)len);
		put(c, msg, len);
	} else {
		conn_close(c);
	}
	schedule(c);
}

static const char *who(const struct conn *c, char *buf, size_t len)
{
	if (c->rank >= 0)
		snprintf(buf, len, "%s (rank %d)", c->peer, c->rank);
	else
		snprintf(buf, len, "%s", c->peer);
	return buf;
}

/* A protocol violation: log it once, answer HPCT_EPROTO and close. */
static void __attribute__((format(printf, 2, 3))) conn_bad(struct conn *c, const char *fmt, ...)
{
	char msg[512], w[HPCT_ADDRSTRLEN + 24];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	HPCT_WARN(HPCT_SUB_STD, "rendezvous %s: closing the connection from %s: %s", c->s->addr,
	          who(c, w, sizeof(w)), msg);
	c->ipos = c->ilen = 0;
	c->closing = 1;
	c->dropped = 1;
	reply_err(c, HPCT_EPROTO, msg);
}

static void req_done(struct conn *c)
{
	c->kused = c->nkeys = 0;
	c->cursor = 0;
	c->ever_parked = 0;
	if (c->keycap > 65536) {
		/* One huge MGET should not pin its arrays for the connection's life. */
		free(c->kbuf);
		free(c->koff);
		free(c->klens);
		free(c->ents);
		c->kbuf = NULL;
		c->koff = NULL;
		c->klens = NULL;
		c->ents = NULL;
		c->kcap = c->keycap = 0;
	}
}

/* c said HELLO and is gone without BYE: whatever it was to set will never
 * come, so every parked wait is answered now, and every later one that
 * cannot be answered at once is answered in park(), naming the first rank
 * lost (later losses are mostly ranks giving up because of it). */
static void rank_lost(struct conn *c)
{
	struct hpct_std_server *s = c->s;
	if (s->lost_rank >= 0) {
		HPCT_INFO(HPCT_SUB_STD,
		          "rendezvous %s: rank %d at %s left without saying goodbye too", s->addr,
		          c->rank, c->peer);
		return;
	}
	char reason[96] = "";
	if (c->err)
		snprintf(reason, sizeof(reason), " (%s)", strerror(c->err));
	else if (c->dropped)
		snprintf(reason, sizeof(reason), " (dropped after a protocol error)");
	s->lost_rank = c->rank;
	snprintf(s->lost_why, sizeof(s->lost_why), "rank %d at %s left without saying goodbye%s",
	         c->rank, c->peer, reason);
	int n = 0;
	for (struct conn *x = s->conns, *next; x; x = next) {
		next = x->next; /* reply_err may close x, never another */
		if (x->dead || !x->parked)
			continue;
		unpark(x);
		req_done(x);
		reply_err(x, HPCT_EPEERDEAD, s->lost_why);
		n++;
	}
	HPCT_WARN(HPCT_SUB_STD,
	          "rendezvous %s: %s; failing %d waiting requests, and every wait from now on",
	          s->addr, s->lost_why, n);
}

static void park(struct conn *c, size_t i)
{
	if (c->s->lost_rank >= 0) {
		req_done(c);
		reply_err(c, HPCT_EPEERDEAD, c->s->lost_why);
		return;
	}
	struct entry *e = tab_get(&c->s->tab, ckey(c, i), c->klens[i]);
	if (!e) {
		conn_close(c);
		return;
	}
	c->wentry = e;
	c->wprev = NULL;
	c->wnext = e->waiters;
	if (e->waiters)
		e->waiters->wprev = c;
	e->waiters = c;
	c->parked = c->ever_parked = 1;
	if (c->op == HPCT_STD_WAITGE && c->i64 < e->min_wait)
		e->min_wait = c->i64;
}

static void mget_answer(struct conn *c)
{
	struct table *t = &c->s->tab;
	size_t total = 4;
	for (size_t i = 0; i < c->nkeys; i++)
		total += 4 + (size_t)c->ents[i]->vlen;
	if (out_reserve(c, total) != 0) {
		HPCT_WARN(HPCT_SUB_STD, "rendezvous %s: out of memory answering %zu keys to %s",
		          c->s->addr, c->nkeys, c->peer);
		conn_close(c);
		return;
	}
	out32(c, 0);
	for (size_t i = 0; i < c->nkeys; i++) {
		out32(c, c->ents[i]->vlen);
		put(c, c->ents[i]->val, c->ents[i]->vlen);
	}
	/* Count the reads, then drop exhausted keys; a key named twice in one
	 * MGET reaches 0 once, and ents[0..ndoomed) is already consumed. */
	size_t ndoomed = 0;
	for (size_t i = 0; i < c->nkeys; i++) {
		struct entry *e = c->ents[i];
		if (e->readers_left > 0 && --e->readers_left == 0)
			c->ents[ndoomed++] = e;
	}
	for (size_t i = 0; i < ndoomed; i++)
		entry_clear(t, c->ents[i]);
	req_done(c);
	schedule(c);
}

/* Answers the MGET if every key exists, else parks on the first missing one. */
static void mget_try(struct conn *c)
{
	struct table *t = &c->s->tab;
	for (; c->cursor < c->nkeys; c->cursor++) {
		struct entry *e = tab_find(t, ckey(c, c->cursor), c->klens[c->cursor]);
		if (!e || !e->present) {
			park(c, c->cursor);
			return;
		}
		c->ents[c->cursor] = e;
	}
	if (c->ever_parked) {
		/* A waiter that gave up must not use up a key's reads: its
		 * hang-up may sit unseen behind the SET that woke it. */
		unsigned char b;
		ssize_t r = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
		if (r == 0 ||
		    (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
			c->err = r < 0 ? errno : 0;
			conn_close(c);
			return;
		}
		/* Keys found before we parked may have been read away since. */
		for (size_t i = 0; i < c->nkeys; i++) {
			struct entry *e = tab_find(t, ckey(c, i), c->klens[i]);
			if (!e || !e->present) {
				c->cursor = (uint32_t)i;
				park(c, i);
				return;
			}
			c->ents[i] = e;
		}
	}
	mget_answer(c);
}

static void waitge_try(struct conn *c)
{
	struct entry *e = tab_find(&c->s->tab, ckey(c, 0), c->klens[0]);
	int64_t cur = 0;
	if (e && e->present) {
		if (e->vlen != 8) {
			char msg[KEY_SHOWN + 80];
			snprintf(msg, sizeof(msg),
			         "key '%.*s' holds a %u-byte value, not a counter",
			         (int)(e->klen < KEY_SHOWN ? e->klen : KEY_SHOWN), e->key, e->vlen);
			req_done(c);
			reply_err(c, HPCT_EINVAL, msg);
			return;
		}
		cur = (int64_t)hpct__get64(e->val);
	}
	if (cur >= c->i64) {
		req_done(c);
		reply_status(c, 0);
	} else {
		park(c, 0);
	}
}

/* e changed: retries whoever waits on it.  e may be freed by the answers. */
static void wake(struct entry *e, int was_absent)
{
	if (!e->waiters)
		return;
	if (!was_absent && !(e->vlen == 8 && (int64_t)hpct__get64(e->val) >= e->min_wait))
		return; /* only WAITGE waiters here, none satisfied yet */
	struct conn *w = e->waiters;
	e->waiters = NULL;
	e->min_wait = INT64_MAX;
	for (struct conn *x = w; x; x = x->wnext) {
		x->wentry = NULL;
		x->parked = 0;
	}
	while (w) {
		struct conn *next = w->wnext;
		w->wprev = w->wnext = NULL;
		if (w->op == HPCT_STD_MGET)
			mget_try(w);
		else
			waitge_try(w);
		schedule(w);
		w = next;
	}
}

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
	reply_err(c, HPCT_EREFUSED, msg);
}

static void exec_hello(struct conn *c, const unsigned char *p)
{
	struct hpct_std_server *s = c->s;
	uint32_t magic = hpct__get32(p), size = hpct__get32(p + 4), r = c->reqrank;
	uint64_t job = hpct__get64(p + 8);
	if (magic != HPCT_STD_MAGIC) {
		conn_bad(c, "not an hpct rendezvous client (magic 0x%08x)", magic);
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
	if (s->by_rank[r]) {
		refuse(c, "rank %u is already connected from %s", r, s->by_rank[r]->peer);
		return;
	}
	c->rank = (int)r;
	s->by_rank[r] = c;
	HPCT_TRACE(HPCT_SUB_STD, "rendezvous %s: rank %u joined from %s", s->addr, r, c->peer);
	if (++s->joined == s->nranks)
		HPCT_INFO(HPCT_SUB_STD, "rendezvous %s: all %d ranks connected after %.3f s",
		          s->addr, s->nranks, hpct__now() - s->t0);
	reply_status(c, 0);
}

static void exec_set(struct conn *c)
{
	struct entry *e = tab_get(&c->s->tab, ckey(c, 0), c->klens[0]);
	if (!e) {
		conn_close(c);
		return;
	}
	int was_absent = !e->present;
	free(e->val);
	e->val = c->val; /* the entry owns the value from here */
	c->val = NULL;
	e->vlen = c->vlen;
	e->present = 1;
	e->readers_left = c->readers;
	req_done(c);
	reply_status(c, 0);
	wake(e, was_absent);
}

static void exec_add(struct conn *c)
{
	struct entry *e = tab_get(&c->s->tab, ckey(c, 0), c->klens[0]);
	if (!e) {
		conn_close(c);
		return;
	}
	if (e->present && e->vlen != 8) {
		char msg[KEY_SHOWN + 80];
		snprintf(msg, sizeof(msg), "key '%.*s' holds a %u-byte value, not a counter",
		         (int)(e->klen < KEY_SHOWN ? e->klen : KEY_SHOWN), e->key, e->vlen);
		req_done(c);
		reply_err(c, HPCT_EINVAL, msg);
		return;
	}
	int was_absent = !e->present;
	if (was_absent) {
		e->val = calloc(1, 8);
		if (!e->val) {
			entry_clear(&c->s->tab, e);
			conn_close(c);
			return;
		}
		e->vlen = 8;
		e->present = 1;
		e->readers_left = 0;
	}
	uint64_t v = hpct__get64(e->val) + (uint64_t)c->i64; /* wraps instead of overflowing */
	hpct__put64(e->val, v);
	req_done(c);
	if (out_reserve(c, 12) == 0) {
		unsigned char b[8];
		hpct__put64(b, v);
		out32(c, 0);
		put(c, b, 8);
	}
	schedule(c);
	wake(e, was_absent);
}

static void exec(struct conn *c)
{
	c->st = ST_OP;
	switch (c->op) {
	case HPCT_STD_SET:
		exec_set(c);
		return;
	case HPCT_STD_MGET:
		mget_try(c);
		return;
	case HPCT_STD_ADD:
		exec_add(c);
		return;
	case HPCT_STD_WAITGE:
		waitge_try(c);
		return;
	}
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
static void conn_progress(struct conn *c)
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
					conn_bad(c, "second HELLO");
					return;
				}
				c->st = ST_HELLO;
				break;
			}
			if (c->rank < 0) {
				conn_bad(c, "request %u before HELLO", c->op);
				return;
			}
			if (c->op == HPCT_STD_BYE) {
				HPCT_TRACE(HPCT_SUB_STD, "rendezvous %s: rank %d left", c->s->addr,
				           c->rank);
				c->said_bye = 1;
				c->closing = 1;
				schedule(c);
				return;
			}
			if (c->op == HPCT_STD_MGET)
				c->st = ST_N;
			else if (c->op == HPCT_STD_SET || c->op == HPCT_STD_ADD ||
			         c->op == HPCT_STD_WAITGE)
				c->st = ST_KLEN;
			else {
				conn_bad(c, "unknown request %u", c->op);
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
				conn_bad(c, "MGET of %u keys (limit %u)", c->n, HPCT_STD_MAX_KEYS);
				return;
			}
			c->st = ST_KLEN;
			if (c->n == 0)
				exec(c);
			break;
		case ST_KLEN:
			if (avail < 4)
				goto more;
			c->klen = hpct__get32(p);
			c->ipos += 4;
			if (c->klen > HPCT_STD_MAX_KEY) {
				conn_bad(c, "key of %u bytes (limit %u)", c->klen,
				         HPCT_STD_MAX_KEY);
				return;
			}
			c->st = ST_KEY;
			break;
		case ST_KEY:
			if (avail < c->klen)
				goto more;
			if (add_key(c, p) != 0) {
				conn_bad(c, "out of memory for %zu keys", c->nkeys);
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
				conn_bad(c, "value of %u bytes for key '%.*s' (limit %u)", c->vlen,
				         (int)(c->klens[0] < KEY_SHOWN ? c->klens[0] : KEY_SHOWN),
				         ckey(c, 0), HPCT_STD_MAX_VALUE);
				return;
			}
			c->val = malloc(c->vlen ? c->vlen : 1);
			if (!c->val) {
				conn_bad(c, "out of memory for a value of %u bytes", c->vlen);
				return;
			}
			c->vgot = 0;
			c->st = ST_VAL;
			break;
		case ST_VAL: {
			size_t take = c->vlen - c->vgot;
			if (take > avail)
				take = avail;
			memcpy(c->val + c->vgot, p, take);
			c->vgot += (uint32_t)take;
			c->ipos += take;
			if (c->vgot < c->vlen)
				goto more;
			exec(c);
			break;
		}
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

/* With a secret, a connection's first bytes are its proof: 1 once it is
 * admitted (parse on), 0 while it proves or after a refusal (logged with
 * the source address; the REFUSE goes out, then the connection closes). */
static int admit(struct conn *c)
{
	struct hpct_std_server *s = c->s;
	size_t used, outlen;
	unsigned char out[HPCT_AUTH_LEN];
	char why[200];
	int rc = hpct__auth_server_feed(&c->auth, s->secret, s->slen, &s->auth_id, c->in + c->ipos,
	                                c->ilen - c->ipos, &used, out, &outlen, why, sizeof(why));
	c->ipos += used;
	if (c->ipos == c->ilen)
		c->ipos = c->ilen = 0;
	if (outlen && out_reserve(c, outlen) == 0)
		put(c, out, outlen);
	if (rc == HPCT_AUTH_REFUSE) {
		HPCT_WARN(HPCT_SUB_STD, "rendezvous %s: refused a connection from %s: %s", s->addr,
		          c->peer, why);
		c->closing = 1; /* once the REFUSE is out */
		return 0;
	}
	return c->admitted = rc == HPCT_AUTH_ADMIT;
}

/* Where the next bytes from the socket go, and how many fit. */
static size_t read_room(struct conn *c, unsigned char **dst)
{
	if (c->closing)
		return 0;
	if (c->st == ST_VAL && c->ipos == c->ilen) {
		/* Large values go straight to their buffer, not through c->in. */
		c->ipos = c->ilen = 0;
		*dst = c->val + c->vgot;
		return c->vlen - c->vgot;
	}
	*dst = c->in + c->ilen;
	return IN_CAP - c->ilen;
}

static void conn_read(struct conn *c, uint32_t events)
{
	for (int i = 0; i < READS_PER_EVENT && !c->dead; i++) {
		unsigned char *dst;
		size_t room = read_room(c, &dst);
		if (room == 0) {
			/* Not reading (closing, or parked with a full buffer): a
			 * hang-up is all that is left to notice. */
			if (events & (EPOLLHUP | EPOLLERR | EPOLLRDHUP)) {
				socklen_t el = sizeof(c->err);
				if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &c->err, &el) != 0)
					c->err = 0;
				conn_close(c);
			}
			break;
		}
		ssize_t r = recv(c->fd, dst, room, MSG_DONTWAIT);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (r <= 0) {
			char w[HPCT_ADDRSTRLEN + 24], why[160];
			c->err = r < 0 ? errno : 0;
			if (!c->admitted && hpct__auth_server_gone(&c->auth, why, sizeof(why)))
				HPCT_WARN(HPCT_SUB_STD,
				          "rendezvous %s: refused a connection from %s: %s", c->s->addr,
				          c->peer, why);
			HPCT_TRACE(HPCT_SUB_STD, "rendezvous %s: %s hung up (%s)", c->s->addr,
			           who(c, w, sizeof(w)),
			           r == 0 ? "end of stream" : strerror(c->err));
			conn_close(c);
			break;
		}
		if (dst != c->in + c->ilen)
			c->vgot += (uint32_t)r;
		else
			c->ilen += (size_t)r;
		if (c->admitted || admit(c))
			conn_progress(c);
		if ((size_t)r < room)
			break;
	}
	schedule(c);
}

static void conn_flush(struct conn *c)
{
	while (c->opos < c->olen) {
		ssize_t r = send(c->fd, c->out + c->opos, c->olen - c->opos,
		                 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (r > 0) {
			c->opos += (size_t)r;
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		c->err = r < 0 ? errno : 0;
		conn_close(c);
		return;
	}
	c->opos = c->olen = 0;
	if (c->ocap > (1u << 20)) {
		free(c->out);
		c->out = NULL;
		c->ocap = 0;
	}
	if (c->closing)
		conn_close(c);
}

static void conn_update(struct conn *c)
{
	unsigned char *dst;
	uint32_t want = EPOLLRDHUP;
	if (read_room(c, &dst) > 0)
		want |= EPOLLIN;
	if (c->olen > c->opos)
		want |= EPOLLOUT;
	if (want == c->evmask)
		return;
	struct epoll_event ev = { .events = want, .data.ptr = c };
	if (epoll_ctl(c->s->epfd, EPOLL_CTL_MOD, c->fd, &ev) == 0)
		c->evmask = want;
}

static void accept_all(struct hpct_std_server *s)
{
	for (;;) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int fd = accept4(s->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM) {
				/* Level-triggered: stop listening until a connection closes. */
				HPCT_WARN(HPCT_SUB_STD,
				          "rendezvous %s: cannot accept (%s); pausing", s->addr,
				          strerror(errno));
				epoll_ctl(s->epfd, EPOLL_CTL_DEL, s->lfd, NULL);
				s->listen_paused = 1;
			}
			return;
		}
		struct conn *c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			continue;
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c->s = s;
		c->fd = fd;
		c->rank = -1;
		c->admitted = !s->secret;
		hpct__addr_str((struct sockaddr *)&ss, c->peer, sizeof(c->peer));
		c->evmask = EPOLLIN | EPOLLRDHUP;
		struct epoll_event ev = { .events = c->evmask, .data.ptr = c };
		if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
			close(fd);
			free(c);
			continue;
		}
		c->next = s->conns;
		if (s->conns)
			s->conns->prev = c;
		s->conns = c;
	}
}

static int live_conns(const struct hpct_std_server *s)
{
	int n = 0;
	for (const struct conn *c = s->conns; c; c = c->next)
		n += !c->closing;
	return n;
}

static void *server_main(void *arg)
{
	struct hpct_std_server *s = arg;
	struct epoll_event evs[64];
	int stopping = 0;
	double deadline = 0;
	for (;;) {
		if (stopping && (live_conns(s) == 0 || hpct__now() >= deadline))
			break;
		int timeout = -1;
		if (stopping) {
			double left = deadline - hpct__now();
			timeout = left <= 0 ? 0 : (int)(left * 1000) + 1;
		}
		int n = epoll_wait(s->epfd, evs, 64, timeout);
		for (int i = 0; i < n; i++) {
			void *p = evs[i].data.ptr;
			if (p == &s->lfd) {
				accept_all(s);
			} else if (p == &s->evfd) {
				uint64_t v;
				if (read(s->evfd, &v, sizeof(v)) < 0)
					continue;
				pthread_mutex_lock(&s->lock);
				stopping = s->stopping;
				deadline = s->stop_deadline;
				pthread_mutex_unlock(&s->lock);
			} else {
				struct conn *c = p;
				if (c->dead)
					continue;
				if (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
					conn_read(c, evs[i].events);
				if (evs[i].events & EPOLLOUT)
					schedule(c);
			}
		}
		while (s->runq) {
			struct conn *c = s->runq;
			s->runq = c->qnext;
			c->queued = 0;
			if (c->dead)
				continue;
			conn_progress(c);
			if (!c->dead)
				conn_flush(c);
			if (!c->dead)
				conn_update(c);
		}
		while (s->deadq) {
			struct conn *c = s->deadq;
			s->deadq = c->dnext;
			conn_free(c);
		}
	}
	if (live_conns(s) > 0) {
		char list[256] = "";
		size_t o = 0;
		int early = 0;
		for (struct conn *c = s->conns; c && o + 16 < sizeof(list); c = c->next) {
			if (!c->closing && c->rank >= 0)
				o += (size_t)snprintf(list + o, sizeof(list) - o, "%s%d",
				                      o ? ", " : "", c->rank);
			early += !c->closing && c->rank < 0;
		}
		HPCT_WARN(HPCT_SUB_STD,
		          "rendezvous %s: stopping at the deadline with ranks [%s] and %d "
		          "connections before HELLO still open",
		          s->addr, list, early);
	}
	return NULL;
}

static int is_wildcard(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return ((const struct sockaddr_in *)ss)->sin_addr.s_addr == htonl(INADDR_ANY);
	if (ss->ss_family == AF_INET6)
		return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)ss)->sin6_addr);
	return 0;
}

int hpct__std_server_start(const char *host, int port, int nranks, uint64_t job,
                           const struct hpct_auth_key *key, struct hpct_std_server **server_out)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	int rc, one = 1;
	if (!host || !*host || port < 0 || port > 65535 || nranks < 1)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_STD,
		                  "rendezvous: bad arguments (host '%s', port %d, %d ranks)",
		                  host ? host : "(null)", port, nranks);
	rc = hpct__resolve(host, port, AF_UNSPEC, &ss, &sl);
	if (rc)
		return rc;
	if (is_wildcard(&ss))
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_STD,
		                  "rendezvous: host '%s' is the wildcard address; give MASTER_ADDR "
		                  "the address ranks connect to",
		                  host);
	struct hpct_std_server *s = calloc(1, sizeof(*s));
	if (!s)
		return hpct__fail(HPCT_ENOMEM, HPCT_SUB_STD, "rendezvous: out of memory");
	s->nranks = nranks;
	s->job = job;
	if (key && key->secret) {
		s->auth_id = (struct hpct_auth_id){ .job = job,
			                            .epoch = key->epoch,
			                            .service = HPCT_AUTH_SERVICE_STDPATH,
			                            .server = 0,
			                            .size = (uint32_t)nranks };
		s->slen = key->len;
		if (!(s->secret = malloc(key->len ? key->len : 1))) {
			free(s);
			return hpct__fail(HPCT_ENOMEM, HPCT_SUB_STD, "rendezvous: out of memory");
		}
		memcpy(s->secret, key->secret, key->len);
	}
	s->lost_rank = -1;
	s->t0 = hpct__now();
	hpct__addr_str((struct sockaddr *)&ss, s->addr, sizeof(s->addr));
	s->by_rank = calloc((size_t)nranks, sizeof(*s->by_rank));
	s->tab.b = calloc(1024, sizeof(*s->tab.b));
	s->tab.mask = 1023;
	if (!s->by_rank || !s->tab.b) {
		rc = hpct__fail(HPCT_ENOMEM, HPCT_SUB_STD, "rendezvous: out of memory for %d ranks",
		                nranks);
		goto free_server;
	}
	s->lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s->lfd < 0) {
		rc = hpct__fail(-errno, HPCT_SUB_STD, "rendezvous %s: socket: %s", s->addr,
		                strerror(errno));
		goto free_server;
	}
	/* SO_REUSEADDR lets a restarted rank 0 bind past TIME_WAIT; never
	 * SO_REUSEPORT, which would let a stale server share the port. */
	setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(s->lfd, (struct sockaddr *)&ss, sl) != 0) {
		if (errno == EADDRINUSE)
			rc = hpct__fail(HPCT_EADDRINUSE, HPCT_SUB_STD,
			                "rendezvous: %s is already in use (another job's rank 0, "
			                "or an earlier run still holding it)",
			                s->addr);
		else
			rc = hpct__fail(-errno, HPCT_SUB_STD, "rendezvous: cannot bind %s (%s)",
			                s->addr, strerror(errno));
		goto close_listener;
	}
	if (listen(s->lfd, 4096) != 0) {
		rc = hpct__fail(-errno, HPCT_SUB_STD, "rendezvous: cannot listen on %s (%s)",
		                s->addr, strerror(errno));
		goto close_listener;
	}
	s->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (s->epfd < 0) {
		rc = hpct__fail(-errno, HPCT_SUB_STD, "rendezvous %s: epoll: %s", s->addr,
		                strerror(errno));
		goto close_listener;
	}
	s->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (s->evfd < 0) {
		rc = hpct__fail(-errno, HPCT_SUB_STD, "rendezvous %s: eventfd: %s", s->addr,
		                strerror(errno));
		goto close_epoll;
	}
	struct epoll_event lev = { .events = EPOLLIN, .data.ptr = &s->lfd };
	struct epoll_event eev = { .events = EPOLLIN, .data.ptr = &s->evfd };
	if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->lfd, &lev) != 0 ||
	    epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->evfd, &eev) != 0) {
		rc = hpct__fail(-errno, HPCT_SUB_STD, "rendezvous %s: epoll_ctl: %s", s->addr,
		                strerror(errno));
		goto close_eventfd;
	}
	pthread_mutex_init(&s->lock, NULL);
	rc = pthread_create(&s->thread, NULL, server_main, s);
	if (rc != 0) {
		rc = hpct__fail(-rc, HPCT_SUB_STD, "rendezvous %s: cannot start its thread (%s)",
		                s->addr, strerror(rc));
		goto destroy_lock;
	}
	HPCT_INFO(HPCT_SUB_STD, "rendezvous serving %d ranks at %s", nranks, s->addr);
	*server_out = s;
	return 0;

destroy_lock:
	pthread_mutex_destroy(&s->lock);
close_eventfd:
	close(s->evfd);
close_epoll:
	close(s->epfd);
close_listener:
	close(s->lfd);
free_server:
	free(s->tab.b);
	free(s->by_rank);
	free(s->secret);
	free(s);
	return rc;
}

/* Every connection and key, once the thread is gone. */
static void drop_all(struct hpct_std_server *s)
{
	s->final = 1; /* closing them ourselves loses no rank */
	while (s->conns) {
		struct conn *c = s->conns;
		conn_close(c); /* unlinks c and moves it to deadq */
	}
	while (s->deadq) {
		struct conn *c = s->deadq;
		s->deadq = c->dnext;
		conn_free(c);
	}
	for (size_t i = 0; i <= s->tab.mask; i++) {
		while (s->tab.b[i]) {
			struct entry *e = s->tab.b[i];
			s->tab.b[i] = e->next;
			free(e->val);
			free(e);
		}
	}
}

/* For the fuzz target: `data` as the bytes of one client's connection to a
 * server of 4 ranks of job HPCT_STD_FUZZ_JOB, fed as the thread feeds them
 * (as much as there is room for, then parsed), replies dropped; then all
 * is freed. */
HPCT_PRIVATE void hpct__std_fuzz_one(const unsigned char *data, size_t len)
{
	struct hpct_std_server *s = calloc(1, sizeof(*s));
	struct conn *c = calloc(1, sizeof(*c));
	if (!s || !c || !(s->by_rank = calloc(4, sizeof(*s->by_rank))) ||
	    !(s->tab.b = calloc(1024, sizeof(*s->tab.b)))) {
		if (s)
			free(s->by_rank);
		free(s);
		free(c);
		return;
	}
	s->nranks = 4;
	s->job = HPCT_STD_FUZZ_JOB;
	s->lost_rank = -1;
	s->epfd = s->lfd = s->evfd = -1;
	s->tab.mask = 1023;
	snprintf(s->addr, sizeof(s->addr), "fuzz");
	c->s = s;
	c->fd = -1;
	c->rank = -1;
	c->admitted = 1;
	snprintf(c->peer, sizeof(c->peer), "fuzz");
	s->conns = c;
	while (len > 0 && !c->dead && !c->closing) {
		unsigned char *dst;
		size_t room = read_room(c, &dst);
		if (room == 0)
			break; /* parked with a full buffer */
		size_t k = len < room ? len : room;
		memcpy(dst, data, k);
		if (dst != c->in + c->ilen)
			c->vgot += (uint32_t)k;
		else
			c->ilen += k;
		data += k;
		len -= k;
		conn_progress(c);
		c->opos = c->olen = 0; /* the replies */
	}
	drop_all(s);
	free(s->tab.b);
	free(s->by_rank);
	free(s);
}

void hpct__std_server_stop(struct hpct_std_server *s, double deadline)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	s->stopping = 1;
	s->stop_deadline = deadline;
	pthread_mutex_unlock(&s->lock);
	uint64_t one = 1;
	if (write(s->evfd, &one, sizeof(one)) < 0)
		HPCT_WARN(HPCT_SUB_STD, "rendezvous %s: cannot wake its thread (%s)", s->addr,
		          strerror(errno));
	pthread_join(s->thread, NULL);
	drop_all(s);
	HPCT_INFO(HPCT_SUB_STD, "rendezvous %s stopped after %.3f s", s->addr, hpct__now() - s->t0);
	close(s->evfd);
	close(s->epfd);
	close(s->lfd);
	pthread_mutex_destroy(&s->lock);
	free(s->tab.b);
	free(s->by_rank);
	free(s->secret);
	free(s);
}

size_t hpct__std_server_keys(const struct hpct_std_server *s)
{
	return s->tab.count;
}
