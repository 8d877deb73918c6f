/* hpct-bench: launches local ranks itself and times bootstrap scenarios,
 * side by side for the rootless and the standard path.  This file: the
 * options and the plan; the scenarios and the table's columns are described
 * in bench_table.h, the runs are bench_run.c's, the table bench_report.c's;
 * sim, fanout, nvrx and nccl-init are programs or files of their own.
 *
 *   hpct-bench --scenario cold|gloo|nccl-root --ranks 64,256 --path rootless,standard
 *              --repeat 5 [--nodes K] [--json FILE] [--timeout S]
 *   hpct-bench --scenario nccl-root --ranks 64,256,1024 --nccl LIB,LIB
 *   hpct-bench --scenario torch --torch 1.13,2.13 --path stock,rootless --reinit
 *              [--launch direct,torchrun] [--replicas 1,3] [--store-ops K]
 *              [--backend gloo,nccl]
 *   hpct-bench --scenario nvrx [--ranks 4] [--repeat 3]   (bench_nvrx.c)
 *   hpct-bench --scenario nccl-init [--ranks 8,16,32,64]  (bench_nccl_init.c) */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hpct/hpct.h"
#include "tools/bench/bench_table.h"
#include "tools/common/bench_measure.h"
#include "tools/common/bench_rank.h"

