/* NCCL, the real libnccl.so.2 that hpct loads (HPCT_NCCL_LIB, NCCL_HOME;
 * no GPU needed for ids and roots).  Suite codec (meson test nccl-codec):
 * loading and the version, the id codec against NCCL's own ids, ids derived
 * alike by every process, the tier each release gets.  Suite roots (meson
 * test nccl-roots, test_nccl_roots.c): hpct's roots against NCCL's. */
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

TestSuite(codec, .timeout = 120);

Test(codec, loads_and_reports_its_version)
{
	int v = 0;
	cr_assert_eq(hpct_nccl_version(&v), 0, "%s", hpct_last_error());
	cr_expect_geq(v, 21900, "version code %d", v);
	cr_expect_eq(hpct_nccl_version(NULL), HPCT_EINVAL);
	/* a matrix run names the release it means to test: the library loaded
	 * must be that one, or every other test here tests another */
	const char *want = getenv("HPCT_NCCL_EXPECT_VERSION");
	if (want)
		cr_assert_eq(v, atoi(want), "HPCT_NCCL_EXPECT_VERSION=%s, but NCCL %d loaded (%s)",
		             want, v, hpct__nccl_lib() ? hpct__nccl_lib()->path : "?");
}

Test(codec, a_missing_library_is_one_clear_error)
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

Test(codec, real_ids_decode_and_reencode_byte_for_byte)
{
	const struct hpct_nccl_lib *l = hpct__nccl_lib();
	cr_assert(l, "%s", hpct_last_error());
	for (int k = 0; k < 3; k++) {
		hpct_nccl_id id, back;
		/* before 2.23 ncclGetUniqueId writes only its 40-byte handle
		 * and leaves the rest of the caller's 128 bytes as they were */
		memset(&id, 0, sizeof(id));
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

Test(codec, codec_layouts_and_bad_input)
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

Test(codec, derived_ids_agree_across_processes)
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
Test(codec, a_secret_keys_the_magic)
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

Test(codec, derivation_checks_its_ports)
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
