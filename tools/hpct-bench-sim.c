/* hpct-bench-sim: the rootless path at sizes this machine cannot launch.
 *
 * libhpct's own engine (connections, handshakes, queues, retries, pulls)
 * and collectives (coll.c), unchanged, run for N simulated ranks in one
 * process: each rank is a coroutine with its own world, engine and
 * transport context; the transport (the same table of functions as TCP) is
 * simulated, and hpct__now() reads a simulated clock.  Time advances by a
 * model of latency, bandwidth and CPU per message, per wakeup and per
 * connection, calibrated on this machine at start and printed.  Ranks run on
 * one core each (a cluster), or on P shared cores (--cores P, FIFO), which
 * with this machine's process start-up cost is how the model is checked
 * against real runs.
 *
 * The standard path (a store on rank 0 that serialises every rank's
 * connection and requests, and sends each rank the others' addresses: N^2
 * bytes, since nothing is derived) and NCCL's root (N connections in, N
 * reports, N connections out to send each rank its ring neighbour) are
 * modelled with the same parameters as one process that does all of it in
 * turn.
 *
 * Started by `hpct-bench --scenario sim`, which passes its arguments on. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "tools/bench_measure.h"
#include "tools/bench_plot.h"
#include "bootstrap/topo/derive.h"
#include "bootstrap/rootless/engine.h"
#include "bootstrap/base/util.h"
#include "bootstrap/world.h"
#include "transport/transport.h"

/* ---------------------------------------------------------------- model */

struct model {
	double lat;     /* one-way latency on the wire, s */
	double bw;      /* bytes per second of one connection */
	double c_send;  /* CPU per message sent, s */
	double c_recv;  /* CPU per message received */
	double c_wake;  /* CPU to wake a blocked process and switch to it */
	double c_conn;  /* CPU per connection end: connect or accept, and the handshake */
	double c_start; /* CPU to start a rank's process (exec, loading): launch model only */
	double c_fork;  /* the launcher's CPU per process it forks: launch model only */
};

static struct model M;

/* ------------------------------------------------------- event queue */

enum ev_kind { EV_START, EV_DELIVER, EV_TIMER, EV_CORE_FREE };

struct tev; /* a transport event on its way to a rank */

struct event {
	double t;
	uint64_t seq;
	int kind;
	int rank;
	uint64_t token;
	struct tev *tev;
};

static struct event *heap;
static size_t nheap, capheap;
static uint64_t next_seq;

static int ev_before(const struct event *a, const struct event *b)
{
	return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static void push(double t, int kind, int rank, uint64_t token, struct tev *tev)
{
	if (nheap == capheap) {
		capheap = capheap ? capheap * 2 : 1024;
		heap = realloc(heap, capheap * sizeof(*heap));
		if (!heap) {
			fprintf(stderr, "hpct-bench-sim: out of memory for events\n");
			exit(1);
		}
	}
	struct event e = { t, next_seq++, kind, rank, token, tev };
	size_t i = nheap++;
	while (i > 0 && ev_before(&e, &heap[(i - 1) / 2])) {
		heap[i] = heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	heap[i] = e;
}

static struct event pop(void)
{
	struct event top = heap[0], last = heap[--nheap];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= nheap)
			break;
		if (c + 1 < nheap && ev_before(&heap[c + 1], &heap[c]))
			c++;
		if (!ev_before(&heap[c], &last))
			break;
		heap[i] = heap[c];
		i = c;
	}
	if (nheap)
		heap[i] = last;
	return top;
}

/* ------------------------------------------------------------ ranks */

enum rank_state { R_NEW, R_QUEUED, R_RUNNING, R_BLOCKED, R_DONE };

struct sconn;

struct tev {
	struct tev *next;
	enum hpct_tevent_type type;
	struct sconn *conn;
	int err;
	size_t len;
	unsigned char data[];
};

struct sctx {
	struct srank *rank;
	int listening;
};

struct srank {
	int id;
	enum rank_state state;
	ucontext_t uc;
	void *stack;
	uint64_t token; /* the current wait: a timer for an older one is stale */
	struct tev *inbox, *inbox_tail;
	struct sctx *tctx;
	struct hpct_world w;
	struct srank *runq_next;
	double start_at, done_at;
	int rc;
	struct hpct_world_stats st;
	double busy_until; /* when it last gave its core back */
};

struct sconn {
	struct hpct_tconn base;
	struct srank *owner;
	struct sconn *peer;
	int open;
	size_t max_msg;
	double last_at; /* delivery time of its last message: order is kept */
	struct sconn *all_next;
};

#define STACK_SIZE (128 * 1024)

