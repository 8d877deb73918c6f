/* The public exchange API (hpct.h, "Exchanging per-peer handles"): the
 * publishing side writes into the history the service reads, under the
 * service's lock; the fetching side asks peers over a socket of its own,
 * so that answers never meet the service's requests. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/base/bytes.h"
#include "bootstrap/base/fdtrack.h"
#include "bootstrap/base/util.h"
#include "bootstrap/xchg/xchg_internal.h"

#define RETRY_FIRST 0.02 /* s before a request is asked again; doubles */
#define RETRY_MAX   0.5

int hpct__xchg_group_rank(const struct hpct_xchg *x, uint32_t world_rank)
{
	int lo = 0, hi = x->size - 1; /* members are increasing */
	while (lo <= hi) {
		int mid = (lo + hi) / 2;
		if ((uint32_t)x->members[mid] == world_rank)
			return mid;
		if ((uint32_t)x->members[mid] < world_rank)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return -1;
}

int hpct__xchg_slot(const struct hpct_xchg *x, uint64_t version)
{
	int i = (int)(version % HPCT_XCHG_HISTORY);
	return version && x->hist_ver[i] == version ? i : -1;
}

void hpct__xchg_free(struct hpct_xchg *x)
{
	if (x->fd >= 0)
		close(x->fd);
	free(x->members);
	free(x->hist);
	free(x->addrs);
	free(x->addrlens);
	free(x->cache_ver);
	free(x->cache);
	free(x->served);
	free(x->told);
	free(x);
}

static int world_rank(const struct hpct_xchg *x)
{
	return x->members[x->rank];
}

/* An exchange of an epoch the world left. */
static int check_epoch(const struct hpct_xchg *x, const char *call)
{
	const struct hpct_world *w = x->svc->w;
	if (x->epoch == w->topo.epoch)
		return 0;
	return hpct__fail(HPCT_ESTATE, HPCT_SUB_COLL,
	                  "rank %d: %s: exchange '%s' belongs to epoch %llu; the world recovered "
	                  "to epoch %llu: create it again",
	                  w->topo.rank, call, x->name, (unsigned long long)x->epoch,
	                  (unsigned long long)w->topo.epoch);
}

/* The client socket and how many answers it can hold at once. */
static int open_client(struct hpct_xchg *x)
{
	const struct sockaddr_storage *me = &x->addrs[x->rank];
	x->fd = socket(me->ss_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (x->fd < 0)
		return hpct__fail(-errno, HPCT_SUB_COLL, "rank %d: exchange '%s': socket: %s",
		                  world_rank(x), x->name, strerror(errno));
	hpct__fd_track(x->fd);
	int big = 4 << 20, have = 0;
	socklen_t hl = sizeof(have);
	setsockopt(x->fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
	if (getsockopt(x->fd, SOL_SOCKET, SO_RCVBUF, &have, &hl) != 0)
		have = 212992;
	/* the kernel charges a datagram about its size rounded up, plus a
	 * descriptor; half the buffer for answers in flight */
	size_t per = x->item_size + XW_HDR + HPCT_AUTH_MAC + 1024;
	x->window = (int)((size_t)have / 2 / per);
	if (x->window < 1)
		x->window = 1;
	return 0;
}

HPCT_API int hpct_xchg_create(hpct_group *g, const char *name, size_t item_size,
                              hpct_xchg **xchg_out)
{
	if (!g || !name || !xchg_out)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_COLL, "hpct_xchg_create: NULL argument");
	struct hpct_world *w = g->world;
	if (!*name || strlen(name) >= HPCT_XCHG_NAMELEN)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_COLL,
		                  "rank %d: hpct_xchg_create: the name must have 1 to %d bytes "
		                  "('%.80s')",
		                  w->topo.rank, HPCT_XCHG_NAMELEN - 1, name);
	if (item_size < 1 || item_size > HPCT_XCHG_MAX_ITEM)
		return hpct__fail(
		        HPCT_EINVAL, HPCT_SUB_COLL,
		        "rank %d: hpct_xchg_create '%s': item_size %zu is not within 1..%d "
		        "(an item travels in one datagram)",
		        w->topo.rank, name, item_size, HPCT_XCHG_MAX_ITEM);
	if (g->failed)
		return hpct__fail(g->failed, HPCT_SUB_COLL, "%s", g->failure);
	struct hpct_xchg *x = calloc(1, sizeof(*x));
	if (!x)
		return HPCT_ENOMEM;
	x->fd = -1;
	snprintf(x->name, sizeof(x->name), "%s", name);
	x->group = g->id;
	x->xid = hpct__hash(name, strlen(name), g->id);
	x->epoch = w->topo.epoch;
	x->rank = g->rank;
	x->size = g->size;
	x->item_size = item_size;
	x->timeout_s = w->topo.timeout_s;
	size_t n = (size_t)g->size;
	x->members = malloc(n * sizeof(int));
	x->hist = malloc(HPCT_XCHG_HISTORY * n * item_size);
	x->addrs = calloc(n, sizeof(*x->addrs));
	x->addrlens = calloc(n, sizeof(*x->addrlens));
	x->cache_ver = calloc(HPCT_XCHG_HISTORY * n, sizeof(uint64_t));
	x->cache = malloc(HPCT_XCHG_HISTORY * n * item_size);
	x->served = calloc(n, sizeof(uint64_t));
	x->told = calloc(n, 1);
	int rc = HPCT_ENOMEM;
	if (!x->members || !x->hist || !x->addrs || !x->addrlens || !x->cache_ver || !x->cache ||
	    !x->served || !x->told)
		goto free_x;
	for (int j = 0; j < g->size; j++)
		x->members[j] = hpct__group_world_rank(g, j);
	const struct xchg_addr_ops *ops;
	if ((rc = hpct__xchg_service(w, &ops, &x->svc)) < 0)
		goto free_x;
	x->ops = ops;
	if ((rc = ops->peers(x, g)) < 0 || (rc = open_client(x)) < 0 ||
	    (rc = hpct__xchg_register(x->svc, x)) < 0)
		goto free_x;
	HPCT_INFO(HPCT_SUB_COLL,
	          "rank %d: exchange '%s' (%016llx) of group %016llx: items of %zu bytes, "
	          "services found the %s way",
	          w->topo.rank, name, (unsigned long long)x->xid, (unsigned long long)g->id,
	          item_size, ops->name);
	*xchg_out = x;
	return 0;
free_x:
	hpct__xchg_free(x);
	return rc;
}

HPCT_API int hpct_xchg_publish(hpct_xchg *x, uint64_t version, const void *items)
{
	if (!x || !items)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_COLL, "hpct_xchg_publish: NULL argument");
	int rc = check_epoch(x, "hpct_xchg_publish");
	if (rc < 0)
		return rc;
	struct xchg_service *s = x->svc;
	size_t all = (size_t)x->size * x->item_size;
	pthread_mutex_lock(&s->mu);
	if (version <= x->newest) {
		uint64_t newest = x->newest;
		pthread_mutex_unlock(&s->mu);
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_COLL,
		                  "rank %d: hpct_xchg_publish '%s': version %llu after version "
		                  "%llu; versions must grow",
		                  world_rank(x), x->name, (unsigned long long)version,
		                  (unsigned long long)newest);
	}
	if (version == 0) {
		pthread_mutex_unlock(&s->mu);
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_COLL,
		                  "rank %d: hpct_xchg_publish '%s': versions start at 1",
		                  world_rank(x), x->name);
	}
	/* the slot of version - HISTORY: no reader is in it while we hold the
	 * lock, and it answers nobody once its version changed */
	int slot = (int)(version % HPCT_XCHG_HISTORY);
	memcpy(x->hist + (size_t)slot * all, items, all);
	x->hist_ver[slot] = version;
	/* a skipped version's slot must not pass for an older one */
	for (int i = 0; i < HPCT_XCHG_HISTORY; i++)
		if (x->hist_ver[i] && x->hist_ver[i] + HPCT_XCHG_HISTORY <= version)
			x->hist_ver[i] = 0;
	x->newest = version;
	hpct__xchg_unpark(s, x);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

