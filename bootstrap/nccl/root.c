/* hpct's NCCL bootstrap roots (NCCL 2.23 to 2.28): a thread that hosts
 * roots, takes the ranks' reports and answers each rank with its ring
 * neighbour's info.  The wire is in root_wire.h.
 *
 * Every root here is one listener in a poll loop: a peer that connects and
 * sends nothing, or sends slowly, holds only its own connection. */
#include "bootstrap/nccl/nccl_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/base/log.h"
#include "bootstrap/base/util.h"
#include "bootstrap/nccl/root_wire.h"

struct report_conn {
	int fd;
	int root; /* the listener it came in on */
	size_t got;
	double deadline;
	char from[80]; /* the peer's address, for messages */
	unsigned char buf[HPCT_NCCL_REPORT_LEN];
};

struct root {
	int lfd; /* -1 once finished */
	uint64_t magic;
	char where[64];
	int known; /* nranks, iroot, nroots set from the first report */
	int nranks, iroot, nroots, first, n2send, nrecv, sent;
	unsigned char *have, *replied;
	unsigned char (*addr)[HPCT_NCCL_ADDR_LEN];
	unsigned char (*ring)[HPCT_NCCL_RING_LEN];
	int conns;
};

struct hpct_nccl_roots {
	struct root *roots;
	int n, live;
	struct report_conn **conns;
	int nconns, capconns;
	double deadline;
	int stop_pipe[2];
	pthread_t thread;
	pthread_mutex_t lock; /* over finished and detached */
	int finished, detached;
	int result;
	char failure[1024];
	struct hpct_nccl_root_stats stats;
	int nranks; /* the communicator's size */
	int keyed;  /* magics keyed by HPCT_SECRET: a wrong one is a stranger */
	int fuzz;   /* hpct__nccl_root_fuzz_one: answers are not sent */
};

static void root_free(struct root *rt)
{
	if (rt->lfd >= 0)
		close(rt->lfd);
	rt->lfd = -1;
	free(rt->have);
	free(rt->replied);
	free(rt->addr);
	free(rt->ring);
	rt->have = rt->replied = NULL;
	rt->addr = NULL;
	rt->ring = NULL;
}

static int fail_set(struct hpct_nccl_roots *s, int err, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static int fail_set(struct hpct_nccl_roots *s, int err, const char *fmt, ...)
{
	if (s->result == 0) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(s->failure, sizeof(s->failure), fmt, ap);
		va_end(ap);
		s->result = err;
	}
	return err;
}

/* Sends local rank l of root rt the ring info of the rank after it. */
static int reply(struct hpct_nccl_roots *s, struct root *rt, int l)
{
	int next = (l + 1) % rt->nrecv;
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof(ss));
	memcpy(&ss, rt->addr[l], HPCT_NCCL_ADDR_LEN);
	int rank = rt->first + l, fd, rc;
	char to[80];
	hpct__addr_str((struct sockaddr *)&ss, to, sizeof(to));
	if (ss.ss_family != AF_INET && ss.ss_family != AF_INET6)
		return fail_set(s, HPCT_EPROTO,
		                "NCCL root at %s: rank %d of %d gave no usable address (family %d)",
		                rt->where, rank, rt->nranks, ss.ss_family);
	double left = s->deadline - hpct__now();
	rc = s->fuzz ? 0
	             : hpct__nccl_connect_to((struct sockaddr *)&ss, left > 0.05 ? left : 0.05,
	                                     &fd);
	if (rc == 0 && !s->fuzz) {
		unsigned char msg[HPCT_NCCL_HDR_LEN + HPCT_NCCL_RING_LEN];
		hpct__nccl_header(msg, rt->magic, HPCT_NCCL_RING_LEN);
		memcpy(msg + HPCT_NCCL_HDR_LEN, rt->ring[next], HPCT_NCCL_RING_LEN);
		rc = hpct__nccl_send_all(fd, msg, sizeof(msg));
		close(fd);
	}
	if (rc < 0)
		return fail_set(s, HPCT_EPEERDEAD,
		                "NCCL root at %s: cannot answer rank %d of %d at %s: %s", rt->where,
		                rank, rt->nranks, to, hpct_strerror(rc));
	rt->replied[l] = 1;
	rt->conns++;
	if (++rt->sent == rt->n2send) {
		if (!s->fuzz)
			close(rt->lfd);
		rt->lfd = -1;
		s->live--;
	}
	return 0;
}

static void try_reply(struct hpct_nccl_roots *s, struct root *rt, int l)
{
	if (l >= 0 && l < rt->n2send && !rt->replied[l] && rt->have[l] &&
	    rt->have[(l + 1) % rt->nrecv])
		reply(s, rt, l);
}

