/* libhpct_preload.so, the PyTorch half's socket calls: libtorch's
 * connections to this process's TCPStore go to the store served in it
 * (torch_store.c), once torch_route.c decided to serve it.
 *
 *   connect                   a TCPStore's, from libtorch, to MASTER_PORT
 *                             (a rank) or to the rendezvous endpoint
 *                             (torchrun's agent, across nodes): to this
 *                             process's store
 *   listen, accept4, accept   rank 0's TCPStore server at MASTER_PORT: a
 *                             client hpct does not route is served there
 *   hpct_preload_store_routed TCPStore connections served here
 *
 * Rank 0's TCPStore server still binds MASTER_PORT (PyTorch 2.x checks
 * that it got that port) and stays idle.  Only calls made from libtorch
 * are looked at (the caller's object), so a Python socket or another
 * library on the same port is left alone.  The store's address: MASTER_PORT
 * on one of MASTER_ADDR's addresses (a rank); the rendezvous endpoint,
 * learned from libtorch's first listen or connect (torchrun's agent). */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/shim/got.h"
#include "bootstrap/shim/preload_internal.h"
#include "bootstrap/shim/torch_store.h"

/* The next definition of an interposed libc function, found once. */
static void *next_libc(_Atomic(void *) *slot, const char *name)
{
	void *f = atomic_load(slot);
	if (!f) {
		f = dlsym(RTLD_NEXT, name);
		atomic_store(slot, f);
	}
	return f;
}

typedef int (*sock_fn)(int, const struct sockaddr *, socklen_t);
static _Atomic(void *) real_connect;

static sock_fn next_connect_fn(void)
{
	sock_fn f;
	*(void **)&f = next_libc(&real_connect, "connect");
	return f;
}

static struct {
	pthread_once_t once;
	uint16_t port; /* MASTER_PORT, 0 when unset */
} master = { PTHREAD_ONCE_INIT, 0 };

static struct sockaddr_storage master_addrs[8];
static int nmaster_addrs;

static void read_master_port(void)
{
	const char *p = hpct__preload_env_get("MASTER_PORT");
	char *end;
	long v = p ? strtol(p, &end, 10) : 0;
	if (p && *p && !*end && v > 0 && v < 65536)
		master.port = (uint16_t)v;
}

static uint16_t port_of(const struct sockaddr *sa)
{
	return ntohs(sa->sa_family == AF_INET6 ? ((const struct sockaddr_in6 *)sa)->sin6_port
	                                       : ((const struct sockaddr_in *)sa)->sin_port);
}

static int tcp_addr(const struct sockaddr *sa, socklen_t len)
{
	return sa && (sa->sa_family == AF_INET || sa->sa_family == AF_INET6) &&
	       len >= (socklen_t)sizeof(struct sockaddr_in);
}

/* torchrun's agent: its rendezvous store's endpoint, learned from the
 * first TCP listen or connect libtorch makes in it (an agent's one
 * TCPStore: c10d's endpoint, static's MASTER_ADDR:MASTER_PORT); the
 * address from the first connect, which the agent that hosts the store
 * makes too, to the same name as every other agent. */
static struct {
	pthread_mutex_t mu;
	_Atomic uint16_t port;
	struct sockaddr_storage addr; /* written once, before have_addr */
	atomic_int have_addr;
} rdzv = { PTHREAD_MUTEX_INITIALIZER, 0, { 0 }, 0 };

static void rdzv_learn(const struct sockaddr *sa, int connecting)
{
	pthread_mutex_lock(&rdzv.mu);
	if (!atomic_load(&rdzv.port))
		atomic_store(&rdzv.port, port_of(sa));
	if (connecting && !atomic_load(&rdzv.have_addr) && port_of(sa) == atomic_load(&rdzv.port)) {
		memcpy(&rdzv.addr, sa,
		       sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
		                                 : sizeof(struct sockaddr_in));
		atomic_store(&rdzv.have_addr, 1);
	}
	pthread_mutex_unlock(&rdzv.mu);
}

/* A TCP address on the port of this process's store: MASTER_PORT (a
 * rank), the rendezvous endpoint's (torchrun's agent). */
static int store_port(const struct sockaddr *sa, socklen_t len)
{
	if (!tcp_addr(sa, len))
		return 0;
	if (hpct__preload_agent_proc())
		return atomic_load(&rdzv.port) && port_of(sa) == atomic_load(&rdzv.port);
	pthread_once(&master.once, read_master_port);
	return master.port && port_of(sa) == master.port;
}

/* Made from libtorch (libtorch_cpu.so, libtorch.so, Debian's .so.1.13)? */
static int from_torch(const void *caller)
{
	static const char *const torch[] = { "libtorch", "libc10d", NULL };
	return hpct__object_named(caller, torch);
}

/* The host part of an address: IPv4 (or v4-mapped IPv6) as 4 bytes, other
 * IPv6 as 16; how many. */
