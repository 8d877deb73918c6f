/* NCCL's root exchange, suite roots (meson test nccl-roots), against the
 * real libnccl.so.2 that hpct loads (HPCT_NCCL_LIB, NCCL_HOME): players of
 * that release's wire get byte for byte the same answers from the root its
 * ncclGetUniqueId starts and from hpct's; hpct's roots take every wire,
 * one per root, drop what does not fit and say so in the log, naming the
 * peer; the tier each release gets. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/base/util.h"
#include "bootstrap/nccl/nccl_internal.h"
#include "bootstrap/nccl/player.h"
#include "bootstrap/nccl/root_wire.h"
#include "hpct/nccl.h"
#include "tests/harness.h"

TestSuite(roots, .timeout = 240);

/* Only catches hangs: nothing here takes a tenth of it. */
#define HANG_GUARD_S 60.0

/* --- the log, as a file the test reads --------------------------------- */

/* hpct logs to stderr (HPCT_DEBUG=WARN from meson): while captured, fd 2
 * is a file, so a test can wait for a line and check what it says. */
struct capture {
	int saved;
	char path[64];
	char *text; /* the whole log, once ended */
};

static void capture_start(struct capture *c)
{
	snprintf(c->path, sizeof(c->path), "/tmp/hpct-nccl-roots-XXXXXX");
	int fd = mkstemp(c->path);
	cr_assert_geq(fd, 0);
	fflush(stderr);
	c->saved = dup(2);
	c->text = NULL;
	cr_assert_eq(dup2(fd, 2), 2);
	close(fd);
}

/* The log so far (malloc'd, NUL-terminated). */
static char *capture_text(const struct capture *c)
{
	if (c->text)
		return strdup(c->text);
	FILE *f = fopen(c->path, "r");
	char *buf = calloc(1, 1 << 20);
	size_t n = f ? fread(buf, 1, (1 << 20) - 1, f) : 0;
	buf[n] = 0;
	if (f)
		fclose(f);
	return buf;
}

/* Gives fd 2 back, with what was logged (for whoever reads the test's
 * log); the text stays for lines_with.  The roots must be gone by then. */
static void capture_end(struct capture *c)
{
	fflush(stderr);
	dup2(c->saved, 2);
	close(c->saved);
	c->text = capture_text(c);
	fputs(c->text, stderr);
	unlink(c->path);
}

/* How many lines of the log hold every one of needles[] (NULL-ended). */
static int lines_with(const struct capture *c, const char *const *needles)
{
	char *text = capture_text(c), *save = NULL;
	int count = 0;
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		int all = 1;
		for (int i = 0; needles[i] && all; i++)
			all = strstr(line, needles[i]) != NULL;
		count += all;
	}
	free(text);
	return count;
}

struct line_wait {
	const struct capture *c;
	const char *const *needles;
};

static int line_came(void *arg)
{
	struct line_wait *lw = arg;
	return lines_with(lw->c, lw->needles) > 0;
}

/* Waits (a hang guard only) for a line holding every one of needles[]. */
static void await_line(const struct capture *c, const char *const *needles)
{
	struct line_wait lw = { c, needles };
	cr_assert_eq(ht_wait_for(line_came, &lw, HANG_GUARD_S), 0, "no log line with '%s' and '%s'",
	             needles[0], needles[1] ? needles[1] : "");
}

/* --- conformance: NCCL's root and hpct's, byte for byte ---------------- */

static const struct hpct_nccl_lib *nccl(void)
{
	const struct hpct_nccl_lib *l = hpct__nccl_lib();
	cr_assert(l, "%s", hpct_last_error());
	return l;
}

/* The release whose wire the players speak: the loaded one's; past the
 * newest release verified here, the newest wire hpct knows (whether it
 * still holds is then what the test finds out). */
static int wire_version(const struct hpct_nccl_lib *l)
{
	if (hpct__nccl_wire_for_version(l->version))
		return l->version;
	cr_assert_gt(l->version, HPCT_NCCL_NEWEST_VERIFIED_VERSION, "NCCL %d is older than 2.19",
	             l->version);
	cr_log_warn("NCCL %d is newer than the newest release verified here (%s): playing "
	            "that one's wire",
	            l->version, HPCT_NCCL_NEWEST_VERIFIED_NAME);
	return HPCT_NCCL_NEWEST_VERIFIED_VERSION;
}

