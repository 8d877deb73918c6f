/* Gloo through C: a TCP device and contexts connected with no store.
 *
 * Installed, and the functions exported, only when hpct was built with Gloo
 * (the meson summary says so; pkg-config --variable=gloo hpct says yes or
 * no).  Gloo is C++; nothing here throws:
 * every failure is an hpct error code, logged once with rank, peer and
 * address, and kept for hpct_last_error().
 *
 * Connecting a context: HPCT_GLOO_CONNECT, read once by
 * hpct_gloo_device_create, says how.
 *   pool      every rank creates one Gloo pair per peer and tells each peer
 *             where the pair meant for it listens, through hpct_alltoall:
 *             rootless, only its port (the IP is the node address every
 *             rank derives); on the standard path the whole address, through
 *             rank 0's rendezvous.  The pairs are then connected by a bounded
 *             pool of threads, so that Gloo's 10 ms event-loop tick is paid
 *             about once, not once per peer.  The rootless path's default
 *             and only way.
 *   fullmesh  Gloo's own connectFullMesh over a gloo::rendezvous::Store
 *             served by hpct's rendezvous on rank 0, as a PyTorch job does.
 *             Standard path (HPCT_USE_ROOTLESS unset or 0) only; its default.
 * Either way every member returns only once all members' pairs are up (a
 * Gloo barrier over the new pairs ends the call), so the ways can be
 * compared one for one.
 *
 * Threading: a context is used by one thread at a time; contexts are
 * independent of each other and of the hpct world after creation. */
#ifndef HPCT_GLOO_H
#define HPCT_GLOO_H

#include <stddef.h>
#include <stdint.h>

#include "hpct/hpct.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hpct_gloo_device hpct_gloo_device;
typedef struct hpct_gloo_context hpct_gloo_context;

enum hpct_gloo_dtype {
	HPCT_GLOO_F32 = 0,
	HPCT_GLOO_F64 = 1,
	HPCT_GLOO_I32 = 2,
	HPCT_GLOO_I64 = 3,
};

enum hpct_gloo_op {
	HPCT_GLOO_SUM = 0,
	HPCT_GLOO_MIN = 1,
	HPCT_GLOO_MAX = 2,
	HPCT_GLOO_PROD = 3,
};

/* A Gloo TCP device for this process, bound to this node's address as hpct
 * derives it (so peers can derive it too); HPCT_SOCKET_IFNAME was already
 * checked against that address when the world was created.  The device runs
 * Gloo's event-loop thread; it may serve any number of contexts, all
 * connected the way HPCT_GLOO_CONNECT said when it was created.  Errors:
 * HPCT_EBADENV (HPCT_GLOO_CONNECT is neither pool nor fullmesh, or fullmesh
 * on the rootless path: the message names the variable and its value),
 * HPCT_ERESOLVE (this node's address). */
HPCT_API int hpct_gloo_device_create(hpct_world *world, hpct_gloo_device **device_out);
/* Accepts NULL.  Destroy every context of the device first. */
HPCT_API void hpct_gloo_device_destroy(hpct_gloo_device *device);

/* A Gloo context over `group`, connected as described above.  Collective
 * over the group: every member calls it.  The group must outlive nothing:
 * the context keeps what it needs.  Errors name the peer whose pair failed. */
HPCT_API int hpct_gloo_context_create(hpct_gloo_device *device, hpct_group *group,
                                      hpct_gloo_context **context_out);
/* A new context over the same ranks, built by Gloo's ContextFactory over the
 * pairs of `parent` (no exchange through hpct at all).  Collective over the
 * parent's ranks.  Independent of the parent afterwards. */
HPCT_API int hpct_gloo_context_clone(hpct_gloo_context *parent, hpct_gloo_context **context_out);
/* Closes the context's pairs and frees it; a persistent context's pairs
 * stay open, in its domain.  Accepts NULL. */
HPCT_API void hpct_gloo_context_destroy(hpct_gloo_context *context);

