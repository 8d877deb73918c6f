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
 * The PyTorch half (below): a rank's TCPStore connections are served in
 * the process, for torch 1.13 and 2.4 to 2.14 alike (torch_store.c).
 *
 *   connect                   a TCPStore's, from libtorch, to MASTER_PORT
 *                             (a rank) or to the rendezvous endpoint
 *                             (torchrun's agent, across nodes): to this
 *                             process's store
 *   hpct_preload_world        the world this process's ranks share
 *                             (NCCL and torch halves alike)
 *   hpct_preload_world_lock,  one of them at a time uses it
 *   hpct_preload_world_unlock
 *   hpct_preload_store_routed TCPStore connections served here
 *
 * Nothing here sets the environment once other threads may run: only the
 * constructor does (NCCL_ENV_PLUGIN).  Real functions found lazily are
 * kept in atomics.
 *
 * ncclCommSplit and ncclCommShrink need no id and are not touched.  The
 * real functions are the next definitions after this library (RTLD_NEXT),
 * else those of the libnccl.so.2 hpct loads. */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "bootstrap/base/fdtrack.h"
#include "bootstrap/base/log.h"
#include "bootstrap/base/sock.h"
#include "bootstrap/base/util.h"
#include "bootstrap/nccl/nccl_internal.h"
#include "bootstrap/shim/got.h"
#include "bootstrap/shim/torch_gloo.h"
#include "bootstrap/shim/torch_store.h"
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

SHIM_API int connect(int fd, const struct sockaddr *sa, socklen_t len);
SHIM_API int listen(int fd, int backlog);
SHIM_API int accept(int fd, struct sockaddr *sa, socklen_t *len);
SHIM_API int accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags);
SHIM_API long hpct_preload_store_routed(void);
SHIM_API hpct_world *hpct_preload_world(void);
SHIM_API void hpct_preload_world_lock(void);
SHIM_API void hpct_preload_world_unlock(void);

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

/* How this process was given a rank: by name (HPCT_RANK, RANK: a rank),
 * by its launcher only (SLURM_PROCID, OMPI_COMM_WORLD_RANK: a rank, or an
 * agent started by srun or mpirun), or not at all. */
enum rank_given { RANK_NONE, RANK_LAUNCHER, RANK_NAMED };

static enum rank_given rank_given(void)
{
	if (env_get("HPCT_RANK") || env_get("RANK"))
		return RANK_NAMED;
	if (env_get("SLURM_PROCID") || env_get("OMPI_COMM_WORLD_RANK"))
		return RANK_LAUNCHER;
	return RANK_NONE;
}

/* A launcher's agent (torchrun, python -m torch.distributed.run) under
 * srun or mpirun inherits SLURM_PROCID or OMPI_COMM_WORLD_RANK, yet is no
 * rank: its stores are its own. */
static int is_agent(void)
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
static int forked_child(void)
{
	return hpct__fd_forked() || (load_pid && getpid() != load_pid);
}

__attribute__((constructor)) static void preload_loaded(void)
{
	load_pid = getpid();
	char why[512];
	const char *v = env_get("HPCT_USE_ROOTLESS");
	if (!v || strcmp(v, "1") != 0)
		return;
	/* torchrun's agent, under a c10d rendezvous (2.x: --standalone,
	 * --rdzv-backend c10d), hands its workers its own store to share with
	 * every agent; PyTorch's switch makes them start their own instead,
	 * rank 0's server at a port the agents agree on, which the shim then
	 * serves in every worker.  (A static rendezvous ignores it: its agent
	 * store stays the workers'.)  The user's choice stands. */
	if ((agent_proc = is_agent()))
		setenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1", 0);
	/* no rank (a launcher, a wrapper): its ranks decide for themselves */
	if (rank_given() == RANK_NONE)
		return;
	if (!hpct__rootless_possible(why, sizeof(why)))
		return;
	if (!env_get("NCCL_ENV_PLUGIN"))
		hpct__nccl_env_prepare();
	/* Gloo (PyTorch 2.x's, in libtorch_cpu) then reads its peers' keys with
	 * one multi_get instead of a wait and a get each: the served store
	 * fetches them from their homes together (Debian's 1.13 Gloo does not
	 * read it, and connects through hpct anyway).  The user's choice
	 * stands. */
	setenv("GLOO_ENABLE_STORE_V2_API", "1", 0);
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
	hpct_preload_world_lock();
	int rc = hpct__nccl_new_id(&real, (struct hpct_world *)world, out);
	hpct_preload_world_unlock();
	return result(rc);
}

