/* The rootless store (see store.h): this rank's server thread, and the
 * client side that finds a key's home rank by hash and asks it. */
#include "bootstrap/store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/base/auth.h"
#include "bootstrap/topo/derive.h"
#include "bootstrap/base/log.h"
#include "bootstrap/base/sock.h"
#include "bootstrap/base/util.h"
#include "bootstrap/world.h"
#include "bootstrap/base/bytes.h"

enum { OP_SET = 1, OP_GET, OP_ADD, OP_CAS, OP_CHECK, OP_WAIT, OP_DEL, OP_COUNT };

#define HDR        13 /* op, namespace, key length */
#define KEY_SHOWN  100
#define SLACK_S    5.0 /* past a parked wait, before the client gives up */
#define PROBE_S    0.3 /* to find ranks that do not answer, after a timeout */
#define MAX_CONNS  4096

/* ------------------------------------------------------------ server */

struct entry {
	struct entry *next;
	uint64_t ns;
	char *key;
	unsigned char *val;
	size_t len;
};

struct sconn {
	int fd;
	unsigned char *in;
	size_t inlen, incap;
	unsigned char *out;
	size_t outlen, outoff;
	/* a parked GET or WAIT */
	int parked;
	uint8_t op;
	uint64_t ns;
	char *key;
	double deadline;
	/* with a secret: admitted once it proved it (auth.h) */
	int admitted;
	struct hpct_auth_srv auth;
};

static struct server {
	pthread_mutex_t mu; /* start only: the thread owns everything else */
	int started, err;
	char where[HPCT_ADDRSTRLEN];
	int lfd;
	struct entry **tab;
	size_t nb, n;
	struct sconn *c;
	int nc;
	/* with HPCT_SECRET: what a client proves, and the secret (a copy) */
	struct hpct_auth_id id;
	unsigned char *secret;
	size_t slen;
} srv = { .mu = PTHREAD_MUTEX_INITIALIZER, .lfd = -1 };

static size_t bucket(uint64_t ns, const char *key)
{
	return (size_t)(hpct__hash(key, strlen(key), ns) & (srv.nb - 1));
}

static struct entry **find(uint64_t ns, const char *key)
{
	struct entry **e = &srv.tab[bucket(ns, key)];
	while (*e && ((*e)->ns != ns || strcmp((*e)->key, key) != 0))
		e = &(*e)->next;
	return e;
}

static void grow(void)
{
	size_t nb = srv.nb * 2;
	struct entry **t = calloc(nb, sizeof(*t));
	if (!t)
		return;
	struct entry **old = srv.tab;
	size_t onb = srv.nb;
	srv.tab = t;
	srv.nb = nb;
	for (size_t i = 0; i < onb; i++)
		for (struct entry *e = old[i], *next; e; e = next) {
			next = e->next;
			size_t b = bucket(e->ns, e->key);
			e->next = t[b];
			t[b] = e;
		}
	free(old);
}

/* Sets (or replaces) a value; 0 or HPCT_ENOMEM. */
static int put(uint64_t ns, const char *key, const void *val, size_t len)
{
	struct entry **pe = find(ns, key), *e = *pe;
	unsigned char *v = malloc(len ? len : 1);
	if (!v)
		return HPCT_ENOMEM;
	memcpy(v, val, len);
	if (!e) {
		if (!(e = calloc(1, sizeof(*e))) || !(e->key = strdup(key))) {
			free(e);
			free(v);
			return HPCT_ENOMEM;
		}
		e->ns = ns;
		*pe = e;
		if (++srv.n > srv.nb * 2)
			grow();
	} else {
		free(e->val);
	}
	e->val = v;
	e->len = len;
	return 0;
}

static void reply(struct sconn *c, int32_t status, const void *a, size_t alen, const void *b,
                  size_t blen)
{
	size_t need = c->outlen + 8 + alen + blen;
	unsigned char *o = realloc(c->out, need);
	if (!o) {
		close(c->fd);
		c->fd = -1;
		return;
	}
	c->out = o;
	o += c->outlen;
	hpct__put32(o, (uint32_t)(4 + alen + blen));
	hpct__put32(o + 4, (uint32_t)status);
	if (alen)
		memcpy(o + 8, a, alen);
	if (blen)
		memcpy(o + 8 + alen, b, blen);
	c->outlen = need;
}

static void reply_value(struct sconn *c, const struct entry *e)
{
	unsigned char l[4];
	hpct__put32(l, (uint32_t)e->len);
	reply(c, 0, l, 4, e->val, e->len);
}

static void unpark(struct sconn *c)
{
	free(c->key);
	c->key = NULL;
	c->parked = 0;
}

