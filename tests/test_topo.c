/* The world as the launcher describes it: precedence of every item (rank,
 * size, local rank, node lists, Slurm steps, tasks per node) and layouts,
 * with the message of every inconsistent environment.  Host tables, ports
 * and settings: test_topo_hosts.c. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/base/log.h"
#include "bootstrap/base/util.h"
#include "bootstrap/topo/derive.h"
#include "bootstrap/topo/topo.h"
#include "hpct/hpct.h"
#include "tests/topo_env.h"

TestSuite(topo, .init = topo_env_reset, .fini = topo_env_cleanup);

Test(topo, rank_precedence)
{
	struct hpct_topo t;
	topo_env_set("WORLD_SIZE", "8");
	topo_env_set("SLURM_PROCID", "3");
	topo_read_ok(&t);
	cr_assert_eq(t.rank, 3);
	hpct__topo_free(&t);
	/* mpirun in a Slurm allocation: its ranks inherit a daemon's SLURM_PROCID */
	topo_env_set("OMPI_COMM_WORLD_RANK", "4");
	topo_read_ok(&t);
	cr_assert_eq(t.rank, 4);
	hpct__topo_free(&t);
	topo_env_set("RANK", "2");
	topo_read_ok(&t);
	cr_assert_eq(t.rank, 2);
	hpct__topo_free(&t);
	topo_env_set("HPCT_RANK", "1");
	topo_read_ok(&t);
	cr_assert_eq(t.rank, 1);
	hpct__topo_free(&t);
	topo_env_set("HPCT_RANK", "");
	topo_read_ok(&t);
	cr_assert_eq(t.rank, 2, "an empty variable counts as unset");
	hpct__topo_free(&t);
}

Test(topo, size_precedence_per_item)
{
	struct hpct_topo t;
	topo_env_set("HPCT_RANK", "5");
	topo_env_set("SLURM_PROCID", "0");
	topo_env_set("SLURM_NTASKS", "16");
	topo_read_ok(&t);
	cr_assert_eq(t.size, 16);
	cr_assert_eq(t.rank, 5);
	hpct__topo_free(&t);
	topo_env_set("OMPI_COMM_WORLD_SIZE", "32");
	topo_read_ok(&t);
	cr_assert_eq(t.size, 32);
	hpct__topo_free(&t);
	topo_env_set("WORLD_SIZE", "8");
	topo_read_ok(&t);
	cr_assert_eq(t.size, 8);
	hpct__topo_free(&t);
	topo_env_set("HPCT_WORLD_SIZE", "6");
	topo_read_ok(&t);
	cr_assert_eq(t.size, 6);
	hpct__topo_free(&t);
}

Test(topo, local_rank_precedence_without_node_list)
{
	struct hpct_topo t;
	topo_env_world(3, 8);
	topo_read_ok(&t);
	cr_assert_eq(t.local_rank, 0);
	cr_assert_eq(t.local_size, 1);
	cr_assert_eq(t.nnodes, 0);
	cr_assert_null(t.node_of);
	cr_assert_null(t.nodelist_src);
	cr_assert(strstr(t.why_not_rootless, "no node list: set HPCT_HOSTS, HPCT_HOSTFILE or "
	                                     "SLURM_JOB_NODELIST"),
	          "%s", t.why_not_rootless);
	hpct__topo_free(&t);
	topo_env_set("LOCAL_WORLD_SIZE", "4");
	topo_env_set("SLURM_LOCALID", "3");
	topo_read_ok(&t);
	cr_assert_eq(t.local_rank, 3);
	cr_assert_eq(t.local_size, 4);
	hpct__topo_free(&t);
	topo_env_set("OMPI_COMM_WORLD_LOCAL_RANK", "2");
	topo_read_ok(&t);
	cr_assert_eq(t.local_rank, 2);
	hpct__topo_free(&t);
	topo_env_set("LOCAL_RANK", "1");
	topo_read_ok(&t);
	cr_assert_eq(t.local_rank, 1);
	hpct__topo_free(&t);
	topo_env_set("HPCT_LOCAL_RANK", "0");
	topo_read_ok(&t);
	cr_assert_eq(t.local_rank, 0);
	hpct__topo_free(&t);
	topo_env_set("HPCT_LOCAL_RANK", "4");
	topo_read_bad(HPCT_EBADENV, "HPCT_LOCAL_RANK=4 is not below LOCAL_WORLD_SIZE=4");
}

