/* The data of the store's groups (see server.h): what a write changed, as
 * the entry its group's primary proposes (vr.h) and its other members
 * apply; a group's data streamed to a peer and installed from one; and the
 * answers kept for a retry, replicated with the writes they answer.
 *
 * An entry (all big-endian):
 *   u32 nkeys, then each: u64 ns, u32 klen, key, u8 present, u32 vlen, value
 *   u32 nrecs, then each: u64 cid, u64 seq, i32 status, u32 len, answer
 * A key's state is shipped whole (a member applies it without knowing the
 * operation), so applying one twice, or after data streamed, is harmless.
 * A member applies entries and data past the store's caps: the primary
 * refused what would not fit, and a member must hold what its quorum
 * holds. */
#include <stdlib.h>
#include <string.h>

#include "bootstrap/base/bytes.h"
#include "bootstrap/base/log.h"
#include "bootstrap/store/server.h"
#include "bootstrap/store/store_internal.h"

/* A retry's answer: per group and client id, the last write's. */
struct srec {
	struct srec *next;
	uint32_t g;
	uint64_t cid, seq;
	int32_t status;
	unsigned char *b;
	size_t len;
	double at;
};

#define REC_BUCKETS 4096

struct srec_table {
	struct srec *b[REC_BUCKETS];
	size_t n;
	double swept;
};

struct vr_snap {
	struct skey {
		uint64_t ns;
		char *key;
		unsigned char *v;
		size_t vlen;
	} * k;
	size_t nk, kcap;
	struct srec *r; /* a list */
};

static struct ssrv *recorder; /* the table's hook has no argument */

static void changed(uint64_t ns, const char *key)
{
	struct ssrv *s = recorder;
	if (!s || !s->recording)
		return;
	for (int i = 0; i < s->ndirty; i++)
		if (s->dirty[i].ns == ns && strcmp(s->dirty[i].key, key) == 0)
			return;
	if (s->ndirty == s->dcap) {
		int cap = s->dcap ? s->dcap * 2 : 8;
		void *d = realloc(s->dirty, (size_t)cap * sizeof(*s->dirty));
		if (!d)
			return; /* sdata_end sees fewer keys: ndirty stays honest below */
		s->dirty = d;
		s->dcap = cap;
	}
	char *k = strdup(key);
	if (!k)
		return;
	s->dirty[s->ndirty].ns = ns;
	s->dirty[s->ndirty++].key = k;
}

static struct srec **rec_slot(struct srec_table *t, uint32_t g, uint64_t cid)
{
	struct srec **p = &t->b[hpct__hash_u64(cid, g) % REC_BUCKETS];
	while (*p && ((*p)->g != g || (*p)->cid != cid))
		p = &(*p)->next;
	return p;
}

static void rec_free(struct srec *r)
{
	if (r)
		free(r->b);
	free(r);
}

/* Keeps (g, cid)'s answer (a copy of b), replacing the last one. */
static void remember(struct ssrv *s, uint32_t g, uint64_t cid, uint64_t seq, int32_t status,
                     const unsigned char *b, size_t len, double now)
{
	if (!cid)
		return;
	if (!s->recs && !(s->recs = calloc(1, sizeof(*s->recs))))
		return;
	struct srec **p = rec_slot(s->recs, g, cid), *r = *p;
	unsigned char *copy = malloc(len ? len : 1);
	if (!copy || (!r && !(r = calloc(1, sizeof(*r))))) {
		free(copy);
		return;
	}
	if (!*p) {
		*p = r;
		s->recs->n++;
	}
	if (len)
		memcpy(copy, b, len);
	free(r->b);
	r->g = g;
	r->cid = cid;
	r->seq = seq;
	r->status = status;
	r->b = copy;
	r->len = len;
	r->at = now;
}

void sdata_begin(struct ssrv *s)
{
	recorder = s;
	s->t.changed = changed;
	s->recording = 1;
	s->ndirty = 0;
	s->cap.on = 0;
}

int sdata_seen(struct ssrv *s, struct sconn *c, uint32_t g, uint64_t cid, uint64_t seq)
{
	struct srec *r = s->recs && cid ? *rec_slot(s->recs, g, cid) : NULL;
	if (r && r->seq == seq) {
		sreq_reply(s, c, r->status, r->b, r->len, NULL, 0);
		return 1;
	}
	s->cap.on = 1;
	s->cap.c = c;
	s->cap.cid = cid;
	s->cap.seq = seq;
	s->cap.len = 0;
	s->cap.status = 0;
	return 0;
}