/* Persistent contexts (domains).  A persistent context is connected like
 * any other the first time; destroying it keeps its pairs open in the
 * device, as the domain of its member set (the world ranks, in order) and
 * `generation` (any number the members agree on: one per use of the same
 * members that must not share pairs).  The next persistent context over
 * the same members and generation takes the domain back:
 *   - at the same epoch: no pair made and no address exchanged, only one
 *     Gloo barrier over the kept pairs (which also finds a member that did
 *     not keep its side: HPCT_EPEERDEAD or HPCT_ETIMEDOUT naming it);
 *     the collectives' slots go on from the last use.
 *   - at a later epoch (after hpct_world_recover): the pairs of the ranks
 *     replaced since the domain's epoch are made anew, their addresses
 *     fetched point to point from those ranks through an hpct exchange
 *     (hpct_xchg_*: no collective, so a replacement, which has no domain
 *     and connects every pair, meets survivors that connect only to it);
 *     every kept pair is checked alive by a message each way carrying the
 *     epoch (HPCT_EPEERDEAD naming the peer when one does not cross).  A
 *     handle of the old epoch still open is failed (HPCT_ESTATE).
 * The decision to reuse rests only on what every member shares: the member
 * set, the generation, the epoch and the replaced ranks hpct_world_recover
 * was given.  So every member must create, destroy and release a domain
 * alike, as it creates a context.  HPCT_ESTATE: the domain is held by a
 * live context, or a collective failed on it at this epoch (recover the
 * world, or release the domain everywhere and create it anew).  A failing
 * collective on a persistent context closes only the pair of the peer the
 * error names, not all of them (a temporary context closes all, so that
 * peers fail at once): peers waiting on this rank then fail at their
 * deadline.  Collective over the group, like hpct_gloo_context_create. */
HPCT_API int hpct_gloo_context_create_persistent(hpct_gloo_device *device, hpct_group *group,
                                                 uint64_t generation,
                                                 hpct_gloo_context **context_out);
/* Closes the pairs of the domain of `group`'s members and `generation`,
 * now (local; every member releases it, as every member destroys a
 * context).  0 when there is none.  HPCT_ESTATE while a live context holds
 * it.  hpct_gloo_device_destroy releases every domain of the device. */
HPCT_API int hpct_gloo_domain_release(hpct_gloo_device *device, hpct_group *group,
                                      uint64_t generation);

/* What creating a context did, for tools and tests. */
struct hpct_gloo_context_stats {
	int pairs_new;            /* pairs connected for it */
	int pairs_kept;           /* pairs a persistent context took from its domain */
	int persistent;           /* 1 for a context of a domain */
	uint64_t bytes_exchanged; /* pair addresses sent and received through hpct */
};
HPCT_API int hpct_gloo_context_get_stats(const hpct_gloo_context *context,
                                         struct hpct_gloo_context_stats *stats_out);

HPCT_API int hpct_gloo_context_rank(const hpct_gloo_context *context);
HPCT_API int hpct_gloo_context_size(const hpct_gloo_context *context);

/* Collectives, each blocking until done or HPCT_TIMEOUT.  count is in
 * elements of dtype; every rank passes the same count, dtype, op and root.
 * Errors: HPCT_EINVAL (NULL buffer, count 0 or too large, unknown dtype or
 * op, root out of range: the message names the argument), HPCT_ETIMEDOUT,
 * HPCT_EPEERDEAD (a peer closed its pair: the message names its rank and
 * address).  A context that failed stays failed. */

/* buf holds count elements on entry and their reduction across ranks on
 * return. */
HPCT_API int hpct_gloo_allreduce(hpct_gloo_context *context, void *buf, size_t count,
                                 enum hpct_gloo_dtype dtype, enum hpct_gloo_op op);
/* in (count elements, may equal out) is reduced across ranks into out on
 * `root` only; out is unused elsewhere (may be NULL there). */
HPCT_API int hpct_gloo_reduce(hpct_gloo_context *context, const void *in, void *out, size_t count,
                              enum hpct_gloo_dtype dtype, enum hpct_gloo_op op, int root);
/* count elements of buf on root are copied to buf on every rank. */
HPCT_API int hpct_gloo_broadcast(hpct_gloo_context *context, void *buf, size_t count,
                                 enum hpct_gloo_dtype dtype, int root);
/* count elements of in from every rank land in out[rank * count]; out holds
 * size * count elements. */
HPCT_API int hpct_gloo_allgather(hpct_gloo_context *context, const void *in, void *out,
                                 size_t count, enum hpct_gloo_dtype dtype);
HPCT_API int hpct_gloo_barrier(hpct_gloo_context *context);

#ifdef __cplusplus
}
#endif
#endif
