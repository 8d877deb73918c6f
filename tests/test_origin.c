/* A library that loads its sibling through RUNPATH $ORIGIN
 * (tests/shim/origin/) works under libhpct_preload.so as without it:
 * glibc searches the RUNPATH of dlopen's caller, which it takes from the
 * return address, and a preload that defined dlopen would be that caller
 * for everyone (unless the compiler made its call to libc's a tail call,
 * as gcc -O2 does: an -O0 build of such a shim fails here).  origin_load (not
 * linked to the libraries) runs bare, preloaded with HPCT_USE_ROOTLESS=1
 * and preloaded with it unset.  Paths from the environment:
 * HPCT_ORIGIN_LOAD, HPCT_ORIGIN_LIB, HPCT_PRELOAD (and HPCT_PRELOAD_FIRST,
 * the sanitizer runtime an instrumented shim needs before it). */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(origin, .timeout = 60);

static const char *need(const char *name)
{
	const char *v = getenv(name);
	cr_assert(v && *v, "%s is not set", name);
	return v;
}

/* runs origin_load with LD_PRELOAD=`preload` (none: NULL) and
 * HPCT_USE_ROOTLESS=`rootless` (unset: NULL) */
static void run(const char *preload, const char *rootless)
{
	char err[] = "/tmp/hpct-origin.XXXXXX";
	int fd = mkstemp(err);
	cr_assert(fd >= 0, "mkstemp: %s", strerror(errno));
	pid_t pid = fork();
	cr_assert(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		dup2(fd, 2);
		unsetenv("LD_PRELOAD");
		/* meson's, which names the libraries' folder: the sibling must
		 * be found through RUNPATH alone */
		unsetenv("LD_LIBRARY_PATH");
		unsetenv("HPCT_USE_ROOTLESS");
		if (rootless)
			setenv("HPCT_USE_ROOTLESS", rootless, 1);
		if (preload) {
			char list[8192];
			const char *first = getenv("HPCT_PRELOAD_FIRST");
			snprintf(list, sizeof(list), "%s%s%s", first ? first : "", first ? " " : "",
			         preload);
			setenv("LD_PRELOAD", list, 1);
		}
		execl(need("HPCT_ORIGIN_LOAD"), "origin_load", need("HPCT_ORIGIN_LIB"),
		      (char *)NULL);
		_exit(127);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	char why[4096] = "";
	ssize_t n = pread(fd, why, sizeof(why) - 1, 0);
	why[n > 0 ? n : 0] = 0;
	close(fd);
	unlink(err);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	          "origin_load (LD_PRELOAD=%s, HPCT_USE_ROOTLESS=%s) failed (status 0x%x): %s",
	          preload ? preload : "", rootless ? rootless : "(unset)", status, why);
}

Test(origin, bare)
{
	run(NULL, NULL);
}

Test(origin, preloaded_rootless)
{
	run(need("HPCT_PRELOAD"), "1");
}

Test(origin, preloaded_rootless_unset)
{
	run(need("HPCT_PRELOAD"), NULL);
}
