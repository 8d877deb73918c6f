/* The OFI transport's emulated connections (see ofi.c): a conn's state and
 * queue, its fabric messages cut into pieces and put back together in the
 * order they were sent, sends retried from progress, completions, and the
 * pings that find a dead peer. */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include "bootstrap/base/bytes.h"
#include "hpct/hpct.h"
#include "transport/ofi_internal.h"
#include "transport/transport.h"

static struct ofi_conn *conn_by_id(struct ofi_ctx *x, uint32_t id)
{
	uint32_t slot = id & MAX_CONNS;
	struct ofi_conn *c = slot >= 1 && slot <= x->nconns ? x->conns[slot - 1] : NULL;
	return c && c->id == id ? c : NULL;
}

/* A free slot is used again under a new id: a stranger's endless
 * connections do not grow the table, and a late message for a gone conn
 * finds nothing. */
struct ofi_conn *hpct__ofi_conn_new(struct ofi_ctx *x, enum ostate st)
{
	uint32_t slot = 0;
	while (slot < x->nconns && x->conns[slot])
		slot++;
	if (slot == x->nconns) {
		if (x->nconns == MAX_CONNS)
			return NULL;
		if (x->nconns == x->capconns) {
			uint32_t cap = x->capconns ? 2 * x->capconns : 16;
			struct ofi_conn **t = realloc(x->conns, cap * sizeof(*t));
			if (!t)
				return NULL;
			x->conns = t;
			uint32_t *g = realloc(x->gens, cap * sizeof(*g));
			if (!g)
				return NULL;
			x->gens = g;
			x->capconns = cap;
		}
		x->conns[x->nconns] = NULL;
		x->gens[x->nconns++] = 0;
	}
	struct ofi_conn *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	x->conns[slot] = c;
	c->ctx = x;
	/* never 0 (no conn): the reuse count, then the slot from 1 */
	c->id = (++x->gens[slot] << SLOT_BITS) | (slot + 1);
	c->state = st;
	c->av = -1;
	c->max_msg = HPCT_TRANSPORT_MAX_MSG;
	c->rx_next = 1;
	c->born = c->last_heard = hpct__ofi_now_s();
	c->serial = ++x->serial;
	return c;
}

void hpct__ofi_conn_identified(struct ofi_conn *c)
{
	if (!c->pending)
		return;
	c->pending = 0;
	c->ctx->npending--;
	hpct__ofi_av_trust(c->ctx, c->av);
}

static void drop_queue(struct ofi_conn *c)
{
	for (struct op *o = c->qhead, *n; o; o = n) {
		n = o->next;
		c->ctx->backlog -= o->len;
		free(o);
	}
	for (struct op *o = c->held, *n; o; o = n) {
		n = o->next;
		free(o);
	}
	c->qhead = c->qtail = c->held = NULL;
	c->queued = 0;
}

/* Forgets a conn: no event for it again; its slot stays empty. */
void hpct__ofi_conn_free(struct ofi_conn *c)
{
	drop_queue(c);
	for (struct part *q = c->parts, *n; q; q = n) {
		n = q->next;
		free(q->data);
		free(q);
	}
	if (c->pending)
		c->ctx->npending--;
	hpct__ofi_av_detach(c->ctx, c);
	c->ctx->conns[(c->id & MAX_CONNS) - 1] = NULL;
	free(c);
}

/* One fabric message of a conn: header (type, ids, the message's number,
 * its length and this piece's offset), then payload bytes. */
static struct op *make_op(struct ofi_conn *c, int type, uint32_t seq, uint32_t total, uint32_t off,
                          const void *data, size_t len)
{
	struct op *o = malloc(sizeof(*o) + HDR + len);
	if (!o)
		return NULL;
	o->next = NULL;
	o->conn = c->id;
	o->len = HDR + len;
	o->buf[0] = (unsigned char)type;
	o->buf[1] = o->buf[2] = o->buf[3] = 0;
	hpct__put32(o->buf + 4, c->peer_id);
	hpct__put32(o->buf + 8, c->id);
	hpct__put32(o->buf + 12, seq);
	hpct__put32(o->buf + 16, total);
	hpct__put32(o->buf + 20, off);
	if (len)
		memcpy(o->buf + HDR, data, len);
	return o;
}

/* Queues one fabric message on a conn. */
int hpct__ofi_enqueue(struct ofi_conn *c, int type, uint32_t seq, uint32_t total, uint32_t off,
                      const void *data, size_t len)
{
	struct op *o = make_op(c, type, seq, total, off, data, len);
	if (!o)
		return -ENOMEM;
	if (c->qtail)
		c->qtail->next = o;
	else
		c->qhead = o;
	c->qtail = o;
	c->queued += o->len;
	c->ctx->backlog += o->len;
	return 0;
}

