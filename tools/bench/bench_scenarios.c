/* hpct-bench's scenarios beyond a plain launch: the rank side of the
 * scenarios this program plays itself (cold, and recover for restart
 * --recovery inprocess), the table naming each scenario's rank program, the
 * PyTorch releases, the network namespace and environment of the torch
 * scenario's ranks, and
 * nccl-root, which runs in this process with no launch. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/nccl/nccl_internal.h"
#include "bootstrap/nccl/player.h"
#include "hpct/hpct.h"
#include "tools/bench/bench.h"
#include "tools/common/bench_rank.h"
#include "tools/common/shim_path.h"

/* A world allgather (checked) and a barrier. */
static int world_exercise(hpct_world *w)
{
	hpct_group *g = hpct_world_group(w);
	int n = hpct_group_size(g);
	unsigned char item[64], *all = malloc((size_t)n * sizeof(item));
	memset(item, hpct_group_rank(g) & 0xff, sizeof(item));
	int rc = all ? hpct_allgather(g, item, sizeof(item), all) : HPCT_ENOMEM;
	unsigned char want[sizeof(item)];
	for (int r = 0; r < n && rc == 0; r++) {
		memset(want, r & 0xff, sizeof(want)); /* every byte, not the first */
		if (memcmp(all + (size_t)r * sizeof(item), want, sizeof(want)) != 0)
			rc = HPCT_EPROTO;
	}
	if (rc == 0)
		rc = hpct_barrier(g);
	free(all);
	return rc;
}

/* With --state, a rank of a restart's new epoch then gets the state (a
 * full restart's from the file, a replacement's from the survivors). */
static int cold_rank(hpct_world *w)
{
	struct record rec = { .rc = world_exercise(w) };
	rec.done = mono();
	if (rec.rc == 0)
		rec.rc = bench_state_get(w, NULL, 0, &rec.done);
	rec.conns = conns_of(w);
	rec.msgs = msgs_of(w);
	if (report_record(&rec) != 0)
		return 3;
	wait_release();
	return rec.rc;
}

/* A rank of an in-process restart: reports its cold start (with --state,
 * holding the state), then waits for the agent's word (none: just the
 * release), recovers to the new epoch, delivers the state with the other
 * survivors, and reports again with the connections the recovery opened. */
static int recover_rank(hpct_world *w)
{
	size_t len = 0;
	void *state = bench_state_hold(&len);
	int rc = world_exercise(w);
	if (report(rc, conns_of(w), msgs_of(w)) != 0 || rc) {
		free(state);
		return settle(w, rc);
	}
	struct agent_msg m;
	ssize_t k;
	while ((k = read(atoi(getenv("HPCT_BENCH_AGENT_FD")), &m, sizeof(m))) < 0 && errno == EINTR)
		;
	if (k != (ssize_t)sizeof(m)) {
		free(state);
		wait_release();
		return 0;
	}
	int before = conns_of(w);
	struct record rec = { .rc = hpct_world_recover(w, m.epoch, m.replaced, m.nreplaced) };
	if (rec.rc == 0)
		rec.rc = world_exercise(w);
	rec.done = mono();
	if (rec.rc == 0 && len)
		rec.rc = state ? bench_state_get(w, state, len, &rec.done) : HPCT_ENOMEM;
	free(state);
	rec.conns = conns_of(w) - before;
	if (report_record(&rec) != 0)
		return 3;
	wait_release();
	return rec.rc;
}

static const struct scenario scenarios[] = {
	{ "cold", cold_rank, NULL },
	{ "recover", recover_rank, NULL }, /* ranks of restart --recovery inprocess */
	{ "gloo", NULL, "hpct-bench-gloo" },
	{ "gloo-reuse", NULL, "hpct-bench-gloo" },
	{ "gloo-replace", NULL, "hpct-bench-gloo" },
	{ "torch", NULL, "hpct-bench-torch.py" },
	{ "fanout", bench_fanout_rank, NULL }, /* runs on its own: bench_fanout.c */
};

const struct scenario *bench_find_scenario(const char *name)
{
	for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++)
		if (strcmp(scenarios[i].name, name) == 0)
			return &scenarios[i];
	return NULL;
}

/* --scenario torch: stock PyTorch binds its store to the wildcard address,
 * so the runs happen in a network namespace of their own (loopback only);
 * 0, or -1 with the reason printed. */
