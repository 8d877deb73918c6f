#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/base/log.h"
#include "bootstrap/topo/derive.h"
#include "bootstrap/world.h"
#include "bootstrap/world_access.h"
#include "transport/transport.h"

int hpct__group_fail(struct hpct_group *g, int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(g->failure, sizeof(g->failure), fmt, ap);
	va_end(ap);
	g->failed = err;
	g->world->any_failed = 1;
	return hpct__fail(err, HPCT_SUB_COLL, "%s", g->failure);
}

static int track(struct hpct_world *w, struct hpct_group *g)
{
	if (w->nchildren == w->capchildren) {
		int cap = w->capchildren ? 2 * w->capchildren : 8;
		struct hpct_group **v = realloc(w->children, (size_t)cap * sizeof(*v));
		if (!v)
			return HPCT_ENOMEM;
		w->children = v;
		w->capchildren = cap;
	}
	w->children[w->nchildren++] = g;
	return 0;
}

/* A group of `parent`'s ranks `members` named by (parent, key); only its
 * members call this.  Arguments checked by the callers. */
static int make_group(struct hpct_group *parent, uint64_t key, const int *members, int n,
                      struct hpct_group **group_out)
{
	struct hpct_world *w = parent->world;
	int me = -1;
	for (int i = 0; i < n; i++)
		if (members[i] == parent->rank)
			me = i;
	*group_out = NULL;
	if (me < 0)
		return 0;
	int *wr = malloc((size_t)n * sizeof(*wr));
	if (!wr)
		return HPCT_ENOMEM;
	for (int i = 0; i < n; i++)
		wr[i] = hpct__group_world_rank(parent, members[i]);
	uint64_t id = hpct__derive_group(w->topo.job, w->topo.epoch, parent->id, key, wr, n);
	struct hpct_group *g = calloc(1, sizeof(*g));
	if (!g || track(w, g) < 0) {
		free(g);
		free(wr);
		return HPCT_ENOMEM;
	}
	g->world = w;
	g->id = id;
	g->rank = me;
	g->size = n;
	g->members = wr;
	HPCT_INFO(HPCT_SUB_COLL, "group %016llx: %d members, rank %d (parent %016llx, key %llx)",
	          (unsigned long long)id, n, me, (unsigned long long)parent->id,
	          (unsigned long long)key);
	*group_out = g;
	return 0;
}

static int check_members(struct hpct_group *parent, const int *members, int n, const char *fn)
{
	struct hpct_world *w = parent->world;
	if (n < 1 || n > parent->size)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_COLL,
		                  "rank %d: %s: %d members for a parent of size %d", w->topo.rank,
		                  fn, n, parent->size);
	for (int i = 0; i < n; i++)
		if (members[i] < 0 || members[i] >= parent->size ||
		    (i > 0 && members[i] <= members[i - 1]))
			return hpct__fail(HPCT_EINVAL, HPCT_SUB_COLL,
			                  "rank %d: %s: member %d is %d; members must be "
			                  "increasing ranks below "
			                  "the parent's size %d",
			                  w->topo.rank, fn, i, members[i], parent->size);
	return 0;
}

HPCT_API int hpct_group_create(struct hpct_group *parent, const int *members, int n,
                               struct hpct_group **group_out)
{
	if (!parent || !group_out || (n > 0 && !members))
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_COLL, "hpct_group_create: NULL argument");
	int rc = check_members(parent, members, n, "hpct_group_create");
	if (rc)
		return rc;
	/* Members or not, every rank of the parent counts the call. */
	return make_group(parent, parent->counter++, members, n, group_out);
}

/* Keys live apart from counters: the top bit is set. */
HPCT_PRIVATE int hpct__group_create_keyed(struct hpct_group *parent, uint64_t key,
                                          const int *members, int n, struct hpct_group **group_out)
{
	int rc = check_members(parent, members, n, "hpct__group_create_keyed");
	return rc ? rc : make_group(parent, key | (1ull << 63), members, n, group_out);
}

