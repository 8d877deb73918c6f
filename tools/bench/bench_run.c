/* hpct-bench's runs (bench_table.h): every scenario of the plan at every
 * N on every path, the paths alternating run by run, each run into its row;
 * a row printed as soon as its (scenario, N) is done, and every 10 s of a
 * run a line on stderr saying which run it is and how far the table is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/bench/bench_table.h"
#include "tools/common/bench_env.h"
#include "tools/common/bench_progress.h"
#include "tools/common/bench_rank.h"

/* Adds one run's figures to its row. */
static void add_run(struct result *r, double ms, int conns, int repl, long msgs, long rss)
{
	r->ms[r->ok++] = ms;
	r->msgs = msgs;
	if (rss > r->max_rss)
		r->max_rss = rss;
	r->run_conns[r->ok - 1] = conns;
	r->run_repl[r->ok - 1] = repl;
	if (conns > r->max_conns)
		r->max_conns = conns;
	if (repl > r->repl_conns)
		r->repl_conns = repl;
}

/* The gloo scenario's rows, each a path and how its ranks connect Gloo's
 * pairs (HPCT_GLOO_CONNECT): hpct's pair pool on both paths, so that
 * standard against rootless is the path alone; and on the standard path
 * Gloo's own connectFullMesh, what a stock PyTorch job runs, as a row of
 * its own (std-mesh), so that std-mesh against standard is the pool alone.
 * --path standard brings both standard rows. */
static const struct gloo_row {
	const char *path, *connect;
} gloo_rows[] = { { "rootless", "pool" }, { "standard", "pool" }, { GLOO_MESH, "fullmesh" } };

static const char *gloo_connect(const char *scenario, const char *path)
{
	if (strcmp(scenario, "gloo") != 0) /* gloo-reuse, gloo-replace: the pool only */
		return strcmp(path, GLOO_MESH) == 0 ? NULL : "pool";
	for (size_t i = 0; i < sizeof(gloo_rows) / sizeof(gloo_rows[0]); i++)
		if (strcmp(gloo_rows[i].path, path) == 0)
			return gloo_rows[i].connect;
	return NULL; /* --transport's rows: the rootless default */
}

/* A Gloo creation's figures (bench_phase) added to its row. */
static void add_phase(struct result *r, double ms, int conns, int repl,
                      const struct bench_phase *ph)
{
	add_run(r, ms, conns, repl, 0, ph->max_rss);
	r->pairs_new = ph->pairs_new;
	r->pairs_kept = ph->pairs_kept;
	r->bytes = ph->bytes;
	if (ph->max_pairs > r->max_pairs)
		r->max_pairs = ph->max_pairs;
	r->ctx_ms[r->nctx++] = ph->ms;
}

int bench_setup_scen(struct scen *s, const char *name, const char *exe)
{
	s->name = name;
	s->nccl_root = strcmp(name, "nccl-root") == 0;
	s->kill_root = strcmp(name, "kill-root") == 0;
	s->restart = s->kill_root || strcmp(name, "restart") == 0;
	s->torch = strcmp(name, "torch") == 0;
	s->gloo_reuse = strcmp(name, "gloo-reuse") == 0;
	s->gloo_replace = strcmp(name, "gloo-replace") == 0;
	snprintf(s->label, sizeof(s->label), "%s", name);
	s->sc = bench_find_scenario(name);
	if ((!s->sc && !s->nccl_root && !s->restart) || strcmp(name, "recover") == 0 ||
	    strcmp(name, "fanout") == 0) {
		fprintf(stderr,
		        "hpct-bench: --scenario %s: want cold, gloo, gloo-reuse, gloo-replace, "
		        "nccl-root, restart, kill-root or torch (sim and fanout run on their "
		        "own)\n",
		        name);
		return -1;
	}
	snprintf(s->self, sizeof(s->self), "%s", exe);
	if (s->sc && s->sc->program) { /* the sibling beside this program */
		char *slash = strrchr(s->self, '/');
		snprintf(slash + 1, sizeof(s->self) - (size_t)(slash + 1 - s->self), "%s",
		         s->sc->program);
		if (access(s->self, X_OK) != 0) {
			fprintf(stderr,
			        "hpct-bench: --scenario %s: %s not found (this hpct was built "
			        "without Gloo?)\n",
			        name, s->self);
			return -1;
		}
	}
	return 0;
}

