/* hpct-bench-sim's scheduler: an event queue on a simulated clock, and
 * every rank a coroutine with its own world, engine and transport context,
 * run on one core each or on P shared cores (FIFO). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

#include "bootstrap/base/util.h"
#include "tools/sim.h"

#define STACK_SIZE (128 * 1024)

struct srank *sim_ranks;
int nranks_sim;
struct srank *sim_cur;
double sim_now;
struct sconn *sim_conns;
static ucontext_t sim_main_uc;
static int free_cores, all_cores; /* all_cores: one core per rank */
static struct srank *runq_head, *runq_tail;
static int work_cold; /* allgather + barrier, else a barrier */
static uint64_t sim_job;
static long ndone;

double sim_clock(void)
{
	return sim_now;
}

/* ------------------------------------------------------- event queue */

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

void sim_push(double t, int kind, int rank, uint64_t token, struct tev *tev)
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

void sim_block(struct srank *r, int timeout_ms)
{
	r->token++;
	if (timeout_ms >= 0)
		sim_push(sim_now + timeout_ms / 1000.0, EV_TIMER, r->id, r->token, NULL);
	r->state = R_BLOCKED;
	r->busy_until = sim_now;
	swapcontext(&r->uc, &sim_main_uc);
	sim_now += sim_M.c_wake;
}

/* A rank's life: joins the world through hpct's own start (the rootless
 * path over the simulated transport), runs the work, and is done. */
static void rank_body(void)
{
	struct srank *r = sim_cur;
	if (sim_M.c_start > 0)
		sim_now += sim_M.c_start; /* the process starting: exec, loading */
	struct hpct_topo topo = { .rank = r->id,
		                  .size = nranks_sim,
		                  .job = sim_job,
		                  .timeout_s = 600,
		                  .want_rootless = 1 };
	struct hpct_world_opts opts = { .transport = &sim_ops, .peer_addr = sim_peer_addr };
	int rc = hpct__world_start(&topo, &opts, &r->w);
	hpct_group *world = rc == 0 ? hpct_world_group(r->w) : NULL;
	if (rc == 0 && work_cold) {
		unsigned char item[64], *all = malloc((size_t)nranks_sim * sizeof(item));
		memset(item, r->id & 0xff, sizeof(item));
		rc = all ? hpct_allgather(world, item, sizeof(item), all) : HPCT_ENOMEM;
		unsigned char want[sizeof(item)];
		for (int i = 0; i < nranks_sim && rc == 0; i++) {
			memset(want, i & 0xff, sizeof(want)); /* every byte, not the first */
			if (memcmp(all + (size_t)i * sizeof(item), want, sizeof(want)) != 0)
				rc = HPCT_EPROTO;
		}
		free(all);
	}
	if (rc == 0)
		rc = hpct_barrier(world);
	r->rc = rc;
	r->done_at = sim_now;
	if (r->w)
		hpct_world_get_stats(r->w, &r->st);
	r->state = R_DONE;
	ndone++;
	swapcontext(&r->uc, &sim_main_uc); /* never resumed */
}

static void run(struct srank *r, double t)
{
	if (!all_cores)
		free_cores--;
	sim_now = t > r->busy_until ? t : r->busy_until; /* its own work comes first */
	sim_cur = r;
	r->state = R_RUNNING;
	swapcontext(&sim_main_uc, &r->uc);
	sim_cur = NULL;
	if (!all_cores)
		sim_push(sim_now, EV_CORE_FREE, -1, 0, NULL);
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
	r->uc.uc_link = &sim_main_uc;
	makecontext(&r->uc, rank_body, 0);
	r->start_at = t;
	wake(r, t);
}

struct sim_result simulate(int n, unsigned seed, int cores, int cold, double spread)
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
	sim_ranks = calloc((size_t)n, sizeof(*sim_ranks));
	if (!sim_ranks) {
		fprintf(stderr, "hpct-bench-sim: no memory for %d ranks\n", n);
		exit(1);
	}
	uint64_t rng = seed * 0x9e3779b97f4a7c15ULL + 1;
	for (int i = 0; i < n; i++) {
		sim_ranks[i].id = i;
		double t;
		if (sim_M.c_fork > 0) {
			t = i * sim_M.c_fork;
		} else {
			rng ^= rng << 13;
			rng ^= rng >> 7;
			rng ^= rng << 17;
			t = spread * (double)(rng >> 11) / (double)(1ULL << 53);
		}
		sim_push(t, EV_START, i, 0, NULL);
	}
	double first = -1;
	while (nheap && ndone < n) {
		struct event e = pop();
		struct srank *r = e.rank >= 0 ? &sim_ranks[e.rank] : NULL;
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
		struct srank *r = &sim_ranks[i];
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
		struct srank *r = &sim_ranks[i];
		sim_cur = r;
		hpct__world_end(r->w, 0, 0); /* no linger: the clock stands still now */
		r->w = NULL;
		sim_cur = NULL;
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
	while (sim_conns) {
		struct sconn *c = sim_conns;
		sim_conns = c->all_next;
		free(c);
	}
	free(sim_ranks);
	sim_ranks = NULL;
	runq_head = runq_tail = NULL;
	return res;
}
