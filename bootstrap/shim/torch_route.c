/* libhpct_preload.so, the PyTorch half's decision: whether this process's
 * TCPStore is served in it (torch_store.c) or stays PyTorch's, asked by
 * torch_socket.c at libtorch's calls on the store's port.  A rank's
 * TCPStore connections then go to the store served in this process,
 * whatever the torch version whose protocol hpct knows.  Decided once, at
 * the first such call:
 *   - HPCT_USE_ROOTLESS=1 (else one line, and PyTorch keeps its store);
 *   - a rank: RANK, HPCT_RANK, SLURM_PROCID or OMPI_COMM_WORLD_RANK set
 *     (torchrun's agent has none: its own store stays its own);
 *   - not a torchrun worker on its agent's store
 *     (TORCHELASTIC_USE_AGENT_STORE=True): that store is the job's;
 *   - not a child of a rank: neither forked from one (fdtrack.h) nor
 *     started by one (an ancestor process holds the rank marker, an
 *     abstract socket named by its pid and start time);
 *   - a torch whose protocol hpct knows (torch/version.py beside the
 *     torch/_C module in this process, else libtorch_cpu's soname), or
 *     one newer than every release known: served on the newest protocol,
 *     said in one line, each connection's handshake and commands checked
 *     against it (torch_proto.c);
 *   - a node list to derive the world from (hpct__rootless_possible).
 * Then the world is made (shared with the NCCL half), the store served,
 * and on torch 1.13 Gloo's connectFullMesh in libtorch_cpu redirected to
 * hpct's Gloo connect (libhpct_torch.so, see got.c).
 * torchrun's agent (HPCT_USE_ROOTLESS=1) is served the same way, its one
 * store the rendezvous's (decide_agent), on a world of the agents; a
 * forked child of a rank as its parent was (child_routed). */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "bootstrap/base/fdtrack.h"
#include "bootstrap/base/log.h"
#include "bootstrap/base/sock.h"
#include "bootstrap/shim/preload_internal.h"
#include "bootstrap/shim/torch_gloo.h"
#include "bootstrap/shim/torch_store.h"
#include "bootstrap/world_access.h"
#include "hpct/hpct.h"

static pthread_mutex_t route_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int route; /* 0 undecided, 1 served here, -1 PyTorch's own */

/* "<pid>.<start time>" of a process, from /proc (0 when gone). */
static int proc_ident(long pid, long *ppid, unsigned long long *start)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	char *p = strrchr(buf, ')'); /* the name may hold spaces and parens */
	if (!p)
		return 0;
	/* fields after the name: state ppid ... starttime (22nd of the line) */
	char state;
	long pp;
	unsigned long long st = 0;
	if (sscanf(p + 1, " %c %ld", &state, &pp) != 2)
		return 0;
	int field = 2; /* the state follows the first space */
	for (char *q = p + 1; *q && field < 22; q++)
		if (*q == ' ' && ++field == 22)
			st = strtoull(q + 1, NULL, 10);
	*ppid = pp;
	*start = st;
	return 1;
}

