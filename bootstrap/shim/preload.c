/* libhpct_preload.so, the NCCL half: under LD_PRELOAD with
 * HPCT_USE_ROOTLESS=1, NCCL's unique ids come from hpct's derivation and
 * communicators are created with no root to reach (Tier 2) or with NCCL's
 * root at a derived address (Tier 1), in an unmodified program.  Unset or
 * 0, every call goes straight to NCCL.
 *
 *   ncclGetUniqueId           a derived id (this node, a derived port, a
 *                             derived magic, hpct's marker); starts no root
 *   ncclCommInitRank,         an id with hpct's marker: Tier 2 (one
 *   ncclCommInitRankConfig,   micro-root per rank, ncclCommInitRankScalable
 *   ncclCommInitRankScalable  with nId = nranks) or Tier 1; any other id, or
 *                             nId > 1, goes to NCCL untouched
 *   ncclCommInitAll           NCCL's own, with the shim out of the way
 *   getenv                    NCCL_COMM_ID for the one call that starts a
 *                             Tier 1 root, on NCCL without an env plugin
 *
 * The PyTorch half: in a rank process (not the torchrun agent, not a
 * data-loader worker or other child of a rank) with HPCT_USE_ROOTLESS=1,
 * when Python loads torch's _C module and that torch is the one
 * libhpct_torch.so was built for, libhpct_torch.so is loaded first, with
 * RTLD_GLOBAL, so its c10d::TCPStore wins over libtorch's (see
 * preload_torch.cc).  Any other torch, or HPCT_USE_ROOTLESS unset/0, and
 * torch is left as it is, with one notice line.
 *
 *   dlopen                    watches for torch/_C*.so, then passes on
 *   hpct_preload_world        the world this process's ranks share
 *                             (NCCL and torch halves alike)
 *
 * ncclCommSplit and ncclCommShrink need no id and are not touched.  The
 * real functions are the next definitions after this library (RTLD_NEXT),
 * else those of the libnccl.so.2 hpct loads. */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/base/log.h"
#include "bootstrap/base/util.h"
#include "bootstrap/nccl/nccl_internal.h"
#include "bootstrap/world_access.h"
#include "hpct/hpct.h"
#include "hpct/nccl.h"

#define SHIM_API              __attribute__((visibility("default")))
#define NCCL_SUCCESS          0
#define NCCL_SYSTEM_ERROR     2
#define NCCL_INTERNAL_ERROR   3
#define NCCL_INVALID_ARGUMENT 4

/* NCCL's entry points as this file defines them (NCCL's types spelled as
 * hpct's: results are ints, comms and configs pointers). */
SHIM_API int ncclGetUniqueId(hpct_nccl_id *out);
SHIM_API int ncclCommInitRankConfig(void **comm, int nranks, hpct_nccl_id id, int rank,
                                    void *config);
SHIM_API int ncclCommInitRank(void **comm, int nranks, hpct_nccl_id id, int rank);
SHIM_API int ncclCommInitRankScalable(void **comm, int nranks, int rank, int nid, hpct_nccl_id *ids,
                                      void *config);
SHIM_API int ncclCommInitAll(void **comms, int ndev, const int *devlist);

SHIM_API void *dlopen(const char *file, int mode);
SHIM_API hpct_world *hpct_preload_world(void);

static pthread_once_t once = PTHREAD_ONCE_INIT, world_once = PTHREAD_ONCE_INIT;
static int active;        /* HPCT_USE_ROOTLESS=1 and a world to derive from */
static hpct_world *world; /* lives as long as the process */
static struct hpct_nccl_lib real;
static atomic_uint id_counter; /* ids this process handed out */
static _Thread_local int bypass;

static char *(*real_getenv)(const char *);

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