/* ids of hpct roots on loopback at port, port+1, ... */
static void loopback_ids(hpct_nccl_id *ids, int n, int port, uint64_t magic)
{
	for (int i = 0; i < n; i++) {
		struct hpct_nccl_id_info in = { .magic = magic + (uint64_t)i,
			                        .port = (unsigned)(port + i),
			                        .derived = 1 };
		strcpy(in.host, "127.0.0.1");
		cr_assert_eq(hpct_nccl_id_encode(&in, 0, &ids[i]), 0);
	}
}

/* Every rank was sent its ring neighbour's info, as the wire carries it. */
static void check_ring(const unsigned char *replies, int n, int version, const char *who)
{
	unsigned char want[HPCT_NCCL_RING_LEN];
	for (int r = 0; r < n; r++) {
		cr_assert_eq(hpct__nccl_test_answer((r + 1) % n, version, want), 0);
		cr_expect_eq(memcmp(replies + (size_t)r * HPCT_NCCL_RING_LEN, want, sizeof(want)),
		             0, "%s: rank %d of %d was not sent rank %d's ring info", who, r, n,
		             (r + 1) % n);
	}
}

/* n ranks over nroots roots, arrival order from seed, the loaded release's
 * wire: NCCL's roots and hpct's answer byte for byte alike. */
static void conformance(int n, int nroots, unsigned seed, int port)
{
	const struct hpct_nccl_lib *l = nccl();
	int v = wire_version(l);
	hpct_nccl_id *ids = calloc((size_t)nroots, sizeof(*ids));
	int *order = malloc((size_t)n * sizeof(int));
	unsigned char *real = calloc((size_t)n, HPCT_NCCL_RING_LEN);
	unsigned char *ours = calloc((size_t)n, HPCT_NCCL_RING_LEN);
	hpct__nccl_test_order(order, n, seed);

	for (int i = 0; i < nroots; i++)
		cr_assert_eq(l->get_unique_id(&ids[i]), 0); /* each starts a root of NCCL's */
	cr_assert_eq(hpct__nccl_play_ranks(ids, nroots, n, order, 30, 0, v, real, NULL), 0,
	             "against NCCL %d's root: %s", l->version, hpct_last_error());
	check_ring(real, n, v, "NCCL's root");

	struct hpct_nccl_roots *roots;
	loopback_ids(ids, nroots, port, 0x5eed0000u + seed);
	cr_assert_eq(hpct__nccl_roots_start(ids, nroots, n, 30, 0, &roots), 0, "%s",
	             hpct_last_error());
	cr_assert_eq(hpct__nccl_play_ranks(ids, nroots, n, order, 30, 0, v, ours, NULL), 0,
	             "against hpct's roots: %s", hpct_last_error());
	struct hpct_nccl_root_stats st;
	cr_assert_eq(hpct__nccl_roots_wait(roots, &st), 0, "%s", hpct_last_error());
	cr_expect_eq(st.ignored, 0);
	cr_expect_eq(st.accepted, n + (nroots > 1 ? nroots : 0));
	cr_expect_eq(memcmp(real, ours, (size_t)n * HPCT_NCCL_RING_LEN), 0,
	             "NCCL %d, n=%d roots=%d: hpct's answers differ from NCCL's", l->version, n,
	             nroots);
	free(ids);
	free(order);
	free(real);
	free(ours);
}

Test(roots, one_root_answers_like_nccls)
{
	int port = hpct_test_ports(0);
	int sizes[] = { 1, 2, 3, 8, 17, 64 };
	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		conformance(sizes[i], 1, 17 + i, port + 10 * (int)i);
}

Test(roots, many_roots_answer_like_nccls)
{
	const struct hpct_nccl_lib *l = nccl();
	if (l->version < HPCT_NCCL_TIER2_MIN_VERSION)
		cr_skip_test("NCCL %d: several roots need ncclCommInitRankScalable (2.23 and "
		             "later); this release's ranks know one root only",
		             l->version);
	/* one case at a time: each finds the ports of the last one free */
	int port = hpct_test_ports(1);
	conformance(2, 2, 1, port);
	conformance(3, 2, 2, port);
	conformance(8, 3, 3, port);
	conformance(8, 8, 4, port); /* one rank per root: Tier 2's shape */
	conformance(17, 5, 7, port);
	conformance(64, 64, 5, port); /* ports port .. port+63 */
	conformance(64, 7, 6, port);
}

