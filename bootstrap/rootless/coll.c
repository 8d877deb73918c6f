/* Rootless collectives as state machines over the engine.  Each round sends
 * at most one message and waits for at most one, so the driver knows exactly
 * whom it waits for when a deadline passes.  Peers are always at distance
 * 2^k in the group, so a rank talks to at most 2*ceil(log2 N) others. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/base/log.h"
#include "bootstrap/base/util.h"
#include "bootstrap/rootless/coll.h"
#include "bootstrap/rootless/engine.h"
#include "bootstrap/world.h"

/* How long a round waits for its sender before connecting to it itself,
 * and how soon it asks again when the engine says not yet. */
#define PULL_AFTER 0.02
#define PULL_AGAIN 0.001

struct op;
typedef int (*step_fn)(struct op *op, struct hpct_emsg *m);

/* A peer this op sent to, and how many sends to it were lost before. */
struct sent {
	int grank;
	uint64_t lost0;
};

struct op {
	struct hpct_group *g;
	const char *name;
	uint32_t seq;
	int round, nrounds;
	uint16_t tag;                 /* this round's message tag; peers() may change it */
	int sent;                     /* this round's message is on its way */
	int send_to;                  /* group rank, -1 none */
	int recv_from;                /* group rank, -1 none */
	void (*peers)(struct op *op); /* picks send_to/recv_from as a round starts */
	step_fn send;                 /* sends this round's message */
	step_fn step; /* consumes the awaited message; 1 done, 0 next round, <0 error */
	/* every peer sent to: the op ends when all of it has left */
	struct sent *dests;
	int ndests, capdests;
	/* the collective's own data */
	const void *in;
	void *out;
	unsigned char *tmp, *pack;
	size_t sz, len;
	int n, r, root;
};

static int ceil_log2(int n)
{
	int k = 0;
	while ((1 << k) < n)
		k++;
	return k;
}

/* Every send of an op goes through here, so the op knows whom to wait for. */
static int op_send(struct op *op, int grank, uint16_t tag, const void *buf, size_t len)
{
	struct hpct_group *g = op->g;
	struct hpct_engine *e = g->world->eng;
	int wr = hpct__group_world_rank(g, grank), i;
	for (i = 0; i < op->ndests && op->dests[i].grank != grank; i++)
		;
	if (i == op->ndests) {
		if (op->ndests == op->capdests) {
			int cap = op->capdests ? 2 * op->capdests : 8;
			struct sent *d = realloc(op->dests, (size_t)cap * sizeof(*d));
			if (!d)
				return HPCT_ENOMEM;
			op->dests = d;
			op->capdests = cap;
		}
		op->dests[op->ndests++] = (struct sent){ grank, hpct__eng_lost(e, wr) };
	}
	return hpct__eng_send(e, wr, HPCT_MSG_DATA, g->id, op->seq, tag, buf, len);
}

static int send_to(struct op *op, int grank, const void *buf, size_t len)
{
	return op_send(op, grank, op->tag, buf, len);
}

/* A destination whose sends were lost (-1: none). */
static int lost_dest(const struct op *op)
{
	struct hpct_engine *e = op->g->world->eng;
	for (int i = 0; i < op->ndests; i++)
		if (hpct__eng_lost(e, hpct__group_world_rank(op->g, op->dests[i].grank)) !=
		    op->dests[i].lost0)
			return op->dests[i].grank;
	return -1;
}

/* A destination still holding unsent bytes of ours (-1: all left). */
static int unflushed_dest(const struct op *op)
{
	struct hpct_engine *e = op->g->world->eng;
	for (int i = 0; i < op->ndests; i++)
		if (!hpct__eng_flushed(e, hpct__group_world_rank(op->g, op->dests[i].grank)))
			return op->dests[i].grank;
	return -1;
}

static void abort_others(struct op *op, int code, int culprit)
{
	struct hpct_group *g = op->g;
	struct hpct_abort a = { .code = code,
		                .origin = (uint32_t)g->world->topo.rank,
		                .culprit = culprit };
	/* the receiver only needs the gist; the text is cut at 255 bytes */
	memcpy(a.text, g->failure, sizeof(a.text) - 1);
	a.text[sizeof(a.text) - 1] = 0;
	hpct__eng_group_failed(g->world->eng, g->id);
	hpct__eng_broadcast_abort(g->world->eng, g->id, &a);
}

