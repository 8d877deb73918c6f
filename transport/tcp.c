/* TCP transport: non-blocking sockets under one epoll set; each message is
 * framed as a 4-byte big-endian length and its bytes. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap/base/fdtrack.h"
#include "hpct/hpct.h"
#include "transport/transport.h"

enum conn_state { CONNECTING, OPEN, CLOSED };

struct buf {
	unsigned char *data;
	size_t head, tail, cap;
};

struct tcp_conn {
	struct hpct_tconn base; /* first: the engine sees only this */
	struct tcp_ctx *ctx;
	int fd;
	enum conn_state state;
	struct buf out, in;
	struct sockaddr_storage peer;
	socklen_t peer_len;
	int want_out; /* EPOLLOUT armed */
	size_t max_msg;
	struct tcp_conn *next_dead;
};

struct tcp_ctx {
	int epfd;
	int lfd;
	struct tcp_conn *dead; /* closed during progress, freed at its end */
	size_t backlog;        /* bytes queued in every conn's out buffer */
	double listen_resume;  /* > 0: listener paused (fd table full) until then */
	int in_progress;
	/* every open conn, to close them all on destroy */
	struct tcp_conn **conns;
	size_t nconns, capconns;
};

/* Room for `more` bytes after tail.  The capacity doubles, but never past
 * `limit` (0: none) when that is room enough: a receive buffer stops at the
 * end of the frame it holds, not at twice its size. */
static int buf_reserve_to(struct buf *b, size_t more, size_t limit)
{
	if (b->head > 0 && b->head == b->tail)
		b->head = b->tail = 0;
	if (b->tail + more <= b->cap)
		return 0;
	if (b->head > 0) {
		memmove(b->data, b->data + b->head, b->tail - b->head);
		b->tail -= b->head;
		b->head = 0;
		if (b->tail + more <= b->cap)
			return 0;
	}
	size_t cap = b->cap ? b->cap : 4096;
	while (cap < b->tail + more)
		cap *= 2;
	if (limit && cap > limit && limit >= b->tail + more)
		cap = limit;
	unsigned char *d = realloc(b->data, cap);
	if (!d)
		return -ENOMEM;
	b->data = d;
	b->cap = cap;
	return 0;
}

static int buf_reserve(struct buf *b, size_t more)
{
	return buf_reserve_to(b, more, 0);
}

/* A buffer left large by one big message is given back once empty. */
static void buf_trim(struct buf *b)
{
	if (b->head == b->tail && b->cap > (1u << 20)) {
		free(b->data);
		b->data = NULL;
		b->head = b->tail = b->cap = 0;
	}
}

static double mono_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int track(struct tcp_ctx *ctx, struct tcp_conn *c)
{
	if (ctx->nconns == ctx->capconns) {
		size_t cap = ctx->capconns ? ctx->capconns * 2 : 16;
		struct tcp_conn **v = realloc(ctx->conns, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		ctx->conns = v;
		ctx->capconns = cap;
	}
	ctx->conns[ctx->nconns++] = c;
	return 0;
}

static void untrack(struct tcp_ctx *ctx, struct tcp_conn *c)
{
	for (size_t i = 0; i < ctx->nconns; i++) {
		if (ctx->conns[i] == c) {
			ctx->conns[i] = ctx->conns[--ctx->nconns];
			return;
		}
	}
}

static void conn_free(struct tcp_conn *c)
{
	free(c->out.data);
	free(c->in.data);
	free(c);
}

static int tcp_create(void **ctx_out)
{
	struct tcp_ctx *ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	ctx->lfd = -1;
	ctx->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (ctx->epfd < 0) {
		int err = -errno;
		free(ctx);
		return err;
	}
	*ctx_out = ctx;
	return 0;
}

static void tcp_close(struct hpct_tconn *conn);

static void tcp_destroy(void *arg)
{
	struct tcp_ctx *ctx = arg;
	if (!ctx)
		return;
	while (ctx->nconns > 0)
		tcp_close(&ctx->conns[ctx->nconns - 1]->base);
	while (ctx->dead) {
		struct tcp_conn *d = ctx->dead;
		ctx->dead = d->next_dead;
		conn_free(d);
	}
	if (ctx->lfd >= 0)
		close(ctx->lfd);
	close(ctx->epfd);
	free(ctx->conns);
	free(ctx);
}

static int tcp_listen(void *arg, const struct sockaddr *addr, socklen_t len)
{
	struct tcp_ctx *ctx = arg;
	int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	hpct__fd_track(fd);
	if (fd < 0)
		return -errno;
	/* SO_REUSEADDR lets a new incarnation bind over TIME_WAIT; without
	 * SO_REUSEPORT a live listener on the port still makes bind fail. */
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (addr->sa_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(fd, addr, len) < 0 || listen(fd, 4096) < 0) {
		int err = -errno;
		close(fd);
		return err;
	}
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
	if (epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		int err = -errno;
		close(fd);
		return err;
	}
	if (ctx->lfd >= 0) /* moved: the new one is open before the old one goes */
		close(ctx->lfd);
	ctx->lfd = fd;
	return 0;
}

static void set_nodelay(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static int watch(struct tcp_conn *c, int op)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.ptr = c };
	if (c->state == CONNECTING || c->out.tail > c->out.head)
		ev.events |= EPOLLOUT;
	c->want_out = (ev.events & EPOLLOUT) != 0;
	return epoll_ctl(c->ctx->epfd, op, c->fd, &ev) < 0 ? -errno : 0;
}