/* A whole report came in on root rt. */
static void take_report(struct hpct_nccl_roots *s, struct root *rt, const unsigned char *b,
                        const char *from)
{
	const unsigned char *e = b + HPCT_NCCL_HDR_LEN;
	int rank = hpct__nccl_get32(e), nranks = hpct__nccl_get32(e + 4),
	    iroot = hpct__nccl_get32(e + 8), nroots = hpct__nccl_get32(e + 12);
	if (!rt->known) {
		if (nranks != s->nranks || nroots < 1 || nroots > nranks || iroot < 0 ||
		    iroot >= nroots) {
			HPCT_WARN(HPCT_SUB_NCCL,
			          "NCCL root at %s: report from %s with nranks %d, nroots %d, "
			          "iroot %d (the communicator has %d ranks): ignored",
			          rt->where, from, nranks, nroots, iroot, s->nranks);
			s->stats.ignored++;
			return;
		}
		rt->known = 1;
		rt->nranks = nranks;
		rt->iroot = iroot;
		rt->nroots = nroots;
		rt->first = hpct__nccl_first_of(iroot, nranks, nroots);
		rt->n2send = hpct__nccl_count_of(iroot, nranks, nroots);
		rt->nrecv = rt->n2send + (nroots > 1);
		rt->have = calloc((size_t)rt->nrecv, 1);
		rt->replied = calloc((size_t)rt->nrecv, 1);
		rt->addr = calloc((size_t)rt->nrecv, sizeof(*rt->addr));
		rt->ring = calloc((size_t)rt->nrecv, sizeof(*rt->ring));
		if (!rt->have || !rt->replied || !rt->addr || !rt->ring) {
			fail_set(s, HPCT_ENOMEM, "NCCL root at %s: out of memory for %d ranks",
			         rt->where, nranks);
			return;
		}
	} else if (nranks != rt->nranks || nroots != rt->nroots || iroot != rt->iroot) {
		HPCT_WARN(HPCT_SUB_NCCL,
		          "NCCL root at %s: rank %d from %s says nranks %d, nroots %d, iroot %d; "
		          "earlier ranks said %d, %d, %d: ignored",
		          rt->where, rank, from, nranks, nroots, iroot, rt->nranks, rt->nroots,
		          rt->iroot);
		s->stats.ignored++;
		return;
	}
	long long ll = (long long)rank - rt->first; /* any rank a report claims */
	int l = ll < 0 || ll >= rt->nrecv ? -1 : (int)ll;
	if (l < 0) {
		HPCT_WARN(
		        HPCT_SUB_NCCL,
		        "NCCL root at %s (root %d of %d): rank %d from %s is not one of its ranks "
		        "%d..%d: ignored",
		        rt->where, rt->iroot, rt->nroots, rank, from, rt->first,
		        rt->first + rt->nrecv - 1);
		s->stats.ignored++;
		return;
	}
	if (rt->have[l]) {
		HPCT_WARN(HPCT_SUB_NCCL,
		          "NCCL root at %s: rank %d of %d checked in twice (again from %s): the "
		          "second report is refused",
		          rt->where, rank, rt->nranks, from);
		s->stats.ignored++;
		return;
	}
	rt->have[l] = 1;
	memcpy(rt->addr[l], e + 16, HPCT_NCCL_ADDR_LEN);
	memcpy(rt->ring[l], e + 16 + HPCT_NCCL_ADDR_LEN, HPCT_NCCL_RING_LEN);
	s->stats.accepted++;
	try_reply(s, rt, l);
	try_reply(s, rt, (l - 1 + rt->nrecv) % rt->nrecv);
}

static void drop_conn(struct hpct_nccl_roots *s, int i)
{
	close(s->conns[i]->fd);
	free(s->conns[i]);
	s->conns[i] = s->conns[--s->nconns];
}

/* What the bytes of c so far say: 1 when the connection is finished with
 * (dropped, or its report taken), 0 when more must come. */
