/* The store's groups at this rank's server (see server.h): the protocol's
 * world from the settings, a state machine (vr.c) for each group this rank
 * is or was a member of, their timers, the answers they hold back, and
 * what the protocol asks of the layers around it (struct vr_io).  Also
 * the placement the clients share (hpct__store_config0). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/base/bytes.h"
#include "bootstrap/base/log.h"
#include "bootstrap/base/param.h"
#include "bootstrap/store/server.h"
#include "bootstrap/store/store_internal.h"
#include "bootstrap/world.h"

int hpct__store_cfg(const struct hpct_world *w, struct hpct_store_cfg *out)
{
	const struct hpct_env *env = hpct__env_process();
	long r;
	int set;
	*out = (struct hpct_store_cfg){ 0 };
	int rc = hpct__env_int(env, "HPCT_STORE_REPLICAS", 1, VR_MAX, 3, &r, NULL);
	if (rc)
		return rc;
	out->R = r > w->topo.size ? w->topo.size : (int)r;
	if ((rc = hpct__env_seconds(env, "HPCT_STORE_SUSPECT", &out->suspect, &set)) != 0)
		return rc;
	if (!set)
		out->suspect = w->topo.timeout_s / 2;
	const char *l = hpct__env_str(env, "HPCT_STORE_LEASE");
	if (l && strcmp(l, "0") == 0)
		out->lease = 0;
	else if ((rc = hpct__env_seconds(env, "HPCT_STORE_LEASE", &out->lease, NULL)) != 0)
		return rc;
	if (out->lease > out->suspect / 2)
		out->lease = out->suspect / 2;
	const char *u = hpct__env_str(env, "HPCT_STORE_UNSAFE");
	for (const char *p = u; p && *p;) {
		size_t n = strcspn(p, ",");
		if (n == 9 && strncmp(p, "no-quorum", 9) == 0)
			out->unsafe |= VR_UNSAFE_QUORUM;
		else if (n == 8 && strncmp(p, "no-fence", 8) == 0)
			out->unsafe |= VR_UNSAFE_FENCE;
		else
			return hpct__fail(HPCT_EBADENV, HPCT_SUB_ENV,
			                  "HPCT_STORE_UNSAFE='%s': '%.*s' is none of no-quorum, "
			                  "no-fence",
			                  u, (int)n, p);
		p += n + (p[n] == ',');
	}
	return 0;
}

/* A copy of the world's node of each rank and index on its node, for a
 * vr_world that outlives the world (the server's) or is kept for it (the
 * clients'); NULL pointers without a node list. */
static int place_arrays(const struct hpct_world *w, int **node_of, int **local_of)
{
	*node_of = *local_of = NULL;
	if (!w->topo.node_of || !w->topo.local_of || w->topo.nnodes < 2)
		return 0;
	size_t n = (size_t)w->topo.size * sizeof(int);
	*node_of = malloc(n);
	*local_of = malloc(n);
	if (!*node_of || !*local_of) {
		free(*node_of);
		free(*local_of);
		return -1;
	}
	memcpy(*node_of, w->topo.node_of, n);
	memcpy(*local_of, w->topo.local_of, n);
	return 0;
}

/* The clients' placement, per world (job, epoch, size). */
static struct {
	pthread_mutex_t mu;
	uint64_t job, epoch;
	int size, R, made;
	int *node_of, *local_of;
	struct vr_world vw;
} place = { .mu = PTHREAD_MUTEX_INITIALIZER };

static void place_child(void)
{
	pthread_mutex_init(&place.mu, NULL);
}

__attribute__((constructor)) static void place_fork_safe(void)
{
	pthread_atfork(NULL, NULL, place_child);
}

int hpct__store_config0(const struct hpct_world *w, uint32_t g, int *out)
{
	struct hpct_store_cfg cfg;
	if (hpct__store_cfg(w, &cfg) != 0)
		cfg.R = w->topo.size < 3 ? w->topo.size : 3;
	pthread_mutex_lock(&place.mu);
	if (!place.made || place.job != w->topo.job || place.epoch != w->topo.epoch ||
	    place.size != w->topo.size || place.R != cfg.R) {
		if (place.made)
			vr_world_free(&place.vw);
		free(place.node_of);
		free(place.local_of);
		place.made = 0;
		if (place_arrays(w, &place.node_of, &place.local_of) == 0 &&
		    vr_world_init(&place.vw, w->topo.rank, w->topo.size, cfg.R, w->topo.nnodes,
		                  place.node_of, place.local_of) == 0) {
			place.made = 1;
			place.job = w->topo.job;
			place.epoch = w->topo.epoch;
			place.size = w->topo.size;
			place.R = cfg.R;
		}
	}
	int n = 0;
	if (place.made) {
		n = vr_place(&place.vw, g, NULL, 0, out);
	} else { /* no memory: the ring */
		for (; n < cfg.R; n++)
			out[n] = (int)((g + (uint32_t)n) % (uint32_t)w->topo.size);
	}
	pthread_mutex_unlock(&place.mu);
	return n;
}

