/* What the Gloo test programs share (gloo_common.c): the rank programs'
 * configuration, the memory the test shares with its ranks, the checks of
 * every collective, and spawning N ranks on both paths. */
#ifndef HPCT_TESTS_GLOO_COMMON_H
#define HPCT_TESTS_GLOO_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "hpct/gloo.h"
#include "hpct/hpct.h"
#include "tests/harness.h"

struct cfg {
	int n, nodes, port, rootless, victim;
	const char *secret;  /* HPCT_SECRET, or NULL */
	const char *connect; /* HPCT_GLOO_CONNECT, or NULL: unset (the path's default) */
	int no_hosts;        /* no node list: each Gloo device binds where the host
	                        name resolves (standard path only) */
	double timeout;
	struct shared *shared;
	ht_rank_fn fn; /* what each rank runs, through child() */
};

/* MAP_SHARED between the test and its ranks: the fault test's survivors
 * meet there, and each rank leaves the reason it failed, which the test
 * prints with its assertion (a child's stderr is lost under --tap). */
#define NOTE_LEN 1100
struct shared {
	int done;    /* survivors with their result (the fault tests) */
	int entered; /* survivors about to enter the collective the victim leaves */
	int stolen;  /* the thief holds a pair (the stolen-pair test) */
	char note[16][NOTE_LEN];
};

struct proc {
	hpct_world *w;
	hpct_gloo_device *dev;
	hpct_gloo_context *ctx; /* over the world group */
	int rank;
};

/* Says why on stderr and returns code, for a child's exit status. */
int gt_why(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int gt_check_barrier(hpct_gloo_context *ctx, int base);
int gt_check_broadcast(hpct_gloo_context *ctx, int base, int salt);
int gt_child(int r, void *arg);
void gt_env_cb(int r, void *arg);
/* Everything a context must do right; codes base .. base+9. */
int gt_exercise(hpct_gloo_context *ctx, int base, int salt);
/* Element i of buf equals v exactly (every value used is an integer that
 * each type holds exactly). */
int gt_is(const void *buf, int dtype, size_t i, int64_t v);
int gt_matrix_main(int r, void *arg);
double gt_mono(void);
/* One sum allreduce of count ints, each rank contributing rank + salt:
 * a quick "this context works" check. */
int gt_quick_sum(hpct_gloo_context *ctx, int base, int salt);
struct shared *gt_shared_map(void);
void gt_spawn(int n, int nodes, int slot, int rootless, ht_rank_fn fn, double limit_s);
/* n ranks of fn on `nodes` nodes, ports of slot, HPCT_TIMEOUT timeout_s,
 * with HPCT_SECRET = secret (NULL: none); all must exit 0. */
void gt_spawn_with(int n, int nodes, int slot, int rootless, ht_rank_fn fn, double limit_s,
                   double timeout_s, const char *secret);
/* n ranks of c->fn as c says (n, nodes, rootless, connect, no_hosts,
 * secret; timeout 0: 30 s), ports of slot; all must exit 0. */
void gt_spawn_cfg(struct cfg *c, int slot, double limit_s);
/* A world (on the path c says) and a Gloo device, no context; codes 2-4. */
int gt_open(struct cfg *c, struct proc *p);
/* gt_open, then a context over the world group; codes 2-6. */
int gt_start(struct cfg *c, struct proc *p);
void gt_stop(struct proc *p);

#endif