static int examine(struct hpct_nccl_roots *s, struct root *rt, struct report_conn *c)
{
	if (c->got >= 8 && memcmp(c->buf, &rt->magic, 8) != 0) {
		/* another comm's or a stranger's: unseen by NCCL's rule;
		 * with a secret, only one without it (or another) */
		if (s->keyed)
			HPCT_WARN(HPCT_SUB_NCCL,
			          "NCCL root at %s: refused a connection from %s: wrong magic "
			          "(this communicator's magic is keyed by HPCT_SECRET: no "
			          "secret there, or another one)",
			          rt->where, c->from);
		s->stats.ignored++;
		return 1;
	}
	const char *from = c->from;
	if (c->got >= 12 && hpct__nccl_get32(c->buf + 8) != HPCT_NCCL_SOCK_TYPE_BOOTSTRAP) {
		HPCT_WARN(HPCT_SUB_NCCL,
		          "NCCL root at %s: connection from %s has socket type %d, not %d "
		          "(bootstrap): dropped",
		          rt->where, from, hpct__nccl_get32(c->buf + 8),
		          HPCT_NCCL_SOCK_TYPE_BOOTSTRAP);
		s->stats.ignored++;
		return 1;
	}
	if (c->got >= HPCT_NCCL_HDR_LEN && hpct__nccl_get32(c->buf + 12) != HPCT_NCCL_EXTINFO_LEN) {
		HPCT_WARN(HPCT_SUB_NCCL,
		          "NCCL root at %s: report from %s is %d bytes, not %d (NCCL 2.23-2.28 "
		          "ranks send %d): dropped",
		          rt->where, from, hpct__nccl_get32(c->buf + 12), HPCT_NCCL_EXTINFO_LEN,
		          HPCT_NCCL_EXTINFO_LEN);
		s->stats.ignored++;
		return 1;
	}
	if (c->got == HPCT_NCCL_REPORT_LEN) {
		rt->conns++;
		if (rt->lfd >= 0)
			take_report(s, rt, c->buf, from);
		return 1;
	}
	return 0;
}

