/* hpct__got_patch on test libraries (tests/shim/) that import got_callee
 * from libgot_callee.so, one GOT slot each: libgot_caller_now.so calls it
 * through the PLT (a JUMP_SLOT, bound at load, in RELRO),
 * libgot_caller_lazy.so too (bound at its first call), libgot_address.so
 * takes its address as well (a GLOB_DAT, in RELRO).  The folder comes from
 * HPCT_TEST_GOT_DIR. */
#include <criterion/criterion.h>

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/shim/got.h"
#include "hpct/hpct.h"

TestSuite(got, .timeout = 30);

struct caller {
	void *h;
	int (*call)(int);
	void *(*address)(void);
};

static void *load(const char *base, int mode)
{
	const char *dir = getenv("HPCT_TEST_GOT_DIR");
	cr_assert_not_null(dir, "HPCT_TEST_GOT_DIR is not set");
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", dir, base);
	void *h = dlopen(path, mode);
	cr_assert_not_null(h, "dlopen %s: %s", path, dlerror());
	return h;
}

static struct caller caller(const char *base, int mode)
{
	struct caller c = { .h = load(base, mode | RTLD_LOCAL) };
	*(void **)&c.call = dlsym(c.h, "got_caller_call");
	*(void **)&c.address = dlsym(c.h, "got_caller_address");
	cr_assert_not_null(c.call, "%s lacks got_caller_call", base);
	return c;
}

static void *callee(void)
{
	void *h = load("libgot_callee.so", RTLD_NOW | RTLD_NOLOAD);
	void *f = dlsym(h, "got_callee");
	cr_assert_not_null(f, "got_callee: %s", dlerror());
	dlclose(h);
	return f;
}

/* the lines of /proc/self/maps that map `base`: their protections */
static void maps_of(const char *base, char *buf, size_t len)
{
	FILE *f = fopen("/proc/self/maps", "r");
	cr_assert_not_null(f, "/proc/self/maps: %s", strerror(errno));
	char line[4600];
	size_t used = 0;
	buf[0] = 0;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, base) && used + strlen(line) < len)
			used += (size_t)snprintf(buf + used, len - used, "%s", line);
	fclose(f);
}

static int times_hundred(int x)
{
	return x * 100;
}

/* The caller's call and address go to the replacement after the patch and
 * back to the callee after patching `previous` in again. */
static void patch_and_back(const char *base, int bound_at_load)
{
	struct caller c = caller(base, bound_at_load ? RTLD_NOW : RTLD_LAZY);
	void *real = callee();
	if (bound_at_load)
		cr_assert_eq(c.call(1), 2);
	if (c.address)
		cr_assert_eq(c.address(), real);
	char before[8192], after[8192];
	maps_of(base, before, sizeof(before));
	void *prev = NULL;
	int n = hpct__got_patch(base, "got_callee", (void *)times_hundred, &prev);
	cr_assert_eq(n, 1, "%s: %d slots patched (%s)", base, n, n < 0 ? hpct_last_error() : "");
	maps_of(base, after, sizeof(after));
	cr_assert_str_eq(after, before, "RELRO pages are read-only again after the patch");
	cr_assert_eq(prev, real, "previous is %p, got_callee is %p", prev, real);
	cr_assert_eq(c.call(3), 300);
	cr_assert_eq(c.call(4), 400, "the slot stays patched after a call");
	if (c.address)
		cr_assert_eq(c.address(), (void *)times_hundred);

	void *again = NULL;
	n = hpct__got_patch(base, "got_callee", prev, &again);
	cr_assert_eq(n, 1);
	cr_assert_eq(again, (void *)times_hundred);
	cr_assert_eq(c.call(1), 2);
	if (c.address)
		cr_assert_eq(c.address(), real);
	dlclose(c.h);
}

Test(got, jump_slot_bound_at_load_in_relro)
{
	patch_and_back("libgot_caller_now.so", 1);
}

Test(got, glob_dat_in_relro)
{
	patch_and_back("libgot_address.so", 1);
}

/* previous is got_callee itself, not the PLT stub the slot held, even
 * before the first call bound it */
Test(got, lazy_slot_not_yet_bound)
{
	patch_and_back("libgot_caller_lazy.so", 0);
}

Test(got, prefix_of_the_basename)
{
	struct caller c = caller("libgot_caller_now.so", RTLD_NOW);
	void *prev = NULL;
	cr_assert_eq(hpct__got_patch("libgot_caller_n", "got_callee", (void *)times_hundred, &prev),
	             1);
	cr_assert_eq(c.call(2), 200);
	cr_assert_eq(hpct__got_patch("libgot_caller_n", "got_callee", prev, NULL), 1);
	cr_assert_eq(c.call(2), 3);
	dlclose(c.h);
}

Test(got, symbol_not_imported_is_zero)
{
	struct caller c = caller("libgot_caller_now.so", RTLD_NOW);
	void *prev = (void *)&prev;
	int n = hpct__got_patch("libgot_caller_now.so", "got_not_imported", (void *)times_hundred,
	                        &prev);
	cr_assert_eq(n, 0, "%d (%s)", n, hpct_last_error());
	cr_assert_eq(prev, (void *)&prev, "previous is left alone when nothing is patched");
	/* its own definition is no import either */
	cr_assert_eq(hpct__got_patch("libgot_callee.so", "got_callee", (void *)times_hundred, NULL),
	             0);
	cr_assert_eq(c.call(1), 2);
	dlclose(c.h);
}

Test(got, missing_object_is_named)
{
	int n = hpct__got_patch("libno_such_object.so", "got_callee", (void *)times_hundred, NULL);
	cr_assert_eq(n, -ENOENT, "%d", n);
	const char *why = hpct_last_error();
	cr_assert(strstr(why, "libno_such_object.so") && strstr(why, "got_callee"),
	          "the message names neither object nor symbol: %s", why);
}

Test(got, bad_arguments)
{
	cr_assert_eq(hpct__got_patch("", "got_callee", (void *)times_hundred, NULL), HPCT_EINVAL);
	cr_assert_eq(hpct__got_patch("libgot_caller_now.so", NULL, (void *)times_hundred, NULL),
	             HPCT_EINVAL);
	cr_assert_eq(hpct__got_patch("libgot_caller_now.so", "got_callee", NULL, NULL),
	             HPCT_EINVAL);
}

/* hpct__object_named: the object that holds an address, by its load
 * segments (how the shim tells libtorch's calls from others). */
Test(got, the_object_that_holds_an_address)
{
	static const char *const libc[] = { "libno_such_object", "libc.so", NULL };
	static const char *const others[] = { "libno_such_object", "libc10d", NULL };
	/* libc's own function (a sanitizer's runtime interposes malloc and
	 * the like: RTLD_DEFAULT would find its) */
	void *h = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	cr_assert_not_null(h, "%s", dlerror());
	void *in_libc = dlsym(h, "gnu_get_libc_version");
	cr_assert_not_null(in_libc);
	cr_expect_eq(hpct__object_named((char *)in_libc + 1, libc), 1, "not found in libc.so");
	cr_expect_eq(hpct__object_named(in_libc, others), 0, "libc.so is not in those");
	/* the program itself has no name to match */
	cr_expect_eq(hpct__object_named((void *)times_hundred, libc), 0);
	cr_expect_eq(hpct__object_named(NULL, libc), 0);
	cr_expect_eq(hpct__object_named(in_libc, NULL), 0);
	int on_stack;
	cr_expect_eq(hpct__object_named(&on_stack, libc), 0, "a stack address is in no object");
	dlclose(h);
}
