/* The rootless store's server (see store.h): one thread per process, serving
 * the keys whose home is this rank (table.c) with the requests' semantics
 * of requests.c: the listener, non-blocking connections, the shared-secret
 * proof, the bounds on what a client can make a rank hold, and the
 * socket-free hook the fuzz target drives.  The same loop carries the
 * replication protocol (vr.c): peers' connections (peer.c) are read here,
 * the groups' timers run here (groups.c), and an answer is not sent (nor
 * POLLOUT asked) until its group says it may go; the thread never waits on
 * another rank.
 *
 * What a client can make a rank hold, and for how long:
 *   - a connection that has not proved the secret (HPCT_SECRET) or, with no
 *     secret, has not sent a whole first request, is closed after
 *     HPCT_STORE_ADMIT_TIMEOUT; once admitted it may idle for ever (a
 *     PyTorch client parks in WAIT as long as its job likes);
 *   - at most 4 connections a rank of the job, and at least 4096
 *     (max_conns): the next is accepted, closed and logged;
 *   - out of descriptors (EMFILE), accepting pauses (PAUSE_S, or until a
 *     connection closes) instead of spinning on a listener that stays
 *     readable;
 *   - a connection's input buffer holds what came and an eighth, never a
 *     frame's claimed length up front, and none once served; while it
 *     waits for a reply to drain or a parked request, it reads at most
 *     WINDOW more (a client sends one request at a time);
 *   - requests and replies on their way, over all connections, and keys
 *     and values stored, each at most HPCT_STORE_MAX_BYTES; keys at most
 *     HPCT_STORE_MAX_KEYS.  A refused SET/ADD/CAS is answered HPCT_ENOMEM;
 *     an input past the cap closes its connection.  Each refusal is logged
 *     naming the client, the key and the limit. */
#include "bootstrap/base/fdtrack.h"
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
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/base/auth.h"
#include "bootstrap/base/budget.h"
#include "bootstrap/base/bytes.h"
#include "bootstrap/base/log.h"
#include "bootstrap/base/param.h"
#include "bootstrap/base/sock.h"
#include "bootstrap/base/util.h"
#include "bootstrap/store/server.h"
#include "bootstrap/store/store_internal.h"
#include "bootstrap/store/table.h"
#include "bootstrap/topo/derive.h"
#include "bootstrap/world.h"

/* A rank's clients are the job's ranks: one connection from each per
 * store handle that used a key homed here (torch opens one or two), so a
 * key every rank reads brings the whole job.  Connections beyond
 * CONNS_PER_RANK a rank of the job, and at least MIN_CONNS, are closed as
 * they come; an idle admitted one costs some 400 bytes. */
#define MIN_CONNS      4096
#define CONNS_PER_RANK 4
#define WINDOW         65536u /* what a read may take beyond what came */
#define PAUSE_S        0.1    /* accepting paused on EMFILE, at most */
#define LINGER_S       2.0    /* a leaving rank waits for its clients, at most */
#define HANDOFF_S      1.0    /* an exiting rank waits to be replaced, at most */

static struct ssrv srv = { .mu = PTHREAD_MUTEX_INITIALIZER,
	                   .wmu = PTHREAD_MUTEX_INITIALIZER,
	                   .cv = PTHREAD_COND_INITIALIZER,
	                   .lfd = -1,
	                   .wake = { -1, -1 } };

/* "10.0.0.3:41234 (rank 7)": the address, and the rank it proved. */
const char *ssrv_who(const struct ssrv *s, const struct sconn *c, char *buf, size_t len)
{
	if (s->secret && c->admitted)
		snprintf(buf, len, "%s (rank %u)", c->peer, c->auth.hello.src);
	else
		snprintf(buf, len, "%s", c->peer);
	return buf;
}

/* The request's bytes past WINDOW come out of the process's in-flight
 * budget (shared with the fan-outs and Gloo's connects) before they are
 * read: taken without waiting, since this loop serves every client; when
 * refused, the connection is not read (its client waits in TCP) and the
 * loop asks again at its next turn.  1: wait. */
static int reserve(struct sconn *c)
{
	if (c->inlen < 4 || c->fuzz || (!c->admitted && srv.secret)) /* a proof, no frame */
		return 0;
	uint64_t fl = hpct__get32(c->in), want = fl + 4 > WINDOW ? fl + 4 - WINDOW : 0;
	if (want <= c->budget_for)
		return c->budget_wait = 0;
	uint64_t got;
	if (hpct__inflight_take(want - c->budget_for, 0, hpct__now(), &got) != 0)
		return c->budget_wait = 1;
	c->budget += got;
	c->budget_for = want;
	return c->budget_wait = 0;
}

