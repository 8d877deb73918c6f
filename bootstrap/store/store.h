/* The rootless store: a key-value store with no server to reach.  Keys
 * fall by hash into one group per rank; each group lives on
 * HPCT_STORE_REPLICAS ranks (default 3) kept by Viewstamped Replication
 * (vr.h): its primary orders every operation, a quorum holds each before
 * it is answered, and a group without a quorum refuses (HPCT_ENOQUORUM).
 * Every rank serves its groups from a thread listening at its store port
 * (its world port + HPCT_STORE_PORT_OFFSET: by default -HPCT_PORT_RANGE,
 * the range just below hpct's, or +2 x HPCT_PORT_RANGE, after NCCL's, when
 * there is no room below 1024); a client asks the group's primary directly.
 * What PyTorch's TCPStore commands become under the shim:
 * bootstrap/shim/torch_commands.c.  The model: docs/store.md.
 *
 * Keys live in namespaces (a u64 the caller derives from job, epoch and
 * incarnation): a namespace never sees another's keys.  Values are bytes;
 * ADD keeps a counter as ASCII decimal, as c10d does.
 *
 * Wire (integers big-endian): a frame is u32 length + body.
 *   request: u8 op, u64 namespace, u32 key length, key, then
 *     SET    u32 length, value          reply: status
 *     GET    i64 wait ms                reply: status, u32 length, value
 *     ADD    i64 delta                  reply: status, i64 counter
 *     CAS    u32 len, expected, u32 len, desired
 *                                       reply: status, u32 length, value now
 *     CHECK  -                          reply: status, u8 exists
 *     WAIT   i64 wait ms                reply: status
 *     DEL    -                          reply: status, u8 existed
 *     COUNT  - (empty key)              reply: status, i64 keys in namespace
 *     APPEND u32 length, value          reply: status
 *     QPUSH  u32 length, value          reply: status
 *     QPOP   i64 wait ms                reply: status, u32 length, item
 *     QLEN   -                          reply: status, i64 items
 *     LIST   - (empty key)              reply: status, u32 n, n x (u32 length, key)
 *     WHO    u32 group (empty key)     reply: status, POSITION
 *   reply: i32 status (0, HPCT_ETIMEDOUT, HPCT_EINVAL, HPCT_ENOMEM,
 *   HPCT_EPROTO, HPCT_EFENCED + why, or ST_REDIRECT + POSITION: not this
 *   group's primary, where it stands here) + fields; the ops are numbered
 *   1 (SET) to 14 (WHO) in this order (COUNT and LIST carry a u32 group
 *   after the empty key).  A write's op may carry OP_RID (0x80): u64
 *   client id and u64 sequence then follow the key, and the group answers
 *   a retry of the same id with the first answer.  The ranks' own
 *   messages (OP_PEER and after, store_internal.h) share the port.
 * HPCT_EPEERDEAD + text answers any request, parked or
 *   new, of a rank exiting after it found a peer dead: the text names
 *   that peer ("rank 2 at host:port closed its connection: ..."), so that
 *   its clients name the first failure, not the rank that passed it on.
 * A queue is a key whose value is its items as frames (u32 length +
 * bytes), so that CHECK, WAIT, GET and COUNT see it exactly while it holds
 * items: QPUSH appends a frame (QPUSH's body is one), QPOP takes the first
 * and deletes the key with the last.  GET, WAIT and QPOP on a missing key
 * are parked until it is set or their wait passes; a key coming into being
 * answers its GETs and WAITs, then its QPOPs in the order they came while
 * items last.  A frame over HPCT_STORE_MAX_FRAME, an unknown op or a body
 * that does not parse closes the connection. */
#ifndef HPCT_STORE_H
#define HPCT_STORE_H

#include "bootstrap/base/private_api.h"

#include <stddef.h>
#include <stdint.h>