static void marker_name(struct sockaddr_un *un, socklen_t *len, long pid, unsigned long long st)
{
	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	int n = snprintf(un->sun_path + 1, sizeof(un->sun_path) - 1, "hpct-torch-rank.%ld.%llu",
	                 pid, st);
	*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* Does process pid (started at st) hold its rank marker?  Read from
 * /proc/net/unix (this network namespace's sockets, as abstract names
 * are), never probed with a bind: ranks started together by one parent
 * (torchrun's agent) ask about it at the same moment, and each would take
 * another's probe, bound for an instant, for the parent's marker. */
static int marked(long pid, unsigned long long st)
{
	char want[96], line[512];
	int n = snprintf(want, sizeof(want), " @hpct-torch-rank.%ld.%llu", pid, st);
	FILE *f = fopen("/proc/net/unix", "re");
	int found = 0;
	while (f && !found && fgets(line, sizeof(line), f)) {
		size_t l = strcspn(line, "\n");
		found = l >= (size_t)n && memcmp(line + l - (size_t)n, want, (size_t)n) == 0;
	}
	if (f)
		fclose(f);
	return found;
}

/* The pid of the nearest ancestor that serves a TCPStore as a rank, or 0. */
static long rank_ancestor(void)
{
	long pid = (long)getppid();
	for (int depth = 0; pid > 1 && depth < 64; depth++) {
		long pp;
		unsigned long long st;
		if (!proc_ident(pid, &pp, &st))
			return 0;
		if (marked(pid, st))
			return pid;
		pid = pp;
	}
	return 0;
}

/* This process is a rank serving its store: say so to its descendants. */
static void mark_rank(void)
{
	long pp;
	unsigned long long st;
	if (!proc_ident((long)getpid(), &pp, &st))
		return;
	struct sockaddr_un un;
	socklen_t len;
	marker_name(&un, &len, (long)getpid(), st);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && bind(fd, (struct sockaddr *)&un, len) == 0) {
		hpct__fd_track(fd); /* held for the life of the process */
	} else if (fd >= 0) {
		close(fd);
	}
}

/* The version of the torch in this process: torch/version.py beside its
 * _C module, else the soname of libtorch_cpu (Debian's .so.1.13). */
struct torch_find {
	char c_dir[4096];
	char soname_ver[32];
};

static int find_torch(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct torch_find *t = arg;
	const char *name = info->dlpi_name;
	const char *b = name ? strrchr(name, '/') : NULL;
	if (!b)
		return 0;
	if (!t->c_dir[0] && strncmp(b, "/_C.", 4) == 0 && b - name >= 6 &&
	    strncmp(b - 6, "/torch", 6) == 0)
		snprintf(t->c_dir, sizeof(t->c_dir), "%.*s", (int)(b - name), name);
	if (!t->soname_ver[0] && strncmp(b, "/libtorch_cpu.so.", 17) == 0)
		snprintf(t->soname_ver, sizeof(t->soname_ver), "%s", b + 17);
	return 0;
}

static void torch_version(char *ver, size_t len, char *where, size_t wlen)
{
	struct torch_find t = { "", "" };
	dl_iterate_phdr(find_torch, &t);
	ver[0] = 0;
	if (t.c_dir[0]) {
		char path[4200], line[256];
		snprintf(path, sizeof(path), "%s/version.py", t.c_dir);
		FILE *f = fopen(path, "re");
		while (f && fgets(line, sizeof(line), f)) {
			char v[64];
			if (sscanf(line, "__version__ = '%63[^']'", v) == 1) {
				snprintf(ver, len, "%s", v);
				break;
			}
		}
		if (f)
			fclose(f);
		snprintf(where, wlen, "%s", t.c_dir);
	}
	if (!ver[0] && t.soname_ver[0]) {
		snprintf(ver, len, "%s", t.soname_ver);
		snprintf(where, wlen, "libtorch_cpu.so.%s", t.soname_ver);
	}
}

/* PyTorch keeps its own store here: one line (torchrun's agent, which is
 * no rank, gets none). */
static int keep_stock(const char *why)
{
	fprintf(stderr, "hpct: %s: PyTorch keeps its own TCPStore\n", why);
	return -1;
}

/* The torch protocol this process's torch speaks, or NULL with why. */
static const struct hpct_torch_proto *torch_proto(char *ver, size_t vlen, char *where, size_t wlen,
                                                  char *why, size_t len)
{
	torch_version(ver, vlen, where, wlen);
	const struct hpct_torch_proto *proto = hpct__torch_proto_for(ver);
	if (!proto)
		snprintf(why, len,
		         "torch %s%s%s: its TCPStore protocol is not one hpct serves (torch %s)",
		         ver[0] ? ver : "of unknown version", where[0] ? " at " : "", where,
		         hpct__torch_protos_known());
	else if (hpct__torch_proto_newer(proto))
		/* one line a process: served, on trial (each connection checked) */
		fprintf(stderr,
		        "hpct: torch %s at %s is newer than the releases hpct was checked with "
		        "(torch %s): its TCPStore is served on the newest one's protocol while its "
		        "connections speak it (a connection that does not is closed, saying so; "
		        "HPCT_USE_ROOTLESS=0 keeps PyTorch's own)\n",
		        ver, where, hpct__torch_protos_known());
	return proto;
}

/* torchrun's agent: its rendezvous store, which every agent meets through
 * (c10d's endpoint, whose host agent serves it; static's node 0), served
 * here on a world of the agents (one rank a node of the node list, on the
 * top port of the range), so no agent is its root.  Without a node list,
 * or with one node, PyTorch keeps it (an INFO line); with a list that does
 * not name this host once, this agent's store fails, saying why (the
 * other agents would wait for it). */
static hpct_world *agents_world;

static int decide_agent(void)
{
	char why[1200], ver[64], where[4096] = "", ep[HPCT_ADDRSTRLEN], job[HPCT_ADDRSTRLEN + 32];
	const struct hpct_torch_proto *proto =
	        torch_proto(ver, sizeof(ver), where, sizeof(where), why, sizeof(why));
	if (!proto)
		return keep_stock(why);
	/* one name for the endpoint whether an agent reached it over IPv4 or
	 * v4-mapped IPv6: the job's identity */
	hpct__torch_rdzv_endpoint(ep, sizeof(ep));
	snprintf(job, sizeof(job), "torchrun agents@%s", ep);
	int rc = hpct__world_create_agents(job, &agents_world, why, sizeof(why));
	if (rc == HPCT_ENOTOPO) {
		HPCT_INFO(HPCT_SUB_INIT,
		          "preload: torchrun's agent: its rendezvous store at %s stays PyTorch's: "
		          "%s",
		          ep, why);
		return -1;
	}
	if (rc == 0 && (rc = hpct__torch_store_start(agents_world, proto)) == 0) {
		struct hpct_world_info info;
		hpct_world_get_info(agents_world, &info);
		HPCT_INFO(
		        HPCT_SUB_INIT,
		        "preload: torchrun's agent %d of %d: its rendezvous store at %s served in "
		        "it (127.0.0.1:%u), on the agents' world (this agent at %s)",
		        info.rank, info.size, ep, hpct__torch_store_port(), info.listen_addr);
		return 1;
	}
	fprintf(stderr,
	        "hpct: torchrun's agent, its rendezvous store at %s: %s: its TCPStore "
	        "connections fail (HPCT_USE_ROOTLESS=0 runs PyTorch's own)\n",
	        ep, hpct_last_error());
	return -2;
}

static int decide(int child)
{
	char why[1200], ver[64], where[4096] = "";
	const char *v = hpct__preload_env_get("HPCT_USE_ROOTLESS");
	if (!v || strcmp(v, "1") != 0) {
		snprintf(why, sizeof(why), "HPCT_USE_ROOTLESS=%s", v ? v : "(unset)");
		return keep_stock(why);
	}
	/* a forked child of an agent whose store was undecided at the fork
	 * makes no agents' world of its own (its parent's port): PyTorch's */
	if (hpct__preload_agent_proc())
		return child ? -1 : decide_agent();
	enum rank_given given = hpct__preload_rank_given();
	if (given == RANK_NONE || (given == RANK_LAUNCHER && hpct__preload_is_agent()))
		return -1; /* no rank: a launcher's agent, whose store is its own */
	/* torchrun's workers on its agent's store: every process of the job,
	 * the agents of other nodes and other jobs (torchft's replica groups)
	 * share that one keyspace, which the agent holds whatever the ranks
	 * do (torch/distributed/rendezvous.py reads the variable so) */
	v = hpct__preload_env_get("TORCHELASTIC_USE_AGENT_STORE");
	if (v && strcmp(v, "True") == 0)
		return keep_stock("torchrun's agent holds this job's store "
		                  "(TORCHELASTIC_USE_AGENT_STORE=True), shared with every client");
	long anc = child ? 0 : rank_ancestor();
	if (anc) {
		snprintf(why, sizeof(why), "a child of rank process %ld", anc);
		return keep_stock(why);
	}
	const struct hpct_torch_proto *proto =
	        torch_proto(ver, sizeof(ver), where, sizeof(where), why, sizeof(why));
	if (!proto)
		return keep_stock(why);
	if (!hpct__rootless_possible(why, sizeof(why)))
		return keep_stock(why);
	hpct__torch_resolve_master();
	hpct_world *w = NULL;
	if (child) /* a forked child of a rank that had no world yet: a
	            * client of the store, serving nothing (failure said by
	            * child_routed) */
		return hpct__world_store_client(&w) != 0 ||
		                       hpct__torch_store_restart_child(w, proto) != 0
		               ? -2
		               : 1;
	w = hpct_preload_world();
	if (!w) {
		/* the others wait for this rank, and stock here could not reach
		 * rank 0's store either: fail this rank's store, saying why */
		fprintf(stderr,
		        "hpct: no hpct world in this rank (%s): its TCPStore connections fail "
		        "(HPCT_USE_ROOTLESS=0 runs PyTorch's own)\n",
		        hpct_last_error());
		return -2;
	}
	if (hpct__torch_store_start(w, proto) != 0) {
		fprintf(stderr, "hpct: %s: this rank's TCPStore connections fail\n",
		        hpct_last_error());
		return -2;
	}
	mark_rank();
	/* the Gloo half, where libtorch imports Gloo's connect (1.13); not
	 * even loaded elsewhere (it brings Gloo's libraries) */
	Dl_info di;
	char dir[4096] = "";
	int g = 0;
	if (hpct__torch_proto_gloo_imported(proto) && dladdr((void *)decide, &di) && di.dli_fname) {
		snprintf(dir, sizeof(dir), "%s", di.dli_fname);
		char *slash = strrchr(dir, '/');
		if (slash)
			*slash = 0;
		g = hpct__torch_gloo_fast_path(dir);
	}
	HPCT_INFO(HPCT_SUB_INIT,
	          "preload: torch %s at %s: TCPStore served in this rank (127.0.0.1:%u)%s", ver,
	          where, hpct__torch_store_port(),
	          g > 0 ? ", Gloo connected by hpct" : ", Gloo through the store");
	return 1;
}

/* A forked child of a rank (NVRx's monitor processes, forked and
 * double-forked; a data-loader worker): it serves its own TCPStore
 * connections on its own listener, a client of the same keyspace, also
 * once its rank has died: with its parent's world when the parent had
 * decided before the fork (r, its route then), else with a world of its
 * own that only asks the store.  Once per process, by the first thread to
 * come (never a lock the fork may have taken with it). */
static _Atomic pid_t child_started, child_pid;
static atomic_int child_route; /* as route, for the process child_pid */

static int child_routed(int r)
{
	if (r < 0)
		return 0; /* the parent keeps PyTorch's store: so does its child */
	pid_t me = getpid();
	pid_t was = atomic_load(&child_started);
	if (atomic_load(&child_pid) != me && was != me &&
	    atomic_compare_exchange_strong(&child_started, &was, me)) {
		int d = r == 1 ? (hpct__torch_store_restart_child(NULL, NULL) == 0 ? 1 : -2)
		               : decide(1);
		if (d == -2)
			fprintf(stderr,
			        "hpct: a forked child of a rank: %s: its TCPStore connections "
			        "fail\n",
			        hpct_last_error());
		if (d == 1)
			HPCT_INFO(HPCT_SUB_INIT,
			          "preload: a forked child of a rank: its TCPStore served in it "
			          "(127.0.0.1:%u), a client of its rank's keyspace",
			          hpct__torch_store_port());
		atomic_store(&child_route, d);
		atomic_store(&child_pid, me);
	}
	for (int i = 0; i < 20000 && atomic_load(&child_pid) != me; i++)
		hpct__sleep(0.001);
	int d = atomic_load(&child_pid) == me ? atomic_load(&child_route) : -2;
	if (d == -2) {
		errno = EACCES;
		return -1;
	}
	return d == 1;
}

/* 1: route this call; 0: leave it; -1 with errno: fail it. */
int hpct__torch_route(void)
{
	int r = atomic_load(&route);
	/* a forked child decides nothing (never waits on a lock the fork may
	 * have taken with it): it is served as its parent was */
	if (hpct__preload_forked_child())
		return child_routed(r);
	if (!r) {
		pthread_mutex_lock(&route_mu);
		if (!(r = atomic_load(&route))) {
			r = decide(0);
			atomic_store(&route, r);
		}
		pthread_mutex_unlock(&route_mu);
	}
	if (r == -2) {
		errno = EACCES;
		return -1;
	}
	return r == 1;
}
