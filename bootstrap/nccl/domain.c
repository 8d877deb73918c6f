/* Persistent NCCL domains: per member set and generation, the ids of each
 * key derived once and the listener of the root this rank hosts for them
 * bound once, kept in the world until released (see
 * hpct_nccl_comm_init_persistent in include/hpct/nccl.h).
 *
 * Nothing here decides from what only this rank knows: the domain is
 * found by (members, generation) at the world's epoch, a key's entry by
 * the key; whether a listener is bound already only changes what this
 * rank does locally, never the ids every member computes. */
#include "bootstrap/nccl/domain.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/base/log.h"
#include "bootstrap/base/util.h"
#include "bootstrap/nccl/root_wire.h"
#include "bootstrap/world.h"

struct entry {
	struct entry *next;
	uint64_t key;
	enum hpct_nccl_tier tier;
	struct hpct_nccl_comm c; /* c.world_of points at the domain's members */
	hpct_nccl_id *ids;       /* Tier 2: one per member; Tier 1: the one */
	int nids;
	int host;                     /* the id whose root this rank serves, -1 none */
	int lfd;                      /* its listener, -1 none */
	struct hpct_nccl_roots *busy; /* the last exchange's set, until reaped */
	int leased;                   /* a lease is out: an init is between lease and settle */
};

struct domain {
	struct domain *next;
	int *members, n; /* world ranks */
	uint64_t generation, epoch, id;
	struct entry *keys;
	struct hpct_nccl_domain_stats st; /* keys, listeners, busy: counted when asked */
};

struct table {
	pthread_mutex_t lock;
	struct domain *list;
};

/* creates each world's table once */
static pthread_mutex_t make_lock = PTHREAD_MUTEX_INITIALIZER;

static void entry_free(struct entry *e)
{
	hpct__nccl_roots_stop(e->busy);
	if (e->lfd >= 0)
		close(e->lfd);
	free(e->ids);
	free(e);
}

static void domain_free(struct domain *d)
{
	while (d->keys) {
		struct entry *e = d->keys;
		d->keys = e->next;
		entry_free(e);
	}
	free(d->members);
	free(d);
}

/* A finished exchange is collected; one that failed takes the key's
 * listener and ids with it (1: the entry is gone, unlinked from *link). */
static int reap(struct domain *d, struct entry **link)
{
	struct entry *e = *link;
	if (!e->busy || !hpct__nccl_roots_finished(e->busy))
		return 0;
	int rc = hpct__nccl_roots_wait(e->busy, NULL); /* a failure is logged here */
	e->busy = NULL;
	if (rc == 0)
		return 0;
	HPCT_INFO(HPCT_SUB_NCCL,
	          "rank %d: %s: its root exchange failed (%s): its listener is closed, the "
	          "next communicator of the key binds anew",
	          e->c.w->topo.rank, e->c.name, hpct_errname(rc));
	*link = e->next;
	entry_free(e);
	(void)d;
	return 1;
}

static void release_hook(struct hpct_world *w, int all)
{
	struct table *t = w->svc[HPCT_WORLD_SLOT_NCCL].ctx;
	pthread_mutex_lock(&t->lock);
	for (struct domain **dl = &t->list; *dl;) {
		struct domain *d = *dl;
		if (!all && d->epoch == w->topo.epoch) {
			dl = &d->next;
			continue;
		}
		/* an exchange still under way belongs to a communicator of the
		 * old epoch, or of a world going away: stopped with it */
		*dl = d->next;
		domain_free(d);
	}
	pthread_mutex_unlock(&t->lock);
	if (all) {
		pthread_mutex_destroy(&t->lock);
		free(t);
		w->svc[HPCT_WORLD_SLOT_NCCL].ctx = NULL;
		w->svc[HPCT_WORLD_SLOT_NCCL].ops = NULL;
	}
}

static void recovered(struct hpct_world *w, void *ctx, uint64_t old_epoch)
{
	(void)ctx;
	(void)old_epoch;
	release_hook(w, 0); /* what belongs to an earlier epoch */
}

static void end(struct hpct_world *w, void *ctx)
{
	(void)ctx;
	release_hook(w, 1);
}