#include "hpct/hpct.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A key: 1 MiB, past PyTorch's own servers (the libuv one of 2.4-2.13,
 * the default, refuses keys over 8 KiB and values over 8 MiB; the legacy
 * one of 1.13, or use_libuv=False, has no cap). */
#define HPCT_STORE_MAX_KEY (1u << 20)
/* The most a value may grow to by APPEND or QPUSH (a GET's reply of it
 * stays one frame). */
#define HPCT_STORE_MAX_VALUE (64u << 20)
#define HPCT_STORE_MAX_FRAME (HPCT_STORE_MAX_VALUE + HPCT_STORE_MAX_KEY + 64u)

struct hpct_store;

/* A handle on namespace `ns` of world `world`'s store; starts this rank's
 * store thread the first time (it then serves until the process ends).
 * `timeout_s` bounds every wait of this handle (capped by HPCT_TIMEOUT).
 * HPCT_EADDRINUSE names host:port; HPCT_ESTATE without a node list. */
HPCT_PRIVATE int hpct__store_open(hpct_world *world, uint64_t ns, double timeout_s,
                                  struct hpct_store **store_out);
HPCT_PRIVATE void hpct__store_close(struct hpct_store *store);
HPCT_PRIVATE void hpct__store_set_timeout(struct hpct_store *store, double timeout_s);
HPCT_PRIVATE double hpct__store_timeout(const struct hpct_store *store);
/* The rank that keeps `key` of this handle's namespace (its home). */
HPCT_PRIVATE int hpct__store_home(const struct hpct_store *store, const char *key);

/* Every call is safe from several threads (one request at a time) and
 * fails with a message naming the key, its home rank and host:port.
 * Returned buffers are malloc'd: the caller frees them. */
HPCT_PRIVATE int hpct__store_set(struct hpct_store *s, const char *key, const void *val,
                                 size_t len);
/* Waits for the key up to `timeout_s` (< 0: the handle's timeout). */
HPCT_PRIVATE int hpct__store_get(struct hpct_store *s, const char *key, double timeout_s,
                                 void **val_out, size_t *len_out);
HPCT_PRIVATE int hpct__store_add(struct hpct_store *s, const char *key, int64_t delta,
                                 int64_t *value_out);
/* c10d's compareSet: a missing key with an empty `expected` is created;
 * the value returned is the one the key holds afterwards (or `expected`
 * when it is missing and `expected` is not empty). */
HPCT_PRIVATE int hpct__store_cas(struct hpct_store *s, const char *key, const void *expected,
                                 size_t elen, const void *desired, size_t dlen, void **val_out,
                                 size_t *len_out);
HPCT_PRIVATE int hpct__store_check(struct hpct_store *s, const char *const *keys, int n,
                                   int *all_out);
HPCT_PRIVATE int hpct__store_wait(struct hpct_store *s, const char *const *keys, int n,
                                  double timeout_s);
/* Several keys at once: the requests go to their homes together and the
 * answers come back in order, about one round trip for all.  vals[i]
 * malloc'd (the caller frees each); on failure none is kept. */
HPCT_PRIVATE int hpct__store_get_many(struct hpct_store *s, const char *const *keys, int n,
                                      double timeout_s, void **vals, size_t *lens);
/* hpct__store_get, _get_many and _wait that only return HPCT_ETIMEDOUT
 * when the wait passes: no probe, no log (a caller that waits in slices). */
HPCT_PRIVATE int hpct__store_get_quiet(struct hpct_store *s, const char *key, double timeout_s,
                                       void **val_out, size_t *len_out);
HPCT_PRIVATE int hpct__store_get_many_quiet(struct hpct_store *s, const char *const *keys, int n,
                                            double timeout_s, void **vals, size_t *lens);
HPCT_PRIVATE int hpct__store_wait_quiet(struct hpct_store *s, const char *const *keys, int n,
                                        double timeout_s);
/* Ranks whose store takes no connection now (died, or never started), as
 * "3 (host:port), ..." in buf (the first 8); how many.  Probes for 0.3 s
 * at most. */
