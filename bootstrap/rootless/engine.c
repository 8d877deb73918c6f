/* The rootless engine's life and its traffic: creating and destroying it,
 * connecting to peers, sending and taking messages, the transport's events,
 * and progress.  Peers are kept in peers.c, groups and recovery in
 * groups.c. */
#include "bootstrap/rootless/engine_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/base/log.h"
#include "bootstrap/base/util.h"

int hpct__eng_create(const struct hpct_engine_cfg *cfg, const struct sockaddr *listen,
                     socklen_t listen_len, struct hpct_engine **eng_out)
{
	struct hpct_engine *e = calloc(1, sizeof(*e));
	if (!e)
		return HPCT_ENOMEM;
	e->cfg = *cfg;
	if (e->cfg.early_max_msgs <= 0)
		e->cfg.early_max_msgs = HPCT_ENG_EARLY_MSGS;
	if (e->cfg.early_max_bytes == 0)
		e->cfg.early_max_bytes = (size_t)HPCT_ENG_EARLY_MB << 20;
	e->aborts_tail = &e->aborts;
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

void hpct__eng_drop_queue(struct hpct_engine *e, struct peer *p)
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
	ENG_FOR_EACH_PEER (e, p) {
		free(p->out);
		free(p->in);
		hpct__eng_drop_queue(e, p);
	}
	hpct__eng_inbox_drop_aborts(e); /* finds its peers: before they go */
	ENG_FOR_EACH_PEER (e, p) {
		hpct__eng_inbox_drop_peer(e, p);
		free(p);
	}
	while (e->accepted) {
		struct econn *c = e->accepted;
		e->accepted = c->next;
		free(c);
	}
	free(e->ptab);
	free(e);
}

/* A handshake frame from this rank; with nonce or mac, the HPCT_AUTH_LEN
 * form (what is NULL stays zero). */
static void send_handshake(struct hpct_engine *e, struct hpct_tconn *t, uint16_t type, uint32_t dst,
                           uint64_t group, uint32_t reason, int auth, const unsigned char *nonce,
                           const unsigned char *mac)
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

void hpct__eng_send_hello(struct hpct_engine *e, struct hpct_tconn *t, uint16_t type, uint32_t dst,
                          uint64_t group, uint32_t reason)
{
	send_handshake(e, t, type, dst, group, reason, 0, NULL, NULL);
}

void hpct__eng_send_auth(struct hpct_engine *e, struct hpct_tconn *t, uint16_t type, uint32_t dst,
                         uint64_t group, const unsigned char *nonce, const unsigned char *mac)
{
	send_handshake(e, t, type, dst, group, 0, 1, nonce, mac);
}

void hpct__eng_start_connect(struct hpct_engine *e, struct peer *p)
{
	int r = p->rank;
	struct sockaddr_storage ss;
	socklen_t sl;
	int rc = e->cfg.peer_addr(e->cfg.peer_addr_arg, r, &ss, &sl, p->addr, sizeof(p->addr));
	if (rc < 0) {
		p->last_err = rc;
		p->state = OUT_REFUSED;
		snprintf(p->why, sizeof(p->why), "its address does not resolve");
		hpct__eng_drop_queue(e, p);
		return;
	}
	struct econn *c = calloc(1, sizeof(*c));
	if (!c) {
		p->last_err = HPCT_ENOMEM;
		p->state = OUT_REFUSED;
		hpct__eng_drop_queue(e, p);
		return;
	}
	c->peer = r;
	c->outgoing = 1;
	rc = e->cfg.ops->connect(e->tctx, (struct sockaddr *)&ss, sl, c, &c->t);
	if (rc < 0) {
		free(c);
		hpct__eng_schedule_retry(e, p, rc);
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
struct econn *hpct__eng_usable_in(const struct hpct_engine *e, const struct peer *p)
{
	if (p->in && p->out && p->rank > e->cfg.rank)
		return NULL;
	return p->in;
}

struct econn *hpct__eng_ready_conn(const struct hpct_engine *e, const struct peer *p)
{
	if (p->state == OUT_READY)
		return p->out;
	return hpct__eng_usable_in(e, p);
}

/* Whenever a peer's links change, queued messages go out if they can. */
void hpct__eng_maybe_flush(struct hpct_engine *e, struct peer *p)
{
	struct econn *c;
	if (p->qhead && (c = hpct__eng_ready_conn(e, p)) != NULL)
		flush_queue(e, p, c);
}

int hpct__eng_send(struct hpct_engine *e, int dst, uint8_t type, uint64_t group, uint32_t seq,
                   uint16_t round, const void *payload, size_t len)
{
	int err = hpct__eng_peer_error(e, dst);
	if (err)
		return err;
	struct peer *p = hpct__eng_peer(e, dst);
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
	struct econn *c = hpct__eng_ready_conn(e, p);
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
		hpct__eng_start_connect(e, p);
	} else if (p->state == OUT_CONNECTING || p->state == OUT_HELLO) {
		p->pulling = 0; /* it carries data now: retry if refused */
	}
	return 0;
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
		hpct__eng_on_closed(e, c, HPCT_EPROTO);
		return;
	}
	e->stats.msgs_recv++;
	e->stats.bytes_recv += len;
	const unsigned char *payload = (const unsigned char *)data + HPCT_MSG_HDR_LEN;
	size_t plen = len - HPCT_MSG_HDR_LEN;
	struct peer *src = hpct__eng_peer_find(e, c->peer);
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
			hpct__eng_on_closed(e, c, HPCT_EREFUSED);
			return;
		}
		hpct__eng_peer_find(e, c->peer)->epoch_told = ep; /* ahead of us: we follow soon */
		return;
	}
	if (h.type == HPCT_MSG_ABORT) {
		struct hpct_abort a;
		if (src && hpct__abort_decode(payload, plen, &a) == 0)
			hpct__eng_abort_put(e, src, h.group, &a);
		return;
	}
	struct hpct_emsg *m = src ? malloc(sizeof(*m) + plen) : NULL;
	if (!m) {
		/* a silently dropped message would hang its receiver */
		e->cfg.ops->close(c->t);
		hpct__eng_on_closed(e, c, src ? HPCT_ENOMEM : HPCT_EPROTO);
		return;
	}
	m->next = NULL;
	m->src = c->peer;
	m->group = h.group;
	m->seq = h.seq;
	m->round = h.round;
	m->len = plen;
	memcpy(m->data, payload, plen);
	hpct__eng_inbox_put(e, src, m);
}

