/* Inside the rootless store's server: its state and its connections,
 * shared by the event loop (server.c) and the requests' semantics
 * (requests.c).  The server thread owns all of it. */
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
	int told; /* answered with the cause of this rank's leaving */
	/* replication (replica.c): its reply waits until the forwarder has
	 * given the key's other homes every change made before it (fwd_done
	 * >= need); a home's connection (repl) is answered at once */
	uint64_t need;
	int repl;
};

struct srepl_batch;
struct srepl_dedupe;

struct ssrv {
	pthread_mutex_t mu; /* start only: the thread owns everything else */
	/* held while the server's and the forwarder's threads use w, which
	 * the world's end sets NULL (it outlives no world) */
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
	/* replication (replica.c), with R > 1 homes a key among `size` ranks:
	 * what a request changed (recording, dirty) goes in order to the
	 * key's other homes by the forwarder thread (batches fwd_issued, of
	 * which fwd_done are there); the request's id and answer (cap) too,
	 * kept by every home (dd) for a retry */
	int R, size;
	int recording;
	uint64_t fwd_issued, fwd_done; /* fwd_done: __atomic, the forwarder writes it */
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
	struct srepl_dedupe *dd;
	/* the view (view.c) this server last moved its keys for: its
	 * generation, its gone ranks (vdead), and the first homes whose
	 * keys this rank holds all of (have[h]: it has been a home of
	 * theirs since the epoch began, or their first live home sent it
	 * them all, OP_HAVE) */
	unsigned vgen;
	unsigned char *vdead, *have;
	int unheld; /* the request served (OP_DEAD, OP_HAVE) is answered at once */
	struct hpct_world *w;
	pthread_mutex_t fmu;
	pthread_cond_t fcv;
	struct srepl_batch *fhead, *ftail;
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

/* server.c: 1 when a line of this kind may go out now (*quiet_out: how
 * many were held back since the last one); "10.0.0.3:41234 (rank 7)",
 * the address and the rank it proved. */
const char *ssrv_who(const struct ssrv *s, const struct sconn *c, char *buf, size_t len);

/* requests.c: one request (the frame's body) from c: 0, or -1 when the
 * connection must close (malformed).  Its reply is queued on c, or c is
 * parked. */
int sreq_serve(struct ssrv *s, struct sconn *c, const unsigned char *p, size_t len);
void sreq_reply(struct ssrv *s, struct sconn *c, int32_t status, const void *a, size_t alen,
                const void *b, size_t blen);
void sreq_unpark(struct sconn *c);

/* replica.c.  srepl_start: reads HPCT_STORE_REPLICAS; with more than one,
 * hooks the table and starts the forwarder (0, or an error). */
int srepl_start(struct ssrv *s, struct hpct_world *w);
/* Around one request of the server thread: begin records what it
 * changes; end sends that to the keys' other homes (a batch) and sets
 * when c's answer may go. */
void srepl_begin(struct ssrv *s, const struct sconn *c);
void srepl_end(struct ssrv *s, struct sconn *c);
/* A new view of the gone ranks (view.c, OP_DEAD): the keys whose homes
 * changed go to their new ones, with OP_HAVE; the first live homes of
 * the keys of a newly gone rank are told (OP_DEAD).  Cheap when the view
 * is the one it moved its keys for. */
void srepl_view(struct ssrv *s);
/* OP_DEAD and OP_HAVE from c (key, body p, len): 0, or -1 (malformed). */
int srepl_told(struct ssrv *s, struct sconn *c, uint8_t op, const char *key, const unsigned char *p,
               size_t len);
/* For a request other than SET on `key`, which this rank does not hold:
 * 1, serve it; 0, answer ST_LOST (it holds only part of its first home's
 * keys); -1, this rank is leaving (its keys went to their next homes):
 * the client is to ask those. */
int srepl_have(const struct ssrv *s, uint64_t ns, const char *key);
/* 1 when c's answer must wait for the forwarder. */
int srepl_held(const struct ssrv *s, const struct sconn *c);
/* A request with an id (OP_RID): 1 when this home answered it before
 * (the answer is queued again), else 0 and its answer is kept once made. */
int srepl_seen(struct ssrv *s, struct sconn *c, uint64_t cid, uint64_t seq);
/* OP_REPL: a key's state from its first live home; 0, or -1 (malformed). */
int srepl_apply(struct ssrv *s, struct sconn *c, uint64_t ns, const char *key,
                const unsigned char *p, size_t len);
/* requests.c: what a key coming into being wakes (a replicated one too). */
void sreq_woken(struct ssrv *s, uint64_t ns, const char *key);

#endif