static const struct hpct_world_service_ops slot_ops = {
	.name = "nccl-domains",
	.recovered = recovered,
	.end = end,
};

static struct table *table_of(struct hpct_world *w, int make)
{
	pthread_mutex_lock(&make_lock);
	struct table *t = w->svc[HPCT_WORLD_SLOT_NCCL].ctx;
	if (!t && make && (t = calloc(1, sizeof(*t)))) {
		pthread_mutex_init(&t->lock, NULL);
		w->svc[HPCT_WORLD_SLOT_NCCL].ctx = t;
		w->svc[HPCT_WORLD_SLOT_NCCL].ops = &slot_ops;
	}
	pthread_mutex_unlock(&make_lock);
	return t;
}

/* g's members as world ranks, into a new array */
static int *members_of(const struct hpct_group *g)
{
	int *m = malloc((size_t)g->size * sizeof(int));
	for (int i = 0; m && i < g->size; i++)
		m[i] = hpct__group_world_rank(g, i);
	return m;
}

static struct domain *find(struct table *t, const struct hpct_group *g, uint64_t generation,
                           uint64_t epoch)
{
	for (struct domain *d = t->list; d; d = d->next) {
		if (d->generation != generation || d->epoch != epoch || d->n != g->size)
			continue;
		int same = 1;
		for (int i = 0; i < d->n && same; i++)
			same = d->members[i] == hpct__group_world_rank(g, i);
		if (same)
			return d;
	}
	return NULL;
}

static struct domain *domain_new(const struct hpct_world *w, const struct hpct_group *g,
                                 uint64_t generation)
{
	struct domain *d = calloc(1, sizeof(*d));
	if (!d || !(d->members = members_of(g))) {
		free(d);
		return NULL;
	}
	d->n = g->size;
	d->generation = generation;
	d->epoch = w->topo.epoch;
	uint64_t h = hpct__hash_u64(w->topo.job, 0x6e63636c646f6dull); /* "nccldom" */
	h = hpct__hash_u64(h, d->epoch);
	h = hpct__hash_u64(h, generation);
	h = hpct__hash_u64(h, (uint64_t)d->n);
	for (int i = 0; i < d->n; i++)
		h = hpct__hash_u64(h, (uint64_t)d->members[i]);
	d->id = h;
	d->st.epoch = d->epoch;
	return d;
}

/* The entry of `key`: its ids derived, its listener bound (where this rank
 * hosts a root of hpct's). */
static int entry_new(const struct hpct_nccl_lib *l, struct hpct_world *w, struct domain *d,
                     int rank, uint64_t key, enum hpct_nccl_tier tier, struct entry **out)
{
	struct entry *e = calloc(1, sizeof(*e));
	if (!e)
		return HPCT_ENOMEM;
	e->key = key;
	e->tier = tier;
	e->lfd = -1;
	e->host = -1;
	struct hpct_nccl_comm *c = &e->c;
	c->w = w;
	c->hash = hpct__hash_u64(hpct__hash_u64(d->id, key), 0x6e63636c); /* "nccl" */
	c->magic = hpct__nccl_magic(&w->topo, c->hash);
	c->nranks = d->n;
	c->rank = rank;
	c->world_of = d->members;
	snprintf(c->name, sizeof(c->name), "domain %016llx (generation %llu) key %llu",
	         (unsigned long long)d->id, (unsigned long long)d->generation,
	         (unsigned long long)key);
	e->nids = tier == HPCT_NCCL_TIER_ROOTLESS ? d->n : 1;
	int rc = HPCT_ENOMEM;
	if (!(e->ids = calloc((size_t)e->nids, sizeof(*e->ids))))
		goto fail;
	rc = tier == HPCT_NCCL_TIER_ROOTLESS ? hpct__nccl_derive_all(c, l->version, e->ids)
	                                     : hpct__nccl_derive_one(c, 0, l->version, e->ids);
	if (rc)
		goto fail; /* logged, naming the host */
	d->st.derived++;
	if (tier == HPCT_NCCL_TIER_ROOTLESS)
		e->host = rank;
	else if (rank == 0 && hpct__nccl_wire_for_version(l->version))
		e->host = 0; /* else NCCL's own root, bound by NCCL each time */
	if (e->host >= 0) {
		if ((rc = hpct__nccl_root_listen(&e->ids[e->host], &e->lfd)))
			goto fail; /* logged, naming host:port */
		d->st.binds++;
	}
	*out = e;
	return 0;
fail:
	free(e->ids);
	free(e);
	return rc;
}