static int host_bytes(const struct sockaddr *sa, unsigned char out[16])
{
	if (sa->sa_family == AF_INET) {
		memcpy(out, &((const struct sockaddr_in *)sa)->sin_addr, 4);
		return 4;
	}
	const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
	if (IN6_IS_ADDR_V4MAPPED(a)) {
		memcpy(out, a->s6_addr + 12, 4);
		return 4;
	}
	memcpy(out, a->s6_addr, 16);
	return 16;
}

/* 1 when a and b are the same host. */
static int addr_same(const struct sockaddr *a, const struct sockaddr_storage *b)
{
	unsigned char x[16], y[16];
	int nx = host_bytes(a, x), ny = host_bytes((const struct sockaddr *)b, y);
	return nx == ny && memcmp(x, y, (size_t)nx) == 0;
}

static int loopback(const struct sockaddr *sa)
{
	unsigned char h[16];
	return host_bytes(sa, h) == 4
	               ? h[0] == 127
	               : IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

/* One of MASTER_ADDR's addresses (what libtorch resolved it to); loopback
 * only when MASTER_ADDR did not resolve here. */
static int master_host(const struct sockaddr *sa)
{
	if (hpct__preload_agent_proc())
		return atomic_load(&rdzv.have_addr) && addr_same(sa, &rdzv.addr);
	if (nmaster_addrs == 0)
		return loopback(sa);
	for (int i = 0; i < nmaster_addrs; i++)
		if (addr_same(sa, &master_addrs[i]))
			return 1;
	return 0;
}

void hpct__torch_resolve_master(void)
{
	const char *h = hpct__preload_env_get("MASTER_ADDR");
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai = NULL;
	if (!h || !*h || getaddrinfo(h, NULL, &hints, &ai) != 0)
		return;
	for (struct addrinfo *p = ai; p && nmaster_addrs < 8; p = p->ai_next)
		if (p->ai_addrlen <= sizeof(struct sockaddr_storage))
			memcpy(&master_addrs[nmaster_addrs++], p->ai_addr, p->ai_addrlen);
	freeaddrinfo(ai);
}

void hpct__torch_rdzv_endpoint(char *ep, size_t len)
{
	unsigned char h[16];
	char txt[INET6_ADDRSTRLEN] = "?";
	int hn = host_bytes((const struct sockaddr *)&rdzv.addr, h);
	inet_ntop(hn == 4 ? AF_INET : AF_INET6, h, txt, sizeof(txt));
	snprintf(ep, len, hn == 4 ? "%s:%u" : "[%s]:%u", txt,
	         port_of((const struct sockaddr *)&rdzv.addr));
}

SHIM_API int connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	sock_fn next_connect = next_connect_fn();
	if (!next_connect) {
		errno = ENOSYS;
		return -1;
	}
	/* libtorch's?  (looked up once: dladdr is not free.)  An agent's
	 * first such connect teaches it the store's port, so that port is
	 * asked after. */
	int agent = hpct__preload_agent_proc() && tcp_addr(sa, len);
	int torch = (agent || store_port(sa, len)) && from_torch(__builtin_return_address(0));
	if (agent && torch)
		rdzv_learn(sa, 1);
	if (!torch || !store_port(sa, len))
		return next_connect(fd, sa, len);
	int r = hpct__torch_route();
	if (r < 0)
		return -1;
	if (r == 0 || !master_host(sa))
		return next_connect(fd, sa, len);
	struct sockaddr_storage to, me;
	socklen_t tl, ml = sizeof(me);
	if (hpct__torch_store_addr(sa->sa_family, &to, &tl) != 0)
		return next_connect(fd, sa, len);
	/* the source port, known before the kernel may complete the connect,
	 * is how the listener knows its clients */
	if (getsockname(fd, (struct sockaddr *)&me, &ml) != 0)
		return -1;
	if (port_of((struct sockaddr *)&me) == 0) {
		memset(&me, 0, sizeof(me));
		me.ss_family = sa->sa_family;
		ml = sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
		                               : sizeof(struct sockaddr_in);
		if (bind(fd, (struct sockaddr *)&me, ml) != 0)
			return -1;
		ml = sizeof(me);
		if (getsockname(fd, (struct sockaddr *)&me, &ml) != 0)
			return -1;
	}
	uint16_t mine = port_of((struct sockaddr *)&me);
	hpct__torch_store_expect(mine);
	int rc = next_connect(fd, (struct sockaddr *)&to, tl);
	if (rc != 0 && errno != EINPROGRESS && errno != EINTR) {
		int e = errno;
		hpct__torch_store_unexpect(mine);
		errno = e;
	}
	return rc;
}

/* Rank 0's TCPStore server (its listener on MASTER_PORT, made by
 * libtorch in a process whose store is served here): idle for the ranks,
 * whose connections never reach it, but a client hpct does not route (a
 * process of another job or replica group, a rank's exec'd child, an
 * agent) lands there, and is served the ranks' keyspace instead: its
 * accept takes each such connection to torch_store.c, and PyTorch's server
 * sees none (a non-blocking listener, libuv's: EAGAIN; a blocking one,
 * the legacy server's: a connection already closed, which it drops). */
