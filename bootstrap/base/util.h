/* Small helpers shared inside bootstrap/. */
#ifndef HPCT_UTIL_H
#define HPCT_UTIL_H

#include "bootstrap/base/private_api.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>

/* CLOCK_MONOTONIC in seconds. */
HPCT_PRIVATE double hpct__now(void);
/* Where hpct__now reads the time: CLOCK_MONOTONIC.  The simulator
 * (hpct-bench-sim, linked with the internal archive) points it at its
 * simulated clock; nothing else may change it. */
extern double (*hpct__clock)(void);
/* The time `in_s` seconds from now on `clock`, as pthread_cond_timedwait
 * takes it (CLOCK_REALTIME for a condition variable's default clock). */
HPCT_PRIVATE struct timespec hpct__timespec_in(clockid_t clock, double in_s);

/* 64-bit hash of bytes (FNV-1a folded through a splitmix64 finaliser):
 * identical on every host and build. */
uint64_t hpct__hash(const void *data, size_t len, uint64_t seed);
HPCT_PRIVATE uint64_t hpct__hash_u64(uint64_t seed, uint64_t v);

/* "10.0.0.3:12012" or "[fd00::3]:12012". */
HPCT_PRIVATE void hpct__addr_str(const struct sockaddr *sa, char *buf, size_t len);

/* Resolves host (name or literal) with the given family (AF_UNSPEC: first
 * answer) and sets the port.  HPCT_ERESOLVE with a message naming host. */
int hpct__resolve(const char *host, int port, int family, struct sockaddr_storage *out,
                  socklen_t *len_out);

/* len random bytes from the kernel (getrandom); a clock-seeded hash if
 * that fails, which only weakens a nonce's unpredictability. */
void hpct__random(void *buf, size_t len);

#endif