Test(topo, missing_rank_or_size)
{
	topo_read_bad(HPCT_ENOTOPO, "HPCT_RANK, RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID");
	topo_read_bad(HPCT_ENOTOPO,
	              "HPCT_WORLD_SIZE, WORLD_SIZE, OMPI_COMM_WORLD_SIZE, SLURM_NTASKS");
	topo_env_set("SLURM_PROCID", "0");
	topo_read_bad(HPCT_ENOTOPO, "world size unknown: none of HPCT_WORLD_SIZE, WORLD_SIZE, "
	                            "OMPI_COMM_WORLD_SIZE, SLURM_NTASKS is set");
	topo_env_unset("SLURM_PROCID");
	topo_env_set("SLURM_NTASKS", "4");
	topo_read_bad(
	        HPCT_ENOTOPO,
	        "rank unknown: none of HPCT_RANK, RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID is set");
}

Test(topo, bad_rank_and_size)
{
	topo_env_set("HPCT_RANK", "9");
	topo_env_set("WORLD_SIZE", "8");
	topo_read_bad(HPCT_EBADENV, "HPCT_RANK=9 is not below the world size 8 (from WORLD_SIZE)");
	topo_env_set("HPCT_RANK", "8");
	topo_read_bad(HPCT_EBADENV, "HPCT_RANK=8 is not below the world size 8");
	topo_env_set("HPCT_RANK", "-1");
	topo_read_bad(HPCT_EBADENV, "HPCT_RANK=-1 is out of range");
	topo_env_set("HPCT_RANK", "abc");
	topo_read_bad(HPCT_EBADENV, "HPCT_RANK='abc' is not an integer");
	topo_env_set("HPCT_RANK", "0");
	topo_env_set("WORLD_SIZE", "0");
	topo_read_bad(HPCT_EBADENV, "WORLD_SIZE=0 is out of range");
	/* A malformed variable is an error even when a lower one would do. */
	topo_env_set("WORLD_SIZE", "x");
	topo_env_set("SLURM_NTASKS", "4");
	topo_read_bad(HPCT_EBADENV, "WORLD_SIZE='x'");
}

Test(topo, node_list_precedence)
{
	struct hpct_topo t;
	topo_env_world(0, 4);
	topo_env_set("SLURM_NODELIST", "old[1-2]");
	topo_read_ok(&t);
	cr_assert_str_eq(t.nodelist_src, "SLURM_NODELIST");
	cr_assert_str_eq(t.hosts[1], "old2");
	cr_assert_str_eq(t.why_not_rootless, "");
	hpct__topo_free(&t);
	topo_env_set("SLURM_JOB_NODELIST", "slurm[1-2]");
	topo_read_ok(&t);
	cr_assert_str_eq(t.nodelist_src, "SLURM_JOB_NODELIST");
	cr_assert_str_eq(t.hosts[0], "slurm1");
	hpct__topo_free(&t);
	topo_env_set("HPCT_HOSTS", "h1,h2");
	topo_read_ok(&t);
	cr_assert_str_eq(t.nodelist_src, "HPCT_HOSTS");
	cr_assert_str_eq(t.hosts[0], "h1");
	hpct__topo_free(&t);
	topo_env_hostfile("# nodes\nf1\n\nf2  # second\n");
	topo_read_ok(&t);
	cr_assert_str_eq(t.nodelist_src, "HPCT_HOSTFILE");
	cr_assert_eq(t.nnodes, 2);
	cr_assert_str_eq(t.hosts[0], "f1");
	cr_assert_str_eq(t.hosts[1], "f2");
	cr_assert_null(t.port_of);
	cr_assert_eq(t.node_of[3], 1);
	hpct__topo_free(&t);
}

