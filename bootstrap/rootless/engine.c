#include "bootstrap/rootless/engine_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/base/log.h"
#include "bootstrap/base/util.h"

#define BACKOFF_FIRST 0.002
#define BACKOFF_CAP   0.1

/* Own generator: the application's rand() state is not ours to move. */
static double jitter(struct hpct_engine *e)
{
	e->rng ^= e->rng << 13;
	e->rng ^= e->rng >> 7;
	e->rng ^= e->rng << 17;
	return 0.75 + 0.5 * (double)(e->rng >> 11) / (double)(1ULL << 53);
}

void eng_list_add(struct econn **list, struct econn *c)
{
	c->list = list;
	c->next = *list;
	*list = c;
}

void eng_list_del(struct econn *c)
{
	if (!c->list)
		return;
	for (struct econn **pp = c->list; *pp; pp = &(*pp)->next) {
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	}
	c->list = NULL;
}

static unsigned slot_of(int r, unsigned cap)
{
	return ((uint32_t)r * 2654435761u) & (cap - 1);
}

struct peer *eng_peer_find(const struct hpct_engine *e, int r)
{
	if (!e->pcap)
		return NULL;
	for (unsigned i = slot_of(r, e->pcap);; i = (i + 1) & (e->pcap - 1)) {
		struct peer *p = e->ptab[i];
		if (!p || p->rank == r)
			return p;
	}
}

static void table_put(struct peer **tab, unsigned cap, struct peer *p)
{
	unsigned i = slot_of(p->rank, cap);
	while (tab[i])
		i = (i + 1) & (cap - 1);
	tab[i] = p;
}

struct peer *eng_peer(struct hpct_engine *e, int r)
{
	struct peer *p = eng_peer_find(e, r);
	if (p)
		return p;
	if ((e->pcount + 1) * 2 > e->pcap) { /* at most half full */
		unsigned cap = e->pcap ? e->pcap * 2 : 16;
		struct peer **tab = calloc(cap, sizeof(*tab));
		if (!tab)
			return NULL;
		for (unsigned i = 0; i < e->pcap; i++)
			if (e->ptab[i])
				table_put(tab, cap, e->ptab[i]);
		free(e->ptab);
		e->ptab = tab;
		e->pcap = cap;
	}
	if (!(p = calloc(1, sizeof(*p))))
		return NULL;
	p->rank = r;
	table_put(e->ptab, e->pcap, p);
	e->pcount++;
	return p;
}

static void backoff_push(struct hpct_engine *e, struct peer *p)
{
	if (p->in_backoff)
		return;
	p->in_backoff = 1;
	p->bnext = e->backoff;
	e->backoff = p;
	e->nbackoff++;
}

void eng_schedule_retry(struct hpct_engine *e, struct peer *p, int err)
{
	p->last_err = err;
	p->retries++;
	e->stats.connect_retries++;
	p->backoff = p->backoff ? p->backoff * 2 : BACKOFF_FIRST;
	if (p->backoff > BACKOFF_CAP)
		p->backoff = BACKOFF_CAP;
	p->retry_at = hpct__now() + p->backoff * jitter(e);
	p->state = OUT_BACKOFF;
	backoff_push(e, p);
}

static const char *peer_addr_text(struct hpct_engine *e, struct peer *p)
{
	if (!p->addr[0]) {
		struct sockaddr_storage ss;
		socklen_t sl;
		if (e->cfg.peer_addr(e->cfg.peer_addr_arg, p->rank, &ss, &sl, p->addr,
		                     sizeof(p->addr)) < 0)
			snprintf(p->addr, sizeof(p->addr), "(unresolved)");
	}
	return p->addr;
}

