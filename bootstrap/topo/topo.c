/* The job's shape from the launcher's environment: rank and world size,
 * job id and epoch, ports and socket settings, the node list (HPCT_HOSTS,
 * Slurm, torchrun's one node) laid out by the tasks per node, checked
 * against the launcher's local rank, and the secret.  HPCT_HOSTFILE is read
 * in hostfile.c. */
#include "bootstrap/topo/topo.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/base/log.h"
#include "bootstrap/base/util.h"
#include "bootstrap/topo/hostlist.h"
#include "bootstrap/topo/topo_internal.h"
#include "hpct/hpct.h"

/* Far above any real job; keeps the per-rank arrays bounded. */
#define MAX_WORLD (1 << 24)

/* Open MPI's before Slurm's: mpirun inside an allocation starts its daemons
 * with srun, and its ranks inherit a daemon's SLURM_PROCID and SLURM_NTASKS */
static const char *const rank_vars[] = { "HPCT_RANK", "RANK", "OMPI_COMM_WORLD_RANK",
	                                 "SLURM_PROCID", NULL };
static const char *const size_vars[] = { "HPCT_WORLD_SIZE", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE",
	                                 "SLURM_NTASKS", NULL };
static const char *const local_vars[] = { "HPCT_LOCAL_RANK", "LOCAL_RANK",
	                                  "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", NULL };
static const char *const epoch_vars[] = { "HPCT_EPOCH", "TORCHELASTIC_RESTART_COUNT",
	                                  "JOB_RESTART_COUNT", NULL };

/* Where each item came from, for messages. */
struct srcs {
	const char *rank, *size, *tasks;
};

/* A node list of 10,000 hosts does not fit in one message: quote its start. */
static const char *shorten(const char *v, char *buf, size_t len)
{
	if (strlen(v) < len)
		return v;
	snprintf(buf, len, "%.*s...", (int)len - 4, v);
	return buf;
}

/* The first variable of vars that is set wins, even when malformed. */
static int first_int(const struct hpct_env *env, const char *const *vars, long min, long max,
                     long *out, const char **from)
{
	*from = NULL;
	for (int i = 0; vars[i]; i++) {
		if (!hpct__env_str(env, vars[i]))
			continue;
		*from = vars[i];
		return hpct__env_int(env, vars[i], min, max, 0, out, NULL);
	}
	return 0;
}

int hpct__topo_no_memory(int size)
{
	return hpct__fail(HPCT_ENOMEM, HPCT_SUB_ENV, "out of memory reading the layout of %d ranks",
	                  size);
}

/* Fills local_of, node, local_rank, local_size and max_local from node_of. */
void hpct__topo_count_locals(struct hpct_topo *t, int *tasks)
{
	for (int k = 0; k < t->nnodes; k++)
		tasks[k] = 0;
	for (int r = 0; r < t->size; r++)
		t->local_of[r] = tasks[t->node_of[r]]++;
	t->max_local = 0;
	for (int k = 0; k < t->nnodes; k++)
		if (tasks[k] > t->max_local)
			t->max_local = tasks[k];
	t->node = t->node_of[t->rank];
	t->local_rank = t->local_of[t->rank];
	t->local_size = tasks[t->node];
}

static int read_world(const struct hpct_env *env, struct hpct_topo *t, struct srcs *src)
{
	long rank = 0, size = 0;
	int rc = first_int(env, rank_vars, 0, INT_MAX, &rank, &src->rank);
	if (rc)
		return rc;
	rc = first_int(env, size_vars, 1, MAX_WORLD, &size, &src->size);
	if (rc)
		return rc;
	if (!src->rank && !src->size)
		return hpct__fail(
		        HPCT_ENOTOPO, HPCT_SUB_ENV,
		        "rank and world size unknown: none of HPCT_RANK, RANK, "
		        "OMPI_COMM_WORLD_RANK, "
		        "SLURM_PROCID nor HPCT_WORLD_SIZE, WORLD_SIZE, OMPI_COMM_WORLD_SIZE, "
		        "SLURM_NTASKS is set");
	if (!src->rank)
		return hpct__fail(HPCT_ENOTOPO, HPCT_SUB_ENV,
		                  "rank unknown: none of HPCT_RANK, RANK, OMPI_COMM_WORLD_RANK, "
		                  "SLURM_PROCID is set");
	if (!src->size)
		return hpct__fail(HPCT_ENOTOPO, HPCT_SUB_ENV,
		                  "world size unknown: none of HPCT_WORLD_SIZE, WORLD_SIZE, "
		                  "OMPI_COMM_WORLD_SIZE, SLURM_NTASKS is set");
	if (rank >= size)
		return hpct__fail(HPCT_EBADENV, HPCT_SUB_ENV,
		                  "%s=%ld is not below the world size %ld (from %s)", src->rank,
		                  rank, size, src->size);
	t->rank = (int)rank;
	t->size = (int)size;
	return 0;
}

