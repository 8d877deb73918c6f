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

enum { W_SYN = 1, W_SYNACK, W_DATA, W_FIN, W_PING };
enum ostate { O_CONNECTING, O_OPEN, O_CLOSED };

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
	struct sockaddr_storage peer;
	size_t max_msg;
	struct op *qhead, *qtail; /* not yet taken by fi_send, in order */
	size_t queued;            /* their bytes */
	struct op *held;          /* messages sent before the peer answered */
	double failing_since;     /* fi_send of the head refused since, or 0 */
	double last_heard, last_ping;
	uint32_t tx_seq;    /* messages sent on it */
	uint32_t rx_next;   /* the next message to hand on (from 1) */
	uint32_t fin_after; /* a FIN came after this many messages; 0: none */
	struct part *parts; /* messages being put together */
};

struct part {
	struct part *next;
	uint32_t seq, total, got;
	unsigned char data[];
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
	struct ofi_conn **conns; /* by id - 1; NULL once forgotten */
	uint32_t nconns;
	size_t backlog;  /* bytes queued on every conn, not yet taken by fi_send */
	size_t inflight; /* bytes taken by fi_send whose completion has not come */
	unsigned char *rxbuf;
	struct {
		unsigned char name[HPCT_RAW_ADDR_MAX];
		size_t len;
		fi_addr_t addr;
	} * avs;
	size_t navs, capavs;
	hpct_tevent_cb cb; /* during progress */
	void *cbarg;
	int nev;
};

/* The fabric address of a peer's endpoint, inserted once. */
int hpct__ofi_av_of(struct ofi_ctx *x, const unsigned char *name, size_t len, fi_addr_t *out);
/* Forgets a conn: no event for it again; its slot stays empty. */
void hpct__ofi_conn_free(struct ofi_conn *c);
struct ofi_conn *hpct__ofi_conn_new(struct ofi_ctx *x, enum ostate st);
/* Queues one fabric message on a conn. */
int hpct__ofi_enqueue(struct ofi_conn *c, int type, uint32_t seq, uint32_t total, uint32_t off,
                      const void *data, size_t len);
/* One engine message as DATA fragments. */
int hpct__ofi_enqueue_msg(struct ofi_conn *c, const unsigned char *data, size_t len);
double hpct__ofi_now_s(void);
int hpct__ofi_progress(void *arg, int timeout_ms, hpct_tevent_cb cb, void *cbarg);
int hpct__ofi_post_recv(struct ofi_ctx *x, int slot);
/* Tells the peer we closed, if it can be told at once; the FIN's
 * completion refers to no conn. */
void hpct__ofi_send_fin(struct ofi_conn *c);
/* Hands a conn's queued fabric messages to fi_send, in order, until the
 * provider says not now: 0 when all went, -FI_EAGAIN, or another error. */
int hpct__ofi_try_send(struct ofi_ctx *x, struct ofi_conn *c);

#endif