static int parse_list(const char *s, int *out)
{
	int n = 0;
	char *copy = strdup(s), *save = NULL;
	for (char *t = strtok_r(copy, ",", &save); t && n < MAX_LIST;
	     t = strtok_r(NULL, ",", &save)) {
		char *end;
		long v = strtol(t, &end, 10);
		if (*end || v < 1 || v > 4096) {
			free(copy);
			return -1;
		}
		out[n++] = (int)v;
	}
	free(copy);
	return n;
}

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: hpct-bench --scenario S[,S..] --ranks N[,N..] [--path rootless,standard]\n"
	        "                  [--repeat R] [--nodes K] [--json FILE] [--plot FILE.png]\n"
	        "                  [--timeout S] [--port P] [--kill K] [--recovery "
	        "full,inprocess]\n"
	        "                  [--seed S] [--transport tcp,ofi] [--gate]\n"
	        "                  [--state SIZE] (restart, kill-root: the new ranks' state,\n"
	        "                  from the survivors or from a file; --ranks 16 by default)\n"
	        "                  [--nccl LIBNCCL[,LIBNCCL..]] (nccl-root: one table over "
	        "releases)\n"
	        "                  [--torch 1.13,2.13,2.14,2.15] [--reinit] (torch: the releases, "
	        "and a second\n"
	        "                  incarnation after destroy_process_group)\n"
	        "                  [--launch direct,torchrun] (torch: ranks started together, "
	        "rank 0's\n"
	        "                  server the store; and/or torchrun's workers, its agent's "
	        "store;\n"
	        "                  default both)\n"
	        "                  [--replicas 1,3] (torch: a rootless row per "
	        "HPCT_STORE_REPLICAS)\n"
	        "                  [--store-ops K] (torch: then K SET/GET/ADD/WAIT a rank, "
	        "timed)\n"
	        "                  [--backend gloo,nccl] (torch: the process group's backend; "
	        "nccl wants\n"
	        "                  a CUDA torch, 2.14 or 2.15, and a GPU or tests/standin)\n"
	        "scenarios: cold, gloo (the standard path adds a row std-mesh: Gloo's own\n"
	        "connectFullMesh, where standard connects through hpct's pool as rootless\n"
	        "does), gloo-reuse (a persistent and a temporary Gloo context created\n"
	        "twice), gloo-replace (created again after --kill K ranks were replaced in\n"
	        "process), nccl-root, restart, kill-root, torch (paths stock and\n"
	        "rootless: an unmodified PyTorch job, with libhpct_preload.so for rootless);\n"
	        "and sim, fanout, nvrx (NVIDIA Resiliency Extension's restart, a rank\n"
	        "killed) and nccl-init (real NCCL ranks, stock against derived ids) on their\n"
	        "own (hpct-bench --scenario sim --help, ... fanout --help)\n");
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--as-rank") == 0) {
		const struct scenario *sc = bench_find_scenario(argv[2]);
		return sc && sc->rank ? bench_rank_main(sc->rank) : 2;
	}
	for (int i = 1; i < argc; i++) { /* their own options and tables */
		const char *sc = strcmp(argv[i], "--scenario") == 0 && i + 1 < argc ? argv[i + 1]
		                 : strncmp(argv[i], "--scenario=", 11) == 0         ? argv[i] + 11
		                                                                    : "";
		if (strcmp(sc, "fanout") == 0)
			return bench_fanout_main(argc, argv);
		if (strcmp(sc, "nvrx") == 0)
			return bench_nvrx_main(argc, argv);
		if (strcmp(sc, "nccl-init") == 0)
			return bench_nccl_init_main(argc, argv);
	}
	/* --scenario sim is a program of its own (it links libhpct's engine
	 * from the internal archive): hand it the rest of the arguments */
	for (int i = 1; i < argc; i++) {
		int two = strcmp(argv[i], "--scenario") == 0 && i + 1 < argc;
		if ((two && strcmp(argv[i + 1], "sim") == 0) ||
		    strcmp(argv[i], "--scenario=sim") == 0) {
			char prog[4096];
			ssize_t pl = readlink("/proc/self/exe", prog, sizeof(prog) - 1);
			if (pl <= 0)
				return 1;
			prog[pl] = 0;
			char *slash = strrchr(prog, '/');
			snprintf(slash + 1, sizeof(prog) - (size_t)(slash + 1 - prog),
			         "hpct-bench-sim");
			char **args = calloc((size_t)argc + 1, sizeof(char *));
			int n = 0;
			args[n++] = prog;
			for (int j = 1; j < argc; j++)
				if (j != i && !(two && j == i + 1))
					args[n++] = argv[j];
			execv(prog, args);
			fprintf(stderr, "hpct-bench: --scenario sim: cannot run %s: %s\n", prog,
			        strerror(errno));
			return 2;
		}
	}
	const char *scenario_arg = "cold", *paths = "rootless,standard", *json = NULL;
	const char *recovery_arg = "full", *plot = NULL, *transports = NULL, *nccl_libs = NULL;
	const char *torch_arg = NULL, *launch_arg = NULL, *replicas_arg = NULL;
	const char *backend_arg = NULL;
	int kills = 1, reinit = 0, store_ops = 0;
	uint64_t state = 0;
	unsigned seed = 1;
	int ranks[MAX_LIST], nranks = 0, repeat = 5, nodes = 4, port = 15000;
	double timeout = 120;
	static const struct option opts[] = { { "scenario", required_argument, NULL, 's' },
		                              { "ranks", required_argument, NULL, 'n' },
		                              { "path", required_argument, NULL, 'p' },
		                              { "repeat", required_argument, NULL, 'r' },
		                              { "nodes", required_argument, NULL, 'k' },
		                              { "json", required_argument, NULL, 'j' },
		                              { "plot", required_argument, NULL, 'G' },
		                              { "transport", required_argument, NULL, 'T' },
		                              { "gate", no_argument, NULL, 'g' },
		                              { "timeout", required_argument, NULL, 't' },
		                              { "port", required_argument, NULL, 'P' },
		                              { "kill", required_argument, NULL, 'K' },
		                              { "recovery", required_argument, NULL, 'R' },
		                              { "seed", required_argument, NULL, 'S' },
		                              { "nccl", required_argument, NULL, 'N' },
		                              { "torch", required_argument, NULL, 'V' },
		                              { "reinit", no_argument, NULL, 'I' },
		                              { "launch", required_argument, NULL, 'L' },
		                              { "state", required_argument, NULL, 'Z' },
		                              { "store-ops", required_argument, NULL, 'O' },
		                              { "replicas", required_argument, NULL, 'Q' },
		                              { "backend", required_argument, NULL, 'B' },
		                              { "help", no_argument, NULL, 'h' },
		                              { NULL, 0, NULL, 0 } };
	int c;
	while ((c = getopt_long(argc, argv, "s:n:p:r:k:j:G:T:gt:P:K:R:S:N:V:IL:Z:O:Q:B:h", opts,
	                        NULL)) != -1) {
		switch (c) {
		case 'g':
			bench_gate = 1;
			break;
		case 'T':
			transports = optarg;
			break;
		case 's':
			scenario_arg = optarg;
			break;
		case 'n':
			if ((nranks = parse_list(optarg, ranks)) <= 0) {
				fprintf(stderr,
				        "hpct-bench: --ranks %s: want a comma list of 1..4096\n",
				        optarg);
				return 2;
			}
			break;
		case 'p':
			paths = optarg;
			break;
		case 'r':
			repeat = atoi(optarg);
			break;
		case 'k':
			nodes = atoi(optarg);
			break;
		case 'j':
			json = optarg;
			break;
		case 'G':
			plot = optarg;
			break;
		case 't':
			timeout = atof(optarg);
			break;
		case 'P':
			port = atoi(optarg);
			break;
		case 'K':
			kills = atoi(optarg);
			break;
		case 'R':
			recovery_arg = optarg;
			break;
		case 'S':
			seed = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'N':
			nccl_libs = optarg;
			break;
		case 'V':
			torch_arg = optarg;
			break;
		case 'I':
			reinit = 1;
			break;
		case 'L':
			launch_arg = optarg;
			break;
		case 'O':
			if ((store_ops = atoi(optarg)) < 1 || store_ops > 100000) {
				fprintf(stderr, "hpct-bench: --store-ops %s: want 1..100000\n",
				        optarg);
				return 2;
			}
			break;
		case 'Q':
			replicas_arg = optarg;
			break;
		case 'B':
			backend_arg = optarg;
			break;
		case 'Z':
			if (!(state = bench_parse_size(optarg))) {
				fprintf(stderr, "hpct-bench: --state %s: want a size (256M)\n",
				        optarg);
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	/* --recovery: full and/or inprocess, each its own rows */
	static const char *const recovery_names[] = { "full", "inprocess" };
	int recov_idx[2];
	int nrecov = bench_parse_names("--recovery", recovery_arg, recovery_names, 2, recov_idx);
	if (nrecov < 0)
		return 2;
	const char *recoveries[2];
	for (int i = 0; i < nrecov; i++)
		recoveries[i] = recovery_names[recov_idx[i]];
	if (kills > 64) {
		fprintf(stderr, "hpct-bench: --kill %d: at most 64\n", kills);
		return 2;
	}
	if (plot && (strlen(plot) < 5 || strcmp(plot + strlen(plot) - 4, ".png") != 0)) {
		fprintf(stderr, "hpct-bench: --plot %s: want a file name ending in .png\n", plot);
		return 2;
	}
	char exe[4096];
	ssize_t sl = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (sl <= 0)
		return 1;
	exe[sl] = 0;
	/* --launch and --torch, checked before anything runs */
	static struct bench_torch releases[MAX_TORCH];
	int ntorch = 0, want_torch = strstr(scenario_arg, "torch") != NULL;
	const char *torch_only = torch_arg      ? "--torch"
	                         : reinit       ? "--reinit"
	                         : launch_arg   ? "--launch"
	                         : store_ops    ? "--store-ops"
	                         : replicas_arg ? "--replicas"
	                         : backend_arg  ? "--backend"
	                                        : NULL;
	if (torch_only && !want_torch) {
		fprintf(stderr, "hpct-bench: %s goes with --scenario torch only\n", torch_only);
		return 2;
	}
	if (store_ops) { /* the ranks measure after the timed init */
		char v[16];
		snprintf(v, sizeof(v), "%d", store_ops);
		setenv("HPCT_BENCH_STORE_OPS", v, 1);
	}

	const struct bench_launch *launches[MAX_LAUNCH];
	int nlaunch = 0, nback = 0, back_idx[MAX_BACKEND];
	static const char *const backend_names[MAX_BACKEND] = { "gloo", "nccl" };
	if (want_torch) {
		nback = bench_parse_names("--backend", backend_arg ? backend_arg : "gloo",
		                          backend_names, MAX_BACKEND, back_idx);
		if (nback < 0)
			return 2;
		static const char *const launch_names[] = { "direct", "torchrun" };
		int launch_idx[MAX_LAUNCH];
		nlaunch = bench_parse_names("--launch", launch_arg ? launch_arg : "direct,torchrun",
		                            launch_names, 2, launch_idx);
		if (nlaunch < 0)
			return 2;
		for (int i = 0; i < nlaunch; i++)
			launches[i] = bench_launch_find(launch_names[launch_idx[i]]);
		/* --torch: each release with its interpreter */
		char *tl = strdup(torch_arg ? torch_arg : "1.13"), *tsave = NULL;
		for (char *t = strtok_r(tl, ",", &tsave); t; t = strtok_r(NULL, ",", &tsave)) {
			if (ntorch == MAX_TORCH || bench_torch_find(t, &releases[ntorch]) < 0) {
				if (ntorch == MAX_TORCH)
					fprintf(stderr, "hpct-bench: --torch %s: at most %d\n",
					        torch_arg, MAX_TORCH);
				free(tl);
				return 2;
			}
			ntorch++;
		}
		free(tl);
	}
	static struct scen scens[MAX_SCENARIOS];
	int nscens = 0;
	char *list = strdup(scenario_arg), *save = NULL;
	for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		int recov = strcmp(tok, "restart") == 0 || strcmp(tok, "kill-root") == 0;
		int copies = strcmp(tok, "torch") == 0 ? ntorch * nback * nlaunch * (1 + reinit)
		             : recov                            ? nrecov
		             : strcmp(tok, "gloo-reuse") == 0   ? 2 * NCONTEXTS
		             : strcmp(tok, "gloo-replace") == 0 ? NCONTEXTS
		                                                : 1;
		if (nscens + copies > MAX_SCENARIOS) {
			fprintf(stderr, "hpct-bench: --scenario %s: at most %d scenarios\n",
			        scenario_arg, MAX_SCENARIOS);
			free(list);
			return 2;
		}
		for (int copy = 0; copy < copies; copy++) {
			struct scen *s = &scens[nscens++];
			if (bench_setup_scen(s, tok, exe) < 0) {
				free(list);
				return 2;
			}
			if (s->restart) {
				s->inprocess = strcmp(recoveries[copy], "inprocess") == 0;
				snprintf(s->label, sizeof(s->label), "%s/%s", tok,
				         recoveries[copy]);
			}
			s->gloo_copy = copy;
			if (s->gloo_reuse)
				snprintf(s->label, sizeof(s->label), "%s/%s/%s", tok,
				         bench_contexts[copy / 2], copy % 2 ? "2nd" : "1st");
			if (s->gloo_replace)
				snprintf(s->label, sizeof(s->label), "%s/%s", tok,
				         bench_contexts[copy]);
			if (!s->torch)
				continue;
			/* release, backend, then launch, then the second
			 * incarnation's rows right after the first's */
			int per_backend = nlaunch * (1 + reinit);
			s->release = &releases[copy / (nback * per_backend)];
			s->backend = backend_names[back_idx[copy / per_backend % nback]];
			s->launch = launches[copy / (1 + reinit) % nlaunch];
			s->reinit_rows = copy % (1 + reinit);
			snprintf(s->label, sizeof(s->label), "torch-%s%s%s%s%s", s->release->ver,
			         strcmp(s->backend, "gloo") ? "-" : "",
			         strcmp(s->backend, "gloo") ? s->backend : "", s->launch->label,
			         s->reinit_rows ? "-reinit" : "");
		}
	}
	if (state && !strstr(scenario_arg, "restart") && !strstr(scenario_arg, "kill-root")) {
		fprintf(stderr, "hpct-bench: --state goes with --scenario restart or kill-root\n");
		free(list);
		return 2;
	}
	if (state && nranks == 0) /* 16 x the state, not 1024 x */
		ranks[nranks++] = 16;
	if (nscens == 0 || nranks == 0 || repeat < 1 || repeat > 64 || nodes < 1 || nodes > 254 ||
	    timeout <= 0 || port < 1024 || port > 60000 || kills < 1) {
		usage(stderr);
		free(list);
		return 2;
	}
	if (nccl_libs) {
		for (int si = 0; si < nscens; si++)
			if (!scens[si].nccl_root) {
				fprintf(stderr, "hpct-bench: --nccl goes with --scenario nccl-root "
				                "only\n");
				free(list);
				return 2;
			}
		free(list);
		return bench_nccl_releases(argc, argv, nccl_libs, json);
	}
	/* a path, or with --transport the rootless path over each transport */
	const char *path_names[3 + MAX_LIST], *path_transport[3 + MAX_LIST] = { NULL };
	int npaths = 0;
	if (transports) {
		char *tl = strdup(transports), *tsave = NULL;
		for (char *t = strtok_r(tl, ",", &tsave); t; t = strtok_r(NULL, ",", &tsave)) {
			if ((strcmp(t, "tcp") != 0 && strcmp(t, "ofi") != 0) || npaths == 2) {
				fprintf(stderr, "hpct-bench: --transport %s: want tcp and/or ofi\n",
				        transports);
				free(tl);
				free(list);
				return 2;
			}
			path_transport[npaths] = strcmp(t, "tcp") == 0 ? "tcp" : "ofi";
			path_names[npaths] = path_transport[npaths];
			npaths++;
		}
		free(tl);
	} else {
		int reps[MAX_LIST], nreps = 0;
		static char rnames[MAX_LIST][24];
		if (replicas_arg &&
		    ((nreps = parse_list(replicas_arg, reps)) <= 0 || reps[nreps - 1] > 64)) {
			fprintf(stderr, "hpct-bench: --replicas %s: want a comma list of 1..64\n",
			        replicas_arg);
			free(list);
			return 2;
		}
		/* --replicas: a rootless row per HPCT_STORE_REPLICAS */
		for (int q = 0; strstr(paths, "rootless") && q < (nreps ? nreps : 1); q++) {
			snprintf(rnames[q], sizeof(rnames[q]), "rootless-r%d", nreps ? reps[q] : 0);
			path_names[npaths++] = nreps ? rnames[q] : "rootless";
		}
		int gloo = 0;
		for (int si = 0; si < nscens; si++)
			gloo |= strcmp(scens[si].name, "gloo") == 0;
		if (strstr(paths, "standard")) {
			path_names[npaths++] = "standard";
			if (gloo) /* its rows only (gloo_rows) */
				path_names[npaths++] = GLOO_MESH;
		} else if (strstr(paths, "stock")) /* the standard path, as PyTorch users say */
			path_names[npaths++] = "stock";
	}
	if (npaths == 0) {
		fprintf(stderr, "hpct-bench: --path %s: want rootless and/or standard (or stock)\n",
		        paths);
		free(list);
		return 2;
	}
	int max_ranks = 0;
	for (int i = 0; i < nranks; i++)
		max_ranks = ranks[i] > max_ranks ? ranks[i] : max_ranks;
	if (state && bench_state_setup(state, max_ranks) < 0) {
		free(list);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	if (ntorch && bench_enter_netns() < 0) {
		free(list);
		return 1;
	}

	/* the floor's unit and what starting one process costs, measured
	 * before any rank runs: right after a run of 1024 ranks the kernel is
	 * still tearing down their sockets, and a round trip then took 50 us
	 * where it takes 12 */
	double rtt = bench_rtt_ms();
	double fork_exec = bench_fork_exec_ms();
	int nres = nscens * nranks * npaths;
	struct result *res = calloc((size_t)nres, sizeof(*res));
	const struct bench_plan plan = {
		.scens = scens,
		.nscens = nscens,
		.ranks = ranks,
		.nranks = nranks,
		.path_names = path_names,
		.path_transport = path_transport,
		.npaths = npaths,
		.repeat = repeat,
		.nodes = nodes,
		.port = port,
		.kills = kills,
		.reinit = reinit,
		.gate = bench_gate,
		.store_ops = store_ops,
		.timeout = timeout,
		.seed = seed,
		.state = state,
		.json = json,
		.plot = plot,
	};
	int failed = !res || bench_run_all(&plan, res, rtt);
	if (res)
		failed |= bench_report(&plan, res, nres, rtt, fork_exec);
	bench_state_finish(max_ranks);
	free(res);
	free(list);
	return failed ? 1 : 0;
}
