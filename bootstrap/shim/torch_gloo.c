/* libhpct_torch.so's connectFullMesh put in libtorch_cpu's GOT (see
 * torch_gloo.h). */
#include "bootstrap/shim/torch_gloo.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <unistd.h>

#include "bootstrap/base/log.h"
#include "bootstrap/shim/got.h"

#define TORCH_CPU "libtorch_cpu.so"

/* libc's dlopen, not one a preload library (this one, once) defines:
 * what the path names is loaded either way, but libc's is the one meant */
static void *load(const char *path, int mode)
{
	void *(*f)(const char *, int);
	*(void **)&f = dlsym(RTLD_NEXT, "dlopen");
	return f ? f(path, mode) : dlopen(path, mode);
}

int hpct__torch_gloo_fast_path(const char *preload_dir)
{
	char lib[4200];
	snprintf(lib, sizeof(lib), "%s/libhpct_torch.so", preload_dir ? preload_dir : ".");
	if (access(lib, F_OK) != 0) {
		HPCT_INFO(HPCT_SUB_INIT, "no %s: PyTorch's Gloo connects as it does", lib);
		return 0;
	}
	void *h = load(lib, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		return hpct__fail(-ELIBBAD, HPCT_SUB_INIT,
		                  "cannot load %s (%s): PyTorch's Gloo connects as it does", lib,
		                  dlerror());
	const char *(*symbol)(void);
	void *(*impl)(void);
	*(void **)&symbol = dlsym(h, "hpct_torch_gloo_symbol");
	*(void **)&impl = dlsym(h, "hpct_torch_gloo_connect_full_mesh");
	void *f = impl ? impl() : NULL;
	if (!symbol || !f) {
		dlclose(h);
		return hpct__fail(
		        -ELIBBAD, HPCT_SUB_INIT, "%s lacks %s: PyTorch's Gloo connects as it does",
		        lib,
		        !symbol ? "hpct_torch_gloo_symbol"
		                : "its connectFullMesh (hpct_torch_gloo_connect_full_mesh)");
	}
	int n = hpct__got_patch(TORCH_CPU, symbol(), f, NULL);
	if (n == 0) {
		HPCT_INFO(HPCT_SUB_INIT,
		          "%s* does not import %s (not Debian's PyTorch 1.13?): PyTorch's Gloo "
		          "connects as it does",
		          TORCH_CPU, symbol());
		dlclose(h); /* nothing points into it */
		return 0;
	}
	if (n < 0)
		return n; /* slots patched before the failure point into h: it stays */
	HPCT_INFO(HPCT_SUB_INIT, "PyTorch's Gloo contexts connect through hpct (%s)", lib);
	return 1; /* h stays open: libtorch calls into it from now on */
}