/* Reads what is there; 1 when the connection is finished with. */
static int read_conn(struct hpct_nccl_roots *s, struct report_conn *c)
{
	struct root *rt = &s->roots[c->root];
	for (;;) {
		ssize_t k = recv(c->fd, c->buf + c->got, HPCT_NCCL_REPORT_LEN - c->got, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (k <= 0) {
			s->stats.ignored++; /* closed early: nothing to act on */
			return 1;
		}
		c->got += (size_t)k;
		if (examine(s, rt, c))
			return 1;
	}
}

/* For the fuzz target: `data` as the bytes of successive connections to one
 * root (HPCT_NCCL_REPORT_LEN each, the last maybe short) of magic 0x0123456789abcdef
 * for a communicator of 4 ranks, taken as the thread would, answers not
 * sent. */
HPCT_PRIVATE void hpct__nccl_root_fuzz_one(const unsigned char *data, size_t len)
{
	struct root rt = { .lfd = 0, .magic = 0x0123456789abcdefull };
	struct hpct_nccl_roots s = {
		.roots = &rt, .n = 1, .live = 1, .nranks = 4, .fuzz = 1, .keyed = 1
	};
	snprintf(rt.where, sizeof(rt.where), "fuzz");
	s.deadline = hpct__now() + 1;
	while (len > 0 && s.result == 0) {
		struct report_conn c = { .fd = -1 };
		c.got = len < HPCT_NCCL_REPORT_LEN ? len : HPCT_NCCL_REPORT_LEN;
		memcpy(c.buf, data, c.got);
		snprintf(c.from, sizeof(c.from), "fuzz");
		examine(&s, &rt, &c);
		data += c.got;
		len -= c.got;
	}
	rt.lfd = -1; /* nothing to close */
	root_free(&rt);
}

static void accept_on(struct hpct_nccl_roots *s, int r)
{
	for (;;) {
		struct sockaddr_storage peer;
		socklen_t plen = sizeof(peer);
		int fd = accept4(s->roots[r].lfd, (struct sockaddr *)&peer, &plen,
		                 SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return; /* EAGAIN, or EMFILE: the next poll tries again */
		struct report_conn *c = calloc(1, sizeof(*c));
		if (!c || (s->nconns == s->capconns && s->capconns >= 4096)) {
			free(c); /* more half-sent reports than any comm needs */
			close(fd);
			s->stats.ignored++;
			continue;
		}
		if (s->nconns == s->capconns) {
			int cap = s->capconns ? s->capconns * 2 : 16;
			void *p = realloc(s->conns, (size_t)cap * sizeof(*s->conns));
			if (!p) {
				free(c);
				close(fd);
				continue;
			}
			s->conns = p;
			s->capconns = cap;
		}
		c->fd = fd;
		c->root = r;
		hpct__addr_str((struct sockaddr *)&peer, c->from, sizeof(c->from));
		/* a report is one small write: whoever takes longer is stuck or
		 * hostile, and gives up only its own connection */
		c->deadline = hpct__now() + 5.0;
		s->conns[s->nconns++] = c;
	}
}

static void describe_missing(struct hpct_nccl_roots *s, char *buf, size_t len)
{
	size_t at = 0;
	buf[0] = 0;
	for (int r = 0; r < s->n && at + 80 < len; r++) {
		struct root *rt = &s->roots[r];
		if (rt->lfd < 0)
			continue;
		if (!rt->known) {
			at += (size_t)snprintf(buf + at, len - at, "%sroot at %s: no rank reported",
			                       at ? "; " : "", rt->where);
			continue;
		}
		at += (size_t)snprintf(buf + at, len - at, "%sroot at %s: not heard from rank",
		                       at ? "; " : "", rt->where);
		int shown = 0;
		for (int l = 0; l < rt->nrecv && at + 16 < len; l++) {
			if (rt->have[l])
				continue;
			if (shown++ == 8) {
				at += (size_t)snprintf(buf + at, len - at, " ...");
				break;
			}
			at += (size_t)snprintf(buf + at, len - at, " %d",
			                       (rt->first + l) % rt->nranks);
		}
	}
}

static void roots_free(struct hpct_nccl_roots *s);

static void *serve_loop(struct hpct_nccl_roots *s);

/* The thread: serves, then frees the set itself if it was let go. */
static void *serve(void *arg)
{
	struct hpct_nccl_roots *s = arg;
	serve_loop(s);
	pthread_mutex_lock(&s->lock);
	s->finished = 1;
	int mine = s->detached;
	pthread_mutex_unlock(&s->lock);
	if (mine) {
		if (s->result)
			hpct__fail(s->result, HPCT_SUB_NCCL, "%s", s->failure);
		roots_free(s);
	}
	return NULL;
}

static void *serve_loop(struct hpct_nccl_roots *s)
{
	struct pollfd *pf = NULL;
	int cap = 0;
	while (s->live > 0 && s->result == 0) {
		int want = 1 + s->n + s->nconns;
		if (want > cap) {
			void *p = realloc(pf, (size_t)want * sizeof(*pf));
			if (!p) {
				fail_set(s, HPCT_ENOMEM, "NCCL roots: out of memory");
				break;
			}
			pf = p;
			cap = want;
		}
		int k = 0;
		pf[k++] = (struct pollfd){ .fd = s->stop_pipe[0], .events = POLLIN };
		for (int r = 0; r < s->n; r++)
			pf[k++] = (struct pollfd){ .fd = s->roots[r].lfd, .events = POLLIN };
		for (int i = 0; i < s->nconns; i++)
			pf[k++] = (struct pollfd){ .fd = s->conns[i]->fd, .events = POLLIN };
		double now = hpct__now(), left = s->deadline - now;
		if (left <= 0) {
			char missing[700];
			describe_missing(s, missing, sizeof(missing));
			fail_set(s, HPCT_ETIMEDOUT, "NCCL roots: deadline passed; %s", missing);
			break;
		}
		int ms = left > 0.1 ? 100 : (int)(left * 1000) + 1;
		if (poll(pf, (nfds_t)k, ms) < 0 && errno != EINTR)
			break;
		if (pf[0].revents)
			break; /* stopped */
		/* connections first: their slots in pf are those of this round */
		for (int i = s->nconns - 1; i >= 0; i--) {
			struct report_conn *c = s->conns[i];
			int done = pf[1 + s->n + i].revents ? read_conn(s, c) : 0;
			if (!done && hpct__now() > c->deadline) {
				s->stats.ignored++; /* too slow: it loses its connection */
				done = 1;
			}
			if (done) /* the last one moves here: already seen */
				drop_conn(s, i);
		}
		for (int r = 0; r < s->n; r++)
			if (s->roots[r].lfd >= 0 && pf[1 + r].revents)
				accept_on(s, r);
	}
	free(pf);
	return NULL;
}

/* Listens at the id's address: SO_REUSEADDR only, so TIME_WAIT leftovers
 * may stay but a live listener (NCCL's roots set SO_REUSEPORT) may not:
 * HPCT_EADDRINUSE naming host:port. */
static int listen_at(const hpct_nccl_id *id, int *fd_out, char *where, size_t wlen)
{
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof(ss));
	memcpy(&ss, id->internal + 8, HPCT_NCCL_ADDR_LEN);
	hpct__addr_str((struct sockaddr *)&ss, where, wlen);
	if (ss.ss_family != AF_INET && ss.ss_family != AF_INET6)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_NCCL,
		                  "NCCL root: the id holds no IPv4 or IPv6 address");
	int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return hpct__fail(-errno, HPCT_SUB_NCCL, "NCCL root at %s: socket: %s", where,
		                  strerror(errno));
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, hpct__nccl_addr_len((struct sockaddr *)&ss)) < 0) {
		int err = errno;
		close(fd);
		return hpct__fail(err == EADDRINUSE ? HPCT_EADDRINUSE : -err, HPCT_SUB_NCCL,
		                  "NCCL root: cannot listen at %s: %s%s", where, strerror(err),
		                  err == EADDRINUSE ? " (another process, or a root left from an "
		                                      "earlier run, holds the port)"
		                                    : "");
	}
	if (listen(fd, 4096) < 0) {
		int err = errno;
		close(fd);
		return hpct__fail(-err, HPCT_SUB_NCCL, "NCCL root at %s: listen: %s", where,
		                  strerror(err));
	}
	*fd_out = fd;
	return 0;
}