/* --- what does not fit is dropped, and said ---------------------------- */

/* Raw bytes to a root, as a stranger would send them, in one write; the
 * port they came from. */
static int knock(int port, uint64_t magic, int type, int size, const void *body, size_t len)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in in = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(connect(fd, (struct sockaddr *)&in, sizeof(in)), 0);
	unsigned char msg[HPCT_NCCL_HDR_LEN + 256];
	cr_assert_leq(len, 256u);
	memcpy(msg, &magic, 8);
	memcpy(msg + 8, &type, 4);
	memcpy(msg + 12, &size, 4);
	if (len)
		memcpy(msg + HPCT_NCCL_HDR_LEN, body, len);
	cr_assert_eq(send(fd, msg, HPCT_NCCL_HDR_LEN + len, MSG_NOSIGNAL),
	             (ssize_t)(HPCT_NCCL_HDR_LEN + len));
	struct sockaddr_in me;
	socklen_t mlen = sizeof(me);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&me, &mlen), 0);
	close(fd);
	return ntohs(me.sin_port);
}

/* "127.0.0.1:port", as the roots name a peer. */
static const char *peer_name(char *buf, size_t len, int port)
{
	snprintf(buf, len, "127.0.0.1:%d", port);
	return buf;
}

Test(roots, strangers_and_duplicates_are_dropped_and_named)
{
	int port = hpct_test_ports(2);
	hpct_nccl_id id;
	loopback_ids(&id, 1, port, 0xabcdef);
	struct capture log;
	capture_start(&log);
	struct hpct_nccl_roots *roots;
	/* keyed: the line about the wrong magic speaks of the secret */
	/* its deadline: 3 s (the knocks below take milliseconds; each of the
	 * matrix's releases runs this) */
	cr_assert_eq(hpct__nccl_roots_start(&id, 1, 2, 3, 1, &roots), 0, "%s", hpct_last_error());
	/* a silent peer holds only its own connection */
	int silent = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in in = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(connect(silent, (struct sockaddr *)&in, sizeof(in)), 0);
	struct sockaddr_in me;
	socklen_t mlen = sizeof(me);
	cr_assert_eq(getsockname(silent, (struct sockaddr *)&me, &mlen), 0);
	int silent_port = ntohs(me.sin_port);
	const struct hpct_nccl_wire *w = &hpct__nccl_wires[1];
	unsigned char body[256];
	memset(body, 0x41, sizeof(body));
	int magic_from = knock(port, 0x1234, 1, w->report_len, body, (size_t)w->report_len);
	int type_from = knock(port, 0xabcdef, 2, w->report_len, body, (size_t)w->report_len);
	int len_from = knock(port, 0xabcdef, 1, 100, body, 100); /* no release sends 100 */
	/* rank 0 of 2 checks in twice (from a listener nobody answers on: the
	 * root answers rank 0 only once rank 1 came, which never happens here) */
	int32_t hdr[4] = { 0, 2, 0, 1 };
	memset(body, 0, sizeof(body));
	memcpy(body, hdr, sizeof(hdr));
	struct sockaddr_in back = in;
	back.sin_port = htons((uint16_t)(port + 1));
	memcpy(body + w->addr_at, &back, sizeof(back));
	body[w->ring_at] = 1;
	knock(port, 0xabcdef, 1, w->report_len, body, (size_t)w->report_len);
	knock(port, 0xabcdef, 1, w->report_len, body, (size_t)w->report_len);
	/* then nobody else: the deadline names rank 1 */
	struct hpct_nccl_root_stats st;
	double t0 = hpct__now();
	int rc = hpct__nccl_roots_wait(roots, &st); /* deadline 3 s */
	close(silent);
	capture_end(&log);
	cr_expect_eq(rc, HPCT_ETIMEDOUT);
	cr_expect_lt(hpct__now() - t0, 3.0 + HANG_GUARD_S, "the roots hung past their deadline");
	cr_expect(strstr(hpct_last_error(), "not heard from rank 1"), "%s", hpct_last_error());
	cr_expect_eq(st.accepted, 1);
	cr_expect_geq(st.ignored, 5, "wrong magic, type, size, the duplicate, the silent: %d",
	              st.ignored);
	/* each one said, naming the peer */
	char a[4][32];
	const char *const magic[] = { peer_name(a[0], 32, magic_from), "wrong magic 0x1234",
		                      "keyed by HPCT_SECRET", NULL };
	const char *const type[] = { peer_name(a[1], 32, type_from), "socket type 2", NULL };
	const char *const len[] = { peer_name(a[2], 32, len_from), "a 100-byte report",
		                    "64 (NCCL 2.19-2.22), 172 (NCCL 2.23-2.28), 176 (NCCL 2.29-",
		                    NULL };
	const char *const twice[] = { "dropped the connection from 127.0.0.1:",
		                      "rank 0 of 2 checked in twice", NULL };
	const char *const quiet[] = { peer_name(a[3], 32, silent_port), "dropped", NULL };
	cr_expect_eq(lines_with(&log, magic), 1, "the wrong magic, once");
	cr_expect_eq(lines_with(&log, type), 1, "the wrong type, once");
	cr_expect_eq(lines_with(&log, len), 1, "the unknown length, once");
	cr_expect_eq(lines_with(&log, twice), 1, "the duplicate, once");
	cr_expect_eq(lines_with(&log, quiet), 1, "the silent peer, once");
}

