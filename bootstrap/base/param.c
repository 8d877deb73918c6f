#include "bootstrap/base/param.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bootstrap/base/log.h"
#include "hpct/hpct.h"

/* One row per setting; launcher variables are rows too, so hpct-info --env
 * shows everything hpct reads. */
static const struct hpct_param params[] = {
	{ "HPCT_USE_ROOTLESS", HPCT_PT_BOOL, "0",
	  "1: rootless path (no store, no root); 0: standard path through rank 0" },
	{ "HPCT_TIMEOUT", HPCT_PT_SECONDS, "120", "deadline of every wait, in seconds" },
	{ "HPCT_RANK", HPCT_PT_INT, NULL, "this process's rank (overrides the launcher's)" },
	{ "HPCT_WORLD_SIZE", HPCT_PT_INT, NULL, "number of ranks (overrides the launcher's)" },
	{ "HPCT_LOCAL_RANK", HPCT_PT_INT, NULL, "rank among this node's processes" },
	{ "HPCT_TASKS_PER_NODE", HPCT_PT_STR, NULL,
	  "ranks per node in Slurm syntax, e.g. 8(x4),2; ranks are laid out in node blocks" },
	{ "HPCT_HOSTS", HPCT_PT_STR, NULL,
	  "node list: comma list or Slurm hostlist, e.g. gpu-[01-04]" },
	{ "HPCT_HOSTFILE", HPCT_PT_STR, NULL,
	  "file of nodes (one host per line) or a table of 'RANK HOST[:PORT]' lines" },
	{ "HPCT_JOB_ID", HPCT_PT_STR, NULL, "job identity (else the launcher's job or run id)" },
	{ "HPCT_EPOCH", HPCT_PT_INT, NULL,
	  "restart epoch (else TORCHELASTIC_RESTART_COUNT, JOB_RESTART_COUNT, 0)" },
	{ "HPCT_PORT_BASE", HPCT_PT_INT, "10000", "first port of the fixed range for listeners" },
	{ "HPCT_PORT_RANGE", HPCT_PT_INT, "8192",
	  "ports in the range; rotated by epoch in windows of the ranks of one node" },
	{ "HPCT_NCCL_LIB", HPCT_PT_STR, NULL,
	  "path of libnccl.so.2 to load (else the search path, NCCL_HOME, /usr/local/cuda)" },
	{ "HPCT_NCCL_ROOTLESS", HPCT_PT_BOOL, "1",
	  "NCCL 2.23-2.32: 1 hosts a micro-root in every rank (Tier 2); 0 keeps NCCL's own root "
	  "at a derived address (Tier 1)" },
	{ "HPCT_NCCL_MEET", HPCT_PT_BOOL, "1",
	  "1: a communicator's ranks meet once their roots listen, before any calls NCCL (NCCL "
	  "sleeps 100 ms after a refused connect, and before 2.24 fails); 0 skips it" },
	{ "HPCT_NCCL_PORT_BASE", HPCT_PT_INT, NULL,
	  "first port for NCCL roots (default: right after HPCT_PORT_BASE's range)" },
	{ "HPCT_NCCL_PORT_RANGE", HPCT_PT_INT, NULL,
	  "ports for NCCL roots (default: HPCT_PORT_RANGE, cut at 65535)" },
	{ "HPCT_SECRET", HPCT_PT_STR, NULL,
	  "shared secret: every rootless connection proves it (HMAC-SHA256, OpenSSL's libcrypto)" },
	{ "HPCT_SECRET_FILE", HPCT_PT_STR, NULL, "file whose first line is the shared secret" },
	{ "HPCT_STORE_PORT_OFFSET", HPCT_PT_INT, NULL,
	  "rootless store (PyTorch preload): a rank serves its keys at its world port plus this "
	  "(default: -HPCT_PORT_RANGE, the range below hpct's; +2 x HPCT_PORT_RANGE when that "
	  "goes under 1024)" },
	/* The store's bounds on what a client can make a rank hold (server.c).
	 * PyTorch stores small keys (addresses, counters, NCCL ids); its biggest
	 * values are pickled objects of a few MB, and hashing spreads keys over
	 * every rank: a job comes nowhere near these. */
	{ "HPCT_STORE_REPLICAS", HPCT_PT_INT, "3",
	  "rootless store: homes of each key, a majority of which must hold every change before "
	  "any answer depends on it: 3 loses nothing and answers nothing wrong when one home dies, "
	  "pauses or is cut off; 1: one home, no copy (at most the world's size, 8 at most)" },
	{ "HPCT_STORE_SUSPECT", HPCT_PT_SECONDS, NULL,
	  "rootless store: a home that sends nothing for this long is suspected (paused, cut off): "
	  "the other homes of its keys go on without it, and it is fenced (default: half of "
	  "HPCT_TIMEOUT)" },
	{ "HPCT_STORE_LEASE", HPCT_PT_STR, "1",
	  "rootless store: seconds a key's primary home answers reads from its own copy after a "
	  "majority of the homes last heard it; 0: every read waits for a majority (at most half "
	  "of HPCT_STORE_SUSPECT)" },
	{ "HPCT_STORE_UNSAFE", HPCT_PT_STR, NULL,
	  "rootless store, for the test suite's negative controls only: no-quorum, no-fence "
	  "(comma-separated) switch off what keeps its answers right" },
	{ "HPCT_STORE_MAX_KEYS", HPCT_PT_INT, "1048576",
	  "rootless store: most keys one rank's store holds, all namespaces together; a set past "
	  "it is refused (logged naming the client and the key)" },
	{ "HPCT_STORE_MAX_BYTES", HPCT_PT_INT, "1073741824",
	  "rootless store: most bytes of keys and values one rank's store holds, and again the "
	  "most in requests and replies on their way (one value: 64 MiB)" },
	{ "HPCT_STORE_ADMIT_TIMEOUT", HPCT_PT_SECONDS, "30",
	  "rootless store: a connection that has not proved HPCT_SECRET (or, with none, sent a "
	  "whole first request) within this is closed; once admitted it may idle for ever" },
	/* The process's one in-flight budget (budget.c) and the fan-out's
	 * chunk (fanout/).  Bytes: the default is a sixteenth of MemTotal,
	 * capped to 1 GiB, at least 64 MiB (16 default chunks); transfers: 64,
	 * far below any descriptor limit, yet more than the links of a node
	 * keep busy at once. */
	{ "HPCT_INFLIGHT_BYTES", HPCT_PT_INT, NULL,
	  "bytes this process may have in flight at once, all fan-outs, groups and channels "
	  "together (default: MemTotal/16, at most 1 GiB, at least 64 MiB)" },
	{ "HPCT_INFLIGHT_TRANSFERS", HPCT_PT_INT, "64",
	  "transfers (a chunk on its way, a Gloo pair connecting) this process may have at once" },
	{ "HPCT_FANOUT_CHUNK", HPCT_PT_INT, "4194304",
	  "hpct_fanout: bytes of a chunk, the unit a receiver pulls and forwards" },
	{ "NCCL_HOME", HPCT_PT_STR, NULL, "NCCL's install prefix, searched for lib/libnccl.so.2" },
	{ "HPCT_SOCKET_FAMILY", HPCT_PT_STR, NULL, "AF_INET or AF_INET6 to force one family" },
	{ "HPCT_SOCKET_IFNAME", HPCT_PT_STR, NULL,
	  "interfaces to use, NCCL syntax: prefixes, ^ excludes, = exact (checked against the node "
	  "address)" },
	{ "HPCT_TRANSPORT", HPCT_PT_STR, "tcp", "transport of the rootless engine: tcp or ofi" },
	{ "HPCT_OFI_PROVIDER", HPCT_PT_STR, "tcp;ofi_rxm",
	  "ofi: libfabric provider (one addressed by IP and port: tcp;ofi_rxm, net, sockets, "
	  "udp;ofi_rxd)" },
	{ "HPCT_OFI_EXCHANGE", HPCT_PT_BOOL, "0",
	  "ofi: 1 exchanges endpoint names over TCP first (what providers with device-assigned "
	  "addresses need), instead of deriving them" },
	{ "HPCT_ALGO", HPCT_PT_STR, "tree",
	  "rootless allgather and barrier: tree (gather + broadcast, fan-out 4, N-1 connections) "
	  "or "
	  "bruck (Bruck allgather, dissemination barrier: fewer rounds, N log N connections)" },
	{ "HPCT_GLOO_CONNECT", HPCT_PT_STR, NULL,
	  "Gloo contexts (libhpct_gloo): pool (pair addresses through hpct's alltoall, pairs "
	  "connected by 8 threads; either path) or fullmesh (Gloo's connectFullMesh over rank 0's "
	  "store; standard path only); default pool when rootless, fullmesh on the standard path" },
	{ "HPCT_STD_STORE_MB", HPCT_PT_INT, NULL,
	  "standard path: MiB the rendezvous on rank 0 may hold (keys, values, values being "
	  "received; one rank's keys at most half); default 128 + 2 x world size" },
	{ "HPCT_STD_STORE_KEYS", HPCT_PT_INT, NULL,
	  "standard path: keys the rendezvous on rank 0 may hold; default 4 x (world size + "
	  "32)^2" },
	{ "HPCT_EARLY_MAX_MSGS", HPCT_PT_INT, "65536",
	  "rootless: messages kept from one peer for calls this rank has not reached yet; over "
	  "it the oldest go (logged once per peer)" },
	{ "HPCT_EARLY_MAX_MB", HPCT_PT_INT, "1024",
	  "rootless: MiB of such messages kept from all peers together; over it the oldest of "
	  "the peer holding most go (logged once per peer)" },
	{ "HPCT_DEBUG", HPCT_PT_STR, "WARN", "log level: NONE, WARN, INFO or TRACE" },
	{ "HPCT_DEBUG_SUBSYS", HPCT_PT_STR, "ALL",
	  "INIT,ENV,NET,COLL,STD,NCCL or ALL; ^X excludes" },
	{ "HPCT_DEBUG_FILE", HPCT_PT_STR, NULL, "log file; %h is the host, %p the pid" },
	{ "RANK", HPCT_PT_INT, NULL, "torchrun: rank" },
	{ "WORLD_SIZE", HPCT_PT_INT, NULL, "torchrun: number of ranks" },
	{ "LOCAL_RANK", HPCT_PT_INT, NULL, "torchrun: rank on this node" },
	{ "LOCAL_WORLD_SIZE", HPCT_PT_INT, NULL, "torchrun: ranks per node (uniform)" },
	{ "GROUP_RANK", HPCT_PT_INT, NULL, "torchrun: node index (checked against the layout)" },
	{ "MASTER_ADDR", HPCT_PT_STR, NULL, "standard path: host of the rendezvous on rank 0" },
	{ "MASTER_PORT", HPCT_PT_INT, NULL, "standard path: port of the rendezvous on rank 0" },
	{ "TORCHELASTIC_RESTART_COUNT", HPCT_PT_INT, NULL,
	  "torchrun: restart count, used as epoch (not across nodes on the workers' own store: "
	  "each agent counts its own)" },
	{ "TORCHELASTIC_RUN_ID", HPCT_PT_STR, NULL,
	  "torchrun: run id, used as job identity (across nodes on the workers' own store, with "
	  "the round's MASTER_ADDR:MASTER_PORT)" },
	{ "TORCHELASTIC_USE_AGENT_STORE", HPCT_PT_STR, NULL,
	  "torchrun: True when the workers share the agent's store" },
	{ "GROUP_WORLD_SIZE", HPCT_PT_INT, NULL, "torchrun: number of nodes (agents)" },
	{ "JOB_RESTART_COUNT", HPCT_PT_INT, NULL,
	  "restart count from other launchers, used as epoch" },
	{ "SLURM_PROCID", HPCT_PT_INT, NULL, "Slurm: rank" },
	{ "SLURM_NTASKS", HPCT_PT_INT, NULL, "Slurm: number of ranks" },
	{ "SLURM_LOCALID", HPCT_PT_INT, NULL, "Slurm: rank on this node" },
	{ "SLURM_STEP_NODELIST", HPCT_PT_STR, NULL, "Slurm: the step's node list (inside srun)" },
	{ "SLURM_JOB_NODELIST", HPCT_PT_STR, NULL, "Slurm: node list (hostlist syntax)" },
	{ "SLURM_NODELIST", HPCT_PT_STR, NULL, "Slurm: node list, older name" },
	{ "SLURM_STEP_TASKS_PER_NODE", HPCT_PT_STR, NULL, "Slurm: the step's tasks per node" },
	{ "SLURM_TASKS_PER_NODE", HPCT_PT_STR, NULL, "Slurm: tasks per node, e.g. 8(x4)" },
	{ "SLURM_JOB_ID", HPCT_PT_STR, NULL, "Slurm: job id, used as job identity" },
	{ "SLURM_STEP_ID", HPCT_PT_INT, NULL,
	  "Slurm: step id; epoch = SLURM_RESTART_COUNT * 2^32 + this" },
	{ "SLURM_RESTART_COUNT", HPCT_PT_INT, NULL, "Slurm: times the job was requeued" },
	{ "SLURM_DISTRIBUTION", HPCT_PT_STR, NULL,
	  "Slurm: how srun placed the ranks (block, cyclic, plane; arbitrary: no rootless path)" },
	{ "SLURM_DIST_PLANESIZE", HPCT_PT_INT, NULL, "Slurm: ranks a turn of the plane placement" },
	{ "OMPI_COMM_WORLD_RANK", HPCT_PT_INT, NULL, "Open MPI: rank" },
	{ "OMPI_COMM_WORLD_SIZE", HPCT_PT_INT, NULL, "Open MPI: number of ranks" },
	{ "OMPI_COMM_WORLD_LOCAL_RANK", HPCT_PT_INT, NULL, "Open MPI: rank on this node" },
	{ "OMPI_COMM_WORLD_LOCAL_SIZE", HPCT_PT_INT, NULL,
	  "Open MPI: ranks on this node (uniform)" },
	{ "PMIX_NAMESPACE", HPCT_PT_STR, NULL,
	  "PMIx (mpirun, srun --mpi=pmix): the job's namespace, used as job identity; its server "
	  "gives the node list and every rank's node" },
};

