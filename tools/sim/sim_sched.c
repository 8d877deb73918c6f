/* hpct-bench-sim's scheduler: an event queue on a simulated clock, and
 * every actor (a rank, the root beside rank 0, the launcher) a coroutine,
 * run on a core of its own each or on P shared cores.  Shared cores go to
 * whoever is ready, in turn (FIFO); an actor keeps its core until it waits,
 * except the launcher, which queues again after every fork, as a process
 * that never waits still gets only its share of the cores.
 *
 * The rootless path's ranks are libhpct's own: each joins the world through
 * hpct__world_start, as hpct_world_create does, over the simulated
 * transport, and runs the public collectives. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

#include "bootstrap/base/rss.h"
#include "bootstrap/base/util.h"
#include "tools/sim/sim.h"

#define STACK_SIZE (128 * 1024)

struct srank *sim_ranks;
int nranks_sim, nactors_sim, sim_per_node;
struct srank *sim_cur;
double sim_now;
struct sconn *sim_conns;
const struct sim_run *sim_run_now;
void *sim_state;
static ucontext_t sim_main_uc;
static int free_cores, all_cores; /* all_cores: a core for every actor */
static struct srank *runq_head, *runq_tail;
static uint64_t sim_job;
static long ndone;
static double cpu_start; /* of the ranks' process starts (launch) */

double sim_clock(void)
{
	return sim_now;
}

int sim_node_of(int actor)
{
	return actor < nranks_sim ? actor / sim_per_node : 0; /* roots: rank 0's node */
}

/* ------------------------------------------------------- event queue */