#define MAX_MASTER_FDS 8
static _Atomic int master_fds[MAX_MASTER_FDS] = { -1, -1, -1, -1, -1, -1, -1, -1 };

typedef int (*listen_fn)(int, int);
typedef int (*accept4_fn)(int, struct sockaddr *, socklen_t *, int);
static _Atomic(void *) real_listen, real_accept4;

static listen_fn next_listen(void)
{
	listen_fn f;
	*(void **)&f = next_libc(&real_listen, "listen");
	return f;
}

static accept4_fn next_accept4(void)
{
	accept4_fn f;
	*(void **)&f = next_libc(&real_accept4, "accept4");
	return f;
}

static int is_master_fd(int fd)
{
	for (int i = 0; i < MAX_MASTER_FDS; i++)
		if (atomic_load(&master_fds[i]) == fd)
			return 1;
	return 0;
}

SHIM_API int listen(int fd, int backlog)
{
	listen_fn f = next_listen();
	if (!f) {
		errno = ENOSYS;
		return -1;
	}
	int rc = f(fd, backlog);
	struct sockaddr_storage me;
	socklen_t ml = sizeof(me);
	/* torchrun's agent hosting the rendezvous store: its port learned; its
	 * listener is PyTorch's (no other agent reaches it: routed) */
	if (hpct__preload_agent_proc()) {
		if (rc == 0 && getsockname(fd, (struct sockaddr *)&me, &ml) == 0 &&
		    tcp_addr((struct sockaddr *)&me, ml) && from_torch(__builtin_return_address(0)))
			rdzv_learn((struct sockaddr *)&me, 0);
		return rc;
	}
	if (rc == 0 && getsockname(fd, (struct sockaddr *)&me, &ml) == 0 &&
	    store_port((struct sockaddr *)&me, ml) && from_torch(__builtin_return_address(0)) &&
	    !hpct__preload_forked_child() && hpct__torch_route() == 1) {
		for (int i = 0; i < MAX_MASTER_FDS; i++) {
			int none = -1;
			if (atomic_compare_exchange_strong(&master_fds[i], &none, fd))
				break;
		}
	}
	return rc;
}

/* A TCP connection whose peer has already closed: what a blocking
 * listener's accept returns once the client it had was taken. */
static int closed_conn(struct sockaddr *sa, socklen_t *len, int flags)
{
	sock_fn next_connect = next_connect_fn();
	struct sockaddr_in a = { .sin_family = AF_INET };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t al = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), c = -1, r = -1;
	if (l >= 0 && bind(l, (struct sockaddr *)&a, sizeof(a)) == 0 && next_listen()(l, 1) == 0 &&
	    getsockname(l, (struct sockaddr *)&a, &al) == 0 &&
	    (c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) >= 0 &&
	    next_connect(c, (struct sockaddr *)&a, al) == 0)
		r = next_accept4()(l, sa, len, flags);
	int e = errno;
	if (c >= 0)
		close(c);
	if (l >= 0)
		close(l);
	errno = e;
	return r;
}

static int take_clients(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
	accept4_fn f = next_accept4();
	for (;;) {
		int c = f(fd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			return -1;
		hpct__torch_store_adopt(c);
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 0) > 0)
			continue;
		int fl = fcntl(fd, F_GETFL);
		if (fl >= 0 && (fl & O_NONBLOCK)) {
			errno = EAGAIN;
			return -1;
		}
		return closed_conn(sa, len, flags);
	}
}

SHIM_API int accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
	accept4_fn f = next_accept4();
	if (!f) {
		errno = ENOSYS;
		return -1;
	}
	if (fd < 0 || !is_master_fd(fd) || hpct__preload_forked_child())
		return f(fd, sa, len, flags);
	/* still that listener?  (PyTorch closed it, and the number went to
	 * another listener since: forgotten) */
	struct sockaddr_storage me;
	socklen_t ml = sizeof(me);
	int on = 0;
	socklen_t ol = sizeof(on);
	if (getsockname(fd, (struct sockaddr *)&me, &ml) != 0 ||
	    !store_port((struct sockaddr *)&me, ml) ||
	    getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &ol) != 0 || !on) {
		for (int i = 0; i < MAX_MASTER_FDS; i++) {
			int was = fd;
			atomic_compare_exchange_strong(&master_fds[i], &was, -1);
		}
		return f(fd, sa, len, flags);
	}
	return take_clients(fd, sa, len, flags);
}

SHIM_API int accept(int fd, struct sockaddr *sa, socklen_t *len)
{
	return accept4(fd, sa, len, 0);
}

/* TCPStore connections this process served itself (tests ask it). */
SHIM_API long hpct_preload_store_routed(void)
{
	return hpct__torch_store_routed();
}
