/* hpct__got_patch and hpct__torch_gloo_fast_path, called from Python
 * (ctypes) by tests/torch/got_check.py in a process that imported torch.
 * Every answer names what a slot points at: "path symbol". */
#include <dlfcn.h>
#include <stdio.h>

#include "bootstrap/shim/got.h"
#include "bootstrap/shim/torch_gloo.h"
#include "hpct/hpct.h"

#define PROBE_API __attribute__((visibility("default")))

PROBE_API int got_probe_slot(const char *object, const char *symbol, char *where,
                             unsigned long len);
PROBE_API int got_probe_fast_path(const char *preload_dir);
PROBE_API const char *got_probe_last_error(void);

static void dummy(void)
{
}

static void name(void *f, char *where, unsigned long len)
{
	Dl_info di;
	if (dladdr(f, &di) && di.dli_fname)
		snprintf(where, len, "%s %s", di.dli_fname, di.dli_sname ? di.dli_sname : "?");
	else
		snprintf(where, len, "%p (in no object)", f);
}

/* What `object`'s GOT slots of `symbol` point at, read by patching them to
 * a dummy and back: the count of the first patch, else the second's if it
 * disagrees (as a negative -1000 - n), else a negative code. */
PROBE_API int got_probe_slot(const char *object, const char *symbol, char *where, unsigned long len)
{
	void *prev = NULL;
	int n = hpct__got_patch(object, symbol, (void *)dummy, &prev);
	if (n <= 0)
		return n;
	name(prev, where, len);
	int back = hpct__got_patch(object, symbol, prev, NULL);
	return back == n ? n : back < 0 ? back : -1000 - back;
}

PROBE_API int got_probe_fast_path(const char *preload_dir)
{
	return hpct__torch_gloo_fast_path(preload_dir);
}

PROBE_API const char *got_probe_last_error(void)
{
	return hpct_last_error();
}
