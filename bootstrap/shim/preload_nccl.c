/* libhpct_preload.so, the NCCL half: under LD_PRELOAD with
 * HPCT_USE_ROOTLESS=1, NCCL's unique ids come from hpct's derivation and
 * communicators are created with no root to reach (Tier 2), with NCCL's
 * root at a derived address (Tier 1), or with hpct's roots in the processes
 * that handed the ids out (several ids), in an unmodified program.
 *
 *   ncclGetUniqueId           a derived id (this node, a derived port, a
 *                             derived magic, hpct's marker); starts no root
 *   ncclCommInitRank,         ids with hpct's marker: Tier 2 over the comm
 *   ncclCommInitRankConfig,   when it is the world (one micro-root per rank,
 *   ncclCommInitRankScalable  ncclCommInitRankScalable with nId = nranks);
 *                             else one id: Tier 1; several: NCCL's scalable
 *                             init with hpct's roots for this process's ids.
 *                             Ids without the marker go to NCCL untouched;
 *                             a mix of both: NCCL's scalable init with
 *                             hpct's roots for the derived ones, warned
 *   ncclCommInitAll           NCCL's own, with the shim out of the way
 *   getenv                    NCCL_COMM_ID for the one call that starts a
 *                             Tier 1 root, on NCCL without an env plugin
 *
 * Whether the shim takes over is decided once, at the process's first NCCL
 * call, from the process environment read directly (never through what
 * the program called before): HPCT_USE_ROOTLESS=1, a world that can be
 * rootless (a node list: no world is created otherwise, so nothing binds
 * or dials MASTER_PORT), NCCL 2.19 or later.  When it does not, one line
 * says why and every call goes straight to NCCL.  NCCL_ENV_PLUGIN is set
 * when the library loads (HPCT_USE_ROOTLESS=1, preload.c), before any NCCL
 * call reads its environment.
 *
 * ncclCommSplit and ncclCommShrink need no id and are not touched.  The
 * real functions are the next definitions after this library (RTLD_NEXT),
 * else those of the libnccl.so.2 hpct loads. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/base/log.h"
#include "bootstrap/nccl/nccl_internal.h"
#include "bootstrap/shim/preload_internal.h"
#include "bootstrap/world_access.h"
#include "hpct/hpct.h"
#include "hpct/nccl.h"

#define NCCL_SUCCESS          0
#define NCCL_SYSTEM_ERROR     2
#define NCCL_INTERNAL_ERROR   3
#define NCCL_INVALID_ARGUMENT 4

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int active; /* HPCT_USE_ROOTLESS=1 and a world to derive from */
static struct hpct_nccl_lib real;
static _Thread_local int bypass;

static void *next(const char *name);

static void *next_sym(void *arg, const char *name)
{
	(void)arg;
	return next(name);
}

static void *next(const char *name)
{
	void *f = dlsym(RTLD_NEXT, name);
	if (!f) {
		const struct hpct_nccl_lib *l = hpct__nccl_lib();
		f = l ? dlsym(l->handle, name) : NULL;
	}
	return f;
}

/* The one line of a process where the shim leaves NCCL as it is.
 * NCCL_ENV_PLUGIN, set at load, stays: the environment is not changed once
 * other threads may read it, and hpct's plugin answers every lookup from
 * the environment, as NCCL would. */
static void decline(const char *why)
{
	HPCT_WARN(HPCT_SUB_NCCL, "preload: %s: NCCL left as it is (its own ids and roots)", why);
}

static void setup(void)
{
	char why[1200];
	hpct__nccl_bind(&real, next_sym, NULL);
	if (!real.get_version || real.get_version(&real.version) != 0) {
		decline("no NCCL with a working ncclGetVersion in this process");
		return; /* every call below fails as NCCL's would */
	}
	const char *v = hpct__preload_env_get("HPCT_USE_ROOTLESS");
	if (!v || strcmp(v, "1") != 0) {
		snprintf(why, sizeof(why), "HPCT_USE_ROOTLESS=%s, not 1", v ? v : "(unset)");
		decline(why);
		return;
	}
	/* asked of the environment: a world that cannot be rootless would take
	 * the standard path, bind MASTER_PORT on rank 0 (PyTorch's TCPStore
	 * holds it) and wait for it elsewhere */
	if (!hpct__rootless_possible(why, sizeof(why))) {
		decline(why);
		return;
	}
	hpct__nccl_getenv_route();
	if (!hpct_preload_world()) {
		snprintf(why, sizeof(why), "no hpct world (%s)", hpct_last_error());
		decline(why);
		return;
	}
	if (hpct__nccl_tier_for(&real, (struct hpct_world *)hpct_preload_world()) ==
	    HPCT_NCCL_TIER_NONE) {
		snprintf(why, sizeof(why), "NCCL %d.%d.%d is older than 2.19", real.version / 10000,
		         real.version / 100 % 100, real.version % 100);
		decline(why);
		return;
	}
	/* a derived id has no root behind it until a communicator is made;
	 * where hpct's roots may not speak NCCL's wire (several ids) the ids
	 * had better be NCCL's own, with their roots */
	if (real.version > HPCT_NCCL_NEWEST_VERIFIED_VERSION) {
		snprintf(why, sizeof(why),
		         "NCCL %d.%d.%d is newer than %s, the newest release hpct verified",
		         real.version / 10000, real.version / 100 % 100, real.version % 100,
		         HPCT_NCCL_NEWEST_VERIFIED_NAME);
		decline(why);
		return;
	}
	HPCT_INFO(HPCT_SUB_NCCL, "preload: NCCL %d, ids derived, no store", real.version);
	active = 1;
}