int hpct__eng_create(const struct hpct_engine_cfg *cfg, const struct sockaddr *listen,
                     socklen_t listen_len, struct hpct_engine **eng_out)
{
	struct hpct_engine *e = calloc(1, sizeof(*e));
	if (!e)
		return HPCT_ENOMEM;
	e->cfg = *cfg;
	e->msgs_tail = &e->msgs;
	int rc = cfg->ops->create(&e->tctx);
	if (rc < 0)
		goto fail_alloc;
	rc = cfg->ops->listen(e->tctx, listen, listen_len);
	if (rc < 0)
		goto fail_listen;
	e->rng = (cfg->job ^ ((uint64_t)cfg->rank + 1) * 0x9e3779b97f4a7c15ULL) | 1;
	*eng_out = e;
	return 0;

fail_listen:
	cfg->ops->destroy(e->tctx);
fail_alloc:
	free(e);
	return rc;
}

void eng_drop_queue(struct hpct_engine *e, struct peer *p)
{
	if (p->qhead)
		p->lost++;
	while (p->qhead) {
		struct qmsg *q = p->qhead;
		p->qhead = q->next;
		free(q);
		e->nqueued--;
	}
	p->qtail = NULL;
}

void hpct__eng_destroy(struct hpct_engine *e, double deadline, int flush_queued)
{
	if (!e)
		return;
	/* A peer may still need our last messages (the final barrier round, or
	 * an abort that tells it why we gave up). */
	while (((flush_queued && e->nqueued > 0) || e->cfg.ops->backlog(e->tctx) > 0) &&
	       hpct__now() < deadline)
		hpct__eng_progress(e, 10);
	e->cfg.ops->destroy(e->tctx);
	ENG_FOR_EACH_PEER(e, p) {
		free(p->out);
		free(p->in);
		eng_drop_queue(e, p);
		free(p);
	}
	while (e->accepted) {
		struct econn *c = e->accepted;
		e->accepted = c->next;
		free(c);
	}
	while (e->msgs) {
		struct hpct_emsg *m = e->msgs;
		e->msgs = m->next;
		free(m);
	}
	while (e->aborts) {
		struct abort_rec *a = e->aborts;
		e->aborts = a->next;
		free(a);
	}
	free(e->ptab);
	free(e);
}

/* A handshake frame from this rank; with nonce or mac, the HPCT_AUTH_LEN
 * form (what is NULL stays zero). */
static void send_handshake(struct hpct_engine *e, struct hpct_tconn *t, uint16_t type,
                           uint32_t dst, uint64_t group, uint32_t reason, int auth,
                           const unsigned char *nonce, const unsigned char *mac)
{
	struct hpct_hello h = { .type = type,
		                .job = e->cfg.job,
		                .epoch = e->cfg.epoch,
		                .group = group,
		                .src = (uint32_t)e->cfg.rank,
		                .dst = dst,
		                .size = (uint32_t)e->cfg.size,
		                .reason = reason };
	unsigned char buf[HPCT_AUTH_LEN] = { 0 };
	hpct__hello_encode(&h, buf);
	if (nonce)
		memcpy(buf + HPCT_HELLO_LEN, nonce, HPCT_AUTH_NONCE);
	if (mac)
		memcpy(buf + HPCT_HELLO_LEN + HPCT_AUTH_NONCE, mac, HPCT_AUTH_MAC);
	e->cfg.ops->send(t, buf, auth ? HPCT_AUTH_LEN : HPCT_HELLO_LEN);
}

void eng_send_hello(struct hpct_engine *e, struct hpct_tconn *t, uint16_t type, uint32_t dst,
                    uint64_t group, uint32_t reason)
{
	send_handshake(e, t, type, dst, group, reason, 0, NULL, NULL);
}

void eng_send_auth(struct hpct_engine *e, struct hpct_tconn *t, uint16_t type, uint32_t dst,
                   uint64_t group, const unsigned char *nonce, const unsigned char *mac)
{
	send_handshake(e, t, type, dst, group, 0, 1, nonce, mac);
}

