/* Redirecting one imported function of a loaded object: its GOT slots. */
#ifndef HPCT_SHIM_GOT_H
#define HPCT_SHIM_GOT_H

/* Points every GOT slot through which the loaded object named
 * `object_basename_prefix...` (the first one, in load order, whose path's
 * basename starts with it, e.g. "libtorch_cpu.so") reaches `symbol` (a
 * mangled name for C++) at `replacement`: its JUMP_SLOT (calls through the
 * PLT) and GLOB_DAT (calls and address-taking through the GOT)
 * relocations; x86-64 and aarch64.  A slot in the object's RELRO range is
 * made writable for the store and read-only again after.
 *
 * Returns the number of slots patched, 0 when the object does not import
 * `symbol` (a normal answer: nothing is changed), or a negative code with
 * hpct_last_error() set and logged, naming object and symbol: -ENOENT no
 * such object is loaded, -ENOEXEC its dynamic section cannot be read (no
 * symbol or string table, REL instead of RELA relocations), -errno from
 * mprotect.  Slots patched before a failure stay patched.
 *
 * `previous_out`, when not NULL and a slot was patched, gets what the first
 * slot held: the function calls went to.  A slot not yet bound (lazy
 * binding: it still points into the object's own PLT) reports what the
 * object's own lookup scope (dlsym on its handle) finds instead, since
 * calling its PLT stub would bind the slot again, over the replacement.
 *
 * Each slot is written with one aligned pointer store: a thread calling
 * through it sees the old function or the new one, never a mix.  A call
 * already under way in the old one finishes there, so patch before calls
 * through the slot can race with it (hpct patches libtorch before any
 * process group exists).  Calls to this function are serialised among
 * themselves; the object must stay loaded while it runs. */
int hpct__got_patch(const char *object_basename_prefix, const char *symbol, void *replacement,
                    void **previous_out);

/* 1 when `addr` lies in a loaded object whose path's basename starts with
 * one of `prefixes` (NULL-terminated), else 0.  Found from the objects'
 * load segments, not their symbols: dladdr scans every symbol of the
 * object, ~0.8 ms in libtorch_cpu.so (74,000 of them), a few microseconds
 * here. */
int hpct__object_named(const void *addr, const char *const *prefixes);

#endif
