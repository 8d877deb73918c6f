/* The served store's replication protocol (see vr.h): one group's state
 * at one member, as a state machine with no I/O: normal operation,
 * leases, reconfiguration and view change (vr_recv.c: the messages and
 * timers that drive them). */
#include "bootstrap/store/vr_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* rank r said it exits (leaving, or left) */
int vr__exits(const struct vr_world *w, int r)
{
	return w->gone[r] == GONE_LEAVING || w->gone[r] == GONE_LEFT;
}

/* rank r is dead or suspected: not one that is leaving, which still serves */
int vr__is_dead(const struct vr_world *w, int r)
{
	return w->gone[r] > GONE_LEAVING;
}

int vr__idx_of(const struct vr *v, int rank)
{
	for (int i = 0; i < v->n; i++)
		if (v->members[i] == rank)
			return i;
	return -1;
}

int vr__in_list(const int *l, int n, int rank)
{
	for (int i = 0; i < n; i++)
		if (l[i] == rank)
			return 1;
	return 0;
}

static int count(unsigned mask)
{
	return __builtin_popcount(mask);
}

/* Member i of a configuration of two that left or was fenced: it counts
 * for the other in every quorum (vr.h, "Leaving"). */
static int ghost(const struct vr *v, const struct vr_world *w, int i)
{
	int r = v->members[i];
	return v->n == 2 && r != w->self && (w->gone[r] == GONE_LEFT || w->gone[r] == GONE_FENCED);
}

static unsigned ghosts(const struct vr *v, const struct vr_world *w)
{
	unsigned m = 0;
	for (int i = 0; i < v->n; i++)
		if (ghost(v, w, i))
			m |= 1u << i;
	return m;
}

int vr_primary_of(const struct vr *v)
{
	return v->n > 0 && v->status != VR_OUT ? v->members[v->view % (uint32_t)v->n] : -1;
}

int vr__i_am_primary(const struct vr *v, const struct vr_world *w)
{
	return vr_primary_of(v) == w->self;
}

int vr_quorum(const struct vr_world *w, int n)
{
	return w->unsafe & VR_UNSAFE_QUORUM ? 1 : n / 2 + 1;
}

void vr__note(const struct vr *v, const struct vr_world *w, const char *fmt, ...)
{
	if (!w->io.note)
		return;
	char line[600];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	w->io.note(w->io.ctx, v->g, line);
}

void vr__event(const struct vr *v, const struct vr_world *w, enum vr_event ev)
{
	if (w->io.event)
		w->io.event(w->io.ctx, v->g, ev);
}

void vr__release(const struct vr_world *w, struct vr_snap *s)
{
	if (s && w->io.release)
		w->io.release(w->io.ctx, s);
}

/* A message of this group, from this rank, at its (cfg, view). */
struct vr_msg vr__base(const struct vr *v, const struct vr_world *w, uint8_t type)
{
	return (struct vr_msg){
		.type = type, .group = v->g, .cfg = v->cfg, .view = v->view, .from = w->self
	};
}

static uint64_t ns_of(double t)
{
	return t > 0 ? (uint64_t)(t * 1e9) : 0;
}

void vr__with_members(struct vr_msg *m, const struct vr *v)
{
	m->n = v->n;
	memcpy(m->members, v->members, sizeof(m->members));
}

static void with_next(struct vr_msg *m, const struct vr *v)
{
	m->next_at = v->next_at;
	m->next_n = v->next_n;
	memcpy(m->next, v->next, sizeof(m->next));
	snprintf(m->why, sizeof(m->why), "%s", v->next_why);
}

void vr__send(const struct vr_world *w, int to, const struct vr_msg *m)
{
	if (to != w->self && to >= 0)
		w->io.send(w->io.ctx, to, m);
}

/* ---- world ---------------------------------------------------------- */