HPCT_PRIVATE int hpct__store_unreachable(struct hpct_store *s, char *buf, size_t len);
/* Where group g stands at rank `rank` (its WHO, asked of that rank alone):
 * the configuration and view it is in, its status there (vr.h's enum
 * vr_status: 0 normal, 1 waiting for its data, 2 in a view change, 3 not
 * a member), the members and the primary it knows (-1: none), and how
 * long since it heard that primary.  0, or the failure to ask. */
struct hpct_store_pos {
	uint32_t cfg, view;
	int status, n, primary;
	int members[8];
	uint32_t heard_ms; /* since it last heard its primary (0: it is the
	                    * primary; UINT32_MAX: never) */
};
HPCT_PRIVATE int hpct__store_position(struct hpct_store *s, int rank, uint32_t g,
                                      struct hpct_store_pos *out);
HPCT_PRIVATE int hpct__store_delete(struct hpct_store *s, const char *key, int *existed_out);
/* Keys of the namespace, summed over every rank. */
HPCT_PRIVATE int hpct__store_num_keys(struct hpct_store *s, int64_t *n_out);

/* Appends `len` bytes to the key's value, creating it when missing, in one
 * step on its home rank; answers the GETs and WAITs parked on it.
 * HPCT_ENOMEM when the home refuses it (HPCT_STORE_MAX_KEYS,
 * HPCT_STORE_MAX_BYTES, or the value would pass HPCT_STORE_MAX_VALUE; its
 * log names the key and the limit). */
HPCT_PRIVATE int hpct__store_append(struct hpct_store *s, const char *key, const void *val,
                                    size_t len);
/* Queues under a key (see the wire above): the key exists exactly while
 * its queue holds items, so hpct__store_wait on it returns once there is
 * one.  A key whose value is not a queue (SET, APPEND or ADD made it) is
 * HPCT_EINVAL, named "not a queue", for push, pop and len alike.
 *
 * Push appends one item in one step on the key's home rank, creating the
 * key, and answers what is parked on it; HPCT_ENOMEM as append. */
HPCT_PRIVATE int hpct__store_queue_push(struct hpct_store *s, const char *key, const void *val,
                                        size_t len);
/* Takes the first item (malloc'd, the caller frees it), deleting the key
 * with the last; with none, waits up to `timeout_s` (< 0: the handle's
 * timeout) for a push, then HPCT_ETIMEDOUT naming the key, its home rank
 * and host:port.  Pops waiting on one key take pushes in the order they
 * came to its home. */
HPCT_PRIVATE int hpct__store_queue_pop(struct hpct_store *s, const char *key, double timeout_s,
                                       void **val_out, size_t *len_out);
/* Items held (0 when the key is missing). */
HPCT_PRIVATE int hpct__store_queue_len(struct hpct_store *s, const char *key, int64_t *n_out);
/* Every key of the namespace, over every rank (one request each, as
 * num_keys), in no particular order: *keys_out is a malloc'd array of
 * *n_out malloc'd strings (the caller frees each, then the array; NULL
 * when there are none).  HPCT_ENOMEM when a rank's keys would not fit one
 * reply (HPCT_STORE_MAX_FRAME) or its HPCT_STORE_MAX_BYTES; outputs are
 * set only on success. */
HPCT_PRIVATE int hpct__store_list(struct hpct_store *s, char ***keys_out, int64_t *n_out);

/* The server's request parser on `data` as one connection's bytes, with
 * no socket, under caps of 64 keys and 16 KiB (tests/fuzz/fuzz_store.c);
 * not for a process that serves.  -1 when the table held more than its
 * caps, or its accounting of keys, bytes and buffers did not come back to
 * zero once every key was forgotten. */
HPCT_PRIVATE int hpct__store_fuzz_one(const unsigned char *data, size_t len);

#ifdef __cplusplus
}
#endif
#endif
