/* The fan-out (hpct_fanout, include/hpct/fanout.h): its planners, one
 * const table (plan.c); its transfer table, one row "tcp" (xfer_tcp.c);
 * where a member's data listener binds, one row per path (addr.c); the
 * server that answers a member's receivers (serve.c); the public call and
 * the receiving side (fanout.c).
 *
 * Data plane: each receiver pulls.  It connects to its planned source,
 * says HELLO, and asks for chunk after chunk: WAIT(i) when it does not
 * know the source to hold chunk i yet (the source answers HAVE(n) once it
 * holds n > i chunks), then GET(i) (answered DATA(i) and the bytes).  A
 * receiver takes a chunk's bytes from the process's budget only for a GET
 * of a chunk its source already holds, and a server never takes any: a
 * wait for the budget never waits on another process's budget, so
 * concurrent fan-outs cannot hold each other's budgets in a cycle.  A
 * receiver ends with BYE to its source and DONE to every first source
 * (the first sources serve until every receiver is DONE or DEAD); a server
 * that sees a receiver's connection end without BYE tells the first
 * sources DEAD.  Re-planning is the receiver's own: when its source dies
 * it takes the rest from a first source chosen by its identity (plan.c),
 * from the chunk it lacked; nobody else has to agree.
 *
 * Message (integers big-endian), FO_HDR bytes:
 *    0 u32 magic "HPF1"  4 u8 type  5..7 0  8 u32 a  12 u32 b  16 u64 c
 * HELLO a = sender's member index, c = the fan-out's id.  WAIT a = chunk.
 * HAVE a = chunks held.  GET a = chunk.  DATA a = chunk, b = bytes, then
 * the bytes.  BYE: done with this source.  DONE / DEAD a = the member. */
#ifndef HPCT_FANOUT_INTERNAL_H
#define HPCT_FANOUT_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "bootstrap/world.h"
#include "hpct/fanout.h"
#include "hpct/hpct.h"

#define FO_MAGIC 0x48504631u /* "HPF1" */
#define FO_HDR   24

enum fo_type { FO_HELLO = 1, FO_WAIT, FO_HAVE, FO_GET, FO_DATA, FO_BYE, FO_DONE, FO_DEAD };

struct fo_msg {
	uint8_t type;
	uint32_t a, b;
	uint64_t c;
};

/* ---- planners (plan.c): pure functions, no sockets ---- */

/* What every member knows alike after the first allgather, and what the
 * plan has decided so far. */
struct fo_plan_in {
	int n;                /* members */
	const uint64_t *held; /* version each member held at the start */
	uint64_t want;
	uint64_t seed;                 /* the fan-out's identity: spreads receivers */
	const unsigned char *finished; /* holds `want` in full by the start of this wave */
	const unsigned char *dead;     /* known dead (may be NULL) */
	int wave;                      /* 1, 2, ... */
};

/* One row per enum hpct_fanout_plan: for one wave, assign[j] = the member
 * receiver j pulls from, for each receiver this wave takes, -1 for every
 * other member.  Returns how many it took.  Never a source that is not
 * finished (so never one of another version) nor a dead one. */
struct fo_planner {
	const char *name;
	int (*wave)(const struct fo_plan_in *in, int *assign);
};

extern const struct fo_planner hpct__fo_planners[3];

/* The whole schedule, wave after wave, every receiver finishing in the
 * wave it is taken: src[j] the source of member j (-1 for a first
 * source), wave_of[j] its wave (0 for a first source).  HPCT_ESTATE when
 * nobody holds `want` (receivers remain and no wave takes any).  *waves,
 * *sources_last: the plan's waves and its last wave's sources. */
int hpct__fo_schedule(const struct fo_planner *p, int n, const uint64_t *held, uint64_t want,
                      uint64_t seed, int *src, int *wave_of, int *waves_out, int *sources_last_out);

/* A receiver's next source once `dead` sources died: a first source still
 * alive, chosen by the receiver's identity, the `attempt`-th one after
 * that; -1 when every first source is dead. */
int hpct__fo_replan(int n, const uint64_t *held, uint64_t want, uint64_t seed,
                    const unsigned char *dead, int me, int attempt);