/* Under Slurm, a requeued job (SLURM_RESTART_COUNT) and every step (each
 * srun: SLURM_STEP_ID) is a new epoch: restart count * 2^32 + step id. */
static int read_slurm_epoch(const struct hpct_env *env, struct hpct_topo *t)
{
	long restarts = 0, step = 0;
	int rc = hpct__env_int(env, "SLURM_RESTART_COUNT", 0, INT_MAX, 0, &restarts, NULL);
	if (!rc && hpct__env_str(env, "SLURM_JOB_ID"))
		rc = hpct__env_int(env, "SLURM_STEP_ID", 0, UINT32_MAX, 0, &step, NULL);
	if (!rc)
		t->epoch = ((uint64_t)restarts << 32) | (uint64_t)step;
	return rc;
}

/* torchrun across nodes, its workers on a store of their own (a c10d
 * rendezvous not sharing the agent's: TORCHELASTIC_USE_AGENT_STORE=False,
 * what the shim asks of a rootless job's agents): each rendezvous round is
 * its own job, the run id at that round's MASTER_ADDR:MASTER_PORT (a port
 * the round picks).  Its TORCHELASTIC_RESTART_COUNT is no epoch there: each
 * agent counts its own restarts (one whose workers did not fail restarts
 * them at its old count), so the ranks of one round disagree on it.
 * Fills buf and returns 1 in that case. */
static int torchrun_round(const struct hpct_env *env, char *buf, size_t len)
{
	const char *run = hpct__env_str(env, "TORCHELASTIC_RUN_ID"),
	           *shared = hpct__env_str(env, "TORCHELASTIC_USE_AGENT_STORE"),
	           *addr = hpct__env_str(env, "MASTER_ADDR"),
	           *port = hpct__env_str(env, "MASTER_PORT");
	long groups = 0;
	int set = 0;
	if (!run || !strcmp(run, "none") || !shared || strcmp(shared, "False") || !addr || !port ||
	    hpct__env_str(env, "HPCT_JOB_ID"))
		return 0;
	if (hpct__env_int(env, "GROUP_WORLD_SIZE", 1, INT_MAX, 0, &groups, &set) || !set ||
	    groups < 2)
		return 0;
	snprintf(buf, len, "%s@%s:%s", run, addr, port);
	return 1;
}

static int read_job(const struct hpct_env *env, struct hpct_topo *t)
{
	long v = 0;
	const char *from;
	char round[320];
	int by_round = torchrun_round(env, round, sizeof(round));
	/* without torchrun's per-agent count when a round is the job */
	static const char *const round_epoch_vars[] = { "HPCT_EPOCH", "JOB_RESTART_COUNT", NULL };
	int rc = first_int(env, by_round ? round_epoch_vars : epoch_vars, 0, LONG_MAX, &v, &from);
	if (rc)
		return rc;
	t->epoch = (uint64_t)v;
	if (!from && !by_round && (rc = read_slurm_epoch(env, t)))
		return rc;
	/* torchrun's workers (it sets TORCHELASTIC_USE_AGENT_STORE for every
	 * worker): their agents' world (the shim's, serving the agents'
	 * rendezvous store) holds the top port of the range */
	t->port_kept = hpct__env_str(env, "TORCHELASTIC_USE_AGENT_STORE") ? 1 : 0;

	const char *addr = hpct__env_str(env, "MASTER_ADDR");
	if (addr && !(t->master_addr = strdup(addr)))
		return hpct__topo_no_memory(t->size);
	rc = hpct__env_int(env, "MASTER_PORT", 1, 65535, 0, &v, NULL);
	if (rc)
		return rc;
	t->master_port = (int)v;

	const char *job = hpct__env_str(env, "HPCT_JOB_ID");
	if (!job && by_round)
		job = round;
	if (!job) {
		job = hpct__env_str(env, "TORCHELASTIC_RUN_ID");
		/* torchrun's default run id: the same for every job, so no identity. */
		if (job && strcmp(job, "none") == 0)
			job = NULL;
	}
	/* a PMIx server's namespace: one per mpirun job (or Slurm step) */
	if (!job)
		job = hpct__env_str(env, "PMIX_NAMESPACE");
	if (!job)
		job = hpct__env_str(env, "SLURM_JOB_ID");
	char master[320];
	if (!job && t->master_addr && t->master_port) {
		snprintf(master, sizeof(master), "%s:%d", t->master_addr, t->master_port);
		job = master;
	}
	if (!job)
		job = "default";
	size_t len = strlen(job);
	if (len > sizeof(t->job_name) - 1)
		len = sizeof(t->job_name) - 1;
	memcpy(t->job_name, job, len);
	t->job_name[len] = 0;
	/* The full identity, not the truncated copy: long ids differing late
	 * must still be different jobs. */
	t->job = hpct__hash(job, strlen(job), 0);
	return 0;
}