static void unreserve(struct sconn *c)
{
	if (c->budget)
		hpct__inflight_give(c->budget, 0);
	c->budget = c->budget_for = 0;
	c->budget_wait = 0;
}

/* Closes a connection's socket, out of the epoll set first: a forked
 * child may hold the socket open, and the set would still report it. */
static void conn_close(struct sconn *c)
{
	if (c->fd < 0)
		return;
	if (c->reg)
		epoll_ctl(srv.ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->fd = -1;
	c->reg = 0;
}

static void drop(int i)
{
	struct sconn *c = &srv.c[i];
	unreserve(c);
	conn_close(c);
	set_incap(&srv, c, 0);
	set_outcap(&srv, c, 0);
	sval_release(&srv.t, c->oval);
	free(c->in);
	free(c->out);
	free(c->key);
	sdata_release(c->stage);
	srv.c[i] = srv.c[--srv.nc];
	if (i < srv.nc)
		srv.c[i].ev = UINT32_MAX; /* a new slot: registered again (watch) */
	srv.resume_at = 0;                /* a descriptor came free: try accepting again */
}

/* Serves the first whole frame buffered: 1 served, 0 none there, -1 close
 * the connection (a frame over HPCT_STORE_MAX_FRAME, or malformed). */
static int serve_one(struct sconn *c, double now)
{
	if (c->inlen < 4)
		return 0;
	uint32_t fl = hpct__get32(c->in);
	if (fl > HPCT_STORE_MAX_FRAME + (c->from >= 0 ? HPCT_STORE_MAX_FRAME : 0) || fl == 0)
		return -1;
	if (c->inlen - 4 < fl)
		return 0;
	const unsigned char *f = c->in + 4;
	if (c->from >= 0) { /* a peer's */
		if (speer_frame(&srv, c, f, fl, now) < 0)
			return -1;
	} else if (f[0] == OP_PEER && !c->served) {
		if (speer_hello(&srv, c, f, fl) < 0)
			return -1;
	} else if (__atomic_load_n(&srv.leaving, __ATOMIC_ACQUIRE)) { /* the cause: this rank leaves */
		sreq_answer(&srv, c, HPCT_EPEERDEAD, srv.cause, strlen(srv.cause));
		c->told = 1;
	} else {
		if (sreq_serve(&srv, c, f, fl, now) < 0)
			return -1;
		if (c->blocked) /* served later: its frame stays */
			return 0;
	}
	c->served = 1;
	c->admitted = 1; /* without a secret, a whole request admits it */
	unreserve(c);
	c->inlen -= 4 + (size_t)fl;
	memmove(c->in, c->in + 4 + fl, c->inlen);
	if (c->inlen == 0) { /* an idle connection holds no buffer */
		free(c->in);
		c->in = NULL;
		set_incap(&srv, c, 0);
	} else if (c->incap > 4 * WINDOW && c->inlen < c->incap / 4) {
		/* a big request is done: give back what it took */
		unsigned char *in = realloc(c->in, c->inlen + c->inlen / 8);
		if (in) {
			c->in = in;
			set_incap(&srv, c, c->inlen + c->inlen / 8);
		}
	}
	return 1;
}

static void flush(struct sconn *c)
{
	if (sgrp_held(&srv, c, hpct__now())) /* its group may not answer it yet */
		return;
	c->held = 0;
	while (c->fd >= 0 && pending(c)) {
		int head = c->outoff < c->outlen;
		const unsigned char *p = head ? c->out + c->outoff : c->oval->b + c->ovoff;
		size_t n = head ? c->outlen - c->outoff : c->oval->len - c->ovoff;
		ssize_t w = send(c->fd, p, n,
		                 MSG_DONTWAIT | MSG_NOSIGNAL | (head && c->oval ? MSG_MORE : 0));
		if (w < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				conn_close(c);
			return;
		}
		if (head)
			c->outoff += (size_t)w;
		else if ((c->ovoff += (size_t)w) == c->oval->len) {
			sval_release(&srv.t, c->oval);
			c->oval = NULL;
		}
	}
	/* sent (or, with no socket, dropped) */
	sval_release(&srv.t, c->oval);
	c->oval = NULL;
	c->outlen = c->outoff = 0;
	if (c->outcap > 4096) {
		free(c->out);
		c->out = NULL;
		set_outcap(&srv, c, 0);
	}
}

/* Sends what is due and serves what came, one request at a time: a reply
 * must be gone, and a parked request answered, before the next is served.
 * -1: close the connection. */
static int progress(struct sconn *c, double now)
{
	for (;;) {
		flush(c);
		if (c->fd < 0 && !c->fuzz)
			return -1;
		if (pending(c) || c->parked || (!c->admitted && srv.secret))
			return 0;
		int r = serve_one(c, now);
		if (r <= 0)
			return r;
	}
}

/* A group moved on: answers held or parked on a group this rank is no
 * longer the primary of become its position (the client asks the one it
 * names); requests left for later are served; held answers that may go,
 * go. */
void ssrv_rescan(struct ssrv *s)
{
	s->rescan = 0;
	double now = hpct__now();
	for (int i = 0; i < s->nc; i++) {
		struct sconn *c = &s->c[i];
		if (c->fd < 0 && !c->fuzz)
			continue;
		if (c->from < 0 && (c->held || c->parked)) {
			struct vr *v = sgrp_get(s, c->g, 0);
			if (!v || !vr_primary(v, &s->vw) || hpct__store_fenced(NULL, 0)) {
				if (c->held) { /* what it would have said may never be true */
					sval_release(&s->t, c->oval);
					c->oval = NULL;
					c->outlen = c->outoff = 0;
					c->held = 0;
				}
				if (c->parked)
					sreq_unpark(c);
				sreq_redirect(s, c, c->g);
			}
		}
		if (progress(c, now) < 0)
			conn_close(c);
	}
}

/* A connection's first bytes are its proof when there is a secret
 * (auth.h): 0 when admitted or still proving, -1 to close it (refused,
 * logged with the address it came from). */
static void refused(const struct sconn *c, const char *why)
{
	HPCT_WARN(HPCT_SUB_NET, "store: rank %d refused a connection from %s: %s", srv.rank,
	          c->peer, why);
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

/* 1 while the connection waits on a reply to drain or a parked request:
 * a client sends one request at a time, so it may have sent WINDOW at
 * most meanwhile. */
static int stalled(const struct sconn *c)
{
	return (pending(c) || c->parked) && c->inlen >= WINDOW;
}

/* Takes n bytes that came into the connection's buffer, which grows to
 * what came and an eighth (a 64 MiB request in some 60 steps), never past
 * one frame (WINDOW while proving a secret), nor past HPCT_STORE_MAX_BYTES
 * over all connections.  0, or -1: close it (logged). */
static int take(struct sconn *c, const unsigned char *p, size_t n)
{
	size_t need = c->inlen + n;
	if (need > c->incap) {
		size_t lim = !c->admitted && srv.secret ? WINDOW
		             : c->from >= 0 /* an entry: a value and an answer */
		                     ? 2 * (size_t)HPCT_STORE_MAX_FRAME + 4 + WINDOW
		                     : HPCT_STORE_MAX_FRAME + 4 + WINDOW;
		size_t cap = need + need / 8;
		if (cap > lim)
			cap = lim;
		if (cap < need)
			return -1; /* more than a frame: serve_one would have closed it */
		if (srv.inflight - c->incap + cap > srv.t.max_bytes) {
			unsigned long quiet;
			char w[HPCT_ADDRSTRLEN + 32];
			if (hpct__log_burst_ok(&srv.b_inflight, &quiet))
				HPCT_WARN(HPCT_SUB_NET,
				          "store: rank %d closed the connection from %s: requests "
				          "and "
				          "replies on their way would take %zu bytes, over "
				          "HPCT_STORE_MAX_BYTES=%zu (%zu bytes of its request "
				          "came)%s%.0lu%s",
				          srv.rank, ssrv_who(&srv, c, w, sizeof(w)),
				          srv.inflight - c->incap + cap, srv.t.max_bytes, need,
				          quiet ? " (and " : "", quiet,
				          quiet ? " more in the last second)" : "");
			return -1;
		}
		unsigned char *in = realloc(c->in, cap);
		if (!in)
			return -1;
		c->in = in;
		set_incap(&srv, c, cap);
	}
	memcpy(c->in + c->inlen, p, n);
	c->inlen = need;
	return 0;
}

/* Reads what came and serves it.  -1: close it. */
static int on_readable(struct sconn *c, short revents)
{
	static unsigned char scratch[WINDOW]; /* the server thread's alone */
	for (;;) {
		if (stalled(c)) /* closed or broken is all it can tell us now */
			return revents & (POLLHUP | POLLERR) ? -1 : 0;
		if (reserve(c))
			return 0;
		ssize_t n = recv(c->fd, scratch, sizeof(scratch), MSG_DONTWAIT);
		char why[160];
		if (n == 0 && !c->admitted && srv.secret &&
		    hpct__auth_server_gone(&c->auth, why, sizeof(why)))
			refused(c, why);
		if (n == 0)
			return -1;
		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
		if (take(c, scratch, (size_t)n) < 0)
			return -1;
		if (!c->admitted && srv.secret) {
			if (admit(c) < 0)
				return -1;
			if (!c->admitted)
				continue;
		}
		if (progress(c, hpct__now()) < 0) /* the time it was read */
			return -1;
	}
}

/* For the fuzz target: `data` as bytes from one connection, served as the
 * thread would (replies dropped as they are made), then every key
 * forgotten.  Small caps, so that inputs reach the refusals.  -1 when
 * the accounting did not come back to nothing. */
HPCT_PRIVATE int hpct__store_fuzz_one(const unsigned char *data, size_t len)
{
	if (!srv.t.tab && stab_init(&srv.t, 64, 16384) != 0)
		return 0;
	if (sgrp_solo(&srv) != 0)
		return 0;
	struct sconn c = { .fd = -1, .admitted = 1, .fuzz = 1, .from = -1 };
	srv.c = &c;
	srv.nc = 1;
	if ((c.in = malloc(len ? len : 1))) {
		memcpy(c.in, data, len);
		c.inlen = len;
		set_incap(&srv, &c, len);
		progress(&c, hpct__now());
	}
	set_incap(&srv, &c, 0);
	set_outcap(&srv, &c, 0);
	sval_release(&srv.t, c.oval);
	free(c.in);
	free(c.out);
	free(c.key);
	sdata_release(c.stage);
	srv.c = NULL;
	srv.nc = 0;
	sdata_install(&srv, 0, NULL); /* the kept answers too */
	int bad = srv.t.n > srv.t.max_keys || srv.t.bytes > srv.t.max_bytes;
	stab_clear(&srv.t);
	return bad || srv.t.n || srv.t.bytes || srv.inflight ? -1 : 0;
}

/* Closes a connection that did not get admitted in time, saying how far
 * it got. */
static void too_slow(struct sconn *c)
{
	char how[96];
	if (srv.secret)
		snprintf(how, sizeof(how), "%s",
		         c->auth.state == 0 && c->inlen == 0 && c->auth.have == 0
		                 ? "it sent nothing"
		         : c->auth.state == 0 ? "its HELLO was not whole"
		                              : "it never sent its proof after our CHALLENGE");
	else if (c->inlen == 0)
		snprintf(how, sizeof(how), "it sent nothing");
	else if (c->inlen < 4)
		snprintf(how, sizeof(how), "%zu bytes came, less than a frame's length", c->inlen);
	else
		snprintf(how, sizeof(how), "%zu of the %" PRIu32 " bytes of its first request came",
		         c->inlen - 4, hpct__get32(c->in));
	unsigned long quiet;
	if (hpct__log_burst_ok(&srv.b_admit, &quiet))
		HPCT_WARN(HPCT_SUB_NET,
		          "store: rank %d closed the connection from %s: no %s within "
		          "HPCT_STORE_ADMIT_TIMEOUT=%.1f s (%s)%s%.0lu%s",
		          srv.rank, c->peer,
		          srv.secret ? "proof of the secret (HPCT_SECRET)" : "whole first request",
		          srv.admit_s, how, quiet ? " (and " : "", quiet,
		          quiet ? " more in the last second)" : "");
	conn_close(c);
}

static void accept_all(double now)
{
	for (;;) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int fd =
		        accept4(srv.lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		hpct__fd_track(fd);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno != EMFILE && errno != ENFILE && errno != ENOBUFS &&
			    errno != ENOMEM)
				return; /* EAGAIN: all taken */
			/* the listener stays readable: polling it now would spin */
			srv.resume_at = now + PAUSE_S;
			if (!srv.pause_told) {
				struct rlimit rl = { 0 };
				getrlimit(RLIMIT_NOFILE, &rl);
				HPCT_WARN(HPCT_SUB_NET,
				          "store: rank %d cannot accept connections at %s: %s "
				          "(descriptors: RLIMIT_NOFILE %llu; %d store connections "
				          "open); accepting paused until one closes, tried again "
				          "every %.1f s",
				          srv.rank, srv.where, strerror(errno),
				          (unsigned long long)rl.rlim_cur, srv.nc, PAUSE_S);
				srv.pause_told = 1;
			}
			return;
		}
		if (srv.pause_told) {
			HPCT_INFO(HPCT_SUB_NET, "store: rank %d accepts connections at %s again",
			          srv.rank, srv.where);
			srv.pause_told = 0;
		}
		char peer[HPCT_ADDRSTRLEN];
		hpct__addr_str((struct sockaddr *)&ss, peer, sizeof(peer));
		if (srv.nc == srv.ccap && srv.nc < srv.max_conns) { /* doubled: few copies */
			int cap = srv.ccap ? srv.ccap * 2 : 16;
			struct sconn *c = realloc(srv.c, (size_t)cap * sizeof(*c));
			if (c) {
				srv.c = c;
				srv.ccap = cap;
			}
		}
		if (srv.nc == srv.ccap || srv.nc >= srv.max_conns) {
			unsigned long quiet;
			if (hpct__log_burst_ok(&srv.b_conns, &quiet))
				HPCT_WARN(HPCT_SUB_NET,
				          "store: rank %d at %s closed the connection from %s: it "
				          "holds %d connections, %s%s%.0lu%s",
				          srv.rank, srv.where, peer, srv.nc,
				          srv.nc < srv.max_conns
				                  ? "and no memory for more"
				                  : "its most (4 a rank of the job, at least 4096)",
				          quiet ? " (and " : "", quiet,
				          quiet ? " more in the last second)" : "");
			close(fd);
			continue;
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		struct sconn *c = &srv.c[srv.nc++];
		*c = (struct sconn){ .fd = fd, .admit_by = now + srv.admit_s, .from = -1 };
		memcpy(c->peer, peer, sizeof(peer));
	}
}

/* The process is exiting after a peer's failure: every parked request is
 * answered with the cause now (and any that comes, by serve_one), rather
 * than by the close of its connection, which would name only this rank. */
static void tell_leaving(void)
{
	char b[64];
	ssize_t n;
	int leaving = 0, leave = 0;
	while ((n = read(srv.wake[0], b, sizeof(b))) > 0) {
		leaving |= memchr(b, 'l', (size_t)n) != NULL;
		leave |= memchr(b, 'L', (size_t)n) != NULL;
	}
	if (leaving) /* the process is about to exit: its groups replace it */
		sgrp_leaving(&srv, hpct__now());
	if (leave) /* it exits now */
		sgrp_leave(&srv);
	pthread_mutex_lock(&srv.mu);
	int told_why = srv.leaving;
	pthread_mutex_unlock(&srv.mu);
	if (!told_why)
		return;
	int told = 0;
	for (int i = 0; i < srv.nc; i++) {
		struct sconn *c = &srv.c[i];
		if (c->parked) {
			sreq_answer(&srv, c, HPCT_EPEERDEAD, srv.cause, strlen(srv.cause));
			sreq_unpark(c);
			c->told = 1;
			told++;
		}
		if (c->fd >= 0 && progress(c, hpct__now()) < 0)
			conn_close(c);
	}
	HPCT_INFO(HPCT_SUB_NET,
	          "store: rank %d is leaving after a peer's failure: %d parked requests told "
	          "(%s), and any that come",
	          srv.rank, told, srv.cause);
	pthread_mutex_lock(&srv.mu);
	srv.told = 1;
	pthread_cond_broadcast(&srv.cv);
	pthread_mutex_unlock(&srv.mu);
}

/* While leaving (the thread): 1 once every connection but this process's
 * own has been told why, or has closed; signalled to leave(). */
static void check_clear(void)
{
	if (!srv.told || srv.clear)
		return;
	for (int i = 0; i < srv.nc; i++) {
		const struct sconn *c = &srv.c[i];
		int own = 0;
		for (int k = 0; k < srv.nown && !own; k++)
			own = strcmp(c->peer, srv.own[k]) == 0;
		if (c->fd >= 0 && !c->told && !own)
			return;
	}
	pthread_mutex_lock(&srv.mu);
	srv.clear = 1;
	pthread_cond_broadcast(&srv.cv);
	pthread_mutex_unlock(&srv.mu);
}

/* hand_off's wait: until done() holds, or `s` seconds passed. */
static void linger(int (*done)(void), double s)
{
	double until = hpct__now() + s;
	while (hpct__now() < until) {
		pthread_mutex_lock(&srv.wmu);
		int d = done();
		pthread_mutex_unlock(&srv.wmu);
		if (d)
			break;
		hpct__sleep(0.0005);
	}
}

static int replaced(void)
{
	return srv.vw.leaving && sgrp_leaving(&srv, hpct__now()) == 0;
}

static int gone(void)
{
	return srv.vw.left && speer_flushed(&srv);
}

/* At exit: this rank asks each of its groups to replace it, and serves on
 * as their member until each has (a configuration without it committed:
 * sgrp_leaving on the server thread), for HANDOFF_S at most; then it says
 * it is gone (GONE to the other members) and waits until that is sent, a
 * tenth of a second at most (LINGER_S and HPCT_TIMEOUT cap both).  Ranks
 * that finish one after another so leave every key with the ranks still
 * running. */
static void hand_off(void)
{
	double cap = srv.timeout_s < LINGER_S ? srv.timeout_s : LINGER_S;
	if (write(srv.wake[1], "l", 1) == 1)
		linger(replaced, cap < HANDOFF_S ? cap : HANDOFF_S);
	if (write(srv.wake[1], "L", 1) == 1)
		linger(gone, cap < 0.1 ? cap : 0.1);
}

/* At exit (atexit): first the keys handed on (hand_off); then, when
 * this process's store found a peer dead, the server thread tells the
 * clients parked here why this rank leaves, and any that ask until each
 * connection of another process has been told or has closed (LINGER_S,
 * and HPCT_TIMEOUT, at most), so that a rank that asks late names the
 * first failure too, not this rank. */
static void leave(void)
{
	char cause[sizeof(srv.cause) - 64];
	if (getpid() != srv.pid)
		return;
	hand_off();
	if (!hpct__store_first_dead(cause, sizeof(cause)))
		return;
	char(*own)[HPCT_ADDRSTRLEN] = calloc(64, HPCT_ADDRSTRLEN);
	int nown = own ? hpct__store_own_addrs(own, 64) : 0;
	pthread_mutex_lock(&srv.mu);
	snprintf(srv.cause, sizeof(srv.cause), "%s", cause);
	srv.own = own;
	srv.nown = nown;
	__atomic_store_n(&srv.leaving, 1, __ATOMIC_RELEASE);
	ssize_t w = write(srv.wake[1], "x", 1);
	double cap = srv.timeout_s < LINGER_S ? srv.timeout_s : LINGER_S;
	struct timespec until = hpct__timespec_in(CLOCK_REALTIME, cap);
	while (w == 1 && !srv.clear && pthread_cond_timedwait(&srv.cv, &srv.mu, &until) == 0)
		;
	pthread_mutex_unlock(&srv.mu);
}

/* The world ends: the server and its forwarder use it no more (the
 * server thread itself stays, serving this process's last requests). */
static void world_end(struct hpct_world *w, void *ctx)
{
	(void)ctx;
	pthread_mutex_lock(&srv.wmu);
	if (srv.w == w)
		srv.w = NULL;
	pthread_mutex_unlock(&srv.wmu);
	w->svc[HPCT_WORLD_SLOT_STORE].ops = NULL;
}

static void world_recovered(struct hpct_world *w, void *ctx, uint64_t old_epoch)
{
	(void)ctx, (void)old_epoch;
	pthread_mutex_lock(&srv.wmu); /* a new epoch: its keyspace, every rank a member again */
	srv.w = w;
	sgrp_reset(&srv);
	pthread_mutex_unlock(&srv.wmu);
}

static const struct hpct_world_service_ops world_ops = {
	.name = "store",
	.recovered = world_recovered,
	.end = world_end,
};

/* What a connection waits for: its requests, unless it may not read
 * now, and room for its reply, when one may go. */
static uint32_t wanted(struct sconn *c)
{
	return (stalled(c) || c->budget_wait ? 0 : EPOLLIN) |
	       (pending(c) && !sgrp_held(&srv, c, hpct__now()) ? EPOLLOUT : 0);
}

/* Registers the connection in slot i for what it waits for now; 0, or -1
 * when the epoll set refused it (tried again at the next turn). */
static int watch(int i)
{
	struct sconn *c = &srv.c[i];
	uint32_t ev = wanted(c);
	if (c->reg && c->ev == ev)
		return 0;
	struct epoll_event e = { .events = ev,
		                 .data.u64 = (uint64_t)(uint32_t)c->fd << 32 | (uint32_t)i };
	if (epoll_ctl(srv.ep, c->reg ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c->fd, &e) != 0)
		return -1;
	c->reg = 1;
	c->ev = ev;
	return 0;
}

/* The listener and the wake pipe in the epoll set: their data, an fd
 * past any slot. */
#define LISTENER UINT32_MAX
#define WAKE     (UINT32_MAX - 1)
#define CONNQ    (UINT32_MAX - 2) /* connections to peers made (peer.c) */

static void *server_main(void *arg)
{
	pthread_setname_np(pthread_self(), "hpct-store"); /* in top, gdb, perf */
	(void)arg;
	struct epoll_event evs[64];
	struct epoll_event wake = { .events = EPOLLIN, .data.u64 = WAKE };
	struct epoll_event conns = { .events = EPOLLIN, .data.u64 = CONNQ };
	epoll_ctl(srv.ep, EPOLL_CTL_ADD, srv.wake[0], &wake);
	epoll_ctl(srv.ep, EPOLL_CTL_ADD, srv.cq[0], &conns);
	int listening = 0; /* the listener is in the set */
	pthread_mutex_lock(&srv.wmu); /* the world, and all the store's state */
	for (;;) {
		double now = hpct__now(), next = sgrp_tick(&srv, now);
		if (srv.rescan)
			ssrv_rescan(&srv);
		for (int i = 0; i < srv.nc; i++) {
			struct sconn *c = &srv.c[i];
			if (c->parked && c->deadline <= now) { /* its wait is over */
				sreq_reply(&srv, c, HPCT_ETIMEDOUT, NULL, 0, NULL, 0);
				sreq_unpark(c);
			}
			if (c->fd >= 0 && !c->admitted && c->admit_by <= now)
				too_slow(c);
			if (c->fd >= 0 && progress(c, now) < 0)
				conn_close(c);
			if (c->parked && c->deadline < next)
				next = c->deadline;
			if (c->fd >= 0 && !c->admitted && c->admit_by < next)
				next = c->admit_by;
			if (c->fd >= 0 && c->budget_wait && reserve(c) && now + 0.01 < next)
				next = now + 0.01;
		}
		for (int i = srv.nc - 1; i >= 0; i--)
			if (srv.c[i].fd < 0)
				drop(i);
		for (int i = 0; i < srv.nc; i++)
			if (watch(i) != 0 && now + 0.01 < next)
				next = now + 0.01;
		int paused = srv.resume_at > now;
		if (paused && srv.resume_at < next)
			next = srv.resume_at;
		if (paused == listening) {
			struct epoll_event l = { .events = EPOLLIN, .data.u64 = LISTENER };
			if (epoll_ctl(srv.ep, paused ? EPOLL_CTL_DEL : EPOLL_CTL_ADD, srv.lfd,
			              &l) == 0)
				listening = !paused;
			else if (now + 0.01 < next)
				next = now + 0.01;
		}
		int ms = next > now ? (int)((next - now) * 1000) + 1 : 0;
		pthread_mutex_unlock(&srv.wmu);
		check_clear();
		int ne = epoll_wait(srv.ep, evs, (int)(sizeof(evs) / sizeof(evs[0])), ms);
		if (ne < 0) {
			if (errno != EINTR)
				hpct__sleep(0.01);
			ne = 0;
		}
		pthread_mutex_lock(&srv.wmu);
		int accept = 0, woken = 0, made = 0;
		/* the time after the wait: what it brought was read after it (vr.h) */
		now = hpct__now();
		for (int k = 0; k < ne; k++) {
			uint64_t d = evs[k].data.u64;
			uint32_t i = (uint32_t)d;
			accept |= d == LISTENER;
			woken |= d == WAKE;
			made |= d == CONNQ;
			if (d & PEER_TAG) {
				speer_event(&srv, (int)(d & ~PEER_TAG), evs[k].events, now);
				continue;
			}
			if (d == LISTENER || d == WAKE || d == CONNQ || i >= (uint32_t)srv.nc ||
			    srv.c[i].fd != (int)(d >> 32))
				continue;
			uint32_t e = evs[k].events;
			short re =
			        (short)((e & EPOLLIN ? POLLIN : 0) | (e & EPOLLHUP ? POLLHUP : 0) |
			                (e & EPOLLERR ? POLLERR : 0));
			if (re && on_readable(&srv.c[i], re) < 0)
				conn_close(&srv.c[i]);
		}
		if (made)
			speer_connected(&srv, hpct__now());
		if (accept)
			accept_all(hpct__now());
		if (woken)
			tell_leaving();
	}
	return NULL;
}

/* The bounds (server.c's head comment), from the settings table. */
static int read_bounds(void)
{
	const struct hpct_env *env = hpct__env_process();
	long keys, bytes;
	int rc = hpct__env_int(env, "HPCT_STORE_MAX_KEYS", 1, 1L << 40, 1L << 20, &keys, NULL);
	if (rc == 0)
		rc = hpct__env_int(env, "HPCT_STORE_MAX_BYTES", 1L << 16, 1L << 50, 1L << 30,
		                   &bytes, NULL);
	if (rc == 0)
		rc = hpct__env_seconds(env, "HPCT_STORE_ADMIT_TIMEOUT", &srv.admit_s, NULL);
	if (rc == 0)
		rc = stab_init(&srv.t, (size_t)keys, (size_t)bytes);
	return rc;
}

int hpct__store_server_start(struct hpct_world *w)
{
	pthread_mutex_lock(&srv.mu);
	int rc = srv.err;
	if (srv.started || rc) {
		pthread_mutex_unlock(&srv.mu);
		return rc;
	}
	srv.rank = w->topo.rank;
	srv.timeout_s = w->topo.timeout_s;
	srv.max_conns = w->topo.size > MIN_CONNS / CONNS_PER_RANK ? w->topo.size * CONNS_PER_RANK
	                                                          : MIN_CONNS;
	struct sockaddr_storage ss;
	socklen_t sl;
	rc = hpct__store_addr(w, w->topo.rank, &ss, &sl, srv.where, sizeof(srv.where));
	int fd = -1;
	if (rc == 0) {
		fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		hpct__fd_track(fd);
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
	if (rc == 0 && (rc = read_bounds()) != 0)
		close(fd);
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
	if (rc == 0 && (rc = sgrp_start(&srv, w)) != 0)
		close(fd);
	if (rc == 0) {
		w->svc[HPCT_WORLD_SLOT_STORE].ops = &world_ops;
		w->svc[HPCT_WORLD_SLOT_STORE].ctx = &srv;
	}
	if (rc == 0 && pipe2(srv.wake, O_NONBLOCK | O_CLOEXEC) != 0) {
		close(fd);
		rc = hpct__fail(-errno, HPCT_SUB_NET, "cannot start the store thread: pipe: %s",
		                strerror(errno));
	}
	if (rc == 0 && (srv.ep = epoll_create1(EPOLL_CLOEXEC)) < 0) {
		rc = hpct__fail(-errno, HPCT_SUB_NET, "cannot start the store thread: epoll: %s",
		                strerror(errno));
		close(fd);
		close(srv.wake[0]);
		close(srv.wake[1]);
	}
	pthread_t th;
	srv.lfd = fd;
	if (rc == 0 && pthread_create(&th, NULL, server_main, NULL) != 0) {
		close(fd);
		close(srv.wake[0]);
		close(srv.wake[1]);
		close(srv.ep);
		rc = hpct__fail(HPCT_ENOMEM, HPCT_SUB_NET, "cannot start the store thread");
	}
	if (rc == 0) {
		pthread_detach(th);
		srv.pid = getpid();
		atexit(leave);
		srv.started = 1;
		HPCT_INFO(HPCT_SUB_NET,
		          "store: rank %d serves its keys at %s (at most %zu keys, %zu bytes; "
		          "admission within %.1f s)",
		          w->topo.rank, srv.where, srv.t.max_keys, srv.t.max_bytes, srv.admit_s);
	} else {
		srv.err = rc;
	}
	pthread_mutex_unlock(&srv.mu);
	return rc;
}
