/* The handshake that opens every connection of the rootless engine: an
 * accepted connection is admitted or refused on its HELLO; ours is ready,
 * or rejected, on the answer; handshakes that stay silent expire. */
#include <stdio.h>
#include <stdlib.h>

#include "bootstrap/base/log.h"
#include "bootstrap/base/util.h"
#include "bootstrap/rootless/engine_internal.h"

static void refuse(struct hpct_engine *e, struct econn *c, const struct hpct_hello *h,
                   uint32_t reason)
{
	char from[HPCT_ADDRSTRLEN];
	e->cfg.ops->peer_name(c->t, from, sizeof(from));
	HPCT_WARN(HPCT_SUB_NET,
	          "rank %d: refused connection from %s claiming rank %u of job %016llx epoch %llu "
	          "(size %u, for rank %u): %s; this is job %016llx epoch %llu size %d",
	          e->cfg.rank, from, h->src, (unsigned long long)h->job,
	          (unsigned long long)h->epoch, h->size, h->dst, hpct__refuse_reason_str(reason),
	          (unsigned long long)e->cfg.job, (unsigned long long)e->cfg.epoch, e->cfg.size);
	hpct__eng_send_hello(e, c->t, HPCT_HELLO_REFUSE, h->src, h->group, reason);
	e->stats.conns_refused++;
}
/* An accepted conn that was never admitted. */
static void drop_accepted(struct hpct_engine *e, struct econn *c)
{
	hpct__eng_list_del(c);
	e->cfg.ops->close(c->t);
	free(c);
}
/* Admits an accepted conn from rank h->src: with an ACK, unless the
 * connector is ready already (it proved the secret with its AUTH). */
static void admit(struct hpct_engine *e, struct econn *c, const struct hpct_hello *h, int ack)
{
	struct peer *p = hpct__eng_peer(e, (int)h->src);
	if (!p) { /* no room to know it: as if it had not come */
		drop_accepted(e, c);
		return;
	}
	hpct__eng_list_del(c);
	c->peer = (int)h->src;
	c->auth_wait = 0;
	p->in = c;
	p->ever_up = 1;
	e->cfg.ops->set_max_msg(c->t, HPCT_TRANSPORT_MAX_MSG);
	e->stats.conns_accepted++;
	if (ack)
		hpct__eng_send_hello(e, c->t, HPCT_HELLO_ACK, h->src, h->group, 0);
	HPCT_TRACE(HPCT_SUB_NET, "admitted rank %u (group %016llx)%s", h->src,
	           (unsigned long long)h->group, e->cfg.secret ? ", secret proven" : "");
	if (c->peer < e->cfg.rank && p->out && p->state != OUT_READY) {
		/* Crossing connects: the lower rank's wins, and ours has carried
		 * only its HELLO (messages wait in the queue until READY). */
		hpct__eng_list_del(p->out);
		e->cfg.ops->close(p->out->t);
		free(p->out);
		p->out = NULL;
		p->state = OUT_IDLE;
		p->pulling = 0;
	}
	hpct__eng_maybe_flush(e, p);
}

/* Why a HELLO cannot be admitted, or HPCT_REFUSE_NONE. */
static uint32_t refusal(struct hpct_engine *e, const struct hpct_hello *h, int proof)
{
	const struct peer *known =
	        h->src < (uint32_t)e->cfg.size ? hpct__eng_peer_find(e, (int)h->src) : NULL;
	if (h->job != e->cfg.job)
		return HPCT_REFUSE_JOB;
	if (h->epoch != e->cfg.epoch)
		return HPCT_REFUSE_EPOCH;
	if (h->size != (uint32_t)e->cfg.size)
		return HPCT_REFUSE_SIZE;
	if (h->dst != (uint32_t)e->cfg.rank)
		return HPCT_REFUSE_RANK;
	if (h->src >= (uint32_t)e->cfg.size || h->src == (uint32_t)e->cfg.rank)
		return HPCT_REFUSE_SRC;
	if (e->cfg.secret && !proof)
		return HPCT_REFUSE_AUTH;
	if (!e->cfg.secret && proof)
		return HPCT_REFUSE_NOAUTH;
	if (known && known->in)
		return HPCT_REFUSE_DUP;
	return HPCT_REFUSE_NONE;
}

