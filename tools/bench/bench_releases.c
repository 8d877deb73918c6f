/* hpct-bench --scenario nccl-root --nccl LIB[,LIB..]: the same nccl-root
 * runs against several NCCL releases, one table.  A process loads one
 * libnccl.so.2, so each release gets a run of this program of its own
 * (HPCT_NCCL_LIB=LIB, the same arguments, its rows as JSON in a temporary
 * file); the rows come back here, side by side. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tools/bench/bench.h"

#define MAX_LIBS 16
#define MAX_ROWS 256

struct rel_row {
	char nccl[24], path[16];
	int ranks, repeat, max_conns;
	int run; /* which release's run gave it */
	double med, min, max;
};

/* The rows of one child's JSON (hpct-bench's own format). */
static int read_rows(const char *file, struct rel_row *rows, int cap)
{
	FILE *f = fopen(file, "r");
	if (!f)
		return -1;
	static char buf[1 << 16];
	size_t len = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[len] = 0;
	int n = 0;
	for (char *p = strstr(buf, "{\"scenario\":\"nccl-root\""); p && n < cap;
	     p = strstr(p + 1, "{\"scenario\":\"nccl-root\"")) {
		struct rel_row *r = &rows[n];
		if (sscanf(p,
		           "{\"scenario\":\"nccl-root\",\"path\":\"%15[^\"]\",\"ranks\":%d,"
		           "\"nodes\":%*d,\"median_ms\":%lf,\"min_ms\":%lf,\"max_ms\":%lf,"
		           "\"repeat\":%d,\"max_conns\":%d",
		           r->path, &r->ranks, &r->med, &r->min, &r->max, &r->repeat,
		           &r->max_conns) != 7)
			continue;
		char *v = strstr(p, "\"nccl\":\"");
		char *end = strchr(p, '}');
		if (v && end && v < end)
			sscanf(v, "\"nccl\":\"%23[^\"]\"", r->nccl);
		n++;
	}
	return n;
}

/* Runs this program with argv (less --nccl, --json and --plot) once per
 * library; prints one table, and writes it as JSON when `json`. */
int bench_nccl_releases(int argc, char **argv, const char *libs, const char *json)
{
	char exe[4096];
	ssize_t sl = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (sl <= 0)
		return 1;
	exe[sl] = 0;
	char **args = calloc((size_t)argc + 3, sizeof(char *));
	int na = 0;
	args[na++] = exe;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		int two = (strcmp(a, "--nccl") == 0 || strcmp(a, "--json") == 0 ||
		           strcmp(a, "--plot") == 0) &&
		          i + 1 < argc;
		if (two) {
			i++;
			continue;
		}
		if (strncmp(a, "--nccl=", 7) == 0 || strncmp(a, "--json=", 7) == 0 ||
		    strncmp(a, "--plot=", 7) == 0)
			continue;
		args[na++] = argv[i];
	}
	char tmp[] = "/tmp/hpct-bench-nccl.XXXXXX";
	int tfd = mkstemp(tmp);
	if (tfd < 0) {
		fprintf(stderr, "hpct-bench: cannot make a temporary file: %s\n", strerror(errno));
		free(args);
		return 1;
	}
	close(tfd);
	args[na++] = "--json";
	args[na++] = tmp;
	static struct rel_row rows[MAX_ROWS];
	int nrows = 0, failed = 0, nlibs = 0;
	char *list = strdup(libs), *save = NULL;
	for (char *lib = strtok_r(list, ",", &save); lib; lib = strtok_r(NULL, ",", &save)) {
		if (++nlibs > MAX_LIBS) {
			fprintf(stderr, "hpct-bench: --nccl: at most %d libraries\n", MAX_LIBS);
			failed = 1;
			break;
		}
		if (access(lib, R_OK) != 0) {
			fprintf(stderr, "hpct-bench: --nccl %s: %s\n", lib, strerror(errno));
			failed = 1;
			continue;
		}
		fflush(stdout);
		pid_t pid = fork();
		if (pid == 0) {
			setenv("HPCT_NCCL_LIB", lib, 1);
			/* the table of each run is the child's: this one prints them all */
			if (!freopen("/dev/null", "w", stdout))
				_exit(127);
			execv(exe, args);
			_exit(127);
		}
		int st = 0;
		if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr,
			        "hpct-bench: the nccl-root runs against %s failed (%s %d)\n", lib,
			        pid < 0 ? "fork" : "status", st);
			failed = 1;
		}
		int k = read_rows(tmp, rows + nrows, MAX_ROWS - nrows);
		for (int i = 0; i < k; i++)
			rows[nrows + i].run = nlibs;
		if (k <= 0) {
			fprintf(stderr, "hpct-bench: no nccl-root rows from the runs against %s\n",
			        lib);
			failed = 1;
			continue;
		}
		nrows += k;
	}
	free(list);
	unlink(tmp);
	free(args);

	printf("nccl-root: simulated NCCL ranks in one process until each has its ring "
	       "neighbour, from NCCL's own\nroot (standard: one root) or hpct's micro-roots "
	       "(rootless: one a rank)\n%s\n",
	       nccl_stagger_note);
	printf("%-8s %-9s %6s %7s %10s %10s %10s %13s\n", "nccl", "path", "ranks", "repeat",
	       "median_ms", "min_ms", "max_ms", "busiest_conns");
	FILE *jf = json ? fopen(json, "w") : NULL;
	if (json && !jf)
		fprintf(stderr, "hpct-bench: cannot write %s: %s\n", json, strerror(errno));
	if (jf)
		fprintf(jf, "{\"results\":[");
	for (int i = 0; i < nrows; i++) {
		struct rel_row *r = &rows[i];
		printf("%-8s %-9s %6d %7d %10.1f %10.1f %10.1f %13d\n", r->nccl, r->path, r->ranks,
		       r->repeat, r->med, r->min, r->max, r->max_conns);
		if (jf)
			fprintf(jf,
			        "%s{\"scenario\":\"nccl-root\",\"nccl\":\"%s\",\"path\":\"%s\","
			        "\"ranks\":%d,\"median_ms\":%.3f,\"min_ms\":%.3f,\"max_ms\":%.3f,"
			        "\"repeat\":%d,\"max_conns\":%d}",
			        i ? "," : "", r->nccl, r->path, r->ranks, r->med, r->min, r->max,
			        r->repeat, r->max_conns);
	}
	if (jf) {
		fprintf(jf, "]}\n");
		fclose(jf);
	}
	/* standard over rootless, for each release and size both ran */
	for (int i = 0; i < nrows; i++)
		for (int j = 0; j < nrows; j++)
			if (strcmp(rows[i].path, "rootless") == 0 &&
			    strcmp(rows[j].path, "standard") == 0 && rows[i].run == rows[j].run &&
			    rows[i].ranks == rows[j].ranks)
				printf("nccl-root NCCL %s N=%d: standard/rootless median ratio "
				       "%.2f, "
				       "busiest process's connections %d vs %d\n",
				       rows[i].nccl, rows[i].ranks, rows[j].med / rows[i].med,
				       rows[j].max_conns, rows[i].max_conns);
	return failed;
}
