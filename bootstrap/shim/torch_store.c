/* PyTorch's TCPStore, served inside the rank (see torch_store.h).
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
 * and sends its next request.  So a WAIT is parked on the key's home in
 * slices, watching the client between them.  A command the version does
 * not have, or a request that does not parse, is logged naming the command
 * and the client and closes the connection (the client raises).
 *
 * Namespaces: (job, epoch, incarnation).  A TCPStore made with a world size
 * starts with ADD "init/" 1 (1.13: its first request; 2.x: after VALIDATE
 * and PING): that begins an incarnation, and a connection that does not
 * (a clone, 1.13's watch socket, a store made without a world size) joins
 * the latest one begun when it connected (a TCPStore is made only once
 * its ADD was answered, so that follows the program's order).  Every rank makes its stores in the
 * same order, so the n-th incarnation is the same on all, and a re-init never reads a key of the
 * last one.
 *
 * PyTorch's store-based barrier (ADD ".../store_based_barrier_key:G" 1,
 * then ADD 0 polled every 10 ms until it reads the world size) is one
 * hpct barrier over the world, done at the ADD 1; both ADDs then answer the
 * world size.
 *
 * Threads: one accepts, one serves each connection (a TCPStore keeps one
 * or two for its lifetime).  The world is shared with the NCCL half and
 * libhpct_torch's Gloo connect: store handles are safe from several
 * threads, and the barrier, the one world collective here, holds the
 * preload's world lock, as the other halves do. */
#include "bootstrap/shim/torch_store.h"

#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/base/fdtrack.h"
#include "bootstrap/base/log.h"
#include "bootstrap/base/sock.h"
#include "bootstrap/base/util.h"
#include "bootstrap/store/store.h"
#include "bootstrap/world_access.h"

#define MAGIC        0x3C85F7CEu
#define MAX_STRING   (64u << 20) /* a key or value; the store's own cap is below */
#define MAX_KEYS     (1u << 20)  /* keys in one CHECK, WAIT, MULTI_GET/SET */
#define WAIT_SLICE_S 0.25        /* a parked WAIT looks at its client this often */
#define NEVER        1e12        /* a client may idle between requests for ever */
#define MAX_EXPECTED 256         /* routed connections not yet accepted */

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

static const char *const op_names[OP_COUNT] = {
	"?",         "VALIDATE",  "SET",         "COMPARE_SET", "GET",        "ADD",
	"CHECK",     "WAIT",      "GETNUMKEYS",  "WATCH_KEY",   "DELETE_KEY", "APPEND",
	"MULTI_GET", "MULTI_SET", "CANCEL_WAIT", "PING",        "QUEUE_PUSH", "QUEUE_POP",
	"QUEUE_LEN", "LIST_KEYS", "BARRIER",
};

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
	/* the client spoke during a WAIT: 1 when it canceled (the reply is
	 * sent), 0 when the WAIT is dropped unanswered, <0 on error */
	int (*interrupted)(struct conn *c);
};

/* the keys of a request, in its order */
struct keys {
	char **k;
	uint64_t n;
};

struct conn {
	int fd;
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

static const struct hpct_torch_proto proto_2 = {
	.name = "2.4-2.14",
	.ops = { [0] = OP_VALIDATE,
	         [1] = OP_SET,
	         [2] = OP_CAS,
	         [3] = OP_GET,
	         [4] = OP_ADD,
	         [5] = OP_CHECK,
	         [6] = OP_WAIT,
	         [7] = OP_NUMKEYS,
	         [8] = OP_DELETE,
	         [9] = OP_APPEND,
	         [10] = OP_MGET,
	         [11] = OP_MSET,
	         [12] = OP_CANCEL,
	         [13] = OP_PING,
	         [14] = OP_QPUSH,
	         [15] = OP_QPOP,
	         [16] = OP_QLEN,
	         [17] = OP_LIST,
	         [18] = OP_BARRIER },
	.validates = 1,
	.barrier_shortcut = 0,
	.gloo_imported = 0,
	.interrupted = interrupted_2,
};

/* torch versions -> protocols: 1.13.x, and 2.4 (VALIDATE, every 2.x
 * command above; 2.14's QueryType and magic are 2.13's, read from its
 * c10d/store/TCPStoreBackend.hpp) through 2.14, the newest checked here.  2.0-2.3 sent a
 * magic with every request: not served. */
const struct hpct_torch_proto *hpct__torch_proto_for(const char *version)
{
	int major = 0, minor = 0;
	if (!version || sscanf(version, "%d.%d", &major, &minor) != 2)
		return NULL;
	if (major == 1 && minor == 13)
		return &proto_113;
	if (major == 2 && minor >= 4 && minor <= 14)
		return &proto_2;
	return NULL;
}

int hpct__torch_proto_gloo_imported(const struct hpct_torch_proto *p)
{
	return p->gloo_imported;
}

const char *hpct__torch_protos_known(void)
{
	return "1.13 and 2.4 to 2.14";
}

/* ------------------------------------------------------------ state */

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	hpct_world *world;
	const struct hpct_torch_proto *proto;
	int lfd;
	uint16_t port;
	uint64_t incarnation; /* stores begun (ADD init/) in this process */
	uint16_t expected[MAX_EXPECTED];
	int nexpected;
	/* barriers passed: "incarnation:key" */
	char **barriers;
	int nbarriers;
} S = {
	PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, -1, 0, 0, { 0 }, 0, NULL, 0
};
static atomic_long routed;

long hpct__torch_store_routed(void)
{
	return atomic_load(&routed);
}

uint16_t hpct__torch_store_port(void)
{
	pthread_mutex_lock(&S.mu);
	uint16_t p = S.port;
	pthread_mutex_unlock(&S.mu);
	return p;
}

