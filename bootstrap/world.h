/* The shape of a world and its groups, and the table of operations a path
 * provides.  world.c and group.c implement the public API over it; each path
 * (rootless/path.c, stdpath/path.c) fills in one table, and its collectives
 * (rootless/coll.c, stdpath/coll.c) work on the groups described here.  This
 * header includes no path's header: the paths plug in beneath it, as
 * transports do beneath transport/transport.h. */
#ifndef HPCT_WORLD_H
#define HPCT_WORLD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "bootstrap/topo/topo.h"
#include "hpct/hpct.h"

struct hpct_engine;
struct hpct_std_server;
struct hpct_std_client;
struct hpct_transport_ops;

struct hpct_group {
	struct hpct_world *world;
	uint64_t id;
	int rank, size;
	int *members;     /* group rank -> world rank; NULL for the world group */
	uint32_t seq;     /* collectives started on this group */
	uint64_t counter; /* children created from this group */
	int failed;       /* sticky: a failed collective leaves the group unusable */
	char failure[1024];
};

struct node_addr {
	int state; /* 0 unresolved, 1 resolved, <0 the error */
	struct sockaddr_storage ss;
	socklen_t len;
};

enum hpct_algo {
	HPCT_ALGO_TREE,  /* 4-nomial gather + broadcast: N-1 connections in all */
	HPCT_ALGO_BRUCK, /* Bruck allgather, dissemination barrier: log N rounds */
};

/* How a rootless world reaches its peers.  hpct_world_create passes none:
 * the transport is HPCT_TRANSPORT's and every address is derived from the
 * topology.  The simulator (tools/hpct-bench-sim) passes its own transport
 * and addresses, and no node list. */
struct hpct_world_opts {
	const struct hpct_transport_ops *transport;
	int (*peer_addr)(void *arg, int rank, struct sockaddr_storage *ss, socklen_t *len,
	                 char *text, size_t textlen);
	void *peer_addr_arg;
};

/* A path: how a world starts, stops and runs its collectives.  The public
 * calls check their arguments and dispatch here; a NULL entry is something
 * the path cannot do (world.c says so, naming the path). */
struct hpct_path_ops {
	enum hpct_path path;
	const char *name;
	/* Joins the world w->topo describes.  On failure the caller destroys
	 * the world: stop must accept a world started halfway.  The error is
	 * logged and named here. */
	int (*start)(struct hpct_world *w, const struct hpct_world_opts *opts);
	/* Leaves; waits until `deadline` at most for peers that still need
	 * this rank (not at all when !graceful). */
	void (*stop)(struct hpct_world *w, double deadline, int graceful);
	/* The collectives, on arguments already checked (group.c). */
	int (*allgather)(struct hpct_group *g, const void *item, size_t sz, void *out);
	int (*barrier)(struct hpct_group *g);
	int (*broadcast)(struct hpct_group *g, void *buf, size_t len, int root);
	int (*alltoall)(struct hpct_group *g, const void *items, size_t sz, void *out);
	/* A group is gone: drop what the path keeps for it (may be NULL). */
	void (*forget_group)(struct hpct_world *w, uint64_t group);
	void (*stats)(const struct hpct_world *w, struct hpct_world_stats *s);
	/* hpct__world_tell_failure / hpct__world_learn_failure (world_access.h) */
	void (*tell_failure)(struct hpct_world *w, uint64_t group, const char *text);
	int (*learn_failure)(struct hpct_world *w, uint64_t group, double wait_s, char *buf,
	                     size_t len);
	/* Moves this rank to `epoch` in place (arguments checked by world.c);
	 * on failure the world is as it was.  NULL: only a restart recovers. */
	int (*recover)(struct hpct_world *w, uint64_t epoch, const int *replaced, int nreplaced);
	/* "host:port" of world rank `rank`, HPCT_ADDRSTRLEN bytes.  NULL: peers
	 * have no address of their own on this path. */
	int (*peer_addr)(struct hpct_world *w, int rank, char *out);
};

/* What a higher layer keeps beside a world (xchg/: the handle exchange's
 * datagram service; nccl/: the persistent NCCL domains), which world.c
 * tells of a recovery and ends with the world without knowing what it is.
 * One slot per layer. */
struct hpct_world_service_ops {
	const char *name;
	/* The world moved to a new epoch (topo.epoch is the new one); the
	 * service follows it (a new port) or says why not.  Never fails the
	 * recovery: the world has moved already. */
	void (*recovered)(struct hpct_world *w, void *ctx, uint64_t old_epoch);
	/* The world ends: stop, free ctx and whatever the service handed out
	 * that is still open.  Called before the path stops. */
	void (*end)(struct hpct_world *w, void *ctx);
};