static struct tcp_conn *conn_new(struct tcp_ctx *ctx, int fd, enum conn_state st)
{
	struct tcp_conn *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->ctx = ctx;
	c->fd = fd;
	c->state = st;
	c->max_msg = HPCT_TRANSPORT_MAX_MSG;
	if (track(ctx, c) < 0 || watch(c, EPOLL_CTL_ADD) < 0) {
		untrack(ctx, c);
		free(c);
		return NULL;
	}
	return c;
}

static int tcp_connect(void *arg, const struct sockaddr *addr, socklen_t len, void *user,
                       struct hpct_tconn **conn_out)
{
	struct tcp_ctx *ctx = arg;
	int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	hpct__fd_track(fd);
	if (fd < 0)
		return -errno;
	set_nodelay(fd);
	if (connect(fd, addr, len) < 0 && errno != EINPROGRESS) {
		int err = -errno;
		close(fd);
		return err;
	}
	struct tcp_conn *c = conn_new(ctx, fd, CONNECTING);
	if (!c) {
		close(fd);
		return -ENOMEM;
	}
	memcpy(&c->peer, addr, len);
	c->peer_len = len;
	c->base.user = user;
	*conn_out = &c->base;
	return 0;
}

/* Writes what it can; arms or disarms EPOLLOUT to match what is left. */
static int flush(struct tcp_conn *c)
{
	while (c->out.tail > c->out.head) {
		ssize_t n = send(c->fd, c->out.data + c->out.head, c->out.tail - c->out.head,
		                 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			return -errno;
		}
		c->out.head += (size_t)n;
		c->ctx->backlog -= (size_t)n;
	}
	buf_trim(&c->out);
	int want = c->out.tail > c->out.head;
	if (want != c->want_out)
		return watch(c, EPOLL_CTL_MOD);
	return 0;
}

static int tcp_send(struct hpct_tconn *conn, const void *data, size_t len)
{
	struct tcp_conn *c = (struct tcp_conn *)conn;
	if (c->state == CLOSED)
		return -EPIPE;
	if (len > HPCT_TRANSPORT_MAX_MSG)
		return -EMSGSIZE;
	uint32_t hdr = htonl((uint32_t)len);
	if (c->state == OPEN && c->out.tail == c->out.head) {
		/* Fast path: straight to the socket, copy only the rest. */
		struct iovec iov[2] = { { &hdr, 4 }, { (void *)data, len } };
		struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 2 };
		/* MSG_NOSIGNAL: a dead peer is an error code, not SIGPIPE */
		ssize_t n = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return -errno;
		size_t done = n > 0 ? (size_t)n : 0;
		if (done == 4 + len)
			return 0;
		if (buf_reserve(&c->out, 4 + len - done) < 0)
			return -ENOMEM;
		if (done < 4) {
			memcpy(c->out.data + c->out.tail, (unsigned char *)&hdr + done, 4 - done);
			c->out.tail += 4 - done;
			done = 4;
		}
		memcpy(c->out.data + c->out.tail, (const unsigned char *)data + (done - 4),
		       len - (done - 4));
		c->out.tail += len - (done - 4);
		c->ctx->backlog += 4 + len - done;
		return flush(c);
	}
	if (buf_reserve(&c->out, 4 + len) < 0)
		return -ENOMEM;
	memcpy(c->out.data + c->out.tail, &hdr, 4);
	memcpy(c->out.data + c->out.tail + 4, data, len);
	c->out.tail += 4 + len;
	c->ctx->backlog += 4 + len;
	return c->state == OPEN ? flush(c) : 0;
}

static size_t tcp_pending(struct hpct_tconn *conn)
{
	struct tcp_conn *c = (struct tcp_conn *)conn;
	return c->out.tail - c->out.head;
}

static void tcp_set_max_msg(struct hpct_tconn *conn, size_t max)
{
	((struct tcp_conn *)conn)->max_msg =
	        max < HPCT_TRANSPORT_MAX_MSG ? max : HPCT_TRANSPORT_MAX_MSG;
}

