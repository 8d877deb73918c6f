/* hpct: rootless, storeless bootstrap for collective-communication libraries.
 *
 * Threading: a world and its groups are used by one thread at a time; calls on
 * different worlds may run concurrently.  Every call that waits has a deadline
 * (HPCT_TIMEOUT seconds) and returns HPCT_ETIMEDOUT past it.
 *
 * Errors: every function returning int returns 0 on success, a negative errno
 * value for a system error, or one of the HPCT_E* codes below.  The failure is
 * logged once where it is first seen (HPCT_DEBUG, default WARN) and the same
 * message is kept for hpct_last_error() in the calling thread. */
#ifndef HPCT_HPCT_H
#define HPCT_HPCT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(HPCT_BUILDING)
#define HPCT_API __attribute__((visibility("default")))
#else
#define HPCT_API
#endif

#define HPCT_VERSION_MAJOR 0
#define HPCT_VERSION_MINOR 1
#define HPCT_VERSION_PATCH 0

/* X(name, value, message): the library's own error codes. */
#define HPCT_ERROR_MAP(X)                                                    \
	X(EBADENV, -1001, "bad setting in the environment")                  \
	X(ENOTOPO, -1002, "not enough information to derive the topology")   \
	X(ETIMEDOUT, -1003, "deadline passed")                               \
	X(EPEERDEAD, -1004, "a peer died or closed its connection")          \
	X(EREFUSED, -1005, "a peer refused the handshake")                   \
	X(EPROTO, -1006, "malformed message from a peer")                    \
	X(EINVAL, -1007, "invalid argument")                                 \
	X(ENOTMEMBER, -1008, "this rank is not a member of the group")       \
	X(EADDRINUSE, -1009, "the derived port is already taken")            \
	X(EABORTED, -1010, "the collective was aborted by another rank")     \
	X(ERESOLVE, -1011, "a host name could not be resolved")              \
	X(ENOMEM, -1012, "out of memory")                                    \
	X(ESTATE, -1013, "call not valid in this state")                     \
	X(ENONCCL, -1014, "NCCL is missing or its version is not supported") \
	X(ENCCL, -1015, "NCCL returned an error")                            \
	X(EFENCED, -1016, "this rank was counted gone by its peers: fenced")  \
	X(ENOQUORUM, -1017, "too few of a key's homes answer to serve it safely")

enum hpct_error {
#define HPCT_ERROR_ENUM(name, value, msg) HPCT_##name = (value),
	HPCT_ERROR_MAP(HPCT_ERROR_ENUM)
#undef HPCT_ERROR_ENUM
};

/* A short description of any code this library returns (0, -errno, HPCT_E*).
 * Never NULL; the string is static. */
HPCT_API const char *hpct_strerror(int err);
/* The symbolic name of a code ("HPCT_ETIMEDOUT", "ECONNREFUSED", "OK"). */
HPCT_API const char *hpct_errname(int err);
/* The full message of the last failure logged by this thread (naming rank,
 * peer, host:port, group, epoch), or "" if none.  Valid until the next
 * failing call in this thread. */
HPCT_API const char *hpct_last_error(void);

/* The library version as "major.minor.patch". */
HPCT_API const char *hpct_version(void);

enum hpct_path {
	HPCT_PATH_STANDARD = 0, /* rank 0 serves a rendezvous at MASTER_ADDR:MASTER_PORT */
	HPCT_PATH_ROOTLESS = 1, /* every address derived, no store, no root */
};

/* Text form of a socket address: "10.0.0.3:12012" or "[fd00::3]:12012". */
#define HPCT_ADDRSTRLEN 64

typedef struct hpct_world hpct_world;
typedef struct hpct_group hpct_group;

/* A plain summary of this process's place in the world. */
struct hpct_world_info {
	int rank;            /* this process's rank in the world */
	int size;            /* number of ranks */
	int local_rank;      /* rank among the processes of this node */
	int local_size;      /* processes on this node */
	int node;            /* index of this node in the node list */
	int nnodes;          /* nodes in the node list (1 on the standard path without one) */
	enum hpct_path path; /* the path in use */
	uint64_t job;        /* hash of the job identity */
	uint64_t epoch;      /* restart epoch */
	char job_name[128];  /* the job identity as read, truncated */
	char listen_addr[HPCT_ADDRSTRLEN]; /* rootless: this process's listener; standard: the
	                                      rendezvous */
};