static void start_connect(struct hpct_engine *e, struct peer *p)
{
	int r = p->rank;
	struct sockaddr_storage ss;
	socklen_t sl;
	int rc = e->cfg.peer_addr(e->cfg.peer_addr_arg, r, &ss, &sl, p->addr, sizeof(p->addr));
	if (rc < 0) {
		p->last_err = rc;
		p->state = OUT_REFUSED;
		snprintf(p->why, sizeof(p->why), "its address does not resolve");
		eng_drop_queue(e, p);
		return;
	}
	struct econn *c = calloc(1, sizeof(*c));
	if (!c) {
		p->last_err = HPCT_ENOMEM;
		p->state = OUT_REFUSED;
		eng_drop_queue(e, p);
		return;
	}
	c->peer = r;
	c->outgoing = 1;
	rc = e->cfg.ops->connect(e->tctx, (struct sockaddr *)&ss, sl, c, &c->t);
	if (rc < 0) {
		free(c);
		eng_schedule_retry(e, p, rc);
		return;
	}
	/* until it has answered as the peer we meant, it gets no room */
	e->cfg.ops->set_max_msg(c->t, e->cfg.secret ? HPCT_AUTH_LEN : HPCT_HELLO_LEN);
	p->out = c;
	p->state = OUT_CONNECTING;
	HPCT_TRACE(HPCT_SUB_NET, "connecting to rank %d at %s", r, p->addr);
}

static void flush_queue(struct hpct_engine *e, struct peer *p, struct econn *via)
{
	while (p->qhead) {
		struct qmsg *q = p->qhead;
		p->qhead = q->next;
		e->cfg.ops->send(via->t, q->data, q->len);
		free(q);
		e->nqueued--;
	}
	p->qtail = NULL;
}

/* When two ranks connect to each other at once, the lower rank's connection
 * is kept: the higher one closes its own while it has carried nothing but
 * the HELLO, and the lower one sends nothing over the higher one's meanwhile. */
struct econn *eng_usable_in(const struct hpct_engine *e, const struct peer *p)
{
	if (p->in && p->out && p->rank > e->cfg.rank)
		return NULL;
	return p->in;
}

static struct econn *ready_conn(const struct hpct_engine *e, const struct peer *p)
{
	if (p->state == OUT_READY)
		return p->out;
	return eng_usable_in(e, p);
}

/* Whenever a peer's links change, queued messages go out if they can. */
void eng_maybe_flush(struct hpct_engine *e, struct peer *p)
{
	struct econn *c;
	if (p->qhead && (c = ready_conn(e, p)) != NULL)
		flush_queue(e, p, c);
}

int hpct__eng_send(struct hpct_engine *e, int dst, uint8_t type, uint64_t group, uint32_t seq,
                   uint16_t round, const void *payload, size_t len)
{
	int err = hpct__eng_peer_error(e, dst);
	if (err)
		return err;
	struct peer *p = eng_peer(e, dst);
	if (!p)
		return HPCT_ENOMEM;
	struct qmsg *q = malloc(sizeof(*q) + HPCT_MSG_HDR_LEN + len);
	if (!q)
		return HPCT_ENOMEM;
	struct hpct_msg_hdr h = { .type = type, .round = round, .seq = seq, .group = group };
	hpct__msg_hdr_encode(&h, q->data);
	if (len)
		memcpy(q->data + HPCT_MSG_HDR_LEN, payload, len);
	q->len = HPCT_MSG_HDR_LEN + len;
	q->next = NULL;
	e->stats.msgs_sent++;
	e->stats.bytes_sent += q->len;
	struct econn *c = ready_conn(e, p);
	if (c) {
		int rc = e->cfg.ops->send(c->t, q->data, q->len);
		free(q);
		return rc < 0 ? rc : 0;
	}
	if (p->qtail)
		p->qtail->next = q;
	else
		p->qhead = q;
	p->qtail = q;
	e->nqueued++;
	if (p->state == OUT_IDLE || p->state == OUT_CLOSED) {
		p->group = group;
		p->pulling = 0;
		start_connect(e, p);
	} else if (p->state == OUT_CONNECTING || p->state == OUT_HELLO) {
		p->pulling = 0; /* it carries data now: retry if refused */
	}
	return 0;
}

