/* The parts of hpct-bench-sim: the model of this machine (sim_model.c), a
 * simulated transport behind hpct's table of transport functions
 * (sim_transport.c), and the scheduler that runs every simulated rank as a
 * coroutine on a simulated clock (sim_sched.c).  hpct-bench-sim.c reads the
 * options and prints the results. */
#ifndef HPCT_SIM_H
#define HPCT_SIM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <ucontext.h>

#include "bootstrap/world.h"
#include "hpct/hpct.h"
#include "transport/transport.h"

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

extern struct model sim_M; /* sim_model.c */

/* ------------------------------------------------ ranks and their events */

enum ev_kind { EV_START, EV_DELIVER, EV_TIMER, EV_CORE_FREE };

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
	struct hpct_world *w;
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

/* The scheduler's state (sim_sched.c), which the transport reads. */
extern struct srank *sim_ranks;
extern int nranks_sim;
extern struct srank *sim_cur; /* the rank running now */
extern double sim_now;
extern struct sconn *sim_conns; /* every connection, freed after a run */

/* Queues an event at simulated time t. */
void sim_push(double t, int kind, int rank, uint64_t token, struct tev *tev);
/* Gives the core back until the rank has an event, or timeout_ms passed
 * (-1: no timeout). */
void sim_block(struct srank *r, int timeout_ms);
/* hpct__clock while simulating. */
double sim_clock(void);

/* The simulated transport and addresses (sim_transport.c). */
extern const struct hpct_transport_ops sim_ops;
int sim_peer_addr(void *arg, int rank, struct sockaddr_storage *ss, socklen_t *len, char *text,
                  size_t textlen);

struct sim_result {
	int n;
	double ms;        /* from the first start until the last rank is done */
	long busy_msgs;   /* messages sent + received by the busiest rank */
	long busy_conns;  /* connections opened + accepted by the busiest rank */
	long total_msgs;  /* messages sent by all ranks */
	long total_conns; /* connections opened by all ranks */
	int failed;       /* ranks that did not finish, or failed */
};

/* Runs N ranks of hpct's rootless path (sim_sched.c); start times from the
 * seed (all within `spread` s, or the launch model's serial forks when
 * sim_M.c_fork > 0); cold: allgather + barrier, else a barrier. */
struct sim_result simulate(int n, unsigned seed, int cores, int cold, double spread);

/* The modelled roots and the model's parameters (sim_model.c). */
struct sim_result std_model(int n, double spread, int cores, unsigned seed);
struct sim_result nccl_model(int n, double spread, unsigned seed);
void calibrate(const char *rank_prog);
int model_from(const char *file);

#endif
