/* libtorch_fake.so: a stand-in for libtorch in tests/test_torch_fake.c.
 * Its basename starts with "libtorch", so a connect() made from here is,
 * to libhpct_preload.so, a TCPStore client's. */
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

int fake_store_connect(int port);

/* A blocking TCP connect to 127.0.0.1:port: the fd, or -errno. */
__attribute__((visibility("default"))) int fake_store_connect(int port)
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