/* "round 2/3", or "final sends" once every round is done. */
static const char *where(const struct op *op, char *buf, size_t len)
{
	if (op->round < op->nrounds)
		snprintf(buf, len, "round %d/%d", op->round + 1, op->nrounds);
	else
		snprintf(buf, len, "final sends");
	return buf;
}

/* The error for a peer that cannot deliver, naming it. */
static int peer_failed(struct op *op, int grank, int err)
{
	struct hpct_group *g = op->g;
	struct hpct_world *w = g->world;
	char who[320], at[32];
	int wr = hpct__group_world_rank(g, grank);
	hpct__eng_describe_peer(w->eng, wr, who, sizeof(who));
	hpct__group_fail(
	        g, err, "rank %d: %s on group %016llx (epoch %llu, call %u, %s) failed: %s",
	        w->topo.rank, op->name, (unsigned long long)g->id,
	        (unsigned long long)w->topo.epoch, op->seq, where(op, at, sizeof(at)), who);
	abort_others(op, err, wr);
	return err;
}

/* silent: seconds the peer we wait for left a probe unanswered
 * (0: not probed, or it answered) */
static int timed_out(struct op *op, double timeout, double silent)
{
	struct hpct_group *g = op->g;
	struct hpct_world *w = g->world;
	char from[320] = "", to[320] = "", at[32];
	int pending_to = unflushed_dest(op);
	if (op->recv_from >= 0)
		hpct__eng_describe_peer(w->eng, hpct__group_world_rank(g, op->recv_from), from,
		                        sizeof(from));
	if (from[0] && silent > 0) {
		size_t n = strlen(from);
		snprintf(from + n, sizeof(from) - n, " and silent: no answer to a probe in %.1f s",
		         silent);
	}
	if (pending_to >= 0) /* our message to it has not left */
		hpct__eng_describe_peer(w->eng, hpct__group_world_rank(g, pending_to), to,
		                        sizeof(to));
	int culprit = op->recv_from >= 0 ? hpct__group_world_rank(g, op->recv_from)
	              : pending_to >= 0  ? hpct__group_world_rank(g, pending_to)
	                                 : -1;
	hpct__group_fail(g, HPCT_ETIMEDOUT,
	                 "rank %d: %s on group %016llx (epoch %llu, call %u, %s) timed out after "
	                 "%.1f s; %s%s%s%s%s",
	                 w->topo.rank, op->name, (unsigned long long)g->id,
	                 (unsigned long long)w->topo.epoch, op->seq, where(op, at, sizeof(at)),
	                 timeout, from[0] ? "not heard from " : "", from,
	                 from[0] && to[0] ? "; " : "", to[0] ? "could not deliver to " : "", to);
	abort_others(op, HPCT_ETIMEDOUT, culprit);
	return HPCT_ETIMEDOUT;
}

static int aborted(struct op *op, const struct hpct_abort *a)
{
	struct hpct_group *g = op->g;
	hpct__group_fail(g, HPCT_EABORTED,
	                 "rank %d: %s on group %016llx (epoch %llu) aborted: rank %u gave up: %s",
	                 g->world->topo.rank, op->name, (unsigned long long)g->id,
	                 (unsigned long long)g->world->topo.epoch, a->origin, a->text);
	hpct__eng_group_failed(g->world->eng, g->id);
	/* pass it on: ranks that only talk to us learn it too */
	struct hpct_abort fwd = *a;
	hpct__eng_broadcast_abort(g->world->eng, g->id, &fwd);
	return HPCT_EABORTED;
}

