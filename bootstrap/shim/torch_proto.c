/* PyTorch's TCPStore wire protocol, as the store served in the rank
 * (torch_store.c) speaks it: each torch version's table of commands, the
 * framing of requests and replies, and how a client ends a parked WAIT.
 *
 * The wire (framing unchanged since 1.13; integers in host order, strings
 * and values as u64 length + bytes; no request ids, so a connection is
 * strictly one request after another):
 *
 *   command       1.13  2.x  request                    reply
 *   VALIDATE        -    0   u32 magic 0x3C85F7CE        -
 *   SET             0    1   key, value                 -
 *   COMPARE_SET     1    2   key, expected, desired     value now
 *   GET             2    3   key                        value
 *   ADD             3    4   key, i64 delta             i64 counter
 *   CHECK           4    5   u64 n, n keys              u8 0 ready / 1 not
 *   WAIT            5    6   u64 n, n keys              u8 0 (1 canceled)
 *   GETNUMKEYS      6    7   -                          i64
 *   WATCH_KEY       7    -   (refused)
 *   DELETE_KEY      8    8   key                        i64 deleted
 *   APPEND          -    9   key, value                 -
 *   MULTI_GET       -   10   u64 n, n keys              n values
 *   MULTI_SET       -   11   u64 n, n x (key, value)    -
 *   CANCEL_WAIT     -   12   -                          u8 1
 *   PING            -   13   u32 nonce                  u32 nonce
 *   QUEUE_PUSH      -   14   key, value                 -
 *   QUEUE_POP       -   15   key                        i64 n (0, 1), item
 *   QUEUE_LEN       -   16   key                        i64
 *   LIST_KEYS       -   17   -                          i64 n, n keys
 *   BARRIER         -   18   key, i64 world size        u8 0 (2.13)
 *
 * A 2.x client sends WAIT before every GET and blocking QUEUE_POP, and
 * CANCEL_WAIT when its own timeout passes; a 1.13 client gives up silently
 * and sends its next request (interrupted_2, interrupted_113). */
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "bootstrap/base/log.h"
#include "bootstrap/base/sock.h"
#include "bootstrap/base/util.h"
#include "bootstrap/shim/torch_store_internal.h"

#define MAX_STRING (64u << 20) /* a key or value; the store's own cap is below */
#define NEVER      1e12        /* a client may idle between requests for ever */

const char *const hpct__torch_op_names[OP_COUNT] = {
	"?",         "VALIDATE",  "SET",         "COMPARE_SET", "GET",        "ADD",
	"CHECK",     "WAIT",      "GETNUMKEYS",  "WATCH_KEY",   "DELETE_KEY", "APPEND",
	"MULTI_GET", "MULTI_SET", "CANCEL_WAIT", "PING",        "QUEUE_PUSH", "QUEUE_POP",
	"QUEUE_LEN", "LIST_KEYS", "BARRIER",
};

static int interrupted_113(struct conn *c);
static int interrupted_2(struct conn *c);

static const struct hpct_torch_proto proto_113 = {
	.name = "1.13",
	.ops = { [0] = OP_SET,
	         [1] = OP_CAS,
	         [2] = OP_GET,
	         [3] = OP_ADD,
	         [4] = OP_CHECK,
	         [5] = OP_WAIT,
	         [6] = OP_NUMKEYS,
	         [7] = OP_WATCH,
	         [8] = OP_DELETE },
	.validates = 0,
	.barrier_shortcut = 1,
	.gloo_imported = 1,
	.interrupted = interrupted_113,
};

/* 2.4 to 2.15's commands (2.15's QueryType and magic are 2.13's, read
 * from its wheel's c10d/store/TCPStoreBackend.hpp) */
#define OPS_2                                                                              \
	{ [0] = OP_VALIDATE, [1] = OP_SET,     [2] = OP_CAS,     [3] = OP_GET,     [4] = OP_ADD,   \
	  [5] = OP_CHECK,    [6] = OP_WAIT,    [7] = OP_NUMKEYS, [8] = OP_DELETE,  [9] = OP_APPEND, \
	  [10] = OP_MGET,    [11] = OP_MSET,   [12] = OP_CANCEL, [13] = OP_PING,   [14] = OP_QPUSH, \
	  [15] = OP_QPOP,    [16] = OP_QLEN,   [17] = OP_LIST,   [18] = OP_BARRIER }