/* In-process recovery.  After ranks died and were replaced by new processes
 * (on the same nodes or others the node list names), every survivor calls
 * this with the new epoch (greater than its own) and the replaced world
 * ranks (strictly increasing, the same list on every survivor), and each
 * replacement starts with hpct_world_create at that epoch (HPCT_EPOCH).
 * Survivors keep their links to each other and tell each other the new
 * epoch over them (no new connection between two survivors for the links
 * they had), move their listener to the new epoch's port, and connect only
 * to replacements; a process of the old epoch is refused.  Groups of the old
 * epoch fail with HPCT_ESTATE: create them again; the world group is the
 * new epoch's.  Who tells survivors that a new epoch began (the job's agent)
 * is outside hpct.  On the rootless path ports rotate with the epoch
 * (HPCT_PORT_RANGE of at least twice the ranks of a node, HPCT_EBADENV
 * otherwise).  On the standard path the survivors meet again through rank
 * 0's rendezvous, keeping their connection to it; that needs rank 0 alive:
 * with rank 0 among the replaced, HPCT_EPEERDEAD (restart every rank).
 * The world is unchanged when it fails (HPCT_EINVAL naming the bad entry,
 * or the new port taken). */
HPCT_API int hpct_world_recover(hpct_world *world, uint64_t epoch, const int *replaced,
                                int nreplaced);

/* Counters of what this process did on the network, for tools and tests. */
struct hpct_world_stats {
	uint64_t conns_opened;    /* connections this process initiated and completed */
	uint64_t conns_accepted;  /* connections accepted from peers and admitted */
	uint64_t conns_refused;   /* incoming connections refused at the handshake */
	uint64_t connect_retries; /* connect attempts that were retried */
	uint64_t msgs_sent;
	uint64_t msgs_recv;
	uint64_t bytes_sent;
	uint64_t bytes_recv;
	int peers;           /* distinct peers connected now */
	uint64_t links_kept; /* links to survivors kept through recoveries (hpct_world_recover) */
};

/* Joins the world described by the environment (see docs/launchers.md: HPCT_RANK,
 * RANK, SLURM_PROCID, ... and HPCT_HOSTS / HPCT_HOSTFILE / SLURM_JOB_NODELIST).
 * HPCT_USE_ROOTLESS=1 takes the rootless path when the node list is known on
 * every rank, else every rank takes the standard path with one notice line.
 * Rootless: opens this process's listener at its derived address; blocks only
 * for that.  Standard: rank 0 starts the rendezvous server; every rank
 * connects to it, retrying until the deadline.
 * Errors: HPCT_EBADENV (message names the variable and value), HPCT_ENOTOPO,
 * HPCT_EADDRINUSE (names host:port), HPCT_ETIMEDOUT, -errno. */
HPCT_API int hpct_world_create(hpct_world **world_out);

/* Flushes what this process still has to send (up to the deadline), closes
 * every connection and the listener, and frees the world and any group still
 * open.  On the standard path rank 0 first waits (up to the deadline) until
 * every other rank has left.  Accepts NULL. */
HPCT_API void hpct_world_destroy(hpct_world *world);

/* Fills *info_out.  Never fails for a valid world. */
HPCT_API int hpct_world_get_info(const hpct_world *world, struct hpct_world_info *info_out);
HPCT_API int hpct_world_get_stats(const hpct_world *world, struct hpct_world_stats *stats_out);

/* The derived listen address of any rank (rootless path), as text.
 * HPCT_EINVAL for a rank out of range, HPCT_ESTATE on the standard path,
 * HPCT_ERESOLVE if its host does not resolve. */
HPCT_API int hpct_world_peer_addr(hpct_world *world, int rank, char addr_out[HPCT_ADDRSTRLEN]);

/* The group of all ranks.  Owned by the world: do not destroy it. */
HPCT_API hpct_group *hpct_world_group(hpct_world *world);

