/* Handshake and message codecs, derivation, error names. */
#include <criterion/criterion.h>
#include <string.h>

#include "bootstrap/base/util.h"
#include "bootstrap/base/wire.h"
#include "bootstrap/topo/derive.h"
#include "hpct/hpct.h"

Test(wire, hello_roundtrip)
{
	struct hpct_hello h = { .type = HPCT_HELLO,
		                .job = 0x1122334455667788ULL,
		                .epoch = 9,
		                .group = 0xdeadbeefcafef00dULL,
		                .src = 7,
		                .dst = 12,
		                .size = 64,
		                .reason = 0 };
	unsigned char buf[HPCT_HELLO_LEN];
	hpct__hello_encode(&h, buf);
	/* big-endian on the wire, whatever the host */
	cr_assert_eq(memcmp(buf, "HPCT", 4), 0);
	cr_assert_eq(buf[8], 0x11);
	struct hpct_hello d;
	cr_assert_eq(hpct__hello_decode(buf, sizeof(buf), &d), 0);
	cr_assert_eq(d.job, h.job);
	cr_assert_eq(d.epoch, 9);
	cr_assert_eq(d.group, h.group);
	cr_assert_eq(d.src, 7);
	cr_assert_eq(d.dst, 12);
	cr_assert_eq(d.size, 64);
}

Test(wire, hello_rejects_garbage)
{
	struct hpct_hello h = { .type = HPCT_HELLO_ACK };
	unsigned char buf[HPCT_HELLO_LEN];
	hpct__hello_encode(&h, buf);
	struct hpct_hello d;
	cr_assert_eq(hpct__hello_decode(buf, sizeof(buf) - 1, &d), HPCT_EPROTO);
	buf[0] = 'X';
	cr_assert_eq(hpct__hello_decode(buf, sizeof(buf), &d), HPCT_EPROTO);
	hpct__hello_encode(&h, buf);
	buf[5] = 99; /* version */
	cr_assert_eq(hpct__hello_decode(buf, sizeof(buf), &d), HPCT_EPROTO);
	hpct__hello_encode(&h, buf);
	buf[7] = 9; /* type */
	cr_assert_eq(hpct__hello_decode(buf, sizeof(buf), &d), HPCT_EPROTO);
}

/* With a shared secret: a handshake frame carries a nonce and a MAC; the
 * MAC depends on the secret, who gives it, both nonces, job, epoch, group
 * and both ranks, so a proof cannot be replayed for another connection. */
