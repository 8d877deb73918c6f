/* hpct-bench --scenario fanout: B bytes from S sources to R receivers
 * (hpct_fanout over the world of S + R ranks, rootless path), each plan of
 * the library against the others in the same processes:
 *
 *   hpct-bench --scenario fanout --bytes 64M,512M --sources 1,4
 *              --receivers 7,31,63 [--plan waves,pull,tree] [--repeat R]
 *              [--nodes K] [--chunk SIZE] [--concurrent C]
 *              [--budget default,none,SIZE] [--json FILE] [--port P]
 *
 * One launch per (bytes, sources, receivers, budget); in it the plans
 * alternate phase by phase, --repeat times each, after one untimed round
 * of them all (the first fan-out of a process took twice as long as the
 * next ones here, whichever plan it ran).  A phase: the sources
 * write the pattern of the phase's version (not timed), every rank enters
 * a world barrier, then calls hpct_fanout (sources held = want, receivers
 * held = 0); timed from the first rank out of the barrier until the last
 * rank's fan-out returned.  Receivers then check every byte.  Sources are
 * spread over the ranks (rank j*N/S).  With --concurrent C each rank runs
 * C fan-outs at once, one thread and one world each (a group is used by
 * one thread at a time: fanout.h), the worlds C blocks of ports apart, C
 * buffers of B; the ranks then sample their open descriptors every
 * millisecond during the fan-outs (without it: counted when they report).
 * --budget sets the process-wide in-flight budget of the ranks
 * (HPCT_INFLIGHT_BYTES): default leaves the library's, none sets it and
 * HPCT_INFLIGHT_TRANSFERS out of reach, SIZE sets the bytes; a launch each.
 * Peak resident memory is VmHWM, reset (clear_refs) before each phase.
 * The ranks' side is bench_fanout_rank.c.
 *
 * The bound of a plan, in the units a cluster has (one link per process,
 * each way): B / bw x rounds, bw the loopback TCP bandwidth of one pair of
 * processes measured in the same run, rounds what the plan needs at
 * least: waves ceil(log2((S+R)/S)) (the holders double each wave), tree
 * ceil(log2(R+1)) (the lowest source's binomial tree; the others idle),
 * pull ceil(R/S) (each receiver takes the whole buffer from one of the S
 * sources, round robin).  fraction = bound / median.  On this
 * machine every receiver's bytes cross the same loopback and the same
 * cores, so a second figure, copy_ms = R x C x B / (the bandwidth of as
 * many pairs at once as there are cores), is what the machine can do.
 *
 * --link RATE (tc's units: 2gbit) gives every loopback node a link of its
 * own, as a cluster's nodes have: the run goes into a network namespace of
 * its own, where an htb class per node address caps what leaves it at
 * RATE (tc on lo, classed by source address; rootless ranks serve their
 * chunks from their node's address; a socket that did not bind sends
 * from node 0's), one rank per node unless --nodes says otherwise.  bw is then measured through
 * node 0's link, and the machine's bandwidth before the classes are made. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hpct/fanout.h"
#include "hpct/hpct.h"
#include "tools/bench/bench.h"
#include "tools/common/bench_env.h"
#include "tools/common/bench_measure.h"
#include "tools/common/bench_progress.h"

#define MAX_LIST   8
#define MAX_REPEAT 32
#define MAX_PLANS  3

static int waves_rounds_i(int s, int r)
{
	int w = 0;
	for (long h = s; h < s + r; h *= 2)
		w++;
	return w;
}

static double waves_rounds(int s, int r)
{
	return waves_rounds_i(s, r);
}

static double tree_rounds(int s, int r)
{
	(void)s; /* the tree is the lowest source and the receivers; the others idle */
	return waves_rounds_i(1, r);
}

static double pull_rounds(int s, int r)
{
	return (r + s - 1) / s; /* each receiver takes it all from one source */
}

/* The plans, and the least rounds of B / bw each needs with one link per
 * process. */
