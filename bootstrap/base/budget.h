/* The process's one in-flight budget (HPCT_INFLIGHT_BYTES,
 * HPCT_INFLIGHT_TRANSFERS): every bulk transfer of hpct takes what it is
 * about to hold (bytes read into memory or on their way, a descriptor doing
 * work) before it starts and gives it back after, whatever fan-out, group,
 * channel or thread it belongs to.  One mutex and one condition variable;
 * a take waits until its deadline at most.  Public counters:
 * hpct_inflight_get_stats (include/hpct/fanout.h). */
#ifndef HPCT_BUDGET_H
#define HPCT_BUDGET_H

#include "bootstrap/base/private_api.h"

#include <stdint.h>

/* Takes `bytes` and `transfers` from the budget, waiting until `deadline`
 * (hpct__now seconds) for others to give back.  A take of more bytes than
 * the whole budget takes all of it (it then runs alone).  0, HPCT_ETIMEDOUT
 * (not logged: the caller names what it was doing), or HPCT_EBADENV for a
 * bad setting (logged).  *granted_out: the bytes really taken, to give
 * back. */
HPCT_PRIVATE int hpct__inflight_take(uint64_t bytes, uint64_t transfers, double deadline,
                                     uint64_t *granted_out);
/* Gives back what a take granted. */
HPCT_PRIVATE void hpct__inflight_give(uint64_t bytes, uint64_t transfers);

#endif
