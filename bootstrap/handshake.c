/* The handshake that opens every connection of the rootless engine: an
 * accepted connection is admitted or refused on its HELLO; ours is ready,
 * or rejected, on the answer; handshakes that stay silent expire. */
#include <stdio.h>
#include <stdlib.h>

#include "engine_internal.h"
#include "log.h"

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
	eng_send_hello(e, c->t, HPCT_HELLO_REFUSE, h->src, h->group, reason);
	e->stats.conns_refused++;
}
/* An accepted conn that was never admitted. */
static void drop_accepted(struct hpct_engine *e, struct econn *c)
{
	eng_list_del(c);
	e->cfg.ops->close(c->t);
	free(c);
}
/* The first message on an accepted conn: admit or refuse. */
void eng_on_hello(struct hpct_engine *e, struct econn *c, const void *data, size_t len)
{
	struct hpct_hello h;
	char from[HPCT_ADDRSTRLEN];
	if (hpct__hello_decode(data, len, &h) < 0 || h.type != HPCT_HELLO) {
		e->cfg.ops->peer_name(c->t, from, sizeof(from));
		HPCT_WARN(HPCT_SUB_NET,
		          "rank %d: refused connection from %s: not an hpct handshake", e->cfg.rank,
		          from);
		e->stats.conns_refused++;
		drop_accepted(e, c);
		return;
	}
	uint32_t reason = HPCT_REFUSE_NONE;
	const struct peer *known = h.src < (uint32_t)e->cfg.size ? eng_peer_find(e, (int)h.src) : NULL;
	if (h.job != e->cfg.job)
		reason = HPCT_REFUSE_JOB;
	else if (h.epoch != e->cfg.epoch)
		reason = HPCT_REFUSE_EPOCH;
	else if (h.size != (uint32_t)e->cfg.size)
		reason = HPCT_REFUSE_SIZE;
	else if (h.dst != (uint32_t)e->cfg.rank)
		reason = HPCT_REFUSE_RANK;
	else if (h.src >= (uint32_t)e->cfg.size || h.src == (uint32_t)e->cfg.rank)
		reason = HPCT_REFUSE_SRC;
	else if (known && known->in)
		reason = HPCT_REFUSE_DUP;
	if (reason) {
		refuse(e, c, &h, reason);
		drop_accepted(e, c);
		return;
	}
	struct peer *p = eng_peer(e, (int)h.src);
	if (!p) { /* no room to know it: as if it had not come */
		drop_accepted(e, c);
		return;
	}
	eng_list_del(c);
	c->peer = (int)h.src;
	p->in = c;
	p->ever_up = 1;
	e->cfg.ops->set_max_msg(c->t, HPCT_TRANSPORT_MAX_MSG);
	e->stats.conns_accepted++;
	eng_send_hello(e, c->t, HPCT_HELLO_ACK, h.src, h.group, 0);
	HPCT_TRACE(HPCT_SUB_NET, "admitted rank %u (group %016llx)", h.src,
	           (unsigned long long)h.group);
	if (c->peer < e->cfg.rank && p->out && p->state != OUT_READY) {
		/* Crossing connects: the lower rank's wins, and ours has carried
		 * only its HELLO (messages wait in the queue until READY). */
		eng_list_del(p->out);
		e->cfg.ops->close(p->out->t);
		free(p->out);
		p->out = NULL;
		p->state = OUT_IDLE;
		p->pulling = 0;
	}
	eng_maybe_flush(e, p);
}
/* Our connection is not to the peer we meant, or it refused us.  With a
 * working link from that peer, only our connection goes; otherwise the peer
 * is refused for good (unless ours was a pull, which carried nothing). */
static void out_rejected(struct hpct_engine *e, struct econn *c)
{
	struct peer *p = eng_peer_find(e, c->peer);
	HPCT_INFO(HPCT_SUB_NET, "rank %d: rank %d at %s %s", e->cfg.rank, c->peer, p->addr, p->why);
	eng_list_del(c);
	p->out = NULL;
	e->cfg.ops->close(c->t);
	free(c);
	if (p->in || (p->pulling && !p->qhead)) {
		p->state = p->in ? OUT_CLOSED : OUT_IDLE;
		p->pulling = 0;
		p->why[0] = 0;
		eng_maybe_flush(e, p);
		return;
	}
	p->state = OUT_REFUSED;
	p->last_err = HPCT_EREFUSED;
	eng_drop_queue(e, p);
}
/* The answer to our HELLO. */
void eng_on_ack(struct hpct_engine *e, struct econn *c, const void *data, size_t len)
{
	struct peer *p = eng_peer_find(e, c->peer);
	struct hpct_hello h;
	int rc = hpct__hello_decode(data, len, &h);
	if (rc < 0 || h.type == HPCT_HELLO) {
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
	} else {
		eng_list_del(c);
		p->state = OUT_READY;
		p->ever_up = 1;
		p->pulling = 0;
		e->cfg.ops->set_max_msg(c->t, HPCT_TRANSPORT_MAX_MSG);
		e->stats.conns_opened++;
		eng_maybe_flush(e, p);
	}
}
/* Handshakes that stayed silent while we were listening. */
void eng_expire_handshakes(struct hpct_engine *e)
{
	for (struct econn *c = e->accepted, *next; c; c = next) {
		next = c->next;
		if (e->ptime <= c->deadline)
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
		struct peer *p = eng_peer_find(e, c->peer);
		eng_list_del(c);
		p->out = NULL;
		e->cfg.ops->close(c->t);
		free(c);
		eng_schedule_retry(e, p, HPCT_ETIMEDOUT);
	}
}
