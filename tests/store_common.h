/* What the store's tests share (test_store.c, test_store_faults.c): a job
 * of ranks on two loopback nodes, a store opened and closed, a read
 * checked, and a call parked on its key's group from a thread. */
#ifndef HPCT_TESTS_STORE_COMMON_H
#define HPCT_TESTS_STORE_COMMON_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "bootstrap/store/store.h"
#include "hpct/hpct.h"
#include "tests/harness.h"

struct job {
	int n, slot;
};

/* A call that parks on its key's home, from a thread: the test waits until
 * the thread sleeps in it (sent, waiting for the answer) before it does
 * what ends the wait. */
struct parked {
	struct hpct_store *s;
	const char *key;
	int pop; /* 0: wait for the key */
	int rc, tid;
	void *val;
	size_t len;
	struct ht_event started;
	char why[1024]; /* the call's hpct_last_error() */
};

/* The world of rank r of the job at arg (a struct job), HPCT_TIMEOUT 10 s. */
void env(int r, void *arg);
/* The same, with one home a key (HPCT_STORE_REPLICAS=1). */
void env_one_home(int r, void *arg);
/* n ranks of fn on two loopback nodes, ports of slot; all must exit 0. */
void run_job(int n, int slot, ht_env_fn env_fn, ht_rank_fn fn);
/* 1 when key reads want within 5 s. */
int get_is(struct hpct_store *s, const char *key, const char *want);
/* The world and a store of namespace ns on it: 0, or an exit code. */
int open_store(uint64_t ns, hpct_world **w, struct hpct_store **s);
void close_store(hpct_world *w, struct hpct_store *s);
/* Starts a's call; 0 once it sleeps in it, or the exit code. */
int park_call(struct parked *a, pthread_t *th);

#endif
