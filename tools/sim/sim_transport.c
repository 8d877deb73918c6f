/* hpct-bench-sim's transport: the table of functions hpct's engine drives
 * (transport/transport.h), over simulated connections, and the same
 * connections as plain calls for the modelled actors (sim_roots.c).  Every
 * send costs the sender the model's CPU and reaches the peer after the
 * latency and its bytes' time, in order; a connect to an actor not
 * listening yet is refused.
 *
 * Bandwidth is a node's, not a connection's: the bytes every actor of a
 * node sends to other nodes go out through one NIC, one message after the
 * other, and the bytes a node receives come in through it the same way.
 * Between actors of one node (loopback) a message takes only its own
 * stream's time. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/sim/sim.h"

/* when each node's NIC is free again, out and in, and the bytes it carried */
static double *egress_free, *ingress_free, *nic_bytes;
static int net_nodes;
long sim_engine_events;

/* The engine's own work for one event, beyond the transport's. */
static void engine_event(void)
{
	sim_cpu(sim_M.c_engine);
	sim_engine_events++;
}

void sim_net_reset(int nodes)
{
	free(egress_free);
	free(ingress_free);
	free(nic_bytes);
	egress_free = ingress_free = nic_bytes = NULL;
	net_nodes = nodes;
	sim_engine_events = 0;
	if (nodes <= 0)
		return;
	egress_free = calloc((size_t)nodes, sizeof(double));
	ingress_free = calloc((size_t)nodes, sizeof(double));
	nic_bytes = calloc(2 * (size_t)nodes, sizeof(double));
	if (!egress_free || !ingress_free || !nic_bytes) {
		fprintf(stderr, "hpct-bench-sim: no memory for %d nodes\n", nodes);
		exit(1);
	}
}

/* When a message of len bytes sent now by actor `from` is all at `to`. */
static double arrival(int from, int to, size_t len)
{
	double bytes = (double)len / sim_M.bw;
	int a = sim_node_of(from), b = sim_node_of(to);
	if (a == b || a >= net_nodes || b >= net_nodes)
		return sim_now + sim_M.lat + bytes;
	/* out through a's NIC after what it is sending already, then in
	 * through b's after what it is receiving already */
	double out_done = (egress_free[a] > sim_now ? egress_free[a] : sim_now) + bytes;
	egress_free[a] = out_done;
	nic_bytes[2 * a] += (double)len;
	nic_bytes[2 * b + 1] += (double)len;
	double in_from = out_done - bytes + sim_M.lat;
	double in_done = (ingress_free[b] > in_from ? ingress_free[b] : in_from) + bytes;
	ingress_free[b] = in_done;
	return in_done;
}

double sim_net_busiest(void)
{
	double most = 0;
	for (int i = 0; i < 2 * net_nodes; i++)
		if (nic_bytes[i] > most)
			most = nic_bytes[i];
	return most;
}

static void deliver(struct srank *to, double t, enum hpct_tevent_type type, struct sconn *c,
                    int err, const void *data, size_t len, size_t wire_len)
{
	struct tev *v = malloc(sizeof(*v) + len);
	if (!v) {
		fprintf(stderr, "hpct-bench-sim: out of memory for a message\n");
		exit(1);
	}
	v->next = NULL;
	v->type = type;
	v->conn = c;
	v->err = err;
	v->len = len;
	v->wire_len = wire_len;
	if (len)
		memcpy(v->data, data, len);
	sim_push(t, EV_DELIVER, to->id, 0, v);
}

static int s_create(void **ctx_out)
{
	struct sctx *x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	x->rank = sim_cur;
	sim_cur->tctx = x;
	*ctx_out = x;
	return 0;
}

static void s_destroy(void *ctx)
{
	struct sctx *x = ctx;
	x->rank->tctx = NULL;
	free(x);
}

static int s_listen(void *ctx, const struct sockaddr *addr, socklen_t len)
{
	(void)addr;
	(void)len;
	((struct sctx *)ctx)->listening = 1;
	return 0;
}

void sim_listen(struct srank *r)
{
	if (!r->tctx) {
		r->tctx = calloc(1, sizeof(*r->tctx));
		if (!r->tctx) {
			fprintf(stderr, "hpct-bench-sim: out of memory for actor %d\n", r->id);
			exit(1);
		}
		r->tctx->rank = r;
	}
	r->tctx->listening = 1;
}

