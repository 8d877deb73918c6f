/* PyTorch's TCPStore, served inside the rank (see torch_store.h): the
 * process's state (its loopback listener, the clients its connect() told,
 * the incarnations begun, the barriers passed), the keyspaces a
 * connection's commands work in, and the threads.  The wire and each
 * protocol's table are torch_proto.c's, each command torch_commands.c's.
 *
 * Namespaces: (job, epoch, incarnation).  A TCPStore made with a world size
 * starts with ADD "init/" 1 (1.13: its first request; 2.x: after VALIDATE
 * and PING): that begins an incarnation, and a connection that does not
 * (a clone, 1.13's watch socket, a store made without a world size) joins
 * the latest one begun when it connected (a TCPStore is made only once
 * its ADD was answered, so that follows the program's order).  Every
 * rank makes its stores in the same order, so the n-th incarnation is the
 * same on all, and a re-init never reads a key of the last one.
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
#include "bootstrap/shim/torch_store_internal.h"
#include "bootstrap/store/store.h"
#include "bootstrap/world_access.h"

#define MAX_EXPECTED 256 /* routed connections not yet accepted */

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

/* ------------------------------------------------------------ namespaces */

/* The store handles of this connection, opened at its first command:
 * `begins` when that command is ADD "init/" (a new TCPStore).  Incarnation
 * 0 is the keyspace every client shares. */
int hpct__torch_ensure_store(struct conn *c, int begins)
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
 * puts on its store (1.13 to 2.15), at the start or past a user's prefix
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

struct hpct_store *hpct__torch_pick(struct conn *c, const char *key)
{
	return pg_key(key) ? c->st : c->all;
}

void hpct__torch_split_free(struct split *sp)
{
	for (int i = 0; i < 2; i++) {
		free(sp->k[i]);
		free(sp->at[i]);
	}
}

int hpct__torch_split_keys(struct conn *c, const struct keys *ks, struct split *sp)
{
	memset(sp, 0, sizeof(*sp));
	sp->h[0] = c->st;
	sp->h[1] = c->all;
	for (int i = 0; i < 2; i++) {
		sp->k[i] = malloc((ks->n ? ks->n : 1) * sizeof(char *));
		sp->at[i] = malloc((ks->n ? ks->n : 1) * sizeof(uint64_t));
		if (!sp->k[i] || !sp->at[i]) {
			hpct__torch_split_free(sp);
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

int hpct__torch_world_size(void)
{
	struct hpct_world_info info;
	hpct_world_get_info(S.world, &info);
	return info.size;
}

/* Is PyTorch's world hpct's?  WORLD_SIZE, when the launcher set it, is
 * the size torch's barrier counts to. */
int hpct__torch_world_barrier(void)
{
	const char *ws = getenv("WORLD_SIZE");
	return !ws || !*ws || atoi(ws) == hpct__torch_world_size();
}

/* 1 when the store-based barrier `key` was passed in this incarnation; with `pass`, passes
 * it first (once per incarnation and key). */
int hpct__torch_barrier(struct conn *c, const char *key, int pass, int *rc_out)
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

/* ------------------------------------------------------------ connections */

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
		} else if ((rc = hpct__torch_recv_n(c, &code, 1)) != 0) {
			break; /* the client closed (its TCPStore is gone) */
		}
		enum op op = code < 32 ? (enum op)c->p->ops[code] : OP_NONE;
		if (first && c->p->validates && op != OP_VALIDATE) {
			HPCT_WARN(HPCT_SUB_NET,
			          "torch store: client %s began with command %u, not VALIDATE as "
			          "torch %s does: connection closed%s",
			          c->peer, code, c->p->name, hpct__torch_proto_advice(c->p));
			break;
		}
		first = 0;
		if (op != OP_GET && op != OP_MGET)
			hpct__torch_forget_seen(c);
		rc = hpct__torch_command(c, op, code);
		int sent = hpct__torch_flush(c); /* the reply, whole */
		rc = rc ? rc : sent;
		if (op == OP_GET || op == OP_MGET)
			hpct__torch_forget_seen(c);
		if (rc)
			break;
		HPCT_TRACE(HPCT_SUB_NET, "torch store: client %s: %s done", c->peer,
		           hpct__torch_op_names[op]);
	}
	hpct__torch_forget_seen(c);
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
