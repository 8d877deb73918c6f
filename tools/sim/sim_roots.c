/* hpct-bench-sim's modelled paths: the standard path's store on rank 0
 * (bootstrap/stdpath) and NCCL's bootstrap root.  Neither is libhpct's
 * engine, so neither can run over the simulated transport as it is; both
 * are written here as what they do, request by request, and run as actors
 * on the same transport, cores and NICs as the rootless ranks.  Their CPU
 * per event is the transport's, plus, for the store, what its real server
 * was measured to cost per request and per key (sim_calib.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/sim/sim.h"

/* -------------------------------------------- the standard path's store
 *
 * What bootstrap/stdpath does for a world and its collectives (client.c,
 * coll.c, request.c, reply.c):
 *   join: connect (refused until rank 0's server listens: retry after 1 ms,
 *   doubling to 100 ms, +-20% jitter), HELLO;
 *   allgather: SET of its item (readers N-1), one MGET of the N-1 others';
 *   barrier: ADD 1 to the counter; the rank that makes it N SETs the
 *   release key (readers N-1), SETs the counter's end and MGETs it; every
 *   other rank MGETs the release key and waits there.
 * The server answers an MGET once every key it names exists: it looks the
 * keys up in order and parks on the first missing one; the SET of that key
 * wakes it and it goes on from there; once complete, a parked MGET looks
 * every key up again before it answers. */

enum std_op {
	OP_HELLO,
	OP_SET_ITEM,
	OP_MGET_ITEMS,
	OP_ADD,
	OP_SET_REL,
	OP_SET_END,
	OP_MGET_REL,
	OP_MGET_END
};

/* about the length of coll.c's keys ("e0/g<16 hex>/0/ag/<rank>/-1") */
#define KEY_WIRE  32
#define ITEM      64 /* the allgather's item, as the real cold scenario's */
#define NO_WAITER (-1)

struct std_req {
	int op;
	int rank;
};

struct std_state {
	int n;
	unsigned char *item;  /* rank i's item is in the store */
	int *waiting_on_item; /* first rank parked on item i, or NO_WAITER */
	int *next_waiter;     /* the next parked on the same key */
	int rel_waiters;      /* first rank parked on the release key */
	int rel_set;
	long counter;
	int *cursor;       /* where a parked MGET of items goes on */
	int *ever_parked;  /* a parked MGET looks every key up again */
	struct sconn **to; /* the server's end of each rank's connection */
};

void *std_setup(const struct sim_run *run)
{
	int n = run->n;
	struct std_state *s = calloc(1, sizeof(*s));
	if (s) {
		s->n = n;
		s->item = calloc((size_t)n, 1);
		s->waiting_on_item = malloc((size_t)n * sizeof(int));
		s->next_waiter = malloc((size_t)n * sizeof(int));
		s->cursor = calloc((size_t)n, sizeof(int));
		s->ever_parked = calloc((size_t)n, sizeof(int));
		s->to = calloc((size_t)n, sizeof(*s->to));
	}
	if (!s || !s->item || !s->waiting_on_item || !s->next_waiter || !s->cursor ||
	    !s->ever_parked || !s->to) {
		fprintf(stderr, "hpct-bench-sim: no memory for the store of %d ranks\n", n);
		exit(1);
	}
	for (int i = 0; i < n; i++)
		s->waiting_on_item[i] = NO_WAITER;
	s->rel_waiters = NO_WAITER;
	return s;
}

void std_teardown(void *state)
{
	struct std_state *s = state;
	if (!s)
		return;
	free(s->item);
	free(s->waiting_on_item);
	free(s->next_waiter);
	free(s->cursor);
	free(s->ever_parked);
	free(s->to);
	free(s);
}

/* A reply of `bytes` to rank r, its first 8 bytes the counter's value. */
static void answer(struct std_state *s, int r, size_t bytes, long value)
{
	sim_put(s->to[r], &value, sizeof(value), bytes);
}

/* An MGET of k keys, all found: looked up again if it ever parked, then
 * answered (each key's value and length). */