static int rank_of_addr(const struct sockaddr *addr)
{
	return (int)ntohl(((const struct sockaddr_in *)addr)->sin_addr.s_addr);
}

static struct sconn *new_conn(struct srank *owner)
{
	struct sconn *c = calloc(1, sizeof(*c));
	if (!c) {
		fprintf(stderr, "hpct-bench-sim: out of memory for a connection\n");
		exit(1);
	}
	c->owner = owner;
	c->open = 1;
	c->who = -1;
	c->max_msg = HPCT_TRANSPORT_MAX_MSG;
	c->all_next = sim_conns;
	sim_conns = c;
	return c;
}

/* A connection from r to actor `to`: accepted there, or refused. */
static struct sconn *dial(struct srank *r, int to)
{
	sim_cpu(sim_M.c_conn);
	struct sconn *c = new_conn(r);
	struct srank *t = &sim_ranks[to];
	if (t->state == R_DONE || !t->tctx || !t->tctx->listening) {
		deliver(r, sim_now + 2 * sim_M.lat, HPCT_TEV_CONNECT_FAILED, c, -ECONNREFUSED, NULL,
		        0, 0);
	} else {
		struct sconn *s = new_conn(t);
		c->peer = s;
		s->peer = c;
		s->who = r->id;
		c->who = to;
		deliver(t, sim_now + sim_M.lat, HPCT_TEV_ACCEPTED, s, 0, NULL, 0, 0);
		deliver(r, sim_now + 2 * sim_M.lat, HPCT_TEV_CONNECTED, c, 0, NULL, 0, 0);
		c->last_at = sim_now + sim_M.lat;
	}
	return c;
}

static int s_connect(void *ctx, const struct sockaddr *addr, socklen_t len, void *user,
                     struct hpct_tconn **conn_out)
{
	(void)len;
	struct sctx *x = ctx;
	int to = rank_of_addr(addr);
	if (to < 0 || to >= nactors_sim)
		return -EHOSTUNREACH;
	engine_event();
	struct sconn *c = dial(x->rank, to);
	c->base.user = user;
	*conn_out = &c->base;
	return 0;
}

struct sconn *sim_dial(struct srank *r, int to)
{
	return dial(r, to);
}

/* A message on c of wire_len bytes, the first len of them data. */
static void put(struct sconn *c, const void *data, size_t len, size_t wire_len)
{
	sim_cpu(sim_M.c_send);
	c->owner->tx++;
	if (!c->peer || !c->peer->open)
		return; /* on its way to nobody, as over TCP */
	double t = arrival(c->owner->id, c->peer->owner->id, wire_len);
	if (t <= c->last_at)
		t = c->last_at;
	c->last_at = t;
	deliver(c->peer->owner, t, HPCT_TEV_MESSAGE, c->peer, 0, data, len, wire_len);
}

static int s_send(struct hpct_tconn *conn, const void *buf, size_t len)
{
	if (len > HPCT_TRANSPORT_MAX_MSG)
		return -EMSGSIZE;
	engine_event();
	put((struct sconn *)conn, buf, len, len);
	return 0;
}

void sim_put(struct sconn *c, const void *hdr, size_t hdrlen, size_t wire_len)
{
	put(c, hdr, hdrlen, wire_len > hdrlen ? wire_len : hdrlen);
}

static void s_set_max_msg(struct hpct_tconn *conn, size_t max)
{
	((struct sconn *)conn)->max_msg = max;
}

static size_t s_pending(struct hpct_tconn *conn)
{
	(void)conn;
	return 0;
}

static size_t s_backlog(void *ctx)
{
	(void)ctx;
	return 0;
}

static void s_close(struct hpct_tconn *conn)
{
	struct sconn *c = (struct sconn *)conn;
	if (!c->open)
		return;
	c->open = 0;
	/* after what it sent, as TCP's FIN comes after the data */
	double t = sim_now + sim_M.lat > c->last_at ? sim_now + sim_M.lat : c->last_at;
	if (c->peer && c->peer->open)
		deliver(c->peer->owner, t, HPCT_TEV_CLOSED, c->peer, 0, NULL, 0, 0);
}

