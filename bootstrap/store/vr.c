/* The served store's replication protocol (see vr.h): normal operation,
 * leases, view changes, reconfiguration and fencing of one group at one
 * member, as a state machine with no I/O. */
#include "bootstrap/store/vr.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NEVER   1e300
#define MARGIN  0.9 /* of the lease: clocks whose rates differ by 10% */
#define BIT(i)  (1u << (i))
/* what this rank knows of another (vr_world.gone), weakest first: a later
 * kind replaces an earlier one */
#define GONE_LEAVING 1 /* it exits once its groups have replaced it */
#define GONE_SUSPECT 2
#define GONE_LEFT    3
#define GONE_FENCED  4

/* rank r said it exits (leaving, or left) */
static int exits(const struct vr_world *w, int r)
{
	return w->gone[r] == GONE_LEAVING || w->gone[r] == GONE_LEFT;
}

/* rank r is dead or suspected: not one that is leaving, which still serves */
static int is_dead(const struct vr_world *w, int r)
{
	return w->gone[r] > GONE_LEAVING;
}

static int idx_of(const struct vr *v, int rank)
{
	for (int i = 0; i < v->n; i++)
		if (v->members[i] == rank)
			return i;
	return -1;
}

static int in_list(const int *l, int n, int rank)
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

static int i_am_primary(const struct vr *v, const struct vr_world *w)
{
	return vr_primary_of(v) == w->self;
}

int vr_quorum(const struct vr_world *w, int n)
{
	return w->unsafe & VR_UNSAFE_QUORUM ? 1 : n / 2 + 1;
}

static void note(const struct vr *v, const struct vr_world *w, const char *fmt, ...)
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

static void event(const struct vr *v, const struct vr_world *w, enum vr_event ev)
{
	if (w->io.event)
		w->io.event(w->io.ctx, v->g, ev);
}

static void release(const struct vr_world *w, struct vr_snap *s)
{
	if (s && w->io.release)
		w->io.release(w->io.ctx, s);
}

/* A message of this group, from this rank, at its (cfg, view). */
static struct vr_msg base(const struct vr *v, const struct vr_world *w, uint8_t type)
{
	return (struct vr_msg){
		.type = type, .group = v->g, .cfg = v->cfg, .view = v->view, .from = w->self
	};
}

static uint64_t ns_of(double t)
{
	return t > 0 ? (uint64_t)(t * 1e9) : 0;
}

static void with_members(struct vr_msg *m, const struct vr *v)
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

static void send(const struct vr_world *w, int to, const struct vr_msg *m)
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

static void gone_why(struct vr_world *w, int rank, int kind, const char *why)
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

static const char *why_of(const struct vr_world *w, int rank)
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
			if (!w->gone[r] && !in_list(out, n, r)) {
				out[n++] = r;
				used = 1;
			}
		}
	}
	for (int k = 1; k < w->size && n < R; k++) {
		int r = (int)((g + (uint32_t)k) % (uint32_t)w->size);
		if (!w->gone[r] && !in_list(out, n, r))
			out[n++] = r;
	}
	return n;
}

/* ---- group state ---------------------------------------------------- */

