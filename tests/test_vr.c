/* The served store's replication protocol (bootstrap/store/vr.c) driven
 * deterministically: 5 simulated ranks, one group of 3 homes (the others
 * its replacements), a network of FIFO links that a seed's schedule cuts
 * and heals, ranks paused past the failure detector's timeout and
 * resumed, ranks killed; clients adding to a counter and reading it
 * through whichever rank they believe is the primary, with deadlines.
 * Every history is checked: acknowledged adds answer distinct values,
 * real-time order holds between every two completed operations, no
 * acknowledged add is lost (the final value), and what was read was
 * written.  The same schedules with the quorum or the fencing switched off
 * (the negative controls) must be caught. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/store/vr.h"

#define NODES   5
#define CLIENTS 6
#define MAXOPS  4000
#define MAXQ    4096

struct vr_snap {
	int64_t value;
};

struct qmsg {
	struct vr_msg m;
	unsigned char entry[16];
};

struct link {
	struct qmsg q[MAXQ];
	int head, n;
};

struct held {
	int on, client, write;
	uint64_t need;
	double asked;
	int64_t value;
	int op;
};

struct node {
	int id;
	struct vr_world w;
	struct vr v;
	int64_t value;
	int dead, paused, fenced;
	double paused_until;
	struct held held[CLIENTS];
};

enum { F_NONE, F_INFO, F_OK, F_FAIL };

struct op {
	int client, write, result;
	double invoke, done;
	int64_t value;
};

static struct sim {
	unsigned long long rng;
	double now;
	struct node nd[NODES];
	struct link link[NODES][NODES];
	int cut[NODES][NODES];
	struct op ops[MAXOPS];
	int nops;
	int busy[CLIENTS], target[CLIENTS];
	double deadline[CLIENTS];
	int unsafe, dropped;
} S;

static int trace;

static unsigned rnd(unsigned n)
{
	S.rng = S.rng * 6364136223846793005ull + 1442695040888963407ull;
	return (unsigned)((S.rng >> 33) % n);
}

/* ---- the layer above vr, for one node -------------------------------- */

static void io_send(void *ctx, int to, const struct vr_msg *m)
{
	struct node *a = ctx;
	struct link *l = &S.link[a->id][to];
	if (S.nd[to].dead || S.cut[a->id][to] || l->n == MAXQ) {
		S.dropped++;
		return;
	}
	struct qmsg *q = &l->q[(l->head + l->n++) % MAXQ];
	q->m = *m;
	q->m.snap = NULL;
	if (m->elen) {
		memcpy(q->entry, m->entry, m->elen);
		q->m.entry = q->entry;
	}
	if (m->type == VR_STATE || m->type == VR_DVC || m->type == VR_STARTVIEW ||
	    m->type == VR_NEWCFG) {
		q->m.snap = malloc(sizeof(struct vr_snap));
		q->m.snap->value = a->value;
	}
}

static void io_apply(void *ctx, uint32_t g, const void *entry, size_t len)
{
	struct node *a = ctx;
	(void)g;
	cr_assert_eq(len, 8);
	memcpy(&a->value, entry, 8);
}

static void io_install(void *ctx, uint32_t g, struct vr_snap *s)
{
	struct node *a = ctx;
	(void)g;
	a->value = s ? s->value : 0;
	free(s);
}

static void io_release(void *ctx, struct vr_snap *s)
{
	(void)ctx;
	free(s);
}

static void answer(struct node *a, int c, int result)
{
	struct held *h = &a->held[c];
	h->on = 0;
	if (!S.busy[c] || S.ops[h->op].done > 0 || S.ops[h->op].client != c ||
	    S.busy[c] != h->op + 1)
		return; /* the client gave up already */
	struct op *o = &S.ops[h->op];
	o->done = S.now;
	o->result = result;
	o->value = h->value;
	if (trace)
		fprintf(stderr, "%8.3f rank %d answers client %d: %s %s %lld\n", S.now, a->id, c,
		        o->write ? "add" : "read",
		        result == F_OK ? "ok" : result == F_INFO ? "info" : "fail",
		        (long long)h->value);
	S.busy[c] = 0;
	if (result != F_OK)
		S.target[c] = vr_primary_of(&a->v) >= 0 ? vr_primary_of(&a->v) : (int)rnd(NODES);
}

static void release_ready(struct node *a)
{
	for (int c = 0; c < CLIENTS; c++) {
		struct held *h = &a->held[c];
		if (h->on != 1) /* none, or a request a paused rank has not read yet */
			continue;
		if (!vr_primary(&a->v, &a->w))
			answer(a, c, h->write ? F_INFO : F_FAIL);
		else if (vr_ready(&a->v, &a->w, h->need, h->asked, h->write, S.now))
			answer(a, c, F_OK);
	}
}

