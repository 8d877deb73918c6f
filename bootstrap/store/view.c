/* This process's view of the store's ranks (HPCT_STORE_REPLICAS > 1):
 * which ranks' stores are gone, for its clients, its server and its
 * forwarder alike (store_internal.h).  A rank is gone once a connection
 * to it broke or was refused after it was reached, once it answered that
 * it is leaving, or once a peer said so (OP_DEAD); it stays gone for the
 * world's epoch.  Every change bumps a generation, so that the server
 * sees a new view and moves its keys to their new homes (replica.c). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/base/bytes.h"
#include "bootstrap/store/store_internal.h"

static struct {
	pthread_mutex_t mu;
	uint64_t job, epoch;
	int size;
	unsigned char *dead;
	unsigned gen;
} view = { .mu = PTHREAD_MUTEX_INITIALIZER };

/* view.mu held: the view is this world's and epoch's (a new one: none
 * gone); 0, or -1 for want of memory. */
static int current(const struct hpct_world *w)
{
	if (view.dead && view.job == w->topo.job && view.epoch == w->topo.epoch &&
	    view.size == w->topo.size)
		return 0;
	unsigned char *d = calloc((size_t)w->topo.size, 1);
	if (!d)
		return -1;
	free(view.dead);
	view.dead = d;
	view.job = w->topo.job;
	view.epoch = w->topo.epoch;
	view.size = w->topo.size;
	view.gen++;
	return 0;
}

int hpct__store_dead(const struct hpct_world *w, int rank)
{
	pthread_mutex_lock(&view.mu);
	int d = current(w) == 0 && view.dead[rank];
	pthread_mutex_unlock(&view.mu);
	return d;
}

int hpct__store_mark_dead(const struct hpct_world *w, int rank)
{
	if (rank < 0 || rank >= w->topo.size)
		return 0;
	pthread_mutex_lock(&view.mu);
	int news = current(w) == 0 && !view.dead[rank];
	if (news) {
		view.dead[rank] = 1;
		view.gen++;
	}
	pthread_mutex_unlock(&view.mu);
	return news;
}

unsigned hpct__store_view(const struct hpct_world *w, unsigned char *dead_out)
{
	pthread_mutex_lock(&view.mu);
	if (current(w) == 0 && dead_out)
		memcpy(dead_out, view.dead, (size_t)view.size);
	else if (dead_out)
		memset(dead_out, 0, (size_t)w->topo.size);
	unsigned g = view.gen;
	pthread_mutex_unlock(&view.mu);
	return g;
}

int hpct__store_live_homes(const struct hpct_world *w, int h0, int R, int *homes)
{
	pthread_mutex_lock(&view.mu);
	int n = current(w) == 0 ? hpct__store_window(view.dead, w->topo.size, h0, R, homes)
	                        : hpct__store_window(NULL, w->topo.size, h0, R, homes);
	pthread_mutex_unlock(&view.mu);
	return n;
}

unsigned char *hpct__store_dead_encode(const unsigned char *dead, int size, size_t *len)
{
	unsigned char *list = malloc(4 + 4 * (size_t)size);
	uint32_t k = 0;
	for (int r = 0; list && dead && r < size; r++)
		if (dead[r])
			hpct__put32(list + 4 + 4 * k++, (uint32_t)r);
	if (list)
		hpct__put32(list, k);
	*len = 4 + 4 * (size_t)k;
	return list;
}

int hpct__store_dead_merge(const struct hpct_world *w, int size, const unsigned char *p, size_t len,
                           int keep)
{
	uint32_t n = len >= 4 ? hpct__get32(p) : 0;
	if (len < 4 || n > (uint32_t)size || len != 4 + 4 * (size_t)n)
		return -1;
	for (uint32_t i = 0; i < n; i++)
		if (hpct__get32(p + 4 + 4 * i) >= (uint32_t)size)
			return -1;
	for (uint32_t i = 0; w && i < n; i++) {
		int r = (int)hpct__get32(p + 4 + 4 * i);
		if (r != keep)
			hpct__store_mark_dead(w, r);
	}
	return 0;
}

void hpct__store_view_child(void)
{
	pthread_mutex_init(&view.mu, NULL);
}
