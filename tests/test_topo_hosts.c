/* The world as the launcher describes it, continued (test_topo.c): host
 * files and tables, derived ports and their warnings, job and epoch
 * fallbacks, socket settings, and the largest worlds. */
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
#include "bootstrap/topo/topo.h"
#include "hpct/hpct.h"
#include "tests/topo_env.h"

TestSuite(topo, .init = topo_env_reset, .fini = topo_env_cleanup);

Test(topo, host_table)
{
	struct hpct_topo t;
	topo_env_world(4, 7);
	topo_env_set("LOCAL_RANK", "2");
	topo_env_hostfile("# rank host\n"
	                  "0 10.0.0.1:12000\n"
	                  "3 [fd00::2]:9000\n"
	                  "1 10.0.0.1\n"
	                  "\n"
	                  "2 fd00::2   # bare IPv6, no port\n"
	                  "4 [fd00::2]\n"
	                  "5\tgpu-07:65535\n"
	                  "6 10.0.0.1:1\n");
	topo_read_ok(&t);
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
	topo_env_world(2, 3);
	topo_env_hostfile("[fd00::1]\n  fd00::2\t# bare\n10.0.0.3\r\n");
	topo_read_ok(&t);
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
	topo_env_world(0, 4);
	const char *p = topo_env_hostfile("0 a\n1 b\n1 c\n2 d\n3 e\n");
	char want[256];
	snprintf(want, sizeof(want),
	         "HPCT_HOSTFILE=%s line 3: rank 1 listed twice (first at line 2)", p);
	topo_read_bad(HPCT_EBADENV, want);
	topo_env_hostfile("0 a\n1 b\n3 d\n");
	snprintf(want, sizeof(want), "HPCT_HOSTFILE=%s: rank 2 is not listed", p);
	topo_read_bad(HPCT_EBADENV, want);
	topo_env_hostfile("0 a\n1 b\n2 c\n3 d\n4 e\n");
	topo_read_bad(HPCT_EBADENV,
	              "line 5: rank 4 is not below the world size 4 (from WORLD_SIZE)");
	topo_env_hostfile("0 a\n1 b\n2 c:70000\n3 d\n");
	topo_read_bad(HPCT_EBADENV, "line 3: rank 2: port '70000' in 'c:70000' is not in 1..65535");
	topo_env_hostfile("0 a\n1 [fd00::1]:\n2 c\n3 d\n");
	topo_read_bad(HPCT_EBADENV, "line 2: rank 1: port '' in '[fd00::1]:' is not in 1..65535");
	topo_env_hostfile("0 a\n1 b:-5\n2 c\n3 d\n");
	topo_read_bad(HPCT_EBADENV, "line 2: rank 1: port '-5' in 'b:-5'");
	topo_env_hostfile("0 a\n1 b\n2 [fd00::1:80\n3 d\n");
	topo_read_bad(HPCT_EBADENV, "line 3: rank 2: unbalanced '[' in '[fd00::1:80'");
	topo_env_hostfile("0 a\n1 b\n2 [fd00::1]x\n3 d\n");
	topo_read_bad(HPCT_EBADENV,
	              "line 3: rank 2: text after ']' in '[fd00::1]x' is not ':PORT'");
	topo_env_hostfile("0 a\n1 b\n2 :80\n3 d\n");
	topo_read_bad(HPCT_EBADENV, "line 3: rank 2: empty host in ':80'");
	topo_env_hostfile("0 a\n1 []:80\n2 c\n3 d\n");
	topo_read_bad(HPCT_EBADENV, "line 2: rank 1: empty host in '[]:80'");
	topo_env_hostfile("0 a\nb\n");
	topo_read_bad(HPCT_EBADENV, "line 2: expected 'RANK HOST[:PORT]' (as on line 1)");
	topo_env_hostfile("0 a\n1 b c\n");
	topo_read_bad(HPCT_EBADENV, "line 2: expected 'RANK HOST[:PORT]'");
	topo_env_hostfile("\n0 a b\n");
	topo_read_bad(HPCT_EBADENV, "line 2: expected one host or 'RANK HOST[:PORT]'");
	topo_env_hostfile("x a\n");
	topo_read_bad(HPCT_EBADENV, "line 1: rank 'x' is not a number");
	topo_env_hostfile("a\n0 b\n");
	topo_read_bad(HPCT_EBADENV, "line 2: expected one host (as on line 1)");
	topo_env_hostfile("a:80\n");
	topo_read_bad(HPCT_EBADENV, "line 1: a port needs the 'RANK HOST:PORT' form");
	topo_env_hostfile("[fd00::1\n");
	topo_read_bad(HPCT_EBADENV, "line 1: unbalanced '[' in '[fd00::1'");
	char longline[1200];
	memset(longline, 'h', 1100);
	strcpy(longline + 1100, "\n");
	topo_env_hostfile(longline);
	topo_read_bad(HPCT_EBADENV, "line 1: longer than 1022 characters");
	topo_env_hostfile("a\nb\nc\nd\ne\n");
	topo_read_bad(HPCT_EBADENV,
	              "line 5: more hosts than the 4 ranks of the world (from WORLD_SIZE)");
	topo_env_hostfile("# nothing\n\n");
	snprintf(want, sizeof(want), "HPCT_HOSTFILE=%s: no hosts in the file", p);
	topo_read_bad(HPCT_EBADENV, want);
	topo_env_set("HPCT_HOSTFILE", "/nonexistent/hpct-hosts");
	topo_read_bad(HPCT_EBADENV,
	              "HPCT_HOSTFILE=/nonexistent/hpct-hosts: cannot open (No such file");
}

