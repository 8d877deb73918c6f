/* Inside the rootless store's server: its state and its connections,
 * shared by the event loop (server.c), the requests' semantics
 * (requests.c), the groups and their data (groups.c, data.c) and the
 * peers (peer.c).  The server thread owns all of it. */
#ifndef HPCT_STORE_SERVER_H
#define HPCT_STORE_SERVER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bootstrap/base/auth.h"
#include "bootstrap/base/log.h"
#include "bootstrap/base/util.h"
#include "bootstrap/store/table.h"
#include "bootstrap/store/vr.h"
#include "hpct/hpct.h"

#define KEY_SHOWN 100

struct sconn {
	int fd;
	char peer[HPCT_ADDRSTRLEN];
	unsigned char *in;
	size_t inlen, incap;
	/* a reply on its way: out[outoff..outlen), then oval from ovoff */
	unsigned char *out;
	size_t outlen, outoff, outcap;
	struct sval *oval;
	size_t ovoff;
	/* a parked GET, WAIT or queue POP; POPs are served in the order
	 * they parked (seq) */
	int parked;
	uint8_t op;
	uint64_t ns, seq;
	char *key;
	double deadline;
	/* admitted: proved the secret, or (none) sent a whole first request;
	 * closed at admit_by otherwise */
	int admitted;
	double admit_by;
	/* the process's in-flight budget (base/budget.h) this request holds:
	 * its bytes past WINDOW, taken before they are read; budget_for, the
	 * bytes it asked for; budget_wait: refused, not read until taken */
	uint64_t budget, budget_for;
	int budget_wait;
	struct hpct_auth_srv auth;
	int fuzz; /* no socket: replies are dropped as they are made */
	/* registered with the thread's epoll set (reg) for these events, its
	 * slot in srv.c with its fd as the event's data */
	int reg;
	uint32_t ev;
	int told;   /* answered with the cause of this rank's leaving */
	int served; /* a frame of it was served: OP_PEER may come first only */
	/* the request's group; its reply is held until the group's protocol
	 * says it may go (vr_ready: the data it saw is committed and, for a
	 * read, confirmed); blocked: not served yet (a reconfiguration is
	 * pending); asked, when its request was read */
	uint32_t g;
	int held, write, blocked;
	uint64_t need;
	double asked;
	/* a peer's connection (OP_PEER): its rank, and the data that came
	 * before the message it goes with */
	int from;
	struct vr_snap *stage;
};

struct speer;
struct srec_table;

struct ssrv {
	pthread_mutex_t mu; /* start only: the thread owns everything else */
	/* held while the server's thread uses w, which the world's end sets
	 * NULL (it outlives no world) */
	pthread_mutex_t wmu;
	int started, err;
	int rank;
	char where[HPCT_ADDRSTRLEN];
	int lfd;
	struct stab t;
	struct sconn *c;
	int nc, ccap, max_conns;
	/* bytes of input and output buffers, all connections */
	size_t inflight;
	uint64_t parks; /* requests parked so far: the next one's seq */
	double admit_s;
	/* accepting paused (EMFILE and kin) until then; logged once a pause */
	double resume_at;
	int pause_told;
	struct hpct_log_burst b_admit, b_full, b_conns, b_inflight; /* HPCT_LOG_BURST */
	/* with HPCT_SECRET: what a client proves, and the secret (a copy) */
	struct hpct_auth_id id;
	unsigned char *secret;
	size_t slen;
	/* the process is exiting after a peer's failure (server.c's
	 * leave()): its parked requests, and any that come, are answered
	 * HPCT_EPEERDEAD with `cause`; wake[0] wakes the thread for it,
	 * `told` (under mu, signalled on cv) says it has, and `clear` that
	 * every connection but this process's own (`own`, nown) has been
	 * told or has closed */
	int wake[2];
	int ep; /* the thread's epoll set: the listener, wake[0], each connection */
	pid_t pid;
	pthread_cond_t cv;
	int leaving, told, clear;
	char cause[512];
	char (*own)[HPCT_ADDRSTRLEN];
	int nown;
	double timeout_s; /* HPCT_TIMEOUT: the linger's cap, with LINGER_S */
	struct hpct_world *w;
	/* the groups (groups.c): the protocol's world, one state machine for
	 * each group this rank is or was a member of (NULL: never), when the
	 * next tick is due; rescan: connections blocked or held may go now */
	struct vr_world vw;
	struct vr **grp;
	uint32_t *active;
	int nactive, size;
	double tick_at;
	int rescan;
	uint64_t job, epoch;
	/* the request being served (requests.c): when it was read, and the
	 * answers it made (its own, and those of requests it woke), whose
	 * `need` is the write's opnum once proposed */
	int serving;
	double asked;
	struct sconn *made[64];
	int nmade;
	/* what a write changed (data.c): its keys, and the answers kept for a
	 * retry (rid: the request's id, its answer captured as it is made) */
	int recording;
	struct {
		uint64_t ns;
		char *key;
	} * dirty;
	int ndirty, dcap;
	struct {
		int on;
		const struct sconn *c;
		uint64_t cid, seq;
		int32_t status;
		unsigned char *b;
		size_t len, cap;
	} cap;
	struct srec_table *recs;
	/* the peers (peer.c): this rank's connections to the others' servers,
	 * made by a thread of their own (they may block on a proof) */
	struct speer **peers;
	int cq[2]; /* connections made: the connector's answers */
	pthread_mutex_t cmu;
	pthread_cond_t ccv;
	int *want, nwant; /* ranks to connect to */
};

/* Buffer sizes, counted in inflight as they change. */
static inline void set_incap(struct ssrv *s, struct sconn *c, size_t cap)
{
	s->inflight = s->inflight - c->incap + cap;
	c->incap = cap;
}

