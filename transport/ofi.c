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
 * on the completion queue's wait object: no busy polling.
 *
 * Anyone who can reach the endpoint can send it anything, so what a peer
 * can make it hold is bounded (ofi_internal.h has the figures): a message
 * is whole only when its pieces covered each of its bytes exactly once, and
 * its buffer grows with what arrived; a conn has at most MAX_PARTS messages
 * in reassembly; conns not yet identified by their user (MAX_PENDING) and
 * the address-vector entries their SYNs named (MAX_STRANGER_AV) are
 * capped, and such conns time out; a SYN never answered fails the connect.
 * Each refusal names the peer in the log, once per kind (a silent conn:
 * once per peer, for the first SILENT_NAMED peers).  A conn given up while
 * its SYN was out lingers (O_ABANDONED) to answer a late SYNACK with a FIN,
 * so that the acceptor's side closes at once instead of waiting.
 *
 * This file: loading libfabric, the endpoint, its address vector and the
 * transport's table; ofi_conn.c: the emulated connections; ofi_piece.c:
 * putting messages together. */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
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

#include "bootstrap/base/bytes.h"
#include "hpct/hpct.h"
#include "transport/ofi_internal.h"
#include "transport/transport.h"

#define HPCT_STR_(x) #x
#define HPCT_STR(x)  HPCT_STR_(x)

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
	/* what loading it and its first fi_getinfo (its providers' start)
	 * cost this process, wall and CPU seconds; said at INFO */
	double load_s, load_cpu_s, ini_s, ini_cpu_s;
	int ini_done;
} lib;

static double cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

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
	double t0 = hpct__ofi_now_s(), c0 = cpu_s();
	void *h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
	lib.load_s = hpct__ofi_now_s() - t0;
	lib.load_cpu_s = cpu_s() - c0;
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

/* fi_getinfo; the first call's cost is its providers' start. */
static int getinfo(const char *node, const char *service, uint64_t flags,
                   const struct fi_info *hints, struct fi_info **info)
{
	double t0 = hpct__ofi_now_s(), c0 = cpu_s();
	int rc = lib.getinfo(FI_VERSION(1, 5), node, service, flags, hints, info);
	if (!lib.ini_done) {
		lib.ini_done = 1;
		lib.ini_s = hpct__ofi_now_s() - t0;
		lib.ini_cpu_s = cpu_s() - c0;
	}
	return rc;
}

static const char *ferr(int rc)
{
	return lib.strerror ? lib.strerror(rc < 0 ? -rc : rc) : "?";
}

double hpct__ofi_now_s(void)
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

static int av_find(struct ofi_ctx *x, const unsigned char *name, size_t len)
{
	for (size_t i = 0; i < x->navs; i++)
		if (x->avs[i].len == len && memcmp(x->avs[i].name, name, len) == 0)
			return (int)i;
	return -1;
}

/* Unused entries of strangers leave the address vector: room for others. */
static void av_reclaim(struct ofi_ctx *x)
{
	for (size_t i = 0; i < x->navs; i++) {
		struct av_entry *e = &x->avs[i];
		if (e->len && !e->trusted && !e->users) {
			fi_av_remove(x->av, &e->addr, 1, 0);
			e->len = 0;
			x->nstranger--;
		}
	}
}