static int on(void)
{
	pthread_once(&once, setup);
	return active && !bypass;
}

static int result(int rc)
{
	if (rc == 0)
		return NCCL_SUCCESS;
	return rc == HPCT_EINVAL ? NCCL_INVALID_ARGUMENT : NCCL_INTERNAL_ERROR;
}

SHIM_API int ncclGetUniqueId(hpct_nccl_id *out)
{
	if (!on() || !out)
		return real.get_unique_id ? real.get_unique_id(out) : NCCL_INTERNAL_ERROR;
	hpct_preload_world_lock();
	int rc = hpct__nccl_new_id(&real, (struct hpct_world *)hpct_preload_world(), out);
	hpct_preload_world_unlock();
	return result(rc);
}

static int init(void **comm, int nranks, int rank, int nid, hpct_nccl_id *ids, void *config)
{
	hpct_preload_world_lock();
	int rc = hpct__nccl_comm_init_ids(&real, (struct hpct_world *)hpct_preload_world(), nranks,
	                                  rank, nid, ids, config, comm);
	hpct_preload_world_unlock();
	/* a non-blocking config: NCCL's ncclInProgress, as NCCL would answer
	 * (nccl2's reconfigure then polls; told ncclSuccess, it used the
	 * communicator before its init ended) */
	if (rc == 0)
		return hpct__nccl_init_pending() ? NCCL_IN_PROGRESS : NCCL_SUCCESS;
	/* NCCL's own answer when it gave one; else what hpct's failure is to
	 * NCCL (logged, with the culprit named) */
	int res = hpct__nccl_last_result();
	if (res)
		return res;
	/* -errno; hpct's own codes are -1001 and below */
	int system = rc == HPCT_EADDRINUSE || (rc < 0 && rc > -1000);
	return system ? NCCL_SYSTEM_ERROR : NCCL_INTERNAL_ERROR;
}

SHIM_API int ncclCommInitRankConfig(void **comm, int nranks, hpct_nccl_id id, int rank,
                                    void *config)
{
	if (!on() || !hpct_nccl_id_is_derived(&id))
		return real.init_rank_config ? real.init_rank_config(comm, nranks, id, rank, config)
		                             : NCCL_INTERNAL_ERROR;
	return init(comm, nranks, rank, 1, &id, config);
}

SHIM_API int ncclCommInitRank(void **comm, int nranks, hpct_nccl_id id, int rank)
{
	if (!on() || !hpct_nccl_id_is_derived(&id)) {
		int (*f)(void **, int, hpct_nccl_id, int);
		*(void **)&f = next("ncclCommInitRank");
		return f ? f(comm, nranks, id, rank) : NCCL_INTERNAL_ERROR;
	}
	return init(comm, nranks, rank, 1, &id, NULL);
}

SHIM_API int ncclCommInitRankScalable(void **comm, int nranks, int rank, int nid, hpct_nccl_id *ids,
                                      void *config)
{
	int derived = 0;
	if (on() && nid >= 1 && ids)
		for (int i = 0; i < nid; i++)
			derived += hpct_nccl_id_is_derived(&ids[i]);
	if (derived > 0 && derived < nid)
		HPCT_WARN(
		        HPCT_SUB_NCCL,
		        "preload: rank %d of %d: ncclCommInitRankScalable with %d ids, %d of them "
		        "hpct's and %d NCCL's own (some root ranks ran without the shim?): "
		        "NCCL's scalable init, hpct's roots for the derived ones",
		        rank, nranks, nid, derived, nid - derived);
	if (derived == 0)
		return real.init_rank_scalable
		               ? real.init_rank_scalable(comm, nranks, rank, nid, ids, config)
		               : NCCL_INTERNAL_ERROR;
	return init(comm, nranks, rank, nid, ids, config);
}

SHIM_API int ncclCommInitAll(void **comms, int ndev, const int *devlist)
{
	int (*f)(void **, int, const int *);
	*(void **)&f = next("ncclCommInitAll");
	if (!f)
		return NCCL_INTERNAL_ERROR;
	/* it asks ncclGetUniqueId for its id through the PLT: NCCL's own */
	bypass++;
	int rc = f(comms, ndev, devlist);
	bypass--;
	return rc;
}

SHIM_API char *getenv(const char *name)
{
	const char *shown = hpct__nccl_comm_id_peek(name);
	if (shown)
		return (char *)shown;
	return hpct__preload_env_get(name);
}
