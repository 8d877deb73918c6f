/* hpct-bench --scenario nccl-init: real NCCL ranks making one communicator
 * over N ranks, stock against hpct, the same libnccl.so.2 in the same run.
 * Each rank is a process of hpct-bench-nccl (beside hpct-bench), on
 * --nodes loopback nodes (2 unless set):
 *
 *   stock     rank 0's ncclGetUniqueId, the id through the standard path's
 *             store on rank 0, every rank's ncclCommInitRank: NCCL's root
 *             thread on rank 0 takes every rank's address;
 *   rootless  hpct_nccl_comm_init: derived ids, Tier 2 (a micro-root in
 *             every rank) where the release allows, no store.
 *
 * Per N and path, over --repeat runs (the paths alternate): the median of
 * the slowest rank's init (from a world barrier until its init returned),
 * the median of NCCL's own "Bootstrap timings total" of the slowest rank
 * (NCCL 2.23 and later print it), the connections of the busiest process
 * and the most connections one process accepted (NCCL's root on stock's
 * rank 0 takes one from every rank).  Then stock/rootless per N.
 *
 * NCCL: HPCT_NCCL_LIB, else the usual search path.  Without a GPU, ranks
 * run through the test-only stand-in driver (tests/standin, built with the
 * tests): HPCT_CUDA_STANDIN=<its build folder> puts it first on the ranks'
 * LD_LIBRARY_PATH, preloads its yield library and sets the NCCL knobs its
 * README lists (those the caller did not set).  On a GPU, NCCL 2.30.3 and later let ranks share it
 * with NCCL_MULTI_RANK_GPU_ENABLE=1.
 *
 *   hpct-bench --scenario nccl-init [--ranks 8,16,32,64] [--repeat 3]
 *              [--path stock,rootless] [--nodes 2] [--port 26000]
 *              [--timeout 300] [--json FILE] */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tools/bench/bench.h"
#include "tools/common/bench_env.h"
#include "tools/common/bench_measure.h"
#include "tools/common/bench_progress.h"

#define MAX_RUNS  32
#define MAX_RANKS 256
#define MAX_NS    8

struct ni_row {
	const char *path;
	int ranks, ok, runs;
	double ms[MAX_RUNS], boot[MAX_RUNS];
	int nboot, conns, accepts;
	char why[512]; /* the last failure */
};

/* The NCCL settings a run through the stand-in driver takes (its
 * README): sockets on loopback, no InfiniBand probe; and its yield
 * library preloaded, so that many ranks polling on few cores give the
 * processor away.  The same on both paths. */
static const char *const standin_knobs[] = { "NCCL_SOCKET_IFNAME=lo", "NCCL_IB_DISABLE=1", NULL };

static void standin_env(void)
{
	const char *dir = getenv("HPCT_CUDA_STANDIN");
	if (!dir || !*dir)
		return;
	const char *old = getenv("LD_LIBRARY_PATH");
	char buf[8192];
	snprintf(buf, sizeof(buf), "%s%s%s", dir, old && *old ? ":" : "", old ? old : "");
	setenv("LD_LIBRARY_PATH", buf, 1);
	old = getenv("LD_PRELOAD");
	snprintf(buf, sizeof(buf), "%s%s%s/libstandin_yield.so", old ? old : "",
	         old && *old ? " " : "", dir);
	setenv("LD_PRELOAD", buf, 1);
	/* a device per rank of a node (NCCL refuses two ranks on one), as
	 * many as the stand-in can show (NCCL keeps 32 a node) */
	setenv("HPCT_STANDIN_DEVICES", "32", 0);
	for (int i = 0; standin_knobs[i]; i++) {
		char kv[128];
		snprintf(kv, sizeof(kv), "%s", standin_knobs[i]);
		char *eq = strchr(kv, '=');
		*eq = 0;
		setenv(kv, eq + 1, 0);
	}
}

