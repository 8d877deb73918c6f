/* NCCL, the real libnccl.so.2 of this machine (no GPU needed for ids and
 * roots): the id codec against NCCL's own ids, ids derived alike by every
 * process. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/base/util.h"
#include "bootstrap/nccl/nccl_internal.h"
#include "bootstrap/nccl/player.h"
#include "hpct/nccl.h"
#include "tests/harness.h"

TestSuite(nccl, .timeout = 120);

Test(nccl, loads_and_reports_its_version)
{
	int v = 0;
	cr_assert_eq(hpct_nccl_version(&v), 0, "%s", hpct_last_error());
	cr_expect_geq(v, 21900, "version code %d", v);
	cr_expect_eq(hpct_nccl_version(NULL), HPCT_EINVAL);
}

Test(nccl, a_missing_library_is_one_clear_error)
{
	setenv("HPCT_NCCL_LIB", "/nonexistent/libnccl.so.2", 1);
	int v = 0;
	cr_assert_eq(hpct_nccl_version(&v), HPCT_ENONCCL);
	cr_expect(strstr(hpct_last_error(), "HPCT_NCCL_LIB=/nonexistent/libnccl.so.2"), "%s",
	          hpct_last_error());
	/* decided once per process: asking again gives the same answer */
	unsetenv("HPCT_NCCL_LIB");
	cr_expect_eq(hpct_nccl_version(&v), HPCT_ENONCCL);
}

Test(nccl, real_ids_decode_and_reencode_byte_for_byte)
{
	const struct hpct_nccl_lib *l = hpct__nccl_lib();
	cr_assert(l, "%s", hpct_last_error());
	for (int k = 0; k < 3; k++) {
		hpct_nccl_id id, back;
		cr_assert_eq(l->get_unique_id(&id), 0);
		struct hpct_nccl_id_info in;
		cr_assert_eq(hpct_nccl_id_decode(&id, 0, &in), 0, "%s", hpct_last_error());
		cr_expect(in.family == AF_INET || in.family == AF_INET6);
		cr_expect_neq(in.port, 0u);
		cr_expect_neq(in.magic, 0u);
		cr_expect_eq(in.derived, 0, "a real id is not derived");
		cr_assert_eq(hpct_nccl_id_encode(&in, 0, &back), 0, "%s", hpct_last_error());
		cr_expect_eq(memcmp(&id, &back, sizeof(id)), 0, "id %d differs after a round trip",
		             k);
	}
}

Test(nccl, codec_layouts_and_bad_input)
{
	struct hpct_nccl_id_info in = { .magic = 0x1122334455667788ull,
		                        .host = "fd00::7",
		                        .port = 29500,
		                        .nranks = 96,
		                        .derived = 1 };
	hpct_nccl_id id, id29;
	cr_assert_eq(hpct_nccl_id_encode(&in, 22809, &id), 0);
	cr_assert_eq(hpct_nccl_id_encode(&in, 22900, &id29), 0);
	const unsigned char *b = (const unsigned char *)id.internal;
	uint16_t fam;
	memcpy(&fam, b + 8, 2);
	cr_expect_eq(fam, AF_INET6);
	cr_expect_eq(b[10], 29500 >> 8);
	cr_expect_eq(b[11], 29500 & 0xff);
	int nr;
	memcpy(&nr, id29.internal + 36, 4);
	cr_expect_eq(nr, 96, "2.29 keeps nranks at byte 36");
	cr_expect(hpct_nccl_id_is_derived(&id));
	struct hpct_nccl_id_info out;
	cr_assert_eq(hpct_nccl_id_decode(&id29, 22900, &out), 0);
	cr_expect_str_eq(out.host, "fd00::7");
	cr_expect_eq(out.port, 29500u);
	cr_expect_eq(out.nranks, 96);
	cr_expect_eq(out.magic, in.magic);
	cr_assert_eq(hpct_nccl_id_decode(&id, 22809, &out), 0);
	cr_expect_eq(out.nranks, 0, "2.28 has no nranks field");

	strcpy(in.host, "node-1");
	cr_expect_eq(hpct_nccl_id_encode(&in, 0, &id), HPCT_EINVAL);
	cr_expect(strstr(hpct_last_error(), "node-1"), "%s", hpct_last_error());
	strcpy(in.host, "10.0.0.1");
	in.port = 0;
	cr_expect_eq(hpct_nccl_id_encode(&in, 0, &id), HPCT_EINVAL);
	memset(&id, 0, sizeof(id));
	cr_expect_eq(hpct_nccl_id_decode(&id, 0, &out), HPCT_EINVAL);
	cr_expect_eq(hpct_nccl_id_is_derived(&id), 0);
	cr_expect_eq(hpct_nccl_id_is_derived(NULL), 0);
}

