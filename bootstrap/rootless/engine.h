/* The rootless engine: one listener per process, at most a couple of
 * connections per peer, shared by every group.  Every connection opens with a
 * handshake (job, epoch, group, source and destination rank, world size);
 * mismatches are refused and logged once.  Connects to peers that are not up
 * yet are retried with capped backoff; the caller's deadline bounds them.
 *
 * Nothing here blocks except hpct__eng_progress(), which waits for transport
 * events up to a timeout.  Collectives are state machines that send with
 * hpct__eng_send(), look for their messages with hpct__eng_take(), and call
 * progress while they wait. */
#ifndef HPCT_ENGINE_H
#define HPCT_ENGINE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "bootstrap/base/wire.h"
#include "hpct/hpct.h"
#include "transport/transport.h"

struct hpct_engine;

/* Fills the derived address of `rank`; text is "host:port" for messages. */
typedef int (*hpct_peer_addr_fn)(void *arg, int rank, struct sockaddr_storage *ss,
                                 socklen_t *len_out, char *text, size_t textlen);

/* Bounds on what peers can make a rank keep (inbox.c); over one, the oldest
 * goes and the first drop from each peer is logged.  The figures are far
 * above what a legitimate job needs:
 *
 * Early messages wait until this rank reaches their call.  Allgather,
 * barrier and alltoall finish nowhere before every member has entered, so a
 * peer is at most one call ahead in each group, one message to us per call
 * on that link; only a broadcast root or relay runs ahead, by as many
 * broadcasts as the program issues between two calls that wait for
 * everyone.  65,536 per peer is that many calls ahead (a bootstrap issues
 * tens); a tiny message costs ~80 bytes, so 5 MiB per peer at most.  At
 * 4096 ranks a rank hears from at most 2*ceil(log2 N)+2 = 26 peers.
 *
 * Bytes: 1 GiB in all, four of the largest messages (HPCT_TRANSPORT_MAX_MSG):
 * a tree allgather one call ahead brings at most N*size up and N*size down,
 * both within one such message.  The newest message is never dropped, so
 * one message of any legal size always fits.  The greediest peer loses
 * first, so a flood costs its sender its own messages, not others'.
 *
 * ABORT records: one per failed group (the first cause), kept until the
 * group is destroyed; 4096 failed groups alive at once is beyond any job,
 * and costs ~1.2 MiB.
 *
 * Handshakes: a rank's collectives talk to at most 2*ceil(log2 N)+2 peers
 * (26 at 4096 ranks); 256 connections at once still in their handshake is
 * ten times that, and a peer whose connection goes before it was admitted
 * retries. */
#define HPCT_ENG_EARLY_MSGS    65536
#define HPCT_ENG_EARLY_MB      1024
#define HPCT_ENG_MAX_ABORTS    4096
#define HPCT_ENG_MAX_HANDSHAKE 256

struct hpct_engine_cfg {
	const struct hpct_transport_ops *ops;
	int rank, size;
	uint64_t job, epoch;
	double handshake_timeout_s; /* an accepted conn must say HELLO within this */
	/* early messages kept per peer, and their bytes from all peers (see
	 * above; 0: the defaults) */
	long early_max_msgs;
	size_t early_max_bytes;
	hpct_peer_addr_fn peer_addr;
	void *peer_addr_arg;
	/* HPCT_SECRET: every connection proves it both ways (HMAC-SHA256 over
	 * both nonces, job, epoch, group and both ranks); NULL: no proof */
	const unsigned char *secret;
	size_t secret_len;
};

/* A received message; free with free().  While kept, on its sender's list. */
struct hpct_emsg {
	struct hpct_emsg *next;
	int src;
	uint64_t group;
	uint32_t seq;
	uint16_t round;
	size_t len;
	unsigned char data[];
};

/* Creates the transport context and listens at `listen` (this process's
 * derived address).  -EADDRINUSE etc. are returned as is; the caller names
 * the culprit. */
int hpct__eng_create(const struct hpct_engine_cfg *cfg, const struct sockaddr *listen,
                     socklen_t listen_len, struct hpct_engine **eng_out);
/* Pushes out bytes already handed to connections, and with flush_queued
 * also messages still waiting for a connection, until `deadline` (hpct__now
 * seconds); then closes everything and frees the engine.  Accepts NULL. */