static void io_event(void *ctx, uint32_t g, enum vr_event ev)
{
	(void)g, (void)ev;
	release_ready(ctx);
}

static void io_note(void *ctx, uint32_t g, const char *line)
{
	if (trace)
		fprintf(stderr, "%8.3f rank %d group %u: %s\n", S.now, ((struct node *)ctx)->id, g,
		        line);
}

static void io_fenced(void *ctx, const char *why)
{
	struct node *a = ctx;
	(void)why;
	a->fenced = 1;
}

/* ---- the schedule ---------------------------------------------------- */

static void setup(unsigned long long seed, int unsafe)
{
	for (int i = 0; i < NODES; i++) {
		vr_world_free(&S.nd[i].w);
		for (int j = 0; j < NODES; j++)
			while (S.link[i][j].n) {
				struct link *l = &S.link[i][j];
				free(l->q[l->head].m.snap);
				l->head = (l->head + 1) % MAXQ;
				l->n--;
			}
	}
	memset(&S, 0, sizeof(S));
	S.rng = seed * 2654435761ull + 1;
	S.now = 1.0;
	S.unsafe = unsafe;
	for (int i = 0; i < NODES; i++) {
		struct node *a = &S.nd[i];
		a->id = i;
		cr_assert_eq(vr_world_init(&a->w, i, NODES, 3, 0, NULL, NULL), 0);
		a->w.lease = getenv("VR_LEASE") ? atof(getenv("VR_LEASE")) : 1.0;
		a->w.suspect = getenv("VR_SUSPECT") ? atof(getenv("VR_SUSPECT")) : 2.0;
		a->w.beat = 0.25;
		a->w.change = 1.0;
		a->w.unsafe = unsafe;
		a->w.io = (struct vr_io){ .ctx = a, .send = io_send, .apply = io_apply,
			                  .install = io_install, .release = io_release,
			                  .event = io_event, .fenced = io_fenced,
			                  .note = io_note };
		for (int j = 0; j < NODES; j++)
			a->w.reached[j] = 1;
		vr_init(&a->v, &a->w, 0, S.now);
	}
	for (int c = 0; c < CLIENTS; c++)
		S.target[c] = 0;
}

static int in_members(const struct vr *v, int rank)
{
	for (int i = 0; i < v->n; i++)
		if (v->members[i] == rank)
			return 1;
	return 0;
}

static int awake(const struct node *a)
{
	return !a->dead && !a->paused;
}

/* A client's request read by node a now. */
static void request(struct node *a, int c)
{
	struct held *h = &a->held[c];
	struct op *o = &S.ops[S.busy[c] - 1];
 	if (h->on == 1)
		answer(a, c, h->write ? F_INFO : F_FAIL);
	*h = (struct held){ .on = 1, .client = c, .write = o->write, .asked = S.now,
		            .op = S.busy[c] - 1 };
	if (!vr_primary(&a->v, &a->w)) {
		answer(a, c, F_FAIL); /* a redirect: nothing happened */
		return;
	}
	if (o->write) {
		int64_t was = a->value;
		a->value++;
		if (vr_propose(&a->v, &a->w, S.now, &a->value, 8, &h->need) != 0) {
			a->value = was;
			answer(a, c, F_FAIL);
			return;
		}
	} else {
		h->need = a->v.opnum;
		vr_confirm(&a->v, &a->w, S.now, S.now);
	}
	h->value = a->value;
	release_ready(a);
}

static void deliver(int from, int to)
{
	struct link *l = &S.link[from][to];
	struct qmsg q = l->q[l->head];
	l->head = (l->head + 1) % MAXQ;
	l->n--;
	if (q.m.elen)
		q.m.entry = q.entry;
	struct node *a = &S.nd[to];
	vr_recv(&a->v, &a->w, S.now, &q.m);
	release_ready(a);
}

static void kill_node(int i)
{
	S.nd[i].dead = 1;
	for (int j = 0; j < NODES; j++)
		if (j != i && awake(&S.nd[j])) { /* its connections reset */
			vr_peer_down(&S.nd[j].v, &S.nd[j].w, S.now, i, 1);
			release_ready(&S.nd[j]);
		}
}

