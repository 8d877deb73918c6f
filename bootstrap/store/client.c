/* The rootless store's client (see store.h): each operation as its
 * request to the key's group (route.c follows it to the group's primary),
 * its answer taken apart, and its failures named: the key, its group's
 * homes and what each did. */
#include "bootstrap/store/store.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/base/bytes.h"
#include "bootstrap/base/log.h"
#include "bootstrap/base/util.h"
#include "bootstrap/store/route.h"
#include "bootstrap/world.h"

/* The open handles, for hpct__store_own_addrs. */
static struct {
	pthread_mutex_t mu;
	struct hpct_store *head;
} open_handles = { .mu = PTHREAD_MUTEX_INITIALIZER };

/* Adds the local address of each of fds[0..k) to addrs[*n..max). */
static void local_addrs(const int *fds, int k, char (*addrs)[HPCT_ADDRSTRLEN], int *n, int max)
{
	for (int i = 0; i < k && *n < max; i++) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		if (getsockname(fds[i], (struct sockaddr *)&ss, &sl) == 0)
			hpct__addr_str((struct sockaddr *)&ss, addrs[(*n)++], HPCT_ADDRSTRLEN);
	}
}

int hpct__store_own_addrs(char (*addrs)[HPCT_ADDRSTRLEN], int max)
{
	int n = 0, fds[8];
	pthread_mutex_lock(&open_handles.mu);
	for (struct hpct_store *s = open_handles.head; s && n < max; s = s->next) {
		int me = s->w->topo.rank, first = 1;
		for (struct hpct_store *o = open_handles.head; o != s; o = o->next)
			first &= o->lines != s->lines;
		if (first) /* the idle lines, each world's once */
			local_addrs(fds, hpct__lines_idle_to(s->lines, me, fds, 8), addrs, &n, max);
		if (pthread_mutex_trylock(&s->mu) != 0)
			continue; /* in a request: not waited for, the linger's cap is */
		if (s->fd[me] >= 0)
			local_addrs(&s->fd[me], 1, addrs, &n, max);
		pthread_mutex_unlock(&s->mu);
	}
	pthread_mutex_unlock(&open_handles.mu);
	return n;
}

/* A forked child (NVRx's monitor, a data-loader worker) is a client of
 * the store too (bootstrap/shim): a lock another thread held at the fork
 * is free again there, the only thread left. */
static void child_locks(void)
{
	pthread_mutex_init(&open_handles.mu, NULL);
	hpct__store_route_child();
	hpct__lines_child();
}

__attribute__((constructor)) static void fork_safe(void)
{
	pthread_atfork(NULL, NULL, child_locks);
}

