/* What hpct's NCCL roots and the rank-side player both speak: the wire of
 * each release, NCCL's split of ranks among roots, and the blocking socket
 * steps of the exchange. */
#include "bootstrap/base/fdtrack.h"
#include "bootstrap/nccl/root_wire.h"

#include <errno.h>
#include <netinet/tcp.h>
#include <sys/time.h>
#include <unistd.h>

#include "bootstrap/base/util.h"

/* From NCCL's src/bootstrap.cc of the tags.  2.19-2.22: struct extInfo {
 * int rank, nranks; ncclSocketAddress extAddressListenRoot,
 * extAddressListen; }, the root answers sizeof(ncclSocketAddress) and, as a
 * single root, only once every rank came (answering each as soon as its
 * next rank is known is the same to the rank).  2.23-2.28: { int rank,
 * nranks, iroot, nroots; ncclSocketAddress listenRootAddress; union
 * ringConnectInfo connectInfo (128 B); }, answered with the 128 bytes.
 * 2.29 added `int offset` after nroots (ncclCommGrow; 0 for every other
 * init); 2.30.7's and, on the wire, 2.31's and 2.32's are the same. */
const struct hpct_nccl_wire hpct__nccl_wires[HPCT_NCCL_NWIRES] = {
	{ .releases = "2.19-2.22",
	  .min_version = HPCT_NCCL_OLDEST_VERSION,
	  .max_version = 22299,
	  .report_len = 8 + 2 * HPCT_NCCL_ADDR_LEN,
	  .reply_len = HPCT_NCCL_ADDR_LEN,
	  .multi_root = 0,
	  .offset_at = -1,
	  .addr_at = 8,
	  .ring_at = 8 + HPCT_NCCL_ADDR_LEN },
	{ .releases = "2.23-2.28",
	  .min_version = 22300,
	  .max_version = 22899,
	  .report_len = 16 + HPCT_NCCL_ADDR_LEN + HPCT_NCCL_RING_LEN,
	  .reply_len = HPCT_NCCL_RING_LEN,
	  .multi_root = 1,
	  .offset_at = -1,
	  .addr_at = 16,
	  .ring_at = 16 + HPCT_NCCL_ADDR_LEN },
	{ .releases = "2.29-" HPCT_NCCL_NEWEST_VERIFIED_NAME,
	  .min_version = 22900,
	  .max_version = HPCT_NCCL_NEWEST_VERIFIED_VERSION,
	  .report_len = 20 + HPCT_NCCL_ADDR_LEN + HPCT_NCCL_RING_LEN,
	  .reply_len = HPCT_NCCL_RING_LEN,
	  .multi_root = 1,
	  .offset_at = 16,
	  .addr_at = 20,
	  .ring_at = 20 + HPCT_NCCL_ADDR_LEN },
};

const struct hpct_nccl_wire *hpct__nccl_wire_for_version(int version)
{
	for (int i = 0; i < HPCT_NCCL_NWIRES; i++)
		if (version >= hpct__nccl_wires[i].min_version &&
		    version <= hpct__nccl_wires[i].max_version)
			return &hpct__nccl_wires[i];
	return NULL;
}

const struct hpct_nccl_wire *hpct__nccl_wire_for_len(int report_len)
{
	for (int i = 0; i < HPCT_NCCL_NWIRES; i++)
		if (report_len == hpct__nccl_wires[i].report_len)
			return &hpct__nccl_wires[i];
	return NULL;
}

int hpct__nccl_first_of(int root, int nranks, int nroots)
{
	int per = nranks / nroots, extra = nranks % nroots;
	return root * per + (root < extra ? root : extra);
}

int hpct__nccl_count_of(int root, int nranks, int nroots)
{
	root = (root % nroots + nroots) % nroots;
	return nranks / nroots + (root < nranks % nroots ? 1 : 0);
}

int hpct__nccl_root_of(int rank, int nranks, int nroots)
{
	int per = nranks / nroots, extra = nranks % nroots;
	int longer = extra * (per + 1); /* ranks in the longer blocks */
	return rank < longer ? rank / (per + 1) : extra + (rank - longer) / per;
}

int hpct__nccl_send_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len > 0) {
		ssize_t k = send(fd, p, len, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return k < 0 ? -errno : -EPIPE;
		p += k;
		len -= (size_t)k;
	}
	return 0;
}

int hpct__nccl_connect_to(const struct sockaddr *sa, double timeout_s, double refused_s,
                          int *fd_out)
{
	double now = hpct__now(), deadline = now + timeout_s, refused_until = now + refused_s;
	for (;;) {
		int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		hpct__fd_track(fd);
		if (fd < 0)
			return -errno;
		struct timeval tv = { .tv_sec = (long)timeout_s,
			              .tv_usec = (long)((timeout_s - (long)timeout_s) * 1e6) };
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (connect(fd, sa, hpct__nccl_addr_len(sa)) == 0) {
			*fd_out = fd;
			return 0;
		}
		int err = errno;
		close(fd);
		if (err == EINPROGRESS) /* SO_SNDTIMEO ran out during the connect */
			return -ETIMEDOUT;
		now = hpct__now();
		if ((err != ECONNREFUSED && err != EINTR) || now >= deadline ||
		    (err == ECONNREFUSED && now >= refused_until))
			return -err;
		usleep(2000);
	}
}