Test(wire, auth_frames_and_proofs)
{
	cr_assert(hpct__auth_available(), "libcrypto.so.3 could not be loaded");
	struct hpct_hello h = { .type = HPCT_HELLO_CHALLENGE,
		                .job = 1,
		                .epoch = 2,
		                .group = 3,
		                .src = 4,
		                .dst = 5,
		                .size = 8 };
	unsigned char frame[HPCT_AUTH_LEN], nonce[HPCT_AUTH_NONCE], mac[HPCT_AUTH_MAC];
	unsigned char n1[HPCT_AUTH_NONCE], n2[HPCT_AUTH_NONCE], got_n[HPCT_AUTH_NONCE],
	        got_m[HPCT_AUTH_MAC];
	hpct__random(n1, sizeof(n1));
	hpct__random(n2, sizeof(n2));
	cr_assert(memcmp(n1, n2, sizeof(n1)) != 0, "two nonces alike");
	cr_assert_eq(hpct__auth_mac("k", 1, 'A', n1, n2, &h, 4, 5, mac), 0);
	hpct__hello_encode(&h, frame);
	memcpy(frame + HPCT_HELLO_LEN, n1, HPCT_AUTH_NONCE);
	memcpy(frame + HPCT_HELLO_LEN + HPCT_AUTH_NONCE, mac, HPCT_AUTH_MAC);
	struct hpct_hello d;
	cr_assert_eq(hpct__hello_decode_auth(frame, sizeof(frame), &d, got_n, got_m), 0);
	cr_assert_eq(d.type, HPCT_HELLO_CHALLENGE);
	cr_assert(memcmp(got_n, n1, sizeof(n1)) == 0 && hpct__auth_equal(got_m, mac));
	/* a plain HELLO-sized frame still decodes, with no nonce or MAC */
	cr_assert_eq(hpct__hello_decode_auth(frame, HPCT_HELLO_LEN, &d, got_n, got_m), 0);
	memset(nonce, 0, sizeof(nonce));
	cr_assert(memcmp(got_n, nonce, sizeof(nonce)) == 0);
	/* any other length is not a handshake */
	cr_assert_eq(hpct__hello_decode_auth(frame, HPCT_AUTH_LEN - 1, &d, NULL, NULL),
	             HPCT_EPROTO);
	cr_assert_eq(hpct__hello_decode_auth(frame, HPCT_HELLO_LEN + 1, &d, NULL, NULL),
	             HPCT_EPROTO);

	unsigned char other[HPCT_AUTH_MAC];
	struct hpct_hello h2 = h;
	cr_assert_eq(hpct__auth_mac("K", 1, 'A', n1, n2, &h, 4, 5, other), 0);
	cr_assert(!hpct__auth_equal(mac, other), "another secret, the same proof");
	cr_assert_eq(hpct__auth_mac("k", 1, 'C', n1, n2, &h, 4, 5, other), 0);
	cr_assert(!hpct__auth_equal(mac, other), "the connector's proof is the acceptor's");
	cr_assert_eq(hpct__auth_mac("k", 1, 'A', n2, n1, &h, 4, 5, other), 0);
	cr_assert(!hpct__auth_equal(mac, other), "nonces swapped, the same proof");
	cr_assert_eq(hpct__auth_mac("k", 1, 'A', n1, n2, &h, 5, 4, other), 0);
	cr_assert(!hpct__auth_equal(mac, other), "ranks swapped, the same proof");
	h2.group = 9;
	cr_assert_eq(hpct__auth_mac("k", 1, 'A', n1, n2, &h2, 4, 5, other), 0);
	cr_assert(!hpct__auth_equal(mac, other), "another group, the same proof");
	h2 = h;
	h2.epoch = 3;
	cr_assert_eq(hpct__auth_mac("k", 1, 'A', n1, n2, &h2, 4, 5, other), 0);
	cr_assert(!hpct__auth_equal(mac, other), "another epoch, the same proof");
	cr_assert_eq(hpct__auth_mac("k", 1, 'A', n1, n2, &h, 4, 5, other), 0);
	cr_assert(hpct__auth_equal(mac, other), "the same inputs, another proof");
}

Test(wire, msg_header_and_abort)
{
	struct hpct_msg_hdr h = { .type = HPCT_MSG_DATA, .round = 513, .seq = 70000, .group = 42 };
	unsigned char buf[HPCT_MSG_HDR_LEN];
	hpct__msg_hdr_encode(&h, buf);
	struct hpct_msg_hdr d;
	cr_assert_eq(hpct__msg_hdr_decode(buf, sizeof(buf), &d), 0);
	cr_assert_eq(d.round, 513);
	cr_assert_eq(d.seq, 70000);
	cr_assert_eq(d.group, 42);
	cr_assert_eq(hpct__msg_hdr_decode(buf, 15, &d), HPCT_EPROTO);
	buf[0] = 3;
	cr_assert_eq(hpct__msg_hdr_decode(buf, sizeof(buf), &d), HPCT_EPROTO);
	/* every known type decodes (a probe and its answer too), nothing past */
	for (int t = HPCT_MSG_DATA; t <= HPCT_MSG_PONG + 1; t++) {
		buf[0] = (unsigned char)t;
		int rc = hpct__msg_hdr_decode(buf, sizeof(buf), &d);
		cr_assert_eq(rc, t <= HPCT_MSG_PONG ? 0 : HPCT_EPROTO, "type %d: %d", t, rc);
		cr_assert(rc || d.type == t);
	}
	buf[0] = HPCT_MSG_DATA - 1;
	cr_assert_eq(hpct__msg_hdr_decode(buf, sizeof(buf), &d), HPCT_EPROTO);

	struct hpct_abort a = { .code = HPCT_EPEERDEAD, .origin = 5, .culprit = -1 };
	strcpy(a.text, "rank 5: rank 7 died");
	unsigned char ab[12 + 256];
	size_t n = hpct__abort_encode(&a, ab);
	struct hpct_abort b;
	cr_assert_eq(hpct__abort_decode(ab, n, &b), 0);
	cr_assert_eq(b.code, HPCT_EPEERDEAD);
	cr_assert_eq(b.culprit, -1);
	cr_assert_str_eq(b.text, a.text);
	cr_assert_eq(hpct__abort_decode(ab, 11, &b), HPCT_EPROTO);
	cr_assert_eq(hpct__abort_decode(ab, 12 + 300, &b), HPCT_EPROTO);
}

