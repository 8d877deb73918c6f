/* Rendezvous server of the standard path: one thread, epoll over
 * non-blocking sockets.  This file: the thread, accepting, reading and
 * writing connections and their lifetime, start and stop, and the fuzz hook;
 * the keys are in table.c, requests in request.c, answers in reply.c. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/base/fdtrack.h"
#include "bootstrap/base/bytes.h"
#include "bootstrap/base/log.h"
#include "bootstrap/base/util.h"
#include "bootstrap/stdpath/server_internal.h"
#include "bootstrap/stdpath/stdpath.h"
#include "hpct/hpct.h"

/* With a secret, a connection's first bytes are its proof: 1 once it is
 * admitted (parse on), 0 while it proves or after a refusal (logged with
 * the source address; the REFUSE goes out, then the connection closes). */
static int admit(struct conn *c)
{
	struct hpct_std_server *s = c->s;
	size_t used, outlen;
	unsigned char out[HPCT_AUTH_LEN];
	char why[200];
	int rc = hpct__auth_server_feed(&c->auth, s->secret, s->slen, &s->auth_id, c->in + c->ipos,
	                                c->ilen - c->ipos, &used, out, &outlen, why, sizeof(why));
	c->ipos += used;
	if (c->ipos == c->ilen)
		c->ipos = c->ilen = 0;
	if (outlen && hpct__stdsrv_out_reserve(c, outlen) == 0)
		hpct__stdsrv_put(c, out, outlen);
	if (rc == HPCT_AUTH_REFUSE) {
		HPCT_WARN(HPCT_SUB_STD, "rendezvous %s: refused a connection from %s: %s", s->addr,
		          c->peer, why);
		c->closing = 1; /* once the REFUSE is out */
		return 0;
	}
	if (rc == HPCT_AUTH_ADMIT) /* the epoch its proof is bound to */
		c->epoch = (int64_t)c->auth.hello.epoch;
	return c->admitted = rc == HPCT_AUTH_ADMIT;
}

/* Where the next bytes from the socket go, and how many fit. */
static size_t read_room(struct conn *c, unsigned char **dst)
{
	if (c->closing)
		return 0;
	if (c->st == ST_VAL && !c->discard && c->ipos == c->ilen && c->vcap > c->vgot) {
		/* Large values go straight to their buffer, not through c->in;
		 * the parser grows it as it fills (request.c, val_grow). */
		c->ipos = c->ilen = 0;
		*dst = c->val + c->vgot;
		return c->vcap - c->vgot;
	}
	*dst = c->in + c->ilen;
	return IN_CAP - c->ilen;
}

static void conn_read(struct conn *c, uint32_t events)
{
	for (int i = 0; i < READS_PER_EVENT && !c->dead; i++) {
		unsigned char *dst;
		size_t room = read_room(c, &dst);
		if (room == 0) {
			/* Not reading (closing, or parked with a full buffer): a
			 * hang-up is all that is left to notice. */
			if (events & (EPOLLHUP | EPOLLERR | EPOLLRDHUP)) {
				socklen_t el = sizeof(c->err);
				if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &c->err, &el) != 0)
					c->err = 0;
				hpct__stdsrv_conn_close(c);
			}
			break;
		}
		ssize_t r = recv(c->fd, dst, room, MSG_DONTWAIT);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (r <= 0) {
			char w[HPCT_ADDRSTRLEN + 24], why[160];
			c->err = r < 0 ? errno : 0;
			if (!c->admitted && hpct__auth_server_gone(&c->auth, why, sizeof(why)))
				HPCT_WARN(HPCT_SUB_STD,
				          "rendezvous %s: refused a connection from %s: %s",
				          c->s->addr, c->peer, why);
			HPCT_TRACE(HPCT_SUB_STD, "rendezvous %s: %s hung up (%s)", c->s->addr,
			           hpct__stdsrv_who(c, w, sizeof(w)),
			           r == 0 ? "end of stream" : strerror(c->err));
			hpct__stdsrv_conn_close(c);
			break;
		}
		c->rx += (uint64_t)r;
		if (dst != c->in + c->ilen)
			c->vgot += (uint32_t)r;
		else
			c->ilen += (size_t)r;
		if (c->admitted || admit(c))
			hpct__stdsrv_conn_progress(c);
		if ((size_t)r < room)
			break;
	}
	hpct__stdsrv_schedule(c);
}

