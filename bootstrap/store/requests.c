/* The rootless store's requests (store.h's wire): what each does to the
 * key table, what it answers, and the GETs, WAITs and queue POPs it parks;
 * the caps' refusals logged naming the client, the key and the limit.
 * Only a group's primary serves its requests (others answer where the
 * group stands: ST_REDIRECT); a write's changes become one entry of the
 * group (data.c), and every answer is held until the group says it may go
 * (groups.c: the data it shows is committed and, for a read, confirmed). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/base/bytes.h"
#include "bootstrap/base/log.h"
#include "bootstrap/base/util.h"
#include "bootstrap/store/server.h"
#include "bootstrap/store/store.h"
#include "bootstrap/store/store_internal.h"
#include "bootstrap/store/table.h"
#include "hpct/hpct.h"

/* Queues a reply: u32 length, i32 status, a, b, then v (a reference to a
 * stored value, sent from the table's copy; may be NULL). */
static void reply_with(struct ssrv *s, struct sconn *c, int32_t status, const void *a, size_t alen,
                       const void *b, size_t blen, struct sval *v)
{
	size_t need = c->outlen + 8 + alen + blen;
	if (need > c->outcap) {
		unsigned char *o = realloc(c->out, need);
		if (!o) {
			close(c->fd);
			c->fd = -1;
			return;
		}
		c->out = o;
		set_outcap(s, c, need);
	}
	unsigned char *o = c->out + c->outlen;
	hpct__put32(o, (uint32_t)(4 + alen + blen + (v ? v->len : 0)));
	hpct__put32(o + 4, (uint32_t)status);
	if (alen)
		memcpy(o + 8, a, alen);
	if (blen)
		memcpy(o + 8 + alen, b, blen);
	c->outlen = need;
	if (v && v->len) {
		c->oval = sval_ref(v);
		c->ovoff = 0;
	}
	/* held until the data it saw is committed (and, a read, confirmed):
	 * a write's answers get the write's opnum once it is proposed */
	struct vr *g = sgrp_get(s, c->g, 0);
	c->held = 1;
	c->write = 0;
	c->need = g ? g->opnum : 0;
	c->asked = s->serving ? s->asked : hpct__now();
	if (s->serving && s->nmade < (int)(sizeof(s->made) / sizeof(s->made[0])))
		s->made[s->nmade++] = c;
	if (s->cap.on && s->cap.c == c) {
		size_t add = alen + blen + (v ? v->len : 0);
		if (s->cap.len + add > s->cap.cap) {
			unsigned char *nb = realloc(s->cap.b, s->cap.len + add);
			if (!nb) {
				s->cap.on = 0;
				return;
			}
			s->cap.b = nb;
			s->cap.cap = s->cap.len + add;
		}
		if (alen)
			memcpy(s->cap.b + s->cap.len, a, alen);
		if (blen)
			memcpy(s->cap.b + s->cap.len + alen, b, blen);
		if (v && v->len)
			memcpy(s->cap.b + s->cap.len + alen + blen, v->b, v->len);
		s->cap.len += add;
		s->cap.status = status;
	}
}

void sreq_reply(struct ssrv *s, struct sconn *c, int32_t status, const void *a, size_t alen,
                const void *b, size_t blen)
{
	reply_with(s, c, status, a, alen, b, blen, NULL);
}

void sreq_answer(struct ssrv *s, struct sconn *c, int32_t status, const void *a, size_t alen)
{
	int serving = s->serving;
	s->serving = 0; /* not one of the request's answers that wait for a write */
	reply_with(s, c, status, a, alen, NULL, 0, NULL);
	s->serving = serving;
	c->held = 0;
}

void sreq_redirect(struct ssrv *s, struct sconn *c, uint32_t g)
{
	char why[600];
	if (hpct__store_fenced(why, sizeof(why))) {
		sreq_answer(s, c, HPCT_EFENCED, why, strlen(why));
		return;
	}
	unsigned char pos[POSITION_MAX];
	sreq_answer(s, c, ST_REDIRECT, pos, sgrp_position(s, g, pos));
}

/* status 0, u32 length, the value */
static void reply_value(struct ssrv *s, struct sconn *c, struct sval *v)
{
	unsigned char l[4];
	hpct__put32(l, (uint32_t)v->len);
	reply_with(s, c, 0, l, 4, NULL, 0, v);
}

void sreq_unpark(struct sconn *c)
{
	free(c->key);
	c->key = NULL;
	c->parked = 0;
}

/* The items of a queue's value (frames that tile it, one at least): 0 and
 * their number, or HPCT_EINVAL. */
