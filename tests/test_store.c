/* The rootless store (bootstrap/store/), as libhpct_torch.so uses it:
 * every operation across ranks on two loopback nodes, namespaces apart,
 * a wait that times out naming the key, its home and the rank that is
 * gone, and a stranger's garbage on a rank's store port (moved by
 * HPCT_STORE_PORT_OFFSET) closing only its own connection; with HPCT_SECRET,
 * every connection proving the secret, and strangers refused.  Then what
 * TCPStore's newer protocol adds: append (creating, extending, waking a
 * parked wait, refused past the caps), queues (FIFO across ranks, a pop
 * parked until a push, a pop that times out, len, a value that is not a
 * queue) and the list of every key over every rank.  The tests of one
 * home's caps ask for one home; the failures are test_store_faults.c's.
 *
 * Slots: 0 to 3 of the program's range, one job at a time (-j1); a later
 * test takes a slot again once the job before it is gone. */
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <sys/time.h>
#include <sys/wait.h>

#include "bootstrap/base/auth.h"
#include "bootstrap/base/sock.h"
#include "bootstrap/base/util.h"
#include "bootstrap/store/store.h"
#include "bootstrap/world.h"
#include "bootstrap/world_access.h"
#include "hpct/fanout.h"
#include "hpct/hpct.h"
#include "tests/harness.h"
#include "tests/store_common.h"

TestSuite(store, .timeout = 120);





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
		/* not set, or (its group's first primary, rank 2, never started)
		 * refused for want of a quorum */
		if (rc != HPCT_ETIMEDOUT && rc != HPCT_ENOQUORUM)
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

/* ---- append, queues, list ---- */

/* The world and a store handle on namespace ns; 0 or the exit code. */






/* Each rank appends "r;" to one key (created by whichever comes first) and
 * creates a key of its own by appending twice; rank 0 waits, parked, for a
 * key that rank 1 then creates by appending, and a counter appended to
 * stays a counter. */
static int appends(int rank, void *arg)
{
	const struct job *j = arg;
	hpct_world *w;
	struct hpct_store *s, *sig;
	int rc = open_store(50, &w, &s);
	if (rc)
		return rc;
	if (hpct__store_open(w, 50, 20.0, &sig) != 0)
		return 12;
	hpct_group *g = hpct_world_group(w);
	char key[32], val[32];
	snprintf(val, sizeof(val), "%d;", rank);
	if (hpct__store_append(s, "all", val, strlen(val)) != 0)
		return 13;
	snprintf(key, sizeof(key), "own%d", rank);
	if (hpct__store_append(s, key, "ab", 2) != 0 || !get_is(s, key, "ab") ||
	    hpct__store_append(s, key, "", 0) != 0 || hpct__store_append(s, key, "cd", 2) != 0 ||
	    !get_is(s, key, "abcd"))
		return 14;
	if (hpct_barrier(g) != 0)
		return 15;
	void *v = NULL;
	size_t len = 0;
	if (hpct__store_get(s, "all", 5.0, &v, &len) != 0 || len != (size_t)(j->n * 2))
		return 16;
	for (int i = 0; i < j->n; i++) { /* each rank's piece, once */
		char piece[4] = { (char)('0' + i), ';', 0 };
		char *at = memmem(v, len, piece, 2);
		if (!at || memmem(at + 2, len - (size_t)(at + 2 - (char *)v), piece, 2))
			return 17;
	}
	free(v);
	if (rank == 0) {
		struct parked a = { .s = s, .key = "late" };
		pthread_t th;
		if ((rc = park_call(&a, &th)) != 0)
			return rc;
		if (hpct__store_set(sig, "parked", "1", 1) != 0)
			return 18;
		pthread_join(th, NULL);
		ht_event_destroy(&a.started);
		if (a.rc != 0 || !get_is(s, "late", "made by append"))
			return 19;
	} else if (rank == 1) {
		if (!get_is(s, "parked", "1") ||
		    hpct__store_append(s, "late", "made by append", 14) != 0)
			return 20;
	}
	int64_t c = 0;
	if (rank == 0 &&
	    (hpct__store_add(s, "ctr", 5, &c) != 0 || hpct__store_append(s, "ctr", "0", 1) != 0 ||
	     hpct__store_add(s, "ctr", 1, &c) != 0 || c != 51))
		return 21;
	if (hpct_barrier(g) != 0)
		return 22;
	hpct__store_close(sig);
	close_store(w, s);
	return 0;
}

Test(store, append_creates_extends_and_wakes_a_parked_wait)
{
	run_job(4, 0, env, appends);
}

