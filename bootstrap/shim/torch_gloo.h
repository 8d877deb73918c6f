/* PyTorch 1.13's Gloo contexts connected by hpct (libhpct_torch.so). */
#ifndef HPCT_SHIM_TORCH_GLOO_H
#define HPCT_SHIM_TORCH_GLOO_H

/* After torch is loaded: loads `preload_dir`/libhpct_torch.so (RTLD_NOW |
 * RTLD_LOCAL, with libc's dlopen) and points libtorch_cpu.so's GOT slot of
 * gloo::rendezvous::Context::connectFullMesh(Store&, shared_ptr<Device>&)
 * at libhpct_torch.so's, which connects through hpct_preload_world().
 * Call it before any process group is made (see hpct__got_patch).
 *
 * Returns 1 when patched; 0 when there is nothing to do: no
 * libhpct_torch.so in `preload_dir` (hpct built without it), or a
 * libtorch_cpu that does not import that symbol (PyTorch 2.x wheels link
 * their own Gloo in, with another signature); libhpct_torch.so is then
 * unloaded again.  Negative with hpct_last_error() set and logged:
 * -ENOENT libtorch_cpu.so is not loaded, -ELIBBAD libhpct_torch.so does
 * not load or lacks what it should export, or hpct__got_patch's codes.
 * On success libhpct_torch.so stays loaded for the life of the process. */
int hpct__torch_gloo_fast_path(const char *preload_dir);

#endif