void hpct__torch_store_expect(uint16_t port)
{
	pthread_mutex_lock(&S.mu);
	if (S.nexpected == MAX_EXPECTED) { /* connects never accepted: the oldest goes */
		HPCT_WARN(HPCT_SUB_NET,
		          "torch store: %d connections told and never accepted; "
		          "forgetting the oldest (port %u)",
		          MAX_EXPECTED, S.expected[0]);
		memmove(S.expected, S.expected + 1, (MAX_EXPECTED - 1) * sizeof(S.expected[0]));
		S.nexpected--;
	}
	S.expected[S.nexpected++] = port;
	pthread_cond_broadcast(&S.cv);
	pthread_mutex_unlock(&S.mu);
}

/* Takes `port` off the expected ones (S.mu held); 1 when it was there. */
static int drop_expected(uint16_t port)
{
	for (int i = 0; i < S.nexpected; i++)
		if (S.expected[i] == port) {
			S.expected[i] = S.expected[--S.nexpected];
			return 1;
		}
	return 0;
}

void hpct__torch_store_unexpect(uint16_t port)
{
	pthread_mutex_lock(&S.mu);
	drop_expected(port);
	pthread_mutex_unlock(&S.mu);
}

/* Was `port` told by this process's connect?  Waits up to 1 s for the
 * telling (the kernel may complete a loopback connect first). */
static int take_expected(uint16_t port)
{
	struct timespec until = hpct__timespec_in(CLOCK_REALTIME, 1.0);
	pthread_mutex_lock(&S.mu);
	int found;
	while (!(found = drop_expected(port)) &&
	       pthread_cond_timedwait(&S.cv, &S.mu, &until) != ETIMEDOUT)
		;
	pthread_mutex_unlock(&S.mu);
	return found;
}

int hpct__torch_store_addr(int family, struct sockaddr_storage *ss, socklen_t *len)
{
	uint16_t port = hpct__torch_store_port();
	memset(ss, 0, sizeof(*ss));
	if (!port)
		return HPCT_ESTATE;
	if (family == AF_INET6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons(port);
		a->sin6_addr.s6_addr[10] = 0xff; /* ::ffff:127.0.0.1 */
		a->sin6_addr.s6_addr[11] = 0xff;
		a->sin6_addr.s6_addr[12] = 127;
		a->sin6_addr.s6_addr[15] = 1;
		*len = sizeof(*a);
	} else {
		struct sockaddr_in *a = (struct sockaddr_in *)ss;
		a->sin_family = AF_INET;
		a->sin_port = htons(port);
		a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		*len = sizeof(*a);
	}
	return 0;
}

/* ------------------------------------------------------------ wire */

static int recv_n(struct conn *c, void *buf, size_t n)
{
	return hpct__sock_recv_all(c->fd, buf, n, NEVER);
}

static int send_n(struct conn *c, const void *buf, size_t n)
{
	return hpct__sock_send_all(c->fd, buf, n, hpct__now() + NEVER);
}

static int recv_u64(struct conn *c, uint64_t *v)
{
	return recv_n(c, v, sizeof(*v));
}

