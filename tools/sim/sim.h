/* The parts of hpct-bench-sim: the model of this machine (sim_model.c), a
 * simulated transport behind hpct's table of transport functions, with the
 * bandwidth of each simulated node's NIC shared by its ranks
 * (sim_transport.c), the scheduler that runs every simulated rank as a
 * coroutine on a simulated clock and shared or own cores (sim_sched.c), and
 * the two paths that are modelled rather than run: the standard path's store
 * and NCCL's root (sim_roots.c).  hpct-bench-sim.c reads the options, prints
 * the results and checks the model against real runs. */
#ifndef HPCT_SIM_H
#define HPCT_SIM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <ucontext.h>

#include "bootstrap/world.h"
#include "hpct/hpct.h"
#include "transport/transport.h"

/* The machine, in seconds and bytes per second.  Every field is a row of
 * the parameter table in sim_model.c (printed, written to the JSON, read
 * back by --model-from). */
struct model {
	double lat;      /* one-way latency on the wire */
	double bw;       /* bytes per second of one stream, and of a node's NIC */
	double c_send;   /* CPU per message sent */
	double c_recv;   /* CPU per message received */
	double c_wake;   /* CPU to wake a blocked process and switch to it */
	double c_conn;   /* CPU per connection end: connect or accept, and the handshake */
	double c_engine; /* the rootless engine's own CPU per event, ranks on busy cores */
	/* the launch (the model check only; projections start ranks within --spread) */
	double c_fork;  /* the launcher's CPU per rank it forks (set up, fork) */
	double c_start; /* a real rank's CPU from its fork to its report: world of 1, rootless */
	double c_srv;   /* what a real standard rank 0 of a world of 1 costs beyond that */
	double w_start; /* that rank's wall time to its report on an idle machine (printed) */
	/* the standard path's store, measured on the real server (bootstrap/stdpath) */
	double s_req;    /* server CPU per request beyond the transport's receive and send */
	double s_key;    /* per key of an MGET answered when it comes */
	double s_rescan; /* per key looked up again when a parked MGET completes */
	double s_resume; /* per wake of a parked MGET by the key it waits for */
	double s_client; /* a client's CPU per request beyond the transport's, busy cores */
};

extern struct model sim_M; /* sim_model.c */

/* ------------------------------------------- actors and their events */

enum ev_kind { EV_START, EV_DELIVER, EV_TIMER, EV_CORE_FREE };

enum rank_state { R_NEW, R_QUEUED, R_RUNNING, R_BLOCKED, R_DONE };

struct sconn;

struct tev {
	struct tev *next;
	enum hpct_tevent_type type;
	struct sconn *conn; /* NULL: a report on the launcher's pipe */
	int err;
	size_t len; /* bytes of data[]; wire_len may be more */
	size_t wire_len;
	unsigned char data[];
};

struct sctx {
	struct srank *rank;
	int listening;
};

struct srank;
/* What one actor does, on its coroutine, until it returns (a rank: at its
 * report) or forever (a root). */
typedef void (*actor_fn)(struct srank *self);

/* An actor: a simulated rank (ids 0..N-1), or a thread or process beside
 * them: the root that serves the ranks on rank 0's node (id N), the launcher
 * (the model check).  One coroutine each. */
struct srank {
	int id;
	actor_fn body;
	enum rank_state state;
	ucontext_t uc;
	void *stack;
	uint64_t token; /* the current wait: a timer for an older one is stale */
	struct tev *inbox, *inbox_tail;
	struct sctx *tctx;
	struct hpct_world *w;
	struct srank *runq_next;
	double start_at, done_at;
	int rc;
	struct hpct_world_stats st;    /* the engine's own counts (rootless ranks) */
	long tx, rx, opened, accepted; /* the transport's counts (modelled actors) */
	double cpu;                    /* CPU it used, s */
	double busy_until;             /* when it last gave its core back */
	void *model;                   /* the modelled path's state for this actor */
};

struct sconn {
	struct hpct_tconn base;
	struct srank *owner;
	struct sconn *peer;
	int open;
	int who; /* modelled actors: the rank at the other end, once known */
	size_t max_msg;
	double last_at; /* delivery time of its last message: order is kept */
	struct sconn *all_next;
};

/* The scheduler's state (sim_sched.c), which the transport reads. */
extern struct srank *sim_ranks; /* every actor: ranks first */
extern int nranks_sim;          /* ranks */
extern int nactors_sim;         /* ranks, roots and the launcher */
extern int sim_per_node;        /* ranks per node; roots live on rank 0's */
extern struct srank *sim_cur;   /* the actor running now */
extern double sim_now;
extern struct sconn *sim_conns; /* every connection, freed after a run */

/* Queues an event at simulated time t. */
void sim_push(double t, int kind, int actor, uint64_t token, struct tev *tev);
/* Gives the core back until the actor has an event, or timeout_ms passed
 * (-1: no timeout); the wakeup's CPU is charged on return. */
void sim_block(struct srank *r, int timeout_ms);
/* Sleeps s seconds of simulated time, holding no core. */
void sim_sleep(struct srank *r, double s);
/* Gives the core to the next actor waiting for one, and queues behind it. */
void sim_yield(struct srank *r);
/* hpct__clock while simulating. */
double sim_clock(void);
/* The node an actor is on. */
int sim_node_of(int actor);

/* The simulated transport and addresses (sim_transport.c). */
extern const struct hpct_transport_ops sim_ops;
int sim_peer_addr(void *arg, int rank, struct sockaddr_storage *ss, socklen_t *len, char *text,
                  size_t textlen);