struct pend {
	int k, j;
	uint64_t nonce;
	double next, gap;
	int sends, done;
	signed char alive; /* at the deadline: 1, 0 (died or never started), -1 unknown */
};

/* The first cause of x's failure, kept (a later one is not: first cause
 * wins) and answered to every request from now on, parked ones at once. */
static void set_cause(struct hpct_xchg *x, uint32_t origin, uint32_t culprit, const char *text,
                      size_t len)
{
	struct xchg_service *s = x->svc;
	pthread_mutex_lock(&s->mu);
	if (!x->failed) {
		x->failed = 1;
		x->cause_origin = origin;
		x->cause_culprit = culprit;
		if (len > XW_CAUSE_MAX)
			len = XW_CAUSE_MAX;
		memcpy(x->cause, text, len);
		x->cause[len] = 0;
		hpct__xchg_unpark(s, x);
	}
	pthread_mutex_unlock(&s->mu);
}

static void addr_text(const struct hpct_xchg *x, int j, char *buf)
{
	hpct__addr_str((const struct sockaddr *)&x->addrs[j], buf, HPCT_ADDRSTRLEN);
}

static void send_req(struct hpct_xchg *x, uint64_t version, struct pend *p, double now)
{
	struct xchg_service *s = x->svc;
	const struct hpct_topo *t = &s->w->topo;
	unsigned char buf[XW_HDR + HPCT_AUTH_MAC];
	struct xw_hdr h = { .type = XW_REQ,
		            .job = t->job,
		            .epoch = x->epoch,
		            .xid = x->xid,
		            .version = version,
		            .from = (uint32_t)world_rank(x),
		            .to = (uint32_t)x->members[p->j],
		            .nonce = p->nonce,
		            .item_size = (uint32_t)x->item_size };
	int n = hpct__xw_encode(&h, NULL, &s->key, buf);
	ssize_t sent = n < 0 ? -1
	                     : sendto(x->fd, buf, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL,
	                              (const struct sockaddr *)&x->addrs[p->j], x->addrlens[p->j]);
	if (p->sends++ == 0)
		p->gap = RETRY_FIRST;
	p->next = now + p->gap;
	p->gap = p->gap * 2 < RETRY_MAX ? p->gap * 2 : RETRY_MAX;
	pthread_mutex_lock(&s->mu);
	x->st.requests_sent++;
	if (sent > 0)
		x->st.bytes_sent += (uint64_t)sent;
	pthread_mutex_unlock(&s->mu);
}