static int init(void **comm, int nranks, int rank, int nid, hpct_nccl_id *ids, void *config)
{
	hpct_preload_world_lock();
	int rc = hpct__nccl_comm_init_ids(&real, (struct hpct_world *)world, nranks, rank, nid, ids,
	                                  config, comm);
	hpct_preload_world_unlock();
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

/* ------------------------------------------------------------ PyTorch */

/* A rank's TCPStore connections to MASTER_ADDR:MASTER_PORT go to the store
 * served in this process (torch_store.c), whatever the torch version whose
 * protocol hpct knows; rank 0's TCPStore server still binds MASTER_PORT
 * (PyTorch 2.x checks that it got that port) and stays idle.  Only
 * connect() calls made from libtorch are looked at (the caller's object),
 * so a Python socket or another library on the same port is left alone.
 * Decided once, at the first such call:
 *   - HPCT_USE_ROOTLESS=1 (else one line, and PyTorch keeps its store);
 *   - a rank: RANK, HPCT_RANK, SLURM_PROCID or OMPI_COMM_WORLD_RANK set
 *     (torchrun's agent has none: its own store stays its own);
 *   - not a torchrun worker on its agent's store
 *     (TORCHELASTIC_USE_AGENT_STORE=True): that store is the job's;
 *   - not a child of a rank: neither forked from one (fdtrack.h) nor
 *     started by one (an ancestor process holds the rank marker, an
 *     abstract socket named by its pid and start time);
 *   - a torch whose protocol hpct knows (torch/version.py beside the
 *     torch/_C module in this process, else libtorch_cpu's soname);
 *   - a node list to derive the world from (hpct__rootless_possible).
 * Then the world is made (shared with the NCCL half), the store served,
 * and on torch 1.13 Gloo's connectFullMesh in libtorch_cpu redirected to
 * hpct's Gloo connect (libhpct_torch.so, see got.c).
 * torchrun's agent (HPCT_USE_ROOTLESS=1) is served the same way, its one
 * store the rendezvous's (decide_agent), on a world of the agents. */

/* The next definition of an interposed libc function, found once. */
static void *next_libc(_Atomic(void *) *slot, const char *name)
{
	void *f = atomic_load(slot);
	if (!f) {
		f = dlsym(RTLD_NEXT, name);
		atomic_store(slot, f);
	}
	return f;
}

typedef int (*sock_fn)(int, const struct sockaddr *, socklen_t);
static _Atomic(void *) real_connect;

static sock_fn next_connect_fn(void)
{
	sock_fn f;
	*(void **)&f = next_libc(&real_connect, "connect");
	return f;
}

static struct {
	pthread_once_t once;
	uint16_t port; /* MASTER_PORT, 0 when unset */
} master = { PTHREAD_ONCE_INIT, 0 };

static pthread_mutex_t route_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int route; /* 0 undecided, 1 served here, -1 PyTorch's own */
static struct sockaddr_storage master_addrs[8];
static int nmaster_addrs;

static void read_master_port(void)
{
	const char *p = env_get("MASTER_PORT");
	char *end;
	long v = p ? strtol(p, &end, 10) : 0;
	if (p && *p && !*end && v > 0 && v < 65536)
		master.port = (uint16_t)v;
}

static uint16_t port_of(const struct sockaddr *sa)
{
	return ntohs(sa->sa_family == AF_INET6 ? ((const struct sockaddr_in6 *)sa)->sin6_port
	                                       : ((const struct sockaddr_in *)sa)->sin_port);
}

static int tcp_addr(const struct sockaddr *sa, socklen_t len)
{
	return sa && (sa->sa_family == AF_INET || sa->sa_family == AF_INET6) &&
	       len >= (socklen_t)sizeof(struct sockaddr_in);
}

/* torchrun's agent: its rendezvous store's endpoint, learned from the
 * first TCP listen or connect libtorch makes in it (an agent's one
 * TCPStore: c10d's endpoint, static's MASTER_ADDR:MASTER_PORT); the
 * address from the first connect, which the agent that hosts the store
 * makes too, to the same name as every other agent. */
static struct {
	pthread_mutex_t mu;
	_Atomic uint16_t port;
	struct sockaddr_storage addr; /* written once, before have_addr */
	atomic_int have_addr;
} rdzv = { PTHREAD_MUTEX_INITIALIZER, 0, { 0 }, 0 };

static void rdzv_learn(const struct sockaddr *sa, int connecting)
{
	pthread_mutex_lock(&rdzv.mu);
	if (!atomic_load(&rdzv.port))
		atomic_store(&rdzv.port, port_of(sa));
	if (connecting && !atomic_load(&rdzv.have_addr) && port_of(sa) == atomic_load(&rdzv.port)) {
		memcpy(&rdzv.addr, sa,
		       sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
		                                 : sizeof(struct sockaddr_in));
		atomic_store(&rdzv.have_addr, 1);
	}
	pthread_mutex_unlock(&rdzv.mu);
}

/* A TCP address on the port of this process's store: MASTER_PORT (a
 * rank), the rendezvous endpoint's (torchrun's agent). */
static int store_port(const struct sockaddr *sa, socklen_t len)
{
	if (!tcp_addr(sa, len))
		return 0;
	if (agent_proc)
		return atomic_load(&rdzv.port) && port_of(sa) == atomic_load(&rdzv.port);
	pthread_once(&master.once, read_master_port);
	return master.port && port_of(sa) == master.port;
}

/* Made from libtorch (libtorch_cpu.so, libtorch.so, Debian's .so.1.13)? */
static int from_torch(const void *caller)
{
	static const char *const torch[] = { "libtorch", "libc10d", NULL };
	return hpct__object_named(caller, torch);
}

/* The host part of an address: IPv4 (or v4-mapped IPv6) as 4 bytes, other
 * IPv6 as 16; how many. */
static int host_bytes(const struct sockaddr *sa, unsigned char out[16])
{
	if (sa->sa_family == AF_INET) {
		memcpy(out, &((const struct sockaddr_in *)sa)->sin_addr, 4);
		return 4;
	}
	const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
	if (IN6_IS_ADDR_V4MAPPED(a)) {
		memcpy(out, a->s6_addr + 12, 4);
		return 4;
	}
	memcpy(out, a->s6_addr, 16);
	return 16;
}

/* 1 when a and b are the same host. */
static int addr_same(const struct sockaddr *a, const struct sockaddr_storage *b)
{
	unsigned char x[16], y[16];
	int nx = host_bytes(a, x), ny = host_bytes((const struct sockaddr *)b, y);
	return nx == ny && memcmp(x, y, (size_t)nx) == 0;
}

static int loopback(const struct sockaddr *sa)
{
	unsigned char h[16];
	return host_bytes(sa, h) == 4
	               ? h[0] == 127
	               : IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

/* One of MASTER_ADDR's addresses (what libtorch resolved it to); loopback
 * only when MASTER_ADDR did not resolve here. */
static int master_host(const struct sockaddr *sa)
{
	if (agent_proc)
		return atomic_load(&rdzv.have_addr) && addr_same(sa, &rdzv.addr);
	if (nmaster_addrs == 0)
		return loopback(sa);
	for (int i = 0; i < nmaster_addrs; i++)
		if (addr_same(sa, &master_addrs[i]))
			return 1;
	return 0;
}

static void resolve_master(void)
{
	const char *h = env_get("MASTER_ADDR");
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai = NULL;
	if (!h || !*h || getaddrinfo(h, NULL, &hints, &ai) != 0)
		return;
	for (struct addrinfo *p = ai; p && nmaster_addrs < 8; p = p->ai_next)
		if (p->ai_addrlen <= sizeof(struct sockaddr_storage))
			memcpy(&master_addrs[nmaster_addrs++], p->ai_addr, p->ai_addrlen);
	freeaddrinfo(ai);
}

/* "<pid>.<start time>" of a process, from /proc (0 when gone). */
static int proc_ident(long pid, long *ppid, unsigned long long *start)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	char *p = strrchr(buf, ')'); /* the name may hold spaces and parens */
	if (!p)
		return 0;
	/* fields after the name: state ppid ... starttime (22nd of the line) */
	char state;
	long pp;
	unsigned long long st = 0;
	if (sscanf(p + 1, " %c %ld", &state, &pp) != 2)
		return 0;
	int field = 2; /* the state follows the first space */
	for (char *q = p + 1; *q && field < 22; q++)
		if (*q == ' ' && ++field == 22)
			st = strtoull(q + 1, NULL, 10);
	*ppid = pp;
	*start = st;
	return 1;
}

static void marker_name(struct sockaddr_un *un, socklen_t *len, long pid, unsigned long long st)
{
	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	int n = snprintf(un->sun_path + 1, sizeof(un->sun_path) - 1, "hpct-torch-rank.%ld.%llu",
	                 pid, st);
	*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* Does process pid (started at st) hold its rank marker?  Read from
 * /proc/net/unix (this network namespace's sockets, as abstract names
 * are), never probed with a bind: ranks started together by one parent
 * (torchrun's agent) ask about it at the same moment, and each would take
 * another's probe, bound for an instant, for the parent's marker. */
static int marked(long pid, unsigned long long st)
{
	char want[96], line[512];
	int n = snprintf(want, sizeof(want), " @hpct-torch-rank.%ld.%llu", pid, st);
	FILE *f = fopen("/proc/net/unix", "re");
	int found = 0;
	while (f && !found && fgets(line, sizeof(line), f)) {
		size_t l = strcspn(line, "\n");
		found = l >= (size_t)n && memcmp(line + l - (size_t)n, want, (size_t)n) == 0;
	}
	if (f)
		fclose(f);
	return found;
}

/* The pid of the nearest ancestor that serves a TCPStore as a rank, or 0. */
static long rank_ancestor(void)
{
	long pid = (long)getppid();
	for (int depth = 0; pid > 1 && depth < 64; depth++) {
		long pp;
		unsigned long long st;
		if (!proc_ident(pid, &pp, &st))
			return 0;
		if (marked(pid, st))
			return pid;
		pid = pp;
	}
	return 0;
}

/* This process is a rank serving its store: say so to its descendants. */
static void mark_rank(void)
{
	long pp;
	unsigned long long st;
	if (!proc_ident((long)getpid(), &pp, &st))
		return;
	struct sockaddr_un un;
	socklen_t len;
	marker_name(&un, &len, (long)getpid(), st);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && bind(fd, (struct sockaddr *)&un, len) == 0) {
		hpct__fd_track(fd); /* held for the life of the process */
	} else if (fd >= 0) {
		close(fd);
	}
}

/* The version of the torch in this process: torch/version.py beside its
 * _C module, else the soname of libtorch_cpu (Debian's .so.1.13). */
struct torch_find {
	char c_dir[4096];
	char soname_ver[32];
};

static int find_torch(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct torch_find *t = arg;
	const char *name = info->dlpi_name;
	const char *b = name ? strrchr(name, '/') : NULL;
	if (!b)
		return 0;
	if (!t->c_dir[0] && strncmp(b, "/_C.", 4) == 0 && b - name >= 6 &&
	    strncmp(b - 6, "/torch", 6) == 0)
		snprintf(t->c_dir, sizeof(t->c_dir), "%.*s", (int)(b - name), name);
	if (!t->soname_ver[0] && strncmp(b, "/libtorch_cpu.so.", 17) == 0)
		snprintf(t->soname_ver, sizeof(t->soname_ver), "%s", b + 17);
	return 0;
}

static void torch_version(char *ver, size_t len, char *where, size_t wlen)
{
	struct torch_find t = { "", "" };
	dl_iterate_phdr(find_torch, &t);
	ver[0] = 0;
	if (t.c_dir[0]) {
		char path[4200], line[256];
		snprintf(path, sizeof(path), "%s/version.py", t.c_dir);
		FILE *f = fopen(path, "re");
		while (f && fgets(line, sizeof(line), f)) {
			char v[64];
			if (sscanf(line, "__version__ = '%63[^']'", v) == 1) {
				snprintf(ver, len, "%s", v);
				break;
			}
		}
		if (f)
			fclose(f);
		snprintf(where, wlen, "%s", t.c_dir);
	}
	if (!ver[0] && t.soname_ver[0]) {
		snprintf(ver, len, "%s", t.soname_ver);
		snprintf(where, wlen, "libtorch_cpu.so.%s", t.soname_ver);
	}
}

/* PyTorch keeps its own store here: one line (torchrun's agent, which is
 * no rank, gets none). */
static int keep_stock(const char *why)
{
	fprintf(stderr, "hpct: %s: PyTorch keeps its own TCPStore\n", why);
	return -1;
}

/* The torch protocol this process's torch speaks, or NULL with why. */
static const struct hpct_torch_proto *torch_proto(char *ver, size_t vlen, char *where, size_t wlen,
                                                  char *why, size_t len)
{
	torch_version(ver, vlen, where, wlen);
	const struct hpct_torch_proto *proto = hpct__torch_proto_for(ver);
	if (!proto)
		snprintf(why, len,
		         "torch %s%s%s: its TCPStore protocol is not one hpct serves (torch %s)",
		         ver[0] ? ver : "of unknown version", where[0] ? " at " : "", where,
		         hpct__torch_protos_known());
	return proto;
}

/* torchrun's agent: its rendezvous store, which every agent meets through
 * (c10d's endpoint, whose host agent serves it; static's node 0), served
 * here on a world of the agents (one rank a node of the node list, on the
 * top port of the range), so no agent is its root.  Without a node list,
 * or with one node, PyTorch keeps it (an INFO line); with a list that does
 * not name this host once, this agent's store fails, saying why (the
 * other agents would wait for it). */
static hpct_world *agents_world;

static int decide_agent(void)
{
	char why[1200], ver[64], where[4096] = "", ep[HPCT_ADDRSTRLEN], job[HPCT_ADDRSTRLEN + 32];
	const struct hpct_torch_proto *proto =
	        torch_proto(ver, sizeof(ver), where, sizeof(where), why, sizeof(why));
	if (!proto)
		return keep_stock(why);
	/* one name for the endpoint whether an agent reached it over IPv4 or
	 * v4-mapped IPv6: the job's identity */
	unsigned char h[16];
	char txt[INET6_ADDRSTRLEN] = "?";
	int hn = host_bytes((const struct sockaddr *)&rdzv.addr, h);
	inet_ntop(hn == 4 ? AF_INET : AF_INET6, h, txt, sizeof(txt));
	snprintf(ep, sizeof(ep), hn == 4 ? "%s:%u" : "[%s]:%u", txt,
	         port_of((const struct sockaddr *)&rdzv.addr));
	snprintf(job, sizeof(job), "torchrun agents@%s", ep);
	int rc = hpct__world_create_agents(job, &agents_world, why, sizeof(why));
	if (rc == HPCT_ENOTOPO) {
		HPCT_INFO(HPCT_SUB_INIT,
		          "preload: torchrun's agent: its rendezvous store at %s stays PyTorch's: "
		          "%s",
		          ep, why);
		return -1;
	}
	if (rc == 0 && (rc = hpct__torch_store_start(agents_world, proto)) == 0) {
		struct hpct_world_info info;
		hpct_world_get_info(agents_world, &info);
		HPCT_INFO(
		        HPCT_SUB_INIT,
		        "preload: torchrun's agent %d of %d: its rendezvous store at %s served in "
		        "it (127.0.0.1:%u), on the agents' world (this agent at %s)",
		        info.rank, info.size, ep, hpct__torch_store_port(), info.listen_addr);
		return 1;
	}
	fprintf(stderr,
	        "hpct: torchrun's agent, its rendezvous store at %s: %s: its TCPStore "
	        "connections fail (HPCT_USE_ROOTLESS=0 runs PyTorch's own)\n",
	        ep, hpct_last_error());
	return -2;
}

static int decide(int child)
{
	char why[1200], ver[64], where[4096] = "";
	const char *v = env_get("HPCT_USE_ROOTLESS");
	if (!v || strcmp(v, "1") != 0) {
		snprintf(why, sizeof(why), "HPCT_USE_ROOTLESS=%s", v ? v : "(unset)");
		return keep_stock(why);
	}
	/* a forked child of an agent whose store was undecided at the fork
	 * makes no agents' world of its own (its parent's port): PyTorch's */
	if (agent_proc)
		return child ? -1 : decide_agent();
	enum rank_given given = rank_given();
	if (given == RANK_NONE || (given == RANK_LAUNCHER && is_agent()))
		return -1; /* no rank: a launcher's agent, whose store is its own */
	/* torchrun's workers on its agent's store: every process of the job,
	 * the agents of other nodes and other jobs (torchft's replica groups)
	 * share that one keyspace, which the agent holds whatever the ranks
	 * do (torch/distributed/rendezvous.py reads the variable so) */
	v = env_get("TORCHELASTIC_USE_AGENT_STORE");
	if (v && strcmp(v, "True") == 0)
		return keep_stock("torchrun's agent holds this job's store "
		                  "(TORCHELASTIC_USE_AGENT_STORE=True), shared with every client");
	long anc = child ? 0 : rank_ancestor();
	if (anc) {
		snprintf(why, sizeof(why), "a child of rank process %ld", anc);
		return keep_stock(why);
	}
	const struct hpct_torch_proto *proto =
	        torch_proto(ver, sizeof(ver), where, sizeof(where), why, sizeof(why));
	if (!proto)
		return keep_stock(why);
	if (!hpct__rootless_possible(why, sizeof(why)))
		return keep_stock(why);
	resolve_master();
	hpct_world *w = NULL;
	if (child) /* a forked child of a rank that had no world yet: a
	            * client of the store, serving nothing (failure said by
	            * child_routed) */
		return hpct__world_store_client(&w) != 0 ||
		                       hpct__torch_store_restart_child(w, proto) != 0
		               ? -2
		               : 1;
	w = hpct_preload_world();
	if (!w) {
		/* the others wait for this rank, and stock here could not reach
		 * rank 0's store either: fail this rank's store, saying why */
		fprintf(stderr,
		        "hpct: no hpct world in this rank (%s): its TCPStore connections fail "
		        "(HPCT_USE_ROOTLESS=0 runs PyTorch's own)\n",
		        hpct_last_error());
		return -2;
	}
	if (hpct__torch_store_start(w, proto) != 0) {
		fprintf(stderr, "hpct: %s: this rank's TCPStore connections fail\n",
		        hpct_last_error());
		return -2;
	}
	mark_rank();
	/* the Gloo half, where libtorch imports Gloo's connect (1.13); not
	 * even loaded elsewhere (it brings Gloo's libraries) */
	Dl_info di;
	char dir[4096] = "";
	int g = 0;
	if (hpct__torch_proto_gloo_imported(proto) && dladdr((void *)decide, &di) && di.dli_fname) {
		snprintf(dir, sizeof(dir), "%s", di.dli_fname);
		char *slash = strrchr(dir, '/');
		if (slash)
			*slash = 0;
		g = hpct__torch_gloo_fast_path(dir);
	}
	HPCT_INFO(HPCT_SUB_INIT,
	          "preload: torch %s at %s: TCPStore served in this rank (127.0.0.1:%u)%s", ver,
	          where, hpct__torch_store_port(),
	          g > 0 ? ", Gloo connected by hpct" : ", Gloo through the store");
	return 1;
}

/* A forked child of a rank (NVRx's monitor processes, forked and
 * double-forked; a data-loader worker): it serves its own TCPStore
 * connections on its own listener, a client of the same keyspace, also
 * once its rank has died: with its parent's world when the parent had
 * decided before the fork (r, its route then), else with a world of its
 * own that only asks the store.  Once per process, by the first thread to
 * come (never a lock the fork may have taken with it). */
static _Atomic pid_t child_started, child_pid;
static atomic_int child_route; /* as route, for the process child_pid */

static int child_routed(int r)
{
	if (r < 0)
		return 0; /* the parent keeps PyTorch's store: so does its child */
	pid_t me = getpid();
	pid_t was = atomic_load(&child_started);
	if (atomic_load(&child_pid) != me && was != me &&
	    atomic_compare_exchange_strong(&child_started, &was, me)) {
		int d = r == 1 ? (hpct__torch_store_restart_child(NULL, NULL) == 0 ? 1 : -2)
		               : decide(1);
		if (d == -2)
			fprintf(stderr,
			        "hpct: a forked child of a rank: %s: its TCPStore connections "
			        "fail\n",
			        hpct_last_error());
		if (d == 1)
			HPCT_INFO(HPCT_SUB_INIT,
			          "preload: a forked child of a rank: its TCPStore served in it "
			          "(127.0.0.1:%u), a client of its rank's keyspace",
			          hpct__torch_store_port());
		atomic_store(&child_route, d);
		atomic_store(&child_pid, me);
	}
	for (int i = 0; i < 20000 && atomic_load(&child_pid) != me; i++)
		hpct__sleep(0.001);
	int d = atomic_load(&child_pid) == me ? atomic_load(&child_route) : -2;
	if (d == -2) {
		errno = EACCES;
		return -1;
	}
	return d == 1;
}

/* 1: route this call; 0: leave it; -1 with errno: fail it. */
static int routed(void)
{
	int r = atomic_load(&route);
	/* a forked child decides nothing (never waits on a lock the fork may
	 * have taken with it): it is served as its parent was */
	if (forked_child())
		return child_routed(r);
	if (!r) {
		pthread_mutex_lock(&route_mu);
		if (!(r = atomic_load(&route))) {
			r = decide(0);
			atomic_store(&route, r);
		}
		pthread_mutex_unlock(&route_mu);
	}
	if (r == -2) {
		errno = EACCES;
		return -1;
	}
	return r == 1;
}

SHIM_API int connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	sock_fn next_connect = next_connect_fn();
	if (!next_connect) {
		errno = ENOSYS;
		return -1;
	}
	/* libtorch's?  (looked up once: dladdr is not free.)  An agent's
	 * first such connect teaches it the store's port, so that port is
	 * asked after. */
	int agent = agent_proc && tcp_addr(sa, len);
	int torch = (agent || store_port(sa, len)) && from_torch(__builtin_return_address(0));
	if (agent && torch)
		rdzv_learn(sa, 1);
	if (!torch || !store_port(sa, len))
		return next_connect(fd, sa, len);
	int r = routed();
	if (r < 0)
		return -1;
	if (r == 0 || !master_host(sa))
		return next_connect(fd, sa, len);
	struct sockaddr_storage to, me;
	socklen_t tl, ml = sizeof(me);
	if (hpct__torch_store_addr(sa->sa_family, &to, &tl) != 0)
		return next_connect(fd, sa, len);
	/* the source port, known before the kernel may complete the connect,
	 * is how the listener knows its clients */
	if (getsockname(fd, (struct sockaddr *)&me, &ml) != 0)
		return -1;
	if (port_of((struct sockaddr *)&me) == 0) {
		memset(&me, 0, sizeof(me));
		me.ss_family = sa->sa_family;
		ml = sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
		                               : sizeof(struct sockaddr_in);
		if (bind(fd, (struct sockaddr *)&me, ml) != 0)
			return -1;
		ml = sizeof(me);
		if (getsockname(fd, (struct sockaddr *)&me, &ml) != 0)
			return -1;
	}
	uint16_t mine = port_of((struct sockaddr *)&me);
	hpct__torch_store_expect(mine);
	int rc = next_connect(fd, (struct sockaddr *)&to, tl);
	if (rc != 0 && errno != EINPROGRESS && errno != EINTR) {
		int e = errno;
		hpct__torch_store_unexpect(mine);
		errno = e;
	}
	return rc;
}

/* Rank 0's TCPStore server (its listener on MASTER_PORT, made by
 * libtorch in a process whose store is served here): idle for the ranks,
 * whose connections never reach it, but a client hpct does not route (a
 * process of another job or replica group, a rank's exec'd child, an
 * agent) lands there, and is served the ranks' keyspace instead: its
 * accept takes each such connection to torch_store.c, and PyTorch's server
 * sees none (a non-blocking listener, libuv's: EAGAIN; a blocking one,
 * the legacy server's: a connection already closed, which it drops). */
#define MAX_MASTER_FDS 8
static _Atomic int master_fds[MAX_MASTER_FDS] = { -1, -1, -1, -1, -1, -1, -1, -1 };

typedef int (*listen_fn)(int, int);
typedef int (*accept4_fn)(int, struct sockaddr *, socklen_t *, int);
static _Atomic(void *) real_listen, real_accept4;

static listen_fn next_listen(void)
{
	listen_fn f;
	*(void **)&f = next_libc(&real_listen, "listen");
	return f;
}

static accept4_fn next_accept4(void)
{
	accept4_fn f;
	*(void **)&f = next_libc(&real_accept4, "accept4");
	return f;
}

static int is_master_fd(int fd)
{
	for (int i = 0; i < MAX_MASTER_FDS; i++)
		if (atomic_load(&master_fds[i]) == fd)
			return 1;
	return 0;
}

SHIM_API int listen(int fd, int backlog)
{
	listen_fn f = next_listen();
	if (!f) {
		errno = ENOSYS;
		return -1;
	}
	int rc = f(fd, backlog);
	struct sockaddr_storage me;
	socklen_t ml = sizeof(me);
	/* torchrun's agent hosting the rendezvous store: its port learned; its
	 * listener is PyTorch's (no other agent reaches it: routed) */
	if (agent_proc) {
		if (rc == 0 && getsockname(fd, (struct sockaddr *)&me, &ml) == 0 &&
		    tcp_addr((struct sockaddr *)&me, ml) && from_torch(__builtin_return_address(0)))
			rdzv_learn((struct sockaddr *)&me, 0);
		return rc;
	}
	if (rc == 0 && getsockname(fd, (struct sockaddr *)&me, &ml) == 0 &&
	    store_port((struct sockaddr *)&me, ml) && from_torch(__builtin_return_address(0)) &&
	    !forked_child() && routed() == 1) {
		for (int i = 0; i < MAX_MASTER_FDS; i++) {
			int none = -1;
			if (atomic_compare_exchange_strong(&master_fds[i], &none, fd))
				break;
		}
	}
	return rc;
}

/* A TCP connection whose peer has already closed: what a blocking
 * listener's accept returns once the client it had was taken. */
static int closed_conn(struct sockaddr *sa, socklen_t *len, int flags)
{
	sock_fn next_connect = next_connect_fn();
	struct sockaddr_in a = { .sin_family = AF_INET };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t al = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), c = -1, r = -1;
	if (l >= 0 && bind(l, (struct sockaddr *)&a, sizeof(a)) == 0 && next_listen()(l, 1) == 0 &&
	    getsockname(l, (struct sockaddr *)&a, &al) == 0 &&
	    (c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) >= 0 &&
	    next_connect(c, (struct sockaddr *)&a, al) == 0)
		r = next_accept4()(l, sa, len, flags);
	int e = errno;
	if (c >= 0)
		close(c);
	if (l >= 0)
		close(l);
	errno = e;
	return r;
}