Test(topo, host_table_explicit_ports_need_no_range)
{
	struct hpct_topo t;
	topo_env_world(0, 4);
	topo_env_set("HPCT_PORT_RANGE", "1");
	topo_env_hostfile("0 a:1000\n1 a:1001\n2 a:1002\n3 a:1003\n");
	topo_read_ok(&t);
	cr_assert_eq(t.max_local, 4);
	hpct__topo_free(&t);
	topo_env_hostfile("0 a:1000\n1 a:1001\n2 a\n3 a:1003\n");
	topo_read_bad(HPCT_EBADENV, "HPCT_PORT_RANGE=1 cannot hold the 4 ranks of node a");
}

Test(topo, ports)
{
	struct hpct_topo t;
	topo_env_world(0, 16);
	topo_read_ok(&t);
	cr_assert_eq(t.port_base, 10000);
	cr_assert_eq(t.port_range, 8192);
	hpct__topo_free(&t);
	topo_env_set("HPCT_PORT_BASE", "60000");
	topo_read_bad(HPCT_EBADENV,
	              "HPCT_PORT_BASE=60000 with HPCT_PORT_RANGE=8192 ends at port 68191, "
	              "above 65535");
	topo_env_set("HPCT_PORT_RANGE", "5536");
	topo_read_ok(&t);
	cr_assert_eq(t.port_range, 5536);
	hpct__topo_free(&t);
	topo_env_set("HPCT_PORT_RANGE", "5537");
	topo_read_bad(HPCT_EBADENV,
	              "HPCT_PORT_BASE=60000 with HPCT_PORT_RANGE=5537 ends at port 65536");
	topo_env_set("HPCT_PORT_BASE", "0");
	topo_read_bad(HPCT_EBADENV, "HPCT_PORT_BASE=0 is out of range");
	topo_env_set("HPCT_PORT_BASE", "20000");
	topo_env_set("HPCT_PORT_RANGE", "0");
	topo_read_bad(HPCT_EBADENV, "HPCT_PORT_RANGE=0 is out of range");
	topo_env_set("HPCT_PORT_RANGE", "4");
	topo_read_ok(&t); /* no node list: nothing to hold */
	hpct__topo_free(&t);
	topo_env_set("HPCT_HOSTS", "gpu-[01-02]");
	topo_read_bad(HPCT_EBADENV, "HPCT_PORT_RANGE=4 cannot hold the 8 ranks of node gpu-01");
	topo_env_set("HPCT_TASKS_PER_NODE", "6,10");
	topo_env_set("HPCT_PORT_RANGE", "9");
	topo_read_bad(HPCT_EBADENV, "HPCT_PORT_RANGE=9 cannot hold the 10 ranks of node gpu-02");
	topo_env_set("HPCT_PORT_RANGE", "10");
	topo_read_ok(&t);
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
	topo_env_reset();
	cr_redirect_stderr();
}

Test(topo, warns_on_ephemeral_overlap, .init = reset_redirect, .fini = topo_env_cleanup)
{
	int lo, hi;
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
	if (!f || fscanf(f, "%d %d", &lo, &hi) != 2 ||
	    !hpct__log_enabled(HPCT_LOG_WARN, HPCT_SUB_ENV))
		cr_skip_test("no ephemeral range or warnings disabled");
	fclose(f);
	struct hpct_topo t;
	topo_env_world(0, 2);
	topo_env_set_int("HPCT_PORT_BASE", lo - 1);
	topo_env_set("HPCT_PORT_RANGE", "2");
	topo_read_ok(&t);
	hpct__topo_free(&t);
	char want[128];
	snprintf(want, sizeof(want), "ports %d-%d overlap the kernel's ephemeral ports %d-%d",
	         lo - 1, lo, lo, hi);
	const char *out = stderr_text();
	cr_assert(strstr(out, want), "stderr: %s", out);
	cr_assert(strstr(out, "HPCT_PORT_BASE="), "stderr: %s", out);
}