struct hpct_emsg *hpct__eng_take(struct hpct_engine *e, int src, uint64_t group, uint32_t seq,
                                 uint16_t round)
{
	for (struct hpct_emsg **pp = &e->msgs; *pp; pp = &(*pp)->next) {
		struct hpct_emsg *m = *pp;
		if (m->src == src && m->group == group && m->seq == seq && m->round == round) {
			*pp = m->next;
			if (e->msgs_tail == &m->next)
				e->msgs_tail = pp;
			m->next = NULL;
			return m;
		}
	}
	return NULL;
}

static void on_message(struct hpct_engine *e, struct econn *c, const void *data, size_t len)
{
	struct hpct_msg_hdr h;
	char from[HPCT_ADDRSTRLEN];
	if (hpct__msg_hdr_decode(data, len, &h) < 0) {
		e->cfg.ops->peer_name(c->t, from, sizeof(from));
		HPCT_WARN(HPCT_SUB_NET, "rank %d: malformed message from rank %d at %s; closing",
		          e->cfg.rank, c->peer, from);
		e->cfg.ops->close(c->t);
		eng_on_closed(e, c, HPCT_EPROTO);
		return;
	}
	e->stats.msgs_recv++;
	e->stats.bytes_recv += len;
	const unsigned char *payload = (const unsigned char *)data + HPCT_MSG_HDR_LEN;
	size_t plen = len - HPCT_MSG_HDR_LEN;
	struct peer *src = eng_peer_find(e, c->peer);
	if (src)
		src->heard = hpct__now();
	if (h.type == HPCT_MSG_PING) {
		hpct__eng_send(e, c->peer, HPCT_MSG_PONG, h.group, h.seq, 0, NULL, 0);
		return;
	}
	if (h.type == HPCT_MSG_PONG)
		return; /* heard: that was the point */
	if (h.type == HPCT_MSG_EPOCH) {
		uint64_t ep = 0;
		if (plen == 8)
			for (int i = 0; i < 8; i++)
				ep = ep << 8 | payload[i];
		if (plen != 8 || ep < e->cfg.epoch) {
			/* a process of an epoch we left: not one of ours any more */
			e->cfg.ops->peer_name(c->t, from, sizeof(from));
			HPCT_WARN(
			        HPCT_SUB_NET,
			        "rank %d: link from rank %d at %s says epoch %llu, we are at %llu: "
			        "closed",
			        e->cfg.rank, c->peer, from, (unsigned long long)ep,
			        (unsigned long long)e->cfg.epoch);
			e->stats.conns_refused++;
			e->cfg.ops->close(c->t);
			eng_on_closed(e, c, HPCT_EREFUSED);
			return;
		}
		eng_peer_find(e, c->peer)->epoch_told = ep; /* ahead of us: we follow soon */
		return;
	}
	if (h.type == HPCT_MSG_ABORT) {
		struct hpct_abort a;
		if (hpct__eng_abort_for(e, h.group) || hpct__abort_decode(payload, plen, &a) < 0)
			return;
		struct abort_rec *rec = calloc(1, sizeof(*rec));
		if (!rec)
			return; /* the sender also closes: we still learn it failed */
		rec->a = a;
		rec->group = h.group;
		rec->next = e->aborts;
		e->aborts = rec;
		return;
	}
	struct hpct_emsg *m = malloc(sizeof(*m) + plen);
	if (!m) {
		/* a silently dropped message would hang its receiver */
		e->cfg.ops->close(c->t);
		eng_on_closed(e, c, HPCT_ENOMEM);
		return;
	}
	m->next = NULL;
	m->src = c->peer;
	m->group = h.group;
	m->seq = h.seq;
	m->round = h.round;
	m->len = plen;
	memcpy(m->data, payload, plen);
	*e->msgs_tail = m;
	e->msgs_tail = &m->next;
}

