/* NCCL, loaded at run time: the library and its version, the unique-id
 * codec, and the ids every rank derives alone. */
#include "bootstrap/nccl/nccl_internal.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/base/log.h"
#include "bootstrap/base/param.h"
#include "bootstrap/base/util.h"
#include "bootstrap/base/wire.h"
#include "bootstrap/nccl/domain.h"
#include "bootstrap/nccl/root_wire.h"
#include "bootstrap/topo/derive.h"
#include "bootstrap/world.h"

/* Bytes 120..127 of a derived id; NCCL leaves 40..127 zero in 2.19-2.30. */
static const unsigned char marker[8] = { 'h', 'p', 'c', 't', 1, 0, 0, 0 };
#define MARKER_AT 120

static struct hpct_nccl_lib lib;
static pthread_mutex_t lib_lock = PTHREAD_MUTEX_INITIALIZER;
static int lib_state; /* 0 not tried, 1 loaded, <0 the error */
static char lib_error[4608];

static void *open_at(const char *dir, const char *sub, char *path, size_t len)
{
	if (!dir || !dir[0])
		return NULL;
	snprintf(path, len, "%s%s/libnccl.so.2", dir, sub);
	return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

/* The nvidia-nccl wheel as pip installs it beside torch (torch's own
 * libtorch_cuda finds it so) or beside hpct's wheel: <site>/nvidia/nccl/
 * lib/libnccl.so.2, <site> the folder holding a loaded torch/lib/ or
 * hpct/lib/ object. */
struct site_find {
	char site[PATH_MAX];
};

static int find_site(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct site_find *f = arg;
	const char *name = info->dlpi_name, *at;
	if (f->site[0] || !name)
		return 0;
	if ((at = strstr(name, "/torch/lib/")) || (at = strstr(name, "/hpct/lib/")))
		snprintf(f->site, sizeof(f->site), "%.*s", (int)(at - name), name);
	return 0;
}

static void *open_wheel(char *path, size_t len, char *site, size_t slen)
{
	struct site_find f = { "" };
	dl_iterate_phdr(find_site, &f);
	snprintf(site, slen, "%s", f.site[0] ? f.site : "(none loaded)");
	return f.site[0] ? open_at(f.site, "/nvidia/nccl/lib", path, len) : NULL;
}

void hpct__nccl_bind(struct hpct_nccl_lib *l, void *(*sym)(void *arg, const char *name), void *arg)
{
	*(void **)&l->get_version = sym(arg, "ncclGetVersion");
	*(void **)&l->get_unique_id = sym(arg, "ncclGetUniqueId");
	*(void **)&l->init_rank_config = sym(arg, "ncclCommInitRankConfig");
	*(void **)&l->init_rank_scalable = sym(arg, "ncclCommInitRankScalable");
	*(void **)&l->error_string = sym(arg, "ncclGetErrorString");
	*(void **)&l->last_error = sym(arg, "ncclGetLastError");
}

static void *handle_sym(void *handle, const char *name)
{
	return dlsym(handle, name);
}

static int load(void)
{
	char tried[PATH_MAX + 256] = "", path[PATH_MAX], site[PATH_MAX] = "(not looked at)";
	const char *explicit = hpct__env_str(hpct__env_process(), "HPCT_NCCL_LIB");
	void *h = NULL;
	if (explicit) {
		snprintf(path, sizeof(path), "%s", explicit);
		h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
		snprintf(tried, sizeof(tried), "HPCT_NCCL_LIB=%s", explicit);
	} else {
		const char *home = hpct__env_str(hpct__env_process(), "NCCL_HOME");
		snprintf(path, sizeof(path), "libnccl.so.2");
		h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
		if (!h)
			h = open_wheel(path, sizeof(path), site, sizeof(site));
		if (!h)
			h = open_at(home, "/lib", path, sizeof(path));
		if (!h)
			h = open_at(home, "/lib64", path, sizeof(path));
		if (!h)
			h = open_at("/usr/local/cuda", "/lib", path, sizeof(path));
		if (!h)
			h = open_at("/usr/local/cuda", "/lib64", path, sizeof(path));
		snprintf(tried, sizeof(tried),
		         "libnccl.so.2 on the search path, the nvidia-nccl wheel beside torch or "
		         "hpct (site-packages: %s), NCCL_HOME=%s, /usr/local/cuda/lib{,64}",
		         site, home ? home : "(unset)");
	}
	if (!h) {
		const char *why = dlerror();
		snprintf(lib_error, sizeof(lib_error), "NCCL not loaded (tried %s): %s", tried,
		         why ? why : "not found");
		return HPCT_ENONCCL;
	}
	lib.handle = h;
	hpct__nccl_env_prepare();
	hpct__nccl_bind(&lib, handle_sym, h);
	int v = 0;
	if (!lib.get_version || lib.get_version(&v) != 0 || v <= 0) {
		snprintf(lib_error, sizeof(lib_error),
		         "NCCL at %s has no working ncclGetVersion: not used", path);
		return HPCT_ENONCCL;
	}
	lib.version = v;
	snprintf(lib.path, sizeof(lib.path), "%s", path);
	HPCT_INFO(HPCT_SUB_NCCL, "NCCL %d.%d.%d loaded from %s", v / 10000, v / 100 % 100, v % 100,
	          path);
	return 1;
}

const struct hpct_nccl_lib *hpct__nccl_lib(void)
{
	pthread_mutex_lock(&lib_lock);
	if (lib_state == 0) {
		lib_state = load();
		if (lib_state < 0) /* one line, once per process */
			HPCT_WARN(HPCT_SUB_NCCL, "%s; NCCL communicators take the standard path",
			          lib_error);
	}
	int st = lib_state;
	pthread_mutex_unlock(&lib_lock);
	if (st < 0) {
		hpct__set_last_error("%s", lib_error);
		return NULL;
	}
	return &lib;
}

HPCT_API int hpct_nccl_version(int *version_out)
{
	if (!version_out)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_NCCL, "hpct_nccl_version: NULL argument");
	const struct hpct_nccl_lib *l = hpct__nccl_lib();
	if (!l)
		return HPCT_ENONCCL;
	*version_out = l->version;
	return 0;
}

