/* PyTorch's TCPStore served inside a rank (torch_store.c; its wire and
 * protocol tables torch_proto.c, its commands torch_commands.c): the wire
 * protocol of torch 1.13 and of 2.4 to 2.15 (and newer, checked) answered on a loopback
 * listener of this process, each command done on hpct's rootless store
 * (keys on their home ranks).  torch_socket.c sends a rank's store
 * connections here; nothing reaches MASTER_ADDR:MASTER_PORT. */
#ifndef HPCT_SHIM_TORCH_STORE_H
#define HPCT_SHIM_TORCH_STORE_H

#include <stdint.h>
#include <sys/socket.h>

#include "hpct/hpct.h"

struct hpct_torch_proto;

/* The protocol of a torch version ("1.13.1", "2.13.0+cpu"), or NULL when
 * hpct does not serve it (older than 1.13, 2.0 to 2.3, no version).  A
 * version newer than every release hpct knows gets the newest protocol,
 * checked on each connection (hpct__torch_proto_newer says so). */
const struct hpct_torch_proto *hpct__torch_proto_for(const char *version);
/* 1 for that newer torch's protocol. */
int hpct__torch_proto_newer(const struct hpct_torch_proto *proto);
/* Does that torch's libtorch import Gloo's connectFullMesh (1.13), so that
 * hpct's Gloo connect can take its place? */
int hpct__torch_proto_gloo_imported(const struct hpct_torch_proto *proto);
/* "1.13 and 2.4 to 2.15": the versions hpct serves, for messages. */
const char *hpct__torch_protos_known(void);

/* Starts the listener and its thread (once): clients of protocol `proto`
 * over `world`'s store.  0, or an hpct error (logged). */
int hpct__torch_store_start(hpct_world *world, const struct hpct_torch_proto *proto);
/* Where a routed client connects: the listener's address for a socket of
 * `family` (AF_INET: 127.0.0.1, AF_INET6: ::ffff:127.0.0.1). */
int hpct__torch_store_addr(int family, struct sockaddr_storage *ss, socklen_t *len);
/* A client's source port, told before it connects: the listener accepts
 * no other. */
void hpct__torch_store_expect(uint16_t port);
/* That client's connect failed: it will not come. */
void hpct__torch_store_unexpect(uint16_t port);
/* Serves a client that reached rank 0's TCPStore server at MASTER_PORT
 * (not routed here) on the same keyspace; takes fd. */
void hpct__torch_store_adopt(int fd);
/* In a forked child of a rank: listens anew (the parent's listener and
 * threads are not the child's), clients of protocol `proto` over `world`
 * (NULL, NULL: the parent's); 0, or an error. */
int hpct__torch_store_restart_child(hpct_world *world, const struct hpct_torch_proto *proto);
/* Connections accepted so far (a test asks it through the shim). */
long hpct__torch_store_routed(void);
/* The preload's lock on the shared world (preload.c). */
void hpct_preload_world_lock(void);
void hpct_preload_world_unlock(void);
/* The listener's port (0 before start). */
uint16_t hpct__torch_store_port(void);

#endif
