/* The rank side of NCCL's root exchange (player.c), for tests and
 * hpct-bench only: in the static library hpct_nccl_player, not in
 * libhpct.so.  A program that links it links libhpct too (libhpct.so, or
 * the internal archive). */
#ifndef HPCT_NCCL_PLAYER_H
#define HPCT_NCCL_PLAYER_H

#include "bootstrap/nccl/nccl_internal.h"

/* The rank side of the exchange, for tests and hpct-bench: plays ranks
 * 0..nranks-1 against the roots of ids[0..nids-1] the way NCCL `version`'s
 * ranks do (ncclGetVersion's code: its report's layout and its answer's
 * size, root_wire.h; each rank to its root, the first rank of each root
 * also to the previous root), in the given order (NULL: rank order), and
 * collects what each rank is sent.  Rank r offers hpct__nccl_test_ring(r)
 * as its ring info, as much of it as the wire carries.  With `stagger`,
 * ranks of a root with more than 256 ranks hold back as NCCL's do by
 * default (local id / 7000 s), so an order is best sorted.
 * replies_out: nranks * HPCT_NCCL_RING_LEN bytes, one slot per rank; where
 * the answer is shorter (2.19-2.22: 28 bytes) the rest of the slot is zero
 * (hpct__nccl_test_answer says what a slot should hold).  root_conns_out
 * (may be NULL) gets the connections of the busiest root as the ranks
 * counted them: reports sent to it and answers that came from it.
 * HPCT_EINVAL for a version whose wire hpct does not know, or several ids
 * with a release before 2.23 (their ranks know one root only). */
int hpct__nccl_play_ranks(const hpct_nccl_id *ids, int nids, int nranks, const int *order,
                          double timeout_s, int stagger, int version, unsigned char *replies_out,
                          int *root_conns_out);
/* The ring info rank `rank` offers: an AF_INET address no root would
 * invent, then a pattern of the rank. */
void hpct__nccl_test_ring(int rank, unsigned char out[HPCT_NCCL_RING_LEN]);
/* What a player's slot holds when the rank was sent rank `rank`'s ring
 * info over NCCL `version`'s wire: as much of hpct__nccl_test_ring(rank)
 * as the answer carries, then zeros.  HPCT_EINVAL for an unknown wire. */
int hpct__nccl_test_answer(int rank, int version, unsigned char out[HPCT_NCCL_RING_LEN]);
/* A random arrival order of ranks 0..n-1, the same for the same seed. */
void hpct__nccl_test_order(int *order, int n, unsigned seed);

#endif