/* --- derived ids, across processes ------------------------------------ */

struct derive_cfg {
	int n, port, epoch;
	int pipe_w;
	const char *secret; /* HPCT_SECRET, or NULL */
};

static void derive_env(int r, void *arg)
{
	struct derive_cfg *c = arg;
	ht_setenv_world(r, c->n, 2, c->port, 1, 10);
	char e[16];
	snprintf(e, sizeof(e), "%d", c->epoch);
	setenv("HPCT_EPOCH", e, 1);
	if (c->secret)
		setenv("HPCT_SECRET", c->secret, 1);
	else
		unsetenv("HPCT_SECRET");
}

/* Each rank writes: its rank, the world's id for key 0 and 1, the ids of
 * every rank, and the id of a subgroup {0, 2} (members only). */
struct derived {
	int rank;
	hpct_nccl_id world0, world1, sub;
	hpct_nccl_id all[4];
};

static int derive_rank(int r, void *arg)
{
	struct derive_cfg *c = arg;
	hpct_world *w;
	if (hpct_world_create(&w) != 0)
		return 2;
	struct derived d;
	memset(&d, 0, sizeof(d));
	d.rank = r;
	hpct_group *g = hpct_world_group(w);
	if (hpct_nccl_derive_id(g, 0, &d.world0) || hpct_nccl_derive_id(g, 1, &d.world1) ||
	    hpct_nccl_derive_ids(g, 0, d.all))
		return 3;
	int members[2] = { 0, 2 };
	hpct_group *sub = NULL;
	if (hpct_group_create(g, members, 2, &sub) != 0)
		return 4;
	if (sub && hpct_nccl_derive_id(sub, 0, &d.sub))
		return 5;
	if (write(c->pipe_w, &d, sizeof(d)) != (ssize_t)sizeof(d))
		return 6;
	hpct_group_destroy(sub);
	hpct_world_destroy(w);
	return 0;
}

static void derive_all(int epoch, int port, const char *secret, struct derived out[4])
{
	int p[2];
	cr_assert_eq(pipe(p), 0);
	struct derive_cfg c = {
		.n = 4, .port = port, .epoch = epoch, .pipe_w = p[1], .secret = secret
	};
	int codes[4];
	int bad = ht_spawn(4, derive_env, derive_rank, &c, 30, NULL, codes);
	close(p[1]);
	cr_assert_eq(bad, 0, "%s", ht_describe(codes, 4));
	for (int i = 0; i < 4; i++) {
		struct derived d;
		cr_assert_eq(read(p[0], &d, sizeof(d)), (ssize_t)sizeof(d));
		out[d.rank] = d;
	}
	close(p[0]);
}

