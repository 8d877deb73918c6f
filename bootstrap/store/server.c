/* The rootless store's server (see store.h): one thread per process, serving
 * the keys whose home is this rank: a hash table of keys, non-blocking
 * connections, parked GETs and WAITs, the shared-secret proof, and the
 * socket-free hook the fuzz target drives. */
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
#include "bootstrap/base/bytes.h"
#include "bootstrap/base/log.h"
#include "bootstrap/base/param.h"
#include "bootstrap/base/sock.h"
#include "bootstrap/base/util.h"
#include "bootstrap/store/store_internal.h"
#include "bootstrap/topo/derive.h"
#include "bootstrap/world.h"

#define MAX_CONNS 4096

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
			while ((fd = accept4(srv.lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >=
			       0) {
				struct sconn *c =
				        srv.nc < MAX_CONNS
				                ? realloc(srv.c, (size_t)(srv.nc + 1) * sizeof(*c))
				                : NULL;
				if (!c) {
					close(fd);
					continue;
				}
				srv.c = c;
				int one = 1;
				setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
				srv.c[srv.nc++] =
				        (struct sconn){ .fd = fd, .admitted = !srv.secret };
			}
		}
	}
	return NULL;
}

int hpct__store_server_start(struct hpct_world *w)
{
	pthread_mutex_lock(&srv.mu);
	int rc = srv.err;
	if (srv.started || rc) {
		pthread_mutex_unlock(&srv.mu);
		return rc;
	}
	struct sockaddr_storage ss;
	socklen_t sl;
	rc = hpct__store_addr(w, w->topo.rank, &ss, &sl, srv.where, sizeof(srv.where));
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
		srv.id = hpct__store_auth_id(w, w->topo.rank, w->topo.rank);
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
