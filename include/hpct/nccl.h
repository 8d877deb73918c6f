/* hpct and NCCL: unique ids every rank derives alone, and communicators
 * created without a store (and, where the NCCL version allows, without a
 * root).
 *
 * NCCL is optional: hpct never links it.  libnccl.so.2 is loaded on first use
 * (HPCT_NCCL_LIB if set, else the usual search path, then $NCCL_HOME/lib,
 * $NCCL_HOME/lib64, /usr/local/cuda/lib, /usr/local/cuda/lib64) and its
 * ncclGetVersion() decides what hpct may do with it:
 *   - 2.19 and later: Tier 1, NCCL's own root started by the comm's rank 0 at a
 *     derived address, so no rank waits for an id to be handed round (where
 *     NCCL cannot be shown NCCL_COMM_ID, hpct's root there, 2.19 to 2.32);
 *   - 2.23 to 2.32 (ncclCommInitRankScalable, and root wires hpct speaks):
 *     Tier 2, rootless: every rank hosts a micro-root for its own id
 *     (HPCT_NCCL_ROOTLESS=0 keeps Tier 1);
 *   - newer than 2.32, the newest release verified: Tier 1, said once.
 * Older than 2.19 is reported once and the caller keeps the standard path.
 *
 * This header needs no NCCL header: an hpct_nccl_id has the layout of
 * ncclUniqueId, and communicators and configs pass as void pointers
 * (ncclComm_t, ncclConfig_t *). */
#ifndef HPCT_NCCL_H
#define HPCT_NCCL_H

#include "hpct/hpct.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HPCT_NCCL_ID_BYTES 128

/* Byte for byte an ncclUniqueId. */
typedef struct hpct_nccl_id {
	char internal[HPCT_NCCL_ID_BYTES];
} hpct_nccl_id;

/* Loads NCCL if not done yet and returns its version code (22809 for
 * 2.28.9).  HPCT_ENONCCL when no library could be loaded or it lacks
 * ncclGetVersion; the message says what was tried. */
HPCT_API int hpct_nccl_version(int *version_out);

/* What an id holds, in the layout of a given NCCL version (the id itself
 * carries no version: 2.29 and later put nranks at byte 36). */
struct hpct_nccl_id_info {
	uint64_t magic; /* authenticates every bootstrap connection */
	int family;     /* AF_INET or AF_INET6 */
	char host[48];  /* numeric address of the root */
	unsigned port;  /* port of the root, host order */
	int nranks;     /* 2.29+: the id's rank count (0 for ordinary ids); else 0 */
	int derived;    /* 1: the id carries hpct's marker */
};

/* Decodes an id; HPCT_EINVAL if its address family is neither IPv4 nor IPv6
 * (an all-zero id, or not an id).  version 0 means "the loaded NCCL's". */
HPCT_API int hpct_nccl_id_decode(const hpct_nccl_id *id, int version,
                                 struct hpct_nccl_id_info *info_out);
/* Encodes an id: the inverse of hpct_nccl_id_decode; `derived` adds hpct's
 * marker.  HPCT_EINVAL for a host that is not a numeric address or a port
 * out of 1..65535. */
HPCT_API int hpct_nccl_id_encode(const struct hpct_nccl_id_info *info, int version,
                                 hpct_nccl_id *id_out);
/* 1 when the id carries hpct's marker (any rank can tell), else 0. */
HPCT_API int hpct_nccl_id_is_derived(const hpct_nccl_id *id);

/* The id of communicator `key` over `group` (keys 0, 1, ... for successive
 * communicators over the same group): magic = hash(job, epoch, group, key)
 * (keyed by HPCT_SECRET when it is set: see docs/security.md),
 * address = the node of the group's rank 0 and a port derived from the same
 * inputs in HPCT_NCCL_PORT_BASE/HPCT_NCCL_PORT_RANGE.  Every member computes
 * the same bytes with no communication.  HPCT_ENOTOPO without a node list. */
HPCT_API int hpct_nccl_derive_id(hpct_group *group, uint64_t key, hpct_nccl_id *id_out);
/* Tier 2's ids: one per group rank, ids_out[i] at group rank i's node and
 * port; ids_out holds hpct_group_size(group) entries.  Every member computes
 * the same array. */
HPCT_API int hpct_nccl_derive_ids(hpct_group *group, uint64_t key, hpct_nccl_id *ids_out);

enum hpct_nccl_tier {
	HPCT_NCCL_TIER_NONE = 0,     /* NCCL missing or unsupported: standard path */
	HPCT_NCCL_TIER_ROOT = 1,     /* Tier 1: NCCL's root at a derived address */
	HPCT_NCCL_TIER_ROOTLESS = 2, /* Tier 2: a micro-root in every rank */
};

/* The tier communicator creation over `group` takes with the loaded NCCL
 * and the settings (HPCT_NCCL_ROOTLESS); the same on every member. */
HPCT_API enum hpct_nccl_tier hpct_nccl_tier(hpct_group *group);

/* Creates the NCCL communicator of `group` for `key` (see
 * hpct_nccl_derive_id), with no store and, at Tier 2, no root.  `config` is
 * an ncclConfig_t * or NULL, `comm_out` receives the ncclComm_t.  Every
 * member calls it with the same key.  NCCL's own failure comes back as
 * HPCT_ENCCL with ncclGetErrorString's text and ncclGetLastError's.  A
 * non-blocking config returns 0 once NCCL has the init under way (check
 * ncclCommGetAsyncError as usual); at Tier 2 the call returns when this
 * rank's micro-root has answered.  The members meet in an hpct barrier
 * once their roots listen, before any calls NCCL (NCCL sleeps 100 ms
 * after a refused connect, and before 2.24 fails); a blocking init whose
 * sockets move nothing for HPCT_TIMEOUT (a member lost in NCCL's
 * bootstrap) is made to fail, and the roots name whom they missed. */
