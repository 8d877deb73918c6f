/* The store's peers (see server.h): the protocol's messages (vr.h) on the
 * wire, and this rank's one connection to each other rank's server it
 * talks to.  A rank sends on its own connection and reads the other's
 * messages on the one that rank made (server.c takes it as a peer's at
 * its first frame, OP_PEER).  Connections are made by a thread of their
 * own, which may block on a connect or a proof of the secret; the loop
 * writes and watches them non-blocking.
 *
 * OP_P_MSG's body: u8 type, u32 group, cfg, view, i32 from, u64 ts, opnum,
 * u32 log_view, u8 status, flags, n, 8 x i32 members, u64 next_at, u8
 * next_n, 8 x i32 next, u16 why length, why, u8 entry kind, u32 entry
 * length, entry, u8 1 when the group's data (OP_P_KEY, OP_P_REC frames)
 * came just before it.
 *
 * A connection that breaks, or a connect refused, after the rank's store
 * answered once is that rank's death (vr_peer_down): its process is gone
 * or exiting.  A connect refused before that is a rank not started yet,
 * and a connect that times out says nothing: the protocol's timers
 * decide. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/base/auth.h"
#include "bootstrap/base/bytes.h"
#include "bootstrap/base/fdtrack.h"
#include "bootstrap/base/log.h"
#include "bootstrap/base/sock.h"
#include "bootstrap/store/server.h"
#include "bootstrap/store/store_internal.h"
#include "bootstrap/world.h"

#define CONNECT_S  1.0                   /* one connect's (and proof's) deadline */
#define MAX_OUT    (256u << 20)          /* buffered for one peer, at most */
#define MSG_FIXED  (1 + 1 + 4 * 4 + 8 + 8 + 4 + 3 + 32 + 8 + 1 + 32 + 2 + 1 + 4 + 1)
enum { P_NONE, P_CONNECTING, P_UP };

struct speer {
	int rank, fd, state, reached, reg;
	uint32_t ev;
	unsigned char *out;
	size_t outlen, outoff, outcap;
	double retry_at, backoff;
};

/* What the connector needs to make one connection, computed by the loop
 * (which holds the world) and handed over. */
struct want {
	int rank;
	struct sockaddr_storage ss;
	socklen_t sl;
	char text[HPCT_ADDRSTRLEN];
	struct hpct_auth_id id;
	unsigned char hello[29];
};

static struct want *wq;
static int nwq, wcap;
static pthread_t connector_th;
static int connector_on;

static struct speer *peer(struct ssrv *s, int rank)
{
	if (!s->peers[rank]) {
		struct speer *p = calloc(1, sizeof(*p));
		if (!p)
			return NULL;
		*p = (struct speer){ .rank = rank, .fd = -1, .backoff = 0.01 };
		s->peers[rank] = p;
	}
	return s->peers[rank];
}

static void drop_out(struct speer *p)
{
	free(p->out);
	p->out = NULL;
	p->outlen = p->outoff = p->outcap = 0;
}

static int append(void *arg, const unsigned char *f, size_t len)
{
	struct speer *p = arg;
	if (p->outlen + len > MAX_OUT)
		return -1;
	if (p->outlen + len > p->outcap) {
		size_t cap = (p->outlen + len) * 2;
		unsigned char *o = realloc(p->out, cap);
		if (!o)
			return -1;
		p->out = o;
		p->outcap = cap;
	}
	memcpy(p->out + p->outlen, f, len);
	p->outlen += len;
	return 0;
}

/* The loop's epoll interest in p's connection: its breaking, and room to
 * write while something waits. */
static void watch(struct ssrv *s, struct speer *p)
{
	if (p->fd < 0 || p->state != P_UP)
		return;
	uint32_t ev = EPOLLIN | EPOLLRDHUP | (p->outoff < p->outlen ? EPOLLOUT : 0);
	if (p->reg && ev == p->ev)
		return;
	struct epoll_event e = { .events = ev, .data.u64 = PEER_TAG | (uint64_t)p->rank };
	if (epoll_ctl(s->ep, p->reg ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, p->fd, &e) == 0) {
		p->reg = 1;
		p->ev = ev;
	}
}

static void broken(struct ssrv *s, struct speer *p, double now, int dead, const char *why);

static void flush(struct ssrv *s, struct speer *p, double now)
{
	while (p->state == P_UP && p->outoff < p->outlen) {
		ssize_t n = send(p->fd, p->out + p->outoff, p->outlen - p->outoff,
		                 MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
				break;
			broken(s, p, now, p->reached, strerror(errno));
			return;
		}
		p->outoff += (size_t)n;
	}
	if (p->outoff == p->outlen) {
		p->outoff = p->outlen = 0;
		if (p->outcap > (1u << 20))
			drop_out(p);
	}
	watch(s, p);
}

