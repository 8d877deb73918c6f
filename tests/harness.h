/* Helpers shared by the test programs.
 *
 * Ports: every test that listens takes its ports from hpct_test_ports(slot):
 * the program's range starts at HPCT_TEST_PORT_BASE (set per program in
 * tests/meson.build) and each slot is HPCT_TEST_PORT_STRIDE ports wide, so
 * parallel programs and parallel tests never collide.
 *
 * Processes: ht_spawn() forks n children, each running fn(rank, arg) after
 * its environment was set by the caller's env callback, and reaps all of them
 * before returning (killing any still alive at the deadline).  Children must
 * report through their exit code: never cr_assert in a child. */
#ifndef HPCT_TEST_HARNESS_H
#define HPCT_TEST_HARNESS_H

#include <stddef.h>

int hpct_test_ports(int slot);

typedef int (*ht_rank_fn)(int rank, void *arg);
typedef void (*ht_env_fn)(int rank, void *arg);

/* Exit status of each child in codes[] (signal n -> 128 + n, killed at the
 * deadline -> 255, which ht_describe() calls a hang).  Returns the number of children that exited
 * non-zero. delay_ms (may be NULL) staggers starts: child i sleeps delay_ms[i] first. */
int ht_spawn(int n, ht_env_fn env, ht_rank_fn fn, void *arg, double timeout_s, const int *delay_ms,
             int *codes);

/* Sets the torchrun-style environment of rank r of n on `nodes` loopback
 * nodes (127.0.0.1 ..), ports from `port_base`, rootless or standard, with
 * HPCT_TIMEOUT = timeout_s, for use inside an ht_env_fn. */
void ht_setenv_world(int r, int n, int nodes, int port_base, int rootless, double timeout_s);

/* A short description of codes[] for failure messages ("rank 3 exited 2"). */
const char *ht_describe(const int *codes, int n);

/* This process's open descriptors, and its resident memory in kB (-1 if
 * unknown), from /proc/self. */
int ht_open_fds(void);
long ht_rss_kb(void);

/* Events, so that tests order what they do by what happened and never by
 * a sleep (STYLE habit 18).  An ht_event is a pipe made before the fork,
 * so the test and all its children hold both ends: ht_event_post() adds n
 * tokens, ht_event_wait() takes n, waiting at most timeout_s, a deadline
 * that only catches a hang (0, or -1 once it passed).  ht_event_try()
 * takes one token if there is one (1) without waiting (0). */
struct ht_event {
	int fd[2];
};
int ht_event_init(struct ht_event *ev);
void ht_event_destroy(struct ht_event *ev);
void ht_event_post(struct ht_event *ev, int n);
int ht_event_wait(struct ht_event *ev, int n, double timeout_s);
int ht_event_try(struct ht_event *ev);

/* Polls cond(arg) until it holds (0) or timeout_s passed (-1): for what
 * the test can only observe as a value (a counter in shared memory, the
 * keys a server holds).  The deadline is a hang guard. */
int ht_wait_for(int (*cond)(void *arg), void *arg, double timeout_s);

/* This thread's id, and whether thread `tid` of this process sleeps in the
 * kernel now (state S or D in /proc/self/task/tid/stat): it is blocked in
 * a call, which a test may wait for before it does what that call waits on. */
int ht_gettid(void);
int ht_thread_sleeps(int tid);

/* CLOCK_MONOTONIC seconds, for deadlines that catch hangs. */
double ht_now(void);

#endif
