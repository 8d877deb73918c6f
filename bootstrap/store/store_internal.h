/* Inside the rootless store: what its server (server.c) and its client
 * (client.c) share: the wire's operations and header, where a rank's store
 * listens, and what a connection's proof is bound to. */
#ifndef HPCT_STORE_INTERNAL_H
#define HPCT_STORE_INTERNAL_H

#include <stddef.h>
#include <sys/socket.h>

#include "bootstrap/base/auth.h"
#include "bootstrap/base/util.h"
#include "bootstrap/world.h"

struct hpct_store;

enum {
	OP_SET = 1,
	OP_GET,
	OP_ADD,
	OP_CAS,
	OP_CHECK,
	OP_WAIT,
	OP_DEL,
	OP_COUNT,
	OP_APPEND, /* 9 */
	OP_QPUSH,
	OP_QPOP,
	OP_QLEN,
	OP_LIST, /* 13 */
	OP_REPL, /* a key's state, from its first live home to the others */
};

/* On a write's op: u64 client id and u64 sequence follow the key, so that
 * a home answers a retry (after the first home died) with the first
 * answer instead of doing it twice. */
#define OP_RID 0x80u
#define HDR    13 /* op, namespace, key length */

/* The key's first home (hpct__store_home); its others follow it around
 * the ranks: home + 1, ..., home + R - 1 (mod size). */
static inline int hpct__store_home_of(uint64_t ns, const char *key, size_t klen, int size)
{
	return (int)(hpct__hash(key, klen, ns ^ 0x73746f7265ull) % (uint64_t)size);
}

/* HPCT_STORE_REPLICAS (default 2), at most the world's size, in *r_out:
 * 0, or HPCT_EBADENV naming the variable and its value (client.c). */
int hpct__store_replicas(const struct hpct_world *w, int *r_out);
/* One key's state to `home` (OP_REPL; the forwarder's handle, replica.c):
 * 0, or the failure (HPCT_EPEERDEAD: that home is gone). */
int hpct__store_forward(struct hpct_store *s, int home, uint64_t ns, const char *key,
                        const void *body, size_t len);

/* The store address of world rank `rank`: its node, its world port plus
 * HPCT_STORE_PORT_OFFSET (client.c). */
int hpct__store_addr(struct hpct_world *w, int rank, struct sockaddr_storage *ss, socklen_t *sl,
                     char *text, size_t tlen);
/* What a store connection's proof is bound to (client.c). */
struct hpct_auth_id hpct__store_auth_id(const struct hpct_world *w, int client, int home);
/* The first home this process's store found dead, or was told of by a
 * home that left (client.c), as "rank 2 at host:port closed its
 * connection: ..." in buf: 1, or 0 when none. */
int hpct__store_first_dead(char *buf, size_t len);
/* The local addresses of this process's own connections to its own
 * rank's store (client.c), "host:port" each, at most max: the ones a
 * leaving server does not wait for. */
int hpct__store_own_addrs(char (*addrs)[HPCT_ADDRSTRLEN], int max);
/* Starts this process's server thread once, at this rank's store address
 * (server.c); later calls return the first one's result. */
int hpct__store_server_start(struct hpct_world *w);

#endif