Test(nccl, derived_ids_agree_across_processes)
{
	int port = hpct_test_ports(0);
	struct derived a[4], b[4];
	derive_all(3, port, NULL, a);
	for (int r = 1; r < 4; r++) {
		cr_expect_eq(memcmp(&a[r].world0, &a[0].world0, sizeof(hpct_nccl_id)), 0,
		             "rank %d derived another world id", r);
		cr_expect_eq(memcmp(a[r].all, a[0].all, sizeof(a[0].all)), 0,
		             "rank %d derived other per-rank ids", r);
	}
	cr_expect_eq(memcmp(&a[0].sub, &a[2].sub, sizeof(hpct_nccl_id)), 0);
	cr_expect_neq(memcmp(&a[0].world0, &a[0].world1, sizeof(hpct_nccl_id)), 0,
	              "keys 0 and 1 must differ");
	cr_expect_neq(memcmp(&a[0].world0, &a[0].sub, sizeof(hpct_nccl_id)), 0,
	              "a subgroup's id must differ from the world's");
	/* the comm's rank 0 hosts the root: 127.0.0.1 (node 0); rank 2 of 4 on
	 * 2 nodes is on node 1 */
	struct hpct_nccl_id_info i0, i2;
	cr_assert_eq(hpct_nccl_id_decode(&a[0].world0, 0, &i0), 0);
	cr_assert_eq(hpct_nccl_id_decode(&a[0].all[2], 0, &i2), 0);
	cr_expect_str_eq(i0.host, "127.0.0.1");
	cr_expect_str_eq(i2.host, "127.0.0.2");
	cr_expect(i0.derived && i2.derived);
	cr_expect_eq(memcmp(&a[0].all[0], &a[0].world0, sizeof(hpct_nccl_id)), 0,
	             "rank 0's Tier 2 id is the comm's id");

	derive_all(4, port, NULL, b);
	cr_expect_neq(memcmp(&a[0].world0, &b[0].world0, sizeof(hpct_nccl_id)), 0,
	              "another epoch, another id");
	struct hpct_nccl_id_info j0;
	cr_assert_eq(hpct_nccl_id_decode(&b[0].world0, 0, &j0), 0);
	cr_expect_neq(i0.magic, j0.magic);
}

/* With HPCT_SECRET the magic (all NCCL's sockets check) is keyed by it:
 * ranks with one secret agree, another secret or none gives another magic,
 * and the root's address stays where it was. */
Test(nccl, a_secret_keys_the_magic)
{
	int port = hpct_test_ports(0);
	struct derived none[4], s1[4], s2[4];
	derive_all(3, port, NULL, none);
	derive_all(3, port, "first secret", s1);
	derive_all(3, port, "second secret", s2);
	struct hpct_nccl_id_info in, i1, i1b, i2;
	cr_assert_eq(hpct_nccl_id_decode(&none[0].world0, 0, &in), 0);
	cr_assert_eq(hpct_nccl_id_decode(&s1[0].world0, 0, &i1), 0);
	cr_assert_eq(hpct_nccl_id_decode(&s1[3].world0, 0, &i1b), 0);
	cr_assert_eq(hpct_nccl_id_decode(&s2[0].world0, 0, &i2), 0);
	cr_expect_eq(i1.magic, i1b.magic, "ranks with one secret disagree");
	cr_expect_neq(i1.magic, in.magic, "a secret must change the magic");
	cr_expect_neq(i1.magic, i2.magic, "another secret, another magic");
	cr_expect_str_eq(i1.host, in.host);
	cr_expect_eq(i1.port, in.port);
}

Test(nccl, derivation_checks_its_ports)
{
	int port = hpct_test_ports(1);
	ht_setenv_world(0, 2, 1, port, 1, 5);
	setenv("HPCT_NCCL_PORT_BASE", "65530", 1);
	setenv("HPCT_NCCL_PORT_RANGE", "100", 1);
	hpct_world *w;
	cr_assert_eq(hpct_world_create(&w), 0, "%s", hpct_last_error());
	hpct_nccl_id id;
	cr_expect_eq(hpct_nccl_derive_id(hpct_world_group(w), 0, &id), HPCT_EBADENV);
	cr_expect(strstr(hpct_last_error(), "HPCT_NCCL_PORT_BASE=65530"), "%s", hpct_last_error());
	char base[16];
	snprintf(base, sizeof(base), "%d", port + 2);
	setenv("HPCT_NCCL_PORT_BASE", base, 1);
	cr_expect_eq(hpct_nccl_derive_id(hpct_world_group(w), 0, &id), HPCT_EBADENV);
	cr_expect(strstr(hpct_last_error(), "overlap"), "%s", hpct_last_error());
	hpct_world_destroy(w);
}

