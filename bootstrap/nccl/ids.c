/* The ids this process hands out (the preload shim's ncclGetUniqueId), and
 * communicators made from one or several derived ids, as
 * ncclCommInitRankScalable takes them (PyTorch 2.7 and later pass
 * ceil(N / 128) ids above 128 ranks, each from a root rank's
 * ncclGetUniqueId, gathered through its store).
 *
 * An id handed out here names this rank's node and a port of its own; it
 * is kept in a table until a communicator is made with it.  With several
 * ids, every one derived, a communicator is either Tier 2 over the whole
 * world (every rank holds the same array: the comm's identity is all the
 * ids' magics) or, where Tier 2 does not apply, NCCL's own scalable init
 * with the ids unchanged, each id's root hosted by hpct in the process
 * that handed it out.  A mix of derived ids and NCCL's own (root ranks
 * that ran without the shim) takes the latter way: NCCL's roots for its
 * ids, hpct's for the derived ones. */
#include "bootstrap/nccl/nccl_internal.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/base/log.h"
#include "bootstrap/base/util.h"
#include "bootstrap/nccl/root_wire.h"
#include "bootstrap/world.h"

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static hpct_nccl_id *table; /* handed out, no communicator made with them yet */
static int ntable, captable;
static unsigned handed; /* ids handed out so far: the k of the next one */

static int table_add(const hpct_nccl_id *id)
{
	if (ntable == captable) {
		int cap = captable ? captable * 2 : 16;
		void *p = realloc(table, (size_t)cap * sizeof(*table));
		if (!p)
			return HPCT_ENOMEM;
		table = p;
		captable = cap;
	}
	table[ntable++] = *id;
	return 0;
}

static int table_find(const hpct_nccl_id *id)
{
	for (int i = 0; i < ntable; i++)
		if (memcmp(&table[i], id, sizeof(*id)) == 0)
			return i;
	return -1;
}

/* A communicator was made with these: they are no longer outstanding. */
static void forget(const hpct_nccl_id *ids, int nid)
{
	pthread_mutex_lock(&table_lock);
	for (int i = 0; i < nid; i++) {
		int at = table_find(&ids[i]);
		if (at >= 0)
			table[at] = table[--ntable];
	}
	pthread_mutex_unlock(&table_lock);
}

int hpct__nccl_new_id(const struct hpct_nccl_lib *l, struct hpct_world *w, hpct_nccl_id *id_out)
{
	const struct hpct_topo *t = &w->topo;
	struct sockaddr_storage ss;
	socklen_t len;
	int rc = hpct__world_node_addr(w, t->rank, &ss, &len);
	if (rc == HPCT_ENOTOPO)
		return hpct__fail(rc, HPCT_SUB_NCCL,
		                  "rank %d: no derived NCCL id without a node list (%s)", t->rank,
		                  t->why_not_rootless);
	if (rc < 0)
		return rc; /* logged by the resolver, naming the host */
	pthread_mutex_lock(&table_lock);
	unsigned k = handed++;
	pthread_mutex_unlock(&table_lock);
	/* the magic from (job, epoch, rank, k): a stale root of another epoch
	 * or id never matches; the port in window k of this rank's slots, so
	 * the ids of one process take distinct ports (until they wrap) */
	uint64_t seed = hpct__hash_u64(t->job, t->epoch);
	uint64_t magic =
	        hpct__nccl_keyed(w, hpct__hash_u64(seed, ((uint64_t)(unsigned)t->rank << 32) | k));
	int port;
	if ((rc = hpct__nccl_root_port(t, seed + k, t->rank, &port)))
		return rc;
	if (ss.ss_family == AF_INET)
		((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)port);
	else
		((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)port);
	hpct_nccl_id id;
	hpct__nccl_id_make(magic, (const struct sockaddr *)&ss, 0, 1, l->version, &id);
	pthread_mutex_lock(&table_lock);
	rc = table_add(&id);
	pthread_mutex_unlock(&table_lock);
	if (rc)
		return hpct__fail(rc, HPCT_SUB_NCCL, "rank %d: no memory to keep NCCL id %u",
		                  t->rank, k);
	*id_out = id;
	return 0;
}