/* A stranger with the wrong magic is said even where no secret keys the
 * magic (NCCL's roots drop it without a word); the ranks then go on. */
Test(roots, a_wrong_magic_is_said_without_a_secret)
{
	const struct hpct_nccl_lib *l = nccl();
	int v = wire_version(l), port = hpct_test_ports(7);
	hpct_nccl_id id;
	loopback_ids(&id, 1, port, 0x5151);
	struct capture log;
	capture_start(&log);
	struct hpct_nccl_roots *roots;
	cr_assert_eq(hpct__nccl_roots_start(&id, 1, 2, 30, 0, &roots), 0, "%s", hpct_last_error());
	unsigned char body[HPCT_NCCL_REPORT_MAX] = { 0 };
	char a[32];
	int from = knock(port, 0x5152, 1, HPCT_NCCL_REPORT_MAX, body, sizeof(body));
	const char *const said[] = { peer_name(a, sizeof(a), from), "wrong magic 0x5152",
		                     "not an NCCL rank", NULL };
	await_line(&log, said);
	unsigned char replies[2 * HPCT_NCCL_RING_LEN];
	cr_assert_eq(hpct__nccl_play_ranks(&id, 1, 2, NULL, 30, 0, v, replies, NULL), 0, "%s",
	             hpct_last_error());
	struct hpct_nccl_root_stats st;
	cr_assert_eq(hpct__nccl_roots_wait(roots, &st), 0, "%s", hpct_last_error());
	capture_end(&log);
	check_ring(replies, 2, v, "after a stranger");
	cr_expect_eq(st.ignored, 1);
	cr_expect_eq(st.accepted, 2);
}

Test(roots, a_taken_port_fails_fast_naming_it)
{
	int port = hpct_test_ports(3);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)); /* as NCCL's root does */
	struct sockaddr_in in = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(bind(fd, (struct sockaddr *)&in, sizeof(in)), 0);
	cr_assert_eq(listen(fd, 1), 0);
	hpct_nccl_id id;
	loopback_ids(&id, 1, port, 7);
	struct hpct_nccl_roots *roots = NULL;
	cr_expect_eq(hpct__nccl_roots_start(&id, 1, 2, 5, 0, &roots), HPCT_EADDRINUSE);
	char want[32];
	snprintf(want, sizeof(want), "127.0.0.1:%d", port);
	cr_expect(strstr(hpct_last_error(), want), "%s", hpct_last_error());
	close(fd);
}

Test(roots, a_detached_root_finishes_and_frees_itself)
{
	const struct hpct_nccl_lib *l = nccl();
	int v = wire_version(l), port = hpct_test_ports(4);
	/* one root per rank where the release has several, else one */
	int nids = hpct__nccl_wire_for_version(v)->multi_root ? 4 : 1;
	hpct_nccl_id ids[4];
	loopback_ids(ids, nids, port, 0x77);
	struct hpct_nccl_roots *roots;
	cr_assert_eq(hpct__nccl_roots_start(ids, nids, 4, 20, 0, &roots), 0, "%s",
	             hpct_last_error());
	hpct__nccl_roots_detach(roots); /* as Tier 2 does once NCCL has the init going */
	unsigned char replies[4 * HPCT_NCCL_RING_LEN];
	cr_assert_eq(hpct__nccl_play_ranks(ids, nids, 4, NULL, 20, 0, v, replies, NULL), 0, "%s",
	             hpct_last_error());
	check_ring(replies, 4, v, "detached roots");
	/* answered, so closed: the ports come free */
	double until = hpct__now() + HANG_GUARD_S; /* a poll: the bound is a hang guard */
	int rc;
	while ((rc = hpct__nccl_port_check(&ids[nids - 1])) != 0 && hpct__now() < until)
		usleep(1000);
	cr_expect_eq(rc, 0, "root %d still listens after answering", nids - 1);
}

