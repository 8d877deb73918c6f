/* tests/standin/yield.c: libstandin_yield.so, an optional LD_PRELOAD for
 * tests that run many NCCL ranks on few cores.  TEST-ONLY; see README.md.
 *
 * NCCL waits for its peers by polling non-blocking sockets in a tight loop
 * (bootstrap all-gathers, connection set-up, the proxy threads).  With 64
 * ranks on 2 cores the ranks that wait burn the time slices the ranks they
 * wait for need, and init takes minutes.  This library gives the processor
 * away for a moment (HPCT_STANDIN_YIELD_US, default 20 microseconds) each
 * time such a poll finds nothing: recv(MSG_DONTWAIT) or accept() that would
 * block, poll() with a zero timeout that finds nothing.  Nothing else
 * changes; on a machine with a core per rank it is not needed. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

static struct {
	pthread_once_t once;
	long pause_ns;
	ssize_t (*recv)(int, void *, size_t, int);
	int (*accept)(int, struct sockaddr *, socklen_t *);
	int (*accept4)(int, struct sockaddr *, socklen_t *, int);
	int (*poll)(struct pollfd *, nfds_t, int);
} y = { .once = PTHREAD_ONCE_INIT };

static void init_once(void)
{
	const char *s = getenv("HPCT_STANDIN_YIELD_US");
	y.pause_ns = (s != NULL ? atol(s) : 20) * 1000;
	*(void **)&y.recv = dlsym(RTLD_NEXT, "recv");
	*(void **)&y.accept = dlsym(RTLD_NEXT, "accept");
	*(void **)&y.accept4 = dlsym(RTLD_NEXT, "accept4");
	*(void **)&y.poll = dlsym(RTLD_NEXT, "poll");
}

/* Sleeps a moment if the call would have blocked; keeps errno. */
static void pause_if(int would_block)
{
	if (!would_block || y.pause_ns <= 0)
		return;
	int saved = errno;
	struct timespec t = { 0, y.pause_ns };
	nanosleep(&t, NULL);
	errno = saved;
}

ssize_t recv(int fd, void *buf, size_t len, int flags)
{
	pthread_once(&y.once, init_once);
	ssize_t r = y.recv(fd, buf, len, flags);
	pause_if(r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && (flags & MSG_DONTWAIT));
	return r;
}

int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
	pthread_once(&y.once, init_once);
	int r = y.accept(fd, addr, len);
	pause_if(r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
	return r;
}

int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
	pthread_once(&y.once, init_once);
	int r = y.accept4(fd, addr, len, flags);
	pause_if(r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
	return r;
}

int poll(struct pollfd *fds, nfds_t n, int timeout)
{
	pthread_once(&y.once, init_once);
	int r = y.poll(fds, n, timeout);
	pause_if(r == 0 && timeout == 0);
	return r;
}
