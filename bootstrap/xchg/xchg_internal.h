/* The exchange of per-peer handles (hpct_xchg_*, include/hpct/hpct.h): its
 * datagrams (datagram.c), the per-world service that answers peers (service.c)
 * and the public calls (xchg.c).
 *
 * Datagram (integers big-endian), XW_HDR bytes, then `len` bytes of
 * payload, then with a secret a 32-byte HMAC-SHA256 of everything before:
 *    0 u32 magic "HPX1"      4 u8 type    5 u8 flags (1: tagged)  6 u16 0
 *    8 u64 job              16 u64 epoch  24 u64 exchange id      32 u64 version
 *   40 u32 sender's world rank            44 u32 addressee's world rank
 *   48 u64 nonce (the request's, echoed)  56 u32 len  60 u32 item size
 * REQ (requester -> service): no payload.  ITEM (service -> requester's
 * socket): the item.  STALE: u64 oldest, u64 newest version held.
 * MISMATCH: no payload; `item size` is the service's.  ABORT: the exchange
 * failed on the service's rank: u32 origin (the world rank that first
 * failed), u32 culprit (the world rank it blamed, 0xffffffff none), then
 * the origin's message (no NUL), the answer to every request from then on. */
#ifndef HPCT_XCHG_INTERNAL_H
#define HPCT_XCHG_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "bootstrap/base/auth.h"
#include "bootstrap/base/log.h"
#include "bootstrap/base/wire.h"
#include "bootstrap/world.h"
#include "hpct/hpct.h"

#define XW_MAGIC 0x48505831u /* "HPX1" */
#define XW_HDR   64
#define XW_MAX   (XW_HDR + HPCT_XCHG_MAX_ITEM + HPCT_AUTH_MAC)

enum xw_type { XW_REQ = 1, XW_ITEM = 2, XW_STALE = 3, XW_MISMATCH = 4, XW_ABORT = 5 };

/* The most of a cause's message an ABORT carries. */
#define XW_CAUSE_MAX 1000

struct xw_hdr {
	uint8_t type, flags;
	uint64_t job, epoch, xid, version;
	uint32_t from, to;
	uint64_t nonce;
	uint32_t len, item_size;
};

/* Encodes h (h->len payload bytes) into buf (XW_MAX bytes), tagged when
 * key->secret is set.  The datagram's length, or HPCT_EINVAL when the tag
 * cannot be made. */
int hpct__xw_encode(const struct xw_hdr *h, const void *payload, const struct hpct_auth_key *key,
                    unsigned char *buf);
/* Decodes a datagram of n bytes: 0 and *payload_out inside buf, or
 * HPCT_EPROTO (not ours, truncated) or HPCT_EREFUSED (no valid tag while
 * a secret is set).  On HPCT_EREFUSED *h is filled from the untrusted
 * header, for counting only. */
int hpct__xw_decode(const unsigned char *buf, size_t n, const struct hpct_auth_key *key,
                    struct xw_hdr *h, const unsigned char **payload_out);

/* A request held until its version is published (or its exchange made). */
struct xchg_parked {
	struct xw_hdr req;
	struct sockaddr_storage from;
	socklen_t fromlen;
	double since;
};
#define XCHG_PARK_MAX 4096 /* past it the oldest goes: its requester asks again */

/* One per world, the first hpct_xchg_create's; the world's svc slot. */
struct xchg_service {
	struct hpct_world *w;
	pthread_mutex_t mu;     /* everything below, and every exchange's served state */
	pthread_cond_t told_cv; /* an exchange's `served` or `told` changed */
	pthread_t thread;
	int running;
	int fd;      /* the service socket, or -1 */
	int wake[2]; /* a byte here stops the thread */
	uint64_t epoch;
	struct hpct_auth_key key;
	char self_text[HPCT_ADDRSTRLEN];
	struct hpct_xchg **xs;
	int nxs, capxs;
	struct xchg_parked *park;
	int npark;
	int warned_auth; /* an unauthenticated datagram was logged once */
	struct hpct_log_burst burst;
	unsigned char buf[XW_MAX], out[XW_MAX];
};

/* How a path lets ranks find each other's services: one row per path,
 * picked by the world's path (xchg.c). */
struct xchg_addr_ops {
	const char *name;
	/* The address this rank's service binds to. */
	int (*bind_addr)(struct hpct_world *w, struct sockaddr_storage *ss, socklen_t *len);
	/* Fills x->addrs for every member (create, collective by contract). */
	int (*peers)(struct hpct_xchg *x, hpct_group *g);
	/* Whether each of the n group ranks js is alive now, for blaming the
	 * right one at a deadline: out[i] 1 alive (its process holds its
	 * listener), 0 not (refused: it died or never started; or silent for
	 * wait_s), -1 the path cannot say. */
	void (*alive)(struct hpct_xchg *x, const int *js, int n, double wait_s, signed char *out);
};

extern const struct xchg_addr_ops hpct__xchg_addr_rootless; /* addr.c */
extern const struct xchg_addr_ops hpct__xchg_addr_standard;

struct hpct_xchg {
	struct xchg_service *svc;
	const struct xchg_addr_ops *ops;
	char name[HPCT_XCHG_NAMELEN];
	uint64_t xid, group, epoch;
	int rank, size;
	int *members; /* group rank -> world rank */
	size_t item_size;
	double timeout_s;
	/* served state, under svc->mu */
	uint64_t hist_ver[HPCT_XCHG_HISTORY]; /* 0: empty slot */
	unsigned char *hist;                  /* HISTORY x size x item_size */
	uint64_t newest;
	struct hpct_xchg_stats st;
	uint64_t *served; /* by group rank: the newest version served it */
	/* The first cause of its failure (a fetch on this rank failed, or a
	 * peer's ABORT said why): answered to every request from then on, so
	 * that a rank that comes late learns the culprit, not that we left. */
	int failed;
	uint32_t cause_origin, cause_culprit;
	unsigned char *told; /* by group rank: it got our ABORT */
	char cause[XW_CAUSE_MAX + 1];
	/* the fetching side: one thread at a time */
	struct sockaddr_storage *addrs; /* members' services */
	socklen_t *addrlens;
	int fd;              /* where answers come */
	int window;          /* requests in flight at most: what fd can hold */
	uint64_t *cache_ver; /* size x HISTORY, 0: empty */
	unsigned char *cache;
};

/* The world's service, started on first use (bound, thread running), and
 * the row of the world's path.  Errors named (the address and why). */
int hpct__xchg_service(struct hpct_world *w, const struct xchg_addr_ops **ops_out,
                       struct xchg_service **svc_out);
/* Registers x with its service (HPCT_EINVAL when its id is taken here),
 * and forgets it. */
int hpct__xchg_register(struct xchg_service *s, struct hpct_xchg *x);
void hpct__xchg_unregister(struct xchg_service *s, struct hpct_xchg *x);
/* Answers the requests parked for x that its newest version settles (all
 * of them, with its cause, once x failed); under s->mu. */
void hpct__xchg_unpark(struct xchg_service *s, struct hpct_xchg *x);
/* The group rank of a world rank, -1 when not a member. */
int hpct__xchg_group_rank(const struct hpct_xchg *x, uint32_t world_rank);
/* The history slot of `version`, or -1. */
int hpct__xchg_slot(const struct hpct_xchg *x, uint64_t version);
/* Frees x's memory (no lock, no unregister). */
void hpct__xchg_free(struct hpct_xchg *x);

#endif