static void conn_flush(struct conn *c)
{
	while (c->opos < c->olen) {
		ssize_t r = send(c->fd, c->out + c->opos, c->olen - c->opos,
		                 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (r > 0) {
			c->opos += (size_t)r;
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		c->err = r < 0 ? errno : 0;
		hpct__stdsrv_conn_close(c);
		return;
	}
	c->opos = c->olen = 0;
	if (c->ocap > (1u << 20)) {
		free(c->out);
		c->out = NULL;
		c->ocap = 0;
	}
	if (c->closing)
		hpct__stdsrv_conn_close(c);
}

static void conn_update(struct conn *c)
{
	unsigned char *dst;
	uint32_t want = EPOLLRDHUP;
	if (read_room(c, &dst) > 0)
		want |= EPOLLIN;
	if (c->olen > c->opos)
		want |= EPOLLOUT;
	if (want == c->evmask)
		return;
	struct epoll_event ev = { .events = want, .data.ptr = c };
	if (epoll_ctl(c->s->epfd, EPOLL_CTL_MOD, c->fd, &ev) == 0)
		c->evmask = want;
}

static void accept_all(struct hpct_std_server *s)
{
	for (;;) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int fd = accept4(s->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		hpct__fd_track(fd);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM) {
				/* Level-triggered: the pending connection would wake
				 * us at once, forever.  Stop listening until one of
				 * ours closes or ACCEPT_RETRY_S passed (the process's
				 * other descriptors may be what frees up). */
				if (!s->accept_stalled)
					HPCT_WARN(HPCT_SUB_STD,
					          "rendezvous %s: cannot accept (%s) with %zu "
					          "connections before HELLO; pausing new "
					          "connections, retrying every %.2f s",
					          s->addr, strerror(errno), s->nearly,
					          ACCEPT_RETRY_S);
				s->accept_stalled = 1;
				epoll_ctl(s->epfd, EPOLL_CTL_DEL, s->lfd, NULL);
				s->listen_paused = 1;
				s->accept_retry_at = hpct__now() + ACCEPT_RETRY_S;
			}
			return;
		}
		if (s->accept_stalled) {
			HPCT_WARN(HPCT_SUB_STD, "rendezvous %s: accepting connections again",
			          s->addr);
			s->accept_stalled = 0;
		}
		struct conn *c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			continue;
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c->s = s;
		c->fd = fd;
		c->rank = -1;
		c->admitted = !s->secret;
		hpct__addr_str((struct sockaddr *)&ss, c->peer, sizeof(c->peer));
		c->evmask = EPOLLIN | EPOLLRDHUP;
		struct epoll_event ev = { .events = c->evmask, .data.ptr = c };
		if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
			close(fd);
			free(c);
			continue;
		}
		c->next = s->conns;
		if (s->conns)
			s->conns->prev = c;
		s->conns = c;
		hpct__stdsrv_early_add(c);
	}
}

/* The next thing due without an event (a HELLO deadline, a paused accept's
 * retry) as an epoll timeout in ms; -1 for none. */
static int timers(struct hpct_std_server *s, double stop_at)
{
	double now = hpct__now();
	double next = hpct__stdsrv_early_expire(s, now);
	if (s->listen_paused) {
		if (now >= s->accept_retry_at) {
			struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &s->lfd };
			if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->lfd, &ev) == 0)
				s->listen_paused = 0;
			else
				s->accept_retry_at = now + ACCEPT_RETRY_S;
		}
		if (s->listen_paused && (next == 0 || s->accept_retry_at < next))
			next = s->accept_retry_at;
	}
	if (stop_at > 0 && (next == 0 || stop_at < next))
		next = stop_at;
	if (next == 0)
		return -1;
	if (next <= now)
		return 0;
	/* HPCT_TIMEOUT may be days: waking once a minute keeps this an int */
	return next - now > 60 ? 60000 : (int)((next - now) * 1000) + 1;
}

static int live_conns(const struct hpct_std_server *s)
{
	int n = 0;
	for (const struct conn *c = s->conns; c; c = c->next)
		n += !c->closing;
	return n;
}

/* Connections closed (conn_close moves them to deadq) are freed here, out
 * of the loops that may still hold them. */
static void free_dead(struct hpct_std_server *s)
{
	while (s->deadq) {
		struct conn *c = s->deadq;
		s->deadq = c->dnext;
		hpct__stdsrv_conn_free(c);
	}
}

