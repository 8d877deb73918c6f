/* OFI transport: the engine's connections over one libfabric reliable
 * datagram endpoint (FI_EP_RDM, FI_MSG, send-after-send order), bound at
 * this rank's derived address; a peer is reached by inserting its derived
 * address into the address vector, so nothing is exchanged first.
 *
 * libfabric is loaded with dlopen on first use: nobody else pays its start
 * cost.  HPCT_OFI_PROVIDER picks the provider (default "tcp;ofi_rxm"; any
 * provider addressed by IP and port: net, sockets, "udp;ofi_rxd").
 *
 * Connections are emulated with a 24-byte header on every fabric message:
 * SYN (carries the sender's endpoint name, so the peer can answer), SYNACK,
 * DATA, FIN and PING.  A DATA fragment says which message of its conn it
 * belongs to and where in it: providers do not keep order between a large
 * message (rxm's rendezvous) and a small one sent after it, so fragments
 * are put together wherever they land and messages handed on in the order
 * they were sent; a FIN says how many came before it.  A peer not up yet
 * makes fi_send say -FI_EAGAIN; such sends are retried from progress(), and
 * a SYN refused that way for SYN_REFUSED_AFTER is a refused connection (the
 * engine backs off).  A peer that died is found by the sends to it failing
 * for DEAD_AFTER with none of them completing and nothing heard from it; a
 * waiting side pings a silent peer to learn it.  Completions are waited for
 * on the completion queue's wait object: no busy polling. */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include "hpct/hpct.h"
#include "transport/transport.h"
#include "bootstrap/base/bytes.h"

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

static __thread char why[512];

static const char *ofi_why(void)
{
	return why;
}

/* ------------------------------------------------------------ loader */

static struct {
	int tried, ok;
	int (*getinfo)(uint32_t, const char *, const char *, uint64_t, const struct fi_info *,
	               struct fi_info **);
	void (*freeinfo)(struct fi_info *);
	struct fi_info *(*dupinfo)(const struct fi_info *);
	int (*fabric)(struct fi_fabric_attr *, struct fid_fabric **, void *);
	const char *(*strerror)(int);
} lib;

static int load(void)
{
	if (lib.tried)
		return lib.ok ? 0 : -ENOENT;
	lib.tried = 1;
	/* read once, at libfabric's first fi_getinfo: rxm's defaults take
	 * ~90 MB per endpoint, a bootstrap needs a few (a user's values stay) */
	setenv("FI_OFI_RXM_BUFFER_SIZE", "1024", 0);
	setenv("FI_OFI_RXM_RX_SIZE", "64", 0);
	setenv("FI_OFI_RXM_TX_SIZE", "64", 0);
	setenv("FI_OFI_RXM_MSG_TX_SIZE", "16", 0); /* per peer connection */
	setenv("FI_OFI_RXM_MSG_RX_SIZE", "16", 0);
	setenv("FI_TCP_RX_SIZE", "64", 0);
	setenv("FI_TCP_TX_SIZE", "64", 0);
	/* rxm looks at its connection requests only every 10 ms of CQ reads
	 * by default; a bootstrap is mostly connection set-up (N=2 gated:
	 * 16.4 ms at 10 ms, 7.4 ms at 100 us) */
	setenv("FI_OFI_RXM_CM_PROGRESS_INTERVAL", "100", 0);
	void *h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(why, sizeof(why),
		         "HPCT_TRANSPORT=ofi: cannot load libfabric.so.1 (%s); install Debian's "
		         "libfabric1 or choose HPCT_TRANSPORT=tcp",
		         dlerror());
		return -ENOENT;
	}
	*(void **)&lib.getinfo = dlsym(h, "fi_getinfo");
	*(void **)&lib.freeinfo = dlsym(h, "fi_freeinfo");
	*(void **)&lib.dupinfo = dlsym(h, "fi_dupinfo");
	*(void **)&lib.fabric = dlsym(h, "fi_fabric");
	*(void **)&lib.strerror = dlsym(h, "fi_strerror");
	if (!lib.getinfo || !lib.freeinfo || !lib.dupinfo || !lib.fabric || !lib.strerror) {
		snprintf(why, sizeof(why),
		         "HPCT_TRANSPORT=ofi: libfabric.so.1 lacks fi_getinfo etc.");
		return -ENOENT;
	}
	lib.ok = 1;
	return 0;
}

