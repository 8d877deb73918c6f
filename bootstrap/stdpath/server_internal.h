/* Inside the standard path's rendezvous server: what its files share.
 * table.c keeps the keys, reply.c answers requests and parks and wakes the
 * ones that wait, request.c parses and runs them, server.c owns the thread,
 * its sockets and their lifetime.  Nothing outside them includes this. */
#ifndef HPCT_STDPATH_SERVER_INTERNAL_H
#define HPCT_STDPATH_SERVER_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "bootstrap/base/auth.h"
#include "bootstrap/stdpath/stdpath.h"
#include "hpct/hpct.h"

#define IN_CAP          (16 * 1024) /* holds the largest field parsed whole (a key) */
#define OUT_HIGH        (4u << 20)  /* stop parsing a connection while this much is unsent */
#define READS_PER_EVENT 16          /* fairness: one busy sender cannot starve the loop */
#define KEY_SHOWN       200         /* bytes of a key quoted in a log line */
#define VAL_WINDOW      (64 * 1024) /* a value's buffer runs this far ahead of its bytes */
#define ACCEPT_RETRY_S  0.25        /* accept paused (EMFILE): how often to try again */
/* What a key costs the store besides its value. */
#define ENTRY_COST(klen) (sizeof(struct entry) + (size_t)(klen) + 1)

struct conn;

struct entry {
	struct entry *next; /* hash chain */
	uint64_t hash;
	unsigned char *val; /* owned; NULL while absent */
	uint32_t vlen;
	int present;           /* absent entries exist only while someone waits on them */
	uint32_t readers_left; /* reads before deletion; 0: kept */
	int owner;             /* rank charged for it (the last to set it); -1 while absent */
	int64_t min_wait;      /* lowest WAITGE target parked here (a lower bound) */
	struct conn *waiters;
	uint32_t klen;
	char key[];
};

struct table {
	struct entry **b;
	size_t mask;
	_Atomic size_t count; /* written by the server thread, read by tests */
	size_t bytes;         /* ENTRY_COST + value of every present key */
	size_t *owned;        /* the same per rank (owner) */
};

enum { ST_OP, ST_HELLO, ST_N, ST_KLEN, ST_KEY, ST_SETHDR, ST_VAL, ST_I64 };

struct conn {
	struct hpct_std_server *s;
	int fd, rank;  /* rank -1 until HELLO */
	int64_t epoch; /* what the rank declared (EPOCH), or its proof named */
	int dead, closing, queued, parked, ever_parked;
	int said_bye, dropped; /* left properly; closed by us after a protocol error */
	int discard;           /* refused over a limit: the request's bytes are dropped */
	int err;               /* errno that ended the connection, 0 if none */
	uint32_t evmask;
	char peer[HPCT_ADDRSTRLEN];
	struct conn *prev, *next;   /* every open connection */
	struct conn *wprev, *wnext; /* waiters of wentry */
	struct entry *wentry;
	struct conn *qnext; /* run queue */
	struct conn *dnext; /* dead list */
	/* not through HELLO yet: on the server's early list, in accept order */
	struct conn *eprev, *enext;
	int early;
	double hello_by;
	uint64_t rx; /* bytes received */
	/* the request being parsed or parked; keys live in kbuf at koff[i] */
	int st;
	uint8_t op;
	uint32_t reqrank, klen, n, readers, vlen, vgot, vcap, cursor;
	int64_t i64;
	unsigned char *val; /* vcap bytes, counted in the server's inflight */
	char *kbuf;
	size_t kused, kcap, nkeys, keycap;
	size_t *koff;
	uint32_t *klens;
	struct entry **ents;
	size_t ipos, ilen, opos, olen, ocap;
	unsigned char *out;
	/* with a secret: served once it proved it */
	int admitted;
	struct hpct_auth_srv auth;
	unsigned char in[IN_CAP];
};

const char *hpct__stdsrv_ckey(const struct conn *c, size_t i);
void hpct__stdsrv_conn_close(struct conn *c);
void hpct__stdsrv_conn_free(struct conn *c);

