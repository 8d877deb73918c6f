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
	OP_COUNT, /* body: u32 group */
	OP_APPEND, /* 9 */
	OP_QPUSH,
	OP_QPOP,
	OP_QLEN,
	OP_LIST, /* 13; body: u32 group */
	OP_WHO,  /* body: u32 group: where this rank stands in it (a POSITION) */
	/* a peer's connection (another rank's server to this one): its first
	 * frame, then the protocol's messages (peer.c) */
	OP_PEER = 32, /* u32 from, u64 job, u64 epoch, u32 size */
	OP_P_KEY,     /* a key of the data that follows: u32 group, u64 ns, u32 klen, key,
	               * u32 vlen, value */
	OP_P_REC,     /* an answer kept for a retry: u32 group, u64 cid, u64 seq, i32 status,
	               * u32 len, answer */
	OP_P_MSG,     /* a message of vr.h (peer.c's encoding) */
};

/* A client's request reached a rank that is not its group's primary now:
 * the answer is a POSITION, what that rank knows of the group (the client
 * asks the primary it names, or another member).  WHO's answer is one too,
 * with status 0:
 *   u32 group, u32 cfg, u32 view, u8 status (enum vr_status), u8 n,
 *   n x u32 members, i32 primary (-1: none known), u32 ms since it heard
 *   the primary (UINT32_MAX: never) */
#define ST_REDIRECT (-1100)
#define POSITION_MAX (4 * 4 + 2 + 4 * 8 + 8)

/* On a write's op: u64 client id and u64 sequence follow the key, so that
 * a group answers a retry (at its next primary) with the first answer
 * instead of doing it twice. */
#define OP_RID 0x80u
#define HDR    13 /* op, namespace, key length */

/* The group of a key: its name's hash over the ranks (hpct__store_home),
 * whatever its namespace, so that a key a re-init makes again (its own
 * incarnation's namespace under PyTorch) has the same homes as the last
 * one's, which this process's connections reach already (lines.c). */
static inline uint32_t hpct__store_group_of(const char *key, size_t klen, int size)
{
	return (uint32_t)(hpct__hash(key, klen, 0x73746f7265ull) % (uint64_t)size);
}

/* The settings of the store's replication (HPCT_STORE_REPLICAS, _SUSPECT,
 * _LEASE, _UNSAFE) for world w: 0, or HPCT_EBADENV naming the variable. */
struct hpct_store_cfg {
	int R;
	double suspect, lease;
	int unsafe;
};
int hpct__store_cfg(const struct hpct_world *w, struct hpct_store_cfg *out);
/* Group g's members at configuration 0 (vr.h's placement): how many. */
int hpct__store_config0(const struct hpct_world *w, uint32_t g, int *out);
/* 1 when this process's rank is fenced (groups.c), the line saying who
 * counted it gone and what to do in buf (may be NULL). */
int hpct__store_fenced(char *buf, size_t len);

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