void sim_hangup(struct sconn *c)
{
	s_close(&c->base);
}

static void s_peer_name(struct hpct_tconn *conn, char *buf, size_t len)
{
	struct sconn *c = (struct sconn *)conn;
	snprintf(buf, len, "sim rank %d", c->peer ? c->peer->owner->id : -1);
}

/* The actor's next event off its inbox, with what taking it costs (a
 * message's receive, an accept), or NULL when there is none.  Nothing
 * reaches a connection closed on this side. */
static struct tev *take(struct srank *r)
{
	while (r->inbox) {
		struct tev *v = r->inbox;
		r->inbox = v->next;
		if (!r->inbox)
			r->inbox_tail = NULL;
		struct sconn *c = v->conn;
		if (!c) { /* the launcher's pipe */
			sim_cpu(sim_M.c_recv);
			r->rx++;
			return v;
		}
		if (!c->open) {
			free(v);
			continue;
		}
		if (v->type == HPCT_TEV_MESSAGE && v->len > c->max_msg) {
			v->type = HPCT_TEV_CLOSED;
			v->err = HPCT_EPROTO;
		}
		if (v->type == HPCT_TEV_MESSAGE) {
			sim_cpu(sim_M.c_recv);
			r->rx++;
		} else if (v->type == HPCT_TEV_ACCEPTED) {
			sim_cpu(sim_M.c_conn);
			r->accepted++;
		} else if (v->type == HPCT_TEV_CONNECTED) {
			r->opened++;
		}
		if (v->type == HPCT_TEV_CLOSED || v->type == HPCT_TEV_CONNECT_FAILED) {
			if (v->type == HPCT_TEV_CLOSED && c->peer && c->peer->open)
				s_close(&c->base);
			c->open = 0;
		}
		return v;
	}
	return NULL;
}

static int s_progress(void *ctx, int timeout_ms, hpct_tevent_cb cb, void *arg)
{
	struct srank *r = ((struct sctx *)ctx)->rank;
	if (!r->inbox && timeout_ms != 0)
		sim_block(r, timeout_ms);
	int n = 0;
	struct tev *v;
	while ((v = take(r))) {
		engine_event();
		struct hpct_tevent ev = { .type = v->type, .conn = &v->conn->base, .err = v->err };
		if (ev.type == HPCT_TEV_MESSAGE) {
			ev.data = v->data;
			ev.len = v->len;
		}
		cb(arg, &ev);
		n++;
		free(v); /* the ends the engine frees in the callback are not touched again */
	}
	return n;
}

struct tev *sim_next(struct srank *r, int timeout_ms)
{
	double until = timeout_ms < 0 ? -1 : sim_now + timeout_ms / 1000.0;
	for (;;) {
		struct tev *v = take(r);
		if (v)
			return v;
		if (until >= 0 && sim_now >= until)
			return NULL;
		int left = until < 0 ? -1 : (int)((until - sim_now) * 1000 + 0.999);
		sim_block(r, left);
		if (!r->inbox && until >= 0)
			return NULL; /* its timer */
	}
}

void sim_report(struct srank *to)
{
	deliver(to, sim_now, HPCT_TEV_MESSAGE, NULL, 0, NULL, 0, 0);
}

const struct hpct_transport_ops sim_ops = {
	.name = "sim",
	.create = s_create,
	.destroy = s_destroy,
	.listen = s_listen,
	.connect = s_connect,
	.send = s_send,
	.set_max_msg = s_set_max_msg,
	.pending = s_pending,
	.backlog = s_backlog,
	.progress = s_progress,
	.close = s_close,
	.peer_name = s_peer_name,
};

int sim_peer_addr(void *arg, int rank, struct sockaddr_storage *ss, socklen_t *len, char *text,
                  size_t textlen)
{
	(void)arg;
	struct sockaddr_in *in = (struct sockaddr_in *)ss;
	memset(ss, 0, sizeof(*ss));
	in->sin_family = AF_INET;
	in->sin_addr.s_addr = htonl((uint32_t)rank);
	in->sin_port = htons(1);
	*len = sizeof(*in);
	snprintf(text, textlen, "sim:%d", rank);
	return 0;
}
