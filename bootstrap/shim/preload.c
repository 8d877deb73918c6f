/* libhpct_preload.so: under LD_PRELOAD with HPCT_USE_ROOTLESS=1, an
 * unmodified program's NCCL ids are derived and its roots gone (the NCCL
 * half, preload_nccl.c), and a PyTorch rank's TCPStore connections are
 * served in the process, for torch 1.13 and 2.4 to 2.15 alike, and newer
 * ones whose connections speak 2.15's protocol (the
 * PyTorch half: torch_route.c decides, torch_socket.c takes libtorch's
 * connections, torch_store.c serves them).  This file: the process both
 * halves share.
 *
 *   hpct_preload_world        the world this process's ranks share
 *                             (NCCL and torch halves alike)
 *   hpct_preload_world_lock,  one of them at a time uses it
 *   hpct_preload_world_unlock
 *
 * and what the halves ask of the process: its environment (read
 * directly), how it was given a rank, whether it is torchrun's agent or a
 * forked child.
 *
 * Nothing here sets the environment once other threads may run: only the
 * constructor does (NCCL_ENV_PLUGIN).  Real functions found lazily are
 * kept in atomics. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/base/fdtrack.h"
#include "bootstrap/nccl/nccl_internal.h"
#include "bootstrap/shim/preload_internal.h"
#include "bootstrap/world_access.h"
#include "hpct/hpct.h"

typedef char *(*getenv_fn)(const char *);
static _Atomic(getenv_fn) real_getenv;

/* The process environment, whoever asked first: libc's getenv, found
 * here when nothing called the interposed one yet. */
char *hpct__preload_env_get(const char *name)
{
	getenv_fn f = atomic_load(&real_getenv);
	if (!f) {
		*(void **)&f = dlsym(RTLD_NEXT, "getenv");
		atomic_store(&real_getenv, f);
	}
	return f ? f(name) : NULL;
}

enum rank_given hpct__preload_rank_given(void)
{
	if (hpct__preload_env_get("HPCT_RANK") || hpct__preload_env_get("RANK"))
		return RANK_NAMED;
	if (hpct__preload_env_get("SLURM_PROCID") || hpct__preload_env_get("OMPI_COMM_WORLD_RANK"))
		return RANK_LAUNCHER;
	return RANK_NONE;
}

/* A launcher's agent (torchrun, python -m torch.distributed.run) under
 * srun or mpirun inherits SLURM_PROCID or OMPI_COMM_WORLD_RANK, yet is no
 * rank: its stores are its own. */
int hpct__preload_is_agent(void)
{
	char buf[4096];
	FILE *f = fopen("/proc/self/cmdline", "re");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	for (size_t i = 0, arg = 0; i < n && arg < 4; i += strlen(buf + i) + 1, arg++) {
		const char *a = buf + i, *b = strrchr(a, '/');
		b = b ? b + 1 : a;
		if (strcmp(b, "torchrun") == 0 || strcmp(a, "torch.distributed.run") == 0 ||
		    strcmp(a, "torch.distributed.launch") == 0)
			return 1;
	}
	return 0;
}

/* At load, before the program's main and its threads: NCCL takes
 * NCCL_ENV_PLUGIN from its first read of the environment, whichever NCCL
 * call (or library) makes it, so it is set before any can, and never
 * after (a getenv in another thread could read a freed environ); so is
 * GLOO_ENABLE_STORE_V2_API.  Only
 * where the shim may take NCCL over: HPCT_USE_ROOTLESS=1 and an
 * environment a rootless world can come from (a node list).  A wrapper
 * between launcher and rank (torchrun's agent, sh -c, timeout) loads this
 * library too, and only its environment changes (its ranks then inherit
 * the variable, and a rank that declines later keeps it: hpct's plugin
 * answers every other lookup from the environment, as NCCL would). */
/* The process that loaded this library (each exec loads it anew; a fork
 * does not): another pid here is a forked child. */
static pid_t load_pid;
/* torchrun's agent, with HPCT_USE_ROOTLESS=1 (set at load) */
static int agent_proc;

/* A forked child: of a process that loaded this library, or that tracked
 * a socket of hpct's (fdtrack.h). */
int hpct__preload_forked_child(void)
{
	return hpct__fd_forked() || (load_pid && getpid() != load_pid);
}

int hpct__preload_agent_proc(void)
{
	return agent_proc;
}

__attribute__((constructor)) static void preload_loaded(void)
{
	load_pid = getpid();
	char why[512];
	const char *v = hpct__preload_env_get("HPCT_USE_ROOTLESS");
	if (!v || strcmp(v, "1") != 0)
		return;
	/* torchrun's agent, under a c10d rendezvous (2.x: --standalone,
	 * --rdzv-backend c10d), hands its workers its own store to share with
	 * every agent; PyTorch's switch makes them start their own instead,
	 * rank 0's server at a port the agents agree on, which the shim then
	 * serves in every worker.  (A static rendezvous ignores it: its agent
	 * store stays the workers'.)  The user's choice stands. */
	if ((agent_proc = hpct__preload_is_agent()))
		setenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1", 0);
	/* no rank (a launcher, a wrapper): its ranks decide for themselves */
	if (hpct__preload_rank_given() == RANK_NONE)
		return;
	if (!hpct__rootless_possible(why, sizeof(why)))
		return;
	if (!hpct__preload_env_get("NCCL_ENV_PLUGIN"))
		hpct__nccl_env_prepare();
	/* Gloo (PyTorch 2.x's, in libtorch_cpu) then reads its peers' keys with
	 * one multi_get instead of a wait and a get each: the served store
	 * fetches them from their homes together (Debian's 1.13 Gloo does not
	 * read it, and connects through hpct anyway).  The user's choice
	 * stands. */
	setenv("GLOO_ENABLE_STORE_V2_API", "1", 0);
}

/* ------------------------------------------------------------ shared world */

static pthread_once_t world_once = PTHREAD_ONCE_INIT;
static hpct_world *world; /* lives as long as the process */

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

/* A world is used by one thread at a time (hpct.h), and three halves share
 * this one: the NCCL half (an id, a communicator), the torch store (its
 * barrier) and libhpct_torch.so (a Gloo context).  Each holds this lock
 * around its world calls; the store's requests need not (their
 * connections are their own). */
static pthread_mutex_t world_mu = PTHREAD_MUTEX_INITIALIZER;

SHIM_API void hpct_preload_world_lock(void)
{
	pthread_mutex_lock(&world_mu);
}

SHIM_API void hpct_preload_world_unlock(void)
{
	pthread_mutex_unlock(&world_mu);
}
