/* hpct-bench's table (bench_table.h): each row as its runs complete, then
 * the JSON, the ratios, the summaries and the plot. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpct/nccl.h"
#include "tools/bench/bench_table.h"
#include "tools/common/bench_measure.h"
#include "tools/common/bench_plot.h"

const char *const bench_contexts[] = { "persistent", "temporary" };

static int ceil_log2(int n)
{
	int k = 0;
	while ((1 << k) < n)
		k++;
	return k;
}

/* std-mesh is a row of the gloo scenario only: in a list of scenarios the
 * others skip it. */
int bench_row_skipped(const struct result *r)
{
	return strcmp(r->path, GLOO_MESH) == 0 && !r->connect;
}

/* A row of the standard path: its own name, PyTorch's, or gloo's std-mesh. */
int bench_on_standard(const char *path)
{
	return strcmp(path, "standard") == 0 || strcmp(path, "stock") == 0 ||
	       strcmp(path, GLOO_MESH) == 0;
}

/* The store operations' round trips, for their floor: the requests a
 * TCPStore client makes that wait for an answer (set none: TCPStore's SET
 * has no answer; get a WAIT then a GET), and whether each is a write.
 * Stock: one round trip a request (to rank 0's server).  hpct: two (the
 * rank's loopback listener, then the key's primary; a read under the
 * primary's lease), a write a third where there are backups (the first
 * backup's acknowledgement makes the quorum). */
static const struct store_op {
	const char *name;
	int requests, write;
} store_ops[BENCH_STORE_OPS] = {
	{ "set", 0, 1 },         { "get", 2, 0 },  { "add", 1, 1 },
	{ "compare_set", 1, 1 }, { "wait", 1, 0 }, { "multi_get", 2, 0 },
};

/* A row's copies of each key: rootless-rK's K, rootless's
 * HPCT_STORE_REPLICAS (3 by default), at most N; 0 for stock. */
static int row_copies(const struct result *r)
{
	if (bench_on_standard(r->path))
		return 0;
	const char *env = getenv("HPCT_STORE_REPLICAS");
	int k = strncmp(r->path, "rootless-r", 10) == 0 ? atoi(r->path + 10)
	        : env && *env                           ? atoi(env)
	                                                : 3;
	return k < r->ranks ? k : r->ranks;
}

/* After the table, for torch --store-ops: each row's store operations,
 * median and 99th percentile (the median over runs of the ranks' mean of
 * their own), "-" for one the torch lacks (1.13's multi_get); then each
 * row's floor, its round trips x the loopback round trip measured. */
static void store_ops_summary(struct result *res, int nres, int ops, double rtt)
{
	int head = 0;
	for (int i = 0; i < nres; i++) {
		struct result *r = &res[i];
		if (!r->nops)
			continue;
		if (!head++) {
			printf("store operations, us, median / p99 (%d of each per rank, all ranks "
			       "at once, on the process group's store; the median over runs of the "
			       "ranks' mean):\n%-26s %-11s %6s",
			       ops, "scenario", "path", "ranks");
			for (int o = 0; o < BENCH_STORE_OPS; o++)
				printf(" %15s", store_ops[o].name);
			printf("\n");
		}
		printf("%-26s %-11s %6d", r->scenario, r->path, r->ranks);
		for (int o = 0; o < BENCH_STORE_OPS; o++) {
			double m = median_of(r->op_us[o], r->nops);
			double p = median_of(r->op_us[BENCH_STORE_OPS + o], r->nops);
			char cell[32] = "-";
			if (m > 0)
				snprintf(cell, sizeof(cell), "%.0f / %.0f", m, p);
			printf(" %15s", cell);
		}
		printf("\n");
	}
	if (!head)
		return;
	printf("CPU a round of the six (us, the ranks' mean, the median over runs): the thread "
	       "calling the store / the served store's listener / its server / every other "
	       "thread (stock's rank 0: its TCPStore server):\n");
	for (int i = 0; i < nres; i++) {
		struct result *r = &res[i];
		if (!r->nops)
			continue;
		printf("%-26s %-11s %6d", r->scenario, r->path, r->ranks);
		for (int o = 0; o < BENCH_STORE_CPU; o++)
			printf(" %9.1f", median_of(r->cpu_us[o], r->nops));
		printf("\n");
	}
	if (rtt <= 0)
		return;
	printf("floor, us: each operation's round trips (stock one a request; hpct two, the rank's "
	       "listener and the key's primary, a write a third with backups) x the loopback round "
	       "trip, %.1f us:\n",
	       rtt * 1000);
	for (int i = 0; i < nres; i++) { /* a line a path: the floor has no N */
		struct result *r = &res[i];
		int said = !r->nops;
		for (int j = 0; j < i && !said; j++)
			said = res[j].nops && strcmp(res[j].path, r->path) == 0 &&
			       row_copies(&res[j]) == row_copies(r);
		if (said)
			continue;
		int copies = row_copies(r);
		printf("%-26s %-11s %6s", r->scenario, r->path, "any");
		for (int o = 0; o < BENCH_STORE_OPS; o++) {
			const struct store_op *op = &store_ops[o];
			int trips = op->requests * (copies ? 2 + (op->write && copies > 1) : 1);
			char cell[32] = "-"; /* no answer to wait for */
			if (trips)
				snprintf(cell, sizeof(cell), "%d x = %.0f", trips, trips * rtt * 1000);
			printf(" %15s", cell);
		}
		printf("\n");
	}
}

