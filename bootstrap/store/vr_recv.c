/* The replication protocol's messages, timers and connections (vr.h):
 * what a member does with each message, its ticks, and its peers' ups and
 * downs, through vr.c's state changes. */
#include "bootstrap/store/vr_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- messages ------------------------------------------------------- */

static void reject(struct vr *v, struct vr_world *w, double now, int to)
{
	int i = vr__idx_of(v, to), slot = i >= 0 ? i : VR_MAX;
	if (now - v->rejected_at[slot] < w->beat)
		return;
	v->rejected_at[slot] = now;
	struct vr_msg m = vr__base(v, w, VR_REJECT);
	vr__with_members(&m, v);
	m.status = (uint8_t)v->status;
	if (w->fenced || w->left) {
		m.type = VR_GONE;
		m.flags = w->left ? VR_F_LEFT : 0;
		snprintf(m.why, sizeof(m.why), "%.150s", w->fence_why);
	} else if (i < 0) {
		m.flags = VR_F_REMOVED | (vr__exits(w, to) ? VR_F_LEFT : 0);
		snprintf(m.why, sizeof(m.why), "%s", vr__why_of(w, to));
	}
	vr__send(w, to, &m);
}

static void ack(struct vr *v, struct vr_world *w, uint64_t ts)
{
	struct vr_msg m = vr__base(v, w, VR_ACK);
	m.ts = ts;
	m.opnum = v->opnum;
	vr__send(w, vr_primary_of(v), &m);
}

static void need(struct vr *v, struct vr_world *w, double now)
{
	if (now - v->need_at < w->beat)
		return;
	v->need_at = now;
	struct vr_msg m = vr__base(v, w, VR_NEED);
	vr__send(w, vr_primary_of(v), &m);
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
		vr__note(v, w, "is no primary any more: rank %d is at configuration %u, view %u",
		     m->from, m->cfg, m->view);
	vr__event(v, w, VR_EV_ROLE);
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
	if (vr__i_am_primary(v, w)) { /* NEWCFG made it the primary of the new one */
		vr__lead(v, now);
		v->commit = m->opnum;
	} else {
		heard(v, w, now);
		ack(v, w, m->from == vr_primary_of(v) ? m->ts : 0);
	}
	if (was != VR_NORMAL || m->type != VR_STATE)
		vr__event(v, w, VR_EV_ROLE);
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
	int i = vr__idx_of(v, m->from);
	if (order(v, m) != 0 || i < 0 || !vr_primary(v, w))
		return;
	uint64_t c = v->commit;
	double was = vr__confirmed(v, w, now);
	if (m->opnum > v->acked[i])
		v->acked[i] = m->opnum > v->opnum ? v->opnum : m->opnum;
	double ts = (double)m->ts / 1e9;
	if (m->ts && ts > v->echoed[i])
		v->echoed[i] = ts;
	v->last_ack[i] = now;
	vr__recommit(v, w);
	if (v->commit != c || vr__confirmed(v, w, now) != was)
		vr__event(v, w, VR_EV_COMMIT);
	if (v->next_at && v->commit >= v->next_at)
		vr__reconfigured(v, w, now);
}

/* This member was left out of a later configuration. */
static void removed(struct vr *v, struct vr_world *w, const struct vr_msg *m)
{
	v->status = VR_OUT;
	vr__event(v, w, VR_EV_DROP);
	vr__event(v, w, VR_EV_ROLE);
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
	    !vr__is_dead(w, m->members[m->view % (uint32_t)m->n]) && !(m->flags & VR_F_REMOVED)) {
		vr__note(v, w, "view change to view %u abandoned: view %u goes on (rank %d says)",
		     v->view, m->view, m->from);
		behind(v, w, now, m);
		need(v, w, now);
		return;
	}
	if (order(v, m) < 0 || (order(v, m) == 0 && m->status != VR_CHANGE))
		return;
	if (m->flags & VR_F_REMOVED) {
		if (!vr__in_list(m->members, m->n, w->self) && v->status != VR_OUT && m->cfg > v->cfg)
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
	if (vr__in_list(m->members, m->n, w->self) && order(v, m) > 0) {
		behind(v, w, now, m);
		need(v, w, now);
	}
}