static int take_clients(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
	accept4_fn f = next_accept4();
	for (;;) {
		int c = f(fd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			return -1;
		hpct__torch_store_adopt(c);
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 0) > 0)
			continue;
		int fl = fcntl(fd, F_GETFL);
		if (fl >= 0 && (fl & O_NONBLOCK)) {
			errno = EAGAIN;
			return -1;
		}
		return closed_conn(sa, len, flags);
	}
}

SHIM_API int accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
	accept4_fn f = next_accept4();
	if (!f) {
		errno = ENOSYS;
		return -1;
	}
	if (fd < 0 || !is_master_fd(fd) || forked_child())
		return f(fd, sa, len, flags);
	/* still that listener?  (PyTorch closed it, and the number went to
	 * another listener since: forgotten) */
	struct sockaddr_storage me;
	socklen_t ml = sizeof(me);
	int on = 0;
	socklen_t ol = sizeof(on);
	if (getsockname(fd, (struct sockaddr *)&me, &ml) != 0 ||
	    !store_port((struct sockaddr *)&me, ml) ||
	    getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &ol) != 0 || !on) {
		for (int i = 0; i < MAX_MASTER_FDS; i++) {
			int was = fd;
			atomic_compare_exchange_strong(&master_fds[i], &was, -1);
		}
		return f(fd, sa, len, flags);
	}
	return take_clients(fd, sa, len, flags);
}

SHIM_API int accept(int fd, struct sockaddr *sa, socklen_t *len)
{
	return accept4(fd, sa, len, 0);
}

/* TCPStore connections this process served itself (tests ask it). */
SHIM_API long hpct_preload_store_routed(void)
{
	return hpct__torch_store_routed();
}
