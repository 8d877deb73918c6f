/* liborigin_a.so (RUNPATH $ORIGIN) loads its sibling liborigin_b.so by
 * name when called: glibc looks in the RUNPATH of dlopen's caller. */
#include <dlfcn.h>
#include <stdio.h>

int origin_a(char *why, unsigned long len);

__attribute__((visibility("default"))) int origin_a(char *why, unsigned long len)
{
	void *h = dlopen("liborigin_b.so", RTLD_NOW);
	if (!h) {
		snprintf(why, len, "%s", dlerror());
		return -1;
	}
	int (*b)(void);
	*(void **)&b = dlsym(h, "origin_b");
	if (!b) {
		snprintf(why, len, "%s", dlerror());
		return -1;
	}
	return b();
}
