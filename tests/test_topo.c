/* The world as the launcher describes it: precedence of every item, layouts,
 * host tables, and the message of every inconsistent environment.  The
 * environment is a fake (struct hpct_env), never the process's own. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/base/log.h"
#include "bootstrap/topo/topo.h"
#include "bootstrap/base/util.h"
#include "hpct/hpct.h"

#define MAX_VARS 64

static struct {
	const char *name[MAX_VARS];
	char *value[MAX_VARS];
	int n;
} vars;
static char tmp_path[64];

static const char *fake_get(void *ctx, const char *name)
{
	(void)ctx;
	for (int i = 0; i < vars.n; i++)
		if (strcmp(vars.name[i], name) == 0)
			return vars.value[i];
	return NULL;
}

static const struct hpct_env fake_env = { fake_get, NULL };

static void set(const char *name, const char *value)
{
	for (int i = 0; i < vars.n; i++) {
		if (strcmp(vars.name[i], name) == 0) {
			free(vars.value[i]);
			vars.value[i] = strdup(value);
			return;
		}
	}
	cr_assert_lt(vars.n, MAX_VARS);
	vars.name[vars.n] = name;
	vars.value[vars.n++] = strdup(value);
}

static void unset(const char *name)
{
	for (int i = 0; i < vars.n; i++) {
		if (strcmp(vars.name[i], name) == 0) {
			free(vars.value[i]);
			vars.name[i] = vars.name[--vars.n];
			vars.value[i] = vars.value[vars.n];
			return;
		}
	}
}

static void set_int(const char *name, long v)
{
	char buf[32];
	snprintf(buf, sizeof(buf), "%ld", v);
	set(name, buf);
}

static void reset(void)
{
	while (vars.n)
		unset(vars.name[0]);
	tmp_path[0] = 0;
}

static void cleanup(void)
{
	if (tmp_path[0])
		unlink(tmp_path);
	reset();
}

TestSuite(topo, .init = reset, .fini = cleanup);

/* Writes text to a temporary file and points HPCT_HOSTFILE at it. */
static const char *hostfile(const char *text)
{
	if (!tmp_path[0]) {
		snprintf(tmp_path, sizeof(tmp_path), "/tmp/hpct-topo-XXXXXX");
		int fd = mkstemp(tmp_path);
		cr_assert(fd >= 0);
		close(fd);
	}
	FILE *f = fopen(tmp_path, "w");
	cr_assert(f);
	fputs(text, f);
	fclose(f);
	set("HPCT_HOSTFILE", tmp_path);
	return tmp_path;
}

static void read_ok(struct hpct_topo *t)
{
	int rc = hpct__topo_read(&fake_env, t);
	cr_assert_eq(rc, 0, "rc %s: %s", hpct_errname(rc), hpct_last_error());
}

/* Expects code and `text` in the message, and nothing left allocated. */
static void read_bad(int code, const char *text)
{
	struct hpct_topo t;
	memset(&t, 0x5a, sizeof(t));
	int rc = hpct__topo_read(&fake_env, &t);
	cr_assert_eq(rc, code, "rc %s, expected %s; message: %s", hpct_errname(rc),
	             hpct_errname(code), hpct_last_error());
	cr_assert(strstr(hpct_last_error(), text), "message '%s' lacks '%s'", hpct_last_error(),
	          text);
	cr_assert(!t.hosts && !t.node_of && !t.local_of && !t.port_of && !t.master_addr &&
	                  !t.ifname && t.nnodes == 0,
	          "output not cleared on error");
}

static void world(int rank, int size)
{
	set_int("RANK", rank);
	set_int("WORLD_SIZE", size);
}

Test(topo, rank_precedence)
{
	struct hpct_topo t;
	set("WORLD_SIZE", "8");
	set("OMPI_COMM_WORLD_RANK", "4");
	read_ok(&t);
	cr_assert_eq(t.rank, 4);
	hpct__topo_free(&t);
	set("SLURM_PROCID", "3");
	read_ok(&t);
	cr_assert_eq(t.rank, 3);
	hpct__topo_free(&t);
	set("RANK", "2");
	read_ok(&t);
	cr_assert_eq(t.rank, 2);
	hpct__topo_free(&t);
	set("HPCT_RANK", "1");
	read_ok(&t);
	cr_assert_eq(t.rank, 1);
	hpct__topo_free(&t);
	set("HPCT_RANK", "");
	read_ok(&t);
	cr_assert_eq(t.rank, 2, "an empty variable counts as unset");
	hpct__topo_free(&t);
}

