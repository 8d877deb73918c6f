/* hpct-bench --scenario nvrx: a recovery framework's restart, stock and
 * rootless.  N ranks (--ranks, default 4) of NVIDIA Resiliency Extension
 * 0.4.1's in-process restart around a DDP loop on Gloo (hpct-bench-nvrx.py,
 * run by the frameworks venv's Python: tools/scripts/torch-venv.sh frameworks, or
 * HPCT_FRAMEWORKS_PYTHON), the Wrapper's and the job's TCPStore at
 * MASTER_ADDR:MASTER_PORT; one rank SIGKILLs itself mid-loop: rank N/2 in
 * one row, rank 0 in the other.  Timed from the kill (the victim's
 * CLOCK_MONOTONIC just before it) until the last survivor has its new
 * process group: NVRx's detection, its barrier, the new store prefix and
 * init_process_group, the same job on both paths.  stock: PyTorch's own
 * TCPStore, rank 0's server; rootless: the same job under the shim
 * (HPCT_USE_ROOTLESS=1, each key on HPCT_STORE_REPLICAS ranks, 2 unless
 * set).  A run counts only when every survivor finished its loop; stock
 * with rank 0 killed cannot (the store dies with rank 0), and the table
 * says so.  Runs of the two paths alternate.
 *
 *   hpct-bench --scenario nvrx [--ranks 4] [--repeat 3] [--path stock,rootless]
 *              [--port 29900] [--timeout 120] [--json FILE] */
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
#include "tools/common/shim_path.h"

#define MAX_RUNS 32

struct nvrx_row {
	const char *path;
	int victim, ok, runs;
	double ms[MAX_RUNS];
	char why[512]; /* the last failure */
};

/* A rank's output: the victim's "fault T", a survivor's first "pg K T" of
 * an iteration after the first and its "done R SIZE"; 0 when found. */
static int scan(const char *file, int victim_side, double *t, int *done)
{
	FILE *f = fopen(file, "r");
	if (!f)
		return -1;
	char line[1024];
	int found = -1;
	*done = 0;
	while (fgets(line, sizeof(line), f)) {
		double v;
		int k, a, b;
		if (victim_side && sscanf(line, "fault %lf", &v) == 1) {
			*t = v;
			found = 0;
		} else if (!victim_side && found && sscanf(line, "pg %d %lf", &k, &v) == 2 &&
		           k > 0) {
			*t = v;
			found = 0;
		} else if (sscanf(line, "done %d %d", &a, &b) == 2) {
			*done = 1;
		}
	}
	fclose(f);
	return found;
}

/* The last line of a rank's output that says what went wrong, in buf. */
static void last_words(const char *file, char *buf, size_t len)
{
	FILE *f = fopen(file, "r");
	char line[1024];
	buf[0] = 0;
	while (f && fgets(line, sizeof(line), f))
		if (strstr(line, "Error") || strstr(line, "error") || strstr(line, "HPCT WARN")) {
			line[strcspn(line, "\n")] = 0;
			snprintf(buf, len, "%.300s", line);
		}
	if (f)
		fclose(f);
}

static pid_t start_rank(const char *py, const char *script, const char *lib, const char *out, int r,
                        int n, int victim, int rootless, int port)
{
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	setpgid(0, 0); /* its NVRx monitors with it, ended together */
	setenv_int("RANK", r);
	setenv_int("LOCAL_RANK", r);
	setenv_int("WORLD_SIZE", n);
	setenv_int("LOCAL_WORLD_SIZE", n);
	setenv_int("MASTER_PORT", port);
	setenv("MASTER_ADDR", "127.0.0.1", 1);
	setenv_int("JOB_KILL_RANK", victim);
	setenv("OMP_NUM_THREADS", "1", 0);
	if (rootless) {
		char job[64];
		snprintf(job, sizeof(job), "nvrx-%d-%d", (int)getppid(), port);
		setenv("HPCT_USE_ROOTLESS", "1", 1);
		setenv("LD_PRELOAD", lib, 1);
		setenv("HPCT_HOSTS", "127.0.0.1", 1);
		setenv("HPCT_JOB_ID", job, 1);
	} else {
		setenv("HPCT_USE_ROOTLESS", "0", 1);
		unsetenv("LD_PRELOAD");
	}
	FILE *f = freopen(out, "w", stdout);
	if (!f || dup2(fileno(stdout), 2) < 0)
		_exit(127);
	execl(py, py, script, (char *)NULL);
	fprintf(stderr, "hpct-bench: cannot run %s %s: %s\n", py, script, strerror(errno));
	_exit(127);
}

/* One run: the time from the kill to the last survivor's new process
 * group, ms; -1 with the reason in why. */
