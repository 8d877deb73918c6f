#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/topo/derive.h"
#include "bootstrap/base/log.h"
#include "bootstrap/base/util.h"
#include "bootstrap/world.h"
#include "bootstrap/base/wire.h"
#include "bootstrap/world_access.h"

/* Resolves a node once; later calls reuse the answer (or the error). */
static int node_resolve(struct hpct_world *w, int node)
{
	struct node_addr *na = &w->nodes[node];
	if (na->state == 0) {
		int rc = hpct__resolve(w->topo.hosts[node], 0, w->topo.family, &na->ss, &na->len);
		na->state = rc < 0 ? rc : 1;
	}
	return na->state < 0 ? na->state : 0;
}

int hpct__world_node_addr(struct hpct_world *w, int rank, struct sockaddr_storage *ss,
                          socklen_t *len)
{
	if (w->topo.nnodes == 0 || !w->nodes)
		return HPCT_ENOTOPO;
	int rc = node_resolve(w, w->topo.node_of[rank]);
	if (rc < 0)
		return rc;
	*ss = w->nodes[w->topo.node_of[rank]].ss;
	*len = w->nodes[w->topo.node_of[rank]].len;
	return 0;
}

static int peer_addr(void *arg, int rank, struct sockaddr_storage *ss, socklen_t *len, char *text,
                     size_t textlen)
{
	struct hpct_world *w = arg;
	int node = w->topo.node_of[rank];
	int rc = node_resolve(w, node);
	if (rc < 0) {
		snprintf(text, textlen, "%s (unresolved)", w->topo.hosts[node]);
		return rc;
	}
	*ss = w->nodes[node].ss;
	*len = w->nodes[node].len;
	uint16_t port = htons((uint16_t)hpct__derive_port(&w->topo, rank));
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_port = port;
	else
		((struct sockaddr_in6 *)ss)->sin6_port = port;
	hpct__addr_str((struct sockaddr *)ss, text, textlen);
	return 0;
}

/* HPCT_OFI_EXCHANGE: item of the name allgather: 2-byte length, the name */
#define NAME_ITEM (2 + HPCT_RAW_ADDR_MAX)

/* Peers' fabric addresses once exchanged: their endpoint names. */
static int exchanged_peer_addr(void *arg, int rank, struct sockaddr_storage *ss, socklen_t *len,
                               char *text, size_t textlen)
{
	struct hpct_world *w = arg;
	const unsigned char *item = w->names + (size_t)rank * NAME_ITEM;
	struct hpct_raw_addr *ra = (struct hpct_raw_addr *)ss;
	memset(ss, 0, sizeof(*ss));
	ra->family = AF_UNSPEC;
	ra->len = (uint16_t)(item[0] << 8 | item[1]);
	if (ra->len == 0 || ra->len > HPCT_RAW_ADDR_MAX)
		return HPCT_EPROTO;
	memcpy(ra->bytes, item + 2, ra->len);
	*len = sizeof(*ss);
	/* an IP provider's name is a sockaddr: say where it is */
	sa_family_t fam;
	memcpy(&fam, ra->bytes, sizeof(fam));
	if (fam == AF_INET || fam == AF_INET6) {
		struct sockaddr_storage in = { 0 };
		memcpy(&in, ra->bytes, ra->len < sizeof(in) ? ra->len : sizeof(in));
		hpct__addr_str((struct sockaddr *)&in, text, textlen);
	} else {
		snprintf(text, textlen, "an endpoint name of %u bytes", ra->len);
	}
	return 0;
}

/* The fabric endpoint where the provider puts it (port 0 here: the same
 * as a device-assigned address), reached through exchanged names. */
static int start_fabric(struct hpct_world *w, const struct hpct_transport_ops *ops,
                        const struct hpct_engine_cfg *tcp_cfg, struct sockaddr_storage ss,
                        socklen_t sl)
{
	struct hpct_engine_cfg cfg = *tcp_cfg;
	cfg.ops = ops;
	cfg.peer_addr = exchanged_peer_addr;
	if (ss.ss_family == AF_INET6)
		((struct sockaddr_in6 *)&ss)->sin6_port = 0;
	else
		((struct sockaddr_in *)&ss)->sin_port = 0;
	int rc = hpct__eng_create(&cfg, (struct sockaddr *)&ss, sl, &w->fabric_eng);
	if (rc < 0) {
		const char *why = ops->why ? ops->why() : "";
		return hpct__fail(rc == -ENODEV ? HPCT_EBADENV : rc, HPCT_SUB_INIT,
		                  "rank %d: cannot open the fabric endpoint (HPCT_TRANSPORT=ofi, "
		                  "HPCT_OFI_EXCHANGE=1): %s",
		                  w->topo.rank, why && *why ? why : hpct_strerror(rc));
	}
	return 0;
}