static int frames(const struct sval *v, int64_t *n_out)
{
	int64_t n = 0;
	size_t at = 0;
	while (v->len - at >= 4 && hpct__get32(v->b + at) <= v->len - at - 4) {
		at += 4 + (size_t)hpct__get32(v->b + at);
		n++;
	}
	if (at != v->len || n == 0)
		return HPCT_EINVAL;
	*n_out = n;
	return 0;
}

static int put2(struct ssrv *s, const struct sconn *c, const char *op, uint64_t ns, const char *key,
                const void *a, size_t alen, const void *b, size_t blen);

/* Gives c the first item of e's queue, the key deleted with the last: 0
 * (answered), or the status to answer (HPCT_EINVAL: not a queue;
 * HPCT_ENOMEM). */
static int pop(struct ssrv *s, struct sconn *c, uint64_t ns, const char *key, struct entry *e)
{
	int64_t n;
	if (frames(e->val, &n) != 0)
		return HPCT_EINVAL;
	/* the item outlives the value it leaves: the rest replaces it */
	uint32_t il = hpct__get32(e->val->b);
	unsigned char *item = malloc(il ? il : 1);
	if (!item)
		return HPCT_ENOMEM;
	memcpy(item, e->val->b + 4, il);
	int rc = 0;
	if (n == 1)
		stab_del(&s->t, ns, key);
	else
		rc = put2(s, c, "queue_pop", ns, key, e->val->b + 4 + il, e->val->len - 4 - il,
		          NULL, 0);
	if (rc == 0) {
		unsigned char l[4];
		hpct__put32(l, il);
		sreq_reply(s, c, 0, l, 4, item, il);
	}
	free(item);
	return rc;
}

static int parked_on(const struct sconn *c, uint64_t ns, const char *key)
{
	return c->parked && c->ns == ns && strcmp(c->key, key) == 0;
}

/* A key came into being: answer whoever waits for it, GETs and WAITs
 * first (a POP may take the key away), then POPs in the order they came,
 * while the key lasts. */
void sreq_woken(struct ssrv *s, uint64_t ns, const char *key)
{
	struct entry *e = stab_get(&s->t, ns, key);
	for (int i = 0; e && i < s->nc; i++) {
		struct sconn *c = &s->c[i];
		if (!parked_on(c, ns, key) || c->op == OP_QPOP)
			continue;
		if (c->op == OP_GET)
			reply_value(s, c, e->val);
		else
			sreq_reply(s, c, 0, NULL, 0, NULL, 0);
		sreq_unpark(c);
	}
	while ((e = stab_get(&s->t, ns, key))) {
		struct sconn *first = NULL;
		for (int i = 0; i < s->nc; i++)
			if (parked_on(&s->c[i], ns, key) && (!first || s->c[i].seq < first->seq))
				first = &s->c[i];
		if (!first)
			return;
		int rc = pop(s, first, ns, key, e);
		if (rc)
			sreq_reply(s, first, rc, NULL, 0, NULL, 0);
		sreq_unpark(first);
	}
}

static int counter_of(const struct entry *e, int64_t *v)
{
	char buf[32];
	if (!e) {
		*v = 0;
		return 0;
	}
	if (e->val->len == 0 || e->val->len >= sizeof(buf))
		return HPCT_EINVAL;
	memcpy(buf, e->val->b, e->val->len);
	buf[e->val->len] = 0;
	char *end;
	errno = 0;
	long long x = strtoll(buf, &end, 10);
	if (errno || *end)
		return HPCT_EINVAL;
	*v = x;
	return 0;
}

/* stab_put2, with a refusal logged naming the client, the key, the bytes
 * it came with (b's, when there is a b) and the limit; 0 or HPCT_ENOMEM
 * (the status the client gets). */
static int put2(struct ssrv *s, const struct sconn *c, const char *op, uint64_t ns, const char *key,
                const void *a, size_t alen, const void *b, size_t blen)
{
	size_t need = 0;
	int rc = stab_put2(&s->t, ns, key, a, alen, b, blen, &need);
	unsigned long quiet;
	if (rc == STAB_OK || rc == STAB_NOMEM || !hpct__log_burst_ok(&s->b_full, &quiet))
		return rc == STAB_OK ? 0 : HPCT_ENOMEM;
	char w[HPCT_ADDRSTRLEN + 32];
	HPCT_WARN(HPCT_SUB_NET,
	          "store: rank %d refused %s of key '%.*s%s' (namespace %#" PRIx64
	          ", %zu bytes) from %s: the store would hold %zu %s, over %s=%zu%s%.0lu%s",
	          s->rank, op, KEY_SHOWN, key, strlen(key) > KEY_SHOWN ? "..." : "", ns,
	          b ? blen : alen, ssrv_who(s, c, w, sizeof(w)), need,
	          rc == STAB_FULL_KEYS ? "keys" : "bytes of keys and values",
	          rc == STAB_FULL_KEYS ? "HPCT_STORE_MAX_KEYS" : "HPCT_STORE_MAX_BYTES",
	          rc == STAB_FULL_KEYS ? s->t.max_keys : s->t.max_bytes, quiet ? " (and " : "",
	          quiet, quiet ? " more refusals in the last second)" : "");
	return HPCT_ENOMEM;
}

