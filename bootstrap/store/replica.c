/* The rootless store's replicas (HPCT_STORE_REPLICAS = R > 1): a key
 * lives on R homes, its first home (store_internal.h) and the R - 1 ranks
 * after it.  Clients ask the first of them that is alive (client.c); that
 * home serves the request as with one home, and what the request changed
 * (every key it set or deleted, a woken queue's pop too) goes, by this
 * process's forwarder thread, to the key's other homes in the order the
 * requests came (OP_REPL: the key's whole state, with the request's id
 * and answer).  An answer made meanwhile, to this client or any other,
 * waits until every change made before it is on every live home of its
 * key (output commit): no client ever sees a state that a home's death
 * could take back, and a client that retries a write at the next home
 * (its first died before answering) gets the first answer, not a second
 * write.  The server thread never waits on another rank: only the
 * forwarder does, on the other homes' server threads, which answer an
 * OP_REPL at once, so two homes never wait on each other.  A home whose
 * connection closes or is refused is dead to the forwarder from then on.
 *
 * OP_REPL body: u8 present, u32 length, value, u64 client id, u64
 * sequence (0, 0: none), i32 status and u32 length + bytes of the answer. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/base/bytes.h"
#include "bootstrap/base/log.h"
#include "bootstrap/store/server.h"
#include "bootstrap/store/store.h"
#include "bootstrap/store/store_internal.h"
#include "bootstrap/world.h"

#define DEDUPE_SLOTS 4096 /* clients whose last write a home remembers */

struct srepl_dedupe {
	uint64_t cid, seq;
	int32_t status;
	unsigned char *b;
	size_t len;
};

struct item {
	enum { IT_KEY, IT_HAVE, IT_TELL } kind;
	uint64_t ns;
	char *key; /* IT_KEY */
	unsigned char *body;
	size_t len;
	int first; /* the key's first home (IT_KEY, IT_HAVE); IT_TELL: the rank told */
};

struct srepl_batch {
	struct srepl_batch *next;
	uint64_t id;
	struct item *it;
	int n;
};

/* The server thread's, while it serves a request. */
static struct ssrv *recorder;

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
			return; /* that change stays here: logged by the apply of the next */
		s->dirty = d;
		s->dcap = cap;
	}
	char *k = strdup(key);
	if (!k)
		return;
	s->dirty[s->ndirty].ns = ns;
	s->dirty[s->ndirty++].key = k;
}

static struct srepl_dedupe *slot(struct ssrv *s, uint64_t cid)
{
	return &s->dd[hpct__hash(&cid, sizeof(cid), 0x6464) % DEDUPE_SLOTS];
}

static void remember(struct ssrv *s, uint64_t cid, uint64_t seq, int32_t status,
                     const unsigned char *b, size_t len)
{
	if (!cid || !s->dd)
		return;
	struct srepl_dedupe *d = slot(s, cid);
	unsigned char *copy = malloc(len ? len : 1);
	if (!copy)
		return;
	if (len)
		memcpy(copy, b, len);
	free(d->b);
	*d = (struct srepl_dedupe){
		.cid = cid, .seq = seq, .status = status, .b = copy, .len = len
	};
}

