/* What only the libfabric transport has (run with HPCT_TRANSPORT=ofi and
 * IPATH_NO_BACKTRACE=1 from meson; the collectives and faults suites run
 * over it too): an unknown provider is named; libfabric is loaded only when
 * ofi is chosen; endpoint names exchanged over TCP first
 * (HPCT_OFI_EXCHANGE=1, what EFA and verbs need) with every result checked
 * and all traffic after on the fabric; a rank's memory stays small; a
 * connect given up before its answer came closes the acceptor's side at
 * once (a FIN when the answer comes), not after the transport's 30 s. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/base/sock.h"
#include "bootstrap/base/util.h"
#include "hpct/hpct.h"
#include "tests/harness.h"
#include "transport/transport.h"

TestSuite(ofi, .timeout = 120);

struct cfg {
	int n, nodes, port;
	const char *transport, *provider, *exchange;
};

static void env_cb(int r, void *arg)
{
	struct cfg *c = arg;
	ht_setenv_world(r, c->n, c->nodes, c->port, 1, 20);
	setenv("HPCT_TRANSPORT", c->transport, 1);
	if (c->provider)
		setenv("HPCT_OFI_PROVIDER", c->provider, 1);
	else
		unsetenv("HPCT_OFI_PROVIDER");
	if (c->exchange)
		setenv("HPCT_OFI_EXCHANGE", c->exchange, 1);
	else
		unsetenv("HPCT_OFI_EXCHANGE");
}

/* 1 when this process has libfabric mapped. */
static int fabric_loaded(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int found = 0;
	while (f && !found && fgets(line, sizeof(line), f))
		found = strstr(line, "libfabric") != NULL;
	if (f)
		fclose(f);
	return found;
}

static int bad_provider_main(int r, void *arg)
{
	(void)r;
	(void)arg;
	hpct_world *w = NULL;
	int rc = hpct_world_create(&w);
	if (rc != HPCT_EBADENV) {
		fprintf(stderr, "got %s: %s\n", hpct_errname(rc), hpct_last_error());
		hpct_world_destroy(w);
		return 10;
	}
	if (!strstr(hpct_last_error(), "HPCT_OFI_PROVIDER=nonesuch")) {
		fprintf(stderr, "not named: %s\n", hpct_last_error());
		return 11;
	}
	return 0;
}

Test(ofi, unknown_provider_is_named)
{
	struct cfg c = { .n = 1,
		         .nodes = 1,
		         .port = hpct_test_ports(0),
		         .transport = "ofi",
		         .provider = "nonesuch" };
	int code;
	ht_spawn(1, env_cb, bad_provider_main, &c, 60, NULL, &code);
	cr_expect_eq(code, 0, "exited %d", code);
}

/* A 1-rank world: libfabric mapped exactly when the transport is ofi. */
static int loaded_main(int r, void *arg)
{
	(void)r;
	struct cfg *c = arg;
	hpct_world *w;
	if (hpct_world_create(&w) != 0) {
		fprintf(stderr, "%s\n", hpct_last_error());
		return 2;
	}
	int want = strcmp(c->transport, "ofi") == 0, got = fabric_loaded();
	hpct_world_destroy(w);
	if (got != want) {
		fprintf(stderr, "HPCT_TRANSPORT=%s: libfabric %s\n", c->transport,
		        got ? "loaded" : "not loaded");
		return 20;
	}
	return 0;
}

Test(ofi, libfabric_loaded_only_for_ofi)
{
	const char *which[2] = { "tcp", "ofi" };
	for (int i = 0; i < 2; i++) {
		struct cfg c = {
			.n = 1, .nodes = 1, .port = hpct_test_ports(1), .transport = which[i]
		};
		int code;
		ht_spawn(1, env_cb, loaded_main, &c, 60, NULL, &code);
		cr_expect_eq(code, 0, "HPCT_TRANSPORT=%s: exited %d", which[i], code);
	}
}