/* Runs an op to completion or failure. */
static int drive_op(struct op *op)
{
	struct hpct_group *g = op->g;
	struct hpct_world *w = g->world;
	if (g->failed)
		return g->failed;
	op->seq = g->seq++;
	double timeout = w->topo.timeout_s, deadline = hpct__now() + timeout;
	int rc = 0, pulled = 0, probed = -1; /* the world rank probed at the deadline */
	double pull_at = 0, probe_at = 0, grace = 0;
	/* The op is done when its rounds are and everything it sent has left:
	 * a rank that goes quiet after returning must not strand a peer. */
	for (;;) {
		int waiting = op->round < op->nrounds;
		if (!waiting && unflushed_dest(op) < 0)
			break;
		if (waiting && !op->sent) {
			op->sent = 1;
			pull_at = hpct__now() + PULL_AFTER;
			pulled = 0;
			op->tag = (uint16_t)op->round;
			if (op->peers)
				op->peers(op);
			if (op->send_to >= 0 && (rc = op->send(op, NULL)) < 0)
				return peer_failed(op, op->send_to, rc);
		}
		struct hpct_emsg *m = NULL;
		if (waiting && op->recv_from >= 0)
			m = hpct__eng_take(w->eng, hpct__group_world_rank(g, op->recv_from), g->id,
			                   op->seq, op->tag);
		if (waiting && (m || op->recv_from < 0)) {
			rc = op->step(op, m);
			int from = op->recv_from;
			free(m);
			if (rc < 0 && rc != HPCT_EPROTO)
				return peer_failed(op, op->send_to, rc);
			if (rc < 0) {
				hpct__group_fail(g, rc,
				                 "rank %d: %s on group %016llx (epoch %llu, call "
				                 "%u): rank %d sent a message of the wrong size "
				                 "(do all ranks pass the same sizes?)",
				                 w->topo.rank, op->name, (unsigned long long)g->id,
				                 (unsigned long long)w->topo.epoch, op->seq,
				                 hpct__group_world_rank(g, from));
				abort_others(op, rc, hpct__group_world_rank(g, from));
				return rc;
			}
			op->round = rc == 1 ? op->nrounds : op->round + 1;
			op->sent = 0;
			continue;
		}
		if (!waiting) /* only sends are left */
			op->recv_from = -1;
		/* An abort carries the first cause: it beats what we see locally. */
		const struct hpct_abort *a = hpct__eng_abort_for(w->eng, g->id);
		if (a)
			return aborted(op, a);
		int err = op->recv_from >= 0
		                  ? hpct__eng_peer_error(w->eng,
		                                         hpct__group_world_rank(g, op->recv_from))
		                  : 0;
		if (err)
			return peer_failed(op, op->recv_from, err);
		int lost = lost_dest(op);
		if (lost >= 0) {
			int wr = hpct__group_world_rank(g, lost);
			err = hpct__eng_peer_error(w->eng, wr);
			return peer_failed(op, lost, err ? err : HPCT_EPEERDEAD);
		}
		double now = hpct__now(), left = deadline - now;
		int pulling = !pulled && op->recv_from >= 0;
		if (pulling && now >= pull_at) {
			if (hpct__eng_pull(w->eng, hpct__group_world_rank(g, op->recv_from), g->id))
				pulling = 0, pulled = 1;
			else
				pull_at = now + PULL_AGAIN;
		}
		/* The deadline passed while we wait for a peer: it may be alive
		 * and itself waiting on someone else, or silent behind a cut link
		 * (a link that still looks open), or never up.  Ask it (over a new
		 * connection if it never made one to us: it may have been slower
		 * to listen than our first try): if it answers, the rank that
		 * knows the cause is further on, and we give it time to say (its
		 * abort reaches us over the link the probe made); if not, it is
		 * the culprit, and we say so after half a moment.  The time
		 * given is a whole timeout and that moment: the peer may have
		 * begun waiting up to a timeout after us (it started late), and
		 * blaming it before its own deadline passed would send an abort
		 * naming a live messenger, which beats the cause it is about to
		 * find (first cause wins). */
		int from = op->recv_from >= 0 ? hpct__group_world_rank(g, op->recv_from) : -1;
		if (probed >= 0 && probe_at > 0 && hpct__eng_heard(w->eng, probed) >= probe_at) {
			deadline = probe_at + timeout + grace; /* it answered */
			left = deadline - now;
			probe_at = 0;
		}
		if (left <= 0 && probed < 0 && from >= 0) {
			grace = timeout * 0.1 < 0.5 ? 0.5 : timeout * 0.1 > 3 ? 3 : timeout * 0.1;
			probed = from;
			if (hpct__eng_probe(w->eng, from, g->id) == 0) {
				probe_at = now;
				left = grace / 2;
				deadline = now + left;
			}
		}
		if (left <= 0)
			return timed_out(op, timeout,
			                 probe_at > 0 && probed == from ? now - probe_at : 0);
		/* wake for the pull when it is due, not at the next event */
		double wake = pulling && pull_at - now < left ? pull_at - now : left;
		hpct__eng_progress(w->eng, wake > 1.0 ? 1000 : (int)(wake * 1000) + 1);
	}
	return 0;
}