struct hpct_std_server {
	int lfd, epfd, evfd, nranks, listen_paused;
	int joined; /* ranks connected now */
	uint64_t job;
	/* with a secret (a copy): what clients prove */
	unsigned char *secret;
	size_t slen;
	struct hpct_auth_id auth_id;
	char addr[HPCT_ADDRSTRLEN];
	pthread_t thread;
	struct table tab;
	struct conn *conns, *runq, *deadq, **by_rank;
	struct hpct_std_limits lim;
	size_t inflight;                 /* bytes allocated for values being received */
	struct conn *early, *early_tail; /* accepted, not through HELLO, oldest first */
	size_t nearly;
	int accept_stalled;     /* accept failed for want of descriptors or memory */
	double accept_retry_at; /* while listen_paused */
	_Atomic uint64_t wakeups;
	double t0;
	/* The first rank whose connection closed without BYE at the latest
	 * epoch that lost one (lost_epoch): from then on no wait of that epoch
	 * or an earlier one can be trusted to end, so none is parked
	 * (lost_rank -1: none).  A later epoch's waits park as usual. */
	int lost_rank, final;
	int64_t lost_epoch;
	char lost_why[HPCT_ADDRSTRLEN + 160];
	pthread_mutex_t lock; /* guards stopping and stop_deadline */
	int stopping;
	double stop_deadline;
};

/* Parses and runs whatever complete fields the input buffer holds. */
void hpct__stdsrv_conn_progress(struct conn *c);
/* c was just accepted: on the early list, closing the oldest past the
 * limit. */
void hpct__stdsrv_early_add(struct conn *c);
/* c is through HELLO, or gone: off the early list. */
void hpct__stdsrv_early_done(struct conn *c);
/* Closes the connections past their HELLO deadline; returns the next
 * deadline, 0 if none. */
double hpct__stdsrv_early_expire(struct hpct_std_server *s, double now);
/* A request over one of the limits: one line naming the client, the
 * reason (with the limit and its value) as an error reply, and the rest of
 * the request dropped; the connection stays usable. */
void hpct__stdsrv_over_limit(struct conn *c, int code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
/* Whether the store can take `more` bytes set by rank r (0), or the
 * refusal's reason in why (HPCT_ENOMEM). */
int hpct__stdsrv_store_room(struct conn *c, size_t more, char *why, size_t len);
/* Charges e (present, value set) to rank `owner`, or uncharges it (-1). */
void hpct__stdsrv_entry_charge(struct table *t, struct entry *e, int owner);
/* Drops the value; the entry itself stays while someone waits on it. */
void hpct__stdsrv_entry_clear(struct table *t, struct entry *e);
/* Answers the MGET if every key exists, else parks on the first missing one. */
void hpct__stdsrv_mget_try(struct conn *c);
void hpct__stdsrv_out32(struct conn *c, uint32_t v);
int hpct__stdsrv_out_reserve(struct conn *c, size_t n);
void hpct__stdsrv_put(struct conn *c, const void *p, size_t n);
void hpct__stdsrv_reply_err(struct conn *c, int code, const char *msg);
void hpct__stdsrv_reply_status(struct conn *c, int status);
void hpct__stdsrv_req_done(struct conn *c);
void hpct__stdsrv_schedule(struct conn *c);
struct entry *hpct__stdsrv_tab_find(struct table *t, const char *k, uint32_t klen);
/* Finds or creates (absent) the entry of k; NULL when out of memory. */
struct entry *hpct__stdsrv_tab_get(struct table *t, const char *k, uint32_t klen);
void hpct__stdsrv_tab_remove(struct table *t, struct entry *e);
void hpct__stdsrv_waitge_try(struct conn *c);
/* e changed: retries whoever waits on it.  e may be freed by the answers. */
void hpct__stdsrv_wake(struct entry *e, int was_absent);
const char *hpct__stdsrv_who(const struct conn *c, char *buf, size_t len);
/* A protocol violation: log it once, answer HPCT_EPROTO and close. */
void hpct__stdsrv_conn_bad(struct conn *c, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

#endif
