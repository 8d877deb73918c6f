/* Where libhpct_preload.so is, for the tools that put it in LD_PRELOAD
 * (hpct-run --rootless and --preload, hpct-bench --scenario torch): beside
 * the running program (bin/ -> lib/: the Python wheel's hpct/bin and
 * hpct/lib, a relocated install), in the build tree it is part of (tools/
 * -> bootstrap/shim/), else where it was installed (HPCT_LIBDIR). */
#ifndef HPCT_SHIM_PATH_H
#define HPCT_SHIM_PATH_H
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The path in buf; 0 when a readable file is there, -1 when neither is. */
static inline int hpct_shim_path(char *buf, size_t len)
{
	char exe[4096];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	char *slash = n > 0 ? (exe[n] = 0, strrchr(exe, '/')) : NULL;
	if (slash) {
		*slash = 0;
		snprintf(buf, len, "%s/../lib/libhpct_preload.so", exe);
		if (access(buf, R_OK) == 0)
			return 0;
		snprintf(buf, len, "%s/../bootstrap/shim/libhpct_preload.so", exe);
		if (access(buf, R_OK) == 0)
			return 0;
	}
	snprintf(buf, len, "%s/libhpct_preload.so", HPCT_LIBDIR);
	return access(buf, R_OK) == 0 ? 0 : -1;
}
#endif