void vr_init(struct vr *v, const struct vr_world *w, uint32_t g, double now)
{
	*v = (struct vr){ .g = g, .removing = -1, .best = -1, .data_cfg = -1 };
	v->n = vr_place(w, g, NULL, 0, v->members);
	if (idx_of(v, w->self) >= 0) {
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
static void lead(struct vr *v, double now)
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
static void recommit(struct vr *v, const struct vr_world *w)
{
	uint64_t held[VR_MAX];
	int me = idx_of(v, w->self), q = vr_quorum(w, v->n);
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
static double confirmed(const struct vr *v, const struct vr_world *w, double now)
{
	double e[VR_MAX];
	int me = idx_of(v, w->self), q = vr_quorum(w, v->n);
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
	return !w->fenced && v->status == VR_NORMAL && i_am_primary(v, w);
}

int vr_ready(const struct vr *v, const struct vr_world *w, uint64_t need, double asked, int write,
             double now)
{
	if (!vr_primary(v, w) || v->commit < need)
		return 0;
	if (write || w->unsafe & VR_UNSAFE_FENCE)
		return 1;
	double c = confirmed(v, w, now);
	return w->lease > 0 ? c >= asked - MARGIN * w->lease : c >= asked;
}

/* PREPARE (an entry, or a beat with none) to member i. */
static void prepare_to(struct vr *v, struct vr_world *w, int i, double now, uint64_t opnum,
                       uint8_t kind, const void *entry, size_t len)
{
	struct vr_msg m = base(v, w, VR_PREPARE);
	m.ts = ns_of(now);
	m.opnum = opnum;
	m.ekind = kind;
	m.entry = entry;
	m.elen = len;
	m.flags = entry || kind == VR_ENTRY_CONFIG ? 0 : VR_F_BEAT;
	with_members(&m, v);
	if (kind == VR_ENTRY_CONFIG)
		with_next(&m, v);
	v->last_sent[i] = now;
	send(w, v->members[i], &m);
}

static void beat(struct vr *v, struct vr_world *w, int i, double now)
{
	prepare_to(v, w, i, now, v->opnum, VR_ENTRY_DATA, NULL, 0);
}

void vr_confirm(struct vr *v, struct vr_world *w, double asked, double now)
{
	if (!vr_primary(v, w))
		return;
	int me = idx_of(v, w->self);
	for (int i = 0; i < v->n; i++)
		if (i != me && v->last_sent[i] < asked)
			beat(v, w, i, now);
}

int vr_propose(struct vr *v, struct vr_world *w, double now, const void *entry, size_t len,
               uint64_t *opnum_out)
{
	if (!vr_primary(v, w) || v->next_at)
		return -1;
	uint64_t op = ++v->opnum;
	int me = idx_of(v, w->self);
	for (int i = 0; i < v->n; i++)
		if (i != me)
			prepare_to(v, w, i, now, op, VR_ENTRY_DATA, entry, len ? len : 0);
	recommit(v, w);
	*opnum_out = op;
	return 0;
}

/* The data's description and data itself, as the primary sends them. */
static void send_data(struct vr *v, struct vr_world *w, int to, uint8_t type, double now)
{
	struct vr_msg m = base(v, w, type);
	m.ts = ns_of(now);
	m.opnum = v->opnum;
	m.log_view = v->log_view;
	with_members(&m, v);
	with_next(&m, v);
	int i = idx_of(v, to);
	if (i >= 0)
		v->last_sent[i] = now;
	send(w, to, &m);
}

/* ---- reconfiguration ------------------------------------------------ */

/* Proposes the configuration without `out` (its replacement placed as in
 * vr_place), saying why. */
static void reconfigure(struct vr *v, struct vr_world *w, double now, int out, const char *why)
{
	int keep[VR_MAX], nk = 0, me = idx_of(v, w->self);
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
		event(v, w, VR_EV_DROP);
		event(v, w, VR_EV_ROLE);
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
	note(v, w, "proposes configuration %u (ranks %s) without rank %d: %s", v->cfg + 1, list,
	     out, why);
	recommit(v, w);
}

/* The pending reconfiguration committed: the new members get the data,
 * the one left out is told, and the group goes on in cfg + 1, view 0. */
static void reconfigured(struct vr *v, struct vr_world *w, double now)
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
			send_data(v, w, v->members[i], VR_NEWCFG, now);
	for (int i = 0; i < on; i++)
		if (!in_list(v->members, v->n, old[i]) && old[i] != w->self) {
			struct vr_msg m = base(v, w, VR_REJECT);
			with_members(&m, v);
			m.status = VR_NORMAL;
			m.flags = VR_F_REMOVED | (exits(w, old[i]) ? VR_F_LEFT : 0);
			snprintf(m.why, sizeof(m.why), "%s", v->next_why);
			send(w, old[i], &m);
		}
	if (v->removing >= 0 && v->removing != w->self)
		gone_why(w, v->removing, w->gone[v->removing] ? w->gone[v->removing] : GONE_SUSPECT,
		         v->next_why);
	v->removing = -1;
	note(v, w, "configuration %u, view 0: primary rank %d", v->cfg, v->members[0]);
	if (idx_of(v, w->self) < 0) {
		v->status = VR_OUT;
		event(v, w, VR_EV_DROP);
	} else if (i_am_primary(v, w)) {
		uint64_t c = v->opnum;
		lead(v, now);
		v->commit = c; /* everything up to the reconfiguration is committed */
	} else {
		v->since = v->heard = now;
		v->promise = now + w->lease;
	}
	event(v, w, VR_EV_ROLE);
}

/* ---- view change ---------------------------------------------------- */

static uint32_t next_view(const struct vr *v, const struct vr_world *w, uint32_t from)
{
	uint32_t nv = from + 1;
	for (int k = 0; k < v->n && is_dead(w, v->members[nv % (uint32_t)v->n]); k++)
		nv++;
	return nv;
}

static void check_dvc(struct vr *v, struct vr_world *w, double now);

static void check_svc(struct vr *v, struct vr_world *w, double now)
{
	if (v->dvc_sent || count(v->svc | ghosts(v, w)) < vr_quorum(w, v->n))
		return;
	v->dvc_sent = 1;
	int np = vr_primary_of(v);
	if (np == w->self) {
		v->dvc |= BIT(idx_of(v, w->self));
		check_dvc(v, w, now);
		return;
	}
	struct vr_msg m = base(v, w, VR_DVC);
	if (v->view > v->dvc_max)
		v->dvc_max = v->view;
	m.opnum = v->opnum;
	m.log_view = v->log_view;
	with_next(&m, v);
	v->dvc_at = now;
	send(w, np, &m);
}

static void svc_all(struct vr *v, struct vr_world *w, double now)
{
	struct vr_msg m = base(v, w, VR_SVC);
	for (int i = 0; i < v->n; i++)
		send(w, v->members[i], &m);
	v->svc_at = now;
}

/* Joins (or starts) the view change to nv: from now on nothing of the
 * old view is taken here. */
static void change(struct vr *v, struct vr_world *w, double now, uint32_t nv)
{
	int was_primary = v->status == VR_NORMAL && i_am_primary(v, w);
	if (v->status != VR_CHANGE || nv != v->view)
		note(v, w, "view change to view %u of configuration %u (primary rank %d)%s%s", nv,
		     v->cfg, v->members[nv % (uint32_t)v->n], v->suspect ? ": " : "",
		     v->suspect ? v->suspect_why : "");
	v->status = VR_CHANGE;
	v->view = nv;
	v->change_since = now;
	v->svc = BIT(idx_of(v, w->self));
	v->dvc = 0;
	v->dvc_sent = 0;
	v->best = -1;
	release(w, v->best_snap);
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
	svc_all(v, w, now);
	if (was_primary || v->status == VR_CHANGE)
		event(v, w, VR_EV_ROLE);
	check_svc(v, w, now);
}

static void check_dvc(struct vr *v, struct vr_world *w, double now)
{
	if (v->status != VR_CHANGE || !i_am_primary(v, w) || !(v->dvc & BIT(idx_of(v, w->self))) ||
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
	int was = v->members[v->log_view % (uint32_t)v->n], wi = idx_of(v, was);
	if (was != w->self && !(v->dvc & BIT(wi)) && !w->gone[was]) {
		char why[160];
		snprintf(why, sizeof(why), "rank %d, primary of view %u, took no part in the view "
		         "change to view %u (it died, paused or was cut off)", was, v->log_view, v->view);
		gone_why(w, was, GONE_SUSPECT, why);
	}
	v->status = VR_NORMAL;
	v->log_view = v->view;
	v->data_cfg = v->cfg;
	v->suspect = v->strong = 0;
	lead(v, now);
	note(v, w, "view %u of configuration %u begins: this rank is its primary (%llu "
	     "operations)", v->view, v->cfg, (unsigned long long)v->opnum);
	for (int i = 0; i < v->n; i++)
		if (v->members[i] != w->self)
			send_data(v, w, v->members[i], VR_STARTVIEW, now);
	recommit(v, w);
	event(v, w, VR_EV_ROLE);
	if (v->next_at && v->commit >= v->next_at)
		reconfigured(v, w, now);
}

/* May this member join a view change now?  A backup only once no promise
 * to its primary stands (or that primary said it is gone); a primary only
 * once no quorum answered it for `suspect` seconds (one member's false
 * suspicion does not take a working primary down: that member is
 * replaced instead). */
static int free_to_join(const struct vr *v, const struct vr_world *w, double now)
{
	if (v->status == VR_CHANGE || w->unsafe & VR_UNSAFE_FENCE)
		return 1;
	if (i_am_primary(v, w))
		return v->status != VR_NORMAL || confirmed(v, w, now) < now - w->suspect;
	return now >= v->promise || v->strong;
}

/* ---- messages ------------------------------------------------------- */

static void reject(struct vr *v, struct vr_world *w, double now, int to)
{
	int i = idx_of(v, to), slot = i >= 0 ? i : VR_MAX;
	if (now - v->rejected_at[slot] < w->beat)
		return;
	v->rejected_at[slot] = now;
	struct vr_msg m = base(v, w, VR_REJECT);
	with_members(&m, v);
	m.status = (uint8_t)v->status;
	if (w->fenced || w->left) {
		m.type = VR_GONE;
		m.flags = w->left ? VR_F_LEFT : 0;
		snprintf(m.why, sizeof(m.why), "%.150s", w->fence_why);
	} else if (i < 0) {
		m.flags = VR_F_REMOVED | (exits(w, to) ? VR_F_LEFT : 0);
		snprintf(m.why, sizeof(m.why), "%s", why_of(w, to));
	}
	send(w, to, &m);
}

static void ack(struct vr *v, struct vr_world *w, uint64_t ts)
{
	struct vr_msg m = base(v, w, VR_ACK);
	m.ts = ts;
	m.opnum = v->opnum;
	send(w, vr_primary_of(v), &m);
}

static void need(struct vr *v, struct vr_world *w, double now)
{
	if (now - v->need_at < w->beat)
		return;
	v->need_at = now;
	struct vr_msg m = base(v, w, VR_NEED);
	send(w, vr_primary_of(v), &m);
}

/* The primary of (cfg, view) was heard: a promise, and no suspicion. */
static void heard(struct vr *v, const struct vr_world *w, double now)
{
	v->heard = now;
	v->promise = now + w->lease;
	v->suspect = v->strong = 0;
}

/* A message from a later (cfg, view) in which this rank is a member: it
 * takes that position, waiting for the data (NOSTATE). */
static void behind(struct vr *v, struct vr_world *w, double now, const struct vr_msg *m)
{
	int was_primary = vr_primary(v, w);
	v->cfg = m->cfg;
	v->view = m->view;
	if (m->n > 0) {
		v->n = m->n;
		memcpy(v->members, m->members, sizeof(v->members));
	}
	v->status = VR_NOSTATE;
	v->since = now;
	if (was_primary)
		note(v, w, "is no primary any more: rank %d is at configuration %u, view %u",
		     m->from, m->cfg, m->view);
	event(v, w, VR_EV_ROLE);
}

/* Data from the primary (STATE, STARTVIEW, NEWCFG): installed, in step. */
static void take_data(struct vr *v, struct vr_world *w, double now, const struct vr_msg *m)
{
	int was = v->status;
	v->cfg = m->cfg;
	v->view = m->view;
	v->n = m->n;
	memcpy(v->members, m->members, sizeof(v->members));
	w->io.install(w->io.ctx, v->g, m->snap);
	v->opnum = m->opnum;
	v->log_view = m->type == VR_NEWCFG ? 0 : m->view;
	v->data_cfg = m->cfg;
	v->next_at = m->type == VR_NEWCFG ? 0 : m->next_at;
	v->next_n = m->type == VR_NEWCFG ? 0 : m->next_n;
	memcpy(v->next, m->next, sizeof(v->next));
	snprintf(v->next_why, sizeof(v->next_why), "%s", m->why);
	v->status = VR_NORMAL;
	v->since = now;
	v->commit = m->opnum;
	if (i_am_primary(v, w)) { /* NEWCFG made it the primary of the new one */
		lead(v, now);
		v->commit = m->opnum;
	} else {
		heard(v, w, now);
		ack(v, w, m->from == vr_primary_of(v) ? m->ts : 0);
	}
	if (was != VR_NORMAL || m->type != VR_STATE)
		event(v, w, VR_EV_ROLE);
}

/* (cfg, view) order of m against this member: <0 older, 0 same, >0 later. */
static int order(const struct vr *v, const struct vr_msg *m)
{
	if (m->cfg != v->cfg)
		return m->cfg < v->cfg ? -1 : 1;
	return m->view < v->view ? -1 : m->view > v->view;
}

static void on_prepare(struct vr *v, struct vr_world *w, double now, const struct vr_msg *m)
{
	int o = order(v, m);
	if (o < 0 || (o == 0 && v->status == VR_CHANGE)) {
		reject(v, w, now, m->from);
		return;
	}
	if (o > 0 || v->status == VR_NOSTATE) {
		if (o > 0)
			behind(v, w, now, m);
		heard(v, w, now);
		need(v, w, now);
		return;
	}
	if (m->from != vr_primary_of(v) || v->status != VR_NORMAL)
		return;
	heard(v, w, now);
	if (!(m->flags & VR_F_BEAT)) {
		if (m->opnum > v->opnum + 1) { /* a gap: what came before is lost */
			need(v, w, now);
			return;
		}
		if (m->opnum == v->opnum + 1) {
			if (m->ekind == VR_ENTRY_CONFIG) {
				v->next_at = m->opnum;
				v->next_n = m->next_n;
				memcpy(v->next, m->next, sizeof(v->next));
				snprintf(v->next_why, sizeof(v->next_why), "%s", m->why);
			} else {
				w->io.apply(w->io.ctx, v->g, m->entry, m->elen);
			}
			v->opnum = m->opnum;
		}
	}
	ack(v, w, m->ts);
}

static void on_ack(struct vr *v, struct vr_world *w, double now, const struct vr_msg *m)
{
	int i = idx_of(v, m->from);
	if (order(v, m) != 0 || i < 0 || !vr_primary(v, w))
		return;
	uint64_t c = v->commit;
	double was = confirmed(v, w, now);
	if (m->opnum > v->acked[i])
		v->acked[i] = m->opnum > v->opnum ? v->opnum : m->opnum;
	double ts = (double)m->ts / 1e9;
	if (m->ts && ts > v->echoed[i])
		v->echoed[i] = ts;
	v->last_ack[i] = now;
	recommit(v, w);
	if (v->commit != c || confirmed(v, w, now) != was)
		event(v, w, VR_EV_COMMIT);
	if (v->next_at && v->commit >= v->next_at)
		reconfigured(v, w, now);
}

/* This member was left out of a later configuration. */
static void removed(struct vr *v, struct vr_world *w, const struct vr_msg *m)
{
	v->status = VR_OUT;
	event(v, w, VR_EV_DROP);
	event(v, w, VR_EV_ROLE);
	if (m->flags & VR_F_LEFT || w->left || w->fenced)
		return;
	char why[300];
	snprintf(why, sizeof(why),
	         "rank %d (of group %u, configuration %u, view %u) counted this rank gone: %s",
	         m->from, v->g, m->cfg, m->view, m->why[0] ? m->why : "it is not one of its members");
	vr_fence(w, why);
}

static void on_reject(struct vr *v, struct vr_world *w, double now, const struct vr_msg *m)
{
	/* A view change this member began alone, while the view it left goes
	 * on (its members answered SVC with this): back to that view, which is
	 * safe while this member sent no DVC past it (it helped no later view
	 * begin, so acking the old one commits nothing a later one lacks). */
	if (order(v, m) < 0 && v->status == VR_CHANGE && m->cfg == v->cfg &&
	    m->status == VR_NORMAL && m->view >= v->log_view && v->dvc_max <= m->view &&
	    !is_dead(w, m->members[m->view % (uint32_t)m->n]) && !(m->flags & VR_F_REMOVED)) {
		note(v, w, "view change to view %u abandoned: view %u goes on (rank %d says)",
		     v->view, m->view, m->from);
		behind(v, w, now, m);
		need(v, w, now);
		return;
	}
	if (order(v, m) < 0 || (order(v, m) == 0 && m->status != VR_CHANGE))
		return;
	if (m->flags & VR_F_REMOVED) {
		if (!in_list(m->members, m->n, w->self) && v->status != VR_OUT && m->cfg > v->cfg)
			removed(v, w, m);
		return;
	}
	if (vr_primary(v, w) && w->unsafe & VR_UNSAFE_FENCE)
		return; /* the negative control: a deposed primary goes on */
	if (m->status == VR_CHANGE && m->cfg == v->cfg && v->data_cfg == v->cfg) {
		/* a view change this member may join, as an SVC */
		struct vr_msg s = *m;
		s.type = VR_SVC;
		vr_recv(v, w, now, &s);
		return;
	}
	if (in_list(m->members, m->n, w->self) && order(v, m) > 0) {
		behind(v, w, now, m);
		need(v, w, now);
	}
}

static void on_svc(struct vr *v, struct vr_world *w, double now, const struct vr_msg *m)
{
	int i = idx_of(v, m->from), o = order(v, m);
	if (i < 0 || m->cfg != v->cfg) {
		if (o < 0)
			reject(v, w, now, m->from);
		return;
	}
	if (o < 0 || (o == 0 && v->status != VR_CHANGE)) {
		reject(v, w, now, m->from);
		return;
	}
	if (v->data_cfg != v->cfg) /* no data of this configuration to offer */
		return;
	if (o == 0) {
		v->svc |= BIT(i);
		/* the new primary asks again: its DVC may have been lost */
		if (v->dvc_sent && m->from == vr_primary_of(v) && now - v->dvc_at >= w->beat) {
			v->dvc_sent = 0;
			check_svc(v, w, now);
		}
		check_svc(v, w, now);
		return;
	}
	if (!free_to_join(v, w, now)) { /* its promise stands: later (vr_tick) */
		if (v->status == VR_NORMAL)
			reject(v, w, now, m->from); /* this view goes on, as far as it knows */
		if (m->view > v->wait_view) {
			v->wait_view = m->view;
			v->wait_svc = 0;
		}
		if (m->view == v->wait_view)
			v->wait_svc |= BIT(i);
		return;
	}
	change(v, w, now, m->view);
	v->svc |= BIT(i);
	check_svc(v, w, now);
}

static void on_dvc(struct vr *v, struct vr_world *w, double now, const struct vr_msg *m)
{
	int i = idx_of(v, m->from);
	if (i < 0 || m->cfg != v->cfg) {
		release(w, m->snap);
		return;
	}
	if (order(v, m) > 0) { /* a DVC is an SVC too */
		struct vr_msg s = *m;
		s.type = VR_SVC;
		s.snap = NULL;
		on_svc(v, w, now, &s);
	}
	if (order(v, m) != 0 || v->status != VR_CHANGE || !i_am_primary(v, w)) {
		release(w, m->snap);
		return;
	}
	v->svc |= BIT(i);
	v->dvc |= BIT(i);
	int better = m->log_view > v->best_lv || (m->log_view == v->best_lv && m->opnum > v->best_op);
	if (better) {
		release(w, v->best_snap);
		v->best_snap = m->snap;
		v->best = i;
		v->best_lv = m->log_view;
		v->best_op = m->opnum;
		v->best_next_at = m->next_at;
		v->best_next_n = m->next_n;
		memcpy(v->best_next, m->next, sizeof(v->best_next));
	} else {
		release(w, m->snap);
	}
	check_svc(v, w, now);
	check_dvc(v, w, now);
}

static void on_data(struct vr *v, struct vr_world *w, double now, const struct vr_msg *m)
{
	int o = order(v, m);
	int from_primary = m->n > 0 && m->members[m->view % (uint32_t)m->n] == m->from;
	if (m->type == VR_NEWCFG)
		from_primary = 1; /* the old configuration's primary hands it over */
	if (!in_list(m->members, m->n, w->self) || !from_primary || o < 0 ||
	    (o == 0 && v->status == VR_NORMAL && m->type == VR_NEWCFG)) {
		release(w, m->snap);
		if (o < 0)
			reject(v, w, now, m->from);
		return;
	}
	if (m->type == VR_STATE && o == 0 && v->status == VR_CHANGE) {
		release(w, m->snap); /* of the view this member left */
		return;
	}
	release(w, v->best_snap);
	v->best_snap = NULL;
	take_data(v, w, now, m);
}

static void on_gone(struct vr *v, struct vr_world *w, double now, const struct vr_msg *m)
{
	int left = m->flags & VR_F_LEFT;
	char why[160];
	if (m->flags & VR_F_LEAVING) { /* it serves on until it is replaced */
		snprintf(why, sizeof(why), "rank %d said it exits", m->from);
		gone_why(w, m->from, GONE_LEAVING, why);
		vr_tick(v, w, now);
		return;
	}
	if (left)
		snprintf(why, sizeof(why), "rank %d said it exits", m->from);
	else
		snprintf(why, sizeof(why), "rank %d said it is fenced (%.100s)", m->from, m->why);
	gone_why(w, m->from, left ? GONE_LEFT : GONE_FENCED, why);
	if (m->from == vr_primary_of(v) && v->status != VR_CHANGE && !i_am_primary(v, w)) {
		v->suspect = v->strong = 1; /* it serves nothing: no promise to keep */
		snprintf(v->suspect_why, sizeof(v->suspect_why), "%s", why);
	}
	vr_tick(v, w, now);
}

void vr_recv(struct vr *v, struct vr_world *w, double now, const struct vr_msg *m)
{
	if (m->from >= 0 && m->from < w->size)
		w->reached[m->from] = 1;
	if (w->fenced || w->left) {
		release(w, m->snap);
		if (m->type != VR_GONE && m->type != VR_REJECT)
			reject(v, w, now, m->from);
		return;
	}
	switch (m->type) {
	case VR_PREPARE:
		on_prepare(v, w, now, m);
		break;
	case VR_ACK:
		on_ack(v, w, now, m);
		break;
	case VR_NEED:
		if (order(v, m) == 0 && v->status == VR_NORMAL && i_am_primary(v, w) &&
		    idx_of(v, m->from) >= 0)
			send_data(v, w, m->from, VR_STATE, now);
		else if (order(v, m) < 0 || idx_of(v, m->from) < 0)
			reject(v, w, now, m->from);
		break;
	case VR_STATE:
	case VR_STARTVIEW:
	case VR_NEWCFG:
		on_data(v, w, now, m);
		break;
	case VR_SVC:
		on_svc(v, w, now, m);
		break;
	case VR_DVC:
		on_dvc(v, w, now, m);
		break;
	case VR_REJECT:
		on_reject(v, w, now, m);
		break;
	case VR_GONE:
		on_gone(v, w, now, m);
		break;
	default:
		release(w, m->snap);
	}
}

/* ---- timers and connections ----------------------------------------- */

static void suspect(struct vr *v, const char *fmt, ...)
{
	if (v->suspect)
		return;
	v->suspect = 1;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(v->suspect_why, sizeof(v->suspect_why), fmt, ap);
	va_end(ap);
}

/* The primary: a member to replace (-1: none), and why in buf. */
static int to_replace(const struct vr *v, const struct vr_world *w, double now, char *buf,
                      size_t len)
{
	if (w->leaving && v->n > 1) { /* a group of one has no one to hand on to */
		snprintf(buf, len, "rank %d exits", w->self);
		return w->self;
	}
	for (int i = 0; i < v->n; i++) {
		int r = v->members[i];
		if (r == w->self)
			continue;
		double last = v->last_ack[i] > v->since ? v->last_ack[i] : v->since;
		if (w->gone[r] == GONE_LEFT || w->gone[r] == GONE_FENCED) {
			snprintf(buf, len, "%s", why_of(w, r));
			return r;
		}
		if (w->gone[r] == GONE_LEAVING) {
			snprintf(buf, len, "rank %d said it exits", r);
			return r;
		}
		if (w->gone[r]) {
			if (why_of(w, r)[0])
				snprintf(buf, len, "%s", why_of(w, r));
			else
				snprintf(buf, len, "rank %d saw rank %d's connection break after it "
				         "was reached (it died or exited)", w->self, r);
			return r;
		}
		if (w->reached[r] && now - last >= w->suspect) {
			snprintf(buf, len, "rank %d heard nothing from rank %d for %.1f s "
			         "(HPCT_STORE_SUSPECT): it was paused, cut off or too slow",
			         w->self, r, now - last);
			return r;
		}
	}
	return -1;
}

double vr_tick(struct vr *v, struct vr_world *w, double now)
{
	double next = now + w->beat / 2;
	/* this member stalled itself (descheduled, paused): its silence, not
	 * theirs; it measures the others' from now on */
	if (v->ticked > 0 && now - v->ticked > w->suspect / 2)
		v->since = now;
	v->ticked = now;
	if (w->fenced || w->left) {
		if (v->status != VR_OUT) {
			v->status = VR_OUT;
			event(v, w, VR_EV_ROLE);
		}
		return NEVER;
	}
	int p = vr_primary_of(v), me = idx_of(v, w->self);
	char why[160];
	switch (v->status) {
	case VR_NORMAL:
		if (p == w->self) {
			for (int i = 0; i < v->n; i++)
				if (i != me && now - v->last_sent[i] >= w->beat)
					beat(v, w, i, now);
			int r;
			uint64_t c = v->commit;
			recommit(v, w); /* a member that left counts now (ghost) */
			if (v->commit != c)
				event(v, w, VR_EV_COMMIT);
			if (v->next_at && v->commit >= v->next_at)
				reconfigured(v, w, now);
			else if (!v->next_at && (r = to_replace(v, w, now, why, sizeof(why))) >= 0)
				reconfigure(v, w, now, r, why);
			break;
		}
		__attribute__((fallthrough)); /* a backup watches its primary */
	case VR_NOSTATE:
		if (v->status == VR_NOSTATE)
			need(v, w, now);
		if (p >= 0 && is_dead(w, p) && !v->suspect)
			suspect(v, "rank %d's connection broke after it was reached", p);
		if (p >= 0 && (v->heard > 0 || w->reached[p])) {
			double last = v->heard > v->since ? v->heard : v->since;
			if (now - last >= w->suspect)
				suspect(v, "nothing from rank %d for %.1f s (HPCT_STORE_SUSPECT)", p,
				        now - last);
		}
		if (v->data_cfg == v->cfg && free_to_join(v, w, now)) {
			if (v->wait_view > v->view)
				change(v, w, now, v->wait_view);
			else if (v->suspect)
				change(v, w, now, next_view(v, w, v->view));
		} else if (v->suspect && v->promise < next) {
			next = v->promise;
		}
		break;
	case VR_CHANGE: {
		int np = vr_primary_of(v);
		if (now - v->change_since >= w->change || (np >= 0 && is_dead(w, np))) {
			change(v, w, now, next_view(v, w, v->view));
		} else if (now - v->svc_at >= w->beat) {
			svc_all(v, w, now);
		}
		break;
	}
	case VR_OUT:
		return NEVER;
	}
	return next;
}

void vr_peer_down(struct vr *v, struct vr_world *w, double now, int rank, int dead)
{
	if (!dead || idx_of(v, rank) < 0)
		return;
	if (!w->gone[rank])
		w->gone[rank] = GONE_SUSPECT;
	vr_tick(v, w, now);
}

void vr_peer_up(struct vr *v, struct vr_world *w, double now, int rank)
{
	if (idx_of(v, rank) < 0 || w->fenced)
		return;
	if (v->status == VR_NORMAL && i_am_primary(v, w))
		send_data(v, w, rank, VR_STATE, now);
	else if (v->status == VR_CHANGE) {
		struct vr_msg m = base(v, w, VR_SVC);
		send(w, rank, &m);
		if (v->dvc_sent && rank == vr_primary_of(v)) {
			v->dvc_sent = 0;
			check_svc(v, w, now);
		}
	} else if (v->status == VR_NOSTATE && rank == vr_primary_of(v)) {
		v->need_at = 0;
		need(v, w, now);
	}
}

void vr_leaving(struct vr *v, struct vr_world *w, double now)
{
	w->leaving = 1;
	if (v->status == VR_OUT)
		return;
	struct vr_msg m = base(v, w, VR_GONE);
	m.flags = VR_F_LEAVING;
	snprintf(m.why, sizeof(m.why), "rank %d exits", w->self);
	for (int i = 0; i < v->n; i++)
		if (v->members[i] != w->self)
			send(w, v->members[i], &m);
	vr_tick(v, w, now);
}

void vr_leave(struct vr *v, struct vr_world *w)
{
	w->left = 1;
	if (v->status == VR_OUT)
		return;
	struct vr_msg m = base(v, w, VR_GONE);
	m.flags = VR_F_LEFT;
	snprintf(m.why, sizeof(m.why), "rank %d exits", w->self);
	for (int i = 0; i < v->n; i++)
		send(w, v->members[i], &m);
	v->status = VR_OUT;
	event(v, w, VR_EV_ROLE);
}

void vr_fence(struct vr_world *w, const char *why)
{
	if (w->fenced)
		return;
	w->fenced = 1;
	snprintf(w->fence_why, sizeof(w->fence_why), "%s", why);
	if (w->io.fenced)
		w->io.fenced(w->io.ctx, why);
}

const char *vr_status_name(enum vr_status s)
{
	static const char *const names[] = { "normal", "waiting for its data", "in a view change",
		                             "not a member" };
	return (unsigned)s < 4 ? names[s] : "?";
}

const char *vr_type_name(int type)
{
	static const char *const names[VR_TYPES] = {
		"?", "PREPARE", "ACK", "NEED", "STATE", "SVC", "DVC", "STARTVIEW", "NEWCFG",
		"REJECT", "GONE",
	};
	return type > 0 && type < VR_TYPES ? names[type] : "?";
}
