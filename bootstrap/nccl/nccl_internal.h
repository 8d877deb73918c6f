/* NCCL inside hpct: the library loaded at run time and what the id code,
 * the roots and the preload shim share. */
#ifndef HPCT_NCCL_INTERNAL_H
#define HPCT_NCCL_INTERNAL_H

#include "bootstrap/base/private_api.h"

#include <stdint.h>
#include <sys/socket.h>

#include "bootstrap/topo/topo.h"
#include "hpct/nccl.h"

struct hpct_group;

/* 2.29 and later keep the id's rank count at byte 36. */
#define HPCT_NCCL_NRANKS_VERSION 22900

/* NCCL's entry points, with NCCL's types spelled as hpct's (ncclResult_t
 * is an int, ncclComm_t and ncclConfig_t * are pointers, an ncclUniqueId
 * is passed by value). */
#define NCCL_IN_PROGRESS 7 /* ncclInProgress: a non-blocking init under way */

struct hpct_nccl_lib {
	void *handle;
	int version;
	char path[4096];
	int (*get_version)(int *version);
	int (*get_unique_id)(hpct_nccl_id *id);
	int (*init_rank_config)(void **comm, int nranks, hpct_nccl_id id, int rank, void *config);
	int (*init_rank_scalable)(void **comm, int nranks, int rank, int nid, hpct_nccl_id *ids,
	                          void *config);
	const char *(*error_string)(int result);
	const char *(*last_error)(void *comm);
};

/* Fills l's entry points through sym (dlsym on a handle, or the preload
 * shim's next definition). */
HPCT_PRIVATE void hpct__nccl_bind(struct hpct_nccl_lib *l,
                                  void *(*sym)(void *arg, const char *name), void *arg);
/* NCCL, loaded once per process; NULL (with one warning per process, and
 * the reason for hpct_last_error) when it cannot be. */
HPCT_PRIVATE const struct hpct_nccl_lib *hpct__nccl_lib(void);

/* An id from its parts: magic, the root's address with its port, the
 * 2.29+ rank count, hpct's marker or not, in the layout of `version`. */
HPCT_PRIVATE void hpct__nccl_id_make(uint64_t magic, const struct sockaddr *sa, int nranks,
                                     int derived, int version, hpct_nccl_id *id);

/* The root address an id holds, as host:port ([host]:port for IPv6), for
 * messages and NCCL_COMM_ID; the decoder's error when it holds none. */
HPCT_PRIVATE int hpct__nccl_id_where(const hpct_nccl_id *id, int version, char *buf, size_t len);

/* HPCT_NCCL_PORT_BASE and _RANGE, with their defaults and checks. */
int hpct__nccl_ports(const struct hpct_topo *t, int *base_out, int *range_out);
/* The identity of communicator `key` over a group (job, epoch and members
 * are in the group's identity), its magic, and the port where the root of
 * world rank `world_rank` listens for it. */
uint64_t hpct__nccl_comm_hash(const struct hpct_group *g, uint64_t key);
uint64_t hpct__nccl_magic(const struct hpct_topo *t, uint64_t comm);
/* With HPCT_SECRET, a magic becomes an HMAC of it under the secret.  The
 * magic is all NCCL's bootstrap sockets check (every connection opens with
 * it, in clear, and an acceptor drops a wrong one: NCCL's ranks and hpct's
 * roots alike), so only a process with the secret can make one that is
 * accepted; without a secret, the magic is returned as it is. */
struct hpct_world;
HPCT_PRIVATE uint64_t hpct__nccl_keyed(const struct hpct_world *w, uint64_t magic);
int hpct__nccl_root_port(const struct hpct_topo *t, uint64_t comm, int world_rank, int *port_out);

/* --- a deadline for NCCL's blocking init (watch.c) ------------------------ */

/* Starts watching a blocking NCCL init described by fmt; once the sockets
 * the process opened since have moved nothing for timeout_s, they are shut
 * down (said at WARN).
 * NULL when no watch could start: the call then runs unwatched. */