Test(topo, no_warning_outside_ephemeral_range, .init = reset_redirect, .fini = topo_env_cleanup)
{
	int lo, hi;
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
	if (!f || fscanf(f, "%d %d", &lo, &hi) != 2 || lo < 3)
		cr_skip_test("no ephemeral range");
	fclose(f);
	struct hpct_topo t;
	topo_env_world(0, 2);
	topo_env_set_int("HPCT_PORT_BASE", lo - 2);
	topo_env_set("HPCT_PORT_RANGE", "2");
	topo_read_ok(&t);
	hpct__topo_free(&t);
	const char *out = stderr_text();
	cr_assert(!strstr(out, "ephemeral"), "stderr: %s", out);
}

Test(topo, info_when_ports_cannot_rotate, .init = reset_redirect, .fini = topo_env_cleanup)
{
	/* Logging reads its level from the process once; this test process
	 * has not logged yet. */
	setenv("HPCT_DEBUG", "INFO", 1);
	struct hpct_topo t;
	topo_env_world(0, 16);
	topo_env_set("HPCT_HOSTS", "gpu-[01-02]");
	topo_env_set("HPCT_PORT_BASE", "1024");
	topo_env_set("HPCT_PORT_RANGE", "15");
	topo_read_ok(&t);
	hpct__topo_free(&t);
	const char *out = stderr_text();
	cr_assert(strstr(out, "HPCT_PORT_RANGE=15 is less than twice the 8 ranks of node gpu-01: "
	                      "ports cannot rotate with the epoch"),
	          "stderr: %s", out);
}

Test(topo, job_fallbacks)
{
	struct hpct_topo t;
	topo_env_world(0, 2);
	topo_read_ok(&t);
	cr_assert_str_eq(t.job_name, "default");
	cr_assert_eq(t.job, hpct__hash("default", 7, 0));
	hpct__topo_free(&t);
	topo_env_set("MASTER_ADDR", "10.1.2.3");
	topo_read_ok(&t);
	cr_assert_str_eq(t.job_name, "default", "MASTER_ADDR alone is not an identity");
	cr_assert_str_eq(t.master_addr, "10.1.2.3");
	cr_assert_eq(t.master_port, 0);
	hpct__topo_free(&t);
	topo_env_set("MASTER_PORT", "29500");
	topo_read_ok(&t);
	cr_assert_str_eq(t.job_name, "10.1.2.3:29500");
	cr_assert_eq(t.master_port, 29500);
	cr_assert_eq(t.job, hpct__hash("10.1.2.3:29500", 14, 0));
	hpct__topo_free(&t);
	topo_env_set("SLURM_JOB_ID", "4242");
	topo_read_ok(&t);
	cr_assert_str_eq(t.job_name, "4242");
	hpct__topo_free(&t);
	topo_env_set("TORCHELASTIC_RUN_ID", "none");
	topo_read_ok(&t);
	cr_assert_str_eq(t.job_name, "4242", "TORCHELASTIC_RUN_ID=none must be skipped");
	hpct__topo_free(&t);
	topo_env_set("TORCHELASTIC_RUN_ID", "run-7");
	topo_read_ok(&t);
	cr_assert_str_eq(t.job_name, "run-7");
	cr_assert_eq(t.job, hpct__hash("run-7", 5, 0));
	hpct__topo_free(&t);
	topo_env_set("HPCT_JOB_ID", "mine");
	topo_read_ok(&t);
	cr_assert_str_eq(t.job_name, "mine");
	hpct__topo_free(&t);
	char longid[300];
	memset(longid, 'j', 299);
	longid[299] = 0;
	topo_env_set("HPCT_JOB_ID", longid);
	topo_read_ok(&t);
	cr_assert_eq(strlen(t.job_name), sizeof(t.job_name) - 1);
	hpct__topo_free(&t);
	topo_env_set("MASTER_PORT", "65536");
	topo_read_bad(HPCT_EBADENV, "MASTER_PORT=65536 is out of range");
}

Test(topo, epoch_fallbacks)
{
	struct hpct_topo t;
	topo_env_world(0, 2);
	topo_read_ok(&t);
	cr_assert_eq(t.epoch, 0);
	hpct__topo_free(&t);
	topo_env_set("JOB_RESTART_COUNT", "5");
	topo_read_ok(&t);
	cr_assert_eq(t.epoch, 5);
	hpct__topo_free(&t);
	topo_env_set("TORCHELASTIC_RESTART_COUNT", "3");
	topo_read_ok(&t);
	cr_assert_eq(t.epoch, 3);
	hpct__topo_free(&t);
	topo_env_set("HPCT_EPOCH", "12");
	topo_read_ok(&t);
	cr_assert_eq(t.epoch, 12);
	hpct__topo_free(&t);
	topo_env_set("HPCT_EPOCH", "-1");
	topo_read_bad(HPCT_EBADENV, "HPCT_EPOCH=-1 is out of range");
	topo_env_unset("HPCT_EPOCH");
	topo_env_set("TORCHELASTIC_RESTART_COUNT", "two");
	topo_read_bad(HPCT_EBADENV, "TORCHELASTIC_RESTART_COUNT='two' is not an integer");
}