static const struct plan {
	const char *name;
	enum hpct_fanout_plan plan;
	double (*rounds)(int sources, int receivers);
} plans[MAX_PLANS] = {
	{ "waves", HPCT_FANOUT_WAVES, waves_rounds },
	{ "pull", HPCT_FANOUT_PULL, pull_rounds },
	{ "tree", HPCT_FANOUT_TREE, tree_rounds },
};

/* Runs `prog` (tc or ip) with `args` (NULL-ended); 0 or -1, said. */
static int run_ip(const char *prog, const char *const *args)
{
	const char *argv[24] = { prog };
	int n = 1;
	for (; args[n - 1] && n < 23; n++)
		argv[n] = args[n - 1];
	argv[n] = NULL;
	pid_t pid = fork();
	if (pid == 0) { /* its warnings (htb's quantum) are not this run's */
		int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
		if (null >= 0)
			dup2(null, 2);
		execvp(prog, (char *const *)argv);
		_exit(127);
	}
	int st;
	if (pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	fprintf(stderr, "hpct-bench: --link:");
	for (int i = 0; i < n; i++)
		fprintf(stderr, " %s", argv[i]);
	fprintf(stderr, " failed (iproute2, in this run's own network namespace)\n");
	return -1;
}

static int run_tc(const char *const *args)
{
	return run_ip("tc", args);
}

/* --link: every node's egress on lo capped at `rate`, in a network
 * namespace of this process's own; 0 or -1, said. */
static int make_links(const char *rate, int nodes)
{
	if (bench_enter_netns() < 0)
		return -1;
	const char *root[] = { "qdisc", "add", "dev",     "lo",   "root", "handle",
		               "1:",    "htb", "default", "ffff", NULL };
	/* Every packet a node's address sends is classed: also the acks and
	 * pull requests of sockets that did not bind, which leave from
	 * 127.0.0.1, node 0's (a u32 match on the IP length, to let small
	 * packets pass, matched whole chunks here too: not done) */
	if (run_tc(root) < 0)
		return -1;
	for (int k = 0; k < nodes; k++) {
		char id[16], src[32];
		snprintf(id, sizeof(id), "1:%x", k + 1);
		snprintf(src, sizeof(src), "127.0.0.%d/32", k + 1);
		const char *cls[] = { "class", "add", "dev",  "lo", "parent", "1:",   "classid",
			              id,      "htb", "rate", rate, "burst",  "256k", NULL };
		const char *flt[] = { "filter",   "add", "dev",  "lo",     "parent", "1:",
			              "protocol", "ip",  "prio", "2",      "u32",    "match",
			              "ip",       "src", src,    "flowid", id,       NULL };
		if (run_tc(cls) < 0 || run_tc(flt) < 0)
			return -1;
	}
	return 0;
}

/* One row: (bytes, sources, receivers, budget, plan). */
struct fan_row {
	uint64_t bytes;
	int s, r, budget, plan;
	int ok;
	double ms[MAX_REPEAT];
	struct bench_phase most; /* the most of each figure over its phases */
	char not_run[200];
};

static void most_of(struct bench_phase *m, const struct bench_phase *p)
{
	if (p->max_rss > m->max_rss)
		m->max_rss = p->max_rss;
	if (p->max_fds > m->max_fds)
		m->max_fds = p->max_fds;
	if (p->max_waves > m->max_waves)
		m->max_waves = p->max_waves;
	if (p->max_peers > m->max_peers)
		m->max_peers = p->max_peers;
	if (p->inflight_peak > m->inflight_peak)
		m->inflight_peak = p->inflight_peak;
	if (p->inflight_waits > m->inflight_waits)
		m->inflight_waits = p->inflight_waits;
	m->bytes = p->bytes; /* the same every phase */
}

static int parse_ints(const char *opt, const char *arg, int *out, int lo, int hi)
{
	char *copy = strdup(arg), *save = NULL;
	int n = 0;
	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		char *end;
		long v = strtol(t, &end, 10);
		if (*end || v < lo || v > hi || n == MAX_LIST) {
			fprintf(stderr, "hpct-bench: %s %s: want at most %d of %d..%d\n", opt, arg,
			        MAX_LIST, lo, hi);
			free(copy);
			return -1;
		}
		out[n++] = (int)v;
	}
	free(copy);
	return n;
}