void eng_on_closed(struct hpct_engine *e, struct econn *c, int err)
{
	eng_list_del(c);
	if (c->peer < 0) {
		if (c->auth_wait) {
			/* gone before its proof, saying nothing: a rank whose link
			 * the other way was admitted first gives up its own so (a
			 * rank that finds our proof wrong says so: eng_on_auth) */
			char from[HPCT_ADDRSTRLEN];
			e->cfg.ops->peer_name(c->t, from, sizeof(from));
			HPCT_INFO(HPCT_SUB_NET,
			          "rank %d: connection from %s claiming rank %u of this job closed "
			          "before proving the shared secret",
			          e->cfg.rank, from, c->hello.src);
		}
		free(c);
		return;
	}
	int r = c->peer;
	struct peer *p = eng_peer_find(e, r);
	if (e->cfg.ops->pending(c->t) > 0)
		p->lost++; /* bytes we had promised it */
	if (err)
		p->last_err = err;
	else if (!p->last_err || p->last_err == -ECONNREFUSED)
		p->last_err = HPCT_EPEERDEAD;
	HPCT_TRACE(HPCT_SUB_NET, "connection to rank %d closed (%s)", r,
	           err ? hpct_strerror(err) : "by the peer");
	if (p->in == c)
		p->in = NULL;
	if (p->out == c) {
		p->out = NULL;
		if (p->state == OUT_HELLO && !p->ever_up && !p->in) {
			/* Closed before admitting us: it may be restarting; retry. */
			free(c);
			eng_schedule_retry(e, p, err ? err : -ECONNRESET);
			return;
		}
		if (p->state != OUT_REFUSED)
			p->state = OUT_CLOSED;
	}
	free(c);
	if (hpct__eng_peer_error(e, r))
		eng_drop_queue(e, p);
	else
		eng_maybe_flush(e, p);
}

static void on_event(void *arg, const struct hpct_tevent *ev)
{
	struct hpct_engine *e = arg;
	struct econn *c = ev->conn->user;
	switch (ev->type) {
	case HPCT_TEV_ACCEPTED:
		c = calloc(1, sizeof(*c));
		if (!c) {
			e->cfg.ops->close(ev->conn);
			return;
		}
		c->peer = -1;
		c->t = ev->conn;
		c->deadline = e->ptime + e->cfg.handshake_timeout_s;
		ev->conn->user = c;
		/* a stranger gets room for a HELLO and no more (one with a proof
		 * of a secret, so that one side without it can say so) */
		e->cfg.ops->set_max_msg(c->t, HPCT_AUTH_LEN);
		eng_list_add(&e->accepted, c);
		break;
	case HPCT_TEV_CONNECTED: {
		struct peer *p = eng_peer_find(e, c->peer);
		if (e->cfg.secret) {
			hpct__random(c->nonce, sizeof(c->nonce));
			eng_send_auth(e, c->t, HPCT_HELLO, (uint32_t)c->peer, p->group, c->nonce, NULL);
		} else {
			eng_send_hello(e, c->t, HPCT_HELLO, (uint32_t)c->peer, p->group, 0);
		}
		p->state = OUT_HELLO;
		c->deadline = e->ptime + e->cfg.handshake_timeout_s;
		eng_list_add(&e->awaiting, c);
		break;
	}
	case HPCT_TEV_CONNECT_FAILED: {
		struct peer *p = eng_peer_find(e, c->peer);
		p->out = NULL;
		if (p->in || (p->pulling && !p->qhead)) {
			/* it is not up yet (a pull), or it reached us meanwhile */
			p->state = p->in ? OUT_CLOSED : OUT_IDLE;
			p->pulling = 0;
			p->last_err = ev->err;
			eng_maybe_flush(e, p);
		} else {
			eng_schedule_retry(e, p, ev->err);
		}
		free(c);
		break;
	}
	case HPCT_TEV_MESSAGE:
		if (c->peer < 0 && c->auth_wait)
			eng_on_auth(e, c, ev->data, ev->len);
		else if (c->peer < 0)
			eng_on_hello(e, c, ev->data, ev->len);
		else if (c->outgoing && eng_peer_find(e, c->peer)->state == OUT_HELLO &&
		         eng_peer_find(e, c->peer)->out == c)
			eng_on_ack(e, c, ev->data, ev->len);
		else
			on_message(e, c, ev->data, ev->len);
		break;
	case HPCT_TEV_CLOSED:
		eng_on_closed(e, c, ev->err);
		break;
	}
}