/* The entry of what changed (see the head comment), malloc'd. */
static unsigned char *entry_of(struct ssrv *s, size_t *len_out)
{
	size_t len = 8;
	for (int i = 0; i < s->ndirty; i++) {
		struct entry *e = stab_get(&s->t, s->dirty[i].ns, s->dirty[i].key);
		len += 8 + 4 + strlen(s->dirty[i].key) + 1 + 4 + (e ? e->val->len : 0);
	}
	if (s->cap.on)
		len += 8 + 8 + 4 + 4 + s->cap.len;
	unsigned char *b = malloc(len), *p = b;
	if (!b)
		return NULL;
	hpct__put32(p, (uint32_t)s->ndirty);
	p += 4;
	for (int i = 0; i < s->ndirty; i++) {
		const char *key = s->dirty[i].key;
		struct entry *e = stab_get(&s->t, s->dirty[i].ns, key);
		size_t kl = strlen(key), vl = e ? e->val->len : 0;
		hpct__put64(p, s->dirty[i].ns);
		hpct__put32(p + 8, (uint32_t)kl);
		memcpy(p + 12, key, kl);
		p += 12 + kl;
		*p++ = e != NULL;
		hpct__put32(p, (uint32_t)vl);
		if (vl)
			memcpy(p + 4, e->val->b, vl);
		p += 4 + vl;
	}
	hpct__put32(p, s->cap.on ? 1 : 0);
	p += 4;
	if (s->cap.on) {
		hpct__put64(p, s->cap.cid);
		hpct__put64(p + 8, s->cap.seq);
		hpct__put32(p + 16, (uint32_t)s->cap.status);
		hpct__put32(p + 20, (uint32_t)s->cap.len);
		if (s->cap.len)
			memcpy(p + 24, s->cap.b, s->cap.len);
	}
	*len_out = len;
	return b;
}

int sdata_end(struct ssrv *s, uint32_t g, double now, uint64_t *opnum_out)
{
	s->recording = 0;
	int rc = 1;
	if (s->cap.on && s->ndirty)
		remember(s, g, s->cap.cid, s->cap.seq, s->cap.status, s->cap.b, s->cap.len, now);
	if (s->ndirty) {
		size_t len = 0;
		unsigned char *e = entry_of(s, &len);
		struct vr *v = sgrp_get(s, g, 0);
		rc = e && v && vr_propose(v, &s->vw, now, e, len, opnum_out) == 0 ? 0 : -1;
		if (rc)
			HPCT_WARN(HPCT_SUB_NET,
			          "store: rank %d: a change to group %u could not be sent to its "
			          "other homes (%s)",
			          s->rank, g, e ? "not its primary any more" : "no memory");
		free(e);
	}
	for (int i = 0; i < s->ndirty; i++)
		free(s->dirty[i].key);
	s->ndirty = 0;
	s->cap.on = 0;
	return rc;
}

/* Puts past the caps (a member holds what its quorum holds). */
static int put_forced(struct stab *t, uint64_t ns, const char *key, const void *v, size_t len)
{
	size_t mk = t->max_keys, mb = t->max_bytes, need;
	t->max_keys = t->max_bytes = SIZE_MAX;
	int rc = stab_put(t, ns, key, v, len, &need);
	t->max_keys = mk;
	t->max_bytes = mb;
	return rc;
}

void sdata_apply(struct ssrv *s, uint32_t g, const void *entry, size_t len)
{
	const unsigned char *p = entry, *end = p + len;
	if (len < 4)
		goto bad;
	uint32_t n = hpct__get32(p);
	p += 4;
	for (uint32_t i = 0; i < n; i++) {
		if (end - p < 12)
			goto bad;
		uint64_t ns = hpct__get64(p);
		uint32_t kl = hpct__get32(p + 8);
		if ((size_t)(end - p) < 12 + (size_t)kl + 5)
			goto bad;
		char *key = strndup((const char *)p + 12, kl);
		p += 12 + kl;
		int present = *p++;
		uint32_t vl = hpct__get32(p);
		p += 4;
		if (!key || (size_t)(end - p) < vl) {
			free(key);
			goto bad;
		}
		if (present && put_forced(&s->t, ns, key, p, vl) != STAB_OK)
			HPCT_WARN(HPCT_SUB_NET,
			          "store: rank %d is out of memory for key '%.100s' of group %u: "
			          "its copy of it is behind",
			          s->rank, key, g);
		else if (!present)
			stab_del(&s->t, ns, key);
		free(key);
		p += vl;
	}
	if (end - p < 4)
		goto bad;
	n = hpct__get32(p);
	p += 4;
	for (uint32_t i = 0; i < n; i++) {
		if (end - p < 24 || (size_t)(end - p - 24) < hpct__get32(p + 20))
			goto bad;
		remember(s, g, hpct__get64(p), hpct__get64(p + 8), (int32_t)hpct__get32(p + 16),
		         p + 24, hpct__get32(p + 20), hpct__now());
		p += 24 + hpct__get32(p + 20);
	}
	return;
bad:
	HPCT_WARN(HPCT_SUB_NET, "store: rank %d: a malformed entry for group %u (%zu bytes)",
	          s->rank, g, len);
}