const struct hpct_param *hpct__params(size_t *n_out)
{
	*n_out = sizeof(params) / sizeof(params[0]);
	return params;
}

const struct hpct_param *hpct__param_find(const char *name)
{
	for (size_t i = 0; i < sizeof(params) / sizeof(params[0]); i++)
		if (strcmp(params[i].name, name) == 0)
			return &params[i];
	return NULL;
}

const char *hpct__param_type_name(enum hpct_param_type t)
{
	switch (t) {
	case HPCT_PT_INT:
		return "int";
	case HPCT_PT_STR:
		return "string";
	case HPCT_PT_BOOL:
		return "bool";
	case HPCT_PT_SECONDS:
		return "seconds";
	}
	return "?";
}

static const char *process_get(void *ctx, const char *name)
{
	(void)ctx;
	return getenv(name);
}

const struct hpct_env *hpct__env_process(void)
{
	static const struct hpct_env env = { process_get, NULL };
	return &env;
}

const char *hpct__env_str(const struct hpct_env *env, const char *name)
{
	const char *v = env->get(env->ctx, name);
	return (v && *v) ? v : NULL;
}

/* The value to parse: the variable, else the table default. */
static const char *value_or_default(const struct hpct_env *env, const char *name, int *set_out)
{
	const char *v = hpct__env_str(env, name);
	if (set_out)
		*set_out = v != NULL;
	if (v)
		return v;
	const struct hpct_param *p = hpct__param_find(name);
	return p ? p->def : NULL;
}