static void *server_main(void *arg)
{
	pthread_setname_np(pthread_self(), "hpct-std-server"); /* in top, gdb, perf */
	struct hpct_std_server *s = arg;
	struct epoll_event evs[64];
	int stopping = 0;
	double deadline = 0;
	for (;;) {
		if (stopping && (live_conns(s) == 0 || hpct__now() >= deadline))
			break;
		int timeout = timers(s, stopping ? deadline : 0);
		free_dead(s); /* the early connections closed just now */
		int n = epoll_wait(s->epfd, evs, 64, timeout);
		s->wakeups++;
		for (int i = 0; i < n; i++) {
			void *p = evs[i].data.ptr;
			if (p == &s->lfd) {
				accept_all(s);
			} else if (p == &s->evfd) {
				uint64_t v;
				if (read(s->evfd, &v, sizeof(v)) < 0)
					continue;
				pthread_mutex_lock(&s->lock);
				stopping = s->stopping;
				deadline = s->stop_deadline;
				pthread_mutex_unlock(&s->lock);
			} else {
				struct conn *c = p;
				if (c->dead)
					continue;
				if (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
					conn_read(c, evs[i].events);
				if (evs[i].events & EPOLLOUT)
					hpct__stdsrv_schedule(c);
			}
		}
		while (s->runq) {
			struct conn *c = s->runq;
			s->runq = c->qnext;
			c->queued = 0;
			if (c->dead)
				continue;
			hpct__stdsrv_conn_progress(c);
			if (!c->dead)
				conn_flush(c);
			if (!c->dead)
				conn_update(c);
		}
		free_dead(s);
	}
	if (live_conns(s) > 0) {
		char list[256] = "";
		size_t o = 0;
		int early = 0;
		for (struct conn *c = s->conns; c && o + 16 < sizeof(list); c = c->next) {
			if (!c->closing && c->rank >= 0)
				o += (size_t)snprintf(list + o, sizeof(list) - o, "%s%d",
				                      o ? ", " : "", c->rank);
			early += !c->closing && c->rank < 0;
		}
		HPCT_WARN(HPCT_SUB_STD,
		          "rendezvous %s: stopping at the deadline with ranks [%s] and %d "
		          "connections before HELLO still open",
		          s->addr, list, early);
	}
	return NULL;
}

static int is_wildcard(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return ((const struct sockaddr_in *)ss)->sin_addr.s_addr == htonl(INADDR_ANY);
	if (ss->ss_family == AF_INET6)
		return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)ss)->sin6_addr);
	return 0;
}

int hpct__std_server_start(const char *host, int port, int nranks, uint64_t job,
                           const struct hpct_auth_key *key, struct hpct_std_server **server_out)
{
	return hpct__std_server_start_limits(host, port, nranks, job, key, NULL, server_out);
}