static void mget_done(struct std_state *s, int r, int k, size_t value_len)
{
	if (s->ever_parked[r]) {
		sim_cpu(sim_M.c_recv); /* a peek: did the waiter hang up meanwhile */
		sim_cpu(k * sim_M.s_rescan);
	}
	sim_cpu(k * (sim_M.s_key - sim_M.s_rescan)); /* the key's parse and answer */
	s->ever_parked[r] = 0;
	answer(s, r, 4 + (size_t)k * (4 + value_len), 0);
}

/* Goes on with rank r's MGET of every other rank's item. */
static void items_try(struct std_state *s, int r)
{
	for (; s->cursor[r] < s->n; s->cursor[r]++) {
		int k = s->cursor[r];
		if (k == r)
			continue;
		sim_cpu(sim_M.s_rescan); /* one lookup */
		if (!s->item[k]) {
			s->next_waiter[r] = s->waiting_on_item[k];
			s->waiting_on_item[k] = r;
			s->ever_parked[r] = 1;
			return;
		}
	}
	mget_done(s, r, s->n - 1, ITEM);
}

static void std_request(struct std_state *s, struct sconn *c, const struct std_req *q)
{
	int r = q->rank;
	sim_cpu(sim_M.s_req);
	switch (q->op) {
	case OP_HELLO:
		s->to[r] = c;
		answer(s, r, 4, 0);
		break;
	case OP_SET_ITEM: {
		s->item[r] = 1;
		answer(s, r, 4, 0);
		int w = s->waiting_on_item[r];
		s->waiting_on_item[r] = NO_WAITER;
		while (w != NO_WAITER) {
			int next = s->next_waiter[w];
			sim_cpu(sim_M.s_resume);
			items_try(s, w);
			w = next;
		}
		break;
	}
	case OP_MGET_ITEMS:
		s->cursor[r] = 0;
		items_try(s, r);
		break;
	case OP_ADD:
		s->counter++;
		answer(s, r, 4 + 8, s->counter);
		break;
	case OP_SET_REL:
		s->rel_set = 1;
		answer(s, r, 4, 0);
		for (int w = s->rel_waiters; w != NO_WAITER; w = s->next_waiter[w]) {
			sim_cpu(sim_M.s_resume + sim_M.s_rescan);
			mget_done(s, w, 1, 1);
		}
		s->rel_waiters = NO_WAITER;
		break;
	case OP_SET_END:
		answer(s, r, 4, 0);
		break;
	case OP_MGET_REL:
		sim_cpu(sim_M.s_rescan);
		if (s->rel_set) {
			mget_done(s, r, 1, 1);
		} else {
			s->ever_parked[r] = 1;
			s->next_waiter[r] = s->rel_waiters;
			s->rel_waiters = r;
		}
		break;
	case OP_MGET_END:
		sim_cpu(sim_M.s_rescan);
		mget_done(s, r, 1, 8);
		break;
	}
}

/* Rank 0's server thread: listening since rank 0 started it; serves
 * requests in the order they come, for ever. */
void std_server(struct srank *self)
{
	struct std_state *s = sim_state;
	for (;;) {
		struct tev *v = sim_next(self, -1);
		if (v->type == HPCT_TEV_MESSAGE && v->len >= sizeof(struct std_req))
			std_request(s, v->conn, (const struct std_req *)v->data);
		free(v);
	}
}

/* One request and its reply; the reply's first 8 bytes. */
static long rpc(struct srank *self, struct sconn *c, int op, size_t bytes)
{
	struct std_req q = { op, self->id };
	sim_cpu(sim_M.s_client);
	sim_put(c, &q, sizeof(q), bytes);
	for (;;) {
		struct tev *v = sim_next(self, -1);
		if (v->type == HPCT_TEV_MESSAGE && v->conn == c) {
			long value;
			memcpy(&value, v->data, sizeof(value));
			free(v);
			return value;
		}
		free(v);
	}
}

