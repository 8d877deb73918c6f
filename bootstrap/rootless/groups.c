/* What the rootless engine keeps per group (aborts, queued sends, messages
 * of a forgotten group) and its move to a new epoch in place (recovery). */
#include "bootstrap/rootless/engine_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/base/log.h"
#include "bootstrap/base/util.h"

void hpct__eng_broadcast_abort(struct hpct_engine *e, uint64_t group, const struct hpct_abort *a)
{
	unsigned char payload[12 + sizeof(a->text)];
	size_t n = hpct__abort_encode(a, payload);
	ENG_FOR_EACH_PEER (e, p) {
		if (hpct__eng_ready_conn(e, p))
			hpct__eng_send(e, p->rank, HPCT_MSG_ABORT, group, 0, 0, payload, n);
	}
}

/* Drops messages of a group still queued for a connection. */
static void drop_queued_sends(struct hpct_engine *e, uint64_t group)
{
	ENG_FOR_EACH_PEER (e, p) {
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
	hpct__eng_inbox_forget_group(e, group);
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
	hpct__eng_list_del(c);
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
	hpct__eng_inbox_drop_aborts(e); /* counted per peer: before peers reset */
	/* the replaced ranks' old processes: forget them entirely */
	ENG_FOR_EACH_PEER (e, p) {
		p->addr[0] = 0; /* ports rotate with the epoch */
		if (!gone[p->rank])
			continue;
		drop_conn(e, p->out);
		drop_conn(e, p->in);
		hpct__eng_drop_queue(e, p);
		hpct__eng_inbox_drop_peer(e, p);
		*p = (struct peer){ .rank = p->rank,
			            .bnext = p->bnext,
			            .in_backoff = p->in_backoff };
	}
	/* half-open handshakes belong to the old epoch */
	while (e->accepted)
		drop_conn(e, e->accepted);
	while (e->awaiting) {
		struct econn *c = e->awaiting;
		struct peer *p = hpct__eng_peer_find(e, c->peer);
		if (p->out == c) {
			p->out = NULL;
			p->state = OUT_IDLE;
		}
		drop_conn(e, c);
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
	ENG_FOR_EACH_PEER (e, p) {
		if (gone[p->rank])
			continue;
		if (p->state == OUT_BACKOFF || p->state == OUT_REFUSED || p->state == OUT_CLOSED) {
			p->state = p->out ? p->state : OUT_IDLE; /* may connect anew */
			p->retries = 0;
			p->backoff = 0;
			p->why[0] = 0;
		}
		struct econn *c = hpct__eng_ready_conn(e, p);
		if (c && e->cfg.ops->send(c->t, msg, sizeof(msg)) == 0)
			e->stats.links_kept++;
	}
	free(gone);
	return 0;
}