/* A torch --store-ops row's JSON members: "op_us", the medians over runs of
 * store_ops' medians then 99th percentiles, and "cpu_us", of a round's CPU
 * in the rank's client, listener, server and other threads (the ranks'
 * mean), after "store_ops", the rounds; the simulator's store model reads
 * them (tools/sim/sim_store.c). */
static void store_ops_json(struct result *r, int ops, char *out, size_t len)
{
	size_t at = (size_t)snprintf(out, len, ",\"store_ops\":%d,\"op_us\":[", ops);
	for (int o = 0; o < 2 * BENCH_STORE_OPS && at < len; o++)
		at += (size_t)snprintf(out + at, len - at, "%s%.1f", o ? "," : "",
		                       median_of(r->op_us[o], r->nops));
	if (at < len)
		at += (size_t)snprintf(out + at, len - at, "],\"cpu_us\":[");
	for (int o = 0; o < BENCH_STORE_CPU && at < len; o++)
		at += (size_t)snprintf(out + at, len - at, "%s%.2f", o ? "," : "",
		                       median_of(r->cpu_us[o], r->nops));
	if (at < len)
		snprintf(out + at, len - at, "]");
}

/* The row of (scenario, recovery, path, N), or NULL if it did not run. */
static const struct result *find_row(const struct result *res, int nres, const char *scenario,
                                     const char *recovery, const char *path, int n)
{
	for (int i = 0; i < nres; i++)
		if (res[i].ok && res[i].recovery && strcmp(res[i].kind, scenario) == 0 &&
		    strcmp(res[i].recovery, recovery) == 0 && strcmp(res[i].path, path) == 0 &&
		    res[i].ranks == n)
			return &res[i];
	return NULL;
}

/* The row of (JSON scenario, context, creation, path, N), or NULL if it
 * did not run. */
static const struct result *find_gloo_row(const struct result *res, int nres, const char *kind,
                                          const char *context, const char *creation,
                                          const char *path, int n)
{
	for (int i = 0; i < nres; i++)
		if (res[i].ok && res[i].context && strcmp(res[i].kind, kind) == 0 &&
		    strcmp(res[i].context, context) == 0 && strcmp(res[i].path, path) == 0 &&
		    res[i].ranks == n &&
		    (!creation || (res[i].creation && strcmp(res[i].creation, creation) == 0)))
			return &res[i];
	return NULL;
}

/* After the table, for gloo-reuse: per path and N, first against second
 * creation of each context, side by side; for gloo-replace, the persistent
 * context against the temporary one after the same recovery.  Medians are
 * in ms[0] and ctx_ms[0] by now. */
static void gloo_summary(const struct result *res, int nres)
{
	for (int i = 0; i < nres; i++) {
		const struct result *r = &res[i];
		if (!r->ok || !r->context || strcmp(r->context, "persistent") != 0)
			continue;
		if (r->creation && strcmp(r->creation, "first") == 0) {
			printf("gloo-reuse N=%d %s: second/first creation, median:", r->ranks,
			       r->path);
			for (int c = 0; c < NCONTEXTS; c++) {
				const struct result *a = find_gloo_row(res, nres, "gloo-reuse",
				                                       bench_contexts[c], "first",
				                                       r->path, r->ranks),
				                    *b = find_gloo_row(res, nres, "gloo-reuse",
				                                       bench_contexts[c], "second",
				                                       r->path, r->ranks);
				if (a && b)
					printf("%s %s %.3f (%.1f -> %.1f ms; pairs new per rank "
					       "%d -> %d; bytes exchanged %ld -> %ld)",
					       c ? ";" : "", bench_contexts[c], b->ms[0] / a->ms[0],
					       a->ms[0], b->ms[0], a->max_pairs, b->max_pairs,
					       a->bytes, b->bytes);
			}
			printf("\n");
		} else if (!r->creation) {
			const struct result *t = find_gloo_row(
			        res, nres, "gloo-replace", "temporary", NULL, r->path, r->ranks);
			printf("gloo-replace N=%d %s: new pairs after the recovery, persistent "
			       "%ld (%ld pair ends), most per rank %d",
			       r->ranks, r->path, r->pairs_new / 2, r->pairs_new, r->max_pairs);
			if (t)
				printf(", temporary %ld (%ld), most %d; persistent/temporary, "
				       "median: %.3f from the kill (%.1f against %.1f ms), %.3f "
				       "from the barrier after the recovery (%.1f against %.1f "
				       "ms)",
				       t->pairs_new / 2, t->pairs_new, t->max_pairs,
				       r->ms[0] / t->ms[0], r->ms[0], t->ms[0],
				       r->ctx_ms[0] / t->ctx_ms[0], r->ctx_ms[0], t->ctx_ms[0]);
			printf("\n");
		}
	}
}