/* Asks the connector for a connection to p's rank. */
static void connect_to(struct ssrv *s, struct speer *p)
{
	if (!s->w || !connector_on)
		return;
	struct want wt = { .rank = p->rank };
	if (hpct__store_addr(s->w, p->rank, &wt.ss, &wt.sl, wt.text, sizeof(wt.text)) != 0)
		return;
	wt.id = hpct__store_auth_id(s->w, s->rank, p->rank);
	hpct__put32(wt.hello, 25);
	wt.hello[4] = OP_PEER;
	hpct__put32(wt.hello + 5, (uint32_t)s->rank);
	hpct__put64(wt.hello + 9, s->job);
	hpct__put64(wt.hello + 17, s->epoch);
	hpct__put32(wt.hello + 25, (uint32_t)s->size);
	pthread_mutex_lock(&s->cmu);
	if (nwq == wcap) {
		int cap = wcap ? wcap * 2 : 16;
		struct want *q = realloc(wq, (size_t)cap * sizeof(*q));
		if (!q) {
			pthread_mutex_unlock(&s->cmu);
			return;
		}
		wq = q;
		wcap = cap;
	}
	wq[nwq++] = wt;
	p->state = P_CONNECTING;
	pthread_cond_signal(&s->ccv);
	pthread_mutex_unlock(&s->cmu);
}

static void broken(struct ssrv *s, struct speer *p, double now, int dead, const char *why)
{
	if (p->fd >= 0) {
		if (p->reg)
			epoll_ctl(s->ep, EPOLL_CTL_DEL, p->fd, NULL);
		close(p->fd);
	}
	p->fd = -1;
	p->reg = 0;
	p->state = P_NONE;
	drop_out(p);
	p->retry_at = now + p->backoff;
	p->backoff = p->backoff * 2 > 1.0 ? 1.0 : p->backoff * 2;
	if (!dead)
		return;
	HPCT_INFO(HPCT_SUB_NET, "store: rank %d: rank %d's store is gone (%s)", s->rank, p->rank,
	          why);
	for (int i = 0; i < s->nactive; i++)
		vr_peer_down(s->grp[s->active[i]], &s->vw, now, p->rank, 1);
	s->rescan = 1;
}

/* ---- messages ------------------------------------------------------------ */

static unsigned char *put_i32s(unsigned char *q, const int *v, int n)
{
	for (int i = 0; i < VR_MAX; i++)
		hpct__put32(q + 4 * i, (uint32_t)(i < n ? v[i] : -1));
	return q + 4 * VR_MAX;
}

void speer_send(struct ssrv *s, int to, const struct vr_msg *m)
{
	struct speer *p = to >= 0 && to < s->size && to != s->rank ? peer(s, to) : NULL;
	if (!p)
		return;
	double now = hpct__now();
	if (p->state == P_NONE) {
		if (now < p->retry_at)
			return; /* the protocol sends again what it must */
		connect_to(s, p);
	}
	int data = m->type == VR_STATE || m->type == VR_DVC || m->type == VR_STARTVIEW ||
	           m->type == VR_NEWCFG;
	size_t wl = strnlen(m->why, sizeof(m->why)), len = MSG_FIXED + wl + m->elen;
	unsigned char *f = malloc(4 + len), *q = f;
	if (!f)
		return;
	hpct__put32(q, (uint32_t)len);
	q[4] = OP_P_MSG;
	q[5] = m->type;
	hpct__put32(q + 6, m->group);
	hpct__put32(q + 10, m->cfg);
	hpct__put32(q + 14, m->view);
	hpct__put32(q + 18, (uint32_t)m->from);
	hpct__put64(q + 22, m->ts);
	hpct__put64(q + 30, m->opnum);
	hpct__put32(q + 38, m->log_view);
	q[42] = m->status;
	q[43] = m->flags;
	q[44] = (uint8_t)m->n;
	q = put_i32s(q + 45, m->members, m->n);
	hpct__put64(q, m->next_at);
	q[8] = (uint8_t)m->next_n;
	q = put_i32s(q + 9, m->next, m->next_n);
	hpct__put16(q, (uint16_t)wl);
	memcpy(q + 2, m->why, wl);
	q += 2 + wl;
	q[0] = m->ekind;
	hpct__put32(q + 1, (uint32_t)m->elen);
	if (m->elen)
		memcpy(q + 5, m->entry, m->elen);
	q[5 + m->elen] = (uint8_t)data;
	size_t at = p->outlen;
	if ((data && sdata_stream(s, m->group, append, p) != 0) || append(p, f, 4 + len) != 0) {
		/* too much waits for it (it stalls): from scratch once connected again */
		HPCT_INFO(HPCT_SUB_NET, "store: rank %d: over %u MiB wait for rank %d: connecting "
		          "again", s->rank, MAX_OUT >> 20, p->rank);
		p->outlen = at;
		broken(s, p, now, 0, "");
	}
	free(f);
	flush(s, p, now);
}