static const char *ferr(int rc)
{
	return lib.strerror ? lib.strerror(rc < 0 ? -rc : rc) : "?";
}

/* ------------------------------------------------------------ state */

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

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}



static socklen_t sa_len(const struct sockaddr_storage *ss)
{
	return ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

static void sa_text(const struct sockaddr_storage *ss, char *buf, size_t len)
{
	char ip[INET6_ADDRSTRLEN] = "?";
	unsigned port;
	if (ss->ss_family == AF_UNSPEC) { /* a name: an IP provider's is a sockaddr */
		const struct hpct_raw_addr *ra = (const struct hpct_raw_addr *)ss;
		struct sockaddr_storage in = { 0 };
		sa_family_t fam = AF_UNSPEC;
		if (ra->len >= sizeof(fam))
			memcpy(&fam, ra->bytes, sizeof(fam));
		if ((fam == AF_INET && ra->len >= sizeof(struct sockaddr_in)) ||
		    (fam == AF_INET6 && ra->len >= sizeof(struct sockaddr_in6))) {
			memcpy(&in, ra->bytes, ra->len < sizeof(in) ? ra->len : sizeof(in));
			sa_text(&in, buf, len);
		} else {
			snprintf(buf, len, "an endpoint name of %u bytes", ra->len);
		}
		return;
	}
	if (ss->ss_family == AF_INET6) {
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)ss)->sin6_addr, ip, sizeof(ip));
		port = ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
		snprintf(buf, len, "[%s]:%u", ip, port);
	} else {
		inet_ntop(AF_INET, &((const struct sockaddr_in *)ss)->sin_addr, ip, sizeof(ip));
		port = ntohs(((const struct sockaddr_in *)ss)->sin_port);
		snprintf(buf, len, "%s:%u", ip, port);
	}
}

/* A peer's endpoint name: the bytes of a raw address, or of a sockaddr
 * (what IP providers' names are). */
static size_t name_of(const struct sockaddr_storage *ss, const unsigned char **bytes)
{
	if (ss->ss_family == AF_UNSPEC) {
		const struct hpct_raw_addr *ra = (const struct hpct_raw_addr *)ss;
		*bytes = ra->bytes;
		return ra->len <= HPCT_RAW_ADDR_MAX ? ra->len : 0;
	}
	*bytes = (const unsigned char *)ss;
	return sa_len(ss);
}

/* The fabric address of a peer's endpoint, inserted once. */
static int av_of(struct ofi_ctx *x, const unsigned char *name, size_t len, fi_addr_t *out)
{
	if (len == 0 || len > HPCT_RAW_ADDR_MAX)
		return -EINVAL;
	for (size_t i = 0; i < x->navs; i++)
		if (x->avs[i].len == len && memcmp(x->avs[i].name, name, len) == 0) {
			*out = x->avs[i].addr;
			return 0;
		}
	if (x->navs == x->capavs) {
		size_t cap = x->capavs ? 2 * x->capavs : 16;
		void *p = realloc(x->avs, cap * sizeof(*x->avs));
		if (!p)
			return -ENOMEM;
		x->avs = p;
		x->capavs = cap;
	}
	fi_addr_t a;
	if (fi_av_insert(x->av, name, 1, &a, 0, NULL) != 1)
		return -EHOSTUNREACH;
	memcpy(x->avs[x->navs].name, name, len);
	x->avs[x->navs].len = len;
	x->avs[x->navs++].addr = a;
	*out = a;
	return 0;
}

static struct ofi_conn *conn_by_id(struct ofi_ctx *x, uint32_t id)
{
	return id >= 1 && id <= x->nconns ? x->conns[id - 1] : NULL;
}

static struct ofi_conn *conn_new(struct ofi_ctx *x, enum ostate st)
{
	struct ofi_conn **t = realloc(x->conns, (x->nconns + 1) * sizeof(*t));
	struct ofi_conn *c = calloc(1, sizeof(*c));
	if (!t || !c) {
		free(c);
		if (t)
			x->conns = t;
		return NULL;
	}
	x->conns = t;
	x->conns[x->nconns++] = c;
	c->ctx = x;
	c->id = x->nconns;
	c->state = st;
	c->max_msg = HPCT_TRANSPORT_MAX_MSG;
	c->rx_next = 1;
	c->last_heard = now_s();
	return c;
}

