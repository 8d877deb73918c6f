/* Inside the OFI transport: what ofi.c (libfabric, the endpoint, the
 * transport's table) and ofi_conn.c (the emulated connections, their
 * messages' pieces, sends and completions) share.  Nothing else includes
 * this. */
#ifndef HPCT_OFI_INTERNAL_H
#define HPCT_OFI_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include "transport/transport.h"

/* The largest fabric message, header included: under rxm's eager limit
 * (FI_OFI_RXM_BUFFER_SIZE 1024 less its own header), so nothing waits on a
 * rendezvous. */
#define FRAG              768
#define NRX               32 /* receives kept posted */
#define HDR               24
#define SYN_REFUSED_AFTER 0.05 /* s of -FI_EAGAIN on a SYN: nobody listens there */
#define DEAD_AFTER        0.5  /* s of failing sends to an open peer: it is gone */
#define PING_AFTER        0.1  /* s of silence from a peer we wait on: ask */
#define RETRY_MS          1

/* What a peer can make this end hold (docs/reliability.md, "Bounds").  A DATA
 * piece is taken only where it covers bytes of its message not covered
 * yet, inside the message, and at most REASM_WINDOW past the bytes already
 * there: a message's buffer grows with what arrived, never to what its
 * first piece claims. */
#define MAX_PARTS    16          /* messages of one conn in reassembly at once */
#define MAX_RANGES   16          /* separate runs of received bytes in one message */
#define REASM_WINDOW (64u << 10) /* how far past the received bytes a piece may land */
/* An incoming conn is pending until its user gives it room for more than a
 * handshake (set_max_msg above PENDING_ROOM: the peer identified itself).
 * Past MAX_PENDING, a SYN closes the oldest pending conn; one pending for
 * PENDING_AFTER is closed (the engine closes a silent one sooner). */
#define MAX_PENDING   256
#define PENDING_ROOM  4096
#define PENDING_AFTER 30.0
/* Address-vector entries named by SYNs of pending conns only; past this,
 * unused ones are removed, and a SYN from a new name is refused (its
 * sender's connect fails after CONNECT_AFTER, and is retried). */
#define MAX_STRANGER_AV 128
#define CONNECT_AFTER   5.0 /* s a delivered SYN may go unanswered */
/* Silent conns come from honest peers too (a connect given up before its
 * answer came): the first SILENT_NAMED peers are each named once. */
#define SILENT_NAMED 4
#define SLOT_BITS    20 /* a conn id: its slot (low bits) and the slot's reuse count */
#define MAX_CONNS    ((1u << SLOT_BITS) - 1)

enum { W_SYN = 1, W_SYNACK, W_DATA, W_FIN, W_PING };
/* O_ABANDONED: closed by its user while its SYN was out and unanswered,
 * or failed for CONNECT_AFTER unanswered; kept, with no events, until the
 * SYNACK comes (then a FIN tells the acceptor at once, instead of its conn
 * waiting PENDING_AFTER for a handshake) or CONNECT_AFTER passes again. */
enum ostate { O_CONNECTING, O_OPEN, O_CLOSED, O_ABANDONED };

/* What a peer was refused, each logged the first time and counted after. */
enum refusal {
	R_PIECE,   /* a DATA piece that does not fit its message */
	R_SIZE,    /* a message longer than the conn may receive */
	R_PARTS,   /* MAX_PARTS */
	R_RANGES,  /* MAX_RANGES */
	R_WINDOW,  /* REASM_WINDOW */
	R_PENDING, /* MAX_PENDING: the oldest pending conn closed */
	R_SILENT,  /* PENDING_AFTER */
	R_AV,      /* MAX_STRANGER_AV */
	R_SYN,     /* a SYN without a usable name, or no room for its conn */
	R_KINDS
};

struct op { /* one fabric message, waiting for fi_send or in flight */
	struct op *next;
	uint32_t conn; /* its conn's id: the conn may be gone by its completion */
	size_t len;
	unsigned char buf[];
};

struct ofi_conn {
	struct hpct_tconn base; /* first: the engine sees only this */
	struct ofi_ctx *ctx;
	uint32_t id, peer_id;
	enum ostate state;
	fi_addr_t addr;
	int av;      /* its entry in ctx->avs, or -1 */
	int pending; /* incoming and not identified yet (MAX_PENDING) */
	struct sockaddr_storage peer;
	size_t max_msg;
	struct op *qhead, *qtail; /* not yet taken by fi_send, in order */
	size_t queued;            /* their bytes */
	struct op *held;          /* messages sent before the peer answered */
	double born;              /* when it was made: CONNECT_AFTER, PENDING_AFTER */
	uint64_t serial;          /* the order conns were made in: the oldest pending goes first */
	double failing_since;     /* fi_send of the head refused since, or 0 */
	double last_heard, last_ping;
	uint32_t tx_seq;    /* messages sent on it */
	uint32_t rx_next;   /* the next message to hand on (from 1) */
	uint32_t fin_after; /* a FIN came after this many messages; 0: none */
	struct part *parts; /* messages being put together */
	unsigned nparts;
};

/* A message being put together: its bytes so far, and which of them came
 * as runs [lo, hi), sorted, apart from each other. */
struct part {
	struct part *next;
	uint32_t seq, total;
	uint32_t got; /* bytes covered: the sum of the runs */
	uint32_t cap; /* bytes allocated at data */
	unsigned nranges;
	struct {
		uint32_t lo, hi;
	} ranges[MAX_RANGES];
	unsigned char *data;
};

struct av_entry {
	unsigned char name[HPCT_RAW_ADDR_MAX];
	size_t len; /* 0: a free slot */
	fi_addr_t addr;
	uint32_t users; /* conns that send to it */
	int trusted;    /* we connected to it, or a conn on it was identified */
};