static int read_net(const struct hpct_env *env, struct hpct_topo *t)
{
	long base, range;
	int rc = hpct__env_int(env, "HPCT_PORT_BASE", 1, 65535, 10000, &base, NULL);
	if (rc)
		return rc;
	rc = hpct__env_int(env, "HPCT_PORT_RANGE", 1, 65535, 8192, &range, NULL);
	if (rc)
		return rc;
	if (base + range - 1 > 65535)
		return hpct__fail(
		        HPCT_EBADENV, HPCT_SUB_ENV,
		        "HPCT_PORT_BASE=%ld with HPCT_PORT_RANGE=%ld ends at port %ld, above 65535",
		        base, range, base + range - 1);
	t->port_base = (int)base;
	t->port_range = (int)range;

	const char *fam = hpct__env_str(env, "HPCT_SOCKET_FAMILY");
	if (!fam)
		t->family = AF_UNSPEC;
	else if (!strcasecmp(fam, "AF_INET") || !strcasecmp(fam, "inet") || !strcmp(fam, "4"))
		t->family = AF_INET;
	else if (!strcasecmp(fam, "AF_INET6") || !strcasecmp(fam, "inet6") || !strcmp(fam, "6"))
		t->family = AF_INET6;
	else
		return hpct__fail(
		        HPCT_EBADENV, HPCT_SUB_ENV,
		        "HPCT_SOCKET_FAMILY='%s' is not AF_INET, AF_INET6, inet, inet6, 4 or 6",
		        fam);
	const char *ifname = hpct__env_str(env, "HPCT_SOCKET_IFNAME");
	if (ifname && !(t->ifname = strdup(ifname)))
		return hpct__topo_no_memory(t->size);
	rc = hpct__env_bool(env, "HPCT_USE_ROOTLESS", &t->want_rootless, NULL);
	if (rc)
		return rc;
	return hpct__env_seconds(env, "HPCT_TIMEOUT", &t->timeout_s, NULL);
}

static const struct {
	const char *name;
	int uniform; /* one count for every node, else a Slurm tasks-per-node list */
} tasks_vars[] = {
	{ "HPCT_TASKS_PER_NODE", 0 },
	{ "LOCAL_WORLD_SIZE", 1 },
	/* inside srun the step's own layout, which may use fewer nodes */
	{ "SLURM_STEP_TASKS_PER_NODE", 0 },
	{ "SLURM_TASKS_PER_NODE", 0 },
	{ "OMPI_COMM_WORLD_LOCAL_SIZE", 1 },
};