/* 1 when nothing listens at this rank's derived address (a TCP bind
 * there succeeds, TIME_WAIT allowed). */
static int derived_port_free(hpct_world *w, int r)
{
	char addr[HPCT_ADDRSTRLEN];
	if (hpct_world_peer_addr(w, r, addr) != 0)
		return 0;
	char *colon = strrchr(addr, ':');
	*colon = 0;
	struct sockaddr_in a = { .sin_family = AF_INET,
		                 .sin_port = htons((uint16_t)atoi(colon + 1)) };
	inet_pton(AF_INET, addr, &a.sin_addr);
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	/* connections it accepted may linger in TIME_WAIT; a listener may not */
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	int ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

/* Names exchanged over TCP during hpct_world_create, whose engine then
 * closes: the fabric engine starts with nothing sent, and carries what
 * follows.  Results checked; a rank stays within a few MB of fabric. */
static int exchange_main(int r, void *arg)
{
	struct cfg *c = arg;
	hpct_world *w;
	if (hpct_world_create(&w) != 0) {
		fprintf(stderr, "rank %d: %s\n", r, hpct_last_error());
		return 2;
	}
	/* the TCP engine at the derived address is gone; the fabric endpoint
	 * is where the provider put it */
	if (!derived_port_free(w, r)) {
		fprintf(stderr, "rank %d: something still listens at its derived address\n", r);
		return 35;
	}
	struct hpct_world_stats st;
	hpct_world_get_stats(w, &st);
	if (st.msgs_sent != 0 || st.conns_opened + st.conns_accepted != 0) {
		fprintf(stderr, "rank %d: the fabric engine had traffic before any collective\n",
		        r);
		return 30;
	}
	hpct_group *g = hpct_world_group(w);
	int item = 1000 + r, all[64];
	int rc = hpct_allgather(g, &item, sizeof(item), all);
	for (int i = 0; i < c->n && rc == 0; i++)
		if (all[i] != 1000 + i)
			rc = 31;
	if (rc == 0)
		rc = hpct_barrier(g);
	hpct_world_get_stats(w, &st);
	long kb = ht_rss_kb();
	int loaded = fabric_loaded();
	hpct_world_destroy(w);
	if (rc) {
		fprintf(stderr, "rank %d: %d %s\n", r, rc, hpct_last_error());
		return 32;
	}
	if (st.msgs_sent == 0 || !loaded)
		return 33; /* the collectives did not go over the fabric */
	if (kb > 64 * 1024) {
		fprintf(stderr, "rank %d: %ld kB resident\n", r, kb);
		return 34;
	}
	return 0;
}

Test(ofi, names_exchanged_first_n8)
{
	struct cfg c = {
		.n = 8, .nodes = 2, .port = hpct_test_ports(2), .transport = "ofi", .exchange = "1"
	};
	int codes[8];
	int bad = ht_spawn(8, env_cb, exchange_main, &c, 90, NULL, codes);
	cr_expect_eq(bad, 0, "%s", ht_describe(codes, 8));
}

/* Messages of many fragments (a 20000-byte item per rank gathered by all,
 * a 1 MB broadcast): pieces of large and small fabric messages overtake
 * each other in the provider and must still be put together in order. */
static int large_main(int r, void *arg)
{
	struct cfg *c = arg;
	hpct_world *w;
	if (hpct_world_create(&w) != 0) {
		fprintf(stderr, "rank %d: %s\n", r, hpct_last_error());
		return 2;
	}
	hpct_group *g = hpct_world_group(w);
	enum { ITEM = 20000, BIG = 1 << 20 };
	unsigned char *item = malloc(ITEM), *all = malloc((size_t)ITEM * c->n), *big = malloc(BIG);
	for (int i = 0; i < ITEM; i++)
		item[i] = (unsigned char)(r * 31 + i * 7);
	int rc = hpct_allgather(g, item, ITEM, all);
	for (int k = 0; k < c->n && rc == 0; k++)
		for (int i = 0; i < ITEM && rc == 0; i++)
			if (all[(size_t)k * ITEM + i] != (unsigned char)(k * 31 + i * 7))
				rc = 40;
	for (int i = 0; i < BIG; i++)
		big[i] = r == 1 ? (unsigned char)(i * 13 + i / 4096) : 0;
	if (rc == 0)
		rc = hpct_broadcast(g, big, BIG, 1);
	for (int i = 0; i < BIG && rc == 0; i++)
		if (big[i] != (unsigned char)(i * 13 + i / 4096))
			rc = 41;
	if (rc)
		fprintf(stderr, "rank %d: %d %s\n", r, rc,
		        rc < 0 ? hpct_last_error() : "bad bytes");
	free(item);
	free(all);
	free(big);
	hpct_world_destroy(w);
	return rc ? 42 : 0;
}

Test(ofi, large_messages_in_pieces_n4)
{
	struct cfg c = { .n = 4, .nodes = 2, .port = hpct_test_ports(3), .transport = "ofi" };
	int codes[4];
	int bad = ht_spawn(4, env_cb, large_main, &c, 90, NULL, codes);
	cr_expect_eq(bad, 0, "%s", ht_describe(codes, 4));
}

/* In-process recovery moves the listener, which an ofi endpoint cannot:
 * refused, saying what to use, and the world is left as it was. */
static int recover_main(int r, void *arg)
{
	(void)r;
	(void)arg;
	hpct_world *w;
	if (hpct_world_create(&w) != 0)
		return 2;
	int rc = hpct_world_recover(w, 1, NULL, 0);
	int ok = rc != 0 && strstr(hpct_last_error(), "HPCT_TRANSPORT=tcp");
	if (!ok)
		fprintf(stderr, "recover over ofi: %d %s\n", rc, hpct_last_error());
	int item = 5, all[1];
	if (ok && hpct_allgather(hpct_world_group(w), &item, sizeof(item), all) != 0)
		ok = 0; /* still usable at its epoch */
	hpct_world_destroy(w);
	return ok ? 0 : 50;
}

Test(ofi, recovery_needs_tcp)
{
	struct cfg c = { .n = 1, .nodes = 1, .port = hpct_test_ports(4), .transport = "ofi" };
	int code;
	ht_spawn(1, env_cb, recover_main, &c, 60, NULL, &code);
	cr_expect_eq(code, 0, "exited %d", code);
}

/* Other providers addressed by IP and port: the same join and results. */
static int provider_main(int r, void *arg)
{
	struct cfg *c = arg;
	hpct_world *w;
	if (hpct_world_create(&w) != 0) {
		fprintf(stderr, "%s rank %d: %s\n", c->provider, r, hpct_last_error());
		return 2;
	}
	int item = 77 * r + 1, all[8];
	int rc = hpct_allgather(hpct_world_group(w), &item, sizeof(item), all);
	for (int i = 0; i < c->n && rc == 0; i++)
		if (all[i] != 77 * i + 1)
			rc = 60;
	if (rc == 0)
		rc = hpct_barrier(hpct_world_group(w));
	if (rc)
		fprintf(stderr, "%s rank %d: %d %s\n", c->provider, r, rc, hpct_last_error());
	hpct_world_destroy(w);
	return rc ? 61 : 0;
}

Test(ofi, providers_net_and_sockets_n4)
{
	const char *provs[2] = { "net", "sockets" };
	for (int i = 0; i < 2; i++) {
		struct cfg c = { .n = 4,
			         .nodes = 2,
			         .port = hpct_test_ports(5 + i),
			         .transport = "ofi",
			         .provider = provs[i] };
		int codes[4];
		int bad = ht_spawn(4, env_cb, provider_main, &c, 90, NULL, codes);
		cr_expect_eq(bad, 0, "HPCT_OFI_PROVIDER=%s: %s", provs[i], ht_describe(codes, 4));
	}
}

/* Two endpoints of the transport in one process: A connects to B and
 * closes the connection once its SYN is out, before B has read it.  B
 * accepts, answers; A answers that with a FIN: B's side is closed by the
 * peer (err 0), long before B would close it as never identified (30 s,
 * -ETIMEDOUT). */
struct seen {
	int accepted, closed, closed_err, connected, failed;
	struct hpct_tconn *in;
};

static void seen_cb(void *arg, const struct hpct_tevent *ev)
{
	struct seen *s = arg;
	switch (ev->type) {
	case HPCT_TEV_ACCEPTED:
		s->accepted++;
		s->in = ev->conn;
		break;
	case HPCT_TEV_CLOSED:
		s->closed++;
		s->closed_err = ev->err;
		break;
	case HPCT_TEV_CONNECTED:
		s->connected++;
		break;
	case HPCT_TEV_CONNECT_FAILED:
		s->failed++;
		break;
	default:
		break;
	}
}

static int abandon_main(int r, void *arg)
{
	(void)r;
	const struct cfg *c = arg;
	const struct hpct_transport_ops *ops = hpct_transport_find("ofi");
	void *a = NULL, *b = NULL;
	if (!ops)
		return 69;
	struct sockaddr_in sa = { .sin_family = AF_INET }, sb = { .sin_family = AF_INET };
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	sb.sin_addr = sa.sin_addr;
	sa.sin_port = htons((uint16_t)(c->port + 150));
	sb.sin_port = htons((uint16_t)(c->port + 151));
	if (ops->create(&a) != 0 || ops->create(&b) != 0 ||
	    ops->listen(a, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    ops->listen(b, (struct sockaddr *)&sb, sizeof(sb)) != 0) {
		fprintf(stderr, "endpoints: %s\n", ops->why ? ops->why() : "");
		return 70;
	}
	struct seen sa_seen = { 0 }, sb_seen = { 0 };
	struct hpct_tconn *out = NULL;
	if (ops->connect(a, (struct sockaddr *)&sb, sizeof(sb), NULL, &out) != 0)
		return 71;
	/* A, then B (its provider takes the connection), until A's SYN has
	 * left A's queue: B has had no turn since, so it has not answered */
	double until = hpct__now() + 10;
	for (;;) {
		ops->progress(a, 0, seen_cb, &sa_seen);
		if (ops->pending(out) == 0 || sa_seen.failed || sa_seen.connected ||
		    hpct__now() > until)
			break;
		ops->progress(b, 0, seen_cb, &sb_seen);
	}
	if (sa_seen.failed || sa_seen.connected || ops->pending(out) > 0) {
		fprintf(stderr, "A's SYN: failed %d, connected %d, %zu bytes still queued\n",
		        sa_seen.failed, sa_seen.connected, ops->pending(out));
		return 72;
	}
	ops->close(out);
	until = hpct__now() + 10;
	while (!sb_seen.closed && hpct__now() < until) {
		ops->progress(b, 1, seen_cb, &sb_seen);
		ops->progress(a, 1, seen_cb, &sa_seen);
	}
	fprintf(stderr, "B: accepted %d, closed %d (err %d); A after its close: %d events\n",
	        sb_seen.accepted, sb_seen.closed, sb_seen.closed_err,
	        sa_seen.connected + sa_seen.failed + sa_seen.closed + sa_seen.accepted);
	int rc = sb_seen.accepted != 1                                 ? 73
	         : !sb_seen.closed                                     ? 74
	         : sb_seen.closed_err                                  ? 75
	         : sa_seen.connected + sa_seen.failed + sa_seen.closed ? 76
	                                                               : 0;
	ops->destroy(a);
	ops->destroy(b);
	return rc;
}

Test(ofi, a_connect_given_up_before_its_answer_closes_the_acceptors_side)
{
	struct cfg c = { .n = 1, .nodes = 1, .port = hpct_test_ports(4), .transport = "ofi" };
	int code;
	ht_spawn(1, env_cb, abandon_main, &c, 60, NULL, &code);
	cr_expect_eq(code, 0, "exited %d", code);
}