/* Every rank's fabric endpoint name to every rank, over the TCP engine,
 * which then closes: the fabric engine carries everything after. */
static int exchange_names(struct hpct_world *w)
{
	unsigned char mine[NAME_ITEM] = { 0 };
	size_t len = HPCT_RAW_ADDR_MAX;
	int rc = hpct__eng_self_name(w->fabric_eng, mine + 2, &len);
	if (rc < 0)
		return hpct__fail(rc, HPCT_SUB_INIT, "rank %d: the fabric endpoint has no name: %s",
		                  w->topo.rank, hpct_strerror(rc));
	mine[0] = (unsigned char)(len >> 8);
	mine[1] = (unsigned char)len;
	if (!(w->names = malloc((size_t)w->topo.size * NAME_ITEM)))
		return HPCT_ENOMEM;
	if ((rc = hpct__coll_allgather(&w->group, mine, NAME_ITEM, w->names)) != 0)
		return rc; /* named by the allgather */
	hpct__eng_destroy(w->eng, hpct__now() + w->topo.timeout_s, 1);
	w->eng = w->fabric_eng;
	w->fabric_eng = NULL;
	HPCT_INFO(HPCT_SUB_INIT, "rank %d: fabric endpoint names exchanged; traffic moves to ofi",
	          w->topo.rank);
	return 0;
}

HPCT_PRIVATE int hpct__transport_prepare(void)
{
	const char *tname = hpct__env_str(hpct__env_process(), "HPCT_TRANSPORT");
	const struct hpct_transport_ops *ops = hpct_transport_find(tname ? tname : "tcp");
	return ops && ops->prepare ? ops->prepare() : 0;
}