static int parse_sizes(const char *opt, const char *arg, uint64_t *out)
{
	char *copy = strdup(arg), *save = NULL;
	int n = 0;
	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (n == MAX_LIST || !(out[n] = bench_parse_size(t))) {
			fprintf(stderr, "hpct-bench: %s %s: want at most %d sizes (64M, 1G)\n", opt,
			        arg, MAX_LIST);
			free(copy);
			return -1;
		}
		n++;
	}
	free(copy);
	return n;
}

/* --plan: names of plans[], each at most once, as indices. */
static int parse_plans(const char *arg, int *out)
{
	char *copy = strdup(arg), *save = NULL;
	int n = 0;
	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		int found = -1;
		for (int i = 0; i < MAX_PLANS; i++)
			if (strcmp(t, plans[i].name) == 0)
				found = i;
		for (int i = 0; i < n && found >= 0; i++)
			if (out[i] == found)
				found = -1;
		if (found < 0) {
			fprintf(stderr,
			        "hpct-bench: --plan %s: %s: want waves, pull and/or tree, "
			        "each once\n",
			        arg, t);
			free(copy);
			return -1;
		}
		out[n++] = found;
	}
	free(copy);
	return n > 0 ? n : -1;
}

/* A budget of --budget: default (-1: the library's), none (0) or bytes. */
static const char *budget_name(int64_t b, char *buf, size_t len)
{
	return b < 0 ? "default" : b == 0 ? "none" : bench_size_name((uint64_t)b, buf, len);
}

static int parse_budgets(const char *arg, int64_t *out)
{
	char *copy = strdup(arg), *save = NULL;
	int n = 0;
	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		uint64_t v = 0;
		if (n == MAX_LIST || (strcmp(t, "default") != 0 && strcmp(t, "none") != 0 &&
		                      !(v = bench_parse_size(t)))) {
			fprintf(stderr, "hpct-bench: --budget %s: want default, none or a size\n",
			        arg);
			free(copy);
			return -1;
		}
		out[n++] = strcmp(t, "default") == 0 ? -1 : (int64_t)v;
	}
	free(copy);
	return n;
}

static void budget_env(int64_t b)
{
	if (b < 0) {
		unsetenv("HPCT_INFLIGHT_BYTES");
		unsetenv("HPCT_INFLIGHT_TRANSFERS");
		return;
	}
	char v[32];
	snprintf(v, sizeof(v), "%llu", b ? (unsigned long long)b : 1ull << 50);
	setenv("HPCT_INFLIGHT_BYTES", v, 1);
	if (b == 0)
		setenv("HPCT_INFLIGHT_TRANSFERS", "1000000", 1);
	else
		unsetenv("HPCT_INFLIGHT_TRANSFERS");
}

static void usage(FILE *f)
{
	fprintf(f, "usage: hpct-bench --scenario fanout [--bytes SIZE[,SIZE..]] "
	           "[--sources S[,S..]]\n"
	           "                  [--receivers R[,R..]] [--plan waves,pull,tree] "
	           "[--repeat R]\n"
	           "                  [--nodes K] [--chunk SIZE] [--concurrent C]\n"
	           "                  [--budget default,none,SIZE] [--json FILE] [--port P] "
	           "[--timeout S]\n"
	           "                  [--link RATE] (every node its own link of RATE, 2gbit: "
	           "tc on lo)\n"
	           "B bytes from S sources to R receivers with hpct_fanout, each plan in the "
	           "same processes;\n"
	           "a combination whose buffers would pass 60%% of MemTotal is not run, and "
	           "said.\n");
}

static double median_ms(struct fan_row *r)
{
	return median_of(r->ms, r->ok);
}

