/* The rank side of NCCL's root exchange (player.c), for tests and
 * hpct-bench only: in the static library hpct_nccl_player, not in
 * libhpct.so.  A program that links it links libhpct too (libhpct.so, or
 * the internal archive). */
#ifndef HPCT_NCCL_PLAYER_H
#define HPCT_NCCL_PLAYER_H

#include "bootstrap/nccl/nccl_internal.h"

/* The rank side of the exchange, for tests and hpct-bench: plays ranks
 * 0..nranks-1 against the roots of ids[0..nids-1] the way NCCL's ranks do
 * (each to its root, the first rank of each root also to the previous
 * root), in the given order (NULL: rank order), and collects what each
 * rank is sent.  Rank r offers hpct__nccl_test_ring(r) as its ring info.
 * With `stagger`, ranks of a root with more than 256 ranks hold back as
 * NCCL's do by default (local id / 7000 s), so an order is best sorted.
 * replies_out: nranks * HPCT_NCCL_RING_LEN bytes.  root_conns_out (may
 * be NULL) gets the connections of the busiest root as the ranks counted
 * them: reports sent to it and answers that came from it. */
int hpct__nccl_play_ranks(const hpct_nccl_id *ids, int nids, int nranks, const int *order,
                          double timeout_s, int stagger, unsigned char *replies_out,
                          int *root_conns_out);
void hpct__nccl_test_ring(int rank, unsigned char out[HPCT_NCCL_RING_LEN]);

#endif
