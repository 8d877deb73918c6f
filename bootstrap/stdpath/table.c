/* The rendezvous server's keys: a chained hash table, entries that exist
 * absent while someone waits on them, and read counts that delete a key
 * after its last reader. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/base/bytes.h"
#include "bootstrap/base/log.h"
#include "bootstrap/base/util.h"
#include "bootstrap/stdpath/server_internal.h"
#include "bootstrap/stdpath/stdpath.h"
#include "hpct/hpct.h"

/* ---- hash table ---- */

static uint64_t key_hash(const char *k, uint32_t klen)
{
	return hpct__hash(k, klen, 0x5354445041544831ULL);
}

struct entry *hpct__stdsrv_tab_find(struct table *t, const char *k, uint32_t klen)
{
	uint64_t h = key_hash(k, klen);
	for (struct entry *e = t->b[h & t->mask]; e; e = e->next)
		if (e->hash == h && e->klen == klen && memcmp(e->key, k, klen) == 0)
			return e;
	return NULL;
}

/* Finds or creates (absent) the entry of k; NULL when out of memory. */
struct entry *hpct__stdsrv_tab_get(struct table *t, const char *k, uint32_t klen)
{
	struct entry *e = hpct__stdsrv_tab_find(t, k, klen);
	if (e)
		return e;
	if (t->count >= t->mask + 1) {
		/* Load factor 1, doubling: amortised O(1), entries never move. */
		size_t nb = (t->mask + 1) * 2;
		struct entry **b = calloc(nb, sizeof(*b));
		if (!b)
			return NULL;
		for (size_t i = 0; i <= t->mask; i++) {
			while (t->b[i]) {
				struct entry *x = t->b[i];
				t->b[i] = x->next;
				x->next = b[x->hash & (nb - 1)];
				b[x->hash & (nb - 1)] = x;
			}
		}
		free(t->b);
		t->b = b;
		t->mask = nb - 1;
	}
	e = calloc(1, sizeof(*e) + klen + 1);
	if (!e)
		return NULL;
	e->hash = key_hash(k, klen);
	e->klen = klen;
	e->min_wait = INT64_MAX;
	e->owner = -1;
	memcpy(e->key, k, klen);
	e->next = t->b[e->hash & t->mask];
	t->b[e->hash & t->mask] = e;
	t->count++;
	return e;
}

void hpct__stdsrv_tab_remove(struct table *t, struct entry *e)
{
	struct entry **pp = &t->b[e->hash & t->mask];
	while (*pp != e)
		pp = &(*pp)->next;
	*pp = e->next;
	hpct__stdsrv_entry_charge(t, e, -1);
	t->count--;
	free(e->val);
	free(e);
}

/* Drops the value; the entry itself stays while someone waits on it. */
void hpct__stdsrv_entry_clear(struct table *t, struct entry *e)
{
	hpct__stdsrv_entry_charge(t, e, -1);
	free(e->val);
	e->val = NULL;
	e->vlen = 0;
	e->present = 0;
	if (!e->waiters)
		hpct__stdsrv_tab_remove(t, e);
}

void hpct__stdsrv_entry_charge(struct table *t, struct entry *e, int owner)
{
	size_t cost = ENTRY_COST(e->klen) + e->vlen;
	if (e->owner >= 0) {
		t->bytes -= cost;
		t->owned[e->owner] -= cost;
	}
	e->owner = owner;
	if (owner >= 0) {
		t->bytes += cost;
		t->owned[owner] += cost;
	}
}