/* A string or value: malloc'd, NUL-terminated (keys are used as C strings). */
static int recv_str(struct conn *c, char **out, size_t *len_out)
{
	uint64_t n;
	int rc = recv_u64(c, &n);
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
	rc = recv_n(c, s, (size_t)n);
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

/* Length and bytes in one write where it is small: a reply in two
 * segments would wait on the client's delayed ACK. */
static int send_bytes(struct conn *c, const void *v, size_t len)
{
	uint64_t n = len;
	unsigned char buf[4096];
	if (len <= sizeof(buf) - sizeof(n)) {
		memcpy(buf, &n, sizeof(n));
		if (len)
			memcpy(buf + sizeof(n), v, len);
		return send_n(c, buf, sizeof(n) + len);
	}
	int rc = send_n(c, &n, sizeof(n));
	return rc ? rc : send_n(c, v, len);
}

static int send_i64(struct conn *c, int64_t v)
{
	return send_n(c, &v, sizeof(v));
}

static int send_u8(struct conn *c, uint8_t v)
{
	return send_n(c, &v, 1);
}

static void keys_free(struct keys *ks)
{
	for (uint64_t i = 0; i < ks->n; i++)
		free(ks->k[i]);
	free(ks->k);
	ks->k = NULL;
	ks->n = 0;
}

static int recv_keys(struct conn *c, struct keys *ks)
{
	uint64_t n;
	int rc = recv_u64(c, &n);
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
		if ((rc = recv_str(c, &ks->k[ks->n], NULL)) != 0) {
			keys_free(ks);
			return rc;
		}
	return 0;
}

/* ------------------------------------------------------------ namespaces */

/* The store handles of this connection, opened at its first command:
 * `begins` when that command is ADD "init/" (a new TCPStore).  Incarnation
 * 0 is the keyspace every client shares. */
static int ensure_store(struct conn *c, int begins)
{
	if (c->st)
		return 0;
	struct hpct_world_info info;
	hpct_world_get_info(S.world, &info);
	pthread_mutex_lock(&S.mu);
	if (begins)
		c->incarnation = ++S.incarnation;
	else
		c->incarnation = c->at_accept ? c->at_accept : 1;
	pthread_mutex_unlock(&S.mu);
	uint64_t job = hpct__hash_u64(hpct__hash_u64(0x746f726368ull, info.job), info.epoch);
	double t = hpct__world_timeout(S.world);
	int rc = hpct__store_open(S.world, hpct__hash_u64(job, 0), t, &c->all);
	if (rc == 0 &&
	    (rc = hpct__store_open(S.world, hpct__hash_u64(job, c->incarnation), t, &c->st)) != 0) {
		hpct__store_close(c->all);
		c->all = NULL;
	}
	if (rc)
		HPCT_WARN(HPCT_SUB_NET, "torch store: client %s: cannot open the store: %s",
		          c->peer, hpct_last_error());
	return rc;
}

/* PyTorch's own keys: under "default_pg/", the prefix init_process_group
 * puts on its store (1.13 to 2.14), at the start or past a user's prefix
 * (NVRx's "<iteration>/default_pg/...").  They live per incarnation, so a
 * second init_process_group never reads the first's (stock does whenever
 * rank 0's server outlives the first: pytorch#55967); no framework reads
 * them from another store. */
static int pg_key(const char *key)
{
	static const char tag[] = "default_pg/";
	for (const char *at = strstr(key, tag); at; at = strstr(at + 1, tag))
		if (at == key || at[-1] == '/')
			return 1;
	return 0;
}

static struct hpct_store *pick(struct conn *c, const char *key)
{
	return pg_key(key) ? c->st : c->all;
}

/* The keys of a multi-key command on their handles: h[0], c->st, takes
 * PyTorch's own, h[1], c->all, the rest; at[], their places in the keys. */
struct split {
	struct hpct_store *h[2];
	const char **k[2];
	uint64_t *at[2];
	int n[2];  /* keys on each handle (park counts down those found) */
	int of[2]; /* keys on each handle, as split */
};

static void split_free(struct split *sp)
{
	for (int i = 0; i < 2; i++) {
		free(sp->k[i]);
		free(sp->at[i]);
	}
}

static int split_keys(struct conn *c, const struct keys *ks, struct split *sp)
{
	memset(sp, 0, sizeof(*sp));
	sp->h[0] = c->st;
	sp->h[1] = c->all;
	for (int i = 0; i < 2; i++) {
		sp->k[i] = malloc((ks->n ? ks->n : 1) * sizeof(char *));
		sp->at[i] = malloc((ks->n ? ks->n : 1) * sizeof(uint64_t));
		if (!sp->k[i] || !sp->at[i]) {
			split_free(sp);
			return HPCT_ENOMEM;
		}
	}
	for (uint64_t j = 0; j < ks->n; j++) {
		int i = pg_key(ks->k[j]) ? 0 : 1;
		sp->k[i][sp->n[i]] = ks->k[j];
		sp->at[i][sp->n[i]++] = j;
	}
	sp->of[0] = sp->n[0];
	sp->of[1] = sp->n[1];
	return 0;
}

/* ".../store_based_barrier_key:G" */
static int is_barrier_key(const char *key)
{
	static const char tag[] = "store_based_barrier_key:";
	const char *at = strstr(key, tag);
	if (!at || (at > key && at[-1] != '/'))
		return 0;
	const char *g = at + sizeof(tag) - 1;
	if (!*g)
		return 0;
	for (; *g; g++)
		if (*g == '/' || *g == ':')
			return 0;
	return 1;
}

static int world_size(void)
{
	struct hpct_world_info info;
	hpct_world_get_info(S.world, &info);
	return info.size;
}

/* Is PyTorch's world hpct's?  WORLD_SIZE, when the launcher set it, is
 * the size torch's barrier counts to. */
static int world_barrier(void)
{
	const char *ws = getenv("WORLD_SIZE");
	return !ws || !*ws || atoi(ws) == world_size();
}

/* 1 when that barrier was passed in this incarnation; with `pass`, passes
 * it first (once per incarnation and key). */
static int barrier(struct conn *c, const char *key, int pass, int *rc_out)
{
	char tag[64];
	snprintf(tag, sizeof(tag), "%" PRIu64 ":", c->incarnation);
	size_t tl = strlen(tag);
	*rc_out = 0;
	int passed = 0;
	pthread_mutex_lock(&S.mu);
	for (int i = 0; i < S.nbarriers && !passed; i++)
		passed = strncmp(S.barriers[i], tag, tl) == 0 &&
		         strcmp(S.barriers[i] + tl, key) == 0;
	pthread_mutex_unlock(&S.mu);
	if (passed || !pass)
		return passed;
	/* the world, used by one thread at a time (hpct_preload_world_lock):
	 * every rank runs the same program, so its barriers come in the same
	 * order everywhere */
	hpct_preload_world_lock();
	int rc = hpct_barrier(hpct_world_group(S.world));
	hpct_preload_world_unlock();
	if (rc == 0) {
		char *s = malloc(tl + strlen(key) + 1);
		pthread_mutex_lock(&S.mu);
		char **b =
		        s ? realloc(S.barriers, (size_t)(S.nbarriers + 1) * sizeof(char *)) : NULL;
		if (b) {
			S.barriers = b;
			sprintf(s, "%s%s", tag, key);
			S.barriers[S.nbarriers++] = s;
		} else {
			free(s);
			rc = HPCT_ENOMEM;
		}
		pthread_mutex_unlock(&S.mu);
	}
	*rc_out = rc;
	return rc == 0;
}

/* ------------------------------------------------------------ commands */

/* A store call failed: the client is told by the closed connection, the
 * log says why (the store's message names key, home rank and host:port). */
static int failed(struct conn *c, const char *what, const char *key, int rc)
{
	hpct__log(HPCT_LOG_WARN, HPCT_SUB_NET,
	          "torch store: client %s (torch %s), %s '%.100s': %s: the connection is closed, "
	          "so PyTorch raises",
	          c->peer, c->p->name, what, key ? key : "",
	          hpct_last_error()[0] ? hpct_last_error() : hpct_strerror(rc));
	return rc;
}

/* SET, APPEND, QUEUE_PUSH: a key and a value, no reply. */
static int key_value(struct conn *c, const char *what,
                     int (*op)(struct hpct_store *, const char *, const void *, size_t))
{
	char *k, *v;
	size_t vl;
	int rc = recv_str(c, &k, NULL);
	if (rc)
		return rc;
	if ((rc = recv_str(c, &v, &vl)) == 0) {
		rc = ensure_store(c, 0);
		if (rc == 0 && (rc = op(pick(c, k), k, v, vl)) != 0)
			failed(c, what, k, rc);
		free(v);
	}
	free(k);
	return rc;
}

static int do_set(struct conn *c)
{
	return key_value(c, "SET", hpct__store_set);
}

static void free_vals(void **vals, uint64_t n)
{
	for (uint64_t i = 0; vals && i < n; i++)
		free(vals[i]);
	free(vals);
}

static void forget_seen(struct conn *c)
{
	free_vals(c->seen_val, c->seen.n);
	free(c->seen_len);
	keys_free(&c->seen);
	c->seen_val = NULL;
	c->seen_len = NULL;
}

/* The WAIT just answered fetched exactly these keys, in this order. */
static int seen(const struct conn *c, const struct keys *ks)
{
	if (!c->seen_val || c->seen.n != ks->n)
		return 0;
	for (uint64_t i = 0; i < ks->n; i++)
		if (strcmp(c->seen.k[i], ks->k[i]) != 0)
			return 0;
	return 1;
}

/* Answers a GET or MULTI_GET from what the WAIT fetched (handed over). */
static int reply_seen(struct conn *c)
{
	int rc = 0;
	for (uint64_t i = 0; rc == 0 && i < c->seen.n; i++) {
		rc = send_bytes(c, c->seen_val[i], c->seen_len[i]);
		free(c->seen_val[i]);
		c->seen_val[i] = NULL;
	}
	return rc;
}

static int reply_value(struct conn *c, void *v, size_t len)
{
	int rc = send_bytes(c, v, len);
	free(v);
	return rc;
}

static int do_cas(struct conn *c)
{
	char *k, *e = NULL, *d = NULL;
	size_t el, dl;
	int rc = recv_str(c, &k, NULL);
	if (rc)
		return rc;
	if ((rc = recv_str(c, &e, &el)) == 0 && (rc = recv_str(c, &d, &dl)) == 0 &&
	    (rc = ensure_store(c, 0)) == 0) {
		void *v = NULL;
		size_t vl = 0;
		rc = hpct__store_cas(pick(c, k), k, e, el, d, dl, &v, &vl);
		rc = rc ? failed(c, "COMPARE_SET", k, rc) : reply_value(c, v, vl);
	}
	free(d);
	free(e);
	free(k);
	return rc;
}

/* The worker counter: a TCPStore server polls GET "init/" every 10 ms
 * until it reads its world size.  The ADD that makes the count sets a
 * mark, and a read of the counter first waits for that mark a little
 * (INIT_SETTLE_S, never longer: a store made for fewer workers than the
 * world reads its count after that), so the server leaves its loop as
 * the last rank arrives, not up to 10 ms later. */
#define INIT_KEY      "init/"
#define INIT_MARK     "hpct:init/complete"
#define INIT_SETTLE_S 0.02

static void init_counted(struct conn *c, int64_t count)
{
	if (count >= world_size())
		(void)hpct__store_set(c->all, INIT_MARK, "1", 1);
}

static void init_settle(struct conn *c)
{
	void *v = NULL;
	size_t vl = 0;
	if (hpct__store_get_quiet(c->all, INIT_MARK, INIT_SETTLE_S, &v, &vl) == 0)
		free(v);
}

static int do_get(struct conn *c)
{
	char *k;
	int rc = recv_str(c, &k, NULL);
	if (rc)
		return rc;
	struct keys one = { .k = &k, .n = 1 };
	if (seen(c, &one)) {
		rc = reply_seen(c);
	} else if ((rc = ensure_store(c, 0)) == 0) {
		void *v = NULL;
		size_t vl = 0;
		if (strcmp(k, INIT_KEY) == 0)
			init_settle(c);
		rc = hpct__store_get(pick(c, k), k, -1, &v, &vl);
		rc = rc ? failed(c, "GET", k, rc) : reply_value(c, v, vl);
	}
	free(k);
	return rc;
}

static int do_add(struct conn *c)
{
	char *k;
	int64_t delta;
	int rc = recv_str(c, &k, NULL);
	if (rc)
		return rc;
	if ((rc = recv_n(c, &delta, sizeof(delta))) == 0 &&
	    (rc = ensure_store(c, strcmp(k, INIT_KEY) == 0 && delta == 1)) == 0) {
		int64_t v = 0;
		int brc = 0;
		if (c->p->barrier_shortcut && world_barrier() && is_barrier_key(k) &&
		    (delta == 0 || delta == 1) && barrier(c, k, delta == 1, &brc)) {
			v = world_size(); /* every rank has checked in */
		} else if (brc) {
			rc = failed(c, "the store-based barrier of", k, brc);
		} else {
			rc = hpct__store_add(pick(c, k), k, delta, &v);
			if (rc)
				failed(c, "ADD", k, rc);
			else if (strcmp(k, INIT_KEY) == 0)
				init_counted(c, v);
		}
		if (rc == 0)
			rc = send_i64(c, v);
	}
	free(k);
	return rc;
}

static int do_check(struct conn *c)
{
	struct keys ks;
	int rc = recv_keys(c, &ks);
	if (rc)
		return rc;
	int all = 1;
	struct split sp;
	if ((rc = ensure_store(c, 0)) == 0 && (rc = split_keys(c, &ks, &sp)) == 0) {
		for (int i = 0; i < 2 && rc == 0 && all; i++)
			if (sp.n[i] &&
			    (rc = hpct__store_check(sp.h[i], sp.k[i], sp.n[i], &all)) != 0)
				failed(c, "CHECK", sp.k[i][0], rc);
		split_free(&sp);
	}
	if (rc == 0)
		rc = send_u8(c, all ? 0 : 1);
	keys_free(&ks);
	return rc;
}

/* 1.13: whatever came is the next request; the WAIT is dropped unanswered,
 * as 1.13's own server would answer it only when the key came. */
static int interrupted_113(struct conn *c)
{
	uint8_t b;
	int rc = recv_n(c, &b, 1);
	if (rc)
		return rc;
	c->pending_op = b;
	return 0;
}

/* 2.x: CANCEL_WAIT, answered WAIT_CANCELED. */
static int interrupted_2(struct conn *c)
{
	uint8_t b;
	int rc = recv_n(c, &b, 1);
	if (rc)
		return rc;
	if (b > 31 || c->p->ops[b] != OP_CANCEL) {
		HPCT_WARN(HPCT_SUB_NET,
		          "torch store: client %s sent command %u during a WAIT (only CANCEL_WAIT "
		          "may come): connection closed",
		          c->peer, b);
		return HPCT_EPROTO;
	}
	rc = send_u8(c, 1);
	return rc ? rc : 1;
}

/* Values fetched by halves of a split, h[0]'s then h[1]'s, put back in
 * the order the keys were asked (in place); 0, or HPCT_ENOMEM (then
 * nothing moved). */
static int in_order(const struct split *sp, uint64_t n, void **vals, size_t *lens)
{
	if (!sp->of[0] || !sp->of[1])
		return 0; /* all on one handle: in order already */
	void **ov = malloc(n * sizeof(void *));
	size_t *ol = malloc(n * sizeof(size_t));
	if (ov && ol) {
		for (int i = 0, f = 0; i < 2; i++)
			for (int j = 0; j < sp->of[i]; j++, f++) {
				ov[sp->at[i][j]] = vals[f];
				ol[sp->at[i][j]] = lens[f];
			}
		memcpy(vals, ov, n * sizeof(void *));
		memcpy(lens, ol, n * sizeof(size_t));
	}
	int rc = ov && ol ? 0 : HPCT_ENOMEM;
	free(ov);
	free(ol);
	return rc;
}

/* Parks until every key is set: in slices on the keys' homes, watching the
 * client between them (its cancel, or 1.13's next request), and every
 * HPCT_TIMEOUT asking whether a rank is gone (then no one sets them).
 * Answers STOP_WAITING itself; 0, or the failure.  With `keep`, the wait
 * fetches the keys' values, in the one round trip the wait takes anyway,
 * for a GET or MULTI_GET of the same keys that follows (seen_*): PyTorch
 * 2.x gets one key or several with a WAIT and then the GET, and so every
 * home is asked once, not twice. */
static int park(struct conn *c, const char *what, struct keys *ks, int keep)
{
	double limit = hpct__store_timeout(c->st), waited = 0;
	uint64_t n = ks->n ? ks->n : 1;
	struct split sp;
	int rc = split_keys(c, ks, &sp);
	if (rc)
		return rc;
	void **v = keep ? calloc(n, sizeof(void *)) : NULL;
	size_t *l = keep ? calloc(n, sizeof(size_t)) : NULL;
	if (keep && (!v || !l))
		rc = HPCT_ENOMEM;
	int done = 0; /* the client sent its next request, or its cancel */
	while (rc == 0 && !done) {
		double t0 = hpct__now();
		/* PyTorch's own keys first, then the rest, each in turn until
		 * found (a key once set stays for the wait) */
		for (int i = 0; i < 2 && rc == 0; i++) {
			void **vi = keep ? v + (i ? sp.of[0] : 0) : NULL;
			size_t *li = keep ? l + (i ? sp.of[0] : 0) : NULL;
			if (sp.n[i] &&
			    (rc = keep ? hpct__store_get_many_quiet(sp.h[i], sp.k[i], sp.n[i],
			                                            WAIT_SLICE_S, vi, li)
			               : hpct__store_wait_quiet(sp.h[i], sp.k[i], sp.n[i],
			                                        WAIT_SLICE_S)) == 0)
				sp.n[i] = 0;
		}
		if (rc == 0 && keep && (rc = in_order(&sp, ks->n, v, l)) == 0) {
			forget_seen(c);
			c->seen = *ks; /* taken */
			*ks = (struct keys){ 0 };
			c->seen_val = v;
			c->seen_len = l;
			v = NULL;
			l = NULL;
		}
		if (rc == 0) {
			rc = send_u8(c, 0);
			break;
		}
		if (rc != HPCT_ETIMEDOUT) {
			rc = failed(c, what, ks->n ? ks->k[0] : "", rc);
			break;
		}
		rc = 0;
		waited += hpct__now() - t0;
		char dead[600];
		if (waited >= limit && hpct__store_unreachable(c->all, dead, sizeof(dead)) > 0) {
			hpct__log(HPCT_LOG_WARN, HPCT_SUB_NET,
			          "torch store: client %s (torch %s): %s '%.100s' found nothing "
			          "after %.1f s, and ranks whose store does not answer (died or "
			          "never started): %s: the connection is closed, so PyTorch raises",
			          c->peer, c->p->name, what, ks->n ? ks->k[0] : "", waited, dead);
			rc = HPCT_EPEERDEAD;
		} else if (waited >= limit) {
			waited = 0;
		}
		int ready = rc ? 0 : hpct__sock_wait(c->fd, POLLIN, hpct__now());
		if (ready < 0) {
			rc = ready;
		} else if (ready) {
			rc = c->p->interrupted(c);
			rc = rc > 0 ? 0 : rc;
			done = 1;
		}
	}
	split_free(&sp);
	free_vals(v, keep ? ks->n : 0);
	free(l);
	return rc;
}

static int do_wait(struct conn *c)
{
	struct keys ks;
	int rc = recv_keys(c, &ks);
	if (rc)
		return rc;
	if ((rc = ensure_store(c, 0)) == 0) {
		if (ks.n == 1 && strcmp(ks.k[0], INIT_KEY) == 0)
			init_settle(c);
		rc = park(c, "WAIT for", &ks, 1);
	}
	keys_free(&ks);
	return rc;
}

/* 2.13's Store.barrier(key, world_size): every caller counts itself in;
 * the one that makes the count sets a done key, which all park on. */
static int do_barrier(struct conn *c)
{
	char *k;
	int64_t size;
	int rc = recv_str(c, &k, NULL);
	if (rc)
		return rc;
	if ((rc = recv_n(c, &size, sizeof(size))) == 0 && (rc = ensure_store(c, 0)) == 0) {
		size_t kl = strlen(k);
		char *count = malloc(kl + 32), *done = malloc(kl + 32);
		int64_t n = 0;
		if (!count || !done) {
			rc = HPCT_ENOMEM;
		} else {
			sprintf(count, "%s/hpct_barrier_count", k);
			sprintf(done, "%s/hpct_barrier_done", k);
			struct hpct_store *h = pick(c, done);
			if ((rc = hpct__store_add(h, count, 1, &n)) != 0)
				failed(c, "BARRIER", k, rc);
			else if (n == size && (rc = hpct__store_set(h, done, "1", 1)) != 0)
				failed(c, "BARRIER", k, rc);
		}
		if (rc == 0) {
			struct keys ks = { &done, 1 };
			rc = park(c, "BARRIER", &ks, 0);
		}
		free(count);
		free(done);
	}
	free(k);
	return rc;
}

static int do_numkeys(struct conn *c)
{
	int64_t n = 0, mine = 0;
	int rc = ensure_store(c, 0);
	if (rc == 0 && ((rc = hpct__store_num_keys(c->all, &n)) != 0 ||
	                (rc = hpct__store_num_keys(c->st, &mine)) != 0))
		failed(c, "GETNUMKEYS", NULL, rc);
	n += mine;
	return rc ? rc : send_i64(c, n);
}

static int do_delete(struct conn *c)
{
	char *k;
	int rc = recv_str(c, &k, NULL);
	if (rc)
		return rc;
	int existed = 0;
	if ((rc = ensure_store(c, 0)) == 0 &&
	    (rc = hpct__store_delete(pick(c, k), k, &existed)) != 0)
		failed(c, "DELETE_KEY", k, rc);
	free(k);
	return rc ? rc : send_i64(c, existed ? 1 : 0);
}

static int do_append(struct conn *c)
{
	return key_value(c, "APPEND", hpct__store_append);
}

static int do_mget(struct conn *c)
{
	struct keys ks;
	int rc = recv_keys(c, &ks);
	if (rc)
		return rc;
	if (seen(c, &ks)) {
		keys_free(&ks);
		return reply_seen(c);
	}
	void **vals = calloc(ks.n ? ks.n : 1, sizeof(void *));
	size_t *lens = calloc(ks.n ? ks.n : 1, sizeof(size_t));
	if (!vals || !lens)
		rc = HPCT_ENOMEM;
	struct split sp;
	if (rc == 0 && (rc = ensure_store(c, 0)) == 0 && (rc = split_keys(c, &ks, &sp)) == 0) {
		for (int i = 0; i < 2 && rc == 0; i++) {
			void **v = vals + (i ? sp.n[0] : 0);
			size_t *l = lens + (i ? sp.n[0] : 0);
			if (sp.n[i] &&
			    (rc = hpct__store_get_many(sp.h[i], sp.k[i], sp.n[i], -1, v, l)) != 0)
				failed(c, "MULTI_GET", sp.k[i][0], rc);
		}
		if (rc == 0)
			rc = in_order(&sp, ks.n, vals, lens);
		split_free(&sp);
	}
	for (uint64_t i = 0; rc == 0 && i < ks.n; i++) {
		rc = reply_value(c, vals[i], lens[i]);
		vals[i] = NULL;
	}
	free_vals(vals, ks.n);
	free(lens);
	keys_free(&ks);
	return rc;
}

static int do_mset(struct conn *c)
{
	uint64_t n;
	int rc = recv_u64(c, &n);
	if (rc)
		return rc;
	if (n > MAX_KEYS)
		return HPCT_EPROTO;
	for (uint64_t i = 0; rc == 0 && i < n; i++)
		rc = key_value(c, "MULTI_SET", hpct__store_set);
	return rc;
}

/* A CANCEL_WAIT after the WAIT was answered: the client reads
 * STOP_WAITING, then this. */
static int do_cancel(struct conn *c)
{
	return send_u8(c, 1);
}

static int do_ping(struct conn *c)
{
	uint32_t nonce;
	int rc = recv_n(c, &nonce, sizeof(nonce));
	return rc ? rc : send_n(c, &nonce, sizeof(nonce));
}

static int do_validate(struct conn *c)
{
	uint32_t magic;
	int rc = recv_n(c, &magic, sizeof(magic));
	if (rc)
		return rc;
	if (magic != MAGIC) {
		HPCT_WARN(HPCT_SUB_NET,
		          "torch store: client %s: VALIDATE with magic 0x%08x, not 0x%08x: "
		          "connection closed",
		          c->peer, magic, MAGIC);
		return HPCT_EPROTO;
	}
	return 0;
}

static int do_qpush(struct conn *c)
{
	return key_value(c, "QUEUE_PUSH", hpct__store_queue_push);
}

/* Reply: i64 items taken (1, or 0 when the queue was empty: the client
 * raises QueueEmptyError), then the item.  A pop after a WAIT on its key
 * (block=True) may find it taken by another client first: also 0. */
static int do_qpop(struct conn *c)
{
	char *k;
	int rc = recv_str(c, &k, NULL);
	if (rc)
		return rc;
	int there = 0;
	const char *one[1] = { k };
	if ((rc = ensure_store(c, 0)) == 0 &&
	    (rc = hpct__store_check(pick(c, k), one, 1, &there)) != 0)
		failed(c, "QUEUE_POP", k, rc);
	if (rc == 0 && there) {
		void *v = NULL;
		size_t vl = 0;
		rc = hpct__store_queue_pop(pick(c, k), k, 0.05, &v, &vl);
		if (rc == 0) {
			rc = send_i64(c, 1);
			rc = rc ? (free(v), rc) : reply_value(c, v, vl);
		} else if (rc == HPCT_ETIMEDOUT) {
			rc = send_i64(c, 0);
		} else {
			failed(c, "QUEUE_POP", k, rc);
		}
	} else if (rc == 0) {
		rc = send_i64(c, 0);
	}
	free(k);
	return rc;
}

static int do_qlen(struct conn *c)
{
	char *k;
	int rc = recv_str(c, &k, NULL);
	if (rc)
		return rc;
	int64_t n = 0;
	if ((rc = ensure_store(c, 0)) == 0 && (rc = hpct__store_queue_len(pick(c, k), k, &n)) != 0)
		failed(c, "QUEUE_LEN", k, rc);
	free(k);
	return rc ? rc : send_i64(c, n);
}

static int do_list(struct conn *c)
{
	char **keys[2] = { NULL, NULL };
	int64_t n[2] = { 0, 0 };
	int rc = ensure_store(c, 0);
	if (rc == 0 && ((rc = hpct__store_list(c->all, &keys[0], &n[0])) != 0 ||
	                (rc = hpct__store_list(c->st, &keys[1], &n[1])) != 0))
		failed(c, "LIST_KEYS", NULL, rc);
	if (rc == 0)
		rc = send_i64(c, n[0] + n[1]);
	for (int h = 0; h < 2; h++) {
		for (int64_t i = 0; i < n[h]; i++) {
			if (rc == 0)
				rc = send_bytes(c, keys[h][i], strlen(keys[h][i]));
			free(keys[h][i]);
		}
		free(keys[h]);
	}
	return rc;
}

/* A command this store does not offer: said, and the connection closed. */
static int refuse(struct conn *c, enum op op, unsigned code)
{
	if (op == OP_WATCH)
		hpct__log(HPCT_LOG_WARN, HPCT_SUB_NET,
		          "torch store: client %s (torch %s) asked for WATCH_KEY: hpct's rootless "
		          "store has no server to watch at; run with HPCT_USE_ROOTLESS=0 for "
		          "PyTorch's own TCPStore",
		          c->peer, c->p->name);
	else
		hpct__log(HPCT_LOG_WARN, HPCT_SUB_NET,
		          "torch store: client %s sent command %u, which torch %s's TCPStore "
		          "protocol does not have: connection closed",
		          c->peer, code, c->p->name);
	return HPCT_EPROTO;
}

static int (*const handlers[OP_COUNT])(struct conn *) = {
	[OP_VALIDATE] = do_validate, [OP_SET] = do_set,         [OP_CAS] = do_cas,
	[OP_GET] = do_get,           [OP_ADD] = do_add,         [OP_CHECK] = do_check,
	[OP_WAIT] = do_wait,         [OP_NUMKEYS] = do_numkeys, [OP_DELETE] = do_delete,
	[OP_APPEND] = do_append,     [OP_MGET] = do_mget,       [OP_MSET] = do_mset,
	[OP_CANCEL] = do_cancel,     [OP_PING] = do_ping,       [OP_QPUSH] = do_qpush,
	[OP_QPOP] = do_qpop,         [OP_QLEN] = do_qlen,       [OP_LIST] = do_list,
	[OP_BARRIER] = do_barrier,
};

static void *serve(void *arg)
{
	pthread_setname_np(pthread_self(), "hpct-tcpstore"); /* in top, gdb, perf */
	struct conn *c = arg;
	int first = 1;
	/* here, not in the accept loop: a stranger's wait holds up no one */
	if (!c->adopted && !take_expected(c->port)) {
		HPCT_WARN(HPCT_SUB_NET,
		          "torch store: a connection from %s that no TCPStore of this process "
		          "made: closed",
		          c->peer);
		first = -1;
	}
	for (; first >= 0;) {
		uint8_t code;
		int rc;
		if (c->pending_op >= 0) {
			code = (uint8_t)c->pending_op;
			c->pending_op = -1;
		} else if ((rc = recv_n(c, &code, 1)) != 0) {
			break; /* the client closed (its TCPStore is gone) */
		}
		enum op op = code < 32 ? (enum op)c->p->ops[code] : OP_NONE;
		if (first && c->p->validates && op != OP_VALIDATE) {
			HPCT_WARN(HPCT_SUB_NET,
			          "torch store: client %s began with command %u, not VALIDATE as "
			          "torch "
			          "%s does: connection closed",
			          c->peer, code, c->p->name);
			break;
		}
		first = 0;
		if (op != OP_GET && op != OP_MGET)
			forget_seen(c);
		rc = handlers[op] ? handlers[op](c) : refuse(c, op, code);
		if (op == OP_GET || op == OP_MGET)
			forget_seen(c);
		if (rc)
			break;
		HPCT_TRACE(HPCT_SUB_NET, "torch store: client %s: %s done", c->peer, op_names[op]);
	}
	forget_seen(c);
	if (c->st)
		hpct__store_close(c->st);
	if (c->all)
		hpct__store_close(c->all);
	close(c->fd);
	free(c);
	return NULL;
}

/* A thread serving a client from fd: one this process routed (its source
 * port expected), or `adopted`. */
static void start_conn(int fd, const struct sockaddr_storage *ss, int adopted)
{
	hpct__fd_track(fd);
	int one = 1; /* replies are small and the client waits on each */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	uint16_t port = ss->ss_family == AF_INET6
	                        ? ntohs(((const struct sockaddr_in6 *)ss)->sin6_port)
	                        : ntohs(((const struct sockaddr_in *)ss)->sin_port);
	char peer[64];
	if (adopted)
		hpct__addr_str((const struct sockaddr *)ss, peer, sizeof(peer));
	else
		snprintf(peer, sizeof(peer), "127.0.0.1:%u", port);
	struct conn *c = calloc(1, sizeof(*c));
	pthread_t t;
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	if (c) {
		c->fd = fd;
		c->p = S.proto;
		c->pending_op = -1;
		c->port = port;
		c->adopted = adopted;
		pthread_mutex_lock(&S.mu);
		c->at_accept = S.incarnation;
		pthread_mutex_unlock(&S.mu);
		snprintf(c->peer, sizeof(c->peer), "%s%s", peer,
		         adopted ? " (at MASTER_PORT, not routed)" : "");
	}
	/* counted before its thread may answer: a client that got an
	 * answer reads the count with its own connection in it */
	if (!adopted)
		atomic_fetch_add(&routed, 1);
	if (!c || pthread_create(&t, &at, serve, c) != 0) {
		if (!adopted)
			atomic_fetch_sub(&routed, 1);
		HPCT_WARN(HPCT_SUB_NET, "torch store: no thread for client %s: closed", peer);
		close(fd);
		free(c);
	}
	pthread_attr_destroy(&at);
}

static void *accept_loop(void *arg)
{
	pthread_setname_np(pthread_self(), "hpct-tcpstore-a"); /* in top, gdb, perf */
	(void)arg;
	for (;;) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int fd = accept4(S.lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM) {
				hpct__sleep(0.05);
				continue;
			}
			HPCT_WARN(HPCT_SUB_NET, "torch store: accept on 127.0.0.1:%u: %s", S.port,
			          strerror(errno));
			return NULL;
		}
		start_conn(fd, &ss, 0);
	}
}