/* --- every wire, one per root ------------------------------------------ */

/* A rank of the test's own: a listener for its root's answer. */
struct raw_rank {
	int lfd;
	struct sockaddr_in addr;
};

static void raw_listen(struct raw_rank *r)
{
	memset(&r->addr, 0, sizeof(r->addr));
	r->addr.sin_family = AF_INET;
	r->addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t len = sizeof(r->addr);
	r->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert(r->lfd >= 0 && bind(r->lfd, (struct sockaddr *)&r->addr, len) == 0 &&
	          listen(r->lfd, 4) == 0 &&
	          getsockname(r->lfd, (struct sockaddr *)&r->addr, &len) == 0);
}

/* Rank `rank` of nranks reports to the root at port in wire w's layout
 * (root 0 of 1, the given offset), offering its test ring; the port the
 * report came from. */
static int raw_report(int port, uint64_t magic, const struct hpct_nccl_wire *w, int rank,
                      int nranks, int offset, const struct raw_rank *r)
{
	unsigned char body[HPCT_NCCL_REPORT_MAX] = { 0 }, ring[HPCT_NCCL_RING_LEN];
	int32_t head[4] = { rank, nranks, 0, 1 };
	memcpy(body, head, w->multi_root ? 16 : 8);
	if (w->offset_at >= 0)
		memcpy(body + w->offset_at, &offset, 4);
	memcpy(body + w->addr_at, &r->addr, sizeof(r->addr));
	hpct__nccl_test_ring(rank, ring);
	memcpy(body + w->ring_at, ring, (size_t)w->reply_len);
	return knock(port, magic, 1, w->report_len, body, (size_t)w->report_len);
}

/* r's answer: opened with the root's magic and type 1, wire w's size, and
 * as much of rank next's ring as the wire carries. */
static void raw_answer(struct raw_rank *r, uint64_t magic, const struct hpct_nccl_wire *w, int next)
{
	struct pollfd pf = { .fd = r->lfd, .events = POLLIN };
	cr_assert_eq(poll(&pf, 1, (int)(HANG_GUARD_S * 1000)), 1,
	             "no answer from the root (NCCL %s) for the rank before %d", w->releases, next);
	int fd = accept(r->lfd, NULL, NULL);
	cr_assert_geq(fd, 0);
	struct timeval tv = { .tv_sec = (long)HANG_GUARD_S };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	unsigned char buf[HPCT_NCCL_HDR_LEN + HPCT_NCCL_RING_LEN + 1], ring[HPCT_NCCL_RING_LEN];
	size_t got = 0;
	ssize_t k;
	while ((k = recv(fd, buf + got, sizeof(buf) - got, 0)) > 0)
		got += (size_t)k;
	close(fd);
	cr_assert_eq(got, HPCT_NCCL_HDR_LEN + (size_t)w->reply_len,
	             "NCCL %s: an answer of %zu bytes", w->releases, got);
	cr_expect_eq(memcmp(buf, &magic, 8), 0, "the answer has another magic than the root's id");
	cr_expect_eq(hpct__nccl_get32(buf + 8), HPCT_NCCL_SOCK_TYPE_BOOTSTRAP);
	cr_expect_eq(hpct__nccl_get32(buf + 12), w->reply_len);
	hpct__nccl_test_ring(next, ring);
	cr_expect_eq(memcmp(buf + HPCT_NCCL_HDR_LEN, ring, (size_t)w->reply_len), 0,
	             "NCCL %s: not rank %d's ring info", w->releases, next);
}

/* Nothing came for r (its report was dropped). */
static void raw_unanswered(struct raw_rank *r, const char *who)
{
	struct pollfd pf = { .fd = r->lfd, .events = POLLIN };
	cr_expect_eq(poll(&pf, 1, 0), 0, "%s was answered", who);
	close(r->lfd);
}

