/* NCCL inside hpct: the library loaded at run time and what the id code,
 * the roots and the preload shim share. */
#ifndef HPCT_NCCL_INTERNAL_H
#define HPCT_NCCL_INTERNAL_H

#include "private_api.h"

#include <stdint.h>
#include <sys/socket.h>

#include "hpct/nccl.h"
#include "topo.h"

struct hpct_group;

/* 2.29 and later keep the id's rank count at byte 36. */
#define HPCT_NCCL_NRANKS_VERSION 22900

/* NCCL's entry points, with NCCL's types spelled as hpct's (ncclResult_t
 * is an int, ncclComm_t and ncclConfig_t * are pointers, an ncclUniqueId
 * is passed by value). */
struct hpct_nccl_lib {
	void *handle;
	int version;
	char path[4096];
	int (*get_version)(int *version);
	int (*get_unique_id)(hpct_nccl_id *id);
	int (*init_rank_config)(void **comm, int nranks, hpct_nccl_id id, int rank, void *config);
	int (*init_rank_scalable)(void **comm, int nranks, int rank, int nid, hpct_nccl_id *ids,
	                          void *config);
	const char *(*error_string)(int result);
	const char *(*last_error)(void *comm);
};

/* NCCL, loaded once per process; NULL (with one warning per process, and
 * the reason for hpct_last_error) when it cannot be. */
HPCT_PRIVATE const struct hpct_nccl_lib *hpct__nccl_lib(void);

/* An id from its parts: magic, the root's address with its port, the
 * 2.29+ rank count, hpct's marker or not, in the layout of `version`. */
HPCT_PRIVATE void hpct__nccl_id_make(uint64_t magic, const struct sockaddr *sa, int nranks,
                                     int derived, int version, hpct_nccl_id *id);

/* HPCT_NCCL_PORT_BASE and _RANGE, with their defaults and checks. */
int hpct__nccl_ports(const struct hpct_topo *t, int *base_out, int *range_out);
/* The identity of communicator `key` over a group (job, epoch and members
 * are in the group's identity), its magic, and the port where the root of
 * world rank `world_rank` listens for it. */
uint64_t hpct__nccl_comm_hash(const struct hpct_group *g, uint64_t key);
uint64_t hpct__nccl_magic(uint64_t comm);
int hpct__nccl_root_port(const struct hpct_topo *t, uint64_t comm, int world_rank, int *port_out);

#endif