/* Inside srun the step may run on fewer nodes than the job holds: the
 * step's node list and layout win over the job's. */
Test(topo, slurm_step_wins_over_job)
{
	struct hpct_topo t;
	topo_env_set("SLURM_PROCID", "3");
	topo_env_set("SLURM_NTASKS", "4");
	topo_env_set("SLURM_JOB_NODELIST", "gpu-[01-04]");
	topo_env_set("SLURM_TASKS_PER_NODE", "1(x4)");
	topo_env_set("SLURM_STEP_NODELIST", "gpu-[03-04]");
	topo_env_set("SLURM_STEP_TASKS_PER_NODE", "2(x2)");
	topo_read_ok(&t);
	cr_assert_str_eq(t.nodelist_src, "SLURM_STEP_NODELIST");
	cr_assert_eq(t.nnodes, 2);
	cr_assert_str_eq(t.hosts[t.node], "gpu-04");
	cr_assert_eq(t.local_rank, 1);
	hpct__topo_free(&t);
}

/* Every step (srun) and every requeue is a new epoch: restart count * 2^32
 * + step id; HPCT_EPOCH (and torchrun's count) still win. */
Test(topo, slurm_epoch)
{
	struct hpct_topo t;
	topo_env_set("SLURM_PROCID", "0");
	topo_env_set("SLURM_NTASKS", "2");
	topo_env_set("SLURM_JOB_ID", "77");
	topo_read_ok(&t);
	cr_assert_eq(t.epoch, 0);
	hpct__topo_free(&t);
	topo_env_set("SLURM_STEP_ID", "3");
	topo_read_ok(&t);
	cr_assert_eq(t.epoch, 3);
	hpct__topo_free(&t);
	topo_env_set("SLURM_RESTART_COUNT", "2");
	topo_read_ok(&t);
	cr_assert_eq(t.epoch, (2ull << 32) | 3);
	hpct__topo_free(&t);
	topo_env_set("SLURM_STEP_ID", "x");
	topo_read_bad(HPCT_EBADENV, "SLURM_STEP_ID");
	topo_env_set("HPCT_EPOCH", "9");
	topo_read_ok(&t);
	cr_assert_eq(t.epoch, 9);
	hpct__topo_free(&t);
}

/* torchrun across nodes, workers on their own store each round: the round
 * (run id at MASTER_ADDR:MASTER_PORT) is the job, its per-agent restart
 * count no epoch; on one node, or on the agent's store, as before. */
/* torchrun's workers leave the top port of the range to their agents'
 * world, which takes exactly that port */
Test(topo, torchrun_agents_hold_the_top_port)
{
	struct hpct_topo t;
	topo_env_world(0, 8);
	topo_env_set("HPCT_HOSTS", "n1,n2");
	topo_env_set("HPCT_PORT_BASE", "20000");
	topo_env_set("HPCT_PORT_RANGE", "8"); /* two windows of 4, or one beside the agents' */
	int top_used = 0;
	for (int j = 0; j < 64; j++) {
		topo_env_set_int("HPCT_EPOCH", j);
		topo_read_ok(&t);
		for (int r = 0; r < 8; r++)
			top_used |= hpct__derive_port(&t, r) == 20007;
		hpct__topo_free(&t);
	}
	cr_assert(top_used, "without torchrun, the windows reach the top port");
	topo_env_set("GROUP_WORLD_SIZE", "2"); /* hpct-run sets it too: not the marker */
	topo_read_ok(&t);
	cr_assert_eq(t.port_kept, 0);
	hpct__topo_free(&t);
	topo_env_set("TORCHELASTIC_USE_AGENT_STORE", "True");
	for (int j = 0; j < 64; j++) {
		topo_env_set_int("HPCT_EPOCH", j);
		topo_read_ok(&t);
		cr_assert_eq(t.port_kept, 1);
		for (int r = 0; r < 8; r++)
			cr_assert_lt(hpct__derive_port(&t, r), 20007, "epoch %d rank %d", j, r);
		hpct__topo_free(&t);
	}
	topo_env_set("HPCT_PORT_RANGE", "4");
	topo_read_bad(HPCT_EBADENV, "HPCT_PORT_RANGE=4 cannot hold the 4 ranks of node n1 "
	                            "beside the port of torchrun's agents (its top)");
}

