/* The "tcp" row of the fan-out's transfer table: a connection of its own
 * between the two members that exchange chunks, with the deadline helpers
 * of base/sock.c. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include "bootstrap/base/fdtrack.h"
#include "bootstrap/base/sock.h"
#include "bootstrap/fanout/fanout_internal.h"

static int tcp_listen(const struct sockaddr_storage *at, socklen_t len, int *fd_out,
                      struct sockaddr_storage *bound, socklen_t *bound_len)
{
	int fd = socket(at->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	hpct__fd_track(fd);
	*bound_len = sizeof(*bound);
	if (bind(fd, (const struct sockaddr *)at, len) != 0 || listen(fd, 128) != 0 ||
	    getsockname(fd, (struct sockaddr *)bound, bound_len) != 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	*fd_out = fd;
	return 0;
}

static int tcp_accept(int lfd)
{
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	hpct__fd_track(fd);
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static int tcp_connect(const struct sockaddr_storage *ss, socklen_t len, double deadline)
{
	return hpct__sock_connect(ss, len, deadline);
}

static void tcp_close(int fd)
{
	if (fd >= 0)
		close(fd);
}

const struct fo_xfer_ops hpct__fo_xfer_tcp = {
	.name = "tcp",
	.listen = tcp_listen,
	.accept = tcp_accept,
	.connect = tcp_connect,
	.send = hpct__sock_send_all,
	.recv = hpct__sock_recv_all,
	.close = tcp_close,
};
