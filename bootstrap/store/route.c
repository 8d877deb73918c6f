/* How the rootless store's client reaches a key's group (see route.h):
 * where each rank's store listens, this process's view of where each
 * group stands (its members and primary, learned from the members' own
 * answers: ST_REDIRECT and WHO), one connection per rank per handle, and
 * a request followed until its group answers it or its deadline passes.
 *
 * A request goes to the primary this process knows.  A member that is
 * not the primary answers where the group stands (the client asks the
 * primary it names, or, in a view change, tries again shortly); a member
 * that refuses, breaks its connection or is fenced is passed over for the
 * next; and a request that waits longer than the handle's slice asks the
 * group's other members where it stands: when they name a later view
 * with another primary, the connection is given up and the request goes
 * there (a write with its id, so that it is not done twice).  Only when
 * no member can answer by the deadline does it fail, naming each. */
#include "bootstrap/store/store.h"

#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/base/auth.h"
#include "bootstrap/base/bytes.h"
#include "bootstrap/base/log.h"
#include "bootstrap/base/param.h"
#include "bootstrap/base/sock.h"
#include "bootstrap/store/route.h"
#include "bootstrap/store/vr.h"
#include "bootstrap/topo/derive.h"

#define CONNECT_S 1.0 /* one connect attempt's deadline */
#define WHO_S     0.3 /* a member asked where its group stands */
#define PROBE_S   0.3 /* to find ranks that do not answer, after a timeout */