/* Ranks on each node of a plain node list, by the precedence in topo.h. */
static int read_tasks(const struct hpct_env *env, struct hpct_topo *t, struct srcs *src,
                      int **tasks_out)
{
	int n = t->nnodes, *tasks = NULL, rc;
	char what[160] = "", sb[100], err[256];
	long each = 0;
	for (size_t i = 0; i < sizeof(tasks_vars) / sizeof(tasks_vars[0]) && !src->tasks; i++) {
		const char *name = tasks_vars[i].name, *v = hpct__env_str(env, name);
		if (!v)
			continue;
		src->tasks = name;
		if (tasks_vars[i].uniform) {
			if ((rc = hpct__env_int(env, name, 1, MAX_WORLD, 0, &each, NULL)))
				return rc;
			snprintf(what, sizeof(what), "%s=%ld", name, each);
			break;
		}
		int ntasks;
		rc = hpct__tasks_per_node_parse(v, n, &tasks, &ntasks, err, sizeof(err));
		if (rc)
			return hpct__fail(rc, HPCT_SUB_ENV, "%s='%s': %s (node list: %s)", name,
			                  shorten(v, sb, sizeof(sb)), err, t->nodelist_src);
		snprintf(what, sizeof(what), "%s='%s'", name, shorten(v, sb, sizeof(sb)));
	}
	if (!src->tasks) {
		if (t->size % n)
			return hpct__fail(
			        HPCT_ENOTOPO, HPCT_SUB_ENV,
			        "cannot lay out the %d ranks (from %s) on the %d nodes of %s: "
			        "set HPCT_TASKS_PER_NODE or LOCAL_WORLD_SIZE",
			        t->size, src->size, n, t->nodelist_src);
		each = t->size / n;
	}
	if (!tasks) {
		if (!(tasks = malloc((size_t)n * sizeof(int))))
			return hpct__topo_no_memory(t->size);
		for (int k = 0; k < n; k++)
			tasks[k] = (int)each;
	}
	long long sum = 0;
	for (int k = 0; k < n; k++)
		sum += tasks[k];
	if (sum != t->size) {
		free(tasks);
		return hpct__fail(
		        HPCT_EBADENV, HPCT_SUB_ENV,
		        "%s gives %lld ranks on the %d nodes of %s, but the world size is %d "
		        "(from %s)",
		        what, sum, n, t->nodelist_src, t->size, src->size);
	}
	*tasks_out = tasks;
	return 0;
}

/* Node k holds ranks first_rank[k] .. first_rank[k] + tasks[k] - 1. */
static int layout_blocks(struct hpct_topo *t, int *tasks)
{
	t->node_of = malloc((size_t)t->size * sizeof(int));
	t->local_of = malloc((size_t)t->size * sizeof(int));
	if (!t->node_of || !t->local_of)
		return hpct__topo_no_memory(t->size);
	int r = 0;
	for (int k = 0; k < t->nnodes; k++)
		for (int j = 0; j < tasks[k]; j++)
			t->node_of[r++] = k;
	hpct__topo_count_locals(t, tasks);
	return 0;
}

/* One node, named by no node list: torchrun's (every rank local, the node
 * MASTER_ADDR) and mpirun's without PMIx (every rank local: loopback).  The
 * node's name, or NULL; *what says why, for messages. */
static const char *one_node(const struct hpct_env *env, const struct hpct_topo *t,
                            const char **what)
{
	long local = 0;
	int set = 0;
	const char *ma = hpct__env_str(env, "MASTER_ADDR");
	if (ma && *ma && hpct__env_int(env, "LOCAL_WORLD_SIZE", 1, INT_MAX, 0, &local, &set) == 0 &&
	    set && local == t->size) {
		*what = "MASTER_ADDR (one node: LOCAL_WORLD_SIZE=WORLD_SIZE)";
		return ma;
	}
	if (hpct__env_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, INT_MAX, 0, &local, &set) == 0 &&
	    set && local == t->size && hpct__env_str(env, "OMPI_COMM_WORLD_SIZE")) {
		*what = "loopback (one node: OMPI_COMM_WORLD_LOCAL_SIZE=OMPI_COMM_WORLD_SIZE)";
		return "127.0.0.1";
	}
	return NULL;
}

/* Round robin over the nodes, `plane` ranks a turn, a full node skipped:
 * Slurm's cyclic (plane 1) and plane distributions. */
static int layout_planes(struct hpct_topo *t, const int *tasks, int plane)
{
	t->node_of = malloc((size_t)t->size * sizeof(int));
	t->local_of = malloc((size_t)t->size * sizeof(int));
	int *left = malloc((size_t)t->nnodes * sizeof(int));
	if (!t->node_of || !t->local_of || !left) {
		free(left);
		return hpct__topo_no_memory(t->size);
	}
	memcpy(left, tasks, (size_t)t->nnodes * sizeof(int));
	for (int r = 0; r < t->size;)
		for (int k = 0; k < t->nnodes && r < t->size; k++)
			for (int j = 0; j < plane && left[k] > 0 && r < t->size; j++, left[k]--)
				t->node_of[r++] = k;
	hpct__topo_count_locals(t, left);
	free(left);
	return 0;
}