HPCT_API int hpct_nccl_comm_init(hpct_group *group, uint64_t key, void *config, void **comm_out);

/* Grows an NCCL communicator (ncclCommGrow, NCCL 2.29 and later) with no
 * store: the new ranks get its id from the existing ones over hpct's own
 * collectives.  `group` holds every rank of the grown communicator in its
 * rank order: group ranks 0..old_size-1 are the parent's ranks (parent
 * rank = group rank) and pass their communicator as `parent`; the new
 * ranks, old_size..size-1, pass NULL.  `coordinator` (a group rank below
 * old_size, the same on every member; any rank still alive: none is
 * special) calls ncclCommGetUniqueId, whose root thread NCCL starts in
 * that process, and broadcasts the id over `group`; then every member
 * calls ncclCommGrow (existing ranks with rank -1, as NCCL wants).
 * `config` is an ncclConfig_t * or NULL; `comm_out` receives the grown
 * ncclComm_t (the parent stays valid: destroy it as NCCL says).
 * HPCT_ENONCCL naming the release when it has no ncclCommGrow;
 * HPCT_EINVAL naming the rank for a parent given or missing where it must
 * not or must be; the broadcast's error (naming the peer) when the id
 * cannot reach a rank before HPCT_TIMEOUT; NCCL's failure as
 * HPCT_ENCCL. */
HPCT_API int hpct_nccl_comm_grow(hpct_group *group, int old_size, void *parent, int coordinator,
                                 void *config, void **comm_out);

/* Persistent NCCL domains: what hpct_nccl_comm_init derives and binds for
 * each communicator, kept in the world for the next one over the same
 * members.
 *
 * A domain is named by its member set (the group's world ranks, in order)
 * and `generation` (any number the members agree on), at the world's
 * epoch: two groups created apart over the same members share it.  Per
 * key it keeps the derived ids (magic, addresses and ports from job,
 * epoch, members, generation and key: not those of hpct_nccl_derive_id,
 * which depend on the group's own identity) and the listening socket of
 * the root this rank hosts for them (Tier 2: its micro-root; Tier 1: the
 * comm's rank 0 hosts hpct's root in NCCL's place, which NCCL's rank 0
 * reaches like any other rank).  The first communicator of a key derives
 * its ids and binds its listener; every later one over the same domain
 * and key binds nothing and derives nothing: its root exchange is served
 * on the kept listener, so its port cannot be taken in between.  NCCL
 * newer than the newest release verified (see hpct_nccl_tier): only the
 * ids are kept, NCCL's own root binds for each communicator.
 *
 * Reuse is decided only from what every member shares (member set,
 * generation, epoch, key): no member reuses while another derives anew.
 * A communicator of a key must be gone (ncclCommDestroy, ncclCommAbort)
 * before the key is used again; communicators alive at once take
 * different keys, as with hpct_nccl_comm_init.  The NCCL communicators
 * themselves are not kept (NCCL has no way to lend one out and take it
 * back).  The domain's ports stay bound until it is released: another
 * communicator whose derived port falls on one fails with
 * HPCT_EADDRINUSE naming host:port, as with any taken port.
 *
 * Like hpct_nccl_comm_init otherwise (every member calls it with the same
 * key and generation; errors, config, tiers).  HPCT_ESTATE, naming the
 * key: the key's previous root exchange is still under way here (a
 * non-blocking init, or a member yet to report).  When NCCL or the root
 * exchange fails, the key's listener is closed and its next communicator
 * binds anew.  hpct_world_recover drops the domains of the earlier epoch
 * (a communicator over the new epoch derives anew); hpct_world_destroy
 * releases every domain. */
HPCT_API int hpct_nccl_comm_init_persistent(hpct_group *group, uint64_t key, uint64_t generation,
                                            void *config, void **comm_out);
/* Closes the listeners of the domain of `group`'s members and
 * `generation` and forgets its ids, now (local: every member releases it,
 * as every member made it).  0 when there is none.  HPCT_ESTATE, naming
 * the key, while a root exchange of the domain is under way here (the
 * domain is then unchanged). */
HPCT_API int hpct_nccl_domain_release(hpct_group *group, uint64_t generation);

/* What a domain holds and has done on this rank, for tools and tests. */
struct hpct_nccl_domain_stats {
	int keys;         /* keys with ids kept */
	int listeners;    /* listening sockets held (one per key at most) */
	int busy;         /* keys whose root exchange is under way */
	uint64_t derived; /* keys whose ids were derived (again after a failure) */
	uint64_t binds;   /* listeners bound */
	uint64_t reuses;  /* communicators made on kept ids (and kept listener, if any) */
	uint64_t epoch;   /* the epoch the domain belongs to */
};
/* Fills *stats_out for the domain of `group`'s members and `generation`.
 * HPCT_EINVAL for a NULL argument; 1 (stats zeroed) when there is no such
 * domain here, else 0. */
HPCT_API int hpct_nccl_domain_get_stats(hpct_group *group, uint64_t generation,
                                        struct hpct_nccl_domain_stats *stats_out);

#ifdef __cplusplus
}
#endif
#endif