Test(topo, size_precedence_per_item)
{
	struct hpct_topo t;
	set("HPCT_RANK", "5");
	set("OMPI_COMM_WORLD_RANK", "0");
	set("OMPI_COMM_WORLD_SIZE", "32");
	read_ok(&t);
	cr_assert_eq(t.size, 32);
	cr_assert_eq(t.rank, 5);
	hpct__topo_free(&t);
	set("SLURM_NTASKS", "16");
	read_ok(&t);
	cr_assert_eq(t.size, 16);
	hpct__topo_free(&t);
	set("WORLD_SIZE", "8");
	read_ok(&t);
	cr_assert_eq(t.size, 8);
	hpct__topo_free(&t);
	set("HPCT_WORLD_SIZE", "6");
	read_ok(&t);
	cr_assert_eq(t.size, 6);
	hpct__topo_free(&t);
}

Test(topo, local_rank_precedence_without_node_list)
{
	struct hpct_topo t;
	world(3, 8);
	read_ok(&t);
	cr_assert_eq(t.local_rank, 0);
	cr_assert_eq(t.local_size, 1);
	cr_assert_eq(t.nnodes, 0);
	cr_assert_null(t.node_of);
	cr_assert_null(t.nodelist_src);
	cr_assert(strstr(t.why_not_rootless, "no node list: set HPCT_HOSTS, HPCT_HOSTFILE or "
	                                     "SLURM_JOB_NODELIST"),
	          "%s", t.why_not_rootless);
	hpct__topo_free(&t);
	set("LOCAL_WORLD_SIZE", "4");
	set("OMPI_COMM_WORLD_LOCAL_RANK", "3");
	read_ok(&t);
	cr_assert_eq(t.local_rank, 3);
	cr_assert_eq(t.local_size, 4);
	hpct__topo_free(&t);
	set("SLURM_LOCALID", "2");
	read_ok(&t);
	cr_assert_eq(t.local_rank, 2);
	hpct__topo_free(&t);
	set("LOCAL_RANK", "1");
	read_ok(&t);
	cr_assert_eq(t.local_rank, 1);
	hpct__topo_free(&t);
	set("HPCT_LOCAL_RANK", "0");
	read_ok(&t);
	cr_assert_eq(t.local_rank, 0);
	hpct__topo_free(&t);
	set("HPCT_LOCAL_RANK", "4");
	read_bad(HPCT_EBADENV, "HPCT_LOCAL_RANK=4 is not below LOCAL_WORLD_SIZE=4");
}

Test(topo, missing_rank_or_size)
{
	read_bad(HPCT_ENOTOPO, "HPCT_RANK, RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK");
	read_bad(HPCT_ENOTOPO, "HPCT_WORLD_SIZE, WORLD_SIZE, SLURM_NTASKS, OMPI_COMM_WORLD_SIZE");
	set("SLURM_PROCID", "0");
	read_bad(HPCT_ENOTOPO,
	         "world size unknown: none of HPCT_WORLD_SIZE, WORLD_SIZE, SLURM_NTASKS, "
	         "OMPI_COMM_WORLD_SIZE is set");
	unset("SLURM_PROCID");
	set("SLURM_NTASKS", "4");
	read_bad(
	        HPCT_ENOTOPO,
	        "rank unknown: none of HPCT_RANK, RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK is set");
}

Test(topo, bad_rank_and_size)
{
	set("HPCT_RANK", "9");
	set("WORLD_SIZE", "8");
	read_bad(HPCT_EBADENV, "HPCT_RANK=9 is not below the world size 8 (from WORLD_SIZE)");
	set("HPCT_RANK", "8");
	read_bad(HPCT_EBADENV, "HPCT_RANK=8 is not below the world size 8");
	set("HPCT_RANK", "-1");
	read_bad(HPCT_EBADENV, "HPCT_RANK=-1 is out of range");
	set("HPCT_RANK", "abc");
	read_bad(HPCT_EBADENV, "HPCT_RANK='abc' is not an integer");
	set("HPCT_RANK", "0");
	set("WORLD_SIZE", "0");
	read_bad(HPCT_EBADENV, "WORLD_SIZE=0 is out of range");
	/* A malformed variable is an error even when a lower one would do. */
	set("WORLD_SIZE", "x");
	set("SLURM_NTASKS", "4");
	read_bad(HPCT_EBADENV, "WORLD_SIZE='x'");
}