/* How srun placed the ranks on its node list (SLURM_DISTRIBUTION, its
 * first part: the nodes'): *plane 0 in blocks (block, or unset), 1 cyclic,
 * SLURM_DIST_PLANESIZE for plane; -1 for a placement no variable tells
 * (arbitrary: the user's host file), which leaves no rootless path. */
static int slurm_plane(const struct hpct_env *env, struct hpct_topo *t, int *plane)
{
	const char *d = hpct__env_str(env, "SLURM_DISTRIBUTION");
	size_t len = d ? strcspn(d, ":,") : 0;
	*plane = 0;
	if (!d || (len == 5 && !strncmp(d, "block", 5)))
		return 0;
	if (len == 6 && !strncmp(d, "cyclic", 6)) {
		*plane = 1;
		return 0;
	}
	if (len == 5 && !strncmp(d, "plane", 5)) {
		long size = 0;
		int set = 0,
		    rc = hpct__env_int(env, "SLURM_DIST_PLANESIZE", 1, INT_MAX, 0, &size, &set);
		if (!rc && !set)
			return hpct__fail(HPCT_EBADENV, HPCT_SUB_ENV,
			                  "SLURM_DISTRIBUTION=%s without SLURM_DIST_PLANESIZE", d);
		*plane = (int)size;
		return rc;
	}
	*plane = -1;
	snprintf(t->why_not_rootless, sizeof(t->why_not_rootless),
	         "SLURM_DISTRIBUTION=%s: where srun placed each rank is not known from the "
	         "environment",
	         d);
	return 0;
}

/* The node list alone: t->hosts, t->nnodes and t->nodelist_src, or none
 * (nnodes 0, why_not_rootless says why).  A host table or PMIx lays the
 * ranks out too (t->node_of set).  *from: the index in vars of the list's
 * variable (5 for one node). */
static int find_nodes(const struct hpct_env *env, struct hpct_topo *t, struct srcs *src, int *from)
{
	static const char *const vars[] = { "HPCT_HOSTFILE",       "HPCT_HOSTS",
		                            "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
		                            "SLURM_NODELIST",      NULL };
	const char *v = NULL;
	int i, rc, n = 0;
	int pmix = hpct__env_str(env, "PMIX_NAMESPACE") != NULL;
	/* launched by mpirun (OMPI_*): its PMIx server's map, not the Slurm
	 * allocation it may run in; otherwise Slurm's lists, then PMIx */
	int pmix_first = pmix && hpct__env_str(env, "OMPI_COMM_WORLD_SIZE");
	for (i = 0; i < 2 && !(v = hpct__env_str(env, vars[i])); i++)
		;
	if (!v && pmix_first && ((rc = hpct__topo_read_pmix(env, t, src->size)) || t->nnodes))
		return rc;
	if (!v)
		for (i = 2; vars[i] && !(v = hpct__env_str(env, vars[i])); i++)
			;
	if (!v && pmix && !pmix_first &&
	    ((rc = hpct__topo_read_pmix(env, t, src->size)) || t->nnodes))
		return rc;
	const char *what = NULL;
	if (!v && (v = one_node(env, t, &what)))
		i = 5; /* vars[5] is NULL: named by `what` */
	if (!v) {
		if (!t->why_not_rootless[0])
			snprintf(t->why_not_rootless, sizeof(t->why_not_rootless),
			         "no node list: set HPCT_HOSTS, HPCT_HOSTFILE or "
			         "SLURM_JOB_NODELIST, "
			         "or launch with PMIx");
		return 0;
	}
	t->why_not_rootless[0] = 0;
	t->nodelist_src = vars[i] ? vars[i] : what;
	char **hosts = NULL;
	if (i == 0) {
		if ((rc = hpct__topo_read_hostfile(v, src->size, t, &hosts, &n)))
			return rc;
		if (t->node_of)
			return 0;
	} else {
		char err[256], sb[100];
		/* One more than the ranks, so that too many nodes gets its own message. */
		rc = hpct__hostlist_parse(v, (size_t)t->size + 1, &hosts, &n, err, sizeof(err));
		if (rc)
			return hpct__fail(rc, HPCT_SUB_ENV, "%s='%s': %s", vars[i] ? vars[i] : what,
			                  shorten(v, sb, sizeof(sb)), err);
		if (n > t->size) {
			hpct__strv_free(hosts, n);
			return hpct__fail(
			        HPCT_EBADENV, HPCT_SUB_ENV,
			        "%s='%s' lists more nodes than the %d ranks of the world (from %s)",
			        t->nodelist_src, shorten(v, sb, sizeof(sb)), t->size, src->size);
		}
	}
	t->hosts = hosts;
	t->nnodes = n;
	*from = i;
	return 0;
}