int hpct__nccl_domain_lease(const struct hpct_nccl_lib *l, struct hpct_group *g, uint64_t key,
                            uint64_t generation, enum hpct_nccl_tier tier,
                            struct hpct_nccl_lease *lease)
{
	struct hpct_world *w = g->world;
	struct table *t = table_of(w, 1);
	if (!t)
		return HPCT_ENOMEM;
	memset(lease, 0, sizeof(*lease));
	int rc = 0;
	pthread_mutex_lock(&t->lock);
	struct domain *d = find(t, g, generation, w->topo.epoch);
	if (!d) {
		if (!(d = domain_new(w, g, generation))) {
			rc = HPCT_ENOMEM;
			goto out;
		}
		d->next = t->list;
		t->list = d;
	}
	struct entry **link = &d->keys;
	while (*link && (*link)->key != key)
		link = &(*link)->next;
	if (*link && reap(d, link)) /* it failed and is gone: *link is the next key's now */
		for (link = &d->keys; *link && (*link)->key != key;)
			link = &(*link)->next;
	if (*link && (*link)->tier != tier) {
		struct entry *old = *link; /* the settings changed: what was kept does not fit */
		if (old->leased || old->busy) {
			rc = hpct__fail(HPCT_ESTATE, HPCT_SUB_NCCL,
			                "rank %d: %s: its previous root exchange is still under "
			                "way here",
			                w->topo.rank, old->c.name);
			goto out;
		}
		*link = old->next;
		entry_free(old);
	}
	struct entry *e = *link;
	int fresh = !e;
	if (e && (e->leased || e->busy)) {
		rc = hpct__fail(HPCT_ESTATE, HPCT_SUB_NCCL,
		                "rank %d: %s: its previous root exchange is still under way here "
		                "(a non-blocking init, or a member yet to report): a key's "
		                "communicator is made again only once the last one's bootstrap "
		                "is done",
		                w->topo.rank, e->c.name);
		goto out;
	}
	if (e) {
		d->st.reuses++;
	} else {
		if ((rc = entry_new(l, w, d, g->rank, key, tier, &e)))
			goto out;
		e->next = d->keys;
		d->keys = e;
	}
	if (e->host >= 0 &&
	    (rc = hpct__nccl_roots_start_on(&e->ids[e->host], &e->lfd, 1, e->c.nranks,
	                                    w->topo.timeout_s, w->topo.secret != NULL, &e->busy)))
		goto out; /* the listener stays: nothing was sent on it */
	e->leased = 1;
	lease->entry = e;
	lease->table = t;
	e->c.group = g; /* this call's group over the members, for hpct__nccl_roots_up */
	lease->c = &e->c;
	lease->ids = e->ids;
	lease->nids = e->nids;
	lease->hosted = e->host >= 0;
	char where[80] = "";
	if (e->host >= 0)
		hpct__nccl_id_where(&e->ids[e->host], l->version, where, sizeof(where));
	HPCT_INFO(HPCT_SUB_NCCL, "rank %d: %s: ids %s, %s%s%s", w->topo.rank, e->c.name,
	          fresh ? "derived" : "kept", e->host < 0 ? "no root of hpct's here" : "root at ",
	          where,
	          e->host < 0 ? ""
	          : fresh     ? " (bound)"
	                      : " (listener kept)");
out:
	pthread_mutex_unlock(&t->lock);
	return rc;
}