/* A key came into being: answer whoever waits for it. */
static void woken(uint64_t ns, const char *key)
{
	struct entry *e = *find(ns, key);
	for (int i = 0; i < srv.nc; i++) {
		struct sconn *c = &srv.c[i];
		if (!c->parked || c->ns != ns || strcmp(c->key, key) != 0)
			continue;
		if (c->op == OP_GET)
			reply_value(c, e);
		else
			reply(c, 0, NULL, 0, NULL, 0);
		unpark(c);
	}
}

static int counter_of(const struct entry *e, int64_t *v)
{
	char buf[32];
	if (!e) {
		*v = 0;
		return 0;
	}
	if (e->len == 0 || e->len >= sizeof(buf))
		return HPCT_EINVAL;
	memcpy(buf, e->val, e->len);
	buf[e->len] = 0;
	char *end;
	errno = 0;
	long long x = strtoll(buf, &end, 10);
	if (errno || *end)
		return HPCT_EINVAL;
	*v = x;
	return 0;
}

/* One request; 0, or -1 when the connection must close (malformed). */
static int serve(struct sconn *c, const unsigned char *p, size_t len)
{
	if (len < HDR)
		return -1;
	uint8_t op = p[0];
	uint64_t ns = hpct__get64(p + 1);
	uint32_t klen = hpct__get32(p + 9);
	if (klen > HPCT_STORE_MAX_KEY || klen > len - HDR)
		return -1;
	char key[HPCT_STORE_MAX_KEY + 1];
	memcpy(key, p + HDR, klen);
	key[klen] = 0;
	if (strlen(key) != klen)
		return -1;
	p += HDR + klen;
	len -= HDR + klen;
	struct entry **pe = find(ns, key), *e = *pe;
	unsigned char b[8];
	switch (op) {
	case OP_SET: {
		if (len < 4 || hpct__get32(p) != len - 4)
			return -1;
		int rc = put(ns, key, p + 4, len - 4);
		reply(c, rc, NULL, 0, NULL, 0);
		if (rc == 0)
			woken(ns, key);
		return 0;
	}
	case OP_GET:
	case OP_WAIT: {
		if (len != 8)
			return -1;
		if (e) {
			if (op == OP_GET)
				reply_value(c, e);
			else
				reply(c, 0, NULL, 0, NULL, 0);
			return 0;
		}
		int64_t ms = (int64_t)hpct__get64(p);
		if (!(c->key = strdup(key))) {
			reply(c, HPCT_ENOMEM, NULL, 0, NULL, 0);
			return 0;
		}
		c->parked = 1;
		c->op = op;
		c->ns = ns;
		c->deadline = hpct__now() + (ms < 0 ? 0 : (double)ms / 1000);
		return 0;
	}
	case OP_ADD: {
		if (len != 8)
			return -1;
		int64_t v = 0;
		int rc = counter_of(e, &v);
		if (rc == 0 && __builtin_add_overflow(v, (int64_t)hpct__get64(p), &v))
			rc = HPCT_EINVAL; /* the counter would overflow: left as it is */
		if (rc == 0) {
			char text[32];
			int n = snprintf(text, sizeof(text), "%" PRId64, v);
			rc = put(ns, key, text, (size_t)n);
		}
		hpct__put64(b, (uint64_t)v);
		reply(c, rc, b, rc ? 0 : 8, NULL, 0);
		if (rc == 0 && !e)
			woken(ns, key);
		return 0;
	}
	case OP_CAS: {
		if (len < 4)
			return -1;
		uint32_t el = hpct__get32(p);
		if (el > len - 4 || len - 4 - el < 4)
			return -1;
		const unsigned char *exp = p + 4, *des = p + 8 + el;
		uint32_t dl = hpct__get32(p + 4 + el);
		if (dl != len - 8 - el)
			return -1;
		int rc = 0, made = 0;
		if (!e) {
			if (el == 0) {
				rc = put(ns, key, des, dl);
				made = rc == 0;
			}
		} else if (e->len == el && memcmp(e->val, exp, el) == 0) {
			rc = put(ns, key, des, dl);
		}
		e = *find(ns, key);
		if (rc)
			reply(c, rc, NULL, 0, NULL, 0);
		else if (e)
			reply_value(c, e);
		else { /* missing, and something else was expected: c10d answers that */
			hpct__put32(b, el);
			reply(c, 0, b, 4, exp, el);
		}
		if (made)
			woken(ns, key);
		return 0;
	}
	case OP_CHECK:
	case OP_DEL:
		if (len != 0)
			return -1;
		b[0] = e != NULL;
		if (op == OP_DEL && e) {
			*pe = e->next;
			free(e->key);
			free(e->val);
			free(e);
			srv.n--;
		}
		reply(c, 0, b, 1, NULL, 0);
		return 0;
	case OP_COUNT: {
		if (len != 0)
			return -1;
		int64_t n = 0;
		for (size_t i = 0; i < srv.nb; i++)
			for (struct entry *x = srv.tab[i]; x; x = x->next)
				n += x->ns == ns;
		hpct__put64(b, (uint64_t)n);
		reply(c, 0, b, 8, NULL, 0);
		return 0;
	}
	}
	return -1;
}

