/* hpct-bench-sim: the rootless path at sizes this machine cannot launch,
 * beside the standard path and NCCL's root doing the same work.
 *
 * rootless: simulated.  libhpct's own engine (connections, handshakes,
 * queues, retries, pulls) and collectives (rootless/coll.c), unchanged, run
 * for N simulated ranks in one process: each rank is a coroutine with its
 * own world, started by the library's own hpct__world_start as
 * hpct_world_create starts one, and driven through the public collectives;
 * the transport (the same table of functions as TCP, sim_transport.c) is
 * simulated, and hpct__now() reads a simulated clock (sim_sched.c).
 *
 * standard, nccl-root: modelled (sim_roots.c).  The standard path's store
 * on rank 0 and its clients, request by request as bootstrap/stdpath makes
 * and serves them, with the store's costs measured on the real server; and
 * NCCL's root exchange, with NCCL's own stagger past 256 ranks.  They run
 * as actors on the same simulated transport and cores, so their counts come
 * from the model, not from the library.
 *
 * The same work on every path: --work join is a world barrier, --work cold
 * a world allgather of 64 bytes and a barrier (NCCL's row is its root
 * exchange either way: what it does before its own collectives).  Ranks sit
 * --ranks-per-node to a node, whose NIC all their bytes share.  Time
 * advances by a model of latency, bandwidth and CPU per message, per wakeup
 * and per connection, calibrated on this machine at start and printed.
 * Ranks run on a core each (a cluster), or on P shared cores (--cores P).
 *
 * The model check: the cold start of 64 and 256 ranks forked in turn by a
 * launcher on this machine's cores, each rank's start charged as a real
 * rank's was measured, against real runs of hpct-bench --scenario cold;
 * within ±25% on both paths, or the output says the projections are not
 * validated here, and by how much the model misses.
 *
 * Started by `hpct-bench --scenario sim`, which passes its arguments on. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bootstrap/base/util.h"
#include "tools/common/bench_measure.h"
#include "tools/common/bench_plot.h"
#include "tools/common/bench_progress.h"
#include "tools/sim/sim.h"

#define MAX_N     16
#define TOLERANCE 25.0 /* percent: the model check's */

/* The check's sizes: what this machine launches in seconds, and far
 * enough apart for the model's growth with N to show. */
static const int check_ns[] = { 64, 256 };
#define NCHECK (int)(sizeof(check_ns) / sizeof(check_ns[0]))
/* real runs of each: a run at 64 ranks is over in tens of ms, where a
 * burst of other work on a shared machine shows; the median of 5 sees
 * through two */
#define CHECK_REPEAT 5

/* ------------------------------------------------------ real runs */

/* Medians of real cold runs of each N on both paths, from hpct-bench's
 * JSON (0 where one is missing); 0, or -1 when hpct-bench failed. */
static int real_cold(const char *bench, int port, double real[][2])
{
	char json[] = "/tmp/hpct-sim-real-XXXXXX";
	int fd = mkstemp(json);
	if (fd < 0)
		return -1;
	close(fd);
	char list[64] = "", portarg[16], repeat[16];
	snprintf(repeat, sizeof(repeat), "%d", CHECK_REPEAT);
	for (int i = 0; i < NCHECK; i++)
		snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%d", i ? "," : "",
		         check_ns[i]);
	snprintf(portarg, sizeof(portarg), "%d", port);
	pid_t pid = fork();
	if (pid == 0) {
		int dn = open("/dev/null", O_WRONLY);
		dup2(dn, 1);
		/* 16 loopback nodes: the ports of 256 ranks stay within 264 */
		execl(bench, bench, "--scenario", "cold", "--ranks", list, "--path",
		      "rootless,standard", "--repeat", repeat, "--nodes", "16", "--port", portarg,
		      "--timeout", "30", "--json", json, (char *)NULL);
		_exit(127);
	}
	int st = 0;
	waitpid(pid, &st, 0);
	FILE *f = fopen(json, "r");
	char text[8192] = "";
	size_t got = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
	text[got] = 0;
	if (f)
		fclose(f);
	unlink(json);
	for (int i = 0; i < NCHECK; i++)
		for (int p = 0; p < 2; p++) {
			char pat[96];
			snprintf(pat, sizeof(pat), "\"path\":\"%s\",\"ranks\":%d,",
			         p ? "standard" : "rootless", check_ns[i]);
			const char *at = strstr(text, pat),
			           *m = at ? strstr(at, "\"median_ms\":") : NULL;
			real[i][p] = m ? atof(m + 12) : 0;
		}
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* The check: the model of a real cold run against real runs.  Prints the
 * figures and the verdict, writes them as the JSON's "check"; 0, or -1
 * when the real runs failed. */