static int put(struct ssrv *s, const struct sconn *c, const char *op, uint64_t ns, const char *key,
               const void *val, size_t len)
{
	return put2(s, c, op, ns, key, val, len, NULL, 0);
}

/* APPEND and QPUSH: `add` bytes after the key's value (e, or none); 0 or
 * the status to answer, refusals logged naming the client, the key and
 * the limit. */
static int extend(struct ssrv *s, const struct sconn *c, const char *op, uint64_t ns,
                  const char *key, const struct entry *e, const void *add, size_t alen)
{
	size_t was = e ? e->val->len : 0;
	unsigned long quiet;
	if (was + alen <= HPCT_STORE_MAX_VALUE)
		return put2(s, c, op, ns, key, e ? e->val->b : NULL, was, add, alen);
	if (hpct__log_burst_ok(&s->b_full, &quiet)) {
		char w[HPCT_ADDRSTRLEN + 32];
		HPCT_WARN(HPCT_SUB_NET,
		          "store: rank %d refused %s of %zu bytes to key '%.*s%s' (namespace "
		          "%#" PRIx64 ", holding %zu bytes) from %s: its value would pass %u "
		          "bytes, the most a value may hold (HPCT_STORE_MAX_VALUE)%s%.0lu%s",
		          s->rank, op, alen, KEY_SHOWN, key, strlen(key) > KEY_SHOWN ? "..." : "",
		          ns, was, ssrv_who(s, c, w, sizeof(w)), HPCT_STORE_MAX_VALUE,
		          quiet ? " (and " : "", quiet,
		          quiet ? " more refusals in the last second)" : "");
	}
	return HPCT_ENOMEM;
}

struct listing {
	unsigned char *p; /* NULL: only counting */
	size_t bytes;
	uint32_t n;
	uint32_t g; /* the group's keys only */
	int size;
};

static int list_one(const struct entry *e, void *arg)
{
	struct listing *l = arg;
	size_t kl = strlen(e->key);
	if (hpct__store_group_of(e->key, kl, l->size) != l->g)
		return 0;
	if (l->p) {
		hpct__put32(l->p + l->bytes, (uint32_t)kl);
		memcpy(l->p + l->bytes + 4, e->key, kl);
	}
	l->bytes += 4 + kl;
	l->n++;
	return 0;
}

/* LIST: u32 n, then each key; HPCT_ENOMEM (logged) when that would pass a
 * frame or, with what is on its way already, HPCT_STORE_MAX_BYTES. */
static void list(struct ssrv *s, struct sconn *c, uint64_t ns, int count)
{
	struct listing l = { .bytes = 4, .g = c->g, .size = s->size };
	stab_each(&s->t, ns, list_one, &l);
	size_t lim = HPCT_STORE_MAX_FRAME - 4;
	int over = l.bytes > lim || s->inflight + l.bytes > s->t.max_bytes;
	unsigned long quiet;
	if (over && hpct__log_burst_ok(&s->b_full, &quiet)) {
		char w[HPCT_ADDRSTRLEN + 32];
		HPCT_WARN(HPCT_SUB_NET,
		          "store: rank %d refused to list the %" PRIu32 " keys of namespace "
		          "%#" PRIx64 " to %s: their %zu bytes would pass %s=%zu%s%.0lu%s",
		          s->rank, l.n, ns, ssrv_who(s, c, w, sizeof(w)), l.bytes,
		          l.bytes > lim ? "a reply's most, HPCT_STORE_MAX_FRAME"
		                        : "(with the replies on their way) HPCT_STORE_MAX_BYTES",
		          l.bytes > lim ? lim : s->t.max_bytes, quiet ? " (and " : "", quiet,
		          quiet ? " more refusals in the last second)" : "");
	}
	if (count) {
		unsigned char b[8];
		hpct__put64(b, l.n);
		sreq_reply(s, c, 0, b, 8, NULL, 0);
		return;
	}
	if (over || !(l.p = malloc(l.bytes))) {
		sreq_reply(s, c, HPCT_ENOMEM, NULL, 0, NULL, 0);
		return;
	}
	hpct__put32(l.p, l.n);
	l.bytes = 4;
	l.n = 0;
	stab_each(&s->t, ns, list_one, &l);
	sreq_reply(s, c, 0, l.p, l.bytes, NULL, 0);
	free(l.p);
}

