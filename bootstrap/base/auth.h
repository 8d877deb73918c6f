/* Admission by shared secret (HPCT_SECRET) on hpct's own byte streams: the
 * rootless store's connections and the standard path's rendezvous.  The
 * engine's links do the same inside their own handshake (handshake.c); all
 * use the frames and proofs of wire.h:
 *
 *   client -> HELLO (its nonce; job, epoch, service, client and server rank,
 *             world size)
 *   server -> CHALLENGE (its nonce, its proof) or REFUSE (reason)
 *   client -> AUTH (its proof), once the server's proof is right
 *   server -> HELLO_ACK, or REFUSE (HPCT_REFUSE_AUTH)
 *
 * each frame HPCT_AUTH_LEN bytes, before the stream's own protocol starts.
 * A proof is HMAC-SHA256 under the secret over both nonces and the HELLO's
 * fields (hpct__auth_mac), so it is good for one connection only. */
#ifndef HPCT_AUTH_H
#define HPCT_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "bootstrap/base/wire.h"

/* The shared secret and the epoch proofs are bound to, as callers pass
 * them along (NULL or secret NULL: no secret). */
struct hpct_auth_key {
	const void *secret;
	size_t len;
	uint64_t epoch;
};

/* What a proof is bound to.  service: which server (below). */
struct hpct_auth_id {
	uint64_t job, epoch, service;
	uint32_t client, server, size;
	/* server side: a client of a later epoch is admitted too (the standard
	 * path's rendezvous outlives in-process recoveries); its proof is
	 * bound to the epoch it named */
	uint32_t later_epochs;
};

#define HPCT_AUTH_SERVICE_STORE   0x73746f7265000000ull /* "store" */
#define HPCT_AUTH_SERVICE_STDPATH 0x7374647061746800ull /* "stdpath" */

/* The client's side on a connected socket (blocking or not), within
 * `deadline` (hpct__now() time).  0, or an error whose message (through
 * hpct__fail) names `who` ("rank 3's store at 10.0.0.1:1808") and what went
 * wrong: refused and why, a wrong proof from the server, no answer, or the
 * connection closed (no secret there?). */
int hpct__auth_client(int fd, const void *secret, size_t slen, const struct hpct_auth_id *id,
                      double deadline, const char *who);

/* The server's side, fed bytes as they come (for servers that poll). */
struct hpct_auth_srv {
	int state; /* 0: wants HELLO, 1: wants AUTH, 2: admitted */
	size_t have;
	unsigned char in[HPCT_AUTH_LEN];
	unsigned char nonce[HPCT_AUTH_NONCE], peer_nonce[HPCT_AUTH_NONCE];
	struct hpct_hello hello;
};

enum {
	HPCT_AUTH_MORE = 0,    /* give it more bytes */
	HPCT_AUTH_ADMIT = 1,   /* admitted: the stream's own bytes follow */
	HPCT_AUTH_REFUSE = -1, /* send what is in out (if any), then close */
};

/* Takes what it needs of data[0..len) (*used bytes) and returns one of the
 * above.  *outlen (0 or HPCT_AUTH_LEN) bytes in out go to the client.  On a
 * refusal `why` says why, naming the rank the client claimed; `expect`
 * holds what the server is (client: ignored, any rank below size). */
int hpct__auth_server_feed(struct hpct_auth_srv *a, const void *secret, size_t slen,
                           const struct hpct_auth_id *expect, const unsigned char *data, size_t len,
                           size_t *used, unsigned char out[HPCT_AUTH_LEN], size_t *outlen,
                           char *why, size_t wlen);

/* 1 when a client went away in the middle of its proof (after our
 * CHALLENGE), with `why` saying so and naming the rank it claimed: for the
 * server's log line (a wrong secret there looks like this). */
int hpct__auth_server_gone(const struct hpct_auth_srv *a, char *why, size_t wlen);

/* 1 when the first bytes a client sent (at least 4) cannot be a HELLO:
 * a client without the secret speaking the stream's protocol at once. */
int hpct__auth_not_hello(const unsigned char *data, size_t len);
/* 1 when the first 4 bytes of a server's answer are a handshake frame's:
 * the server wants a proof this client cannot give (no secret here). */
int hpct__auth_is_frame(const unsigned char *data, size_t len);

#endif