static void drop_queue(struct ofi_conn *c)
{
	for (struct op *o = c->qhead, *n; o; o = n) {
		n = o->next;
		c->ctx->backlog -= o->len;
		free(o);
	}
	for (struct op *o = c->held, *n; o; o = n) {
		n = o->next;
		free(o);
	}
	c->qhead = c->qtail = c->held = NULL;
	c->queued = 0;
}

/* Forgets a conn: no event for it again; its slot stays empty. */
static void conn_free(struct ofi_conn *c)
{
	drop_queue(c);
	for (struct part *q = c->parts, *n; q; q = n) {
		n = q->next;
		free(q);
	}
	c->ctx->conns[c->id - 1] = NULL;
	free(c);
}

/* One fabric message of a conn: header (type, ids, the message's number,
 * its length and this piece's offset), then payload bytes. */
static struct op *make_op(struct ofi_conn *c, int type, uint32_t seq, uint32_t total, uint32_t off,
                          const void *data, size_t len)
{
	struct op *o = malloc(sizeof(*o) + HDR + len);
	if (!o)
		return NULL;
	o->next = NULL;
	o->conn = c->id;
	o->len = HDR + len;
	o->buf[0] = (unsigned char)type;
	o->buf[1] = o->buf[2] = o->buf[3] = 0;
	hpct__put32(o->buf + 4, c->peer_id);
	hpct__put32(o->buf + 8, c->id);
	hpct__put32(o->buf + 12, seq);
	hpct__put32(o->buf + 16, total);
	hpct__put32(o->buf + 20, off);
	if (len)
		memcpy(o->buf + HDR, data, len);
	return o;
}

/* Queues one fabric message on a conn. */
static int enqueue(struct ofi_conn *c, int type, uint32_t seq, uint32_t total, uint32_t off,
                   const void *data, size_t len)
{
	struct op *o = make_op(c, type, seq, total, off, data, len);
	if (!o)
		return -ENOMEM;
	if (c->qtail)
		c->qtail->next = o;
	else
		c->qhead = o;
	c->qtail = o;
	c->queued += o->len;
	c->ctx->backlog += o->len;
	return 0;
}

/* One engine message as DATA fragments. */
static int enqueue_msg(struct ofi_conn *c, const unsigned char *data, size_t len)
{
	size_t off = 0;
	uint32_t seq = ++c->tx_seq;
	do {
		size_t k = len - off < FRAG - HDR ? len - off : FRAG - HDR;
		int rc = enqueue(c, W_DATA, seq, (uint32_t)len, (uint32_t)off, data + off, k);
		if (rc < 0)
			return rc;
		off += k;
	} while (off < len);
	return 0;
}

static void emit(struct ofi_ctx *x, struct ofi_conn *c, enum hpct_tevent_type type, int err,
                 const void *data, size_t len)
{
	struct hpct_tevent ev = {
		.type = type, .conn = &c->base, .err = err, .data = data, .len = len
	};
	if (type == HPCT_TEV_ACCEPTED) {
		ev.peer = (const struct sockaddr *)&c->peer;
		ev.peer_len = sizeof(c->peer);
	}
	x->nev++;
	x->cb(x->cbarg, &ev);
}

/* Tells the peer we closed, if it can be told at once; the FIN's
 * completion refers to no conn. */
static void send_fin(struct ofi_conn *c)
{
	if (c->state != O_OPEN || !c->peer_id)
		return;
	struct op *fin = make_op(c, W_FIN, c->tx_seq, 0, 0, NULL, 0);
	if (!fin)
		return;
	fin->conn = 0;
	if (fi_send(c->ctx->ep, fin->buf, fin->len, NULL, c->addr, fin) == 0)
		c->ctx->inflight += fin->len;
	else
		free(fin); /* then the peer learns it when its sends fail */
}