/* Parks c's GET, WAIT or QPOP on a missing key for `ms`. */
static void park(struct ssrv *s, struct sconn *c, uint8_t op, uint64_t ns, const char *key,
                 int64_t ms)
{
	if (!(c->key = strdup(key))) {
		sreq_reply(s, c, HPCT_ENOMEM, NULL, 0, NULL, 0);
		return;
	}
	c->parked = 1;
	c->op = op;
	c->ns = ns;
	c->seq = s->parks++;
	c->deadline = hpct__now() + (ms < 0 ? 0 : (double)ms / 1000);
}

static int serve(struct ssrv *s, struct sconn *c, uint8_t op, uint64_t ns, const char *key,
                 const unsigned char *p, size_t len);

/* The request's group (OP_COUNT and OP_LIST name theirs): 0, or -1 when
 * the request is malformed. */
static int group_of(const struct ssrv *s, uint8_t op, const char *key, size_t klen,
                    const unsigned char *f, size_t flen, uint32_t *g)
{
	if (op == OP_COUNT || op == OP_LIST || op == OP_WHO) {
		if (flen != 4 || klen)
			return -1;
		*g = hpct__get32(f);
		return *g < (uint32_t)s->size ? 0 : -1;
	}
	*g = hpct__store_group_of(key, klen, s->size);
	return 0;
}

/* One request; 0, or -1 when the connection must close (malformed).  Its
 * key is copied out, NUL-terminated (on the heap past a short one). */
int sreq_serve(struct ssrv *s, struct sconn *c, const unsigned char *p, size_t len, double now)
{
	if (len < HDR)
		return -1;
	uint8_t op = p[0] & ~OP_RID;
	int rid = (p[0] & OP_RID) != 0;
	uint64_t ns = hpct__get64(p + 1);
	uint32_t klen = hpct__get32(p + 9);
	if (klen > HPCT_STORE_MAX_KEY || klen > len - HDR || (rid && len - HDR - klen < 16))
		return -1;
	char small[256], *key = klen < sizeof(small) ? small : malloc((size_t)klen + 1);
	if (!key)
		return -1;
	memcpy(key, p + HDR, klen);
	key[klen] = 0;
	const unsigned char *f = p + HDR + klen;
	size_t flen = len - HDR - klen;
	int rc = 0;
	uint32_t g = 0;
	c->blocked = 0;
	struct vr *v = NULL;
	if (strlen(key) != klen || op < OP_SET || op > OP_WHO ||
	    group_of(s, op, key, klen, f, flen, &g) != 0) {
		rc = -1;
		goto done;
	}
	c->g = g;
	if (op == OP_WHO) { /* where the group stands here, at once */
		unsigned char pos[POSITION_MAX];
		sreq_answer(s, c, 0, pos, sgrp_position(s, g, pos));
		goto done;
	}
	v = sgrp_get(s, g, 0);
	if (!v || !vr_primary(v, &s->vw) || hpct__store_fenced(NULL, 0)) {
		sreq_redirect(s, c, g);
		goto done;
	}
	if (v->next_at) { /* a reconfiguration is pending: served once it is done */
		c->blocked = 1;
		goto done;
	}
	s->serving = 1;
	s->asked = now;
	s->nmade = 0;
	sdata_begin(s);
	if (!rid || !sdata_seen(s, c, g, hpct__get64(f), hpct__get64(f + 8)))
		rc = serve(s, c, op, ns, key, f + (rid ? 16 : 0), flen - (rid ? 16 : 0));
	uint64_t opnum;
	if (sdata_end(s, g, now, &opnum) == 0)
		for (int i = 0; i < s->nmade; i++) {
			s->made[i]->need = opnum;
			s->made[i]->write = 1;
		}
	s->serving = 0;
	if (c->held && !vr_ready(v, &s->vw, c->need, c->asked, c->write, now))
		vr_confirm(v, &s->vw, c->asked, now); /* a read with no lease: a quorum confirms */
done:
	if (key != small)
		free(key);
	return rc;
}

