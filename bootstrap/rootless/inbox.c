/* What the rootless engine keeps of what arrived: messages no collective has
 * taken yet (early ones, for calls this rank has not reached) and the ABORT
 * records of groups, each within a bound.  A rank cannot refuse what a peer
 * sends ahead of time, so without bounds an admitted peer (anyone who knows
 * job and epoch, without HPCT_SECRET) could make it keep any amount: over a
 * bound the oldest goes, logged once per peer. */
#include "bootstrap/rootless/engine_internal.h"

#include <stdio.h>
#include <stdlib.h>

#include "bootstrap/base/log.h"

/* What a kept message costs: its payload, its header and malloc's own. */
static size_t msg_cost(const struct hpct_emsg *m)
{
	return sizeof(*m) + m->len + 16;
}

/* "127.0.0.1:40312": where the peer's messages come from. */
static void peer_text(struct hpct_engine *e, const struct peer *p, char *buf, size_t len)
{
	const struct econn *c = p->in ? p->in : p->out;
	if (c)
		e->cfg.ops->peer_name(c->t, buf, len);
	else
		snprintf(buf, len, "%s", p->addr[0] ? p->addr : "(no link)");
}

/* Takes m, which follows prev (NULL: m is the first), off p's list. */
static void unlink_msg(struct hpct_engine *e, struct peer *p, struct hpct_emsg *prev,
                       struct hpct_emsg *m)
{
	if (prev)
		prev->next = m->next;
	else
		p->mhead = m->next;
	if (p->mtail == m)
		p->mtail = prev;
	m->next = NULL;
	p->nmsgs--;
	p->mbytes -= msg_cost(m);
	e->mbytes -= msg_cost(m);
}

/* Drops the oldest message of p; why names the bound, once per peer. */
static void drop_oldest(struct hpct_engine *e, struct peer *p, const char *why)
{
	struct hpct_emsg *m = p->mhead;
	unlink_msg(e, p, NULL, m);
	p->mdropped++;
	e->stats_dropped++;
	if (!p->mwarned) {
		char from[HPCT_ADDRSTRLEN];
		peer_text(e, p, from, sizeof(from));
		p->mwarned = 1;
		HPCT_WARN(HPCT_SUB_NET,
		          "rank %d: dropped an early message from rank %d at %s (group %016llx, "
		          "epoch %llu, call %u, round %u, %zu bytes): %s; a collective that "
		          "needed it will time out naming rank %d; further drops from it are not "
		          "logged",
		          e->cfg.rank, p->rank, from, (unsigned long long)m->group,
		          (unsigned long long)e->cfg.epoch, m->seq, m->round, m->len, why, p->rank);
	}
	free(m);
}

/* The peer whose kept messages cost most. */
static struct peer *greediest(struct hpct_engine *e)
{
	struct peer *best = NULL;
	ENG_FOR_EACH_PEER (e, p)
		if (p->mhead && (!best || p->mbytes > best->mbytes))
			best = p;
	return best;
}

void hpct__eng_inbox_put(struct hpct_engine *e, struct peer *p, struct hpct_emsg *m)
{
	m->next = NULL;
	if (p->mtail)
		p->mtail->next = m;
	else
		p->mhead = m;
	p->mtail = m;
	p->nmsgs++;
	p->mbytes += msg_cost(m);
	e->mbytes += msg_cost(m);
	char why[192];
	while (p->nmsgs > e->cfg.early_max_msgs) {
		snprintf(why, sizeof(why),
		         "more than %ld messages from it wait for calls this rank has not reached "
		         "(HPCT_EARLY_MAX_MSGS)",
		         e->cfg.early_max_msgs);
		drop_oldest(e, p, why);
	}
	/* the newest message always stays: one of any legal size fits */
	while (e->mbytes > e->cfg.early_max_bytes) {
		struct peer *g = greediest(e);
		if (!g || (g == p && p->mhead == m))
			break;
		snprintf(why, sizeof(why),
		         "early messages from all peers hold more than %zu MiB "
		         "(HPCT_EARLY_MAX_MB), the most of them from rank %d",
		         e->cfg.early_max_bytes >> 20, g->rank);
		drop_oldest(e, g, why);
	}
}

