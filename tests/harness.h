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
 * deadline -> 255).  Returns the number of children that exited non-zero.
 * delay_ms (may be NULL) staggers starts: child i sleeps delay_ms[i] first. */
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

#endif
