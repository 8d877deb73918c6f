/* hpct_fanout (include/hpct/fanout.h): the arguments, the first allgather
 * (who holds what, where each member listens), the plan, and the
 * receiving side, which pulls chunk after chunk from its source and moves
 * to a first source when that one dies.  The server is serve.c's thread. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/base/budget.h"
#include "bootstrap/base/bytes.h"
#include "bootstrap/base/log.h"
#include "bootstrap/base/param.h"
#include "bootstrap/base/util.h"
#include "bootstrap/fanout/fanout_internal.h"

/* One member's entry in the first allgather, integers big-endian:
 *  0 u64 fan-out id  8 u64 want  16 u64 held  24 u64 len  32 u64 chunk
 * 40 u32 plan  44 u32 no_pipeline  48 u16 family  50 u16 port
 * 52 16 bytes address  68 u32 scope */
#define ITEM 72

static void put_item(unsigned char *p, const struct fo *f, uint64_t held, uint32_t plan,
                     const struct sockaddr_storage *ss)
{
	memset(p, 0, ITEM);
	hpct__put64(p, f->id);
	hpct__put64(p + 8, f->want);
	hpct__put64(p + 16, held);
	hpct__put64(p + 24, f->len);
	hpct__put64(p + 32, f->chunk);
	hpct__put32(p + 40, plan);
	hpct__put32(p + 44, (uint32_t)f->no_pipeline);
	hpct__put16(p + 48, (uint16_t)ss->ss_family);
	if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
		hpct__put16(p + 50, ntohs(a->sin6_port));
		memcpy(p + 52, &a->sin6_addr, 16);
		hpct__put32(p + 68, a->sin6_scope_id);
	} else {
		const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
		hpct__put16(p + 50, ntohs(a->sin_port));
		memcpy(p + 52, &a->sin_addr, 4);
	}
}

static void get_addr(const unsigned char *p, struct fo_member *m)
{
	memset(&m->addr, 0, sizeof(m->addr));
	if (hpct__get16(p + 48) == AF_INET6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&m->addr;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons(hpct__get16(p + 50));
		memcpy(&a->sin6_addr, p + 52, 16);
		a->sin6_scope_id = hpct__get32(p + 68);
		m->addrlen = sizeof(*a);
	} else {
		struct sockaddr_in *a = (struct sockaddr_in *)&m->addr;
		a->sin_family = AF_INET;
		a->sin_port = htons(hpct__get16(p + 50));
		memcpy(&a->sin_addr, p + 52, 4);
		m->addrlen = sizeof(*a);
	}
	hpct__addr_str((struct sockaddr *)&m->addr, m->text, sizeof(m->text));
}

static int wrank(const struct fo *f)
{
	return f->m[f->me].world_rank;
}

/* Every member passed what member 0 passed; the first that did not is
 * named. */
static int agree(struct fo *f, const unsigned char *all)
{
	static const struct {
		int off;
		const char *what;
	} fields[] = { { 0, "name" },   { 8, "want" },  { 24, "len" },
		       { 32, "chunk" }, { 40, "plan" }, { 44, "no_pipeline" } };
	for (int j = 1; j < f->n; j++)
		for (size_t k = 0; k < sizeof(fields) / sizeof(fields[0]); k++) {
			const unsigned char *a = all + fields[k].off;
			const unsigned char *b = all + (size_t)j * ITEM + fields[k].off;
			int wide = fields[k].off < 40;
			uint64_t va = wide ? hpct__get64(a) : hpct__get32(a);
			uint64_t vb = wide ? hpct__get64(b) : hpct__get32(b);
			if (va != vb)
				return hpct__fail(
				        HPCT_EINVAL, HPCT_SUB_COLL,
				        "rank %d: fan-out '%s' of group %016llx: member %d (world "
				        "rank %d) passed %s %llu, member 0 (world rank %d) %llu",
				        wrank(f), f->name, (unsigned long long)f->group, j,
				        f->m[j].world_rank, fields[k].what, (unsigned long long)vb,
				        f->m[0].world_rank, (unsigned long long)va);
		}
	return 0;
}