int bench_fanout_main(int argc, char **argv)
{
	uint64_t sizes[MAX_LIST] = { 64ull << 20 };
	int srcs[MAX_LIST] = { 1 }, rcvs[MAX_LIST] = { 7 }, nsizes = 1, nsrcs = 1, nrcvs = 1;
	int order[MAX_PLANS] = { 0, 1, 2 }, nplans = 3, repeat = 3, nodes = 4, port = 15000;
	int conc = 1, sample = 0, nbudgets = 1;
	int64_t budgets[MAX_LIST] = { -1 };
	uint64_t chunk = 4u << 20;
	double timeout = 120;
	const char *json = NULL, *link = NULL;
	int nodes_set = 0;
	static const struct option opts[] = {
		{ "scenario", required_argument, NULL, 's' },
		{ "bytes", required_argument, NULL, 'b' },
		{ "sources", required_argument, NULL, 'S' },
		{ "receivers", required_argument, NULL, 'R' },
		{ "plan", required_argument, NULL, 'p' },
		{ "repeat", required_argument, NULL, 'r' },
		{ "nodes", required_argument, NULL, 'k' },
		{ "chunk", required_argument, NULL, 'c' },
		{ "concurrent", required_argument, NULL, 'C' },
		{ "budget", required_argument, NULL, 'B' },
		{ "json", required_argument, NULL, 'j' },
		{ "port", required_argument, NULL, 'P' },
		{ "timeout", required_argument, NULL, 't' },
		{ "link", required_argument, NULL, 'L' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "s:b:S:R:p:r:k:c:C:B:j:P:t:L:h", opts, NULL)) != -1) {
		int bad = 0;
		switch (c) {
		case 's':
			break;
		case 'b':
			bad = (nsizes = parse_sizes("--bytes", optarg, sizes)) < 0;
			break;
		case 'S':
			bad = (nsrcs = parse_ints("--sources", optarg, srcs, 1, 64)) < 0;
			break;
		case 'R':
			bad = (nrcvs = parse_ints("--receivers", optarg, rcvs, 1, 1023)) < 0;
			break;
		case 'p':
			bad = (nplans = parse_plans(optarg, order)) < 0;
			break;
		case 'r':
			repeat = atoi(optarg);
			break;
		case 'c':
			bad = !(chunk = bench_parse_size(optarg));
			break;
		case 'C':
			conc = atoi(optarg);
			sample = 1;
			break;
		case 'B':
			bad = (nbudgets = parse_budgets(optarg, budgets)) < 0;
			break;
		case 'j':
			json = optarg;
			break;
		case 'P':
			port = atoi(optarg);
			break;
		case 't':
			timeout = atof(optarg);
			break;
		case 'L':
			link = optarg;
			bad = strspn(optarg, "0123456789.") == 0 ||
			      (strcmp(optarg + strspn(optarg, "0123456789."), "mbit") != 0 &&
			       strcmp(optarg + strspn(optarg, "0123456789."), "gbit") != 0);
			if (bad)
				fprintf(stderr,
				        "hpct-bench: --link %s: want a rate in mbit or gbit "
				        "(2gbit)\n",
				        optarg);
			break;
		case 'k':
			nodes = atoi(optarg);
			nodes_set = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			bad = 1;
		}
		if (bad) {
			if (c != 'b' && c != 'S' && c != 'R' && c != 'p' && c != 'B' && c != 'L')
				usage(stderr);
			return 2;
		}
	}
	if (repeat < 1 || repeat > MAX_REPEAT || nodes < 1 || nodes > 254 || conc < 1 ||
	    conc > BENCH_FANOUT_MAX_CONC || port < 1024 || port > 60000 || timeout <= 0) {
		usage(stderr);
		return 2;
	}
	char exe[4096];
	ssize_t sl = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (sl <= 0)
		return 1;
	exe[sl] = 0;
	signal(SIGPIPE, SIG_IGN);

	/* what the figures stand on, measured before any rank runs */
	int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN), fd[2];
	double rtt = loopback_pair(fd) == 0 ? echo_round_trip(fd[0], fd[0], fd[1], fd[1], 200) : -1;
	double fork_exec = fork_exec_cost("/bin/true", 200);
	double bwall = loopback_bandwidth(ncpu > 1 ? ncpu : 1, 256u << 20, (size_t)chunk, 5);
	int most = 0; /* --link: a node per rank of the largest run */
	for (int i = 0; i < nsrcs; i++)
		for (int j = 0; j < nrcvs; j++)
			most = srcs[i] + rcvs[j] > most ? srcs[i] + rcvs[j] : most;
	if (link && !nodes_set)
		nodes = most > 254 ? 254 : most;
	if (link && make_links(link, nodes) < 0)
		return 1;
	/* through a node's link with --link: 128 MiB, not 256, at its rate
	 * (32 MiB measured 380 MB/s through 4gbit, which 64 MiB x 63 beat) */
	double bw1 = loopback_bandwidth(1, link ? 128u << 20 : 256u << 20, (size_t)chunk, 5);
	uint64_t limit = bench_mem_total() / 10 * 6;

	int nrows = nsizes * nsrcs * nrcvs * nbudgets * nplans, run_id = 0, failed = 0;
	struct fan_row *rows = calloc((size_t)nrows, sizeof(*rows));
	char plan_order[MAX_PLANS + 1] = "";
	for (int i = 0; i < nplans; i++) /* the ranks' word for a plan: its enum value */
		plan_order[i] = (char)('0' + plans[order[i]].plan);
	setenv_int("HPCT_BENCH_FANOUT_CONC", conc);
	setenv_int("HPCT_BENCH_FANOUT_SAMPLE", sample);
	setenv_int("HPCT_BENCH_FANOUT_CHUNK", (long)chunk);
	setenv_int("HPCT_BENCH_FANOUT_PHASES", (repeat + 1) * nplans);
	setenv("HPCT_BENCH_FANOUT_PLANS", plan_order, 1);
	struct fan_row *row = rows;
	bench_progress_start("hpct-bench");
	for (int bi = 0; bi < nsizes; bi++)
		for (int si = 0; si < nsrcs; si++)
			for (int ri = 0; ri < nrcvs; ri++)
				for (int ui = 0; ui < nbudgets; ui++, row += nplans) {
					int s = srcs[si], r = rcvs[ri], n = s + r;
					int k = nodes < n ? nodes : n;
					for (int p = 0; p < nplans; p++)
						row[p] = (struct fan_row){ .bytes = sizes[bi],
							                   .s = s,
							                   .r = r,
							                   .budget = ui,
							                   .plan = order[p] };
					uint64_t need = (uint64_t)n * (uint64_t)conc * sizes[bi];
					if (limit && need > limit) {
						for (int p = 0; p < nplans; p++)
							snprintf(
							        row[p].not_run,
							        sizeof(row[p].not_run),
							        "%d processes x %d x %.0f MiB = "
							        "%.1f "
							        "GiB of buffers, more than 60%% of "
							        "MemTotal (%.1f GiB)",
							        n, conc, sizes[bi] / 1048576.0,
							        need / 1073741824.0,
							        limit / 0.6 / 1073741824.0);
						continue;
					}
					setenv_int("HPCT_BENCH_FANOUT_BYTES", (long)sizes[bi]);
					setenv_int("HPCT_BENCH_FANOUT_SOURCES", s);
					budget_env(budgets[ui]);
					struct bench_phase ph[(MAX_REPEAT + 1) * MAX_PLANS];
					/* a world's ports (as hpct-bench's), one
					 * block per concurrent fan-out */
					int per = (n + k - 1) / k, stride = 4 * per + 2;
					setenv_int("HPCT_BENCH_FANOUT_STRIDE", stride);
					bench_progress_at("fanout of %.0f MiB, %d source(s) to %d, "
					                  "budget %d: %d phases (row %ld of %d)",
					                  sizes[bi] / 1048576.0, s, r, ui,
					                  (repeat + 1) * nplans,
					                  (long)(row - rows) + 1, nrows);
					if (bench_phases_once(exe, "fanout", n, k, 1,
					                      port + (run_id % 2) * conc * stride,
					                      run_id, timeout,
					                      (repeat + 1) * nplans, ph) < 0) {
						failed = 1;
						run_id++;
						continue;
					}
					run_id++;
					for (int q = nplans; q < (repeat + 1) * nplans; q++) {
						struct fan_row *fr = &row[q % nplans];
						fr->ms[fr->ok++] = ph[q].ms;
						most_of(&fr->most, &ph[q]);
					}
				}
	budget_env(-1);
	bench_progress_stop();

	FILE *jf = json ? fopen(json, "w") : NULL;
	if (json && !jf)
		fprintf(stderr, "hpct-bench: cannot write %s: %s\n", json, strerror(errno));
	if (jf)
		fprintf(jf,
		        "{\"rtt_ms\":%.4f,\"fork_exec_ms\":%.4f,\"bw_pair_mbs\":%.1f,"
		        "\"bw_all_mbs\":%.1f,\"cpus\":%d,\"link\":\"%s\",\"results\":[",
		        rtt * 1000, fork_exec * 1000, bw1 / 1e6, bwall / 1e6, ncpu,
		        link ? link : "loopback");
	printf("%-7s %3s %4s %-5s %-7s %4s %6s %10s %10s %10s %6s %9s %8s %9s %5s %5s %10s "
	       "%7s\n",
	       "bytes", "S", "R", "plan", "budget", "conc", "repeat", "median_ms", "min_ms",
	       "max_ms", "rounds", "bound_ms", "fraction", "copy_ms", "waves", "peers",
	       "max_rss_mb", "max_fds");
	int nj = 0;
	for (int i = 0; i < nrows; i++) {
		struct fan_row *r = &rows[i];
		char bname[24], bb[24];
		const char *budget = budget_name(budgets[r->budget], bb, sizeof(bb));
		bench_size_name(r->bytes, bname, sizeof(bname));
		if (!r->ok) {
			printf("%-7s %3d %4d %-5s %-7s %4d %6d %10s\n", bname, r->s, r->r,
			       plans[r->plan].name, budget, conc, 0,
			       r->not_run[0] ? "not run" : "failed");
			continue;
		}
		double med = median_ms(r), rounds = plans[r->plan].rounds(r->s, r->r);
		double bound = bw1 > 0 ? (double)conc * r->bytes / bw1 * rounds * 1000 : -1;
		double copy = bwall > 0 ? (double)r->r * conc * r->bytes / bwall * 1000 : -1;
		printf("%-7s %3d %4d %-5s %-7s %4d %6d %10.1f %10.1f %10.1f %6.2f %9.1f %8.3f "
		       "%9.1f %5d %5d %10.1f %7ld\n",
		       bname, r->s, r->r, plans[r->plan].name, budget, conc, r->ok, med, r->ms[0],
		       r->ms[r->ok - 1], rounds, bound, bound / med, copy, r->most.max_waves,
		       r->most.max_peers, r->most.max_rss / 1024.0, r->most.max_fds);
		if (jf)
			fprintf(jf,
			        "%s{\"scenario\":\"fanout\",\"path\":\"rootless\",\"plan\":\"%s\","
			        "\"bytes\":%llu,\"sources\":%d,\"receivers\":%d,\"ranks\":%d,"
			        "\"nodes\":%d,"
			        "\"concurrent\":%d,\"budget\":\"%s\",\"chunk\":%llu,"
			        "\"median_ms\":%.3f,\"min_ms\":%.3f,\"max_ms\":%.3f,\"repeat\":%d,"
			        "\"rounds\":%.3f,\"bound_ms\":%.3f,\"fraction\":%.4f,"
			        "\"copy_bound_ms\":%.3f,\"waves\":%d,\"max_peers\":%d,"
			        "\"max_rss_kb\":%ld,\"max_fds\":%ld,\"fds_sampled\":%s,"
			        "\"inflight_peak_bytes\":%ld,\"inflight_waits\":%ld,"
			        "\"bytes_received\":%ld}",
			        nj++ ? "," : "", plans[r->plan].name, (unsigned long long)r->bytes,
			        r->s, r->r, r->s + r->r, nodes < r->s + r->r ? nodes : r->s + r->r,
			        conc, budget, (unsigned long long)chunk, med, r->ms[0],
			        r->ms[r->ok - 1], r->ok, rounds, bound, bound / med, copy,
			        r->most.max_waves, r->most.max_peers, r->most.max_rss,
			        r->most.max_fds, sample ? "true" : "false", r->most.inflight_peak,
			        r->most.inflight_waits, r->most.bytes);
	}
	if (jf) {
		fprintf(jf, "]}\n");
		fclose(jf);
	}
	/* each plan against waves, the same bytes, sources, receivers, budget */
	for (int i = 0; i < nrows; i += nplans) {
		struct fan_row *w = NULL;
		for (int p = 0; p < nplans; p++)
			if (rows[i + p].plan == 0 && rows[i + p].ok)
				w = &rows[i + p];
		if (!w || nplans < 2)
			continue;
		char bb[24], sz[24];
		printf("fanout %s S=%d R=%d budget %s: median",
		       bench_size_name(w->bytes, sz, sizeof(sz)), w->s, w->r,
		       budget_name(budgets[w->budget], bb, sizeof(bb)));
		for (int p = 0, first = 1; p < nplans; p++)
			if (rows[i + p].ok && rows[i + p].plan != 0) {
				printf("%s %s/waves %.2f", first ? "" : ",",
				       plans[rows[i + p].plan].name,
				       median_of(rows[i + p].ms, rows[i + p].ok) /
				               median_of(w->ms, w->ok));
				first = 0;
			}
		printf("\n");
	}
	for (int i = 0; i < nrows; i += nplans) {
		char sz[24];
		if (rows[i].not_run[0])
			printf("fanout %s S=%d R=%d: not run: %s\n",
			       bench_size_name(rows[i].bytes, sz, sizeof(sz)), rows[i].s, rows[i].r,
			       rows[i].not_run);
	}
	printf("loopback TCP bandwidth, %llu KiB writes: one pair of processes %.0f MB/s%s; "
	       "%d pairs at once (this machine's %d cores) %.0f MB/s in all (median of 5 of "
	       "256 MiB each); bound_ms = C x B / (one pair's) x rounds (waves "
	       "ceil(log2((S+R)/S)), tree ceil(log2(R+1)), pull ceil(R/S)); copy_ms = R x C x B / "
	       "(all pairs')\n",
	       (unsigned long long)(chunk >> 10), bw1 / 1e6,
	       link ? " (through one node's link, 128 MiB each)" : "", ncpu, ncpu, bwall / 1e6);
	if (link)
		printf("links: every one of the %d loopback nodes sends at most %s (tc htb on lo, "
		       "by source address, in a network namespace of this run's own); %d ranks a "
		       "node at most\n",
		       nodes, link, (most + nodes - 1) / nodes);
	printf("each launch ran one untimed round of its plans first; peak resident memory: "
	       "VmHWM, reset before each phase; descriptors: %s\n",
	       sample ? "the most of a rank, sampled every 1 ms during the fan-outs"
	              : "the most of a rank, counted when it reported (sampled with "
	                "--concurrent)");
	if (rtt > 0)
		printf("loopback TCP round trip between two processes: %.1f us (median of 200)\n",
		       rtt * 1e6);
	if (fork_exec > 0)
		printf("fork+exec of /bin/true, to its exit: %.2f ms (median of 200)\n",
		       fork_exec * 1000);
	free(rows);
	return failed ? 1 : 0;
}