void hpct__eng_on_closed(struct hpct_engine *e, struct econn *c, int err)
{
	hpct__eng_list_del(c);
	if (c->peer < 0) {
		if (c->auth_wait && err != HPCT_EPROTO) {
			/* gone before its proof, saying nothing: a rank whose link
			 * the other way was admitted first gives up its own so (a
			 * rank that finds our proof wrong says so: hpct__eng_on_auth) */
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
	struct peer *p = hpct__eng_peer_find(e, r);
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
			hpct__eng_schedule_retry(e, p, err ? err : -ECONNRESET);
			return;
		}
		if (p->state != OUT_REFUSED)
			p->state = OUT_CLOSED;
	}
	free(c);
	if (hpct__eng_peer_error(e, r))
		hpct__eng_drop_queue(e, p);
	else
		hpct__eng_maybe_flush(e, p);
}

/* The transport closed a conn for a frame longer than the conn may receive
 * (before its handshake: longer than a handshake) or malformed. */
static void bad_frame(struct hpct_engine *e, struct econn *c)
{
	char from[HPCT_ADDRSTRLEN];
	unsigned long quiet;
	if (c->peer < 0)
		e->stats.conns_refused++;
	if (!hpct__log_burst_ok(&e->bad_frames, &quiet))
		return;
	e->cfg.ops->peer_name(c->t, from, sizeof(from));
	if (c->peer < 0)
		HPCT_WARN(HPCT_SUB_NET,
		          "rank %d: refused connection from %s: its first frame is no handshake "
		          "(longer than one, or malformed)%s%.0lu%s",
		          e->cfg.rank, from, quiet ? " (and " : "", quiet,
		          quiet ? " more such frames in the last second)" : "");
	else
		HPCT_WARN(HPCT_SUB_NET,
		          "rank %d: closed the link from rank %d at %s (epoch %llu): it sent a "
		          "frame longer than the link allows (a handshake's length before it is "
		          "admitted, %u bytes after), or a malformed one%s%.0lu%s",
		          e->cfg.rank, c->peer, from, (unsigned long long)e->cfg.epoch,
		          HPCT_TRANSPORT_MAX_MSG, quiet ? " (and " : "", quiet,
		          quiet ? " more such frames in the last second)" : "");
}

/* Too many accepted connections still in their handshake (strangers that
 * connect and say nothing): the oldest goes, logged once.  A real peer's
 * connection closed before it was admitted is retried by its side. */