static int model_check(const char *bench, int port, int cores, unsigned seed, FILE *jf)
{
	double real[NCHECK][2];
	/* what else this machine was doing (before the real runs, whose own
	 * hundreds of processes would count) */
	double load[1] = { -1 };
	getloadavg(load, 1);
	int rc = real_cold(bench, port, real);
	printf("\nmodel check: cold start (world allgather of 64 bytes + barrier), every rank "
	       "forked in turn by a launcher\non %d shared cores (%s), each start costing what "
	       "a real rank's cost here; against real runs\n(hpct-bench --scenario cold, "
	       "medians of %d; load average %.1f before them)\n",
	       cores, "this machine's, or --cores", CHECK_REPEAT, load[0]);
	if (jf)
		fprintf(jf, ",\"check\":{\"cores\":%d,\"tolerance_pct\":%.0f,\"rows\":[", cores,
		        TOLERANCE);
	int worst_i = -1, worst_p = 0, validated = rc == 0;
	double worst = 0;
	char misses[512] = "";
	for (int i = 0; i < NCHECK; i++) {
		for (int p = 0; p < 2; p++) {
			struct sim_run run = { .path = &sim_paths[p ? SIM_STANDARD : SIM_ROOTLESS],
				               .n = check_ns[i],
				               .cold = 1,
				               .cores = cores,
				               .per_node = check_ns[i], /* one machine */
				               .launch = 1,
				               .seed = seed };
			hpct__clock = sim_clock;
			struct sim_result r = simulate(&run);
			double err = real[i][p] > 0 ? (r.ms - real[i][p]) / real[i][p] * 100 : NAN;
			const char *name = run.path->name;
			printf("  N=%-4d %-9s model %8.1f ms   real %8.1f ms   error %+6.1f%%   "
			       "(model CPU, ms: launcher %.1f, rank starts %.1f, rest of the "
			       "ranks %.1f, store %.1f)\n",
			       check_ns[i], name, r.ms, real[i][p], err, r.cpu_launcher * 1e3,
			       r.cpu_start * 1e3, r.cpu_ranks * 1e3, r.cpu_root * 1e3);
			if (jf)
				fprintf(jf,
				        "%s{\"ranks\":%d,\"path\":\"%s\",\"model_ms\":%.3f,"
				        "\"real_ms\":%.3f,\"error_pct\":%.2f}",
				        i + p ? "," : "", check_ns[i], name, r.ms, real[i][p],
				        isnan(err) ? 0.0 : err);
			if (r.failed || isnan(err) || fabs(err) > TOLERANCE) {
				validated = 0;
				if (!isnan(err))
					snprintf(misses + strlen(misses),
					         sizeof(misses) - strlen(misses),
					         "%s%s N=%d %+.1f%%", misses[0] ? ", " : "", name,
					         check_ns[i], err);
			}
			if (!isnan(err) && fabs(err) > worst) {
				worst = fabs(err);
				worst_i = i;
				worst_p = p;
			}
		}
	}
	if (rc != 0)
		printf("model check: NOT validated on this machine: the real runs failed (see "
		       "above), so nothing was compared\n");
	else if (validated)
		printf("model check: validated on this machine: the model is within ±%.0f%% of "
		       "every real run (worst: %s N=%d, %.1f%%)\n",
		       TOLERANCE, worst_p ? "standard" : "rootless",
		       worst_i >= 0 ? check_ns[worst_i] : 0, worst);
	else
		printf("model check: NOT validated on this machine: the model misses the real runs "
		       "by more than ±%.0f%%: %s; the projections above are not validated here\n",
		       TOLERANCE, misses);
	if (jf)
		fprintf(jf, "],\"validated\":%s}", validated ? "true" : "false");
	return rc;
}

