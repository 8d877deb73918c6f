/* The rootless engine's peers: the table of peers made on first use, the
 * handshake lists, retries with capped backoff, and what the collectives ask
 * about a peer (its error, whether it is connected or flushed, a probe, a
 * pull, a description for error messages). */
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

void hpct__eng_list_add(struct econn **list, struct econn *c)
{
	c->list = list;
	c->next = *list;
	*list = c;
}

void hpct__eng_list_del(struct econn *c)
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

struct peer *hpct__eng_peer_find(const struct hpct_engine *e, int r)
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

struct peer *hpct__eng_peer(struct hpct_engine *e, int r)
{
	struct peer *p = hpct__eng_peer_find(e, r);
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

void hpct__eng_backoff_push(struct hpct_engine *e, struct peer *p)
{
	if (p->in_backoff)
		return;
	p->in_backoff = 1;
	p->bnext = e->backoff;
	e->backoff = p;
	e->nbackoff++;
}

void hpct__eng_schedule_retry(struct hpct_engine *e, struct peer *p, int err)
{
	p->last_err = err;
	p->retries++;
	e->stats.connect_retries++;
	p->backoff = p->backoff ? p->backoff * 2 : BACKOFF_FIRST;
	if (p->backoff > BACKOFF_CAP)
		p->backoff = BACKOFF_CAP;
	p->retry_at = hpct__now() + p->backoff * jitter(e);
	p->state = OUT_BACKOFF;
	hpct__eng_backoff_push(e, p);
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

int hpct__eng_peer_error(struct hpct_engine *e, int r)
{
	struct peer *p = hpct__eng_peer_find(e, r);
	if (!p)
		return 0;
	if (p->state == OUT_REFUSED)
		return p->last_err ? p->last_err : HPCT_EREFUSED;
	if (p->ever_up && !p->in && p->state != OUT_READY && p->state != OUT_HELLO &&
	    p->state != OUT_CONNECTING)
		return HPCT_EPEERDEAD;
	return 0;
}

int hpct__eng_probe(struct hpct_engine *e, int r, uint64_t group)
{
	/* queued and connected first where no link is up */
	return hpct__eng_send(e, r, HPCT_MSG_PING, group, 0, 0, NULL, 0);
}

double hpct__eng_heard(struct hpct_engine *e, int r)
{
	struct peer *p = hpct__eng_peer_find(e, r);
	return p ? p->heard : 0;
}

int hpct__eng_flushed(struct hpct_engine *e, int r)
{
	struct peer *p = hpct__eng_peer_find(e, r);
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
	struct peer *p = hpct__eng_peer_find(e, r);
	return p ? p->lost : 0;
}

int hpct__eng_pull(struct hpct_engine *e, int r, uint64_t group)
{
	struct peer *p = hpct__eng_peer(e, r);
	if (!p)
		return 1; /* out of memory: the sender's retries remain */
	if (p->in || p->state != OUT_IDLE || p->ever_up)
		return 1;
	if (e->accepted)
		return 0; /* a conn still in its handshake may be that very peer */
	p->pulling = 1;
	p->group = group;
	hpct__eng_start_connect(e, p);
	return 1;
}

void hpct__eng_describe_peer(struct hpct_engine *e, int r, char *buf, size_t len)
{
	struct peer *p = hpct__eng_peer(e, r);
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