Test(topo, node_list_precedence)
{
	struct hpct_topo t;
	world(0, 4);
	set("SLURM_NODELIST", "old[1-2]");
	read_ok(&t);
	cr_assert_str_eq(t.nodelist_src, "SLURM_NODELIST");
	cr_assert_str_eq(t.hosts[1], "old2");
	cr_assert_str_eq(t.why_not_rootless, "");
	hpct__topo_free(&t);
	set("SLURM_JOB_NODELIST", "slurm[1-2]");
	read_ok(&t);
	cr_assert_str_eq(t.nodelist_src, "SLURM_JOB_NODELIST");
	cr_assert_str_eq(t.hosts[0], "slurm1");
	hpct__topo_free(&t);
	set("HPCT_HOSTS", "h1,h2");
	read_ok(&t);
	cr_assert_str_eq(t.nodelist_src, "HPCT_HOSTS");
	cr_assert_str_eq(t.hosts[0], "h1");
	hpct__topo_free(&t);
	hostfile("# nodes\nf1\n\nf2  # second\n");
	read_ok(&t);
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
	set("SLURM_PROCID", "3");
	set("SLURM_NTASKS", "4");
	set("SLURM_JOB_NODELIST", "gpu-[01-04]");
	set("SLURM_TASKS_PER_NODE", "1(x4)");
	set("SLURM_STEP_NODELIST", "gpu-[03-04]");
	set("SLURM_STEP_TASKS_PER_NODE", "2(x2)");
	read_ok(&t);
	cr_assert_str_eq(t.nodelist_src, "SLURM_STEP_NODELIST");
	cr_assert_eq(t.nnodes, 2);
	cr_assert_str_eq(t.hosts[t.node], "gpu-04");
	cr_assert_eq(t.local_rank, 1);
	hpct__topo_free(&t);
}

static void expect_tasks(const char *layout)
{
	struct hpct_topo t;
	read_ok(&t);
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
	world(0, 12);
	set("HPCT_HOSTS", "a,b,c");
	expect_tasks("4,4,4");
	set("OMPI_COMM_WORLD_LOCAL_SIZE", "3");
	read_bad(HPCT_EBADENV, "OMPI_COMM_WORLD_LOCAL_SIZE=3 gives 9 ranks on the 3 nodes of "
	                       "HPCT_HOSTS, but the world size is 12 (from WORLD_SIZE)");
	set("SLURM_TASKS_PER_NODE", "6,5,1");
	expect_tasks("6,5,1");
	set("LOCAL_WORLD_SIZE", "4");
	expect_tasks("4,4,4");
	set("HPCT_TASKS_PER_NODE", "2,8,2");
	expect_tasks("2,8,2");
}

Test(topo, uneven_layout)
{
	struct hpct_topo t;
	world(4, 6);
	set("LOCAL_RANK", "0");
	set("GROUP_RANK", "2");
	set("HPCT_HOSTS", "n[1-3]");
	set("HPCT_TASKS_PER_NODE", "3,1,2");
	read_ok(&t);
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
	set("HPCT_TASKS_PER_NODE", "2(x2),2");
	set("LOCAL_RANK", "0");
	set("GROUP_RANK", "2");
	read_ok(&t);
	cr_assert_eq(t.local_size, 2);
	cr_assert_eq(t.max_local, 2);
	hpct__topo_free(&t);
}

Test(topo, layout_errors)
{
	world(0, 10);
	set("HPCT_HOSTS", "n[1-4]");
	read_bad(HPCT_ENOTOPO, "cannot lay out the 10 ranks (from WORLD_SIZE) on the 4 nodes of "
	                       "HPCT_HOSTS");
	set("HPCT_TASKS_PER_NODE", "4,4");
	read_bad(HPCT_EBADENV, "HPCT_TASKS_PER_NODE='4,4': 2 counts for 4 nodes");
	set("HPCT_TASKS_PER_NODE", "4(x2),1,3");
	read_bad(HPCT_EBADENV, "HPCT_TASKS_PER_NODE='4(x2),1,3' gives 12 ranks on the 4 nodes of "
	                       "HPCT_HOSTS, but the world size is 10 (from WORLD_SIZE)");
	set("HPCT_TASKS_PER_NODE", "4(x0),1,3");
	read_bad(HPCT_EBADENV, "HPCT_TASKS_PER_NODE='4(x0),1,3': repeat count 'x0' at position 3");
	set("HPCT_TASKS_PER_NODE", "4,4,1,");
	read_bad(HPCT_EBADENV, "HPCT_TASKS_PER_NODE='4,4,1,': trailing ',' at position 6");
	set("HPCT_TASKS_PER_NODE", "4,0,3,3");
	read_bad(HPCT_EBADENV, "HPCT_TASKS_PER_NODE='4,0,3,3': count '0' at position 3");
	unset("HPCT_TASKS_PER_NODE");
	set("LOCAL_WORLD_SIZE", "0");
	read_bad(HPCT_EBADENV, "LOCAL_WORLD_SIZE=0 is out of range");
	unset("LOCAL_WORLD_SIZE");
	set("HPCT_HOSTS", "n[01-11]");
	read_bad(HPCT_EBADENV, "HPCT_HOSTS='n[01-11]' lists more nodes than the 10 ranks of the "
	                       "world (from WORLD_SIZE)");
}