Test(roots, the_wire_table)
{
	struct {
		int version, report, reply;
	} rows[] = { { 21903, 64, 28 },   { 22203, 64, 28 },   { 22304, 172, 128 },
		     { 22809, 172, 128 }, { 22907, 176, 128 }, { 23007, 176, 128 },
		     { 23203, 176, 128 }, { 23299, 176, 128 } };
	for (unsigned i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		const struct hpct_nccl_wire *w = hpct__nccl_wire_for_version(rows[i].version);
		cr_assert(w, "no wire for %d", rows[i].version);
		cr_expect_eq(w->report_len, rows[i].report, "%d", rows[i].version);
		cr_expect_eq(w->reply_len, rows[i].reply, "%d", rows[i].version);
		cr_expect_eq(hpct__nccl_wire_for_len(w->report_len), w);
		/* the report holds what the offsets say, and no more */
		cr_expect_eq(w->ring_at + w->reply_len, w->report_len, "%d", rows[i].version);
		cr_expect_eq(w->addr_at + HPCT_NCCL_ADDR_LEN, w->ring_at, "%d", rows[i].version);
	}
	cr_expect_null(hpct__nccl_wire_for_version(21899));
	cr_expect_null(hpct__nccl_wire_for_version(23300), "2.33 is newer than verified");
	cr_expect_null(hpct__nccl_wire_for_len(100));
	cr_expect_eq(hpct__nccl_wires[2].offset_at, 16);
	cr_expect_eq(hpct__nccl_wires[0].multi_root, 0);
}

/* One root per wire: the first report fixes it; the two other lengths are
 * dropped and said, naming the peer and both lengths; the ranks of the
 * root's wire are all answered. */
Test(roots, each_root_speaks_the_wire_of_its_first_report)
{
	int port = hpct_test_ports(5);
	for (int k = 0; k < HPCT_NCCL_NWIRES; k++) {
		const struct hpct_nccl_wire *w = &hpct__nccl_wires[k];
		uint64_t magic = 0x3100 + (uint64_t)k;
		hpct_nccl_id id;
		loopback_ids(&id, 1, port + k, magic);
		struct capture log;
		capture_start(&log);
		struct hpct_nccl_roots *roots;
		cr_assert_eq(hpct__nccl_roots_start(&id, 1, 3, 30, 0, &roots), 0, "%s",
		             hpct_last_error());
		struct raw_rank r[3], stray[HPCT_NCCL_NWIRES];
		for (int i = 0; i < 3; i++)
			raw_listen(&r[i]);
		raw_report(port + k, magic, w, 0, 3, 0, &r[0]);
		raw_report(port + k, magic, w, 1, 3, 0, &r[1]);
		raw_answer(&r[0], magic, w, 1); /* taken: the root speaks w now */
		for (int j = 0; j < HPCT_NCCL_NWIRES; j++) {
			if (j == k)
				continue;
			const struct hpct_nccl_wire *x = &hpct__nccl_wires[j];
			raw_listen(&stray[j]);
			char peer[32], why[128];
			int from = raw_report(port + k, magic, x, 2, 3, 0, &stray[j]);
			snprintf(why, sizeof(why),
			         "a %d-byte report (NCCL %s) where this root's ranks sent %d bytes "
			         "(NCCL %s)",
			         x->report_len, x->releases, w->report_len, w->releases);
			const char *const said[] = { peer_name(peer, sizeof(peer), from), why,
				                     NULL };
			await_line(&log, said);
		}
		raw_report(port + k, magic, w, 2, 3, 0, &r[2]);
		raw_answer(&r[1], magic, w, 2);
		raw_answer(&r[2], magic, w, 0);
		struct hpct_nccl_root_stats st;
		cr_assert_eq(hpct__nccl_roots_wait(roots, &st), 0, "%s", hpct_last_error());
		capture_end(&log);
		cr_expect_eq(st.accepted, 3, "NCCL %s", w->releases);
		cr_expect_eq(st.ignored, HPCT_NCCL_NWIRES - 1, "NCCL %s", w->releases);
		for (int j = 0; j < HPCT_NCCL_NWIRES; j++)
			if (j != k)
				raw_unanswered(&stray[j], "a report of another wire");
		for (int i = 0; i < 3; i++)
			close(r[i].lfd);
	}
}