/* A client that connected to rank 0's TCPStore server, at MASTER_ADDR:
 * MASTER_PORT, without hpct's routing (a process of another job, a rank's
 * exec'd child, an agent): served here, on the keyspace the ranks share. */
void hpct__torch_store_adopt(int fd)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	if (getpeername(fd, (struct sockaddr *)&ss, &sl) != 0)
		memset(&ss, 0, sizeof(ss));
	start_conn(fd, &ss, 1);
}

/* In a forked child of a rank that served its store (NVRx's monitor, a
 * data-loader worker): the parent's listener and threads are not the
 * child's (fdtrack.h made its sockets /dev/null), so the child listens on
 * its own and is a client of the same keyspace, also once its parent has
 * died.  The child's only thread runs this, so the copied lock is reset. */
int hpct__torch_store_restart_child(hpct_world *world, const struct hpct_torch_proto *proto)
{
	pthread_mutex_init(&S.mu, NULL);
	pthread_cond_init(&S.cv, NULL);
	hpct_world *w = world ? world : S.world;
	const struct hpct_torch_proto *p = proto ? proto : S.proto;
	S.lfd = -1;
	S.port = 0;
	S.nexpected = 0;
	S.barriers = NULL; /* the parent's (never freed: the child may not own them) */
	S.nbarriers = 0;
	atomic_store(&routed, 0);
	return w && p ? hpct__torch_store_start(w, p) : HPCT_ESTATE;
}

