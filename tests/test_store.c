/* The rootless store (bootstrap/store/), as libhpct_torch.so uses it:
 * every operation across ranks on two loopback nodes, namespaces apart,
 * a wait that times out naming the key, its home and the rank that is
 * gone, and a stranger's garbage on a rank's store port (moved by
 * HPCT_STORE_PORT_OFFSET) closing only its own connection; with HPCT_SECRET,
 * every connection proving the secret, and strangers refused. */
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <sys/time.h>

#include "bootstrap/base/auth.h"
#include "bootstrap/base/sock.h"
#include "bootstrap/base/util.h"
#include "bootstrap/store/store.h"
#include "bootstrap/world.h"
#include "hpct/hpct.h"
#include "tests/harness.h"

TestSuite(store, .timeout = 120);

struct job {
	int n, slot;
};

static void env(int r, void *arg)
{
	const struct job *j = arg;
	ht_setenv_world(r, j->n, 2, hpct_test_ports(j->slot), 1, 10.0);
}

/* n ranks of fn on two loopback nodes, ports of slot; all must exit 0. */
static void run_job(int n, int slot, ht_env_fn env_fn, ht_rank_fn fn)
{
	struct job j = { .n = n, .slot = slot };
	int codes[8];
	int bad = ht_spawn(n, env_fn, fn, &j, 60, NULL, codes);
	cr_assert_eq(bad, 0, "%s", ht_describe(codes, n));
}

static int get_is(struct hpct_store *s, const char *key, const char *want)
{
	void *v = NULL;
	size_t len = 0;
	int rc = hpct__store_get(s, key, 5.0, &v, &len);
	int ok = rc == 0 && len == strlen(want) && memcmp(v, want, len) == 0;
	free(v);
	return ok;
}

/* Every operation, from every rank; exit codes say which check failed. */
static int ops(int rank, void *arg)
{
	const struct job *j = arg;
	int n = j->n;
	hpct_world *w;
	struct hpct_store *s, *other;
	if (hpct_world_create(&w) != 0)
		return 10;
	hpct_group *g = hpct_world_group(w);
	if (hpct__store_open(w, 42, 10.0, &s) != 0 || hpct__store_open(w, 43, 10.0, &other) != 0)
		return 11;
	char key[32], val[32];
	snprintf(key, sizeof(key), "k%d", rank);
	snprintf(val, sizeof(val), "v%d", rank);
	if (hpct__store_set(s, key, val, strlen(val)) != 0)
		return 12;
	for (int i = 0; i < n; i++) { /* a get waits for keys not set yet */
		snprintf(key, sizeof(key), "k%d", i);
		snprintf(val, sizeof(val), "v%d", i);
		if (!get_is(s, key, val))
			return 13;
	}
	int64_t v = 0;
	if (hpct__store_add(s, "ctr", 3, &v) != 0 || v % 3 != 0 || hpct_barrier(g) != 0 ||
	    hpct__store_add(s, "ctr", 0, &v) != 0 || v != 3 * n)
		return 14;
	if (!get_is(s, "ctr", n == 5 ? "15" : "?")) /* counters are ASCII decimal, as c10d's */
		return 15;
	if (hpct__store_add(s, "k1", 1, &v) != HPCT_EINVAL) /* "v1" is not a counter */
		return 16;
	if (rank == 0) {
		void *cur = NULL;
		size_t len = 0;
		int bad = hpct__store_cas(s, "cas", "", 0, "first", 5, &cur, &len) != 0 ||
		          len != 5 || memcmp(cur, "first", 5) != 0;
		free(cur);
		bad = bad || hpct__store_cas(s, "cas", "nope", 4, "x", 1, &cur, &len) != 0 ||
		      len != 5 || memcmp(cur, "first", 5) != 0;
		free(cur);
		bad = bad || hpct__store_cas(s, "cas", "first", 5, "second", 6, &cur, &len) != 0 ||
		      len != 6 || memcmp(cur, "second", 6) != 0;
		free(cur);
		/* missing, something else expected: c10d answers the expectation */
		bad = bad || hpct__store_cas(s, "nocas", "e", 1, "d", 1, &cur, &len) != 0 ||
		      len != 1 || memcmp(cur, "e", 1) != 0;
		free(cur);
		if (bad)
			return 17;
	}
	const char *keys[8];
	char names[8][16];
	for (int i = 0; i < n; i++) {
		snprintf(names[i], sizeof(names[i]), "k%d", i);
		keys[i] = names[i];
	}
	int all = 0;
	if (hpct__store_check(s, keys, n, &all) != 0 || !all)
		return 18;
	const char *absent[] = { "k0", "absent" };
	if (hpct__store_check(s, absent, 2, &all) != 0 || all)
		return 19;
	if (hpct__store_wait(s, keys, n, 5.0) != 0)
		return 20;
	/* another namespace sees none of it */
	if (hpct__store_check(other, keys, 1, &all) != 0 || all)
		return 21;
	int64_t nk = 0;
	if (hpct_barrier(g) != 0 || hpct__store_num_keys(s, &nk) != 0 || nk != n + 2)
		return 22; /* k0..k(n-1), ctr, cas */
	if (hpct_barrier(g) != 0)
		return 23;
	if (rank == 0) { /* a counter that would overflow is refused and kept */
		if (hpct__store_add(s, "big", INT64_MAX, &v) != 0 || v != INT64_MAX ||
		    hpct__store_add(s, "big", 1, &v) != HPCT_EINVAL ||
		    !strstr(hpct_last_error(), "overflow") ||
		    !get_is(s, "big", "9223372036854775807"))
			return 27;
	}
	if (rank == 1) {
		int existed = 0;
		if (hpct__store_delete(s, "k0", &existed) != 0 || !existed ||
		    hpct__store_delete(s, "k0", &existed) != 0 || existed)
			return 24;
	}
	if (hpct_barrier(g) != 0 || hpct__store_check(s, keys, 1, &all) != 0 || all)
		return 25;
	if (hpct_barrier(g) != 0)
		return 26;
	hpct__store_close(s);
	hpct__store_close(other);
	hpct_world_destroy(w);
	return 0;
}

