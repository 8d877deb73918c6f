/* Socket helpers shared by the one-server clients (see sock.h). */
#include "bootstrap/base/fdtrack.h"
#include "bootstrap/base/sock.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap/base/util.h"
#include "hpct/hpct.h"

/* 1: ready, 0: deadline passed, <0: -errno. */
int hpct__sock_wait(int fd, short events, double deadline)
{
	for (;;) {
		double left = deadline - hpct__now();
		if (left <= 0)
			left = 0;
		struct pollfd pfd = { .fd = fd, .events = events };
		int ms = left > 86400 ? 86400 * 1000 : (int)(left * 1000) + (left > 0);
		int r = poll(&pfd, 1, ms);
		if (r > 0)
			return 1;
		if (r < 0 && errno != EINTR)
			return -errno;
		if (r == 0 && hpct__now() >= deadline)
			return 0;
	}
}

int hpct__sock_retryable(int err)
{
	switch (err) {
	case ECONNREFUSED:
	case ETIMEDOUT:
	case ECONNRESET:
	case ECONNABORTED:
	case EHOSTUNREACH:
	case ENETUNREACH:
	case ENETDOWN:
	case EHOSTDOWN:
	case EADDRNOTAVAIL:
	case EAGAIN:
	case EINTR:
		return 1;
	}
	return 0;
}

void hpct__sleep(double s)
{
	if (s <= 0)
		return;
	struct timespec ts = { .tv_sec = (time_t)s,
		               .tv_nsec = (long)((s - (double)(time_t)s) * 1e9) };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* One connect attempt: the connected fd, -errno, or HPCT_ETIMEDOUT when the
 * deadline came first. */
int hpct__sock_connect(const struct sockaddr_storage *ss, socklen_t sl, double deadline)
{
	int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	hpct__fd_track(fd);
	if (fd < 0)
		return -errno;
	int err = 0;
	if (connect(fd, (const struct sockaddr *)ss, sl) != 0) {
		err = errno;
		if (err == EINPROGRESS) {
			int w = hpct__sock_wait(fd, POLLOUT, deadline);
			socklen_t el = sizeof(err);
			if (w == 0) {
				close(fd);
				return HPCT_ETIMEDOUT;
			}
			if (w < 0)
				err = -w;
			else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
				err = errno;
		}
	}
	if (err) {
		close(fd);
		return -err;
	}
	/* Blocking from here; each call below still passes MSG_DONTWAIT and
	 * waits in poll(), so nothing blocks past a deadline. */
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

int hpct__sock_again(int fd, short events, double deadline)
{
	if (errno == EINTR)
		return 0;
	if (errno != EAGAIN && errno != EWOULDBLOCK)
		return -errno;
	int w = hpct__sock_wait(fd, events, deadline);
	return w > 0 ? 0 : w == 0 ? HPCT_ETIMEDOUT : w;
}

int hpct__sock_send_all(int fd, const void *buf, size_t len, double deadline)
{
	const unsigned char *p = buf;
	while (len) {
		ssize_t w = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0) {
			int again = hpct__sock_again(fd, POLLOUT, deadline);
			if (again)
				return again;
			continue;
		}
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

int hpct__sock_recv_all(int fd, void *buf, size_t len, double deadline)
{
	unsigned char *p = buf;
	while (len) {
		ssize_t r = recv(fd, p, len, MSG_DONTWAIT);
		if (r == 0)
			return HPCT_EPEERDEAD;
		if (r < 0) {
			int again = hpct__sock_again(fd, POLLIN, deadline);
			if (again)
				return again;
			continue;
		}
		p += r;
		len -= (size_t)r;
	}
	return 0;
}
