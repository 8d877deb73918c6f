/* hpct-bench-sim's transport: the table of functions hpct's engine drives
 * (transport/transport.h), over simulated connections.  Every send costs
 * the sender the model's CPU and reaches the peer after its latency and
 * bandwidth, in order; a connect to a rank not listening yet is refused. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/sim.h"

static void deliver(struct srank *to, double t, enum hpct_tevent_type type, struct sconn *c,
                    int err, const void *data, size_t len)
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
	c->max_msg = HPCT_TRANSPORT_MAX_MSG;
	c->all_next = sim_conns;
	sim_conns = c;
	return c;
}

static int s_connect(void *ctx, const struct sockaddr *addr, socklen_t len, void *user,
                     struct hpct_tconn **conn_out)
{
	(void)len;
	struct sctx *x = ctx;
	int to = rank_of_addr(addr);
	if (to < 0 || to >= nranks_sim)
		return -EHOSTUNREACH;
	sim_now += sim_M.c_conn;
	struct sconn *c = new_conn(x->rank);
	c->base.user = user;
	struct srank *t = &sim_ranks[to];
	if (t->state == R_NEW || t->state == R_DONE || !t->tctx || !t->tctx->listening) {
		deliver(x->rank, sim_now + 2 * sim_M.lat, HPCT_TEV_CONNECT_FAILED, c, -ECONNREFUSED,
		        NULL, 0);
	} else {
		struct sconn *s = new_conn(t);
		c->peer = s;
		s->peer = c;
		deliver(t, sim_now + sim_M.lat, HPCT_TEV_ACCEPTED, s, 0, NULL, 0);
		deliver(x->rank, sim_now + 2 * sim_M.lat, HPCT_TEV_CONNECTED, c, 0, NULL, 0);
		c->last_at = sim_now + sim_M.lat;
	}
	*conn_out = &c->base;
	return 0;
}

static int s_send(struct hpct_tconn *conn, const void *buf, size_t len)
{
	struct sconn *c = (struct sconn *)conn;
	if (len > HPCT_TRANSPORT_MAX_MSG)
		return -EMSGSIZE;
	sim_now += sim_M.c_send;
	if (!c->peer || !c->peer->open)
		return 0; /* on its way to nobody, as over TCP */
	double t = sim_now + sim_M.lat + (double)len / sim_M.bw;
	if (t <= c->last_at)
		t = c->last_at;
	c->last_at = t;
	deliver(c->peer->owner, t, HPCT_TEV_MESSAGE, c->peer, 0, buf, len);
	return 0;
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
	if (c->peer && c->peer->open)
		deliver(c->peer->owner, sim_now + sim_M.lat, HPCT_TEV_CLOSED, c->peer, 0, NULL, 0);
}

static void s_peer_name(struct hpct_tconn *conn, char *buf, size_t len)
{
	struct sconn *c = (struct sconn *)conn;
	snprintf(buf, len, "sim rank %d", c->peer ? c->peer->owner->id : -1);
}

static int s_progress(void *ctx, int timeout_ms, hpct_tevent_cb cb, void *arg)
{
	struct srank *r = ((struct sctx *)ctx)->rank;
	if (!r->inbox && timeout_ms != 0)
		sim_block(r, timeout_ms);
	int n = 0;
	while (r->inbox) {
		struct tev *v = r->inbox;
		r->inbox = v->next;
		if (!r->inbox)
			r->inbox_tail = NULL;
		struct sconn *c = v->conn;
		/* nothing reaches a conn closed on this side; the ends the engine
		 * frees after the callback are never touched again */
		if (c->open) {
			struct hpct_tevent ev = { .type = v->type,
				                  .conn = &c->base,
				                  .err = v->err };
			if (v->type == HPCT_TEV_MESSAGE && v->len > c->max_msg) {
				ev.type = HPCT_TEV_CLOSED;
				ev.err = HPCT_EPROTO;
			}
			if (ev.type == HPCT_TEV_MESSAGE) {
				ev.data = v->data;
				ev.len = v->len;
				sim_now += sim_M.c_recv;
			} else if (ev.type == HPCT_TEV_ACCEPTED) {
				sim_now += sim_M.c_conn;
			}
			if (ev.type == HPCT_TEV_CLOSED || ev.type == HPCT_TEV_CONNECT_FAILED) {
				if (ev.type == HPCT_TEV_CLOSED && c->peer && c->peer->open)
					s_close(&c->base);
				c->open = 0;
			}
			cb(arg, &ev);
			n++;
		}
		free(v);
	}
	return n;
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