static int no_holder(struct fo *f)
{
	char held[512];
	size_t o = 0;
	for (int j = 0; j < f->n && o + 48 < sizeof(held); j++)
		o += (size_t)snprintf(held + o, sizeof(held) - o, "%srank %d: %llu", j ? ", " : "",
		                      f->m[j].world_rank, (unsigned long long)f->m[j].held);
	return hpct__fail(HPCT_ESTATE, HPCT_SUB_COLL,
	                  "rank %d: fan-out '%s': no member of group %016llx holds version %llu "
	                  "(held: %s%s)",
	                  wrank(f), f->name, (unsigned long long)f->group,
	                  (unsigned long long)f->want, held, o + 48 >= sizeof(held) ? ", ..." : "");
}

static void fo_free(struct fo *f)
{
	if (f->lfd >= 0)
		f->xo->close(f->lfd);
	if (f->wake[0] >= 0) {
		close(f->wake[0]);
		close(f->wake[1]);
	}
	pthread_mutex_destroy(&f->mu);
	free(f->m);
	free(f->src);
	free(f->wave_of);
	free(f->status);
	free(f->dead);
	free(f->talked);
}

/* ---- the receiving side ---- */

struct pull {
	int src, fd, attempt;
	uint32_t known; /* chunks the source said it holds */
	int replanned;
	int first_dead;  /* a first source found dead, for the message */
	int budget_late; /* the budget's wait failed: no source is to blame */
};

static int open_source(struct fo *f, struct pull *p, double deadline)
{
	const struct fo_member *s = &f->m[p->src];
	p->fd = f->xo->connect(&s->addr, s->addrlen, deadline);
	if (p->fd < 0)
		return p->fd;
	p->known = 0;
	int rc = hpct__fo_send_msg(f, p->fd, FO_HELLO, (uint32_t)f->me, 0, f->id, deadline);
	if (rc < 0) {
		f->xo->close(p->fd);
		p->fd = -1;
	}
	return rc;
}

/* Chunk i from the source, into buf; the bytes taken from the budget
 * first, once the source holds the chunk. */
static int pull_chunk(struct fo *f, struct pull *p, uint32_t i)
{
	double dl = hpct__now() + f->timeout_s;
	unsigned char h[FO_HDR];
	struct fo_msg m;
	uint32_t need = f->no_pipeline ? f->nchunks - 1 : i;
	while (p->known <= need) {
		int rc = hpct__fo_send_msg(f, p->fd, FO_WAIT, need, 0, 0, dl);
		if (rc == 0)
			rc = f->xo->recv(p->fd, h, FO_HDR, dl);
		if (rc < 0)
			return rc;
		if (hpct__fo_decode(h, &m) < 0 || m.type != FO_HAVE || m.a > f->nchunks)
			return HPCT_EPROTO;
		p->known = m.a;
	}
	size_t n = fo_chunk_len(f, i);
	uint64_t granted;
	int rc = hpct__inflight_take(n, 1, dl, &granted);
	p->budget_late = rc < 0;
	if (rc == HPCT_ETIMEDOUT)
		return hpct__fail(
		        rc, HPCT_SUB_COLL,
		        "rank %d: fan-out '%s': chunk %u (%zu bytes) waited %g s for this "
		        "process's in-flight budget (HPCT_INFLIGHT_BYTES, "
		        "HPCT_INFLIGHT_TRANSFERS)",
		        wrank(f), f->name, i, n, f->timeout_s);
	if (rc < 0)
		return rc;
	rc = hpct__fo_send_msg(f, p->fd, FO_GET, i, 0, 0, dl);
	if (rc == 0)
		rc = f->xo->recv(p->fd, h, FO_HDR, dl);
	if (rc == 0 && (hpct__fo_decode(h, &m) < 0 || m.type != FO_DATA || m.a != i || m.b != n))
		rc = HPCT_EPROTO;
	if (rc == 0)
		rc = f->xo->recv(p->fd, f->buf + (size_t)i * f->chunk, n, dl);
	hpct__inflight_give(granted, 1);
	if (rc == 0) {
		pthread_mutex_lock(&f->mu);
		f->have = i + 1;
		f->bytes_recv += n;
		f->talked[p->src] = 1;
		pthread_mutex_unlock(&f->mu);
		hpct__fo_wake(f);
	}
	return rc;
}