/* ---- the protocol's callbacks ----------------------------------------- */

static void io_send(void *ctx, int to, const struct vr_msg *m)
{
	speer_send(ctx, to, m);
}

static void io_apply(void *ctx, uint32_t g, const void *entry, size_t len)
{
	sdata_apply(ctx, g, entry, len);
}

static void io_install(void *ctx, uint32_t g, struct vr_snap *snap)
{
	sdata_install(ctx, g, snap);
}

static void io_release(void *ctx, struct vr_snap *snap)
{
	(void)ctx;
	sdata_release(snap);
}

static void io_event(void *ctx, uint32_t g, enum vr_event ev)
{
	struct ssrv *s = ctx;
	if (ev == VR_EV_DROP)
		sdata_install(s, g, NULL);
	s->rescan = 1;
}

/* What this process's clients are told once its rank is fenced
 * (client.c reads it: hpct__store_fenced). */
static struct {
	pthread_mutex_t mu;
	char why[600];
} fence = { .mu = PTHREAD_MUTEX_INITIALIZER };

int hpct__store_fenced(char *buf, size_t len)
{
	pthread_mutex_lock(&fence.mu);
	int f = fence.why[0] != 0;
	if (f && buf)
		snprintf(buf, len, "%s", fence.why);
	pthread_mutex_unlock(&fence.mu);
	return f;
}

static void io_fenced(void *ctx, const char *why)
{
	struct ssrv *s = ctx;
	pthread_mutex_lock(&fence.mu);
	snprintf(fence.why, sizeof(fence.why),
	         "store: rank %d is fenced: %s; it changes no key and serves nothing from now "
	         "on, and its clients' requests fail: restart it (the launcher's or the recovery "
	         "framework's restart)",
	         s->rank, why);
	HPCT_WARN(HPCT_SUB_NET, "%s", fence.why);
	pthread_mutex_unlock(&fence.mu);
	s->rescan = 1;
}

static void io_note(void *ctx, uint32_t g, const char *line)
{
	struct ssrv *s = ctx;
	HPCT_INFO(HPCT_SUB_NET, "store: rank %d, group %u: %s", s->rank, g, line);
}

/* ---- the groups --------------------------------------------------------- */

static int *srv_node_of, *srv_local_of;

int sgrp_start(struct ssrv *s, struct hpct_world *w)
{
	struct hpct_store_cfg cfg;
	int rc = hpct__store_cfg(w, &cfg);
	if (rc)
		return rc;
	s->size = w->topo.size;
	s->job = w->topo.job;
	s->epoch = w->topo.epoch;
	s->w = w;
	if (place_arrays(w, &srv_node_of, &srv_local_of) != 0 ||
	    vr_world_init(&s->vw, w->topo.rank, w->topo.size, cfg.R, w->topo.nnodes, srv_node_of,
	                  srv_local_of) != 0 ||
	    !(s->grp = calloc((size_t)s->size, sizeof(*s->grp))) ||
	    !(s->active = malloc((size_t)s->size * sizeof(*s->active))) ||
	    !(s->peers = calloc((size_t)s->size, sizeof(*s->peers))))
		return HPCT_ENOMEM;
	s->vw.suspect = cfg.suspect;
	s->vw.lease = cfg.lease;
	double b = cfg.lease > 0 ? cfg.lease / 4 : cfg.suspect / 8;
	s->vw.beat = b > 0.25 ? 0.25 : b < 0.005 ? 0.005 : b;
	s->vw.change = 4 * s->vw.beat > 0.5 ? 4 * s->vw.beat : 0.5;
	s->vw.unsafe = cfg.unsafe;
	s->vw.io = (struct vr_io){ .ctx = s,
		                   .send = io_send,
		                   .apply = io_apply,
		                   .install = io_install,
		                   .release = io_release,
		                   .event = io_event,
		                   .fenced = io_fenced,
		                   .note = io_note };
	int m[VR_MAX];
	double now = hpct__now();
	for (int g = 0; g < s->size; g++) {
		int n = vr_place(&s->vw, (uint32_t)g, NULL, 0, m);
		for (int i = 0; i < n; i++)
			if (m[i] == s->rank && !sgrp_get(s, (uint32_t)g, 1))
				return HPCT_ENOMEM;
	}
	s->tick_at = now;
	if (cfg.unsafe)
		HPCT_WARN(HPCT_SUB_NET,
		          "store: rank %d: HPCT_STORE_UNSAFE=%s: its answers may be wrong (the "
		          "test suite's negative controls only)",
		          s->rank, hpct__env_str(hpct__env_process(), "HPCT_STORE_UNSAFE"));
	return speer_start(s);
}

