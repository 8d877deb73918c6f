/* The exchange's service: one thread and one UDP socket per world, which
 * answers peers' requests from the histories of this rank's exchanges, so
 * that a rank answers while it is in no hpct call (a rank whose items were
 * all cached may be idle while a peer still needs its items).  Requests for
 * versions not published yet, or for exchanges not created yet here, are
 * parked and answered when they can be. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/base/bytes.h"
#include "bootstrap/base/fdtrack.h"
#include "bootstrap/base/util.h"
#include "bootstrap/xchg/xchg_internal.h"

static struct hpct_xchg *find(struct xchg_service *s, uint64_t xid)
{
	for (int i = 0; i < s->nxs; i++)
		if (s->xs[i]->xid == xid && s->xs[i]->epoch == s->epoch)
			return s->xs[i];
	return NULL;
}

/* Under s->mu: an answer of `type` to the request rq, from s->out. */
static void answer(struct xchg_service *s, struct hpct_xchg *x, const struct xw_hdr *rq,
                   uint8_t type, const void *payload, uint32_t len,
                   const struct sockaddr_storage *to, socklen_t tolen)
{
	struct xw_hdr h = *rq;
	h.type = type;
	h.from = rq->to;
	h.to = rq->from;
	h.len = len;
	h.item_size = (uint32_t)x->item_size;
	int n = hpct__xw_encode(&h, payload, &s->key, s->out);
	if (n < 0)
		return;
	/* not sent (a full buffer): the requester asks again */
	if (sendto(s->fd, s->out, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL,
	           (const struct sockaddr *)to, tolen) == n)
		x->st.bytes_sent += (uint64_t)n;
}

static void park(struct xchg_service *s, struct hpct_xchg *x, const struct xw_hdr *rq,
                 const struct sockaddr_storage *from, socklen_t fl)
{
	for (int i = 0; i < s->npark; i++) {
		struct xchg_parked *p = &s->park[i];
		if (p->req.xid == rq->xid && p->req.version == rq->version &&
		    p->req.from == rq->from && p->fromlen == fl &&
		    memcmp(&p->from, from, fl) == 0) {
			p->req = *rq; /* a retransmission: the newest nonce */
			p->since = hpct__now();
			return;
		}
	}
	if (s->npark == XCHG_PARK_MAX) {
		memmove(s->park, s->park + 1, sizeof(*s->park) * (size_t)(s->npark - 1));
		s->npark--;
	}
	struct xchg_parked *p = &s->park[s->npark++];
	p->req = *rq;
	memcpy(&p->from, from, fl);
	p->fromlen = fl;
	p->since = hpct__now();
	if (x)
		x->st.requests_parked++;
}

/* Under s->mu: answers rq now, or parks it. */
static void serve(struct xchg_service *s, const struct xw_hdr *rq,
                  const struct sockaddr_storage *from, socklen_t fl)
{
	struct hpct_xchg *x = find(s, rq->xid);
	if (!x) {
		park(s, NULL, rq, from, fl);
		return;
	}
	if (rq->item_size != x->item_size) {
		answer(s, x, rq, XW_MISMATCH, NULL, 0, from, fl);
		return;
	}
	int j = hpct__xchg_group_rank(x, rq->from);
	if (j < 0) {
		unsigned long quiet;
		char text[HPCT_ADDRSTRLEN];
		hpct__addr_str((const struct sockaddr *)from, text, sizeof(text));
		if (hpct__log_burst_ok(&s->burst, &quiet))
			HPCT_WARN(
			        HPCT_SUB_COLL,
			        "rank %d: exchange '%s': a request from world rank %u at %s, not a "
			        "member of the group; dropped (%lu more not shown)",
			        s->w->topo.rank, x->name, rq->from, text, quiet);
		return;
	}
	if (x->failed) { /* the cause, so that it names the culprit, not us */
		unsigned char p[8 + XW_CAUSE_MAX];
		size_t n = strlen(x->cause);
		hpct__put32(p, x->cause_origin);
		hpct__put32(p + 4, x->cause_culprit);
		memcpy(p + 8, x->cause, n);
		answer(s, x, rq, XW_ABORT, p, (uint32_t)(8 + n), from, fl);
		x->told[j] = 1;
		pthread_cond_broadcast(&s->told_cv);
		return;
	}
	int slot = hpct__xchg_slot(x, rq->version);
	if (slot >= 0) {
		const unsigned char *item =
		        x->hist + ((size_t)slot * (size_t)x->size + (size_t)j) * x->item_size;
		answer(s, x, rq, XW_ITEM, item, (uint32_t)x->item_size, from, fl);
		x->st.requests_served++;
		if (x->served[j] < rq->version) {
			x->served[j] = rq->version;
			pthread_cond_broadcast(&s->told_cv);
		}
	} else if (rq->version > x->newest) {
		park(s, x, rq, from, fl);
	} else {
		uint64_t oldest = x->newest;
		for (int i = 0; i < HPCT_XCHG_HISTORY; i++)
			if (x->hist_ver[i] && x->hist_ver[i] < oldest)
				oldest = x->hist_ver[i];
		unsigned char p[16];
		for (int i = 0; i < 8; i++) {
			p[i] = (unsigned char)(oldest >> (56 - 8 * i));
			p[8 + i] = (unsigned char)(x->newest >> (56 - 8 * i));
		}
		answer(s, x, rq, XW_STALE, p, 16, from, fl);
	}
}