Test(topo, malformed_node_lists)
{
	world(0, 8);
	set("HPCT_HOSTS", "gpu-[01-");
	read_bad(HPCT_EBADENV, "HPCT_HOSTS='gpu-[01-': unbalanced '[' at position 5");
	set("HPCT_HOSTS", "gpu-[05-03]");
	read_bad(HPCT_EBADENV, "HPCT_HOSTS='gpu-[05-03]': descending range '05-03' at position 6");
	set("HPCT_HOSTS", "a,,b");
	read_bad(HPCT_EBADENV, "HPCT_HOSTS='a,,b': empty name at position 3");
	set("HPCT_HOSTS", "a,b,");
	read_bad(HPCT_EBADENV, "HPCT_HOSTS='a,b,': trailing ',' at position 4");
	set("HPCT_HOSTS", "n[1-x]");
	read_bad(HPCT_EBADENV, "HPCT_HOSTS='n[1-x]': 'x' at position 5 is not a digit");
	unset("HPCT_HOSTS");
	set("SLURM_JOB_NODELIST", "n[1-2]]");
	read_bad(HPCT_EBADENV, "SLURM_JOB_NODELIST='n[1-2]]': unbalanced ']' at position 7");
	/* Long values are quoted short, so the reason still fits the message. */
	char big[4096];
	size_t o = 0;
	for (int i = 0; i < 300; i++)
		o += (size_t)snprintf(big + o, sizeof(big) - o, "host%03d,", i);
	set("SLURM_JOB_NODELIST", big);
	world(0, 600);
	read_bad(HPCT_EBADENV, "trailing ',' at position 2400");
}

Test(topo, local_rank_must_match_layout)
{
	struct hpct_topo t;
	world(5, 8);
	set("HPCT_HOSTS", "gpu-[01-02]");
	set("LOCAL_RANK", "0");
	read_bad(HPCT_EBADENV, "LOCAL_RANK=0 disagrees with the layout: rank 5 (from RANK) is "
	                       "local rank 1 of the 4 ranks on node 1 'gpu-02' (HPCT_HOSTS, ranks "
	                       "split evenly)");
	set("LOCAL_RANK", "1");
	set("SLURM_LOCALID", "3"); /* lower precedence: not consulted */
	read_ok(&t);
	cr_assert_eq(t.local_rank, 1);
	hpct__topo_free(&t);
	set("HPCT_LOCAL_RANK", "2");
	set("HPCT_TASKS_PER_NODE", "4(x2)");
	read_bad(HPCT_EBADENV, "HPCT_LOCAL_RANK=2 disagrees with the layout: rank 5 (from RANK) "
	                       "is local rank 1 of the 4 ranks on node 1 'gpu-02' (HPCT_HOSTS and "
	                       "HPCT_TASKS_PER_NODE)");
	unset("HPCT_LOCAL_RANK");
	set("GROUP_RANK", "0");
	read_bad(HPCT_EBADENV, "GROUP_RANK=0 disagrees with the layout: rank 5 (from RANK) is on "
	                       "node 1 'gpu-02'");
	set("GROUP_RANK", "1");
	read_ok(&t);
	cr_assert_eq(t.node, 1);
	hpct__topo_free(&t);
}

Test(topo, group_rank_ignored_without_node_list)
{
	struct hpct_topo t;
	world(5, 8);
	set("GROUP_RANK", "7");
	read_ok(&t);
	cr_assert_eq(t.nnodes, 0);
	hpct__topo_free(&t);
}

Test(topo, host_table)
{
	struct hpct_topo t;
	world(4, 7);
	set("LOCAL_RANK", "2");
	hostfile("# rank host\n"
	         "0 10.0.0.1:12000\n"
	         "3 [fd00::2]:9000\n"
	         "1 10.0.0.1\n"
	         "\n"
	         "2 fd00::2   # bare IPv6, no port\n"
	         "4 [fd00::2]\n"
	         "5\tgpu-07:65535\n"
	         "6 10.0.0.1:1\n");
	read_ok(&t);
	cr_assert_eq(t.nnodes, 3);
	cr_assert_str_eq(t.hosts[0], "10.0.0.1");
	cr_assert_str_eq(t.hosts[1], "fd00::2");
	cr_assert_str_eq(t.hosts[2], "gpu-07");
	static const int node[] = { 0, 0, 1, 1, 1, 2, 0 }, local[] = { 0, 1, 0, 1, 2, 0, 2 },
	                 port[] = { 12000, 0, 0, 9000, 0, 65535, 1 };
	for (int r = 0; r < 7; r++) {
		cr_assert_eq(t.node_of[r], node[r], "rank %d node %d", r, t.node_of[r]);
		cr_assert_eq(t.local_of[r], local[r], "rank %d local %d", r, t.local_of[r]);
		cr_assert_eq(t.port_of[r], port[r], "rank %d port %d", r, t.port_of[r]);
	}
	cr_assert_eq(t.node, 1);
	cr_assert_eq(t.local_rank, 2);
	cr_assert_eq(t.local_size, 3);
	cr_assert_eq(t.max_local, 3);
	hpct__topo_free(&t);
}