/* One run of gloo-reuse or gloo-replace with context c, into the rows of
 * scen r's group (`stride` rows apart: the next scen's); 1 if it failed. */
static int gloo_run(const struct scen *s, struct result *r, int c, int stride, int n, int nodes,
                    int rootless, int port, int run_id, double timeout, int kills, unsigned seed,
                    int rep)
{
	if (s->gloo_reuse) {
		struct bench_phase ph[2];
		if (bench_phases_once(s->self, "gloo-reuse", n, nodes, rootless, port, run_id,
		                      timeout, 2, ph) < 0)
			return 1;
		for (int t = 0; t < 2; t++) /* first, then second creation */
			add_phase(&r[(2 * c + t) * stride], ph[t].ms, ph[t].max_conns, 0, &ph[t]);
		return 0;
	}
	static const struct bench_restart_ranks ranks = { "gloo-replace", "gloo-replacement" };
	struct bench_phase ph;
	int conns = 0, repl = 0;
	double ms = bench_restart_once(s->self, n, nodes, rootless, port, run_id, timeout, 0, kills,
	                               seed, rep, 1, &ranks, &conns, &repl, &ph);
	if (ms < 0 || ph.ms < 0)
		return 1;
	add_phase(&r[c * stride], ms, conns, repl, &ph);
	return 0;
}

/* `arg`, a comma list of names each at most once, as indices into
 * names[0..n); their count, or -1 with what is wrong said, naming `opt`. */
int bench_parse_names(const char *opt, const char *arg, const char *const *names, int n, int *out)
{
	char *copy = strdup(arg), *save = NULL;
	int k = 0;
	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		int found = -1;
		for (int i = 0; i < n; i++)
			if (strcmp(t, names[i]) == 0)
				found = i;
		for (int i = 0; i < k && found >= 0; i++)
			if (out[i] == found)
				found = -1;
		if (found < 0 || k == n) {
			fprintf(stderr, "hpct-bench: %s %s: %s: want %s%s%s, each once\n", opt, arg,
			        t, names[0], n > 1 ? " and/or " : "", n > 1 ? names[1] : "");
			free(copy);
			return -1;
		}
		out[k++] = found;
	}
	free(copy);
	if (k == 0)
		fprintf(stderr, "hpct-bench: %s '%s': want %s%s%s\n", opt, arg, names[0],
		        n > 1 ? " and/or " : "", n > 1 ? names[1] : "");
	return k > 0 ? k : -1;
}

static void progress_at(const struct bench_plan *pl, const struct scen *s, int si, int i,
                        const char *path, int rep)
{
	bench_progress_at("%s N=%d %s, run %d of %d (scenario %d of %d, size %d of %d)", s->label,
	                  pl->ranks[i], path, rep + 1, pl->repeat, si + 1, pl->nscens, i + 1,
	                  pl->nranks);
}

