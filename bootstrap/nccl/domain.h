/* Persistent NCCL domains inside hpct (domain.c): what one communicator
 * of a domain takes from it, for hpct_nccl_comm_init_persistent and the
 * tests, which play NCCL's ranks against a lease's roots. */
#ifndef HPCT_NCCL_DOMAIN_H
#define HPCT_NCCL_DOMAIN_H

#include "bootstrap/nccl/nccl_internal.h"

/* One communicator's use of a domain key, from lease to settle. */
struct hpct_nccl_lease {
	void *table, *entry;            /* the domain's, for settle */
	const struct hpct_nccl_comm *c; /* the comm's identity and this rank in it */
	const hpct_nccl_id *ids;        /* Tier 2: one per member; Tier 1: one */
	int nids;
	int hosted; /* this rank serves a root of hpct's for it, on the kept listener */
};

/* Finds (or makes) the domain of g's members and `generation` at the
 * world's epoch and its entry for `key` at `tier` (deriving the ids and
 * binding this rank's listener the first time), and starts this rank's
 * root for one exchange on the kept listener.  The entry is held until
 * hpct__nccl_domain_settle.  HPCT_ESTATE (logged, naming the key) while the
 * key's previous exchange is under way; derivation and bind errors as
 * hpct_nccl_comm_init's. */
HPCT_PRIVATE int hpct__nccl_domain_lease(const struct hpct_nccl_lib *l, struct hpct_group *g,
                                         uint64_t key, uint64_t generation,
                                         enum hpct_nccl_tier tier,
                                         struct hpct_nccl_lease *lease_out);
/* NCCL's init over a lease: ncclCommInitRankScalable with every member's id
 * (Tier 2) or ncclCommInitRankConfig with the one (Tier 1; NCCL's own root
 * on rank 0 where hpct hosts none).  Errors as hpct_nccl_comm_init. */
HPCT_PRIVATE int hpct__nccl_domain_init(const struct hpct_nccl_lib *l,
                                        const struct hpct_nccl_lease *lease,
                                        enum hpct_nccl_tier tier, void *config, void **comm_out);
/* Gives the entry back.  ok: the exchange goes on by itself and is
 * collected later (its listener stays bound); !ok: it is stopped, and the
 * key's listener closed and its ids dropped. */
HPCT_PRIVATE void hpct__nccl_domain_settle(struct hpct_nccl_lease *lease, int ok);

#endif