static double nvrx_once(const char *py, const char *script, const char *lib, int n, int victim,
                        int rootless, int port, double timeout, char *why, size_t wl)
{
	char dir[] = "/tmp/hpct-bench-nvrx.XXXXXX", out[64][96];
	if (n > 64 || !mkdtemp(dir)) {
		snprintf(why, wl, "no temporary directory: %s", strerror(errno));
		return -1;
	}
	pid_t pids[64];
	int live = 0;
	for (int r = 0; r < n; r++) {
		snprintf(out[r], sizeof(out[r]), "%s/%d", dir, r);
		pids[r] = start_rank(py, script, lib, out[r], r, n, victim, rootless, port);
		live += pids[r] > 0;
	}
	double until = measure_now() + timeout;
	while (live > 0 && measure_now() < until) {
		for (int r = 0; r < n; r++)
			if (pids[r] > 0 && waitpid(pids[r], NULL, WNOHANG) == pids[r]) {
				kill(-pids[r], SIGKILL); /* its monitors, if any are left */
				pids[r] = -pids[r];
				live--;
			}
		if (live)
			usleep(50000);
	}
	for (int r = 0; r < n; r++)
		if (pids[r] > 0) { /* past the deadline */
			kill(-pids[r], SIGKILL);
			waitpid(pids[r], NULL, 0);
		}
	double fault = 0, last = 0, ms = -1;
	int done, bad = -1;
	if (scan(out[victim], 1, &fault, &done) != 0) {
		snprintf(why, wl, "rank %d never reached its kill", victim);
	} else {
		for (int r = 0; r < n && bad < 0; r++) {
			double t = 0;
			if (r == victim)
				continue;
			if (scan(out[r], 0, &t, &done) != 0 || !done)
				bad = r;
			else if (t > last)
				last = t;
		}
		if (bad >= 0) {
			char words[400];
			last_words(out[bad], words, sizeof(words));
			snprintf(why, wl, "rank %d did not %s: %s", bad,
			         live ? "finish in time" : "train again and finish",
			         words[0] ? words : "(no error said)");
		} else {
			ms = (last - fault) * 1000;
		}
	}
	for (int r = 0; r < n; r++)
		unlink(out[r]);
	rmdir(dir);
	return ms;
}

/* The frameworks venv's Python (tools/scripts/torch-venv.sh frameworks). */
static int frameworks_python(char *buf, size_t len)
{
	const char *env = getenv("HPCT_FRAMEWORKS_PYTHON");
	if (env && *env)
		snprintf(buf, len, "%s", env);
	else
		bench_cache_python("venv-frameworks-2.13.0", buf, len);
	if (access(buf, X_OK) == 0)
		return 0;
	fprintf(stderr,
	        "hpct-bench: --scenario nvrx: no Python at %s: make it with "
	        "tools/scripts/torch-venv.sh "
	        "frameworks, or set HPCT_FRAMEWORKS_PYTHON\n",
	        buf);
	return -1;
}