static void drop(int i)
{
	struct sconn *c = &srv.c[i];
	if (c->fd >= 0)
		close(c->fd);
	free(c->in);
	free(c->out);
	free(c->key);
	srv.c[i] = srv.c[--srv.nc];
}

/* Serves each whole frame buffered, unless a request is parked (a client
 * sends one at a time).  -1: close the connection. */
static int serve_buffered(struct sconn *c)
{
	size_t off = 0;
	int rc = 0;
	while (!c->parked && c->inlen - off >= 4) {
		uint32_t fl = hpct__get32(c->in + off);
		if (fl > HPCT_STORE_MAX_FRAME) {
			rc = -1;
			break;
		}
		if (c->inlen - off - 4 < fl)
			break;
		if ((rc = serve(c, c->in + off + 4, fl)) < 0)
			break;
		off += 4 + (size_t)fl;
	}
	memmove(c->in, c->in + off, c->inlen - off);
	c->inlen -= off;
	return rc;
}

/* With a secret, a connection's first bytes are its proof (auth.h): 0 when
 * admitted or still proving, -1 to close it (refused, logged with the
 * address it came from). */
static void refused(const struct sconn *c, const char *why)
{
	char from[HPCT_ADDRSTRLEN] = "?";
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	if (getpeername(c->fd, (struct sockaddr *)&ss, &sl) == 0)
		hpct__addr_str((struct sockaddr *)&ss, from, sizeof(from));
	HPCT_WARN(HPCT_SUB_NET, "store: rank %u refused a connection from %s: %s", srv.id.server,
	          from, why);
}

static int admit(struct sconn *c)
{
	size_t used, outlen;
	unsigned char out[HPCT_AUTH_LEN];
	char why[200];
	int rc = hpct__auth_server_feed(&c->auth, srv.secret, srv.slen, &srv.id, c->in, c->inlen,
	                                &used, out, &outlen, why, sizeof(why));
	memmove(c->in, c->in + used, c->inlen - used);
	c->inlen -= used;
	if (outlen)
		send(c->fd, out, outlen, MSG_DONTWAIT | MSG_NOSIGNAL); /* 112 bytes, fresh socket */
	if (rc == HPCT_AUTH_REFUSE) {
		refused(c, why);
		return -1;
	}
	c->admitted = rc == HPCT_AUTH_ADMIT;
	return 0;
}

/* Reads what came and serves it.  -1: close it. */
static int on_readable(struct sconn *c)
{
	for (;;) {
		if (c->incap - c->inlen < 65536) {
			size_t cap = c->incap ? c->incap * 2 : 65536;
			if (cap > HPCT_STORE_MAX_FRAME + 65536)
				cap = HPCT_STORE_MAX_FRAME + 65536;
			if (cap <= c->inlen)
				return -1;
			unsigned char *in = realloc(c->in, cap);
			if (!in)
				return -1;
			c->in = in;
			c->incap = cap;
		}
		ssize_t r = recv(c->fd, c->in + c->inlen, c->incap - c->inlen, MSG_DONTWAIT);
		char why[160];
		if (r == 0 && !c->admitted && hpct__auth_server_gone(&c->auth, why, sizeof(why)))
			refused(c, why);
		if (r == 0)
			return -1;
		if (r < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
		c->inlen += (size_t)r;
		if (!c->admitted) {
			if (admit(c) < 0)
				return -1;
			if (!c->admitted)
				continue;
		}
		if (serve_buffered(c) < 0)
			return -1;
	}
}

static void flush(struct sconn *c)
{
	while (c->fd >= 0 && c->outoff < c->outlen) {
		ssize_t w = send(c->fd, c->out + c->outoff, c->outlen - c->outoff,
		                 MSG_DONTWAIT | MSG_NOSIGNAL);
		if (w < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
				close(c->fd);
				c->fd = -1;
			}
			return;
		}
		c->outoff += (size_t)w;
	}
	c->outlen = c->outoff = 0;
}

/* For the fuzz target: `data` as bytes from one connection, served as the
 * thread would (replies kept, then dropped), then every key forgotten. */