/* The agents' world: one rank a node, this host's place found by address */
Test(topo, torchrun_agents_world)
{
	struct hpct_topo t;
	topo_env_set("HPCT_PORT_BASE", "20000");
	topo_env_set("HPCT_PORT_RANGE", "100");
	topo_env_set("HPCT_HOSTS", "203.0.113.7,127.0.0.1,203.0.113.9");
	cr_assert_eq(hpct__topo_read_agents(&topo_fake_env, "torchrun agents@n1:29500", &t), 0,
	             "%s", hpct_last_error());
	cr_assert_eq(t.size, 3);
	cr_assert_eq(t.rank, 1);
	cr_assert_eq(t.node, 1);
	cr_assert_eq(t.local_size, 1);
	cr_assert_str_eq(t.job_name, "torchrun agents@n1:29500");
	cr_assert_eq(t.epoch, 0);
	for (int r = 0; r < 3; r++) {
		cr_assert_eq(t.node_of[r], r);
		cr_assert_eq(hpct__derive_port(&t, r), 20099);
	}
	hpct__topo_free(&t);
	topo_env_set("HPCT_HOSTS", "203.0.113.7,203.0.113.9");
	cr_assert_eq(hpct__topo_read_agents(&topo_fake_env, "j", &t), HPCT_EBADENV);
	cr_assert(strstr(hpct_last_error(), "this host holds the address of none of the 2 nodes "
	                                    "of HPCT_HOSTS"),
	          "%s", hpct_last_error());
	topo_env_set("HPCT_HOSTS", "127.0.0.1,127.0.0.2");
	cr_assert_eq(hpct__topo_read_agents(&topo_fake_env, "j", &t), HPCT_EBADENV);
	cr_assert(strstr(hpct_last_error(), "holds the addresses of 2 nodes of HPCT_HOSTS "
	                                    "(127.0.0.1, 127.0.0.2)"),
	          "%s", hpct_last_error());
	topo_env_set("HPCT_HOSTS", "n1");
	cr_assert_eq(hpct__topo_read_agents(&topo_fake_env, "j", &t), 0);
	cr_assert_eq(t.nnodes, 0);
	cr_assert_str_eq(t.why_not_rootless, "one node (HPCT_HOSTS): every agent is local");
	hpct__topo_free(&t);
	topo_env_unset("HPCT_HOSTS");
	cr_assert_eq(hpct__topo_read_agents(&topo_fake_env, "j", &t), 0);
	cr_assert_eq(t.nnodes, 0);
	cr_assert(strstr(t.why_not_rootless, "no node list"), "%s", t.why_not_rootless);
	hpct__topo_free(&t);
}