/* --------------------------------------------------------------- main */

static void usage(FILE *f)
{
	fprintf(f, "usage: hpct-bench --scenario sim --ranks N[,N..] [--work join|cold]\n"
	           "                  [--cores P] [--ranks-per-node K] [--spread MS] [--seed S]\n"
	           "                  [--latency US] [--bandwidth MBPS] [--json FILE] [--plot "
	           "FILE.png]\n"
	           "                  [--model-from FILE.json] [--no-check] [--port P]\n"
	           "                  [--max-rss MB]\n"
	           "(this is hpct-bench-sim; hpct-bench --scenario sim starts it)\n");
}

static int bad_number(const char *opt, const char *arg, double *out, double min)
{
	char *end;
	double v = strtod(arg, &end);
	if (*end || !(v >= min)) {
		fprintf(stderr, "hpct-bench: %s %s: want a number of at least %g\n", opt, arg, min);
		return 1;
	}
	*out = v;
	return 0;
}

int main(int argc, char **argv)
{
	int ns[MAX_N], k = 0, cores = 0, check = 1, cold = 0, per_node = 8, port = 17300;
	unsigned seed = 1;
	double spread = 1e-3, latency = -1, bandwidth = -1, v;
	const char *json = NULL, *from = NULL, *plot = NULL;
	static const struct option opts[] = { { "model-from", required_argument, NULL, 'm' },
		                              { "latency", required_argument, NULL, 'L' },
		                              { "bandwidth", required_argument, NULL, 'B' },
		                              { "plot", required_argument, NULL, 'G' },
		                              { "ranks", required_argument, NULL, 'n' },
		                              { "ranks-per-node", required_argument, NULL, 'K' },
		                              { "seed", required_argument, NULL, 'S' },
		                              { "cores", required_argument, NULL, 'c' },
		                              { "work", required_argument, NULL, 'w' },
		                              { "spread", required_argument, NULL, 's' },
		                              { "json", required_argument, NULL, 'j' },
		                              { "port", required_argument, NULL, 'P' },
		                              { "no-check", no_argument, NULL, 'x' },
		                              { "max-rss", required_argument, NULL, 'M' },
		                              { "help", no_argument, NULL, 'h' },
		                              { NULL, 0, NULL, 0 } };
	int c;
	while ((c = getopt_long(argc, argv, "n:S:c:w:s:j:xm:G:L:B:K:P:M:h", opts, NULL)) != -1) {
		switch (c) {
		case 'L':
			if (bad_number("--latency", optarg, &v, 1e-3))
				return 2;
			latency = v * 1e-6;
			break;
		case 'B':
			if (bad_number("--bandwidth", optarg, &v, 1e-3))
				return 2;
			bandwidth = v * 1e6;
			break;
		case 'm':
			from = optarg;
			break;
		case 'G':
			plot = optarg;
			break;
		case 'n': {
			char *dup = strdup(optarg), *save = NULL;
			for (char *tok = strtok_r(dup, ",", &save); tok;
			     tok = strtok_r(NULL, ",", &save)) {
				char *end;
				long n = strtol(tok, &end, 10);
				if (*end || n < 2 || n > 131072 || k == MAX_N) {
					fprintf(stderr,
					        "hpct-bench: --ranks %s: want up to %d sizes of "
					        "2..131072\n",
					        optarg, MAX_N);
					free(dup);
					return 2;
				}
				ns[k++] = (int)n;
			}
			free(dup);
			break;
		}
		case 'K':
			if (bad_number("--ranks-per-node", optarg, &v, 1))
				return 2;
			per_node = (int)v;
			break;
		case 'S':
			seed = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'c':
			if (bad_number("--cores", optarg, &v, 1))
				return 2;
			cores = (int)v;
			break;
		case 'w':
			if (strcmp(optarg, "cold") == 0)
				cold = 1;
			else if (strcmp(optarg, "join") != 0) {
				fprintf(stderr, "hpct-bench: --work %s: want join or cold\n",
				        optarg);
				return 2;
			}
			break;
		case 's':
			if (bad_number("--spread", optarg, &v, 0))
				return 2;
			spread = v / 1000;
			break;
		case 'j':
			json = optarg;
			break;
		case 'P':
			if (bad_number("--port", optarg, &v, 1024))
				return 2;
			if (v > 64000) {
				fprintf(stderr, "hpct-bench: --port %s: want 1024..64000\n",
				        optarg);
				return 2;
			}
			port = (int)v;
			break;
		case 'x':
			check = 0;
			break;
		case 'M':
			if (bad_number("--max-rss", optarg, &v, 1))
				return 2;
			sim_max_rss_kb = (long)(v * 1024);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (k == 0) {
		usage(stderr);
		return 2;
	}
	for (int i = 0; i < k; i++)
		if (cold && ns[i] > 4096) {
			fprintf(stderr,
			        "hpct-bench: --work cold --ranks %d: every rank would hold all N "
			        "items "
			        "(N^2 bytes in one process); cold is simulated up to 4096 ranks, "
			        "join (a world barrier) at any size\n",
			        ns[i]);
			return 2;
		}
	if (plot && (strlen(plot) < 5 || strcmp(plot + strlen(plot) - 4, ".png") != 0)) {
		fprintf(stderr, "hpct-bench: --plot %s: want a file name ending in .png\n", plot);
		return 2;
	}
	char self[4096], bench[4200];
	ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (sl <= 0)
		return 1;
	self[sl] = 0;
	*strrchr(self, '/') = 0;
	snprintf(bench, sizeof(bench), "%s/hpct-bench", self);

	setvbuf(stdout, NULL, _IOLBF, 0);
	double t_all = measure_now();
	if (from && model_from(from) < 0)
		return 2;
	/* the calibration's ports, port..port+96; the check's real runs', from
	 * port+128 to port+391 */
	if (!from && calibrate(bench, port) < 0)
		return 1;
	/* what a reader needs to place the figures: this machine's kind */
	double fe = fork_exec_cost("/bin/true", 200), rtt = sim_rtt();
	printf("this machine: %d cores, fork+exec of /bin/true to its exit %.2f ms (median of "
	       "200), "
	       "loopback TCP round trip between two cores %.1f us (median of 400)\n",
	       sim_machine_cores(), fe * 1e3, rtt * 1e6);
	printf("model, %s%s:\n", from ? "from " : "calibrated on this machine", from ? from : "");
	model_print(stdout);
	struct model machine = sim_M;
	if (latency > 0)
		sim_M.lat = latency;
	if (bandwidth > 0)
		sim_M.bw = bandwidth;

	FILE *jf = json ? fopen(json, "w") : NULL;
	if (json && !jf)
		fprintf(stderr, "hpct-bench: cannot write %s: %s\n", json, strerror(errno));
	if (jf) {
		fprintf(jf, "{");
		sim_M = machine; /* the JSON's model is the machine's, for --model-from */
		model_json(jf);
		if (latency > 0)
			sim_M.lat = latency;
		if (bandwidth > 0)
			sim_M.bw = bandwidth;
		fprintf(jf,
		        ",\"work\":\"%s\",\"cores\":%d,\"ranks_per_node\":%d,\"seed\":%u,"
		        "\"latency_us\":%.3f,\"bandwidth_MBps\":%.1f,\"results\":[",
		        cold ? "cold" : "join", cores, per_node, seed, sim_M.lat * 1e6,
		        sim_M.bw / 1e6);
	}
	printf("\nsim: %s on every path; %s; %d ranks a node, sharing its NIC (%.0f MB/s);\n"
	       "ranks starting within %.1f ms (seed %u), process start not counted; one-way "
	       "latency %.1f us%s\n",
	       cold ? "cold (world allgather of 64 bytes + barrier)" : "join (world barrier)",
	       cores ? "ranks and roots sharing the cores given" : "a core for every rank and root",
	       per_node, sim_M.bw / 1e6, spread * 1000, seed, sim_M.lat * 1e6,
	       latency > 0 ? " (--latency)" : "");
	printf("  rootless   simulated: libhpct's engine and collectives, unchanged, over the "
	       "simulated transport\n"
	       "  standard   modelled: bootstrap/stdpath's store on rank 0, request by request "
	       "(connect, HELLO, SET,\n"
	       "             MGET, ADD), its costs measured on the real server\n"
	       "  nccl-root  modelled: NCCL's root exchange (reports in, ring neighbours out; its "
	       "stagger past 256\n"
	       "             ranks), the same on either --work; NCCL's ring allgather comes "
	       "after it\n");
	printf("%-9s %8s %13s %13s %13s %10s %8s %12s %11s\n", "path", "ranks", "projected_ms",
	       "busiest_msgs", "busiest_conns", "counts", "sim_s", "heap_B/rank", "peak_rss_MB");
	int bad = 0, rows = 0;
	long peak_kb = -1;
	struct plot_row *prow = calloc((size_t)k * SIM_NPATHS, sizeof(*prow));
	bench_progress_start("hpct-bench-sim");
	for (int i = 0; i < k; i++) {
		for (int p = 0; p < SIM_NPATHS; p++) {
			bench_progress_at("simulating %s at %d ranks (row %d of %d)",
			                  sim_paths[p].name, ns[i], i * SIM_NPATHS + p + 1,
			                  k * SIM_NPATHS);
			struct sim_run run = { .path = &sim_paths[p],
				               .n = ns[i],
				               .cold = cold,
				               .cores = cores,
				               .per_node = per_node,
				               .spread = spread,
				               .seed = seed };
			double w0 = measure_now();
			hpct__clock = sim_clock;
			struct sim_result r = simulate(&run);
			double took = measure_now() - w0;
			if (r.failed) {
				fprintf(stderr,
				        "hpct-bench-sim: %s: %d of %d simulated ranks did not "
				        "finish\n",
				        run.path->name, r.failed, ns[i]);
				bad = 1;
			}
			printf("%-9s %8d %13.2f %13ld %13ld %10s %8.1f %12.0f %11.1f\n",
			       run.path->name, ns[i], r.ms, r.busy_msgs, r.busy_conns,
			       run.path->counts, took, r.heap_per_rank, r.peak_rss_kb / 1024.0);
			fflush(stdout);
			if (r.peak_rss_kb > peak_kb)
				peak_kb = r.peak_rss_kb;
			prow[rows] = (struct plot_row){ .scenario = "sim",
				                        .path = run.path->name,
				                        .ranks = ns[i],
				                        .median_ms = r.ms,
				                        .min_ms = r.ms,
				                        .max_ms = r.ms };
			if (jf)
				fprintf(jf,
				        "%s{\"path\":\"%s\",\"ranks\":%d,\"projected_ms\":%.4f,"
				        "\"busiest_msgs\":%ld,\"busiest_conns\":%ld,\"total_msgs\":"
				        "%"
				        "ld,\"total_conns\":%ld,\"busiest_nic_bytes\":%.0f,"
				        "\"counts\":\"%s\",\"heap_bytes_per_rank\":%.0f,"
				        "\"peak_rss_kb\":%ld,\"sim_s\":%.2f}",
				        rows ? "," : "", run.path->name, ns[i], r.ms, r.busy_msgs,
				        r.busy_conns, r.total_msgs, r.total_conns, r.nic_bytes,
				        run.path->counts, r.heap_per_rank, r.peak_rss_kb, took);
			rows++;
		}
	}
	bench_progress_stop();
	if (jf)
		fprintf(jf, "]");
	sim_M = machine;
	if (check) {
		double t_check = measure_now();
		if (model_check(bench, port + 128, cores > 0 ? cores : sim_machine_cores(), seed,
		                jf) < 0)
			bad = 1;
		printf("(the check took %.1f s)\n", measure_now() - t_check);
	}
	if (jf) {
		fprintf(jf, "}\n");
		fclose(jf);
	}
	if (plot) {
		/* the floor's unit: one round trip of the model */
		double floor_ms =
		        2 * (sim_M.lat + sim_M.c_send + sim_M.c_recv + sim_M.c_wake) * 1000;
		if (bench_plot(plot, prow, rows, floor_ms) == 0)
			printf("plot written to %s\n", plot);
		else
			bad = 1;
	}
	free(prow);
	printf("(all of it took %.1f s)\n", measure_now() - t_all);
	return bad;
}