/* The ±20% of client.c's backoff, from the run's seed: the same each run. */
static double jitter(uint64_t *rng)
{
	*rng ^= *rng << 13;
	*rng ^= *rng >> 7;
	*rng ^= *rng << 17;
	return 0.8 + 0.4 * (double)(*rng >> 11) / (double)(1ULL << 53);
}

void std_rank(struct srank *self)
{
	int n = nranks_sim, root = n;
	size_t set_bytes = 1 + 4 + 4 + KEY_WIRE + 4 + 4; /* op, rank, key, readers, value length */
	if (self->id == 0) {
		/* the server binds and listens before hpct__std_server_start returns */
		sim_process_start(sim_M.c_start + sim_M.c_srv);
		sim_listen(&sim_ranks[root]);
		sim_push(sim_now, EV_START, root, 0, NULL);
	} else {
		sim_process_start(sim_M.c_start);
	}
	uint64_t rng = (sim_run_now->seed + 1) * 0x9e3779b97f4a7c15ULL ^ (uint64_t)(self->id + 1);
	double backoff = 0.001;
	struct sconn *c;
	for (;;) {
		c = sim_dial(self, root);
		struct tev *v = sim_next(self, -1);
		int ok = v->type == HPCT_TEV_CONNECTED;
		free(v);
		if (ok)
			break;
		sim_sleep(self, backoff * jitter(&rng));
		backoff = backoff * 2 < 0.1 ? backoff * 2 : 0.1;
	}
	rpc(self, c, OP_HELLO, 21);
	if (sim_run_now->cold) {
		rpc(self, c, OP_SET_ITEM, set_bytes + ITEM);
		rpc(self, c, OP_MGET_ITEMS, 1 + 4 + 4 + (size_t)(n - 1) * (4 + KEY_WIRE));
	}
	long v = rpc(self, c, OP_ADD, 1 + 4 + 4 + KEY_WIRE + 8);
	if (v == n) {
		rpc(self, c, OP_SET_REL, set_bytes + 1);
		rpc(self, c, OP_SET_END, set_bytes + 8);
		rpc(self, c, OP_MGET_END, 1 + 4 + 4 + 4 + KEY_WIRE);
	} else {
		rpc(self, c, OP_MGET_REL, 1 + 4 + 4 + 4 + KEY_WIRE);
	}
	self->rc = 0;
}

/* ------------------------------------------------------ NCCL's root
 *
 * What NCCL's bootstrap does for its root exchange (bootstrap.cc,
 * bootstrapInit and bootstrapRoot, 2.23 and later; one root):
 *   a rank listens for its root, and with more than
 *   NCCL_UID_STAGGER_THRESHOLD (256) ranks to that root first sleeps its
 *   place among them / NCCL_UID_STAGGER_RATE (7000 per s), in whole
 *   microseconds; then connects to the root, sends its report (176 bytes
 *   since 2.29) and closes; then accepts the root's connection and reads
 *   its ring neighbour's address (128 bytes);
 *   the root, one thread, takes the reports one at a time; when a rank's
 *   previous rank has reported it connects to that one and sends it the
 *   new rank's information, and when the rank's next has, it sends the
 *   rank its next's; whatever is left goes out once all have reported.
 * Every connection opens with the connector's 8-byte magic and 4-byte type;
 * messages carry a 4-byte length.  This is the exchange hpct-bench's
 * nccl-root scenario times; NCCL's own ring allgather comes after it. */

#define STAGGER_THRESHOLD 256    /* NCCL_UID_STAGGER_THRESHOLD's default */
#define STAGGER_RATE      7000.0 /* NCCL_UID_STAGGER_RATE's default, per s */
#define NCCL_HELLO        12     /* magic and type */
#define NCCL_REPORT       (NCCL_HELLO + 4 + 176)
#define NCCL_ANSWER       (NCCL_HELLO + 4 + 128)

struct nccl_state {
	int n;
	unsigned char *reported;        /* its report is in (its listener is known) */
	unsigned char *waiting;         /* saved: it still needs its next's information */
	unsigned char *held;            /* saved: its information, for its previous rank */
	struct tev *later, *later_tail; /* what came while the root was connecting out */
};