/* --- the id codec ------------------------------------------------------ */

HPCT_API int hpct_nccl_id_is_derived(const hpct_nccl_id *id)
{
	return id && memcmp(id->internal + MARKER_AT, marker, sizeof(marker)) == 0;
}

static int resolve_version(int version)
{
	if (version > 0)
		return version;
	const struct hpct_nccl_lib *l = hpct__nccl_lib();
	return l ? l->version : 22809; /* no NCCL: the layout of 2.19-2.28 */
}

HPCT_API int hpct_nccl_id_decode(const hpct_nccl_id *id, int version, struct hpct_nccl_id_info *out)
{
	if (!id || !out)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_NCCL, "hpct_nccl_id_decode: NULL argument");
	version = resolve_version(version);
	memset(out, 0, sizeof(*out));
	const unsigned char *b = (const unsigned char *)id->internal;
	memcpy(&out->magic, b, 8);
	sa_family_t fam;
	memcpy(&fam, b + 8, sizeof(fam));
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof(ss));
	if (fam == AF_INET)
		memcpy(&ss, b + 8, sizeof(struct sockaddr_in));
	else if (fam == AF_INET6)
		memcpy(&ss, b + 8, sizeof(struct sockaddr_in6));
	else
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_NCCL,
		                  "NCCL id: address family %u at byte 8 is neither AF_INET nor "
		                  "AF_INET6 (an all-zero id, or not an id)",
		                  (unsigned)fam);
	out->family = fam;
	void *a = fam == AF_INET ? (void *)&((struct sockaddr_in *)&ss)->sin_addr
	                         : (void *)&((struct sockaddr_in6 *)&ss)->sin6_addr;
	inet_ntop(fam, a, out->host, sizeof(out->host));
	out->port = ntohs(fam == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
	                                 : ((struct sockaddr_in6 *)&ss)->sin6_port);
	if (version >= HPCT_NCCL_NRANKS_VERSION)
		memcpy(&out->nranks, b + 36, 4);
	out->derived = hpct_nccl_id_is_derived(id);
	return 0;
}