static size_t tcp_backlog(void *arg)
{
	return ((struct tcp_ctx *)arg)->backlog;
}

static void tcp_close(struct hpct_tconn *conn)
{
	struct tcp_conn *c = (struct tcp_conn *)conn;
	if (!c || c->state == CLOSED)
		return;
	struct tcp_ctx *ctx = c->ctx;
	epoll_ctl(ctx->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	ctx->backlog -= c->out.tail - c->out.head;
	c->fd = -1;
	c->state = CLOSED;
	untrack(ctx, c);
	/* Events for it may still sit in this progress call's batch. */
	c->next_dead = ctx->dead;
	ctx->dead = c;
}

static void tcp_peer_name(struct hpct_tconn *conn, char *buf, size_t len)
{
	struct tcp_conn *c = (struct tcp_conn *)conn;
	char host[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;
	if (c->peer.ss_family == AF_INET) {
		struct sockaddr_in *in = (struct sockaddr_in *)&c->peer;
		inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
		port = ntohs(in->sin_port);
		snprintf(buf, len, "%s:%u", host, port);
	} else if (c->peer.ss_family == AF_INET6) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&c->peer;
		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
		port = ntohs(in6->sin6_port);
		snprintf(buf, len, "[%s]:%u", host, port);
	} else {
		snprintf(buf, len, "?");
	}
}

/* A connect to a port in the ephemeral range can be given that same port as
 * its source and meet itself (TCP simultaneous open). */
static int self_connected(struct tcp_conn *c)
{
	struct sockaddr_storage me;
	socklen_t ml = sizeof(me);
	if (getsockname(c->fd, (struct sockaddr *)&me, &ml) < 0 || ml != c->peer_len)
		return 0;
	return memcmp(&me, &c->peer, ml) == 0;
}

static void emit_close(struct tcp_conn *c, enum hpct_tevent_type type, int err, hpct_tevent_cb cb,
                       void *arg)
{
	struct hpct_tevent ev = { .type = type, .conn = &c->base, .err = err };
	tcp_close(&c->base);
	cb(arg, &ev);
}

static void do_accept(struct tcp_ctx *ctx, hpct_tevent_cb cb, void *arg, int *nev)
{
	for (;;) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int fd = accept4(ctx->lfd, (struct sockaddr *)&ss, &sl,
		                 SOCK_NONBLOCK | SOCK_CLOEXEC);
		hpct__fd_track(fd);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM) {
				/* The listener stays readable: without a pause epoll
				 * would return at once, forever. */
				struct epoll_event ev = { .events = 0, .data.ptr = NULL };
				epoll_ctl(ctx->epfd, EPOLL_CTL_MOD, ctx->lfd, &ev);
				ctx->listen_resume = mono_now() + 0.1;
			}
			return; /* EAGAIN, or a transient error: the listener stays */
		}
		set_nodelay(fd);
		struct tcp_conn *c = conn_new(ctx, fd, OPEN);
		if (!c) {
			close(fd);
			continue;
		}
		memcpy(&c->peer, &ss, sl);
		c->peer_len = sl;
		struct hpct_tevent ev = { .type = HPCT_TEV_ACCEPTED,
			                  .conn = &c->base,
			                  .peer = (struct sockaddr *)&c->peer,
			                  .peer_len = sl };
		cb(arg, &ev);
		(*nev)++;
	}
}

/* Room for the next read.  Memory follows the bytes that came, never the
 * length a peer announces: a peer that claims 256 MB and sends 10 bytes
 * costs one window.  The window is what the conn may receive at most (a
 * stranger before its handshake gets a few hundred bytes, so a page), else
 * 64 KiB; the buffer doubles as it fills, and stops at the end of the frame
 * it holds plus one window, so it is never more than twice what arrived
 * plus a window, nor much more than the largest message. */
static int reserve_in(struct tcp_conn *c)
{
	size_t window = c->max_msg + 4 < 65536 ? c->max_msg + 4 : 65536, limit = 0;
	struct buf *b = &c->in;
	if (b->tail - b->head >= 4) {
		uint32_t len;
		memcpy(&len, b->data + b->head, 4);
		len = ntohl(len);
		/* where the frame ends once the buffer is compacted */
		if (len <= c->max_msg)
			limit = 4 + (size_t)len + window;
	}
	return buf_reserve_to(b, window, limit);
}

