/* What hpct's NCCL roots and the rank-side player both speak: NCCL's split
 * of ranks among roots, and the blocking socket steps of the exchange. */
#include "bootstrap/nccl/root_wire.h"

#include <errno.h>
#include <netinet/tcp.h>
#include <sys/time.h>
#include <unistd.h>

#include "bootstrap/base/util.h"

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

int hpct__nccl_connect_to(const struct sockaddr *sa, double timeout_s, int *fd_out)
{
	double deadline = hpct__now() + timeout_s;
	for (;;) {
		int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
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
		if ((err != ECONNREFUSED && err != EINTR) || hpct__now() >= deadline)
			return -err;
		usleep(2000);
	}
}