/* With HPCT_STORE_MAX_BYTES at its least (64 KiB), appends to one key are
 * refused once they would pass it, naming the key; and with the default,
 * a value is refused past HPCT_STORE_MAX_VALUE.  The value is left as it
 * was. */
static int append_caps(int rank, void *arg)
{
	(void)arg;
	hpct_world *w;
	struct hpct_store *s;
	int rc = open_store(51, &w, &s);
	if (rc)
		return rc;
	if (rank == 1) {
		static char chunk[8192];
		memset(chunk, 'x', sizeof(chunk));
		int k = 0;
		while (k < 16 && (rc = hpct__store_append(s, "grows", chunk, sizeof(chunk))) == 0)
			k++;
		if (rc != HPCT_ENOMEM || k == 0 || k >= 16 ||
		    !strstr(hpct_last_error(), "'grows'") ||
		    !strstr(hpct_last_error(), "HPCT_STORE_MAX_BYTES"))
			return 12;
		void *v = NULL;
		size_t len = 0;
		if (hpct__store_get(s, "grows", 5.0, &v, &len) != 0 || len != (size_t)k * 8192)
			return 13;
		free(v);
		if (hpct__store_queue_push(s, "grows", "x", 1) != HPCT_EINVAL) /* not a queue */
			return 14;
	}
	if (hpct_barrier(hpct_world_group(w)) != 0)
		return 15;
	close_store(w, s);
	return 0;
}

/* One home a key (HPCT_STORE_REPLICAS=1): a home's caps, and its failures
 * named, as a rank with no other home for its keys sees them. */

static void env_small(int r, void *arg)
{
	env_one_home(r, arg);
	setenv("HPCT_STORE_MAX_BYTES", "65536", 1);
}

static int value_cap(int rank, void *arg)
{
	(void)arg;
	hpct_world *w;
	struct hpct_store *s;
	int rc = open_store(52, &w, &s);
	if (rc)
		return rc;
	if (rank == 0) {
		size_t half = HPCT_STORE_MAX_VALUE / 2 + 1;
		char *big = malloc(half);
		if (!big)
			return 12;
		memset(big, 'y', half);
		int64_t n = -1;
		if (hpct__store_append(s, "huge", big, half) != 0 ||
		    hpct__store_append(s, "huge", big, half) != HPCT_ENOMEM ||
		    !strstr(hpct_last_error(), "'huge'") ||
		    !strstr(hpct_last_error(), "HPCT_STORE_MAX_VALUE"))
			return 13;
		if (hpct__store_queue_push(s, "hugeq", big, half) != 0 ||
		    hpct__store_queue_push(s, "hugeq", big, half) != HPCT_ENOMEM ||
		    hpct__store_queue_len(s, "hugeq", &n) != 0 || n != 1)
			return 14;
		free(big);
		void *v = NULL;
		size_t len = 0;
		if (hpct__store_get(s, "huge", 5.0, &v, &len) != 0 || len != half)
			return 15;
		free(v);
	}
	if (hpct_barrier(hpct_world_group(w)) != 0)
		return 16;
	close_store(w, s);
	return 0;
}

Test(store, append_is_refused_past_the_caps_naming_the_key)
{
	run_job(2, 1, env_small, append_caps);
	run_job(2, 2, env_one_home, value_cap);
}

#define ITEMS 8

/* Item i of rank r is "r.i": each rank pushes its items to one queue, in
 * order; the queue's length is every item; then each rank pops ITEMS of
 * them, and sees every rank's items in the order they were pushed.  Then
 * the queue is gone: its key no longer exists. */