/* After the table, for torch --reinit: each row's second incarnation
 * against its first, side by side. */
static void reinit_summary(const struct result *res, int nres, int stride)
{
	for (int i = 0; i + stride < nres; i++) {
		const struct result *a = &res[i], *b = &res[i + stride];
		if (!a->ok || !b->ok || !a->torch || strcmp(b->kind, "torch-reinit") != 0 ||
		    strcmp(a->kind, "torch") != 0)
			continue;
		printf("%s N=%d %s: second/first incarnation, median ratio %.3f (%.1f -> %.1f "
		       "ms)\n",
		       a->scenario, a->ranks, a->path, b->ms[0] / a->ms[0], a->ms[0], b->ms[0]);
	}
}

/* After the table, for restart and kill-root: the connections the
 * in-process recoveries opened, and, per N, which ratio is whose: the
 * root's (standard against rootless, the same recovery on both paths) and
 * the in-process recovery's (full restart against in-process, one path).
 * Medians are in ms[0] by now. */
static void recovery_summary(const struct result *res, int nres)
{
	static const char *const scen[2] = { "restart", "kill-root" };
	static const char *const paths[2] = { "rootless", "standard" };
	for (int i = 0; i < nres; i++) {
		const struct result *r = &res[i];
		if (!r->ok || !r->recovery || strcmp(r->recovery, "inprocess") != 0)
			continue;
		if (r->forced_full) {
			printf("%s N=%d %s: full restart forced: the root died (the standard "
			       "path's rendezvous lived in rank 0)\n",
			       r->scenario, r->ranks, r->path);
			continue;
		}
		printf("%s N=%d %s: new connections, at most per survivor %d, per replacement "
		       "%d; run by run (survivor/replacement):",
		       r->scenario, r->ranks, r->path, r->max_conns, r->repl_conns);
		for (int k = 0; k < r->ok; k++)
			printf(" %d/%d", r->run_conns[k], r->run_repl[k]);
		printf("\n");
	}
	for (int s = 0; s < 2; s++)
		for (int i = 0; i < nres; i++) {
			const struct result *r = &res[i];
			if (!r->ok || !r->recovery || strcmp(r->kind, scen[s]) != 0 ||
			    strcmp(r->path, "rootless") != 0 || strcmp(r->recovery, "full") != 0)
				continue;
			const struct result *v[2][2]; /* [full, inprocess][rootless, standard] */
			int all = 1;
			for (int m = 0; m < 2; m++)
				for (int p = 0; p < 2; p++)
					all &= (v[m][p] = find_row(res, nres, scen[s],
					                           m ? "inprocess" : "full",
					                           paths[p], r->ranks)) != NULL;
			if (!all)
				continue;
			printf("%s N=%d: the root's cost, standard/rootless: %.2f in a full "
			       "restart, %.2f in-process%s; what in-process recovery saves, "
			       "full/in-process: %.2f rootless, %.2f standard\n",
			       scen[s], r->ranks, v[0][1]->ms[0] / v[0][0]->ms[0],
			       v[1][1]->ms[0] / v[1][0]->ms[0],
			       v[1][1]->forced_full ? " (standard forced to restart in full)" : "",
			       v[0][0]->ms[0] / v[1][0]->ms[0], v[0][1]->ms[0] / v[1][1]->ms[0]);
		}
}

int bench_table_width(const struct bench_plan *plan)
{
	int w = 9; /* the scenario column: as wide as its longest name */
	for (int si = 0; si < plan->nscens; si++)
		if ((int)strlen(plan->scens[si].label) > w)
			w = (int)strlen(plan->scens[si].label);
	return w;
}