static inline void set_outcap(struct ssrv *s, struct sconn *c, size_t cap)
{
	s->inflight = s->inflight - c->outcap + cap;
	c->outcap = cap;
}

/* 1 while a reply is on its way. */
static inline int pending(const struct sconn *c)
{
	return c->outoff < c->outlen || c->oval;
}

/* server.c: "10.0.0.3:41234 (rank 7)", the address and the rank it proved. */
const char *ssrv_who(const struct ssrv *s, const struct sconn *c, char *buf, size_t len);
/* server.c: every connection held or blocked is looked at again (their
 * group moved on). */
void ssrv_rescan(struct ssrv *s);

/* requests.c: one request (the frame's body) from c, read at `now`: 0, or
 * -1 when the connection must close (malformed).  Its reply is queued on
 * c (held, maybe), c is parked, or (c->blocked) it is left to serve later. */
int sreq_serve(struct ssrv *s, struct sconn *c, const unsigned char *p, size_t len, double now);
void sreq_reply(struct ssrv *s, struct sconn *c, int32_t status, const void *a, size_t alen,
                const void *b, size_t blen);
void sreq_unpark(struct sconn *c);
/* An answer that waits for nothing (a position, a refusal, a cause). */
void sreq_answer(struct ssrv *s, struct sconn *c, int32_t status, const void *a, size_t alen);
/* What a key coming into being wakes (requests.c). */
void sreq_woken(struct ssrv *s, uint64_t ns, const char *key);
/* c's reply is the group's position here (ST_REDIRECT): its primary
 * changed, or this rank is fenced (HPCT_EFENCED with why). */
void sreq_redirect(struct ssrv *s, struct sconn *c, uint32_t g);

/* groups.c.  sgrp_start: the protocol's world from the settings, a group
 * for each group of which this rank is a configuration-0 member; 0 or an
 * error.  sgrp_get: group g (create: made OUT when missing; NULL for
 * want of memory). */
int sgrp_start(struct ssrv *s, struct hpct_world *w);
struct vr *sgrp_get(struct ssrv *s, uint32_t g, int create);
/* Timers of every group; the time of the next. */
double sgrp_tick(struct ssrv *s, double now);
/* 1 when c's reply must wait for its group (vr_ready says not yet). */
int sgrp_held(struct ssrv *s, const struct sconn *c, double now);
/* g's position here, as ST_REDIRECT carries it, in buf: its length. */
size_t sgrp_position(struct ssrv *s, uint32_t g, unsigned char *buf);
/* This rank is about to exit: each group asked to replace it
 * (vr_leaving, once); how many groups still have it as a member. */
int sgrp_leaving(struct ssrv *s, double now);
/* This rank exits: every group is left (vr_leave) and the peers told. */
void sgrp_leave(struct ssrv *s);
/* The world moved to a new epoch: every group, key and peer forgotten. */
void sgrp_reset(struct ssrv *s);
/* A world of this rank alone, one group it is the primary of, no peer:
 * the fuzz target's (server.c).  0, or -1 for want of memory. */
int sgrp_solo(struct ssrv *s);

/* data.c: a write's changes (what the table's hook recorded since
 * sdata_begin, and the answer kept for its retry) as one entry, proposed
 * to g's members: 0 and its opnum; 1 when nothing changed; -1 when g
 * took no operation (the caller checked it would: logged). */
void sdata_begin(struct ssrv *s);
int sdata_end(struct ssrv *s, uint32_t g, double now, uint64_t *opnum_out);
/* A request with an id (OP_RID): 1 when group g answered it before (the
 * answer is queued again), else 0 and its answer is kept once made. */
int sdata_seen(struct ssrv *s, struct sconn *c, uint32_t g, uint64_t cid, uint64_t seq);
/* vr_io's apply, install and release; the data of group g streamed to a
 * peer (OP_P_KEY and OP_P_REC frames), counted in *keys and *recs. */
void sdata_apply(struct ssrv *s, uint32_t g, const void *entry, size_t len);
void sdata_install(struct ssrv *s, uint32_t g, struct vr_snap *snap);
void sdata_release(struct vr_snap *snap);
int sdata_stream(struct ssrv *s, uint32_t g, int (*put)(void *arg, const unsigned char *f,
                                                        size_t len),
                 void *arg);
/* A frame of data from a peer (OP_P_KEY, OP_P_REC) into *stage (made when
 * NULL): 0, or -1 (malformed, or no memory). */
int sdata_stage(struct vr_snap **stage, uint8_t op, const unsigned char *p, size_t len);
/* Answers kept for retries older than the store could be asked again go. */
void sdata_expire(struct ssrv *s, double now);
/* The dirty list's and the records' memory (sgrp_reset, the fuzz hook). */
void sdata_clear(struct ssrv *s);

/* peer.c: the message to rank `to` (vr_io's send); a peer's frame (after
 * OP_PEER) from c, read at `now`: 0, or -1 to close c; a peer's
 * connection's events (server.c's loop: its epoll data is PEER_TAG | rank). */
void speer_send(struct ssrv *s, int to, const struct vr_msg *m);
int speer_frame(struct ssrv *s, struct sconn *c, const unsigned char *p, size_t len, double now);
int speer_hello(struct ssrv *s, struct sconn *c, const unsigned char *p, size_t len);
void speer_event(struct ssrv *s, int rank, uint32_t events, double now);
/* Connections the connector thread made: taken into the loop. */
void speer_connected(struct ssrv *s, double now);
int speer_start(struct ssrv *s);
/* Every peer's output sent (1), or still some (0). */
int speer_flushed(struct ssrv *s);
void speer_close_all(struct ssrv *s);
#define PEER_TAG (1ull << 62)

#endif
