/* Descriptors hpct owns, forgotten in a forked child (see fdtrack.h). */
#include "bootstrap/base/fdtrack.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#define TRACKED 65536

/* fd -> the socket's inode, truncated (0: none).  Static and sparse: only
 * the pages of the numbers in use are ever touched. */
static _Atomic uint32_t inode_of[TRACKED];
static pthread_once_t once = PTHREAD_ONCE_INIT;
static atomic_int forked;

int hpct__fd_forked(void)
{
	return atomic_load(&forked);
}

static uint32_t inode32(int fd)
{
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode))
		return 0;
	return (uint32_t)st.st_ino | 1u; /* never 0 */
}

/* In the child, before anything else runs there: only async-signal-safe
 * calls (open, fstat, dup2, close). */
static void child(void)
{
	atomic_store(&forked, 1);
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	for (int fd = 0; fd < TRACKED; fd++) {
		uint32_t ino = atomic_load_explicit(&inode_of[fd], memory_order_relaxed);
		if (ino && fd != null && inode32(fd) == ino) {
			/* the number stays taken (a copy of /dev/null), so the
			 * child's stale handles cannot close another's; without
			 * /dev/null the socket is closed all the same */
			if (null < 0 || dup3(null, fd, O_CLOEXEC) < 0)
				close(fd);
			atomic_store_explicit(&inode_of[fd], 0, memory_order_relaxed);
		}
	}
	if (null >= 0)
		close(null);
}

static void install(void)
{
	pthread_atfork(NULL, NULL, child);
}

void hpct__fd_track(int fd)
{
	if (fd < 0 || fd >= TRACKED)
		return;
	pthread_once(&once, install);
	atomic_store_explicit(&inode_of[fd], inode32(fd), memory_order_relaxed);
}

int hpct__fd_is_tracked(int fd)
{
	if (fd < 0 || fd >= TRACKED)
		return 0;
	uint32_t ino = atomic_load_explicit(&inode_of[fd], memory_order_relaxed);
	return ino != 0 && inode32(fd) == ino;
}
