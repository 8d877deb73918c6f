/* The rootless store's bounds (bootstrap/store/server.c): a hostile client
 * on rank 1 tries one exhaustion of rank 0's store per test (descriptors,
 * connections that never prove themselves, a frame claiming the most then
 * a trickle, requests in flight, keys and bytes stored, connection 4097),
 * and the test checks that it is refused or capped, by rank 0's log line
 * naming it; that rank 0 does not spin meanwhile (its CPU time over the
 * episode, a fraction of the wall time: MAX_CPU); that its VmRSS grows by
 * less than the test's figure; and that real ranks' set/get work after.
 *
 * Order comes from pipes between the two ranks and from rank 0's log
 * lines; the only clocks are generous deadlines that name what hung. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <sys/time.h>

#include "bootstrap/base/auth.h"
#include "bootstrap/base/bytes.h"
#include "bootstrap/base/sock.h"
#include "bootstrap/base/util.h"
#include "bootstrap/store/store.h"
#include "bootstrap/store/store_internal.h"
#include "bootstrap/world.h"
#include "hpct/hpct.h"
#include "tests/harness.h"

TestSuite(bounds_store, .timeout = 240);

/* Rank 0's store thread, idle but for what the attack makes it do, uses
 * less than this share of one core (under 5% measured); one spinning
 * takes all of it on an idle machine, and took 23% on a 2-core machine
 * shared by six builds. */
#define MAX_CPU 0.10
#define LONG_S  60.0 /* the generous deadline of every wait */
/* AddressSanitizer keeps freed blocks resident in its quarantine (256 MiB
 * by default): under it, VmRSS bounds get that much more. */
#if defined(__SANITIZE_ADDRESS__)
#define QUARANTINE_KB (256L << 10)
#else
#define QUARANTINE_KB 0L
#endif
#define NS 0x626f756e6473ull

struct ctx;

struct job {
	const char *name;
	int slot, secret;
	const char *env[6];         /* NAME, VALUE pairs, for both ranks */
	long rss_kb;                /* rank 0's VmRSS may grow by less over the episode */
	int (*prep)(struct ctx *x); /* rank 0, before: its info for rank 1 */
	void (*undo)(struct ctx *x);
	int (*attack)(struct ctx *x); /* rank 1: 0, or the exit code */
	char dir[64];
	int up[2], down[2]; /* rank 0 -> rank 1, rank 1 -> rank 0 */
};

struct ctx {
	struct job *j;
	hpct_world *w;
	struct hpct_store *s;
	struct sockaddr_in sa;            /* rank 0's store */
	char where[HPCT_ADDRSTRLEN + 16]; /* "127.0.0.1:port" */
	char log0[128];                   /* rank 0's log file */
	long info;                        /* from prep, for the attack */
	struct rlimit saved;
};

/* ---- waiting on events ---- */

static int wait_byte(int fd, const char *what, char *out)
{
	double deadline = hpct__now() + LONG_S;
	for (;;) {
		int r = hpct__sock_wait(fd, POLLIN, deadline);
		if (r > 0 && read(fd, out, 1) == 1)
			return 0;
		if (r == 0 || (r < 0 && r != -EINTR)) {
			fprintf(stderr, "no %s within %.0f s\n", what, LONG_S);
			return -1;
		}
	}
}

static int wait_long(int fd, const char *what, long *out)
{
	unsigned char *p = (unsigned char *)out;
	for (size_t i = 0; i < sizeof(*out); i++)
		if (wait_byte(fd, what, (char *)&p[i]) != 0)
			return -1;
	return 0;
}

/* A line of `path` with all of a, b and c (NULL: any), within LONG_S. */
static int wait_log(const char *path, const char *a, const char *b, const char *c)
{
	double deadline = hpct__now() + LONG_S;
	char line[2048];
	while (hpct__now() < deadline) {
		FILE *f = fopen(path, "r");
		while (f && fgets(line, sizeof(line), f))
			if (strstr(line, a) && (!b || strstr(line, b)) && (!c || strstr(line, c))) {
				fclose(f);
				return 0;
			}
		if (f)
			fclose(f);
		struct pollfd none = { .fd = -1 };
		poll(&none, 1, 20); /* a log file has no event to wait on */
	}
	fprintf(stderr, "rank 1: no line of %s with '%s' '%s' '%s' within %.0f s\n", path, a,
	        b ? b : "", c ? c : "", LONG_S);
	return -1;
}

