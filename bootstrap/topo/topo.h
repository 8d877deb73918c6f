/* Who am I, who are my peers: the world as the launcher describes it.
 *
 * Precedence, for each item separately (first set wins):
 *   rank        HPCT_RANK, RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID
 *   world size  HPCT_WORLD_SIZE, WORLD_SIZE, OMPI_COMM_WORLD_SIZE, SLURM_NTASKS
 *   local rank  HPCT_LOCAL_RANK, LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID
 *   node list   HPCT_HOSTFILE, HPCT_HOSTS, [PMIx under mpirun], SLURM_STEP_NODELIST
 *               (inside srun), SLURM_JOB_NODELIST (SLURM_NODELIST), PMIx
 *               (PMIX_NAMESPACE: the launcher's node list and map, pmix.c),
 *               else one node: MASTER_ADDR when LOCAL_WORLD_SIZE is the world,
 *               loopback when OMPI_COMM_WORLD_LOCAL_SIZE is
 *   tasks/node  HPCT_TASKS_PER_NODE, LOCAL_WORLD_SIZE (uniform),
 *               SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE,
 *               OMPI_COMM_WORLD_LOCAL_SIZE (uniform),
 *               else world size / nodes when it divides evenly
 *   job         HPCT_JOB_ID, TORCHELASTIC_RUN_ID (unless "none"), PMIX_NAMESPACE,
 *               SLURM_JOB_ID, else "MASTER_ADDR:MASTER_PORT", else "default"
 *   epoch       HPCT_EPOCH, TORCHELASTIC_RESTART_COUNT, JOB_RESTART_COUNT, else
 *               SLURM_RESTART_COUNT * 2^32 + SLURM_STEP_ID, else 0
 * Ranks are laid out in blocks: node k holds ranks first_rank[k] ..
 * first_rank[k] + tasks[k] - 1; a Slurm node list as SLURM_DISTRIBUTION
 * says (cyclic, plane: round robin).  A host table (HPCT_HOSTFILE whose lines are
 * "RANK HOST[:PORT]") and PMIx give every rank explicitly instead. */
#ifndef HPCT_TOPO_H
#define HPCT_TOPO_H

#include <stdint.h>

#include "bootstrap/base/param.h"

struct hpct_topo {
	int rank, size;
	int local_rank, local_size;
	int node, nnodes; /* nnodes == 0: no node list (standard path only) */
	char **hosts;     /* nnodes host names or literal addresses, as listed */
	int *node_of;     /* size entries: rank -> node (NULL without node list) */
	int *local_of;    /* size entries: rank -> index among its node's ranks */
	int *port_of;     /* size entries: explicit port from a host table, 0 = derive; or NULL */
	int max_local;    /* largest number of ranks on one node */
	const char *nodelist_src; /* variable the node list came from, or NULL */

	char job_name[128];
	uint64_t job; /* hpct__hash of job_name */
	uint64_t epoch;

	char *master_addr; /* MASTER_ADDR, or NULL */
	int master_port;   /* MASTER_PORT, or 0 */

	int port_base, port_range;  /* HPCT_PORT_BASE, HPCT_PORT_RANGE */
	/* ports at the top of the range left out of the windows: 1 in a
	 * torchrun round across nodes, whose agents' own world holds the top one */
	int port_kept;
	int agents; /* torchrun's agents' world (hpct__topo_read_agents): the top port */
	double timeout_s;           /* HPCT_TIMEOUT */
	int want_rootless;          /* HPCT_USE_ROOTLESS */
	int family;                 /* AF_UNSPEC, AF_INET or AF_INET6 (HPCT_SOCKET_FAMILY) */
	char *ifname;               /* HPCT_SOCKET_IFNAME, or NULL */
	char why_not_rootless[256]; /* non-empty when the rootless inputs are missing */
	unsigned char *secret;      /* HPCT_SECRET / HPCT_SECRET_FILE, or NULL */
	size_t secret_len;
	const char *secret_src; /* the variable it came from */
};

/* Reads the world.  Missing node list is not an error (why_not_rootless says
 * what is missing); malformed values are HPCT_EBADENV naming the variable and
 * its value; rank >= size, a local rank that disagrees with the layout,
 * duplicate ranks in a host table, a port range that overflows 65535 or is
 * smaller than the ranks of one node are errors too.  Logs a warning when
 * the port range overlaps the kernel's ephemeral range. */
int hpct__topo_read(const struct hpct_env *env, struct hpct_topo *topo_out);
void hpct__topo_free(struct hpct_topo *topo);

/* torchrun's agents as a world of their own, one rank a node, for their
 * rendezvous store (the shim serves it): the node list as above, this
 * host's place in it (the one node whose address a local interface
 * holds), `job`, epoch 0, and the top port of HPCT_PORT_RANGE, which the
 * windows of torchrun's workers leave out.  With no node list, or one node
 * (no agent is another's root), nnodes 0 and why_not_rootless says so;
 * HPCT_EBADENV when this host is not exactly one of the nodes. */
int hpct__topo_read_agents(const struct hpct_env *env, const char *job, struct hpct_topo *topo_out);

#endif