int hpct__nccl_id_where(const hpct_nccl_id *id, int version, char *buf, size_t len)
{
	struct hpct_nccl_id_info in;
	int rc = hpct_nccl_id_decode(id, version, &in);
	if (rc == 0)
		snprintf(buf, len, in.family == AF_INET6 ? "[%s]:%u" : "%s:%u", in.host, in.port);
	return rc;
}

void hpct__nccl_id_make(uint64_t magic, const struct sockaddr *sa, int nranks, int derived,
                        int version, hpct_nccl_id *id)
{
	memset(id, 0, sizeof(*id));
	unsigned char *b = (unsigned char *)id->internal;
	memcpy(b, &magic, 8);
	memcpy(b + 8, sa,
	       sa->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
	if (version >= HPCT_NCCL_NRANKS_VERSION)
		memcpy(b + 36, &nranks, 4);
	if (derived)
		memcpy(b + MARKER_AT, marker, sizeof(marker));
}

HPCT_API int hpct_nccl_id_encode(const struct hpct_nccl_id_info *in, int version, hpct_nccl_id *id)
{
	if (!in || !id)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_NCCL, "hpct_nccl_id_encode: NULL argument");
	if (in->port < 1 || in->port > 65535)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_NCCL, "NCCL id: port %u is not 1..65535",
		                  in->port);
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof(ss));
	struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
	if (inet_pton(AF_INET, in->host, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)in->port);
	} else if (inet_pton(AF_INET6, in->host, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)in->port);
	} else {
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_NCCL,
		                  "NCCL id: host '%s' is not a numeric IPv4 or IPv6 address",
		                  in->host);
	}
	hpct__nccl_id_make(in->magic, (const struct sockaddr *)&ss, in->nranks, in->derived,
	                   resolve_version(version), id);
	return 0;
}

/* --- derivation -------------------------------------------------------- */

int hpct__nccl_ports(const struct hpct_topo *t, int *base_out, int *range_out)
{
	const struct hpct_env *env = hpct__env_process();
	long base, range, def_base = t->port_base + t->port_range;
	int rc = hpct__env_int(env, "HPCT_NCCL_PORT_BASE", 1, 65535,
	                       def_base <= 65535 ? def_base : 1, &base, NULL);
	if (rc)
		return rc;
	long room = 65536 - base, def_range = t->port_range < room ? t->port_range : room;
	if ((rc = hpct__env_int(env, "HPCT_NCCL_PORT_RANGE", 1, 65535, def_range, &range, NULL)))
		return rc;
	if (base + range - 1 > 65535)
		return hpct__fail(HPCT_EBADENV, HPCT_SUB_ENV,
		                  "HPCT_NCCL_PORT_BASE=%ld with HPCT_NCCL_PORT_RANGE=%ld ends at "
		                  "port %ld, above 65535",
		                  base, range, base + range - 1);
	long lo = t->port_base, hi = t->port_base + t->port_range - 1;
	if (base <= hi && base + range - 1 >= lo)
		return hpct__fail(HPCT_EBADENV, HPCT_SUB_ENV,
		                  "NCCL root ports %ld-%ld (HPCT_NCCL_PORT_BASE, "
		                  "HPCT_NCCL_PORT_RANGE) overlap hpct's ports %ld-%ld "
		                  "(HPCT_PORT_BASE, HPCT_PORT_RANGE)",
		                  base, base + range - 1, lo, hi);
	if (range < t->max_local)
		return hpct__fail(HPCT_EBADENV, HPCT_SUB_ENV,
		                  "HPCT_NCCL_PORT_RANGE=%ld cannot hold the %d ranks of one node",
		                  range, t->max_local);
	*base_out = (int)base;
	*range_out = (int)range;
	return 0;
}

uint64_t hpct__nccl_comm_hash(const struct hpct_group *g, uint64_t key)
{
	return hpct__hash_u64(hpct__hash_u64(g->id, key), 0x6e63636c); /* "nccl" */
}