static struct srank *ranks;
static int nranks_sim;
static struct srank *cur;
static ucontext_t main_uc;
static double sim_now;
static int free_cores, all_cores; /* all_cores: one core per rank */
static struct srank *runq_head, *runq_tail;
static struct sconn *all_conns;
static int work_cold; /* allgather + barrier, else a barrier */
static uint64_t sim_job;
static long ndone;

static double sim_clock(void)
{
	return sim_now;
}

/* --------------------------------------------------------- transport */

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
	push(t, EV_DELIVER, to->id, 0, v);
}

static int s_create(void **ctx_out)
{
	struct sctx *x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	x->rank = cur;
	cur->tctx = x;
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
	c->all_next = all_conns;
	all_conns = c;
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
	sim_now += M.c_conn;
	struct sconn *c = new_conn(x->rank);
	c->base.user = user;
	struct srank *t = &ranks[to];
	if (t->state == R_NEW || t->state == R_DONE || !t->tctx || !t->tctx->listening) {
		deliver(x->rank, sim_now + 2 * M.lat, HPCT_TEV_CONNECT_FAILED, c, -ECONNREFUSED,
		        NULL, 0);
	} else {
		struct sconn *s = new_conn(t);
		c->peer = s;
		s->peer = c;
		deliver(t, sim_now + M.lat, HPCT_TEV_ACCEPTED, s, 0, NULL, 0);
		deliver(x->rank, sim_now + 2 * M.lat, HPCT_TEV_CONNECTED, c, 0, NULL, 0);
		c->last_at = sim_now + M.lat;
	}
	*conn_out = &c->base;
	return 0;
}

static int s_send(struct hpct_tconn *conn, const void *buf, size_t len)
{
	struct sconn *c = (struct sconn *)conn;
	if (len > HPCT_TRANSPORT_MAX_MSG)
		return -EMSGSIZE;
	sim_now += M.c_send;
	if (!c->peer || !c->peer->open)
		return 0; /* on its way to nobody, as over TCP */
	double t = sim_now + M.lat + (double)len / M.bw;
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
		deliver(c->peer->owner, sim_now + M.lat, HPCT_TEV_CLOSED, c->peer, 0, NULL, 0);
}

static void s_peer_name(struct hpct_tconn *conn, char *buf, size_t len)
{
	struct sconn *c = (struct sconn *)conn;
	snprintf(buf, len, "sim rank %d", c->peer ? c->peer->owner->id : -1);
}

static void block_until_event(struct srank *r, int timeout_ms)
{
	r->token++;
	if (timeout_ms >= 0)
		push(sim_now + timeout_ms / 1000.0, EV_TIMER, r->id, r->token, NULL);
	r->state = R_BLOCKED;
	r->busy_until = sim_now;
	swapcontext(&r->uc, &main_uc);
	sim_now += M.c_wake;
}