struct vr *sgrp_get(struct ssrv *s, uint32_t g, int create)
{
	if (g >= (uint32_t)s->size || !s->grp)
		return NULL;
	if (s->grp[g] || !create)
		return s->grp[g];
	struct vr *v = malloc(sizeof(*v));
	if (!v)
		return NULL;
	vr_init(v, &s->vw, g, hpct__now());
	s->grp[g] = v;
	s->active[s->nactive++] = g;
	return v;
}

double sgrp_tick(struct ssrv *s, double now)
{
	if (now < s->tick_at)
		return s->tick_at;
	double next = now + 3600;
	for (int i = 0; i < s->nactive; i++) {
		double t = vr_tick(s->grp[s->active[i]], &s->vw, now);
		if (t < next)
			next = t;
	}
	sdata_expire(s, now);
	s->tick_at = next;
	s->rescan = 1; /* what a tick moved on */
	return next;
}

int sgrp_held(struct ssrv *s, const struct sconn *c, double now)
{
	if (!c->held)
		return 0;
	struct vr *v = sgrp_get(s, c->g, 0);
	return !v || !vr_ready(v, &s->vw, c->need, c->asked, c->write, now);
}

size_t sgrp_position(struct ssrv *s, uint32_t g, unsigned char *buf)
{
	struct vr *v = sgrp_get(s, g, 0);
	int m[VR_MAX], n;
	uint32_t cfg = 0, view = 0, heard = UINT32_MAX;
	uint8_t status = VR_OUT;
	int primary = -1;
	if (v && v->status != VR_OUT) {
		n = v->n;
		memcpy(m, v->members, sizeof(m));
		cfg = v->cfg;
		view = v->view;
		status = (uint8_t)v->status;
		primary = vr_primary_of(v);
		double now = hpct__now();
		if (primary == s->rank)
			heard = 0;
		else if (v->heard > 0 && now - v->heard < 4e6)
			heard = (uint32_t)((now - v->heard) * 1000);
	} else { /* not (any more) a member here: where it began */
		n = vr_place(&s->vw, g, NULL, 0, m);
	}
	hpct__put32(buf, g);
	hpct__put32(buf + 4, cfg);
	hpct__put32(buf + 8, view);
	buf[12] = status;
	buf[13] = (uint8_t)n;
	for (int i = 0; i < n; i++)
		hpct__put32(buf + 14 + 4 * i, (uint32_t)m[i]);
	hpct__put32(buf + 14 + 4 * n, (uint32_t)primary);
	hpct__put32(buf + 18 + 4 * n, heard);
	return 22 + 4 * (size_t)n;
}

int sgrp_leaving(struct ssrv *s, double now)
{
	int in = 0, first = !s->vw.leaving;
	for (int i = 0; i < s->nactive; i++) {
		struct vr *v = s->grp[s->active[i]];
		if (first)
			vr_leaving(v, &s->vw, now);
		in += v->status != VR_OUT && v->n > 1;
	}
	return in;
}

void sgrp_leave(struct ssrv *s)
{
	for (int i = 0; i < s->nactive; i++)
		vr_leave(s->grp[s->active[i]], &s->vw);
	s->vw.left = 1;
}

void sgrp_reset(struct ssrv *s)
{
	struct hpct_world *w = s->w;
	speer_close_all(s);
	for (int i = 0; i < s->nactive; i++) {
		struct vr *v = s->grp[s->active[i]];
		sdata_release(v->best_snap);
		free(v);
	}
	free(s->grp);
	free(s->active);
	free(s->peers);
	s->grp = NULL;
	s->active = NULL;
	s->peers = NULL;
	s->nactive = 0;
	vr_world_free(&s->vw);
	free(srv_node_of);
	free(srv_local_of);
	srv_node_of = srv_local_of = NULL;
	stab_clear(&s->t);
	sdata_clear(s);
	if (w && sgrp_start(s, w) != 0)
		HPCT_WARN(HPCT_SUB_NET, "store: rank %d cannot serve epoch %llu: %s", s->rank,
		          (unsigned long long)w->topo.epoch, hpct_last_error());
}

int sgrp_solo(struct ssrv *s)
{
	if (s->grp)
		return 0;
	s->size = 1;
	if (vr_world_init(&s->vw, 0, 1, 1, 0, NULL, NULL) != 0 ||
	    !(s->grp = calloc(1, sizeof(*s->grp))) || !(s->active = malloc(sizeof(*s->active))) ||
	    !(s->peers = calloc(1, sizeof(*s->peers))))
		return -1;
	s->vw.lease = 1;
	s->vw.suspect = 60;
	s->vw.beat = 0.25;
	s->vw.change = 1;
	s->vw.io = (struct vr_io){ .ctx = s, .send = io_send, .apply = io_apply,
		                   .install = io_install, .release = io_release,
		                   .event = io_event, .fenced = io_fenced, .note = io_note };
	return sgrp_get(s, 0, 1) ? 0 : -1;
}