int vr_world_init(struct vr_world *w, int self, int size, int R, int nnodes, const int *node_of,
                  const int *local_of)
{
	*w = (struct vr_world){ .self = self, .size = size, .R = R < 1 ? 1 : R };
	if (w->R > size)
		w->R = size;
	if (w->R > VR_MAX)
		w->R = VR_MAX;
	w->gone = calloc((size_t)size, 1);
	w->reached = calloc((size_t)size, 1);
	if (!w->gone || !w->reached)
		goto fail;
	if (nnodes > 1 && node_of && local_of) {
		w->nnodes = nnodes;
		w->node_of = node_of;
		w->local_of = local_of;
		w->node_first = calloc((size_t)nnodes + 1, sizeof(int));
		w->node_ranks = malloc((size_t)size * sizeof(int));
		if (!w->node_first || !w->node_ranks)
			goto fail;
		for (int r = 0; r < size; r++)
			w->node_first[node_of[r] + 1]++;
		for (int k = 0; k < nnodes; k++)
			w->node_first[k + 1] += w->node_first[k];
		int *at = malloc((size_t)nnodes * sizeof(int));
		if (!at)
			goto fail;
		memcpy(at, w->node_first, (size_t)nnodes * sizeof(int));
		for (int r = 0; r < size; r++) /* in rank order: a node's k-th is its k-th rank */
			w->node_ranks[at[node_of[r]]++] = r;
		free(at);
	}
	return 0;
fail:
	vr_world_free(w);
	return -1;
}

void vr_world_free(struct vr_world *w)
{
	free(w->gone);
	free(w->reached);
	free(w->node_first);
	free(w->node_ranks);
	w->gone = w->reached = NULL;
	w->node_first = w->node_ranks = NULL;
}

void vr__gone_why(struct vr_world *w, int rank, int kind, const char *why)
{
	if (rank < 0 || rank >= w->size)
		return;
	if (!w->gone[rank] || kind > w->gone[rank])
		w->gone[rank] = (unsigned char)kind;
	int i = 0;
	while (i < w->nwhy && w->why[i].rank != rank)
		i++;
	if (i == w->nwhy) {
		if (w->nwhy < (int)(sizeof(w->why) / sizeof(w->why[0])))
			w->nwhy++;
		else
			memmove(w->why, w->why + 1, sizeof(w->why) - sizeof(w->why[0]));
		i = w->nwhy - 1;
	}
	w->why[i].rank = rank;
	snprintf(w->why[i].why, sizeof(w->why[i].why), "%s", why);
}

const char *vr__why_of(const struct vr_world *w, int rank)
{
	for (int i = 0; i < w->nwhy; i++)
		if (w->why[i].rank == rank)
			return w->why[i].why;
	return "";
}

int vr_place(const struct vr_world *w, uint32_t g, const int *keep, int nkeep, int *out)
{
	int n = 0, R = w->R;
	for (int i = 0; i < nkeep && n < R; i++)
		out[n++] = keep[i];
	if (nkeep == 0 && !w->gone[g])
		out[n++] = (int)g;
	/* one rank a node first, the nodes after g's, each the rank with g's
	 * local index (or the next one there that is not gone) */
	for (int k = 1; w->nnodes > 1 && k < w->nnodes && n < R; k++) {
		int node = (w->node_of[g] + k) % w->nnodes, used = 0;
		for (int i = 0; i < n && !used; i++)
			used = w->node_of[out[i]] == node;
		int first = w->node_first[node], cnt = w->node_first[node + 1] - first;
		for (int j = 0; !used && j < cnt; j++) {
			int r = w->node_ranks[first + (w->local_of[g] + j) % cnt];
			if (!w->gone[r] && !vr__in_list(out, n, r)) {
				out[n++] = r;
				used = 1;
			}
		}
	}
	for (int k = 1; k < w->size && n < R; k++) {
		int r = (int)((g + (uint32_t)k) % (uint32_t)w->size);
		if (!w->gone[r] && !vr__in_list(out, n, r))
			out[n++] = r;
	}
	return n;
}

/* ---- group state ---------------------------------------------------- */

void vr_init(struct vr *v, const struct vr_world *w, uint32_t g, double now)
{
	*v = (struct vr){ .g = g, .removing = -1, .best = -1, .data_cfg = -1 };
	v->n = vr_place(w, g, NULL, 0, v->members);
	if (vr__idx_of(v, w->self) >= 0) {
		v->status = VR_NORMAL;
		v->data_cfg = 0;
	} else {
		v->status = VR_OUT;
	}
	v->since = now;
	for (int i = 0; i < VR_MAX; i++)
		v->echoed[i] = -NEVER;
}

/* A fresh term as primary of (cfg, view), from now: no member has ACKed. */
void vr__lead(struct vr *v, double now)
{
	v->since = now;
	v->commit = 0;
	for (int i = 0; i < VR_MAX; i++) {
		v->acked[i] = 0;
		v->echoed[i] = -NEVER;
		v->last_ack[i] = 0;
		v->last_sent[i] = 0;
	}
}