/* Starts the retries that are due; returns ms until the next one, or -1. */
static int run_retries(struct hpct_engine *e)
{
	double now = hpct__now(), next = -1;
	struct peer *list = e->backoff, *due = NULL;
	e->backoff = NULL;
	e->nbackoff = 0;
	while (list) {
		struct peer *p = list;
		list = p->bnext;
		p->bnext = NULL;
		p->in_backoff = 0;
		if (p->state != OUT_BACKOFF)
			continue;
		if (p->in) { /* it reached us meanwhile */
			p->state = OUT_IDLE;
			eng_maybe_flush(e, p);
			continue;
		}
		if (p->ever_up) { /* it was up and its links are gone: dead */
			p->state = OUT_CLOSED;
			eng_drop_queue(e, p);
			continue;
		}
		if (p->retry_at <= now) {
			p->bnext = due;
			due = p;
		} else {
			backoff_push(e, p);
		}
	}
	/* start_connect may put a peer back on the list at once. */
	while (due) {
		struct peer *p = due;
		due = p->bnext;
		p->bnext = NULL;
		start_connect(e, p);
	}
	for (struct peer *p = e->backoff; p; p = p->bnext)
		if (next < 0 || p->retry_at < next)
			next = p->retry_at;
	if (next < 0)
		return -1;
	int ms = (int)((next - now) * 1000) + 1;
	return ms < 0 ? 0 : ms;
}

int hpct__eng_progress(struct hpct_engine *e, int timeout_ms)
{
	int retry_ms = run_retries(e);
	if (retry_ms >= 0 && retry_ms < timeout_ms)
		timeout_ms = retry_ms;
	double t0 = hpct__now();
	int rc = e->cfg.ops->progress(e->tctx, timeout_ms, on_event, e);
	e->ptime += hpct__now() - t0;
	if (e->accepted || e->awaiting)
		eng_expire_handshakes(e);
	if (e->nbackoff)
		run_retries(e);
	return rc;
}

const char *hpct__eng_why(const struct hpct_engine *e)
{
	const char *why = e->cfg.ops->why ? e->cfg.ops->why() : NULL;
	return why ? why : "";
}

int hpct__eng_self_name(struct hpct_engine *e, void *buf, size_t *len)
{
	if (!e->cfg.ops->self_name)
		return -ENOTSUP;
	return e->cfg.ops->self_name(e->tctx, buf, len);
}

int hpct__eng_peer_error(struct hpct_engine *e, int r)
{
	struct peer *p = eng_peer_find(e, r);
	if (!p)
		return 0;
	if (p->state == OUT_REFUSED)
		return p->last_err ? p->last_err : HPCT_EREFUSED;
	if (p->ever_up && !p->in && p->state != OUT_READY && p->state != OUT_HELLO &&
	    p->state != OUT_CONNECTING)
		return HPCT_EPEERDEAD;
	return 0;
}

int hpct__eng_peer_connected(struct hpct_engine *e, int r)
{
	struct peer *p = eng_peer_find(e, r);
	return p && (p->state == OUT_READY || p->in != NULL);
}

int hpct__eng_probe(struct hpct_engine *e, int r, uint64_t group)
{
	struct peer *p = eng_peer_find(e, r);
	if (!p || !ready_conn(e, p))
		return HPCT_ESTATE;
	return hpct__eng_send(e, r, HPCT_MSG_PING, group, 0, 0, NULL, 0);
}

double hpct__eng_heard(struct hpct_engine *e, int r)
{
	struct peer *p = eng_peer_find(e, r);
	return p ? p->heard : 0;
}

int hpct__eng_flushed(struct hpct_engine *e, int r)
{
	struct peer *p = eng_peer_find(e, r);
	if (!p)
		return 1;
	if (p->qhead)
		return 0;
	if (p->out && e->cfg.ops->pending(p->out->t) > 0)
		return 0;
	return !(p->in && e->cfg.ops->pending(p->in->t) > 0);
}