/* One engine message as DATA fragments. */
int hpct__ofi_enqueue_msg(struct ofi_conn *c, const unsigned char *data, size_t len)
{
	size_t off = 0;
	uint32_t seq = ++c->tx_seq;
	do {
		size_t k = len - off < FRAG - HDR ? len - off : FRAG - HDR;
		int rc = hpct__ofi_enqueue(c, W_DATA, seq, (uint32_t)len, (uint32_t)off, data + off,
		                           k);
		if (rc < 0)
			return rc;
		off += k;
	} while (off < len);
	return 0;
}

static void emit(struct ofi_ctx *x, struct ofi_conn *c, enum hpct_tevent_type type, int err,
                 const void *data, size_t len)
{
	struct hpct_tevent ev = {
		.type = type, .conn = &c->base, .err = err, .data = data, .len = len
	};
	if (type == HPCT_TEV_ACCEPTED) {
		ev.peer = (const struct sockaddr *)&c->peer;
		ev.peer_len = sizeof(c->peer);
	}
	x->nev++;
	x->cb(x->cbarg, &ev);
}

/* Tells the peer we closed, if it can be told at once; the FIN's
 * completion refers to no conn. */
void hpct__ofi_send_fin(struct ofi_conn *c)
{
	if ((c->state != O_OPEN && c->state != O_ABANDONED) || !c->peer_id)
		return;
	struct op *fin = make_op(c, W_FIN, c->tx_seq, 0, 0, NULL, 0);
	if (!fin)
		return;
	fin->conn = 0;
	if (fi_send(c->ctx->ep, fin->buf, fin->len, NULL, c->addr, fin) == 0)
		c->ctx->inflight += fin->len;
	else
		free(fin); /* then the peer learns it when its sends fail */
}

void hpct__ofi_conn_abandon(struct ofi_conn *c)
{
	if (c->qhead) { /* the SYN still waits for fi_send: nobody saw it */
		c->state = O_CLOSED;
		hpct__ofi_conn_free(c);
		return;
	}
	drop_queue(c); /* what waited for the answer */
	c->state = O_ABANDONED;
	c->born = hpct__ofi_now_s(); /* it lingers CONNECT_AFTER from now */
}

/* The SYNACK of an abandoned conn: the acceptor is told with a FIN after
 * no message (its conn closes at once, nothing handed on), and the conn
 * is forgotten. */
static void abandoned_answered(struct ofi_conn *c, uint32_t src)
{
	c->peer_id = src;
	hpct__ofi_send_fin(c);
	c->state = O_CLOSED;
	hpct__ofi_conn_free(c);
}

/* The conn failed or the peer left: one event, then it is forgotten. */
static void fail_conn(struct ofi_ctx *x, struct ofi_conn *c, enum hpct_tevent_type type, int err)
{
	if (c->state == O_CLOSED)
		return;
	c->state = O_CLOSED;
	drop_queue(c);
	emit(x, c, type, err, NULL, 0);
	hpct__ofi_conn_free(c);
}

/* ------------------------------------------------------------ progress */

static void peer_text(const struct ofi_conn *c, char *buf, size_t len)
{
	hpct__ofi_addr_text(&c->peer, buf, len);
}

/* Hands on the messages that are whole, in the order they were sent, then
 * a FIN that came after the last of them. */
static void hand_on(struct ofi_ctx *x, struct ofi_conn *c)
{
	for (;;) {
		struct part **pp = &c->parts;
		while (*pp && (*pp)->seq != c->rx_next)
			pp = &(*pp)->next;
		struct part *q = *pp;
		if (!q || q->got != q->total)
			break;
		*pp = q->next;
		c->nparts--;
		c->rx_next++;
		uint32_t id = c->id;
		static const unsigned char none[1];
		emit(x, c, HPCT_TEV_MESSAGE, 0, q->data ? q->data : none, q->total);
		free(q->data);
		free(q);
		if (conn_by_id(x, id) != c || c->state == O_CLOSED)
			return; /* the engine closed it meanwhile */
	}
	if (c->fin_after && c->rx_next >= c->fin_after)
		fail_conn(x, c, HPCT_TEV_CLOSED, 0);
}