static int drive(struct op *op)
{
	int rc = drive_op(op);
	free(op->dests);
	op->dests = NULL;
	return rc;
}

/* K-nomial tree over group ranks, root 0, K = 4.  Write ranks in base K; a
 * rank whose lowest nonzero digit is at level p (the root: p = L, the
 * number of levels) gathers from its children r + j*K^l (l < p, j = 1..K-1)
 * one slot at a time, then sends its subtree [r, r + K^p) to its parent
 * r - d*K^p and waits for everything to come back down, which it passes on
 * to its children, largest subtree first.  N-1 links in all, each opened by
 * a child toward its lower-ranked parent; at most (K-1)*ceil(log_K N) + 1
 * peers per rank, within 2*ceil(log2 N)+2, and half the depth of a binary
 * tree: each level is a wakeup of the ranks on it, which is what costs on a
 * machine with more ranks than cores.  The barrier is the same with empty
 * messages. */
#define TREE_K 4

static long kpow(int l)
{
	long p = 1;
	while (l-- > 0)
		p *= TREE_K;
	return p;
}

static int tree_levels(int n)
{
	int l = 0;
	while (kpow(l) < n)
		l++;
	return l;
}

/* The level of r's lowest nonzero base-K digit; L for the root. */
static int low_level(int r, int L)
{
	int l = 0;
	while (l < L && (r / kpow(l)) % TREE_K == 0)
		l++;
	return l;
}

static int subtree(int r, int l, int n)
{
	long s = kpow(l);
	return r + s > n ? n - r : (int)s;
}

/* Slot s (round s < L*(K-1)) is child j = s % (K-1) + 1 at level s / (K-1);
 * going up uses the slot's number as tag, coming down L*(K-1) + 1 + level. */
static uint16_t down_tag(int L, int l)
{
	return (uint16_t)(L * (TREE_K - 1) + 1 + l);
}

static void tree_peers(struct op *op)
{
	int L = tree_levels(op->n), r = op->r, p = low_level(r, L);
	int l = op->round / (TREE_K - 1), j = op->round % (TREE_K - 1) + 1;
	op->send_to = op->recv_from = -1;
	if (l < p && l < L) {
		long c = r + j * kpow(l);
		if (c < op->n)
			op->recv_from = (int)c;
	} else if (r != 0) {
		int d = (int)((r / kpow(p)) % TREE_K);
		op->send_to = (int)(r - d * kpow(p));
		op->recv_from = op->send_to;
		op->tag = down_tag(L, p); /* the answer comes back down */
	}
	/* the root's last round only sends, from tree_step */
}

static int tree_send(struct op *op, struct hpct_emsg *m)
{
	(void)m;
	int L = tree_levels(op->n), p = low_level(op->r, L);
	int d = (int)((op->r / kpow(p)) % TREE_K);
	size_t len = (size_t)subtree(op->r, p, op->n) * op->sz;
	/* the gather message has its slot's tag: the round's tag is the answer's */
	return op_send(op, op->send_to, (uint16_t)(p * (TREE_K - 1) + d - 1),
	               op->tmp + (size_t)op->r * op->sz, len);
}

static int tree_step(struct op *op, struct hpct_emsg *m)
{
	int L = tree_levels(op->n), r = op->r, p = low_level(r, L);
	int l = op->round / (TREE_K - 1), j = op->round % (TREE_K - 1) + 1;
	if (l < p && l < L) { /* a child's subtree, if that child exists */
		if (!m)
			return 0;
		int c = (int)(r + j * kpow(l));
		size_t want = (size_t)subtree(c, l, op->n) * op->sz;
		if (m->len != want)
			return HPCT_EPROTO;
		if (want)
			memcpy(op->tmp + (size_t)c * op->sz, m->data, want);
		return 0;
	}
	if (m) { /* everything, from the parent */
		if (m->len != (size_t)op->n * op->sz)
			return HPCT_EPROTO;
		if (m->len)
			memcpy(op->tmp, m->data, m->len);
	}
	/* now down: children r + j*K^l, l < p, largest subtree first */
	for (int ll = (p < L ? p : L) - 1; ll >= 0; ll--) {
		for (int jj = TREE_K - 1; jj >= 1; jj--) {
			long c = r + jj * kpow(ll);
			if (c >= op->n)
				continue;
			int rc = op_send(op, (int)c, down_tag(L, ll), op->tmp,
			                 (size_t)op->n * op->sz);
			if (rc < 0) {
				op->send_to = (int)c;
				return rc;
			}
		}
	}
	return 1;
}