static int read_nodes(const struct hpct_env *env, struct hpct_topo *t, struct srcs *src)
{
	int i = 0, plane = 0, rc = find_nodes(env, t, src, &i);
	if (rc || !t->nnodes || t->node_of)
		return rc;
	if (i >= 2 && i < 5 && (rc = slurm_plane(env, t, &plane)))
		return rc;
	if (plane < 0) { /* a placement hpct cannot know: no rootless path */
		hpct__strv_free(t->hosts, t->nnodes);
		t->hosts = NULL;
		t->nnodes = 0;
		t->nodelist_src = NULL;
		return 0;
	}
	int *tasks = NULL;
	if ((rc = read_tasks(env, t, src, &tasks)))
		return rc;
	rc = plane > 0 ? layout_planes(t, tasks, plane) : layout_blocks(t, tasks);
	free(tasks);
	return rc;
}

static int check_local(const struct hpct_env *env, struct hpct_topo *t, const struct srcs *src)
{
	long v = 0, g = 0;
	const char *from;
	int rc = first_int(env, local_vars, 0, INT_MAX, &v, &from);
	if (rc)
		return rc;
	if (!t->nnodes) {
		static const char *const size_vars_local[] = { "LOCAL_WORLD_SIZE",
			                                       "OMPI_COMM_WORLD_LOCAL_SIZE", NULL };
		long ls = 1;
		const char *lfrom;
		if ((rc = first_int(env, size_vars_local, 1, MAX_WORLD, &ls, &lfrom)))
			return rc;
		if (!lfrom)
			ls = 1;
		else if (v >= ls)
			return hpct__fail(HPCT_EBADENV, HPCT_SUB_ENV, "%s=%ld is not below %s=%ld",
			                  from, v, lfrom, ls);
		t->local_rank = (int)v;
		t->local_size = t->max_local = (int)ls;
		return 0;
	}
	char layout[128];
	if (t->port_of)
		snprintf(layout, sizeof(layout), "the table in %s", t->nodelist_src);
	else if (src->tasks)
		snprintf(layout, sizeof(layout), "%s and %s", t->nodelist_src, src->tasks);
	else
		snprintf(layout, sizeof(layout), "%s, ranks split evenly", t->nodelist_src);
	if (from && v != t->local_rank)
		return hpct__fail(
		        HPCT_EBADENV, HPCT_SUB_ENV,
		        "%s=%ld disagrees with the layout: rank %d (from %s) is local rank %d "
		        "of the %d ranks on node %d '%s' (%s)",
		        from, v, t->rank, src->rank, t->local_rank, t->local_size, t->node,
		        t->hosts[t->node], layout);
	int set;
	if ((rc = hpct__env_int(env, "GROUP_RANK", 0, INT_MAX, 0, &g, &set)))
		return rc;
	if (set && g != t->node)
		return hpct__fail(
		        HPCT_EBADENV, HPCT_SUB_ENV,
		        "GROUP_RANK=%ld disagrees with the layout: rank %d (from %s) is on "
		        "node %d '%s' (%s)",
		        g, t->rank, src->rank, t->node, t->hosts[t->node], layout);
	return 0;
}

static void warn_ephemeral(const struct hpct_topo *t)
{
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
	if (!f)
		return;
	int lo, hi, ok = fscanf(f, "%d %d", &lo, &hi) == 2;
	fclose(f);
	int last = t->port_base + t->port_range - 1;
	if (ok && t->port_base <= hi && last >= lo)
		HPCT_WARN(HPCT_SUB_ENV,
		          "HPCT_PORT_BASE=%d, HPCT_PORT_RANGE=%d: ports %d-%d overlap the kernel's "
		          "ephemeral ports %d-%d (net.ipv4.ip_local_port_range), so an outgoing "
		          "connection may hold a port a rank must listen on",
		          t->port_base, t->port_range, t->port_base, last, lo, hi);
}

