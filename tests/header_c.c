/* The public header on its own, as a C11 user sees it: compiled by the
 * 'header-c' test with -std=c11 -pedantic -Werror -Wall -Wextra.  It comes
 * first so that it must be self-contained, and twice to check its guard. */
#include "hpct/hpct.h"
#include "hpct/nccl.h"
#include "hpct/fanout.h"
#include "hpct/fanout.h"

/* Uses the types only; calls nothing, so nothing needs to link. */
int header_c_sizes(void);
int header_c_sizes(void)
{
	struct hpct_world_info info = { 0 };
	struct hpct_world_stats stats = { 0 };
	enum hpct_path path = HPCT_PATH_ROOTLESS;
	hpct_nccl_id id = { { 0 } };
	struct hpct_nccl_id_info ninfo = { 0 };
	struct hpct_fanout_opts fo = { 0, HPCT_FANOUT_WAVES, 0 };
	struct hpct_fanout_stats fs = { 0 };
	struct hpct_inflight_stats is = { 0 };
	return (int)(sizeof(info) + sizeof(stats) + sizeof(id) + sizeof(ninfo) + sizeof(fo) +
	             sizeof(fs) + sizeof(is)) +
	       (int)path + (int)fo.plan +
	       HPCT_ETIMEDOUT + HPCT_ADDRSTRLEN;
}