/* One answer that came: 1 when it settled p (an item), 0 when it is not
 * for this fetch, or the error it carries. */
static int take(struct hpct_xchg *x, uint64_t version, struct pend *ps, int np,
                const unsigned char *buf, size_t n, void *out)
{
	struct xchg_service *s = x->svc;
	const struct hpct_topo *t = &s->w->topo;
	struct xw_hdr h;
	const unsigned char *pl;
	int rc = hpct__xw_decode(buf, n, &s->key, &h, &pl);
	if (rc == 0 && (h.job != t->job || h.epoch != x->epoch || h.xid != x->xid ||
	                h.to != (uint32_t)world_rank(x) || h.version != version))
		rc = HPCT_EREFUSED;
	pthread_mutex_lock(&s->mu);
	x->st.bytes_recv += n;
	if (rc == HPCT_EREFUSED)
		x->st.dropped++;
	pthread_mutex_unlock(&s->mu);
	if (rc < 0)
		return 0;
	struct pend *p = NULL;
	for (int i = 0; i < np && !p; i++)
		if (!ps[i].done && ps[i].nonce == h.nonce &&
		    (uint32_t)x->members[ps[i].j] == h.from)
			p = &ps[i];
	if (!p)
		return 0; /* a duplicate, or an answer to an earlier call */
	char text[HPCT_ADDRSTRLEN];
	addr_text(x, p->j, text);
	if (h.type == XW_ITEM && h.len == x->item_size) {
		int c = p->j * HPCT_XCHG_HISTORY + (int)(version % HPCT_XCHG_HISTORY);
		memcpy(x->cache + (size_t)c * x->item_size, pl, x->item_size);
		x->cache_ver[c] = version;
		memcpy((unsigned char *)out + (size_t)p->k * x->item_size, pl, x->item_size);
		p->done = 1;
		return 1;
	}
	if (h.type == XW_ABORT && h.len >= 8) {
		/* it failed before us: its cause is ours, and names the culprit */
		const char *why = (const char *)pl + 8;
		size_t wl = h.len - 8;
		set_cause(x, hpct__get32(pl), hpct__get32(pl + 4), why, wl);
		return hpct__fail(
		        HPCT_EABORTED, HPCT_SUB_COLL,
		        "rank %d: exchange '%s' (group %016llx, epoch %llu): rank %u at %s "
		        "gave up on it: %.*s",
		        world_rank(x), x->name, (unsigned long long)x->group,
		        (unsigned long long)x->epoch, h.from, text, (int)wl, why);
	}
	if (h.type == XW_STALE && h.len == 16)
		return hpct__fail(HPCT_ESTATE, HPCT_SUB_COLL,
		                  "rank %d: exchange '%s' (epoch %llu): rank %u at %s no longer "
		                  "holds version %llu (it holds %llu..%llu, %d at most)",
		                  world_rank(x), x->name, (unsigned long long)x->epoch, h.from,
		                  text, (unsigned long long)version,
		                  (unsigned long long)hpct__get64(pl),
		                  (unsigned long long)hpct__get64(pl + 8), HPCT_XCHG_HISTORY);
	if (h.type == XW_MISMATCH)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_COLL,
		                  "rank %d: exchange '%s': rank %u at %s made it with items of %u "
		                  "bytes, this rank with %zu",
		                  world_rank(x), x->name, h.from, text, h.item_size, x->item_size);
	return 0;
}