/* Reads all that is there and delivers every whole message. */
static void do_read(struct tcp_conn *c, hpct_tevent_cb cb, void *arg, int *nev)
{
	int eof = 0, err = 0;
	for (;;) {
		if (reserve_in(c) < 0) {
			err = -ENOMEM;
			break;
		}
		size_t space = c->in.cap - c->in.tail;
		ssize_t n = recv(c->fd, c->in.data + c->in.tail, space, MSG_DONTWAIT);
		if (n > 0) {
			c->in.tail += (size_t)n;
			if ((size_t)n < space)
				break; /* short read: the socket is drained */
			if (c->in.tail - c->in.head >= 4) {
				uint32_t first;
				memcpy(&first, c->in.data + c->in.head, 4);
				if (ntohl(first) > c->max_msg)
					break; /* refused below, before reading more */
			}
			continue;
		}
		if (n == 0)
			eof = 1;
		else if (errno == EINTR)
			continue;
		else if (errno != EAGAIN && errno != EWOULDBLOCK)
			err = -errno;
		break;
	}
	while (c->state != CLOSED && c->in.tail - c->in.head >= 4) {
		uint32_t len;
		memcpy(&len, c->in.data + c->in.head, 4);
		len = ntohl(len);
		if (len > c->max_msg) {
			emit_close(c, HPCT_TEV_CLOSED, HPCT_EPROTO, cb, arg);
			(*nev)++;
			return;
		}
		/* the buffer grows with the bytes that come, not with the
		 * length a peer announces */
		if (c->in.tail - c->in.head < 4 + (size_t)len)
			break;
		struct hpct_tevent ev = { .type = HPCT_TEV_MESSAGE,
			                  .conn = &c->base,
			                  .data = c->in.data + c->in.head + 4,
			                  .len = len };
		c->in.head += 4 + (size_t)len;
		cb(arg, &ev);
		(*nev)++;
	}
	if (c->state != CLOSED)
		buf_trim(&c->in);
	if (c->state != CLOSED && (eof || err)) {
		emit_close(c, HPCT_TEV_CLOSED, err, cb, arg);
		(*nev)++;
	}
}

static int tcp_progress(void *arg, int timeout_ms, hpct_tevent_cb cb, void *cbarg)
{
	struct tcp_ctx *ctx = arg;
	struct epoll_event evs[64];
	if (ctx->listen_resume > 0) {
		double left = ctx->listen_resume - mono_now();
		if (left <= 0) {
			struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
			epoll_ctl(ctx->epfd, EPOLL_CTL_MOD, ctx->lfd, &ev);
			ctx->listen_resume = 0;
		} else if (timeout_ms < 0 || timeout_ms > (int)(left * 1000) + 1) {
			timeout_ms = (int)(left * 1000) + 1;
		}
	}
	int n = epoll_wait(ctx->epfd, evs, 64, timeout_ms);
	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	int nev = 0;
	for (int i = 0; i < n; i++) {
		struct tcp_conn *c = evs[i].data.ptr;
		if (!c) {
			do_accept(ctx, cb, cbarg, &nev);
			continue;
		}
		if (c->state == CLOSED)
			continue;
		uint32_t e = evs[i].events;
		if (c->state == CONNECTING) {
			if (!(e & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
				continue;
			int soerr = 0;
			socklen_t sl = sizeof(soerr);
			getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
			if (soerr == 0 && (e & (EPOLLERR | EPOLLHUP)))
				soerr = ECONNREFUSED;
			if (soerr == 0 && self_connected(c))
				soerr = ECONNREFUSED; /* nobody listens there yet */
			if (soerr) {
				emit_close(c, HPCT_TEV_CONNECT_FAILED, -soerr, cb, cbarg);
				nev++;
				continue;
			}
			c->state = OPEN;
			struct hpct_tevent ev = { .type = HPCT_TEV_CONNECTED, .conn = &c->base };
			cb(cbarg, &ev);
			nev++;
			if (c->state == CLOSED)
				continue;
		}
		if (e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
			do_read(c, cb, cbarg, &nev);
		if (c->state == OPEN && (e & EPOLLOUT || c->out.tail > c->out.head)) {
			int rc = flush(c);
			if (rc < 0) {
				emit_close(c, HPCT_TEV_CLOSED, rc, cb, cbarg);
				nev++;
			}
		}
	}
	while (ctx->dead) {
		struct tcp_conn *d = ctx->dead;
		ctx->dead = d->next_dead;
		conn_free(d);
	}
	return nev;
}

const struct hpct_transport_ops hpct_transport_tcp = {
	.name = "tcp",
	.create = tcp_create,
	.destroy = tcp_destroy,
	.listen = tcp_listen,
	.connect = tcp_connect,
	.send = tcp_send,
	.set_max_msg = tcp_set_max_msg,
	.pending = tcp_pending,
	.backlog = tcp_backlog,
	.progress = tcp_progress,
	.close = tcp_close,
	.peer_name = tcp_peer_name,
};