static const struct hpct_torch_proto proto_2 = {
	.name = "2.4-2.15",
	.ops = OPS_2,
	.validates = 1,
	.barrier_shortcut = 0,
	.gloo_imported = 0,
	.interrupted = interrupted_2,
};

/* A torch newer than every release hpct was checked with: served on the
 * newest known protocol while its connections speak it.  Each one's
 * handshake (VALIDATE and its magic first) and every command are checked
 * against that table, and one that does not match is closed, naming the
 * command: PyTorch's client raises at once, never a hang or a guess. */
static const struct hpct_torch_proto proto_newer = {
	.name = "newer than 2.15 (served on 2.4-2.15's protocol)",
	.ops = OPS_2,
	.validates = 1,
	.barrier_shortcut = 0,
	.gloo_imported = 0,
	.newer = 1,
	.interrupted = interrupted_2,
};

/* torch releases -> protocols, oldest first: 1.13.x, and 2.4 (VALIDATE,
 * every 2.x command above) through 2.15, the newest checked here.  2.0-2.3
 * sent a magic with every request, and 1.12 and older had no CANCEL of a
 * WAIT: not served.  Anything newer than the last row: proto_newer. */
static const struct {
	int major, lo, hi;
	const struct hpct_torch_proto *proto;
} releases[] = {
	{ 1, 13, 13, &proto_113 },
	{ 2, 4, 15, &proto_2 },
};
#define NRELEASES (sizeof(releases) / sizeof(releases[0]))

const struct hpct_torch_proto *hpct__torch_proto_for(const char *version)
{
	int major = 0, minor = 0;
	if (!version || sscanf(version, "%d.%d", &major, &minor) != 2)
		return NULL;
	for (size_t i = 0; i < NRELEASES; i++)
		if (major == releases[i].major && minor >= releases[i].lo && minor <= releases[i].hi)
			return releases[i].proto;
	const int newest_major = releases[NRELEASES - 1].major, newest = releases[NRELEASES - 1].hi;
	if (major > newest_major || (major == newest_major && minor > newest))
		return &proto_newer;
	return NULL;
}

int hpct__torch_proto_newer(const struct hpct_torch_proto *p)
{
	return p->newer;
}

const char *hpct__torch_proto_advice(const struct hpct_torch_proto *p)
{
	return p->newer ? " (this torch's TCPStore protocol is not the one hpct knows: "
	                  "HPCT_USE_ROOTLESS=0 runs PyTorch's own store, and a newer hpct may "
	                  "know it)"
	                : "";
}

int hpct__torch_proto_gloo_imported(const struct hpct_torch_proto *p)
{
	return p->gloo_imported;
}

const char *hpct__torch_protos_known(void)
{
	return "1.13 and 2.4 to 2.15";
}

/* ------------------------------------------------------------ wire */

/* Reads come through c->in: one recv takes a whole request (PyTorch's
 * client writes each in one piece) and often the next, where reading field
 * by field took a recv each.  A read that must wait sends the reply first:
 * the client may be waiting on it. */
int hpct__torch_recv_n(struct conn *c, void *buf, size_t n)
{
	unsigned char *p = buf;
	while (n) {
		if (c->in_at < c->in_len) {
			size_t k = c->in_len - c->in_at < n ? c->in_len - c->in_at : n;
			memcpy(p, c->in + c->in_at, k);
			c->in_at += k;
			p += k;
			n -= k;
			continue;
		}
		int rc = hpct__torch_flush(c);
		if (rc)
			return rc;
		if (n >= sizeof(c->in)) /* a large value: straight into place */
			return hpct__sock_recv_all(c->fd, p, n, NEVER);
		ssize_t r = recv(c->fd, c->in, sizeof(c->in), 0);
		if (r == 0)
			return HPCT_EPEERDEAD;
		if (r < 0) {
			int again = hpct__sock_again(c->fd, POLLIN, NEVER);
			if (again)
				return again;
			continue;
		}
		c->in_at = 0;
		c->in_len = (size_t)r;
	}
	return 0;
}

int hpct__torch_readable(struct conn *c)
{
	return c->in_at < c->in_len ? 1 : hpct__sock_wait(c->fd, POLLIN, hpct__now());
}

int hpct__torch_flush(struct conn *c)
{
	size_t n = c->out_len;
	c->out_len = 0;
	return n ? hpct__sock_send_all(c->fd, c->out, n, hpct__now() + NEVER) : 0;
}