static const unsigned char *get_i32s(const unsigned char *q, int *v, int n, int size, int *bad)
{
	for (int i = 0; i < VR_MAX; i++) {
		int32_t x = (int32_t)hpct__get32(q + 4 * i);
		if (i < n && (x < 0 || x >= size))
			*bad = 1;
		v[i] = i < n ? x : -1;
	}
	return q + 4 * VR_MAX;
}

int speer_frame(struct ssrv *s, struct sconn *c, const unsigned char *p, size_t len, double now)
{
	if (p[0] == OP_P_KEY || p[0] == OP_P_REC)
		return sdata_stage(&c->stage, p[0], p + 1, len - 1);
	if (p[0] != OP_P_MSG || len < MSG_FIXED)
		return -1;
	struct vr_msg m = { .type = p[1] };
	int bad = 0;
	m.group = hpct__get32(p + 2);
	m.cfg = hpct__get32(p + 6);
	m.view = hpct__get32(p + 10);
	m.from = (int32_t)hpct__get32(p + 14);
	m.ts = hpct__get64(p + 18);
	m.opnum = hpct__get64(p + 26);
	m.log_view = hpct__get32(p + 34);
	m.status = p[38];
	m.flags = p[39];
	m.n = p[40];
	bad |= m.n > VR_MAX;
	const unsigned char *q = get_i32s(p + 41, m.members, m.n, s->size, &bad);
	m.next_at = hpct__get64(q);
	m.next_n = q[8];
	bad |= m.next_n > VR_MAX;
	q = get_i32s(q + 9, m.next, m.next_n, s->size, &bad);
	size_t wl = hpct__get16(q);
	if (wl >= sizeof(m.why) || len < MSG_FIXED + wl)
		return -1;
	memcpy(m.why, q + 2, wl);
	q += 2 + wl;
	m.ekind = q[0];
	m.elen = hpct__get32(q + 1);
	if (m.elen != len - MSG_FIXED - wl)
		return -1;
	m.entry = m.elen ? q + 5 : NULL;
	int data = q[5 + m.elen];
	if (bad || m.from != c->from || m.group >= (uint32_t)s->size || !m.type ||
	    m.type >= VR_TYPES)
		return -1;
	m.snap = data ? c->stage : NULL;
	if (!data)
		sdata_release(c->stage);
	c->stage = NULL;
	struct vr *v = sgrp_get(s, m.group, 1);
	if (!v) {
		sdata_release(m.snap);
		return 0;
	}
	vr_recv(v, &s->vw, now, &m);
	s->rescan = 1;
	return 0;
}

int speer_hello(struct ssrv *s, struct sconn *c, const unsigned char *p, size_t len)
{
	if (len != 25)
		return -1;
	int from = (int)hpct__get32(p + 1);
	uint64_t job = hpct__get64(p + 5), epoch = hpct__get64(p + 13);
	uint32_t size = hpct__get32(p + 21);
	const char *why = NULL;
	if (job != s->job)
		why = "another job's";
	else if (epoch != s->epoch)
		why = "another epoch's";
	else if (size != (uint32_t)s->size || from < 0 || from >= s->size || from == s->rank)
		why = "not a rank of this world";
	else if (s->secret && c->auth.hello.src != (uint32_t)from)
		why = "not the rank its proof named";
	if (why) {
		HPCT_WARN(HPCT_SUB_NET,
		          "store: rank %d refused a peer's connection from %s (rank %d, epoch "
		          "%llu): %s",
		          s->rank, c->peer, from, (unsigned long long)epoch, why);
		return -1;
	}
	c->from = from;
	s->vw.reached[from] = 1;
	return 0;
}

/* ---- connections ------------------------------------------------------- */

