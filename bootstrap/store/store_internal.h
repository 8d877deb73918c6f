/* Inside the rootless store: what its server (server.c) and its client
 * (client.c) share: the wire's operations and header, where a rank's store
 * listens, and what a connection's proof is bound to. */
#ifndef HPCT_STORE_INTERNAL_H
#define HPCT_STORE_INTERNAL_H

#include <stddef.h>
#include <sys/socket.h>

#include "bootstrap/base/auth.h"
#include "bootstrap/world.h"

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
};

#define HDR 13 /* op, namespace, key length */

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