Test(topo, torchrun_round_is_the_job)
{
	struct hpct_topo t, u;
	topo_env_world(1, 8);
	topo_env_set("TORCHELASTIC_RUN_ID", "run7");
	topo_env_set("TORCHELASTIC_RESTART_COUNT", "1");
	topo_env_set("TORCHELASTIC_USE_AGENT_STORE", "False");
	topo_env_set("GROUP_WORLD_SIZE", "2");
	topo_env_set("MASTER_ADDR", "n1");
	topo_env_set("MASTER_PORT", "41234");
	topo_read_ok(&t);
	cr_assert_str_eq(t.job_name, "run7@n1:41234");
	cr_assert_eq(t.epoch, 0);
	topo_env_set("TORCHELASTIC_RESTART_COUNT", "0");
	topo_read_ok(&u);
	cr_assert_eq(u.job, t.job, "the restart count changes nothing");
	hpct__topo_free(&u);
	topo_env_set("MASTER_PORT", "41235");
	topo_read_ok(&u);
	cr_assert_neq(u.job, t.job, "another round is another job");
	hpct__topo_free(&u);
	hpct__topo_free(&t);
	topo_env_set("HPCT_EPOCH", "4");
	topo_read_ok(&t);
	cr_assert_eq(t.epoch, 4);
	hpct__topo_free(&t);
	topo_env_unset("HPCT_EPOCH");
	topo_env_set("TORCHELASTIC_RESTART_COUNT", "1");
	topo_env_set("GROUP_WORLD_SIZE", "1");
	topo_read_ok(&t);
	cr_assert_str_eq(t.job_name, "run7");
	cr_assert_eq(t.epoch, 1);
	hpct__topo_free(&t);
	topo_env_set("GROUP_WORLD_SIZE", "2");
	topo_env_set("TORCHELASTIC_USE_AGENT_STORE", "True");
	topo_read_ok(&t);
	cr_assert_str_eq(t.job_name, "run7");
	cr_assert_eq(t.epoch, 1);
	hpct__topo_free(&t);
}

/* mpirun without a PMIx hpct can read: one node when every rank is local
 * (loopback), else no node list, and why. */
Test(topo, ompi_one_node_without_pmix)
{
	struct hpct_topo t;
	topo_env_set("OMPI_COMM_WORLD_RANK", "2");
	topo_env_set("OMPI_COMM_WORLD_SIZE", "4");
	topo_env_set("OMPI_COMM_WORLD_LOCAL_RANK", "2");
	topo_env_set("OMPI_COMM_WORLD_LOCAL_SIZE", "4");
	topo_read_ok(&t);
	cr_assert_eq(t.nnodes, 1);
	cr_assert_str_eq(t.hosts[0], "127.0.0.1");
	cr_assert(strstr(t.nodelist_src, "OMPI_COMM_WORLD_LOCAL_SIZE"), "%s", t.nodelist_src);
	cr_assert_eq(t.local_rank, 2);
	hpct__topo_free(&t);
	topo_env_set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
	topo_env_set("OMPI_COMM_WORLD_LOCAL_RANK", "0");
	topo_read_ok(&t);
	cr_assert_eq(t.nnodes, 0);
	cr_assert(strstr(t.why_not_rootless, "or launch with PMIx"), "%s", t.why_not_rootless);
	hpct__topo_free(&t);
}

/* srun -m cyclic and -m plane=N: round robin over the nodes, skipping
 * full ones (Slurm's placement, seen on Slurm 22.05); arbitrary: unknown,
 * no rootless path, and why. */