void hpct__xchg_unpark(struct xchg_service *s, struct hpct_xchg *x)
{
	int k = 0;
	for (int i = 0; i < s->npark; i++) {
		struct xchg_parked p = s->park[i];
		if (p.req.xid == x->xid &&
		    (x->failed || p.req.version <= x->newest || p.req.item_size != x->item_size)) {
			serve(s, &p.req, &p.from, p.fromlen);
			continue;
		}
		s->park[k++] = p;
	}
	s->npark = k;
}

static void expire(struct xchg_service *s)
{
	/* its requester gave up long ago */
	double old = hpct__now() - 2 * s->w->topo.timeout_s;
	int k = 0;
	for (int i = 0; i < s->npark; i++)
		if (s->park[i].since >= old)
			s->park[k++] = s->park[i];
	s->npark = k;
}

/* Under s->mu: one datagram that came to the service. */
static void handle(struct xchg_service *s, size_t n, const struct sockaddr_storage *from,
                   socklen_t fl)
{
	struct xw_hdr h;
	const unsigned char *payload;
	char text[HPCT_ADDRSTRLEN];
	const struct hpct_topo *t = &s->w->topo;
	int rc = hpct__xw_decode(s->buf, n, &s->key, &h, &payload);
	if (rc == HPCT_EPROTO)
		return; /* not ours */
	struct hpct_xchg *x = find(s, h.xid);
	if (x)
		x->st.bytes_recv += n;
	if (rc == HPCT_EREFUSED) {
		if (x)
			x->st.dropped++;
		if (!s->warned_auth) {
			s->warned_auth = 1;
			hpct__addr_str((const struct sockaddr *)from, text, sizeof(text));
			HPCT_WARN(HPCT_SUB_COLL,
			          "rank %d: exchange service at %s: dropped a datagram from %s "
			          "without a valid HMAC tag (%s is set): a stranger, or a rank "
			          "with another secret; further ones are dropped silently",
			          t->rank, s->self_text, text, t->secret_src);
		}
		return;
	}
	if (h.job != t->job || h.epoch != s->epoch || h.to != (uint32_t)t->rank) {
		if (x)
			x->st.dropped++;
		unsigned long quiet;
		if (hpct__log_burst_ok(&s->burst, &quiet)) {
			hpct__addr_str((const struct sockaddr *)from, text, sizeof(text));
			HPCT_WARN(
			        HPCT_SUB_COLL,
			        "rank %d: exchange service at %s: refused a request from %s (rank "
			        "%u of job %016llx epoch %llu, for rank %u): this is rank %d of "
			        "job %016llx epoch %llu (%lu more not shown)",
			        t->rank, s->self_text, text, h.from, (unsigned long long)h.job,
			        (unsigned long long)h.epoch, h.to, t->rank,
			        (unsigned long long)t->job, (unsigned long long)s->epoch, quiet);
		}
		return;
	}
	if (h.type == XW_REQ && h.from < (uint32_t)t->size)
		serve(s, &h, from, fl);
}