static void set_cut(int i, int on)
{
	for (int j = 0; j < NODES; j++) {
		if (j == i)
			continue;
		S.cut[i][j] = S.cut[j][i] = on;
		if (!on && !S.nd[i].dead && !S.nd[j].dead) { /* connections made again */
			vr_peer_up(&S.nd[i].v, &S.nd[i].w, S.now, j);
			vr_peer_up(&S.nd[j].v, &S.nd[j].w, S.now, i);
		}
		if (on) { /* what was on the wire is lost with the connection */
			for (int d = 0; d < 2; d++) {
				struct link *l = d ? &S.link[i][j] : &S.link[j][i];
				while (l->n) {
					free(l->q[l->head].m.snap);
					l->head = (l->head + 1) % MAXQ;
					l->n--;
					S.dropped++;
				}
			}
		}
	}
}

/* One run: `secs` of virtual time under the seed's faults, then a quiet
 * end in which every live unfenced rank catches up, and a final read. */
static void run(unsigned long long seed, int unsafe, double secs, int faults)
{
	setup(seed, unsafe);
	double fault_at = S.now + 2.0 + rnd(30) / 10.0, heal_at = -1;
	int kind = -1, victim = -1, kills = 0;
	double end = S.now + secs;
	while (S.now < end + 8.0) {
		S.now += 0.001 * (1 + rnd(20));
		int quiet = S.now >= end;
		if (faults && !quiet && heal_at < 0 && S.now >= fault_at) {
			kind = (int)rnd(kills < 2 ? 5 : 3);
			victim = (int)rnd(NODES);
			while (S.nd[victim].dead)
				victim = (victim + 1) % NODES;
			if (trace)
				fprintf(stderr, "%8.3f fault %d on rank %d\n", S.now, kind, victim);
			if (kind == 0) { /* pause, past the detector's timeout or not */
				S.nd[victim].paused = 1;
				heal_at = S.now + 0.5 + rnd(60) / 10.0;
			} else if (kind == 1 || kind == 2) { /* cut off */
				set_cut(victim, 1);
				heal_at = S.now + 0.5 + rnd(60) / 10.0;
			} else if (kind == 4) { /* exits: asks to be replaced, goes a while later */
				vr_leaving(&S.nd[victim].v, &S.nd[victim].w, S.now);
				kills++;
				heal_at = S.now + 0.02 + rnd(20) / 10.0;
			} else { /* killed */
				kill_node(victim);
				kills++;
				heal_at = S.now;
			}
		}
		if (heal_at >= 0 && (S.now >= heal_at || quiet)) {
			if (kind == 0)
				S.nd[victim].paused = 0;
			else if (kind == 1 || kind == 2)
				set_cut(victim, 0);
			else if (kind == 4) {
				vr_leave(&S.nd[victim].v, &S.nd[victim].w);
				kill_node(victim);
			}
			heal_at = -1;
			fault_at = S.now + 0.5 + rnd(40) / 10.0;
		}
		/* deliver a few messages, on random links, each in order */
		for (int k = 0; k < 6; k++) {
			int from = (int)rnd(NODES), to = (int)rnd(NODES);
			if (S.link[from][to].n && awake(&S.nd[to]))
				deliver(from, to);
		}
		for (int i = 0; i < NODES; i++)
			if (awake(&S.nd[i]) && rnd(4) == 0) {
				vr_tick(&S.nd[i].v, &S.nd[i].w, S.now);
				release_ready(&S.nd[i]);
			}
		for (int c = 0; c < CLIENTS; c++) {
			if (S.busy[c] && S.now >= S.deadline[c]) { /* it gives up */
				struct op *o = &S.ops[S.busy[c] - 1];
				o->done = S.now;
				o->result = o->write ? F_INFO : F_FAIL;
				S.busy[c] = 0;
				S.target[c] = (int)rnd(NODES);
			}
			if (S.busy[c] || quiet || S.nops == MAXOPS || rnd(10))
				continue;
			struct op *o = &S.ops[S.nops++];
			*o = (struct op){ .client = c, .write = rnd(2), .invoke = S.now };
			S.busy[c] = S.nops;
			S.deadline[c] = S.now + 3.0;
			struct node *a = &S.nd[S.target[c]];
			if (a->dead) {
				o->done = S.now;
				o->result = F_FAIL;
				S.busy[c] = 0;
				S.target[c] = (int)rnd(NODES);
			} else if (!a->paused) {
				request(a, c);
			} else {
				a->held[c] = (struct held){ .on = 2, .client = c, .op = S.nops - 1 };
			}
		}
		for (int i = 0; i < NODES; i++) /* a resumed rank reads what waited */
			for (int c = 0; awake(&S.nd[i]) && c < CLIENTS; c++)
				if (S.nd[i].held[c].on == 2 && S.busy[c] == S.nd[i].held[c].op + 1) {
					S.nd[i].held[c].on = 0;
					request(&S.nd[i], c);
				}
	}
}