Test(topo, socket_settings)
{
	struct hpct_topo t;
	topo_env_world(0, 2);
	topo_read_ok(&t);
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
		topo_env_set("HPCT_SOCKET_FAMILY", fam[i].v);
		topo_read_ok(&t);
		cr_assert_eq(t.family, fam[i].family, "%s", fam[i].v);
		hpct__topo_free(&t);
	}
	topo_env_set("HPCT_SOCKET_IFNAME", "^docker,lo");
	topo_env_set("HPCT_USE_ROOTLESS", "1");
	topo_env_set("HPCT_TIMEOUT", "2.5");
	topo_read_ok(&t);
	cr_assert_str_eq(t.ifname, "^docker,lo");
	cr_assert_eq(t.want_rootless, 1);
	cr_assert_float_eq(t.timeout_s, 2.5, 1e-9);
	hpct__topo_free(&t);
	topo_env_set("HPCT_USE_ROOTLESS", "maybe");
	topo_read_bad(HPCT_EBADENV, "HPCT_USE_ROOTLESS='maybe' is not a boolean");
	topo_env_unset("HPCT_USE_ROOTLESS");
	topo_env_set("HPCT_TIMEOUT", "-3");
	topo_read_bad(HPCT_EBADENV, "HPCT_TIMEOUT='-3'");
	topo_env_unset("HPCT_TIMEOUT");
	topo_env_set("HPCT_SOCKET_FAMILY", "ipx");
	topo_read_bad(HPCT_EBADENV, "HPCT_SOCKET_FAMILY='ipx' is not AF_INET, AF_INET6");
}

Test(topo, free_is_safe)
{
	struct hpct_topo t;
	memset(&t, 0, sizeof(t));
	hpct__topo_free(&t);
	hpct__topo_free(NULL);
	topo_env_world(1, 4);
	topo_env_set("HPCT_HOSTS", "a,b");
	topo_read_ok(&t);
	hpct__topo_free(&t);
	cr_assert_null(t.hosts);
	cr_assert_null(t.node_of);
	cr_assert_eq(t.nnodes, 0);
	hpct__topo_free(&t);
}

Test(topo, hundred_thousand_ranks_on_ten_thousand_nodes)
{
	struct hpct_topo t;
	topo_env_world(99999, 100000);
	topo_env_set("LOCAL_RANK", "9");
	topo_env_set("GROUP_RANK", "9999");
	topo_env_set("SLURM_JOB_NODELIST", "gpu-[00001-10000]");
	topo_env_set("SLURM_TASKS_PER_NODE", "10(x10000)");
	topo_read_ok(&t);
	cr_assert_eq(t.nnodes, 10000);
	cr_assert_str_eq(t.hosts[9999], "gpu-10000");
	cr_assert_eq(t.node, 9999);
	cr_assert_eq(t.local_rank, 9);
	cr_assert_eq(t.max_local, 10);
	cr_assert_eq(t.node_of[12345], 1234);
	cr_assert_eq(t.local_of[12345], 5);
	hpct__topo_free(&t);

	/* Uneven: 5 ranks on the first half of the nodes, 15 on the second. */
	topo_env_set("HPCT_TASKS_PER_NODE", "5(x5000),15(x5000)");
	topo_env_set("RANK", "25000");
	topo_env_set("LOCAL_RANK", "0");
	topo_env_set("GROUP_RANK", "5000");
	topo_read_ok(&t);
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
	topo_env_world(77777, 100000);
	topo_env_set("LOCAL_RANK", "7");
	size_t cap = 100000 * 24 + 1, o = 0;
	char *text = malloc(cap);
	cr_assert(text);
	/* Ranks listed backwards, so first appearance is not rank order. */
	for (int r = 99999; r >= 0; r--)
		o += (size_t)snprintf(text + o, cap - o, "%d 10.%d.%d.1:%d\n", r, r / 10 / 256,
		                      r / 10 % 256, 20000 + r % 10);
	topo_env_hostfile(text);
	free(text);
	topo_read_ok(&t);
	cr_assert_eq(t.nnodes, 10000);
	cr_assert_str_eq(t.hosts[0], "10.39.15.1");
	cr_assert_eq(t.node, 10000 - 1 - 7777);
	cr_assert_eq(t.local_rank, 7);
	cr_assert_eq(t.port_of[77777], 20007);
	cr_assert_eq(t.max_local, 10);
	hpct__topo_free(&t);
}
