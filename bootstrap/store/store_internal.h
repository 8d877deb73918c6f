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
	OP_DEAD, /* u32 n, n x u32: ranks the sender found gone (view.c); its
	          * key, when not empty, a rank x in decimal: the answer's list
	          * is then followed by one byte, 1 when the answering process
	          * reached x's store once (client.c's said_dead) */
	OP_HAVE, /* u32 h: the sender, first live home of the keys whose
	          * first home is h, sent this rank all of them (replica.c) */
};

/* A home's answer to a request on a key it does not hold, when it became
 * the key's first live home without being sent the keys of its ranks
 * (every home they had is gone): the key may have been lost.  The client
 * names the homes (client.c). */
#define ST_LOST (-1099)
/* The cause a home that is exiting (server.c's hand_off) answers with. */
#define ST_EXITS "its process exits, its keys handed on"

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

/* The first R live ranks from h0 on (h0, h0 + 1, ... mod size), not
 * marked in dead (may be NULL: none gone), in homes: how many (< R when
 * fewer are left). */
static inline int hpct__store_window(const unsigned char *dead, int size, int h0, int R, int *homes)
{
	int n = 0;
	for (int k = 0; k < size && n < R; k++) {
		int r = (h0 + k) % size;
		if (!dead || !dead[r])
			homes[n++] = r;
	}
	return n;
}

/* This process's view of the gone ranks (view.c), per world and epoch:
 * hpct__store_dead, 1 when rank is; hpct__store_mark_dead, 1 when that is
 * news; hpct__store_view, the generation (it changes with every change
 * of the view) and a copy in dead_out (size bytes; may be NULL);
 * hpct__store_live_homes, hpct__store_window in the view. */
int hpct__store_dead(const struct hpct_world *w, int rank);
int hpct__store_mark_dead(const struct hpct_world *w, int rank);
unsigned hpct__store_view(const struct hpct_world *w, unsigned char *dead_out);
int hpct__store_live_homes(const struct hpct_world *w, int h0, int R, int *homes);
void hpct__store_view_child(void);
/* The gone ranks as OP_DEAD carries them, u32 n and n x u32, from dead
 * (size bytes; NULL: none), malloc'd with its length in *len; NULL for
 * want of memory. */
unsigned char *hpct__store_dead_encode(const unsigned char *dead, int size, size_t *len);
/* Such a list (p, len) counted gone in w's view (w may be NULL: only
 * checked), all but `keep` (a rank known to run; -1: none): 0, or -1 when
 * it is malformed (a count or a rank out of 0..size-1), nothing marked. */
int hpct__store_dead_merge(const struct hpct_world *w, int size, const unsigned char *p, size_t len,
                           int keep);
/* 1 when this process reached `rank`'s store once in w (client.c). */
int hpct__store_was_reached(const struct hpct_world *w, int rank);

/* HPCT_STORE_REPLICAS (default 2), at most the world's size, in *r_out:
 * 0, or HPCT_EBADENV naming the variable and its value (client.c). */
int hpct__store_replicas(const struct hpct_world *w, int *r_out);
/* One key's state (OP_REPL), OP_HAVE or OP_DEAD to `home` (the
 * forwarder's handle, replica.c): 0, or the failure (HPCT_EPEERDEAD:
 * that home is gone). */
int hpct__store_forward(struct hpct_store *s, int home, uint8_t op, uint64_t ns, const char *key,
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