Test(topo, plain_hostfile_addresses)
{
	struct hpct_topo t;
	world(2, 3);
	hostfile("[fd00::1]\n  fd00::2\t# bare\n10.0.0.3\r\n");
	read_ok(&t);
	cr_assert_eq(t.nnodes, 3);
	cr_assert_str_eq(t.hosts[0], "fd00::1");
	cr_assert_str_eq(t.hosts[1], "fd00::2");
	cr_assert_str_eq(t.hosts[2], "10.0.0.3");
	cr_assert_eq(t.node, 2);
	cr_assert_eq(t.local_size, 1);
	hpct__topo_free(&t);
}

Test(topo, host_table_errors)
{
	world(0, 4);
	const char *p = hostfile("0 a\n1 b\n1 c\n2 d\n3 e\n");
	char want[256];
	snprintf(want, sizeof(want),
	         "HPCT_HOSTFILE=%s line 3: rank 1 listed twice (first at line 2)", p);
	read_bad(HPCT_EBADENV, want);
	hostfile("0 a\n1 b\n3 d\n");
	snprintf(want, sizeof(want), "HPCT_HOSTFILE=%s: rank 2 is not listed", p);
	read_bad(HPCT_EBADENV, want);
	hostfile("0 a\n1 b\n2 c\n3 d\n4 e\n");
	read_bad(HPCT_EBADENV, "line 5: rank 4 is not below the world size 4 (from WORLD_SIZE)");
	hostfile("0 a\n1 b\n2 c:70000\n3 d\n");
	read_bad(HPCT_EBADENV, "line 3: rank 2: port '70000' in 'c:70000' is not in 1..65535");
	hostfile("0 a\n1 [fd00::1]:\n2 c\n3 d\n");
	read_bad(HPCT_EBADENV, "line 2: rank 1: port '' in '[fd00::1]:' is not in 1..65535");
	hostfile("0 a\n1 b:-5\n2 c\n3 d\n");
	read_bad(HPCT_EBADENV, "line 2: rank 1: port '-5' in 'b:-5'");
	hostfile("0 a\n1 b\n2 [fd00::1:80\n3 d\n");
	read_bad(HPCT_EBADENV, "line 3: rank 2: unbalanced '[' in '[fd00::1:80'");
	hostfile("0 a\n1 b\n2 [fd00::1]x\n3 d\n");
	read_bad(HPCT_EBADENV, "line 3: rank 2: text after ']' in '[fd00::1]x' is not ':PORT'");
	hostfile("0 a\n1 b\n2 :80\n3 d\n");
	read_bad(HPCT_EBADENV, "line 3: rank 2: empty host in ':80'");
	hostfile("0 a\n1 []:80\n2 c\n3 d\n");
	read_bad(HPCT_EBADENV, "line 2: rank 1: empty host in '[]:80'");
	hostfile("0 a\nb\n");
	read_bad(HPCT_EBADENV, "line 2: expected 'RANK HOST[:PORT]' (as on line 1)");
	hostfile("0 a\n1 b c\n");
	read_bad(HPCT_EBADENV, "line 2: expected 'RANK HOST[:PORT]'");
	hostfile("\n0 a b\n");
	read_bad(HPCT_EBADENV, "line 2: expected one host or 'RANK HOST[:PORT]'");
	hostfile("x a\n");
	read_bad(HPCT_EBADENV, "line 1: rank 'x' is not a number");
	hostfile("a\n0 b\n");
	read_bad(HPCT_EBADENV, "line 2: expected one host (as on line 1)");
	hostfile("a:80\n");
	read_bad(HPCT_EBADENV, "line 1: a port needs the 'RANK HOST:PORT' form");
	hostfile("[fd00::1\n");
	read_bad(HPCT_EBADENV, "line 1: unbalanced '[' in '[fd00::1'");
	char longline[1200];
	memset(longline, 'h', 1100);
	strcpy(longline + 1100, "\n");
	hostfile(longline);
	read_bad(HPCT_EBADENV, "line 1: longer than 1022 characters");
	hostfile("a\nb\nc\nd\ne\n");
	read_bad(HPCT_EBADENV,
	         "line 5: more hosts than the 4 ranks of the world (from WORLD_SIZE)");
	hostfile("# nothing\n\n");
	snprintf(want, sizeof(want), "HPCT_HOSTFILE=%s: no hosts in the file", p);
	read_bad(HPCT_EBADENV, want);
	set("HPCT_HOSTFILE", "/nonexistent/hpct-hosts");
	read_bad(HPCT_EBADENV, "HPCT_HOSTFILE=/nonexistent/hpct-hosts: cannot open (No such file");
}