/* ---- the check ------------------------------------------------------- */

/* 0 when the history is linearizable as a counter of +1 adds; else a line
 * in why.  An add's value is its place in the order; a read of r sits
 * after the r-th add. */
static int check(char *why, size_t len)
{
	int64_t max_seen = 0, acked = 0, info = 0, final = -1;
	for (int i = 0; i < S.nops; i++) {
		const struct op *a = &S.ops[i];
		if (a->result == F_OK) {
			acked += a->write;
			if (a->value > max_seen)
				max_seen = a->value;
		}
		info += a->write && (a->result == F_INFO || a->result == F_NONE);
		if (a->result != F_OK)
			continue;
		for (int j = 0; j < S.nops; j++) {
			const struct op *b = &S.ops[j];
			if (j == i || b->result != F_OK)
				continue;
			if (a->write && b->write && a->value == b->value) {
				snprintf(why, len, "two adds answered %lld (at %.3f and %.3f)",
				         (long long)a->value, a->invoke, b->invoke);
				return 1;
			}
			if (a->done < b->invoke) { /* a before b in real time */
				int bad = a->write && b->write   ? a->value >= b->value
				          : a->write             ? a->value > b->value
				          : b->write             ? a->value >= b->value
				                                 : a->value > b->value;
				if (bad) {
					snprintf(why, len,
					         "%s [%.3f, %.3f] = %lld ended before %s [%.3f, %.3f] = "
					         "%lld began",
					         a->write ? "add" : "read", a->invoke, a->done,
					         (long long)a->value, b->write ? "add" : "read", b->invoke,
					         b->done, (long long)b->value);
					return 1;
				}
			}
		}
	}
	if (max_seen > acked + info) {
		snprintf(why, len, "a value %lld seen, but only %lld adds made (%lld unknown)",
		         (long long)max_seen, (long long)acked, (long long)info);
		return 1;
	}
	/* the final value: every live, unfenced primary's committed data */
	for (int i = 0; i < NODES; i++) {
		struct node *a = &S.nd[i];
		if (awake(a) && vr_primary(&a->v, &a->w) && a->v.commit == a->v.opnum)
			final = a->value;
	}
	if (final >= 0 && final < acked) {
		snprintf(why, len, "final value %lld, but %lld adds were acknowledged",
		         (long long)final, (long long)acked);
		return 1;
	}
	return 0;
}

static int acked_ops(void)
{
	int n = 0;
	for (int i = 0; i < S.nops; i++)
		n += S.ops[i].result == F_OK;
	return n;
}

TestSuite(vr, .timeout = 120);

Test(vr, with_no_fault_every_operation_is_answered_in_order)
{
	char why[300] = "";
	run(1, 0, 20.0, 0);
	cr_assert_eq(check(why, sizeof(why)), 0, "%s", why);
	cr_assert_gt(acked_ops(), S.nops * 9 / 10, "%d of %d answered", acked_ops(), S.nops);
}

Test(vr, under_pauses_cuts_and_kills_every_history_is_linearizable)
{
	int answered = 0, total = 0;
	unsigned long long only = getenv("VR_SEED") ? strtoull(getenv("VR_SEED"), NULL, 10) : 0;
	trace = only != 0;
	unsigned long long seeds = getenv("VR_SEEDS") ? strtoull(getenv("VR_SEEDS"), NULL, 10) : 300;
	for (unsigned long long seed = only ? only : 1; seed <= (only ? only : seeds); seed++) {
		char why[300] = "";
		run(seed, 0, 30.0, 1);
		cr_assert_eq(check(why, sizeof(why)), 0, "seed %llu: %s", seed, why);
		answered += acked_ops();
		total += S.nops;
	}
	if (getenv("VR_SEEDS"))
		fprintf(stderr, "%d of %d operations answered\n", answered, total);
	/* and the store stays of use: most operations are answered */
	cr_assert_gt(answered, total / 2, "%d of %d operations answered", answered, total);
}