static int start_rootless(struct hpct_world *w)
{
	struct hpct_topo *t = &w->topo;
	const char *tname = hpct__env_str(hpct__env_process(), "HPCT_TRANSPORT");
	if (!tname)
		tname = "tcp";
	const char *algo = hpct__env_str(hpct__env_process(), "HPCT_ALGO");
	if (!algo || strcmp(algo, "tree") == 0)
		w->algo = HPCT_ALGO_TREE;
	else if (strcmp(algo, "bruck") == 0)
		w->algo = HPCT_ALGO_BRUCK;
	else
		return hpct__fail(HPCT_EBADENV, HPCT_SUB_ENV,
		                  "HPCT_ALGO=%s is not 'tree' or 'bruck'", algo);
	const struct hpct_transport_ops *ops = hpct_transport_find(tname);
	if (!ops)
		return hpct__fail(HPCT_EBADENV, HPCT_SUB_ENV,
		                  "HPCT_TRANSPORT=%s is not a transport of this build (have: %s)",
		                  tname, hpct_transport_names());
	int exchange = 0, set;
	if (ops->self_name) {
		int rc = hpct__env_bool(hpct__env_process(), "HPCT_OFI_EXCHANGE", &exchange, &set);
		if (rc < 0)
			return rc;
	}
	/* exchanging names: TCP first, at the derived address */
	const struct hpct_transport_ops *fabric = ops;
	if (exchange)
		ops = &hpct_transport_tcp;
	struct sockaddr_storage ss;
	socklen_t sl;
	int rc = peer_addr(w, t->rank, &ss, &sl, w->listen_text, sizeof(w->listen_text));
	if (rc < 0)
		return hpct__fail(rc, HPCT_SUB_INIT,
		                  "rank %d: this node's address %s does not resolve (from %s)",
		                  t->rank, t->hosts[t->node], t->nodelist_src);
	if (t->ifname && (rc = hpct__ifname_check(t->ifname, (struct sockaddr *)&ss)) < 0)
		return rc;
	struct hpct_engine_cfg cfg = {
		.ops = ops,
		.rank = t->rank,
		.size = t->size,
		.job = t->job,
		.epoch = t->epoch,
		.handshake_timeout_s = t->timeout_s < 10 ? t->timeout_s : 10,
		.peer_addr = peer_addr,
		.peer_addr_arg = w,
		.secret = t->secret,
		.secret_len = t->secret_len,
	};
	if (t->secret && !hpct__auth_available())
		return hpct__fail(HPCT_EBADENV, HPCT_SUB_INIT,
		                  "%s is set, but OpenSSL's libcrypto.so.3 cannot be loaded to prove "
		                  "it (install libssl3)",
		                  t->secret_src);
	rc = hpct__eng_create(&cfg, (struct sockaddr *)&ss, sl, &w->eng);
	if (rc == -EADDRINUSE)
		return hpct__fail(
		        HPCT_EADDRINUSE, HPCT_SUB_INIT,
		        "rank %d: cannot listen on %s, derived for job '%s' epoch %llu "
		        "(HPCT_PORT_BASE=%d HPCT_PORT_RANGE=%d): the port is taken, by a "
		        "previous incarnation still running or another job using the same range",
		        t->rank, w->listen_text, t->job_name, (unsigned long long)t->epoch,
		        t->port_base, t->port_range);
	const char *why = rc < 0 && ops->why ? ops->why() : NULL;
	if (rc < 0 && why && *why)
		return hpct__fail(rc == -ENODEV ? HPCT_EBADENV : rc, HPCT_SUB_INIT,
		                  "rank %d: cannot listen on %s (HPCT_TRANSPORT=%s): %s", t->rank,
		                  w->listen_text, tname, why);
	if (rc < 0)
		return hpct__fail(rc, HPCT_SUB_INIT, "rank %d: cannot listen on %s: %s", t->rank,
		                  w->listen_text, hpct_strerror(rc));
	HPCT_INFO(HPCT_SUB_INIT,
	          "rootless: rank %d of %d listening on %s over %s (node %d %s, job '%s', epoch "
	          "%llu)",
	          t->rank, t->size, w->listen_text, tname, t->node, t->hosts[t->node], t->job_name,
	          (unsigned long long)t->epoch);
	if (exchange)
		return start_fabric(w, fabric, &cfg, ss, sl);
	return 0;
}

static int start_standard(struct hpct_world *w)
{
	struct hpct_topo *t = &w->topo;
	if (!t->master_addr || !t->master_port)
		return hpct__fail(
		        HPCT_ENOTOPO, HPCT_SUB_INIT,
		        "rank %d: the standard path needs MASTER_ADDR and MASTER_PORT "
		        "(MASTER_ADDR=%s MASTER_PORT=%d)%s%s",
		        t->rank, t->master_addr ? t->master_addr : "(unset)", t->master_port,
		        t->why_not_rootless[0] ? "; rootless is not possible either: " : "",
		        t->why_not_rootless);
	snprintf(w->listen_text, sizeof(w->listen_text), "%s:%d", t->master_addr, t->master_port);
	double deadline = hpct__now() + t->timeout_s;
	int rc;
	struct hpct_auth_key key = { .secret = t->secret, .len = t->secret_len, .epoch = t->epoch };
	if (t->rank == 0 && (rc = hpct__std_server_start(t->master_addr, t->master_port, t->size,
	                                                 t->job, &key, &w->server)) < 0)
		return rc;
	rc = hpct__std_client_connect(t->master_addr, t->master_port, t->rank, t->size, t->job,
	                              &key, deadline, &w->client);
	if (rc < 0)
		return rc;
	HPCT_INFO(HPCT_SUB_INIT, "standard: rank %d of %d through the rendezvous at %s", t->rank,
	          t->size, w->listen_text);
	return 0;
}

HPCT_PRIVATE int hpct__rootless_possible(char *why, size_t len)
{
	struct hpct_topo t;
	memset(&t, 0, sizeof(t));
	int rc = hpct__topo_read(hpct__env_process(), &t);
	int ok = rc == 0 && t.want_rootless && t.nnodes > 0;
	if (!ok)
		snprintf(why, len, "%s",
		         rc ? hpct_last_error()
		            : !t.want_rootless ? "HPCT_USE_ROOTLESS is not 1" : t.why_not_rootless);
	if (rc == 0)
		hpct__topo_free(&t);
	return ok;
}

