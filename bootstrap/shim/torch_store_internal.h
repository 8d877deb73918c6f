/* Inside the TCPStore served in the rank (torch_store.h): what its wire
 * protocol (torch_proto.c), its commands (torch_commands.c) and its state,
 * keyspaces and threads (torch_store.c) share: the commands, a protocol's
 * table, a connection, the framing of requests and replies, and the store
 * handles a key goes to.  Nothing outside those files includes this. */
#ifndef HPCT_SHIM_TORCH_STORE_INTERNAL_H
#define HPCT_SHIM_TORCH_STORE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "bootstrap/shim/torch_store.h"

#define MAX_KEYS (1u << 20) /* keys in one CHECK, WAIT, MULTI_GET/SET */

struct hpct_store;

/* Every command of the protocols served (their tables: torch_proto.c). */
enum op {
	OP_NONE, /* not a command of this version */
	OP_VALIDATE,
	OP_SET,
	OP_CAS,
	OP_GET,
	OP_ADD,
	OP_CHECK,
	OP_WAIT,
	OP_NUMKEYS,
	OP_WATCH,
	OP_DELETE,
	OP_APPEND,
	OP_MGET,
	OP_MSET,
	OP_CANCEL,
	OP_PING,
	OP_QPUSH,
	OP_QPOP,
	OP_QLEN,
	OP_LIST,
	OP_BARRIER,
	OP_COUNT
};

/* The commands' names, for messages (torch_proto.c). */
extern const char *const hpct__torch_op_names[OP_COUNT];

/* A client protocol: its opcodes, and how a parked WAIT ends when the
 * client sends something. */
struct conn;

struct hpct_torch_proto {
	const char *name;
	unsigned char ops[32]; /* wire opcode -> enum op */
	int validates;         /* the first request must be VALIDATE */
	/* ADD 1 on a store-based barrier key is one hpct barrier: 1.13, whose
	 * barrier (every init and new_group) is the world's and polls ADD 0
	 * every 10 ms.  2.x waits on a last_worker key instead (no polling),
	 * and may count only a group's ranks (use_local_synchronization). */
	int barrier_shortcut;
	/* libtorch imports Gloo's connectFullMesh (Debian's 1.13 and its
	 * libgloo.so.0): hpct's Gloo connect can take its GOT slot */
	int gloo_imported;
	/* a torch newer than every release hpct knows, on the newest table */
	int newer;
	/* the client spoke during a WAIT: 1 when it canceled (the reply is
	 * sent), 0 when the WAIT is dropped unanswered, <0 on error */
	int (*interrupted)(struct conn *c);
};

/* What a refused connection's line adds for a newer torch: that its
 * protocol changed, and what to do ("" for a known one). */
const char *hpct__torch_proto_advice(const struct hpct_torch_proto *p);

/* the keys of a request, in its order */
struct keys {
	char **k;
	uint64_t n;
};

/* What the wire buffers each way (torch_proto.c). */
#define WIRE_BUF 4096

/* A client's connection, served by a thread of its own (torch_store.c). */
struct conn {
	int fd;
	/* the wire (torch_proto.c): bytes read past the last field (a
	 * request's fields are taken from here, a read a request, not a
	 * syscall a field), and the reply so far, sent whole at the command's
	 * end (hpct__torch_flush) or before this thread waits to read */
	unsigned char in[WIRE_BUF], out[WIRE_BUF];
	size_t in_at, in_len, out_len;
	const struct hpct_torch_proto *p;
	/* opened at the first command past VALIDATE/PING: st, PyTorch's own
	 * keys (pg_key) in this connection's incarnation; all, every other
	 * key, one keyspace for every client */
	struct hpct_store *st, *all;
	uint64_t incarnation;
	uint64_t at_accept; /* the incarnation when the client connected */
	uint16_t port;      /* its source port */
	char peer[128];
	int pending_op; /* a request read ahead while a WAIT was parked */
	int adopted;    /* came to rank 0's TCPStore server (hpct__torch_store_adopt) */
	/* what a WAIT fetched, for the GET or MULTI_GET of the same keys that
	 * follows it at once (PyTorch 2.x's get() and multi_get() are WAIT,
	 * then GET or MULTI_GET, under one lock of its client: the values as
	 * the WAIT found them are ones the call may return) */
	struct keys seen;
	void **seen_val;
	size_t *seen_len;
};

/* The keys of a multi-key command on their handles: h[0], c->st, takes
 * PyTorch's own, h[1], c->all, the rest; at[], their places in the keys. */
struct split {
	struct hpct_store *h[2];
	const char **k[2];
	uint64_t *at[2];
	int n[2];  /* keys on each handle (park counts down those found) */
	int of[2]; /* keys on each handle, as split */
};

/* ---- the wire (torch_proto.c): reads and writes on c->fd, for ever
 * (a client may idle between requests); 0, or an hpct error ---- */

int hpct__torch_recv_n(struct conn *c, void *buf, size_t n);
int hpct__torch_send_n(struct conn *c, const void *buf, size_t n);
/* Sends what the reply holds so far. */
int hpct__torch_flush(struct conn *c);
/* 1 when the client has sent something not yet read, 0 if not, <0 on an
 * error. */
int hpct__torch_readable(struct conn *c);
int hpct__torch_recv_u64(struct conn *c, uint64_t *v);
/* A string or value: malloc'd, NUL-terminated (keys are used as C strings);
 * len_out may be NULL. */
int hpct__torch_recv_str(struct conn *c, char **out, size_t *len_out);
/* A u64 length and the bytes. */
int hpct__torch_send_bytes(struct conn *c, const void *v, size_t len);
int hpct__torch_send_i64(struct conn *c, int64_t v);
int hpct__torch_send_u8(struct conn *c, uint8_t v);
/* u64 n, then n keys, into ks (freed with hpct__torch_keys_free; nothing to
 * free on an error). */
int hpct__torch_recv_keys(struct conn *c, struct keys *ks);
void hpct__torch_keys_free(struct keys *ks);

/* ---- keyspaces and the process's state (torch_store.c) ---- */

/* Opens c's store handles at its first command (once): `begins` when that
 * command is ADD "init/", a new TCPStore's incarnation; 0, or the error
 * (logged). */
int hpct__torch_ensure_store(struct conn *c, int begins);
/* The handle key lives on: c->st for PyTorch's own keys, else c->all. */
struct hpct_store *hpct__torch_pick(struct conn *c, const char *key);
/* ks's keys on their handles (sp, freed with hpct__torch_split_free); 0,
 * or HPCT_ENOMEM. */
int hpct__torch_split_keys(struct conn *c, const struct keys *ks, struct split *sp);
void hpct__torch_split_free(struct split *sp);
/* The world's size, and whether PyTorch's world is hpct's (WORLD_SIZE). */
int hpct__torch_world_size(void);
int hpct__torch_world_barrier(void);
/* 1 when the store-based barrier `key` was passed in c's incarnation; with
 * `pass`, passes it first (one hpct barrier over the world, once per
 * incarnation and key); *rc_out: 0, or the barrier's failure. */
int hpct__torch_barrier(struct conn *c, const char *key, int pass, int *rc_out);

/* ---- commands (torch_commands.c) ---- */

/* Does command op (wire code `code`) on c: its request read, its reply
 * sent; 0, or an error that closes the connection (said).  A command c's
 * protocol does not offer is refused so. */
int hpct__torch_command(struct conn *c, enum op op, unsigned code);
/* Drops what the last WAIT fetched for the GET that follows it. */
void hpct__torch_forget_seen(struct conn *c);

#endif
