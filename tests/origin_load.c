/* Loads liborigin_a.so by the path in argv[1] (this program is not linked
 * to it) and calls it: it dlopens its sibling liborigin_b.so by name,
 * found through its RUNPATH $ORIGIN.  Exit 0 when it answered 42. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: origin_load /path/to/liborigin_a.so\n");
		return 2;
	}
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "origin_load: %s\n", dlerror());
		return 1;
	}
	int (*a)(char *, unsigned long);
	*(void **)&a = dlsym(h, "origin_a");
	char why[1024] = "";
	int v = a ? a(why, sizeof(why)) : -1;
	if (v != 42) {
		fprintf(stderr, "origin_load: liborigin_a.so answered %d: %s\n", v,
		        a ? why : "no origin_a in it");
		return 1;
	}
	return 0;
}