static uint64_t keyed(const struct hpct_topo *t, uint64_t magic)
{
	if (!t->secret)
		return magic;
	struct hpct_hello h = { .job = t->job, .group = magic };
	unsigned char zero[HPCT_AUTH_NONCE] = { 0 }, mac[HPCT_AUTH_MAC];
	if (hpct__auth_mac(t->secret, t->secret_len, 'N', zero, zero, &h, 0, 0, mac) != 0)
		return magic; /* no libcrypto: the world refused to start already */
	uint64_t k;
	memcpy(&k, mac, sizeof(k));
	return k;
}

uint64_t hpct__nccl_keyed(const struct hpct_world *w, uint64_t magic)
{
	return keyed(&w->topo, magic);
}

uint64_t hpct__nccl_magic(const struct hpct_topo *t, uint64_t comm)
{
	return keyed(t, hpct__hash_u64(comm, 0x6d61676963)); /* "magic" */
}

int hpct__nccl_root_port(const struct hpct_topo *t, uint64_t comm, int world_rank, int *port_out)
{
	int base = 0, range = 0; /* set when rc is 0, which gcc -O3 cannot tell */
	int rc = hpct__nccl_ports(t, &base, &range);
	if (rc)
		return rc;
	int per = t->max_local > 0 ? t->max_local : 1;
	uint64_t windows = (uint64_t)(range / per);
	int local = t->local_of ? t->local_of[world_rank] : 0;
	*port_out = base + (int)(comm % windows) * per + local;
	return 0;
}

/* The id whose root lives with rank `crank` of communicator c. */
int hpct__nccl_derive_one(const struct hpct_nccl_comm *c, int crank, int version, hpct_nccl_id *id)
{
	struct hpct_world *w = c->w;
	int wr = c->world_of ? c->world_of[crank] : crank;
	struct sockaddr_storage ss;
	socklen_t len;
	int rc = hpct__world_node_addr(w, wr, &ss, &len);
	if (rc == HPCT_ENOTOPO)
		return hpct__fail(
		        rc, HPCT_SUB_NCCL,
		        "rank %d: NCCL ids of %s cannot be derived without a node list (%s)",
		        w->topo.rank, c->name, w->topo.why_not_rootless);
	if (rc < 0)
		return rc; /* logged by the resolver, naming the host */
	int port;
	if ((rc = hpct__nccl_root_port(&w->topo, c->hash, wr, &port)))
		return rc;
	if (ss.ss_family == AF_INET)
		((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)port);
	else
		((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)port);
	hpct__nccl_id_make(c->magic, (const struct sockaddr *)&ss, 0, 1, version, id);
	return 0;
}

static void group_comm(struct hpct_group *g, uint64_t key, struct hpct_nccl_comm *c)
{
	memset(c, 0, sizeof(*c));
	c->w = g->world;
	c->hash = hpct__nccl_comm_hash(g, key);
	c->magic = hpct__nccl_magic(&g->world->topo, c->hash);
	c->nranks = g->size;
	c->rank = g->rank;
	c->world_of = g->members;
	snprintf(c->name, sizeof(c->name), "group %016llx key %llu", (unsigned long long)g->id,
	         (unsigned long long)key);
	c->group = g;
}

int hpct__nccl_roots_up(const struct hpct_nccl_lib *l, const struct hpct_nccl_comm *c)
{
	int meet = 1;
	if (hpct__env_bool(hpct__env_process(), "HPCT_NCCL_MEET", &meet, NULL) == 0 && !meet)
		return 0; /* the user's choice (HPCT_NCCL_MEET=0) */
	if (!c->group && l->version >= 22400)
		return 0; /* a refused rank sleeps and retries: slower, not wrong */
	if (!c->group) {
		static atomic_int said;
		if (!atomic_exchange(&said, 1))
			HPCT_WARN(HPCT_SUB_NCCL,
			          "rank %d: %s: NCCL %d aborts a connect it retries, and hpct "
			          "knows no group of this comm's ranks to wait for the roots "
			          "with: a rank that comes before its root listens fails "
			          "(ECONNABORTED)",
			          c->w->topo.rank, c->name, l->version);
		return 0;
	}
	int rc = hpct_barrier(c->group);
	if (rc) { /* the barrier's message names the rank it missed */
		char said[600];
		snprintf(said, sizeof(said), "%s", hpct_last_error());
		return hpct__fail(rc, HPCT_SUB_NCCL,
		                  "rank %d: %s: NCCL %d wants its roots listening before any rank "
		                  "calls it, and not every rank came: %s",
		                  c->w->topo.rank, c->name, l->version, said);
	}
	return 0;
}