struct in_group {
	struct ssrv *s;
	uint32_t g;
	struct {
		uint64_t ns;
		char *key;
	} * k;
	size_t n, cap;
};

static int collect(const struct entry *e, void *arg)
{
	struct in_group *x = arg;
	if (hpct__store_group_of(e->key, strlen(e->key), x->s->size) != x->g)
		return 0;
	if (x->n == x->cap) {
		size_t cap = x->cap ? x->cap * 2 : 64;
		void *k = realloc(x->k, cap * sizeof(*x->k));
		if (!k)
			return -1;
		x->k = k;
		x->cap = cap;
	}
	x->k[x->n].ns = e->ns;
	x->k[x->n++].key = e->key;
	return 0;
}

void sdata_install(struct ssrv *s, uint32_t g, struct vr_snap *snap)
{
	struct in_group x = { .s = s, .g = g };
	s->recording = 0;
	stab_all(&s->t, collect, &x);
	for (size_t i = 0; i < x.n; i++) {
		char *key = strdup(x.k[i].key);
		if (key)
			stab_del(&s->t, x.k[i].ns, key);
		free(key);
	}
	free(x.k);
	for (int b = 0; s->recs && b < REC_BUCKETS; b++)
		for (struct srec **p = &s->recs->b[b]; *p;) {
			if ((*p)->g != g) {
				p = &(*p)->next;
				continue;
			}
			struct srec *r = *p;
			*p = r->next;
			rec_free(r);
			s->recs->n--;
		}
	if (!snap)
		return;
	for (size_t i = 0; i < snap->nk; i++)
		if (put_forced(&s->t, snap->k[i].ns, snap->k[i].key, snap->k[i].v, snap->k[i].vlen) !=
		    STAB_OK)
			HPCT_WARN(HPCT_SUB_NET,
			          "store: rank %d is out of memory for the keys of group %u it was "
			          "sent",
			          s->rank, g);
	double now = hpct__now();
	for (struct srec *r = snap->r; r; r = r->next)
		remember(s, g, r->cid, r->seq, r->status, r->b, r->len, now);
	sdata_release(snap);
}

void sdata_release(struct vr_snap *snap)
{
	if (!snap)
		return;
	for (size_t i = 0; i < snap->nk; i++) {
		free(snap->k[i].key);
		free(snap->k[i].v);
	}
	free(snap->k);
	for (struct srec *r = snap->r, *next; r; r = next) {
		next = r->next;
		rec_free(r);
	}
	free(snap);
}