int bench_run_all(const struct bench_plan *pl, struct result *res, double rtt)
{
	int w = bench_table_width(pl), run_id = 0, failed = 0;
	bench_progress_start("hpct-bench");
	bench_print_header(w);
	for (int si = 0; si < pl->nscens; si++) {
		const struct scen *s = &pl->scens[si];
		for (int i = 0; i < pl->nranks; i++) {
			int n = pl->ranks[i], k = pl->nodes < n ? pl->nodes : n;
			if (s->torch && s->launch->one_node)
				k = 1;
			struct result *row = &res[(si * pl->nranks + i) * pl->npaths];
			for (int p = 0; p < pl->npaths; p++) {
				row[p].scenario = s->label;
				row[p].kind = s->reinit_rows ? "torch-reinit" : s->name;
				if (s->gloo_reuse) {
					row[p].context = bench_contexts[s->gloo_copy / 2];
					row[p].creation = s->gloo_copy % 2 ? "second" : "first";
				} else if (s->gloo_replace) {
					row[p].context = bench_contexts[s->gloo_copy];
				}
				row[p].torch = s->torch ? s->release->ver : NULL;
				row[p].launch = s->torch ? s->launch->name : NULL;
				row[p].backend = s->torch ? s->backend : NULL;
				row[p].path = pl->path_names[p];
				if (strcmp(s->name, "gloo") == 0 || s->gloo_reuse ||
				    s->gloo_replace)
					row[p].connect = gloo_connect(s->name, pl->path_names[p]);
				row[p].recovery = s->restart ? (s->inprocess ? "inprocess" : "full")
				                  : s->gloo_replace ? "inprocess"
				                                    : NULL;
				/* the standard path's recovery lives in rank 0 */
				row[p].forced_full = s->kill_root && s->inprocess &&
				                     strcmp(pl->path_names[p], "standard") == 0;
				row[p].ranks = n;
				row[p].nodes = k;
				row[p].repeat = pl->repeat;
			}
			for (int rep = 0; rep < pl->repeat && !s->reinit_rows &&
			                  !(s->gloo_copy && (s->gloo_reuse || s->gloo_replace));
			     rep++) {
				for (int p = 0; p < pl->npaths; p++) {
					struct result *r = &row[p];
					if (bench_row_skipped(r))
						continue;
					progress_at(pl, s, si, i, r->path, rep);
					int conns, repl = 0;
					long msgs = 0, rss = 0;
					bench_transport = pl->path_transport[p];
					/* each run its own ports: nothing lingers from the last */
					int base = pl->port + (run_id % 4) * bench_world_ports(n, k);
					int rootless = !bench_on_standard(r->path);
					if (r->connect)
						setenv("HPCT_GLOO_CONNECT", r->connect, 1);
					else
						unsetenv("HPCT_GLOO_CONNECT");
					if (s->gloo_reuse || s->gloo_replace) {
						bench_gate = 0;
						for (int ci = 0; ci < NCONTEXTS; ci++) {
							setenv("HPCT_BENCH_CONTEXT",
							       bench_contexts[ci], 1);
							failed |= gloo_run(
							        s, r, ci, pl->nranks * pl->npaths,
							        n, k, rootless,
							        pl->port + (run_id % 4) *
							                bench_world_ports(n, k),
							        run_id, pl->timeout,
							        pl->kills < n ? pl->kills : n,
							        pl->seed, rep);
							run_id++;
						}
						continue;
					}
					if (s->torch) {
						/* timed once every rank has imported it */
						bench_gate = 1;
						bench_torch_env(rootless, s->release->ver,
						                s->backend);
						bench_torch_replicas(r->path);
						int again = pl->reinit && !s->launch->no_reinit;
						if (pl->reinit && !again)
							r[pl->nranks * pl->npaths].not_run =
							        s->launch->no_reinit;
						struct bench_torch_times tt;
						bench_torch_once(s->launch, s->release->python,
						                 s->self, n, k, rootless, base,
						                 run_id, pl->timeout, again, &tt);
						run_id++;
						if (tt.init_ms < 0 || (again && tt.reinit_ms < 0))
							failed = 1;
						if (tt.init_ms >= 0)
							add_run(r, tt.init_ms, tt.init_conns, 0,
							        0, tt.init_rss);
						if (tt.init_ms >= 0 && tt.op_us[0] > 0 &&
						    r->nops < 64) {
							for (int o = 0; o < 2 * BENCH_STORE_OPS; o++)
								r->op_us[o][r->nops] = tt.op_us[o];
							for (int o = 0; o < BENCH_STORE_CPU; o++)
								r->cpu_us[o][r->nops] = tt.cpu_us[o];
							r->nops++;
						}
						if (tt.reinit_ms >= 0) /* the next scen's rows */
							add_run(&r[pl->nranks * pl->npaths],
							        tt.reinit_ms, tt.reinit_conns, 0,
							        0, tt.reinit_rss);
						continue;
					}
					bench_gate = pl->gate;
					double ms =
					        s->nccl_root ? bench_nccl_root_once(
					                               n, rootless,
					                               pl->port + (run_id % 2) * n,
					                               pl->timeout, &conns)
					        : s->restart
					                ? bench_restart_once(
					                          s->self, n, k, rootless, base,
					                          run_id, pl->timeout, s->kill_root,
					                          pl->kills < n ? pl->kills : n,
					                          pl->seed, rep,
					                          s->inprocess && !r->forced_full,
					                          NULL, &conns, &repl, NULL)
					                : bench_run_once(s->self, s->name, n, k,
					                                 rootless, base, run_id,
					                                 pl->timeout, &conns, &msgs,
					                                 &rss);
					run_id++;
					if (ms < 0) {
						failed = 1;
						continue;
					}
					add_run(r, ms, conns, repl, msgs, rss);
				}
			}
			for (int p = 0; p < pl->npaths; p++)
				bench_print_row(&row[p], w, rtt);
		}
	}
	bench_progress_stop();
	return failed;
}