static pid_t start_rank(const char *prog, const char *out, int r, int n, int nodes, int rootless,
                        int port, double timeout)
{
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	char job[64];
	snprintf(job, sizeof(job), "nccl-init-%d-%d", (int)getppid(), port);
	bench_world_env(n, nodes, rootless, port, job, 0, timeout);
	int node, local;
	layout_place(n, nodes, r, &node, &local);
	setenv_int("RANK", r);
	setenv_int("LOCAL_RANK", local);
	if (nodes > 1 && !getenv("NCCL_HOSTID")) { /* as hpct-run: NCCL sees hpct's nodes */
		char host[48];
		snprintf(host, sizeof(host), "hpct-bench-node-%d", node);
		setenv("NCCL_HOSTID", host, 1);
	}
	setenv("NCCL_DEBUG", "INFO", 0);
	setenv("NCCL_DEBUG_SUBSYS", "INIT,BOOTSTRAP", 0);
	/* no rank of another run in the way */
	unsetenv("NCCL_COMM_ID");
	FILE *f = freopen(out, "w", stdout);
	if (!f || dup2(fileno(stdout), 2) < 0)
		_exit(127);
	execl(prog, prog, (char *)NULL);
	fprintf(stderr, "hpct-bench: cannot run %s: %s\n", prog, strerror(errno));
	_exit(127);
}

/* What a rank's output says: its init (ms, -1 if it did not say), its
 * connections, NCCL's bootstrap total (s, -1 if not printed), and the
 * last line that says what went wrong. */
static void scan(const char *file, double *ms, int *conns, int *accepts, double *boot, char *why,
                 size_t wl)
{
	FILE *f = fopen(file, "r");
	char line[2048];
	*ms = -1, *conns = 0, *accepts = 0, *boot = -1;
	while (f && fgets(line, sizeof(line), f)) {
		int r, ok, c, a;
		double v;
		char *b = strstr(line, "Bootstrap timings total ");
		if (sscanf(line, "nccl-init rank %d ok %d ms %lf conns %d accepted %d", &r, &ok, &v,
		           &c, &a) == 5) {
			*ms = ok == 0 ? v : -1;
			*conns = c;
			*accepts = a;
		} else if (b && sscanf(b, "Bootstrap timings total %lf", &v) == 1) {
			*boot = v;
		} else if (strstr(line, "failed") || strstr(line, "WARN") || strstr(line, "rror")) {
			line[strcspn(line, "\n")] = 0;
			snprintf(why, wl, "%.400s", line);
		}
	}
	if (f)
		fclose(f);
}

/* One run of n ranks; 0 with the slowest init, the slowest bootstrap (s,
 * or -1), the busiest rank's connections and the most any rank accepted,
 * or -1 with why. */
static int once(const char *prog, int n, int nodes, int rootless, int port, double timeout,
                double *ms, double *boot, int *conns, int *accepts, char *why, size_t wl)
{
	char dir[] = "/tmp/hpct-bench-nccl.XXXXXX", out[96];
	if (!mkdtemp(dir)) {
		snprintf(why, wl, "no temporary directory: %s", strerror(errno));
		return -1;
	}
	pid_t pids[MAX_RANKS];
	int live = 0, bad = -1;
	for (int r = 0; r < n; r++) {
		snprintf(out, sizeof(out), "%s/%d", dir, r);
		pids[r] = start_rank(prog, out, r, n, nodes, rootless, port, timeout);
		live += pids[r] > 0;
	}
	double until = measure_now() + timeout;
	while (live > 0 && measure_now() < until) {
		for (int r = 0; r < n; r++) {
			int st;
			if (pids[r] > 0 && waitpid(pids[r], &st, WNOHANG) == pids[r]) {
				pids[r] = -pids[r];
				live--;
				if ((!WIFEXITED(st) || WEXITSTATUS(st) != 0) && bad < 0) {
					bad = r;
					/* the run is lost: the others get 5 s to say why */
					if (measure_now() + 5 < until)
						until = measure_now() + 5;
				}
			}
		}
		if (live)
			usleep(20000);
	}
	for (int r = 0; r < n; r++)
		if (pids[r] > 0) { /* past the deadline */
			kill(pids[r], SIGKILL);
			waitpid(pids[r], NULL, 0);
			if (bad < 0)
				bad = r;
		}
	*ms = 0, *boot = -1, *conns = 0, *accepts = 0;
	char words[512] = "", said[512];
	for (int r = 0; r < n; r++) {
		double m = -1, b = -1;
		int c = 0, a = 0;
		snprintf(out, sizeof(out), "%s/%d", dir, r);
		said[0] = 0;
		scan(out, &m, &c, &a, &b, said, sizeof(said));
		if (m < 0 && bad < 0)
			bad = r;
		if (r == bad)
			snprintf(words, sizeof(words), "%s", said);
		*ms = m > *ms ? m : *ms;
		*boot = b > *boot ? b : *boot;
		*conns = c > *conns ? c : *conns;
		*accepts = a > *accepts ? a : *accepts;
		unlink(out);
	}
	rmdir(dir);
	if (bad >= 0) {
		snprintf(why, wl, "rank %d %s: %s", bad, live ? "did not finish in time" : "failed",
		         words[0] ? words : "(nothing said)");
		return -1;
	}
	return 0;
}