static int serve(struct ssrv *s, struct sconn *c, uint8_t op, uint64_t ns, const char *key,
                 const unsigned char *p, size_t len)
{
	struct entry *e = stab_get(&s->t, ns, key);
	unsigned char b[8];
	switch (op) {
	case OP_SET: {
		if (len < 4 || hpct__get32(p) != len - 4)
			return -1;
		int rc = put(s, c, "set", ns, key, p + 4, len - 4);
		sreq_reply(s, c, rc, NULL, 0, NULL, 0);
		if (rc == 0)
			sreq_woken(s, ns, key);
		return 0;
	}
	case OP_GET:
	case OP_WAIT: {
		if (len != 8)
			return -1;
		if (e) {
			if (op == OP_GET)
				reply_value(s, c, e->val);
			else
				sreq_reply(s, c, 0, NULL, 0, NULL, 0);
			return 0;
		}
		park(s, c, op, ns, key, (int64_t)hpct__get64(p));
		return 0;
	}
	case OP_ADD: {
		if (len != 8)
			return -1;
		int64_t v = 0;
		int rc = counter_of(e, &v);
		if (rc == 0 && __builtin_add_overflow(v, (int64_t)hpct__get64(p), &v))
			rc = HPCT_EINVAL; /* the counter would overflow: left as it is */
		if (rc == 0) {
			char text[32];
			int n = snprintf(text, sizeof(text), "%" PRId64, v);
			rc = put(s, c, "add", ns, key, text, (size_t)n);
		}
		hpct__put64(b, (uint64_t)v);
		sreq_reply(s, c, rc, b, rc ? 0 : 8, NULL, 0);
		if (rc == 0 && !e)
			sreq_woken(s, ns, key);
		return 0;
	}
	case OP_CAS: {
		if (len < 4)
			return -1;
		uint32_t el = hpct__get32(p);
		if (el > len - 4 || len - 4 - el < 4)
			return -1;
		const unsigned char *exp = p + 4, *des = p + 8 + el;
		uint32_t dl = hpct__get32(p + 4 + el);
		if (dl != len - 8 - el)
			return -1;
		int rc = 0, made = 0;
		if (!e) {
			if (el == 0) {
				rc = put(s, c, "compare_set", ns, key, des, dl);
				made = rc == 0;
			}
		} else if (e->val->len == el && memcmp(e->val->b, exp, el) == 0) {
			rc = put(s, c, "compare_set", ns, key, des, dl);
		}
		e = stab_get(&s->t, ns, key);
		if (rc)
			sreq_reply(s, c, rc, NULL, 0, NULL, 0);
		else if (e)
			reply_value(s, c, e->val);
		else { /* missing, and something else was expected: c10d answers that */
			hpct__put32(b, el);
			sreq_reply(s, c, 0, b, 4, exp, el);
		}
		if (made)
			sreq_woken(s, ns, key);
		return 0;
	}
	case OP_CHECK:
	case OP_DEL:
		if (len != 0)
			return -1;
		b[0] = e != NULL;
		if (op == OP_DEL && e)
			stab_del(&s->t, ns, key);
		sreq_reply(s, c, 0, b, 1, NULL, 0);
		return 0;
	case OP_COUNT:
		list(s, c, ns, 1);
		return 0;
	case OP_APPEND:
	case OP_QPUSH: {
		if (len < 4 || hpct__get32(p) != len - 4)
			return -1;
		int64_t n;
		int rc = 0;
		if (op == OP_QPUSH && e && frames(e->val, &n) != 0)
			rc = HPCT_EINVAL; /* not a queue: left as it is */
		else if (op == OP_APPEND)
			rc = extend(s, c, "append", ns, key, e, p + 4, len - 4);
		else /* the body is the item's frame */
			rc = extend(s, c, "queue_push", ns, key, e, p, len);
		sreq_reply(s, c, rc, NULL, 0, NULL, 0);
		if (rc == 0)
			sreq_woken(s, ns, key);
		return 0;
	}
	case OP_QPOP: {
		if (len != 8)
			return -1;
		if (!e) {
			park(s, c, op, ns, key, (int64_t)hpct__get64(p));
			return 0;
		}
		int rc = pop(s, c, ns, key, e);
		if (rc)
			sreq_reply(s, c, rc, NULL, 0, NULL, 0);
		return 0;
	}
	case OP_QLEN: {
		if (len != 0)
			return -1;
		int64_t n = 0;
		int rc = e ? frames(e->val, &n) : 0;
		hpct__put64(b, (uint64_t)n);
		sreq_reply(s, c, rc, b, rc ? 0 : 8, NULL, 0);
		return 0;
	}
	case OP_LIST:
		list(s, c, ns, 0);
		return 0;
	}
	return -1;
}
