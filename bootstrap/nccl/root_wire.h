/* The wires of NCCL's bootstrap root (NCCL 2.19 to 2.32), shared by hpct's
 * roots (root.c) and the rank-side player of tests and hpct-bench
 * (player.c).
 *
 * As NCCL's sockets have it: whoever connects first sends the 8-byte magic
 * of the id and the 4-byte socket type (1, bootstrap), with no answer; an
 * acceptor drops a connection with the wrong magic.  Then messages are a
 * 4-byte size and the bytes.  A rank sends its root a report (rank,
 * nranks, the address where it waits for the root, its ring info, and
 * from 2.23 its root's place among several); the root connects to that
 * address, with the magic of its own id and type 1, and sends the rank the
 * ring info of the next rank.  With several roots (2.23 and later), ranks
 * are cut in contiguous blocks and the first rank of each block also
 * reports to the previous block's root, so every root knows the next rank
 * of its last.  Integers are in host order: roots and ranks share an
 * architecture.
 *
 * What changed between releases is the report's layout and the answer's
 * size: one row of hpct__nccl_wires each, read from NCCL's bootstrap.cc
 * of the tags (struct extInfo, bootstrapRoot, bootstrapInit). */
#ifndef HPCT_NCCL_ROOT_WIRE_H
#define HPCT_NCCL_ROOT_WIRE_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "bootstrap/nccl/nccl_internal.h"

#define HPCT_NCCL_SOCK_TYPE_BOOTSTRAP 1
#define HPCT_NCCL_HDR_LEN             16 /* magic, type, size */

/* One wire of the root exchange.  Offsets are into the report (after its
 * 16-byte header); the answer carries reply_len bytes of the next rank's
 * ring info, which a rank reports at ring_at. */
struct hpct_nccl_wire {
	const char *releases;         /* "2.23-2.28", for messages */
	int min_version, max_version; /* ncclGetVersion() codes that speak it */
	int report_len;               /* sizeof(struct extInfo) */
	int reply_len;                /* the answer's size: the ring info */
	int multi_root;               /* int iroot, nroots at 8, 12; else one root */
	int offset_at;                /* int offset (ncclCommGrow's), or -1 */
	int addr_at;                  /* where the rank waits for its answer (28 B) */
	int ring_at;                  /* the rank's ring info (reply_len B) */
};

/* The rows, oldest first: 2.19-2.22 (64-byte report, 28-byte answer, one
 * root), 2.23-2.28 (172, 128), 2.29-2.32 (176, 128, with offset). */
#define HPCT_NCCL_NWIRES 3
extern const struct hpct_nccl_wire hpct__nccl_wires[HPCT_NCCL_NWIRES];
/* The row NCCL `version` (ncclGetVersion's code, e.g. 22903) speaks; NULL
 * below 2.19 and above the newest release verified here. */
const struct hpct_nccl_wire *hpct__nccl_wire_for_version(int version);
/* The row whose report is `report_len` bytes; NULL when none is. */
const struct hpct_nccl_wire *hpct__nccl_wire_for_len(int report_len);

/* How NCCL splits ranks among roots: contiguous blocks, the first
 * nranks % nroots roots one rank longer. */
int hpct__nccl_root_of(int rank, int nranks, int nroots);
int hpct__nccl_first_of(int root, int nranks, int nroots);
int hpct__nccl_count_of(int root, int nranks, int nroots);

static inline void hpct__nccl_put32(unsigned char *p, int32_t v)
{
	memcpy(p, &v, 4);
}

static inline int32_t hpct__nccl_get32(const unsigned char *p)
{
	int32_t v;
	memcpy(&v, p, 4);
	return v;
}

/* The 16 bytes that open a message: magic, socket type (bootstrap), size. */
static inline void hpct__nccl_header(unsigned char *p, uint64_t magic, int32_t size)
{
	memcpy(p, &magic, 8);
	hpct__nccl_put32(p + 8, HPCT_NCCL_SOCK_TYPE_BOOTSTRAP);
	hpct__nccl_put32(p + 12, size);
}

static inline socklen_t hpct__nccl_addr_len(const struct sockaddr *sa)
{
	return sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

/* Writes all of buf to fd (blocking, bounded by SO_SNDTIMEO): 0, or
 * -errno (-EPIPE when the peer closed). */
int hpct__nccl_send_all(int fd, const void *buf, size_t len);
/* A blocking connect bounded by `timeout_s`; ECONNREFUSED is retried (the
 * listener may not be up yet) with a short sleep until then, or until
 * refused_s when that comes first (a peer known to listen already and
 * refusing is gone).  *fd_out:
 * the connected socket, SO_SNDTIMEO and SO_RCVTIMEO set to timeout_s, on
 * success; else -errno. */
int hpct__nccl_connect_to(const struct sockaddr *sa, double timeout_s, double refused_s,
                          int *fd_out);

#endif
