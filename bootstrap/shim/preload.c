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
 * when the library loads (HPCT_USE_ROOTLESS=1), before any NCCL call reads
 * its environment.
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
static _Thread_local int bypass;

typedef char *(*getenv_fn)(const char *);
static _Atomic(getenv_fn) real_getenv;

/* The process environment, whoever asked first: libc's getenv, found
 * here when nothing called the interposed one yet. */
static char *env_get(const char *name)
{
	getenv_fn f = atomic_load(&real_getenv);
	if (!f) {
		*(void **)&f = dlsym(RTLD_NEXT, "getenv");
		atomic_store(&real_getenv, f);
	}
	return f ? f(name) : NULL;
}

/* At load, before the program's main: NCCL takes NCCL_ENV_PLUGIN from its
 * first read of the environment, whichever NCCL call (or library) makes
 * it, so it is set before any can.  Nothing else is decided here: a
 * wrapper between launcher and rank (torchrun's agent, sh -c, timeout)
 * loads this library too, and only its environment changes (its ranks
 * then inherit the variable, and a rank that declines keeps it: hpct's
 * plugin answers every other lookup from the environment, as NCCL
 * would). */
static int plugin_set_here; /* NCCL_ENV_PLUGIN was unset, the shim set it */

__attribute__((constructor)) static void preload_loaded(void)
{
	const char *v = env_get("HPCT_USE_ROOTLESS");
	if (!v || strcmp(v, "1") != 0 || env_get("NCCL_ENV_PLUGIN"))
		return;
	hpct__nccl_env_prepare();
	plugin_set_here = env_get("NCCL_ENV_PLUGIN") != NULL;
}

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

/* The one line of a process where the shim leaves NCCL as it is; and
 * NCCL_ENV_PLUGIN as it was (NCCL reads it at its first call, which comes
 * after this one unless NCCL was called around the shim). */
static void decline(const char *why)
{
	if (plugin_set_here)
		unsetenv("NCCL_ENV_PLUGIN");
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
	const char *v = env_get("HPCT_USE_ROOTLESS");
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
	hpct__nccl_env_prepare(); /* set at load, unless the program set it since */
	hpct__nccl_getenv_route();
	if (!hpct_preload_world()) {
		snprintf(why, sizeof(why), "no hpct world (%s)", hpct_last_error());
		decline(why);
		return;
	}
	if (hpct__nccl_tier_for(&real, (struct hpct_world *)world) == HPCT_NCCL_TIER_NONE) {
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
	return result(hpct__nccl_new_id(&real, (struct hpct_world *)world, out));
}

static int init(void **comm, int nranks, int rank, int nid, hpct_nccl_id *ids, void *config)
{
	int rc = hpct__nccl_comm_init_ids(&real, (struct hpct_world *)world, nranks, rank, nid, ids,
	                                  config, comm);
	if (rc == 0)
		return NCCL_SUCCESS;
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
	return env_get(name);
}

/* ------------------------------------------------------------ shared world */

static void make_world(void)
{
	if (hpct_world_create(&world) != 0)
		world = NULL; /* logged by hpct_world_create, naming the culprit */
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
	char *(*get)(const char *) = env_get;
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
	const char *v = env_get("HPCT_USE_ROOTLESS");
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