uint64_t hpct__eng_lost(struct hpct_engine *e, int r)
{
	struct peer *p = eng_peer_find(e, r);
	return p ? p->lost : 0;
}

int hpct__eng_pull(struct hpct_engine *e, int r, uint64_t group)
{
	struct peer *p = eng_peer(e, r);
	if (!p)
		return 1; /* out of memory: the sender's retries remain */
	if (p->in || p->state != OUT_IDLE || p->ever_up)
		return 1;
	if (e->accepted)
		return 0; /* a conn still in its handshake may be that very peer */
	p->pulling = 1;
	p->group = group;
	start_connect(e, p);
	return 1;
}

void hpct__eng_describe_peer(struct hpct_engine *e, int r, char *buf, size_t len)
{
	struct peer *p = eng_peer(e, r);
	if (!p) {
		snprintf(buf, len, "rank %d (no memory to say more)", r);
		return;
	}
	const char *addr = peer_addr_text(e, p);
	if (p->why[0] && p->state == OUT_REFUSED) {
		snprintf(buf, len, "rank %d at %s %s", r, addr, p->why);
		return;
	}
	const char *what;
	if (hpct__eng_peer_error(e, r) == HPCT_EPEERDEAD)
		what = "closed its connection";
	else if (p->state == OUT_READY || p->in)
		what = "connected";
	else if (p->state == OUT_HELLO)
		what = "connected, handshake unanswered";
	else if (p->last_err == HPCT_ETIMEDOUT)
		what = "accepted our connection but never answered the handshake";
	else if (p->state == OUT_IDLE && !p->qhead)
		what = "never connected to us";
	else
		what = "not reached";
	if (p->last_err && p->last_err != HPCT_EPEERDEAD && p->last_err != HPCT_ETIMEDOUT)
		snprintf(buf, len, "rank %d at %s (%s; last error: %s, %d retries)", r, addr, what,
		         hpct_strerror(p->last_err), p->retries);
	else
		snprintf(buf, len, "rank %d at %s (%s)", r, addr, what);
}

const struct hpct_abort *hpct__eng_abort_for(struct hpct_engine *e, uint64_t group)
{
	for (struct abort_rec *a = e->aborts; a; a = a->next)
		if (a->group == group)
			return &a->a;
	return NULL;
}

void hpct__eng_broadcast_abort(struct hpct_engine *e, uint64_t group, const struct hpct_abort *a)
{
	unsigned char payload[12 + sizeof(a->text)];
	size_t n = hpct__abort_encode(a, payload);
	ENG_FOR_EACH_PEER(e, p) {
		if (ready_conn(e, p))
			hpct__eng_send(e, p->rank, HPCT_MSG_ABORT, group, 0, 0, payload, n);
	}
}

/* Drops messages of a group still queued for a connection. */
static void drop_queued_sends(struct hpct_engine *e, uint64_t group)
{
	ENG_FOR_EACH_PEER(e, p) {
		struct qmsg **qq = &p->qhead, *last = NULL;
		while (*qq) {
			struct qmsg *q = *qq;
			struct hpct_msg_hdr h;
			if (hpct__msg_hdr_decode(q->data, q->len, &h) == 0 && h.group == group) {
				*qq = q->next;
				free(q);
				e->nqueued--;
			} else {
				last = q;
				qq = &q->next;
			}
		}
		p->qtail = last;
	}
}

void hpct__eng_forget_group(struct hpct_engine *e, uint64_t group)
{
	struct hpct_emsg **pp = &e->msgs;
	while (*pp) {
		struct hpct_emsg *m = *pp;
		if (m->group == group) {
			*pp = m->next;
			free(m);
		} else {
			pp = &m->next;
		}
	}
	e->msgs_tail = pp;
	for (struct abort_rec **ap = &e->aborts; *ap;) {
		struct abort_rec *a = *ap;
		if (a->group == group) {
			*ap = a->next;
			free(a);
		} else {
			ap = &a->next;
		}
	}
	drop_queued_sends(e, group);
}