/* The conn failed or the peer left: one event, then it is forgotten. */
static void fail_conn(struct ofi_ctx *x, struct ofi_conn *c, enum hpct_tevent_type type, int err)
{
	if (c->state == O_CLOSED)
		return;
	c->state = O_CLOSED;
	drop_queue(c);
	emit(x, c, type, err, NULL, 0);
	conn_free(c);
}

/* ------------------------------------------------------------ ops */

/* libfabric initialises every provider it was built with on its first
 * fi_getinfo (Debian's: ~0.1 s of CPU, reading /proc/kallsyms for verbs),
 * and loading it runs libinfinipath's timer calibration (~0.2 s asleep). */
static int ofi_prepare(void)
{
	why[0] = 0;
	int rc = load();
	if (rc < 0)
		return rc;
	struct fi_info *hints = lib.dupinfo(NULL), *info = NULL;
	if (!hints)
		return -ENOMEM;
	hints->caps = FI_MSG;
	hints->ep_attr->type = FI_EP_RDM;
	const char *prov = getenv("HPCT_OFI_PROVIDER");
	hints->fabric_attr->prov_name = strdup(prov && *prov ? prov : "tcp;ofi_rxm");
	rc = lib.getinfo(FI_VERSION(1, 5), NULL, NULL, 0, hints, &info);
	lib.freeinfo(hints);
	if (info)
		lib.freeinfo(info);
	return 0; /* an unknown provider is named when the endpoint is made */
}

static int ofi_create(void **ctx_out)
{
	why[0] = 0;
	int rc = load();
	if (rc < 0)
		return rc;
	struct ofi_ctx *x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	*ctx_out = x;
	return 0;
}

static void ofi_destroy(void *arg)
{
	struct ofi_ctx *x = arg;
	for (uint32_t i = 0; i < x->nconns; i++)
		if (x->conns[i])
			conn_free(x->conns[i]);
	if (x->ep)
		fi_close(&x->ep->fid);
	if (x->cq)
		fi_close(&x->cq->fid);
	if (x->av)
		fi_close(&x->av->fid);
	if (x->domain)
		fi_close(&x->domain->fid);
	if (x->fabric)
		fi_close(&x->fabric->fid);
	if (x->info)
		lib.freeinfo(x->info);
	free(x->conns);
	free(x->avs);
	free(x->rxbuf);
	free(x);
}

static int post_recv(struct ofi_ctx *x, int slot)
{
	ssize_t rc = -FI_EAGAIN;
	for (int i = 0; i < 1000 && rc == -FI_EAGAIN; i++) {
		rc = fi_recv(x->ep, x->rxbuf + (size_t)slot * FRAG, FRAG, NULL, FI_ADDR_UNSPEC,
		             (void *)(intptr_t)(slot + 1));
		if (rc == -FI_EAGAIN)
			fi_cq_read(x->cq, NULL, 0); /* lets the provider make progress */
	}
	return (int)rc;
}