static void bound_handshakes(struct hpct_engine *e, struct hpct_tconn *newest)
{
	int n = 0;
	struct econn *oldest = NULL;
	for (struct econn *c = e->accepted; c; c = c->next, n++)
		oldest = c; /* the list is newest first */
	if (n < HPCT_ENG_MAX_HANDSHAKE)
		return;
	char from[HPCT_ADDRSTRLEN], to[HPCT_ADDRSTRLEN];
	if (!e->hwarned) {
		e->hwarned = 1;
		e->cfg.ops->peer_name(oldest->t, from, sizeof(from));
		e->cfg.ops->peer_name(newest, to, sizeof(to));
		HPCT_WARN(HPCT_SUB_NET,
		          "rank %d (epoch %llu): %d accepted connections are still in their "
		          "handshake; closed the oldest, from %s, to make room for %s; further "
		          "such closes are not logged",
		          e->cfg.rank, (unsigned long long)e->cfg.epoch, n, from, to);
	}
	e->stats_dropped++;
	hpct__eng_list_del(oldest);
	e->cfg.ops->close(oldest->t);
	free(oldest);
}

static void on_event(void *arg, const struct hpct_tevent *ev)
{
	struct hpct_engine *e = arg;
	struct econn *c = ev->conn->user;
	switch (ev->type) {
	case HPCT_TEV_ACCEPTED:
		bound_handshakes(e, ev->conn);
		c = calloc(1, sizeof(*c));
		if (!c) {
			e->cfg.ops->close(ev->conn);
			return;
		}
		c->peer = -1;
		c->t = ev->conn;
		c->deadline = e->ptime + e->cfg.handshake_timeout_s;
		c->accepted_at = hpct__now();
		c->accepted_ptime = e->ptime;
		ev->conn->user = c;
		/* a stranger gets room for a HELLO and no more (one with a proof
		 * of a secret, so that one side without it can say so) */
		e->cfg.ops->set_max_msg(c->t, HPCT_AUTH_LEN);
		hpct__eng_list_add(&e->accepted, c);
		break;
	case HPCT_TEV_CONNECTED: {
		struct peer *p = hpct__eng_peer_find(e, c->peer);
		if (e->cfg.secret) {
			hpct__random(c->nonce, sizeof(c->nonce));
			hpct__eng_send_auth(e, c->t, HPCT_HELLO, (uint32_t)c->peer, p->group,
			                    c->nonce, NULL);
		} else {
			hpct__eng_send_hello(e, c->t, HPCT_HELLO, (uint32_t)c->peer, p->group, 0);
		}
		p->state = OUT_HELLO;
		c->deadline = e->ptime + e->cfg.handshake_timeout_s;
		hpct__eng_list_add(&e->awaiting, c);
		break;
	}
	case HPCT_TEV_CONNECT_FAILED: {
		struct peer *p = hpct__eng_peer_find(e, c->peer);
		p->out = NULL;
		if (p->in || (p->pulling && !p->qhead)) {
			/* it is not up yet (a pull), or it reached us meanwhile */
			p->state = p->in ? OUT_CLOSED : OUT_IDLE;
			p->pulling = 0;
			p->last_err = ev->err;
			hpct__eng_maybe_flush(e, p);
		} else {
			hpct__eng_schedule_retry(e, p, ev->err);
		}
		free(c);
		break;
	}
	case HPCT_TEV_MESSAGE:
		if (c->peer < 0 && c->auth_wait)
			hpct__eng_on_auth(e, c, ev->data, ev->len);
		else if (c->peer < 0)
			hpct__eng_on_hello(e, c, ev->data, ev->len);
		else if (c->outgoing && hpct__eng_peer_find(e, c->peer)->state == OUT_HELLO &&
		         hpct__eng_peer_find(e, c->peer)->out == c)
			hpct__eng_on_ack(e, c, ev->data, ev->len);
		else
			on_message(e, c, ev->data, ev->len);
		break;
	case HPCT_TEV_CLOSED:
		if (ev->err == HPCT_EPROTO)
			bad_frame(e, c);
		hpct__eng_on_closed(e, c, ev->err);
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
			hpct__eng_maybe_flush(e, p);
			continue;
		}
		if (p->ever_up) { /* it was up and its links are gone: dead */
			p->state = OUT_CLOSED;
			hpct__eng_drop_queue(e, p);
			continue;
		}
		if (p->retry_at <= now) {
			p->bnext = due;
			due = p;
		} else {
			hpct__eng_backoff_push(e, p);
		}
	}
	/* start_connect may put a peer back on the list at once. */
	while (due) {
		struct peer *p = due;
		due = p->bnext;
		p->bnext = NULL;
		hpct__eng_start_connect(e, p);
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
		hpct__eng_expire_handshakes(e);
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

void hpct__eng_stats(const struct hpct_engine *e, struct hpct_world_stats *s)
{
	*s = e->stats;
	s->peers = 0;
	ENG_FOR_EACH_PEER (e, p)
		if (p->in || p->state == OUT_READY)
			s->peers++;
}