/* Closes a conn a peer broke or abused, telling the peer and the engine. */
static void refuse_conn(struct ofi_ctx *x, struct ofi_conn *c, enum refusal kind, int err,
                        const char *why)
{
	char who[96];
	peer_text(c, who, sizeof(who));
	if (kind == R_SILENT)
		hpct__ofi_refuse_silent(x, who, "closing the connection from %s: %s", who, why);
	else
		hpct__ofi_refuse(x, kind, "closing the connection from %s: %s", who, why);
	hpct__ofi_send_fin(c);
	fail_conn(x, c, HPCT_TEV_CLOSED, err);
}

/* The oldest pending conn makes room for a newer one. */
static void evict_pending(struct ofi_ctx *x, const char *newcomer)
{
	struct ofi_conn *old = NULL;
	for (uint32_t i = 0; i < x->nconns; i++) {
		struct ofi_conn *c = x->conns[i];
		if (c && c->pending && (!old || c->serial < old->serial))
			old = c;
	}
	if (!old)
		return;
	char who[96];
	peer_text(old, who, sizeof(who));
	hpct__ofi_refuse(x, R_PENDING,
	                 "closing the connection from %s, the oldest of those not yet identified "
	                 "(capped at %u), for a SYN from %s",
	                 who, MAX_PENDING, newcomer);
	hpct__ofi_send_fin(old);
	fail_conn(x, old, HPCT_TEV_CLOSED, -ECONNRESET);
}

/* A SYN: a new incoming conn, pending until identified; answered with a
 * SYNACK, or refused without an answer (its sender's connect fails after
 * CONNECT_AFTER and is retried). */
static void on_syn(struct ofi_ctx *x, uint32_t src, const unsigned char *name, size_t len)
{
	char who[96];
	struct sockaddr_storage peer = { 0 };
	struct hpct_raw_addr *ra = (struct hpct_raw_addr *)&peer;
	ra->family = AF_UNSPEC;
	ra->len = (uint16_t)(len <= HPCT_RAW_ADDR_MAX ? len : 0);
	if (len == 0 || len > HPCT_RAW_ADDR_MAX) {
		hpct__ofi_refuse(x, R_SYN, "refusing a SYN naming its sender in %zu bytes", len);
		return;
	}
	memcpy(ra->bytes, name, len);
	hpct__ofi_addr_text(&peer, who, sizeof(who));
	struct ofi_conn *s = hpct__ofi_conn_new(x, O_OPEN);
	if (!s) {
		hpct__ofi_refuse(x, R_SYN, "refusing a SYN from %s: no room for its connection",
		                 who);
		return;
	}
	s->peer = peer;
	s->peer_id = src;
	s->pending = 1;
	x->npending++;
	int rc = hpct__ofi_av_attach(x, s, name, len, 0);
	if (rc == -EAGAIN)
		hpct__ofi_refuse(x, R_AV,
		                 "refusing a SYN from %s: %u address-vector entries are named by "
		                 "connections not yet identified (capped at %u)",
		                 who, x->nstranger, MAX_STRANGER_AV);
	else if (rc < 0)
		hpct__ofi_refuse(x, R_SYN, "refusing a SYN from %s: its name is no fabric address",
		                 who);
	if (rc < 0 || hpct__ofi_enqueue(s, W_SYNACK, 0, 0, 0, NULL, 0) < 0) {
		hpct__ofi_conn_free(s);
		return;
	}
	if (x->npending > MAX_PENDING) /* the oldest, never this one */
		evict_pending(x, who);
	emit(x, s, HPCT_TEV_ACCEPTED, 0, NULL, 0);
}