static int queues(int rank, void *arg)
{
	const struct job *j = arg;
	hpct_world *w;
	struct hpct_store *s;
	int rc = open_store(53, &w, &s);
	if (rc)
		return rc;
	hpct_group *g = hpct_world_group(w);
	int64_t n = -1;
	if (hpct__store_queue_len(s, "q", &n) != 0 || n != 0)
		return 12; /* missing: empty */
	if (hpct_barrier(g) != 0)
		return 13;
	for (int i = 0; i < ITEMS; i++) {
		char item[16];
		snprintf(item, sizeof(item), "%d.%d", rank, i);
		if (hpct__store_queue_push(s, "q", item, strlen(item)) != 0)
			return 14;
	}
	/* rank 0 alone pushes to "fifo": one consumer sees them in order */
	for (int i = 0; rank == 0 && i < ITEMS; i++) {
		unsigned char item[2] = { (unsigned char)i, 0 }; /* bytes, not text */
		if (hpct__store_queue_push(s, "fifo", item, sizeof(item)) != 0)
			return 15;
	}
	if (hpct_barrier(g) != 0 || hpct__store_queue_len(s, "q", &n) != 0 ||
	    n != (int64_t)j->n * ITEMS)
		return 16;
	int all = 0;
	const char *qk = "q";
	if (hpct__store_check(s, &qk, 1, &all) != 0 || !all || hpct__store_wait(s, &qk, 1, 5) != 0)
		return 17; /* a queue holding items is a key */
	if (hpct_barrier(g) != 0)
		return 18;
	int last[8];
	for (int i = 0; i < j->n; i++)
		last[i] = -1;
	for (int k = 0; k < ITEMS; k++) {
		void *v = NULL;
		size_t len = 0;
		char item[16];
		int from, idx;
		if (hpct__store_queue_pop(s, "q", 5.0, &v, &len) != 0 || len >= sizeof(item))
			return 19;
		memcpy(item, v, len);
		item[len] = 0;
		free(v);
		if (sscanf(item, "%d.%d", &from, &idx) != 2 || from < 0 || from >= j->n ||
		    idx <= last[from])
			return 20; /* out of order */
		last[from] = idx;
	}
	for (int i = 0; rank == 1 && i < ITEMS; i++) {
		void *v = NULL;
		size_t len = 0;
		int bad = hpct__store_queue_pop(s, "fifo", 5.0, &v, &len) != 0 || len != 2 ||
		          ((unsigned char *)v)[0] != i || ((unsigned char *)v)[1] != 0;
		free(v);
		if (bad)
			return 21;
	}
	if (hpct_barrier(g) != 0 || hpct__store_queue_len(s, "q", &n) != 0 || n != 0 ||
	    hpct__store_check(s, &qk, 1, &all) != 0 || all)
		return 22; /* the last pop deleted it */
	const char *fk = "fifo";
	int64_t nk = -1;
	if (hpct__store_check(s, &fk, 1, &all) != 0 || all || hpct__store_num_keys(s, &nk) != 0 ||
	    nk != 0)
		return 23;
	if (hpct_barrier(g) != 0)
		return 24;
	close_store(w, s);
	return 0;
}

Test(store, queue_push_and_pop_are_fifo_across_ranks)
{
	run_job(4, 3, env, queues);
}

static int all_parked(void *p)
{
	int64_t n = 0;
	return hpct__store_add(p, "parked", 0, &n) == 0 && n == 3;
}

/* Ranks 0, 2 and 3 pop from an empty queue, parked; rank 1 pushes one
 * item each once all three sleep in their pops (rank 0 waits for the key
 * first, as TCPStore's client does); each pop gets a different item. */
static int parked_pops(int rank, void *arg)
{
	const struct job *j = arg;
	hpct_world *w;
	struct hpct_store *s, *sig;
	int rc = open_store(54, &w, &s);
	if (rc)
		return rc;
	if (hpct__store_open(w, 55, 20.0, &sig) != 0)
		return 12;
	int64_t got = 0;
	if (rank != 1) {
		struct parked a = { .s = s, .key = "jobs", .pop = rank != 0 };
		pthread_t th;
		if ((rc = park_call(&a, &th)) != 0)
			return rc;
		if (hpct__store_add(sig, "parked", 1, &got) != 0)
			return 13;
		pthread_join(th, NULL);
		ht_event_destroy(&a.started);
		if (a.rc != 0)
			return 14;
		if (rank == 0 && hpct__store_queue_pop(s, "jobs", 5.0, &a.val, &a.len) != 0)
			return 15;
		char item[16];
		if (a.len >= sizeof(item))
			return 16;
		memcpy(item, a.val, a.len);
		item[a.len] = 0;
		free(a.val);
		/* which item it got, counted once: "taken-<item>" created once */
		void *cur = NULL;
		size_t len = 0;
		char key[32];
		snprintf(key, sizeof(key), "taken-%s", item);
		if (strncmp(item, "job", 3) != 0 ||
		    hpct__store_cas(sig, key, "", 0, "x", 1, &cur, &len) != 0)
			return 17;
		free(cur);
	} else {
		if (ht_wait_for(all_parked, sig, 30) != 0)
			return 18;
		for (int i = 0; i < j->n - 1; i++) {
			char item[16];
			snprintf(item, sizeof(item), "job%d", i);
			if (hpct__store_queue_push(s, "jobs", item, strlen(item)) != 0)
				return 20;
		}
	}
	hpct_group *g = hpct_world_group(w);
	int64_t nk = -1, n = -1;
	if (hpct_barrier(g) != 0 || hpct__store_num_keys(sig, &nk) != 0 || nk != 1 + j->n - 1 ||
	    hpct__store_queue_len(s, "jobs", &n) != 0 || n != 0)
		return 21; /* "parked", and one "taken-" per item: no item twice */
	if (hpct_barrier(g) != 0)
		return 22;
	hpct__store_close(sig);
	close_store(w, s);
	return 0;
}