static void setup(void)
{
	hpct__nccl_bind(&real, next_sym, NULL);
	if (!real.get_version || real.get_version(&real.version) != 0)
		return; /* no NCCL at all: every call below fails as NCCL's would */
	const char *v = real_getenv ? real_getenv("HPCT_USE_ROOTLESS") : NULL;
	if (!v || strcmp(v, "1") != 0)
		return;
	hpct__nccl_env_prepare(); /* before NCCL reads NCCL_ENV_PLUGIN */
	hpct__nccl_getenv_route();
	if (!hpct_preload_world()) {
		HPCT_WARN(HPCT_SUB_NCCL, "preload: no hpct world (%s): NCCL left as it is",
		          hpct_last_error());
		return;
	}
	if (hpct__nccl_tier_for(&real, (struct hpct_world *)world) == HPCT_NCCL_TIER_NONE) {
		HPCT_WARN(
		        HPCT_SUB_NCCL,
		        "preload: NCCL %d cannot take ids without a store here (NCCL before 2.19, "
		        "or no node list): NCCL left as it is",
		        real.version);
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

/* The comm an id stands for: its magic is its identity; ranks are world
 * ranks when it spans the world (how PyTorch numbers its default group). */
static void comm_of(const hpct_nccl_id *id, int nranks, int rank, struct hpct_nccl_comm *c)
{
	memset(c, 0, sizeof(*c));
	c->w = (struct hpct_world *)world;
	memcpy(&c->magic, id->internal, 8);
	c->hash = hpct__hash_u64(c->magic, 0x7368696d); /* "shim" */
	c->nranks = nranks;
	c->rank = rank;
	snprintf(c->name, sizeof(c->name), "NCCL id %016llx (%d ranks)",
	         (unsigned long long)c->magic, nranks);
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
	/* this rank's node, a port from (job, epoch, rank, count), a magic
	 * from the same: a stale root of another epoch or id never matches */
	struct hpct_world_info info;
	hpct_world_get_info(world, &info);
	unsigned k = atomic_fetch_add(&id_counter, 1);
	uint64_t magic = hpct__nccl_keyed((struct hpct_world *)world,
	                                  hpct__hash_u64(hpct__hash_u64(info.job, info.epoch),
	                                                 ((uint64_t)info.rank << 32) | k));
	hpct_nccl_id seed;
	memset(&seed, 0, sizeof(seed));
	memcpy(seed.internal, &magic, 8);
	struct hpct_nccl_comm c;
	comm_of(&seed, info.size, info.rank, &c);
	return result(hpct__nccl_self_id(&real, &c, out));
}

static int init(void **comm, int nranks, const hpct_nccl_id *id, int rank, void *config)
{
	enum hpct_nccl_tier tier = hpct__nccl_tier_for(&real, (struct hpct_world *)world);
	struct hpct_world_info info;
	hpct_world_get_info(world, &info);
	/* Tier 2 derives where every comm rank is: only when the comm is the
	 * world and comm ranks are world ranks */
	if (tier == HPCT_NCCL_TIER_ROOTLESS && (nranks != info.size || rank != info.rank))
		tier = HPCT_NCCL_TIER_ROOT;
	struct hpct_nccl_comm c;
	comm_of(id, nranks, rank, &c);
	int rc = hpct__nccl_comm_init(&real, &c, tier, id, config, comm);
	if (rc == 0)
		return NCCL_SUCCESS;
	/* NCCL's own answer when it gave one; else what hpct's failure is to
	 * NCCL (logged, with the culprit named) */
	int res = hpct__nccl_last_result();
	if (res)
		return res;
	int system = rc == HPCT_EADDRINUSE || (rc < 0 && rc > -4096); /* -errno */
	return system ? NCCL_SYSTEM_ERROR : NCCL_INTERNAL_ERROR;
}

SHIM_API int ncclCommInitRankConfig(void **comm, int nranks, hpct_nccl_id id, int rank,
                                    void *config)
{
	if (!on() || !hpct_nccl_id_is_derived(&id))
		return real.init_rank_config ? real.init_rank_config(comm, nranks, id, rank, config)
		                             : NCCL_INTERNAL_ERROR;
	return init(comm, nranks, &id, rank, config);
}

SHIM_API int ncclCommInitRank(void **comm, int nranks, hpct_nccl_id id, int rank)
{
	if (!on() || !hpct_nccl_id_is_derived(&id)) {
		int (*f)(void **, int, hpct_nccl_id, int);
		*(void **)&f = next("ncclCommInitRank");
		return f ? f(comm, nranks, id, rank) : NCCL_INTERNAL_ERROR;
	}
	return init(comm, nranks, &id, rank, NULL);
}

SHIM_API int ncclCommInitRankScalable(void **comm, int nranks, int rank, int nid, hpct_nccl_id *ids,
                                      void *config)
{
	if (!on() || nid != 1 || !ids || !hpct_nccl_id_is_derived(&ids[0]))
		return real.init_rank_scalable
		               ? real.init_rank_scalable(comm, nranks, rank, nid, ids, config)
		               : NCCL_INTERNAL_ERROR;
	return init(comm, nranks, &ids[0], rank, config);
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
	if (!real_getenv)
		*(void **)&real_getenv = dlsym(RTLD_NEXT, "getenv");
	const char *shown = hpct__nccl_comm_id_peek(name);
	if (shown)
		return (char *)shown;
	return real_getenv ? real_getenv(name) : NULL;
}

/* ------------------------------------------------------------ shared world */

static void make_world(void)
{
	if (hpct_world_create(&world) != 0) {
		HPCT_WARN(HPCT_SUB_INIT, "preload: no hpct world: %s", hpct_last_error());
		world = NULL;
	}
}

SHIM_API hpct_world *hpct_preload_world(void)
{
	pthread_once(&world_once, make_world);
	return world;
}

/* ------------------------------------------------------------ PyTorch */

#define OWNER_VAR "HPCT_PRELOAD_RANK_PID"

/* Is this process a rank?  A launcher gave it a rank (the torchrun agent
 * has none), and no rank above it claimed it first: a rank marks the
 * environment with its pid when it loads torch, so its children (data-
 * loader workers, subprocesses) find another pid there.  Claimed at torch
 * load, not at start: wrappers between launcher and rank (timeout,
 * numactl, sh -c) carry LD_PRELOAD too but never load torch. */
static int claim_rank(void)
{
	char *(*get)(const char *);
	*(void **)&get = dlsym(RTLD_NEXT, "getenv");
	if (!get)
		return 0;
	const char *owner = get(OWNER_VAR);
	char me[24];
	snprintf(me, sizeof(me), "%ld", (long)getpid());
	if (owner && *owner && strcmp(owner, me) != 0)
		return 0; /* a child of a rank */
	if (!get("RANK") && !get("HPCT_RANK") && !get("SLURM_PROCID") &&
	    !get("OMPI_COMM_WORLD_RANK"))
		return 0;
	setenv(OWNER_VAR, me, 1); /* the C environment: what exec'd children get */
	return 1;
}

static atomic_int torch_done;                   /* torch's _C seen: decided once per process */
static void *(*real_dlopen)(const char *, int); /* set by dlopen() before any use */

/* Is the torch in `dir` the one libhpct_torch.so was built against: its
 * version (version.py), and its lib/libtorch_cpu.so the very file the
 * build found (HPCT_TORCH_CPU)?  When not, why in `why`. */
static int torch_matches(const char *dir, char *why, size_t len)
{
#ifndef HPCT_TORCH_SONAME
	(void)dir;
	snprintf(why, len, "this hpct was built without its PyTorch store (meson -Dtorch=enabled)");
	return 0;
#else
	char path[4200], line[256], ver[64] = "";
	snprintf(path, sizeof(path), "%s/version.py", dir);
	FILE *f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "__version__ = '%63[^']'", ver) == 1)
			break;
	if (f)
		fclose(f);
	size_t n = strlen(HPCT_TORCH_VERSION);
	if (strncmp(ver, HPCT_TORCH_VERSION, n) != 0 || (ver[n] != '.' && ver[n] != 0)) {
		snprintf(why, len, "torch %s at %s is not the torch hpct was built for (%s)",
		         *ver ? ver : "of unknown version", dir, HPCT_TORCH_VERSION);
		return 0;
	}
	/* nothing of torch may be loaded before libhpct_torch.so: libtorch_cpu
	 * binds its symbols at load (BIND_NOW) */
	snprintf(path, sizeof(path), "%s/lib/libtorch_cpu.so", dir);
	char *mine = realpath(path, NULL);
	int ok = mine && strcmp(mine, HPCT_TORCH_CPU) == 0;
	if (!ok)
		snprintf(why, len,
		         "torch %s at %s uses %s, not %s (%s) that hpct was built against", ver,
		         dir, mine ? mine : path, HPCT_TORCH_CPU, HPCT_TORCH_SONAME);
	free(mine);
	return ok;
#endif
}