void hpct__nccl_domain_settle(struct hpct_nccl_lease *lease, int ok)
{
	struct table *t = lease->table;
	struct entry *e = lease->entry;
	if (!e)
		return;
	pthread_mutex_lock(&t->lock);
	e->leased = 0;
	if (!ok) {
		/* a failed exchange may leave late reports behind with the same
		 * magic: the next communicator of the key starts on a new socket */
		hpct__nccl_roots_stop(e->busy);
		e->busy = NULL;
		if (e->lfd >= 0)
			close(e->lfd);
		e->lfd = -1;
		struct domain *d = NULL;
		for (struct domain *x = t->list; x && !d; x = x->next)
			for (struct entry *y = x->keys; y && !d; y = y->next)
				d = y == e ? x : NULL;
		for (struct entry **link = d ? &d->keys : NULL; link && *link;
		     link = &(*link)->next)
			if (*link == e) {
				*link = e->next;
				entry_free(e);
				break;
			}
	}
	pthread_mutex_unlock(&t->lock);
	lease->entry = NULL;
}

HPCT_API int hpct_nccl_domain_release(hpct_group *g, uint64_t generation)
{
	if (!g)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_NCCL,
		                  "hpct_nccl_domain_release: NULL group");
	struct hpct_world *w = g->world;
	struct table *t = table_of(w, 0);
	if (!t)
		return 0;
	int rc = 0;
	pthread_mutex_lock(&t->lock);
	struct domain *d = find(t, g, generation, w->topo.epoch), **dl = &t->list;
	while (*dl != d)
		dl = &(*dl)->next;
	for (struct entry **link = d ? &d->keys : NULL; link && *link;) {
		if (reap(d, link))
			continue;
		struct entry *e = *link;
		if (e->leased || e->busy) {
			rc = hpct__fail(HPCT_ESTATE, HPCT_SUB_NCCL,
			                "rank %d: hpct_nccl_domain_release: %s is held: its root "
			                "exchange is under way here (release it once the "
			                "communicator's init is done)",
			                w->topo.rank, e->c.name);
			break;
		}
		link = &e->next;
	}
	if (d && rc == 0) {
		*dl = d->next;
		HPCT_INFO(HPCT_SUB_NCCL, "rank %d: NCCL domain %016llx (generation %llu) released",
		          w->topo.rank, (unsigned long long)d->id, (unsigned long long)generation);
		domain_free(d);
	}
	pthread_mutex_unlock(&t->lock);
	return rc;
}

HPCT_API int hpct_nccl_domain_get_stats(hpct_group *g, uint64_t generation,
                                        struct hpct_nccl_domain_stats *out)
{
	if (!g || !out)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_NCCL,
		                  "hpct_nccl_domain_get_stats: NULL argument");
	memset(out, 0, sizeof(*out));
	struct table *t = table_of(g->world, 0);
	if (!t)
		return 1;
	pthread_mutex_lock(&t->lock);
	struct domain *d = find(t, g, generation, g->world->topo.epoch);
	if (d) {
		*out = d->st;
		for (struct entry **link = &d->keys; *link;) {
			if (reap(d, link))
				continue;
			struct entry *e = *link;
			out->keys++;
			out->listeners += e->lfd >= 0;
			out->busy += e->leased || e->busy;
			link = &e->next;
		}
	}
	pthread_mutex_unlock(&t->lock);
	return d ? 0 : 1;
}

HPCT_API int hpct_nccl_comm_init_persistent(hpct_group *g, uint64_t key, uint64_t generation,
                                            void *config, void **comm_out)
{
	if (!g || !comm_out)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_NCCL,
		                  "hpct_nccl_comm_init_persistent: NULL argument");
	*comm_out = NULL;
	const struct hpct_nccl_lib *l = hpct__nccl_lib();
	enum hpct_nccl_tier tier = hpct__nccl_tier_for(l, g->world);
	if (tier == HPCT_NCCL_TIER_NONE)
		return hpct__nccl_no_tier(g, l);
	struct hpct_nccl_lease ls;
	int rc = hpct__nccl_domain_lease(l, g, key, generation, tier, &ls);
	if (rc)
		return rc;
	rc = hpct__nccl_domain_init(l, &ls, tier, config, comm_out);
	hpct__nccl_domain_settle(&ls, rc == 0);
	return rc;
}