HPCT_API int hpct_nccl_derive_id(hpct_group *g, uint64_t key, hpct_nccl_id *id_out)
{
	if (!g || !id_out)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_NCCL, "hpct_nccl_derive_id: NULL argument");
	struct hpct_nccl_comm c;
	group_comm(g, key, &c);
	return hpct__nccl_derive_one(&c, 0, resolve_version(0), id_out);
}

int hpct__nccl_derive_all(const struct hpct_nccl_comm *c, int version, hpct_nccl_id *ids)
{
	for (int i = 0; i < c->nranks; i++) {
		int rc = hpct__nccl_derive_one(c, i, version, &ids[i]);
		if (rc)
			return rc;
	}
	return 0;
}

HPCT_API int hpct_nccl_derive_ids(hpct_group *g, uint64_t key, hpct_nccl_id *ids_out)
{
	if (!g || !ids_out)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_NCCL,
		                  "hpct_nccl_derive_ids: NULL argument");
	struct hpct_nccl_comm c;
	group_comm(g, key, &c);
	return hpct__nccl_derive_all(&c, resolve_version(0), ids_out);
}

/* --- communicators ----------------------------------------------------- */

/* NCCL's own result of this thread's last init through hpct (0 if hpct
 * failed before NCCL was called): the preload shim returns it as NCCL
 * would have. */
static _Thread_local int last_nccl_result;
static _Thread_local int init_pending; /* NCCL answered ncclInProgress */

int hpct__nccl_last_result(void)
{
	return last_nccl_result;
}

/* Tier 2 from 2.23 (ncclCommInitRankScalable) to the newest release
 * verified here; NCCL's own root (Tier 1) before, and after, where hpct
 * cannot know the root's wire: said once per process. */
enum hpct_nccl_tier hpct__nccl_tier_for(const struct hpct_nccl_lib *l, const struct hpct_world *w)
{
	static atomic_flag newer_said = ATOMIC_FLAG_INIT;
	if (!l || l->version < HPCT_NCCL_OLDEST_VERSION || w->topo.nnodes == 0)
		return HPCT_NCCL_TIER_NONE;
	if (l->version > HPCT_NCCL_NEWEST_VERIFIED_VERSION) {
		if (!atomic_flag_test_and_set(&newer_said))
			HPCT_WARN(HPCT_SUB_NCCL,
			          "NCCL %d.%d.%d (%s) is newer than the newest release hpct "
			          "verified (%s): its communicators keep NCCL's own root (Tier 1) "
			          "at a derived address",
			          l->version / 10000, l->version / 100 % 100, l->version % 100,
			          l->path, HPCT_NCCL_NEWEST_VERIFIED_NAME);
		return HPCT_NCCL_TIER_ROOT;
	}
	int rootless = 1;
	if (hpct__env_bool(hpct__env_process(), "HPCT_NCCL_ROOTLESS", &rootless, NULL))
		rootless = 1; /* logged by the reader; the default stands */
	if (rootless && l->version >= HPCT_NCCL_TIER2_MIN_VERSION)
		return HPCT_NCCL_TIER_ROOTLESS;
	return HPCT_NCCL_TIER_ROOT;
}

HPCT_API enum hpct_nccl_tier hpct_nccl_tier(hpct_group *g)
{
	return g ? hpct__nccl_tier_for(hpct__nccl_lib(), g->world) : HPCT_NCCL_TIER_NONE;
}

