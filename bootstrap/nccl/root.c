/* hpct's NCCL bootstrap roots (NCCL 2.19 to 2.32): a thread that hosts
 * roots, takes the ranks' reports and answers each rank with its ring
 * neighbour's info.  The wires are in root_wire.h; a root speaks the one
 * of the first report it takes.
 *
 * Every root here is one listener in a poll loop: a peer that connects and
 * sends nothing, or sends slowly, holds only its own connection.  Unlike
 * NCCL's root (which, from 2.30.7, drops a bad handshake without a word and
 * goes on waiting), every connection dropped here is logged, naming the
 * peer and why: a rank is never left waiting in silence. */
#include "bootstrap/base/fdtrack.h"
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

/* A report is one small write: whoever takes longer than this is stuck or
 * hostile, and gives up only its own connection. */
#define REPORT_WITHIN_S 5.0

/* How long an answer retries a rank that refuses the connection. */
#define REPLY_REFUSED_S 1.0

struct report_conn {
	int fd;
	int root; /* the listener it came in on */
	size_t got;
	double deadline;
	const struct hpct_nccl_wire *wire; /* by the length its header gives */
	char from[80];                     /* the peer's address, for messages */
	unsigned char buf[HPCT_NCCL_HDR_LEN + HPCT_NCCL_REPORT_MAX];
};

struct root {
	int lfd; /* -1 once finished */
	uint64_t magic;
	char where[64];
	/* the wire of the first report taken, and nranks, iroot, nroots as it
	 * said; NULL until then */
	const struct hpct_nccl_wire *wire;
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
	int nranks;                  /* the communicator's size */
	int keyed;                   /* magics keyed by HPCT_SECRET: a wrong one is a stranger */
	int fuzz;                    /* hpct__nccl_root_fuzz_one: answers are not sent */
	int borrowed;                /* listeners are a domain's: never closed here */
	struct hpct_log_burst drops; /* the lines about dropped connections */
};