/* The first message on an accepted conn: admit, refuse, or (with a
 * secret) challenge. */
void hpct__eng_on_hello(struct hpct_engine *e, struct econn *c, const void *data, size_t len)
{
	struct hpct_hello h;
	char from[HPCT_ADDRSTRLEN];
	if (hpct__hello_decode_auth(data, len, &h, c->peer_nonce, NULL) < 0 ||
	    h.type != HPCT_HELLO) {
		e->cfg.ops->peer_name(c->t, from, sizeof(from));
		HPCT_WARN(HPCT_SUB_NET,
		          "rank %d: refused connection from %s: not an hpct handshake", e->cfg.rank,
		          from);
		e->stats.conns_refused++;
		drop_accepted(e, c);
		return;
	}
	uint32_t reason = refusal(e, &h, len == HPCT_AUTH_LEN);
	if (reason) {
		refuse(e, c, &h, reason);
		drop_accepted(e, c);
		return;
	}
	if (!e->cfg.secret) {
		admit(e, c, &h, 1);
		return;
	}
	/* prove ourselves, and ask the same of it */
	unsigned char mac[HPCT_AUTH_MAC];
	hpct__random(c->nonce, sizeof(c->nonce));
	if (hpct__auth_mac(e->cfg.secret, e->cfg.secret_len, 'A', c->nonce, c->peer_nonce, &h,
	                   h.src, (uint32_t)e->cfg.rank, mac) < 0) {
		drop_accepted(e, c);
		return;
	}
	c->hello = h;
	c->auth_wait = 1;
	hpct__eng_send_auth(e, c->t, HPCT_HELLO_CHALLENGE, h.src, h.group, c->nonce, mac);
}

void hpct__eng_on_auth(struct hpct_engine *e, struct econn *c, const void *data, size_t len)
{
	struct hpct_hello h;
	unsigned char mac[HPCT_AUTH_MAC], want[HPCT_AUTH_MAC];
	int ok = len == HPCT_AUTH_LEN && hpct__hello_decode_auth(data, len, &h, NULL, mac) == 0 &&
	         h.type == HPCT_HELLO_AUTH && h.src == c->hello.src &&
	         hpct__auth_mac(e->cfg.secret, e->cfg.secret_len, 'C', c->peer_nonce, c->nonce,
	                        &c->hello, c->hello.src, (uint32_t)e->cfg.rank, want) == 0 &&
	         hpct__auth_equal(mac, want);
	if (!ok) {
		char from[HPCT_ADDRSTRLEN];
		e->cfg.ops->peer_name(c->t, from, sizeof(from));
		int told = len == HPCT_HELLO_LEN && hpct__hello_decode(data, len, &h) == 0 &&
		           h.type == HPCT_HELLO_REFUSE;
		HPCT_WARN(HPCT_SUB_NET,
		          "rank %d: refused connection from %s claiming rank %u of this job: %s",
		          e->cfg.rank, from, c->hello.src,
		          !told ? "wrong proof of the shared secret (HPCT_SECRET differs there?)"
		          : h.reason == HPCT_REFUSE_NOAUTH
		                  ? "it has no shared secret (HPCT_SECRET is set on one side only)"
		                  : "it found our proof of the shared secret wrong (HPCT_SECRET "
		                    "differs there?)");
		hpct__eng_send_hello(e, c->t, HPCT_HELLO_REFUSE, c->hello.src, c->hello.group,
		                     HPCT_REFUSE_AUTH);
		e->stats.conns_refused++;
		drop_accepted(e, c);
		return;
	}
	/* another link from it may have been admitted meanwhile */
	uint32_t reason = refusal(e, &c->hello, 1);
	if (reason) {
		refuse(e, c, &c->hello, reason);
		drop_accepted(e, c);
		return;
	}
	admit(e, c, &c->hello, 0);
}