/* Creates a subgroup of `parent` with the given parent ranks (strictly
 * increasing, 1..parent size).  Every rank of the parent must make the same
 * calls in the same order, members or not: each call bumps the parent's group
 * counter on every rank, and the group identity is a hash of (job, epoch,
 * parent identity, counter, members).  No communication happens.
 * On a member, *group_out is the new group; on a non-member, *group_out is
 * set to NULL and 0 is returned.  HPCT_EINVAL names the bad member. */
HPCT_API int hpct_group_create(hpct_group *parent, const int *members, int nmembers,
                               hpct_group **group_out);

/* Frees a group made by hpct_group_create; local only.  Accepts NULL; the
 * world group is ignored. */
HPCT_API void hpct_group_destroy(hpct_group *group);

HPCT_API int hpct_group_rank(const hpct_group *group);
HPCT_API int hpct_group_size(const hpct_group *group);
/* The group's world rank for a group rank, or -1 if out of range. */
HPCT_API int hpct_group_world_rank(const hpct_group *group, int group_rank);
HPCT_API uint64_t hpct_group_id(const hpct_group *group);

/* Collectives.  Every member calls them in the same order; they block until
 * this rank's part is done or the deadline passes.  On failure the message
 * names the group, epoch, this rank and each peer not heard from with its
 * host:port and last OS error.
 *
 * allgather: `item` (item_size bytes) from every rank lands in
 *   out[group_rank * item_size]; out holds size * item_size bytes.
 * barrier: returns once every member has entered.
 * broadcast: `len` bytes of buf on `root` (a group rank) are copied to buf on
 *   every member; every member passes the same len.
 * alltoall: items[j * item_size] goes to group rank j; out[i * item_size]
 *   receives what rank i sent to this rank.  Meant for small items. */
HPCT_API int hpct_allgather(hpct_group *group, const void *item, size_t item_size, void *out);
HPCT_API int hpct_barrier(hpct_group *group);
HPCT_API int hpct_broadcast(hpct_group *group, void *buf, size_t len, int root);
HPCT_API int hpct_alltoall(hpct_group *group, const void *items, size_t item_size, void *out);

/* Exchanging per-peer handles, with no barrier and a cache.
 *
 * Each member of a group publishes, under a version, one item per peer (an
 * NCCL or fabric handle meant for that peer); a member that needs a peer's
 * item asks that peer directly, one datagram each way, or finds it in its
 * cache.  No root, no store, no barrier: ranks may run ahead of each other.
 *
 * Versions: an item is identified by (peer, version) and never changes, so
 * a cached item is never stale.  A request for a version the peer has not
 * published yet is held by the peer (parked) and answered the moment it
 * publishes it; so a rank that runs ahead reads its peers' current
 * versions, never older ones.  A peer keeps the versions within
 * HPCT_XCHG_HISTORY of its newest (newest - 3 .. newest), so a rank that is
 * behind by a few still gets the version it asks for; an older one fails
 * HPCT_ESTATE, never another version's item.  A rank that destroys an
 * exchange (or its world) while a peer still needs its items leaves that
 * peer to time out: nothing here tells a rank that its peers are done.
 *
 * Each world runs one service thread for its exchanges (from the first
 * hpct_xchg_create until hpct_world_destroy): it answers peers while this
 * rank is in no hpct call.  Rootless path: the service listens for UDP at
 * this rank's derived address, on the port number of its TCP listener, so
 * every rank knows every peer's service address without communication; it
 * moves with the listener at hpct_world_recover.  Standard path: the
 * service listens at the address this rank reaches the rendezvous from, on
 * a port of the kernel's choice, and hpct_xchg_create allgathers the
 * members' addresses through the group once.  With HPCT_SECRET every
 * datagram carries an HMAC-SHA256 tag; others are dropped (logged once). */
#define HPCT_XCHG_HISTORY  4     /* versions a rank keeps of its own items */
#define HPCT_XCHG_MAX_ITEM 60000 /* bytes in one item: one datagram */
#define HPCT_XCHG_NAMELEN  64    /* bytes in an exchange's name, its NUL included */

typedef struct hpct_xchg hpct_xchg;