void hpct__ofi_on_message(struct ofi_ctx *x, const unsigned char *m, size_t len)
{
	if (len < HDR)
		return;
	int type = m[0];
	uint32_t dst = hpct__get32(m + 4), src = hpct__get32(m + 8), seq = hpct__get32(m + 12),
	         total = hpct__get32(m + 16), off = hpct__get32(m + 20);
	const unsigned char *p = m + HDR;
	size_t plen = len - HDR;
	if (type == W_SYN) { /* its payload: the sender's endpoint name */
		on_syn(x, src, p, plen);
		return;
	}
	struct ofi_conn *c = conn_by_id(x, dst);
	if (!c || c->state == O_CLOSED)
		return;
	if (c->state == O_ABANDONED) {
		if (type == W_SYNACK)
			abandoned_answered(c, src);
		else if (type == W_FIN)
			hpct__ofi_conn_free(c);
		return;
	}
	c->last_heard = hpct__ofi_now_s();
	switch (type) {
	case W_SYNACK:
		if (c->state != O_CONNECTING)
			return;
		c->peer_id = src;
		c->state = O_OPEN;
		c->failing_since = 0;
		/* the SYN is done: what waited goes out in order */
		for (struct op *o = c->held, *n; o; o = n) {
			n = o->next;
			hpct__ofi_enqueue_msg(c, o->buf, o->len);
			free(o);
		}
		c->held = NULL;
		emit(x, c, HPCT_TEV_CONNECTED, 0, NULL, 0);
		break;
	case W_DATA: {
		char why[200];
		enum refusal kind;
		if (total > c->max_msg) { /* closed for its size, as over TCP */
			snprintf(why, sizeof(why),
			         "message %u of %u bytes, more than the %zu it may send yet", seq,
			         total, c->max_msg);
			refuse_conn(x, c, R_SIZE, HPCT_EPROTO, why);
			return;
		}
		if (hpct__ofi_take_piece(c, seq, total, off, p, plen, &kind, why, sizeof(why))) {
			refuse_conn(x, c, kind, HPCT_EPROTO, why);
			return;
		}
		hand_on(x, c);
		break;
	}
	case W_FIN:
		if (c->state == O_CONNECTING) { /* refused before it was answered */
			fail_conn(x, c, HPCT_TEV_CONNECT_FAILED, -ECONNREFUSED);
			return;
		}
		c->fin_after = seq == UINT32_MAX ? seq : seq + 1; /* +1: 0 means none */
		hand_on(x, c);
		break;
	case W_PING:
		break;
	}
}

/* Hands a conn's queued fabric messages to fi_send, in order, until the
 * provider says not now: 0 when all went, -FI_EAGAIN, or another error. */
int hpct__ofi_try_send(struct ofi_ctx *x, struct ofi_conn *c)
{
	while (c->qhead) {
		struct op *o = c->qhead;
		ssize_t rc = fi_send(x->ep, o->buf, o->len, NULL, c->addr, o);
		if (rc == -FI_ENOENT)
			rc = -FI_EAGAIN; /* the sockets provider's word for a peer not up yet */
		if (rc == -FI_EAGAIN)
			return (int)rc;
		c->failing_since = 0;
		c->qhead = o->next;
		if (!c->qhead)
			c->qtail = NULL;
		c->queued -= o->len;
		x->backlog -= o->len;
		if (rc == 0)
			x->inflight += o->len;
		if (rc != 0) {
			free(o);
			return (int)rc;
		}
	}
	return 0;
}

/* Retries every conn's queued messages; a conn refused for too long
 * failed: its SYN (nobody listens) or its peer (gone). */
static void push_sends(struct ofi_ctx *x, double now)
{
	for (uint32_t i = 0; i < x->nconns && x->backlog; i++) {
		struct ofi_conn *c = x->conns[i];
		if (!c || !c->qhead)
			continue;
		int rc = hpct__ofi_try_send(x, c);
		if (rc == -FI_EAGAIN) {
			x->stats.retried++;
			if (!c->failing_since)
				c->failing_since = now;
			int syn = c->state == O_CONNECTING;
			/* a peer we still hear from is alive: the provider is only out
			 * of room (its queues also carry rendezvous traffic) */
			double quiet = now - (c->last_heard > c->failing_since ? c->last_heard
			                                                       : c->failing_since);
			if (syn ? now - c->failing_since > SYN_REFUSED_AFTER : quiet > DEAD_AFTER) {
				x->stats.refused += syn;
				fail_conn(x, c, syn ? HPCT_TEV_CONNECT_FAILED : HPCT_TEV_CLOSED,
				          syn ? -ECONNREFUSED : -ECONNRESET);
			}
		} else if (rc != 0) {
			fail_conn(x, c, HPCT_TEV_CLOSED, -EIO);
		}
	}
}

/* Peers we have not heard from lately get a PING: a send to a dead one
 * starts failing, which is how it is found. */
static void ping_silent(struct ofi_ctx *x, double now)
{
	for (uint32_t i = 0; i < x->nconns; i++) {
		struct ofi_conn *c = x->conns[i];
		if (!c || c->state != O_OPEN || c->qhead)
			continue;
		if (now - c->last_heard > PING_AFTER && now - c->last_ping > PING_AFTER) {
			c->last_ping = now;
			x->stats.pings++;
			hpct__ofi_enqueue(c, W_PING, 0, 0, 0, NULL, 0);
		}
	}
}

/* Conns past their deadlines: a SYN delivered and never answered (its
 * acceptor refused it, or is gone) fails as a connect; an incoming conn
 * still unidentified after PENDING_AFTER is closed. */
static int past(const struct ofi_ctx *x, const struct ofi_conn *c, double now, double after)
{
	return now - c->born > after && now - x->active_since >= 1.0;
}

