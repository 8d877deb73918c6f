/* What the C++ parts (bootstrap/gloo/) may ask of a world, without seeing
 * its C internals. */
#ifndef HPCT_WORLD_ACCESS_H
#define HPCT_WORLD_ACCESS_H

#include "bootstrap/base/private_api.h"

#include <stddef.h>
#include <stdint.h>

#include "hpct/hpct.h"

#ifdef __cplusplus
extern "C" {
#endif

struct hpct_std_client;

/* HPCT_TIMEOUT in seconds. */
HPCT_PRIVATE double hpct__world_timeout(const hpct_world *world);
/* 1 when HPCT_SECRET (or HPCT_SECRET_FILE) is set: peers are authenticated. */
HPCT_PRIVATE int hpct__world_has_secret(const hpct_world *world);
/* The standard path's store client, NULL on the rootless path. */
HPCT_PRIVATE struct hpct_std_client *hpct__world_std_client(hpct_world *world);
/* The numeric address of the node of world rank `rank` ("10.0.0.3",
 * "fd00::3"), resolved once.  HPCT_ESTATE when there is no node list,
 * HPCT_ERESOLVE when it does not resolve. */
HPCT_PRIVATE int hpct__world_node_host(hpct_world *world, int rank, char *buf, size_t len);

/* The epoch in which world rank `rank`'s current process began, as this
 * rank knows it: its own start epoch for every rank, raised to the new
 * epoch for each rank hpct_world_recover named replaced.  A resource kept
 * from epoch e still holds what it had of `rank` when this is <= e.
 * UINT64_MAX for a rank out of range. */
HPCT_PRIVATE uint64_t hpct__world_rank_born(const hpct_world *world, int rank);

/* Would hpct_world_create take the rootless path here?  Reads the
 * environment only (no socket, no store); when not, why in `why`. */
HPCT_PRIVATE int hpct__rootless_possible(char *why, size_t len);
/* A world that only asks the rootless store (world.h). */
HPCT_PRIVATE int hpct__world_store_client(hpct_world **world_out);
/* torchrun's agents as a world of their own, one rank a node of the node
 * list (this host's place in it), named `job`, epoch 0, on the top port of
 * HPCT_PORT_RANGE (which the windows of torchrun's workers leave out): the
 * shim serves their rendezvous store on it.  HPCT_ENOTOPO, not logged, with
 * why in `why` when there is no node list or one node; errors otherwise
 * (HPCT_EBADENV: this host is not exactly one of the nodes). */
HPCT_PRIVATE int hpct__world_create_agents(const char *job, hpct_world **world_out, char *why,
                                           size_t len);

/* A subgroup of `parent` that only its members create, named by `key`
 * instead of the parent's counter: every member must pass the same key
 * (for instance a count of the groups made with these members so far),
 * and no two groups of the parent may share one.  Like hpct_group_create
 * otherwise. */
HPCT_PRIVATE int hpct__group_create_keyed(hpct_group *parent, uint64_t key, const int *members,
                                          int n, hpct_group **group_out);

/* A failure in `group` whose cause this rank knows (a peer died): tell the
 * others, so a rank that only saw a neighbour give up can name the cause.
 * Rootless: an abort over hpct's links, passed on by whoever learns it;
 * standard: a key at the rendezvous.  Best effort, never blocks long. */
HPCT_PRIVATE void hpct__world_tell_failure(hpct_world *world, uint64_t group, const char *text);
/* Waits up to wait_s for a cause told by another rank (or, on the standard
 * path, the rendezvous's record of a rank that left without goodbye).
 * 1 with the text in buf when one came, else 0. */
HPCT_PRIVATE int hpct__world_learn_failure(hpct_world *world, uint64_t group, double wait_s,
                                           char *buf, size_t len);

/* What the transport HPCT_TRANSPORT names costs once per process, paid now
 * (hpct-bench --gate: the time a rank takes to load libfabric is not the
 * bootstrap's).  0 or -errno; unknown transports are named at join. */
HPCT_PRIVATE int hpct__transport_prepare(void);

#ifdef __cplusplus
}
#endif
#endif
