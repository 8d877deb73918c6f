/* Inside libhpct_preload.so: what its files share.  preload.c: the
 * process (its environment, how it was given a rank, torchrun's agent, a
 * forked child, the world both halves share); preload_nccl.c: NCCL's entry
 * points; torch_route.c: whether this process's TCPStore is served in it;
 * torch_socket.c: libtorch's socket calls, sent to that store
 * (torch_store.c).  Every exported entry point is declared here, SHIM_API,
 * and listed in libhpct_preload.map (tests/test_symbols.sh compares them
 * with nm -D).  Nothing outside bootstrap/shim/ includes this. */
#ifndef HPCT_SHIM_PRELOAD_INTERNAL_H
#define HPCT_SHIM_PRELOAD_INTERNAL_H

#include <stddef.h>
#include <sys/socket.h>

#include "hpct/hpct.h"
#include "hpct/nccl.h"

#define SHIM_API __attribute__((visibility("default")))

/* NCCL's entry points as preload_nccl.c defines them (NCCL's types spelled as
 * hpct's: results are ints, comms and configs pointers). */
SHIM_API int ncclGetUniqueId(hpct_nccl_id *out);
SHIM_API int ncclCommInitRankConfig(void **comm, int nranks, hpct_nccl_id id, int rank,
                                    void *config);
SHIM_API int ncclCommInitRank(void **comm, int nranks, hpct_nccl_id id, int rank);
SHIM_API int ncclCommInitRankScalable(void **comm, int nranks, int rank, int nid, hpct_nccl_id *ids,
                                      void *config);
SHIM_API int ncclCommInitAll(void **comms, int ndev, const int *devlist);

/* The PyTorch half's socket calls (torch_socket.c); the shared world
 * (preload.c). */
SHIM_API int connect(int fd, const struct sockaddr *sa, socklen_t len);
SHIM_API int listen(int fd, int backlog);
SHIM_API int accept(int fd, struct sockaddr *sa, socklen_t *len);
SHIM_API int accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags);
SHIM_API long hpct_preload_store_routed(void);
SHIM_API hpct_world *hpct_preload_world(void);
SHIM_API void hpct_preload_world_lock(void);
SHIM_API void hpct_preload_world_unlock(void);

/* ---- the process (preload.c) ---- */

/* The process environment, whoever asked first: libc's getenv (the shim
 * interposes getenv, preload_nccl.c). */
char *hpct__preload_env_get(const char *name);
/* How this process was given a rank: by name (HPCT_RANK, RANK: a rank),
 * by its launcher only (SLURM_PROCID, OMPI_COMM_WORLD_RANK: a rank, or an
 * agent started by srun or mpirun), or not at all. */
enum rank_given { RANK_NONE, RANK_LAUNCHER, RANK_NAMED };
enum rank_given hpct__preload_rank_given(void);
/* Is this process a launcher's agent (torchrun, python -m
 * torch.distributed.run), by its command line? */
int hpct__preload_is_agent(void);
/* torchrun's agent, with HPCT_USE_ROOTLESS=1 (decided at load). */
int hpct__preload_agent_proc(void);
/* A forked child: of a process that loaded this library, or that tracked
 * a socket of hpct's (fdtrack.h). */
int hpct__preload_forked_child(void);

/* ---- the PyTorch half ---- */

/* Is this process's TCPStore served in it (torch_route.c)?  Decided at the
 * first call: 1, route this connection; 0, leave it; -1 with errno, fail
 * it. */
int hpct__torch_route(void);
/* MASTER_ADDR's addresses, resolved once the store is served here
 * (torch_socket.c): a connect to one of them on MASTER_PORT is routed. */
void hpct__torch_resolve_master(void);
/* torchrun's agent: its rendezvous endpoint as host:port ([host]:port for
 * IPv6; v4-mapped IPv6 as IPv4), learned by torch_socket.c. */
void hpct__torch_rdzv_endpoint(char *ep, size_t len);

#endif