enum hpct_world_slot_id {
	HPCT_WORLD_SLOT_XCHG,  /* xchg/service.c */
	HPCT_WORLD_SLOT_NCCL,  /* nccl/domain.c */
	HPCT_WORLD_SLOT_STORE, /* store/server.c: the store's server forgets the world */
	HPCT_WORLD_SLOT_LINES, /* store/lines.c: the store clients' connections */
	HPCT_WORLD_SLOTS,
};

struct hpct_world_slot {
	const struct hpct_world_service_ops *ops;
	void *ctx;
};

extern const struct hpct_path_ops hpct__path_rootless; /* rootless/path.c */
extern const struct hpct_path_ops hpct__path_standard; /* stdpath/path.c */

struct hpct_world {
	struct hpct_topo topo;
	const struct hpct_path_ops *ops;
	enum hpct_algo algo;            /* HPCT_ALGO, for allgather and barrier */
	struct hpct_world_opts reach;   /* rootless: how peers are reached */
	struct hpct_engine *eng;        /* rootless */
	struct hpct_std_server *server; /* standard, rank 0 */
	struct hpct_std_client *client; /* standard */
	struct node_addr *nodes;        /* resolved lazily, once each */
	char listen_text[HPCT_ADDRSTRLEN];
	struct hpct_group group;      /* the world group */
	struct hpct_group **children; /* groups created and not destroyed */
	int nchildren, capchildren;
	int any_failed;
	/* a store client only (hpct__world_store_client): no path started, and
	 * its store serves nothing (a forked child of a rank) */
	int store_client_only;
	/* HPCT_OFI_EXCHANGE: the fabric engine, until the names are exchanged
	 * over eng (TCP), then it becomes eng; every rank's endpoint name */
	struct hpct_engine *fabric_eng;
	unsigned char *names;
	/* the epoch each world rank's current process began in, as far as
	 * this rank knows (hpct__world_rank_born): born_epoch (this rank's own
	 * start epoch) for every rank but those hpct_world_recover replaced,
	 * which `reborn` lists, sorted by rank.  Kept sparse: a world holds
	 * O(1) here until recoveries replace ranks, O(replaced) after, never
	 * O(size) (the simulator holds N worlds in one process). */
	uint64_t born_epoch;
	struct hpct_reborn {
		int rank;
		uint64_t epoch;
	} * reborn;
	int nreborn, capreborn;
	/* what layers above keep in the world (a slot each; NULL ops: none) */
	struct hpct_world_slot svc[HPCT_WORLD_SLOTS];
};

/* The one start of a world, for hpct_world_create and the simulator: takes
 * `topo` over (it is the world's now, or freed here on failure), takes the
 * rootless path when HPCT_USE_ROOTLESS asked for it and peers can be
 * addressed (a node list, or opts->peer_addr), the standard path otherwise,
 * and starts it.  `opts` may be NULL.  Errors as hpct_world_create. */
int hpct__world_start(struct hpct_topo *topo, const struct hpct_world_opts *opts,
                      struct hpct_world **world_out);

/* Frees a world: its groups, then the path's stop (waiting until `deadline`
 * at most, gracefully or not), then the rest.  hpct_world_destroy calls it
 * with a linger; the simulator with none. */
void hpct__world_end(struct hpct_world *w, double deadline, int graceful);

/* The address this rank reaches the standard path's rendezvous from (the
 * route's source, which a connected UDP socket reports without sending),
 * port 0: where a service of a standard-path rank binds so that its peers
 * reach it.  Errors logged naming `who` (the service) and the rendezvous. */
int hpct__world_route_source(struct hpct_world *w, const char *who, struct sockaddr_storage *ss,
                             socklen_t *len);

static inline int hpct__group_world_rank(const struct hpct_group *g, int grank)
{
	return g->members ? g->members[grank] : grank;
}

/* The address of world rank `rank`'s node, resolved once, port 0.
 * HPCT_ENOTOPO without a node list, HPCT_ERESOLVE if it does not resolve. */
int hpct__world_node_addr(struct hpct_world *w, int rank, struct sockaddr_storage *ss,
                          socklen_t *len);

/* Records a group's failure once (sticky), logs it and returns err. */
int hpct__group_fail(struct hpct_group *g, int err, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* Frees a child group (no communication). */
void hpct__group_free(struct hpct_group *g);

#endif