int hpct__ofi_av_attach(struct ofi_ctx *x, struct ofi_conn *c, const unsigned char *name,
                        size_t len, int trusted)
{
	if (len == 0 || len > HPCT_RAW_ADDR_MAX)
		return -EINVAL;
	int i = av_find(x, name, len);
	if (i < 0) {
		if (!trusted && x->nstranger >= MAX_STRANGER_AV) {
			av_reclaim(x);
			if (x->nstranger >= MAX_STRANGER_AV)
				return -EAGAIN;
		}
		for (i = 0; (size_t)i < x->navs && x->avs[i].len; i++)
			;
		if ((size_t)i == x->navs && x->navs == x->capavs) {
			size_t cap = x->capavs ? 2 * x->capavs : 16;
			void *p = realloc(x->avs, cap * sizeof(*x->avs));
			if (!p)
				return -ENOMEM;
			x->avs = p;
			x->capavs = cap;
		}
		struct av_entry *e = &x->avs[i];
		if (fi_av_insert(x->av, name, 1, &e->addr, 0, NULL) != 1)
			return -EHOSTUNREACH;
		if ((size_t)i == x->navs)
			x->navs++;
		memcpy(e->name, name, len);
		e->len = len;
		e->users = 0;
		e->trusted = 0;
		x->nstranger++;
	}
	if (trusted)
		hpct__ofi_av_trust(x, i);
	x->avs[i].users++;
	c->av = i;
	c->addr = x->avs[i].addr;
	return 0;
}

void hpct__ofi_av_trust(struct ofi_ctx *x, int av)
{
	if (av < 0 || x->avs[av].trusted)
		return;
	x->avs[av].trusted = 1;
	x->nstranger--;
}

void hpct__ofi_av_detach(struct ofi_ctx *x, struct ofi_conn *c)
{
	if (c->av < 0)
		return;
	x->avs[c->av].users--;
	c->av = -1;
}

void hpct__ofi_addr_text(const struct sockaddr_storage *ss, char *buf, size_t len)
{
	sa_text(ss, buf, len);
}

static const char *const refusal_names[R_KINDS] = {
	[R_PIECE] = "pieces that did not fit their message",
	[R_SIZE] = "messages longer than their connection may receive",
	[R_PARTS] = "messages past " HPCT_STR(MAX_PARTS) " in reassembly on one connection",
	[R_RANGES] = "messages in more than " HPCT_STR(MAX_RANGES) " separate runs",
	[R_WINDOW] = "pieces too far past the bytes received",
	[R_PENDING] = "connections closed for " HPCT_STR(MAX_PENDING) " newer unidentified ones",
	[R_SILENT] = "connections silent for " HPCT_STR(PENDING_AFTER) " s",
	[R_AV] = "SYNs past " HPCT_STR(MAX_STRANGER_AV) " address-vector entries of strangers",
	[R_SYN] = "SYNs without a usable name or room",
};

/* A refusal's line, with a note on what is logged of its kind. */
__attribute__((format(printf, 2, 0))) static void refusal_line(const char *note, const char *fmt,
                                                               va_list ap)
{
	char line[400];
	vsnprintf(line, sizeof(line), fmt, ap);
	hpct__transport_log("ofi: %s (%s)", line, note);
}

void hpct__ofi_refuse(struct ofi_ctx *x, enum refusal kind, const char *fmt, ...)
{
	if (x->refused[kind]++)
		return; /* once: a stranger's flood is not a flood of lines */
	va_list ap;
	va_start(ap, fmt);
	refusal_line("the first of its kind here; more are counted", fmt, ap);
	va_end(ap);
}

void hpct__ofi_refuse_silent(struct ofi_ctx *x, const char *who, const char *fmt, ...)
{
	x->refused[R_SILENT]++;
	for (unsigned i = 0; i < x->nsilent_named; i++)
		if (strcmp(x->silent_named[i], who) == 0)
			return;
	if (x->nsilent_named >= SILENT_NAMED)
		return;
	snprintf(x->silent_named[x->nsilent_named++], sizeof(x->silent_named[0]), "%s", who);
	static const char note[] = "each of the first " HPCT_STR(
	        SILENT_NAMED) " such peers named once; more are counted";
	va_list ap;
	va_start(ap, fmt);
	refusal_line(note, fmt, ap);
	va_end(ap);
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
	rc = getinfo(NULL, NULL, 0, hints, &info);
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
	if (x->ep && hpct__transport_info_on())
		hpct__transport_info("ofi: %lu connects (%lu refused while nobody listened, %lu "
		                     "unanswered), %lu sends retried, %lu pings, %.0f ms waiting "
		                     "for completions",
		                     x->stats.connects, x->stats.refused, x->stats.unanswered,
		                     x->stats.retried, x->stats.pings, x->stats.waited_s * 1e3);
	for (int k = 0; k < R_KINDS; k++)
		if (x->refused[k] > 1)
			hpct__transport_log("ofi: refused %lu times in all: %s", x->refused[k],
			                    refusal_names[k]);
	for (uint32_t i = 0; i < x->nconns; i++)
		if (x->conns[i])
			hpct__ofi_conn_free(x->conns[i]);
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
	free(x->gens);
	free(x->avs);
	free(x->rxbuf);
	free(x);
}