HPCT_PRIVATE void hpct__store_fuzz_one(const unsigned char *data, size_t len)
{
	if (!srv.tab && !(srv.tab = calloc(srv.nb = 1024, sizeof(*srv.tab))))
		return;
	struct sconn c = { .fd = -1 };
	srv.c = &c;
	srv.nc = 1;
	if ((c.in = malloc(len ? len : 1))) {
		memcpy(c.in, data, len);
		c.inlen = c.incap = len;
		serve_buffered(&c);
	}
	free(c.in);
	free(c.out);
	free(c.key);
	srv.c = NULL;
	srv.nc = 0;
	for (size_t i = 0; i < srv.nb; i++)
		for (struct entry *e = srv.tab[i], *next; e; e = next) {
			next = e->next;
			free(e->key);
			free(e->val);
			free(e);
		}
	memset(srv.tab, 0, srv.nb * sizeof(*srv.tab));
	srv.n = 0;
}

static void *server_main(void *arg)
{
	(void)arg;
	struct pollfd *pfd = NULL;
	int cap = 0;
	for (;;) {
		if (cap < srv.nc + 1) {
			cap = (srv.nc + 1) * 2;
			struct pollfd *p = realloc(pfd, (size_t)cap * sizeof(*p));
			if (!p) {
				hpct__sleep(0.01);
				continue;
			}
			pfd = p;
		}
		double now = hpct__now(), next = now + 3600;
		for (int i = 0; i < srv.nc; i++) {
			struct sconn *c = &srv.c[i];
			if (c->parked && c->deadline <= now) { /* its wait is over */
				reply(c, HPCT_ETIMEDOUT, NULL, 0, NULL, 0);
				unpark(c);
			}
			if (c->parked && c->deadline < next)
				next = c->deadline;
			/* frames that came in behind a parked request */
			if (c->admitted && !c->parked && c->inlen >= 4 && serve_buffered(c) < 0) {
				close(c->fd);
				c->fd = -1;
			}
			flush(c);
		}
		for (int i = srv.nc - 1; i >= 0; i--)
			if (srv.c[i].fd < 0)
				drop(i);
		pfd[0] = (struct pollfd){ .fd = srv.lfd, .events = POLLIN };
		for (int i = 0; i < srv.nc; i++)
			pfd[i + 1] = (struct pollfd){
				.fd = srv.c[i].fd,
				.events = (short)(POLLIN | (srv.c[i].outlen ? POLLOUT : 0)),
			};
		int ms = (int)((next - now) * 1000) + 1;
		if (poll(pfd, (nfds_t)srv.nc + 1, ms) < 0 && errno != EINTR)
			hpct__sleep(0.01);
		for (int i = srv.nc - 1; i >= 0; i--) {
			short re = pfd[i + 1].revents;
			if (re & (POLLIN | POLLHUP | POLLERR))
				if (on_readable(&srv.c[i]) < 0) {
					close(srv.c[i].fd);
					srv.c[i].fd = -1;
				}
		}
		if (pfd[0].revents & POLLIN) {
			int fd;
			while ((fd = accept4(srv.lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
				struct sconn *c = srv.nc < MAX_CONNS
				                          ? realloc(srv.c, (size_t)(srv.nc + 1) * sizeof(*c))
				                          : NULL;
				if (!c) {
					close(fd);
					continue;
				}
				srv.c = c;
				int one = 1;
				setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
				srv.c[srv.nc++] = (struct sconn){ .fd = fd, .admitted = !srv.secret };
			}
		}
	}
	return NULL;
}

/* The store address of world rank `rank`: its node, its world port plus
 * HPCT_STORE_PORT_OFFSET. */
static int store_addr(struct hpct_world *w, int rank, struct sockaddr_storage *ss, socklen_t *sl,
                      char *text, size_t tlen)
{
	int rc = hpct__world_node_addr(w, rank, ss, sl);
	if (rc)
		return rc;
	/* the range just below hpct's (clear of the kernel's ephemeral ports
	 * with the defaults), else the one after NCCL's */
	long range = w->topo.port_range;
	long off = w->topo.port_base - range >= 1024 ? -range : 2 * range;
	const char *v = getenv("HPCT_STORE_PORT_OFFSET");
	if (v && *v) {
		char *end;
		off = strtol(v, &end, 10);
		if (*end || off == 0 || off < -65535 || off > 65535)
			return hpct__fail(HPCT_EBADENV, HPCT_SUB_NET,
			                  "HPCT_STORE_PORT_OFFSET='%s' is not a port offset (+-1 to 65535)",
			                  v);
	}
	long port = hpct__derive_port(&w->topo, rank) + off;
	if (port < 1 || port > 65535)
		return hpct__fail(HPCT_EBADENV, HPCT_SUB_NET,
		                  "rank %d's store port %ld (world port %d %+ld, "
		                  "HPCT_STORE_PORT_OFFSET) is not a port",
		                  rank, port, hpct__derive_port(&w->topo, rank), off);
	if (ss->ss_family == AF_INET6)
		((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
	else
		((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
	hpct__addr_str((struct sockaddr *)ss, text, tlen);
	return 0;
}

/* What a store connection's proof is bound to.  The epoch is left out: a
 * rank's one store server outlives in-process recoveries, and its keys'
 * namespaces carry the epoch already. */
static struct hpct_auth_id store_auth_id(const struct hpct_world *w, int client, int home)
{
	return (struct hpct_auth_id){ .job = w->topo.job,
		                      .epoch = 0,
		                      .service = HPCT_AUTH_SERVICE_STORE,
		                      .client = (uint32_t)client,
		                      .server = (uint32_t)home,
		                      .size = (uint32_t)w->topo.size };
}

static int server_start(struct hpct_world *w)
{
	pthread_mutex_lock(&srv.mu);
	int rc = srv.err;
	if (srv.started || rc) {
		pthread_mutex_unlock(&srv.mu);
		return rc;
	}
	struct sockaddr_storage ss;
	socklen_t sl;
	rc = store_addr(w, w->topo.rank, &ss, &sl, srv.where, sizeof(srv.where));
	int fd = -1;
	if (rc == 0) {
		fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		int one = 1;
		if (fd >= 0)
			setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (fd < 0 || bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 1024) != 0) {
			int e = errno;
			rc = hpct__fail(e == EADDRINUSE ? HPCT_EADDRINUSE : -e, HPCT_SUB_NET,
			                "rank %d: cannot listen for the store at %s: %s",
			                w->topo.rank, srv.where, strerror(e));
			if (fd >= 0)
				close(fd);
		}
	}
	if (rc == 0 && !(srv.tab = calloc(srv.nb = 1024, sizeof(*srv.tab)))) {
		close(fd);
		rc = HPCT_ENOMEM;
	}
	if (rc == 0 && w->topo.secret) {
		srv.id = store_auth_id(w, w->topo.rank, w->topo.rank);
		srv.slen = w->topo.secret_len;
		if (!(srv.secret = malloc(srv.slen))) {
			close(fd);
			rc = HPCT_ENOMEM;
		} else {
			memcpy(srv.secret, w->topo.secret, srv.slen);
		}
	}
	pthread_t th;
	srv.lfd = fd;
	if (rc == 0 && pthread_create(&th, NULL, server_main, NULL) != 0) {
		close(fd);
		rc = hpct__fail(HPCT_ENOMEM, HPCT_SUB_NET, "cannot start the store thread");
	}
	if (rc == 0) {
		pthread_detach(th);
		srv.started = 1;
		HPCT_INFO(HPCT_SUB_NET, "store: rank %d serves its keys at %s", w->topo.rank,
		          srv.where);
	} else {
		srv.err = rc;
	}
	pthread_mutex_unlock(&srv.mu);
	return rc;
}

/* ------------------------------------------------------------ client */

struct hpct_store {
	struct hpct_world *w;
	uint64_t ns;
	double timeout;
	pthread_mutex_t mu;
	int *fd; /* per home rank, -1 until first used */
};

static double cap_timeout(const struct hpct_store *s, double t)
{
	double lim = s->w->topo.timeout_s;
	return t < 0 || t > lim ? lim : t;
}

int hpct__store_open(hpct_world *world, uint64_t ns, double timeout_s, struct hpct_store **out)
{
	struct hpct_world *w = (struct hpct_world *)world;
	*out = NULL;
	if (!w->topo.nnodes)
		return hpct__fail(HPCT_ESTATE, HPCT_SUB_NET, "the rootless store needs a node list (%s)",
		                  w->topo.why_not_rootless);
	int rc = server_start(w);
	if (rc)
		return rc;
	struct hpct_store *s = calloc(1, sizeof(*s));
	if (!s || !(s->fd = malloc((size_t)w->topo.size * sizeof(int)))) {
		free(s);
		return HPCT_ENOMEM;
	}
	for (int i = 0; i < w->topo.size; i++)
		s->fd[i] = -1;
	s->w = w;
	s->ns = ns;
	s->timeout = timeout_s;
	pthread_mutex_init(&s->mu, NULL);
	*out = s;
	return 0;
}

void hpct__store_close(struct hpct_store *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->w->topo.size; i++)
		if (s->fd[i] >= 0)
			close(s->fd[i]);
	pthread_mutex_destroy(&s->mu);
	free(s->fd);
	free(s);
}

void hpct__store_set_timeout(struct hpct_store *s, double timeout_s)
{
	s->timeout = timeout_s;
}

double hpct__store_timeout(const struct hpct_store *s)
{
	return cap_timeout(s, s->timeout);
}

static int home_of(const struct hpct_store *s, const char *key)
{
	return (int)(hpct__hash(key, strlen(key), s->ns ^ 0x73746f7265ull) %
	             (uint64_t)s->w->topo.size);
}

static const char *shown(const char *key, char *buf, size_t len)
{
	snprintf(buf, len, "%.*s%s", KEY_SHOWN, key, strlen(key) > KEY_SHOWN ? "..." : "");
	return buf;
}

/* Ranks whose store does not take a connection now, as "3 (host:port),
 * ..." in buf; how many. */
static int unreachable(struct hpct_store *s, char *buf, size_t len)
{
	int n = 0;
	size_t used = 0;
	buf[0] = 0;
	double until = hpct__now() + PROBE_S;
	for (int r = 0; r < s->w->topo.size && hpct__now() < until; r++) {
		struct sockaddr_storage ss;
		socklen_t sl;
		char text[HPCT_ADDRSTRLEN];
		if (store_addr(s->w, r, &ss, &sl, text, sizeof(text)) != 0)
			continue;
		int fd = hpct__sock_connect(&ss, sl, hpct__now() + 0.05);
		if (fd >= 0) {
			close(fd);
			continue;
		}
		if (n++ < 8 && used < len)
			used += (size_t)snprintf(buf + used, len - used, "%s%d (%s)", n > 1 ? ", " : "",
			                         r, text);
	}
	return n;
}

/* Connects to `home`'s store, retrying while nobody listens there yet. */
static int ensure(struct hpct_store *s, int home, const char *what, double deadline)
{
	if (s->fd[home] >= 0)
		return 0;
	struct sockaddr_storage ss;
	socklen_t sl;
	char text[HPCT_ADDRSTRLEN];
	int rc = store_addr(s->w, home, &ss, &sl, text, sizeof(text));
	if (rc)
		return rc;
	double nap = 0.001, t0 = hpct__now();
	for (;;) {
		int fd = hpct__sock_connect(&ss, sl, deadline);
		if (fd >= 0 && s->w->topo.secret) {
			char who[HPCT_ADDRSTRLEN + 64];
			snprintf(who, sizeof(who), "store: %s: rank %d (the key's home) at %s", what, home,
			         text);
			struct hpct_auth_id id = store_auth_id(s->w, s->w->topo.rank, home);
			rc = hpct__auth_client(fd, s->w->topo.secret, s->w->topo.secret_len, &id,
			                       deadline, who);
			if (rc) {
				close(fd);
				return rc;
			}
		}
		if (fd >= 0) {
			s->fd[home] = fd;
			return 0;
		}
		double now = hpct__now();
		if (fd == HPCT_ETIMEDOUT || !hpct__sock_retryable(-fd) || now >= deadline)
			return hpct__fail(
			        fd == HPCT_ETIMEDOUT || hpct__sock_retryable(-fd) ? HPCT_ETIMEDOUT : fd,
			        HPCT_SUB_NET,
			        "store: %s: rank %d (the key's home) at %s did not answer within %.1f s "
			        "(%s): it has not started, or it died",
			        what, home, text, now - t0, fd < 0 && fd > -4096 ? strerror(-fd) : "no answer");
		hpct__sleep(nap < deadline - now ? nap : deadline - now);
		nap = nap * 2 > 0.05 ? 0.05 : nap * 2;
	}
}

/* One request to `home`; the reply's status (or the failure) in the
 * return value, its fields in *rep (malloc'd, the caller frees). */
static int rpc(struct hpct_store *s, int home, const char *what, uint8_t op, const char *key,
               const void *a, size_t alen, const void *b, size_t blen, double wait_s,
               unsigned char **rep, size_t *replen)
{
	*rep = NULL;
	*replen = 0;
	size_t klen = strlen(key);
	if (klen > HPCT_STORE_MAX_KEY)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_NET, "store: %s: key of %zu bytes (at most %u)",
		                  what, klen, HPCT_STORE_MAX_KEY);
	if (alen + blen > HPCT_STORE_MAX_FRAME - HDR - klen - 64)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_NET, "store: %s: value of %zu bytes (at most %zu)",
		                  what, alen + blen, (size_t)HPCT_STORE_MAX_FRAME - HDR - klen - 64);
	size_t flen = HDR + klen + alen + blen;
	unsigned char *f = malloc(4 + flen);
	if (!f)
		return HPCT_ENOMEM;
	hpct__put32(f, (uint32_t)flen);
	f[4] = op;
	hpct__put64(f + 5, s->ns);
	hpct__put32(f + 13, (uint32_t)klen);
	memcpy(f + 4 + HDR, key, klen);
	if (alen)
		memcpy(f + 4 + HDR + klen, a, alen);
	if (blen)
		memcpy(f + 4 + HDR + klen + alen, b, blen);
	double t = cap_timeout(s, s->timeout);
	double deadline = hpct__now() + (wait_s > 0 ? wait_s + SLACK_S : t);
	pthread_mutex_lock(&s->mu);
	int rc = ensure(s, home, what, hpct__now() + t), io = rc;
	unsigned char h[8];
	/* io: the exchange itself failed (the stream is then out of step or
	 * gone); rc: the answer's status otherwise */
	if (io == 0 && (io = hpct__sock_send_all(s->fd[home], f, 4 + flen, deadline)) == 0 &&
	    (io = hpct__sock_recv_all(s->fd[home], h, 8, deadline)) == 0) {
		uint32_t len = hpct__get32(h);
		if (hpct__auth_is_frame(h, sizeof(h)) && !s->w->topo.secret)
			io = HPCT_EREFUSED; /* a REFUSE: it wants a proof */
		else if (len < 4 || len > HPCT_STORE_MAX_FRAME)
			io = HPCT_EPROTO;
		else if (len > 4 && !(*rep = malloc(len - 4)))
			io = HPCT_ENOMEM;
		else if ((io = hpct__sock_recv_all(s->fd[home], *rep, len - 4, deadline)) == 0) {
			*replen = len - 4;
			rc = (int32_t)hpct__get32(h + 4);
		}
	}
	free(f);
	if (io && rc == 0) {
		char text[HPCT_ADDRSTRLEN] = "?";
		struct sockaddr_storage ss;
		socklen_t sl;
		store_addr(s->w, home, &ss, &sl, text, sizeof(text));
		close(s->fd[home]);
		s->fd[home] = -1;
		rc = hpct__fail(io == HPCT_EPROTO || io == HPCT_ETIMEDOUT || io == HPCT_ENOMEM ||
		                                io == HPCT_EREFUSED
		                        ? io
		                        : HPCT_EPEERDEAD,
		                HPCT_SUB_NET, "store: %s: rank %d (the key's home) at %s %s (%s)", what,
		                home, text,
		                io == HPCT_EREFUSED ? "refused us: it has a shared secret (HPCT_SECRET) "
		                                      "and this rank has none"
		                : io == HPCT_EPROTO    ? "answered something malformed"
		                : io == HPCT_ETIMEDOUT ? "did not answer in time"
		                : io == HPCT_ENOMEM    ? "sent an answer too big to hold"
		                                       : "closed its connection: it died or left",
		                hpct_strerror(io));
	}
	pthread_mutex_unlock(&s->mu);
	if (rc && *rep) {
		free(*rep);
		*rep = NULL;
	}
	return rc;
}

static int timed_out(struct hpct_store *s, const char *what, const char *key, int home, double t)
{
	char text[HPCT_ADDRSTRLEN] = "?", dead[600], kb[KEY_SHOWN + 8];
	struct sockaddr_storage ss;
	socklen_t sl;
	store_addr(s->w, home, &ss, &sl, text, sizeof(text));
	int n = unreachable(s, dead, sizeof(dead));
	return hpct__fail(HPCT_ETIMEDOUT, HPCT_SUB_NET,
	                  "store: %s: key '%s' (home rank %d at %s) was not set within %.1f s%s%s%s",
	                  what, shown(key, kb, sizeof(kb)), home, text, t,
	                  n ? "; ranks whose store does not answer (died or never started): " : "",
	                  dead, n > 8 ? ", ..." : "");
}

int hpct__store_set(struct hpct_store *s, const char *key, const void *val, size_t len)
{
	unsigned char l[4], *rep;
	size_t rl;
	hpct__put32(l, (uint32_t)len);
	int rc = rpc(s, home_of(s, key), "set", OP_SET, key, l, 4, val, len, 0, &rep, &rl);
	free(rep);
	return rc;
}

static int take_value(unsigned char *rep, size_t rl, void **val_out, size_t *len_out)
{
	if (rl < 4 || hpct__get32(rep) != rl - 4) {
		free(rep);
		return HPCT_EPROTO;
	}
	memmove(rep, rep + 4, rl - 4);
	*val_out = rep;
	*len_out = rl - 4;
	return 0;
}

int hpct__store_get(struct hpct_store *s, const char *key, double timeout_s, void **val_out,
                    size_t *len_out)
{
	double t = cap_timeout(s, timeout_s < 0 ? s->timeout : timeout_s);
	unsigned char ms[8], *rep;
	size_t rl;
	hpct__put64(ms, (uint64_t)(int64_t)(t * 1000));
	int home = home_of(s, key);
	int rc = rpc(s, home, "get", OP_GET, key, ms, 8, NULL, 0, t, &rep, &rl);
	if (rc == HPCT_ETIMEDOUT)
		return timed_out(s, "get", key, home, t);
	return rc ? rc : take_value(rep, rl, val_out, len_out);
}

int hpct__store_add(struct hpct_store *s, const char *key, int64_t delta, int64_t *value_out)
{
	unsigned char d[8], *rep;
	size_t rl;
	hpct__put64(d, (uint64_t)delta);
	int home = home_of(s, key);
	int rc = rpc(s, home, "add", OP_ADD, key, d, 8, NULL, 0, 0, &rep, &rl);
	if (rc == HPCT_EINVAL) {
		char kb[KEY_SHOWN + 8];
		return hpct__fail(rc, HPCT_SUB_NET,
		                  "store: add: key '%s' holds a value that is not a counter, or "
		                  "adding %lld would overflow it",
		                  shown(key, kb, sizeof(kb)), (long long)delta);
	}
	if (rc == 0 && rl == 8)
		*value_out = (int64_t)hpct__get64(rep);
	else if (rc == 0)
		rc = HPCT_EPROTO;
	free(rep);
	return rc;
}

int hpct__store_cas(struct hpct_store *s, const char *key, const void *expected, size_t elen,
                    const void *desired, size_t dlen, void **val_out, size_t *len_out)
{
	size_t n = 8 + elen + dlen;
	unsigned char *body = malloc(n), *rep;
	size_t rl;
	if (!body)
		return HPCT_ENOMEM;
	hpct__put32(body, (uint32_t)elen);
	if (elen)
		memcpy(body + 4, expected, elen);
	hpct__put32(body + 4 + elen, (uint32_t)dlen);
	if (dlen)
		memcpy(body + 8 + elen, desired, dlen);
	int rc = rpc(s, home_of(s, key), "compare_set", OP_CAS, key, body, n, NULL, 0, 0, &rep, &rl);
	free(body);
	return rc ? rc : take_value(rep, rl, val_out, len_out);
}

static int flag_op(struct hpct_store *s, uint8_t op, const char *what, const char *key, int *out)
{
	unsigned char *rep;
	size_t rl;
	int rc = rpc(s, home_of(s, key), what, op, key, NULL, 0, NULL, 0, 0, &rep, &rl);
	if (rc == 0 && rl != 1)
		rc = HPCT_EPROTO;
	if (rc == 0)
		*out = rep[0] != 0;
	free(rep);
	return rc;
}

int hpct__store_check(struct hpct_store *s, const char *const *keys, int n, int *all_out)
{
	*all_out = 1;
	for (int i = 0; i < n && *all_out; i++) {
		int rc = flag_op(s, OP_CHECK, "check", keys[i], all_out);
		if (rc)
			return rc;
	}
	return 0;
}

int hpct__store_wait(struct hpct_store *s, const char *const *keys, int n, double timeout_s)
{
	double t = cap_timeout(s, timeout_s < 0 ? s->timeout : timeout_s);
	double deadline = hpct__now() + t;
	for (int i = 0; i < n; i++) {
		double left = deadline - hpct__now();
		unsigned char ms[8], *rep;
		size_t rl;
		hpct__put64(ms, (uint64_t)(int64_t)((left > 0 ? left : 0) * 1000));
		int home = home_of(s, keys[i]);
		int rc = rpc(s, home, "wait", OP_WAIT, keys[i], ms, 8, NULL, 0, left > 0 ? left : 0.001,
		             &rep, &rl);
		free(rep);
		if (rc == HPCT_ETIMEDOUT)
			return timed_out(s, "wait", keys[i], home, t);
		if (rc)
			return rc;
	}
	return 0;
}

int hpct__store_delete(struct hpct_store *s, const char *key, int *existed_out)
{
	return flag_op(s, OP_DEL, "delete_key", key, existed_out);
}

int hpct__store_num_keys(struct hpct_store *s, int64_t *n_out)
{
	*n_out = 0;
	for (int r = 0; r < s->w->topo.size; r++) {
		unsigned char *rep;
		size_t rl;
		int rc = rpc(s, r, "num_keys", OP_COUNT, "", NULL, 0, NULL, 0, 0, &rep, &rl);
		if (rc == 0 && rl != 8)
			rc = HPCT_EPROTO;
		if (rc == 0)
			*n_out += (int64_t)hpct__get64(rep);
		free(rep);
		if (rc)
			return rc;
	}
	return 0;
}