static int check_ports(const struct hpct_topo *t)
{
	warn_ephemeral(t);
	if (!t->nnodes)
		return 0;
	int derived = !t->port_of, busiest = -1;
	for (int r = 0; r < t->size; r++) {
		if (t->port_of && !t->port_of[r])
			derived = 1;
		if (busiest < 0 && t->local_of[r] == t->max_local - 1)
			busiest = t->node_of[r];
	}
	const char *node = t->hosts[busiest < 0 ? 0 : busiest];
	int usable = t->port_range - t->port_kept;
	if (derived && usable < t->max_local)
		return hpct__fail(HPCT_EBADENV, HPCT_SUB_ENV,
		                  "HPCT_PORT_RANGE=%d cannot hold the %d ranks of node %s%s",
		                  t->port_range, t->max_local, node,
		                  t->port_kept ? " beside the port of torchrun's agents (its top)"
		                               : "");
	if (derived && usable < 2 * t->max_local)
		HPCT_INFO(HPCT_SUB_ENV,
		          "HPCT_PORT_RANGE=%d is less than twice the %d ranks of node %s: ports "
		          "cannot rotate with the epoch",
		          t->port_range, t->max_local, node);
	return 0;
}

#define MAX_SECRET 4096

/* HPCT_SECRET, or the first line of HPCT_SECRET_FILE (not both). */
static int read_secret(const struct hpct_env *env, struct hpct_topo *t)
{
	const char *v = hpct__env_str(env, "HPCT_SECRET"),
	           *file = hpct__env_str(env, "HPCT_SECRET_FILE");
	if (v && file)
		return hpct__fail(HPCT_EBADENV, HPCT_SUB_ENV,
		                  "HPCT_SECRET and HPCT_SECRET_FILE=%s are both set: set one",
		                  file);
	char buf[MAX_SECRET + 2];
	if (file) {
		FILE *f = fopen(file, "r");
		if (!f)
			return hpct__fail(HPCT_EBADENV, HPCT_SUB_ENV, "HPCT_SECRET_FILE=%s: %s",
			                  file, strerror(errno));
		size_t n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[n] = 0;
		buf[strcspn(buf, "\r\n")] = 0;
		if (n > MAX_SECRET)
			return hpct__fail(HPCT_EBADENV, HPCT_SUB_ENV,
			                  "HPCT_SECRET_FILE=%s: more than %d bytes", file,
			                  MAX_SECRET);
		if (!buf[0])
			return hpct__fail(HPCT_EBADENV, HPCT_SUB_ENV,
			                  "HPCT_SECRET_FILE=%s: its first line is empty", file);
		v = buf;
		t->secret_src = "HPCT_SECRET_FILE";
	} else if (v) {
		if (strlen(v) > MAX_SECRET)
			return hpct__fail(HPCT_EBADENV, HPCT_SUB_ENV,
			                  "HPCT_SECRET: more than %d bytes", MAX_SECRET);
		t->secret_src = "HPCT_SECRET";
	} else {
		return 0;
	}
	t->secret_len = strlen(v);
	if (!(t->secret = malloc(t->secret_len)))
		return HPCT_ENOMEM;
	memcpy(t->secret, v, t->secret_len);
	return 0;
}

int hpct__topo_read(const struct hpct_env *env, struct hpct_topo *topo_out)
{
	struct hpct_topo t;
	struct srcs src = { NULL, NULL, NULL };
	memset(&t, 0, sizeof(t));
	int rc = read_world(env, &t, &src);
	if (!rc)
		rc = read_job(env, &t);
	if (!rc)
		rc = read_net(env, &t);
	if (!rc)
		rc = read_nodes(env, &t, &src);
	if (!rc)
		rc = check_local(env, &t, &src);
	if (!rc)
		rc = check_ports(&t);
	if (!rc)
		rc = read_secret(env, &t);
	if (rc) {
		hpct__topo_free(&t);
		memset(topo_out, 0, sizeof(*topo_out));
		return rc;
	}
	*topo_out = t;
	return 0;
}

