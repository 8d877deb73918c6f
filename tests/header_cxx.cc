/* The public header as a C++ user sees it: compiled by the 'header-cxx'
 * test with -std=c++11 -pedantic -Werror -Wall -Wextra.  It comes first so
 * that it must be self-contained, and twice to check its guard. */
#include "hpct/hpct.h"
#include "hpct/nccl.h"
#include "hpct/fanout.h"
#include "hpct/fanout.h"

static_assert(HPCT_ETIMEDOUT == -1003, "error codes are plain ints in C++ too");
static_assert(sizeof(hpct_nccl_id) == 128, "an hpct_nccl_id is an ncclUniqueId");

/* Uses the types only; calls nothing, so nothing needs to link. */
int header_cxx_sizes();
int header_cxx_sizes()
{
	/* no 'struct' needed: no function shares a name with a struct */
	hpct_world_info info = {};
	hpct_world_stats stats = {};
	hpct_path path = HPCT_PATH_ROOTLESS;
	const char *(*version)(void) = hpct_version;
	hpct_fanout_opts fo = {};
	hpct_fanout_stats fs = {};
	hpct_inflight_stats is = {};
	int (*fan)(hpct_group *, const char *, uint64_t, uint64_t, void *, size_t,
	           const hpct_fanout_opts *, hpct_fanout_stats *) = hpct_fanout;
	return static_cast<int>(sizeof(info) + sizeof(stats) + sizeof(fo) + sizeof(fs) + sizeof(is)) +
	       static_cast<int>(path) + (fan != nullptr) +
	       (version != nullptr);
}