int hpct__store_addr(struct hpct_world *w, int rank, struct sockaddr_storage *ss, socklen_t *sl,
                     char *text, size_t tlen)
{
	int rc = hpct__world_node_addr(w, rank, ss, sl);
	if (rc)
		return rc;
	/* the range just below hpct's (clear of the kernel's ephemeral ports
	 * with the defaults), else the one after NCCL's */
	long range = w->topo.port_range;
	long off;
	int set;
	rc = hpct__env_int(hpct__env_process(), "HPCT_STORE_PORT_OFFSET", -65535, 65535,
	                   w->topo.port_base - range >= 1024 ? -range : 2 * range, &off, &set);
	if (rc)
		return rc;
	if (set && off == 0)
		return hpct__fail(
		        HPCT_EBADENV, HPCT_SUB_NET,
		        "HPCT_STORE_PORT_OFFSET=0 is not a port offset (+-1 to 65535): the "
		        "store would take the rank's own port");
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
struct hpct_auth_id hpct__store_auth_id(const struct hpct_world *w, int client, int home)
{
	return (struct hpct_auth_id){ .job = w->topo.job,
		                      .epoch = 0,
		                      .service = HPCT_AUTH_SERVICE_STORE,
		                      .client = (uint32_t)client,
		                      .server = (uint32_t)home,
		                      .size = (uint32_t)w->topo.size };
}

const char *hpct__store_shown(const char *key, char *buf, size_t len)
{
	snprintf(buf, len, "%.*s%s", KEY_SHOWN, key, strlen(key) > KEY_SHOWN ? "..." : "");
	return buf;
}

double hpct__store_cap(const struct hpct_store *s, double t)
{
	double lim = s->w->topo.timeout_s;
	if (t < 0)
		t = s->timeout;
	return t < 0 || t > lim ? lim : t;
}

static const char *addr_of(struct hpct_store *s, int rank, char *text, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	snprintf(text, len, "?");
	hpct__store_addr(s->w, rank, &ss, &sl, text, len);
	return text;
}

/* ---- the first failure, passed on ----------------------------------- */

/* The first rank this process found gone, or was told of by a rank that
 * left (per world and epoch): a later failure names it too, and this
 * rank's server tells its parked clients before the process exits
 * (server.c): a rank that fails because of another passes the cause on. */
static struct {
	pthread_mutex_t mu;
	uint64_t job, epoch;
	int set;
	char why[512];
} first = { .mu = PTHREAD_MUTEX_INITIALIZER };

/* Records `why` when it is this world epoch's first (NULL: nothing); in
 * also, what a message saying `says` adds: the first, unless `says` names
 * its rank at its address already. */
static void found(const struct hpct_store *s, const char *why, const char *says, char *also,
                  size_t alen)
{
	also[0] = 0;
	pthread_mutex_lock(&first.mu);
	int ours = first.set && first.job == s->w->topo.job && first.epoch == s->w->topo.epoch;
	if (!ours && why) {
		snprintf(first.why, sizeof(first.why), "%s", why);
		first.job = s->w->topo.job;
		first.epoch = s->w->topo.epoch;
		first.set = 1;
	} else if (ours) {
		/* "rank 2 at 127.0.0.1:2550" */
		const char *at = strstr(first.why, " at ");
		const char *end = at ? strchr(at + 4, ' ') : NULL;
		size_t n = end ? (size_t)(end - first.why) : strlen(first.why);
		char tag[HPCT_ADDRSTRLEN + 32];
		snprintf(tag, sizeof(tag), "%.*s", (int)n, first.why);
		if (!strstr(says, tag))
			snprintf(also, alen, "; before it, this rank found %s", first.why);
	}
	pthread_mutex_unlock(&first.mu);
}

int hpct__store_first_dead(char *buf, size_t len)
{
	pthread_mutex_lock(&first.mu);
	int set = first.set;
	if (set)
		snprintf(buf, len, "%s", first.why);
	pthread_mutex_unlock(&first.mu);
	return set;
}

/* ---- where each group stands ---------------------------------------- */

struct route {
	uint32_t cfg, view;
	int n, primary, known;
	uint8_t status;
	int m[VR_MAX];
};

static struct {
	pthread_mutex_t mu;
	uint64_t job, epoch;
	int size;
	struct route *r;
} routes = { .mu = PTHREAD_MUTEX_INITIALIZER };

void hpct__store_route_child(void)
{
	pthread_mutex_init(&routes.mu, NULL);
	pthread_mutex_init(&first.mu, NULL);
}

/* routes.mu held: the table of this world (a new one: nothing known). */
static struct route *table(const struct hpct_world *w)
{
	if (!routes.r || routes.job != w->topo.job || routes.epoch != w->topo.epoch ||
	    routes.size != w->topo.size) {
		struct route *r = calloc((size_t)w->topo.size, sizeof(*r));
		if (!r)
			return NULL;
		free(routes.r);
		routes.r = r;
		routes.job = w->topo.job;
		routes.epoch = w->topo.epoch;
		routes.size = w->topo.size;
	}
	return routes.r;
}

static void route_get(const struct hpct_store *s, uint32_t g, struct route *out)
{
	pthread_mutex_lock(&routes.mu);
	struct route *t = table(s->w);
	if (t && !t[g].known) {
		t[g].n = hpct__store_config0(s->w, g, t[g].m);
		t[g].primary = t[g].m[0];
		t[g].known = 1;
	}
	if (t)
		*out = t[g];
	pthread_mutex_unlock(&routes.mu);
	if (!t) { /* no memory: the group's first rank */
		*out = (struct route){ .n = 1, .primary = (int)g, .known = 1 };
		out->m[0] = (int)g;
	}
}

_Static_assert(sizeof(((struct hpct_store_pos *)0)->members) / sizeof(int) == VR_MAX,
               "hpct_store_pos holds a configuration");

/* A POSITION (store_internal.h) of group g, read into *out: 0, or -1
 * when it is not one. */
static int pos_read(uint32_t g, const unsigned char *p, size_t len, struct hpct_store_pos *out)
{
	if (len < 14 || hpct__get32(p) != g || p[13] > VR_MAX || len != 22 + 4 * (size_t)p[13])
		return -1;
	*out = (struct hpct_store_pos){ .cfg = hpct__get32(p + 4), .view = hpct__get32(p + 8),
		                        .status = p[12], .n = p[13] };
	for (int i = 0; i < out->n; i++)
		out->members[i] = (int)hpct__get32(p + 14 + 4 * i);
	out->primary = (int32_t)hpct__get32(p + 14 + 4 * out->n);
	out->heard_ms = hpct__get32(p + 18 + 4 * out->n);
	return 0;
}

/* A POSITION (store_internal.h) of group g; what this process knows of g
 * afterwards in *out: 1 when the position was later than what it knew. */
static int route_learn(const struct hpct_store *s, uint32_t g, const unsigned char *p,
                       size_t len, struct route *out)
{
	struct hpct_store_pos pos;
	if (pos_read(g, p, len, &pos) != 0)
		return 0;
	struct route n = { .cfg = pos.cfg, .view = pos.view, .status = (uint8_t)pos.status,
		           .n = pos.n, .primary = pos.primary, .known = 1 };
	for (int i = 0; i < n.n; i++)
		if ((n.m[i] = pos.members[i]) >= s->w->topo.size)
			return 0;
	if (n.primary >= s->w->topo.size || n.status == VR_OUT || n.n == 0)
		return 0;
	pthread_mutex_lock(&routes.mu);
	struct route *t = table(s->w);
	int later = t && (!t[g].known || n.cfg > t[g].cfg ||
	                  (n.cfg == t[g].cfg && (n.view > t[g].view ||
	                                         (n.view == t[g].view && t[g].status != VR_NORMAL &&
	                                          n.status == VR_NORMAL))));
	if (later)
		t[g] = n;
	if (t)
		*out = t[g];
	pthread_mutex_unlock(&routes.mu);
	return later;
}

const char *hpct__store_homes(struct hpct_store *s, const char *key, char *buf, size_t len)
{
	struct route rt;
	char text[HPCT_ADDRSTRLEN];
	uint32_t g = hpct__store_group_of(key, strlen(key), s->w->topo.size);
	route_get(s, g, &rt);
	size_t u = (size_t)snprintf(buf, len, "group %u, home rank%s ", g, rt.n > 1 ? "s" : "");
	for (int i = 0; i < rt.n && u < len; i++)
		u += (size_t)snprintf(buf + u, len - u, "%s%d (%s%s)", i ? ", " : "", rt.m[i],
		                      addr_of(s, rt.m[i], text, sizeof(text)),
		                      rt.m[i] == rt.primary ? ", primary" : "");
	return buf;
}

static int next_member(const struct route *rt, int r)
{
	for (int i = 0; i < rt->n; i++)
		if (rt->m[i] == r)
			return rt->m[(i + 1) % rt->n];
	return rt->m[0];
}

/* ---- one connection, one exchange ------------------------------------- */

/* A line to rank r's store for this request: the one it holds, an idle
 * one of the world's, or a new connection (one attempt): 0, or the
 * failure (-errno, HPCT_ETIMEDOUT, the proof's). */
static int ensure(struct hpct_store *s, int r, double deadline)
{
	if (s->fd[r] >= 0)
		return 0;
	if ((s->fd[r] = hpct__lines_take(s->lines, r)) >= 0) {
		s->reused[r] = 1;
		return 0;
	}
	struct sockaddr_storage ss;
	socklen_t sl;
	char text[HPCT_ADDRSTRLEN];
	int rc = hpct__store_addr(s->w, r, &ss, &sl, text, sizeof(text));
	if (rc)
		return rc;
	int fd = hpct__sock_connect(&ss, sl, deadline);
	if (fd >= 0 && s->w->topo.secret) {
		char who[HPCT_ADDRSTRLEN + 32];
		snprintf(who, sizeof(who), "rank %d's store at %s", r, text);
		struct hpct_auth_id id = hpct__store_auth_id(s->w, s->w->topo.rank, r);
		rc = hpct__auth_client(fd, s->w->topo.secret, s->w->topo.secret_len, &id, deadline,
		                       who);
		if (rc) {
			close(fd);
			return rc;
		}
	}
	if (fd < 0)
		return fd;
	HPCT_INFO(HPCT_SUB_NET, "store: a new connection to rank %d's store at %s (%ld made)", r,
	          text, hpct__lines_made(s->lines));
	s->fd[r] = fd;
	s->owed[r] = 0;
	s->reused[r] = 0;
	return 0;
}

static void hang_up(struct hpct_store *s, int r)
{
	if (s->fd[r] >= 0)
		close(s->fd[r]);
	s->fd[r] = -1;
	s->owed[r] = 0;
	s->reused[r] = 0;
}

/* A line that broke: when it was an idle one, the others to r (made
 * before it broke too) go with it, and 1: the request may go again at r
 * on a new connection, which a live store takes. */
static int broke(struct hpct_store *s, int r)
{
	int stale = s->reused[r];
	if (stale)
		hpct__lines_drop(s->lines, r);
	hang_up(s, r);
	return stale;
}

void hpct__store_release(struct hpct_store *s)
{
	for (int r = 0; r < s->w->topo.size; r++)
		if (s->fd[r] >= 0) {
			/* (a line with bytes unread, or closed by its peer, whatever
			 * the count says, is closed: the next request must read
			 * its own answer) */
			if (s->owed[r] == 0 && hpct__sock_wait(s->fd[r], POLLIN, 0) == 0)
				hpct__lines_give(s->lines, r, s->fd[r]);
			else
				close(s->fd[r]);
			s->fd[r] = -1;
			s->owed[r] = 0;
			s->reused[r] = 0;
		}
}

/* Sends a request's frame on the line to r: 0 (an answer owed), or the
 * failure. */
static int put(struct hpct_store *s, int r, const unsigned char *f, size_t flen, double until)
{
	int io = hpct__sock_send_all(s->fd[r], f, flen, until);
	if (io == 0)
		s->owed[r]++;
	return io;
}

/* One answer from rank r (s->mu held): 0 with *status and *rep
 * (malloc'd), or the exchange's failure (the stream is then out of step:
 * the caller hangs up). */
static int answer(struct hpct_store *s, int r, double deadline, int *status, unsigned char **rep,
                  size_t *replen)
{
	unsigned char h[8];
	*rep = NULL;
	*replen = 0;
	int io = hpct__sock_recv_all(s->fd[r], h, 8, deadline);
	if (io)
		return io;
	uint32_t len = hpct__get32(h);
	if (hpct__auth_is_frame(h, sizeof(h)) && !s->w->topo.secret)
		return HPCT_EREFUSED; /* a REFUSE: it wants a proof */
	if (len < 4 || len > HPCT_STORE_MAX_FRAME)
		return HPCT_EPROTO;
	if (len > 4 && !(*rep = malloc(len - 4)))
		return HPCT_ENOMEM;
	if ((io = hpct__sock_recv_all(s->fd[r], *rep, len - 4, deadline)) != 0) {
		free(*rep);
		*rep = NULL;
		return io;
	}
	*replen = len - 4;
	*status = (int32_t)hpct__get32(h + 4);
	s->owed[r]--;
	return 0;
}

/* A request's frame (malloc'd): u32 length, op, namespace, key, [id],
 * fields. */
static unsigned char *frame(struct hpct_store *s, uint8_t op, const char *key, uint64_t seq,
                            const void *a, size_t alen, const void *b, size_t blen,
                            size_t *len_out)
{
	size_t klen = strlen(key), rl = op & OP_RID ? 16 : 0;
	size_t flen = HDR + klen + rl + alen + blen;
	unsigned char *f = malloc(4 + flen);
	if (!f)
		return NULL;
	hpct__put32(f, (uint32_t)flen);
	f[4] = op;
	hpct__put64(f + 5, s->ns);
	hpct__put32(f + 13, (uint32_t)klen);
	memcpy(f + 4 + HDR, key, klen);
	if (rl) {
		hpct__put64(f + 4 + HDR + klen, s->cid);
		hpct__put64(f + 4 + HDR + klen + 8, seq);
	}
	if (alen)
		memcpy(f + 4 + HDR + klen + rl, a, alen);
	if (blen)
		memcpy(f + 4 + HDR + klen + rl + alen, b, blen);
	*len_out = 4 + flen;
	return f;
}

/* WHO of group g at rank r (s->mu held), by `until`: 0 and its POSITION
 * in *rep (malloc'd), or the failure (the connection is hung up). */
static int who_at(struct hpct_store *s, uint32_t g, int r, double until, unsigned char **rep,
                  size_t *rl)
{
	unsigned char body[4], *f;
	size_t flen;
	hpct__put32(body, g);
	uint64_t ns = s->ns;
	s->ns = 0;
	f = frame(s, OP_WHO, "", 0, body, 4, NULL, 0, &flen);
	s->ns = ns;
	if (!f)
		return HPCT_ENOMEM;
	/* a line to r that still owes answers (hpct__store_rpc_many's) is
	 * not asked: the WHO goes on another, and the first is put back */
	int held_fd = -1, held_owed = 0;
	unsigned char held_reused = 0;
	if (s->owed[r] > 0) {
		held_fd = s->fd[r], held_owed = s->owed[r], held_reused = s->reused[r];
		s->fd[r] = -1, s->owed[r] = 0, s->reused[r] = 0;
	}
	int st = 0, rc = ensure(s, r, until);
	if (rc == 0 && ((rc = put(s, r, f, flen, until)) != 0 ||
	                (rc = answer(s, r, until, &st, rep, rl)) != 0) &&
	    broke(s, r) && (rc = ensure(s, r, until)) == 0 &&
	    ((rc = put(s, r, f, flen, until)) != 0 || (rc = answer(s, r, until, &st, rep, rl)) != 0))
		hang_up(s, r);
	if (held_fd >= 0) {
		if (s->fd[r] >= 0) /* answered (else hung up above) */
			hpct__lines_give(s->lines, r, s->fd[r]);
		s->fd[r] = held_fd, s->owed[r] = held_owed, s->reused[r] = held_reused;
	}
	free(f);
	if (rc == 0 && st != 0) {
		free(*rep);
		*rep = NULL;
		rc = st;
	}
	return rc;
}

/* Asks the members of g other than `busy` where it stands (WHO): the
 * latest position this process knows (its other requests' too) in *rt. */
static void who(struct hpct_store *s, uint32_t g, int busy, struct route *rt)
{
	int n = rt->n, m[VR_MAX];
	memcpy(m, rt->m, sizeof(m));
	for (int i = 0; i < n; i++) {
		unsigned char *rep;
		size_t rl;
		if (m[i] != busy && who_at(s, g, m[i], hpct__now() + WHO_S, &rep, &rl) == 0) {
			route_learn(s, g, rep, rl, rt);
			free(rep);
		}
	}
}

int hpct__store_position(struct hpct_store *s, int rank, uint32_t g, struct hpct_store_pos *out)
{
	if (rank < 0 || rank >= s->w->topo.size || g >= (uint32_t)s->w->topo.size)
		return HPCT_EINVAL;
	unsigned char *p = NULL;
	size_t len = 0;
	pthread_mutex_lock(&s->mu);
	int rc = who_at(s, g, rank, hpct__now() + hpct__store_cap(s, -1), &p, &len);
	hpct__store_release(s);
	pthread_mutex_unlock(&s->mu);
	if (rc)
		return rc;
	rc = pos_read(g, p, len, out) != 0 ? HPCT_EPROTO : 0;
	free(p);
	return rc;
}

/* ---- a request, followed ------------------------------------------------ */

/* What each member did, for the message when none answers. */
struct notes {
	int rank[2 * VR_MAX];
	char text[2 * VR_MAX][160];
	int n;
};

static void note(struct notes *nt, int r, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static void note(struct notes *nt, int r, const char *fmt, ...)
{
	int i = 0;
	while (i < nt->n && nt->rank[i] != r)
		i++;
	if (i == nt->n) {
		if (nt->n == 2 * VR_MAX)
			return;
		nt->rank[nt->n++] = r;
	}
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(nt->text[i], sizeof(nt->text[i]), fmt, ap);
	va_end(ap);
}

static int give_up(struct hpct_store *s, const char *what, const char *key, uint32_t g,
                   const struct route *rt, struct notes *nt, double waited)
{
	char kb[KEY_SHOWN + 8], ranks[64] = "", said[1200] = "", also[600], text[HPCT_ADDRSTRLEN];
	size_t u = 0;
	for (int i = 0; i < rt->n; i++) { /* the members not asked: up or not */
		int k = 0;
		while (k < nt->n && nt->rank[k] != rt->m[i])
			k++;
		if (k < nt->n)
			continue;
		int io = ensure(s, rt->m[i], hpct__now() + 0.05);
		note(nt, rt->m[i], "%s", io == 0 ? "takes connections"
		                         : io == -ECONNREFUSED ? "refused a connection (not started, or gone)"
		                                               : hpct_strerror(io));
	}
	for (int i = 0; i < rt->n && u < sizeof(ranks); i++)
		u += (size_t)snprintf(ranks + u, sizeof(ranks) - u, "%s%d", i ? ", " : "", rt->m[i]);
	u = 0;
	for (int i = 0; i < nt->n && u < sizeof(said); i++)
		u += (size_t)snprintf(said + u, sizeof(said) - u, "%srank %d at %s %s",
		                      i ? "; " : "", nt->rank[i],
		                      addr_of(s, nt->rank[i], text, sizeof(text)), nt->text[i]);
	/* a home that took no connection: a cause this rank passes on */
	char dead[HPCT_ADDRSTRLEN + 96] = "";
	for (int i = 0; i < nt->n && !dead[0]; i++)
		if (strstr(nt->text[i], "refused a connection"))
			snprintf(dead, sizeof(dead),
			         "rank %d at %s took no connection after a wait passed: it died or "
			         "never started",
			         nt->rank[i], addr_of(s, nt->rank[i], text, sizeof(text)));
	found(s, dead[0] ? dead : NULL, said, also, sizeof(also));
	return hpct__fail(HPCT_ENOQUORUM, HPCT_SUB_NET,
	                  "store: %s: %s%s%s (group %u: ranks %s, configuration %u, view %u) had no "
	                  "answer within %.1f s: %s; too few of its homes answer to serve it "
	                  "safely, and the store refuses rather than answer from a copy that may "
	                  "be stale%s",
	                  what, key[0] ? "key '" : "", key[0] ? hpct__store_shown(key, kb, sizeof(kb)) : "",
	                  key[0] ? "'" : "", g, ranks, rt->cfg, rt->view, waited,
	                  said[0] ? said : "none answered", also);
}

/* rank r answered HPCT_EPEERDEAD: it is leaving, because of the failure
 * its answer names (server.c), which becomes this rank's first too. */
static int left(struct hpct_store *s, int r, const char *what, const unsigned char *rep,
                size_t replen, struct notes *nt)
{
	char text[HPCT_ADDRSTRLEN], cause[512], why[700], also[600];
	addr_of(s, r, text, sizeof(text));
	snprintf(cause, sizeof(cause), "%.*s", (int)(replen < 511 ? replen : 511),
	         rep ? (const char *)rep : "");
	snprintf(why, sizeof(why), "rank %d at %s is leaving, after it found %s", r, text, cause);
	found(s, cause[0] ? cause : why, why, also, sizeof(also));
	note(nt, r, "is leaving, after it found %.120s", cause);
	return hpct__fail(HPCT_EPEERDEAD, HPCT_SUB_NET,
	                  "store: %s: rank %d (the key's home) at %s is leaving, after it found "
	                  "%s%s",
	                  what, r, text, cause, also);
}

int hpct__store_rpc(struct hpct_store *s, const char *what, uint8_t op, const char *key, int g0,
                    const void *a, size_t alen, const void *b, size_t blen, double wait_s,
                    int write, unsigned char **rep, size_t *replen)
{
	*rep = NULL;
	*replen = 0;
	size_t klen = strlen(key);
	if (klen > HPCT_STORE_MAX_KEY)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_NET,
		                  "store: %s: key of %zu bytes (at most %u)", what, klen,
		                  HPCT_STORE_MAX_KEY);
	if (alen + blen > HPCT_STORE_MAX_FRAME - HDR - klen - 64)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_NET,
		                  "store: %s: value of %zu bytes (at most %zu)", what, alen + blen,
		                  (size_t)HPCT_STORE_MAX_FRAME - HDR - klen - 64);
	uint32_t g = klen ? hpct__store_group_of(key, klen, s->w->topo.size) : (uint32_t)g0;
	if (write)
		op |= OP_RID;
	size_t flen;
	unsigned char *f = frame(s, op, key, __atomic_add_fetch(&s->seq, 1, __ATOMIC_RELAXED), a,
	                         alen, b, blen, &flen);
	if (!f)
		return HPCT_ENOMEM;
	double t0 = hpct__now(), deadline = t0 + (wait_s > 0 ? wait_s : 0) + hpct__store_cap(s, -1);
	double nap = 0.002;
	struct route rt;
	struct notes nt = { .n = 0 };
	char why[600];
	route_get(s, g, &rt);
	int target = rt.primary >= 0 ? rt.primary : rt.m[0], sent = 0, rc, tries = 0;
	pthread_mutex_lock(&s->mu);
	for (;;) {
		double now = hpct__now();
		if (hpct__store_fenced(why, sizeof(why))) {
			rc = hpct__fail(HPCT_EFENCED, HPCT_SUB_NET, "%s", why);
			break;
		}
		if (now >= deadline) {
			rc = give_up(s, what, key, g, &rt, &nt, now - t0);
			break;
		}
		if (!sent) {
			if (tries++ >= rt.n) { /* each tried once: a pause before the next round */
				hpct__sleep(nap < deadline - now ? nap : deadline - now);
				nap = nap * 2 > 0.2 ? 0.2 : nap * 2;
				tries = 1;
				route_get(s, g, &rt); /* another request may have learned more */
			}
			double until = now + CONNECT_S < deadline ? now + CONNECT_S : deadline;
			int io = ensure(s, target, until);
			if (io == 0 && (io = put(s, target, f, flen, until)) != 0 && broke(s, target)) {
				tries--; /* an idle line gone stale: again, on a new one */
				continue;
			}
			if (io) {
				note(&nt, target, "%s", io == -ECONNREFUSED ? "refused a connection (not "
				                                              "started, or gone)"
				                                            : hpct_strerror(io));
				target = next_member(&rt, target);
				continue;
			}
			sent = 1;
		}
		double until = now + s->slice < deadline ? now + s->slice : deadline;
		int r = hpct__sock_wait(s->fd[target], POLLIN, until);
		if (r == 0) { /* no answer yet: where does the group stand? */
			/* (what another request of this process learned counts too) */
			who(s, g, target, &rt);
			if (rt.primary >= 0 && rt.primary != target && rt.status == VR_NORMAL) {
				note(&nt, target, "did not answer, and the group moved on without it");
				hang_up(s, target); /* its answer, if any, is not waited for */
				sent = 0;
				target = rt.primary;
				tries = 0;
			}
			continue;
		}
		int st = 0, io = r < 0 ? r : answer(s, target, deadline, &st, rep, replen);
		sent = 0;
		if (io && broke(s, target)) {
			tries--; /* an idle line gone stale: again, on a new one (a
			          * write with its id: not done twice) */
			continue;
		}
		if (io) {
			note(&nt, target, "broke its connection (%s)", hpct_strerror(io));
			target = next_member(&rt, target);
			continue;
		}
		if (st == ST_REDIRECT) {
			route_learn(s, g, *rep, *replen, &rt);
			uint8_t pst = *replen > 12 ? (*rep)[12] : VR_OUT;
			note(&nt, target, "is %s", pst == VR_NORMAL ? "not its primary"
			                           : vr_status_name((enum vr_status)pst));
			free(*rep);
			*rep = NULL;
			if (rt.primary >= 0 && rt.primary != target && rt.status == VR_NORMAL) {
				target = rt.primary;
			} else { /* a view change, or a member that knows no more: shortly */
				target = rt.primary >= 0 ? rt.primary : next_member(&rt, target);
				hpct__sleep(nap);
				nap = nap * 2 > 0.05 ? 0.05 : nap * 2;
			}
			continue;
		}
		if (st == HPCT_EFENCED || (st == HPCT_EPEERDEAD && rt.n > 1)) {
			note(&nt, target, "%s", st == HPCT_EFENCED ? "is fenced" : "is leaving");
			if (st == HPCT_EPEERDEAD)
				left(s, target, what, *rep, *replen, &nt);
			free(*rep);
			*rep = NULL;
			target = next_member(&rt, target);
			continue;
		}
		if (st == HPCT_EPEERDEAD) {
			rc = left(s, target, what, *rep, *replen, &nt);
			break;
		}
		rc = st; /* the group's answer */
		break;
	}
	hpct__store_release(s); /* a line whose answer did not come is closed */
	pthread_mutex_unlock(&s->mu);
	free(f);
	if (rc && *rep) {
		free(*rep);
		*rep = NULL;
	}
	return rc;
}