static void on_svc(struct vr *v, struct vr_world *w, double now, const struct vr_msg *m)
{
	int i = vr__idx_of(v, m->from), o = order(v, m);
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
			vr__check_svc(v, w, now);
		}
		vr__check_svc(v, w, now);
		return;
	}
	if (!vr__free_to_join(v, w, now)) { /* its promise stands: later (vr_tick) */
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
	vr__change(v, w, now, m->view);
	v->svc |= BIT(i);
	vr__check_svc(v, w, now);
}

static void on_dvc(struct vr *v, struct vr_world *w, double now, const struct vr_msg *m)
{
	int i = vr__idx_of(v, m->from);
	if (i < 0 || m->cfg != v->cfg) {
		vr__release(w, m->snap);
		return;
	}
	if (order(v, m) > 0) { /* a DVC is an SVC too */
		struct vr_msg s = *m;
		s.type = VR_SVC;
		s.snap = NULL;
		on_svc(v, w, now, &s);
	}
	if (order(v, m) != 0 || v->status != VR_CHANGE || !vr__i_am_primary(v, w)) {
		vr__release(w, m->snap);
		return;
	}
	v->svc |= BIT(i);
	v->dvc |= BIT(i);
	int better = m->log_view > v->best_lv || (m->log_view == v->best_lv && m->opnum > v->best_op);
	if (better) {
		vr__release(w, v->best_snap);
		v->best_snap = m->snap;
		v->best = i;
		v->best_lv = m->log_view;
		v->best_op = m->opnum;
		v->best_next_at = m->next_at;
		v->best_next_n = m->next_n;
		memcpy(v->best_next, m->next, sizeof(v->best_next));
	} else {
		vr__release(w, m->snap);
	}
	vr__check_svc(v, w, now);
	vr__check_dvc(v, w, now);
}

static void on_data(struct vr *v, struct vr_world *w, double now, const struct vr_msg *m)
{
	int o = order(v, m);
	int from_primary = m->n > 0 && m->members[m->view % (uint32_t)m->n] == m->from;
	if (m->type == VR_NEWCFG)
		from_primary = 1; /* the old configuration's primary hands it over */
	if (!vr__in_list(m->members, m->n, w->self) || !from_primary || o < 0 ||
	    (o == 0 && v->status == VR_NORMAL && m->type == VR_NEWCFG)) {
		vr__release(w, m->snap);
		if (o < 0)
			reject(v, w, now, m->from);
		return;
	}
	if (m->type == VR_STATE && o == 0 && v->status == VR_CHANGE) {
		vr__release(w, m->snap); /* of the view this member left */
		return;
	}
	vr__release(w, v->best_snap);
	v->best_snap = NULL;
	take_data(v, w, now, m);
}