/* Replies gather in c->out: one write a reply, not one a field (a reply in
 * two segments would also wait on the client's delayed ACK). */
int hpct__torch_send_n(struct conn *c, const void *buf, size_t n)
{
	if (c->out_len + n > sizeof(c->out)) {
		int rc = hpct__torch_flush(c);
		if (rc)
			return rc;
		if (n > sizeof(c->out))
			return hpct__sock_send_all(c->fd, buf, n, hpct__now() + NEVER);
	}
	memcpy(c->out + c->out_len, buf, n);
	c->out_len += n;
	return 0;
}

int hpct__torch_recv_u64(struct conn *c, uint64_t *v)
{
	return hpct__torch_recv_n(c, v, sizeof(*v));
}

/* A string or value: malloc'd, NUL-terminated (keys are used as C strings). */
int hpct__torch_recv_str(struct conn *c, char **out, size_t *len_out)
{
	uint64_t n;
	int rc = hpct__torch_recv_u64(c, &n);
	if (rc)
		return rc;
	if (n > MAX_STRING) {
		HPCT_WARN(HPCT_SUB_NET,
		          "torch store: client %s sent a string of %" PRIu64
		          " bytes (more than %u): connection closed",
		          c->peer, n, MAX_STRING);
		return HPCT_EPROTO;
	}
	char *s = malloc((size_t)n + 1);
	if (!s)
		return HPCT_ENOMEM;
	rc = hpct__torch_recv_n(c, s, (size_t)n);
	if (rc) {
		free(s);
		return rc;
	}
	s[n] = 0;
	*out = s;
	if (len_out)
		*len_out = (size_t)n;
	return 0;
}

int hpct__torch_send_bytes(struct conn *c, const void *v, size_t len)
{
	uint64_t n = len;
	int rc = hpct__torch_send_n(c, &n, sizeof(n));
	return rc || !len ? rc : hpct__torch_send_n(c, v, len);
}

int hpct__torch_send_i64(struct conn *c, int64_t v)
{
	return hpct__torch_send_n(c, &v, sizeof(v));
}

int hpct__torch_send_u8(struct conn *c, uint8_t v)
{
	return hpct__torch_send_n(c, &v, 1);
}

void hpct__torch_keys_free(struct keys *ks)
{
	for (uint64_t i = 0; i < ks->n; i++)
		free(ks->k[i]);
	free(ks->k);
	ks->k = NULL;
	ks->n = 0;
}

int hpct__torch_recv_keys(struct conn *c, struct keys *ks)
{
	uint64_t n;
	int rc = hpct__torch_recv_u64(c, &n);
	if (rc)
		return rc;
	if (n > MAX_KEYS) {
		HPCT_WARN(HPCT_SUB_NET,
		          "torch store: client %s asked for %" PRIu64
		          " keys at once (more than %u)",
		          c->peer, n, MAX_KEYS);
		return HPCT_EPROTO;
	}
	ks->k = calloc(n ? (size_t)n : 1, sizeof(char *));
	ks->n = 0;
	if (!ks->k)
		return HPCT_ENOMEM;
	for (; ks->n < n; ks->n++)
		if ((rc = hpct__torch_recv_str(c, &ks->k[ks->n], NULL)) != 0) {
			hpct__torch_keys_free(ks);
			return rc;
		}
	return 0;
}

/* ------------------------------------------------------------ WAIT interrupted */

/* 1.13: whatever came is the next request; the WAIT is dropped unanswered,
 * as 1.13's own server would answer it only when the key came. */
static int interrupted_113(struct conn *c)
{
	uint8_t b;
	int rc = hpct__torch_recv_n(c, &b, 1);
	if (rc)
		return rc;
	c->pending_op = b;
	return 0;
}

/* 2.x: CANCEL_WAIT, answered WAIT_CANCELED. */
static int interrupted_2(struct conn *c)
{
	uint8_t b;
	int rc = hpct__torch_recv_n(c, &b, 1);
	if (rc)
		return rc;
	if (b > 31 || c->p->ops[b] != OP_CANCEL) {
		HPCT_WARN(HPCT_SUB_NET,
		          "torch store: client %s sent command %u during a WAIT (only CANCEL_WAIT "
		          "may come): connection closed",
		          c->peer, b);
		return HPCT_EPROTO;
	}
	rc = hpct__torch_send_u8(c, 1);
	return rc ? rc : 1;
}