Test(topo, slurm_distributions)
{
	struct hpct_topo t;
	topo_env_set("SLURM_PROCID", "4");
	topo_env_set("SLURM_NTASKS", "10");
	topo_env_set("SLURM_STEP_NODELIST", "n[1-4]");
	topo_env_set("SLURM_STEP_TASKS_PER_NODE", "7,1(x3)");
	topo_env_set("SLURM_DISTRIBUTION", "cyclic");
	topo_read_ok(&t);
	int cyclic[10] = { 0, 1, 2, 3, 0, 0, 0, 0, 0, 0 };
	for (int r = 0; r < 10; r++)
		cr_assert_eq(t.node_of[r], cyclic[r], "cyclic: rank %d on node %d", r,
		             t.node_of[r]);
	cr_assert_eq(t.local_rank, 1);
	hpct__topo_free(&t);
	topo_env_set("SLURM_DISTRIBUTION", "plane");
	topo_read_bad(HPCT_EBADENV, "SLURM_DISTRIBUTION=plane without SLURM_DIST_PLANESIZE");
	topo_env_set("SLURM_DIST_PLANESIZE", "2");
	topo_read_ok(&t);
	int plane[10] = { 0, 0, 1, 2, 3, 0, 0, 0, 0, 0 };
	for (int r = 0; r < 10; r++)
		cr_assert_eq(t.node_of[r], plane[r], "plane=2: rank %d on node %d", r,
		             t.node_of[r]);
	hpct__topo_free(&t);
	topo_env_set("SLURM_DISTRIBUTION", "block:cyclic");
	topo_read_ok(&t);
	cr_assert_eq(t.node_of[6], 0);
	cr_assert_eq(t.node_of[7], 1);
	hpct__topo_free(&t);
	topo_env_set("SLURM_DISTRIBUTION", "arbitrary");
	topo_read_ok(&t);
	cr_assert_eq(t.nnodes, 0);
	cr_assert(strstr(t.why_not_rootless, "SLURM_DISTRIBUTION=arbitrary"), "%s",
	          t.why_not_rootless);
	hpct__topo_free(&t);
	/* a node list of HPCT_HOSTS is laid out in blocks whatever Slurm did */
	topo_env_set("HPCT_HOSTS", "a,b");
	topo_env_set("HPCT_TASKS_PER_NODE", "5(x2)");
	topo_read_ok(&t);
	cr_assert_eq(t.node_of[4], 0);
	hpct__topo_free(&t);
}

/* A PMIx namespace with no PMIx server behind it (none runs here): no node
 * list, and why, naming the namespace; nothing fails. */
Test(topo, pmix_without_a_server)
{
	struct hpct_topo t;
	topo_env_set("OMPI_COMM_WORLD_RANK", "1");
	topo_env_set("OMPI_COMM_WORLD_SIZE", "2");
	topo_env_set("OMPI_COMM_WORLD_LOCAL_SIZE", "1");
	topo_env_set("PMIX_NAMESPACE", "nowhere-1");
	topo_read_ok(&t);
	cr_log_info("%s / %d nodes", t.why_not_rootless, t.nnodes);
	cr_assert_eq(t.nnodes, 0);
	cr_assert(strstr(t.why_not_rootless, "PMIx (PMIX_NAMESPACE=nowhere-1) could not be read: "),
	          "%s", t.why_not_rootless);
	hpct__topo_free(&t);
}

static void expect_tasks(const char *layout)
{
	struct hpct_topo t;
	topo_read_ok(&t);
	char got[256] = "";
	size_t o = 0;
	int count = 1;
	for (int r = 1; r <= t.size; r++) {
		if (r < t.size && t.node_of[r] == t.node_of[r - 1]) {
			count++;
			continue;
		}
		o += (size_t)snprintf(got + o, sizeof(got) - o, "%s%d", o ? "," : "", count);
		count = 1;
	}
	cr_assert_str_eq(got, layout);
	hpct__topo_free(&t);
}

Test(topo, tasks_per_node_precedence)
{
	topo_env_world(0, 12);
	topo_env_set("HPCT_HOSTS", "a,b,c");
	expect_tasks("4,4,4");
	topo_env_set("OMPI_COMM_WORLD_LOCAL_SIZE", "3");
	topo_read_bad(HPCT_EBADENV, "OMPI_COMM_WORLD_LOCAL_SIZE=3 gives 9 ranks on the 3 nodes of "
	                            "HPCT_HOSTS, but the world size is 12 (from WORLD_SIZE)");
	topo_env_set("SLURM_TASKS_PER_NODE", "6,5,1");
	expect_tasks("6,5,1");
	topo_env_set("LOCAL_WORLD_SIZE", "4");
	expect_tasks("4,4,4");
	topo_env_set("HPCT_TASKS_PER_NODE", "2,8,2");
	expect_tasks("2,8,2");
}