static int ofi_listen(void *arg, const struct sockaddr *addr, socklen_t len)
{
	struct ofi_ctx *x = arg;
	char host[INET6_ADDRSTRLEN], port[8], text[80];
	struct sockaddr_storage ss = { 0 };
	memcpy(&ss, addr, len);
	sa_text(&ss, text, sizeof(text));
	if (x->ep) {
		snprintf(why, sizeof(why),
		         "the ofi transport cannot move its endpoint to %s (in-process recovery "
		         "needs HPCT_TRANSPORT=tcp)",
		         text);
		return -EOPNOTSUPP;
	}
	const char *prov = getenv("HPCT_OFI_PROVIDER");
	if (!prov || !*prov)
		prov = "tcp;ofi_rxm";
	if (ss.ss_family == AF_INET6)
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, host, sizeof(host));
	else
		inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, host, sizeof(host));
	snprintf(port, sizeof(port), "%u",
	         ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
	                                        : ((struct sockaddr_in *)&ss)->sin_port));
	struct fi_info *hints = lib.dupinfo(NULL);
	if (!hints)
		return -ENOMEM;
	hints->caps = FI_MSG;
	hints->ep_attr->type = FI_EP_RDM;
	hints->tx_attr->msg_order = FI_ORDER_SAS;
	hints->rx_attr->msg_order = FI_ORDER_SAS;
	hints->domain_attr->threading = FI_THREAD_DOMAIN;
	hints->tx_attr->size = 64;
	hints->rx_attr->size = 64;
	hints->addr_format = ss.ss_family == AF_INET6 ? FI_SOCKADDR_IN6 : FI_SOCKADDR_IN;
	hints->fabric_attr->prov_name = strdup(prov);
	int rc = lib.getinfo(FI_VERSION(1, 5), host, port, FI_SOURCE, hints, &x->info);
	lib.freeinfo(hints);
	if (rc) {
		snprintf(why, sizeof(why),
		         "HPCT_OFI_PROVIDER=%s: no such provider here for a reliable datagram "
		         "endpoint at %s (fi_getinfo: %s; fi_info -l lists them)",
		         prov, text, ferr(rc));
		return -ENODEV;
	}
	struct fi_av_attr av = { .type = FI_AV_TABLE };
	struct fi_cq_attr cq = { .format = FI_CQ_FORMAT_MSG,
		                 .wait_obj = FI_WAIT_UNSPEC,
		                 .size = 256 };
	const char *step = "fi_fabric";
	if ((rc = lib.fabric(x->info->fabric_attr, &x->fabric, NULL)) == 0 &&
	    (step = "fi_domain", rc = fi_domain(x->fabric, x->info, &x->domain, NULL)) == 0 &&
	    (step = "fi_av_open", rc = fi_av_open(x->domain, &av, &x->av, NULL)) == 0 &&
	    (step = "fi_cq_open", rc = fi_cq_open(x->domain, &cq, &x->cq, NULL)) == 0 &&
	    (step = "fi_endpoint", rc = fi_endpoint(x->domain, x->info, &x->ep, NULL)) == 0 &&
	    (step = "fi_ep_bind", rc = fi_ep_bind(x->ep, &x->av->fid, 0)) == 0 &&
	    (rc = fi_ep_bind(x->ep, &x->cq->fid, FI_TRANSMIT | FI_RECV)) == 0)
		step = "fi_enable", rc = fi_enable(x->ep);
	if (rc) {
		snprintf(why, sizeof(why), "provider %s: %s for the endpoint at %s failed: %s",
		         x->info->fabric_attr->prov_name, step, text, ferr(rc));
		return rc == -FI_EADDRINUSE ? -EADDRINUSE : -EIO;
	}
	x->name_len = sizeof(x->name);
	if ((rc = fi_getname(&x->ep->fid, x->name, &x->name_len)) != 0) {
		snprintf(why, sizeof(why), "provider %s: fi_getname: %s",
		         x->info->fabric_attr->prov_name, ferr(rc));
		return -EIO;
	}
	x->rxbuf = malloc((size_t)NRX * FRAG);
	if (!x->rxbuf)
		return -ENOMEM;
	for (int i = 0; i < NRX; i++)
		if ((rc = post_recv(x, i)) != 0) {
			snprintf(why, sizeof(why), "provider %s: fi_recv: %s",
			         x->info->fabric_attr->prov_name, ferr(rc));
			return -EIO;
		}
	return 0;
}

static int ofi_connect(void *arg, const struct sockaddr *addr, socklen_t len, void *user,
                       struct hpct_tconn **conn_out)
{
	struct ofi_ctx *x = arg;
	if (!x->ep)
		return -ENOTCONN;
	struct sockaddr_storage ss = { 0 };
	memcpy(&ss, addr, len);
	struct ofi_conn *c = conn_new(x, O_CONNECTING);
	if (!c)
		return -ENOMEM;
	c->peer = ss;
	c->base.user = user;
	const unsigned char *name;
	size_t nlen = name_of(&ss, &name);
	int rc = av_of(x, name, nlen, &c->addr);
	if (rc == 0)
		rc = enqueue(c, W_SYN, 0, 0, 0, x->name, x->name_len);
	if (rc < 0) {
		conn_free(c);
		return rc;
	}
	*conn_out = &c->base;
	return 0;
}

static int try_send(struct ofi_ctx *x, struct ofi_conn *c);