void hpct__eng_destroy(struct hpct_engine *eng, double deadline, int flush_queued);

/* What the transport said of its last failure in this thread, or "". */
const char *hpct__eng_why(const struct hpct_engine *eng);

/* This engine's endpoint name, for peers that cannot derive it (the
 * transport's self_name); -ENOTSUP when its addresses are derivable. */
int hpct__eng_self_name(struct hpct_engine *eng, void *buf, size_t *len);

/* Sends header + payload to world rank dst, connecting first if need be
 * (the message waits in a queue meanwhile).  HPCT_EPEERDEAD / HPCT_EREFUSED
 * when the peer is known to be gone or refused us (not logged: the caller
 * names the collective). */
int hpct__eng_send(struct hpct_engine *eng, int dst, uint8_t type, uint64_t group, uint32_t seq,
                   uint16_t round, const void *payload, size_t len);

/* Removes and returns the DATA message with this tag from src, or NULL. */
struct hpct_emsg *hpct__eng_take(struct hpct_engine *eng, int src, uint64_t group, uint32_t seq,
                                 uint16_t round);

/* How many times sends to `peer` were lost so far (it died or refused us
 * with messages queued or bytes unsent); grows, never shrinks. */
uint64_t hpct__eng_lost(struct hpct_engine *eng, int peer);

/* 1 when everything sent to `peer` has been handed to the network: nothing
 * waits for a connection or sits in a transport buffer. */
int hpct__eng_flushed(struct hpct_engine *eng, int peer);

/* Waits up to timeout_ms for events (less when a connect retry is due). */
int hpct__eng_progress(struct hpct_engine *eng, int timeout_ms);

/* 0 while the peer may still deliver; HPCT_EPEERDEAD when every connection
 * to it closed after it had been up; HPCT_EREFUSED when it refused us or
 * answered as another job/epoch/rank.  */
int hpct__eng_peer_error(struct hpct_engine *eng, int peer);
/* We wait for a message from `peer` and nothing connects us: connect to it
 * once, so that a sender stuck in connect backoff can use our connection.
 * Not retried if refused (the sender, having data, keeps trying).  1 when
 * done or not needed (a link exists or is on its way, or the peer is gone);
 * 0 when it must wait, because an accepted connection is still in its
 * handshake and may be that very peer: ask again shortly. */
int hpct__eng_pull(struct hpct_engine *eng, int peer, uint64_t group);

/* Asks a peer whether it is alive (PING; it answers PONG), connecting to it
 * first where no link is up: 0 when sent or queued, else the peer's error. */
int hpct__eng_probe(struct hpct_engine *eng, int peer, uint64_t group);
/* When a message from the peer last arrived (hpct__now() time), 0 if never. */
double hpct__eng_heard(struct hpct_engine *eng, int peer);
/* "rank 7 at 127.0.0.1:10012 (connection refused, 12 retries)" */
void hpct__eng_describe_peer(struct hpct_engine *eng, int peer, char *buf, size_t len);

/* The first ABORT received for a group, or NULL. */
const struct hpct_abort *hpct__eng_abort_for(struct hpct_engine *eng, uint64_t group);
/* Tells every connected peer that this rank gave up on `group`. */
void hpct__eng_broadcast_abort(struct hpct_engine *eng, uint64_t group, const struct hpct_abort *a);
/* Forgets received messages, aborts and queued sends of a destroyed group. */
void hpct__eng_forget_group(struct hpct_engine *eng, uint64_t group);
/* Drops sends of a failed group still waiting for a connection, so they
 * keep neither later collectives nor world destroy waiting. */
void hpct__eng_group_failed(struct hpct_engine *eng, uint64_t group);

/* In-process recovery: moves the listener to `listen` (the new epoch's
 * address; on failure nothing changes), forgets the replaced ranks' old
 * processes (links, queues, messages), drops half-open handshakes, and
 * tells every survivor with a link which epoch we are at now; later
 * handshakes carry the new epoch. */
int hpct__eng_recover(struct hpct_engine *eng, uint64_t epoch, const int *replaced, int n,
                      const struct sockaddr *listen, socklen_t listen_len);

void hpct__eng_stats(const struct hpct_engine *eng, struct hpct_world_stats *stats_out);

#endif