/* Our connection is not to the peer we meant, or it refused us.  With a
 * working link from that peer, only our connection goes; otherwise the peer
 * is refused for good (unless ours was a pull, which carried nothing). */
static void out_rejected(struct hpct_engine *e, struct econn *c)
{
	struct peer *p = hpct__eng_peer_find(e, c->peer);
	HPCT_INFO(HPCT_SUB_NET, "rank %d: rank %d at %s %s", e->cfg.rank, c->peer, p->addr, p->why);
	hpct__eng_list_del(c);
	p->out = NULL;
	e->cfg.ops->close(c->t);
	free(c);
	if (p->in || (p->pulling && !p->qhead)) {
		p->state = p->in ? OUT_CLOSED : OUT_IDLE;
		p->pulling = 0;
		p->why[0] = 0;
		hpct__eng_maybe_flush(e, p);
		return;
	}
	p->state = OUT_REFUSED;
	p->last_err = HPCT_EREFUSED;
	hpct__eng_drop_queue(e, p);
}
/* Our link is ready: what waited for it goes out. */
static void out_ready(struct hpct_engine *e, struct econn *c, struct peer *p)
{
	hpct__eng_list_del(c);
	p->state = OUT_READY;
	p->ever_up = 1;
	p->pulling = 0;
	e->cfg.ops->set_max_msg(c->t, HPCT_TRANSPORT_MAX_MSG);
	e->stats.conns_opened++;
	hpct__eng_maybe_flush(e, p);
}

/* A CHALLENGE: check the acceptor's proof, give ours; then ready. */
static void on_challenge(struct hpct_engine *e, struct econn *c, struct peer *p,
                         const struct hpct_hello *h, const unsigned char *nonce,
                         const unsigned char *mac)
{
	struct hpct_hello mine = { .job = e->cfg.job, .epoch = e->cfg.epoch, .group = p->group };
	unsigned char want[HPCT_AUTH_MAC], ours[HPCT_AUTH_MAC];
	/* a refusal says why before the close, so that the acceptor can tell
	 * it from a connection merely given up (a link the other way won) */
	if (!e->cfg.secret) {
		snprintf(
		        p->why, sizeof(p->why),
		        "asked for a proof of a shared secret this rank does not have (HPCT_SECRET "
		        "is set on one side only)");
		hpct__eng_send_hello(e, c->t, HPCT_HELLO_REFUSE, h->src, p->group,
		                     HPCT_REFUSE_NOAUTH);
		out_rejected(e, c);
		return;
	}
	if (hpct__auth_mac(e->cfg.secret, e->cfg.secret_len, 'A', nonce, c->nonce, &mine,
	                   (uint32_t)e->cfg.rank, h->src, want) < 0 ||
	    !hpct__auth_equal(mac, want) ||
	    hpct__auth_mac(e->cfg.secret, e->cfg.secret_len, 'C', c->nonce, nonce, &mine,
	                   (uint32_t)e->cfg.rank, h->src, ours) < 0) {
		snprintf(p->why, sizeof(p->why),
		         "gave a wrong proof of the shared secret (HPCT_SECRET differs there?)");
		hpct__eng_send_hello(e, c->t, HPCT_HELLO_REFUSE, h->src, p->group,
		                     HPCT_REFUSE_AUTH);
		out_rejected(e, c);
		return;
	}
	hpct__eng_send_auth(e, c->t, HPCT_HELLO_AUTH, (uint32_t)c->peer, p->group, NULL, ours);
	out_ready(e, c, p);
}