void *nccl_setup(const struct sim_run *run)
{
	struct nccl_state *s = calloc(1, sizeof(*s));
	if (s) {
		s->n = run->n;
		s->reported = calloc((size_t)run->n, 1);
		s->waiting = calloc((size_t)run->n, 1);
		s->held = calloc((size_t)run->n, 1);
	}
	if (!s || !s->reported || !s->waiting || !s->held) {
		fprintf(stderr, "hpct-bench-sim: no memory for NCCL's root of %d ranks\n", run->n);
		exit(1);
	}
	return s;
}

void nccl_teardown(void *state)
{
	struct nccl_state *s = state;
	if (!s)
		return;
	while (s->later) {
		struct tev *v = s->later;
		s->later = v->next;
		free(v);
	}
	free(s->reported);
	free(s->waiting);
	free(s->held);
	free(s);
}

/* rootSend: a blocking connect to rank t's listener, the answer, close. */
static void root_send(struct srank *self, struct nccl_state *s, int t)
{
	for (;;) {
		struct sconn *c = sim_dial(self, t);
		for (;;) {
			struct tev *v = sim_next(self, -1);
			if (v->conn != c) { /* a rank's report: the root reads it later */
				v->next = NULL;
				if (s->later_tail)
					s->later_tail->next = v;
				else
					s->later = v;
				s->later_tail = v;
				continue;
			}
			int ok = v->type == HPCT_TEV_CONNECTED;
			free(v);
			if (!ok)
				break;
			sim_put(c, &t, sizeof(t), NCCL_ANSWER);
			sim_hangup(c);
			return;
		}
		sim_sleep(self, 0.1); /* NCCL_SOCKET_RETRY_SLEEP_MSEC */
	}
}

static struct tev *root_next(struct srank *self, struct nccl_state *s)
{
	if (s->later) {
		struct tev *v = s->later;
		s->later = v->next;
		if (!s->later)
			s->later_tail = NULL;
		return v;
	}
	return sim_next(self, -1);
}

void nccl_root(struct srank *self)
{
	struct nccl_state *s = sim_state;
	int n = s->n;
	sim_listen(self);
	for (int got = 0; got < n;) {
		struct tev *v = root_next(self, s);
		if (v->type != HPCT_TEV_MESSAGE) {
			free(v);
			continue;
		}
		int r;
		memcpy(&r, v->data, sizeof(r));
		free(v);
		got++;
		int prev = (r - 1 + n) % n, next = (r + 1) % n;
		if (s->reported[prev] && s->waiting[prev]) {
			s->waiting[prev] = 0;
			root_send(self, s, prev);
		} else {
			s->held[r] = 1;
		}
		if (s->held[next] && next != r) {
			s->held[next] = 0;
			root_send(self, s, r);
		} else {
			s->waiting[r] = 1;
		}
		s->reported[r] = 1;
	}
	for (int r = 0; r < n; r++) /* what is left: one rank alone, or none */
		if (s->waiting[r] && s->held[(r + 1) % n]) {
			s->waiting[r] = 0;
			root_send(self, s, r);
		}
}

void nccl_rank(struct srank *self)
{
	int n = nranks_sim, root = n;
	sim_process_start(sim_M.c_start);
	sim_listen(self);
	if (n > STAGGER_THRESHOLD)
		sim_sleep(self, (double)(long)(self->id / (STAGGER_RATE / 1e6)) * 1e-6);
	for (;;) {
		struct sconn *c = sim_dial(self, root);
		struct tev *v = sim_next(self, -1);
		int ok = v->type == HPCT_TEV_CONNECTED;
		free(v);
		if (ok) {
			sim_put(c, &self->id, sizeof(self->id), NCCL_REPORT);
			sim_hangup(c);
			break;
		}
		sim_sleep(self, 0.1);
	}
	for (;;) { /* the root's connection, then its answer */
		struct tev *v = sim_next(self, -1);
		int done = v->type == HPCT_TEV_MESSAGE;
		free(v);
		if (done)
			break;
	}
	self->rc = 0;
}