static int ofi_send(struct hpct_tconn *conn, const void *buf, size_t len)
{
	struct ofi_conn *c = (struct ofi_conn *)conn;
	if (len > HPCT_TRANSPORT_MAX_MSG)
		return -EMSGSIZE;
	if (c->state == O_CLOSED)
		return -EPIPE;
	if (c->state == O_CONNECTING) { /* goes out once the peer has answered */
		struct op *o = malloc(sizeof(*o) + len), **pp = &c->held;
		if (!o)
			return -ENOMEM;
		o->next = NULL;
		o->len = len;
		memcpy(o->buf, buf, len);
		while (*pp)
			pp = &(*pp)->next;
		*pp = o;
		return 0;
	}
	int rc = enqueue_msg(c, buf, len);
	if (rc == 0)
		try_send(c->ctx, c); /* at once, as TCP writes: a close may follow */
	return rc;
}

static void ofi_set_max_msg(struct hpct_tconn *conn, size_t max)
{
	((struct ofi_conn *)conn)->max_msg = max;
}

static size_t ofi_pending(struct hpct_tconn *conn)
{
	return ((struct ofi_conn *)conn)->queued;
}

/* Queued bytes and those still in flight: a provider that completes
 * sends in the background (sockets) drops them when the endpoint closes. */
static size_t ofi_backlog(void *arg)
{
	struct ofi_ctx *x = arg;
	return x->backlog + x->inflight;
}

static void ofi_close(struct hpct_tconn *conn)
{
	struct ofi_conn *c = (struct ofi_conn *)conn;
	if (c->state == O_CLOSED)
		return;
	send_fin(c);
	c->state = O_CLOSED;
	conn_free(c);
}

static int ofi_name(void *arg, void *buf, size_t *len)
{
	struct ofi_ctx *x = arg;
	if (!x->ep)
		return -ENOTCONN;
	if (*len < x->name_len)
		return -ENOSPC;
	memcpy(buf, x->name, x->name_len);
	*len = x->name_len;
	return 0;
}

static void ofi_peer_name(struct hpct_tconn *conn, char *buf, size_t len)
{
	sa_text(&((struct ofi_conn *)conn)->peer, buf, len);
}

/* ------------------------------------------------------------ progress */

/* A DATA piece into its message; 0 when it does not fit what the message
 * said it is (the peer is broken). */
static int take_piece(struct ofi_conn *c, uint32_t seq, uint32_t total, uint32_t off,
                      const unsigned char *p, size_t plen)
{
	if (seq < c->rx_next || (size_t)off + plen > total)
		return 0;
	struct part *q = c->parts;
	while (q && q->seq != seq)
		q = q->next;
	if (!q) {
		if (!(q = malloc(sizeof(*q) + (total ? total : 1))))
			return 0;
		q->seq = seq;
		q->total = total;
		q->got = 0;
		q->next = c->parts;
		c->parts = q;
	}
	if (q->total != total || q->got + plen > total)
		return 0;
	memcpy(q->data + off, p, plen);
	q->got += (uint32_t)plen;
	return 1;
}

/* Hands on the messages that are whole, in the order they were sent, then
 * a FIN that came after the last of them. */
static void hand_on(struct ofi_ctx *x, struct ofi_conn *c)
{
	for (;;) {
		struct part **pp = &c->parts;
		while (*pp && (*pp)->seq != c->rx_next)
			pp = &(*pp)->next;
		struct part *q = *pp;
		if (!q || q->got != q->total)
			break;
		*pp = q->next;
		c->rx_next++;
		uint32_t id = c->id;
		emit(x, c, HPCT_TEV_MESSAGE, 0, q->data, q->total);
		free(q);
		if (conn_by_id(x, id) != c || c->state == O_CLOSED)
			return; /* the engine closed it meanwhile */
	}
	if (c->fin_after && c->rx_next >= c->fin_after)
		fail_conn(x, c, HPCT_TEV_CLOSED, 0);
}