int hpct__std_server_start_limits(const char *host, int port, int nranks, uint64_t job,
                                  const struct hpct_auth_key *key,
                                  const struct hpct_std_limits *lim,
                                  struct hpct_std_server **server_out)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	struct hpct_std_limits deflim;
	int rc, one = 1;
	if (!host || !*host || port < 0 || port > 65535 || nranks < 1)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_STD,
		                  "rendezvous: bad arguments (host '%s', port %d, %d ranks)",
		                  host ? host : "(null)", port, nranks);
	if (!lim) {
		if ((rc = hpct__std_limits_default(nranks, &deflim)) != 0)
			return rc;
		lim = &deflim;
	}
	rc = hpct__resolve(host, port, AF_UNSPEC, &ss, &sl);
	if (rc)
		return rc;
	if (is_wildcard(&ss))
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_STD,
		                  "rendezvous: host '%s' is the wildcard address; give MASTER_ADDR "
		                  "the address ranks connect to",
		                  host);
	struct hpct_std_server *s = calloc(1, sizeof(*s));
	if (!s)
		return hpct__fail(HPCT_ENOMEM, HPCT_SUB_STD, "rendezvous: out of memory");
	s->nranks = nranks;
	s->job = job;
	s->lim = *lim;
	if (key && key->secret) {
		s->auth_id = (struct hpct_auth_id){ .job = job,
			                            .epoch = key->epoch,
			                            .service = HPCT_AUTH_SERVICE_STDPATH,
			                            .server = 0,
			                            .size = (uint32_t)nranks,
			                            .later_epochs = 1 };
		s->slen = key->len;
		if (!(s->secret = malloc(key->len ? key->len : 1))) {
			free(s);
			return hpct__fail(HPCT_ENOMEM, HPCT_SUB_STD, "rendezvous: out of memory");
		}
		memcpy(s->secret, key->secret, key->len);
	}
	s->lost_rank = -1;
	s->lost_epoch = -1;
	s->t0 = hpct__now();
	hpct__addr_str((struct sockaddr *)&ss, s->addr, sizeof(s->addr));
	s->by_rank = calloc((size_t)nranks, sizeof(*s->by_rank));
	s->tab.b = calloc(1024, sizeof(*s->tab.b));
	s->tab.mask = 1023;
	s->tab.owned = calloc((size_t)nranks, sizeof(*s->tab.owned));
	if (!s->by_rank || !s->tab.b || !s->tab.owned) {
		rc = hpct__fail(HPCT_ENOMEM, HPCT_SUB_STD, "rendezvous: out of memory for %d ranks",
		                nranks);
		goto free_server;
	}
	s->lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	hpct__fd_track(s->lfd);
	if (s->lfd < 0) {
		rc = hpct__fail(-errno, HPCT_SUB_STD, "rendezvous %s: socket: %s", s->addr,
		                strerror(errno));
		goto free_server;
	}
	/* SO_REUSEADDR lets a restarted rank 0 bind past TIME_WAIT; never
	 * SO_REUSEPORT, which would let a stale server share the port. */
	setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(s->lfd, (struct sockaddr *)&ss, sl) != 0) {
		if (errno == EADDRINUSE)
			rc = hpct__fail(HPCT_EADDRINUSE, HPCT_SUB_STD,
			                "rendezvous: %s is already in use (another job's rank 0, "
			                "or an earlier run still holding it)",
			                s->addr);
		else
			rc = hpct__fail(-errno, HPCT_SUB_STD, "rendezvous: cannot bind %s (%s)",
			                s->addr, strerror(errno));
		goto close_listener;
	}
	if (listen(s->lfd, 4096) != 0) {
		rc = hpct__fail(-errno, HPCT_SUB_STD, "rendezvous: cannot listen on %s (%s)",
		                s->addr, strerror(errno));
		goto close_listener;
	}
	s->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (s->epfd < 0) {
		rc = hpct__fail(-errno, HPCT_SUB_STD, "rendezvous %s: epoll: %s", s->addr,
		                strerror(errno));
		goto close_listener;
	}
	s->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (s->evfd < 0) {
		rc = hpct__fail(-errno, HPCT_SUB_STD, "rendezvous %s: eventfd: %s", s->addr,
		                strerror(errno));
		goto close_epoll;
	}
	struct epoll_event lev = { .events = EPOLLIN, .data.ptr = &s->lfd };
	struct epoll_event eev = { .events = EPOLLIN, .data.ptr = &s->evfd };
	if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->lfd, &lev) != 0 ||
	    epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->evfd, &eev) != 0) {
		rc = hpct__fail(-errno, HPCT_SUB_STD, "rendezvous %s: epoll_ctl: %s", s->addr,
		                strerror(errno));
		goto close_eventfd;
	}
	pthread_mutex_init(&s->lock, NULL);
	rc = pthread_create(&s->thread, NULL, server_main, s);
	if (rc != 0) {
		rc = hpct__fail(-rc, HPCT_SUB_STD, "rendezvous %s: cannot start its thread (%s)",
		                s->addr, strerror(rc));
		goto destroy_lock;
	}
	HPCT_INFO(HPCT_SUB_STD,
	          "rendezvous serving %d ranks at %s (limits: %zu bytes and %zu keys stored, "
	          "%zu bytes per rank, %u keys per MGET, HELLO within %.1f s, %zu connections "
	          "before HELLO)",
	          nranks, s->addr, lim->store_bytes, lim->store_keys, lim->rank_bytes,
	          lim->mget_keys, lim->hello_s, lim->early_conns);
	*server_out = s;
	return 0;

destroy_lock:
	pthread_mutex_destroy(&s->lock);
close_eventfd:
	close(s->evfd);
close_epoll:
	close(s->epfd);
close_listener:
	close(s->lfd);
free_server:
	free(s->tab.owned);
	free(s->tab.b);
	free(s->by_rank);
	free(s->secret);
	free(s);
	return rc;
}

/* Every connection and key, once the thread is gone. */
static void drop_all(struct hpct_std_server *s)
{
	s->final = 1; /* closing them ourselves loses no rank */
	while (s->conns) {
		struct conn *c = s->conns;
		hpct__stdsrv_conn_close(c); /* unlinks c and moves it to deadq */
	}
	free_dead(s);
	for (size_t i = 0; i <= s->tab.mask; i++) {
		while (s->tab.b[i]) {
			struct entry *e = s->tab.b[i];
			s->tab.b[i] = e->next;
			free(e->val);
			free(e);
		}
	}
}