Test(topo, uneven_layout)
{
	struct hpct_topo t;
	topo_env_world(4, 6);
	topo_env_set("LOCAL_RANK", "0");
	topo_env_set("GROUP_RANK", "2");
	topo_env_set("HPCT_HOSTS", "n[1-3]");
	topo_env_set("HPCT_TASKS_PER_NODE", "3,1,2");
	topo_read_ok(&t);
	static const int node[] = { 0, 0, 0, 1, 2, 2 }, local[] = { 0, 1, 2, 0, 0, 1 };
	for (int r = 0; r < 6; r++) {
		cr_assert_eq(t.node_of[r], node[r], "rank %d", r);
		cr_assert_eq(t.local_of[r], local[r], "rank %d", r);
	}
	cr_assert_eq(t.max_local, 3);
	cr_assert_eq(t.node, 2);
	cr_assert_eq(t.local_rank, 0);
	cr_assert_eq(t.local_size, 2);
	cr_assert_eq(t.nnodes, 3);
	cr_assert_str_eq(t.hosts[2], "n3");
	hpct__topo_free(&t);
	topo_env_set("HPCT_TASKS_PER_NODE", "2(x2),2");
	topo_env_set("LOCAL_RANK", "0");
	topo_env_set("GROUP_RANK", "2");
	topo_read_ok(&t);
	cr_assert_eq(t.local_size, 2);
	cr_assert_eq(t.max_local, 2);
	hpct__topo_free(&t);
}

Test(topo, layout_errors)
{
	topo_env_world(0, 10);
	topo_env_set("HPCT_HOSTS", "n[1-4]");
	topo_read_bad(HPCT_ENOTOPO,
	              "cannot lay out the 10 ranks (from WORLD_SIZE) on the 4 nodes of "
	              "HPCT_HOSTS");
	topo_env_set("HPCT_TASKS_PER_NODE", "4,4");
	topo_read_bad(HPCT_EBADENV, "HPCT_TASKS_PER_NODE='4,4': 2 counts for 4 nodes");
	topo_env_set("HPCT_TASKS_PER_NODE", "4(x2),1,3");
	topo_read_bad(HPCT_EBADENV,
	              "HPCT_TASKS_PER_NODE='4(x2),1,3' gives 12 ranks on the 4 nodes of "
	              "HPCT_HOSTS, but the world size is 10 (from WORLD_SIZE)");
	topo_env_set("HPCT_TASKS_PER_NODE", "4(x0),1,3");
	topo_read_bad(HPCT_EBADENV,
	              "HPCT_TASKS_PER_NODE='4(x0),1,3': repeat count 'x0' at position 3");
	topo_env_set("HPCT_TASKS_PER_NODE", "4,4,1,");
	topo_read_bad(HPCT_EBADENV, "HPCT_TASKS_PER_NODE='4,4,1,': trailing ',' at position 6");
	topo_env_set("HPCT_TASKS_PER_NODE", "4,0,3,3");
	topo_read_bad(HPCT_EBADENV, "HPCT_TASKS_PER_NODE='4,0,3,3': count '0' at position 3");
	topo_env_unset("HPCT_TASKS_PER_NODE");
	topo_env_set("LOCAL_WORLD_SIZE", "0");
	topo_read_bad(HPCT_EBADENV, "LOCAL_WORLD_SIZE=0 is out of range");
	topo_env_unset("LOCAL_WORLD_SIZE");
	topo_env_set("HPCT_HOSTS", "n[01-11]");
	topo_read_bad(HPCT_EBADENV,
	              "HPCT_HOSTS='n[01-11]' lists more nodes than the 10 ranks of the "
	              "world (from WORLD_SIZE)");
}