static void on_message(struct ofi_ctx *x, const unsigned char *m, size_t len)
{
	if (len < HDR)
		return;
	int type = m[0];
	uint32_t dst = hpct__get32(m + 4), src = hpct__get32(m + 8), seq = hpct__get32(m + 12), total = hpct__get32(m + 16),
	         off = hpct__get32(m + 20);
	const unsigned char *p = m + HDR;
	size_t plen = len - HDR;
	if (type == W_SYN) { /* its payload: the sender's endpoint name */
		if (plen == 0 || plen > HPCT_RAW_ADDR_MAX)
			return;
		struct ofi_conn *s = conn_new(x, O_OPEN);
		if (!s)
			return;
		struct hpct_raw_addr *ra = (struct hpct_raw_addr *)&s->peer;
		ra->family = AF_UNSPEC;
		ra->len = (uint16_t)plen;
		memcpy(ra->bytes, p, plen);
		s->peer_id = src;
		if (av_of(x, p, plen, &s->addr) < 0 || enqueue(s, W_SYNACK, 0, 0, 0, NULL, 0) < 0) {
			conn_free(s);
			return;
		}
		emit(x, s, HPCT_TEV_ACCEPTED, 0, NULL, 0);
		return;
	}
	struct ofi_conn *c = conn_by_id(x, dst);
	if (!c || c->state == O_CLOSED)
		return;
	c->last_heard = now_s();
	switch (type) {
	case W_SYNACK:
		if (c->state != O_CONNECTING)
			return;
		c->peer_id = src;
		c->state = O_OPEN;
		c->failing_since = 0;
		/* the SYN is done: what waited goes out in order */
		for (struct op *o = c->held, *n; o; o = n) {
			n = o->next;
			enqueue_msg(c, o->buf, o->len);
			free(o);
		}
		c->held = NULL;
		emit(x, c, HPCT_TEV_CONNECTED, 0, NULL, 0);
		break;
	case W_DATA:
		if (total > c->max_msg) { /* closed for its size, as over TCP */
			send_fin(c);
			fail_conn(x, c, HPCT_TEV_CLOSED, HPCT_EPROTO);
			return;
		}
		if (!take_piece(c, seq, total, off, p, plen)) {
			fail_conn(x, c, HPCT_TEV_CLOSED, HPCT_EPROTO);
			return;
		}
		hand_on(x, c);
		break;
	case W_FIN:
		c->fin_after = seq + 1; /* +1: 0 means none */
		hand_on(x, c);
		break;
	case W_PING:
		break;
	}
}

/* Hands a conn's queued fabric messages to fi_send, in order, until the
 * provider says not now: 0 when all went, -FI_EAGAIN, or another error. */
static int try_send(struct ofi_ctx *x, struct ofi_conn *c)
{
	while (c->qhead) {
		struct op *o = c->qhead;
		ssize_t rc = fi_send(x->ep, o->buf, o->len, NULL, c->addr, o);
		if (rc == -FI_ENOENT)
			rc = -FI_EAGAIN; /* the sockets provider's word for a peer not up yet */
		if (rc == -FI_EAGAIN)
			return (int)rc;
		c->failing_since = 0;
		c->qhead = o->next;
		if (!c->qhead)
			c->qtail = NULL;
		c->queued -= o->len;
		x->backlog -= o->len;
		if (rc == 0)
			x->inflight += o->len;
		if (rc != 0) {
			free(o);
			return (int)rc;
		}
	}
	return 0;
}

/* Retries every conn's queued messages; a conn refused for too long
 * failed: its SYN (nobody listens) or its peer (gone). */
static void push_sends(struct ofi_ctx *x, double now)
{
	for (uint32_t i = 0; i < x->nconns && x->backlog; i++) {
		struct ofi_conn *c = x->conns[i];
		if (!c || !c->qhead)
			continue;
		int rc = try_send(x, c);
		if (rc == -FI_EAGAIN) {
			if (!c->failing_since)
				c->failing_since = now;
			int syn = c->state == O_CONNECTING;
			/* a peer we still hear from is alive: the provider is only out
			 * of room (its queues also carry rendezvous traffic) */
			double quiet = now - (c->last_heard > c->failing_since ? c->last_heard
			                                                       : c->failing_since);
			if (syn ? now - c->failing_since > SYN_REFUSED_AFTER : quiet > DEAD_AFTER)
				fail_conn(x, c, syn ? HPCT_TEV_CONNECT_FAILED : HPCT_TEV_CLOSED,
				          syn ? -ECONNREFUSED : -ECONNRESET);
		} else if (rc != 0) {
			fail_conn(x, c, HPCT_TEV_CLOSED, -EIO);
		}
	}
}

