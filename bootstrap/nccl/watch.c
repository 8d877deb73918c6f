/* A deadline for NCCL's blocking init.  NCCL's bootstrap waits without one
 * (nccl#289): a rank that dies after the others entered it leaves them in
 * accept() or recv() for good, and NCCL's own connect retries take about
 * 60 s.  While hpct makes a blocking ncclCommInitRank* call, a watch thread
 * waits for it to return, looking once a second at what NCCL's sockets
 * have moved (TCP_INFO: bytes received and acknowledged): an init at
 * scale may take minutes and is left alone while bytes move.  Once
 * nothing moved for HPCT_TIMEOUT, it shuts down the sockets the
 * process opened since the call began (not hpct's own; of the listeners,
 * only those NCCL's rank reported to its micro-root, Tier 2: its RAS
 * thread's listener must live), which makes each of NCCL's waits fail,
 * and NCCL's init returns its error instead of hanging.  NCCL's API has no safe way to abort a
 * blocking init from another thread (ncclCommAbort needs the communicator the call has not returned
 * yet), and a non-blocking init would leave the communicator non-blocking for the caller's
 * collectives. */
#include "bootstrap/nccl/nccl_internal.h"

#include <dirent.h>
#include <errno.h>
#include <linux/tcp.h> /* tcp_info with its byte counts (glibc's lacks them) */
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include "bootstrap/base/fdtrack.h"
#include "bootstrap/base/log.h"

struct hpct_nccl_watch {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int done, fired, closed;
	double timeout_s;
	char what[200];
	ino_t *before; /* the process's sockets when the call began, sorted */
	size_t nbefore;
	struct hpct_nccl_roots *roots; /* NULL: no listener is shut down... */
	int rank;
	int all_listeners; /* ...unless every new one may be (no RAS thread) */
	struct sockaddr_storage listeners[2];
	int nlisteners;
	uint64_t bytes; /* what a look found */
};

static int cmp_ino(const void *a, const void *b)
{
	ino_t x = *(const ino_t *)a, y = *(const ino_t *)b;
	return x < y ? -1 : x > y;
}

/* Calls fn(fd, inode, arg) for every socket of the process. */
static void each_socket(void (*fn)(int fd, ino_t ino, void *arg), void *arg)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	while (d && (e = readdir(d))) {
		char *end;
		long fd = strtol(e->d_name, &end, 10);
		struct stat st;
		if (*end || fd < 0 || fd == dirfd(d) || fstat((int)fd, &st) != 0 ||
		    !S_ISSOCK(st.st_mode))
			continue;
		fn((int)fd, st.st_ino, arg);
	}
	if (d)
		closedir(d);
}

static void note(int fd, ino_t ino, void *arg)
{
	struct hpct_nccl_watch *w = arg;
	(void)fd;
	ino_t *p = realloc(w->before, (w->nbefore + 1) * sizeof(*p));
	if (!p)
		return;
	w->before = p;
	w->before[w->nbefore++] = ino;
}

/* Is this listener one NCCL's rank reported (where its bootstrap accepts)? */
static int reported(const struct hpct_nccl_watch *w, int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	memset(&ss, 0, sizeof(ss));
	if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
		return 0;
	for (int i = 0; i < w->nlisteners; i++) {
		const struct sockaddr_storage *r = &w->listeners[i];
		if (r->ss_family != ss.ss_family)
			continue;
		if (ss.ss_family == AF_INET) {
			const struct sockaddr_in *a = (const void *)&ss, *b = (const void *)r;
			if (a->sin_port == b->sin_port && a->sin_addr.s_addr == b->sin_addr.s_addr)
				return 1;
		} else {
			const struct sockaddr_in6 *a = (const void *)&ss, *b = (const void *)r;
			if (a->sin6_port == b->sin6_port &&
			    memcmp(&a->sin6_addr, &b->sin6_addr, sizeof(a->sin6_addr)) == 0)
				return 1;
		}
	}
	return 0;
}

static void shut(int fd, ino_t ino, void *arg)
{
	struct hpct_nccl_watch *w = arg;
	if (bsearch(&ino, w->before, w->nbefore, sizeof(ino), cmp_ino) || hpct__fd_is_tracked(fd))
		return;
	int listening = 0;
	socklen_t len = sizeof(listening);
	if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening &&
	    !w->all_listeners && !reported(w, fd))
		return;
	if (shutdown(fd, SHUT_RDWR) == 0 || errno == ENOTCONN)
		w->closed++;
}

/* What the sockets opened since the call began have moved so far. */
static void moved(int fd, ino_t ino, void *arg)
{
	struct hpct_nccl_watch *w = arg;
	if (bsearch(&ino, w->before, w->nbefore, sizeof(ino), cmp_ino) || hpct__fd_is_tracked(fd))
		return;
	struct tcp_info ti;
	socklen_t len = sizeof(ti);
	memset(&ti, 0, sizeof(ti));
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0)
		w->bytes += ti.tcpi_bytes_received + ti.tcpi_bytes_acked;
}

static double mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *watch_main(void *arg)
{
	struct hpct_nccl_watch *w = arg;
	pthread_setname_np(pthread_self(), "hpct-nccl-watch"); /* in top, gdb, perf */
	double last_move = mono();
	uint64_t last_bytes = 0;
	pthread_mutex_lock(&w->lock);
	while (!w->done && mono() - last_move < w->timeout_s) {
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += 1; /* a look a second */
		if (pthread_cond_timedwait(&w->cond, &w->lock, &until) != ETIMEDOUT || w->done)
			continue;
		w->bytes = 0;
		each_socket(moved, w);
		if (w->bytes != last_bytes) {
			last_bytes = w->bytes;
			last_move = mono();
		}
	}
	if (!w->done) {
		w->fired = 1;
		if (w->roots)
			w->nlisteners = hpct__nccl_roots_listeners(w->roots, w->rank, w->listeners);
		each_socket(shut, w);
		HPCT_WARN(
		        HPCT_SUB_NCCL,
		        "%s: NCCL's sockets have moved nothing for HPCT_TIMEOUT=%.0f s: a rank it "
		        "waits on is gone or stuck; hpct shut down the %d sockets NCCL opened for "
		        "it, so that it fails instead of hanging",
		        w->what, w->timeout_s, w->closed);
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

struct hpct_nccl_watch *hpct__nccl_watch_start(double timeout_s, const char *fmt, ...)
{
	struct hpct_nccl_watch *w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(w->what, sizeof(w->what), fmt, ap);
	va_end(ap);
	w->timeout_s = timeout_s;
	each_socket(note, w);
	qsort(w->before, w->nbefore, sizeof(*w->before), cmp_ino);
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	if (pthread_create(&w->thread, NULL, watch_main, w) != 0) {
		pthread_mutex_destroy(&w->lock);
		pthread_cond_destroy(&w->cond);
		free(w->before);
		free(w);
		return NULL; /* no watch: the call runs as NCCL makes it */
	}
	return w;
}

void hpct__nccl_watch_roots(struct hpct_nccl_watch *w, struct hpct_nccl_roots *roots, int rank,
                            int all_listeners)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	w->roots = roots;
	w->rank = rank;
	w->all_listeners = all_listeners;
	pthread_mutex_unlock(&w->lock);
}

int hpct__nccl_watch_stop(struct hpct_nccl_watch *w)
{
	if (!w)
		return 0;
	pthread_mutex_lock(&w->lock);
	w->done = 1;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
	pthread_join(w->thread, NULL);
	int fired = w->fired;
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->cond);
	free(w->before);
	free(w);
	return fired;
}