/* Counters of one exchange on this rank. */
struct hpct_xchg_stats {
	uint64_t hits;            /* items hpct_xchg_fetch found in the cache */
	uint64_t misses;          /* items it had to ask a peer for */
	uint64_t requests_sent;   /* request datagrams sent, retransmissions included */
	uint64_t requests_served; /* requests of peers answered with an item */
	uint64_t requests_parked; /* requests of peers held until a version was published */
	uint64_t bytes_sent;      /* datagram bytes sent: requests and answers */
	uint64_t bytes_recv;      /* datagram bytes received: requests and answers */
	uint64_t dropped;         /* datagrams naming this exchange that were dropped:
	                             no valid tag, another job or epoch */
};

/* Creates the exchange `name` of `group` for items of item_size bytes
 * (1..HPCT_XCHG_MAX_ITEM).  Collective by contract: every member calls it
 * with the same name and item_size (a mismatch shows as HPCT_EINVAL at the
 * first fetch between the two).  Rootless path: sends nothing.  Standard
 * path: one allgather of the members' service addresses through the group
 * (rank 0's rendezvous).  The first exchange of a world starts its service.
 * The exchange keeps no reference to `group`.  Errors: HPCT_EINVAL (NULL
 * argument, name empty or too long, item_size out of range, the name is
 * already in use in this group here), HPCT_ESTATE (a group of an earlier
 * epoch), HPCT_EADDRINUSE (the service's port, named), the allgather's. */
HPCT_API int hpct_xchg_create(hpct_group *group, const char *name, size_t item_size,
                              hpct_xchg **xchg_out);

/* Publishes version `version` of this rank's items: `items` holds group
 * size x item_size bytes, the item at j * item_size meant for group rank j
 * (this rank's own entry is kept for a fetch of itself).  Versions start at
 * 1 and must grow (HPCT_EINVAL naming the last and the new one).  The
 * items are copied before this returns, atomically for every reader: no
 * peer ever sees half of one.  Requests parked for this version are
 * answered at once.  Does not block on peers; may run in another thread
 * than hpct_xchg_fetch on the same exchange.  HPCT_ESTATE after a recovery
 * of the world to a later epoch. */
HPCT_API int hpct_xchg_publish(hpct_xchg *xchg, uint64_t version, const void *items);

/* For each k < npeers: the item group rank peers[k] published for this
 * rank at exactly `version`, into out + k * item_size.  Items in the cache
 * cost nothing: when all are there nothing is sent.  The others are asked
 * for at once, one datagram per peer (the ones in flight bounded by what
 * this rank's socket can receive), and asked again with backoff while
 * unanswered (a lost datagram, a peer not started yet, a peer that has not
 * published yet and holds the request).  Blocks until all came or
 * HPCT_TIMEOUT passed; then, on the rootless path, the peers not heard
 * from are probed (does their process still take connections?): when all
 * are alive (late, or waiting on someone else) they get one more
 * HPCT_TIMEOUT.  Errors: HPCT_EINVAL (a peer out of range, version 0, an
 * item size that differs from the peer's), HPCT_ETIMEDOUT (naming a peer
 * not heard from, one found dead if any: its rank, host:port, the
 * exchange, version and epoch), HPCT_EABORTED (a peer's fetch failed
 * first: the message is its own, naming the culprit), HPCT_ESTATE (the
 * peer no longer holds that version: the message names the versions it
 * holds; or this rank asked itself for a version it has not published; or
 * the world recovered since).  After HPCT_ETIMEDOUT or HPCT_EABORTED the
 * exchange has failed here: its service answers every request with that
 * first cause, so that a rank that comes late names the culprit, not the
 * rank that left; before HPCT_ETIMEDOUT returns, it waits up to
 * HPCT_TIMEOUT for the peers found alive and not heard from to ask and be
 * told.  On failure out is partly written; what came is cached. */
HPCT_API int hpct_xchg_fetch(hpct_xchg *xchg, uint64_t version, const int *peers, int npeers,
                             void *out);

/* Fills *stats_out.  HPCT_EINVAL for NULL. */
HPCT_API int hpct_xchg_get_stats(const hpct_xchg *xchg, struct hpct_xchg_stats *stats_out);

/* Frees the exchange; local only (peers asking for it afterwards get no
 * answer).  Accepts NULL.  hpct_world_destroy frees the exchanges still
 * open: destroy them before their world, or not at all. */
HPCT_API void hpct_xchg_destroy(hpct_xchg *xchg);

#ifdef __cplusplus
}
#endif
#endif