/* Peers we have not heard from lately get a PING: a send to a dead one
 * starts failing, which is how it is found. */
static void ping_silent(struct ofi_ctx *x, double now)
{
	for (uint32_t i = 0; i < x->nconns; i++) {
		struct ofi_conn *c = x->conns[i];
		if (!c || c->state != O_OPEN || c->qhead)
			continue;
		if (now - c->last_heard > PING_AFTER && now - c->last_ping > PING_AFTER) {
			c->last_ping = now;
			enqueue(c, W_PING, 0, 0, 0, NULL, 0);
		}
	}
}

/* A send completed: the peer takes what we send, so a provider that says
 * -FI_EAGAIN meanwhile is only out of room, not talking to the dead. */
static void send_done(struct ofi_ctx *x, struct op *o)
{
	x->inflight -= o->len;
	struct ofi_conn *c = conn_by_id(x, o->conn);
	if (c)
		c->failing_since = 0;
	free(o);
}

/* A receive (its slot is posted again) or a send, completed. */
static void on_completion(struct ofi_ctx *x, const struct fi_cq_msg_entry *e)
{
	if (e->flags & FI_RECV) {
		int slot = (int)(intptr_t)e->op_context - 1;
		on_message(x, x->rxbuf + (size_t)slot * FRAG, e->len);
		post_recv(x, slot);
	} else {
		send_done(x, e->op_context);
	}
}

static void drain_cq(struct ofi_ctx *x)
{
	struct fi_cq_msg_entry e[16];
	for (;;) {
		ssize_t n = fi_cq_read(x->cq, e, 16);
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry er = { 0 };
			if (fi_cq_readerr(x->cq, &er, 0) <= 0)
				return;
			intptr_t slot = (intptr_t)er.op_context;
			if (er.flags & FI_RECV) {
				if (slot >= 1 && slot <= NRX)
					post_recv(x, (int)slot - 1);
			} else if (er.op_context) {
				struct op *o = er.op_context;
				struct ofi_conn *c = conn_by_id(x, o->conn);
				x->inflight -= o->len;
				free(o);
				if (c)
					fail_conn(x, c, HPCT_TEV_CLOSED, -EIO);
			}
			continue;
		}
		if (n <= 0)
			return;
		for (ssize_t i = 0; i < n; i++)
			on_completion(x, &e[i]);
	}
}

static int ofi_progress(void *arg, int timeout_ms, hpct_tevent_cb cb, void *cbarg)
{
	struct ofi_ctx *x = arg;
	if (!x->ep)
		return 0;
	x->cb = cb;
	x->cbarg = cbarg;
	x->nev = 0;
	double now = now_s();
	push_sends(x, now);
	drain_cq(x);
	if (x->nev == 0 && timeout_ms != 0) {
		if (timeout_ms > 0)
			ping_silent(x, now);
		push_sends(x, now);
		int wait = timeout_ms;
		if (x->backlog && (wait < 0 || wait > RETRY_MS))
			wait = RETRY_MS;
		/* rxm accepts incoming connections only while we call into it,
		 * and its connection requests do not wake fi_cq_sread: come
		 * round often (at 100 ms, 64 ranks took ~225 ms gated; at 10,
		 * ~160; at 2 the wakeups cost more than they save) */
		if (wait < 0 || wait > 10)
			wait = 10;
		struct fi_cq_msg_entry e;
		ssize_t n = fi_cq_sread(x->cq, &e, 1, NULL, wait);
		if (n == 1)
			on_completion(x, &e);
		drain_cq(x);
		push_sends(x, now_s());
	}
	x->cb = NULL;
	return x->nev;
}

const struct hpct_transport_ops hpct_transport_ofi = {
	.name = "ofi",
	.create = ofi_create,
	.destroy = ofi_destroy,
	.listen = ofi_listen,
	.connect = ofi_connect,
	.send = ofi_send,
	.set_max_msg = ofi_set_max_msg,
	.pending = ofi_pending,
	.backlog = ofi_backlog,
	.progress = ofi_progress,
	.close = ofi_close,
	.peer_name = ofi_peer_name,
	.why = ofi_why,
	.self_name = ofi_name,
	.prepare = ofi_prepare,
};