Test(vr, a_paused_primary_is_replaced_then_fenced_and_answers_nothing_stale)
{
	run(7, 0, 2.0, 0);
	S.nd[0].paused = 1; /* the primary of group 0 */
	double until = S.now + 6.0;
	while (S.now < until) {
		S.now += 0.005;
		for (int from = 0; from < NODES; from++)
			for (int to = 1; to < NODES; to++)
				while (S.link[from][to].n)
					deliver(from, to);
		for (int i = 1; i < NODES; i++)
			vr_tick(&S.nd[i].v, &S.nd[i].w, S.now);
	}
	int primary = -1;
	for (int i = 1; i < NODES; i++)
		if (vr_primary(&S.nd[i].v, &S.nd[i].w))
			primary = i;
	cr_assert_geq(primary, 1, "no new primary while rank 0 is paused");
	cr_assert_lt(vr_quorum(&S.nd[primary].w, S.nd[primary].v.n), 3);
	cr_assert(!in_members(&S.nd[primary].v, 0), "rank 0 still a member after 6 s paused");
	/* rank 0 wakes: its lease is over, so a read waits; the REJECT fences it */
	S.nd[0].paused = 0;
	cr_assert(vr_primary(&S.nd[0].v, &S.nd[0].w));
	cr_assert(!vr_ready(&S.nd[0].v, &S.nd[0].w, S.nd[0].v.opnum, S.now, 0, S.now),
	          "a paused primary answered a read from its old lease");
	vr_confirm(&S.nd[0].v, &S.nd[0].w, S.now, S.now);
	for (int k = 0; k < 50 && !S.nd[0].fenced; k++) {
		S.now += 0.01;
		for (int from = 0; from < NODES; from++)
			for (int to = 0; to < NODES; to++)
				while (S.link[from][to].n)
					deliver(from, to);
	}
	cr_assert(S.nd[0].fenced, "rank 0 was not told it was counted gone");
	cr_assert(strstr(S.nd[0].w.fence_why, "counted this rank gone"), "%s", S.nd[0].w.fence_why);
	cr_assert(!vr_primary(&S.nd[0].v, &S.nd[0].w));
}

Test(vr, ranks_that_exit_one_after_another_leave_every_add_with_the_last)
{
	char why[300] = "";
	run(3, 0, 3.0, 0);
	trace = getenv("VR_TRACE") != NULL;
	for (int gone = 0; gone < NODES - 1; gone++) {
		int r = gone + 1; /* all but rank 0, each asking to go while the
		                   * one before may still be being replaced */
		vr_leaving(&S.nd[r].v, &S.nd[r].w, S.now);
		double until = S.now + 0.3, left = 0;
		while (S.now < until || !left) {
			if (!left && (S.nd[r].v.status == VR_OUT || S.now >= until)) {
				vr_leave(&S.nd[r].v, &S.nd[r].w);
				kill_node(r);
				left = 1;
				until = S.now + 0.05 * (1 + gone % 3);
			}
			S.now += 0.005;
			for (int from = 0; from < NODES; from++)
				for (int to = 0; to < NODES; to++)
					while (S.link[from][to].n && awake(&S.nd[to]))
						deliver(from, to);
			for (int i = 0; i < NODES; i++)
				if (awake(&S.nd[i]))
					vr_tick(&S.nd[i].v, &S.nd[i].w, S.now);
		}
	}
	struct node *last = &S.nd[0];
	cr_assert(vr_primary(&last->v, &last->w), "the last rank is not its group's primary: %s",
	          vr_status_name(last->v.status));
	cr_assert_eq(last->v.n, 1, "members: %d %d %d (cfg %u)", last->v.members[0],
	             last->v.members[1], last->v.members[2], last->v.cfg);
	cr_assert_eq(check(why, sizeof(why)), 0, "%s", why);
	int64_t acked = 0;
	for (int i = 0; i < S.nops; i++)
		acked += S.ops[i].result == F_OK && S.ops[i].write;
	cr_assert_geq(last->value, acked, "%lld adds acknowledged, %lld kept", (long long)acked,
	              (long long)last->value);
}

/* The negative controls: the same schedules must show violations. */
static int violations(int unsafe)
{
	int found = 0;
	for (unsigned long long seed = 1; seed <= 300; seed++) {
		char why[300];
		run(seed, unsafe, 30.0, 1);
		found += check(why, sizeof(why)) != 0;
	}
	if (getenv("VR_SEEDS"))
		fprintf(stderr, "unsafe %d: %d of 300 runs not linearizable\n", unsafe, found);
	return found;
}

Test(vr, without_the_quorum_the_check_finds_violations)
{
	cr_assert_gt(violations(VR_UNSAFE_QUORUM), 0);
}

Test(vr, without_fencing_the_check_finds_violations)
{
	cr_assert_gt(violations(VR_UNSAFE_FENCE), 0);
}
