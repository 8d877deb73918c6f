/* What the store's tests share (store_common.h). */
#include "tests/store_common.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/world.h"

void env(int r, void *arg)
{
	const struct job *j = arg;
	ht_setenv_world(r, j->n, 2, hpct_test_ports(j->slot), 1, 10.0);
}

/* n ranks of fn on two loopback nodes, ports of slot; all must exit 0. */
void run_job(int n, int slot, ht_env_fn env_fn, ht_rank_fn fn)
{
	struct job j = { .n = n, .slot = slot };
	int codes[8];
	int bad = ht_spawn(n, env_fn, fn, &j, 60, NULL, codes);
	cr_assert_eq(bad, 0, "%s", ht_describe(codes, n));
}

int get_is(struct hpct_store *s, const char *key, const char *want)
{
	void *v = NULL;
	size_t len = 0;
	int rc = hpct__store_get(s, key, 5.0, &v, &len);
	int ok = rc == 0 && len == strlen(want) && memcmp(v, want, len) == 0;
	free(v);
	return ok;
}

int open_store(uint64_t ns, hpct_world **w, struct hpct_store **s)
{
	if (hpct_world_create(w) != 0)
		return 10;
	if (hpct__store_open(*w, ns, 20.0, s) != 0)
		return 11;
	return 0;
}

void close_store(hpct_world *w, struct hpct_store *s)
{
	hpct__store_close(s);
	hpct_world_destroy(w);
}


static void *parked_call(void *p)
{
	struct parked *a = p;
	a->tid = ht_gettid();
	ht_event_post(&a->started, 1);
	if (a->pop)
		a->rc = hpct__store_queue_pop(a->s, a->key, 30.0, &a->val, &a->len);
	else
		a->rc = hpct__store_wait(a->s, &a->key, 1, 30.0);
	snprintf(a->why, sizeof(a->why), "%s", hpct_last_error());
	return NULL;
}

static int parked_sleeps(void *p)
{
	return ht_thread_sleeps(((struct parked *)p)->tid);
}

/* Starts a's call; 0 once it sleeps in it, or the exit code. */
int park_call(struct parked *a, pthread_t *th)
{
	int all;
	/* connected to the key's home first: the sleep is then the wait's */
	if (hpct__store_check(a->s, &a->key, 1, &all) != 0 || all)
		return 40;
	if (ht_event_init(&a->started) != 0 || pthread_create(th, NULL, parked_call, a) != 0)
		return 41;
	if (ht_event_wait(&a->started, 1, 30) != 0 || ht_wait_for(parked_sleeps, a, 30) != 0)
		return 42;
	return 0;
}

void env_one_home(int r, void *arg)
{
	env(r, arg);
	setenv("HPCT_STORE_REPLICAS", "1", 1);
}
