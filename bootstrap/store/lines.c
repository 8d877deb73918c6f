/* A process's connections to the ranks' stores (see route.h), one set per
 * world, shared by every store handle of that world: a request takes an
 * idle line to the rank it asks (or makes one) and gives it back once its
 * answer is read.  A process with many handles (each TCPStore connection
 * of PyTorch opens two, a job makes one TCPStore per init, clone and
 * subgroup's store) so holds one line per rank it talks to, and one more
 * only while two of its requests wait at that rank at once.  The lines
 * live as long as the world: a re-init in the same process (destroy, init
 * again) finds them open.  A recovery closes those to the ranks it
 * replaced; a forked child forgets them all (their descriptors are
 * /dev/null there: base/fdtrack.h). */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "bootstrap/base/log.h"
#include "bootstrap/store/route.h"
#include "bootstrap/world.h"
#include "bootstrap/world_access.h"

/* Idle lines kept per rank: a process's requests waiting at one rank at
 * once, as many as the rank's server admits from one client rank (its
 * CONNS_PER_RANK); a line given back beyond these is closed. */
#define IDLE_MAX 4

struct hpct_lines {
	pthread_mutex_t mu;
	int size;
	int (*idle)[IDLE_MAX]; /* per rank, nidle[r] of them */
	unsigned char *nidle;
	long made; /* lines connected, for the log */
	struct hpct_lines *next;
};

/* Every world's lines, for the fork handler (mu also guards each world's
 * slot while its lines are made). */
static struct {
	pthread_mutex_t mu;
	struct hpct_lines *head;
} all = { .mu = PTHREAD_MUTEX_INITIALIZER };

static void lines_free(struct hpct_lines *l, int close_them)
{
	for (int r = 0; close_them && r < l->size; r++)
		for (int i = 0; i < l->nidle[r]; i++)
			close(l->idle[r][i]);
	free(l->idle);
	free(l->nidle);
	free(l);
}

static void unlink_lines(struct hpct_lines *l)
{
	pthread_mutex_lock(&all.mu);
	for (struct hpct_lines **p = &all.head; *p; p = &(*p)->next)
		if (*p == l) {
			*p = l->next;
			break;
		}
	pthread_mutex_unlock(&all.mu);
}

static void world_end(struct hpct_world *w, void *ctx)
{
	unlink_lines(ctx);
	lines_free(ctx, 1);
	w->svc[HPCT_WORLD_SLOT_LINES].ops = NULL;
	w->svc[HPCT_WORLD_SLOT_LINES].ctx = NULL;
}

/* A new epoch: the lines to the ranks it replaced reach processes that are
 * gone; the others' stores serve on (their server outlives recoveries). */
static void world_recovered(struct hpct_world *w, void *ctx, uint64_t old_epoch)
{
	struct hpct_lines *l = ctx;
	for (int r = 0; r < l->size && r < w->topo.size; r++)
		if (hpct__world_rank_born(w, r) > old_epoch)
			hpct__lines_drop(l, r);
}

static const struct hpct_world_service_ops lines_ops = {
	.name = "store lines",
	.recovered = world_recovered,
	.end = world_end,
};

struct hpct_lines *hpct__lines_of(struct hpct_world *w)
{
	pthread_mutex_lock(&all.mu); /* store handles open from several threads */
	struct hpct_lines *l = w->svc[HPCT_WORLD_SLOT_LINES].ctx;
	if (!l && (l = calloc(1, sizeof(*l))) != NULL) {
		l->size = w->topo.size;
		l->idle = calloc((size_t)l->size, sizeof(*l->idle));
		l->nidle = calloc((size_t)l->size, 1);
		if (!l->idle || !l->nidle) {
			lines_free(l, 0);
			l = NULL;
		} else {
			pthread_mutex_init(&l->mu, NULL);
			l->next = all.head;
			all.head = l;
			w->svc[HPCT_WORLD_SLOT_LINES].ops = &lines_ops;
			w->svc[HPCT_WORLD_SLOT_LINES].ctx = l;
		}
	}
	pthread_mutex_unlock(&all.mu);
	return l;
}

int hpct__lines_take(struct hpct_lines *l, int r)
{
	int fd = -1;
	pthread_mutex_lock(&l->mu);
	if (r < l->size && l->nidle[r])
		fd = l->idle[r][--l->nidle[r]];
	pthread_mutex_unlock(&l->mu);
	return fd;
}

void hpct__lines_give(struct hpct_lines *l, int r, int fd)
{
	pthread_mutex_lock(&l->mu);
	if (r < l->size && l->nidle[r] < IDLE_MAX) {
		l->idle[r][l->nidle[r]++] = fd;
		fd = -1;
	}
	pthread_mutex_unlock(&l->mu);
	if (fd >= 0)
		close(fd);
}

void hpct__lines_drop(struct hpct_lines *l, int r)
{
	int fds[IDLE_MAX], n = 0;
	pthread_mutex_lock(&l->mu);
	if (r < l->size)
		while (l->nidle[r])
			fds[n++] = l->idle[r][--l->nidle[r]];
	pthread_mutex_unlock(&l->mu);
	while (n)
		close(fds[--n]);
}

long hpct__lines_made(struct hpct_lines *l)
{
	pthread_mutex_lock(&l->mu);
	long n = ++l->made;
	pthread_mutex_unlock(&l->mu);
	return n;
}

int hpct__lines_idle_to(struct hpct_lines *l, int r, int *fds, int max)
{
	int n = 0;
	pthread_mutex_lock(&l->mu);
	for (int i = 0; r < l->size && i < l->nidle[r] && n < max; i++)
		fds[n++] = l->idle[r][i];
	pthread_mutex_unlock(&l->mu);
	return n;
}

void hpct__lines_child(void)
{
	/* the only thread left: the descriptors are /dev/null now, and no
	 * handle holds a line across the fork but a request's own (its
	 * thread is gone) */
	pthread_mutex_init(&all.mu, NULL);
	for (struct hpct_lines *l = all.head; l; l = l->next) {
		pthread_mutex_init(&l->mu, NULL);
		for (int r = 0; r < l->size; r++)
			while (l->nidle[r])
				close(l->idle[r][--l->nidle[r]]);
	}
}
