/* What hpct does with each NCCL release, as the tests expect it, from the
 * ncclGetVersion() code of the library under test (HPCT_NCCL_LIB picks
 * it).  The ranges hpct declares in nccl_internal.h are the ones the tests
 * hold it to. */
#ifndef HPCT_TESTS_NCCL_RELEASE_H
#define HPCT_TESTS_NCCL_RELEASE_H

#include "bootstrap/nccl/nccl_internal.h"

/* hpct's roots speak NCCL v's root wire */
static inline int nr_roots_speak(int v)
{
	return v >= HPCT_NCCL_OLDEST_VERSION && v <= HPCT_NCCL_NEWEST_VERIFIED_VERSION;
}
/* communicators over the world are Tier 2 (HPCT_NCCL_ROOTLESS unset) */
static inline int nr_tier2(int v)
{
	return v >= HPCT_NCCL_TIER2_MIN_VERSION && v <= HPCT_NCCL_NEWEST_VERIFIED_VERSION;
}

/* NCCL v has ncclCommInitRankScalable (several ids). */
static inline int nr_scalable(int v)
{
	return v >= 22300;
}

/* Which of libhpct's env plugins NCCL v takes: 0 none (it asks none
 * before 2.28.7), 1 ncclEnvPlugin_v1, 2 ncclEnvPlugin_v2 (2.30.7 on). */
static inline int nr_env_plugin(int v)
{
	return v >= 23007 ? 2 : v >= 22807 ? 1 : 0;
}

#endif