static int parse_list(const char *s, int *v, int max)
{
	int k = 0;
	char *copy = strdup(s), *save = NULL;
	for (char *t = strtok_r(copy, ",", &save); t && k < max; t = strtok_r(NULL, ",", &save))
		v[k++] = atoi(t);
	free(copy);
	return k;
}

static void print_rows(const struct ni_row *rows, int nrows, FILE *json)
{
	printf("%-10s %-9s %5s %7s %12s %14s %10s %13s\n", "scenario", "path", "ranks", "ok/runs",
	       "init_ms", "bootstrap_ms", "max_conns", "max_accepted");
	for (int i = 0; i < nrows; i++) {
		const struct ni_row *r = &rows[i];
		double ms[MAX_RUNS], boot[MAX_RUNS];
		memcpy(ms, r->ms, sizeof(ms));
		memcpy(boot, r->boot, sizeof(boot));
		double med = r->ok ? median_of(ms, r->ok) : -1;
		double bmed = r->nboot ? median_of(boot, r->nboot) * 1e3 : -1;
		if (r->ok) {
			char b[32] = "-";
			if (bmed >= 0)
				snprintf(b, sizeof(b), "%.1f", bmed);
			printf("%-10s %-9s %5d %4d/%-2d %12.1f %14s %10d %13d\n", "nccl-init",
			       r->path, r->ranks, r->ok, r->runs, med, b, r->conns, r->accepts);
		} else {
			printf("%-10s %-9s %5d %4d/%-2d %12s   (%s)\n", "nccl-init", r->path,
			       r->ranks, r->ok, r->runs, "failed", r->why);
		}
		if (json)
			fprintf(json,
			        "  "
			        "{\"scenario\":\"nccl-init\",\"path\":\"%s\",\"ranks\":%d,\"ok\":%"
			        "d,"
			        "\"runs\":%d,\"median_ms\":%.3f,\"bootstrap_ms\":%.3f,\"max_"
			        "conns\":%d,"
			        "\"max_accepted\":%d}%s\n",
			        r->path, r->ranks, r->ok, r->runs, med, bmed, r->conns, r->accepts,
			        i + 1 < nrows ? "," : "");
	}
	for (int i = 0; i + 1 < nrows; i++) {
		const struct ni_row *a = &rows[i], *b = &rows[i + 1];
		if (a->ranks != b->ranks || strcmp(a->path, "stock") || !a->ok || !b->ok)
			continue;
		double ma[MAX_RUNS], mb[MAX_RUNS];
		memcpy(ma, a->ms, sizeof(ma));
		memcpy(mb, b->ms, sizeof(mb));
		printf("%d ranks: stock/rootless init %.2fx", a->ranks,
		       median_of(ma, a->ok) / median_of(mb, b->ok));
		if (a->nboot && b->nboot) {
			memcpy(ma, a->boot, sizeof(ma));
			memcpy(mb, b->boot, sizeof(mb));
			printf(", NCCL's bootstrap %.2fx",
			       median_of(ma, a->nboot) / median_of(mb, b->nboot));
		}
		printf(", the most one process accepted %d against %d\n", a->accepts, b->accepts);
	}
}

