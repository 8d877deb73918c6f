/* ncclCommGrow (NCCL 2.29 and later) with no store: the id NCCL makes for
 * a grow (ncclCommGetUniqueId, on one existing rank: its root thread takes
 * the boundary ranks' and the new ranks' reports) reaches the new ranks
 * over hpct's own broadcast, from the rank that made it.  NCCL's existing
 * ranks get it from NCCL itself, over the parent's bootstrap; whichever
 * existing rank coordinates, no rank is a fixed point everyone waits on. */
#include "bootstrap/nccl/nccl_internal.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "bootstrap/base/log.h"
#include "bootstrap/world.h"

HPCT_API int hpct_nccl_comm_grow(hpct_group *g, int old_size, void *parent, int coordinator,
                                 void *config, void **comm_out)
{
	if (!g || !comm_out)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_NCCL, "hpct_nccl_comm_grow: NULL argument");
	*comm_out = NULL;
	int me = g->rank, n = g->size, wrank = g->world->topo.rank;
	if (old_size < 1 || old_size >= n)
		return hpct__fail(
		        HPCT_EINVAL, HPCT_SUB_NCCL,
		        "rank %d: hpct_nccl_comm_grow: old_size %d: want 1..%d (the group "
		        "of %d holds the parent's ranks and at least one new rank)",
		        wrank, old_size, n - 1, n);
	if (coordinator < 0 || coordinator >= old_size)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_NCCL,
		                  "rank %d: hpct_nccl_comm_grow: coordinator %d: want an existing "
		                  "rank, 0..%d",
		                  wrank, coordinator, old_size - 1);
	if ((me < old_size) != (parent != NULL))
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_NCCL,
		                  "rank %d: hpct_nccl_comm_grow: group rank %d %s, but its parent "
		                  "communicator is %s",
		                  wrank, me,
		                  me < old_size ? "is one of the parent's ranks" : "is a new rank",
		                  parent ? "given" : "NULL");
	const struct hpct_nccl_lib *l = hpct__nccl_lib();
	if (!l)
		return hpct__fail(HPCT_ENONCCL, HPCT_SUB_NCCL, "rank %d: hpct_nccl_comm_grow: %s",
		                  wrank, hpct_last_error());
	/* looked up here, not bound with the rest: the preload shim binds
	 * through its own next definitions, and must not load NCCL anew to
	 * find calls its release lacks */
	int (*get_id)(void *, hpct_nccl_id *);
	int (*grow)(void *, int, const hpct_nccl_id *, int, void **, void *);
	*(void **)&get_id = l->handle ? dlsym(l->handle, "ncclCommGetUniqueId") : NULL;
	*(void **)&grow = l->handle ? dlsym(l->handle, "ncclCommGrow") : NULL;
	if (!get_id || !grow)
		return hpct__fail(HPCT_ENONCCL, HPCT_SUB_NCCL,
		                  "rank %d: hpct_nccl_comm_grow: NCCL %d.%d.%d has no ncclCommGrow "
		                  "(2.29 and later)",
		                  wrank, l->version / 10000, l->version / 100 % 100,
		                  l->version % 100);
	struct hpct_nccl_comm c = { .w = g->world, .nranks = n, .rank = me };
	snprintf(c.name, sizeof(c.name), "group %016llx grown from %d ranks",
	         (unsigned long long)g->id, old_size);
	hpct_nccl_id id;
	memset(&id, 0, sizeof(id));
	int rc = 0;
	if (me == coordinator && (rc = get_id(parent, &id)) != 0) {
		hpct__nccl_call_failed(l, &c, rc, parent, "ncclCommGetUniqueId", "grow");
		/* the others wait in the broadcast: an empty id tells them */
		memset(&id, 0, sizeof(id));
	}
	int brc = hpct_broadcast(g, &id, sizeof(id), coordinator);
	if (rc)
		return HPCT_ENCCL;
	if (brc)
		return brc; /* it names the peer */
	struct hpct_nccl_id_info info;
	if (hpct_nccl_id_decode(&id, l->version, &info) != 0)
		return hpct__fail(
		        HPCT_ENCCL, HPCT_SUB_NCCL,
		        "rank %d: %s: rank %d (the coordinator) could not make the grow's "
		        "id (ncclCommGetUniqueId failed there: see its log)",
		        wrank, c.name, hpct_group_world_rank(g, coordinator));
	HPCT_INFO(HPCT_SUB_NCCL, "rank %d: %s: ncclCommGrow to %d ranks, as rank %d, root at %s:%u",
	          wrank, c.name, n, me, info.host, info.port);
	int res = me < old_size
	                  ? grow(parent, n, me == coordinator ? &id : NULL, -1, comm_out, config)
	                  : grow(NULL, n, &id, me, comm_out, config);
	if (res && res != NCCL_IN_PROGRESS)
		return hpct__nccl_call_failed(l, &c, res, me < old_size ? parent : *comm_out,
		                              "ncclCommGrow", "grow");
	return 0;
}