int srepl_seen(struct ssrv *s, struct sconn *c, uint64_t cid, uint64_t seq)
{
	if (s->R < 2 || !s->dd || !cid)
		return 0;
	struct srepl_dedupe *d = slot(s, cid);
	if (d->cid == cid && d->seq == seq) {
		sreq_reply(s, c, d->status, d->b, d->len, NULL, 0);
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

void srepl_begin(struct ssrv *s, const struct sconn *c)
{
	(void)c;
	if (s->R < 2)
		return;
	recorder = s;
	s->recording = 1;
	s->ndirty = 0;
	s->cap.on = 0;
}

int srepl_held(const struct ssrv *s, const struct sconn *c)
{
	return s->R > 1 && !c->repl && c->need > __atomic_load_n(&s->fwd_done, __ATOMIC_ACQUIRE);
}

/* One change's body (see the head comment). */
static unsigned char *body_of(struct ssrv *s, uint64_t ns, const char *key, size_t *len)
{
	struct entry *e = stab_get(&s->t, ns, key);
	size_t vl = e ? e->val->len : 0, rl = s->cap.on ? s->cap.len : 0;
	unsigned char *b = malloc(1 + 4 + vl + 8 + 8 + 4 + 4 + rl);
	if (!b)
		return NULL;
	unsigned char *p = b;
	*p++ = e ? 1 : 0;
	hpct__put32(p, (uint32_t)vl);
	p += 4;
	if (vl)
		memcpy(p, e->val->b, vl);
	p += vl;
	hpct__put64(p, s->cap.on ? s->cap.cid : 0);
	hpct__put64(p + 8, s->cap.on ? s->cap.seq : 0);
	hpct__put32(p + 16, (uint32_t)(s->cap.on ? s->cap.status : 0));
	hpct__put32(p + 20, (uint32_t)rl);
	p += 24;
	if (rl)
		memcpy(p, s->cap.b, rl);
	*len = (size_t)(p - b) + rl;
	return b;
}

static void enqueue(struct ssrv *s, struct srepl_batch *bt, struct item *it, int n);

void srepl_end(struct ssrv *s, struct sconn *c)
{
	if (s->R < 2)
		return;
	s->recording = 0;
	recorder = NULL;
	if (s->cap.on)
		remember(s, s->cap.cid, s->cap.seq, s->cap.status, s->cap.b, s->cap.len);
	if (s->unheld) {
		s->unheld = 0;
		return;
	}
	if (s->ndirty == 0) {
		/* nothing changed: the answer waits only for what came before */
		c->need = s->fwd_issued;
		s->cap.on = 0;
		return;
	}
	struct srepl_batch *bt = calloc(1, sizeof(*bt));
	struct item *it = bt ? calloc((size_t)s->ndirty, sizeof(*it)) : NULL;
	int n = 0;
	for (int i = 0; i < s->ndirty; i++) {
		uint64_t ns = s->dirty[i].ns;
		char *key = s->dirty[i].key;
		size_t len = 0;
		unsigned char *body = it ? body_of(s, ns, key, &len) : NULL;
		if (!body) {
			HPCT_WARN(HPCT_SUB_NET,
			          "store: rank %d: no memory to send key '%.100s' to its other "
			          "homes: a loss of this rank loses that change",
			          s->rank, key);
			free(key);
			continue;
		}
		it[n++] = (struct item){ .kind = IT_KEY,
			                 .ns = ns,
			                 .key = key,
			                 .body = body,
			                 .len = len,
			                 .first = hpct__store_home_of(ns, key, strlen(key),
			                                              s->size) };
	}
	s->ndirty = 0;
	s->cap.on = 0;
	if (!bt || n == 0) {
		free(it);
		free(bt);
		c->need = s->fwd_issued;
		return;
	}
	enqueue(s, bt, it, n);
}

static void enqueue(struct ssrv *s, struct srepl_batch *bt, struct item *it, int n)
{
	bt->id = __atomic_add_fetch(&s->fwd_issued, 1, __ATOMIC_RELEASE);
	bt->it = it;
	bt->n = n;
	pthread_mutex_lock(&s->fmu);
	if (s->ftail)
		s->ftail->next = bt;
	else
		s->fhead = bt;
	s->ftail = bt;
	pthread_cond_signal(&s->fcv);
	pthread_mutex_unlock(&s->fmu);
}

/* One item to its targets (the forwarder's handle h): a key's state or
 * OP_HAVE to the other live homes of its first home, and on to the next
 * live rank when one of them is found gone; OP_DEAD to the rank told. */
static void forward(struct ssrv *s, struct hpct_store *h, const struct item *it)
{
	int sent[64], ns = 0;
	for (int tries = 0; tries < s->size; tries++) {
		int homes[64], n, to = -1;
		pthread_mutex_lock(&s->wmu);
		if (!s->w) {
			/* the world ended: nothing is sent for it */
		} else if (it->kind == IT_TELL) {
			to = tries == 0 && !hpct__store_dead(s->w, it->first) ? it->first : -1;
		} else {
			n = hpct__store_live_homes(s->w, it->first, s->R, homes);
			for (int k = 0; k < n && to < 0; k++) {
				int done = homes[k] == s->rank;
				for (int j = 0; j < ns && !done; j++)
					done = sent[j] == homes[k];
				if (!done)
					to = homes[k];
			}
		}
		pthread_mutex_unlock(&s->wmu);
		if (to < 0)
			return;
		static const uint8_t op_of[] = {
			[IT_KEY] = OP_REPL, [IT_HAVE] = OP_HAVE, [IT_TELL] = OP_DEAD
		};
		int rc = hpct__store_forward(h, to, op_of[it->kind], it->ns, it->key ? it->key : "",
		                             it->body, it->len);
		if (ns < 64)
			sent[ns++] = to;
		pthread_mutex_lock(&s->wmu);
		int news = (rc == HPCT_EPEERDEAD || rc == HPCT_ETIMEDOUT) && s->w &&
		           hpct__store_mark_dead(s->w, to);
		pthread_mutex_unlock(&s->wmu);
		if (rc == HPCT_EPEERDEAD || rc == HPCT_ETIMEDOUT) {
			if (news)
				HPCT_WARN(HPCT_SUB_NET,
				          "store: rank %d: rank %d is gone (%s): the keys it was a "
				          "home of go to the next live ranks",
				          s->rank, to, hpct_last_error());
		} else if (rc) {
			HPCT_WARN(HPCT_SUB_NET,
			          "store: rank %d: rank %d did not keep key '%.100s' (%s)", s->rank,
			          to, it->key ? it->key : "", hpct_last_error());
		}
	}
}

/* The forwarder: batches in order, each item to its targets; then the
 * answers made before the next batch may go. */
static void *forwarder(void *arg)
{
	pthread_setname_np(pthread_self(), "hpct-store-fwd"); /* in top, gdb, perf */
	struct ssrv *s = arg;
	struct hpct_store *h = NULL;
	pthread_mutex_lock(&s->wmu);
	int rc = s->w ? hpct__store_open(s->w, 0, s->timeout_s, &h) : HPCT_ESTATE;
	pthread_mutex_unlock(&s->wmu);
	if (rc != 0) {
		HPCT_WARN(HPCT_SUB_NET,
		          "store: rank %d cannot send its keys to their other homes (%s): "
		          "HPCT_STORE_REPLICAS=%d is not kept",
		          s->rank, hpct_last_error(), s->R);
		h = NULL;
	}
	for (;;) {
		pthread_mutex_lock(&s->fmu);
		while (!s->fhead)
			pthread_cond_wait(&s->fcv, &s->fmu);
		struct srepl_batch *bt = s->fhead;
		s->fhead = bt->next;
		if (!s->fhead)
			s->ftail = NULL;
		pthread_mutex_unlock(&s->fmu);
		for (int i = 0; i < bt->n; i++) {
			if (h)
				forward(s, h, &bt->it[i]);
			free(bt->it[i].key);
			free(bt->it[i].body);
		}
		__atomic_store_n(&s->fwd_done, bt->id, __ATOMIC_RELEASE);
		ssize_t w = write(s->wake[1], "f", 1);
		(void)w;
		free(bt->it);
		free(bt);
	}
	return NULL;
}

/* 1 when rank is in homes[0..n). */
static int among(int rank, const int *homes, int n)
{
	for (int k = 0; k < n; k++)
		if (homes[k] == rank)
			return 1;
	return 0;
}

struct rescan {
	struct ssrv *s;
	const unsigned char *move; /* per first home: its keys go to new homes */
	struct item *it;
	int n, cap;
};

/* Takes x (freed when it cannot: no memory for it, or for its body):
 * 0, or -1. */
static int add(struct rescan *r, struct item x)
{
	int cap = r->n < r->cap ? r->cap : r->cap ? r->cap * 2 : 16;
	struct item *it =
	        x.body && cap > r->cap ? realloc(r->it, (size_t)cap * sizeof(*it)) : r->it;
	if (!x.body || !it) {
		free(x.body);
		free(x.key);
		return -1;
	}
	r->it = it;
	r->cap = cap;
	r->it[r->n++] = x;
	return 0;
}

static int each_key(const struct entry *e, void *arg)
{
	struct rescan *r = arg;
	struct ssrv *s = r->s;
	int first = hpct__store_home_of(e->ns, e->key, strlen(e->key), s->size);
	if (!r->move[first])
		return 0;
	size_t len = 0;
	int on = s->cap.on;
	s->cap.on = 0; /* a key's state alone, no request's answer */
	unsigned char *body = body_of(s, e->ns, e->key, &len);
	s->cap.on = on;
	char *key = body ? strdup(e->key) : NULL;
	if (!key) {
		free(body);
		body = NULL;
	}
	if (add(r, (struct item){ .kind = IT_KEY,
	                          .ns = e->ns,
	                          .key = key,
	                          .body = body,
	                          .len = len,
	                          .first = first }) != 0) {
		HPCT_WARN(HPCT_SUB_NET,
		          "store: rank %d: no memory to send key '%.100s' to its new homes",
		          s->rank, e->key);
	}
	return 0;
}

/* An item that is no key: its body a copy of b. */
static struct item body_item(int kind, int first, const unsigned char *b, size_t len)
{
	unsigned char *copy = b ? malloc(len) : NULL;
	if (copy)
		memcpy(copy, b, len);
	return (struct item){ .kind = kind, .body = copy, .len = len, .first = first };
}

void srepl_view(struct ssrv *s)
{
	if (s->R < 2 || !s->w || hpct__store_view(s->w, NULL) == s->vgen)
		return; /* (the server thread holds wmu) */
	int size = s->size;
	unsigned char *now = malloc((size_t)size), *move = calloc((size_t)size, 1);
	unsigned char *told = calloc((size_t)size, 1);
	if (!now || !move || !told) {
		free(now);
		free(move);
		free(told);
		return; /* again at the next turn */
	}
	unsigned g = hpct__store_view(s->w, now);
	struct rescan r = { .s = s, .move = move };
	int w0[64], w1[64], nmove = 0;
	for (int h = 0; h < size; h++) {
		int n0 = hpct__store_window(s->vdead, size, h, s->R, w0);
		int n1 = hpct__store_window(now, size, h, s->R, w1);
		int grew = 0;
		for (int k = 0; k < n1; k++)
			grew |= !among(w1[k], w0, n0);
		/* this rank holds them all, and was or is their first live home */
		if (grew && s->have[h] && ((n0 && w0[0] == s->rank) || (n1 && w1[0] == s->rank))) {
			move[h] = 1;
			nmove++;
		}
		if (!among(s->rank, w1, n1) || !among(s->rank, w0, n0))
			s->have[h] = 0;
		/* a newly gone home: the first live home tells it moves them */
		for (int k = 0; k < n0; k++)
			if (now[w0[k]] && !s->vdead[w0[k]] && n1 && w1[0] != s->rank)
				told[w1[0]] = 1;
	}
	if (nmove)
		stab_all(&s->t, each_key, &r);
	for (int h = 0; h < size; h++) {
		unsigned char b[4];
		hpct__put32(b, (uint32_t)h);
		if (move[h])
			add(&r, body_item(IT_HAVE, h, b, 4));
	}
	size_t tl; /* IT_TELL's body: the gone ranks */
	unsigned char *gone = hpct__store_dead_encode(now, size, &tl);
	int ntold = 0;
	for (int t = 0; t < size; t++)
		if (told[t] && add(&r, body_item(IT_TELL, t, gone, tl)) == 0)
			ntold++;
	free(gone);
	HPCT_INFO(HPCT_SUB_NET,
	          "store: rank %d: %d ranks gone now: %d items go to the new homes of %d first "
	          "homes' keys, %d ranks told",
	          s->rank, (int)(tl / 4) - 1, r.n - ntold - nmove, nmove, ntold);
	memcpy(s->vdead, now, (size_t)size);
	__atomic_store_n(&s->vgen, g, __ATOMIC_RELEASE);
	free(now);
	free(move);
	free(told);
	struct srepl_batch *bt = r.n ? calloc(1, sizeof(*bt)) : NULL;
	if (bt) {
		enqueue(s, bt, r.it, r.n);
		return;
	}
	for (int i = 0; i < r.n; i++) {
		free(r.it[i].key);
		free(r.it[i].body);
	}
	free(r.it);
}

/* The rank an OP_DEAD asks about (its key, decimal), or -1: none or not
 * a rank of the world. */
static int asked_about(const struct ssrv *s, const char *key)
{
	char *end;
	if (!key[0] || key[0] < '0' || key[0] > '9')
		return -1;
	unsigned long x = strtoul(key, &end, 10);
	return *end || x >= (unsigned long)s->size ? -1 : (int)x;
}

int srepl_told(struct ssrv *s, struct sconn *c, uint8_t op, const char *key, const unsigned char *p,
               size_t len)
{
	if (len < 4)
		return -1;
	uint32_t n = hpct__get32(p);
	if (op == OP_HAVE) {
		if (len != 4)
			return -1;
		if (s->R > 1 && n < (uint32_t)s->size)
			s->have[n] = 1;
	} else {
		if (hpct__store_dead_merge(s->w, s->size, p, len, s->rank) != 0)
			return -1;
		srepl_view(s);
	}
	/* answered at once (after what this connection was answered
	 * before): two ranks' forwarders never wait on each other.  OP_DEAD's
	 * answer: the ranks this one counts gone (u32 n, n x u32), which the
	 * asker counts gone too; asked about a rank, then whether this
	 * process reached its store once: one that refuses the asker after
	 * that has died, though nobody found it yet */
	unsigned char *dead = op == OP_DEAD && s->w ? malloc((size_t)s->size) : NULL;
	if (dead)
		hpct__store_view(s->w, dead);
	size_t ll = 0;
	unsigned char *list = op == OP_DEAD ? hpct__store_dead_encode(dead, s->size, &ll) : NULL;
	free(dead);
	int x = op == OP_DEAD ? asked_about(s, key) : -1;
	unsigned char seen = x >= 0 && s->w && hpct__store_was_reached(s->w, x);
	uint64_t need = c->need;
	sreq_reply(s, c, 0, list, list ? ll : 0, &seen, x >= 0 && list ? 1 : 0);
	c->need = need;
	free(list);
	s->unheld = 1;
	return 0;
}

int srepl_have(const struct ssrv *s, uint64_t ns, const char *key)
{
	if (s->R < 2)
		return 1;
	if (s->vdead[s->rank])
		return -1; /* this rank is leaving (server.c's hand_off) */
	return s->have[hpct__store_home_of(ns, key, strlen(key), s->size)];
}

int srepl_apply(struct ssrv *s, struct sconn *c, uint64_t ns, const char *key,
                const unsigned char *p, size_t len)
{
	c->repl = 1;
	s->recording = 0; /* a change that came is not sent on */
	if (len < 5)
		return -1;
	int present = p[0];
	uint32_t vl = hpct__get32(p + 1);
	if (vl > len - 5 || len - 5 - vl < 24)
		return -1;
	const unsigned char *v = p + 5, *q = p + 5 + vl;
	uint64_t cid = hpct__get64(q), seq = hpct__get64(q + 8);
	int32_t status = (int32_t)hpct__get32(q + 16);
	uint32_t rl = hpct__get32(q + 20);
	if (rl != len - 5 - vl - 24)
		return -1;
	int rc = 0;
	if (present) {
		size_t need;
		rc = stab_put(&s->t, ns, key, v, vl, &need);
		if (rc != STAB_OK)
			HPCT_WARN(HPCT_SUB_NET,
			          "store: rank %d could not keep key '%.100s' for its first home "
			          "(%zu bytes; HPCT_STORE_MAX_KEYS or HPCT_STORE_MAX_BYTES)",
			          s->rank, key, (size_t)vl);
		else
			sreq_woken(s, ns, key);
	} else {
		stab_del(&s->t, ns, key);
	}
	remember(s, cid, seq, status, q + 24, rl);
	sreq_reply(s, c, rc == STAB_OK ? 0 : HPCT_ENOMEM, NULL, 0, NULL, 0);
	return 0;
}

int srepl_start(struct ssrv *s, struct hpct_world *w)
{
	int rc = hpct__store_replicas(w, &s->R);
	s->size = w->topo.size;
	s->w = w;
	if (rc || s->R < 2)
		return rc;
	if (s->R > 64)
		s->R = 64; /* the most hpct__store_replicas takes */
	if (!(s->dd = calloc(DEDUPE_SLOTS, sizeof(*s->dd))) ||
	    !(s->vdead = malloc((size_t)s->size)) || !(s->have = calloc((size_t)s->size, 1)))
		return HPCT_ENOMEM;
	/* from the start of the epoch, a home of its keys holds them all */
	s->vgen = hpct__store_view(w, s->vdead);
	int homes[64];
	for (int h = 0; h < s->size; h++) {
		int n = hpct__store_window(s->vdead, s->size, h, s->R, homes);
		s->have[h] = among(s->rank, homes, n);
	}
	pthread_mutex_init(&s->fmu, NULL);
	pthread_cond_init(&s->fcv, NULL);
	s->t.changed = changed;
	pthread_t th;
	if (pthread_create(&th, NULL, forwarder, s) != 0)
		return hpct__fail(HPCT_ENOMEM, HPCT_SUB_NET,
		                  "store: cannot start the thread that sends keys to their other "
		                  "homes");
	pthread_detach(th);
	return 0;
}