void bench_print_header(int w)
{
	printf("%-*s %-9s %6s %6s %7s %10s %10s %10s %9s %10s %10s %11s\n", w, "scenario", "path",
	       "ranks", "nodes", "repeat", "median_ms", "min_ms", "max_ms", "floor_ms", "max_conns",
	       "conn_bound", "max_rss_mb");
	fflush(stdout);
}

/* The rootless bound on a rank's connections and the floor of its join
 * ("-" where none applies); the floor in ms. */
static double row_floor(const struct result *r, double rtt, char bound[16], char floor[16])
{
	int nccl_root = strcmp(r->scenario, "nccl-root") == 0;
	double floor_ms = ceil_log2(r->ranks) * rtt;
	snprintf(bound, 16, "-");
	snprintf(floor, 16, "-");
	if (!bench_on_standard(r->path) && !r->context) { /* a creation joins nothing */
		snprintf(bound, 16, "%d", nccl_root ? 6 : 2 * ceil_log2(r->ranks) + 2);
		/* the physical floor of a rootless join: ceil(log2 N)
		 * round trips, one per round of a tree or dissemination */
		if (rtt > 0 && !nccl_root)
			snprintf(floor, 16, "%.3f", floor_ms);
	}
	return floor_ms;
}

void bench_print_row(struct result *r, int w, double rtt)
{
	if (bench_row_skipped(r))
		return;
	if (r->ok == 0) {
		printf("%-*s %-9s %6d %6d %7d %10s\n", w, r->scenario, r->path, r->ranks, r->nodes,
		       0, r->not_run ? "not run" : "failed");
		fflush(stdout);
		return;
	}
	qsort(r->ms, (size_t)r->ok, sizeof(double), cmp_double);
	r->med = r->ok % 2 ? r->ms[r->ok / 2] : (r->ms[r->ok / 2 - 1] + r->ms[r->ok / 2]) / 2;
	char bound[16], floor[16], rss[16] = "-";
	row_floor(r, rtt, bound, floor);
	if (r->max_rss > 0)
		snprintf(rss, sizeof(rss), "%.1f", r->max_rss / 1024.0);
	printf("%-*s %-9s %6d %6d %7d %10.1f %10.1f %10.1f %9s %10d %10s %11s\n", w, r->scenario,
	       r->path, r->ranks, r->nodes, r->ok, r->med, r->ms[0], r->ms[r->ok - 1], floor,
	       r->max_conns, bound, rss);
	fflush(stdout);
}