static int tree_run(struct hpct_group *g, const char *name, size_t sz, unsigned char *tmp)
{
	struct op op = { .g = g,
		         .name = name,
		         .n = g->size,
		         .r = g->rank,
		         .sz = sz,
		         .tmp = tmp,
		         .peers = tree_peers,
		         .send = tree_send,
		         .step = tree_step };
	op.nrounds = op.n > 1 ? tree_levels(op.n) * (TREE_K - 1) + 1 : 0;
	return drive(&op);
}

/* Bruck allgather: after round k a rank holds the items of the 2^(k+1)
 * ranks that follow it. */
static int ag_send(struct op *op, struct hpct_emsg *m)
{
	(void)m;
	int pow2 = 1 << op->round;
	int cnt = pow2 < op->n - pow2 ? pow2 : op->n - pow2;
	return send_to(op, op->send_to, op->tmp, (size_t)cnt * op->sz);
}

static void ag_set_peers(struct op *op)
{
	int pow2 = 1 << op->round;
	op->send_to = ((op->r - pow2) % op->n + op->n) % op->n;
	op->recv_from = (op->r + pow2) % op->n;
}

static int ag_step(struct op *op, struct hpct_emsg *m)
{
	int pow2 = 1 << op->round;
	int cnt = pow2 < op->n - pow2 ? pow2 : op->n - pow2;
	if (m->len != (size_t)cnt * op->sz)
		return HPCT_EPROTO;
	memcpy(op->tmp + (size_t)pow2 * op->sz, m->data, m->len);
	return 0;
}

static int bruck_allgather(struct hpct_group *g, const void *item, size_t sz, void *out)
{
	struct op op = { .g = g,
		         .name = "allgather",
		         .n = g->size,
		         .r = g->rank,
		         .sz = sz,
		         .peers = ag_set_peers,
		         .send = ag_send,
		         .step = ag_step };
	op.nrounds = ceil_log2(op.n);
	op.tmp = malloc((size_t)op.n * sz);
	if (!op.tmp)
		return hpct__group_fail(g, HPCT_ENOMEM,
		                        "allgather: no memory for %d items of %zu bytes", op.n, sz);
	memcpy(op.tmp, item, sz);
	int rc = drive(&op);
	if (rc == 0)
		for (int j = 0; j < op.n; j++)
			memcpy((unsigned char *)out + (size_t)((op.r + j) % op.n) * sz,
			       op.tmp + (size_t)j * sz, sz);
	free(op.tmp);
	return rc;
}

/* Round k sends 2^k ranks forward and hears from 2^k ranks back: the
 * dissemination barrier's and Bruck alltoall's pattern. */
static void forward_peers(struct op *op)
{
	int pow2 = 1 << op->round;
	op->send_to = (op->r + pow2) % op->n;
	op->recv_from = ((op->r - pow2) % op->n + op->n) % op->n;
}

static int bar_send(struct op *op, struct hpct_emsg *m)
{
	(void)m;
	return send_to(op, op->send_to, NULL, 0);
}

static int bar_step(struct op *op, struct hpct_emsg *m)
{
	(void)op;
	if (m->len != 0)
		return HPCT_EPROTO;
	return 0;
}

static int dissemination_barrier(struct hpct_group *g)
{
	struct op op = { .g = g,
		         .name = "barrier",
		         .n = g->size,
		         .r = g->rank,
		         .peers = forward_peers,
		         .send = bar_send,
		         .step = bar_step };
	op.nrounds = ceil_log2(op.n);
	return drive(&op);
}

/* Binomial-tree broadcast: one round to receive from the parent, then the
 * children are sent to at once. */
static int bc_step(struct op *op, struct hpct_emsg *m)
{
	int rel = (op->r - op->root + op->n) % op->n;
	if (m) {
		if (m->len != op->len)
			return HPCT_EPROTO;
		memcpy(op->out, m->data, m->len);
	}
	int mask = 1;
	while (mask < op->n && !(rel & mask))
		mask <<= 1;
	for (mask >>= 1; mask > 0; mask >>= 1) {
		if (rel + mask < op->n) {
			int child = (rel + mask + op->root) % op->n;
			int rc = send_to(op, child, op->out, op->len);
			if (rc < 0) {
				op->send_to = child;
				return rc;
			}
		}
	}
	return 1;
}