/* At a deadline: whether each peer not answered yet is alive (its
 * process still holds its listener), so that the one blamed is one that
 * died or never came, not one that is merely late; 1 when some is silent
 * (or the path cannot say), 0 when all are alive. */
static int classify(struct hpct_xchg *x, struct pend *ps, int np)
{
	int n = 0, silent = 0, *js = malloc((size_t)np * sizeof(int));
	signed char *out = malloc((size_t)np);
	for (int i = 0; js && out && i < np; i++)
		if (!ps[i].done)
			js[n++] = ps[i].j;
	if (js && out && n > 0)
		x->ops->alive(x, js, n, 0.3, out);
	for (int i = 0, k = 0; js && out && i < np; i++) {
		if (ps[i].done)
			continue;
		ps[i].alive = out[k++];
		silent += ps[i].alive != 1;
	}
	free(js);
	free(out);
	return silent > 0 || n == 0;
}

/* This rank failed the exchange at its deadline, or a peer's ABORT told it
 * why (the cause is set): the peers of this fetch found alive that never
 * answered came late, and will ask us for our item; they get the cause
 * instead.  Before the caller goes (its process may end, and with it the
 * service), wait until each has asked, up to a timeout: skipping the
 * culprit and the rank the cause came from. */
static void linger(struct hpct_xchg *x, uint64_t version, const struct pend *ps, int np)
{
	struct xchg_service *s = x->svc;
	double deadline = hpct__now() + x->timeout_s;
	pthread_mutex_lock(&s->mu);
	int culprit = hpct__xchg_group_rank(x, x->cause_culprit);
	int origin = hpct__xchg_group_rank(x, x->cause_origin);
	for (;;) {
		int waiting = 0;
		for (int i = 0; i < np; i++) {
			int j = ps[i].j;
			if (j != culprit && j != origin && !ps[i].done && ps[i].alive == 1 &&
			    !x->told[j] && x->served[j] < version)
				waiting++;
		}
		double left = deadline - hpct__now();
		if (!waiting || left <= 0)
			break;
		struct timespec ts = hpct__timespec_in(CLOCK_REALTIME, left < 0.5 ? left : 0.5);
		pthread_cond_timedwait(&s->told_cv, &s->mu, &ts);
	}
	pthread_mutex_unlock(&s->mu);
}