static void expire(struct ofi_ctx *x, double now)
{
	for (uint32_t i = 0; i < x->nconns; i++) {
		struct ofi_conn *c = x->conns[i];
		if (!c)
			continue;
		if (c->state == O_ABANDONED && past(x, c, now, CONNECT_AFTER)) {
			hpct__ofi_conn_free(c);
		} else if (c->state == O_CONNECTING && !c->qhead &&
		           past(x, c, now, CONNECT_AFTER)) {
			/* failed for the engine, which connects anew; kept a while
			 * abandoned, in case the answer was only late */
			x->stats.unanswered++;
			hpct__ofi_conn_abandon(c);
			emit(x, c, HPCT_TEV_CONNECT_FAILED, -ETIMEDOUT, NULL, 0);
		} else if (c->pending && past(x, c, now, PENDING_AFTER)) {
			char why[80];
			snprintf(why, sizeof(why), "not identified within %.0f s", PENDING_AFTER);
			refuse_conn(x, c, R_SILENT, -ETIMEDOUT, why);
		}
	}
}

/* A send completed: the peer takes what we send, so a provider that says
 * -FI_EAGAIN meanwhile is only out of room, not talking to the dead. */
static void send_done(struct ofi_ctx *x, struct op *o)
{
	x->inflight -= o->len;
	struct ofi_conn *c = conn_by_id(x, o->conn);
	if (c)
		c->failing_since = 0;
	free(o);
}

/* A receive (its slot is posted again) or a send, completed. */
static void on_completion(struct ofi_ctx *x, const struct fi_cq_msg_entry *e)
{
	if (e->flags & FI_RECV) {
		int slot = (int)(intptr_t)e->op_context - 1;
		hpct__ofi_on_message(x, x->rxbuf + (size_t)slot * FRAG, e->len);
		hpct__ofi_post_recv(x, slot);
	} else {
		send_done(x, e->op_context);
	}
}

static void drain_cq(struct ofi_ctx *x)
{
	struct fi_cq_msg_entry e[16];
	for (;;) {
		ssize_t n = fi_cq_read(x->cq, e, 16);
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry er = { 0 };
			if (fi_cq_readerr(x->cq, &er, 0) <= 0)
				return;
			intptr_t slot = (intptr_t)er.op_context;
			if (er.flags & FI_RECV) {
				if (slot >= 1 && slot <= NRX)
					hpct__ofi_post_recv(x, (int)slot - 1);
			} else if (er.op_context) {
				struct op *o = er.op_context;
				struct ofi_conn *c = conn_by_id(x, o->conn);
				x->inflight -= o->len;
				free(o);
				if (c)
					fail_conn(x, c, HPCT_TEV_CLOSED, -EIO);
			}
			continue;
		}
		if (n <= 0)
			return;
		for (ssize_t i = 0; i < n; i++)
			on_completion(x, &e[i]);
	}
}

int hpct__ofi_progress(void *arg, int timeout_ms, hpct_tevent_cb cb, void *cbarg)
{
	struct ofi_ctx *x = arg;
	if (!x->ep)
		return 0;
	x->cb = cb;
	x->cbarg = cbarg;
	x->nev = 0;
	double now = hpct__ofi_now_s();
	if (now - x->last_progress > 1.0)
		x->active_since = now; /* back from elsewhere: listen a second first */
	push_sends(x, now);
	drain_cq(x);
	expire(x, now); /* after what came meanwhile: a SYNACK, a handshake */
	if (x->nev == 0 && timeout_ms != 0) {
		if (timeout_ms > 0)
			ping_silent(x, now);
		push_sends(x, now);
		int wait = timeout_ms;
		if (x->backlog && (wait < 0 || wait > RETRY_MS))
			wait = RETRY_MS;
		/* rxm accepts incoming connections only while we call into it,
		 * and its connection requests do not wake fi_cq_sread: come
		 * round often (at 100 ms, 64 ranks took ~225 ms gated; at 10,
		 * ~160; at 2 the wakeups cost more than they save) */
		if (wait < 0 || wait > 10)
			wait = 10;
		struct fi_cq_msg_entry e;
		double t0 = hpct__ofi_now_s();
		ssize_t n = fi_cq_sread(x->cq, &e, 1, NULL, wait);
		x->stats.waited_s += hpct__ofi_now_s() - t0;
		if (n == 1)
			on_completion(x, &e);
		drain_cq(x);
		push_sends(x, hpct__ofi_now_s());
	}
	x->last_progress = hpct__ofi_now_s();
	x->cb = NULL;
	return x->nev;
}