/* Does hpct's root speak NCCL `version`'s root wire? */
static int roots_speak(int version)
{
	return hpct__nccl_wire_for_version(version) != NULL;
}

int hpct__nccl_host_roots(const struct hpct_nccl_lib *l, const struct hpct_world *w,
                          const hpct_nccl_id *ids, int nid, int nranks,
                          struct hpct_nccl_roots **roots_out, int *hosted_out)
{
	*roots_out = NULL;
	*hosted_out = 0;
	hpct_nccl_id *mine = calloc((size_t)nid, sizeof(*mine));
	if (!mine)
		return HPCT_ENOMEM;
	int n = 0, rc = 0;
	char list[512] = "", where[80];
	size_t at = 0;
	pthread_mutex_lock(&table_lock);
	for (int i = 0; i < nid; i++) {
		if (table_find(&ids[i]) < 0)
			continue;
		mine[n++] = ids[i];
		if (hpct__nccl_id_where(&ids[i], l->version, where, sizeof(where)) != 0)
			snprintf(where, sizeof(where), "(no address)");
		if (at + 100 < sizeof(list))
			at += (size_t)snprintf(list + at, sizeof(list) - at, "%sid %d at %s",
			                       at ? ", " : "", i, where);
	}
	pthread_mutex_unlock(&table_lock);
	if (n > 0 && !roots_speak(l->version))
		rc = hpct__fail(HPCT_ESTATE, HPCT_SUB_NCCL,
		                "rank %d: %d of %d NCCL ids (%s) are this process's, but hpct's "
		                "roots do not speak the root wire of NCCL %d.%d.%d: no root can be "
		                "hosted for them",
		                w->topo.rank, n, nid, list, l->version / 10000,
		                l->version / 100 % 100, l->version % 100);
	if (rc == 0 && n > 0) {
		HPCT_INFO(HPCT_SUB_NCCL, "rank %d: hpct's roots for %d of %d ids (%s), %d ranks",
		          w->topo.rank, n, nid, list, nranks);
		rc = hpct__nccl_roots_start(mine, n, nranks, w->topo.timeout_s,
		                            w->topo.secret != NULL, roots_out);
		if (rc == 0)
			*hosted_out = n;
	}
	free(mine);
	return rc; /* a port taken is logged by hpct__nccl_roots_start, naming it */
}

/* The comm ids[0..nid-1] stand for: one id's magic is its identity; with
 * several, every rank holds the same array and so the same fold of their
 * magics.  Ranks are world ranks when it spans the world. */
static void ids_comm(struct hpct_world *w, const hpct_nccl_id *ids, int nid, int nranks, int rank,
                     struct hpct_nccl_comm *c)
{
	memset(c, 0, sizeof(*c));
	c->w = w;
	memcpy(&c->magic, ids[0].internal, 8);
	uint64_t first = c->magic;
	if (nid > 1) {
		uint64_t h = hpct__hash_u64(0x696473, (uint64_t)nid); /* "ids" */
		for (int i = 0; i < nid; i++) {
			uint64_t m;
			memcpy(&m, ids[i].internal, 8);
			h = hpct__hash_u64(h, m);
		}
		c->magic = hpct__nccl_keyed(w, h);
	}
	c->hash = hpct__hash_u64(c->magic, 0x7368696d); /* "shim" */
	c->nranks = nranks;
	c->rank = rank;
	if (nid == 1)
		snprintf(c->name, sizeof(c->name), "NCCL id %016llx (%d ranks)",
		         (unsigned long long)first, nranks);
	else
		snprintf(c->name, sizeof(c->name), "NCCL ids %016llx.. (%d ids, %d ranks)",
		         (unsigned long long)first, nid, nranks);
}

/* Several ids, no Tier 2: NCCL's scalable init with the ids unchanged,
 * the roots of this process's ids hosted here for as long as it needs
 * them. */