static void on_gone(struct vr *v, struct vr_world *w, double now, const struct vr_msg *m)
{
	int left = m->flags & VR_F_LEFT;
	char why[160];
	if (m->flags & VR_F_LEAVING) { /* it serves on until it is replaced */
		snprintf(why, sizeof(why), "rank %d said it exits", m->from);
		vr__gone_why(w, m->from, GONE_LEAVING, why);
		vr_tick(v, w, now);
		return;
	}
	if (left)
		snprintf(why, sizeof(why), "rank %d said it exits", m->from);
	else
		snprintf(why, sizeof(why), "rank %d said it is fenced (%.100s)", m->from, m->why);
	vr__gone_why(w, m->from, left ? GONE_LEFT : GONE_FENCED, why);
	if (m->from == vr_primary_of(v) && v->status != VR_CHANGE && !vr__i_am_primary(v, w)) {
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
		vr__release(w, m->snap);
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
		if (order(v, m) == 0 && v->status == VR_NORMAL && vr__i_am_primary(v, w) &&
		    vr__idx_of(v, m->from) >= 0)
			vr__send_data(v, w, m->from, VR_STATE, now);
		else if (order(v, m) < 0 || vr__idx_of(v, m->from) < 0)
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
		vr__release(w, m->snap);
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
			snprintf(buf, len, "%s", vr__why_of(w, r));
			return r;
		}
		if (w->gone[r] == GONE_LEAVING) {
			snprintf(buf, len, "rank %d said it exits", r);
			return r;
		}
		if (w->gone[r]) {
			if (vr__why_of(w, r)[0])
				snprintf(buf, len, "%s", vr__why_of(w, r));
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
			vr__event(v, w, VR_EV_ROLE);
		}
		return NEVER;
	}
	int p = vr_primary_of(v), me = vr__idx_of(v, w->self);
	char why[160];
	switch (v->status) {
	case VR_NORMAL:
		if (p == w->self) {
			for (int i = 0; i < v->n; i++)
				if (i != me && now - v->last_sent[i] >= w->beat)
					vr__beat(v, w, i, now);
			int r;
			uint64_t c = v->commit;
			vr__recommit(v, w); /* a member that left counts now (ghost) */
			if (v->commit != c)
				vr__event(v, w, VR_EV_COMMIT);
			if (v->next_at && v->commit >= v->next_at)
				vr__reconfigured(v, w, now);
			else if (!v->next_at && (r = to_replace(v, w, now, why, sizeof(why))) >= 0)
				vr__reconfigure(v, w, now, r, why);
			break;
		}
		__attribute__((fallthrough)); /* a backup watches its primary */
	case VR_NOSTATE:
		if (v->status == VR_NOSTATE)
			need(v, w, now);
		if (p >= 0 && vr__is_dead(w, p) && !v->suspect)
			suspect(v, "rank %d's connection broke after it was reached", p);
		if (p >= 0 && (v->heard > 0 || w->reached[p])) {
			double last = v->heard > v->since ? v->heard : v->since;
			if (now - last >= w->suspect)
				suspect(v, "nothing from rank %d for %.1f s (HPCT_STORE_SUSPECT)", p,
				        now - last);
		}
		if (v->data_cfg == v->cfg && vr__free_to_join(v, w, now)) {
			if (v->wait_view > v->view)
				vr__change(v, w, now, v->wait_view);
			else if (v->suspect)
				vr__change(v, w, now, vr__next_view(v, w, v->view));
		} else if (v->suspect && v->promise < next) {
			next = v->promise;
		}
		break;
	case VR_CHANGE: {
		int np = vr_primary_of(v);
		if (now - v->change_since >= w->change || (np >= 0 && vr__is_dead(w, np))) {
			vr__change(v, w, now, vr__next_view(v, w, v->view));
		} else if (now - v->svc_at >= w->beat) {
			vr__svc_all(v, w, now);
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
	if (!dead || vr__idx_of(v, rank) < 0)
		return;
	if (!w->gone[rank])
		w->gone[rank] = GONE_SUSPECT;
	vr_tick(v, w, now);
}

void vr_peer_up(struct vr *v, struct vr_world *w, double now, int rank)
{
	if (vr__idx_of(v, rank) < 0 || w->fenced)
		return;
	if (v->status == VR_NORMAL && vr__i_am_primary(v, w))
		vr__send_data(v, w, rank, VR_STATE, now);
	else if (v->status == VR_CHANGE) {
		struct vr_msg m = vr__base(v, w, VR_SVC);
		vr__send(w, rank, &m);
		if (v->dvc_sent && rank == vr_primary_of(v)) {
			v->dvc_sent = 0;
			vr__check_svc(v, w, now);
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
	struct vr_msg m = vr__base(v, w, VR_GONE);
	m.flags = VR_F_LEAVING;
	snprintf(m.why, sizeof(m.why), "rank %d exits", w->self);
	for (int i = 0; i < v->n; i++)
		if (v->members[i] != w->self)
			vr__send(w, v->members[i], &m);
	vr_tick(v, w, now);
}

void vr_leave(struct vr *v, struct vr_world *w)
{
	w->left = 1;
	if (v->status == VR_OUT)
		return;
	struct vr_msg m = vr__base(v, w, VR_GONE);
	m.flags = VR_F_LEFT;
	snprintf(m.why, sizeof(m.why), "rank %d exits", w->self);
	for (int i = 0; i < v->n; i++)
		vr__send(w, v->members[i], &m);
	v->status = VR_OUT;
	vr__event(v, w, VR_EV_ROLE);
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