struct event {
	double t;
	uint64_t seq;
	int kind;
	int actor;
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

void sim_push(double t, int kind, int actor, uint64_t token, struct tev *tev)
{
	if (nheap == capheap) {
		capheap = capheap ? capheap * 2 : 1024;
		heap = realloc(heap, capheap * sizeof(*heap));
		if (!heap) {
			fprintf(stderr, "hpct-bench-sim: out of memory for events\n");
			exit(1);
		}
	}
	struct event e = { t, next_seq++, kind, actor, token, tev };
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

/* ------------------------------------------------------------ actors */

/* Waits s seconds (< 0: for ever) unless an event comes first. */
static void block_for(struct srank *r, double s)
{
	r->token++;
	if (s >= 0)
		sim_push(sim_now + s, EV_TIMER, r->id, r->token, NULL);
	r->state = R_BLOCKED;
	r->busy_until = sim_now;
	swapcontext(&r->uc, &sim_main_uc);
	sim_cpu(sim_M.c_wake);
}

void sim_block(struct srank *r, int timeout_ms)
{
	block_for(r, timeout_ms < 0 ? -1 : timeout_ms / 1000.0);
}

void sim_sleep(struct srank *r, double s)
{
	double until = sim_now + s;
	while (sim_now < until)
		block_for(r, until - sim_now);
}

static void enqueue(struct srank *r)
{
	r->state = R_QUEUED;
	r->runq_next = NULL;
	if (runq_tail)
		runq_tail->runq_next = r;
	else
		runq_head = r;
	runq_tail = r;
}

void sim_yield(struct srank *r)
{
	if (all_cores)
		return; /* a core of its own: nobody to give it to */
	enqueue(r);
	r->busy_until = sim_now;
	swapcontext(&r->uc, &sim_main_uc);
}

void sim_process_start(double cpu)
{
	if (!sim_run_now->launch)
		return;
	sim_cpu(cpu);
	cpu_start += cpu;
}

/* The rootless path: hpct's own start over the simulated transport, then
 * the work through the public collectives. */
static void rootless_rank(struct srank *r)
{
	sim_process_start(sim_M.c_start);
	struct hpct_topo topo = { .rank = r->id,
		                  .size = nranks_sim,
		                  .job = sim_job,
		                  .timeout_s = 600,
		                  .want_rootless = 1 };
	struct hpct_world_opts opts = { .transport = &sim_ops, .peer_addr = sim_peer_addr };
	int rc = hpct__world_start(&topo, &opts, &r->w);
	hpct_group *world = rc == 0 ? hpct_world_group(r->w) : NULL;
	if (rc == 0 && sim_run_now->cold) {
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
	if (r->w)
		hpct_world_get_stats(r->w, &r->st);
}

/* The model check's launcher: forks the ranks in turn, each fork its CPU
 * on the shared cores, then reads their reports. */
static void launcher(struct srank *self)
{
	for (int i = 0; i < nranks_sim; i++) {
		sim_cpu(sim_M.c_fork);
		sim_push(sim_now, EV_START, i, 0, NULL);
		sim_yield(self);
	}
	for (int got = 0; got < nranks_sim; got++)
		free(sim_next(self, -1));
}

const struct sim_path sim_paths[SIM_NPATHS] = {
	[SIM_ROOTLESS] = { "rootless", "simulated", rootless_rank, NULL, 0, NULL, NULL },
	[SIM_STANDARD] = { "standard", "model", std_rank, std_server, 0, std_setup, std_teardown },
	[SIM_NCCL] = { "nccl-root", "model", nccl_rank, nccl_root, 1, nccl_setup, nccl_teardown },
};

/* Every actor's coroutine: its body, then, for a rank, its report. */
static void actor_main(void)
{
	struct srank *r = sim_cur;
	r->body(r);
	r->state = R_DONE;
	if (r->id < nranks_sim) {
		r->done_at = sim_now;
		ndone++;
		if (sim_run_now->launch)
			sim_report(&sim_ranks[nranks_sim + 1]);
	}
	r->busy_until = sim_now;
	swapcontext(&r->uc, &sim_main_uc); /* never resumed */
}

static void run_on_core(struct srank *r, double t)
{
	if (!all_cores)
		free_cores--;
	sim_now = t > r->busy_until ? t : r->busy_until; /* its own work comes first */
	double from = sim_now;
	sim_cur = r;
	r->state = R_RUNNING;
	swapcontext(&sim_main_uc, &r->uc);
	sim_cur = NULL;
	r->cpu += sim_now - from;
	if (!all_cores)
		sim_push(sim_now, EV_CORE_FREE, -1, 0, NULL);
}

/* An actor with something to do gets a core now, or waits its turn. */
static void wake(struct srank *r, double t)
{
	if (all_cores || free_cores > 0)
		run_on_core(r, t);
	else
		enqueue(r);
}

static void start_actor(struct srank *r, double t)
{
	r->stack = mmap(NULL, STACK_SIZE, PROT_READ | PROT_WRITE,
	                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (r->stack == MAP_FAILED) {
		fprintf(stderr, "hpct-bench-sim: no memory for actor %d's stack\n", r->id);
		exit(1);
	}
	getcontext(&r->uc);
	r->uc.uc_stack.ss_sp = r->stack;
	r->uc.uc_stack.ss_size = STACK_SIZE;
	r->uc.uc_link = &sim_main_uc;
	makecontext(&r->uc, actor_main, 0);
	r->start_at = t;
	r->busy_until = t;
	wake(r, t);
}

/* The busiest process and the totals: a root counts with rank 0, whose
 * process it lives in. */
static void count(struct sim_result *res, const struct srank *root)
{
	for (int i = 0; i < nranks_sim; i++) {
		const struct srank *r = &sim_ranks[i];
		long sent = r->w ? (long)r->st.msgs_sent : r->tx;
		long msgs = r->w ? (long)(r->st.msgs_sent + r->st.msgs_recv) : r->tx + r->rx;
		long opened = r->w ? (long)r->st.conns_opened : r->opened;
		long conns = r->w ? (long)(r->st.conns_opened + r->st.conns_accepted)
		                  : r->opened + r->accepted;
		if (i == 0 && root) {
			sent += root->tx;
			msgs += root->tx + root->rx;
			opened += root->opened;
			conns += root->opened + root->accepted;
		}
		if (msgs > res->busy_msgs)
			res->busy_msgs = msgs;
		if (conns > res->busy_conns)
			res->busy_conns = conns;
		res->total_msgs += sent;
		res->total_conns += opened;
		res->cpu_ranks += r->cpu;
	}
	if (root) {
		res->cpu_root = root->cpu;
		res->root_requests = root->rx;
	}
}

/* Bytes the heap has handed out and not had back (arenas and mmapped
 * blocks), all threads'. */
static size_t sim_heap_in_use(void)
{
	struct mallinfo2 mi = mallinfo2();
	return mi.uordblks + mi.hblkhd;
}

/* Hands freed heap back, then makes VmHWM the peak from now on, so that
 * each simulation's peak is its own. */
static void sim_mem_mark(void)
{
	malloc_trim(0);
	hpct_self_hwm_reset();
}

long sim_max_rss_kb;

/* Holds a simulation to --max-rss: `kb` resident now (or at its peak). */
static void sim_rss_cap(const struct sim_run *run, long kb, const char *when)
{
	if (sim_max_rss_kb <= 0 || kb <= sim_max_rss_kb)
		return;
	fprintf(stderr,
	        "hpct-bench-sim: %s at %d ranks: resident memory %.1f MiB %s passed "
	        "--max-rss %.0f MiB (%.0f bytes a simulated rank)\n",
	        run->path->name, run->n, kb / 1024.0, when, sim_max_rss_kb / 1024.0,
	        kb * 1024.0 / run->n);
	exit(3);
}

struct sim_result simulate(const struct sim_run *run)
{
	const struct sim_path *path = run->path;
	int n = run->n;
	struct sim_result res = { .n = n };
	sim_mem_mark();
	size_t heap0 = sim_heap_in_use();
	sim_run_now = run;
	nranks_sim = n;
	nactors_sim = n + 2; /* the root's place, then the launcher's */
	sim_per_node = run->per_node > 0 ? run->per_node : n;
	sim_net_reset((n + sim_per_node - 1) / sim_per_node);
	all_cores = run->cores <= 0;
	free_cores = run->cores;
	ndone = 0;
	cpu_start = 0;
	char job[64];
	snprintf(job, sizeof(job), "sim-%u", run->seed);
	sim_job = hpct__hash(job, strlen(job), 0);
	sim_ranks = calloc((size_t)nactors_sim, sizeof(*sim_ranks));
	if (!sim_ranks) {
		fprintf(stderr, "hpct-bench-sim: no memory for %d ranks\n", n);
		exit(1);
	}
	for (int i = 0; i < nactors_sim; i++) {
		sim_ranks[i].id = i;
		sim_ranks[i].body = i < n ? path->rank : i == n ? path->root : launcher;
	}
	sim_state = path->setup ? path->setup(run) : NULL;
	if (run->launch) {
		sim_push(0, EV_START, n + 1, 0, NULL);
	} else {
		uint64_t rng = run->seed * 0x9e3779b97f4a7c15ULL + 1;
		for (int i = 0; i < n; i++) {
			rng ^= rng << 13;
			rng ^= rng >> 7;
			rng ^= rng << 17;
			double t = run->spread * (double)(rng >> 11) / (double)(1ULL << 53);
			sim_push(t, EV_START, i, 0, NULL);
		}
	}
	if (path->root && path->root_at_start)
		sim_push(0, EV_START, n, 0, NULL);
	double first = -1;
	unsigned long nevents = 0;
	while (nheap && ndone < n) {
		/* the cap, checked as it grows: a read of /proc every 2^16 events */
		if (sim_max_rss_kb > 0 && (++nevents & 0xffff) == 0)
			sim_rss_cap(run, hpct_self_rss_kb(), "while running");
		struct event e = pop();
		struct srank *r = e.actor >= 0 ? &sim_ranks[e.actor] : NULL;
		switch (e.kind) {
		case EV_START:
			if (r->state != R_NEW)
				break;
			if (e.actor != n && (first < 0 || e.t < first))
				first = e.t;
			start_actor(r, e.t);
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
				run_on_core(q, e.t);
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
	}
	res.ms = (last - (first < 0 ? 0 : first)) * 1000;
	res.nic_bytes = sim_net_busiest();
	res.engine_events = sim_engine_events;
	count(&res, path->root ? &sim_ranks[n] : NULL);
	res.cpu_start = cpu_start;
	res.cpu_ranks -= cpu_start;
	if (run->launch)
		res.cpu_launcher = sim_ranks[n + 1].cpu;
	size_t heap1 = sim_heap_in_use();
	res.heap_per_rank = heap1 > heap0 ? (double)(heap1 - heap0) / n : 0;
	res.peak_rss_kb = hpct_self_status_kb("VmHWM");
	sim_rss_cap(run, res.peak_rss_kb, "at its peak");
	/* tear down: engines first (their conns are the sim's), then the rest */
	for (int i = 0; i < nactors_sim; i++) {
		struct srank *r = &sim_ranks[i];
		sim_cur = r;
		if (r->w)
			hpct__world_end(r->w, 0, 0); /* no linger: the clock stands still now */
		else
			free(r->tctx); /* a modelled actor's */
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
	if (path->teardown)
		path->teardown(sim_state);
	sim_state = NULL;
	free(sim_ranks);
	sim_ranks = NULL;
	runq_head = runq_tail = NULL;
	sim_net_reset(0);
	return res;
}