/* For the fuzz target: `data` as the bytes of one client's connection to a
 * server of 4 ranks of job HPCT_STD_FUZZ_JOB, fed as the thread feeds them
 * (as much as there is room for, then parsed), replies dropped; then all
 * is freed. */
HPCT_PRIVATE void hpct__std_fuzz_one(const unsigned char *data, size_t len)
{
	struct hpct_std_server *s = calloc(1, sizeof(*s));
	struct conn *c = calloc(1, sizeof(*c));
	if (!s || !c || !(s->by_rank = calloc(4, sizeof(*s->by_rank))) ||
	    !(s->tab.owned = calloc(4, sizeof(*s->tab.owned))) ||
	    !(s->tab.b = calloc(1024, sizeof(*s->tab.b)))) {
		if (s) {
			free(s->by_rank);
			free(s->tab.owned);
		}
		free(s);
		free(c);
		return;
	}
	s->nranks = 4;
	s->job = HPCT_STD_FUZZ_JOB;
	/* 4 ranks' limits with a small store, so inputs reach its refusals */
	s->lim = (struct hpct_std_limits){ .hello_s = 120,
		                           .mget_keys = 4 + 64,
		                           .mget_key_bytes = (4 + 64) * 512,
		                           .store_bytes = 1u << 20,
		                           .rank_bytes = 1u << 19,
		                           .store_keys = 64,
		                           .early_conns = 8 + 256 };
	s->lost_rank = -1;
	s->lost_epoch = -1;
	s->epfd = s->lfd = s->evfd = -1;
	s->tab.mask = 1023;
	snprintf(s->addr, sizeof(s->addr), "fuzz");
	c->s = s;
	c->fd = -1;
	c->rank = -1;
	c->admitted = 1;
	snprintf(c->peer, sizeof(c->peer), "fuzz");
	s->conns = c;
	while (len > 0 && !c->dead && !c->closing) {
		unsigned char *dst;
		size_t room = read_room(c, &dst);
		if (room == 0)
			break; /* parked with a full buffer */
		size_t k = len < room ? len : room;
		memcpy(dst, data, k);
		if (dst != c->in + c->ilen)
			c->vgot += (uint32_t)k;
		else
			c->ilen += k;
		data += k;
		len -= k;
		hpct__stdsrv_conn_progress(c);
		c->opos = c->olen = 0; /* the replies */
	}
	/* What the limits rest on: every present key charged to a rank, the
	 * charges adding up, values being received counted. */
	size_t bytes = 0, owned = 0;
	for (size_t i = 0; i <= s->tab.mask; i++)
		for (struct entry *e = s->tab.b[i]; e; e = e->next) {
			if (e->present != (e->owner >= 0))
				abort();
			if (e->present)
				bytes += ENTRY_COST(e->klen) + e->vlen;
		}
	for (int r = 0; r < 4; r++)
		owned += s->tab.owned[r];
	if (bytes != s->tab.bytes || owned != bytes || s->inflight != c->vcap)
		abort();
	drop_all(s);
	free(s->tab.owned);
	free(s->tab.b);
	free(s->by_rank);
	free(s);
}

void hpct__std_server_stop(struct hpct_std_server *s, double deadline)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	s->stopping = 1;
	s->stop_deadline = deadline;
	pthread_mutex_unlock(&s->lock);
	uint64_t one = 1;
	if (write(s->evfd, &one, sizeof(one)) < 0)
		HPCT_WARN(HPCT_SUB_STD, "rendezvous %s: cannot wake its thread (%s)", s->addr,
		          strerror(errno));
	pthread_join(s->thread, NULL);
	drop_all(s);
	HPCT_INFO(HPCT_SUB_STD, "rendezvous %s stopped after %.3f s", s->addr, hpct__now() - s->t0);
	close(s->evfd);
	close(s->epfd);
	close(s->lfd);
	pthread_mutex_destroy(&s->lock);
	free(s->tab.owned);
	free(s->tab.b);
	free(s->by_rank);
	free(s->secret);
	free(s);
}

size_t hpct__std_server_keys(const struct hpct_std_server *s)
{
	return s->tab.count;
}

uint64_t hpct__std_server_wakeups(const struct hpct_std_server *s)
{
	return s->wakeups;
}
