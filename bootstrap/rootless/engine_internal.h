/* Inside the rootless engine: the state engine.c, peers.c, groups.c and
 * handshake.c share.  Nothing outside those files includes this. */
#ifndef HPCT_ENGINE_INTERNAL_H
#define HPCT_ENGINE_INTERNAL_H

#include "bootstrap/base/log.h"
#include "bootstrap/base/wire.h"
#include "bootstrap/rootless/engine.h"

enum out_state {
	OUT_IDLE,
	OUT_CONNECTING,
	OUT_HELLO,
	OUT_READY,
	OUT_BACKOFF,
	OUT_REFUSED,
	OUT_CLOSED
};

/* What the engine hangs on each transport conn. */
struct econn {
	int peer; /* -1 until an accepted conn is admitted */
	/* with a secret: this side's nonce; on an accepted conn that was sent
	 * a CHALLENGE (auth_wait), the HELLO and nonce it sent */
	int auth_wait;
	unsigned char nonce[HPCT_AUTH_NONCE], peer_nonce[HPCT_AUTH_NONCE];
	struct hpct_hello hello;
	int outgoing;
	double deadline; /* handshake deadline, in progress time (see ptime) */
	/* accepted: when (hpct__now) and at what progress time */
	double accepted_at, accepted_ptime;
	struct hpct_tconn *t;
	struct econn **list; /* the handshake list it is on, or NULL */
	struct econn *next;
};

struct qmsg {
	struct qmsg *next;
	size_t len;
	unsigned char data[];
};

/* A peer the engine has had to do with: made on first use, so a rank's
 * memory grows with the peers it talks to (O(log N) for the collectives),
 * not with the world's size. */
struct peer {
	int rank;
	struct econn *out, *in;
	enum out_state state;
	int ever_up;
	int pulling; /* our connection is a one-shot pull: no retry if refused */
	int last_err;
	int retries;
	uint64_t lost; /* sends to it that can no longer be delivered */
	double retry_at, backoff;
	uint64_t group; /* the group whose message asked for the connection */
	struct qmsg *qhead, *qtail;
	char why[160];
	char addr[HPCT_ADDRSTRLEN];
	uint64_t epoch_told; /* the epoch it last said it is at over a kept link */
	double heard;        /* when a message from it last arrived (hpct__now) */
	struct peer *bnext;  /* next on the engine's backoff list */
	int in_backoff;      /* on that list (at most once) */
	/* messages from it no collective took yet, oldest first (inbox.c) */
	struct hpct_emsg *mhead, *mtail;
	long nmsgs;
	size_t mbytes;     /* what they cost, headers included */
	uint64_t mdropped; /* over a bound */
	int mwarned;       /* a drop was logged */
	int naborts;       /* abort records it sent that are kept */
	int awarned;
};

struct abort_rec {
	struct abort_rec *next;
	uint64_t group;
	int src; /* the peer it came from */
	struct hpct_abort a;
};

struct hpct_engine {
	struct hpct_engine_cfg cfg;
	void *tctx;
	struct peer **ptab; /* open addressing by rank, no deletions; NULL slots */
	unsigned pcap, pcount;
	struct peer *backoff; /* peers waiting to retry, each at most once */
	int nbackoff;
	long nqueued; /* messages waiting in peer queues for a connection */
	uint64_t rng;
	/* Handshake deadlines count only time spent in progress(): a rank that
	 * computes between collectives has not read what arrived meanwhile. */
	double ptime;
	struct econn *accepted; /* accepted, waiting for their HELLO */
	int hwarned;            /* a handshake was dropped over the bound (logged) */
	struct hpct_log_burst bad_frames; /* refusals of frames: a stranger repeats them */
	struct econn *awaiting; /* ours, HELLO sent, waiting for the answer */
	size_t mbytes;          /* what every peer's kept messages cost */
	struct abort_rec *aborts, **aborts_tail; /* oldest first */
	int naborts;
	uint64_t stats_dropped; /* messages and records dropped over a bound */
	struct hpct_world_stats stats;
};

/* Handshake lists (accepted conns waiting for a HELLO, ours waiting for the
 * answer), with the list a conn is on kept in the conn. */
void hpct__eng_list_add(struct econn **list, struct econn *c);
void hpct__eng_list_del(struct econn *c);

/* The entry of rank r, made on first use; NULL only when out of memory. */
struct peer *hpct__eng_peer(struct hpct_engine *e, int r);
/* The entry of rank r if the engine has one, else NULL. */
struct peer *hpct__eng_peer_find(const struct hpct_engine *e, int r);
/* Every peer entry; the body must not make new ones. */
#define ENG_FOR_EACH_PEER(e, p)                                 \
	for (unsigned eng_i_ = 0; eng_i_ < (e)->pcap; eng_i_++) \
		for (struct peer *p = (e)->ptab[eng_i_]; p; p = NULL)

void hpct__eng_schedule_retry(struct hpct_engine *e, struct peer *p, int err);
/* Puts a peer on the backoff list (at most once). */
void hpct__eng_backoff_push(struct hpct_engine *e, struct peer *p);
/* Opens our connection to a peer, at its address (engine.c). */
void hpct__eng_start_connect(struct hpct_engine *e, struct peer *p);
/* The link messages to a peer go out on now, or NULL. */
struct econn *hpct__eng_ready_conn(const struct hpct_engine *e, const struct peer *p);
/* Drops a peer's queued messages, counting them lost. */
void hpct__eng_drop_queue(struct hpct_engine *e, struct peer *p);
void hpct__eng_send_hello(struct hpct_engine *e, struct hpct_tconn *t, uint16_t type, uint32_t dst,
                          uint64_t group, uint32_t reason);
/* The same frame with a nonce and a MAC after it (HPCT_AUTH_LEN). */
void hpct__eng_send_auth(struct hpct_engine *e, struct hpct_tconn *t, uint16_t type, uint32_t dst,
                         uint64_t group, const unsigned char *nonce, const unsigned char *mac);
/* Sends a peer's queued messages if a usable link exists. */
void hpct__eng_maybe_flush(struct hpct_engine *e, struct peer *p);
struct econn *hpct__eng_usable_in(const struct hpct_engine *e, const struct peer *p);
/* A conn closed (the transport already closed it): peer state, then free. */
void hpct__eng_on_closed(struct hpct_engine *e, struct econn *c, int err);

/* inbox.c: what arrived, kept within the bounds of engine.h */
/* Keeps DATA message m from peer p (admitted), dropping what is over. */
void hpct__eng_inbox_put(struct hpct_engine *e, struct peer *p, struct hpct_emsg *m);
/* Keeps the first ABORT of a group, dropping what is over. */
void hpct__eng_abort_put(struct hpct_engine *e, struct peer *p, uint64_t group,
                         const struct hpct_abort *a);
void hpct__eng_inbox_forget_group(struct hpct_engine *e, uint64_t group);
/* Frees every message kept from p. */
void hpct__eng_inbox_drop_peer(struct hpct_engine *e, struct peer *p);
void hpct__eng_inbox_drop_aborts(struct hpct_engine *e);

/* handshake.c */
void hpct__eng_on_hello(struct hpct_engine *e, struct econn *c, const void *data, size_t len);
void hpct__eng_on_ack(struct hpct_engine *e, struct econn *c, const void *data, size_t len);
/* The AUTH that follows our CHALLENGE on an accepted conn. */
void hpct__eng_on_auth(struct hpct_engine *e, struct econn *c, const void *data, size_t len);
void hpct__eng_expire_handshakes(struct hpct_engine *e);

#endif
