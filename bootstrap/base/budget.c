/* The process's in-flight budget (budget.h). */
#include "bootstrap/base/budget.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "bootstrap/base/log.h"
#include "bootstrap/base/param.h"
#include "bootstrap/base/util.h"
#include "hpct/fanout.h"

#define DEFAULT_CAP   (1ull << 30) /* 1 GiB */
#define DEFAULT_FLOOR (64ull << 20)

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv;
static int ready; /* 1 read, <0 the settings' error */
static uint64_t limit_bytes, limit_transfers, used_bytes, used_transfers;

static void cv_init(void)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&cv, &ca);
	pthread_condattr_destroy(&ca);
}

/* A forked child may use the store (its budget too): a lock another
 * thread held at the fork is free again there, the only thread left, and
 * what the parent's transfers held is theirs, not the child's. */
static void child_lock(void)
{
	pthread_mutex_init(&mu, NULL);
	if (ready == 1)
		cv_init();
	used_bytes = used_transfers = 0;
}

__attribute__((constructor)) static void fork_safe(void)
{
	pthread_atfork(NULL, NULL, child_lock);
}

static uint64_t peak_bytes, peak_transfers, waits;

/* MemTotal / 16, capped to 1 GiB, at least 64 MiB: on a 16 GiB node 1 GiB
 * in flight is 256 chunks of 4 MiB, more than any link keeps busy, and a
 * process of a small machine never pins more than a sixteenth of it.  The
 * floor keeps a few default chunks moving when /proc is unreadable. */
static uint64_t default_bytes(void)
{
	FILE *f = fopen("/proc/meminfo", "re");
	unsigned long long kb = 0;
	char line[256];
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "MemTotal: %llu kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	uint64_t b = (uint64_t)kb * 1024 / 16;
	if (b > DEFAULT_CAP)
		b = DEFAULT_CAP;
	return b < DEFAULT_FLOOR ? DEFAULT_FLOOR : b;
}

/* Under mu. */
static int load(void)
{
	if (ready)
		return ready < 0 ? ready : 0;
	const struct hpct_env *env = hpct__env_process();
	long b = 0, t = 0;
	int set = 0;
	int rc = hpct__env_int(env, "HPCT_INFLIGHT_BYTES", 1, LONG_MAX, 0, &b, &set);
	if (rc == 0)
		rc = hpct__env_int(env, "HPCT_INFLIGHT_TRANSFERS", 1, 1 << 20, 64, &t, NULL);
	if (rc < 0) {
		ready = rc;
		return rc;
	}
	limit_bytes = set ? (uint64_t)b : default_bytes();
	limit_transfers = (uint64_t)t;
	cv_init();
	ready = 1;
	return 0;
}

static int fits(uint64_t bytes, uint64_t transfers)
{
	return used_bytes + bytes <= limit_bytes && used_transfers + transfers <= limit_transfers;
}

int hpct__inflight_take(uint64_t bytes, uint64_t transfers, double deadline, uint64_t *granted_out)
{
	pthread_mutex_lock(&mu);
	int rc = load();
	if (rc < 0) {
		pthread_mutex_unlock(&mu);
		return rc;
	}
	if (bytes > limit_bytes)
		bytes = limit_bytes;
	if (transfers > limit_transfers)
		transfers = limit_transfers;
	if (!fits(bytes, transfers))
		waits++;
	while (!fits(bytes, transfers)) {
		/* hpct__now is CLOCK_MONOTONIC, as the condition variable's clock,
		 * except under the simulator, which does not move data */
		double left = deadline - hpct__now();
		if (left <= 0) {
			pthread_mutex_unlock(&mu);
			return HPCT_ETIMEDOUT;
		}
		struct timespec ts = hpct__timespec_in(CLOCK_MONOTONIC, left < 1 ? left : 1);
		pthread_cond_timedwait(&cv, &mu, &ts);
	}
	used_bytes += bytes;
	used_transfers += transfers;
	if (used_bytes > peak_bytes)
		peak_bytes = used_bytes;
	if (used_transfers > peak_transfers)
		peak_transfers = used_transfers;
	pthread_mutex_unlock(&mu);
	*granted_out = bytes;
	return 0;
}

void hpct__inflight_give(uint64_t bytes, uint64_t transfers)
{
	pthread_mutex_lock(&mu);
	used_bytes -= bytes <= used_bytes ? bytes : used_bytes;
	used_transfers -= transfers <= used_transfers ? transfers : used_transfers;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

HPCT_API int hpct_inflight_get_stats(struct hpct_inflight_stats *out)
{
	if (!out)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_NET,
		                  "hpct_inflight_get_stats: NULL argument");
	pthread_mutex_lock(&mu);
	int rc = load();
	if (rc == 0) {
		out->bytes_limit = limit_bytes;
		out->transfers_limit = limit_transfers;
		out->bytes_peak = peak_bytes;
		out->transfers_peak = peak_transfers;
		out->waits = waits;
	}
	pthread_mutex_unlock(&mu);
	return rc;
}