static void *run(void *arg)
{
	pthread_setname_np(pthread_self(), "hpct-xchg"); /* in top, gdb, perf */
	struct xchg_service *s = arg;
	for (;;) {
		struct pollfd p[2] = { { .fd = s->fd, .events = POLLIN },
			               { .fd = s->wake[0], .events = POLLIN } };
		if (poll(p, 2, 1000) < 0 && errno != EINTR)
			break;
		if (p[1].revents)
			break;
		pthread_mutex_lock(&s->mu);
		for (int i = 0; i < 256; i++) {
			struct sockaddr_storage from;
			socklen_t fl = sizeof(from);
			ssize_t n = recvfrom(s->fd, s->buf, sizeof(s->buf), MSG_DONTWAIT,
			                     (struct sockaddr *)&from, &fl);
			if (n < 0)
				break;
			handle(s, (size_t)n, &from, fl);
		}
		expire(s);
		pthread_mutex_unlock(&s->mu);
	}
	return NULL;
}

/* Binds the socket for the world's epoch and starts the thread. */
static int start(struct xchg_service *s, const struct xchg_addr_ops *ops)
{
	struct hpct_world *w = s->w;
	struct sockaddr_storage ss;
	socklen_t sl;
	int rc = ops->bind_addr(w, &ss, &sl);
	if (rc < 0)
		return rc;
	hpct__addr_str((struct sockaddr *)&ss, s->self_text, sizeof(s->self_text));
	s->fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s->fd < 0)
		return hpct__fail(-errno, HPCT_SUB_COLL, "rank %d: exchange service: socket: %s",
		                  w->topo.rank, strerror(errno));
	hpct__fd_track(s->fd);
	if (bind(s->fd, (struct sockaddr *)&ss, sl) != 0) {
		int e = errno;
		close(s->fd);
		s->fd = -1;
		return hpct__fail(
		        e == EADDRINUSE ? HPCT_EADDRINUSE : -e, HPCT_SUB_COLL,
		        "rank %d: the exchange service cannot listen on %s (UDP, the port "
		        "of its TCP listener, epoch %llu): %s",
		        w->topo.rank, s->self_text, (unsigned long long)w->topo.epoch, strerror(e));
	}
	sl = sizeof(ss);
	if (getsockname(s->fd, (struct sockaddr *)&ss, &sl) == 0)
		hpct__addr_str((struct sockaddr *)&ss, s->self_text, sizeof(s->self_text));
	int big = 4 << 20;
	setsockopt(s->fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
	s->epoch = w->topo.epoch;
	if ((rc = pthread_create(&s->thread, NULL, run, s)) != 0) {
		close(s->fd);
		s->fd = -1;
		return hpct__fail(-rc, HPCT_SUB_COLL, "rank %d: exchange service: thread: %s",
		                  w->topo.rank, strerror(rc));
	}
	s->running = 1;
	HPCT_INFO(HPCT_SUB_COLL, "rank %d: exchange service on %s (epoch %llu)", w->topo.rank,
	          s->self_text, (unsigned long long)s->epoch);
	return 0;
}

static void stop(struct xchg_service *s)
{
	if (s->running) {
		char b = 1;
		if (write(s->wake[1], &b, 1) != 1)
			HPCT_WARN(HPCT_SUB_COLL, "exchange service: cannot wake its thread: %s",
			          strerror(errno));
		pthread_join(s->thread, NULL);
		while (read(s->wake[0], &b, 1) == 1)
			;
		s->running = 0;
	}
	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
	s->npark = 0;
}

static const struct xchg_addr_ops *rows_of(struct hpct_world *w);