static struct hpct_topo topo(uint64_t epoch, int base, int range, int per)
{
	static int local[8] = { 0, 1, 2, 3, 0, 1, 2, 3 };
	struct hpct_topo t = { .size = 8,
		               .max_local = per,
		               .local_of = local,
		               .port_base = base,
		               .port_range = range,
		               .epoch = epoch };
	t.job = hpct__hash("job-a", 5, 0);
	return t;
}

Test(derive, ports_rotate_with_epoch_and_stay_in_range)
{
	for (uint64_t e = 0; e < 50; e++) {
		struct hpct_topo a = topo(e, 10000, 64, 4), b = topo(e + 1, 10000, 64, 4);
		for (int r = 0; r < 8; r++) {
			int p = hpct__derive_port(&a, r);
			cr_assert(p >= 10000 && p < 10064, "port %d out of range", p);
			/* never the same port as the next epoch's, for any rank */
			for (int s = 0; s < 8; s++)
				cr_assert_neq(p, hpct__derive_port(&b, s));
		}
		/* ranks on one node differ, ranks of two nodes may share */
		cr_assert_neq(hpct__derive_port(&a, 0), hpct__derive_port(&a, 1));
		cr_assert_eq(hpct__derive_port(&a, 0), hpct__derive_port(&a, 4));
	}
}

Test(derive, groups_are_deterministic_and_distinct)
{
	int m1[] = { 1, 3, 5 }, m2[] = { 1, 3, 6 };
	uint64_t j = hpct__hash("job", 3, 0);
	uint64_t a = hpct__derive_group(j, 2, 77, 0, m1, 3);
	cr_assert_eq(a, hpct__derive_group(j, 2, 77, 0, m1, 3));
	cr_assert_neq(a, hpct__derive_group(j, 3, 77, 0, m1, 3));     /* epoch */
	cr_assert_neq(a, hpct__derive_group(j, 2, 77, 1, m1, 3));     /* counter */
	cr_assert_neq(a, hpct__derive_group(j, 2, 78, 0, m1, 3));     /* parent */
	cr_assert_neq(a, hpct__derive_group(j, 2, 77, 0, m2, 3));     /* members */
	cr_assert_neq(a, hpct__derive_group(j + 1, 2, 77, 0, m1, 3)); /* job */
	cr_assert_neq(hpct__derive_world_group(j, 0, 8), hpct__derive_world_group(j, 1, 8));
	/* a fixed value: every host and build must agree */
	cr_assert_eq(hpct__hash("hpct", 4, 0), hpct__hash("hpct", 4, 0));
	cr_assert_neq(hpct__hash("hpct", 4, 0), hpct__hash("hpct", 4, 1));
}

Test(errors, every_code_has_a_name_and_message)
{
#define CHECK(name, value, msg)                                     \
	cr_assert_str_eq(hpct_errname(HPCT_##name), "HPCT_" #name); \
	cr_assert_str_eq(hpct_strerror(HPCT_##name), msg);
	HPCT_ERROR_MAP(CHECK)
#undef CHECK
	cr_assert_str_eq(hpct_errname(-111), "ECONNREFUSED");
	cr_assert_str_eq(hpct_strerror(0), "success");
	cr_assert_str_eq(hpct_errname(-99999), "UNKNOWN");
}
