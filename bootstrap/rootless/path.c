/* The rootless path's row of the path table: a world started by deriving
 * this rank's listener and every peer's address, over the engine; with
 * HPCT_OFI_EXCHANGE, fabric endpoint names exchanged over TCP first; in-place
 * recovery to a new epoch. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/base/log.h"
#include "bootstrap/base/param.h"
#include "bootstrap/base/util.h"
#include "bootstrap/base/wire.h"
#include "bootstrap/rootless/coll.h"
#include "bootstrap/rootless/engine.h"
#include "bootstrap/topo/derive.h"
#include "bootstrap/world.h"
#include "bootstrap/world_access.h"

/* Every rank's listener, derived: its node's address and its port. */
static int derived_peer_addr(void *arg, int rank, struct sockaddr_storage *ss, socklen_t *len,
                             char *text, size_t textlen)
{
	struct hpct_world *w = arg;
	int rc = hpct__world_node_addr(w, rank, ss, len);
	if (rc < 0) {
		snprintf(text, textlen, "%s (unresolved)", w->topo.hosts[w->topo.node_of[rank]]);
		return rc;
	}
	uint16_t port = htons((uint16_t)hpct__derive_port(&w->topo, rank));
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_port = port;
	else
		((struct sockaddr_in6 *)ss)->sin6_port = port;
	hpct__addr_str((struct sockaddr *)ss, text, textlen);
	return 0;
}