/* Asks for the np items of ps and waits for them.  At the deadline, peers
 * not answered that are all alive (late, or waiting on someone else) get
 * one more timeout; then the one blamed is one found dead if any. */
static int ask(struct hpct_xchg *x, uint64_t version, struct pend *ps, int np, void *out)
{
	double start = hpct__now(), deadline = start + x->timeout_s;
	int left = np, inflight = 0, rc = 0, extended = 0;
	unsigned char *buf = malloc(XW_MAX);
	if (!buf)
		return HPCT_ENOMEM;
	for (int i = 0; i < np; i++)
		ps[i].alive = -1;
	while (left > 0 && rc == 0) {
		double now = hpct__now(), wake = deadline;
		for (int i = 0; i < np; i++) {
			struct pend *p = &ps[i];
			if (p->done || (p->sends == 0 && inflight >= x->window))
				continue;
			if (p->next <= now) {
				inflight += p->sends == 0;
				send_req(x, version, p, now);
			}
			if (p->next < wake)
				wake = p->next;
		}
		if (now >= deadline) {
			if (classify(x, ps, np) || extended)
				break;
			extended = 1;
			deadline = hpct__now() + x->timeout_s;
			continue;
		}
		struct pollfd pf = { .fd = x->fd, .events = POLLIN };
		if (poll(&pf, 1, (int)((wake - now) * 1000) + 1) < 0 && errno != EINTR) {
			rc = -errno;
			break;
		}
		for (;;) {
			ssize_t n = recv(x->fd, buf, XW_MAX, MSG_DONTWAIT);
			if (n < 0)
				break;
			int r = take(x, version, ps, np, buf, (size_t)n, out);
			if (r < 0) {
				rc = r;
				break;
			}
			left -= r;
			inflight -= r;
		}
	}
	free(buf);
	if (rc == HPCT_EABORTED) {
		/* told: the peers found alive that have not answered may come
		 * after the teller has gone, and we are the last to tell them */
		classify(x, ps, np);
		linger(x, version, ps, np);
	}
	if (rc < 0)
		return rc; /* logged where it was seen, naming the peer */
	if (left == 0)
		return 0;
	int b = -1; /* whom to blame: one found dead, else the first not answered */
	for (int i = 0; i < np; i++)
		if (!ps[i].done && (b < 0 || (ps[b].alive != 0 && ps[i].alive == 0)))
			b = i;
	char text[HPCT_ADDRSTRLEN];
	/* every other peer found dead too: which of them failed first no rank
	 * can tell (one that failed because of another has left as well), so
	 * the message names them all */
	char others[512] = "";
	size_t used = 0;
	for (int i = 0; i < np && used < sizeof(others) - 64; i++)
		if (i != b && !ps[i].done && ps[i].alive == 0) {
			addr_text(x, ps[i].j, text);
			int k = snprintf(others + used, sizeof(others) - used, "%s%d (%s)",
			                 used ? ", " : "; other peers that take no connection: ",
			                 x->members[ps[i].j], text);
			used += k > 0 ? (size_t)k : 0;
		}
	addr_text(x, ps[b].j, text);
	rc = hpct__fail(
	        HPCT_ETIMEDOUT, HPCT_SUB_COLL,
	        "rank %d: exchange '%s' (group %016llx, epoch %llu): no answer from rank %d "
	        "at %s for version %llu after %.1f s (%d requests; %d of %d peers asked "
	        "not answered)%s%s",
	        world_rank(x), x->name, (unsigned long long)x->group, (unsigned long long)x->epoch,
	        x->members[ps[b].j], text, (unsigned long long)version, hpct__now() - start,
	        ps[b].sends, left, np,
	        ps[b].alive == 0   ? "; it takes no connection: it died or never started"
	        : ps[b].alive == 1 ? "; it is alive (it takes connections) but never "
	                             "answered"
	                           : "",
	        others);
	const char *why = hpct_last_error();
	set_cause(x, (uint32_t)world_rank(x), (uint32_t)x->members[ps[b].j], why, strlen(why));
	linger(x, version, ps, np);
	return rc;
}