/* The primary's commit: the opnum a quorum holds (itself at its own). */
void vr__recommit(struct vr *v, const struct vr_world *w)
{
	uint64_t held[VR_MAX];
	int me = vr__idx_of(v, w->self), q = vr_quorum(w, v->n);
	for (int i = 0; i < v->n; i++)
		held[i] = i == me || ghost(v, w, i) ? v->opnum : v->acked[i];
	for (int i = 1; i < v->n; i++) /* descending */
		for (int j = i; j > 0 && held[j] > held[j - 1]; j--) {
			uint64_t t = held[j];
			held[j] = held[j - 1];
			held[j - 1] = t;
		}
	uint64_t c = held[q - 1];
	if (c > v->commit)
		v->commit = c;
}

/* The latest send time a quorum echoed (itself counted at `now`). */
double vr__confirmed(const struct vr *v, const struct vr_world *w, double now)
{
	double e[VR_MAX];
	int me = vr__idx_of(v, w->self), q = vr_quorum(w, v->n);
	for (int i = 0; i < v->n; i++)
		e[i] = i == me || ghost(v, w, i) ? now : v->echoed[i];
	for (int i = 1; i < v->n; i++)
		for (int j = i; j > 0 && e[j] > e[j - 1]; j--) {
			double t = e[j];
			e[j] = e[j - 1];
			e[j - 1] = t;
		}
	return e[q - 1];
}

int vr_primary(const struct vr *v, const struct vr_world *w)
{
	return !w->fenced && v->status == VR_NORMAL && vr__i_am_primary(v, w);
}

int vr_ready(const struct vr *v, const struct vr_world *w, uint64_t need, double asked, int write,
             double now)
{
	if (!vr_primary(v, w) || v->commit < need)
		return 0;
	if (write || w->unsafe & VR_UNSAFE_FENCE)
		return 1;
	double c = vr__confirmed(v, w, now);
	return w->lease > 0 ? c >= asked - MARGIN * w->lease : c >= asked;
}

/* PREPARE (an entry, or a beat with none) to member i. */
static void prepare_to(struct vr *v, struct vr_world *w, int i, double now, uint64_t opnum,
                       uint8_t kind, const void *entry, size_t len)
{
	struct vr_msg m = vr__base(v, w, VR_PREPARE);
	m.ts = ns_of(now);
	m.opnum = opnum;
	m.ekind = kind;
	m.entry = entry;
	m.elen = len;
	m.flags = entry || kind == VR_ENTRY_CONFIG ? 0 : VR_F_BEAT;
	vr__with_members(&m, v);
	if (kind == VR_ENTRY_CONFIG)
		with_next(&m, v);
	v->last_sent[i] = now;
	vr__send(w, v->members[i], &m);
}

void vr__beat(struct vr *v, struct vr_world *w, int i, double now)
{
	prepare_to(v, w, i, now, v->opnum, VR_ENTRY_DATA, NULL, 0);
}

void vr_confirm(struct vr *v, struct vr_world *w, double asked, double now)
{
	if (!vr_primary(v, w))
		return;
	int me = vr__idx_of(v, w->self);
	for (int i = 0; i < v->n; i++)
		if (i != me && v->last_sent[i] < asked)
			vr__beat(v, w, i, now);
}

int vr_propose(struct vr *v, struct vr_world *w, double now, const void *entry, size_t len,
               uint64_t *opnum_out)
{
	if (!vr_primary(v, w) || v->next_at)
		return -1;
	uint64_t op = ++v->opnum;
	int me = vr__idx_of(v, w->self);
	for (int i = 0; i < v->n; i++)
		if (i != me)
			prepare_to(v, w, i, now, op, VR_ENTRY_DATA, entry, len ? len : 0);
	vr__recommit(v, w);
	*opnum_out = op;
	return 0;
}

/* The data's description and data itself, as the primary sends them. */
void vr__send_data(struct vr *v, struct vr_world *w, int to, uint8_t type, double now)
{
	struct vr_msg m = vr__base(v, w, type);
	m.ts = ns_of(now);
	m.opnum = v->opnum;
	m.log_view = v->log_view;
	vr__with_members(&m, v);
	with_next(&m, v);
	int i = vr__idx_of(v, to);
	if (i >= 0)
		v->last_sent[i] = now;
	vr__send(w, to, &m);
}

/* ---- reconfiguration ------------------------------------------------ */

/* Proposes the configuration without `out` (its replacement placed as in
 * vr_place), saying why. */
