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
	uint64_t ns;
	char *key;
	unsigned char *body;
	size_t len;
	int first; /* the key's first home */
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

void srepl_end(struct ssrv *s, struct sconn *c)
{
	if (s->R < 2)
		return;
	s->recording = 0;
	recorder = NULL;
	if (s->cap.on)
		remember(s, s->cap.cid, s->cap.seq, s->cap.status, s->cap.b, s->cap.len);
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
		it[n++] = (struct item){ .ns = ns,
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
	bt->id = ++s->fwd_issued;
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

/* The forwarder: batches in order, each change to its key's other live
 * homes; then the answers made before the next batch may go. */
static void *forwarder(void *arg)
{
	struct ssrv *s = arg;
	struct hpct_store *h = NULL;
	unsigned char *dead = calloc((size_t)s->size, 1);
	if (hpct__store_open(s->w, 0, s->timeout_s, &h) != 0 || !dead) {
		HPCT_WARN(HPCT_SUB_NET,
		          "store: rank %d cannot send its keys to their other homes (%s): "
		          "HPCT_STORE_REPLICAS=%d is not kept",
		          s->rank, hpct_last_error(), s->R);
		h = NULL;
	}
	uint64_t epoch = s->w->topo.epoch;
	for (;;) {
		pthread_mutex_lock(&s->fmu);
		while (!s->fhead)
			pthread_cond_wait(&s->fcv, &s->fmu);
		if (dead && s->w->topo.epoch != epoch) {
			/* a recovered world: its ranks are the new epoch's */
			epoch = s->w->topo.epoch;
			memset(dead, 0, (size_t)s->size);
		}
		struct srepl_batch *bt = s->fhead;
		s->fhead = bt->next;
		if (!s->fhead)
			s->ftail = NULL;
		pthread_mutex_unlock(&s->fmu);
		for (int i = 0; i < bt->n; i++) {
			struct item *it = &bt->it[i];
			for (int k = 0; h && k < s->R; k++) {
				int home = (it->first + k) % s->size;
				if (home == s->rank || dead[home])
					continue;
				int rc = hpct__store_forward(h, home, it->ns, it->key, it->body,
				                             it->len);
				if (rc == HPCT_EPEERDEAD || rc == HPCT_ETIMEDOUT) {
					dead[home] = 1;
					HPCT_WARN(
					        HPCT_SUB_NET,
					        "store: rank %d: rank %d, a home of key '%.100s', "
					        "is gone (%s): this rank's keys go to the homes "
					        "left",
					        s->rank, home, it->key, hpct_last_error());
				} else if (rc) {
					HPCT_WARN(HPCT_SUB_NET,
					          "store: rank %d: rank %d did not keep key "
					          "'%.100s' (%s)",
					          s->rank, home, it->key, hpct_last_error());
				}
			}
			free(it->key);
			free(it->body);
		}
		__atomic_store_n(&s->fwd_done, bt->id, __ATOMIC_RELEASE);
		ssize_t w = write(s->wake[1], "f", 1);
		(void)w;
		free(bt->it);
		free(bt);
	}
	return NULL;
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
	if (!(s->dd = calloc(DEDUPE_SLOTS, sizeof(*s->dd))))
		return HPCT_ENOMEM;
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
