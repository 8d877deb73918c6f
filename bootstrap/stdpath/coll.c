/* Collectives routed through rank 0's store, as PyTorch and Gloo do: every
 * rank writes its part under a key and reads the others'.  Keys carry
 * (epoch, group, call) so nothing from another call or incarnation is read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/base/log.h"
#include "bootstrap/base/util.h"
#include "bootstrap/stdpath/coll.h"
#include "bootstrap/stdpath/stdpath.h"
#include "bootstrap/world.h"

#define KEYLEN 96

static void key(char *buf, const struct hpct_group *g, const char *what, int a, int b)
{
	snprintf(buf, KEYLEN, "e%llu/g%016llx/%u/%s/%d/%d",
	         (unsigned long long)g->world->topo.epoch, (unsigned long long)g->id, g->seq, what,
	         a, b);
}

/* Adds the group context to the store client's message (already logged). */
static int failed(struct hpct_group *g, const char *op, int rc)
{
	char msg[1024];
	snprintf(msg, sizeof(msg), "%s", hpct_last_error());
	return hpct__group_fail(g, rc,
	                        "rank %d: %s on group %016llx (epoch %llu, call %u) failed: %s",
	                        g->world->topo.rank, op, (unsigned long long)g->id,
	                        (unsigned long long)g->world->topo.epoch, g->seq, msg);
}

static double deadline(const struct hpct_group *g)
{
	return hpct__now() + g->world->topo.timeout_s;
}

/* Reads the items of every other rank in one request. */
static int fetch_all(struct hpct_group *g, const char *what, int self_dst, size_t sz, void *out,
                     double dl)
{
	int n = g->size - 1;
	char(*keys)[KEYLEN] = malloc((size_t)(n > 0 ? n : 1) * KEYLEN);
	const char **kp = malloc((size_t)(n > 0 ? n : 1) * sizeof(*kp));
	void **bufs = malloc((size_t)(n > 0 ? n : 1) * sizeof(*bufs));
	size_t *lens = malloc((size_t)(n > 0 ? n : 1) * sizeof(*lens));
	int rc = HPCT_ENOMEM;
	if (keys && kp && bufs && lens) {
		int k = 0;
		for (int i = 0; i < g->size; i++) {
			if (i == g->rank)
				continue;
			key(keys[k], g, what, i, self_dst);
			kp[k] = keys[k];
			bufs[k] = (unsigned char *)out + (size_t)i * sz;
			lens[k] = sz;
			k++;
		}
		rc = hpct__std_mget(g->world->client, kp, n, bufs, lens, dl);
	}
	free(keys);
	free(kp);
	free(bufs);
	free(lens);
	return rc;
}

int hpct__std_allgather(struct hpct_group *g, const void *item, size_t sz, void *out)
{
	if (g->failed)
		return g->failed;
	double dl = deadline(g);
	char k[KEYLEN];
	int rc = 0;
	memcpy((unsigned char *)out + (size_t)g->rank * sz, item, sz);
	if (g->size > 1) {
		key(k, g, "ag", g->rank, -1);
		rc = hpct__std_set(g->world->client, k, item, sz, g->size - 1, dl);
		if (rc == 0)
			rc = fetch_all(g, "ag", -1, sz, out, dl);
	}
	if (rc)
		rc = failed(g, "allgather", rc); /* names this call: seq not yet bumped */
	g->seq++;
	return rc;
}

/* The last rank to arrive releases the others through a key read exactly
 * N-1 times, then swaps the counter for a key it reads once: the store keeps
 * nothing of a finished barrier. */
int hpct__std_barrier(struct hpct_group *g)
{
	if (g->failed)
		return g->failed;
	double dl = deadline(g);
	struct hpct_std_client *c = g->world->client;
	char cnt[KEYLEN], rel[KEYLEN];
	int64_t v = 0;
	key(cnt, g, "bar", 0, 0);
	key(rel, g, "bar", 1, 0);
	int rc = hpct__std_add(c, cnt, 1, &v, dl);
	unsigned char one = 1, back[8];
	const char *kp[1];
	void *bufs[1];
	size_t lens[1];
	if (rc == 0 && v == g->size) {
		unsigned char done[8] = { 0 };
		kp[0] = cnt;
		bufs[0] = back;
		lens[0] = sizeof(back);
		if (g->size > 1)
			rc = hpct__std_set(c, rel, &one, 1, g->size - 1, dl);
		if (rc == 0)
			rc = hpct__std_set(c, cnt, done, sizeof(done), 1, dl);
		if (rc == 0)
			rc = hpct__std_mget(c, kp, 1, bufs, lens, dl);
	} else if (rc == 0) {
		kp[0] = rel;
		bufs[0] = back;
		lens[0] = 1;
		rc = hpct__std_mget(c, kp, 1, bufs, lens, dl);
	}
	if (rc)
		rc = failed(g, "barrier", rc); /* names this call: seq not yet bumped */
	g->seq++;
	return rc;
}

int hpct__std_broadcast(struct hpct_group *g, void *buf, size_t len, int root)
{
	if (g->failed)
		return g->failed;
	double dl = deadline(g);
	char k[KEYLEN];
	int rc = 0;
	key(k, g, "bc", root, 0);
	if (g->size > 1) {
		if (g->rank == root) {
			rc = hpct__std_set(g->world->client, k, buf, len, g->size - 1, dl);
		} else {
			const char *kp = k;
			rc = hpct__std_mget(g->world->client, &kp, 1, &buf, &len, dl);
		}
	}
	if (rc)
		rc = failed(g, "broadcast", rc); /* names this call: seq not yet bumped */
	g->seq++;
	return rc;
}

int hpct__std_alltoall(struct hpct_group *g, const void *items, size_t sz, void *out)
{
	if (g->failed)
		return g->failed;
	double dl = deadline(g);
	char k[KEYLEN];
	int rc = 0;
	const unsigned char *in = items;
	memcpy((unsigned char *)out + (size_t)g->rank * sz, in + (size_t)g->rank * sz, sz);
	for (int j = 0; j < g->size && rc == 0; j++) {
		if (j == g->rank)
			continue;
		key(k, g, "a2a", g->rank, j);
		rc = hpct__std_set(g->world->client, k, in + (size_t)j * sz, sz, 1, dl);
	}
	if (rc == 0 && g->size > 1)
		rc = fetch_all(g, "a2a", g->rank, sz, out, dl);
	if (rc)
		rc = failed(g, "alltoall", rc); /* names this call: seq not yet bumped */
	g->seq++;
	return rc;
}