int hpct__env_int(const struct hpct_env *env, const char *name, long min, long max, long fallback,
                  long *out, int *set_out)
{
	const char *v = value_or_default(env, name, set_out);
	if (!v) {
		*out = fallback;
		return 0;
	}
	char *end;
	errno = 0;
	long x = strtol(v, &end, 10);
	while (*end == ' ' || *end == '\t' || *end == '\n')
		end++;
	if (errno || end == v || *end)
		return hpct__fail(HPCT_EBADENV, HPCT_SUB_ENV, "%s='%s' is not an integer", name, v);
	if (x < min || x > max)
		return hpct__fail(HPCT_EBADENV, HPCT_SUB_ENV, "%s=%ld is out of range [%ld, %ld]",
		                  name, x, min, max);
	*out = x;
	return 0;
}

int hpct__env_bool(const struct hpct_env *env, const char *name, int *out, int *set_out)
{
	const char *v = value_or_default(env, name, set_out);
	if (!v) {
		*out = 0;
		return 0;
	}
	static const char *yes[] = { "1", "true", "yes", "on", "y" };
	static const char *no[] = { "0", "false", "no", "off", "n" };
	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (strcasecmp(v, yes[i]) == 0) {
			*out = 1;
			return 0;
		}
		if (strcasecmp(v, no[i]) == 0) {
			*out = 0;
			return 0;
		}
	}
	return hpct__fail(HPCT_EBADENV, HPCT_SUB_ENV, "%s='%s' is not a boolean (use 1 or 0)", name,
	                  v);
}

int hpct__env_seconds(const struct hpct_env *env, const char *name, double *out, int *set_out)
{
	const char *v = value_or_default(env, name, set_out);
	if (!v) {
		*out = 0;
		return 0;
	}
	char *end;
	errno = 0;
	double x = strtod(v, &end);
	if (errno || end == v || *end || !isfinite(x) || x <= 0 || x > 1e7)
		return hpct__fail(HPCT_EBADENV, HPCT_SUB_ENV,
		                  "%s='%s' is not a positive number of seconds", name, v);
	*out = x;
	return 0;
}