Test(store, a_pop_parks_until_another_rank_pushes)
{
	run_job(4, 0, env, parked_pops);
}

/* A pop on an empty queue times out naming the key, its home and its
 * address; a value set, appended or added is not a queue to push, pop or
 * len, and stays as it was. */
static int not_queues(int rank, void *arg)
{
	(void)arg;
	hpct_world *w;
	struct hpct_store *s;
	int rc = open_store(56, &w, &s);
	if (rc)
		return rc;
	void *v = NULL;
	size_t len = 0;
	int64_t n = -1;
	char key[32];
	snprintf(key, sizeof(key), "empty%d", rank);
	double t0 = hpct__now();
	rc = hpct__store_queue_pop(s, key, 0.5, &v, &len);
	const char *why = hpct_last_error();
	if (rc != HPCT_ETIMEDOUT || hpct__now() - t0 < 0.4 || !strstr(why, key) ||
	    !strstr(why, "home rank") || !strstr(why, "127.0.0.") || !strstr(why, "held no item"))
		return 12;
	snprintf(key, sizeof(key), "plain%d", rank);
	if (hpct__store_set(s, key, "abc", 3) != 0)
		return 13;
	if (hpct__store_queue_pop(s, key, 1.0, &v, &len) != HPCT_EINVAL ||
	    !strstr(hpct_last_error(), "not a queue") || !strstr(hpct_last_error(), key))
		return 14;
	if (hpct__store_queue_len(s, key, &n) != HPCT_EINVAL ||
	    hpct__store_queue_push(s, key, "x", 1) != HPCT_EINVAL || !get_is(s, key, "abc"))
		return 15;
	/* an empty value, and a frame that claims more than follows */
	unsigned char bad[6] = { 0, 0, 0, 9, 'h', 'i' };
	if (hpct__store_set(s, key, "", 0) != 0 ||
	    hpct__store_queue_len(s, key, &n) != HPCT_EINVAL ||
	    hpct__store_set(s, key, bad, sizeof(bad)) != 0 ||
	    hpct__store_queue_pop(s, key, 1.0, &v, &len) != HPCT_EINVAL)
		return 16;
	/* a queue appended to is no longer one */
	snprintf(key, sizeof(key), "q%d", rank);
	if (hpct__store_queue_push(s, key, "it", 2) != 0 ||
	    hpct__store_queue_len(s, key, &n) != 0 || n != 1 ||
	    hpct__store_append(s, key, "z", 1) != 0 ||
	    hpct__store_queue_len(s, key, &n) != HPCT_EINVAL)
		return 17;
	if (hpct_barrier(hpct_world_group(w)) != 0)
		return 18;
	close_store(w, s);
	return 0;
}

Test(store, a_pop_times_out_naming_the_key_and_a_value_is_not_a_queue)
{
	run_job(3, 1, env, not_queues);
}

/* Every rank sets 6 keys (homed, by hash, on every rank), and 2 in
 * another namespace; each rank's list is the 6 x n keys of its namespace,
 * each once; an empty namespace lists nothing. */
static int lists(int rank, void *arg)
{
	const struct job *j = arg;
	hpct_world *w;
	struct hpct_store *s, *other, *none;
	int rc = open_store(57, &w, &s);
	if (rc)
		return rc;
	if (hpct__store_open(w, 58, 20.0, &other) != 0 || hpct__store_open(w, 59, 20.0, &none) != 0)
		return 12;
	char key[32];
	for (int i = 0; i < 6; i++) {
		snprintf(key, sizeof(key), "list/%d/%d", rank, i);
		if (hpct__store_set(s, key, "v", 1) != 0)
			return 13;
	}
	for (int i = 0; i < 2; i++) {
		snprintf(key, sizeof(key), "elsewhere/%d/%d", rank, i);
		if (hpct__store_set(other, key, "v", 1) != 0)
			return 14;
	}
	if (hpct_barrier(hpct_world_group(w)) != 0)
		return 15;
	char **keys = NULL;
	int64_t n = -1;
	if (hpct__store_list(s, &keys, &n) != 0 || n != 6 * j->n)
		return 16;
	int seen[8][6] = { { 0 } };
	for (int64_t k = 0; k < n; k++) {
		int r, i;
		char tail;
		if (sscanf(keys[k], "list/%d/%d%c", &r, &i, &tail) != 2 || r < 0 || r >= j->n ||
		    i < 0 || i >= 6 || seen[r][i]++)
			return 17;
		free(keys[k]);
	}
	free(keys);
	if (hpct__store_list(none, &keys, &n) != 0 || n != 0 || keys)
		return 18;
	if (hpct_barrier(hpct_world_group(w)) != 0)
		return 19;
	hpct__store_close(other);
	hpct__store_close(none);
	close_store(w, s);
	return 0;
}