/* `file` is torch's _C extension: which torch, and is it ours? */
static void torch_arrives(const char *file)
{
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s", file);
	char *slash = strrchr(dir, '/');
	if (!slash)
		return;
	*slash = 0;
	const char *v =
	        real_getenv ? real_getenv("HPCT_USE_ROOTLESS") : getenv("HPCT_USE_ROOTLESS");
	if (!v || strcmp(v, "1") != 0) {
		fprintf(stderr, "hpct: HPCT_USE_ROOTLESS=%s: PyTorch keeps its own TCPStore\n",
		        v ? v : "(unset)");
		return;
	}
	char why[9000] = "";
	if (!torch_matches(dir, why, sizeof(why))) {
		fprintf(stderr, "hpct: %s: PyTorch keeps its own TCPStore\n", why);
		return;
	}
	/* a rank that cannot derive its peers keeps PyTorch's store, and says
	 * why (asked of the environment: a world here would take the standard
	 * path and bind MASTER_PORT before PyTorch) */
	if (!hpct__rootless_possible(why, sizeof(why))) {
		fprintf(stderr, "hpct: %s: PyTorch keeps its own TCPStore\n", why);
		return;
	}
	/* beside this library */
	Dl_info di;
	char lib[4096];
	if (!dladdr((void *)torch_arrives, &di) || !di.dli_fname) {
		fprintf(stderr, "hpct: cannot tell where libhpct_preload.so is: PyTorch keeps its "
		                "own TCPStore\n");
		return;
	}
	snprintf(lib, sizeof(lib), "%s", di.dli_fname);
	slash = strrchr(lib, '/');
	snprintf(slash ? slash + 1 : lib, sizeof(lib) - (size_t)(slash ? slash + 1 - lib : 0),
	         "libhpct_torch.so");
	if (!real_dlopen || !real_dlopen(lib, RTLD_NOW | RTLD_GLOBAL)) {
		fprintf(stderr, "hpct: cannot load %s (%s): PyTorch keeps its own TCPStore\n", lib,
		        dlerror());
		return;
	}
	HPCT_INFO(HPCT_SUB_INIT, "preload: torch at %s: rootless store in place of TCPStore", dir);
}

static int is_torch_c(const char *file)
{
	const char *base = strrchr(file, '/');
	if (!base)
		return 0;
	size_t dl = (size_t)(base - file);
	return strncmp(base, "/_C.", 4) == 0 && dl >= 6 && strncmp(base - 6, "/torch", 6) == 0;
}

SHIM_API void *dlopen(const char *file, int mode)
{
	if (!real_dlopen)
		*(void **)&real_dlopen = dlsym(RTLD_NEXT, "dlopen");
	/* forked children (data-loader workers) inherit torch_done too */
	if (file && !atomic_load(&torch_done) && is_torch_c(file) &&
	    !atomic_exchange(&torch_done, 1)) {
		if (claim_rank())
			torch_arrives(file);
	}
	return real_dlopen ? real_dlopen(file, mode) : NULL;
}
