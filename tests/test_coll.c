/* Multi-process collectives over loopback, both paths, checked byte for
 * byte.  Each child reports through its exit code: 0 ok, otherwise the
 * number of the check that failed. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpct/hpct.h"
#include "tests/harness.h"

struct cfg {
	int n, nodes, port, rootless;
	double timeout;
	const char *algo; /* HPCT_ALGO, NULL for the default */
	int ipv6;         /* one node at ::1, the rendezvous there too */
};

static void env_cb(int r, void *arg)
{
	struct cfg *c = arg;
	ht_setenv_world(r, c->n, c->nodes, c->port, c->rootless, c->timeout);
	if (c->algo)
		setenv("HPCT_ALGO", c->algo, 1);
	if (c->ipv6) {
		setenv("HPCT_HOSTS", "::1", 1);
		setenv("MASTER_ADDR", "::1", 1);
	}
}

static void item_of(int rank, int salt, unsigned char *buf, size_t len)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = (unsigned char)(rank * 131 + (int)i * 7 + salt);
}

static int ceil_log2(int n)
{
	int k = 0;
	while ((1 << k) < n)
		k++;
	return k;
}

/* The checks every rank runs on a group of size n where it is rank r. */
static int exercise(hpct_group *g, int salt)
{
	int n = hpct_group_size(g), r = hpct_group_rank(g);
	enum { SZ = 24 };
	unsigned char item[SZ], want[SZ];
	unsigned char *all = malloc((size_t)n * SZ);
	item_of(hpct_group_world_rank(g, r), salt, item, SZ);
	if (hpct_allgather(g, item, SZ, all) != 0)
		return 10;
	for (int i = 0; i < n; i++) {
		item_of(hpct_group_world_rank(g, i), salt, want, SZ);
		if (memcmp(all + (size_t)i * SZ, want, SZ) != 0)
			return 11;
	}
	if (hpct_barrier(g) != 0)
		return 12;
	for (int root = 0; root < n; root += (n > 4 ? n / 3 : 1)) {
		unsigned char b[100], bwant[100];
		if (r == root)
			item_of(root, salt + 1, b, sizeof(b));
		else
			memset(b, 0, sizeof(b));
		if (hpct_broadcast(g, b, sizeof(b), root) != 0)
			return 13;
		item_of(root, salt + 1, bwant, sizeof(bwant)); /* every byte, not the first 24 */
		if (memcmp(b, bwant, sizeof(b)) != 0)
			return 14;
	}
	uint64_t *send = malloc((size_t)n * 8), *recv = malloc((size_t)n * 8);
	for (int j = 0; j < n; j++)
		send[j] = (uint64_t)r * 100000u + (uint64_t)j + (uint64_t)salt;
	if (hpct_alltoall(g, send, 8, recv) != 0)
		return 15;
	for (int i = 0; i < n; i++)
		if (recv[i] != (uint64_t)i * 100000u + (uint64_t)r + (uint64_t)salt)
			return 16;
	if (hpct_barrier(g) != 0)
		return 17;
	free(send);
	free(recv);
	free(all);
	return 0;
}

static int rank_main(int r, void *arg)
{
	struct cfg *c = arg;
	(void)r;
	hpct_world *w;
	if (hpct_world_create(&w) != 0)
		return 2;
	struct hpct_world_info info;
	hpct_world_get_info(w, &info);
	if (info.path != (c->rootless ? HPCT_PATH_ROOTLESS : HPCT_PATH_STANDARD))
		return 3;
	hpct_group *world = hpct_world_group(w);
	/* The bound of the issue, for what the benchmark runs: a world
	 * allgather and a barrier open at most 2*ceil(log2 N)+2 links a rank. */
	uint64_t mine = (uint64_t)info.rank, *all = malloc((size_t)c->n * 8);
	if (hpct_allgather(world, &mine, 8, all) != 0 || hpct_barrier(world) != 0)
		return 4;
	for (int i = 0; i < c->n; i++)
		if (all[i] != (uint64_t)i)
			return 5;
	free(all);
	struct hpct_world_stats st;
	hpct_world_get_stats(w, &st);
	if (c->rootless && (int)(st.conns_opened + st.conns_accepted) > 2 * ceil_log2(c->n) + 2)
		return 98;
	int rc = exercise(world, 0);
	if (rc)
		return rc;
	/* Subgroups: the odd ranks, and {0, last}; everyone makes both calls. */
	int n = c->n, odd[1024], k = 0;
	for (int i = 1; i < n; i += 2)
		odd[k++] = i;
	hpct_group *g1 = NULL, *g2 = NULL;
	if (k > 0) {
		if (hpct_group_create(world, odd, k, &g1) != 0)
			return 20;
		if ((g1 != NULL) != (info.rank % 2 == 1))
			return 21;
	}
	int ends[2] = { 0, n - 1 };
	if (n > 1) {
		if (hpct_group_create(world, ends, 2, &g2) != 0)
			return 22;
		if ((g2 != NULL) != (info.rank == 0 || info.rank == n - 1))
			return 23;
	}
	if (g1 && (rc = exercise(g1, 3)) != 0)
		return 30 + rc;
	if (g2 && (rc = exercise(g2, 5)) != 0)
		return 60 + rc;
	if (g1 && g2 && hpct_group_id(g1) == hpct_group_id(g2))
		return 24;
	hpct_group_destroy(g1);
	hpct_group_destroy(g2);
	/* the world is still good after subgroups came and went */
	if ((rc = exercise(world, 9)) != 0)
		return 90 + rc % 10;
	/* Broadcasts from every root and Bruck's alltoall talk to ranks 2^k
	 * away, the tree to ranks j*4^l away: still O(log N) in all. */
	hpct_world_get_stats(w, &st);
	if (c->rootless && (int)(st.conns_opened + st.conns_accepted) > 4 * ceil_log2(n) + 4)
		return 99;
	hpct_world_destroy(w);
	return 0;
}