/* --- the root protocol: hpct's roots against NCCL's own ---------------- */

static void shuffle(int *order, int n, unsigned seed)
{
	for (int i = 0; i < n; i++)
		order[i] = i;
	for (int i = n - 1; i > 0; i--) {
		seed = seed * 1103515245u + 12345u;
		int j = (int)((seed >> 8) % (unsigned)(i + 1)), t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
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

static void check_ring(const unsigned char *replies, int n, const char *who)
{
	unsigned char want[HPCT_NCCL_RING_LEN];
	for (int r = 0; r < n; r++) {
		hpct__nccl_test_ring((r + 1) % n, want);
		cr_expect_eq(memcmp(replies + (size_t)r * HPCT_NCCL_RING_LEN, want, sizeof(want)),
		             0, "%s: rank %d of %d was not sent rank %d's ring info", who, r, n,
		             (r + 1) % n);
	}
}

/* n ranks over nroots roots, arrival order from seed: NCCL's roots and
 * hpct's answer byte for byte alike. */
static void conformance(int n, int nroots, unsigned seed, int port)
{
	const struct hpct_nccl_lib *l = hpct__nccl_lib();
	cr_assert(l, "%s", hpct_last_error());
	hpct_nccl_id *ids = calloc((size_t)nroots, sizeof(*ids));
	int *order = malloc((size_t)n * sizeof(int));
	unsigned char *real = calloc((size_t)n, HPCT_NCCL_RING_LEN);
	unsigned char *ours = calloc((size_t)n, HPCT_NCCL_RING_LEN);
	shuffle(order, n, seed);

	for (int i = 0; i < nroots; i++)
		cr_assert_eq(l->get_unique_id(&ids[i]), 0); /* each starts a root of NCCL's */
	cr_assert_eq(hpct__nccl_play_ranks(ids, nroots, n, order, 30, 0, l->version, real, NULL), 0,
	             "against NCCL's root: %s", hpct_last_error());
	check_ring(real, n, "NCCL's root");

	struct hpct_nccl_roots *roots;
	loopback_ids(ids, nroots, port, 0x5eed0000u + seed);
	cr_assert_eq(hpct__nccl_roots_start(ids, nroots, n, 30, 0, &roots), 0, "%s",
	             hpct_last_error());
	cr_assert_eq(hpct__nccl_play_ranks(ids, nroots, n, order, 30, 0, l->version, ours, NULL), 0,
	             "against hpct's roots: %s", hpct_last_error());
	struct hpct_nccl_root_stats st;
	cr_assert_eq(hpct__nccl_roots_wait(roots, &st), 0, "%s", hpct_last_error());
	cr_expect_eq(st.ignored, 0);
	cr_expect_eq(st.accepted, n + (nroots > 1 ? nroots : 0));
	cr_expect_eq(memcmp(real, ours, (size_t)n * HPCT_NCCL_RING_LEN), 0,
	             "n=%d roots=%d: hpct's answers differ from NCCL's", n, nroots);
	free(ids);
	free(order);
	free(real);
	free(ours);
}

Test(nccl, one_root_answers_like_nccls)
{
	int port = hpct_test_ports(2);
	int sizes[] = { 1, 2, 3, 8, 64 };
	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		conformance(sizes[i], 1, 17 + i, port + 10 * (int)i);
}

Test(nccl, many_roots_answer_like_nccls)
{
	int port = hpct_test_ports(3);
	conformance(2, 2, 1, port);
	conformance(3, 2, 2, port + 10);
	conformance(8, 3, 3, port + 20);
	conformance(8, 8, 4, port + 40);   /* one rank per root: Tier 2's shape */
	conformance(64, 64, 5, port + 60); /* ports port+60 .. port+123 */
	conformance(64, 7, 6, port + 130);
}

/* Raw bytes to a root, as a stranger would send them. */
static void knock(int port, uint64_t magic, int type, int size, const void *body, size_t len)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in in = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(connect(fd, (struct sockaddr *)&in, sizeof(in)), 0);
	unsigned char h[16];
	memcpy(h, &magic, 8);
	memcpy(h + 8, &type, 4);
	memcpy(h + 12, &size, 4);
	cr_assert_eq(write(fd, h, 16), 16);
	if (len)
		cr_assert_eq(write(fd, body, len), (ssize_t)len);
	close(fd);
}

Test(nccl, roots_ignore_strangers_and_refuse_duplicates)
{
	int port = hpct_test_ports(4);
	hpct_nccl_id id;
	loopback_ids(&id, 1, port, 0xabcdef);
	struct hpct_nccl_roots *roots;
	/* keyed: the stranger with the wrong magic is logged with its address */
	cr_assert_eq(hpct__nccl_roots_start(&id, 1, 2, 20, 1, &roots), 0, "%s", hpct_last_error());
	/* a silent peer holds only its own connection */
	int silent = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in in = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(connect(silent, (struct sockaddr *)&in, sizeof(in)), 0);
	unsigned char body[HPCT_NCCL_REPORT_MAX];
	memset(body, 0x41, sizeof(body));
	knock(port, 0x1234, 1, 172, body, 172);   /* wrong magic */
	knock(port, 0xabcdef, 2, 172, body, 172); /* wrong type */
	knock(port, 0xabcdef, 1, 100, body, 100); /* a length no release sends */
	/* rank 0 of 2 checks in twice (from a listener nobody answers on: the
	 * root answers rank 0 only once rank 1 came, which never happens here) */
	int32_t hdr[4] = { 0, 2, 0, 1 };
	memset(body, 0, sizeof(body));
	memcpy(body, hdr, sizeof(hdr));
	struct sockaddr_in back = in;
	back.sin_port = htons((uint16_t)(port + 1));
	memcpy(body + 16, &back, sizeof(back));
	body[16 + HPCT_NCCL_ADDR_LEN] = 1;
	knock(port, 0xabcdef, 1, 172, body, 172);
	knock(port, 0xabcdef, 1, 172, body, 172);
	/* then nobody else: the deadline names rank 1 */
	struct hpct_nccl_root_stats st;
	double t0 = hpct__now();
	int rc = hpct__nccl_roots_wait(roots, &st); /* deadline 20 s */
	close(silent);
	cr_expect_eq(rc, HPCT_ETIMEDOUT);
	/* only a hang guard: the deadline (20 s) was kept, give or take a minute */
	cr_expect_lt(hpct__now() - t0, 20.0 + 60.0, "the roots hung past their deadline");
	cr_expect(strstr(hpct_last_error(), "not heard from rank 1"), "%s", hpct_last_error());
	cr_expect_eq(st.accepted, 1);
	cr_expect_geq(st.ignored, 4, "wrong magic, type, size and the duplicate: %d", st.ignored);
}

Test(nccl, a_taken_port_fails_fast_naming_it)
{
	int port = hpct_test_ports(5);
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

Test(nccl, a_detached_root_finishes_and_frees_itself)
{
	int port = hpct_test_ports(6);
	hpct_nccl_id ids[4];
	loopback_ids(ids, 4, port, 0x77);
	struct hpct_nccl_roots *roots;
	cr_assert_eq(hpct__nccl_roots_start(ids, 4, 4, 20, 0, &roots), 0, "%s", hpct_last_error());
	hpct__nccl_roots_detach(roots); /* as Tier 2 does once NCCL has the init going */
	unsigned char replies[4 * HPCT_NCCL_RING_LEN];
	cr_assert_eq(hpct__nccl_play_ranks(ids, 4, 4, NULL, 20, 0, hpct__nccl_lib()->version,
	                                   replies, NULL),
	             0, "%s", hpct_last_error());
	check_ring(replies, 4, "detached roots");
	/* answered, so closed: the ports come free */
	double until = hpct__now() + 60; /* a poll: the bound is a hang guard */
	int rc;
	while ((rc = hpct__nccl_port_check(&ids[3])) != 0 && hpct__now() < until)
		usleep(1000);
	cr_expect_eq(rc, 0, "root 3 still listens after answering");
}
