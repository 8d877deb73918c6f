/* The rootless store's client (see store.h): finds a key's home rank by
 * hash, connects to that rank's store (starting this rank's server first),
 * and asks it; a timeout names the key, its home and the ranks that do not
 * answer. */
#include "bootstrap/store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/base/auth.h"
#include "bootstrap/base/bytes.h"
#include "bootstrap/base/log.h"
#include "bootstrap/base/param.h"
#include "bootstrap/base/sock.h"
#include "bootstrap/base/util.h"
#include "bootstrap/store/store_internal.h"
#include "bootstrap/topo/derive.h"
#include "bootstrap/world.h"

#define KEY_SHOWN 100
#define SLACK_S   5.0 /* past a parked wait, before the client gives up */
#define PROBE_S   0.3 /* to find ranks that do not answer, after a timeout */
/* a home never reached that refuses: how often a peer is asked if it is gone */
#define ASK_EVERY_S 0.5

int hpct__store_addr(struct hpct_world *w, int rank, struct sockaddr_storage *ss, socklen_t *sl,
                     char *text, size_t tlen)
{
	int rc = hpct__world_node_addr(w, rank, ss, sl);
	if (rc)
		return rc;
	/* the range just below hpct's (clear of the kernel's ephemeral ports
	 * with the defaults), else the one after NCCL's */
	long range = w->topo.port_range;
	long off;
	int set;
	rc = hpct__env_int(hpct__env_process(), "HPCT_STORE_PORT_OFFSET", -65535, 65535,
	                   w->topo.port_base - range >= 1024 ? -range : 2 * range, &off, &set);
	if (rc)
		return rc;
	if (set && off == 0)
		return hpct__fail(
		        HPCT_EBADENV, HPCT_SUB_NET,
		        "HPCT_STORE_PORT_OFFSET=0 is not a port offset (+-1 to 65535): the "
		        "store would take the rank's own port");
	long port = hpct__derive_port(&w->topo, rank) + off;
	if (port < 1 || port > 65535)
		return hpct__fail(HPCT_EBADENV, HPCT_SUB_NET,
		                  "rank %d's store port %ld (world port %d %+ld, "
		                  "HPCT_STORE_PORT_OFFSET) is not a port",
		                  rank, port, hpct__derive_port(&w->topo, rank), off);
	if (ss->ss_family == AF_INET6)
		((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
	else
		((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
	hpct__addr_str((struct sockaddr *)ss, text, tlen);
	return 0;
}

/* What a store connection's proof is bound to.  The epoch is left out: a
 * rank's one store server outlives in-process recoveries, and its keys'
 * namespaces carry the epoch already. */
struct hpct_auth_id hpct__store_auth_id(const struct hpct_world *w, int client, int home)
{
	return (struct hpct_auth_id){ .job = w->topo.job,
		                      .epoch = 0,
		                      .service = HPCT_AUTH_SERVICE_STORE,
		                      .client = (uint32_t)client,
		                      .server = (uint32_t)home,
		                      .size = (uint32_t)w->topo.size };
}

struct hpct_store {
	struct hpct_world *w;
	uint64_t ns;
	double timeout;
	pthread_mutex_t mu;
	int *fd;                        /* per home rank, -1 until first used */
	struct hpct_store *prev, *next; /* the process's open handles */
	/* HPCT_STORE_REPLICAS: R homes a key; with more than one, the view's
	 * generation each home was last told the gone ranks in (told, +1;
	 * view.c), and this handle's id and last write's number (a write's
	 * id: OP_RID) */
	int R;
	unsigned *told;
	uint64_t cid, seq;
	int asking;     /* said_dead's own handle: it asks no further */
	unsigned asked; /* said_dead's asks so far: each asks the next peer */
};

/* Ranks whose store this process reached once: one that refuses later
 * died (one never reached may not have started yet), so that with
 * replicas its keys' next home is asked at once.  Per world and epoch. */
static struct {
	pthread_mutex_t mu;
	uint64_t job, epoch;
	int size;
	unsigned char *seen;
} reached = { .mu = PTHREAD_MUTEX_INITIALIZER };

static int same_world(const struct hpct_world *w)
{
	return reached.seen && reached.job == w->topo.job && reached.epoch == w->topo.epoch &&
	       reached.size == w->topo.size;
}

static void mark_reached(const struct hpct_world *w, int rank)
{
	pthread_mutex_lock(&reached.mu);
	if (!same_world(w)) {
		unsigned char *s = calloc((size_t)w->topo.size, 1);
		if (s) {
			free(reached.seen);
			reached.seen = s;
			reached.job = w->topo.job;
			reached.epoch = w->topo.epoch;
			reached.size = w->topo.size;
		}
	}
	if (same_world(w))
		reached.seen[rank] = 1;
	pthread_mutex_unlock(&reached.mu);
}

int hpct__store_was_reached(const struct hpct_world *w, int rank)
{
	pthread_mutex_lock(&reached.mu);
	int r = same_world(w) && reached.seen[rank];
	pthread_mutex_unlock(&reached.mu);
	return r;
}

/* The write a thread is sending now: its sequence in the handle (frame
 * puts it after the key when the op carries OP_RID). */
static _Thread_local uint64_t rid_seq;

/* The open handles, for hpct__store_own_addrs. */
static struct {
	pthread_mutex_t mu;
	struct hpct_store *head;
} open_handles = { .mu = PTHREAD_MUTEX_INITIALIZER };

int hpct__store_own_addrs(char (*addrs)[HPCT_ADDRSTRLEN], int max)
{
	int n = 0;
	pthread_mutex_lock(&open_handles.mu);
	for (struct hpct_store *s = open_handles.head; s && n < max; s = s->next) {
		if (pthread_mutex_trylock(&s->mu) != 0)
			continue; /* in a request: not waited for, the linger's cap is */
		int fd = s->fd[s->w->topo.rank];
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		if (fd >= 0 && getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
			hpct__addr_str((struct sockaddr *)&ss, addrs[n++], HPCT_ADDRSTRLEN);
		pthread_mutex_unlock(&s->mu);
	}
	pthread_mutex_unlock(&open_handles.mu);
	return n;
}

/* The first home this process found dead, or was told of by a home that
 * left (per world and epoch): a later failure, often of a home that left
 * because of it, names it too, and this rank's server tells its parked
 * clients before the process exits (server.c).  A rank that fails
 * because of another passes the cause on, not only its own leaving. */
static struct {
	pthread_mutex_t mu;
	uint64_t job, epoch;
	int set;
	char why[512];
} first = { .mu = PTHREAD_MUTEX_INITIALIZER };

/* A handle of this process's for asking other ranks (said_dead), per
 * world: a rank's forked child opens its own. */
static struct {
	pthread_mutex_t mu;
	struct hpct_store *h;
	pid_t pid;
} asker = { .mu = PTHREAD_MUTEX_INITIALIZER };

/* A forked child (NVRx's monitor, a data-loader worker) is a client of
 * the store too (bootstrap/shim): a lock another thread held at the fork
 * is free again there, the only thread left. */
static void child_locks(void)
{
	pthread_mutex_init(&open_handles.mu, NULL);
	pthread_mutex_init(&first.mu, NULL);
	pthread_mutex_init(&reached.mu, NULL);
	hpct__store_view_child();
	pthread_mutex_init(&asker.mu, NULL);
}

__attribute__((constructor)) static void fork_safe(void)
{
	pthread_atfork(NULL, NULL, child_locks);
}

/* Records `why` (as "rank 2 at host:port ...") when it is this world
 * epoch's first (why NULL: records nothing); in also, what a message
 * saying `says` adds: the first, when `says` does not name its rank at
 * its address already. */
static void found_dead(const struct hpct_store *s, const char *why, const char *says, char *also,
                       size_t alen)
{
	also[0] = 0;
	pthread_mutex_lock(&first.mu);
	int ours = first.set && first.job == s->w->topo.job && first.epoch == s->w->topo.epoch;
	if (!ours && why) {
		snprintf(first.why, sizeof(first.why), "%s", why);
		first.job = s->w->topo.job;
		first.epoch = s->w->topo.epoch;
		first.set = 1;
	} else if (ours) {
		/* "rank 2 at 127.0.0.1:2550" */
		const char *at = strstr(first.why, " at ");
		const char *end = at ? strchr(at + 4, ' ') : NULL;
		size_t n = end ? (size_t)(end - first.why) : strlen(first.why);
		char tag[HPCT_ADDRSTRLEN + 32];
		snprintf(tag, sizeof(tag), "%.*s", (int)n, first.why);
		if (!strstr(says, tag))
			snprintf(also, alen, "; before it, this rank found %s", first.why);
	}
	pthread_mutex_unlock(&first.mu);
}

int hpct__store_first_dead(char *buf, size_t len)
{
	pthread_mutex_lock(&first.mu);
	int set = first.set;
	if (set)
		snprintf(buf, len, "%s", first.why);
	pthread_mutex_unlock(&first.mu);
	return set;
}

static double cap_timeout(const struct hpct_store *s, double t)
{
	double lim = s->w->topo.timeout_s;
	return t < 0 || t > lim ? lim : t;
}

int hpct__store_open(hpct_world *world, uint64_t ns, double timeout_s, struct hpct_store **out)
{
	struct hpct_world *w = (struct hpct_world *)world;
	*out = NULL;
	if (!w->topo.nnodes)
		return hpct__fail(HPCT_ESTATE, HPCT_SUB_NET,
		                  "the rootless store needs a node list (%s)",
		                  w->topo.why_not_rootless);
	int rc = w->store_client_only ? 0 : hpct__store_server_start(w);
	if (rc)
		return rc;
	struct hpct_store *s = calloc(1, sizeof(*s));
	if (!s || !(s->fd = malloc((size_t)w->topo.size * sizeof(int)))) {
		free(s);
		return HPCT_ENOMEM;
	}
	for (int i = 0; i < w->topo.size; i++)
		s->fd[i] = -1;
	s->w = w;
	s->ns = ns;
	s->timeout = timeout_s;
	if ((rc = hpct__store_replicas(w, &s->R)) != 0 ||
	    (s->R > 1 && !(s->told = calloc((size_t)w->topo.size, sizeof(unsigned))))) {
		free(s->fd);
		free(s);
		return rc ? rc : HPCT_ENOMEM;
	}
	/* unique enough among the job's handles: a home remembers one write
	 * per id */
	uint64_t now_ns = (uint64_t)(hpct__now() * 1e9);
	s->cid =
	        hpct__hash_u64(hpct__hash_u64(now_ns, (uint64_t)getpid()), (uint64_t)(uintptr_t)s) |
	        1;
	pthread_mutex_init(&s->mu, NULL);
	pthread_mutex_lock(&open_handles.mu);
	if ((s->next = open_handles.head) != NULL)
		s->next->prev = s;
	open_handles.head = s;
	pthread_mutex_unlock(&open_handles.mu);
	*out = s;
	return 0;
}

void hpct__store_close(struct hpct_store *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&open_handles.mu);
	if (s->prev)
		s->prev->next = s->next;
	else
		open_handles.head = s->next;
	if (s->next)
		s->next->prev = s->prev;
	pthread_mutex_unlock(&open_handles.mu);
	for (int i = 0; i < s->w->topo.size; i++)
		if (s->fd[i] >= 0)
			close(s->fd[i]);
	pthread_mutex_destroy(&s->mu);
	free(s->fd);
	free(s->told);
	free(s);
}

void hpct__store_set_timeout(struct hpct_store *s, double timeout_s)
{
	s->timeout = timeout_s;
}

double hpct__store_timeout(const struct hpct_store *s)
{
	return cap_timeout(s, s->timeout);
}

int hpct__store_home(const struct hpct_store *s, const char *key)
{
	return (int)(hpct__hash(key, strlen(key), s->ns ^ 0x73746f7265ull) %
	             (uint64_t)s->w->topo.size);
}

static const char *shown(const char *key, char *buf, size_t len)
{
	snprintf(buf, len, "%.*s%s", KEY_SHOWN, key, strlen(key) > KEY_SHOWN ? "..." : "");
	return buf;
}

/* Ranks whose store does not take a connection now, as "3 (host:port),
 * ..." in buf; how many. */
static int unreachable(struct hpct_store *s, char *buf, size_t len)
{
	int n = 0;
	size_t used = 0;
	buf[0] = 0;
	double until = hpct__now() + PROBE_S;
	for (int r = 0; r < s->w->topo.size && hpct__now() < until; r++) {
		struct sockaddr_storage ss;
		socklen_t sl;
		char text[HPCT_ADDRSTRLEN];
		if (hpct__store_addr(s->w, r, &ss, &sl, text, sizeof(text)) != 0)
			continue;
		int fd = hpct__sock_connect(&ss, sl, hpct__now() + 0.05);
		if (fd >= 0) {
			close(fd);
			continue;
		}
		if (n++ < 8 && used < len)
			used += (size_t)snprintf(buf + used, len - used, "%s%d (%s)",
			                         n > 1 ? ", " : "", r, text);
		if (n == 1) { /* the first such: a cause this rank passes on */
			char why[HPCT_ADDRSTRLEN + 96], also[600];
			snprintf(why, sizeof(why),
			         "rank %d at %s took no connection after a wait passed: it died "
			         "or never started",
			         r, text);
			found_dead(s, why, why, also, sizeof(also));
		}
	}
	return n;
}

static int said_dead(struct hpct_store *s, int x);

/* Connects to `home`'s store, retrying while nobody listens there yet
 * (with replicas, until a peer counts it gone: said_dead). */
static int ensure(struct hpct_store *s, int home, const char *what, double deadline)
{
	if (s->fd[home] >= 0)
		return 0;
	struct sockaddr_storage ss;
	socklen_t sl;
	char text[HPCT_ADDRSTRLEN];
	int rc = hpct__store_addr(s->w, home, &ss, &sl, text, sizeof(text));
	if (rc)
		return rc;
	double nap = 0.001, t0 = hpct__now(), next_ask = t0 + ASK_EVERY_S;
	for (;;) {
		int fd = hpct__sock_connect(&ss, sl, deadline);
		if (fd >= 0 && s->w->topo.secret) {
			char who[HPCT_ADDRSTRLEN + 64];
			snprintf(who, sizeof(who), "store: %s: rank %d (the key's home) at %s",
			         what, home, text);
			struct hpct_auth_id id = hpct__store_auth_id(s->w, s->w->topo.rank, home);
			rc = hpct__auth_client(fd, s->w->topo.secret, s->w->topo.secret_len, &id,
			                       deadline, who);
			if (rc) {
				close(fd);
				return rc;
			}
		}
		if (fd >= 0) {
			s->fd[home] = fd;
			mark_reached(s->w, home);
			return 0;
		}
		double now = hpct__now();
		/* with replicas, a refusal is a death once it answered before (its
		 * keys have other homes), or once a peer counts it gone */
		int reached_it =
		        s->R > 1 && fd == -ECONNREFUSED && hpct__store_was_reached(s->w, home);
		int ask = s->R > 1 && fd == -ECONNREFUSED && !reached_it && now >= next_ask;
		if (ask)
			next_ask = now + ASK_EVERY_S;
		if (reached_it || (ask && said_dead(s, home))) {
			const char *how =
			        reached_it ? ": it died or left" : ", and a peer counts it gone";
			char why[HPCT_ADDRSTRLEN + 96], also[600];
			snprintf(why, sizeof(why), "rank %d at %s refused a connection%s", home,
			         text, how);
			found_dead(s, why, why, also, sizeof(also));
			return hpct__fail(HPCT_EPEERDEAD, HPCT_SUB_NET,
			                  "store: %s: rank %d (a home of the key) at %s refused a "
			                  "connection%s%s",
			                  what, home, text, how, also);
		}
		if (fd == HPCT_ETIMEDOUT || !hpct__sock_retryable(-fd) || now >= deadline) {
			char why[HPCT_ADDRSTRLEN + 160], also[600];
			snprintf(why, sizeof(why),
			         "rank %d at %s did not answer within %.1f s (%s): it has not "
			         "started, or it died",
			         home, text, now - t0,
			         fd < 0 && fd > -4096 ? strerror(-fd) : "no answer");
			found_dead(s, why, why, also, sizeof(also));
			return hpct__fail(fd == HPCT_ETIMEDOUT || hpct__sock_retryable(-fd)
			                          ? HPCT_ETIMEDOUT
			                          : fd,
			                  HPCT_SUB_NET,
			                  "store: %s: rank %d (the key's home) at %s did not "
			                  "answer within %.1f s "
			                  "(%s): it has not started, or it died%s",
			                  what, home, text, now - t0,
			                  fd < 0 && fd > -4096 ? strerror(-fd) : "no answer", also);
		}
		hpct__sleep(nap < deadline - now ? nap : deadline - now);
		nap = nap * 2 > 0.01 ? 0.01 : nap * 2; /* a rank starting now: soon */
	}
}

/* A request's frame (malloc'd): u32 length, op, namespace, key, fields. */
static int frame(struct hpct_store *s, const char *what, uint8_t op, const char *key, const void *a,
                 size_t alen, const void *b, size_t blen, unsigned char **f_out, size_t *len_out)
{
	size_t klen = strlen(key);
	if (klen > HPCT_STORE_MAX_KEY)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_NET,
		                  "store: %s: key of %zu bytes (at most %u)", what, klen,
		                  HPCT_STORE_MAX_KEY);
	if (alen + blen > HPCT_STORE_MAX_FRAME - HDR - klen - 64)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_NET,
		                  "store: %s: value of %zu bytes (at most %zu)", what, alen + blen,
		                  (size_t)HPCT_STORE_MAX_FRAME - HDR - klen - 64);
	size_t rl = op & OP_RID ? 16 : 0;
	size_t flen = HDR + klen + rl + alen + blen;
	unsigned char *f = malloc(4 + flen);
	if (!f)
		return HPCT_ENOMEM;
	hpct__put32(f, (uint32_t)flen);
	f[4] = op;
	hpct__put64(f + 5, s->ns);
	hpct__put32(f + 13, (uint32_t)klen);
	memcpy(f + 4 + HDR, key, klen);
	if (rl) {
		hpct__put64(f + 4 + HDR + klen, s->cid);
		hpct__put64(f + 4 + HDR + klen + 8, rid_seq);
	}
	if (alen)
		memcpy(f + 4 + HDR + klen + rl, a, alen);
	if (blen)
		memcpy(f + 4 + HDR + klen + rl + alen, b, blen);
	*f_out = f;
	*len_out = 4 + flen;
	return 0;
}

/* One answer from `home` (s->mu held): 0 with *status and *rep (malloc'd),
 * or the exchange's failure (the stream is then out of step or gone). */
static int answer(struct hpct_store *s, int home, double deadline, int *status, unsigned char **rep,
                  size_t *replen)
{
	unsigned char h[8];
	int io = hpct__sock_recv_all(s->fd[home], h, 8, deadline);
	if (io)
		return io;
	uint32_t len = hpct__get32(h);
	if (hpct__auth_is_frame(h, sizeof(h)) && !s->w->topo.secret)
		return HPCT_EREFUSED; /* a REFUSE: it wants a proof */
	if (len < 4 || len > HPCT_STORE_MAX_FRAME)
		return HPCT_EPROTO;
	if (len > 4 && !(*rep = malloc(len - 4)))
		return HPCT_ENOMEM;
	if ((io = hpct__sock_recv_all(s->fd[home], *rep, len - 4, deadline)) != 0) {
		free(*rep);
		*rep = NULL;
		return io;
	}
	*replen = len - 4;
	*status = (int32_t)hpct__get32(h + 4);
	return 0;
}

/* The exchange with `home` failed (s->mu held): its connection goes, and
 * the failure is named (with the first rank found dead before, when it
 * died or left). */
static int broken(struct hpct_store *s, int home, const char *what, int io)
{
	char text[HPCT_ADDRSTRLEN] = "?", also[600] = "";
	struct sockaddr_storage ss;
	socklen_t sl;
	hpct__store_addr(s->w, home, &ss, &sl, text, sizeof(text));
	if (s->fd[home] >= 0)
		close(s->fd[home]);
	s->fd[home] = -1;
	int err = io == HPCT_EPROTO || io == HPCT_ETIMEDOUT || io == HPCT_ENOMEM ||
	                          io == HPCT_EREFUSED
	                  ? io
	                  : HPCT_EPEERDEAD;
	if (err == HPCT_EPEERDEAD) {
		char why[HPCT_ADDRSTRLEN + 160];
		snprintf(why, sizeof(why),
		         "rank %d at %s closed its connection: it died or left (%s)", home, text,
		         hpct_strerror(io));
		found_dead(s, why, why, also, sizeof(also));
	}
	return hpct__fail(err, HPCT_SUB_NET, "store: %s: rank %d (the key's home) at %s %s (%s)%s",
	                  what, home, text,
	                  io == HPCT_EREFUSED ? "refused us: it has a shared secret (HPCT_SECRET) "
	                                        "and this rank has none"
	                  : io == HPCT_EPROTO ? "answered something malformed"
	                  : io == HPCT_ETIMEDOUT ? "did not answer in time"
	                  : io == HPCT_ENOMEM    ? "sent an answer too big to hold"
	                                         : "closed its connection: it died or left",
	                  hpct_strerror(io), also);
}

/* `home` answered HPCT_EPEERDEAD: it is leaving, because of the failure
 * its answer names (server.c), which becomes this rank's first too. */
static int left(struct hpct_store *s, int home, const char *what, const unsigned char *rep,
                size_t replen)
{
	char text[HPCT_ADDRSTRLEN] = "?", cause[512], why[700], also[600];
	struct sockaddr_storage ss;
	socklen_t sl;
	hpct__store_addr(s->w, home, &ss, &sl, text, sizeof(text));
	snprintf(cause, sizeof(cause), "%.*s", (int)(replen < 511 ? replen : 511),
	         rep ? (const char *)rep : "");
	int exits = strcmp(cause, ST_EXITS) == 0;
	snprintf(why, sizeof(why), "rank %d at %s is leaving%s %s", home, text,
	         exits ? ":" : ", after it found", cause);
	found_dead(s, cause[0] && !exits ? cause : why, why, also, sizeof(also));
	return hpct__fail(HPCT_EPEERDEAD, HPCT_SUB_NET,
	                  "store: %s: rank %d (the key's home) at %s is leaving%s %s%s", what, home,
	                  text, exits ? ":" : ", after it found", cause, also);
}

/* A home's refusal for want of memory, named. */
static int full(struct hpct_store *s, int home, uint8_t op, const char *what, const char *key,
                size_t vlen)
{
	char text[HPCT_ADDRSTRLEN] = "?", kb[KEY_SHOWN + 8];
	struct sockaddr_storage ss;
	socklen_t sl;
	hpct__store_addr(s->w, home, &ss, &sl, text, sizeof(text));
	if (op == OP_LIST)
		return hpct__fail(HPCT_ENOMEM, HPCT_SUB_NET,
		                  "store: %s: rank %d at %s refused to list its keys: they would "
		                  "not fit one reply (HPCT_STORE_MAX_FRAME) or its "
		                  "HPCT_STORE_MAX_BYTES, or the rank is out of memory; that rank's "
		                  "log says which",
		                  what, home, text);
	return hpct__fail(HPCT_ENOMEM, HPCT_SUB_NET,
	                  "store: %s: key '%s' (%zu bytes): rank %d (the key's home) at %s "
	                  "refused it for want of memory: its store is full "
	                  "(HPCT_STORE_MAX_KEYS or HPCT_STORE_MAX_BYTES)%s, or the rank is "
	                  "out of memory; that rank's log says which",
	                  what, shown(key, kb, sizeof(kb)), vlen, home, text,
	                  op == OP_APPEND || op == OP_QPUSH
	                          ? ", the value would pass the most a value may hold "
	                            "(HPCT_STORE_MAX_VALUE, 64 MiB)"
	                          : "");
}

/* One request to `home`; the reply's status (or the failure) in the
 * return value, its fields in *rep (malloc'd, the caller frees). */
static int rpc(struct hpct_store *s, int home, const char *what, uint8_t op, const char *key,
               const void *a, size_t alen, const void *b, size_t blen, double wait_s,
               unsigned char **rep, size_t *replen)
{
	*rep = NULL;
	*replen = 0;
	unsigned char *f = NULL;
	size_t flen = 0;
	int rc = frame(s, what, op, key, a, alen, b, blen, &f, &flen);
	if (rc)
		return rc;
	double t = cap_timeout(s, s->timeout);
	double deadline = hpct__now() + (wait_s > 0 ? wait_s + SLACK_S : t);
	pthread_mutex_lock(&s->mu);
	int io = ensure(s, home, what, hpct__now() + t);
	rc = io;
	if (io == 0 && (io = hpct__sock_send_all(s->fd[home], f, flen, deadline)) == 0)
		io = answer(s, home, deadline, &rc, rep, replen);
	free(f);
	if (io && rc == 0)
		rc = broken(s, home, what, io);
	if (io == 0 && rc == HPCT_ENOMEM)
		rc = full(s, home, op, what, key, blen ? blen : alen);
	if (io == 0 && rc == HPCT_EPEERDEAD)
		rc = left(s, home, what, *rep, *replen);
	pthread_mutex_unlock(&s->mu);
	if (rc && *rep) {
		free(*rep);
		*rep = NULL;
	}
	return rc;
}

/* This process's gone ranks to `home` and home's back (OP_DEAD): each
 * side then counts gone what either did; with `only_news`, nothing is
 * sent while this process counts none gone.  0, or the exchange's
 * failure; the view's generation sent in *gen_out. */
static int exchange(struct hpct_store *s, int home, int only_news, int about, unsigned *gen_out,
                    int *reached_out)
{
	int n = s->w->topo.size;
	unsigned char *dead = malloc((size_t)n), *list = NULL;
	size_t len = 0;
	if (dead) {
		*gen_out = hpct__store_view(s->w, dead);
		list = hpct__store_dead_encode(dead, n, &len);
	}
	free(dead);
	if (!list)
		return HPCT_ENOMEM;
	char key[16] = "";
	if (about >= 0)
		snprintf(key, sizeof(key), "%d", about);
	unsigned char *rep = NULL;
	size_t rl = 0;
	int rc = only_news && len == 4 ? 0
	                               : rpc(s, home, "exchange the ranks gone", OP_DEAD, key, list,
	                                     len, NULL, 0, 0, &rep, &rl);
	/* asked about a rank: one byte after the list, whether home reached it */
	if (rc == 0 && rep && about >= 0 && rl > 4) {
		rl--;
		if (reached_out)
			*reached_out = rep[rl] == 1;
	}
	if (rc == 0 && rep) /* never this rank itself: it runs (a forked child's may not) */
		hpct__store_dead_merge(s->w, n, rep, rl,
		                       s->w->store_client_only ? -1 : s->w->topo.rank);
	free(rep);
	free(list);
	return rc;
}

/* Tells `home` the ranks this process found gone, once a change of its
 * view, so that it serves as their keys' home and moves them to their
 * new homes (replica.c). */
static void tell(struct hpct_store *s, int home)
{
	unsigned g = hpct__store_view(s->w, NULL);
	if (__atomic_load_n(&s->told[home], __ATOMIC_RELAXED) == g + 1)
		return;
	if (exchange(s, home, 1, -1, &g, NULL) == 0)
		__atomic_store_n(&s->told[home], g + 1, __ATOMIC_RELAXED);
}

/* `x` refuses connections but this process never reached it: it has not
 * started yet, or it died before this process first asked it (a forked
 * monitor that asks for the first time after its rank died, before any
 * other rank needed it since).  A rank this process reached is asked (the
 * next one after x, then the one after it at the next ask, ...): which
 * ranks it counts gone, and whether it reached x once.  1 when x is gone;
 * when the peer reached x, x counts as reached here too, so that its next
 * refusal (which comes after x was up) counts it gone. */
static int said_dead(struct hpct_store *s, int x)
{
	if (s->R < 2 || s->asking)
		return 0;
	int n = s->w->topo.size, y = -1;
	for (int k = 1; k < n && y < 0; k++) {
		int r = (x + k + s->asked) % n;
		if (r != x && !hpct__store_dead(s->w, r) && hpct__store_was_reached(s->w, r))
			y = r;
	}
	s->asked++;
	if (y < 0)
		return 0;
	pthread_mutex_lock(&asker.mu);
	if (asker.h && (asker.pid != getpid() || asker.h->w != s->w))
		asker.h = NULL; /* a forked child's parent's, or another world's: left alone */
	if (!asker.h && hpct__store_open(s->w, 0, s->timeout, &asker.h) == 0) {
		asker.h->asking = 1;
		asker.pid = getpid();
	}
	unsigned g;
	int up_once = 0;
	if (asker.h)
		exchange(asker.h, y, 0, x, &g, &up_once);
	pthread_mutex_unlock(&asker.mu);
	if (up_once)
		mark_reached(s->w, x);
	return hpct__store_dead(s->w, x);
}

/* Every home of `key` is gone: its value with them.  `at`: the rank that
 * answered that it does not hold the key (ST_LOST), or -1 (none is left);
 * the homes named are the gone ranks before it, from the key's first. */
static int lost(struct hpct_store *s, const char *what, const char *key, int at)
{
	int h0 = hpct__store_home(s, key), n = s->w->topo.size;
	char kb[KEY_SHOWN + 8], homes[512] = "", where[HPCT_ADDRSTRLEN + 64] = "";
	size_t used = 0;
	int named = 0;
	for (int k = 0; k < n && used < sizeof(homes); k++) {
		int home = (h0 + k) % n;
		if (home == at || (at < 0 && named >= s->R))
			break;
		if (!hpct__store_dead(s->w, home))
			continue;
		char text[HPCT_ADDRSTRLEN] = "?";
		struct sockaddr_storage ss;
		socklen_t sl;
		hpct__store_addr(s->w, home, &ss, &sl, text, sizeof(text));
		used += (size_t)snprintf(homes + used, sizeof(homes) - used, "%s%d at %s",
		                         named ? ", " : "", home, text);
		named++;
	}
	if (at >= 0) {
		char text[HPCT_ADDRSTRLEN] = "?";
		struct sockaddr_storage ss;
		socklen_t sl;
		hpct__store_addr(s->w, at, &ss, &sl, text, sizeof(text));
		snprintf(where, sizeof(where), "rank %d at %s, its home now, was never sent it", at,
		         text);
	} else {
		snprintf(where, sizeof(where), "the last: %s", hpct_last_error());
	}
	/* the death this rank found first, the likely cause (a key never
	 * set: its rank died before it could) */
	char also[600];
	found_dead(s, NULL, homes, also, sizeof(also));
	return hpct__fail(HPCT_EPEERDEAD, HPCT_SUB_NET,
	                  "store: %s: key '%s': every home of it (ranks %s; "
	                  "HPCT_STORE_REPLICAS=%d) is gone: its value is lost (%s)%s",
	                  what, shown(key, kb, sizeof(kb)), homes, s->R, where, also);
}

/* The home asked first for `key`: its first, or with replicas the first
 * live rank from it on (view.c); -1 when every rank is gone. */
static int live_home(struct hpct_store *s, const char *key)
{
	int h0 = hpct__store_home(s, key), home = h0;
	if (s->R > 1 && hpct__store_live_homes(s->w, h0, 1, &home) < 1)
		return -1;
	return home;
}

/* A request on `key` to its home; with replicas (R > 1) to the first live
 * rank from it on (the others it was sent to are the next live ones),
 * told first of the ranks found gone, and on to the next when that one
 * is gone too (a write, `write`, carries an id, so that a home answers a
 * retry of a write the last one did with its first answer).  A wait
 * keeps its end. */
static int rpc_key(struct hpct_store *s, const char *what, uint8_t op, const char *key,
                   const void *a, size_t alen, const void *b, size_t blen, double wait_s, int write,
                   unsigned char **rep, size_t *replen)
{
	if (s->R < 2)
		return rpc(s, hpct__store_home(s, key), what, op, key, a, alen, b, blen, wait_s,
		           rep, replen);
	if (write) {
		op |= OP_RID;
		rid_seq = __atomic_add_fetch(&s->seq, 1, __ATOMIC_RELAXED);
	}
	double until = hpct__now() + wait_s;
	for (int home; (home = live_home(s, key)) >= 0;) {
		tell(s, home);
		double w = wait_s;
		if (wait_s > 0 && (w = until - hpct__now()) < 0.001)
			w = 0.001;
		int rc = rpc(s, home, what, op, key, a, alen, b, blen, w, rep, replen);
		if (rc == ST_LOST)
			return lost(s, what, key, home);
		if (rc != HPCT_EPEERDEAD)
			return rc;
		hpct__store_mark_dead(s->w, home); /* found gone */
	}
	return lost(s, what, key, -1);
}

int hpct__store_forward(struct hpct_store *s, int home, uint8_t op, uint64_t ns, const char *key,
                        const void *body, size_t len)
{
	unsigned char *rep;
	size_t rl;
	s->ns = ns; /* the forwarder's own handle */
	int rc = rpc(s, home,
	             op == OP_REPL   ? "replicate"
	             : op == OP_HAVE ? "say all keys sent"
	                             : "tell the ranks gone",
	             op, key, body, len, NULL, 0, 0, &rep, &rl);
	free(rep);
	return rc;
}

int hpct__store_replicas(const struct hpct_world *w, int *r_out)
{
	long r = 2;
	int rc = hpct__env_int(hpct__env_process(), "HPCT_STORE_REPLICAS", 1, 64, 2, &r, NULL);
	*r_out = r > w->topo.size ? w->topo.size : (int)r;
	return rc;
}

/* The same request for n keys (a field `a` each), sent to their homes all
 * at once and answered in order (a home serves a connection's requests
 * one after another): n round trips become about one.  rcs[i], reps[i]
 * and replens[i] as rpc's; the return value is the first failure of an
 * exchange (every key then fails), else 0. */
static int rpc_many(struct hpct_store *s, const char *what, uint8_t op, const char *const *keys,
                    int n, const void *a, size_t alen, double wait_s, int *rcs,
                    unsigned char **reps, size_t *replens)
{
	double t = cap_timeout(s, s->timeout);
	double deadline = hpct__now() + (wait_s > 0 ? wait_s + SLACK_S : t);
	int rc = 0, sent = 0;
	for (int i = 0; i < n; i++) {
		rcs[i] = 0;
		reps[i] = NULL;
		replens[i] = 0;
	}
	int *homes = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
	if (!homes)
		return HPCT_ENOMEM;
	for (int i = 0; i < n; i++) {
		if ((homes[i] = live_home(s, keys[i])) < 0) {
			free(homes); /* every rank gone: key by key names it */
			return HPCT_EPEERDEAD;
		}
		int told = 0;
		for (int j = 0; j < i && !told; j++)
			told = homes[j] == homes[i];
		if (s->R > 1 && !told)
			tell(s, homes[i]);
	}
	pthread_mutex_lock(&s->mu);
	while (sent < n) {
		unsigned char *f = NULL;
		size_t flen = 0;
		int home = homes[sent];
		if ((rc = frame(s, what, op, keys[sent], a, alen, NULL, 0, &f, &flen)) != 0)
			break;
		if ((rc = ensure(s, home, what, hpct__now() + t)) == 0 &&
		    (rc = hpct__sock_send_all(s->fd[home], f, flen, deadline)) != 0)
			rc = broken(s, home, what, rc);
		free(f);
		if (rc)
			break;
		sent++;
	}
	for (int i = 0; i < sent; i++) {
		int home = homes[i];
		if (s->fd[home] < 0) {
			rcs[i] = HPCT_EPEERDEAD;
			continue;
		}
		int io = answer(s, home, deadline, &rcs[i], &reps[i], &replens[i]);
		if (io) {
			rcs[i] = broken(s, home, what, io);
			rc = rc ? rc : rcs[i];
		} else if (rcs[i] == HPCT_ENOMEM) {
			rcs[i] = full(s, home, op, what, keys[i], alen);
		} else if (rcs[i] == HPCT_EPEERDEAD) {
			rcs[i] = left(s, home, what, reps[i], replens[i]);
			rc = rc ? rc : rcs[i];
		}
	}
	pthread_mutex_unlock(&s->mu);
	for (int i = 0; i < sent; i++)
		if (rcs[i] == ST_LOST)
			rcs[i] = lost(s, what, keys[i], homes[i]);
	free(homes);
	for (int i = 0; i < n; i++)
		if (rcs[i] || rc) {
			free(reps[i]);
			reps[i] = NULL;
			if (!rcs[i])
				rcs[i] = rc ? rc : HPCT_EPEERDEAD;
		}
	return rc;
}

/* The answers of one request for several keys (rpc_many), parked at
 * their homes up to `t` seconds. */
struct batch {
	int *rcs;
	unsigned char **reps;
	size_t *lens;
};

static int batch_ask(struct hpct_store *s, const char *what, uint8_t op, const char *const *keys,
                     int n, double t, struct batch *b)
{
	unsigned char ms[8];
	hpct__put64(ms, (uint64_t)(int64_t)(t * 1000));
	b->rcs = calloc((size_t)n, sizeof(int));
	b->reps = calloc((size_t)n, sizeof(*b->reps));
	b->lens = calloc((size_t)n, sizeof(size_t));
	if (!b->rcs || !b->reps || !b->lens)
		return HPCT_ENOMEM;
	return rpc_many(s, what, op, keys, n, ms, 8, t, b->rcs, b->reps, b->lens);
}

static void batch_free(struct batch *b, int n)
{
	for (int i = 0; b->reps && i < n; i++)
		free(b->reps[i]);
	free(b->rcs);
	free(b->reps);
	free(b->lens);
}

/* `not_yet`: what did not happen in time ("was not set"). */
static int timed_out(struct hpct_store *s, const char *what, const char *not_yet, const char *key,
                     int home, double t)
{
	char text[HPCT_ADDRSTRLEN] = "?", dead[600], kb[KEY_SHOWN + 8];
	struct sockaddr_storage ss;
	socklen_t sl;
	hpct__store_addr(s->w, home, &ss, &sl, text, sizeof(text));
	int n = unreachable(s, dead, sizeof(dead));
	return hpct__fail(HPCT_ETIMEDOUT, HPCT_SUB_NET,
	                  "store: %s: key '%s' (home rank %d at %s) %s within %.1f s%s%s%s", what,
	                  shown(key, kb, sizeof(kb)), home, text, not_yet, t,
	                  n ? "; ranks whose store does not answer (died or never started): " : "",
	                  dead, n > 8 ? ", ..." : "");
}

/* SET, APPEND and QPUSH: the value's length, then the value. */
static int put_value(struct hpct_store *s, uint8_t op, const char *what, const char *key,
                     const void *val, size_t len)
{
	unsigned char l[4], *rep;
	size_t rl;
	hpct__put32(l, (uint32_t)len);
	int rc = rpc_key(s, what, op, key, l, 4, val, len, 0, 1, &rep, &rl);
	free(rep);
	return rc;
}

int hpct__store_set(struct hpct_store *s, const char *key, const void *val, size_t len)
{
	return put_value(s, OP_SET, "set", key, val, len);
}

static int take_value(unsigned char *rep, size_t rl, void **val_out, size_t *len_out)
{
	if (rl < 4 || hpct__get32(rep) != rl - 4) {
		free(rep);
		return HPCT_EPROTO;
	}
	memmove(rep, rep + 4, rl - 4);
	*val_out = rep;
	*len_out = rl - 4;
	return 0;
}

/* GET, WAIT and QPOP: parked at the key's home up to `t` seconds; the
 * answer in *rep (malloc'd), or the failure (the wait's named unless
 * quiet). */
static int parked(struct hpct_store *s, uint8_t op, const char *what, const char *missing,
                  const char *key, double t, int quiet, unsigned char **rep, size_t *rl)
{
	unsigned char ms[8];
	hpct__put64(ms, (uint64_t)(int64_t)(t * 1000));
	int rc = rpc_key(s, what, op, key, ms, 8, NULL, 0, t, op == OP_QPOP, rep, rl);
	if (rc == HPCT_ETIMEDOUT && !quiet)
		rc = timed_out(s, what, missing, key, live_home(s, key), t);
	return rc;
}

/* GET and QPOP: a value, parked at the key's home up to the wait. */
static int parked_value(struct hpct_store *s, uint8_t op, const char *what, const char *missing,
                        const char *key, double timeout_s, int quiet, void **val_out,
                        size_t *len_out)
{
	unsigned char *rep;
	size_t rl;
	int rc = parked(s, op, what, missing, key,
	                cap_timeout(s, timeout_s < 0 ? s->timeout : timeout_s), quiet, &rep, &rl);
	return rc ? rc : take_value(rep, rl, val_out, len_out);
}

/* GET (vals) or WAIT (vals NULL) of each key in turn, at the first of its
 * homes left, all within `t`: a batch (batch_ask) found a home gone. */
static int one_by_one(struct hpct_store *s, uint8_t op, const char *what, const char *const *keys,
                      int n, double t, int quiet, void **vals, size_t *lens)
{
	double until = hpct__now() + t;
	int rc = 0;
	for (int i = 0; rc == 0 && i < n; i++) {
		double w = until - hpct__now();
		unsigned char *rep = NULL;
		size_t rl = 0;
		rc = parked(s, op, what, "was not set", keys[i], w > 0.001 ? w : 0.001, quiet, &rep,
		            &rl);
		if (rc == 0 && vals)
			rc = take_value(rep, rl, &vals[i], &lens[i]); /* takes it */
		else
			free(rep);
	}
	return rc;
}

int hpct__store_get(struct hpct_store *s, const char *key, double timeout_s, void **val_out,
                    size_t *len_out)
{
	return parked_value(s, OP_GET, "get", "was not set", key, timeout_s, 0, val_out, len_out);
}

static int get_keys(struct hpct_store *s, const char *const *keys, int n, double timeout_s,
                    int quiet, void **vals, size_t *lens)
{
	double t = cap_timeout(s, timeout_s < 0 ? s->timeout : timeout_s);
	if (n <= 0)
		return 0;
	struct batch bt;
	int rc = batch_ask(s, "get", OP_GET, keys, n, t, &bt);
	if (rc == HPCT_EPEERDEAD && s->R > 1) {
		/* a home is gone: each key from the first of its homes left */
		batch_free(&bt, n);
		for (int i = 0; i < n; i++)
			vals[i] = NULL;
		rc = one_by_one(s, OP_GET, "get", keys, n, t, quiet, vals, lens);
		if (rc)
			for (int i = 0; i < n; i++) {
				free(vals[i]);
				vals[i] = NULL;
			}
		return rc;
	}
	for (int i = 0; i < n; i++) {
		vals[i] = NULL;
		if (rc == 0 && bt.rcs[i] == HPCT_ETIMEDOUT)
			rc = quiet ? HPCT_ETIMEDOUT
			           : timed_out(s, "get", "was not set", keys[i],
			                       hpct__store_home(s, keys[i]), t);
		else if (rc == 0 && bt.rcs[i])
			rc = bt.rcs[i];
		else if (rc == 0) {
			rc = take_value(bt.reps[i], bt.lens[i], &vals[i], &lens[i]); /* takes it */
			bt.reps[i] = NULL;
		}
	}
	if (rc)
		for (int i = 0; i < n; i++) {
			free(vals[i]);
			vals[i] = NULL;
		}
	batch_free(&bt, n);
	return rc;
}

int hpct__store_get_many(struct hpct_store *s, const char *const *keys, int n, double timeout_s,
                         void **vals, size_t *lens)
{
	return get_keys(s, keys, n, timeout_s, 0, vals, lens);
}

int hpct__store_get_many_quiet(struct hpct_store *s, const char *const *keys, int n,
                               double timeout_s, void **vals, size_t *lens)
{
	return get_keys(s, keys, n, timeout_s, 1, vals, lens);
}

int hpct__store_get_quiet(struct hpct_store *s, const char *key, double timeout_s, void **val_out,
                          size_t *len_out)
{
	return parked_value(s, OP_GET, "get", "was not set", key, timeout_s, 1, val_out, len_out);
}

int hpct__store_add(struct hpct_store *s, const char *key, int64_t delta, int64_t *value_out)
{
	unsigned char d[8], *rep;
	size_t rl;
	hpct__put64(d, (uint64_t)delta);
	int rc = rpc_key(s, "add", OP_ADD, key, d, 8, NULL, 0, 0, 1, &rep, &rl);
	if (rc == HPCT_EINVAL) {
		char kb[KEY_SHOWN + 8];
		return hpct__fail(rc, HPCT_SUB_NET,
		                  "store: add: key '%s' holds a value that is not a counter, or "
		                  "adding %lld would overflow it",
		                  shown(key, kb, sizeof(kb)), (long long)delta);
	}
	if (rc == 0 && rl == 8)
		*value_out = (int64_t)hpct__get64(rep);
	else if (rc == 0)
		rc = HPCT_EPROTO;
	free(rep);
	return rc;
}

int hpct__store_cas(struct hpct_store *s, const char *key, const void *expected, size_t elen,
                    const void *desired, size_t dlen, void **val_out, size_t *len_out)
{
	size_t n = 8 + elen + dlen;
	unsigned char *body = malloc(n), *rep;
	size_t rl;
	if (!body)
		return HPCT_ENOMEM;
	hpct__put32(body, (uint32_t)elen);
	if (elen)
		memcpy(body + 4, expected, elen);
	hpct__put32(body + 4 + elen, (uint32_t)dlen);
	if (dlen)
		memcpy(body + 8 + elen, desired, dlen);
	int rc = rpc_key(s, "compare_set", OP_CAS, key, body, n, NULL, 0, 0, 1, &rep, &rl);
	free(body);
	return rc ? rc : take_value(rep, rl, val_out, len_out);
}

static int flag_op(struct hpct_store *s, uint8_t op, const char *what, const char *key, int *out)
{
	unsigned char *rep;
	size_t rl;
	int rc = rpc_key(s, what, op, key, NULL, 0, NULL, 0, 0, op == OP_DEL, &rep, &rl);
	if (rc == 0 && rl != 1)
		rc = HPCT_EPROTO;
	if (rc == 0)
		*out = rep[0] != 0;
	free(rep);
	return rc;
}

int hpct__store_check(struct hpct_store *s, const char *const *keys, int n, int *all_out)
{
	*all_out = 1;
	for (int i = 0; i < n && *all_out; i++) {
		int rc = flag_op(s, OP_CHECK, "check", keys[i], all_out);
		if (rc)
			return rc;
	}
	return 0;
}

int hpct__store_unreachable(struct hpct_store *s, char *buf, size_t len)
{
	return unreachable(s, buf, len);
}

static int wait_keys(struct hpct_store *s, const char *const *keys, int n, double timeout_s,
                     int quiet)
{
	double t = cap_timeout(s, timeout_s < 0 ? s->timeout : timeout_s);
	if (n <= 0)
		return 0;
	struct batch bt;
	int rc = batch_ask(s, "wait", OP_WAIT, keys, n, t, &bt);
	if (rc == HPCT_EPEERDEAD && s->R > 1) {
		/* a home is gone: each key at the first of its homes left */
		batch_free(&bt, n);
		rc = one_by_one(s, OP_WAIT, "wait", keys, n, t, quiet, NULL, NULL);
		return rc;
	}
	for (int i = 0; rc == 0 && i < n; i++)
		if (bt.rcs[i] == HPCT_ETIMEDOUT)
			rc = quiet ? bt.rcs[i]
			           : timed_out(s, "wait", "was not set", keys[i],
			                       hpct__store_home(s, keys[i]), t);
		else if (bt.rcs[i])
			rc = bt.rcs[i];
	batch_free(&bt, n);
	return rc;
}

int hpct__store_wait(struct hpct_store *s, const char *const *keys, int n, double timeout_s)
{
	return wait_keys(s, keys, n, timeout_s, 0);
}

int hpct__store_wait_quiet(struct hpct_store *s, const char *const *keys, int n, double timeout_s)
{
	return wait_keys(s, keys, n, timeout_s, 1);
}

int hpct__store_delete(struct hpct_store *s, const char *key, int *existed_out)
{
	return flag_op(s, OP_DEL, "delete_key", key, existed_out);
}

static void free_keys(char **keys, int64_t n);

int hpct__store_num_keys(struct hpct_store *s, int64_t *n_out)
{
	*n_out = 0;
	if (s->R > 1) { /* every home holds the key: count them once */
		char **keys = NULL;
		int rc = hpct__store_list(s, &keys, n_out);
		if (rc == 0)
			free_keys(keys, *n_out);
		return rc;
	}
	for (int r = 0; r < s->w->topo.size; r++) {
		unsigned char *rep;
		size_t rl;
		int rc = rpc(s, r, "num_keys", OP_COUNT, "", NULL, 0, NULL, 0, 0, &rep, &rl);
		if (rc == 0 && rl != 8)
			rc = HPCT_EPROTO;
		if (rc == 0)
			*n_out += (int64_t)hpct__get64(rep);
		free(rep);
		if (rc)
			return rc;
	}
	return 0;
}

static int not_a_queue(struct hpct_store *s, const char *what, const char *key)
{
	char kb[KEY_SHOWN + 8];
	return hpct__fail(HPCT_EINVAL, HPCT_SUB_NET,
	                  "store: %s: key '%s' (home rank %d) holds a value that is not a "
	                  "queue (set, appended to or added to, not pushed)",
	                  what, shown(key, kb, sizeof(kb)), hpct__store_home(s, key));
}

int hpct__store_append(struct hpct_store *s, const char *key, const void *val, size_t len)
{
	return put_value(s, OP_APPEND, "append", key, val, len);
}

int hpct__store_queue_push(struct hpct_store *s, const char *key, const void *val, size_t len)
{
	int rc = put_value(s, OP_QPUSH, "queue_push", key, val, len);
	return rc == HPCT_EINVAL ? not_a_queue(s, "queue_push", key) : rc;
}

int hpct__store_queue_pop(struct hpct_store *s, const char *key, double timeout_s, void **val_out,
                          size_t *len_out)
{
	int rc = parked_value(s, OP_QPOP, "queue_pop", "held no item", key, timeout_s, 0, val_out,
	                      len_out);
	return rc == HPCT_EINVAL ? not_a_queue(s, "queue_pop", key) : rc;
}

int hpct__store_queue_len(struct hpct_store *s, const char *key, int64_t *n_out)
{
	unsigned char *rep;
	size_t rl;
	int rc = rpc_key(s, "queue_len", OP_QLEN, key, NULL, 0, NULL, 0, 0, 0, &rep, &rl);
	if (rc == HPCT_EINVAL)
		return not_a_queue(s, "queue_len", key);
	if (rc == 0 && rl != 8)
		rc = HPCT_EPROTO;
	if (rc == 0)
		*n_out = (int64_t)hpct__get64(rep);
	free(rep);
	return rc;
}

static void free_keys(char **keys, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		free(keys[i]);
	free(keys);
}

/* Adds one rank's LIST reply to keys[0..*n). */
static int take_keys(const unsigned char *rep, size_t rl, char ***keys, int64_t *n)
{
	if (rl < 4)
		return HPCT_EPROTO;
	uint32_t m = hpct__get32(rep);
	if (m > (rl - 4) / 4)
		return HPCT_EPROTO;
	if (m == 0)
		return rl == 4 ? 0 : HPCT_EPROTO;
	char **k = realloc(*keys, (size_t)(*n + m) * sizeof(*k));
	if (!k)
		return HPCT_ENOMEM;
	*keys = k;
	size_t at = 4;
	for (uint32_t i = 0; i < m; i++) {
		if (rl - at < 4 || hpct__get32(rep + at) > rl - at - 4)
			return HPCT_EPROTO;
		uint32_t kl = hpct__get32(rep + at);
		if (!(k[*n] = malloc(kl + 1)))
			return HPCT_ENOMEM;
		memcpy(k[*n], rep + at + 4, kl);
		k[(*n)++][kl] = 0;
		at += 4 + kl;
	}
	return at == rl ? 0 : HPCT_EPROTO;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int hpct__store_list(struct hpct_store *s, char ***keys_out, int64_t *n_out)
{
	char **keys = NULL;
	int64_t n = 0;
	int rc = 0;
	for (int r = 0; r < s->w->topo.size && rc == 0; r++) {
		unsigned char *rep;
		size_t rl;
		if (s->R > 1 && hpct__store_dead(s->w, r))
			continue;
		rc = rpc(s, r, "list", OP_LIST, "", NULL, 0, NULL, 0, 0, &rep, &rl);
		if (rc == HPCT_EPEERDEAD && s->R > 1) { /* its keys have other homes */
			hpct__store_mark_dead(s->w, r);
			rc = 0;
			continue;
		}
		if (rc == 0 && (rc = take_keys(rep, rl, &keys, &n)) == HPCT_EPROTO) {
			char text[HPCT_ADDRSTRLEN] = "?";
			struct sockaddr_storage ss;
			socklen_t sl;
			hpct__store_addr(s->w, r, &ss, &sl, text, sizeof(text));
			rc = hpct__fail(rc, HPCT_SUB_NET,
			                "store: list: rank %d at %s answered a malformed list of "
			                "keys (%zu bytes)",
			                r, text, rl);
		}
		free(rep);
	}
	if (rc) {
		free_keys(keys, n);
		return rc;
	}
	if (s->R > 1 && n > 1) { /* each key once, not once a home */
		qsort(keys, (size_t)n, sizeof(*keys), by_name);
		int64_t m = 1;
		for (int64_t i = 1; i < n; i++) {
			if (strcmp(keys[i], keys[m - 1]) == 0)
				free(keys[i]);
			else
				keys[m++] = keys[i];
		}
		n = m;
	}
	*keys_out = keys;
	*n_out = n;
	return 0;
}