int bench_enter_netns(void)
{
	uid_t uid = getuid();
	gid_t gid = getgid();
	if (unshare(CLONE_NEWNET) != 0) {
		char map[64];
		int fd;
		if (unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) {
			fprintf(stderr,
			        "hpct-bench: --scenario torch: cannot make a network namespace "
			        "(unshare: %s); stock PyTorch would bind the wildcard address\n",
			        strerror(errno));
			return -1;
		}
		if ((fd = open("/proc/self/setgroups", O_WRONLY)) >= 0) {
			(void)!write(fd, "deny", 4);
			close(fd);
		}
		snprintf(map, sizeof(map), "0 %u 1", (unsigned)uid);
		if ((fd = open("/proc/self/uid_map", O_WRONLY)) >= 0) {
			(void)!write(fd, map, strlen(map));
			close(fd);
		}
		snprintf(map, sizeof(map), "0 %u 1", (unsigned)gid);
		if ((fd = open("/proc/self/gid_map", O_WRONLY)) >= 0) {
			(void)!write(fd, map, strlen(map));
			close(fd);
		}
	}
	int sk = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	int rc = sk < 0 || ioctl(sk, SIOCGIFFLAGS, &ifr) != 0 ? -1 : 0;
	ifr.ifr_flags |= IFF_UP;
	if (rc == 0)
		rc = ioctl(sk, SIOCSIFFLAGS, &ifr);
	if (sk >= 0)
		close(sk);
	if (rc != 0)
		fprintf(stderr, "hpct-bench: --scenario torch: cannot bring lo up: %s\n",
		        strerror(errno));
	return rc;
}

/* The PyTorch releases --torch runs, and where their Python is by default:
 * Debian's (venv NULL), or a venv in hpct's cache (tools/scripts/torch-venv.sh). */
static const struct torch_release {
	const char *ver, *full, *env, *venv;
} torch_releases[] = {
	{ "1.13", "1.13", "HPCT_TORCH_PYTHON_1_13", NULL },
	{ "2.13", "2.13.0", "HPCT_TORCH_PYTHON_2_13", "venv-torch-2.13.0" },
	{ "2.14", "2.14.1", "HPCT_TORCH_PYTHON_2_14", "venv-torch-2.14.1" },
	{ "2.15", "2.15.0", "HPCT_TORCH_PYTHON_2_15", "venv-torch-2.15.0" },
};

void bench_cache_python(const char *venv, char *buf, size_t len)
{
	const char *cache = getenv("HPCT_CACHE"), *xdg = getenv("XDG_CACHE_HOME");
	const char *home = getenv("HOME");
	if (cache && *cache) /* as tools/scripts/torch-venv.sh and nccl-wheel.sh */
		snprintf(buf, len, "%s/%s/bin/python", cache, venv);
	else if (xdg && *xdg)
		snprintf(buf, len, "%s/hpct/%s/bin/python", xdg, venv);
	else
		snprintf(buf, len, "%s/.cache/hpct/%s/bin/python", home ? home : "", venv);
}

int bench_torch_find(const char *arg, struct bench_torch *out)
{
	const struct torch_release *t = NULL;
	for (size_t i = 0; i < sizeof(torch_releases) / sizeof(torch_releases[0]); i++)
		if (strcmp(arg, torch_releases[i].ver) == 0 ||
		    strcmp(arg, torch_releases[i].full) == 0)
			t = &torch_releases[i];
	if (!t) {
		fprintf(stderr, "hpct-bench: --torch %s: want 1.13 (Debian's), 2.13, 2.14 or 2.15\n",
		        arg);
		return -1;
	}
	const char *env = getenv(t->env);
	if (env && *env)
		snprintf(out->python, sizeof(out->python), "%s", env);
	else if (!t->venv)
		snprintf(out->python, sizeof(out->python), "/usr/bin/python3");
	else
		bench_cache_python(t->venv, out->python, sizeof(out->python));
	out->ver = t->ver;
	if (access(out->python, X_OK) == 0)
		return 0;
	fprintf(stderr,
	        "hpct-bench: --torch %s: no Python at %s (%s; %s): make it with "
	        "tools/scripts/torch-venv.sh %s, or set %s to a Python with torch %s\n",
	        arg, out->python, env && *env ? t->env : "the default", strerror(errno), t->ver,
	        t->env, t->ver);
	return -1;
}

/* The environment of a torch run's ranks: the same script either way, the
 * shim preloaded for the rootless path, before what was preloaded already
 * (the stand-in's yield library, a profiler) on both. */
void bench_torch_env(int rootless, const char *ver, const char *backend)
{
	static char lib[8192], *given;
	if (!lib[0]) {
		hpct_shim_path(lib, sizeof(lib)); /* a missing one fails at exec, named */
		const char *pre = getenv("LD_PRELOAD");
		given = pre && *pre ? strdup(pre) : NULL;
		if (given)
			snprintf(lib + strlen(lib), sizeof(lib) - strlen(lib), ":%s", given);
	}
	if (rootless)
		setenv("LD_PRELOAD", lib, 1);
	else if (given)
		setenv("LD_PRELOAD", given, 1);
	else
		unsetenv("LD_PRELOAD");
	/* stock Gloo and NCCL: the namespace's only interface */
	setenv("GLOO_SOCKET_IFNAME", "lo", 1);
	setenv("NCCL_SOCKET_IFNAME", "lo", 0);
	setenv("OMP_NUM_THREADS", "1", 0);
	setenv("HPCT_BENCH_TORCH", ver, 1); /* the ranks check they have it */
	setenv("HPCT_BENCH_BACKEND", backend, 1);
	/* nccl: more ranks than devices share them (NCCL >= 2.30.3) */
	if (strcmp(backend, "nccl") == 0)
		setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", 0);
}

