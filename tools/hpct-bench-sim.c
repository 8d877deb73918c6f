/* hpct-bench-sim: the rootless path at sizes this machine cannot launch.
 *
 * libhpct's own engine (connections, handshakes, queues, retries, pulls)
 * and collectives (rootless/coll.c), unchanged, run for N simulated ranks in
 * one process: each rank is a coroutine with its own world, started by the
 * library's own hpct__world_start as hpct_world_create starts one, and
 * driven through the public collectives; the transport (the same table of
 * functions as TCP, sim_transport.c) is simulated, and hpct__now() reads a
 * simulated clock (sim_sched.c).  Time advances by a
 * model of latency, bandwidth and CPU per message, per wakeup and per
 * connection, calibrated on this machine at start and printed.  Ranks run on
 * one core each (a cluster), or on P shared cores (--cores P, FIFO), which
 * with this machine's process start-up cost is how the model is checked
 * against real runs.
 *
 * The standard path (a store on rank 0 that serialises every rank's
 * connection and requests, and sends each rank the others' addresses: N^2
 * bytes, since nothing is derived) and NCCL's root (N connections in, N
 * reports, N connections out to send each rank its ring neighbour) are
 * modelled with the same parameters as one process that does all of it in
 * turn.
 *
 * Started by `hpct-bench --scenario sim`, which passes its arguments on. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bootstrap/base/util.h"
#include "tools/bench_measure.h"
#include "tools/bench_plot.h"
#include "tools/sim.h"

/* ------------------------------------------------------ real runs */

/* Medians of a real cold run of N ranks per path, from hpct-bench's JSON;
 * 0 when missing. */
static int real_cold(const char *bench, const int *ns, int k, double real[][2])
{
	char json[] = "/tmp/hpct-sim-real-XXXXXX";
	int fd = mkstemp(json);
	if (fd < 0)
		return -1;
	close(fd);
	char list[256] = "";
	for (int i = 0; i < k; i++)
		snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%d", i ? "," : "",
		         ns[i]);
	pid_t pid = fork();
	if (pid == 0) {
		int dn = open("/dev/null", O_WRONLY);
		dup2(dn, 1);
		execl(bench, bench, "--scenario", "cold", "--ranks", list, "--path",
		      "rootless,standard", "--repeat", "3", "--port", "23000", "--json", json,
		      (char *)NULL);
		_exit(127);
	}
	int st;
	waitpid(pid, &st, 0);
	FILE *f = fopen(json, "r");
	char text[8192] = "";
	size_t got = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
	text[got] = 0;
	if (f)
		fclose(f);
	unlink(json);
	for (int i = 0; i < k; i++)
		for (int p = 0; p < 2; p++) {
			char pat[96];
			snprintf(pat, sizeof(pat), "\"path\":\"%s\",\"ranks\":%d,",
			         p ? "standard" : "rootless", ns[i]);
			const char *at = strstr(text, pat),
			           *m = at ? strstr(at, "\"median_ms\":") : NULL;
			real[i][p] = m ? atof(m + 12) : 0;
		}
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* --------------------------------------------------------------- main */

#define MAX_N 16