/* ncclCommGrow's report (2.29+, offset != 0) is refused and said; it does
 * not make the root a 2.29 one: 2.23-2.28 ranks are served after it. */
Test(roots, a_grow_report_is_refused_and_said)
{
	int port = hpct_test_ports(6);
	const struct hpct_nccl_wire *w29 = hpct__nccl_wire_for_version(22907);
	hpct_nccl_id id;
	loopback_ids(&id, 1, port, 0x6706);
	struct capture log;
	capture_start(&log);
	struct hpct_nccl_roots *roots;
	cr_assert_eq(hpct__nccl_roots_start(&id, 1, 2, 30, 0, &roots), 0, "%s", hpct_last_error());
	struct raw_rank g;
	raw_listen(&g);
	char peer[32];
	int from = raw_report(port, 0x6706, w29, 1, 2, 1, &g);
	const char *const said[] = { peer_name(peer, sizeof(peer), from),
		                     "an ncclCommGrow report (rank 1 of 2, offset 1)",
		                     "do not serve ncclCommGrow", NULL };
	await_line(&log, said);
	unsigned char replies[2 * HPCT_NCCL_RING_LEN];
	cr_assert_eq(hpct__nccl_play_ranks(&id, 1, 2, NULL, 30, 0, 22809, replies, NULL), 0, "%s",
	             hpct_last_error());
	struct hpct_nccl_root_stats st;
	cr_assert_eq(hpct__nccl_roots_wait(roots, &st), 0, "%s", hpct_last_error());
	capture_end(&log);
	check_ring(replies, 2, 22809, "after a grow report");
	cr_expect_eq(st.accepted, 2);
	cr_expect_eq(st.ignored, 1);
	raw_unanswered(&g, "the grow report");
}

/* --- tiers ---------------------------------------------------------------- */

/* Tier 2 from 2.23 to the newest release verified here, Tier 1 before and
 * after; a newer NCCL is said once per process. */
Test(roots, each_release_gets_its_tier)
{
	int port = hpct_test_ports(8);
	ht_setenv_world(0, 2, 1, port, 1, 5);
	unsetenv("HPCT_NCCL_ROOTLESS");
	hpct_world *w;
	cr_assert_eq(hpct_world_create(&w), 0, "%s", hpct_last_error());
	struct capture log;
	capture_start(&log);
	struct {
		int version;
		enum hpct_nccl_tier tier;
	} cases[] = {
		{ 21803, HPCT_NCCL_TIER_NONE },     { 21903, HPCT_NCCL_TIER_ROOT },
		{ 22203, HPCT_NCCL_TIER_ROOT },     { 22304, HPCT_NCCL_TIER_ROOTLESS },
		{ 22809, HPCT_NCCL_TIER_ROOTLESS }, { 22907, HPCT_NCCL_TIER_ROOTLESS },
		{ 23007, HPCT_NCCL_TIER_ROOTLESS }, { 23203, HPCT_NCCL_TIER_ROOTLESS },
		{ 23300, HPCT_NCCL_TIER_ROOT },     { 24001, HPCT_NCCL_TIER_ROOT },
	};
	struct hpct_nccl_lib fake;
	memset(&fake, 0, sizeof(fake));
	snprintf(fake.path, sizeof(fake.path), "/fake/libnccl.so.2");
	for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		fake.version = cases[i].version;
		cr_expect_eq(hpct__nccl_tier_for(&fake, w), cases[i].tier, "NCCL %d",
		             cases[i].version);
	}
	setenv("HPCT_NCCL_ROOTLESS", "0", 1);
	fake.version = 22809;
	cr_expect_eq(hpct__nccl_tier_for(&fake, w), HPCT_NCCL_TIER_ROOT, "HPCT_NCCL_ROOTLESS=0");
	unsetenv("HPCT_NCCL_ROOTLESS");
	capture_end(&log);
	const char *const newer[] = { "newer than the newest release hpct verified (2.32)",
		                      "NCCL's own root", NULL };
	const char *const first[] = { "NCCL 2.33.0 (/fake/libnccl.so.2) is newer", NULL };
	cr_expect_eq(lines_with(&log, newer), 1, "the newer release, said once per process");
	cr_expect_eq(lines_with(&log, first), 1);
	hpct_world_destroy(w);
}