/* The answer to our HELLO. */
void hpct__eng_on_ack(struct hpct_engine *e, struct econn *c, const void *data, size_t len)
{
	struct peer *p = hpct__eng_peer_find(e, c->peer);
	struct hpct_hello h;
	unsigned char nonce[HPCT_AUTH_NONCE], mac[HPCT_AUTH_MAC];
	int rc = hpct__hello_decode_auth(data, len, &h, nonce, mac);
	if (rc < 0 || h.type == HPCT_HELLO || h.type == HPCT_HELLO_AUTH) {
		snprintf(p->why, sizeof(p->why), "did not answer with an hpct handshake");
		out_rejected(e, c);
	} else if (h.type == HPCT_HELLO_REFUSE) {
		snprintf(p->why, sizeof(p->why), "refused us (%s); it is job %016llx epoch %llu",
		         hpct__refuse_reason_str(h.reason), (unsigned long long)h.job,
		         (unsigned long long)h.epoch);
		out_rejected(e, c);
	} else if (h.job != e->cfg.job || h.epoch != e->cfg.epoch || h.src != (uint32_t)c->peer) {
		snprintf(p->why, sizeof(p->why),
		         "answered as rank %u of job %016llx epoch %llu, expected rank %d of job "
		         "%016llx epoch %llu",
		         h.src, (unsigned long long)h.job, (unsigned long long)h.epoch, c->peer,
		         (unsigned long long)e->cfg.job, (unsigned long long)e->cfg.epoch);
		out_rejected(e, c);
	} else if (h.type == HPCT_HELLO_CHALLENGE && len == HPCT_AUTH_LEN) {
		on_challenge(e, c, p, &h, nonce, mac);
	} else if (h.type == HPCT_HELLO_CHALLENGE || e->cfg.secret) {
		snprintf(p->why, sizeof(p->why),
		         "admitted us without a proof of the shared secret (HPCT_SECRET is set on "
		         "one "
		         "side only?)");
		out_rejected(e, c);
	} else {
		out_ready(e, c, p);
	}
}

/* An accepted conn that has not said its handshake within the deadline, in
 * time that passed while we were listening.  A rank that computes between
 * collectives spends little of it there, and a stranger connected meanwhile
 * would hold its descriptor for hours: so also when the deadline passed on
 * the clock and we listened for a second (or the deadline, if shorter)
 * since the accept, which reads anything a real peer sent on connecting. */
static int accepted_expired(const struct hpct_engine *e, const struct econn *c)
{
	double listened = e->ptime - c->accepted_ptime, hs = e->cfg.handshake_timeout_s;
	if (e->ptime > c->deadline)
		return 1;
	return hpct__now() > c->accepted_at + hs && listened >= (hs < 1 ? hs : 1);
}

/* Handshakes that stayed silent while we were listening. */
void hpct__eng_expire_handshakes(struct hpct_engine *e)
{
	for (struct econn *c = e->accepted, *next; c; c = next) {
		next = c->next;
		if (!accepted_expired(e, c))
			continue;
		char from[HPCT_ADDRSTRLEN];
		e->cfg.ops->peer_name(c->t, from, sizeof(from));
		HPCT_INFO(HPCT_SUB_NET, "rank %d: %s sent no handshake within %.1f s; closing",
		          e->cfg.rank, from, e->cfg.handshake_timeout_s);
		drop_accepted(e, c);
	}
	for (struct econn *c = e->awaiting, *next; c; c = next) {
		next = c->next;
		if (e->ptime <= c->deadline)
			continue;
		/* something accepted and never answered: a stopped process, or
		 * not hpct; try again until the caller's deadline */
		struct peer *p = hpct__eng_peer_find(e, c->peer);
		hpct__eng_list_del(c);
		p->out = NULL;
		e->cfg.ops->close(c->t);
		free(c);
		hpct__eng_schedule_retry(e, p, HPCT_ETIMEDOUT);
	}
}
