/* The standard (root-based) path: rank 0 of the world serves a rendezvous
 * store at MASTER_ADDR:MASTER_PORT, as PyTorch's TCPStore does, and every
 * collective is routed through it.  Used when HPCT_USE_ROOTLESS is unset/0 or
 * the rootless inputs are missing.
 *
 * Wire protocol (all integers big-endian; key = u32 len + bytes, value =
 * u32 len + bytes):
 *   request : u8 op, u32 rank-or-0, then op-specific fields
 *     HELLO  : u32 HPCT_STD_MAGIC, u32 world size, u64 job hash
 *     SET    : key, u32 readers, value
 *     MGET   : u32 n, n keys
 *     ADD    : key, i64 delta
 *     WAITGE : key, i64 value
 *     BYE    : nothing; no reply, the server closes
 *     EPOCH  : i64 epoch: the restart epoch the rank works at from now on
 *              (not below the connection's; 0 after HELLO, or the one its
 *              proof of the secret named)
 *   reply   : i32 status (0 or an HPCT_E* code), then
 *     error  : u32 len + message (the server's reason)
 *     MGET   : n values, in request order, once all keys exist
 *     ADD    : i64 counter after the add
 *     others : nothing
 * A counter is an 8-byte big-endian i64 value (MGET returns it as such); a
 * missing counter counts as 0; ADD or WAITGE on a value of another size is
 * refused with HPCT_EINVAL.  A key set with readers > 0 is dropped after that
 * many MGET answers contained it, so the store does not grow with every
 * collective; readers = 0 keeps it.  SET replaces an existing key.
 * A request before HELLO, an unknown op or a length above the limits below
 * gets an HPCT_EPROTO reply and the connection is closed; a HELLO with a wrong
 * magic, job or size, a rank out of range or a rank already connected gets
 * HPCT_EREFUSED and is closed.  Requests on one connection are answered in
 * order; a parked MGET or WAITGE holds back the ones behind it.
 * A rank whose connection closes after HELLO without BYE (it died, gave up
 * after a timeout, or was dropped for a protocol error) is lost: every parked
 * MGET and WAITGE, and from then on every one that cannot be answered at
 * once, gets HPCT_EPEERDEAD with a reason naming the first rank lost ("rank 3
 * at 10.0.0.7:41234 left without saying goodbye (Connection reset by
 * peer)").  Keys that exist are still served; SET and ADD still work.
 * A loss concerns the epoch the lost rank was at and the ones before: the
 * waits of connections that declared a later epoch (EPOCH) park as usual,
 * which is how the survivors of an in-process recovery and the replacements
 * of the lost ranks meet again through the same server.  A HELLO for a rank
 * whose old connection is gone but not yet noticed (its process died just
 * now) closes that connection as lost first, then admits the new one.
 * A request over one of the server's limits (struct hpct_std_limits: keys in
 * one MGET, bytes of its keys or of its answer, bytes or keys stored, bytes
 * stored by one rank) gets HPCT_EINVAL or HPCT_ENOMEM with a reason naming
 * the limit and its value; the rest of the request is read and dropped, and
 * the connection stays usable.  A connection that has not completed HELLO
 * (and the shared secret's proof) within hello_s of being accepted is
 * closed. */
#ifndef HPCT_STDPATH_H
#define HPCT_STDPATH_H

#include "bootstrap/base/private_api.h"

#include "bootstrap/base/auth.h"

#include <stddef.h>
#include <stdint.h>

#define HPCT_STD_MAGIC     0x48504331u           /* "HPC1" */
#define HPCT_STD_MAX_KEY   4096u                 /* bytes in a key */
#define HPCT_STD_MAX_VALUE (64u << 20)           /* bytes in a value */
#define HPCT_STD_MAX_KEYS  1000000u              /* keys in one MGET (the wire's; see mget_keys) */
#define HPCT_STD_FUZZ_JOB  0x66757a7a6a6f6221ull /* hpct__std_fuzz_one's job */

enum hpct_std_op {
	HPCT_STD_HELLO = 1,
	HPCT_STD_SET = 2,
	HPCT_STD_MGET = 3,
	HPCT_STD_ADD = 4,
	HPCT_STD_WAITGE = 5,
	HPCT_STD_BYE = 6,
	HPCT_STD_EPOCH = 7,
};

struct hpct_std_server;
struct hpct_std_client;

/* What one rendezvous server accepts, so that no client can make it grow
 * without bound.  hpct__std_limits_default() gives, for N ranks:
 *   hello_s        HPCT_TIMEOUT: a client gives up on its own by then, so
 *                  no client within its deadline is closed;
 *   mget_keys      N + 64: the collectives fetch N - 1 keys, Gloo's store 1;
 *   mget_key_bytes mget_keys x 512: the collectives' keys are under 96 bytes;
 *   store_bytes    HPCT_STD_STORE_MB MiB, by default 128 + 2 N: an allgather
 *                  of items of s bytes holds N s at once, an alltoall N^2 s,
 *                  a broadcast s, and a 64 MiB value (the wire's largest)
 *                  must fit in the smallest job; each key counts its value,
 *                  its name and its entry, and values being received count
 *                  what was allocated for them so far;
 *   rank_bytes     store_bytes / 2: what the keys one rank set may hold, so
 *                  one rank cannot fill the store for the others;
 *   store_keys     HPCT_STD_STORE_KEYS, by default 4 (N + 32)^2: two
 *                  alltoalls in flight hold 2 N (N - 1) keys;
 *   early_conns    2 N + 256: connections that have not said HELLO yet (a
 *                  whole job connecting at once is N); past it the oldest is
 *                  closed.
 * An MGET's answer may not exceed store_bytes either (a key may be named
 * more than once). */