static int nccl_failed(const struct hpct_nccl_lib *l, const struct hpct_nccl_comm *c, int res,
                       void *comm, const char *call, const char *tier)
{
	last_nccl_result = res;
	const char *what = l->error_string ? l->error_string(res) : "?";
	const char *last = l->last_error ? l->last_error(comm) : "";
	return hpct__fail(HPCT_ENCCL, HPCT_SUB_NCCL,
	                  "rank %d: %s (%s) for %s (epoch %llu, rank %d of %d) failed: NCCL "
	                  "error %d, %s%s%s",
	                  c->w->topo.rank, call, tier, c->name,
	                  (unsigned long long)c->w->topo.epoch, c->rank, c->nranks, res, what,
	                  last && last[0] ? ": " : "", last ? last : "");
}

void hpct__nccl_result_clear(void)
{
	last_nccl_result = 0;
	init_pending = 0;
}

int hpct__nccl_init_pending(void)
{
	return init_pending;
}

int hpct__nccl_config_blocks(const void *config)
{
	/* ncclConfig_t: size_t size; unsigned magic, version; int blocking
	 * (from 2.14), NCCL_CONFIG_UNDEF_INT when not set */
	int blocking = INT_MIN;
	unsigned version = 0;
	if (config) {
		memcpy(&version, (const char *)config + sizeof(size_t) + sizeof(unsigned),
		       sizeof(version));
		if (version >= 21400)
			memcpy(&blocking,
			       (const char *)config + sizeof(size_t) + 2 * sizeof(unsigned),
			       sizeof(blocking));
	}
	if (blocking != INT_MIN)
		return blocking != 0;
	const char *env = getenv("NCCL_COMM_BLOCKING");
	return !(env && strcmp(env, "0") == 0);
}

int hpct__nccl_init_call(const struct hpct_nccl_lib *l, const struct hpct_nccl_comm *c, int nid,
                         hpct_nccl_id *ids, void *config, struct hpct_nccl_roots *roots,
                         void **comm)
{
	hpct__nccl_env_arm();
	struct hpct_nccl_watch *w =
	        hpct__nccl_config_blocks(config)
	                ? hpct__nccl_watch_start(
	                          c->w->topo.timeout_s,
	                          "rank %d: NCCL's init of %s (epoch %llu, rank %d of "
	                          "%d)",
	                          c->w->topo.rank, c->name, (unsigned long long)c->w->topo.epoch,
	                          c->rank, c->nranks)
	                : NULL;
	hpct__nccl_watch_roots(w, roots, c->rank, l->version < 22400 /* no RAS thread */);
	int res = nid ? l->init_rank_scalable(comm, c->nranks, c->rank, nid, ids, config)
	              : l->init_rank_config(comm, c->nranks, ids[0], c->rank, config);
	hpct__nccl_watch_stop(w);
	init_pending = res == NCCL_IN_PROGRESS;
	return res;
}

int hpct__nccl_call_failed(const struct hpct_nccl_lib *l, const struct hpct_nccl_comm *c, int res,
                           void *comm, const char *call, const char *tier)
{
	return nccl_failed(l, c, res, comm, call, tier);
}

/* Tier 1: one root, on rank 0 at the id's address.  NCCL's own, shown
 * NCCL_COMM_ID for this call only, after a check the port is free; where
 * NCCL cannot be shown it (no env plugin, no shim), hpct's root in its
 * place, which NCCL's rank 0 then reaches like any other rank: it speaks
 * the root wire of every release from 2.19 to the newest verified here
 * (root_wire.h), so only a newer NCCL is refused. */