void hpct__eng_group_failed(struct hpct_engine *e, uint64_t group)
{
	drop_queued_sends(e, group);
}

/* Closes a conn of ours, from the handshake lists too. */
static void drop_conn(struct hpct_engine *e, struct econn *c)
{
	if (!c)
		return;
	eng_list_del(c);
	e->cfg.ops->close(c->t);
	free(c);
}

int hpct__eng_recover(struct hpct_engine *e, uint64_t epoch, const int *replaced, int n,
                      const struct sockaddr *listen, socklen_t listen_len)
{
	int rc = e->cfg.ops->listen(e->tctx, listen, listen_len);
	if (rc < 0)
		return rc; /* nothing changed; the caller names the address */
	unsigned char *gone = calloc((size_t)e->cfg.size, 1);
	if (!gone)
		return HPCT_ENOMEM;
	for (int i = 0; i < n; i++)
		gone[replaced[i]] = 1;
	/* the replaced ranks' old processes: forget them entirely */
	ENG_FOR_EACH_PEER(e, p) {
		p->addr[0] = 0; /* ports rotate with the epoch */
		if (!gone[p->rank])
			continue;
		drop_conn(e, p->out);
		drop_conn(e, p->in);
		eng_drop_queue(e, p);
		*p = (struct peer){ .rank = p->rank, .bnext = p->bnext, .in_backoff = p->in_backoff };
	}
	/* half-open handshakes belong to the old epoch */
	while (e->accepted)
		drop_conn(e, e->accepted);
	while (e->awaiting) {
		struct econn *c = e->awaiting;
		struct peer *p = eng_peer_find(e, c->peer);
		if (p->out == c) {
			p->out = NULL;
			p->state = OUT_IDLE;
		}
		drop_conn(e, c);
	}
	struct hpct_emsg **pp = &e->msgs;
	while (*pp) {
		struct hpct_emsg *m = *pp;
		if (gone[m->src]) {
			*pp = m->next;
			free(m);
		} else {
			pp = &m->next;
		}
	}
	e->msgs_tail = pp; /* where the walk ended: the last next pointer */
	while (e->aborts) {
		struct abort_rec *a = e->aborts;
		e->aborts = a->next;
		free(a);
	}
	while (e->backoff) { /* retries were for the old epoch */
		struct peer *p = e->backoff;
		e->backoff = p->bnext;
		p->bnext = NULL;
		p->in_backoff = 0;
	}
	e->nbackoff = 0;
	e->cfg.epoch = epoch;
	/* survivors keep their links: each hears which epoch we are at now */
	unsigned char msg[HPCT_MSG_HDR_LEN + 8];
	struct hpct_msg_hdr h = { .type = HPCT_MSG_EPOCH };
	hpct__msg_hdr_encode(&h, msg);
	for (int i = 0; i < 8; i++)
		msg[HPCT_MSG_HDR_LEN + i] = (unsigned char)(epoch >> (56 - 8 * i));
	ENG_FOR_EACH_PEER(e, p) {
		if (gone[p->rank])
			continue;
		if (p->state == OUT_BACKOFF || p->state == OUT_REFUSED || p->state == OUT_CLOSED) {
			p->state = p->out ? p->state : OUT_IDLE; /* may connect anew */
			p->retries = 0;
			p->backoff = 0;
			p->why[0] = 0;
		}
		struct econn *c = ready_conn(e, p);
		if (c && e->cfg.ops->send(c->t, msg, sizeof(msg)) == 0)
			e->stats.links_kept++;
	}
	free(gone);
	return 0;
}

void hpct__eng_stats(const struct hpct_engine *e, struct hpct_world_stats *s)
{
	*s = e->stats;
	s->peers = 0;
	ENG_FOR_EACH_PEER(e, p)
		if (p->in || p->state == OUT_READY)
			s->peers++;
}