void hpct__group_free(struct hpct_group *g)
{
	if (g->world->ops->forget_group)
		g->world->ops->forget_group(g->world, g->id);
	free(g->members);
	free(g);
}

HPCT_API void hpct_group_destroy(struct hpct_group *g)
{
	if (!g || g == &g->world->group)
		return;
	struct hpct_world *w = g->world;
	for (int i = 0; i < w->nchildren; i++) {
		if (w->children[i] == g) {
			w->children[i] = w->children[--w->nchildren];
			break;
		}
	}
	hpct__group_free(g);
}

HPCT_API int hpct_group_rank(const struct hpct_group *g)
{
	return g ? g->rank : -1;
}

HPCT_API int hpct_group_size(const struct hpct_group *g)
{
	return g ? g->size : 0;
}

HPCT_API int hpct_group_world_rank(const struct hpct_group *g, int grank)
{
	if (!g || grank < 0 || grank >= g->size)
		return -1;
	return hpct__group_world_rank(g, grank);
}

HPCT_API uint64_t hpct_group_id(const struct hpct_group *g)
{
	return g ? g->id : 0;
}

static int check(const struct hpct_group *g, const char *op, const void *a, const void *b,
                 int need_b)
{
	if (!g)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_COLL, "%s: group is NULL", op);
	if (g->failed == HPCT_ESTATE) { /* a group of an epoch the world left */
		hpct__set_last_error("%s", g->failure);
		return g->failed;
	}
	if (!a || (need_b && !b))
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_COLL,
		                  "rank %d: %s on group %016llx: NULL buffer", g->world->topo.rank,
		                  op, (unsigned long long)g->id);
	return 0;
}

static int check_size(const struct hpct_group *g, const char *op, size_t sz)
{
	if (sz == 0 || sz > HPCT_TRANSPORT_MAX_MSG / 2 / (size_t)g->size)
		return hpct__fail(
		        HPCT_EINVAL, HPCT_SUB_COLL,
		        "rank %d: %s on group %016llx: item size %zu must be 1..%zu for %d ranks",
		        g->world->topo.rank, op, (unsigned long long)g->id, sz,
		        (size_t)HPCT_TRANSPORT_MAX_MSG / 2 / (size_t)g->size, g->size);
	return 0;
}

HPCT_API int hpct_allgather(struct hpct_group *g, const void *item, size_t sz, void *out)
{
	int rc = check(g, "allgather", item, out, 1);
	if (rc == 0)
		rc = check_size(g, "allgather", sz);
	if (rc)
		return rc;
	return g->world->ops->allgather(g, item, sz, out);
}

HPCT_API int hpct_barrier(struct hpct_group *g)
{
	int rc = check(g, "barrier", "", NULL, 0);
	if (rc)
		return rc;
	return g->world->ops->barrier(g);
}

HPCT_API int hpct_broadcast(struct hpct_group *g, void *buf, size_t len, int root)
{
	int rc = check(g, "broadcast", buf, NULL, 0);
	if (rc)
		return rc;
	if (root < 0 || root >= g->size)
		return hpct__fail(
		        HPCT_EINVAL, HPCT_SUB_COLL,
		        "rank %d: broadcast on group %016llx: root %d is not a rank of the "
		        "group (size %d)",
		        g->world->topo.rank, (unsigned long long)g->id, root, g->size);
	if (len == 0 || len > HPCT_TRANSPORT_MAX_MSG / 2)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_COLL,
		                  "rank %d: broadcast on group %016llx: length %zu must be 1..%u",
		                  g->world->topo.rank, (unsigned long long)g->id, len,
		                  HPCT_TRANSPORT_MAX_MSG / 2);
	return g->world->ops->broadcast(g, buf, len, root);
}

HPCT_API int hpct_alltoall(struct hpct_group *g, const void *items, size_t sz, void *out)
{
	int rc = check(g, "alltoall", items, out, 1);
	if (rc == 0)
		rc = check_size(g, "alltoall", sz);
	if (rc)
		return rc;
	return g->world->ops->alltoall(g, items, sz, out);
}
