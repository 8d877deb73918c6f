/* libtorch_fake.so: a stand-in for libtorch in tests/test_torch_fake.c.
 * Its basename starts with "libtorch", so a connect() made from here is,
 * to libhpct_preload.so, a TCPStore client's. */
#include "loopback_connect.h"

int fake_store_connect(int port);

/* A blocking TCP connect to 127.0.0.1:port: the fd, or -errno. */
__attribute__((visibility("default"))) int fake_store_connect(int port)
{
	return loopback_connect(port);
}