static void recovered(struct hpct_world *w, void *ctx, uint64_t old_epoch)
{
	struct xchg_service *s = ctx;
	stop(s);
	/* the old epoch's exchanges stay registered (their handles are the
	 * caller's) but are never served again: find() wants this epoch */
	if (start(s, rows_of(w)) < 0)
		HPCT_WARN(HPCT_SUB_COLL,
		          "rank %d: the exchange service did not follow the world from epoch "
		          "%llu to %llu (%s); the next hpct_xchg_create tries again",
		          w->topo.rank, (unsigned long long)old_epoch,
		          (unsigned long long)w->topo.epoch, hpct_last_error());
}

static void end(struct hpct_world *w, void *ctx)
{
	struct xchg_service *s = ctx;
	stop(s);
	for (int i = 0; i < s->nxs; i++)
		hpct__xchg_free(s->xs[i]);
	free(s->xs);
	free(s->park);
	close(s->wake[0]);
	close(s->wake[1]);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->told_cv);
	free(s);
	w->svc[HPCT_WORLD_SLOT_XCHG].ctx = NULL;
	w->svc[HPCT_WORLD_SLOT_XCHG].ops = NULL;
}

static const struct hpct_world_service_ops service_ops = {
	.name = "xchg",
	.recovered = recovered,
	.end = end,
};

/* The row of the world's path: a table indexed by enum hpct_path. */
static const struct xchg_addr_ops *const rows[] = {
	[HPCT_PATH_STANDARD] = &hpct__xchg_addr_standard,
	[HPCT_PATH_ROOTLESS] = &hpct__xchg_addr_rootless,
};

static const struct xchg_addr_ops *rows_of(struct hpct_world *w)
{
	return rows[w->ops->path];
}

int hpct__xchg_service(struct hpct_world *w, const struct xchg_addr_ops **ops_out,
                       struct xchg_service **svc_out)
{
	struct xchg_service *s = w->svc[HPCT_WORLD_SLOT_XCHG].ctx;
	*ops_out = rows_of(w);
	if (s) {
		int rc = s->running ? 0 : start(s, *ops_out);
		if (rc == 0)
			*svc_out = s;
		return rc;
	}
	if (!(s = calloc(1, sizeof(*s))) || !(s->park = calloc(XCHG_PARK_MAX, sizeof(*s->park)))) {
		free(s);
		return HPCT_ENOMEM;
	}
	if (pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
		int e = errno;
		free(s->park);
		free(s);
		return hpct__fail(-e, HPCT_SUB_COLL, "rank %d: exchange service: pipe: %s",
		                  w->topo.rank, strerror(e));
	}
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->told_cv, NULL);
	s->w = w;
	s->fd = -1;
	s->key.secret = w->topo.secret;
	s->key.len = w->topo.secret_len;
	w->svc[HPCT_WORLD_SLOT_XCHG].ctx = s;
	w->svc[HPCT_WORLD_SLOT_XCHG].ops = &service_ops;
	int rc = start(s, *ops_out);
	if (rc < 0)
		return rc; /* kept, stopped: the next create tries again; the world frees it */
	*svc_out = s;
	return 0;
}

int hpct__xchg_register(struct xchg_service *s, struct hpct_xchg *x)
{
	pthread_mutex_lock(&s->mu);
	int rc = 0;
	if (find(s, x->xid)) {
		rc = hpct__fail(HPCT_EINVAL, HPCT_SUB_COLL,
		                "rank %d: exchange '%s' exists already in group %016llx here",
		                s->w->topo.rank, x->name, (unsigned long long)x->group);
	} else if (s->nxs == s->capxs) {
		int cap = s->capxs ? 2 * s->capxs : 8;
		struct hpct_xchg **n = realloc(s->xs, sizeof(*n) * (size_t)cap);
		if (!n)
			rc = HPCT_ENOMEM;
		else
			s->xs = n, s->capxs = cap;
	}
	if (rc == 0) {
		s->xs[s->nxs++] = x;
		hpct__xchg_unpark(s, x);
	}
	pthread_mutex_unlock(&s->mu);
	return rc;
}

void hpct__xchg_unregister(struct xchg_service *s, struct hpct_xchg *x)
{
	pthread_mutex_lock(&s->mu);
	for (int i = 0; i < s->nxs; i++)
		if (s->xs[i] == x)
			s->xs[i] = s->xs[--s->nxs];
	pthread_mutex_unlock(&s->mu);
}
