/* The rendezvous server's answers: replies and errors queued on a
 * connection, requests parked until their keys exist (MGET) or a counter is
 * high enough (WAITGE), woken when that happens or failed when a rank is
 * lost. */
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

/* ---- connections ---- */

const char *hpct__stdsrv_ckey(const struct conn *c, size_t i)
{
	return c->kbuf + c->koff[i];
}

void hpct__stdsrv_schedule(struct conn *c)
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
		hpct__stdsrv_tab_remove(&c->s->tab, e);
}

static void rank_lost(struct conn *c);

void hpct__stdsrv_conn_close(struct conn *c)
{
	struct hpct_std_server *s = c->s;
	if (c->dead)
		return;
	c->dead = 1;
	unpark(c);
	hpct__stdsrv_early_done(c);
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

void hpct__stdsrv_conn_free(struct conn *c)
{
	c->s->inflight -= c->vcap;
	free(c->val);
	free(c->kbuf);
	free(c->koff);
	free(c->klens);
	free(c->ents);
	free(c->out);
	free(c);
}

int hpct__stdsrv_out_reserve(struct conn *c, size_t n)
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

void hpct__stdsrv_put(struct conn *c, const void *p, size_t n)
{
	memcpy(c->out + c->olen, p, n);
	c->olen += n;
}

void hpct__stdsrv_out32(struct conn *c, uint32_t v)
{
	unsigned char b[4] = { (unsigned char)(v >> 24), (unsigned char)(v >> 16),
		               (unsigned char)(v >> 8), (unsigned char)v };
	hpct__stdsrv_put(c, b, 4);
}

void hpct__stdsrv_reply_status(struct conn *c, int status)
{
	if (hpct__stdsrv_out_reserve(c, 4) == 0)
		hpct__stdsrv_out32(c, (uint32_t)status);
	else
		hpct__stdsrv_conn_close(c);
	hpct__stdsrv_schedule(c);
}

void hpct__stdsrv_reply_err(struct conn *c, int code, const char *msg)
{
	size_t len = strlen(msg);
	if (hpct__stdsrv_out_reserve(c, 8 + len) == 0) {
		hpct__stdsrv_out32(c, (uint32_t)code);
		hpct__stdsrv_out32(c, (uint32_t)len);
		hpct__stdsrv_put(c, msg, len);
	} else {
		hpct__stdsrv_conn_close(c);
	}
	hpct__stdsrv_schedule(c);
}

const char *hpct__stdsrv_who(const struct conn *c, char *buf, size_t len)
{
	if (c->rank >= 0)
		snprintf(buf, len, "%s (rank %d)", c->peer, c->rank);
	else
		snprintf(buf, len, "%s", c->peer);
	return buf;
}

/* A protocol violation: log it once, answer HPCT_EPROTO and close. */
void hpct__stdsrv_conn_bad(struct conn *c, const char *fmt, ...)
{
	char msg[512], w[HPCT_ADDRSTRLEN + 24];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	HPCT_WARN(HPCT_SUB_STD, "rendezvous %s: closing the connection from %s: %s", c->s->addr,
	          hpct__stdsrv_who(c, w, sizeof(w)), msg);
	c->ipos = c->ilen = 0;
	c->closing = 1;
	c->dropped = 1;
	hpct__stdsrv_reply_err(c, HPCT_EPROTO, msg);
}

void hpct__stdsrv_req_done(struct conn *c)
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
	if (s->lost_rank >= 0 && c->epoch <= s->lost_epoch) {
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
	s->lost_epoch = c->epoch;
	snprintf(s->lost_why, sizeof(s->lost_why),
	         "rank %d at %s (epoch %lld) left without saying goodbye%s", c->rank, c->peer,
	         (long long)c->epoch, reason);
	int n = 0;
	for (struct conn *x = s->conns, *next; x; x = next) {
		next = x->next; /* reply_err may close x, never another */
		if (x->dead || !x->parked || x->epoch > c->epoch)
			continue;
		unpark(x);
		hpct__stdsrv_req_done(x);
		hpct__stdsrv_reply_err(x, HPCT_EPEERDEAD, s->lost_why);
		n++;
	}
	HPCT_WARN(HPCT_SUB_STD,
	          "rendezvous %s: %s; failing %d waiting requests, and every wait from now on "
	          "at epoch %lld or before",
	          s->addr, s->lost_why, n, (long long)c->epoch);
}

static void park(struct conn *c, size_t i)
{
	if (c->s->lost_rank >= 0 && c->epoch <= c->s->lost_epoch) {
		hpct__stdsrv_req_done(c);
		hpct__stdsrv_reply_err(c, HPCT_EPEERDEAD, c->s->lost_why);
		return;
	}
	struct entry *e = hpct__stdsrv_tab_get(&c->s->tab, hpct__stdsrv_ckey(c, i), c->klens[i]);
	if (!e) {
		hpct__stdsrv_conn_close(c);
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
	if (total > c->s->lim.store_bytes) {
		/* a key named many times: the answer could be far larger than the store */
		hpct__stdsrv_over_limit(
		        c, HPCT_ENOMEM,
		        "MGET of %zu keys: an answer of %zu bytes, over the store's "
		        "limit of %zu (HPCT_STD_STORE_MB)",
		        c->nkeys, total, c->s->lim.store_bytes);
		hpct__stdsrv_req_done(c);
		hpct__stdsrv_schedule(c);
		return;
	}
	if (hpct__stdsrv_out_reserve(c, total) != 0) {
		HPCT_WARN(HPCT_SUB_STD, "rendezvous %s: out of memory answering %zu keys to %s",
		          c->s->addr, c->nkeys, c->peer);
		hpct__stdsrv_conn_close(c);
		return;
	}
	hpct__stdsrv_out32(c, 0);
	for (size_t i = 0; i < c->nkeys; i++) {
		hpct__stdsrv_out32(c, c->ents[i]->vlen);
		hpct__stdsrv_put(c, c->ents[i]->val, c->ents[i]->vlen);
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
		hpct__stdsrv_entry_clear(t, c->ents[i]);
	hpct__stdsrv_req_done(c);
	hpct__stdsrv_schedule(c);
}

/* Answers the MGET if every key exists, else parks on the first missing one. */
void hpct__stdsrv_mget_try(struct conn *c)
{
	struct table *t = &c->s->tab;
	for (; c->cursor < c->nkeys; c->cursor++) {
		struct entry *e = hpct__stdsrv_tab_find(t, hpct__stdsrv_ckey(c, c->cursor),
		                                        c->klens[c->cursor]);
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
			hpct__stdsrv_conn_close(c);
			return;
		}
		/* Keys found before we parked may have been read away since. */
		for (size_t i = 0; i < c->nkeys; i++) {
			struct entry *e =
			        hpct__stdsrv_tab_find(t, hpct__stdsrv_ckey(c, i), c->klens[i]);
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

void hpct__stdsrv_waitge_try(struct conn *c)
{
	struct entry *e = hpct__stdsrv_tab_find(&c->s->tab, hpct__stdsrv_ckey(c, 0), c->klens[0]);
	int64_t cur = 0;
	if (e && e->present) {
		if (e->vlen != 8) {
			char msg[KEY_SHOWN + 80];
			snprintf(msg, sizeof(msg),
			         "key '%.*s' holds a %u-byte value, not a counter",
			         (int)(e->klen < KEY_SHOWN ? e->klen : KEY_SHOWN), e->key, e->vlen);
			hpct__stdsrv_req_done(c);
			hpct__stdsrv_reply_err(c, HPCT_EINVAL, msg);
			return;
		}
		cur = (int64_t)hpct__get64(e->val);
	}
	if (cur >= c->i64) {
		hpct__stdsrv_req_done(c);
		hpct__stdsrv_reply_status(c, 0);
	} else {
		park(c, 0);
	}
}

/* e changed: retries whoever waits on it.  e may be freed by the answers. */
void hpct__stdsrv_wake(struct entry *e, int was_absent)
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
			hpct__stdsrv_mget_try(w);
		else
			hpct__stdsrv_waitge_try(w);
		hpct__stdsrv_schedule(w);
		w = next;
	}
}