int bench_nccl_init_main(int argc, char **argv)
{
	struct bench_own_opts o = { .ranks = "8,16,32,64",
		                    .repeat = 3,
		                    .nodes = 2,
		                    .port = 26000,
		                    .timeout = 300,
		                    .paths = "stock,rootless" };
	if (bench_own_options(argc, argv, &o,
	                      "usage: hpct-bench --scenario nccl-init [--ranks 8,16,32,64] "
	                      "[--repeat R] [--path stock,rootless] [--nodes K] [--port P] "
	                      "[--timeout S] [--json FILE]\n"))
		return 2;
	int ns[MAX_NS], nn = parse_list(o.ranks, ns, MAX_NS), repeat = o.repeat, port = o.port;
	int nodes = o.nodes;
	double timeout = o.timeout;
	const char *paths = o.paths, *json = o.json;
	for (int i = 0; i < nn; i++)
		if (ns[i] < 2 || ns[i] > MAX_RANKS) {
			fprintf(stderr,
			        "hpct-bench: --scenario nccl-init: --ranks %d: want 2..%d\n", ns[i],
			        MAX_RANKS);
			return 2;
		}
	if (nn < 1 || repeat < 1 || repeat > MAX_RUNS || nodes < 1 || nodes > 64 || port < 1024 ||
	    port > 60000) {
		fprintf(stderr,
		        "hpct-bench: --scenario nccl-init: want 1..%d runs (--repeat %d), 1..64 "
		        "nodes (--nodes %d) and a port (--port %d)\n",
		        MAX_RUNS, repeat, nodes, port);
		return 2;
	}
	int stock = strstr(paths, "stock") != NULL, rootless = strstr(paths, "rootless") != NULL;
	if (!stock && !rootless) {
		fprintf(stderr,
		        "hpct-bench: --scenario nccl-init: --path %s: want stock and/or "
		        "rootless\n",
		        paths);
		return 2;
	}
	char prog[4096];
	ssize_t sl = readlink("/proc/self/exe", prog, sizeof(prog) - 1);
	char *slash = sl > 0 ? (prog[sl] = 0, strrchr(prog, '/')) : NULL;
	if (!slash)
		return 2;
	snprintf(slash + 1, sizeof(prog) - (size_t)(slash + 1 - prog), "hpct-bench-nccl");
	if (access(prog, X_OK) != 0) {
		fprintf(stderr, "hpct-bench: --scenario nccl-init: no rank program at %s\n", prog);
		return 2;
	}
	standin_env();
	const char *lib = getenv("HPCT_NCCL_LIB"), *standin = getenv("HPCT_CUDA_STANDIN");
	printf("hpct-bench nccl-init: real NCCL ranks (%s%s) on %d loopback node%s, one "
	       "communicator over all; stock: rank 0's id through a store and NCCL's root; "
	       "rootless: hpct's derived ids\n",
	       lib && *lib ? lib : "libnccl.so.2 from the search path",
	       standin && *standin ? ", through the stand-in CUDA driver" : "", nodes,
	       nodes > 1 ? "s" : "");
	fflush(stdout);
	struct ni_row rows[2 * MAX_NS];
	int nrows = 0;
	for (int i = 0; i < nn; i++) {
		if (stock)
			rows[nrows++] = (struct ni_row){ .path = "stock", .ranks = ns[i] };
		if (rootless)
			rows[nrows++] = (struct ni_row){ .path = "rootless", .ranks = ns[i] };
	}
	bench_progress_start("hpct-bench");
	for (int i = 0; i < nrows; i += stock + rootless)
		for (int rep = 0; rep < repeat; rep++)
			for (int k = 0; k < stock + rootless; k++) {
				struct ni_row *row =
				        &rows[i + (rep % 2 ? stock + rootless - 1 - k : k)];
				double ms, boot;
				int conns, accepts;
				char why[512];
				bench_progress_at("nccl-init %d ranks, %s, run %d of %d",
				                  row->ranks, row->path, rep + 1, repeat);
				int rc = once(prog, row->ranks, nodes,
				              strcmp(row->path, "rootless") == 0, port, timeout,
				              &ms, &boot, &conns, &accepts, why, sizeof(why));
				/* a fresh range: no listener of the last run in the way */
				port += 2 * (layout_max_local(row->ranks, nodes) * 2 + 2);
				if (port > 31000)
					port = 26000;
				row->runs++;
				if (rc == 0) {
					row->ms[row->ok++] = ms;
					if (boot >= 0)
						row->boot[row->nboot++] = boot;
					row->conns = conns > row->conns ? conns : row->conns;
					row->accepts =
					        accepts > row->accepts ? accepts : row->accepts;
				} else {
					snprintf(row->why, sizeof(row->why), "%s", why);
				}
				fprintf(stderr, "hpct-bench nccl-init: %d ranks, %s, run %d: %s\n",
				        row->ranks, row->path, rep + 1, rc == 0 ? "ok" : why);
			}
	bench_progress_stop();
	FILE *jf = NULL;
	if (json && !(jf = fopen(json, "w"))) {
		fprintf(stderr, "hpct-bench: --json %s: %s\n", json, strerror(errno));
		return 1;
	}
	if (jf)
		fprintf(jf, "[\n");
	print_rows(rows, nrows, jf);
	if (jf) {
		fprintf(jf, "]\n");
		fclose(jf);
	}
	for (int i = 0; i < nrows; i++)
		if (!rows[i].ok)
			return 1;
	return 0;
}
