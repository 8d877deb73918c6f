#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/base/log.h"
#include "bootstrap/base/util.h"
#include "bootstrap/base/wire.h"
#include "bootstrap/topo/derive.h"
#include "bootstrap/world.h"
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

HPCT_PRIVATE int hpct__rootless_possible(char *why, size_t len)
{
	struct hpct_topo t;
	memset(&t, 0, sizeof(t));
	int rc = hpct__topo_read(hpct__env_process(), &t);
	int ok = rc == 0 && t.want_rootless && t.nnodes > 0;
	if (!ok)
		snprintf(why, len, "%s",
		         rc                 ? hpct_last_error()
		         : !t.want_rootless ? "HPCT_USE_ROOTLESS is not 1"
		                            : t.why_not_rootless);
	if (rc == 0)
		hpct__topo_free(&t);
	return ok;
}

int hpct__world_start(struct hpct_topo *topo, const struct hpct_world_opts *opts,
                      struct hpct_world **world_out)
{
	struct hpct_world *w = calloc(1, sizeof(*w));
	if (!w) {
		hpct__topo_free(topo);
		return HPCT_ENOMEM;
	}
	w->topo = *topo;
	struct hpct_topo *t = &w->topo;
	/* Decided only from inputs every rank sees alike: the node list. */
	if (t->want_rootless && (t->nnodes > 0 || (opts && opts->peer_addr))) {
		w->ops = &hpct__path_rootless;
	} else {
		w->ops = &hpct__path_standard;
		if (t->want_rootless && t->rank == 0)
			HPCT_WARN(HPCT_SUB_INIT,
			          "HPCT_USE_ROOTLESS=1 but %s; every rank takes the standard path",
			          t->why_not_rootless);
	}
	/* node addresses, resolved lazily, on either path (Gloo binds there) */
	if (t->nnodes > 0 && !(w->nodes = calloc((size_t)t->nnodes, sizeof(*w->nodes)))) {
		hpct_world_destroy(w);
		return HPCT_ENOMEM;
	}
	w->born_epoch = t->epoch;
	w->group.world = w;
	w->group.id = hpct__derive_world_group(t->job, t->epoch, t->size);
	w->group.rank = t->rank;
	w->group.size = t->size;
	int rc = w->ops->start(w, opts);
	if (rc < 0) {
		hpct_world_destroy(w);
		return rc;
	}
	*world_out = w;
	return 0;
}

/* A world of this process's topology (the launcher's environment) that
 * only asks the rootless store (store/client.c): no path started, no port
 * bound, nothing served.  For a forked child of a rank that had none yet
 * (NVRx's monitor process). */
HPCT_PRIVATE int hpct__world_store_client(struct hpct_world **world_out)
{
	struct hpct_topo t;
	memset(&t, 0, sizeof(t));
	int rc = hpct__topo_read(hpct__env_process(), &t);
	if (rc < 0)
		return rc;
	struct hpct_world *w = calloc(1, sizeof(*w));
	if (!w || (t.nnodes > 0 && !(w->nodes = calloc((size_t)t.nnodes, sizeof(*w->nodes))))) {
		free(w);
		hpct__topo_free(&t);
		return HPCT_ENOMEM;
	}
	w->topo = t;
	w->ops = &hpct__path_rootless;
	w->store_client_only = 1;
	w->born_epoch = t.epoch;
	w->group.world = w;
	w->group.rank = t.rank;
	w->group.size = t.size;
	*world_out = w;
	return 0;
}

/* torchrun's agents' own world, named `job` (the shim's, for their
 * rendezvous store): hpct__topo_read_agents, on the rootless path. */
HPCT_PRIVATE int hpct__world_create_agents(const char *job, struct hpct_world **world_out,
                                           char *why, size_t len)
{
	hpct__log_init();
	struct hpct_topo t;
	int rc = hpct__topo_read_agents(hpct__env_process(), job, &t);
	if (rc < 0)
		return rc;
	if (!t.nnodes) {
		snprintf(why, len, "%s", t.why_not_rootless);
		hpct__topo_free(&t);
		return HPCT_ENOTOPO;
	}
	t.want_rootless = 1;
	return hpct__world_start(&t, NULL, world_out);
}

HPCT_API int hpct_world_create(struct hpct_world **world_out)
{
	if (!world_out)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_INIT,
		                  "hpct_world_create: world_out is NULL");
	hpct__log_init();
	struct hpct_topo t;
	memset(&t, 0, sizeof(t));
	int rc = hpct__topo_read(hpct__env_process(), &t);
	if (rc < 0)
		return rc;
	hpct__log_set_rank(t.rank);
	return hpct__world_start(&t, NULL, world_out);
}