int hpct__coll_broadcast(struct hpct_group *g, void *buf, size_t len, int root)
{
	struct op op = { .g = g,
		         .name = "broadcast",
		         .n = g->size,
		         .r = g->rank,
		         .root = root,
		         .out = buf,
		         .len = len,
		         .step = bc_step, /* sends happen in bc_step */
		         .send_to = -1,
		         .recv_from = -1,
		         .nrounds = 1 };
	int rel = (op.r - root + op.n) % op.n;
	if (rel != 0) {
		int mask = 1;
		while (!(rel & mask))
			mask <<= 1;
		op.recv_from = (rel - mask + root) % op.n;
	}
	return drive(&op);
}

/* Bruck alltoall: blocks are rotated so that block j must travel j ranks
 * forward; round k moves every block whose index has bit k set. */
static size_t a2a_pack(struct op *op)
{
	int pow2 = 1 << op->round;
	size_t o = 0;
	for (int j = 0; j < op->n; j++)
		if (j & pow2) {
			memcpy(op->pack + o, op->tmp + (size_t)j * op->sz, op->sz);
			o += op->sz;
		}
	return o;
}

static int a2a_send(struct op *op, struct hpct_emsg *m)
{
	(void)m;
	size_t len = a2a_pack(op);
	return send_to(op, op->send_to, op->pack, len);
}

static int a2a_step(struct op *op, struct hpct_emsg *m)
{
	int pow2 = 1 << op->round;
	size_t o = 0;
	for (int j = 0; j < op->n; j++)
		if (j & pow2)
			o += op->sz;
	if (m->len != o)
		return HPCT_EPROTO;
	o = 0;
	for (int j = 0; j < op->n; j++)
		if (j & pow2) {
			memcpy(op->tmp + (size_t)j * op->sz, m->data + o, op->sz);
			o += op->sz;
		}
	return 0;
}

int hpct__coll_alltoall(struct hpct_group *g, const void *items, size_t sz, void *out)
{
	struct op op = { .g = g,
		         .name = "alltoall",
		         .n = g->size,
		         .r = g->rank,
		         .sz = sz,
		         .peers = forward_peers,
		         .send = a2a_send,
		         .step = a2a_step };
	op.nrounds = ceil_log2(op.n);
	op.tmp = malloc((size_t)op.n * sz);
	op.pack = malloc((size_t)(op.n / 2 + 1) * sz);
	if (!op.tmp || !op.pack) {
		free(op.tmp);
		free(op.pack);
		return hpct__group_fail(g, HPCT_ENOMEM,
		                        "alltoall: no memory for %d items of %zu bytes", op.n, sz);
	}
	const unsigned char *in = items;
	for (int j = 0; j < op.n; j++)
		memcpy(op.tmp + (size_t)j * sz, in + (size_t)((op.r + j) % op.n) * sz, sz);
	int rc = drive(&op);
	if (rc == 0)
		for (int j = 0; j < op.n; j++)
			memcpy((unsigned char *)out + (size_t)((op.r - j + op.n) % op.n) * sz,
			       op.tmp + (size_t)j * sz, sz);
	free(op.tmp);
	free(op.pack);
	return rc;
}

int hpct__coll_allgather(struct hpct_group *g, const void *item, size_t sz, void *out)
{
	if (g->world->algo == HPCT_ALGO_BRUCK)
		return bruck_allgather(g, item, sz, out);
	unsigned char *tmp = malloc((size_t)g->size * sz);
	if (!tmp)
		return hpct__group_fail(g, HPCT_ENOMEM,
		                        "allgather: no memory for %d items of %zu bytes", g->size,
		                        sz);
	memcpy(tmp + (size_t)g->rank * sz, item, sz);
	int rc = tree_run(g, "allgather", sz, tmp);
	if (rc == 0)
		memcpy(out, tmp, (size_t)g->size * sz);
	free(tmp);
	return rc;
}

int hpct__coll_barrier(struct hpct_group *g)
{
	if (g->world->algo == HPCT_ALGO_BRUCK)
		return dissemination_barrier(g);
	return tree_run(g, "barrier", 0, NULL);
}