/* The keys [from, to) sent to rank r go alone (below): the line they
 * went on is closed (a line made to r since does not carry them). */
static void off_line(int *target, int from, int to, int r)
{
	for (int j = from; j < to; j++)
		if (target[j] == r)
			target[j] = -1;
}

void hpct__store_rpc_many(struct hpct_store *s, const char *what, uint8_t op,
                          const char *const *keys, int n, const void *a, size_t alen, double wait_s,
                          int *rcs, unsigned char **reps, size_t *replens)
{
	enum { AGAIN = 1 }; /* (rcs[i] while not final) */
	double t0 = hpct__now(), deadline = t0 + (wait_s > 0 ? wait_s : 0) + hpct__store_cap(s, -1);
	int *target = calloc((size_t)(n > 0 ? n : 1), sizeof(int));
	for (int i = 0; i < n; i++) {
		rcs[i] = AGAIN;
		reps[i] = NULL;
		replens[i] = 0;
	}
	pthread_mutex_lock(&s->mu);
	for (int i = 0; target && i < n; i++) { /* all sent at once */
		struct route rt;
		uint32_t g = hpct__store_group_of(keys[i], strlen(keys[i]), s->w->topo.size);
		route_get(s, g, &rt);
		target[i] = rt.primary >= 0 ? rt.primary : rt.m[0];
		size_t flen;
		unsigned char *f = frame(s, op, keys[i], 0, a, alen, NULL, 0, &flen);
		double until = hpct__now() + CONNECT_S;
		if (!f || ensure(s, target[i], until) != 0 ||
		    put(s, target[i], f, flen, until) != 0) {
			broke(s, target[i]);
			off_line(target, 0, i, target[i]); /* sent on the line just closed */
			target[i] = -1;                    /* alone, below */
		}
		free(f);
	}
	for (int i = 0; target && i < n; i++) { /* answered in order, per rank */
		int r = target[i], st = 0;
		if (r < 0 || s->fd[r] < 0)
			continue;
		int ready = 0;
		while (!ready && hpct__now() < deadline) {
			double now = hpct__now();
			ready = hpct__sock_wait(s->fd[r], POLLIN, now + s->slice < deadline
			                                                  ? now + s->slice
			                                                  : deadline);
			if (ready == 0) {
				struct route rt;
				uint32_t g = hpct__store_group_of(keys[i], strlen(keys[i]),
				                                  s->w->topo.size);
				route_get(s, g, &rt);
				who(s, g, r, &rt);
				if (rt.primary >= 0 && rt.primary != r && rt.status == VR_NORMAL)
					break; /* it moved on without r: alone, below */
			}
		}
		if (ready <= 0 || answer(s, r, deadline, &st, &reps[i], &replens[i]) != 0) {
			broke(s, r); /* its later answers with it: */
			off_line(target, i + 1, n, r);
			free(reps[i]);
			reps[i] = NULL;
			continue;
		}
		if (st == ST_REDIRECT || st == HPCT_EFENCED || st == HPCT_EPEERDEAD) {
			free(reps[i]);
			reps[i] = NULL;
			continue;
		}
		rcs[i] = st;
	}
	hpct__store_release(s);
	pthread_mutex_unlock(&s->mu);
	free(target);
	for (int i = 0; i < n; i++) /* what is not final, key by key */
		if (rcs[i] == AGAIN) {
			double left_s = deadline - hpct__now() - hpct__store_cap(s, -1);
			rcs[i] = hpct__store_rpc(s, what, op, keys[i], -1, a, alen, NULL, 0,
			                         left_s > 0.001 ? left_s : 0.001, 0, &reps[i],
			                         &replens[i]);
		}
}

int hpct__store_probe(struct hpct_store *s, char *buf, size_t len)
{
	int n = 0;
	size_t used = 0;
	buf[0] = 0;
	double until = hpct__now() + PROBE_S;
	for (int r = 0; r < s->w->topo.size && hpct__now() < until; r++) {
		struct sockaddr_storage ss;
		socklen_t sl;
		char text[HPCT_ADDRSTRLEN];
		if (hpct__store_addr(s->w, r, &ss, &sl, text, sizeof(text)) != 0)
			continue;
		int fd = hpct__sock_connect(&ss, sl, hpct__now() + 0.05);
		if (fd >= 0) {
			close(fd);
			continue;
		}
		if (n++ < 8 && used < len)
			used += (size_t)snprintf(buf + used, len - used, "%s%d (%s)",
			                         n > 1 ? ", " : "", r, text);
		if (n == 1) { /* the first such: a cause this rank passes on */
			char why[HPCT_ADDRSTRLEN + 96], also[600];
			snprintf(why, sizeof(why),
			         "rank %d at %s took no connection after a wait passed: it died "
			         "or never started",
			         r, text);
			found(s, why, why, also, sizeof(also));
		}
	}
	return n;
}
