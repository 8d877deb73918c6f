/* torch_fake_rank: a PyTorch rank's first TCPStore connection, without
 * torch, for tests/test_torch_fake.c (run under libhpct_preload.so).
 *
 *   torch_fake_rank lib|self|parent PORT /path/torch/_C.<...>.so /path/libtorch_fake.so PROTO
 *
 * Listens on 127.0.0.1:PORT itself (MASTER_PORT: where a TCPStore server
 * would be), loads the fake _C module (for the version the shim reads) and
 * libtorch_fake.so, then connects to PORT from libtorch_fake.so (lib) or
 * from this program (self).  A connection that did not reach its own
 * listener is asked something in the store protocol given: 2 (VALIDATE,
 * then PING, whose nonce must come back) or 1.13 (GETNUMKEYS, whose i64
 * must come back); or told something it must refuse by closing the
 * connection at once: 2-unknown-op (VALIDATE, then command 40, which no
 * torch has), 2-no-validate (PING before VALIDATE).  Prints one line:
 *
 *   listener=<0|1> answered=<0|1> routed=<hpct_preload_store_routed()>
 *
 * parent: as lib, then closes its listener and runs itself as lib (a
 * process a rank started, as a DataLoader worker or a compile worker is),
 * which prints its own line after this one's.
 * and exits 0; 2 when something around the question failed (stderr says
 * what).  Every wait has a deadline. */
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shim/loopback_connect.h"

#define DEADLINE_MS 10000

static int fail(const char *what, const char *why)
{
	fprintf(stderr, "torch_fake_rank: %s: %s\n", what, why);
	return 2;
}

static long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Reads exactly n bytes before the deadline: 0, or -1. */
static int read_all(int fd, void *buf, size_t n, long until)
{
	size_t got = 0;
	while (got < n) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		long left = until - now_ms();
		if (left <= 0 || poll(&p, 1, (int)left) != 1)
			return -1;
		ssize_t r = read(fd, (char *)buf + got, n - got);
		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	return 0;
}

/* 1 when the server closes fd before the deadline, sending nothing: an
 * EOF, or a reset where it closed with the rest of a request unread. */
static int closed_on(int fd, long until)
{
	char b;
	struct pollfd p = { .fd = fd, .events = POLLIN };
	long left = until - now_ms();
	if (left <= 0 || poll(&p, 1, (int)left) != 1)
		return 0;
	ssize_t r = read(fd, &b, 1);
	return r == 0 || (r < 0 && errno == ECONNRESET);
}

/* Asks the store a question whose answer this client can check. */
static int ask(int fd, const char *proto)
{
	long until = now_ms() + DEADLINE_MS;
	unsigned char req[10];
	size_t len;
	uint32_t magic = 0x3C85F7CEu;
	if (strcmp(proto, "2-unknown-op") == 0) {
		req[0] = 0; /* VALIDATE */
		memcpy(req + 1, &magic, 4);
		req[5] = 40; /* no torch's command */
		return write(fd, req, 6) == 6 && closed_on(fd, until);
	}
	if (strcmp(proto, "2-no-validate") == 0) {
		req[0] = 13; /* PING first */
		memcpy(req + 1, &magic, 4);
		return write(fd, req, 5) == 5 && closed_on(fd, until);
	}
	if (strcmp(proto, "2") == 0) {
		uint32_t nonce = 0x5eed1234u;
		req[0] = 0; /* VALIDATE, no reply */
		memcpy(req + 1, &magic, 4);
		req[5] = 13; /* PING: the nonce comes back */
		memcpy(req + 6, &nonce, 4);
		len = 10;
		if (write(fd, req, len) != (ssize_t)len)
			return 0;
		uint32_t back = 0;
		return read_all(fd, &back, 4, until) == 0 && back == nonce;
	}
	req[0] = 6; /* 1.13's GETNUMKEYS: an i64 comes back */
	if (write(fd, req, 1) != 1)
		return 0;
	int64_t n = -1;
	return read_all(fd, &n, 8, until) == 0 && n >= 0;
}


int main(int argc, char **argv)
{
	if (argc != 6 ||
	    (strcmp(argv[1], "lib") && strcmp(argv[1], "self") && strcmp(argv[1], "parent")) ||
	    (strcmp(argv[5], "2") && strcmp(argv[5], "1.13") && strcmp(argv[5], "2-unknown-op") &&
	     strcmp(argv[5], "2-no-validate")))
		return fail("usage", "torch_fake_rank lib|self|parent PORT _C.so libtorch_fake.so "
		                     "2|1.13|2-unknown-op|2-no-validate");
	int port = atoi(argv[2]);

	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
	    bind(lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(lfd, 8) != 0)
		return fail("listen on 127.0.0.1:MASTER_PORT", strerror(errno));

	if (!dlopen(argv[3], RTLD_NOW | RTLD_LOCAL))
		return fail("load the fake _C", dlerror());
	void *lib = dlopen(argv[4], RTLD_NOW | RTLD_LOCAL);
	if (!lib)
		return fail("load libtorch_fake.so", dlerror());
	int (*fake_connect)(int);
	*(void **)&fake_connect = dlsym(lib, "fake_store_connect");
	if (!fake_connect)
		return fail("fake_store_connect", dlerror());

	int fd = strcmp(argv[1], "self") != 0 ? fake_connect(port) : loopback_connect(port);
	if (fd < 0)
		return fail("connect to 127.0.0.1:MASTER_PORT", strerror(-fd));

	/* A connection to the listener is in its queue once connect returned
	 * (or just after): wait for it.  One that went elsewhere never comes
	 * here: look once. */
	struct sockaddr_in peer;
	socklen_t pl = sizeof(peer);
	if (getpeername(fd, (struct sockaddr *)&peer, &pl) != 0)
		return fail("getpeername", strerror(errno));
	int to_listener = ntohs(peer.sin_port) == port;
	struct pollfd p = { .fd = lfd, .events = POLLIN };
	int listener = 0;
	if (poll(&p, 1, to_listener ? DEADLINE_MS : 0) == 1) {
		int c = accept(lfd, NULL, NULL);
		listener = c >= 0;
		if (c >= 0)
			close(c);
	}
	int answered = to_listener ? 0 : ask(fd, argv[5]);

	long (*routed)(void);
	*(void **)&routed = dlsym(RTLD_DEFAULT, "hpct_preload_store_routed");
	printf("listener=%d answered=%d routed=%ld\n", listener, answered, routed ? routed() : -1L);
	fflush(stdout);
	close(fd);
	close(lfd);
	if (strcmp(argv[1], "parent") != 0)
		return 0;
	/* its waits have deadlines: so has this one */
	extern char **environ;
	pid_t pid;
	argv[1] = (char *)"lib";
	int rc = posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, environ);
	if (rc != 0)
		return fail("spawn a child", strerror(rc));
	int status = 0;
	if (waitpid(pid, &status, 0) != pid)
		return fail("wait for the child", strerror(errno));
	return WIFEXITED(status) ? WEXITSTATUS(status) : 2;
}