static void usage(FILE *f)
{
	fprintf(f, "usage: hpct-bench --scenario sim --ranks N[,N..] [--seed S] [--cores P]\n"
	           "                  [--work join|cold] [--spread MS] [--json FILE] [--no-check]\n"
	           "                  [--model-from FILE.json] [--plot FILE.png] [--latency US]\n"
	           "(this is hpct-bench-sim; hpct-bench --scenario sim starts it)\n");
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--as-rank") == 0)
		return 2; /* what the start-up calibration times */
	int ns[MAX_N], k = 0, cores = 0, check = 1, cold = 0;
	unsigned seed = 1;
	double spread = 1e-3;
	const char *json = NULL, *from = NULL, *plot = NULL;
	double latency = -1; /* a network's one-way latency for the projections, s */
	static const struct option opts[] = { { "model-from", required_argument, NULL, 'm' },
		                              { "latency", required_argument, NULL, 'L' },
		                              { "plot", required_argument, NULL, 'G' },
		                              { "ranks", required_argument, NULL, 'n' },
		                              { "seed", required_argument, NULL, 'S' },
		                              { "cores", required_argument, NULL, 'c' },
		                              { "work", required_argument, NULL, 'w' },
		                              { "spread", required_argument, NULL, 's' },
		                              { "json", required_argument, NULL, 'j' },
		                              { "no-check", no_argument, NULL, 'x' },
		                              { "help", no_argument, NULL, 'h' },
		                              { NULL, 0, NULL, 0 } };
	int c;
	while ((c = getopt_long(argc, argv, "n:S:c:w:s:j:xm:G:L:h", opts, NULL)) != -1) {
		switch (c) {
		case 'L':
			latency = atof(optarg) * 1e-6;
			if (latency <= 0) {
				fprintf(stderr, "hpct-bench: --latency %s: want microseconds > 0\n",
				        optarg);
				return 2;
			}
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
				long v = strtol(tok, &end, 10);
				if (*end || v < 2 || v > 131072 || k == MAX_N) {
					fprintf(stderr,
					        "hpct-bench: --ranks %s: want up to %d sizes of "
					        "2..131072\n",
					        optarg, MAX_N);
					free(dup);
					return 2;
				}
				ns[k++] = (int)v;
			}
			free(dup);
			break;
		}
		case 'S':
			seed = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'c':
			cores = atoi(optarg);
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
			spread = atof(optarg) / 1000;
			break;
		case 'j':
			json = optarg;
			break;
		case 'x':
			check = 0;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (k == 0 || cores < 0 || spread < 0) {
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
	char self[4096], dir[4096], bench[4200];
	ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (sl <= 0)
		return 1;
	self[sl] = 0;
	snprintf(dir, sizeof(dir), "%s", self);
	*strrchr(dir, '/') = 0;
	snprintf(bench, sizeof(bench), "%s/hpct-bench", dir);

	if (plot && (strlen(plot) < 5 || strcmp(plot + strlen(plot) - 4, ".png") != 0)) {
		fprintf(stderr, "hpct-bench: --plot %s: want a file name ending in .png\n", plot);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (from && model_from(from) < 0)
		return 2;
	if (!from)
		calibrate(bench);
	printf("model, %s%s:\n"
	       "  one-way latency %.1f us, bandwidth %.0f MB/s, CPU per message sent %.2f us,\n"
	       "  received %.2f us, per wakeup %.2f us, per connection end %.1f us;\n"
	       "  launch: %.0f us of the launcher per fork, %.2f ms to start a rank\n",
	       from ? "from " : "calibrated on this machine (loopback TCP between processes)",
	       from ? from : "", sim_M.lat * 1e6, sim_M.bw / 1e6, sim_M.c_send * 1e6,
	       sim_M.c_recv * 1e6, sim_M.c_wake * 1e6, sim_M.c_conn * 1e6, sim_M.c_fork * 1e6,
	       sim_M.c_start * 1e3);
	struct model launch = sim_M;
	sim_M.c_start = sim_M.c_fork = 0; /* projections: ranks start within --spread */
	if (latency > 0)
		sim_M.lat = latency;
	hpct__clock = sim_clock;

	FILE *jf = json ? fopen(json, "w") : NULL;
	if (json && !jf)
		fprintf(stderr, "hpct-bench: cannot write %s: %s\n", json, strerror(errno));
	if (jf)
		fprintf(jf,
		        "{\"model\":{\"lat_us\":%.3f,\"bw_MBps\":%.1f,\"send_us\":%.3f,"
		        "\"recv_us\":%.3f,\"wake_us\":%.3f,\"conn_us\":%.3f,\"fork_us\":%.1f,"
		        "\"start_ms\":%.3f},\"work\":\"%s\",\"cores\":%d,\"seed\":%u,\"results\":[",
		        sim_M.lat * 1e6, sim_M.bw / 1e6, sim_M.c_send * 1e6, sim_M.c_recv * 1e6,
		        sim_M.c_wake * 1e6, sim_M.c_conn * 1e6, launch.c_fork * 1e6,
		        launch.c_start * 1e3, cold ? "cold" : "join", cores, seed);
	printf("\nsim: %s, %s, ranks starting within %.1f ms (seed %u), one-way latency %.1f "
	       "us%s\n",
	       cold ? "cold (world allgather of 64 bytes + barrier)" : "join (world barrier)",
	       cores ? "ranks sharing the cores given" : "one core per rank", spread * 1000, seed,
	       sim_M.lat * 1e6, latency > 0 ? " (--latency)" : "");
	printf("rootless: simulated; standard: modelled, one store serving N connections and every "
	       "rank's\naddress to every rank (N^2 x 64 bytes); nccl-root: modelled, NCCL's root, "
	       "N "
	       "connections in, N out\n");
	printf("%-9s %8s %13s %13s %13s %10s\n", "path", "ranks", "projected_ms", "busiest_msgs",
	       "busiest_conns", "sim_s");
	int bad = 0, rows = 0;
	struct plot_row *prow = calloc((size_t)k * 3, sizeof(*prow));
	for (int i = 0; i < k; i++) {
		double w0 = measure_now();
		hpct__clock = sim_clock;
		struct sim_result r = simulate(ns[i], seed, cores, cold, spread);
		double took = measure_now() - w0;
		struct sim_result s = std_model(ns[i], spread, cores, seed);
		struct sim_result q = nccl_model(ns[i], spread, seed);
		if (r.failed) {
			fprintf(stderr, "hpct-bench-sim: %d of %d simulated ranks did not finish\n",
			        r.failed, ns[i]);
			bad = 1;
		}
		printf("%-9s %8d %13.2f %13ld %13ld %10.1f\n", "rootless", ns[i], r.ms, r.busy_msgs,
		       r.busy_conns, took);
		printf("%-9s %8d %13.2f %13ld %13ld %10s\n", "standard", ns[i], s.ms, s.busy_msgs,
		       s.busy_conns, "model");
		printf("%-9s %8d %13.2f %13ld %13ld %10s\n", "nccl-root", ns[i], q.ms, q.busy_msgs,
		       q.busy_conns, "model");
		const struct sim_result *all[3] = { &r, &s, &q };
		static const char *names[3] = { "rootless", "standard", "nccl-root" };
		for (int p = 0; p < 3; p++)
			prow[3 * i + p] = (struct plot_row){ .scenario = "sim",
				                             .path = names[p],
				                             .ranks = ns[i],
				                             .median_ms = all[p]->ms,
				                             .min_ms = all[p]->ms,
				                             .max_ms = all[p]->ms };
		for (int p = 0; p < 3 && jf; p++)
			fprintf(jf,
			        "%s{\"path\":\"%s\",\"ranks\":%d,\"projected_ms\":%.4f,"
			        "\"busiest_msgs\":%ld,\"busiest_conns\":%ld,\"total_msgs\":%ld,"
			        "\"total_conns\":%ld}",
			        rows++ ? "," : "", names[p], ns[i], all[p]->ms, all[p]->busy_msgs,
			        all[p]->busy_conns, p == 0 ? all[p]->total_msgs : -1,
			        p == 0 ? all[p]->total_conns : -1);
	}
	if (jf)
		fprintf(jf, "]");
	if (check) {
		/* the model against real runs: cold, this machine's 2 cores and launch */
		int cn[2] = { 64, 256 };
		double real[2][2];
		int rc = real_cold(bench, cn, 2, real);
		sim_M = launch;
		printf("\nmodel check: cold start (allgather + barrier), 2 shared cores, this "
		       "machine's launch, against real runs (hpct-bench --scenario cold, medians "
		       "of 3)%s\n",
		       rc ? " [some real runs failed]" : "");
		if (jf)
			fprintf(jf, ",\"check\":[");
		for (int i = 0; i < 2; i++) {
			hpct__clock = sim_clock;
			struct sim_result r = simulate(cn[i], seed, 2, 1, 0);
			struct sim_result s = std_model(cn[i], 0, 2, seed);
			double model[2] = { r.ms, s.ms };
			for (int p = 0; p < 2; p++) {
				double err = real[i][p] > 0
				                     ? (model[p] - real[i][p]) / real[i][p] * 100
				                     : 0;
				printf("  N=%-4d %-9s model %8.1f ms   real %8.1f ms   error "
				       "%+6.1f%%\n",
				       cn[i], p ? "standard" : "rootless", model[p], real[i][p],
				       err);
				if (jf)
					fprintf(jf,
					        "%s{\"ranks\":%d,\"path\":\"%s\",\"model_ms\":%.3f,"
					        "\"real_ms\":%.3f,\"error_pct\":%.2f}",
					        i + p ? "," : "", cn[i],
					        p ? "standard" : "rootless", model[p], real[i][p],
					        err);
			}
		}
		if (jf)
			fprintf(jf, "]");
	}
	if (jf) {
		fprintf(jf, "}\n");
		fclose(jf);
	}
	printf("\npublished anchors at about 96k ranks: stock NCCL init ~265 s, PyTorch's TCPStore "
	       "(libuv) ~100 s\n");
	if (plot) {
		/* the floor's unit: one round trip of the model */
		double rtt =
		        2 * (launch.lat + launch.c_send + launch.c_recv + launch.c_wake) * 1000;
		if (bench_plot(plot, prow, 3 * k, rtt) == 0)
			printf("plot written to %s\n", plot);
		else
			bad = 1;
	}
	free(prow);
	return bad;
}