void speer_event(struct ssrv *s, int rank, uint32_t events, double now)
{
	struct speer *p = rank >= 0 && rank < s->size && s->peers ? s->peers[rank] : NULL;
	if (!p || p->state != P_UP)
		return;
	if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
		char b[64];
		ssize_t n = recv(p->fd, b, sizeof(b), MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			broken(s, p, now, 1, n == 0 ? "it closed its connection" : strerror(errno));
			return;
		}
	}
	if (events & EPOLLOUT)
		flush(s, p, now);
}

void speer_connected(struct ssrv *s, double now)
{
	int r[2];
	while (read(s->cq[0], r, sizeof(r)) == (ssize_t)sizeof(r)) {
		struct speer *p = r[0] >= 0 && r[0] < s->size && s->peers ? s->peers[r[0]] : NULL;
		if (!p || p->state != P_CONNECTING) {
			if (r[1] >= 0)
				close(r[1]);
			continue;
		}
		if (r[1] < 0) {
			int dead = r[1] == -ECONNREFUSED && p->reached;
			broken(s, p, now, dead, "it refused a connection");
			continue;
		}
		p->fd = r[1];
		p->state = P_UP;
		p->reached = 1;
		p->backoff = 0.01;
		s->vw.reached[p->rank] = 1;
		for (int i = 0; i < s->nactive; i++)
			vr_peer_up(s->grp[s->active[i]], &s->vw, now, p->rank);
		s->rescan = 1;
		flush(s, p, now);
	}
}

static void *connector(void *arg)
{
	pthread_setname_np(pthread_self(), "hpct-store-peers"); /* in top, gdb, perf */
	struct ssrv *s = arg;
	for (;;) {
		pthread_mutex_lock(&s->cmu);
		while (nwq == 0)
			pthread_cond_wait(&s->ccv, &s->cmu);
		struct want wt = wq[0];
		memmove(wq, wq + 1, (size_t)--nwq * sizeof(*wq));
		unsigned char *secret = s->secret;
		size_t slen = s->slen;
		pthread_mutex_unlock(&s->cmu);
		double deadline = hpct__now() + CONNECT_S;
		int fd = hpct__sock_connect(&wt.ss, wt.sl, deadline), rc = 0;
		hpct__fd_track(fd);
		if (fd >= 0 && secret) {
			char who[HPCT_ADDRSTRLEN + 32];
			snprintf(who, sizeof(who), "rank %d's store at %s", wt.rank, wt.text);
			rc = hpct__auth_client(fd, secret, slen, &wt.id, deadline, who);
		}
		if (fd >= 0 && rc == 0)
			rc = hpct__sock_send_all(fd, wt.hello, sizeof(wt.hello), deadline);
		if (fd >= 0 && rc == 0 && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0)
			rc = -errno;
		if (fd >= 0 && rc != 0) {
			close(fd);
			fd = rc < 0 ? rc : -EPROTO;
		}
		int r[2] = { wt.rank, fd };
		if (write(s->cq[1], r, sizeof(r)) != (ssize_t)sizeof(r) && fd >= 0)
			close(fd);
	}
	return NULL;
}

int speer_start(struct ssrv *s)
{
	if (connector_on)
		return 0;
	pthread_mutex_init(&s->cmu, NULL);
	pthread_cond_init(&s->ccv, NULL);
	if (pipe2(s->cq, O_NONBLOCK | O_CLOEXEC) != 0)
		return hpct__fail(-errno, HPCT_SUB_NET, "store: cannot start: pipe: %s",
		                  strerror(errno));
	if (pthread_create(&connector_th, NULL, connector, s) != 0)
		return hpct__fail(HPCT_ENOMEM, HPCT_SUB_NET,
		                  "store: cannot start the thread that connects to the peers");
	pthread_detach(connector_th);
	connector_on = 1;
	return 0;
}

int speer_flushed(struct ssrv *s)
{
	for (int r = 0; s->peers && r < s->size; r++)
		if (s->peers[r] && s->peers[r]->state != P_NONE && s->peers[r]->outlen)
			return 0;
	return 1;
}

void speer_close_all(struct ssrv *s)
{
	for (int r = 0; s->peers && r < s->size; r++) {
		struct speer *p = s->peers[r];
		if (!p)
			continue;
		if (p->fd >= 0) {
			if (p->reg)
				epoll_ctl(s->ep, EPOLL_CTL_DEL, p->fd, NULL);
			close(p->fd);
		}
		drop_out(p);
		free(p);
		s->peers[r] = NULL;
	}
	pthread_mutex_lock(&s->cmu);
	nwq = 0;
	pthread_mutex_unlock(&s->cmu);
}