static int init_tier1(const struct hpct_nccl_lib *l, const struct hpct_nccl_comm *c,
                      hpct_nccl_id id, void *config, void **comm)
{
	/* hpct's root where NCCL cannot be shown the id, and before 2.24: it
	 * listens before anyone calls NCCL (then the ranks meet), NCCL's own
	 * only inside its init, and those releases abort a retried connect.
	 * The same answer on every rank. */
	int ours = !hpct__nccl_comm_id_possible(l) || (l->version < 22400 && c->group);
	int meet = ours || l->version < 22400;
	if (c->rank != 0) {
		int up = meet ? hpct__nccl_roots_up(l, c) : 0;
		if (up)
			return up;
		int res = hpct__nccl_init_call(l, c, 0, &id, config, NULL, comm);
		return res && res != NCCL_IN_PROGRESS
		               ? nccl_failed(l, c, res, *comm, "ncclCommInitRankConfig", "Tier 1")
		               : 0;
	}
	char text[80];
	int rc = hpct__nccl_id_where(&id, l->version, text, sizeof(text));
	if (rc)
		return rc;
	if (ours && !hpct__nccl_wire_for_version(l->version))
		return hpct__fail(
		        HPCT_ESTATE, HPCT_SUB_NCCL,
		        "rank %d: %s (Tier 1): NCCL %d.%d.%d does not consult hpct's env "
		        "plugin (NCCL_COMM_ID cannot be shown to one call), and hpct cannot "
		        "host its root in NCCL's place: it is newer than the newest release "
		        "whose root wire hpct verified (%s)",
		        c->w->topo.rank, c->name, l->version / 10000, l->version / 100 % 100,
		        l->version % 100, HPCT_NCCL_NEWEST_VERIFIED_NAME);
	const char *tier = ours ? "Tier 1, hpct's root here" : "Tier 1, root here";
	struct hpct_nccl_roots *root = NULL;
	/* free now, or fail fast: NCCL's root shares a port with a stale one
	 * (SO_REUSEPORT) and loses connections to it */
	int keyed = c->w->topo.secret != NULL;
	rc = ours ? hpct__nccl_roots_start(&id, 1, c->nranks, c->w->topo.timeout_s, keyed, &root)
	          : hpct__nccl_port_check(&id);
	if (rc == 0 && meet)
		rc = hpct__nccl_roots_up(l, c);
	if (rc == 0 && !ours)
		rc = hpct__nccl_comm_id_begin(l, text);
	if (rc) {
		hpct__nccl_roots_stop(root);
		return rc; /* logged, naming host:port */
	}
	HPCT_INFO(HPCT_SUB_NCCL, "rank %d: %s: %s at %s", c->w->topo.rank, c->name, tier, text);
	int res = hpct__nccl_init_call(l, c, 0, &id, config, root, comm);
	if (!ours)
		hpct__nccl_comm_id_end();
	if (res && res != NCCL_IN_PROGRESS) {
		hpct__nccl_roots_stop(root);
		return nccl_failed(l, c, res, *comm, "ncclCommInitRankConfig", tier);
	}
	if (root)
		hpct__nccl_roots_detach(root);
	return 0;
}

/* Tier 2: every rank hosts the micro-root of its own id, which hears from
 * this rank and the next, and is gone once it answered; it outlives this
 * call when NCCL's init goes on later (non-blocking, or in a group). */
static int init_tier2(const struct hpct_nccl_lib *l, const struct hpct_nccl_comm *c, void *config,
                      void **comm)
{
	hpct_nccl_id *ids = calloc((size_t)c->nranks, sizeof(*ids));
	if (!ids)
		return HPCT_ENOMEM;
	struct hpct_nccl_roots *root = NULL;
	int rc = hpct__nccl_derive_all(c, l->version, ids);
	if (rc == 0)
		rc = hpct__nccl_roots_start(&ids[c->rank], 1, c->nranks, c->w->topo.timeout_s,
		                            c->w->topo.secret != NULL, &root);
	if (rc == 0 && (rc = hpct__nccl_roots_up(l, c)) != 0)
		hpct__nccl_roots_stop(root);
	if (rc == 0) {
		char where[80];
		hpct__nccl_id_where(&ids[c->rank], l->version, where, sizeof(where));
		HPCT_INFO(
		        HPCT_SUB_NCCL,
		        "rank %d: %s: Tier 2, ncclCommInitRankScalable with nId %d, micro-root at "
		        "%s",
		        c->w->topo.rank, c->name, c->nranks, where);
		int res = hpct__nccl_init_call(l, c, c->nranks, ids, config, root, comm);
		if (res && res != NCCL_IN_PROGRESS) {
			rc = nccl_failed(l, c, res, *comm, "ncclCommInitRankScalable",
			                 "Tier 2, rootless");
			hpct__nccl_roots_stop(root);
		} else {
			hpct__nccl_roots_detach(root);
		}
	}
	free(ids);
	return rc;
}