int hpct__ofi_post_recv(struct ofi_ctx *x, int slot)
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
	double t0 = hpct__ofi_now_s(), c0 = cpu_s();
	int first = !lib.ini_done; /* then its providers' start is said apart */
	int rc = getinfo(host, port, FI_SOURCE, hints, &x->info);
	if (first) {
		t0 += lib.ini_s;
		c0 += lib.ini_cpu_s;
	}
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
		if ((rc = hpct__ofi_post_recv(x, i)) != 0) {
			snprintf(why, sizeof(why), "provider %s: fi_recv: %s",
			         x->info->fabric_attr->prov_name, ferr(rc));
			return -EIO;
		}
	if (hpct__transport_info_on()) /* where a slow start went */
		hpct__transport_info(
		        "ofi: endpoint at %s (provider %s) ready in %.1f ms (%.1f ms CPU); this "
		        "process's libfabric: loaded in %.0f ms (%.1f ms CPU), its providers "
		        "started by the first fi_getinfo in %.0f ms (%.1f ms CPU)",
		        text, x->info->fabric_attr->prov_name, (hpct__ofi_now_s() - t0) * 1e3,
		        (cpu_s() - c0) * 1e3, lib.load_s * 1e3, lib.load_cpu_s * 1e3,
		        lib.ini_s * 1e3, lib.ini_cpu_s * 1e3);
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
	struct ofi_conn *c = hpct__ofi_conn_new(x, O_CONNECTING);
	if (!c)
		return -ENOMEM;
	c->peer = ss;
	c->base.user = user;
	const unsigned char *name;
	size_t nlen = name_of(&ss, &name);
	int rc = hpct__ofi_av_attach(x, c, name, nlen, 1);
	if (rc == 0)
		rc = hpct__ofi_enqueue(c, W_SYN, 0, 0, 0, x->name, x->name_len);
	if (rc < 0) {
		hpct__ofi_conn_free(c);
		return rc;
	}
	x->stats.connects++;
	*conn_out = &c->base;
	return 0;
}

static int ofi_send(struct hpct_tconn *conn, const void *buf, size_t len)
{
	struct ofi_conn *c = (struct ofi_conn *)conn;
	if (len > HPCT_TRANSPORT_MAX_MSG)
		return -EMSGSIZE;
	if (c->state == O_CLOSED || c->state == O_ABANDONED)
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
	int rc = hpct__ofi_enqueue_msg(c, buf, len);
	if (rc == 0)
		hpct__ofi_try_send(c->ctx, c); /* at once, as TCP writes: a close may follow */
	return rc;
}

static void ofi_set_max_msg(struct hpct_tconn *conn, size_t max)
{
	struct ofi_conn *c = (struct ofi_conn *)conn;
	c->max_msg = max;
	if (c->pending && max > PENDING_ROOM)
		hpct__ofi_conn_identified(c);
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
	if (c->state == O_CLOSED || c->state == O_ABANDONED)
		return; /* (abandoned: closed for its user, the transport frees it) */
	if (c->state == O_CONNECTING) {
		hpct__ofi_conn_abandon(c);
		return;
	}
	hpct__ofi_send_fin(c);
	c->state = O_CLOSED;
	hpct__ofi_conn_free(c);
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
	.progress = hpct__ofi_progress,
	.close = ofi_close,
	.peer_name = ofi_peer_name,
	.why = ofi_why,
	.self_name = ofi_name,
	.prepare = ofi_prepare,
};
