/* The standard (root-based) path: rank 0 of the world serves a rendezvous
 * store at MASTER_ADDR:MASTER_PORT, as PyTorch's TCPStore does, and every
 * collective is routed through it.  Used when HPCT_USE_ROOTLESS is unset/0 or
 * the rootless inputs are missing.
 *
 * Wire protocol (all integers big-endian):
 *   request : u8 op, u32 rank-or-0, then op-specific fields
 *   strings : u32 len + bytes; values: u32 len + bytes
 * Ops: HELLO(rank, world size, job hash), SET(key, value, readers),
 * MGET(n, keys...) -> n values once all exist, ADD(key, i64) -> i64,
 * WAITGE(key, i64) -> ack once the counter is >= the value, BYE.
 * A key set with readers > 0 is dropped after that many MGETs have read it,
 * so the store does not grow with every collective. */
#ifndef HPCT_STDPATH_H
#define HPCT_STDPATH_H

#include <stddef.h>
#include <stdint.h>

struct hpct_std_server;
struct hpct_std_client;

/* Starts the server thread listening on host:port (a literal or a name;
 * never the wildcard), for `nranks` clients of job `job`.  Binds before
 * returning: HPCT_EADDRINUSE names host:port.  */
int hpct__std_server_start(const char *host, int port, int nranks, uint64_t job,
			   struct hpct_std_server **server_out);
/* Waits until every client said BYE or hung up, or until `deadline`
 * (CLOCK_MONOTONIC seconds, see hpct__now), then stops the thread and frees
 * everything.  Accepts NULL. */
void hpct__std_server_stop(struct hpct_std_server *server, double deadline);

/* Connects to the server, retrying with capped backoff until `deadline`;
 * the error names host:port and the last OS error. */
int hpct__std_client_connect(const char *host, int port, int rank, int size, uint64_t job,
			     double deadline, struct hpct_std_client **client_out);
/* Says BYE and closes.  Accepts NULL. */
void hpct__std_client_close(struct hpct_std_client *client);

/* Each call blocks until answered or `deadline`; errors name the server
 * address, the key and this rank.  */
int hpct__std_set(struct hpct_std_client *c, const char *key, const void *val, size_t len,
		  int readers, double deadline);
/* Fetches n keys, waiting until all exist; value i must be exactly lens[i]
 * bytes and is copied to bufs[i]. */
int hpct__std_mget(struct hpct_std_client *c, const char *const *keys, int n, void *const *bufs,
		   const size_t *lens, double deadline);
int hpct__std_add(struct hpct_std_client *c, const char *key, int64_t delta, int64_t *value_out,
		  double deadline);
int hpct__std_wait_ge(struct hpct_std_client *c, const char *key, int64_t value, double deadline);

#endif