/* ---- the transfer table (xfer_tcp.c) ---- */

/* How chunks move between two members.  One row now, "tcp"; a GPU row
 * (NCCL point-to-point, a NIXL-like agent) would fill the same entries
 * (docs/fanout.md).  Deadlines are hpct__now seconds; errors -errno,
 * HPCT_ETIMEDOUT, HPCT_EPEERDEAD (the peer closed), not logged here. */
struct fo_xfer_ops {
	const char *name;
	/* A listener at `at` (port 0: the kernel's), its address in *bound. */
	int (*listen)(const struct sockaddr_storage *at, socklen_t len, int *fd_out,
	              struct sockaddr_storage *bound, socklen_t *bound_len);
	/* One waiting connection, or -EAGAIN. */
	int (*accept)(int lfd);
	int (*connect)(const struct sockaddr_storage *ss, socklen_t len, double deadline);
	int (*send)(int fd, const void *p, size_t n, double deadline);
	int (*recv)(int fd, void *p, size_t n, double deadline);
	void (*close)(int fd);
};

extern const struct fo_xfer_ops hpct__fo_xfer_tcp;

/* ---- where a member's listener binds (addr.c), one row per path ---- */
struct fo_addr_ops {
	const char *name;
	int (*bind_addr)(struct hpct_world *w, struct sockaddr_storage *ss, socklen_t *len);
};
/* indexed by enum hpct_path (the world's w->ops->path) */
extern const struct fo_addr_ops *const hpct__fo_addr[HPCT_PATH_ROOTLESS + 1];

/* ---- one fan-out in one member ---- */

enum fo_status { FO_PENDING = 0, FO_FINISHED = 1, FO_GONE = 2 };

struct fo_member {
	uint64_t held;
	int world_rank;
	struct sockaddr_storage addr;
	socklen_t addrlen;
	char text[HPCT_ADDRSTRLEN];
};

struct fo {
	const struct fo_xfer_ops *xo;
	char name[64];
	uint64_t id, want, group;
	unsigned char *buf;
	size_t len, chunk;
	uint32_t nchunks;
	int no_pipeline;
	int me, n;
	uint64_t epoch;
	double timeout_s;
	struct fo_member *m;
	int *src, *wave_of;
	int lfd;
	/* shared with the server thread, under mu */
	pthread_mutex_t mu;
	uint32_t have;         /* chunks of `want` this member holds */
	unsigned char *status; /* by member: enum fo_status */
	unsigned char *dead;   /* by member: known dead (the receiving side's) */
	unsigned char *talked; /* by member: exchanged chunks with it */
	int stop;              /* the receiving side failed: serve no more */
	int wake[2];           /* a byte: have grew, or stop */
	int serve_rc;          /* the server's result */
	char serve_msg[600];   /* and its message (hpct_last_error is per thread) */
	uint64_t bytes_sent, bytes_recv;
};

/* Bytes of chunk i. */
static inline size_t fo_chunk_len(const struct fo *f, uint32_t i)
{
	size_t off = (size_t)i * f->chunk;
	return f->len - off < f->chunk ? f->len - off : f->chunk;
}

int hpct__fo_first_source(const struct fo *f, int j);
void hpct__fo_encode(const struct fo_msg *m, unsigned char *p);
int hpct__fo_decode(const unsigned char *p, struct fo_msg *m);
int hpct__fo_send_msg(const struct fo *f, int fd, uint8_t type, uint32_t a, uint32_t b, uint64_t c,
                      double deadline);
/* A short connection to member j carrying one control message (DONE or
 * DEAD); best effort: a dead member is no error. */
void hpct__fo_tell(struct fo *f, int j, uint8_t type, uint32_t who);
/* The server: runs until every receiver it must wait for is done or dead
 * (serve.c).  Thread body; its result in f->serve_rc. */
void *hpct__fo_serve(void *arg);
/* Wakes the server (have grew, or stop). */
void hpct__fo_wake(struct fo *f);

/* Test hook (tests/test_fanout.c): called by the server after it sent a
 * chunk, with the member index and the chunk; NULL in the library. */
extern void (*hpct__fo_served_hook)(int member, uint32_t chunk);

#endif