/* Sizes the per-node NIC queues for a run; frees them with 0. */
void sim_net_reset(int nodes);
/* The most bytes one NIC carried one way so far in this run. */
double sim_net_busiest(void);
/* The rootless engine's events so far in this run (what c_engine is
 * charged for); reset by sim_net_reset. */
extern long sim_engine_events;

/* The same transport as blocking-free calls for the modelled actors, which
 * handle their own events: the CPU of each is charged as the engine's are. */
void sim_listen(struct srank *r);
/* Opens a connection to actor `to`; HPCT_TEV_CONNECTED or _CONNECT_FAILED
 * follows as an event. */
struct sconn *sim_dial(struct srank *r, int to);
/* Sends a message of wire_len bytes, of which the first hdrlen (the part
 * the model reads) are hdr. */
void sim_put(struct sconn *c, const void *hdr, size_t hdrlen, size_t wire_len);
void sim_hangup(struct sconn *c);
/* The actor's next event, waiting up to timeout_ms (-1: forever); NULL
 * when the time passed.  The caller frees it. */
struct tev *sim_next(struct srank *r, int timeout_ms);
/* The launcher's pipe: a report from a rank. */
void sim_report(struct srank *to);

/* ------------------------------------------------------------- paths */

struct sim_run;

/* One path to a world, as the simulator runs it: a row of sim_paths. */
struct sim_path {
	const char *name;   /* rootless, standard, nccl-root */
	const char *counts; /* "simulated" (libhpct's own engine ran) or "model" */
	actor_fn rank;      /* a rank's life until its report */
	actor_fn root;      /* the thread on rank 0 that serves the others, or NULL */
	int root_at_start;  /* the root listens from time 0 (NCCL's, made before the job) */
	/* the run's model state: made before the actors start, freed after */
	void *(*setup)(const struct sim_run *run);
	void (*teardown)(void *state);
};

enum { SIM_ROOTLESS, SIM_STANDARD, SIM_NCCL, SIM_NPATHS };
extern const struct sim_path sim_paths[SIM_NPATHS];

/* The modelled paths' actors (sim_roots.c). */
void std_rank(struct srank *self);
void std_server(struct srank *self);
void *std_setup(const struct sim_run *run);
void std_teardown(void *state);
void nccl_rank(struct srank *self);
void nccl_root(struct srank *self);
void *nccl_setup(const struct sim_run *run);
void nccl_teardown(void *state);

/* One simulated run. */
struct sim_run {
	const struct sim_path *path;
	int n;
	int cold;      /* a world allgather of 64 bytes + a barrier; else a barrier */
	int cores;     /* 0: a core for every rank and root; else P shared cores */
	int per_node;  /* ranks per node, sharing its NIC */
	int launch;    /* forked in turn by a launcher on the cores (the model check) */
	double spread; /* else: ranks start within this many seconds */
	unsigned seed;
};

/* --max-rss: a simulation whose resident memory passes this many kB ends
 * the program (exit 3) naming the path, the ranks and the memory; 0: no
 * cap (sim_sched.c). */
extern long sim_max_rss_kb;

/* The run being simulated (sim_sched.c), for the actors. */
extern const struct sim_run *sim_run_now;
extern void *sim_state; /* the path's setup() */

/* A rank's process starting, in the model check only (projections start
 * ranks within --spread, started): `cpu` on its core, from the real rank
 * the calibration timed. */
void sim_process_start(double cpu);
/* Charges CPU to the running actor. */
static inline void sim_cpu(double s)
{
	sim_now += s;
}

struct sim_result {
	int n;
	double ms;          /* from the first start (or fork) until the last rank reported */
	long busy_msgs;     /* messages sent + received by the busiest process */
	long busy_conns;    /* connections opened + accepted by the busiest process */
	long total_msgs;    /* messages sent by all ranks (and roots) */
	long total_conns;   /* connections opened by all ranks (and roots) */
	int failed;         /* ranks that did not finish, or failed */
	double nic_bytes;   /* the most bytes one node's NIC carried one way */
	long engine_events; /* sends, connects and events the rootless engine handled */
	long root_requests; /* messages the root received (the store: requests) */
	/* where the CPU went, s: the launcher, the ranks (start and the rest),
	 * the root */
	double cpu_launcher, cpu_start, cpu_ranks, cpu_root;
	/* memory: the heap the simulation holds once every rank is done (its
	 * worlds, engines, connections, events and actors), less what was in
	 * use before it, per simulated rank; and this process's peak resident
	 * memory during it (VmHWM, reset before it), kB; -1 unknown */
	double heap_per_rank;
	long peak_rss_kb;
};

struct sim_result simulate(const struct sim_run *run);

/* The model's parameters (sim_model.c). */
/* Measures this machine; `bench` is hpct-bench (its ranks are timed), port
 * the first of the few ports the calibration listens on.  0, or -1 with
 * the reason printed. */
int calibrate(const char *bench, int port);
/* The same on real code (sim_calib.c), each 0 or -1 with the reason
 * printed: a real rank's start (worlds of 1 at ports port..port+7), the
 * real store server (at port), and, after those, what each path's work
 * costs per event beyond the transport's on busy cores (real worlds of 32
 * at port..port+64 and port+80). */
int calib_launch(const char *bench, int port);
int calib_store(int port);
int calib_work(const char *bench, int port);
/* The cores this process may run on. */
int sim_machine_cores(void);
/* The loopback TCP round trip between two processes on two cores (one
 * when there is one), s; -1 if it could not be measured. */
double sim_rtt(void);
/* Reads the "model" object of an earlier run's JSON; 0, or -1 naming what
 * is missing. */
int model_from(const char *file);
/* Writes the parameters: as JSON members, or as lines for people. */
void model_json(FILE *f);
void model_print(FILE *f);

#endif