HPCT_API int hpct_world_create(struct hpct_world **world_out)
{
	if (!world_out)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_INIT,
		                  "hpct_world_create: world_out is NULL");
	hpct__log_init();
	struct hpct_world *w = calloc(1, sizeof(*w));
	if (!w)
		return HPCT_ENOMEM;
	int rc = hpct__topo_read(hpct__env_process(), &w->topo);
	if (rc < 0) {
		free(w);
		return rc;
	}
	struct hpct_topo *t = &w->topo;
	hpct__log_set_rank(t->rank);
	/* node addresses, resolved lazily, on either path (Gloo binds there) */
	if (t->nnodes > 0 && !(w->nodes = calloc((size_t)t->nnodes, sizeof(*w->nodes)))) {
		hpct_world_destroy(w);
		return HPCT_ENOMEM;
	}
	/* Decided only from inputs every rank sees alike: the node list. */
	if (t->want_rootless && t->nnodes > 0) {
		w->path = HPCT_PATH_ROOTLESS;
	} else {
		w->path = HPCT_PATH_STANDARD;
		if (t->want_rootless && t->rank == 0)
			HPCT_WARN(HPCT_SUB_INIT,
			          "HPCT_USE_ROOTLESS=1 but %s; every rank takes the standard path",
			          t->why_not_rootless);
	}
	rc = w->path == HPCT_PATH_ROOTLESS ? start_rootless(w) : start_standard(w);
	if (rc < 0) {
		hpct_world_destroy(w);
		return rc;
	}
	w->group.world = w;
	w->group.id = hpct__derive_world_group(t->job, t->epoch, t->size);
	w->group.rank = t->rank;
	w->group.size = t->size;
	if (w->fabric_eng && (rc = exchange_names(w)) < 0) {
		hpct_world_destroy(w);
		return rc;
	}
	*world_out = w;
	return 0;
}