int hpct__store_open(hpct_world *world, uint64_t ns, double timeout_s, struct hpct_store **out)
{
	struct hpct_world *w = (struct hpct_world *)world;
	*out = NULL;
	if (!w->topo.nnodes)
		return hpct__fail(HPCT_ESTATE, HPCT_SUB_NET,
		                  "the rootless store needs a node list (%s)",
		                  w->topo.why_not_rootless);
	struct hpct_store_cfg cfg;
	int rc = hpct__store_cfg(w, &cfg);
	if (rc == 0 && !w->store_client_only)
		rc = hpct__store_server_start(w);
	if (rc)
		return rc;
	struct hpct_store *s = calloc(1, sizeof(*s));
	if (!s || !(s->fd = malloc((size_t)w->topo.size * sizeof(int))) ||
	    !(s->owed = calloc((size_t)w->topo.size, sizeof(int))) ||
	    !(s->reused = calloc((size_t)w->topo.size, 1)) || !(s->lines = hpct__lines_of(w))) {
		if (s) {
			free(s->fd);
			free(s->owed);
			free(s->reused);
		}
		free(s);
		return HPCT_ENOMEM;
	}
	for (int i = 0; i < w->topo.size; i++)
		s->fd[i] = -1;
	s->w = w;
	s->ns = ns;
	s->timeout = timeout_s;
	/* a quarter of the failure detector's timeout: a request stalled at a
	 * paused primary learns of its group's next view within that of it */
	s->slice = cfg.suspect / 4 > 1.0 ? 1.0 : cfg.suspect / 4 < 0.05 ? 0.05 : cfg.suspect / 4;
	/* unique enough among the job's handles: a group remembers one write
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
	hpct__store_release(s);
	pthread_mutex_destroy(&s->mu);
	free(s->fd);
	free(s->owed);
	free(s->reused);
	free(s);
}

void hpct__store_set_timeout(struct hpct_store *s, double timeout_s)
{
	s->timeout = timeout_s;
}

double hpct__store_timeout(const struct hpct_store *s)
{
	return hpct__store_cap(s, -1);
}

int hpct__store_home(const struct hpct_store *s, const char *key)
{
	return (int)hpct__store_group_of(key, strlen(key), s->w->topo.size);
}

int hpct__store_unreachable(struct hpct_store *s, char *buf, size_t len)
{
	return hpct__store_probe(s, buf, len);
}

/* A request on key: hpct__store_rpc with no group of its own. */
static int rpc(struct hpct_store *s, const char *what, uint8_t op, const char *key, const void *a,
               size_t alen, const void *b, size_t blen, double wait_s, int write,
               unsigned char **rep, size_t *rl)
{
	return hpct__store_rpc(s, what, op, key, -1, a, alen, b, blen, wait_s, write, rep, rl);
}

/* A refusal for want of memory, named. */
static int full(struct hpct_store *s, uint8_t op, const char *what, const char *key, size_t vlen)
{
	char kb[KEY_SHOWN + 8];
	return hpct__fail(HPCT_ENOMEM, HPCT_SUB_NET,
	                  "store: %s: key '%s' (%zu bytes, group %d): its primary home refused it "
	                  "for want of memory: its store is full (HPCT_STORE_MAX_KEYS or "
	                  "HPCT_STORE_MAX_BYTES)%s, or the rank is out of memory; that rank's log "
	                  "says which",
	                  what, hpct__store_shown(key, kb, sizeof(kb)), vlen,
	                  hpct__store_home(s, key),
	                  op == OP_APPEND || op == OP_QPUSH
	                          ? ", the value would pass the most a value may hold "
	                            "(HPCT_STORE_MAX_VALUE, 64 MiB)"
	                          : "");
}

/* `not_yet`: what did not happen in time ("was not set"). */
static int timed_out(struct hpct_store *s, const char *what, const char *not_yet, const char *key,
                     double t)
{
	char dead[600], kb[KEY_SHOWN + 8], homes[400];
	int n = hpct__store_probe(s, dead, sizeof(dead));
	return hpct__fail(HPCT_ETIMEDOUT, HPCT_SUB_NET,
	                  "store: %s: key '%s' (%s) %s within %.1f s%s%s%s", what,
	                  hpct__store_shown(key, kb, sizeof(kb)),
	                  hpct__store_homes(s, key, homes, sizeof(homes)), not_yet,
	                  t, n ? "; ranks whose store does not answer (died or never started): " : "",
	                  dead, n > 8 ? ", ..." : "");
}

/* SET, APPEND and QPUSH: the value's length, then the value. */
static int put_value(struct hpct_store *s, uint8_t op, const char *what, const char *key,
                     const void *val, size_t len)
{
	unsigned char l[4], *rep;
	size_t rl;
	hpct__put32(l, (uint32_t)len);
	int rc = rpc(s, what, op, key, l, 4, val, len, 0, 1, &rep, &rl);
	free(rep);
	return rc == HPCT_ENOMEM ? full(s, op, what, key, len) : rc;
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

/* GET and QPOP: a value, parked at the key's primary up to the wait. */
static int parked_value(struct hpct_store *s, uint8_t op, const char *what, const char *missing,
                        const char *key, double timeout_s, int quiet, void **val_out,
                        size_t *len_out)
{
	double t = hpct__store_cap(s, timeout_s);
	unsigned char ms[8], *rep;
	size_t rl;
	hpct__put64(ms, (uint64_t)(int64_t)(t * 1000));
	int rc = rpc(s, what, op, key, ms, 8, NULL, 0, t, op == OP_QPOP, &rep, &rl);
	if (rc == HPCT_ETIMEDOUT && !quiet && !rep)
		return timed_out(s, what, missing, key, t);
	return rc ? rc : take_value(rep, rl, val_out, len_out);
}

int hpct__store_get(struct hpct_store *s, const char *key, double timeout_s, void **val_out,
                    size_t *len_out)
{
	return parked_value(s, OP_GET, "get", "was not set", key, timeout_s, 0, val_out, len_out);
}

int hpct__store_get_quiet(struct hpct_store *s, const char *key, double timeout_s, void **val_out,
                          size_t *len_out)
{
	return parked_value(s, OP_GET, "get", "was not set", key, timeout_s, 1, val_out, len_out);
}

/* GET (vals) or WAIT (vals NULL) of n keys at once, parked up to t. */
static int many(struct hpct_store *s, uint8_t op, const char *what, const char *const *keys, int n,
                double timeout_s, int quiet, void **vals, size_t *lens)
{
	double t = hpct__store_cap(s, timeout_s);
	if (n <= 0)
		return 0;
	int *rcs = calloc((size_t)n, sizeof(int));
	unsigned char **reps = calloc((size_t)n, sizeof(*reps));
	size_t *rls = calloc((size_t)n, sizeof(size_t));
	int rc = rcs && reps && rls ? 0 : HPCT_ENOMEM;
	unsigned char ms[8];
	hpct__put64(ms, (uint64_t)(int64_t)(t * 1000));
	if (rc == 0)
		hpct__store_rpc_many(s, what, op, keys, n, ms, 8, t, rcs, reps, rls);
	for (int i = 0; rc == 0 && i < n; i++) {
		if (rcs[i] == HPCT_ETIMEDOUT && !quiet)
			rc = timed_out(s, what, "was not set", keys[i], t);
		else if (rcs[i])
			rc = rcs[i];
		else if (vals) {
			rc = take_value(reps[i], rls[i], &vals[i], &lens[i]); /* takes it */
			reps[i] = NULL;
		}
	}
	for (int i = 0; reps && i < n; i++)
		free(reps[i]);
	for (int i = 0; rc && vals && i < n; i++) {
		free(vals[i]);
		vals[i] = NULL;
	}
	free(rcs);
	free(reps);
	free(rls);
	return rc;
}

int hpct__store_get_many(struct hpct_store *s, const char *const *keys, int n, double timeout_s,
                         void **vals, size_t *lens)
{
	for (int i = 0; i < n; i++)
		vals[i] = NULL;
	return many(s, OP_GET, "get", keys, n, timeout_s, 0, vals, lens);
}

int hpct__store_get_many_quiet(struct hpct_store *s, const char *const *keys, int n,
                               double timeout_s, void **vals, size_t *lens)
{
	for (int i = 0; i < n; i++)
		vals[i] = NULL;
	return many(s, OP_GET, "get", keys, n, timeout_s, 1, vals, lens);
}

int hpct__store_wait(struct hpct_store *s, const char *const *keys, int n, double timeout_s)
{
	return many(s, OP_WAIT, "wait", keys, n, timeout_s, 0, NULL, NULL);
}

int hpct__store_wait_quiet(struct hpct_store *s, const char *const *keys, int n, double timeout_s)
{
	return many(s, OP_WAIT, "wait", keys, n, timeout_s, 1, NULL, NULL);
}

int hpct__store_add(struct hpct_store *s, const char *key, int64_t delta, int64_t *value_out)
{
	unsigned char d[8], *rep;
	size_t rl;
	hpct__put64(d, (uint64_t)delta);
	int rc = rpc(s, "add", OP_ADD, key, d, 8, NULL, 0, 0, 1, &rep, &rl);
	if (rc == HPCT_EINVAL) {
		char kb[KEY_SHOWN + 8];
		return hpct__fail(rc, HPCT_SUB_NET,
		                  "store: add: key '%s' holds a value that is not a counter, or "
		                  "adding %lld would overflow it",
		                  hpct__store_shown(key, kb, sizeof(kb)), (long long)delta);
	}
	if (rc == HPCT_ENOMEM)
		return full(s, OP_ADD, "add", key, 20);
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
	int rc = rpc(s, "compare_set", OP_CAS, key, body, n, NULL, 0, 0, 1, &rep, &rl);
	free(body);
	if (rc == HPCT_ENOMEM)
		return full(s, OP_CAS, "compare_set", key, dlen);
	return rc ? rc : take_value(rep, rl, val_out, len_out);
}

static int flag_op(struct hpct_store *s, uint8_t op, const char *what, const char *key, int *out)
{
	unsigned char *rep;
	size_t rl;
	int rc = rpc(s, what, op, key, NULL, 0, NULL, 0, 0, op == OP_DEL, &rep, &rl);
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

int hpct__store_delete(struct hpct_store *s, const char *key, int *existed_out)
{
	return flag_op(s, OP_DEL, "delete_key", key, existed_out);
}

static int not_a_queue(struct hpct_store *s, const char *what, const char *key)
{
	char kb[KEY_SHOWN + 8];
	return hpct__fail(HPCT_EINVAL, HPCT_SUB_NET,
	                  "store: %s: key '%s' (group %d) holds a value that is not a "
	                  "queue (set, appended to or added to, not pushed)",
	                  what, hpct__store_shown(key, kb, sizeof(kb)), hpct__store_home(s, key));
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
	int rc = rpc(s, "queue_len", OP_QLEN, key, NULL, 0, NULL, 0, 0, 0, &rep, &rl);
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

/* Adds one group's LIST reply to keys[0..*n). */
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

/* LIST or COUNT of every group, one request each (to its primary). */
static int each_group(struct hpct_store *s, uint8_t op, const char *what, char ***keys,
                      int64_t *n)
{
	for (int g = 0; g < s->w->topo.size; g++) {
		unsigned char body[4], *rep;
		size_t rl;
		hpct__put32(body, (uint32_t)g);
		int rc = hpct__store_rpc(s, what, op, "", g, body, 4, NULL, 0, 0, 0, &rep, &rl);
		if (rc == 0 && op == OP_COUNT)
			rc = rl == 8 ? (*n += (int64_t)hpct__get64(rep), 0) : HPCT_EPROTO;
		else if (rc == 0 && (rc = take_keys(rep, rl, keys, n)) == HPCT_EPROTO)
			rc = hpct__fail(rc, HPCT_SUB_NET,
			                "store: list: group %d's primary answered a malformed list "
			                "of keys (%zu bytes)",
			                g, rl);
		else if (rc == HPCT_ENOMEM)
			rc = hpct__fail(HPCT_ENOMEM, HPCT_SUB_NET,
			                "store: %s: group %d's primary refused to list its keys: "
			                "they would not fit one reply (HPCT_STORE_MAX_FRAME) or its "
			                "HPCT_STORE_MAX_BYTES, or the rank is out of memory; its log "
			                "says which",
			                what, g);
		free(rep);
		if (rc)
			return rc;
	}
	return 0;
}

int hpct__store_num_keys(struct hpct_store *s, int64_t *n_out)
{
	*n_out = 0;
	return each_group(s, OP_COUNT, "num_keys", NULL, n_out);
}

int hpct__store_list(struct hpct_store *s, char ***keys_out, int64_t *n_out)
{
	char **keys = NULL;
	int64_t n = 0;
	int rc = each_group(s, OP_LIST, "list", &keys, &n);
	if (rc) {
		free_keys(keys, n);
		return rc;
	}
	*keys_out = keys;
	*n_out = n;
	return 0;
}