Test(topo, host_table_explicit_ports_need_no_range)
{
	struct hpct_topo t;
	world(0, 4);
	set("HPCT_PORT_RANGE", "1");
	hostfile("0 a:1000\n1 a:1001\n2 a:1002\n3 a:1003\n");
	read_ok(&t);
	cr_assert_eq(t.max_local, 4);
	hpct__topo_free(&t);
	hostfile("0 a:1000\n1 a:1001\n2 a\n3 a:1003\n");
	read_bad(HPCT_EBADENV, "HPCT_PORT_RANGE=1 cannot hold the 4 ranks of node a");
}

Test(topo, ports)
{
	struct hpct_topo t;
	world(0, 16);
	read_ok(&t);
	cr_assert_eq(t.port_base, 10000);
	cr_assert_eq(t.port_range, 8192);
	hpct__topo_free(&t);
	set("HPCT_PORT_BASE", "60000");
	read_bad(HPCT_EBADENV, "HPCT_PORT_BASE=60000 with HPCT_PORT_RANGE=8192 ends at port 68191, "
	                       "above 65535");
	set("HPCT_PORT_RANGE", "5536");
	read_ok(&t);
	cr_assert_eq(t.port_range, 5536);
	hpct__topo_free(&t);
	set("HPCT_PORT_RANGE", "5537");
	read_bad(HPCT_EBADENV, "HPCT_PORT_BASE=60000 with HPCT_PORT_RANGE=5537 ends at port 65536");
	set("HPCT_PORT_BASE", "0");
	read_bad(HPCT_EBADENV, "HPCT_PORT_BASE=0 is out of range");
	set("HPCT_PORT_BASE", "20000");
	set("HPCT_PORT_RANGE", "0");
	read_bad(HPCT_EBADENV, "HPCT_PORT_RANGE=0 is out of range");
	set("HPCT_PORT_RANGE", "4");
	read_ok(&t); /* no node list: nothing to hold */
	hpct__topo_free(&t);
	set("HPCT_HOSTS", "gpu-[01-02]");
	read_bad(HPCT_EBADENV, "HPCT_PORT_RANGE=4 cannot hold the 8 ranks of node gpu-01");
	set("HPCT_TASKS_PER_NODE", "6,10");
	set("HPCT_PORT_RANGE", "9");
	read_bad(HPCT_EBADENV, "HPCT_PORT_RANGE=9 cannot hold the 10 ranks of node gpu-02");
	set("HPCT_PORT_RANGE", "10");
	read_ok(&t);
	cr_assert_eq(t.max_local, 10);
	hpct__topo_free(&t);
}

static char *stderr_text(void)
{
	fflush(stderr);
	static char buf[8192];
	FILE *f = cr_get_redirected_stderr();
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = 0;
	return buf;
}

static void reset_redirect(void)
{
	reset();
	cr_redirect_stderr();
}

Test(topo, warns_on_ephemeral_overlap, .init = reset_redirect, .fini = cleanup)
{
	int lo, hi;
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
	if (!f || fscanf(f, "%d %d", &lo, &hi) != 2 ||
	    !hpct__log_enabled(HPCT_LOG_WARN, HPCT_SUB_ENV))
		cr_skip_test("no ephemeral range or warnings disabled");
	fclose(f);
	struct hpct_topo t;
	world(0, 2);
	set_int("HPCT_PORT_BASE", lo - 1);
	set("HPCT_PORT_RANGE", "2");
	read_ok(&t);
	hpct__topo_free(&t);
	char want[128];
	snprintf(want, sizeof(want), "ports %d-%d overlap the kernel's ephemeral ports %d-%d",
	         lo - 1, lo, lo, hi);
	const char *out = stderr_text();
	cr_assert(strstr(out, want), "stderr: %s", out);
	cr_assert(strstr(out, "HPCT_PORT_BASE="), "stderr: %s", out);
}

Test(topo, no_warning_outside_ephemeral_range, .init = reset_redirect, .fini = cleanup)
{
	int lo, hi;
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
	if (!f || fscanf(f, "%d %d", &lo, &hi) != 2 || lo < 3)
		cr_skip_test("no ephemeral range");
	fclose(f);
	struct hpct_topo t;
	world(0, 2);
	set_int("HPCT_PORT_BASE", lo - 2);
	set("HPCT_PORT_RANGE", "2");
	read_ok(&t);
	hpct__topo_free(&t);
	const char *out = stderr_text();
	cr_assert(!strstr(out, "ephemeral"), "stderr: %s", out);
}