HPCT_API int hpct_world_recover(struct hpct_world *w, uint64_t epoch, const int *replaced,
                                int nreplaced)
{
	if (!w || (nreplaced > 0 && !replaced) || nreplaced < 0)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_INIT, "hpct_world_recover: NULL argument");
	struct hpct_topo *t = &w->topo;
	if (w->path != HPCT_PATH_ROOTLESS)
		return hpct__fail(HPCT_ESTATE, HPCT_SUB_INIT,
		                  "rank %d: in-process recovery needs the rootless path (on the "
		                  "standard path the job restarts every rank)",
		                  t->rank);
	if (epoch <= t->epoch)
		return hpct__fail(
		        HPCT_EINVAL, HPCT_SUB_INIT,
		        "rank %d: hpct_world_recover to epoch %llu: the world is at epoch "
		        "%llu already; the new epoch must be greater",
		        t->rank, (unsigned long long)epoch, (unsigned long long)t->epoch);
	for (int i = 0; i < nreplaced; i++) {
		if (replaced[i] < 0 || replaced[i] >= t->size ||
		    (i && replaced[i] <= replaced[i - 1]))
			return hpct__fail(
			        HPCT_EINVAL, HPCT_SUB_INIT,
			        "rank %d: hpct_world_recover: replaced rank %d (entry %d) "
			        "must be increasing and below the world size %d",
			        t->rank, replaced[i], i, t->size);
		if (replaced[i] == t->rank)
			return hpct__fail(
			        HPCT_EINVAL, HPCT_SUB_INIT,
			        "rank %d: hpct_world_recover: this rank is in the replaced "
			        "list; a replacement starts with hpct_world_create at epoch "
			        "%llu",
			        t->rank, (unsigned long long)epoch);
	}
	/* this rank's listener at the new epoch's port: windows rotate, so it
	 * can open before the old one closes */
	if (hpct__derive_window(t, epoch) == hpct__derive_window(t, t->epoch) && !t->port_of)
		return hpct__fail(
		        HPCT_EBADENV, HPCT_SUB_INIT,
		        "rank %d: recovery to epoch %llu: its ports are those of epoch %llu "
		        "(HPCT_PORT_RANGE=%d holds %d window(s) of %d ranks); the listener "
		        "cannot move: recover to the next epoch, with at least two windows",
		        t->rank, (unsigned long long)epoch, (unsigned long long)t->epoch,
		        t->port_range, t->port_range / (t->max_local > 0 ? t->max_local : 1),
		        t->max_local);
	uint64_t old = t->epoch;
	t->epoch = epoch;
	struct sockaddr_storage ss;
	socklen_t sl;
	char text[HPCT_ADDRSTRLEN];
	int rc = peer_addr(w, t->rank, &ss, &sl, text, sizeof(text));
	if (rc == 0)
		rc = hpct__eng_recover(w->eng, epoch, replaced, nreplaced, (struct sockaddr *)&ss,
		                       sl);
	if (rc < 0) {
		t->epoch = old;
		const char *why = hpct__eng_why(w->eng);
		return hpct__fail(rc, HPCT_SUB_INIT,
		                  "rank %d: recovery to epoch %llu: cannot listen at %s: %s",
		                  t->rank, (unsigned long long)epoch, text,
		                  *why ? why : hpct_strerror(rc));
	}
	snprintf(w->listen_text, sizeof(w->listen_text), "%s", text);
	/* the old epoch's groups are done with; the world group starts anew */
	for (int i = 0; i < w->nchildren; i++) {
		struct hpct_group *g = w->children[i];
		g->failed = HPCT_ESTATE;
		snprintf(g->failure, sizeof(g->failure),
		         "rank %d: group %016llx belongs to epoch %llu; the world recovered to "
		         "epoch "
		         "%llu: create the group again",
		         t->rank, (unsigned long long)g->id, (unsigned long long)old,
		         (unsigned long long)epoch);
	}
	hpct__eng_forget_group(w->eng, w->group.id);
	w->group.id = hpct__derive_world_group(t->job, epoch, t->size);
	w->group.seq = 0;
	w->group.counter = 0;
	w->group.failed = 0;
	w->group.failure[0] = 0;
	w->any_failed = 0;
	HPCT_INFO(HPCT_SUB_INIT,
	          "rank %d: recovered to epoch %llu (%d ranks replaced), listening at %s", t->rank,
	          (unsigned long long)epoch, nreplaced, text);
	return 0;
}

HPCT_API void hpct_world_destroy(struct hpct_world *w)
{
	if (!w)
		return;
	while (w->nchildren > 0)
		hpct__group_free(w->children[--w->nchildren]);
	free(w->children);
	/* After a failure only the aborts already on their way are worth a
	 * short wait; otherwise peers may still need our last messages. */
	double linger =
	        w->any_failed ? (w->topo.timeout_s < 1 ? w->topo.timeout_s : 1) : w->topo.timeout_s;
	double deadline = hpct__now() + linger;
	hpct__eng_destroy(w->eng, deadline, !w->any_failed);
	hpct__std_client_close(w->client);
	hpct__std_server_stop(w->server, deadline);
	free(w->nodes);
	hpct__eng_destroy(w->fabric_eng, 0, 0);
	free(w->names);
	hpct__topo_free(&w->topo);
	free(w);
}

HPCT_API int hpct_world_get_info(const struct hpct_world *w, struct hpct_world_info *info)
{
	if (!w || !info)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_INIT, "hpct_world_info: NULL argument");
	const struct hpct_topo *t = &w->topo;
	memset(info, 0, sizeof(*info));
	info->rank = t->rank;
	info->size = t->size;
	info->local_rank = t->local_rank;
	info->local_size = t->local_size;
	info->node = t->node;
	info->nnodes = t->nnodes > 0 ? t->nnodes : 1;
	info->path = w->path;
	info->job = t->job;
	info->epoch = t->epoch;
	snprintf(info->job_name, sizeof(info->job_name), "%s", t->job_name);
	snprintf(info->listen_addr, sizeof(info->listen_addr), "%s", w->listen_text);
	return 0;
}

HPCT_API int hpct_world_get_stats(const struct hpct_world *w, struct hpct_world_stats *s)
{
	if (!w || !s)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_INIT, "hpct_world_stats: NULL argument");
	memset(s, 0, sizeof(*s));
	if (w->eng)
		hpct__eng_stats(w->eng, s);
	else if (w->client)
		s->conns_opened = 1;
	return 0;
}