static int peer_addr(struct hpct_world *w, int rank, struct sockaddr_storage *ss, socklen_t *len,
                     char *text, size_t textlen)
{
	return w->reach.peer_addr(w->reach.peer_addr_arg, rank, ss, len, text, textlen);
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

/* What a transport refuses of a stranger or a broken peer, in hpct's log. */
static void transport_log(const char *line)
{
	HPCT_WARN(HPCT_SUB_NET, "%s", line);
}

/* What a transport's start and connections cost, at INFO. */
static void transport_info(const char *line)
{
	HPCT_INFO(HPCT_SUB_NET, "%s", line);
}

/* The transport: the caller's, or HPCT_TRANSPORT's; and whether fabric
 * names are to be exchanged first (HPCT_OFI_EXCHANGE). */
static int choose_transport(const struct hpct_world_opts *opts,
                            const struct hpct_transport_ops **ops_out, const char **name_out,
                            int *exchange_out)
{
	const struct hpct_transport_ops *ops = opts ? opts->transport : NULL;
	const char *tname = ops ? ops->name : hpct__env_str(hpct__env_process(), "HPCT_TRANSPORT");
	if (!tname)
		tname = "tcp";
	if (!ops && !(ops = hpct_transport_find(tname)))
		return hpct__fail(HPCT_EBADENV, HPCT_SUB_ENV,
		                  "HPCT_TRANSPORT=%s is not a transport of this build (have: %s)",
		                  tname, hpct_transport_names());
	hpct__transport_set_log(transport_log);
	hpct__transport_set_info(hpct__log_enabled(HPCT_LOG_INFO, HPCT_SUB_NET) ? transport_info
	                                                                        : NULL);
	*exchange_out = 0;
	if (ops->self_name) {
		int set, rc = hpct__env_bool(hpct__env_process(), "HPCT_OFI_EXCHANGE", exchange_out,
		                             &set);
		if (rc < 0)
			return rc;
	}
	*ops_out = ops;
	*name_out = tname;
	return 0;
}

static int rl_start(struct hpct_world *w, const struct hpct_world_opts *opts)
{
	struct hpct_topo *t = &w->topo;
	const char *algo = hpct__env_str(hpct__env_process(), "HPCT_ALGO");
	if (!algo || strcmp(algo, "tree") == 0)
		w->algo = HPCT_ALGO_TREE;
	else if (strcmp(algo, "bruck") == 0)
		w->algo = HPCT_ALGO_BRUCK;
	else
		return hpct__fail(HPCT_EBADENV, HPCT_SUB_ENV,
		                  "HPCT_ALGO=%s is not 'tree' or 'bruck'", algo);
	const struct hpct_transport_ops *ops = NULL;
	const char *tname = NULL;
	int exchange = 0;
	int rc = choose_transport(opts, &ops, &tname, &exchange);
	if (rc < 0)
		return rc;
	/* exchanging names: TCP first, at the derived address */
	const struct hpct_transport_ops *fabric = ops;
	if (exchange)
		ops = &hpct_transport_tcp;
	w->reach.peer_addr = opts && opts->peer_addr ? opts->peer_addr : derived_peer_addr;
	w->reach.peer_addr_arg = opts && opts->peer_addr ? opts->peer_addr_arg : w;
	const char *host = t->nnodes > 0 ? t->hosts[t->node] : "(no node list)";
	struct sockaddr_storage ss;
	socklen_t sl;
	rc = peer_addr(w, t->rank, &ss, &sl, w->listen_text, sizeof(w->listen_text));
	if (rc < 0)
		return hpct__fail(rc, HPCT_SUB_INIT,
		                  "rank %d: this node's address %s does not resolve (from %s)",
		                  t->rank, host, t->nodelist_src);
	if (t->ifname && (rc = hpct__ifname_check(t->ifname, (struct sockaddr *)&ss)) < 0)
		return rc;
	long early_msgs, early_mb;
	if ((rc = hpct__env_int(hpct__env_process(), "HPCT_EARLY_MAX_MSGS", 1, 1L << 30,
	                        HPCT_ENG_EARLY_MSGS, &early_msgs, NULL)) < 0 ||
	    (rc = hpct__env_int(hpct__env_process(), "HPCT_EARLY_MAX_MB", 1, 1L << 20,
	                        HPCT_ENG_EARLY_MB, &early_mb, NULL)) < 0)
		return rc;
	struct hpct_engine_cfg cfg = {
		.ops = ops,
		.rank = t->rank,
		.size = t->size,
		.job = t->job,
		.epoch = t->epoch,
		.handshake_timeout_s = t->timeout_s < 10 ? t->timeout_s : 10,
		.early_max_msgs = early_msgs,
		.early_max_bytes = (size_t)early_mb << 20,
		.peer_addr = w->reach.peer_addr,
		.peer_addr_arg = w->reach.peer_addr_arg,
		.secret = t->secret,
		.secret_len = t->secret_len,
	};
	if (t->secret && !hpct__auth_available())
		return hpct__fail(
		        HPCT_EBADENV, HPCT_SUB_INIT,
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
	          t->rank, t->size, w->listen_text, tname, t->node, host, t->job_name,
	          (unsigned long long)t->epoch);
	if (!exchange)
		return 0;
	if ((rc = start_fabric(w, fabric, &cfg, ss, sl)) < 0)
		return rc;
	return exchange_names(w);
}

static void rl_stop(struct hpct_world *w, double deadline, int graceful)
{
	hpct__eng_destroy(w->eng, deadline, graceful);
	hpct__eng_destroy(w->fabric_eng, 0, 0);
	free(w->names);
}

static void rl_forget_group(struct hpct_world *w, uint64_t group)
{
	if (w->eng)
		hpct__eng_forget_group(w->eng, group);
}

static void rl_stats(const struct hpct_world *w, struct hpct_world_stats *s)
{
	if (w->eng)
		hpct__eng_stats(w->eng, s);
}

static void rl_tell_failure(struct hpct_world *w, uint64_t group, const char *text)
{
	if (!w->eng)
		return;
	struct hpct_abort a = { .code = HPCT_EPEERDEAD,
		                .origin = (uint32_t)w->topo.rank,
		                .culprit = -1 };
	snprintf(a.text, sizeof(a.text), "%s", text);
	hpct__eng_broadcast_abort(w->eng, group, &a);
	hpct__eng_progress(w->eng, 0);
}

static int rl_learn_failure(struct hpct_world *w, uint64_t group, double wait_s, char *buf,
                            size_t len)
{
	double deadline = hpct__now() + wait_s;
	if (!w->eng)
		return 0;
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

static int rl_recover(struct hpct_world *w, uint64_t epoch, const int *replaced, int nreplaced)
{
	struct hpct_topo *t = &w->topo;
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
	return 0;
}

static int rl_peer_addr(struct hpct_world *w, int rank, char *out)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	return peer_addr(w, rank, &ss, &sl, out, HPCT_ADDRSTRLEN);
}

const struct hpct_path_ops hpct__path_rootless = {
	.path = HPCT_PATH_ROOTLESS,
	.name = "rootless",
	.start = rl_start,
	.stop = rl_stop,
	.allgather = hpct__coll_allgather,
	.barrier = hpct__coll_barrier,
	.broadcast = hpct__coll_broadcast,
	.alltoall = hpct__coll_alltoall,
	.forget_group = rl_forget_group,
	.stats = rl_stats,
	.tell_failure = rl_tell_failure,
	.learn_failure = rl_learn_failure,
	.recover = rl_recover,
	.peer_addr = rl_peer_addr,
};