/* Where `rank` is, or would go, in the sorted list of replaced ranks. */
static int reborn_at(const struct hpct_world *w, int rank)
{
	int lo = 0, hi = w->nreborn;
	while (lo < hi) {
		int mid = (lo + hi) / 2;
		if (w->reborn[mid].rank < rank)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Records that `replaced` (increasing) began anew at `epoch`: merged into
 * the sorted list, a rank already in it updated.  The room is there. */
static void reborn_record(struct hpct_world *w, uint64_t epoch, const int *replaced, int nreplaced)
{
	for (int i = 0; i < nreplaced; i++) {
		int at = reborn_at(w, replaced[i]);
		if (at < w->nreborn && w->reborn[at].rank == replaced[i]) {
			w->reborn[at].epoch = epoch;
			continue;
		}
		memmove(&w->reborn[at + 1], &w->reborn[at],
		        (size_t)(w->nreborn - at) * sizeof(*w->reborn));
		w->reborn[at] = (struct hpct_reborn){ replaced[i], epoch };
		w->nreborn++;
	}
}

HPCT_API int hpct_world_recover(struct hpct_world *w, uint64_t epoch, const int *replaced,
                                int nreplaced)
{
	if (!w || (nreplaced > 0 && !replaced) || nreplaced < 0)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_INIT, "hpct_world_recover: NULL argument");
	struct hpct_topo *t = &w->topo;
	if (!w->ops->recover)
		return hpct__fail(HPCT_ESTATE, HPCT_SUB_INIT,
		                  "rank %d: in-process recovery needs the rootless path (on the "
		                  "%s path the job restarts every rank)",
		                  t->rank, w->ops->name);
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
	/* room first: once the path recovered, the record must not fail */
	if (w->nreborn + nreplaced > w->capreborn) {
		int cap = w->nreborn + nreplaced + 8;
		struct hpct_reborn *v = realloc(w->reborn, (size_t)cap * sizeof(*v));
		if (!v)
			return HPCT_ENOMEM;
		w->reborn = v;
		w->capreborn = cap;
	}
	uint64_t old = t->epoch;
	int rc = w->ops->recover(w, epoch, replaced, nreplaced);
	if (rc < 0)
		return rc;
	reborn_record(w, epoch, replaced, nreplaced);
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
	if (w->ops->forget_group)
		w->ops->forget_group(w, w->group.id);
	w->group.id = hpct__derive_world_group(t->job, epoch, t->size);
	w->group.seq = 0;
	w->group.counter = 0;
	w->group.failed = 0;
	w->group.failure[0] = 0;
	w->any_failed = 0;
	for (int i = 0; i < HPCT_WORLD_SLOTS; i++)
		if (w->svc[i].ops)
			w->svc[i].ops->recovered(w, w->svc[i].ctx, old);
	HPCT_INFO(HPCT_SUB_INIT,
	          "rank %d: recovered to epoch %llu (%d ranks replaced), listening at %s", t->rank,
	          (unsigned long long)epoch, nreplaced, w->listen_text);
	return 0;
}

void hpct__world_end(struct hpct_world *w, double deadline, int graceful)
{
	if (!w)
		return;
	for (int i = HPCT_WORLD_SLOTS - 1; i >= 0; i--)
		if (w->svc[i].ops)
			w->svc[i].ops->end(w, w->svc[i].ctx);
	while (w->nchildren > 0)
		hpct__group_free(w->children[--w->nchildren]);
	free(w->children);
	w->ops->stop(w, deadline, graceful);
	free(w->nodes);
	free(w->reborn);
	hpct__topo_free(&w->topo);
	free(w);
}

HPCT_API void hpct_world_destroy(struct hpct_world *w)
{
	if (!w)
		return;
	/* After a failure only the aborts already on their way are worth a
	 * short wait; otherwise peers may still need our last messages. */
	double linger =
	        w->any_failed ? (w->topo.timeout_s < 1 ? w->topo.timeout_s : 1) : w->topo.timeout_s;
	hpct__world_end(w, hpct__now() + linger, !w->any_failed);
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
	info->path = w->ops->path;
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
	w->ops->stats(w, s);
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
	if (!w->ops->peer_addr)
		return hpct__fail(
		        HPCT_ESTATE, HPCT_SUB_INIT,
		        "hpct_world_peer_addr: peers have no derived address on the %s path",
		        w->ops->name);
	return w->ops->peer_addr(w, rank, addr_out);
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

int hpct__world_route_source(struct hpct_world *w, const char *who, struct sockaddr_storage *ss,
                             socklen_t *len)
{
	const struct hpct_topo *t = &w->topo;
	struct sockaddr_storage m;
	socklen_t ml;
	int rc = hpct__resolve(t->master_addr ? t->master_addr : "127.0.0.1", t->master_port,
	                       t->family, &m, &ml);
	if (rc < 0)
		return rc; /* named there */
	int fd = socket(m.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return hpct__fail(-errno, HPCT_SUB_COLL, "rank %d: %s: socket: %s", t->rank, who,
		                  strerror(errno));
	*len = sizeof(*ss);
	if (connect(fd, (struct sockaddr *)&m, ml) != 0 ||
	    getsockname(fd, (struct sockaddr *)ss, len) != 0) {
		int e = errno;
		close(fd);
		return hpct__fail(-e, HPCT_SUB_COLL,
		                  "rank %d: %s: no route to the rendezvous %s:%d: %s", t->rank, who,
		                  t->master_addr, t->master_port, strerror(e));
	}
	close(fd);
	if (ss->ss_family == AF_INET6)
		((struct sockaddr_in6 *)ss)->sin6_port = 0;
	else
		((struct sockaddr_in *)ss)->sin_port = 0;
	return 0;
}

uint64_t hpct__world_rank_born(const struct hpct_world *w, int rank)
{
	if (rank < 0 || rank >= w->topo.size)
		return UINT64_MAX;
	int at = reborn_at(w, rank);
	return at < w->nreborn && w->reborn[at].rank == rank ? w->reborn[at].epoch : w->born_epoch;
}

void hpct__world_tell_failure(struct hpct_world *w, uint64_t group, const char *text)
{
	w->ops->tell_failure(w, group, text);
}

int hpct__world_learn_failure(struct hpct_world *w, uint64_t group, double wait_s, char *buf,
                              size_t len)
{
	return w->ops->learn_failure(w, group, wait_s, buf, len);
}