Test(store, every_operation_across_ranks)
{
	run_job(5, 0, env, ops);
}

/* Rank 2 is gone from the start; the others wait for a key nobody sets. */
static int waits(int rank, void *arg)
{
	(void)arg;
	if (rank == 2)
		return 0;
	hpct_world *w;
	struct hpct_store *s;
	if (hpct_world_create(&w) != 0 || hpct__store_open(w, 7, 10.0, &s) != 0)
		return 10;
	void *v = NULL;
	size_t len;
	/* keys homed on a live rank and, probably, on rank 2 */
	for (int k = 0; k < 4; k++) {
		char key[16];
		snprintf(key, sizeof(key), "never%d", k);
		int rc = hpct__store_get(s, key, 1.0, &v, &len);
		const char *why = hpct_last_error();
		if (rc != HPCT_ETIMEDOUT)
			return 11;
		if (!strstr(why, key) && !strstr(why, "rank 2 "))
			return 12;
		/* the rank that is gone is named either way */
		if (!strstr(why, "rank 2 ") && !strstr(why, "does not answer (died or never "
		                                            "started): 2 (127.0.0."))
			return 13;
	}
	hpct__store_close(s);
	hpct_world_destroy(w);
	return 0;
}

Test(store, a_timeout_names_the_key_its_home_and_the_rank_gone)
{
	run_job(3, 1, env, waits);
}

/* A stranger sends a frame that claims 4 GB, then one that does not parse,
 * to rank 0's store; the ranks' own traffic goes on. */
static int garbage(int rank, void *arg)
{
	const struct job *j = arg;
	hpct_world *w;
	struct hpct_store *s;
	if (hpct_world_create(&w) != 0 || hpct__store_open(w, 9, 10.0, &s) != 0)
		return 10;
	if (rank == 0) {
		char addr[HPCT_ADDRSTRLEN];
		hpct_world_peer_addr(w, 0, addr);
		int port = atoi(strrchr(addr, ':') + 1) + 100; /* HPCT_STORE_PORT_OFFSET */
		for (int k = 0; k < 2; k++) {
			int fd = socket(AF_INET, SOCK_STREAM, 0);
			struct sockaddr_in sa = { .sin_family = AF_INET,
				                  .sin_port = htons((uint16_t)port),
				                  .sin_addr.s_addr = htonl(0x7f000001) };
			if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
				return 11;
			unsigned char huge[8] = { 0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4 };
			unsigned char bad[9] = { 0, 0, 0, 5, 99, 1, 2, 3, 4 }; /* op 99 */
			if (write(fd, k ? bad : huge, k ? sizeof(bad) : sizeof(huge)) <= 0)
				return 12;
			char c;
			struct timeval tv = { .tv_sec = 5 };
			setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
			if (read(fd, &c, 1) != 0) /* closed by the store, no answer */
				return 13;
			close(fd);
		}
	}
	hpct_group *g = hpct_world_group(w);
	char key[16], val[16];
	snprintf(key, sizeof(key), "g%d", rank);
	snprintf(val, sizeof(val), "%d", rank * 7);
	if (hpct_barrier(g) != 0 || hpct__store_set(s, key, val, strlen(val)) != 0)
		return 14;
	for (int i = 0; i < j->n; i++) {
		snprintf(key, sizeof(key), "g%d", i);
		snprintf(val, sizeof(val), "%d", i * 7);
		if (!get_is(s, key, val))
			return 15;
	}
	if (hpct_barrier(g) != 0)
		return 16;
	hpct__store_close(s);
	hpct_world_destroy(w);
	return 0;
}

static void env_offset(int r, void *arg)
{
	env(r, arg);
	setenv("HPCT_STORE_PORT_OFFSET", "100", 1);
}

Test(store, garbage_from_a_stranger_closes_only_its_connection)
{
	run_job(3, 2, env_offset, garbage);
}