int hpct__nccl_comm_init(const struct hpct_nccl_lib *l, const struct hpct_nccl_comm *c,
                         enum hpct_nccl_tier tier, const hpct_nccl_id *tier1_id, void *config,
                         void **comm_out)
{
	last_nccl_result = 0;
	if (tier == HPCT_NCCL_TIER_ROOTLESS)
		return init_tier2(l, c, config, comm_out);
	hpct_nccl_id id;
	int rc = 0;
	if (tier1_id)
		id = *tier1_id;
	else
		rc = hpct__nccl_derive_one(c, 0, l->version, &id);
	return rc ? rc : init_tier1(l, c, id, config, comm_out);
}

int hpct__nccl_domain_init(const struct hpct_nccl_lib *l, const struct hpct_nccl_lease *ls,
                           enum hpct_nccl_tier tier, void *config, void **comm_out)
{
	const struct hpct_nccl_comm *c = ls->c;
	last_nccl_result = 0;
	if (tier != HPCT_NCCL_TIER_ROOTLESS && c->rank == 0 && !ls->hosted)
		return init_tier1(l, c, ls->ids[0], config, comm_out); /* NCCL's own root */
	/* the kept listeners' roots serve already: meet, as rank 0 does in
	 * its own way, unless the root is NCCL's (Tier 1 where hpct's roots
	 * do not speak the release's wire), which listens only inside NCCL's
	 * init: then rank 0 does not meet either (init_tier1) */
	if (tier == HPCT_NCCL_TIER_ROOTLESS || hpct__nccl_wire_for_version(l->version)) {
		int up = hpct__nccl_roots_up(l, c);
		if (up)
			return up;
	}
	int res = hpct__nccl_init_call(l, c, tier == HPCT_NCCL_TIER_ROOTLESS ? c->nranks : 0,
	                               (hpct_nccl_id *)ls->ids, config, NULL, comm_out);
	if (res && res != NCCL_IN_PROGRESS)
		return nccl_failed(l, c, res, *comm_out,
		                   tier == HPCT_NCCL_TIER_ROOTLESS ? "ncclCommInitRankScalable"
		                                                   : "ncclCommInitRankConfig",
		                   tier == HPCT_NCCL_TIER_ROOTLESS ? "Tier 2, persistent domain"
		                                                   : "Tier 1, persistent domain");
	return 0;
}

int hpct__nccl_no_tier(const struct hpct_group *g, const struct hpct_nccl_lib *l)
{
	char why[sizeof(lib_error)];
	snprintf(why, sizeof(why), "%s",
	         !l                   ? lib_error
	         : l->version < 21900 ? "NCCL older than 2.19"
	                              : "no node list to derive addresses from");
	return hpct__fail(HPCT_ENONCCL, HPCT_SUB_NCCL,
	                  "rank %d: no NCCL communicator for group %016llx without a store: "
	                  "%s",
	                  g->world->topo.rank, (unsigned long long)g->id, why);
}

HPCT_API int hpct_nccl_comm_init(hpct_group *g, uint64_t key, void *config, void **comm_out)
{
	if (!g || !comm_out)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_NCCL, "hpct_nccl_comm_init: NULL argument");
	*comm_out = NULL;
	enum hpct_nccl_tier tier = hpct_nccl_tier(g);
	const struct hpct_nccl_lib *l = hpct__nccl_lib();
	if (tier == HPCT_NCCL_TIER_NONE)
		return hpct__nccl_no_tier(g, l);
	struct hpct_nccl_comm c;
	group_comm(g, key, &c);
	return hpct__nccl_comm_init(l, &c, tier, NULL, config, comm_out);
}