void vr__reconfigure(struct vr *v, struct vr_world *w, double now, int out, const char *why)
{
	int keep[VR_MAX], nk = 0, me = vr__idx_of(v, w->self);
	if (out != w->self)
		keep[nk++] = w->self; /* it stays primary at the new view 0 */
	for (int i = 0; i < v->n; i++)
		if (v->members[i] != out && i != me)
			keep[nk++] = v->members[i];
	if (!w->gone[out] && out != w->self)
		w->gone[out] = GONE_SUSPECT; /* not placed again */
	v->next_n = vr_place(w, v->g, keep, nk, v->next);
	if (v->next_n == 0) { /* the last member leaves: nothing to hand on */
		v->status = VR_OUT;
		vr__event(v, w, VR_EV_DROP);
		vr__event(v, w, VR_EV_ROLE);
		return;
	}
	snprintf(v->next_why, sizeof(v->next_why), "%s", why);
	v->removing = out;
	v->next_at = ++v->opnum;
	for (int i = 0; i < v->n; i++)
		if (i != me)
			prepare_to(v, w, i, now, v->next_at, VR_ENTRY_CONFIG, NULL, 0);
	char list[64];
	size_t used = 0;
	list[0] = 0;
	for (int i = 0; i < v->next_n && used < sizeof(list); i++)
		used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%d", i ? "," : "",
		                         v->next[i]);
	vr__note(v, w, "proposes configuration %u (ranks %s) without rank %d: %s", v->cfg + 1, list,
	     out, why);
	vr__recommit(v, w);
}

/* The pending reconfiguration committed: the new members get the data,
 * the one left out is told, and the group goes on in cfg + 1, view 0. */
void vr__reconfigured(struct vr *v, struct vr_world *w, double now)
{
	int old[VR_MAX], on = v->n;
	memcpy(old, v->members, sizeof(old));
	v->cfg++;
	v->view = 0;
	v->n = v->next_n;
	memcpy(v->members, v->next, sizeof(v->members));
	v->data_cfg = v->cfg;
	v->log_view = 0;
	v->next_at = 0;
	v->next_n = 0;
	for (int i = 0; i < v->n; i++)
		if (v->members[i] != w->self)
			vr__send_data(v, w, v->members[i], VR_NEWCFG, now);
	for (int i = 0; i < on; i++)
		if (!vr__in_list(v->members, v->n, old[i]) && old[i] != w->self) {
			struct vr_msg m = vr__base(v, w, VR_REJECT);
			vr__with_members(&m, v);
			m.status = VR_NORMAL;
			m.flags = VR_F_REMOVED | (vr__exits(w, old[i]) ? VR_F_LEFT : 0);
			snprintf(m.why, sizeof(m.why), "%s", v->next_why);
			vr__send(w, old[i], &m);
		}
	if (v->removing >= 0 && v->removing != w->self)
		vr__gone_why(w, v->removing, w->gone[v->removing] ? w->gone[v->removing] : GONE_SUSPECT,
		         v->next_why);
	v->removing = -1;
	vr__note(v, w, "configuration %u, view 0: primary rank %d", v->cfg, v->members[0]);
	if (vr__idx_of(v, w->self) < 0) {
		v->status = VR_OUT;
		vr__event(v, w, VR_EV_DROP);
	} else if (vr__i_am_primary(v, w)) {
		uint64_t c = v->opnum;
		vr__lead(v, now);
		v->commit = c; /* everything up to the reconfiguration is committed */
	} else {
		v->since = v->heard = now;
		v->promise = now + w->lease;
	}
	vr__event(v, w, VR_EV_ROLE);
}

/* ---- view change ---------------------------------------------------- */

uint32_t vr__next_view(const struct vr *v, const struct vr_world *w, uint32_t from)
{
	uint32_t nv = from + 1;
	for (int k = 0; k < v->n && vr__is_dead(w, v->members[nv % (uint32_t)v->n]); k++)
		nv++;
	return nv;
}


void vr__check_svc(struct vr *v, struct vr_world *w, double now)
{
	if (v->dvc_sent || count(v->svc | ghosts(v, w)) < vr_quorum(w, v->n))
		return;
	v->dvc_sent = 1;
	int np = vr_primary_of(v);
	if (np == w->self) {
		v->dvc |= BIT(vr__idx_of(v, w->self));
		vr__check_dvc(v, w, now);
		return;
	}
	struct vr_msg m = vr__base(v, w, VR_DVC);
	if (v->view > v->dvc_max)
		v->dvc_max = v->view;
	m.opnum = v->opnum;
	m.log_view = v->log_view;
	with_next(&m, v);
	v->dvc_at = now;
	vr__send(w, np, &m);
}