/* A store port offset that is not one is named, as every setting is, and
 * no store is opened: a word, zero (the rank's own port), out of range; one
 * each rank (a process's failed store start stays failed). */
static const char *const bad_offsets[] = { "ten", "0", "70000" };
static const char *const bad_offset_says[] = {
	"HPCT_STORE_PORT_OFFSET='ten' is not an integer",
	"HPCT_STORE_PORT_OFFSET=0 is not a port offset",
	"HPCT_STORE_PORT_OFFSET=70000 is out of range",
};

static int bad_offset(int rank, void *arg)
{
	(void)arg;
	hpct_world *w;
	if (hpct_world_create(&w) != 0)
		return 70;
	setenv("HPCT_STORE_PORT_OFFSET", bad_offsets[rank], 1);
	struct hpct_store *s = NULL;
	int err = hpct__store_open(w, 11, 5.0, &s), rc = 0;
	if (err != HPCT_EBADENV || s || !strstr(hpct_last_error(), bad_offset_says[rank])) {
		fprintf(stderr, "rank %d: HPCT_STORE_PORT_OFFSET=%s gave %s: %s\n", rank,
		        bad_offsets[rank], hpct_errname(err), hpct_last_error());
		rc = 71;
	}
	hpct__store_close(s);
	hpct_world_destroy(w);
	return rc;
}

Test(store, a_bad_port_offset_is_named)
{
	run_job(3, 1, env, bad_offset); /* slot 1 again: its job is long gone */
}

/* With HPCT_SECRET on every rank: every operation works (each connection
 * proves the secret first); on rank 0, at rank 1's store: a request
 * without a proof gets a REFUSE frame and the connection closes; a proof
 * under another secret is named a wrong proof; a right secret claiming
 * another job is refused as such; the right proof is admitted. */
static int secret_strangers(int rank, void *arg)
{
	int rc = ops(rank, arg);
	if (rc)
		return rc;
	hpct_world *w;
	if (hpct_world_create(&w) != 0)
		return 60;
	if (rank != 0) { /* serve, until rank 0 is done */
		struct hpct_store *s;
		if (hpct__store_open(w, 7, 10.0, &s) != 0)
			return 66;
		rc = hpct_barrier(hpct_world_group(w)) != 0 ? 67 : 0;
		hpct__store_close(s);
		hpct_world_destroy(w);
		return rc;
	}
	char addr[HPCT_ADDRSTRLEN];
	hpct_world_peer_addr(w, 1, addr);
	int port = atoi(strrchr(addr, ':') + 1) + 100; /* HPCT_STORE_PORT_OFFSET */
	struct sockaddr_in sa = { .sin_family = AF_INET,
		                  .sin_port = htons((uint16_t)port),
		                  .sin_addr.s_addr = inet_addr(strtok(addr, ":")) };
	struct timeval tv = { .tv_sec = 5 };
	struct hpct_world_info info;
	hpct_world_get_info(w, &info);
	struct hpct_auth_id id = { .job = ((struct hpct_world *)w)->topo.job,
		                   .service = HPCT_AUTH_SERVICE_STORE,
		                   .client = 0,
		                   .server = 1,
		                   .size = (uint32_t)info.size };
	for (int k = 0; k < 4; k++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
			return 61;
		double deadline = hpct__now() + 5;
		if (k == 0) { /* a plain request: GET of "x" in namespace 42 */
			unsigned char req[4 + 13 + 1 + 8] = { 0, 0, 0, 22, 2 };
			req[16] = 1;
			req[17] = 'x';
			unsigned char back[HPCT_AUTH_LEN + 1];
			if (write(fd, req, sizeof(req)) != (ssize_t)sizeof(req) ||
			    hpct__sock_recv_all(fd, back, HPCT_AUTH_LEN, deadline) != 0 ||
			    !hpct__auth_is_frame(back, 4) || read(fd, back, 1) != 0)
				return 62;
		} else if (k == 1) {
			if (hpct__auth_client(fd, "another", 7, &id, deadline, "rank 1's store") !=
			            HPCT_EREFUSED ||
			    !strstr(hpct_last_error(), "rank 1's store gave a wrong proof"))
				return 63;
		} else if (k == 2) {
			struct hpct_auth_id other = id;
			other.job ^= 1;
			if (hpct__auth_client(fd, "s3cret", 6, &other, deadline,
			                      "rank 1's store") != HPCT_EREFUSED ||
			    !strstr(hpct_last_error(), "rank 1's store refused us: another job"))
				return 64;
		} else if (hpct__auth_client(fd, "s3cret", 6, &id, deadline, "rank 1's store") !=
		           0) {
			return 65;
		}
		close(fd);
	}
	rc = hpct_barrier(hpct_world_group(w)) != 0 ? 68 : 0;
	hpct_world_destroy(w);
	return rc;
}

static void env_secret(int r, void *arg)
{
	env_offset(r, arg);
	setenv("HPCT_SECRET", "s3cret", 1);
}

Test(store, with_a_secret_every_connection_proves_it)
{
	run_job(5, 3, env_secret, secret_strangers);
}