static void run_algo(int n, int nodes, int slot, int rootless, const int *delays, const char *algo)
{
	struct cfg c = { .n = n,
		         .nodes = nodes,
		         .port = hpct_test_ports(slot),
		         .rootless = rootless,
		         .timeout = n > 256 ? 300 : 60, /* hang guards: 1024 ASan ranks share 2 cores */
		         .algo = algo };
	int *codes = calloc((size_t)n, sizeof(int));
	int bad = ht_spawn(n, env_cb, rank_main, &c, n > 256 ? 600 : 120, delays, codes);
	cr_assert_eq(bad, 0, "N=%d %s%s%s: %s", n, rootless ? "rootless" : "standard",
	             algo ? " " : "", algo ? algo : "", ht_describe(codes, n));
	free(codes);
}

static void run(int n, int nodes, int slot, int rootless, const int *delays)
{
	run_algo(n, nodes, slot, rootless, delays, NULL);
}

Test(rootless, n2)
{
	run(2, 1, 0, 1, NULL);
}
Test(rootless, n3_two_nodes)
{
	run(3, 2, 1, 1, NULL);
}
Test(rootless, n7_three_nodes)
{
	run(7, 3, 2, 1, NULL);
}
Test(rootless, n64_four_nodes, .timeout = 200)
{
	run(64, 4, 3, 1, NULL);
}
Test(rootless, n256_four_nodes, .timeout = 300)
{
	run(256, 4, 4, 1, NULL);
}
/* 16 nodes of 64: the ports of a node's 64 ranks (and their epoch's window)
 * fit one slot of the test range */
Test(rootless, n1024_sixteen_nodes, .timeout = 900)
{
	run(1024, 16, 17, 1, NULL);
}
Test(rootless, n1)
{
	run(1, 1, 5, 1, NULL);
}

Test(rootless, staggered_starts, .timeout = 200)
{
	int delays[7] = { 2500, 0, 1200, 300, 0, 2000, 700 };
	run(7, 2, 6, 1, delays);
}

Test(standard, n2)
{
	run(2, 1, 7, 0, NULL);
}
Test(standard, n7_three_nodes)
{
	run(7, 3, 8, 0, NULL);
}
Test(standard, n64, .timeout = 200)
{
	run(64, 4, 9, 0, NULL);
}

Test(standard, staggered_starts, .timeout = 200)
{
	int delays[5] = { 1500, 0, 800, 0, 300 };
	run(5, 1, 10, 0, delays);
}

Test(bruck, n2)
{
	run_algo(2, 1, 11, 1, NULL, "bruck");
}
Test(bruck, n7_three_nodes)
{
	run_algo(7, 3, 12, 1, NULL, "bruck");
}
Test(bruck, n64_four_nodes, .timeout = 200)
{
	run_algo(64, 4, 13, 1, NULL, "bruck");
}
Test(bruck, staggered_starts, .timeout = 200)
{
	int delays[6] = { 0, 1500, 200, 900, 0, 400 };
	run_algo(6, 2, 14, 1, delays, "bruck");
}

static void run_ipv6(int slot, int rootless)
{
	struct cfg c = { .n = 5,
		         .nodes = 1,
		         .port = hpct_test_ports(slot),
		         .rootless = rootless,
		         .timeout = 60,
		         .ipv6 = 1 };
	int codes[5];
	int bad = ht_spawn(5, env_cb, rank_main, &c, 60, NULL, codes);
	cr_assert_eq(bad, 0, "IPv6 %s: %s", rootless ? "rootless" : "standard",
	             ht_describe(codes, 5));
}

Test(ipv6, rootless)
{
	run_ipv6(15, 1);
}
Test(ipv6, standard)
{
	run_ipv6(16, 0);
}