Test(topo, malformed_node_lists)
{
	topo_env_world(0, 8);
	topo_env_set("HPCT_HOSTS", "gpu-[01-");
	topo_read_bad(HPCT_EBADENV, "HPCT_HOSTS='gpu-[01-': unbalanced '[' at position 5");
	topo_env_set("HPCT_HOSTS", "gpu-[05-03]");
	topo_read_bad(HPCT_EBADENV,
	              "HPCT_HOSTS='gpu-[05-03]': descending range '05-03' at position 6");
	topo_env_set("HPCT_HOSTS", "a,,b");
	topo_read_bad(HPCT_EBADENV, "HPCT_HOSTS='a,,b': empty name at position 3");
	topo_env_set("HPCT_HOSTS", "a,b,");
	topo_read_bad(HPCT_EBADENV, "HPCT_HOSTS='a,b,': trailing ',' at position 4");
	topo_env_set("HPCT_HOSTS", "n[1-x]");
	topo_read_bad(HPCT_EBADENV, "HPCT_HOSTS='n[1-x]': 'x' at position 5 is not a digit");
	topo_env_unset("HPCT_HOSTS");
	topo_env_set("SLURM_JOB_NODELIST", "n[1-2]]");
	topo_read_bad(HPCT_EBADENV, "SLURM_JOB_NODELIST='n[1-2]]': unbalanced ']' at position 7");
	/* Long values are quoted short, so the reason still fits the message. */
	char big[4096];
	size_t o = 0;
	for (int i = 0; i < 300; i++)
		o += (size_t)snprintf(big + o, sizeof(big) - o, "host%03d,", i);
	topo_env_set("SLURM_JOB_NODELIST", big);
	topo_env_world(0, 600);
	topo_read_bad(HPCT_EBADENV, "trailing ',' at position 2400");
}

Test(topo, local_rank_must_match_layout)
{
	struct hpct_topo t;
	topo_env_world(5, 8);
	topo_env_set("HPCT_HOSTS", "gpu-[01-02]");
	topo_env_set("LOCAL_RANK", "0");
	topo_read_bad(HPCT_EBADENV,
	              "LOCAL_RANK=0 disagrees with the layout: rank 5 (from RANK) is "
	              "local rank 1 of the 4 ranks on node 1 'gpu-02' (HPCT_HOSTS, ranks "
	              "split evenly)");
	topo_env_set("LOCAL_RANK", "1");
	topo_env_set("SLURM_LOCALID", "3"); /* lower precedence: not consulted */
	topo_read_ok(&t);
	cr_assert_eq(t.local_rank, 1);
	hpct__topo_free(&t);
	topo_env_set("HPCT_LOCAL_RANK", "2");
	topo_env_set("HPCT_TASKS_PER_NODE", "4(x2)");
	topo_read_bad(HPCT_EBADENV,
	              "HPCT_LOCAL_RANK=2 disagrees with the layout: rank 5 (from RANK) "
	              "is local rank 1 of the 4 ranks on node 1 'gpu-02' (HPCT_HOSTS and "
	              "HPCT_TASKS_PER_NODE)");
	topo_env_unset("HPCT_LOCAL_RANK");
	topo_env_set("GROUP_RANK", "0");
	topo_read_bad(HPCT_EBADENV,
	              "GROUP_RANK=0 disagrees with the layout: rank 5 (from RANK) is on "
	              "node 1 'gpu-02'");
	topo_env_set("GROUP_RANK", "1");
	topo_read_ok(&t);
	cr_assert_eq(t.node, 1);
	hpct__topo_free(&t);
}

Test(topo, group_rank_ignored_without_node_list)
{
	struct hpct_topo t;
	topo_env_world(5, 8);
	topo_env_set("GROUP_RANK", "7");
	topo_read_ok(&t);
	cr_assert_eq(t.nnodes, 0);
	hpct__topo_free(&t);
}
