/* A blocking TCP connect to 127.0.0.1:port: the fd, or -errno.  Static, so
 * each object that includes it makes the connect() call from its own code
 * (libtorch_fake.so: as libtorch would; torch_fake_rank: as a program
 * would), which is what the shim tells apart. */
#ifndef HPCT_TESTS_LOOPBACK_CONNECT_H
#define HPCT_TESTS_LOOPBACK_CONNECT_H

#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

static inline int loopback_connect(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

#endif