/* The source failed at chunk i: the next one (a first source, by this
 * member's identity), or the error naming who died. */
static int replan(struct fo *f, struct pull *p, int err, uint32_t i, uint64_t seed)
{
	const struct fo_member *s = &f->m[p->src];
	HPCT_INFO(HPCT_SUB_COLL,
	          "rank %d: fan-out '%s': source rank %d at %s failed at chunk %u of %u (%s): "
	          "re-planning",
	          wrank(f), f->name, s->world_rank, s->text, i, f->nchunks, hpct_strerror(err));
	if (err == HPCT_ETIMEDOUT)
		return hpct__fail(err, HPCT_SUB_COLL,
		                  "rank %d: fan-out '%s' of group %016llx, epoch %llu: no chunk %u "
		                  "from rank %d at %s after %g s",
		                  wrank(f), f->name, (unsigned long long)f->group,
		                  (unsigned long long)f->epoch, i, s->world_rank, s->text,
		                  f->timeout_s);
	pthread_mutex_lock(&f->mu);
	f->dead[p->src] = 1;
	pthread_mutex_unlock(&f->mu);
	if (hpct__fo_first_source(f, p->src) && p->first_dead < 0)
		p->first_dead = p->src;
	uint64_t *held = malloc((size_t)f->n * sizeof(uint64_t));
	if (!held)
		return HPCT_ENOMEM;
	for (int j = 0; j < f->n; j++)
		held[j] = f->m[j].held;
	int next = hpct__fo_replan(f->n, held, f->want, seed, f->dead, f->me, p->attempt++);
	free(held);
	if (next < 0) {
		int d = p->first_dead >= 0 ? p->first_dead : p->src;
		return hpct__fail(
		        HPCT_EPEERDEAD, HPCT_SUB_COLL,
		        "rank %d: fan-out '%s' of group %016llx, epoch %llu: version %llu "
		        "lost at chunk %u of %u: rank %d at %s died (%s), and so did every "
		        "other member holding it",
		        wrank(f), f->name, (unsigned long long)f->group,
		        (unsigned long long)f->epoch, (unsigned long long)f->want, i, f->nchunks,
		        f->m[d].world_rank, f->m[d].text, hpct_strerror(err));
	}
	p->src = next;
	p->replanned++;
	return 0;
}

static int receive(struct fo *f, uint64_t seed, int *replanned_out)
{
	struct pull p = { .src = f->src[f->me], .fd = -1, .first_dead = -1 };
	uint32_t i = 0;
	int rc = 0;
	for (;;) {
		if (p.fd < 0)
			rc = open_source(f, &p, hpct__now() + f->timeout_s);
		while (rc == 0 && i < f->nchunks && (rc = pull_chunk(f, &p, i)) == 0)
			i++;
		if (rc == 0)
			break;
		if (p.fd >= 0)
			f->xo->close(p.fd);
		p.fd = -1;
		if (rc == HPCT_EPROTO || rc == HPCT_ENOMEM || p.budget_late ||
		    (rc = replan(f, &p, rc, i, seed)) < 0)
			break;
	}
	*replanned_out = p.replanned;
	if (rc == HPCT_EPROTO)
		rc = hpct__fail(rc, HPCT_SUB_COLL,
		                "rank %d: fan-out '%s': malformed answer from rank %d at %s",
		                wrank(f), f->name, f->m[p.src].world_rank, f->m[p.src].text);
	if (rc < 0) {
		if (p.fd >= 0)
			f->xo->close(p.fd);
		return rc;
	}
	hpct__fo_send_msg(f, p.fd, FO_BYE, 0, 0, 0, hpct__now() + f->timeout_s);
	f->xo->close(p.fd);
	/* the first sources wait for every receiver; a forwarder the plan gave
	 * this one waits for it too, when it came to another in the end (it
	 * could not reach it, or gave up on it; told even when counted dead
	 * here: a dead one refuses the connection at once): each hears it is
	 * done */
	int planned = f->src[f->me];
	for (int j = 0; j < f->n; j++)
		if (j != p.src && (j == planned || (hpct__fo_first_source(f, j) && !f->dead[j])))
			hpct__fo_tell(f, j, FO_DONE, (uint32_t)f->me);
	return 0;
}