Test(topo, info_when_ports_cannot_rotate, .init = reset_redirect, .fini = cleanup)
{
	/* Logging reads its level from the process once; this test process
	 * has not logged yet. */
	setenv("HPCT_DEBUG", "INFO", 1);
	struct hpct_topo t;
	world(0, 16);
	set("HPCT_HOSTS", "gpu-[01-02]");
	set("HPCT_PORT_BASE", "1024");
	set("HPCT_PORT_RANGE", "15");
	read_ok(&t);
	hpct__topo_free(&t);
	const char *out = stderr_text();
	cr_assert(strstr(out, "HPCT_PORT_RANGE=15 is less than twice the 8 ranks of node gpu-01: "
	                      "ports cannot rotate with the epoch"),
	          "stderr: %s", out);
}

Test(topo, job_fallbacks)
{
	struct hpct_topo t;
	world(0, 2);
	read_ok(&t);
	cr_assert_str_eq(t.job_name, "default");
	cr_assert_eq(t.job, hpct__hash("default", 7, 0));
	hpct__topo_free(&t);
	set("MASTER_ADDR", "10.1.2.3");
	read_ok(&t);
	cr_assert_str_eq(t.job_name, "default", "MASTER_ADDR alone is not an identity");
	cr_assert_str_eq(t.master_addr, "10.1.2.3");
	cr_assert_eq(t.master_port, 0);
	hpct__topo_free(&t);
	set("MASTER_PORT", "29500");
	read_ok(&t);
	cr_assert_str_eq(t.job_name, "10.1.2.3:29500");
	cr_assert_eq(t.master_port, 29500);
	cr_assert_eq(t.job, hpct__hash("10.1.2.3:29500", 14, 0));
	hpct__topo_free(&t);
	set("SLURM_JOB_ID", "4242");
	read_ok(&t);
	cr_assert_str_eq(t.job_name, "4242");
	hpct__topo_free(&t);
	set("TORCHELASTIC_RUN_ID", "none");
	read_ok(&t);
	cr_assert_str_eq(t.job_name, "4242", "TORCHELASTIC_RUN_ID=none must be skipped");
	hpct__topo_free(&t);
	set("TORCHELASTIC_RUN_ID", "run-7");
	read_ok(&t);
	cr_assert_str_eq(t.job_name, "run-7");
	cr_assert_eq(t.job, hpct__hash("run-7", 5, 0));
	hpct__topo_free(&t);
	set("HPCT_JOB_ID", "mine");
	read_ok(&t);
	cr_assert_str_eq(t.job_name, "mine");
	hpct__topo_free(&t);
	char longid[300];
	memset(longid, 'j', 299);
	longid[299] = 0;
	set("HPCT_JOB_ID", longid);
	read_ok(&t);
	cr_assert_eq(strlen(t.job_name), sizeof(t.job_name) - 1);
	hpct__topo_free(&t);
	set("MASTER_PORT", "65536");
	read_bad(HPCT_EBADENV, "MASTER_PORT=65536 is out of range");
}

Test(topo, epoch_fallbacks)
{
	struct hpct_topo t;
	world(0, 2);
	read_ok(&t);
	cr_assert_eq(t.epoch, 0);
	hpct__topo_free(&t);
	set("JOB_RESTART_COUNT", "5");
	read_ok(&t);
	cr_assert_eq(t.epoch, 5);
	hpct__topo_free(&t);
	set("TORCHELASTIC_RESTART_COUNT", "3");
	read_ok(&t);
	cr_assert_eq(t.epoch, 3);
	hpct__topo_free(&t);
	set("HPCT_EPOCH", "12");
	read_ok(&t);
	cr_assert_eq(t.epoch, 12);
	hpct__topo_free(&t);
	set("HPCT_EPOCH", "-1");
	read_bad(HPCT_EBADENV, "HPCT_EPOCH=-1 is out of range");
	unset("HPCT_EPOCH");
	set("TORCHELASTIC_RESTART_COUNT", "two");
	read_bad(HPCT_EBADENV, "TORCHELASTIC_RESTART_COUNT='two' is not an integer");
}