HPCT_API int hpct_world_peer_addr(struct hpct_world *w, int rank, char addr_out[HPCT_ADDRSTRLEN])
{
	if (!w || !addr_out)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_INIT,
		                  "hpct_world_peer_addr: NULL argument");
	if (rank < 0 || rank >= w->topo.size)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_INIT,
		                  "hpct_world_peer_addr: rank %d is not below the world size %d",
		                  rank, w->topo.size);
	if (w->path != HPCT_PATH_ROOTLESS)
		return hpct__fail(
		        HPCT_ESTATE, HPCT_SUB_INIT,
		        "hpct_world_peer_addr: peers have no derived address on the standard path");
	struct sockaddr_storage ss;
	socklen_t sl;
	return peer_addr(w, rank, &ss, &sl, addr_out, HPCT_ADDRSTRLEN);
}

HPCT_API hpct_group *hpct_world_group(struct hpct_world *w)
{
	return w ? &w->group : NULL;
}

double hpct__world_timeout(const struct hpct_world *w)
{
	return w->topo.timeout_s;
}

int hpct__world_has_secret(const struct hpct_world *w)
{
	return w->topo.secret != NULL;
}

struct hpct_std_client *hpct__world_std_client(struct hpct_world *w)
{
	return w->client;
}

int hpct__world_node_host(struct hpct_world *w, int rank, char *buf, size_t len)
{
	if (w->topo.nnodes == 0 || !w->nodes)
		return HPCT_ESTATE;
	int node = w->topo.node_of[rank];
	int rc = node_resolve(w, node);
	if (rc < 0)
		return rc;
	if (getnameinfo((const struct sockaddr *)&w->nodes[node].ss, w->nodes[node].len, buf,
	                (socklen_t)len, NULL, 0, NI_NUMERICHOST) != 0)
		return HPCT_ERESOLVE;
	return 0;
}

static void failure_key(char *buf, size_t len, const struct hpct_world *w, uint64_t group)
{
	snprintf(buf, len, "e%llu/g%016llx/failure", (unsigned long long)w->topo.epoch,
	         (unsigned long long)group);
}

void hpct__world_tell_failure(struct hpct_world *w, uint64_t group, const char *text)
{
	if (w->eng) {
		struct hpct_abort a = { .code = HPCT_EPEERDEAD,
			                .origin = (uint32_t)w->topo.rank,
			                .culprit = -1 };
		snprintf(a.text, sizeof(a.text), "%s", text);
		hpct__eng_broadcast_abort(w->eng, group, &a);
		hpct__eng_progress(w->eng, 0);
	} else if (w->client) {
		char key[96];
		failure_key(key, sizeof(key), w, group);
		hpct__std_set(w->client, key, text, strlen(text) + 1, 0, hpct__now() + 1);
	}
}

int hpct__world_learn_failure(struct hpct_world *w, uint64_t group, double wait_s, char *buf,
                              size_t len)
{
	double deadline = hpct__now() + wait_s;
	if (w->eng) {
		for (;;) {
			const struct hpct_abort *a = hpct__eng_abort_for(w->eng, group);
			if (a) {
				snprintf(buf, len, "rank %u saw: %s", a->origin, a->text);
				struct hpct_abort fwd = *a; /* pass it on */
				hpct__eng_broadcast_abort(w->eng, group, &fwd);
				hpct__eng_progress(w->eng, 0);
				return 1;
			}
			double left = deadline - hpct__now();
			if (left <= 0)
				return 0;
			hpct__eng_progress(w->eng, (int)(left * 1000) + 1);
		}
	}
	if (!w->client)
		return 0;
	/* The teller's key, or at once the store's word that a rank left. */
	char key[96];
	failure_key(key, sizeof(key), w, group);
	void *val = NULL;
	size_t n = 0;
	int rc = hpct__std_get(w->client, key, &val, &n, deadline);
	if (rc == 0) {
		snprintf(buf, len, "%.*s", (int)n, (const char *)val);
		free(val);
		return 1;
	}
	if (rc == HPCT_EPEERDEAD) {
		snprintf(buf, len, "%s", hpct_last_error());
		return 1;
	}
	return 0;
}