struct hpct_std_limits {
	double hello_s;
	uint32_t mget_keys;
	size_t mget_key_bytes;
	size_t store_bytes, rank_bytes, store_keys;
	size_t early_conns;
};

/* The limits above for `nranks` from the settings; HPCT_EBADENV (logged,
 * naming the variable) for a bad setting. */
int hpct__std_limits_default(int nranks, struct hpct_std_limits *lim_out);

/* Starts the server thread listening on host:port (a literal or a name;
 * never the wildcard), for `nranks` clients of job `job`.  Binds before
 * returning: HPCT_EADDRINUSE names host:port.  With a secret in `key` (may
 * be NULL) a client is served only once it proved it (auth.h; refusals are
 * logged with the source address). */
int hpct__std_server_start(const char *host, int port, int nranks, uint64_t job,
                           const struct hpct_auth_key *key, struct hpct_std_server **server_out);
/* The same with given limits (NULL: hpct__std_limits_default()). */
int hpct__std_server_start_limits(const char *host, int port, int nranks, uint64_t job,
                                  const struct hpct_auth_key *key,
                                  const struct hpct_std_limits *lim,
                                  struct hpct_std_server **server_out);
/* Waits until every client said BYE or hung up, or until `deadline`
 * (CLOCK_MONOTONIC seconds, see hpct__now), then stops the thread and frees
 * everything.  A connection that has not said HELLO yet is waited for too.
 * Rank 0 closes its own client first, or this waits for the deadline.
 * Accepts NULL. */
void hpct__std_server_stop(struct hpct_std_server *server, double deadline);

/* Keys the store holds now (for tests: finished collectives leave none). */
size_t hpct__std_server_keys(const struct hpct_std_server *server);
/* Times the server thread woke from epoll_wait (for tests: a paused accept
 * loop does not spin). */
uint64_t hpct__std_server_wakeups(const struct hpct_std_server *server);
/* For tests/fuzz/fuzz_stdpath.c (see server.c). */
HPCT_PRIVATE void hpct__std_fuzz_one(const unsigned char *data, size_t len);

/* Connects to the server, retrying with capped backoff until `deadline`,
 * and says HELLO.  Errors: HPCT_ETIMEDOUT (names this rank, host:port and the
 * last OS error), HPCT_EREFUSED (the server's reason), HPCT_ERESOLVE,
 * HPCT_EINVAL, -errno; with a secret in `key`, the proof's failures
 * (auth.h). */
int hpct__std_client_connect(const char *host, int port, int rank, int size, uint64_t job,
                             const struct hpct_auth_key *key, double deadline,
                             struct hpct_std_client **client_out);
/* Tells the server this rank works at `epoch` from now on (an in-process
 * recovery: stdpath/path.c); the client connect does it itself for a world
 * started past epoch 0.  Errors as the calls below; HPCT_EINVAL when the
 * epoch is below the one the connection declared. */
int hpct__std_client_epoch(struct hpct_std_client *c, uint64_t epoch, double deadline);
/* Says BYE and closes.  Accepts NULL. */
void hpct__std_client_close(struct hpct_std_client *client);

/* Each call blocks until answered or `deadline`; errors name the server
 * address, the key and this rank: HPCT_ETIMEDOUT, HPCT_EPEERDEAD (the server
 * closed or died, or another rank was lost: then the server's reason, naming
 * that rank, ends the message), HPCT_EINVAL (a length above the limits, or a
 * counter op on a non-counter), HPCT_EPROTO.  After a timeout or a lost
 * connection the client is unusable (a reply may still be owed): later calls
 * return HPCT_ESTATE; close it.  After HPCT_EPEERDEAD for another rank, as
 * after HPCT_EINVAL, it stays usable (and close still says BYE, so this rank
 * is not reported lost too), but no wait can succeed any more unless its keys
 * already exist.  A client is used by one thread at a time. */
HPCT_PRIVATE int hpct__std_set(struct hpct_std_client *c, const char *key, const void *val,
                               size_t len, int readers, double deadline);
/* Fetches n keys, waiting until all exist; value i must be exactly lens[i]
 * bytes and is copied to bufs[i] (else HPCT_EPROTO naming the key, after the
 * whole answer was read).  Counts as one read of each key. */
int hpct__std_mget(struct hpct_std_client *c, const char *const *keys, int n, void *const *bufs,
                   const size_t *lens, double deadline);
/* One key of any length, waiting until it exists: *val_out is malloc'd
 * (free it), *len_out its length. */
HPCT_PRIVATE int hpct__std_get(struct hpct_std_client *c, const char *key, void **val_out,
                               size_t *len_out, double deadline);
/* Adds delta to the counter `key` (created at 0) and returns the sum. */
int hpct__std_add(struct hpct_std_client *c, const char *key, int64_t delta, int64_t *value_out,
                  double deadline);
/* Returns once the counter `key` is >= value. */
int hpct__std_wait_ge(struct hpct_std_client *c, const char *key, int64_t value, double deadline);

#endif