/* ---- the call ---- */

static int setup(struct fo *f, hpct_group *g, uint64_t held, uint32_t plan, uint64_t *seed,
                 int *waves_out, int *last_out)
{
	struct hpct_world *w = g->world;
	const struct fo_addr_ops *ao = hpct__fo_addr[w->ops->path];
	struct sockaddr_storage at, bound;
	socklen_t al, bl;
	int rc = ao->bind_addr(w, &at, &al);
	if (rc < 0)
		return rc;
	if ((rc = f->xo->listen(&at, al, &f->lfd, &bound, &bl)) < 0) {
		char t[HPCT_ADDRSTRLEN];
		hpct__addr_str((struct sockaddr *)&at, t, sizeof(t));
		return hpct__fail(rc, HPCT_SUB_COLL,
		                  "rank %d: fan-out '%s': cannot listen at %s: %s", w->topo.rank,
		                  f->name, t, hpct_strerror(rc));
	}
	unsigned char mine[ITEM], *all = malloc((size_t)f->n * ITEM);
	if (!all)
		return HPCT_ENOMEM;
	put_item(mine, f, held, plan, &bound);
	rc = hpct_allgather(g, mine, ITEM, all); /* named by the allgather */
	for (int j = 0; rc == 0 && j < f->n; j++) {
		f->m[j].held = hpct__get64(all + (size_t)j * ITEM + 16);
		f->m[j].world_rank = hpct_group_world_rank(g, j);
		get_addr(all + (size_t)j * ITEM, &f->m[j]);
	}
	if (rc == 0)
		rc = agree(f, all);
	free(all);
	if (rc < 0)
		return rc;
	uint64_t *hv = malloc((size_t)f->n * sizeof(uint64_t));
	if (!hv)
		return HPCT_ENOMEM;
	for (int j = 0; j < f->n; j++)
		hv[j] = f->m[j].held;
	*seed = f->id;
	rc = hpct__fo_schedule(&hpct__fo_planners[plan], f->n, hv, f->want, *seed, f->src,
	                       f->wave_of, waves_out, last_out);
	free(hv);
	if (rc == HPCT_ESTATE)
		return no_holder(f);
	return rc;
}