void hpct__topo_free(struct hpct_topo *topo)
{
	if (!topo)
		return;
	hpct__strv_free(topo->hosts, topo->nnodes);
	if (topo->secret)
		memset(topo->secret, 0, topo->secret_len);
	free(topo->secret);
	free(topo->node_of);
	free(topo->local_of);
	free(topo->port_of);
	free(topo->master_addr);
	free(topo->ifname);
	memset(topo, 0, sizeof(*topo));
}

/* Does a local interface hold this address?  (A bind to it, port 0.) */
static int held_here(const struct sockaddr_storage *ss, socklen_t len)
{
	int fd = socket(ss->ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int ok = fd >= 0 && bind(fd, (const struct sockaddr *)ss, len) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

/* This host's node in t's list: the one whose address it holds. */
static int find_self(struct hpct_topo *t)
{
	int self = -1, nheld = 0;
	char held[200] = "";
	for (int k = 0; k < t->nnodes; k++) {
		struct sockaddr_storage ss;
		socklen_t len;
		int rc = hpct__resolve(t->hosts[k], 0, t->family, &ss, &len);
		if (rc)
			return rc;
		if (!held_here(&ss, len))
			continue;
		if (nheld++ == 0)
			self = k;
		size_t o = strlen(held);
		if (o + strlen(t->hosts[k]) + 3 < sizeof(held))
			snprintf(held + o, sizeof(held) - o, "%s%s", o ? ", " : "", t->hosts[k]);
	}
	char sb[100];
	if (nheld == 0)
		return hpct__fail(HPCT_EBADENV, HPCT_SUB_ENV,
		                  "torchrun's agents: this host holds the address of none of the "
		                  "%d nodes of %s (%s...)",
		                  t->nnodes, t->nodelist_src, shorten(t->hosts[0], sb, sizeof(sb)));
	if (nheld > 1)
		return hpct__fail(HPCT_EBADENV, HPCT_SUB_ENV,
		                  "torchrun's agents: this host holds the addresses of %d nodes of "
		                  "%s (%s): which one is this agent's is not known",
		                  nheld, t->nodelist_src, held);
	return self;
}

int hpct__topo_read_agents(const struct hpct_env *env, const char *job, struct hpct_topo *topo_out)
{
	struct hpct_topo t;
	struct srcs src = { "torchrun's agents", "torchrun's agents", NULL };
	int from = 0, self = -1;
	memset(&t, 0, sizeof(t));
	memset(topo_out, 0, sizeof(*topo_out));
	t.size = MAX_WORLD;
	int rc = read_net(env, &t);
	if (!rc)
		rc = find_nodes(env, &t, &src, &from);
	if (!rc && t.nnodes < 2) { /* not an error: said in why_not_rootless */
		if (t.nnodes)
			snprintf(t.why_not_rootless, sizeof(t.why_not_rootless),
			         "one node (%s): every agent is local", t.nodelist_src);
		free(t.node_of);
		free(t.local_of);
		free(t.port_of);
		hpct__strv_free(t.hosts, t.nnodes);
		t.node_of = t.local_of = t.port_of = NULL;
		t.hosts = NULL;
		t.nnodes = 0;
		t.size = 0;
		*topo_out = t;
		return 0;
	}
	if (!rc)
		rc = (self = find_self(&t)) < 0 ? self : 0;
	if (!rc) {
		free(t.node_of);
		free(t.local_of);
		free(t.port_of);
		t.port_of = NULL;
		t.node_of = malloc((size_t)t.nnodes * sizeof(int));
		t.local_of = calloc((size_t)t.nnodes, sizeof(int));
		if (!t.node_of || !t.local_of)
			rc = hpct__topo_no_memory(t.nnodes);
	}
	if (!rc) {
		for (int k = 0; k < t.nnodes; k++)
			t.node_of[k] = k;
		t.size = t.nnodes;
		t.rank = t.node = self;
		t.local_rank = 0;
		t.local_size = t.max_local = 1;
		t.agents = t.port_kept = 1;
		snprintf(t.job_name, sizeof(t.job_name), "%s", job);
		t.job = hpct__hash(job, strlen(job), 0);
		t.epoch = 0;
		rc = read_secret(env, &t);
	}
	if (rc) {
		hpct__topo_free(&t);
		return rc;
	}
	*topo_out = t;
	return 0;
}