int bench_nvrx_main(int argc, char **argv)
{
	struct bench_own_opts o = { .ranks = "4",
		                    .repeat = 3,
		                    .nodes = -1,
		                    .port = 29900,
		                    .timeout = 120,
		                    .paths = "stock,rootless" };
	if (bench_own_options(argc, argv, &o,
	                      "usage: hpct-bench --scenario nvrx [--ranks N] [--repeat R] "
	                      "[--path stock,rootless] [--port P] [--timeout S] [--json FILE]\n"))
		return 2;
	int n = atoi(o.ranks), repeat = o.repeat, port = o.port;
	double timeout = o.timeout;
	const char *paths = o.paths, *json = o.json;
	if (n < 3 || n > 64 || repeat < 1 || repeat > MAX_RUNS || port < 1 || port > 65000) {
		fprintf(stderr,
		        "hpct-bench: --scenario nvrx: want 3..64 ranks (--ranks %d), 1..%d runs "
		        "(--repeat %d) and a port (--port %d)\n",
		        n, MAX_RUNS, repeat, port);
		return 2;
	}
	int stock = strstr(paths, "stock") != NULL, rootless = strstr(paths, "rootless") != NULL;
	if (!stock && !rootless) {
		fprintf(stderr,
		        "hpct-bench: --scenario nvrx: --path %s: want stock and/or rootless\n",
		        paths);
		return 2;
	}
	char py[4096], lib[8192], script[4096];
	ssize_t sl = readlink("/proc/self/exe", script, sizeof(script) - 1);
	char *slash = sl > 0 ? (script[sl] = 0, strrchr(script, '/')) : NULL;
	if (!slash || frameworks_python(py, sizeof(py)) != 0)
		return 2;
	snprintf(slash + 1, sizeof(script) - (size_t)(slash + 1 - script), "hpct-bench-nvrx.py");
	if (rootless && hpct_shim_path(lib, sizeof(lib)) != 0) {
		fprintf(stderr, "hpct-bench: --scenario nvrx: no libhpct_preload.so at %s\n", lib);
		return 2;
	}
	struct nvrx_row rows[4];
	int nrows = 0;
	const int victims[2] = { n / 2, 0 };
	for (int v = 0; v < 2; v++) {
		if (stock)
			rows[nrows++] = (struct nvrx_row){ .path = "stock", .victim = victims[v] };
		if (rootless)
			rows[nrows++] =
			        (struct nvrx_row){ .path = "rootless", .victim = victims[v] };
	}
	const char *replicas = getenv("HPCT_STORE_REPLICAS");
	printf("hpct-bench nvrx: %d ranks of NVRx 0.4.1's in-process restart (%s), one killed; "
	       "from the kill to the last survivor's new process group; rootless with "
	       "HPCT_STORE_REPLICAS=%s\n",
	       n, py, replicas && *replicas ? replicas : "3 (the default)");
	fflush(stdout);
	bench_progress_start("hpct-bench");
	for (int rep = 0; rep < repeat; rep++)
		for (int i = 0; i < nrows; i++) {
			struct nvrx_row *row = &rows[rep % 2 ? nrows - 1 - i : i];
			char why[512];
			bench_progress_at("nvrx %s, rank %d killed, run %d of %d", row->path,
			                  row->victim, rep + 1, repeat);
			double ms = nvrx_once(py, script, lib, n, row->victim,
			                      strcmp(row->path, "rootless") == 0, port, timeout,
			                      why, sizeof(why));
			port += 4; /* a fresh one: no listener of the last run in the way */
			row->runs++;
			if (ms >= 0)
				row->ms[row->ok++] = ms;
			else
				snprintf(row->why, sizeof(row->why), "%s", why);
			fprintf(stderr, "hpct-bench nvrx: %s, rank %d killed, run %d: %s\n",
			        row->path, row->victim, rep + 1, ms >= 0 ? "ok" : why);
		}
	bench_progress_stop();
	printf("%-22s %-9s %5s %7s %10s %10s %10s\n", "scenario", "path", "ranks", "ok/runs",
	       "median_ms", "min_ms", "max_ms");
	double med[4] = { -1, -1, -1, -1 };
	for (int i = 0; i < nrows; i++) {
		struct nvrx_row *r = &rows[i];
		char name[32];
		snprintf(name, sizeof(name), "nvrx/kill-rank-%d", r->victim);
		if (r->ok) {
			double lo = r->ms[0], hi = r->ms[0];
			for (int k = 1; k < r->ok; k++) {
				lo = r->ms[k] < lo ? r->ms[k] : lo;
				hi = r->ms[k] > hi ? r->ms[k] : hi;
			}
			med[i] = median_of(r->ms, r->ok);
			printf("%-22s %-9s %5d %4d/%-2d %10.1f %10.1f %10.1f\n", name, r->path, n,
			       r->ok, r->runs, med[i], lo, hi);
		} else {
			printf("%-22s %-9s %5d %4d/%-2d %10s   (%s)\n", name, r->path, n, r->ok,
			       r->runs, "failed", r->why);
		}
	}
	for (int i = 0; stock && rootless && i + 1 < nrows; i += 2)
		if (med[i] > 0 && med[i + 1] > 0)
			printf("rank %d killed: stock/rootless %.2fx\n", rows[i].victim,
			       med[i] / med[i + 1]);
		else if (med[i + 1] > 0)
			printf("rank %d killed: only rootless recovers (stock: %s)\n",
			       rows[i].victim, rows[i].why);
	if (json) {
		FILE *f = fopen(json, "w");
		if (!f) {
			fprintf(stderr, "hpct-bench: --json %s: %s\n", json, strerror(errno));
			return 1;
		}
		fprintf(f, "[\n");
		for (int i = 0; i < nrows; i++)
			fprintf(f,
			        "  "
			        "{\"scenario\":\"nvrx\",\"path\":\"%s\",\"ranks\":%d,\"victim\":%d,"
			        "\"ok\":%d,\"runs\":%d,\"median_ms\":%.3f}%s\n",
			        rows[i].path, n, rows[i].victim, rows[i].ok, rows[i].runs,
			        med[i] > 0 ? med[i] : -1.0, i + 1 < nrows ? "," : "");
		fprintf(f, "]\n");
		fclose(f);
	}
	return 0;
}