HPCT_API int hpct_fanout(hpct_group *g, const char *name, uint64_t want, uint64_t held, void *buf,
                         size_t len, const struct hpct_fanout_opts *opts,
                         struct hpct_fanout_stats *stats_out)
{
	double t0 = hpct__now();
	if (!g || !name)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_COLL, "hpct_fanout: NULL argument");
	int wr = g->world->topo.rank;
	if (!*name || strlen(name) >= sizeof(((struct fo *)0)->name))
		return hpct__fail(
		        HPCT_EINVAL, HPCT_SUB_COLL,
		        "rank %d: hpct_fanout: the name must have 1 to 63 bytes ('%.80s')", wr,
		        name);
	if ((!buf && len > 0) || want == 0)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_COLL, "rank %d: hpct_fanout '%s': %s", wr,
		                  name,
		                  want == 0 ? "version 0 means none: want must be > 0"
		                            : "NULL buf with len > 0");
	struct hpct_fanout_opts o = { 0, HPCT_FANOUT_WAVES, 0 };
	if (opts)
		o = *opts;
	if (o.chunk == 0) {
		long c;
		int rc = hpct__env_int(hpct__env_process(), "HPCT_FANOUT_CHUNK", 1, 1L << 30,
		                       4 << 20, &c, NULL);
		if (rc < 0)
			return rc;
		o.chunk = (size_t)c;
	}
	if ((unsigned)o.plan > HPCT_FANOUT_TREE || o.chunk > (1u << 30) ||
	    len / o.chunk >= UINT32_MAX - 1)
		return hpct__fail(
		        HPCT_EINVAL, HPCT_SUB_COLL,
		        "rank %d: hpct_fanout '%s': plan %d or chunk %zu out of range (plans "
		        "0..2, chunks of 1 byte to 1 GiB, fewer than 2^32 of them)",
		        wr, name, (int)o.plan, o.chunk);
	if (g->failed)
		return hpct__fail(g->failed, HPCT_SUB_COLL, "%s", g->failure);
	struct fo f = { .xo = &hpct__fo_xfer_tcp, .lfd = -1, .wake = { -1, -1 } };
	pthread_mutex_init(&f.mu, NULL);
	snprintf(f.name, sizeof(f.name), "%s", name);
	f.group = g->id;
	f.id = hpct__hash_u64(hpct__hash(name, strlen(name), g->id), want);
	f.want = want;
	f.buf = buf;
	f.len = len;
	f.chunk = o.chunk;
	f.nchunks = (uint32_t)((len + o.chunk - 1) / o.chunk);
	f.no_pipeline = o.no_pipeline != 0;
	f.me = g->rank;
	f.n = g->size;
	f.epoch = g->world->topo.epoch;
	f.timeout_s = g->world->topo.timeout_s;
	size_t n = (size_t)f.n;
	f.m = calloc(n, sizeof(*f.m));
	f.src = malloc(n * sizeof(int));
	f.wave_of = malloc(n * sizeof(int));
	f.status = calloc(n, 1);
	f.dead = calloc(n, 1);
	f.talked = calloc(n, 1);
	int rc = HPCT_ENOMEM, replanned = 0, waves = 0, last = 0;
	uint64_t seed = 0;
	if (!f.m || !f.src || !f.wave_of || !f.status || !f.dead || !f.talked)
		goto free_f;
	if (pipe2(f.wake, O_CLOEXEC | O_NONBLOCK) != 0) {
		rc = -errno;
		f.wake[0] = f.wake[1] = -1;
		goto free_f;
	}
	if ((rc = setup(&f, g, held, (uint32_t)o.plan, &seed, &waves, &last)) < 0)
		goto free_f;
	int source = f.m[f.me].held == want;
	f.have = source ? f.nchunks : 0;
	pthread_t th;
	if ((rc = -pthread_create(&th, NULL, hpct__fo_serve, &f)) < 0) {
		hpct__fail(rc, HPCT_SUB_COLL, "rank %d: fan-out '%s': no server thread", wr, name);
		goto free_f;
	}
	if (!source && (rc = receive(&f, seed, &replanned)) < 0) {
		pthread_mutex_lock(&f.mu);
		f.stop = 1;
		pthread_mutex_unlock(&f.mu);
		hpct__fo_wake(&f);
	}
	pthread_join(th, NULL);
	if (rc == 0 && (rc = f.serve_rc) < 0)
		hpct__set_last_error("%s", f.serve_msg); /* logged by the server thread */
	if (rc == 0 && stats_out) {
		int sources = 0, peers = 0;
		for (int j = 0; j < f.n; j++) {
			sources += f.m[j].held == want;
			peers += f.talked[j];
		}
		*stats_out = (struct hpct_fanout_stats){ .waves = waves,
			                                 .sources_first = sources,
			                                 .sources_last = last,
			                                 .replanned = replanned,
			                                 .bytes_sent = f.bytes_sent,
			                                 .bytes_recv = f.bytes_recv,
			                                 .peers = peers,
			                                 .seconds = hpct__now() - t0 };
	}
free_f:
	fo_free(&f);
	return rc;
}