Test(topo, socket_settings)
{
	struct hpct_topo t;
	world(0, 2);
	read_ok(&t);
	cr_assert_eq(t.family, AF_UNSPEC);
	cr_assert_null(t.ifname);
	cr_assert_eq(t.want_rootless, 0);
	cr_assert_float_eq(t.timeout_s, 120.0, 1e-9);
	hpct__topo_free(&t);
	static const struct {
		const char *v;
		int family;
	} fam[] = { { "AF_INET", AF_INET },   { "inet", AF_INET },   { "4", AF_INET },
		    { "AF_INET6", AF_INET6 }, { "inet6", AF_INET6 }, { "6", AF_INET6 } };
	for (size_t i = 0; i < sizeof(fam) / sizeof(fam[0]); i++) {
		set("HPCT_SOCKET_FAMILY", fam[i].v);
		read_ok(&t);
		cr_assert_eq(t.family, fam[i].family, "%s", fam[i].v);
		hpct__topo_free(&t);
	}
	set("HPCT_SOCKET_IFNAME", "^docker,lo");
	set("HPCT_USE_ROOTLESS", "1");
	set("HPCT_TIMEOUT", "2.5");
	read_ok(&t);
	cr_assert_str_eq(t.ifname, "^docker,lo");
	cr_assert_eq(t.want_rootless, 1);
	cr_assert_float_eq(t.timeout_s, 2.5, 1e-9);
	hpct__topo_free(&t);
	set("HPCT_USE_ROOTLESS", "maybe");
	read_bad(HPCT_EBADENV, "HPCT_USE_ROOTLESS='maybe' is not a boolean");
	unset("HPCT_USE_ROOTLESS");
	set("HPCT_TIMEOUT", "-3");
	read_bad(HPCT_EBADENV, "HPCT_TIMEOUT='-3'");
	unset("HPCT_TIMEOUT");
	set("HPCT_SOCKET_FAMILY", "ipx");
	read_bad(HPCT_EBADENV, "HPCT_SOCKET_FAMILY='ipx' is not AF_INET, AF_INET6");
}

Test(topo, free_is_safe)
{
	struct hpct_topo t;
	memset(&t, 0, sizeof(t));
	hpct__topo_free(&t);
	hpct__topo_free(NULL);
	world(1, 4);
	set("HPCT_HOSTS", "a,b");
	read_ok(&t);
	hpct__topo_free(&t);
	cr_assert_null(t.hosts);
	cr_assert_null(t.node_of);
	cr_assert_eq(t.nnodes, 0);
	hpct__topo_free(&t);
}

Test(topo, hundred_thousand_ranks_on_ten_thousand_nodes)
{
	struct hpct_topo t;
	world(99999, 100000);
	set("LOCAL_RANK", "9");
	set("GROUP_RANK", "9999");
	set("SLURM_JOB_NODELIST", "gpu-[00001-10000]");
	set("SLURM_TASKS_PER_NODE", "10(x10000)");
	read_ok(&t);
	cr_assert_eq(t.nnodes, 10000);
	cr_assert_str_eq(t.hosts[9999], "gpu-10000");
	cr_assert_eq(t.node, 9999);
	cr_assert_eq(t.local_rank, 9);
	cr_assert_eq(t.max_local, 10);
	cr_assert_eq(t.node_of[12345], 1234);
	cr_assert_eq(t.local_of[12345], 5);
	hpct__topo_free(&t);

	/* Uneven: 5 ranks on the first half of the nodes, 15 on the second. */
	set("HPCT_TASKS_PER_NODE", "5(x5000),15(x5000)");
	set("RANK", "25000");
	set("LOCAL_RANK", "0");
	set("GROUP_RANK", "5000");
	read_ok(&t);
	cr_assert_eq(t.max_local, 15);
	cr_assert_eq(t.node, 5000);
	cr_assert_eq(t.local_size, 15);
	cr_assert_eq(t.node_of[99999], 9999);
	cr_assert_eq(t.local_of[99999], 14);
	cr_assert_eq(t.node_of[24999], 4999);
	cr_assert_eq(t.local_of[24999], 4);
	hpct__topo_free(&t);
}

Test(topo, hundred_thousand_rank_host_table)
{
	struct hpct_topo t;
	world(77777, 100000);
	set("LOCAL_RANK", "7");
	size_t cap = 100000 * 24 + 1, o = 0;
	char *text = malloc(cap);
	cr_assert(text);
	/* Ranks listed backwards, so first appearance is not rank order. */
	for (int r = 99999; r >= 0; r--)
		o += (size_t)snprintf(text + o, cap - o, "%d 10.%d.%d.1:%d\n", r, r / 10 / 256,
		                      r / 10 % 256, 20000 + r % 10);
	hostfile(text);
	free(text);
	read_ok(&t);
	cr_assert_eq(t.nnodes, 10000);
	cr_assert_str_eq(t.hosts[0], "10.39.15.1");
	cr_assert_eq(t.node, 10000 - 1 - 7777);
	cr_assert_eq(t.local_rank, 7);
	cr_assert_eq(t.port_of[77777], 20007);
	cr_assert_eq(t.max_local, 10);
	hpct__topo_free(&t);
}