Test(store, list_names_every_key_over_every_rank)
{
	run_job(4, 2, env, lists);
}

/* Keys past PyTorch's own caps (the libuv server's 8 KiB; 1.13's legacy
 * server has none): 4,097 bytes, 8 KiB + 1 and 1 MiB are set and read on
 * their homes from every rank, and 1 MiB + 1 is refused naming the size
 * and the cap. */
static int long_keys(int rank, void *arg)
{
	(void)arg;
	hpct_world *w;
	struct hpct_store *s;
	int rc = open_store(60, &w, &s);
	if (rc)
		return rc;
	static const size_t sizes[] = { 4097, 8193, HPCT_STORE_MAX_KEY };
	char *key = malloc(HPCT_STORE_MAX_KEY + 2);
	if (!key)
		return 12;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		memset(key, 'a' + (int)i, sizes[i]);
		key[0] = (char)('0' + rank);
		key[sizes[i]] = 0;
		if (hpct__store_set(s, key, "v", 1) != 0)
			return 13;
	}
	if (hpct_barrier(hpct_world_group(w)) != 0)
		return 14;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		memset(key, 'a' + (int)i, sizes[i]);
		key[0] = (char)('0' + (rank + 1) % 4);
		key[sizes[i]] = 0;
		if (!get_is(s, key, "v"))
			return 15;
	}
	memset(key, 'z', HPCT_STORE_MAX_KEY + 1);
	key[HPCT_STORE_MAX_KEY + 1] = 0;
	char want[96];
	snprintf(want, sizeof(want), "key of %u bytes (at most %u)", HPCT_STORE_MAX_KEY + 1,
	         HPCT_STORE_MAX_KEY);
	if (hpct__store_set(s, key, "v", 1) != HPCT_EINVAL || !strstr(hpct_last_error(), want))
		return 16;
	free(key);
	if (hpct_barrier(hpct_world_group(w)) != 0)
		return 17;
	close_store(w, s);
	return 0;
}

Test(store, keys_longer_than_pytorch_accepts_are_kept)
{
	run_job(4, 3, env, long_keys);
}

/* With HPCT_INFLIGHT_BYTES at 1 MiB, values of 3 MiB still go through
 * (a request bigger than the budget takes all of it and is read alone),
 * and the store's servers never held more of the process's budget than
 * it has. */
static void env_budget(int r, void *arg)
{
	env(r, arg);
	setenv("HPCT_INFLIGHT_BYTES", "1048576", 1);
}

static int budgeted(int rank, void *arg)
{
	(void)arg;
	hpct_world *w;
	struct hpct_store *s;
	int rc = open_store(53, &w, &s);
	if (rc)
		return rc;
	size_t len = 3u << 20;
	char *big = malloc(len), key[32];
	if (!big)
		return 12;
	for (int k = 0; k < 4; k++) {
		memset(big, 'a' + rank * 4 + k, len);
		snprintf(key, sizeof(key), "b%d.%d", rank, k);
		if (hpct__store_set(s, key, big, len) != 0)
			return 13;
	}
	if (hpct_barrier(hpct_world_group(w)) != 0)
		return 14;
	for (int r = 0; r < 2; r++)
		for (int k = 0; k < 4; k++) {
			void *v = NULL;
			size_t got = 0;
			snprintf(key, sizeof(key), "b%d.%d", r, k);
			if (hpct__store_get(s, key, 5.0, &v, &got) != 0 || got != len)
				return 15;
			for (size_t i = 0; i < len; i += 4096)
				if (((char *)v)[i] != 'a' + r * 4 + k)
					return 16;
			free(v);
		}
	free(big);
	struct hpct_inflight_stats st;
	if (hpct_inflight_get_stats(&st) != 0 || st.bytes_limit != 1048576 ||
	    st.bytes_peak > st.bytes_limit)
		return 17;
	/* every rank's server read 3 MiB requests: each took the whole budget */
	if (st.bytes_peak != st.bytes_limit)
		return 18;
	if (hpct_barrier(hpct_world_group(w)) != 0)
		return 19;
	close_store(w, s);
	return 0;
}

Test(store, big_values_take_from_the_process_budget)
{
	run_job(2, 1, env_budget, budgeted);
}