static int s_progress(void *ctx, int timeout_ms, hpct_tevent_cb cb, void *arg)
{
	struct srank *r = ((struct sctx *)ctx)->rank;
	if (!r->inbox && timeout_ms != 0)
		block_until_event(r, timeout_ms);
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
				sim_now += M.c_recv;
			} else if (ev.type == HPCT_TEV_ACCEPTED) {
				sim_now += M.c_conn;
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

static const struct hpct_transport_ops sim_ops = {
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

static int sim_peer_addr(void *arg, int rank, struct sockaddr_storage *ss, socklen_t *len,
                         char *text, size_t textlen)
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

/* ------------------------------------------------------------ scheduler */

static void rank_body(void)
{
	struct srank *r = cur;
	struct hpct_world *w = &r->w;
	if (M.c_start > 0)
		sim_now += M.c_start; /* the process starting: exec, loading */
	w->topo.rank = r->id;
	w->topo.size = nranks_sim;
	w->topo.job = sim_job;
	w->topo.epoch = 0;
	w->topo.timeout_s = 600;
	w->path = HPCT_PATH_ROOTLESS;
	w->algo = HPCT_ALGO_TREE;
	struct hpct_engine_cfg cfg = { .ops = &sim_ops,
		                       .rank = r->id,
		                       .size = nranks_sim,
		                       .job = sim_job,
		                       .epoch = 0,
		                       .handshake_timeout_s = 10,
		                       .peer_addr = sim_peer_addr };
	struct sockaddr_storage ss;
	socklen_t sl;
	char text[64];
	sim_peer_addr(NULL, r->id, &ss, &sl, text, sizeof(text));
	int rc = hpct__eng_create(&cfg, (struct sockaddr *)&ss, sl, &w->eng);
	w->group = (struct hpct_group){ .world = w,
		                        .id = hpct__derive_world_group(sim_job, 0, nranks_sim),
		                        .rank = r->id,
		                        .size = nranks_sim };
	if (rc == 0 && work_cold) {
		unsigned char item[64], *all = malloc((size_t)nranks_sim * sizeof(item));
		memset(item, r->id & 0xff, sizeof(item));
		rc = all ? hpct__coll_allgather(&w->group, item, sizeof(item), all) : HPCT_ENOMEM;
		for (int i = 0; i < nranks_sim && rc == 0; i++)
			if (all[(size_t)i * sizeof(item)] != (unsigned char)(i & 0xff))
				rc = HPCT_EPROTO;
		free(all);
	}
	if (rc == 0)
		rc = hpct__coll_barrier(&w->group);
	r->rc = rc;
	r->done_at = sim_now;
	if (w->eng)
		hpct__eng_stats(w->eng, &r->st);
	r->state = R_DONE;
	ndone++;
	swapcontext(&r->uc, &main_uc); /* never resumed */
}

static void run(struct srank *r, double t)
{
	if (!all_cores)
		free_cores--;
	sim_now = t > r->busy_until ? t : r->busy_until; /* its own work comes first */
	cur = r;
	r->state = R_RUNNING;
	swapcontext(&main_uc, &r->uc);
	cur = NULL;
	if (!all_cores)
		push(sim_now, EV_CORE_FREE, -1, 0, NULL);
}

/* A rank with something to do gets a core now, or waits its turn. */
static void wake(struct srank *r, double t)
{
	if (all_cores || free_cores > 0) {
		run(r, t);
		return;
	}
	r->state = R_QUEUED;
	r->runq_next = NULL;
	if (runq_tail)
		runq_tail->runq_next = r;
	else
		runq_head = r;
	runq_tail = r;
}

static void start_rank(struct srank *r, double t)
{
	r->stack = mmap(NULL, STACK_SIZE, PROT_READ | PROT_WRITE,
	                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (r->stack == MAP_FAILED) {
		fprintf(stderr, "hpct-bench-sim: no memory for rank %d's stack\n", r->id);
		exit(1);
	}
	getcontext(&r->uc);
	r->uc.uc_stack.ss_sp = r->stack;
	r->uc.uc_stack.ss_size = STACK_SIZE;
	r->uc.uc_link = &main_uc;
	makecontext(&r->uc, rank_body, 0);
	r->start_at = t;
	wake(r, t);
}

struct sim_result {
	int n;
	double ms;        /* from the first start until the last rank is done */
	long busy_msgs;   /* messages sent + received by the busiest rank */
	long busy_conns;  /* connections opened + accepted by the busiest rank */
	long total_msgs;  /* messages sent by all ranks */
	long total_conns; /* connections opened by all ranks */
	int failed;       /* ranks that did not finish, or failed */
};

/* Runs N ranks; start times from the seed (all within `spread` s, or the
 * launch model's serial forks when M.c_fork > 0). */
static struct sim_result simulate(int n, unsigned seed, int cores, int cold, double spread)
{
	struct sim_result res = { .n = n };
	nranks_sim = n;
	work_cold = cold;
	all_cores = cores <= 0;
	free_cores = cores;
	ndone = 0;
	char job[64];
	snprintf(job, sizeof(job), "sim-%u", seed);
	sim_job = hpct__hash(job, strlen(job), 0);
	ranks = calloc((size_t)n, sizeof(*ranks));
	if (!ranks) {
		fprintf(stderr, "hpct-bench-sim: no memory for %d ranks\n", n);
		exit(1);
	}
	uint64_t rng = seed * 0x9e3779b97f4a7c15ULL + 1;
	for (int i = 0; i < n; i++) {
		ranks[i].id = i;
		double t;
		if (M.c_fork > 0) {
			t = i * M.c_fork;
		} else {
			rng ^= rng << 13;
			rng ^= rng >> 7;
			rng ^= rng << 17;
			t = spread * (double)(rng >> 11) / (double)(1ULL << 53);
		}
		push(t, EV_START, i, 0, NULL);
	}
	double first = -1;
	while (nheap && ndone < n) {
		struct event e = pop();
		struct srank *r = e.rank >= 0 ? &ranks[e.rank] : NULL;
		switch (e.kind) {
		case EV_START:
			if (first < 0)
				first = e.t;
			start_rank(r, e.t);
			break;
		case EV_DELIVER:
			if (r->state == R_DONE || r->state == R_NEW) {
				free(e.tev);
				break;
			}
			if (r->inbox_tail)
				r->inbox_tail->next = e.tev;
			else
				r->inbox = e.tev;
			r->inbox_tail = e.tev;
			if (r->state == R_BLOCKED)
				wake(r, e.t);
			break;
		case EV_TIMER:
			if (r->state == R_BLOCKED && r->token == e.token)
				wake(r, e.t);
			break;
		case EV_CORE_FREE:
			free_cores++;
			if (runq_head) {
				struct srank *q = runq_head;
				runq_head = q->runq_next;
				if (!runq_head)
					runq_tail = NULL;
				run(q, e.t);
			}
			break;
		}
	}
	double last = 0;
	for (int i = 0; i < n; i++) {
		struct srank *r = &ranks[i];
		if (r->state != R_DONE || r->rc != 0) {
			res.failed++;
			continue;
		}
		if (r->done_at > last)
			last = r->done_at;
		long msgs = (long)(r->st.msgs_sent + r->st.msgs_recv);
		long conns = (long)(r->st.conns_opened + r->st.conns_accepted);
		if (msgs > res.busy_msgs)
			res.busy_msgs = msgs;
		if (conns > res.busy_conns)
			res.busy_conns = conns;
		res.total_msgs += (long)r->st.msgs_sent;
		res.total_conns += (long)r->st.conns_opened;
	}
	res.ms = (last - (first < 0 ? 0 : first)) * 1000;
	/* tear down: engines first (their conns are the sim's), then the rest */
	for (int i = 0; i < n; i++) {
		struct srank *r = &ranks[i];
		cur = r;
		if (r->w.eng)
			hpct__eng_destroy(r->w.eng, 0, 0);
		cur = NULL;
		while (r->inbox) {
			struct tev *v = r->inbox;
			r->inbox = v->next;
			free(v);
		}
		if (r->stack)
			munmap(r->stack, STACK_SIZE);
	}
	while (nheap) {
		struct event e = pop();
		free(e.tev);
	}
	while (all_conns) {
		struct sconn *c = all_conns;
		all_conns = c->all_next;
		free(c);
	}
	free(ranks);
	ranks = NULL;
	runq_head = runq_tail = NULL;
	return res;
}

/* ------------------------------------------------- the modelled roots */

/* The standard path: rank 0's store serves everyone in turn.  Each rank
 * connects and says hello, sets its address (64 bytes), fetches the N-1
 * others' ((N-1) x 64 bytes back: what a rank that derives nothing must
 * learn, N^2 bytes through the store in all), adds to the barrier count and
 * waits for the release.  This is also the cold scenario's allgather +
 * barrier.  The store answers the fetches and releases once the last rank
 * has arrived.  With P shared cores the ranks' own work competes with it (a
 * bound: all CPU spread over P). */
static struct sim_result std_model(int n, double spread, int cores, unsigned seed)
{
	struct sim_result res = { .n = n };
	double t = 0, item = 64;
	double req = M.c_recv + M.c_send;
	uint64_t rng = seed * 0x9e3779b97f4a7c15ULL + 1;
	double first = -1;
	for (int i = 0; i < n; i++) {
		double a;
		if (M.c_fork > 0) {
			a = i * M.c_fork + M.c_start;
		} else {
			rng ^= rng << 13;
			rng ^= rng >> 7;
			rng ^= rng << 17;
			a = spread * (double)(rng >> 11) / (double)(1ULL << 53);
		}
		if (first < 0 || a < first)
			first = a;
		a += M.c_conn + M.lat; /* its connect reaches the store */
		/* accept; hello, set and the barrier's add answered at once */
		t = (t > a ? t : a) + M.c_conn + 3 * req;
	}
	/* what waited for the last rank: the fetches and the releases */
	t += n * (req + (n - 1) * item / M.bw) + n * req;
	t += M.lat + M.c_wake + M.c_recv;
	if (cores > 0) {
		/* the ranks' own work shares the cores with the store */
		double cpu = n * (M.c_start + 2 * M.c_conn + 5 * (2 * req + M.c_wake)) +
		             n * (n - 1) * item / M.bw;
		if (cpu / cores > t)
			t = cpu / cores;
	}
	res.ms = (t - (first < 0 ? 0 : first)) * 1000;
	res.busy_msgs = 10L * n; /* 5 requests and 5 answers per rank */
	res.busy_conns = n;
	return res;
}

/* NCCL's bootstrap root: accepts every rank's connection and report
 * (address and ring information), then connects to each rank in turn to
 * send it its ring neighbour's. */
static struct sim_result nccl_model(int n, double spread, unsigned seed)
{
	struct sim_result res = { .n = n };
	double t = 0, first = -1;
	uint64_t rng = seed * 0x9e3779b97f4a7c15ULL + 1;
	for (int i = 0; i < n; i++) {
		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		double a = spread * (double)(rng >> 11) / (double)(1ULL << 53);
		if (first < 0 || a < first)
			first = a;
		a += M.c_conn + M.lat + M.c_send + M.lat;
		t = (t > a ? t : a) + M.c_conn + M.c_recv;
	}
	t += n * (M.c_conn + M.c_send) + M.lat + M.c_wake + M.c_recv;
	res.ms = (t - first) * 1000;
	res.busy_msgs = 2L * n;
	res.busy_conns = 2L * n;
	return res;
}

/* ------------------------------------------------------- calibration */

static double cpu_time(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void tcp_pair(int fd[2])
{
	if (loopback_pair(fd) < 0) {
		perror("hpct-bench-sim: calibration over loopback TCP");
		exit(1);
	}
}

static void calibrate(const char *rank_prog)
{
	int fd[2];
	unsigned char msg[64] = { 0 };
	/* send and receive CPU: batches through one loopback pair */
	tcp_pair(fd);
	double ts = 0, tr = 0;
	int per = 256, batches = 80;
	for (int b = 0; b < batches; b++) {
		double t0 = cpu_time();
		for (int i = 0; i < per; i++)
			if (write(fd[0], msg, sizeof(msg)) != (ssize_t)sizeof(msg))
				exit(1);
		double t1 = cpu_time();
		for (int i = 0; i < per; i++)
			if (read(fd[1], msg, sizeof(msg)) != (ssize_t)sizeof(msg))
				exit(1);
		ts += t1 - t0;
		tr += cpu_time() - t1;
	}
	close(fd[0]);
	close(fd[1]);
	M.c_send = ts / (per * batches);
	M.c_recv = tr / (per * batches);
	/* wakeup: a pipe ping-pong has no network stack in it */
	int p1[2], p2[2];
	if (pipe(p1) || pipe(p2))
		exit(1);
	double wake_rtt = echo_round_trip(p1[1], p2[0], p1[0], p2[1], 400);
	/* latency: what a TCP round trip has beyond those */
	tcp_pair(fd);
	double rtt = echo_round_trip(fd[0], fd[0], fd[1], fd[1], 400);
	if (wake_rtt < 0 || rtt < 0) {
		fprintf(stderr, "hpct-bench-sim: calibration: a round trip failed\n");
		exit(1);
	}
	M.c_wake = wake_rtt / 2;
	M.lat = rtt / 2 - M.c_send - M.c_recv - M.c_wake;
	if (M.lat < 1e-6)
		M.lat = 1e-6;
	/* a connection: connect, accept and close both ends, per end */
	struct sockaddr_in a;
	int l = loopback_listener(&a);
	if (l < 0) {
		perror("hpct-bench-sim: calibration listener");
		exit(1);
	}
	double t0 = cpu_time();
	int conns = 300;
	for (int i = 0; i < conns; i++) {
		int s = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(s, (struct sockaddr *)&a, sizeof(a)) < 0)
			exit(1);
		int x = accept(l, NULL, NULL);
		close(x);
		close(s);
	}
	M.c_conn = (cpu_time() - t0) / (2.0 * conns);
	close(l);
	/* bandwidth: 32 MB in 64 KB writes from another process */
	tcp_pair(fd);
	size_t total = 32u << 20, chunk = 64u << 10;
	pid_t pid = fork();
	if (pid == 0) {
		close(fd[1]);
		char *buf = calloc(1, chunk);
		for (size_t sent = 0; sent < total;) {
			ssize_t k = write(fd[0], buf, chunk);
			if (k <= 0)
				_exit(1);
			sent += (size_t)k;
		}
		_exit(0);
	}
	close(fd[0]);
	char *buf = malloc(chunk);
	t0 = measure_now();
	for (size_t got = 0; got < total;) {
		ssize_t k = read(fd[1], buf, chunk);
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	M.bw = (double)total / (measure_now() - t0);
	free(buf);
	close(fd[1]);
	waitpid(pid, NULL, 0);
	/* process start: a rank program that exits at once, and the fork */
	double st[20], fk[20];
	for (int i = 0; i < 20; i++) {
		t0 = measure_now();
		pid = fork();
		if (pid == 0) {
			int dn = open("/dev/null", O_WRONLY);
			dup2(dn, 2);
			execl(rank_prog, rank_prog, "--as-rank", "none", (char *)NULL);
			_exit(127);
		}
		fk[i] = measure_now() - t0;
		waitpid(pid, NULL, 0);
		st[i] = measure_now() - t0;
	}
	M.c_fork = median_of(fk, 20);
	M.c_start = median_of(st, 20) - M.c_fork;
}

/* The "model" object of an earlier run's JSON, so that runs can be
 * compared on the same parameters; 0, or -1 naming what is missing. */
static int model_from(const char *file)
{
	FILE *f = fopen(file, "r");
	if (!f) {
		fprintf(stderr, "hpct-bench: --model-from %s: %s\n", file, strerror(errno));
		return -1;
	}
	char text[4096];
	size_t got = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[got] = 0;
	static const struct {
		const char *key;
		double *to, scale;
	} keys[] = { { "lat_us", &M.lat, 1e-6 },     { "bw_MBps", &M.bw, 1e6 },
		     { "send_us", &M.c_send, 1e-6 }, { "recv_us", &M.c_recv, 1e-6 },
		     { "wake_us", &M.c_wake, 1e-6 }, { "conn_us", &M.c_conn, 1e-6 },
		     { "fork_us", &M.c_fork, 1e-6 }, { "start_ms", &M.c_start, 1e-3 } };
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		char pat[32];
		snprintf(pat, sizeof(pat), "\"%s\":", keys[i].key);
		const char *at = strstr(text, pat);
		if (!at) {
			fprintf(stderr,
			        "hpct-bench: --model-from %s: no \"%s\" (want the JSON of "
			        "an earlier --scenario sim run)\n",
			        file, keys[i].key);
			return -1;
		}
		*keys[i].to = atof(at + strlen(pat)) * keys[i].scale;
	}
	return 0;
}

/* ------------------------------------------------------ real runs */

/* Medians of a real cold run of N ranks per path, from hpct-bench's JSON;
 * 0 when missing. */
static int real_cold(const char *bench, const int *ns, int k, double real[][2])
{
	char json[] = "/tmp/hpct-sim-real-XXXXXX";
	int fd = mkstemp(json);
	if (fd < 0)
		return -1;
	close(fd);
	char list[256] = "";
	for (int i = 0; i < k; i++)
		snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%d", i ? "," : "",
		         ns[i]);
	pid_t pid = fork();
	if (pid == 0) {
		int dn = open("/dev/null", O_WRONLY);
		dup2(dn, 1);
		execl(bench, bench, "--scenario", "cold", "--ranks", list, "--path",
		      "rootless,standard", "--repeat", "3", "--port", "23000", "--json", json,
		      (char *)NULL);
		_exit(127);
	}
	int st;
	waitpid(pid, &st, 0);
	FILE *f = fopen(json, "r");
	char text[8192] = "";
	size_t got = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
	text[got] = 0;
	if (f)
		fclose(f);
	unlink(json);
	for (int i = 0; i < k; i++)
		for (int p = 0; p < 2; p++) {
			char pat[96];
			snprintf(pat, sizeof(pat), "\"path\":\"%s\",\"ranks\":%d,",
			         p ? "standard" : "rootless", ns[i]);
			const char *at = strstr(text, pat),
			           *m = at ? strstr(at, "\"median_ms\":") : NULL;
			real[i][p] = m ? atof(m + 12) : 0;
		}
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* --------------------------------------------------------------- main */

#define MAX_N 16

static void usage(FILE *f)
{
	fprintf(f, "usage: hpct-bench --scenario sim --ranks N[,N..] [--seed S] [--cores P]\n"
	           "                  [--work join|cold] [--spread MS] [--json FILE] [--no-check]\n"
	           "                  [--model-from FILE.json] [--plot FILE.png] [--latency US]\n"
	           "(this is hpct-bench-sim; hpct-bench --scenario sim starts it)\n");
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--as-rank") == 0)
		return 2; /* what the start-up calibration times */
	int ns[MAX_N], k = 0, cores = 0, check = 1, cold = 0;
	unsigned seed = 1;
	double spread = 1e-3;
	const char *json = NULL, *from = NULL, *plot = NULL;
	double latency = -1; /* a network's one-way latency for the projections, s */
	static const struct option opts[] = { { "model-from", required_argument, NULL, 'm' },
		                              { "latency", required_argument, NULL, 'L' },
		                              { "plot", required_argument, NULL, 'G' },
		                              { "ranks", required_argument, NULL, 'n' },
		                              { "seed", required_argument, NULL, 'S' },
		                              { "cores", required_argument, NULL, 'c' },
		                              { "work", required_argument, NULL, 'w' },
		                              { "spread", required_argument, NULL, 's' },
		                              { "json", required_argument, NULL, 'j' },
		                              { "no-check", no_argument, NULL, 'x' },
		                              { "help", no_argument, NULL, 'h' },
		                              { NULL, 0, NULL, 0 } };
	int c;
	while ((c = getopt_long(argc, argv, "n:S:c:w:s:j:xm:G:L:h", opts, NULL)) != -1) {
		switch (c) {
		case 'L':
			latency = atof(optarg) * 1e-6;
			if (latency <= 0) {
				fprintf(stderr, "hpct-bench: --latency %s: want microseconds > 0\n",
				        optarg);
				return 2;
			}
			break;
		case 'm':
			from = optarg;
			break;
		case 'G':
			plot = optarg;
			break;
		case 'n': {
			char *dup = strdup(optarg), *save = NULL;
			for (char *tok = strtok_r(dup, ",", &save); tok;
			     tok = strtok_r(NULL, ",", &save)) {
				char *end;
				long v = strtol(tok, &end, 10);
				if (*end || v < 2 || v > 131072 || k == MAX_N) {
					fprintf(stderr,
					        "hpct-bench: --ranks %s: want up to %d sizes of "
					        "2..131072\n",
					        optarg, MAX_N);
					free(dup);
					return 2;
				}
				ns[k++] = (int)v;
			}
			free(dup);
			break;
		}
		case 'S':
			seed = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'c':
			cores = atoi(optarg);
			break;
		case 'w':
			if (strcmp(optarg, "cold") == 0)
				cold = 1;
			else if (strcmp(optarg, "join") != 0) {
				fprintf(stderr, "hpct-bench: --work %s: want join or cold\n",
				        optarg);
				return 2;
			}
			break;
		case 's':
			spread = atof(optarg) / 1000;
			break;
		case 'j':
			json = optarg;
			break;
		case 'x':
			check = 0;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (k == 0 || cores < 0 || spread < 0) {
		usage(stderr);
		return 2;
	}
	for (int i = 0; i < k; i++)
		if (cold && ns[i] > 4096) {
			fprintf(stderr,
			        "hpct-bench: --work cold --ranks %d: every rank would hold all N "
			        "items "
			        "(N^2 bytes in one process); cold is simulated up to 4096 ranks, "
			        "join (a world barrier) at any size\n",
			        ns[i]);
			return 2;
		}
	char self[4096], dir[4096], bench[4200];
	ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (sl <= 0)
		return 1;
	self[sl] = 0;
	snprintf(dir, sizeof(dir), "%s", self);
	*strrchr(dir, '/') = 0;
	snprintf(bench, sizeof(bench), "%s/hpct-bench", dir);

	if (plot && (strlen(plot) < 5 || strcmp(plot + strlen(plot) - 4, ".png") != 0)) {
		fprintf(stderr, "hpct-bench: --plot %s: want a file name ending in .png\n", plot);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (from && model_from(from) < 0)
		return 2;
	if (!from)
		calibrate(bench);
	printf("model, %s%s:\n"
	       "  one-way latency %.1f us, bandwidth %.0f MB/s, CPU per message sent %.2f us,\n"
	       "  received %.2f us, per wakeup %.2f us, per connection end %.1f us;\n"
	       "  launch: %.0f us of the launcher per fork, %.2f ms to start a rank\n",
	       from ? "from " : "calibrated on this machine (loopback TCP between processes)",
	       from ? from : "", M.lat * 1e6, M.bw / 1e6, M.c_send * 1e6, M.c_recv * 1e6,
	       M.c_wake * 1e6, M.c_conn * 1e6, M.c_fork * 1e6, M.c_start * 1e3);
	struct model launch = M;
	M.c_start = M.c_fork = 0; /* projections: ranks start within --spread */
	if (latency > 0)
		M.lat = latency;
	hpct__clock = sim_clock;

	FILE *jf = json ? fopen(json, "w") : NULL;
	if (json && !jf)
		fprintf(stderr, "hpct-bench: cannot write %s: %s\n", json, strerror(errno));
	if (jf)
		fprintf(jf,
		        "{\"model\":{\"lat_us\":%.3f,\"bw_MBps\":%.1f,\"send_us\":%.3f,"
		        "\"recv_us\":%.3f,\"wake_us\":%.3f,\"conn_us\":%.3f,\"fork_us\":%.1f,"
		        "\"start_ms\":%.3f},\"work\":\"%s\",\"cores\":%d,\"seed\":%u,\"results\":[",
		        M.lat * 1e6, M.bw / 1e6, M.c_send * 1e6, M.c_recv * 1e6, M.c_wake * 1e6,
		        M.c_conn * 1e6, launch.c_fork * 1e6, launch.c_start * 1e3,
		        cold ? "cold" : "join", cores, seed);
	printf("\nsim: %s, %s, ranks starting within %.1f ms (seed %u), one-way latency %.1f "
	       "us%s\n",
	       cold ? "cold (world allgather of 64 bytes + barrier)" : "join (world barrier)",
	       cores ? "ranks sharing the cores given" : "one core per rank", spread * 1000, seed,
	       M.lat * 1e6, latency > 0 ? " (--latency)" : "");
	printf("rootless: simulated; standard: modelled, one store serving N connections and every "
	       "rank's\naddress to every rank (N^2 x 64 bytes); nccl-root: modelled, NCCL's root, "
	       "N "
	       "connections in, N out\n");
	printf("%-9s %8s %13s %13s %13s %10s\n", "path", "ranks", "projected_ms", "busiest_msgs",
	       "busiest_conns", "sim_s");
	int bad = 0, rows = 0;
	struct plot_row *prow = calloc((size_t)k * 3, sizeof(*prow));
	for (int i = 0; i < k; i++) {
		double w0 = measure_now();
		hpct__clock = sim_clock;
		struct sim_result r = simulate(ns[i], seed, cores, cold, spread);
		double took = measure_now() - w0;
		struct sim_result s = std_model(ns[i], spread, cores, seed);
		struct sim_result q = nccl_model(ns[i], spread, seed);
		if (r.failed) {
			fprintf(stderr, "hpct-bench-sim: %d of %d simulated ranks did not finish\n",
			        r.failed, ns[i]);
			bad = 1;
		}
		printf("%-9s %8d %13.2f %13ld %13ld %10.1f\n", "rootless", ns[i], r.ms, r.busy_msgs,
		       r.busy_conns, took);
		printf("%-9s %8d %13.2f %13ld %13ld %10s\n", "standard", ns[i], s.ms, s.busy_msgs,
		       s.busy_conns, "model");
		printf("%-9s %8d %13.2f %13ld %13ld %10s\n", "nccl-root", ns[i], q.ms, q.busy_msgs,
		       q.busy_conns, "model");
		const struct sim_result *all[3] = { &r, &s, &q };
		static const char *names[3] = { "rootless", "standard", "nccl-root" };
		for (int p = 0; p < 3; p++)
			prow[3 * i + p] = (struct plot_row){ .scenario = "sim",
				                             .path = names[p],
				                             .ranks = ns[i],
				                             .median_ms = all[p]->ms,
				                             .min_ms = all[p]->ms,
				                             .max_ms = all[p]->ms };
		for (int p = 0; p < 3 && jf; p++)
			fprintf(jf,
			        "%s{\"path\":\"%s\",\"ranks\":%d,\"projected_ms\":%.4f,"
			        "\"busiest_msgs\":%ld,\"busiest_conns\":%ld,\"total_msgs\":%ld,"
			        "\"total_conns\":%ld}",
			        rows++ ? "," : "", names[p], ns[i], all[p]->ms, all[p]->busy_msgs,
			        all[p]->busy_conns, p == 0 ? all[p]->total_msgs : -1,
			        p == 0 ? all[p]->total_conns : -1);
	}
	if (jf)
		fprintf(jf, "]");
	if (check) {
		/* the model against real runs: cold, this machine's 2 cores and launch */
		int cn[2] = { 64, 256 };
		double real[2][2];
		int rc = real_cold(bench, cn, 2, real);
		M = launch;
		printf("\nmodel check: cold start (allgather + barrier), 2 shared cores, this "
		       "machine's launch, against real runs (hpct-bench --scenario cold, medians "
		       "of 3)%s\n",
		       rc ? " [some real runs failed]" : "");
		if (jf)
			fprintf(jf, ",\"check\":[");
		for (int i = 0; i < 2; i++) {
			hpct__clock = sim_clock;
			struct sim_result r = simulate(cn[i], seed, 2, 1, 0);
			struct sim_result s = std_model(cn[i], 0, 2, seed);
			double model[2] = { r.ms, s.ms };
			for (int p = 0; p < 2; p++) {
				double err = real[i][p] > 0
				                     ? (model[p] - real[i][p]) / real[i][p] * 100
				                     : 0;
				printf("  N=%-4d %-9s model %8.1f ms   real %8.1f ms   error "
				       "%+6.1f%%\n",
				       cn[i], p ? "standard" : "rootless", model[p], real[i][p],
				       err);
				if (jf)
					fprintf(jf,
					        "%s{\"ranks\":%d,\"path\":\"%s\",\"model_ms\":%.3f,"
					        "\"real_ms\":%.3f,\"error_pct\":%.2f}",
					        i + p ? "," : "", cn[i],
					        p ? "standard" : "rootless", model[p], real[i][p],
					        err);
			}
		}
		if (jf)
			fprintf(jf, "]");
	}
	if (jf) {
		fprintf(jf, "}\n");
		fclose(jf);
	}
	printf("\npublished anchors at about 96k ranks: stock NCCL init ~265 s, PyTorch's TCPStore "
	       "(libuv) ~100 s\n");
	if (plot) {
		/* the floor's unit: one round trip of the model */
		double rtt =
		        2 * (launch.lat + launch.c_send + launch.c_recv + launch.c_wake) * 1000;
		if (bench_plot(plot, prow, 3 * k, rtt) == 0)
			printf("plot written to %s\n", plot);
		else
			bad = 1;
	}
	free(prow);
	return bad;
}