struct ofi_ctx {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	unsigned char name[HPCT_RAW_ADDR_MAX]; /* fi_getname: what a SYN carries */
	size_t name_len;
	struct ofi_conn **conns; /* by slot - 1; NULL: free */
	uint32_t *gens;          /* each slot's reuse count, for the ids */
	uint32_t nconns, capconns;
	/* CONNECT_AFTER and PENDING_AFTER pass on the clock, but only while we
	 * listen: a rank that computes between collectives reads nothing
	 * meanwhile, and must not find a healthy conn expired the moment it
	 * comes back.  active_since: when the current run of progress calls
	 * began (a gap of over a second between two ends one); a conn expires
	 * only a second or more into such a run. */
	double active_since, last_progress;
	uint64_t serial;
	unsigned npending;
	size_t backlog;  /* bytes queued on every conn, not yet taken by fi_send */
	size_t inflight; /* bytes taken by fi_send whose completion has not come */
	unsigned char *rxbuf;
	struct av_entry *avs;
	size_t navs, capavs;
	unsigned nstranger; /* entries not trusted */
	unsigned long refused[R_KINDS];
	/* the peers named for R_SILENT so far (hpct__ofi_refuse_silent) */
	char silent_named[SILENT_NAMED][64];
	unsigned nsilent_named;
	struct {                          /* what connecting cost: said at INFO when it closes */
		unsigned long connects;   /* SYNs sent */
		unsigned long refused;    /* SYNs refused for SYN_REFUSED_AFTER: nobody listened */
		unsigned long unanswered; /* SYNs unanswered for CONNECT_AFTER */
		unsigned long retried;    /* sends the provider said not now to */
		unsigned long pings;
		double waited_s; /* in fi_cq_sread */
	} stats;
	hpct_tevent_cb cb; /* during progress */
	void *cbarg;
	int nev;
};

/* The fabric address of a peer's endpoint for a conn, inserted once:
 * sets c->addr and c->av.  A stranger's (a SYN's name) counts against
 * MAX_STRANGER_AV until trusted: -EAGAIN past it. */
int hpct__ofi_av_attach(struct ofi_ctx *x, struct ofi_conn *c, const unsigned char *name,
                        size_t len, int trusted);
/* The conn is identified: its entry stays. */
void hpct__ofi_av_trust(struct ofi_ctx *x, int av);
/* The conn no longer sends to its entry. */
void hpct__ofi_av_detach(struct ofi_ctx *x, struct ofi_conn *c);
/* A peer's address as text ("127.0.0.1:2003"). */
void hpct__ofi_addr_text(const struct sockaddr_storage *ss, char *buf, size_t len);
/* Says what a peer was refused: logged the first time for each kind,
 * counted always. */
void hpct__ofi_refuse(struct ofi_ctx *x, enum refusal kind, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
/* R_SILENT, from peer `who`: logged once per peer, for the first
 * SILENT_NAMED peers; counted always. */
void hpct__ofi_refuse_silent(struct ofi_ctx *x, const char *who, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
/* A pending conn is identified (set_max_msg beyond PENDING_ROOM). */
void hpct__ofi_conn_identified(struct ofi_conn *c);
/* Forgets a conn: no event for it again; its slot stays empty. */
void hpct__ofi_conn_free(struct ofi_conn *c);
struct ofi_conn *hpct__ofi_conn_new(struct ofi_ctx *x, enum ostate st);
/* Queues one fabric message on a conn. */
int hpct__ofi_enqueue(struct ofi_conn *c, int type, uint32_t seq, uint32_t total, uint32_t off,
                      const void *data, size_t len);
/* One engine message as DATA fragments. */
int hpct__ofi_enqueue_msg(struct ofi_conn *c, const unsigned char *data, size_t len);
double hpct__ofi_now_s(void);
/* A DATA piece into its message: a message is whole when its pieces
 * covered every byte of it exactly once (part->got == part->total).  NULL
 * when taken, else why not, in why (the peer is broken or hostile: its conn
 * is to be closed), its kind in *kind. */
const char *hpct__ofi_take_piece(struct ofi_conn *c, uint32_t seq, uint32_t total, uint32_t off,
                                 const unsigned char *p, size_t plen, enum refusal *kind, char *why,
                                 size_t whylen);
/* One fabric message as received (header, payload): the whole wire's
 * parser, events to x->cb. */
void hpct__ofi_on_message(struct ofi_ctx *x, const unsigned char *m, size_t len);
/* The transport's progress(): also where conns past their deadlines
 * (CONNECT_AFTER, PENDING_AFTER) fail. */
int hpct__ofi_progress(void *arg, int timeout_ms, hpct_tevent_cb cb, void *cbarg);
int hpct__ofi_post_recv(struct ofi_ctx *x, int slot);
/* Tells the peer we closed, if it can be told at once (an open conn, or
 * an abandoned one its peer just answered); the FIN's completion refers to
 * no conn. */
void hpct__ofi_send_fin(struct ofi_conn *c);
/* Its user closed a conn still connecting, or its SYN went unanswered for
 * CONNECT_AFTER: freed at once when its SYN has not gone out, else kept as
 * O_ABANDONED (no events; a close by its user does nothing). */
void hpct__ofi_conn_abandon(struct ofi_conn *c);
/* Hands a conn's queued fabric messages to fi_send, in order, until the
 * provider says not now: 0 when all went, -FI_EAGAIN, or another error. */
int hpct__ofi_try_send(struct ofi_ctx *x, struct ofi_conn *c);

#endif