void vr__svc_all(struct vr *v, struct vr_world *w, double now)
{
	struct vr_msg m = vr__base(v, w, VR_SVC);
	for (int i = 0; i < v->n; i++)
		vr__send(w, v->members[i], &m);
	v->svc_at = now;
}

/* Joins (or starts) the view change to nv: from now on nothing of the
 * old view is taken here. */
void vr__change(struct vr *v, struct vr_world *w, double now, uint32_t nv)
{
	int was_primary = v->status == VR_NORMAL && vr__i_am_primary(v, w);
	if (v->status != VR_CHANGE || nv != v->view)
		vr__note(v, w, "view change to view %u of configuration %u (primary rank %d)%s%s", nv,
		     v->cfg, v->members[nv % (uint32_t)v->n], v->suspect ? ": " : "",
		     v->suspect ? v->suspect_why : "");
	v->status = VR_CHANGE;
	v->view = nv;
	v->change_since = now;
	v->svc = BIT(vr__idx_of(v, w->self));
	v->dvc = 0;
	v->dvc_sent = 0;
	v->best = -1;
	vr__release(w, v->best_snap);
	v->best_snap = NULL;
	v->best_lv = v->log_view;
	v->best_op = v->opnum;
	v->best_next_at = v->next_at;
	v->best_next_n = v->next_n;
	memcpy(v->best_next, v->next, sizeof(v->best_next));
	if (v->wait_view == nv)
		v->svc |= v->wait_svc;
	v->wait_view = 0;
	v->wait_svc = 0;
	vr__svc_all(v, w, now);
	if (was_primary || v->status == VR_CHANGE)
		vr__event(v, w, VR_EV_ROLE);
	vr__check_svc(v, w, now);
}

void vr__check_dvc(struct vr *v, struct vr_world *w, double now)
{
	if (v->status != VR_CHANGE || !vr__i_am_primary(v, w) || !(v->dvc & BIT(vr__idx_of(v, w->self))) ||
	    count(v->dvc | ghosts(v, w)) < vr_quorum(w, v->n))
		return;
	if (v->best >= 0) { /* another's data is the best: it holds all that committed */
		w->io.install(w->io.ctx, v->g, v->best_snap);
		v->best_snap = NULL;
		v->opnum = v->best_op;
		v->next_at = v->best_next_at;
		v->next_n = v->best_next_n;
		memcpy(v->next, v->best_next, sizeof(v->next));
	}
	/* the last primary this member knew took no part: replaced at once
	 * rather than after HPCT_STORE_SUSPECT, so that a second failure
	 * soon after the first finds the group whole again */
	int was = v->members[v->log_view % (uint32_t)v->n], wi = vr__idx_of(v, was);
	if (was != w->self && !(v->dvc & BIT(wi)) && !w->gone[was]) {
		char why[160];
		snprintf(why, sizeof(why), "rank %d, primary of view %u, took no part in the view "
		         "change to view %u (it died, paused or was cut off)", was, v->log_view, v->view);
		vr__gone_why(w, was, GONE_SUSPECT, why);
	}
	v->status = VR_NORMAL;
	v->log_view = v->view;
	v->data_cfg = v->cfg;
	v->suspect = v->strong = 0;
	vr__lead(v, now);
	vr__note(v, w, "view %u of configuration %u begins: this rank is its primary (%llu "
	     "operations)", v->view, v->cfg, (unsigned long long)v->opnum);
	for (int i = 0; i < v->n; i++)
		if (v->members[i] != w->self)
			vr__send_data(v, w, v->members[i], VR_STARTVIEW, now);
	vr__recommit(v, w);
	vr__event(v, w, VR_EV_ROLE);
	if (v->next_at && v->commit >= v->next_at)
		vr__reconfigured(v, w, now);
}

/* May this member join a view change now?  A backup only once no promise
 * to its primary stands (or that primary said it is gone); a primary only
 * once no quorum answered it for `suspect` seconds (one member's false
 * suspicion does not take a working primary down: that member is
 * replaced instead). */
int vr__free_to_join(const struct vr *v, const struct vr_world *w, double now)
{
	if (v->status == VR_CHANGE || w->unsafe & VR_UNSAFE_FENCE)
		return 1;
	if (vr__i_am_primary(v, w))
		return v->status != VR_NORMAL || vr__confirmed(v, w, now) < now - w->suspect;
	return now >= v->promise || v->strong;
}