struct hpct_emsg *hpct__eng_take(struct hpct_engine *e, int src, uint64_t group, uint32_t seq,
                                 uint16_t round)
{
	struct peer *p = hpct__eng_peer_find(e, src);
	if (!p)
		return NULL;
	for (struct hpct_emsg *m = p->mhead, *prev = NULL; m; prev = m, m = m->next) {
		if (m->group == group && m->seq == seq && m->round == round) {
			unlink_msg(e, p, prev, m);
			return m;
		}
	}
	return NULL;
}

const struct hpct_abort *hpct__eng_abort_for(struct hpct_engine *e, uint64_t group)
{
	for (struct abort_rec *a = e->aborts; a; a = a->next)
		if (a->group == group)
			return &a->a;
	return NULL;
}

/* Removes *ap from the list (oldest first, appended at the tail). */
static void unlink_abort(struct hpct_engine *e, struct abort_rec **ap)
{
	struct abort_rec *a = *ap;
	*ap = a->next;
	if (e->aborts_tail == &a->next)
		e->aborts_tail = ap;
	struct peer *p = hpct__eng_peer_find(e, a->src);
	if (p)
		p->naborts--;
	e->naborts--;
	free(a);
}

/* Over the bound: the oldest record of the peer that sent most of them. */
static void drop_abort(struct hpct_engine *e)
{
	struct peer *g = NULL;
	ENG_FOR_EACH_PEER (e, p)
		if (p->naborts > 0 && (!g || p->naborts > g->naborts))
			g = p;
	struct abort_rec **ap = &e->aborts;
	while (*ap && g && (*ap)->src != g->rank)
		ap = &(*ap)->next;
	if (!*ap)
		ap = &e->aborts; /* its peer entry is gone: the oldest of all */
	if (g && !g->awarned) {
		char from[HPCT_ADDRSTRLEN];
		peer_text(e, g, from, sizeof(from));
		g->awarned = 1;
		HPCT_WARN(HPCT_SUB_NET,
		          "rank %d: dropped an abort record from rank %d at %s (group %016llx, "
		          "epoch %llu, origin rank %u): more than %d abort records are kept, %d of "
		          "them from rank %d; further drops from it are not logged",
		          e->cfg.rank, g->rank, from, (unsigned long long)(*ap)->group,
		          (unsigned long long)e->cfg.epoch, (*ap)->a.origin, HPCT_ENG_MAX_ABORTS,
		          g->naborts, g->rank);
	}
	e->stats_dropped++;
	unlink_abort(e, ap);
}

void hpct__eng_abort_put(struct hpct_engine *e, struct peer *p, uint64_t group,
                         const struct hpct_abort *a)
{
	if (hpct__eng_abort_for(e, group))
		return; /* the first cause is what counts */
	struct abort_rec *rec = calloc(1, sizeof(*rec));
	if (!rec)
		return; /* the sender also closes: we still learn it failed */
	rec->a = *a;
	rec->group = group;
	rec->src = p->rank;
	*e->aborts_tail = rec;
	e->aborts_tail = &rec->next;
	p->naborts++;
	e->naborts++;
	while (e->naborts > HPCT_ENG_MAX_ABORTS)
		drop_abort(e);
}

void hpct__eng_inbox_forget_group(struct hpct_engine *e, uint64_t group)
{
	ENG_FOR_EACH_PEER (e, p) {
		for (struct hpct_emsg *m = p->mhead, *prev = NULL, *next; m; m = next) {
			next = m->next;
			if (m->group == group) {
				unlink_msg(e, p, prev, m);
				free(m);
			} else {
				prev = m;
			}
		}
	}
	for (struct abort_rec **ap = &e->aborts; *ap;) {
		if ((*ap)->group == group)
			unlink_abort(e, ap);
		else
			ap = &(*ap)->next;
	}
}

void hpct__eng_inbox_drop_peer(struct hpct_engine *e, struct peer *p)
{
	while (p->mhead) {
		struct hpct_emsg *m = p->mhead;
		unlink_msg(e, p, NULL, m);
		free(m);
	}
}

void hpct__eng_inbox_drop_aborts(struct hpct_engine *e)
{
	while (e->aborts)
		unlink_abort(e, &e->aborts);
}