int sdata_stream(struct ssrv *s, uint32_t g, int (*put)(void *arg, const unsigned char *f,
                                                        size_t len),
                 void *arg)
{
	struct in_group x = { .s = s, .g = g };
	if (stab_all(&s->t, collect, &x) != 0) {
		free(x.k);
		return -1;
	}
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < x.n; i++) {
		struct entry *e = stab_get(&s->t, x.k[i].ns, x.k[i].key);
		size_t kl = strlen(e->key), len = 1 + 4 + 8 + 4 + kl + 4 + e->val->len;
		unsigned char *f = malloc(4 + len);
		if (!f) {
			rc = -1;
			break;
		}
		hpct__put32(f, (uint32_t)len);
		f[4] = OP_P_KEY;
		hpct__put32(f + 5, g);
		hpct__put64(f + 9, e->ns);
		hpct__put32(f + 17, (uint32_t)kl);
		memcpy(f + 21, e->key, kl);
		hpct__put32(f + 21 + kl, (uint32_t)e->val->len);
		memcpy(f + 25 + kl, e->val->b, e->val->len);
		rc = put(arg, f, 4 + len);
		free(f);
	}
	free(x.k);
	for (int b = 0; rc == 0 && s->recs && b < REC_BUCKETS; b++)
		for (struct srec *r = s->recs->b[b]; rc == 0 && r; r = r->next) {
			if (r->g != g)
				continue;
			size_t len = 1 + 4 + 8 + 8 + 4 + 4 + r->len;
			unsigned char *f = malloc(4 + len);
			if (!f) {
				rc = -1;
				break;
			}
			hpct__put32(f, (uint32_t)len);
			f[4] = OP_P_REC;
			hpct__put32(f + 5, g);
			hpct__put64(f + 9, r->cid);
			hpct__put64(f + 17, r->seq);
			hpct__put32(f + 25, (uint32_t)r->status);
			hpct__put32(f + 29, (uint32_t)r->len);
			if (r->len)
				memcpy(f + 33, r->b, r->len);
			rc = put(arg, f, 4 + len);
			free(f);
		}
	return rc;
}

int sdata_stage(struct vr_snap **stage, uint8_t op, const unsigned char *p, size_t len)
{
	if (!*stage && !(*stage = calloc(1, sizeof(**stage))))
		return -1;
	struct vr_snap *sn = *stage;
	if (op == OP_P_KEY) {
		if (len < 16 || hpct__get32(p + 12) > len - 16 ||
		    len - 16 - hpct__get32(p + 12) < 4)
			return -1;
		uint32_t kl = hpct__get32(p + 12);
		uint32_t vl = hpct__get32(p + 16 + kl);
		if (vl != len - 20 - kl || memchr(p + 16, 0, kl))
			return -1;
		if (sn->nk == sn->kcap) {
			size_t cap = sn->kcap ? sn->kcap * 2 : 64;
			void *k = realloc(sn->k, cap * sizeof(*sn->k));
			if (!k)
				return -1;
			sn->k = k;
			sn->kcap = cap;
		}
		struct skey *k = &sn->k[sn->nk];
		k->ns = hpct__get64(p + 4);
		k->key = strndup((const char *)p + 16, kl);
		k->v = malloc(vl ? vl : 1);
		k->vlen = vl;
		if (!k->key || !k->v) {
			free(k->key);
			free(k->v);
			return -1;
		}
		memcpy(k->v, p + 20 + kl, vl);
		sn->nk++;
		return 0;
	}
	if (len < 28 || hpct__get32(p + 24) != len - 28)
		return -1;
	struct srec *r = calloc(1, sizeof(*r));
	if (!r || !(r->b = malloc(len - 28 ? len - 28 : 1))) {
		free(r);
		return -1;
	}
	r->cid = hpct__get64(p + 4);
	r->seq = hpct__get64(p + 12);
	r->status = (int32_t)hpct__get32(p + 20);
	r->len = len - 28;
	memcpy(r->b, p + 28, r->len);
	r->next = sn->r;
	sn->r = r;
	return 0;
}

void sdata_expire(struct ssrv *s, double now)
{
	/* a client retries within its deadline (HPCT_TIMEOUT, and a wait's
	 * own), so an answer twice that old, and a minute more, is asked for
	 * no more */
	double keep = 2 * s->timeout_s + 60;
	if (!s->recs || now - s->recs->swept < keep / 4)
		return;
	s->recs->swept = now;
	for (int b = 0; b < REC_BUCKETS; b++)
		for (struct srec **p = &s->recs->b[b]; *p;) {
			if (now - (*p)->at < keep) {
				p = &(*p)->next;
				continue;
			}
			struct srec *r = *p;
			*p = r->next;
			rec_free(r);
			s->recs->n--;
		}
}

void sdata_clear(struct ssrv *s)
{
	for (int b = 0; s->recs && b < REC_BUCKETS; b++)
		for (struct srec *r = s->recs->b[b], *next; r; r = next) {
			next = r->next;
			rec_free(r);
		}
	free(s->recs);
	s->recs = NULL;
	for (int i = 0; i < s->ndirty; i++)
		free(s->dirty[i].key);
	free(s->dirty);
	s->dirty = NULL;
	s->ndirty = s->dcap = 0;
	free(s->cap.b);
	s->cap.b = NULL;
	s->cap.cap = s->cap.len = 0;
}