HPCT_API int hpct_xchg_fetch(hpct_xchg *x, uint64_t version, const int *peers, int npeers,
                             void *out)
{
	if (!x || npeers < 0 || (npeers > 0 && (!peers || !out)))
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_COLL, "hpct_xchg_fetch: NULL argument");
	int rc = check_epoch(x, "hpct_xchg_fetch");
	if (rc < 0)
		return rc;
	if (version == 0)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_COLL,
		                  "rank %d: hpct_xchg_fetch '%s': versions start at 1",
		                  world_rank(x), x->name);
	struct xchg_service *s = x->svc;
	struct pend *ps = calloc((size_t)npeers + 1, sizeof(*ps));
	if (!ps)
		return HPCT_ENOMEM;
	int np = 0, hits = 0;
	uint64_t nonce;
	hpct__random(&nonce, sizeof(nonce));
	for (int k = 0; k < npeers && rc == 0; k++) {
		int j = peers[k];
		unsigned char *dst = (unsigned char *)out + (size_t)k * x->item_size;
		if (j < 0 || j >= x->size) {
			rc = hpct__fail(
			        HPCT_EINVAL, HPCT_SUB_COLL,
			        "rank %d: hpct_xchg_fetch '%s': peers[%d] = %d is not a rank "
			        "of the group (size %d)",
			        world_rank(x), x->name, k, j, x->size);
			break;
		}
		int c = j * HPCT_XCHG_HISTORY + (int)(version % HPCT_XCHG_HISTORY);
		if (j == x->rank) {
			pthread_mutex_lock(&s->mu);
			int slot = hpct__xchg_slot(x, version);
			if (slot >= 0)
				memcpy(dst,
				       x->hist + ((size_t)slot * (size_t)x->size + (size_t)j) *
				                         x->item_size,
				       x->item_size);
			pthread_mutex_unlock(&s->mu);
			if (slot < 0)
				rc = hpct__fail(
				        HPCT_ESTATE, HPCT_SUB_COLL,
				        "rank %d: hpct_xchg_fetch '%s': this rank asked itself "
				        "for version %llu, which it does not hold",
				        world_rank(x), x->name, (unsigned long long)version);
			hits++;
		} else if (x->cache_ver[c] == version) {
			memcpy(dst, x->cache + (size_t)c * x->item_size, x->item_size);
			hits++;
		} else {
			ps[np++] = (struct pend){ .k = k, .j = j, .nonce = nonce + (uint64_t)k };
		}
	}
	pthread_mutex_lock(&s->mu);
	x->st.hits += (uint64_t)hits;
	x->st.misses += (uint64_t)np;
	pthread_mutex_unlock(&s->mu);
	if (rc == 0 && np > 0)
		rc = ask(x, version, ps, np, out);
	free(ps);
	return rc;
}

HPCT_API int hpct_xchg_get_stats(const hpct_xchg *x, struct hpct_xchg_stats *st)
{
	if (!x || !st)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_COLL, "hpct_xchg_get_stats: NULL argument");
	pthread_mutex_lock(&x->svc->mu);
	*st = x->st;
	pthread_mutex_unlock(&x->svc->mu);
	return 0;
}

HPCT_API void hpct_xchg_destroy(hpct_xchg *x)
{
	if (!x)
		return;
	hpct__xchg_unregister(x->svc, x);
	hpct__xchg_free(x);
}