struct hpct_nccl_watch;
struct hpct_nccl_roots;
struct hpct_nccl_watch *hpct__nccl_watch_start(double timeout_s, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
/* The roots that heard this rank's report (its micro-root, Tier 2): the
 * watch then also shuts down the two listeners NCCL's rank named there
 * (where NCCL waits in accept), and no other listener of the process
 * (NCCL's RAS thread, from 2.24, has one, and does not survive losing
 * it), unless all_listeners (an NCCL with no RAS thread). */
void hpct__nccl_watch_roots(struct hpct_nccl_watch *w, struct hpct_nccl_roots *roots, int rank,
                            int all_listeners);
/* The listeners NCCL's rank `rank` reported to these roots (the answer's,
 * the ring's): how many of out[] were filled, 0 before its report. */
int hpct__nccl_roots_listeners(struct hpct_nccl_roots *s, int rank, struct sockaddr_storage out[2]);
/* Ends the watch (the call returned); 1 when it had fired. */
int hpct__nccl_watch_stop(struct hpct_nccl_watch *w);
/* 1 when an init with this config (an ncclConfig_t * or NULL) blocks. */
int hpct__nccl_config_blocks(const void *config);

/* --- communicators (nccl.c) --------------------------------------------- */

struct hpct_world;

/* One communicator as hpct derives it. */
struct hpct_nccl_comm {
	struct hpct_world *w;
	uint64_t hash, magic; /* identity, and the magic of its ids */
	int nranks, rank;
	const int *world_of; /* comm rank -> world rank; NULL: the same */
	char name[96];       /* for messages: "group .. key .." */
	/* an hpct group of exactly the comm's ranks, in its order, where one
	 * is known (NULL: none): NCCL before 2.24 needs its roots up first */
	struct hpct_group *group;
};

/* A rank must not reach a root before it listens, as it can when the
 * roots start at init (hpct's micro-roots and Tier 1 root, NCCL's own
 * under NCCL_COMM_ID) rather than at ncclGetUniqueId: NCCL sleeps
 * NCCL_SOCKET_RETRY_SLEEP_MSEC (100 ms) after a refused connect, and
 * before 2.24 it retries on the same socket, which Linux then aborts
 * (ECONNABORTED: NCCL fails at once).  So the comm's ranks meet in an
 * hpct barrier over c->group once this rank's roots listen (a few round
 * trips); without a group a no-op (before 2.24 said once). */
int hpct__nccl_roots_up(const struct hpct_nccl_lib *l, const struct hpct_nccl_comm *c);

/* The tier NCCL `l` allows in world `w` with the settings. */
HPCT_PRIVATE enum hpct_nccl_tier hpct__nccl_tier_for(const struct hpct_nccl_lib *l,
                                                     const struct hpct_world *w);
/* Creates comm c through `l`'s entry points at `tier` (not NONE); Tier 1
 * uses tier1_id when given, else derives it. */
HPCT_PRIVATE int hpct__nccl_comm_init(const struct hpct_nccl_lib *l, const struct hpct_nccl_comm *c,
                                      enum hpct_nccl_tier tier, const hpct_nccl_id *tier1_id,
                                      void *config, void **comm_out);

/* NCCL's own result of this thread's last hpct__nccl_comm_init (or
 * hpct__nccl_comm_init_ids), 0 when hpct failed before calling NCCL (or
 * NCCL succeeded). */
HPCT_PRIVATE int hpct__nccl_last_result(void);
/* For calls of NCCL's made outside hpct__nccl_comm_init: forgets the last
 * result; and the failure of `call` with NCCL's result `res`, kept for
 * hpct__nccl_last_result and logged naming rank, comm and NCCL's words
 * (HPCT_ENCCL). */
void hpct__nccl_result_clear(void);
/* 1 when the last init call of this thread got ncclInProgress from NCCL (a
 * non-blocking config): its caller must be told so, not ncclSuccess, and
 * poll ncclCommGetAsyncError as it would on NCCL's own. */
HPCT_PRIVATE int hpct__nccl_init_pending(void);
/* NCCL's init for c: ncclCommInitRankScalable with nid ids, or (nid 0)
 * ncclCommInitRankConfig with ids[0]; a blocking one under a watch
 * (watch.c) that makes it fail past HPCT_TIMEOUT; `roots`, when this
 * process hosts the root this rank reports to, tell the watch its
 * listeners.  NCCL's result. */
int hpct__nccl_init_call(const struct hpct_nccl_lib *l, const struct hpct_nccl_comm *c, int nid,
                         hpct_nccl_id *ids, void *config, struct hpct_nccl_roots *roots,
                         void **comm);
int hpct__nccl_call_failed(const struct hpct_nccl_lib *l, const struct hpct_nccl_comm *c, int res,
                           void *comm, const char *call, const char *tier);

/* The ids of comm c: the one whose root lives with comm rank `crank`, and
 * all c->nranks of them (Tier 2), in the layout of `version`.  Errors as
 * hpct_nccl_derive_id, logged. */
int hpct__nccl_derive_one(const struct hpct_nccl_comm *c, int crank, int version, hpct_nccl_id *id);
int hpct__nccl_derive_all(const struct hpct_nccl_comm *c, int version, hpct_nccl_id *ids);
/* HPCT_ENONCCL for group g when the tier is NONE, saying why (logged). */
int hpct__nccl_no_tier(const struct hpct_group *g, const struct hpct_nccl_lib *l);

/* --- ids this process hands out; comms over several ids (ids.c) -------- */

struct hpct_nccl_roots;

/* A derived id for the preload shim's ncclGetUniqueId: this rank's node, a
 * port among this rank's NCCL root ports (the process's k-th id in window
 * k, so its ids take distinct ports until the windows wrap), a magic from
 * (job, epoch, rank, k), hpct's marker.  Kept in this process's table of
 * outstanding ids until a communicator is made with it.  HPCT_ENOTOPO
 * without a node list; errors are logged, naming the rank. */
HPCT_PRIVATE int hpct__nccl_new_id(const struct hpct_nccl_lib *l, struct hpct_world *w,
                                   hpct_nccl_id *id_out);
/* Starts hpct's roots (one thread) for those of ids[0..nid-1] that this
 * process handed out and no communicator was made with yet, for a comm of
 * nranks: *hosted_out of them, *roots_out NULL when none.  HPCT_ESTATE
 * when hpct's roots do not speak NCCL l's root wire; otherwise the errors
 * of hpct__nccl_roots_start (a port taken: HPCT_EADDRINUSE naming
 * host:port).  The caller stops or detaches *roots_out. */
HPCT_PRIVATE int hpct__nccl_host_roots(const struct hpct_nccl_lib *l, const struct hpct_world *w,
                                       const hpct_nccl_id *ids, int nid, int nranks,
                                       struct hpct_nccl_roots **roots_out, int *hosted_out);
/* A communicator of nranks, this process being `rank`, over ids[0..nid-1]
 * (every one derived; the preload shim's ncclCommInitRank* on hpct's
 * ids), at the tier NCCL l allows in world w (not NONE):
 *   - Tier 2 when the tier is rootless and the comm is the world (nranks =
 *     world size, rank = world rank), its identity and magic from all the
 *     ids' magics;
 *   - else with one id, Tier 1 at that id;
 *   - else NCCL's ncclCommInitRankScalable with the ids unchanged, after
 *     hpct__nccl_host_roots; the roots are detached when NCCL took the
 *     ids, stopped (ports free) when it failed.
 * On success the ids leave the table.  Every step is logged at INFO; a
 * failure once at WARN, naming the rank and the comm (and NCCL's own
 * result: hpct__nccl_last_result). */
HPCT_PRIVATE int hpct__nccl_comm_init_ids(const struct hpct_nccl_lib *l, struct hpct_world *w,
                                          int nranks, int rank, int nid, hpct_nccl_id *ids,
                                          void *config, void **comm_out);

/* --- NCCL_COMM_ID for one call, the env plugin (env.c) ----------------- */

/* Points NCCL_ENV_PLUGIN at libhpct unless the user set it; called before
 * hpct first calls into NCCL. */
HPCT_PRIVATE void hpct__nccl_env_prepare(void);
/* 1 when NCCL can be shown NCCL_COMM_ID for one call (hpct's env plugin
 * or the shim's getenv is in place); runs NCCL's one-time init first. */
HPCT_PRIVATE int hpct__nccl_comm_id_possible(const struct hpct_nccl_lib *l);
/* Opens the window: NCCL's next lookup of NCCL_COMM_ID in this thread sees
 * `text` (kept by the caller until _end).  HPCT_ESTATE when NCCL does not
 * consult hpct's env plugin. */
HPCT_PRIVATE int hpct__nccl_comm_id_begin(const struct hpct_nccl_lib *l, const char *text);
/* For the preload shim, which interposes getenv (NCCL before 2.28.7 has no
 * env plugin): marks that route open, and answers a lookup from the window
 * (NULL: not shown, ask the real getenv). */
HPCT_PRIVATE void hpct__nccl_getenv_route(void);
HPCT_PRIVATE const char *hpct__nccl_comm_id_peek(const char *name);
/* From now on NCCL is also shown NCCL_SOCKET_RETRY_CNT fitting HPCT_TIMEOUT
 * (unless set): see env.c.  Called before every init hpct makes. */
void hpct__nccl_env_arm(void);
HPCT_PRIVATE void hpct__nccl_comm_id_end(void);
/* Which of libhpct's env plugins NCCL took: 0 none (NCCL before 2.28.7,
 * NCCL_ENV_PLUGIN naming another library, or NCCL's env not read yet),
 * 1 ncclEnvPlugin_v1 (2.28.7 to 2.30.6), 2 ncclEnvPlugin_v2 (2.30.7 and
 * later look for it first). */
HPCT_PRIVATE int hpct__nccl_env_plugin_used(void);

/* --- releases, tiers and NCCL's root protocol: root_wire.h, root.c ----- */

/* The releases hpct knows, as ncclGetVersion() codes: 2.19 is the oldest
 * it drives; Tier 2 needs ncclCommInitRankScalable (2.23 and later) and a
 * root wire verified here; 2.32.x is the newest release verified here (its
 * root's wire, byte for byte against the real library).  A newer NCCL
 * keeps NCCL's own root (Tier 1), as hpct cannot know its wire. */
#define HPCT_NCCL_OLDEST_VERSION          21900
#define HPCT_NCCL_TIER2_MIN_VERSION       22300
#define HPCT_NCCL_NEWEST_VERIFIED_VERSION 23299 /* 2.32.x */
#define HPCT_NCCL_NEWEST_VERIFIED_NAME    "2.32"

#define HPCT_NCCL_ADDR_LEN   28  /* union ncclSocketAddress */
#define HPCT_NCCL_RING_LEN   128 /* union ringConnectInfo (2.23 and later) */
#define HPCT_NCCL_REPORT_MAX 176 /* the longest report: struct extInfo of 2.29+ */

/* Roots served by one thread: each listens at its id's address (bound
 * without SO_REUSEPORT: a port held by anyone, a stale NCCL root included,
 * is HPCT_EADDRINUSE naming host:port), takes the ranks' reports in any
 * order, sends each of its ranks the next rank's ring info, and closes.
 * Every wire of 2.19 to 2.32 is served: each root speaks the one of the
 * first report it takes (told by its length) and drops reports of another.
 * Nothing a peer sends or withholds blocks the others; the whole set has a
 * deadline.  Every connection a root drops (wrong magic or type, a length
 * no release sends or another than its ranks', a grow report, a duplicate,
 * a malformed or too slow one) is logged at WARN naming the peer's address
 * and why, at most HPCT_LOG_BURST lines a second. */
struct hpct_nccl_roots;
struct hpct_nccl_root_stats {
	int accepted;  /* reports taken, over all roots */
	int ignored;   /* connections dropped (each logged): wrong magic, malformed, duplicates */
	int max_conns; /* connections of the busiest root (in + out) */
};
/* nranks: the communicator's size; a report that says another is ignored
 * (memory goes with the real size, not with what a report claims).
 * keyed: the ids' magics are keyed by HPCT_SECRET (hpct__nccl_keyed): the
 * line about a connection with another magic then says so. */
HPCT_PRIVATE int hpct__nccl_roots_start(const hpct_nccl_id *ids, int n, int nranks,
                                        double timeout_s, int keyed, struct hpct_nccl_roots **out);
/* 0 when a root could listen at the id's address now (it is then closed
 * again), else the error hpct__nccl_roots_start would give, logged. */
HPCT_PRIVATE int hpct__nccl_port_check(const hpct_nccl_id *id);
/* Waits for every root to finish (0) or the deadline (HPCT_ETIMEDOUT
 * naming the ranks never heard from), then frees the set. */
HPCT_PRIVATE int hpct__nccl_roots_wait(struct hpct_nccl_roots *r,
                                       struct hpct_nccl_root_stats *stats_out);
/* Lets the set finish by itself: its thread frees it when every root has
 * answered or at the deadline, logging a failure. */
HPCT_PRIVATE void hpct__nccl_roots_detach(struct hpct_nccl_roots *r);
/* Stops the set at once and frees it; accepts NULL. */
HPCT_PRIVATE void hpct__nccl_roots_stop(struct hpct_nccl_roots *r);
/* A persistent domain's roots (domain.c): a listener bound once at an
 * id's address, the way hpct__nccl_roots_start binds (HPCT_EADDRINUSE
 * naming host:port), kept by the caller; and a set of roots served on
 * such listeners, which it never closes (when the set finishes or stops,
 * they stay open and bound: connections that arrive meanwhile wait in
 * their backlog for the next set). */
HPCT_PRIVATE int hpct__nccl_root_listen(const hpct_nccl_id *id, int *fd_out);
HPCT_PRIVATE int hpct__nccl_roots_start_on(const hpct_nccl_id *ids, const int *lfds, int n,
                                           int nranks, double timeout_s, int keyed,
                                           struct hpct_nccl_roots **out);
/* 1 once the set's thread is done (every root answered, or it failed):
 * hpct__nccl_roots_wait then returns at once. */
HPCT_PRIVATE int hpct__nccl_roots_finished(struct hpct_nccl_roots *r);

/* For tests/fuzz/fuzz_nccl_root.c (see root.c). */
HPCT_PRIVATE void hpct__nccl_root_fuzz_one(const unsigned char *data, size_t len);

#endif