void bench_torch_replicas(const char *path)
{
	static int saved;
	static char *given; /* HPCT_STORE_REPLICAS as hpct-bench was started */
	if (!saved++ && getenv("HPCT_STORE_REPLICAS"))
		given = strdup(getenv("HPCT_STORE_REPLICAS"));
	const char *r = strstr(path, "-r");
	if (r && strncmp(path, "rootless", 8) == 0)
		setenv("HPCT_STORE_REPLICAS", r + 2, 1);
	else if (given)
		setenv("HPCT_STORE_REPLICAS", given, 1);
	else
		unsetenv("HPCT_STORE_REPLICAS");
}

/* --scenario nccl-root: N simulated ranks (the player the conformance tests
 * use) until every one has its ring neighbour, against NCCL's own root (one,
 * started by ncclGetUniqueId: what the standard path runs) or against hpct's
 * micro-roots (one per rank: Tier 2).  All in this process, no launch: the
 * roots and the ranks are the whole of it.  Ranks report in rank order, and
 * with NCCL's root they hold back as NCCL's ranks do past 256 ranks a root
 * (NCCL_UID_STAGGER_*'s defaults).  max_conns: the busiest root's
 * connections, plus the 3 of the rank living in the same process. */
const char nccl_stagger_note[] =
        "standard: past 256 ranks a root, NCCL's ranks hold back r/7000 s before they report "
        "(NCCL_UID_STAGGER_THRESHOLD\nand _RATE's defaults), as NCCL's own ranks do: that "
        "wait is inside the timed window";

double bench_nccl_root_once(int n, int rootless, int port, double timeout, int *conns)
{
	const struct hpct_nccl_lib *l = hpct__nccl_lib();
	if (!l) {
		fprintf(stderr, "hpct-bench: %s\n", hpct_last_error());
		return -1;
	}
	if (rootless && l->version < HPCT_NCCL_TIER2_MIN_VERSION) {
		fprintf(stderr,
		        "hpct-bench: nccl-root rootless: NCCL %d has no ncclCommInitRankScalable "
		        "(2.23 and later), so no micro-roots: hpct keeps one root there (Tier 1)\n",
		        l->version);
		return -1;
	}
	int nids = rootless ? n : 1, rc;
	hpct_nccl_id *ids = calloc((size_t)nids, sizeof(*ids));
	unsigned char *replies = malloc((size_t)n * HPCT_NCCL_RING_LEN);
	struct hpct_nccl_roots *roots = NULL;
	double t0 = mono();
	if (rootless) {
		struct sockaddr_in in = { .sin_family = AF_INET };
		in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		for (int i = 0; i < n; i++) {
			in.sin_port = htons((uint16_t)(port + i));
			hpct__nccl_id_make(0x6863707462656e63ull, (struct sockaddr *)&in, 0, 1,
			                   l->version, &ids[i]);
		}
		rc = hpct__nccl_roots_start(ids, n, n, timeout, 0, &roots);
	} else {
		rc = l->get_unique_id(&ids[0]) == 0 ? 0 : HPCT_ENCCL;
	}
	if (rc == 0)
		rc = hpct__nccl_play_ranks(ids, nids, n, NULL, timeout, !rootless, l->version,
		                           replies, conns);
	double ms = (mono() - t0) * 1000;
	if (roots) {
		int wrc = rc == 0 ? hpct__nccl_roots_wait(roots, NULL) : 0;
		if (rc)
			hpct__nccl_roots_stop(roots);
		rc = rc ? rc : wrc;
	}
	unsigned char want[HPCT_NCCL_RING_LEN];
	for (int r = 0; r < n && rc == 0; r++) {
		hpct__nccl_test_answer((r + 1) % n, l->version, want);
		if (memcmp(replies + (size_t)r * HPCT_NCCL_RING_LEN, want, sizeof(want)) != 0) {
			fprintf(stderr, "hpct-bench: rank %d was not sent rank %d's ring info\n", r,
			        (r + 1) % n);
			rc = HPCT_EPROTO;
		}
	}
	free(ids);
	free(replies);
	if (rc) {
		fprintf(stderr, "hpct-bench: nccl-root with %d ranks (%s): %s\n", n,
		        rootless ? "micro-roots" : "NCCL's root", hpct_last_error());
		return -1;
	}
	*conns += 3;
	return ms;
}