static int init_hosted(const struct hpct_nccl_lib *l, const struct hpct_nccl_comm *c, int nid,
                       hpct_nccl_id *ids, void *config, void **comm)
{
	int wr = c->w->topo.rank;
	if (!l->init_rank_scalable)
		return hpct__fail(HPCT_ESTATE, HPCT_SUB_NCCL,
		                  "rank %d: %s: NCCL %d has no ncclCommInitRankScalable (2.23 and "
		                  "later have)",
		                  wr, c->name, l->version);
	struct hpct_nccl_roots *roots = NULL;
	int hosted = 0;
	int rc = hpct__nccl_host_roots(l, c->w, ids, nid, c->nranks, &roots, &hosted);
	if (rc)
		return rc;
	HPCT_INFO(HPCT_SUB_NCCL,
	          "rank %d: %s: ncclCommInitRankScalable with nId %d, rank %d, %d of the roots "
	          "hosted here",
	          wr, c->name, nid, c->rank, hosted);
	int res = hpct__nccl_init_call(l, c, nid, ids, config, roots, comm);
	if (res && res != NCCL_IN_PROGRESS) {
		hpct__nccl_roots_stop(roots);
		if (hosted)
			HPCT_INFO(HPCT_SUB_NCCL,
			          "rank %d: %s: NCCL failed; the %d roots hosted here are stopped "
			          "and their ports free",
			          wr, c->name, hosted);
		return hpct__nccl_call_failed(l, c, res, *comm, "ncclCommInitRankScalable",
		                              "hpct's roots");
	}
	if (roots) {
		/* they finish by themselves once every rank was answered */
		hpct__nccl_roots_detach(roots);
		HPCT_INFO(HPCT_SUB_NCCL, "rank %d: %s: NCCL took the ids; the roots here go on", wr,
		          c->name);
	}
	return 0;
}

int hpct__nccl_comm_init_ids(const struct hpct_nccl_lib *l, struct hpct_world *w, int nranks,
                             int rank, int nid, hpct_nccl_id *ids, void *config, void **comm_out)
{
	struct hpct_nccl_comm c;
	hpct__nccl_result_clear(); /* and hpct__nccl_init_pending's answer */
	ids_comm(w, ids, nid, nranks, rank, &c);
	enum hpct_nccl_tier tier = hpct__nccl_tier_for(l, w);
	/* Tier 2 derives where every comm rank is: only when the comm is the
	 * world and comm ranks are world ranks (PyTorch's default group) */
	int whole = nranks == w->topo.size && rank == w->topo.rank;
	/* the world's group is the comm's ranks there (hpct__nccl_roots_up) */
	c.group = whole ? hpct_world_group(w) : NULL;
	int derived = 0, rc;
	for (int i = 0; i < nid; i++)
		derived += hpct_nccl_id_is_derived(&ids[i]);
	if (derived < nid) {
		/* some are NCCL's own, whose roots NCCL started where they were
		 * made: its scalable init as it is, with hpct's roots for the
		 * derived ones this process handed out */
		HPCT_INFO(HPCT_SUB_NCCL,
		          "rank %d: %s: %d of the %d ids are NCCL's own: NCCL's scalable init, "
		          "hpct's roots for the derived ones made here",
		          w->topo.rank, c.name, nid - derived, nid);
		hpct__nccl_result_clear();
		rc = init_hosted(l, &c, nid, ids, config, comm_out);
	} else if (tier == HPCT_NCCL_TIER_ROOTLESS && whole) {
		if (nid > 1)
			HPCT_INFO(HPCT_SUB_NCCL,
			          "rank %d: %s: every id derived and the comm is the world: Tier 2 "
			          "over it, in place of the %d roots",
			          w->topo.rank, c.name, nid);
		rc = hpct__nccl_comm_init(l, &c, tier, NULL, config, comm_out);
	} else if (nid == 1) {
		rc = hpct__nccl_comm_init(l, &c, HPCT_NCCL_TIER_ROOT, &ids[0], config, comm_out);
	} else {
		hpct__nccl_result_clear(); /* hpct may fail before NCCL is called */
		rc = init_hosted(l, &c, nid, ids, config, comm_out);
	}
	if (rc == 0)
		forget(ids, nid);
	return rc;
}