static void root_free(struct root *rt, int borrowed)
{
	if (rt->lfd >= 0 && !borrowed)
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

/* A connection from `from` to root rt is dropped: counted, and logged at
 * WARN saying why, at most HPCT_LOG_BURST lines a second (a stranger can
 * repeat it at will; how many were held back is said with the next). */
static void dropped(struct hpct_nccl_roots *s, const struct root *rt, const char *from,
                    const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void dropped(struct hpct_nccl_roots *s, const struct root *rt, const char *from,
                    const char *fmt, ...)
{
	s->stats.ignored++;
	unsigned long quiet;
	if (!hpct__log_enabled(HPCT_LOG_WARN, HPCT_SUB_NCCL) ||
	    !hpct__log_burst_ok(&s->drops, &quiet))
		return;
	char why[320];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	hpct__log(HPCT_LOG_WARN, HPCT_SUB_NCCL,
	          "NCCL root at %s: dropped the connection from %s: %s%s%.0lu%s", rt->where, from,
	          why, quiet ? " (and " : "", quiet,
	          quiet ? " more dropped connections in the last second)" : "");
}

/* Sends local rank l of root rt the ring info of the rank after it.  As
 * NCCL's root does, the connection opens with the magic of the root's own
 * id and socket type 1 (bootstrap), whichever rank it is: the rank listens
 * with that magic (from 2.23 the magic of the id of its root, which is
 * this one; before, the only id). */
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
	/* a rank listens for its answer before it reports: a refusal means it
	 * is gone, and the roots' thread must not spend its deadline on it */
	double left = s->deadline - hpct__now();
	rc = s->fuzz ? 0
	             : hpct__nccl_connect_to((struct sockaddr *)&ss, left > 0.05 ? left : 0.05,
	                                     REPLY_REFUSED_S, &fd);
	if (rc == 0 && !s->fuzz) {
		unsigned char msg[HPCT_NCCL_HDR_LEN + HPCT_NCCL_RING_LEN];
		int len = rt->wire->reply_len;
		hpct__nccl_header(msg, rt->magic, len);
		memcpy(msg + HPCT_NCCL_HDR_LEN, rt->ring[next], (size_t)len);
		rc = hpct__nccl_send_all(fd, msg, HPCT_NCCL_HDR_LEN + (size_t)len);
		close(fd);
	}
	if (rc < 0)
		return fail_set(s, HPCT_EPEERDEAD,
		                "NCCL root at %s: cannot answer rank %d of %d at %s: %s", rt->where,
		                rank, rt->nranks, to, hpct_strerror(rc));
	rt->replied[l] = 1;
	rt->conns++;
	if (++rt->sent == rt->n2send) {
		if (!s->fuzz && !s->borrowed)
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

/* A whole report of c's wire came in on root rt. */
static void take_report(struct hpct_nccl_roots *s, struct root *rt, const struct report_conn *c)
{
	const struct hpct_nccl_wire *w = c->wire;
	const unsigned char *e = c->buf + HPCT_NCCL_HDR_LEN;
	const char *from = c->from;
	int rank = hpct__nccl_get32(e), nranks = hpct__nccl_get32(e + 4);
	int iroot = w->multi_root ? hpct__nccl_get32(e + 8) : 0;
	int nroots = w->multi_root ? hpct__nccl_get32(e + 12) : 1;
	int offset = w->offset_at >= 0 ? hpct__nccl_get32(e + w->offset_at) : 0;
	if (offset != 0) {
		dropped(s, rt, from,
		        "an ncclCommGrow report (rank %d of %d, offset %d): hpct's roots do not "
		        "serve ncclCommGrow",
		        rank, nranks, offset);
		return;
	}
	if (!rt->wire) {
		if (nranks != s->nranks || nroots < 1 || nroots > nranks || iroot < 0 ||
		    iroot >= nroots) {
			dropped(s, rt, from,
			        "a report with nranks %d, nroots %d, iroot %d (the communicator "
			        "has %d ranks)",
			        nranks, nroots, iroot, s->nranks);
			return;
		}
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
		rt->wire = w; /* from now on, this root's wire */
	} else if (nranks != rt->nranks || nroots != rt->nroots || iroot != rt->iroot) {
		dropped(s, rt, from,
		        "rank %d says nranks %d, nroots %d, iroot %d; earlier ranks said %d, %d, "
		        "%d",
		        rank, nranks, nroots, iroot, rt->nranks, rt->nroots, rt->iroot);
		return;
	}
	long long ll = (long long)rank - rt->first; /* any rank a report claims */
	int l = ll < 0 || ll >= rt->nrecv ? -1 : (int)ll;
	if (l < 0) {
		dropped(s, rt, from, "rank %d is not one of the ranks %d..%d of root %d of %d",
		        rank, rt->first, rt->first + rt->nrecv - 1, rt->iroot, rt->nroots);
		return;
	}
	if (rt->have[l]) {
		dropped(s, rt, from, "rank %d of %d checked in twice: the second report is refused",
		        rank, rt->nranks);
		return;
	}
	pthread_mutex_lock(&s->lock); /* hpct__nccl_roots_listeners reads them */
	memcpy(rt->addr[l], e + w->addr_at, HPCT_NCCL_ADDR_LEN);
	memcpy(rt->ring[l], e + w->ring_at, (size_t)w->reply_len);
	rt->have[l] = 1;
	pthread_mutex_unlock(&s->lock);
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

/* The bytes a connection must send: its header, then the report of the
 * length the header gives. */
static size_t conn_want(const struct report_conn *c)
{
	return HPCT_NCCL_HDR_LEN + (c->wire ? (size_t)c->wire->report_len : 0);
}

/* "64 (NCCL 2.19-2.22), 172 (...), ...": the lengths the roots take. */
static void known_lengths(char *buf, size_t len)
{
	size_t at = 0;
	buf[0] = 0;
	for (int i = 0; i < HPCT_NCCL_NWIRES && at < len; i++)
		at += (size_t)snprintf(buf + at, len - at, "%s%d (NCCL %s)", i ? ", " : "",
		                       hpct__nccl_wires[i].report_len,
		                       hpct__nccl_wires[i].releases);
}

/* What the bytes of c so far say: 1 when the connection is finished with
 * (dropped, or its report taken), 0 when more must come. */
static int examine(struct hpct_nccl_roots *s, struct root *rt, struct report_conn *c)
{
	const char *from = c->from;
	if (c->got >= 8 && memcmp(c->buf, &rt->magic, 8) != 0) {
		/* another comm's, a stale id's, or a stranger's */
		uint64_t m;
		memcpy(&m, c->buf, 8);
		dropped(s, rt, from, "wrong magic %#llx (%s)", (unsigned long long)m,
		        s->keyed ? "this communicator's magic is keyed by HPCT_SECRET: no secret "
		                   "there, or another one"
		                 : "another communicator's or an old id, or not an NCCL rank");
		return 1;
	}
	if (c->got >= 12 && hpct__nccl_get32(c->buf + 8) != HPCT_NCCL_SOCK_TYPE_BOOTSTRAP) {
		dropped(s, rt, from, "socket type %d, not %d (bootstrap)",
		        hpct__nccl_get32(c->buf + 8), HPCT_NCCL_SOCK_TYPE_BOOTSTRAP);
		return 1;
	}
	if (c->got >= HPCT_NCCL_HDR_LEN && !c->wire) {
		int len = hpct__nccl_get32(c->buf + 12);
		if (!(c->wire = hpct__nccl_wire_for_len(len))) {
			char lens[160];
			known_lengths(lens, sizeof(lens));
			dropped(s, rt, from, "a %d-byte report; NCCL's ranks send %s", len, lens);
			return 1;
		}
	}
	if (c->wire && rt->wire && c->wire != rt->wire) {
		dropped(s, rt, from,
		        "a %d-byte report (NCCL %s) where this root's ranks sent %d bytes (NCCL "
		        "%s)",
		        c->wire->report_len, c->wire->releases, rt->wire->report_len,
		        rt->wire->releases);
		return 1;
	}
	if (c->wire && c->got == conn_want(c)) {
		rt->conns++;
		if (rt->lfd >= 0)
			take_report(s, rt, c);
		else
			dropped(s, rt, from,
			        "a report (rank %d) after this root answered all its ranks",
			        hpct__nccl_get32(c->buf + HPCT_NCCL_HDR_LEN));
		return 1;
	}
	return 0;
}

/* Reads what is there; 1 when the connection is finished with. */
static int read_conn(struct hpct_nccl_roots *s, struct report_conn *c)
{
	struct root *rt = &s->roots[c->root];
	for (;;) {
		ssize_t k = recv(c->fd, c->buf + c->got, conn_want(c) - c->got, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (k <= 0) { /* gone before a whole report: nothing to act on */
			dropped(s, rt, c->from, "it closed after %zu of %zu bytes%s%s", c->got,
			        conn_want(c), k < 0 ? ": " : "", k < 0 ? strerror(errno) : "");
			return 1;
		}
		c->got += (size_t)k;
		if (examine(s, rt, c))
			return 1;
	}
}

/* For the fuzz target: `data` as the bytes of successive connections to one
 * root of magic 0x0123456789abcdef for a communicator of 4 ranks, each
 * taking what the thread would read of it (a header, then the report of
 * the length it gives; the last maybe short), answers not sent. */
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
		snprintf(c.from, sizeof(c.from), "fuzz");
		int done = 0;
		while (!done && len > 0) {
			size_t k = conn_want(&c) - c.got;
			k = k < len ? k : len;
			memcpy(c.buf + c.got, data, k);
			c.got += k;
			data += k;
			len -= k;
			done = examine(&s, &rt, &c);
		}
	}
	rt.lfd = -1; /* nothing to close */
	root_free(&rt, 0);
}

static void accept_on(struct hpct_nccl_roots *s, int r)
{
	for (;;) {
		struct sockaddr_storage peer;
		socklen_t plen = sizeof(peer);
		int fd = accept4(s->roots[r].lfd, (struct sockaddr *)&peer, &plen,
		                 SOCK_NONBLOCK | SOCK_CLOEXEC);
		hpct__fd_track(fd);
		if (fd < 0)
			return; /* EAGAIN, or EMFILE: the next poll tries again */
		char from[80];
		hpct__addr_str((struct sockaddr *)&peer, from, sizeof(from));
		struct report_conn *c = calloc(1, sizeof(*c));
		if (!c || (s->nconns == s->capconns && s->capconns >= 4096)) {
			free(c); /* more half-sent reports than any comm needs */
			close(fd);
			dropped(s, &s->roots[r], from, "%d connections are open already",
			        s->nconns);
			continue;
		}
		if (s->nconns == s->capconns) {
			int cap = s->capconns ? s->capconns * 2 : 16;
			void *p = realloc(s->conns, (size_t)cap * sizeof(*s->conns));
			if (!p) {
				free(c);
				close(fd);
				dropped(s, &s->roots[r], from, "out of memory");
				continue;
			}
			s->conns = p;
			s->capconns = cap;
		}
		c->fd = fd;
		c->root = r;
		memcpy(c->from, from, sizeof(from));
		c->deadline = hpct__now() + REPORT_WITHIN_S;
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
		if (!rt->wire) {
			at += (size_t)snprintf(buf + at, len - at, "%sroot at %s: no rank reported",
			                       at ? "; " : "", rt->where);
			continue;
		}
		at += (size_t)snprintf(buf + at, len - at,
		                       "%sroot at %s (NCCL %s reports): not heard from rank",
		                       at ? "; " : "", rt->where, rt->wire->releases);
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
	pthread_setname_np(pthread_self(), "hpct-nccl-root"); /* in top, gdb, perf */
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
	int cap = 0, stopped = 0;
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
		if (poll(pf, (nfds_t)k, ms) < 0 && errno != EINTR) {
			fail_set(s, -errno, "NCCL roots: poll: %s", strerror(errno));
			break;
		}
		if (pf[0].revents) {
			stopped = 1;
			break;
		}
		/* connections first: their slots in pf are those of this round */
		for (int i = s->nconns - 1; i >= 0; i--) {
			struct report_conn *c = s->conns[i];
			int done = pf[1 + s->n + i].revents ? read_conn(s, c) : 0;
			if (!done && hpct__now() > c->deadline) {
				dropped(s, &s->roots[c->root], c->from,
				        "too slow: %zu of %zu bytes in %.0f s", c->got,
				        conn_want(c), REPORT_WITHIN_S);
				done = 1;
			}
			if (done) /* the last one moves here: already seen */
				drop_conn(s, i);
		}
		for (int r = 0; r < s->n; r++)
			if (s->roots[r].lfd >= 0 && pf[1 + r].revents)
				accept_on(s, r);
	}
	/* finished or out of time: whoever is still sending is told of */
	for (int i = s->nconns - 1; i >= 0 && !stopped; i--) {
		struct report_conn *c = s->conns[i];
		dropped(s, &s->roots[c->root], c->from,
		        "it had sent %zu of %zu bytes when the roots %s", c->got, conn_want(c),
		        s->result ? "gave up" : "finished");
		drop_conn(s, i);
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
	hpct__fd_track(fd);
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

/* A set of n roots at ids[]: listening at lfds[] when given (a domain's,
 * left open when the set ends), else at listeners bound here. */
static int roots_start(const hpct_nccl_id *ids, const int *lfds, int n, int nranks,
                       double timeout_s, int keyed, struct hpct_nccl_roots **out)
{
	struct hpct_nccl_roots *s = calloc(1, sizeof(*s));
	if (!s || !(s->roots = calloc((size_t)n, sizeof(*s->roots)))) {
		free(s);
		return HPCT_ENOMEM;
	}
	s->n = s->live = n;
	s->nranks = nranks;
	s->keyed = keyed;
	s->borrowed = lfds != NULL;
	pthread_mutex_init(&s->lock, NULL);
	s->deadline = hpct__now() + timeout_s;
	s->stop_pipe[0] = s->stop_pipe[1] = -1;
	for (int r = 0; r < n; r++)
		s->roots[r].lfd = -1;
	int rc = 0;
	for (int r = 0; r < n && rc == 0; r++) {
		struct root *rt = &s->roots[r];
		memcpy(&rt->magic, ids[r].internal, 8);
		if (lfds) {
			struct sockaddr_storage ss;
			memset(&ss, 0, sizeof(ss));
			memcpy(&ss, ids[r].internal + 8, HPCT_NCCL_ADDR_LEN);
			hpct__addr_str((struct sockaddr *)&ss, rt->where, sizeof(rt->where));
			rt->lfd = lfds[r];
		} else {
			rc = listen_at(&ids[r], &rt->lfd, rt->where, sizeof(rt->where));
		}
	}
	if (rc == 0 && pipe2(s->stop_pipe, O_CLOEXEC) < 0)
		rc = hpct__fail(-errno, HPCT_SUB_NCCL, "NCCL roots: pipe: %s", strerror(errno));
	if (rc == 0 && pthread_create(&s->thread, NULL, serve, s) != 0)
		rc = hpct__fail(HPCT_ENOMEM, HPCT_SUB_NCCL, "NCCL roots: no thread");
	if (rc) {
		for (int r = 0; r < n; r++)
			root_free(&s->roots[r], s->borrowed);
		if (s->stop_pipe[0] >= 0) {
			close(s->stop_pipe[0]);
			close(s->stop_pipe[1]);
		}
		pthread_mutex_destroy(&s->lock);
		free(s->roots);
		free(s);
		return rc;
	}
	*out = s;
	return 0;
}

int hpct__nccl_roots_start(const hpct_nccl_id *ids, int n, int nranks, double timeout_s, int keyed,
                           struct hpct_nccl_roots **out)
{
	return roots_start(ids, NULL, n, nranks, timeout_s, keyed, out);
}

int hpct__nccl_roots_start_on(const hpct_nccl_id *ids, const int *lfds, int n, int nranks,
                              double timeout_s, int keyed, struct hpct_nccl_roots **out)
{
	return roots_start(ids, lfds, n, nranks, timeout_s, keyed, out);
}

int hpct__nccl_root_listen(const hpct_nccl_id *id, int *fd_out)
{
	char where[64];
	return listen_at(id, fd_out, where, sizeof(where));
}

int hpct__nccl_roots_finished(struct hpct_nccl_roots *s)
{
	pthread_mutex_lock(&s->lock);
	int done = s->finished;
	pthread_mutex_unlock(&s->lock);
	return done;
}

static void roots_free(struct hpct_nccl_roots *s)
{
	while (s->nconns > 0)
		drop_conn(s, s->nconns - 1);
	free(s->conns);
	for (int r = 0; r < s->n; r++)
		root_free(&s->roots[r], s->borrowed);
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
	/* detached under the lock: once it is released the thread may free
	 * the set at any moment */
	pthread_mutex_lock(&s->lock);
	int done = s->finished;
	s->detached = !done;
	if (!done)
		pthread_detach(s->thread);
	pthread_mutex_unlock(&s->lock);
	if (!done)
		return;
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
	/* stopped because NCCL failed: what the roots saw says why, often who */
	if (s->result)
		HPCT_WARN(HPCT_SUB_NCCL, "%s", s->failure);
	roots_free(s);
}

int hpct__nccl_roots_listeners(struct hpct_nccl_roots *s, int rank, struct sockaddr_storage out[2])
{
	int n = 0;
	pthread_mutex_lock(&s->lock);
	for (int r = 0; r < s->n && n == 0; r++) {
		struct root *rt = &s->roots[r];
		for (int l = 0; rt->have && l < rt->nrecv && n == 0; l++) {
			if (!rt->have[l] || (rt->first + l) % rt->nranks != rank)
				continue;
			/* the answer's listener, and the ring's (a socket address
			 * first in its connect info) */
			const unsigned char *from[2] = { rt->addr[l], rt->ring[l] };
			for (int k = 0; k < 2; k++) {
				memset(&out[n], 0, sizeof(out[n]));
				memcpy(&out[n], from[k], HPCT_NCCL_ADDR_LEN);
				if (out[n].ss_family == AF_INET || out[n].ss_family == AF_INET6)
					n++;
			}
		}
	}
	pthread_mutex_unlock(&s->lock);
	return n;
}