/* 1 when the store closed fd (EOF, or reset) within LONG_S. */
static int closed_by_store(int fd)
{
	double deadline = hpct__now() + LONG_S;
	char buf[256];
	while (hpct__sock_wait(fd, POLLIN, deadline) > 0) {
		ssize_t r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
			return 1;
	}
	return 0;
}

/* ---- a raw client of the store's wire (store.h) ---- */

static int dial(const struct sockaddr_in *sa)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct timeval tv = { .tv_sec = (long)LONG_S };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (fd >= 0 && connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static void local_addr(int fd, char *buf, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	getsockname(fd, (struct sockaddr *)&ss, &sl);
	hpct__addr_str((struct sockaddr *)&ss, buf, len);
}

/* The proof rank 1 gives rank 0's store, under the job's secret. */
static int prove(struct ctx *x, int fd)
{
	struct hpct_auth_id id = { .job = ((struct hpct_world *)x->w)->topo.job,
		                   .service = HPCT_AUTH_SERVICE_STORE,
		                   .client = 1,
		                   .server = 0,
		                   .size = 2 };
	return hpct__auth_client(fd, "s3cret", 6, &id, hpct__now() + LONG_S, "rank 0's store");
}

/* key, or the first "key.N" whose group rank 0 is the primary of (in
 * this world of two, group g's first primary is rank g): the key a raw
 * request to rank 0 is served for, not redirected. */
static const char *at0(const char *key)
{
	static char buf[256];
	if (hpct__store_group_of(key, strlen(key), 2) == 0)
		return key;
	for (int k = 1;; k++) {
		snprintf(buf, sizeof(buf), "%.200s.%d", key, k);
		if (hpct__store_group_of(buf, strlen(buf), 2) == 0)
			return buf;
	}
}

/* A frame's first bytes: length (of all that follows: header, key, `body`
 * bytes), op, namespace, key (at0's). */
static size_t head(unsigned char *f, uint8_t op, const char *key, size_t body)
{
	key = at0(key);
	size_t klen = strlen(key);
	hpct__put32(f, (uint32_t)(13 + klen + body));
	f[4] = op;
	hpct__put64(f + 5, NS);
	hpct__put32(f + 13, (uint32_t)klen);
	memcpy(f + 17, key, klen);
	return 17 + klen;
}

/* One request: its status (>= -1012...0), or 1 when the store closed the
 * connection instead of answering.  The reply's fields are dropped. */
static int ask(int fd, uint8_t op, const char *key, const void *body, size_t blen)
{
	unsigned char f[64 + 4096];
	size_t n = head(f, op, key, blen);
	double deadline = hpct__now() + LONG_S;
	unsigned char h[8];
	if (hpct__sock_send_all(fd, f, n, deadline) != 0 ||
	    (blen && hpct__sock_send_all(fd, body, blen, deadline) != 0) ||
	    hpct__sock_recv_all(fd, h, 8, deadline) != 0)
		return 1;
	uint32_t len = hpct__get32(h);
	if (len < 4)
		return 1;
	unsigned char *rest = malloc(len - 4 + 1);
	int rc = hpct__sock_recv_all(fd, rest, len - 4, deadline);
	free(rest);
	return rc ? 1 : (int32_t)hpct__get32(h + 4);
}

static int set_raw(int fd, const char *key, const void *val, size_t len)
{
	unsigned char *b = malloc(4 + len);
	hpct__put32(b, (uint32_t)len);
	memcpy(b + 4, val, len);
	int rc = ask(fd, OP_SET, key, b, 4 + len);
	free(b);
	return rc;
}

static int check_raw(int fd, const char *key)
{
	return ask(fd, OP_CHECK, key, NULL, 0);
}

/* SET then GET at rank 0's store on a fresh connection: it serves. */
static int raw_set_get(struct ctx *x, const char *key)
{
	int fd = dial(&x->sa), rc = 1;
	if (fd >= 0 && (!x->j->secret || prove(x, fd) == 0) && set_raw(fd, key, "ok", 2) == 0) {
		unsigned char f[64], h[14], ms[8] = { 0 };
		size_t n = head(f, OP_GET, key, 8);
		memcpy(f + n, ms, 8);
		double deadline = hpct__now() + LONG_S;
		rc = hpct__sock_send_all(fd, f, n + 8, deadline) != 0 ||
		     hpct__sock_recv_all(fd, h, 14, deadline) != 0 || hpct__get32(h + 4) != 0 ||
		     memcmp(h + 12, "ok", 2) != 0;
	}
	if (fd >= 0)
		close(fd);
	if (rc)
		fprintf(stderr, "rank 1: set/get of '%s' at rank 0's store %s failed\n", key,
		        x->where);
	return rc;
}

/* ---- the two ranks ---- */

static double cpu_s(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* Real ranks' set/get through hpct's client, keys on both ranks. */
static int legit(struct ctx *x, int rank)
{
	char key[32], val[32];
	for (int k = 0; k < 8; k++) {
		snprintf(key, sizeof(key), "after-%d-%d", rank, k);
		snprintf(val, sizeof(val), "v%d", rank * 100 + k);
		if (hpct__store_set(x->s, key, val, strlen(val)) != 0) {
			fprintf(stderr, "rank %d: set %s: %s\n", rank, key, hpct_last_error());
			return 50;
		}
	}
	for (int r = 0; r < 2; r++)
		for (int k = 0; k < 8; k++) {
			void *v = NULL;
			size_t len = 0;
			snprintf(key, sizeof(key), "after-%d-%d", r, k);
			snprintf(val, sizeof(val), "v%d", r * 100 + k);
			int rc = hpct__store_get(x->s, key, 20.0, &v, &len);
			int ok = rc == 0 && len == strlen(val) && memcmp(v, val, len) == 0;
			free(v);
			if (!ok) {
				fprintf(stderr, "rank %d: get %s: %s\n", rank, key,
				        hpct_last_error());
				return 51;
			}
		}
	return hpct_barrier(hpct_world_group(x->w)) != 0 ? 52 : 0;
}

static int serving(struct ctx *x)
{
	struct job *j = x->j;
	long r0 = ht_rss_kb(); /* before prep: it may leave no descriptor to read it */
	int rc = j->prep ? j->prep(x) : 0;
	if (rc)
		return rc;
	char c = 'r';
	if (write(j->up[1], &c, 1) != 1 || write(j->up[1], &x->info, sizeof(x->info)) != 8)
		return 20;
	double t0 = hpct__now(), c0 = cpu_s(), wall = -1, cpu = 0;
	for (;;) {
		if (wait_byte(j->down[0], "word from rank 1's attack", &c) != 0)
			return 21;
		if (c == 'q') { /* the quiet part starts: measure from here */
			t0 = hpct__now();
			c0 = cpu_s();
		} else if (c == 'e') { /* and ends here: what follows is rank 1's own work */
			wall = hpct__now() - t0;
			cpu = cpu_s() - c0;
		} else {
			break;
		}
	}
	if (wall < 0) {
		wall = hpct__now() - t0;
		cpu = cpu_s() - c0;
	}
	if (j->undo)
		j->undo(x);
	long r1 = ht_rss_kb();
	fprintf(stderr,
	        "bounds_store %s: rank 0 over the episode: %.3f s CPU in %.3f s wall (%.1f%%), "
	        "VmRSS %ld -> %ld kB (+%ld)\n",
	        j->name, cpu, wall, 100 * cpu / wall, r0, r1, r1 - r0);
	if (c != 'd') /* the attack failed: rank 1 says how */
		return 0;
	if (cpu > MAX_CPU * wall) {
		fprintf(stderr, "rank 0 spun: %.3f s CPU in %.3f s\n", cpu, wall);
		return 22;
	}
	if (r1 - r0 >= j->rss_kb + QUARANTINE_KB) {
		fprintf(stderr, "rank 0's VmRSS grew by %ld kB (at most %ld)\n", r1 - r0,
		        j->rss_kb + QUARANTINE_KB);
		return 23;
	}
	c = 'm';
	if (write(j->up[1], &c, 1) != 1)
		return 24;
	return legit(x, 0);
}

static int attacking(struct ctx *x)
{
	struct job *j = x->j;
	char c;
	if (wait_byte(j->up[0], "'ready' from rank 0", &c) != 0 ||
	    wait_long(j->up[0], "rank 0's info", &x->info) != 0)
		return 40;
	int rc = j->attack(x);
	c = rc ? 'f' : 'd';
	if (write(j->down[1], &c, 1) != 1 || rc)
		return rc ? rc : 41;
	if (wait_byte(j->up[0], "rank 0's measures (it spun, or grew: its exit code says)", &c) !=
	    0)
		return 42;
	if (raw_set_get(x, "raw-after"))
		return 43;
	return legit(x, 1);
}

static int rank_main(int rank, void *arg)
{
	struct ctx x = { .j = arg };
	if (hpct_world_create(&x.w) != 0 || hpct__store_open(x.w, 5, 30.0, &x.s) != 0)
		return 10;
	char addr[HPCT_ADDRSTRLEN];
	hpct_world_peer_addr(x.w, 0, addr);
	int port = atoi(strrchr(addr, ':') + 1) + 100; /* HPCT_STORE_PORT_OFFSET */
	*strrchr(addr, ':') = 0;
	x.sa = (struct sockaddr_in){ .sin_family = AF_INET,
		                     .sin_port = htons((uint16_t)port),
		                     .sin_addr.s_addr = inet_addr(addr) };
	snprintf(x.where, sizeof(x.where), "%s:%d", addr, port);
	snprintf(x.log0, sizeof(x.log0), "%s/rank0.log", x.j->dir);
	int rc = rank == 0 ? serving(&x) : attacking(&x);
	hpct__store_close(x.s);
	hpct_world_destroy(x.w);
	return rc;
}

static void env(int r, void *arg)
{
	struct job *j = arg;
	ht_setenv_world(r, 2, 2, hpct_test_ports(j->slot), 1, 30.0);
	setenv("HPCT_STORE_PORT_OFFSET", "100", 1);
	char path[128];
	snprintf(path, sizeof(path), "%s/rank%d.log", j->dir, r);
	setenv("HPCT_DEBUG_FILE", path, 1);
	for (int i = 0; i + 1 < 6 && j->env[i]; i += 2)
		setenv(j->env[i], j->env[i + 1], 1);
	if (j->secret)
		setenv("HPCT_SECRET", "s3cret", 1);
}

static void run(struct job *j)
{
	snprintf(j->dir, sizeof(j->dir), "/tmp/hpct-bounds-XXXXXX");
	cr_assert_not_null(mkdtemp(j->dir));
	cr_assert_eq(pipe(j->up), 0);
	cr_assert_eq(pipe(j->down), 0);
	int codes[2];
	int bad = ht_spawn(2, env, rank_main, j, 200, NULL, codes);
	char path[128], line[1024];
	for (int r = 0; r < 2; r++) { /* the ranks' logs: kept in the test's on failure */
		snprintf(path, sizeof(path), "%s/rank%d.log", j->dir, r);
		FILE *f = fopen(path, "r");
		while (f && fgets(line, sizeof(line), f))
			if (bad)
				fprintf(stderr, "rank%d.log: %s", r, line);
		if (f)
			fclose(f);
		unlink(path);
	}
	rmdir(j->dir);
	for (int i = 0; i < 2; i++) {
		close(j->up[i]);
		close(j->down[i]);
	}
	cr_assert_eq(bad, 0, "%s", ht_describe(codes, 2));
}

/* ---- EMFILE: rank 0 runs out of descriptors ---- */

static int highest_fd(void)
{
	int hi = 0;
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.' && atoi(e->d_name) > hi)
			hi = atoi(e->d_name);
	if (d)
		closedir(d);
	return hi;
}

static int few_fds(struct ctx *x)
{
	getrlimit(RLIMIT_NOFILE, &x->saved);
	struct rlimit rl = x->saved;
	x->info = highest_fd() + 1 + 6; /* room for six connections */
	rl.rlim_cur = (rlim_t)x->info;
	return setrlimit(RLIMIT_NOFILE, &rl) == 0 ? 0 : 25;
}

static void fds_back(struct ctx *x)
{
	setrlimit(RLIMIT_NOFILE, &x->saved);
}

/* 48 connections that send nothing, where rank 0 has room for 6: it stops
 * accepting (logged once, naming the limit and its address) instead of
 * spinning; the accepted ones are closed at the admission deadline; once
 * they are gone it serves again. */
static int emfile(struct ctx *x)
{
	int fds[48];
	for (int i = 0; i < 48; i++)
		if ((fds[i] = dial(&x->sa)) < 0)
			return 60;
	char limit[64];
	snprintf(limit, sizeof(limit), "RLIMIT_NOFILE %ld;", x->info);
	if (wait_log(x->log0, "store: rank 0 cannot accept connections at", x->where, limit))
		return 61;
	if (!closed_by_store(fds[0])) { /* the first is accepted, then timed out */
		fprintf(stderr, "rank 1: rank 0 never closed a connection that sent nothing\n");
		return 62;
	}
	for (int i = 0; i < 48; i++)
		close(fds[i]);
	return raw_set_get(x, "after-emfile") ? 63 : 0;
}

Test(bounds_store, out_of_descriptors_pauses_accepting)
{
	static struct job j = {
		.name = "emfile",
		.slot = 0,
		.env = { "HPCT_STORE_ADMIT_TIMEOUT", "1" },
		.rss_kb = 16384,
		.prep = few_fds,
		.undo = fds_back,
		.attack = emfile,
	};
	run(&j);
}

/* ---- connections that never prove themselves ---- */

/* P is admitted and parks a WAIT; then four connections: two send
 * nothing, one two bytes, one (no secret) the start of a first request
 * claiming 64 MiB.  Each is closed at HPCT_STORE_ADMIT_TIMEOUT with a line
 * naming its address and how far it got; P, older than each of them,
 * still gets its WAIT answered when the key comes. */
static int idle(struct ctx *x)
{
	int p = dial(&x->sa);
	unsigned char f[64], ms[8];
	hpct__put64(ms, 120000);
	size_t n = head(f, OP_WAIT, "late", 8);
	memcpy(f + n, ms, 8);
	if (p < 0 || (x->j->secret && prove(x, p) != 0) ||
	    hpct__sock_send_all(p, f, n + 8, hpct__now() + LONG_S) != 0)
		return 70;
	int fds[4];
	for (int i = 0; i < 4; i++)
		if ((fds[i] = dial(&x->sa)) < 0)
			return 71;
	unsigned char claim[24];
	size_t cl = head(claim, OP_SET, "s", 4 + (64u << 20));
	if (write(fds[1], "\0\0", 2) != 2 ||
	    (!x->j->secret && write(fds[2], claim, cl) != (ssize_t)cl))
		return 72;
	const char *how[4] = { "(it sent nothing)",
		               x->j->secret ? "(its HELLO was not whole)"
		                            : "(2 bytes came, less than a frame's length)",
		               x->j->secret ? "(it sent nothing)" : "(14 of the 67108882 bytes",
		               "(it sent nothing)" };
	for (int i = 0; i < 4; i++) {
		char me[HPCT_ADDRSTRLEN], from[HPCT_ADDRSTRLEN + 40];
		local_addr(fds[i], me, sizeof(me));
		snprintf(from, sizeof(from), "closed the connection from %s: no", me);
		if (!closed_by_store(fds[i])) {
			fprintf(stderr, "rank 1: rank 0 never closed idle connection %d (%s)\n", i,
			        me);
			return 73;
		}
		if (wait_log(x->log0, from, "within HPCT_STORE_ADMIT_TIMEOUT=1.0 s", how[i]))
			return 74;
		close(fds[i]);
	}
	/* P came before them all, and is still there */
	int q = dial(&x->sa);
	unsigned char h[8];
	if (q < 0 || (x->j->secret && prove(x, q) != 0) || set_raw(q, "late", "now", 3) != 0 ||
	    hpct__sock_recv_all(p, h, 8, hpct__now() + LONG_S) != 0 || hpct__get32(h + 4) != 0) {
		fprintf(stderr, "rank 1: the admitted connection parked in WAIT was dropped\n");
		return 75;
	}
	close(q);
	close(p);
	return 0;
}

Test(bounds_store, connections_that_never_speak_are_closed)
{
	static struct job j = {
		.name = "idle",
		.slot = 1,
		.env = { "HPCT_STORE_ADMIT_TIMEOUT", "1" },
		.rss_kb = 16384,
		.attack = idle,
	};
	run(&j);
}

Test(bounds_store, connections_that_never_prove_the_secret_are_closed)
{
	static struct job j = {
		.name = "idle-secret",
		.slot = 2,
		.secret = 1,
		.env = { "HPCT_STORE_ADMIT_TIMEOUT", "1" },
		.rss_kb = 16384,
		.attack = idle,
	};
	run(&j);
}

/* ---- a frame claiming the most, then a trickle; requests in flight ---- */

/* T claims a 64 MiB SET as its first request and trickles it: closed at
 * the admission deadline, saying how much came.  Then A and B, admitted,
 * each send 5 MiB of a 5 MiB SET and stop short: with
 * HPCT_STORE_MAX_BYTES at 8 MiB, the one that takes the requests in
 * flight past it is closed and named. */
static int trickle(struct ctx *x)
{
	int t = dial(&x->sa);
	unsigned char f[64], dust[512] = { 0 };
	size_t n = head(f, OP_SET, "s", 4 + (64u << 20));
	hpct__put32(f + n, 64u << 20);
	if (t < 0 || hpct__sock_send_all(t, f, n + 4, hpct__now() + LONG_S) != 0)
		return 80;
	/* the quiet part: rank 0 waiting out a trickle must not spin.  The two
	 * 5 MiB requests after it are work (under ASan, tens of ms of copying) */
	char c = 'q';
	if (write(x->j->down[1], &c, 1) != 1)
		return 86;
	double deadline = hpct__now() + LONG_S;
	size_t sent = 0;
	for (;;) {
		if (send(t, dust, sizeof(dust), MSG_NOSIGNAL | MSG_DONTWAIT) > 0)
			sent += sizeof(dust);
		int r = hpct__sock_wait(t, POLLIN, hpct__now() + 0.01); /* the trickle's pace */
		if (r != 0 && recv(t, dust, 1, MSG_DONTWAIT) <= 0)
			break; /* closed */
		if (hpct__now() > deadline) {
			fprintf(stderr, "rank 1: a trickle of %zu bytes was never cut\n", sent);
			return 81;
		}
	}
	char me[HPCT_ADDRSTRLEN], from[HPCT_ADDRSTRLEN + 40];
	local_addr(t, me, sizeof(me));
	snprintf(from, sizeof(from), "closed the connection from %s: no", me);
	if (wait_log(x->log0, from, "whole first request", "of the 67108882 bytes of its"))
		return 82;
	close(t);
	c = 'e';
	if (write(x->j->down[1], &c, 1) != 1)
		return 87;

	size_t big = 5u << 20;
	unsigned char *body = calloc(1, big);
	int ab[2], cut = 0;
	for (int i = 0; i < 2; i++) {
		ab[i] = dial(&x->sa);
		if (ab[i] < 0 || check_raw(ab[i], "x") != 0)
			return 83;
		n = head(f, OP_SET, "big", 4 + big);
		hpct__put32(f + n, (uint32_t)big);
		/* all but the last byte, or until the store closes it */
		if (hpct__sock_send_all(ab[i], f, n + 4, hpct__now() + LONG_S) != 0 ||
		    hpct__sock_send_all(ab[i], body, big - 1, hpct__now() + LONG_S) != 0)
			cut++;
	}
	free(body);
	if (!cut) { /* both went into the sockets: one of them is cut still */
		struct pollfd pf[2] = { { .fd = ab[0], .events = POLLIN },
			                { .fd = ab[1], .events = POLLIN } };
		if (poll(pf, 2, (int)(LONG_S * 1000)) > 0)
			cut = closed_by_store(pf[0].revents ? ab[0] : ab[1]);
	}
	if (!cut) {
		fprintf(stderr, "rank 1: two 5 MiB requests in flight, none cut\n");
		return 84;
	}
	if (wait_log(x->log0, "requests and replies on their way would take",
	             "over HPCT_STORE_MAX_BYTES=8388608", NULL))
		return 85;
	close(ab[0]);
	close(ab[1]);
	return 0;
}

Test(bounds_store, a_trickle_and_requests_in_flight_are_capped)
{
	static struct job j = {
		.name = "trickle",
		.slot = 3,
		.env = { "HPCT_STORE_ADMIT_TIMEOUT", "1", "HPCT_STORE_MAX_BYTES", "8388608" },
		.rss_kb = 32768,
		.attack = trickle,
	};
	run(&j);
}

/* ---- keys and bytes stored ---- */

/* With HPCT_STORE_MAX_BYTES at 1 MiB and HPCT_STORE_MAX_KEYS at 64: 256 KiB
 * values until one is refused, naming the key and the limit; then small
 * keys until the 65th is refused; meanwhile a real rank's set homed on
 * rank 0 fails naming the full store; once the keys are deleted, all
 * works again. */
static int full(struct ctx *x)
{
	int h = dial(&x->sa);
	if (h < 0)
		return 90;
	char me[HPCT_ADDRSTRLEN], from[HPCT_ADDRSTRLEN + 16], key[32];
	local_addr(h, me, sizeof(me));
	snprintf(from, sizeof(from), "from %s:", me);
	size_t vlen = 256u << 10;
	unsigned char *val = calloc(1, vlen);
	int k, rc = 0;
	for (k = 0; k < 16 && rc == 0; k++) {
		snprintf(key, sizeof(key), "big%d", k);
		rc = set_raw(h, key, val, vlen);
	}
	free(val);
	if (rc != HPCT_ENOMEM || k < 2) {
		fprintf(stderr, "rank 1: 256 KiB value %d: status %d (want HPCT_ENOMEM)\n", k - 1,
		        rc);
		return 91;
	}
	char what[64];
	snprintf(what, sizeof(what), "refused set of key '%s'", at0(key));
	if (wait_log(x->log0, what, from, "over HPCT_STORE_MAX_BYTES=1048576"))
		return 92;
	for (int i = 0; i < k - 1; i++) {
		snprintf(key, sizeof(key), "big%d", i);
		if (ask(h, OP_DEL, key, NULL, 0) != 0)
			return 93;
	}
	for (k = 0, rc = 0; k < 100 && rc == 0; k++) {
		snprintf(key, sizeof(key), "small%d", k);
		rc = set_raw(h, key, "x", 1);
	}
	if (rc != HPCT_ENOMEM || k - 1 != 64) {
		fprintf(stderr, "rank 1: small key %d: status %d (want HPCT_ENOMEM at 64)\n", k - 1,
		        rc);
		return 94;
	}
	snprintf(what, sizeof(what), "refused set of key '%s'", at0(key));
	if (wait_log(x->log0, what, from,
	             "the store would hold 65 keys, over "
	             "HPCT_STORE_MAX_KEYS=64"))
		return 95;
	/* a real rank's set, of a key whose home is rank 0, is refused and named */
	int named = 0;
	for (int i = 0; i < 64 && !named; i++) {
		snprintf(key, sizeof(key), "probe%d", i);
		rc = hpct__store_set(x->s, key, "p", 1);
		if (rc == HPCT_ENOMEM)
			named = strstr(hpct_last_error(), "its primary home refused it") &&
			        strstr(hpct_last_error(),
			               "its store is full (HPCT_STORE_MAX_KEYS or HPCT_STORE_MAX_BYTES)");
		else if (rc != 0)
			return 96;
	}
	if (!named) {
		fprintf(stderr, "rank 1: no set refused by rank 0's full store: %s\n",
		        hpct_last_error());
		return 97;
	}
	for (int i = 0; i < 64; i++) {
		snprintf(key, sizeof(key), "small%d", i);
		if (ask(h, OP_DEL, key, NULL, 0) != 0)
			return 98;
	}
	close(h);
	return 0;
}

Test(bounds_store, keys_and_bytes_stored_are_capped)
{
	static struct job j = {
		.name = "full",
		.slot = 4,
		.env = { "HPCT_STORE_MAX_KEYS", "64", "HPCT_STORE_MAX_BYTES", "1048576" },
		.rss_kb = 16384,
		.attack = full,
	};
	run(&j);
}

/* ---- connection 4097 ---- */

static int many_fds(struct ctx *x)
{
	(void)x;
	struct rlimit rl;
	getrlimit(RLIMIT_NOFILE, &rl);
	rl.rlim_cur = rl.rlim_max < 8192 ? rl.rlim_max : 8192;
	return setrlimit(RLIMIT_NOFILE, &rl) == 0 ? 0 : 26;
}

/* Connections that each ask once (admitted), until one is closed without
 * an answer: the store holds 4096 and names the one it closed.  Then, in
 * a quiet second (a parked WAIT that times out on rank 0's own deadline),
 * rank 0 does not spin holding them all. */
static int crowd(struct ctx *x)
{
	if (many_fds(x))
		return 100;
	int *fds = malloc(5000 * sizeof(int)), n;
	char me[HPCT_ADDRSTRLEN] = "?";
	for (n = 0; n < 5000; n++) {
		if ((fds[n] = dial(&x->sa)) < 0) {
			fprintf(stderr, "rank 1: connection %d: %s\n", n, strerror(errno));
			return 101;
		}
		if (check_raw(fds[n], "x") != 0) {
			local_addr(fds[n], me, sizeof(me));
			break;
		}
	}
	if (n > 4096 || n < 4000) {
		fprintf(stderr, "rank 1: the store held %d of our connections\n", n);
		return 102;
	}
	char from[HPCT_ADDRSTRLEN + 64];
	snprintf(from, sizeof(from), "closed the connection from %s: it holds 4096", me);
	if (wait_log(x->log0, from, "its most (4 a rank of the job, at least 4096)", NULL))
		return 103;
	char c = 'q';
	if (write(x->j->down[1], &c, 1) != 1)
		return 104;
	unsigned char f[64], h[8], ms[8];
	hpct__put64(ms, 1000);
	size_t m = head(f, OP_WAIT, "never", 8);
	memcpy(f + m, ms, 8);
	if (hpct__sock_send_all(fds[0], f, m + 8, hpct__now() + LONG_S) != 0 ||
	    hpct__sock_recv_all(fds[0], h, 8, hpct__now() + LONG_S) != 0 ||
	    (int32_t)hpct__get32(h + 4) != HPCT_ETIMEDOUT)
		return 105;
	/* the quiet part ends: rank 0 holding 4096 connections and refusing
	 * more while a WAIT timed out; its 4097 closes below are work, not a spin */
	c = 'e';
	if (write(x->j->down[1], &c, 1) != 1)
		return 107;
	for (int i = 0; i <= n; i++)
		close(fds[i]);
	free(fds);
	/* it has room again: it took in our closes */
	double deadline = hpct__now() + LONG_S;
	for (;;) {
		int fd = dial(&x->sa), rc = fd < 0 || check_raw(fd, "x") != 0;
		if (fd >= 0)
			close(fd);
		if (!rc)
			return 0;
		if (hpct__now() > deadline) {
			fprintf(stderr, "rank 1: rank 0's store had no room %.0f s after we left\n",
			        LONG_S);
			return 106;
		}
	}
}

Test(bounds_store, connection_4097_is_closed_and_named)
{
	struct rlimit rl;
	getrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_max < 4096 + 256)
		cr_skip_test("RLIMIT_NOFILE's hard limit %llu: 4096 connections need more",
		             (unsigned long long)rl.rlim_max);
	static struct job j = {
		.name = "crowd",
		.slot = 5,
		.rss_kb = 32768,
		.prep = many_fds,
		.attack = crowd,
	};
	run(&j);
}