int hpct__torch_store_start(hpct_world *world, const struct hpct_torch_proto *proto)
{
	pthread_mutex_lock(&S.mu);
	if (S.lfd >= 0) {
		pthread_mutex_unlock(&S.mu);
		return 0;
	}
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t al = sizeof(a);
	int rc = 0;
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 128) != 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &al) != 0)
		rc = hpct__fail(-errno, HPCT_SUB_NET,
		                "torch store: cannot listen on 127.0.0.1 for this rank's TCPStore "
		                "clients: %s",
		                strerror(errno));
	pthread_t t;
	/* this rank's part of the store, listening before its first client
	 * needs it: the other ranks' first requests find it up */
	struct hpct_store *first = NULL;
	if (rc == 0 && (rc = hpct__store_open(world, 0, hpct__world_timeout(world), &first)) == 0)
		hpct__store_close(first);
	if (rc == 0) {
		hpct__fd_track(fd);
		S.lfd = fd;
		S.port = ntohs(a.sin_port);
		S.world = world;
		S.proto = proto;
		if (pthread_create(&t, NULL, accept_loop, NULL) != 0) {
			rc = hpct__fail(HPCT_ENOMEM, HPCT_SUB_NET, "torch store: no accept thread");
			S.lfd = -1;
			S.port = 0;
		} else {
			pthread_detach(t);
		}
	}
	if (rc && fd >= 0)
		close(fd);
	pthread_mutex_unlock(&S.mu);
	return rc;
}