int hpct__nccl_port_check(const hpct_nccl_id *id)
{
	char where[64];
	int fd, rc = listen_at(id, &fd, where, sizeof(where));
	if (rc == 0)
		close(fd);
	return rc;
}

int hpct__nccl_roots_start(const hpct_nccl_id *ids, int n, int nranks, double timeout_s, int keyed,
                           struct hpct_nccl_roots **out)
{
	struct hpct_nccl_roots *s = calloc(1, sizeof(*s));
	if (!s || !(s->roots = calloc((size_t)n, sizeof(*s->roots)))) {
		free(s);
		return HPCT_ENOMEM;
	}
	s->n = s->live = n;
	s->nranks = nranks;
	s->keyed = keyed;
	pthread_mutex_init(&s->lock, NULL);
	s->deadline = hpct__now() + timeout_s;
	s->stop_pipe[0] = s->stop_pipe[1] = -1;
	for (int r = 0; r < n; r++)
		s->roots[r].lfd = -1;
	int rc = 0;
	for (int r = 0; r < n && rc == 0; r++) {
		struct root *rt = &s->roots[r];
		memcpy(&rt->magic, ids[r].internal, 8);
		rc = listen_at(&ids[r], &rt->lfd, rt->where, sizeof(rt->where));
	}
	if (rc == 0 && pipe2(s->stop_pipe, O_CLOEXEC) < 0)
		rc = hpct__fail(-errno, HPCT_SUB_NCCL, "NCCL roots: pipe: %s", strerror(errno));
	if (rc == 0 && pthread_create(&s->thread, NULL, serve, s) != 0)
		rc = hpct__fail(HPCT_ENOMEM, HPCT_SUB_NCCL, "NCCL roots: no thread");
	if (rc) {
		for (int r = 0; r < n; r++)
			root_free(&s->roots[r]);
		if (s->stop_pipe[0] >= 0) {
			close(s->stop_pipe[0]);
			close(s->stop_pipe[1]);
		}
		free(s->roots);
		free(s);
		return rc;
	}
	*out = s;
	return 0;
}

static void roots_free(struct hpct_nccl_roots *s)
{
	while (s->nconns > 0)
		drop_conn(s, s->nconns - 1);
	free(s->conns);
	for (int r = 0; r < s->n; r++)
		root_free(&s->roots[r]);
	close(s->stop_pipe[0]);
	close(s->stop_pipe[1]);
	pthread_mutex_destroy(&s->lock);
	free(s->roots);
	free(s);
}

int hpct__nccl_roots_wait(struct hpct_nccl_roots *s, struct hpct_nccl_root_stats *stats_out)
{
	pthread_join(s->thread, NULL);
	for (int r = 0; r < s->n; r++)
		if (s->roots[r].conns > s->stats.max_conns)
			s->stats.max_conns = s->roots[r].conns;
	if (stats_out)
		*stats_out = s->stats;
	int rc = s->result;
	if (rc)
		hpct__fail(rc, HPCT_SUB_NCCL, "%s", s->failure);
	roots_free(s);
	return rc;
}

void hpct__nccl_roots_detach(struct hpct_nccl_roots *s)
{
	pthread_mutex_lock(&s->lock);
	int done = s->finished;
	s->detached = !done;
	pthread_mutex_unlock(&s->lock);
	if (!done) {
		pthread_detach(s->thread);
		return;
	}
	pthread_join(s->thread, NULL); /* finished already: ours to free */
	if (s->result)
		hpct__fail(s->result, HPCT_SUB_NCCL, "%s", s->failure);
	roots_free(s);
}

void hpct__nccl_roots_stop(struct hpct_nccl_roots *s)
{
	if (!s)
		return;
	char c = 1;
	if (write(s->stop_pipe[1], &c, 1) < 0) {
		/* the pipe is ours and empty: cannot fail */
	}
	pthread_join(s->thread, NULL);
	roots_free(s);
}