int bench_report(const struct bench_plan *plan, struct result *res, int nres, double rtt,
                 double fork_exec)
{
	int failed = 0, npaths = plan->npaths;
	char detail[128];
	snprintf(detail, sizeof(detail),
	         "kill %d; full: every rank starts again; inprocess: survivors stay", plan->kills);
	struct plot_row *rows = calloc((size_t)nres, sizeof(*rows));
	int nrows = 0;
	FILE *jf = plan->json ? fopen(plan->json, "w") : NULL;
	if (plan->json && !jf)
		fprintf(stderr, "hpct-bench: cannot write %s: %s\n", plan->json, strerror(errno));
	if (jf && fork_exec > 0)
		fprintf(jf, "{\"rtt_ms\":%.4f,\"fork_exec_ms\":%.4f,\"results\":[", rtt, fork_exec);
	else if (jf)
		fprintf(jf, "{\"rtt_ms\":%.4f,\"results\":[", rtt);
	for (int i = 0; i < nres && rows; i++) {
		struct result *r = &res[i];
		int nccl_root = strcmp(r->scenario, "nccl-root") == 0;
		if (bench_row_skipped(r) || r->ok == 0) /* said in its line */
			continue;
		char bound[16], floor[16];
		double floor_ms = row_floor(r, rtt, bound, floor);
		char extra[960] = "";
		int nv = 0;
		if (nccl_root && hpct_nccl_version(&nv) == 0)
			snprintf(extra, sizeof(extra), ",\"nccl\":\"%d.%d.%d\"", nv / 10000,
			         nv / 100 % 100, nv % 100);
		else if (r->torch)
			snprintf(extra, sizeof(extra),
			         ",\"torch\":\"%s\",\"launch\":\"%s\",\"backend\":\"%s\"", r->torch,
			         r->launch, r->backend);
		else if (r->context) {
			r->ctx_ms[0] = median_of(r->ctx_ms, r->nctx);
			snprintf(extra, sizeof(extra),
			         ",\"connect\":\"%s\",\"context\":\"%s\",\"%s\":\"%s\",\"context_"
			         "ms\":%.3f,"
			         "\"pairs_new\":%ld,\"max_pairs_new\":%d,\"pairs_kept\":%ld,"
			         "\"bytes_exchanged\":%ld",
			         r->connect, r->context, r->creation ? "creation" : "recovery",
			         r->creation ? r->creation : r->recovery, r->ctx_ms[0],
			         r->pairs_new, r->max_pairs, r->pairs_kept, r->bytes);
		} else if (r->connect)
			snprintf(extra, sizeof(extra), ",\"connect\":\"%s\"", r->connect);
		else if (r->recovery)
			snprintf(extra, sizeof(extra),
			         ",\"recovery\":\"%s\",\"forced_full\":%s,\"state_bytes\":%llu",
			         r->recovery, r->forced_full ? "true" : "false",
			         (unsigned long long)plan->state);
		if (strcmp(floor, "-") != 0)
			snprintf(extra + strlen(extra), sizeof(extra) - strlen(extra),
			         ",\"floor_ms\":%.4f", floor_ms);
		if (r->nops)
			store_ops_json(r, plan->store_ops, extra + strlen(extra),
			               sizeof(extra) - strlen(extra));
		if (jf)
			fprintf(jf,
			        "%s{\"scenario\":\"%s\",\"path\":\"%s\",\"ranks\":%d,\"nodes\":%d,"
			        "\"median_ms\":%.3f,\"min_ms\":%.3f,\"max_ms\":%.3f,\"repeat\":%d,"
			        "\"max_conns\":%d,\"total_msgs\":%ld,\"max_rss_kb\":%ld%s}",
			        nrows ? "," : "", r->kind, r->path, r->ranks, r->nodes, r->med,
			        r->ms[0], r->ms[r->ok - 1], r->ok, r->max_conns, r->msgs,
			        r->max_rss, extra);
		rows[nrows++] = (struct plot_row){ .scenario = r->scenario,
			                           .path = r->path,
			                           .detail = r->recovery ? detail : NULL,
			                           .ranks = r->ranks,
			                           .median_ms = r->med,
			                           .min_ms = r->ms[0],
			                           .max_ms = r->ms[r->ok - 1] };
		r->ms[0] = r->med; /* kept for the ratio line */
	}
	if (jf) {
		fprintf(jf, "]}\n");
		fclose(jf);
	}
	/* every later row of a scenario and N against each earlier one: with
	 * gloo's three, standard/rootless (the path), std-mesh/rootless (both)
	 * and std-mesh/standard (the pool) */
	for (int i = 0; i < nres; i += npaths)
		for (int a = i; a < i + npaths; a++)
			for (int b = a + 1; b < i + npaths; b++)
				if (res[a].ok && res[b].ok)
					printf("%s N=%d: %s/%s median ratio %.2f\n",
					       res[a].scenario, res[a].ranks, res[b].path,
					       res[a].path, res[b].ms[0] / res[a].ms[0]);
	recovery_summary(res, nres);
	gloo_summary(res, nres);
	store_ops_summary(res, nres, plan->store_ops, rtt);
	reinit_summary(res, nres, plan->nranks * npaths);
	for (int si = 0; si < plan->nscens; si++)
		if (plan->scens[si].nccl_root) {
			printf("nccl-root %s\n", nccl_stagger_note);
			break;
		}
	for (int i = 0; i < nres; i++) { /* each reason once, after its rows */
		int said = !res[i].not_run;
		for (int j = 0; j < i && !said; j++)
			said = res[j].not_run == res[i].not_run;
		for (int k = i; k < nres && !said; k++) {
			int dup = res[k].not_run != res[i].not_run;
			for (int j = i; j < k && !dup; j++)
				dup = res[j].not_run == res[i].not_run &&
				      res[j].scenario == res[k].scenario &&
				      strcmp(res[j].path, res[k].path) == 0;
			if (!dup)
				printf("%s%s %s", k > i ? ", " : "", res[k].scenario, res[k].path);
		}
		if (!said)
			printf(": not run: %s\n", res[i].not_run);
	}
	/* what the figures above stand on, measured before the runs */
	if (rtt > 0)
		printf("loopback TCP round trip between two processes: %.1f us (median of 200); "
		       "floor_ms = ceil(log2 N) x that\n",
		       rtt * 1000);
	if (fork_exec > 0)
		printf("fork+exec of /bin/true, to its exit: %.2f ms (median of 200)\n", fork_exec);
	if (plan->plot && rows) {
		if (bench_plot(plan->plot, rows, nrows, rtt) == 0)
			printf("plot written to %s\n", plan->plot);
		else
			failed = 1;
	}
	free(rows);
	return failed;
}
