"""libtorch_cpu's GOT slot of Gloo's connectFullMesh, in /usr/bin/python3
after `import torch` (Debian's 1.13): it points at libgloo.so.0's
definition, hpct__got_patch redirects it and back, and
hpct__torch_gloo_fast_path points it at libhpct_torch.so's.

Usage: got_check.py LIBGOT_PROBE LIBHPCT_PRELOAD.  Exit 77 (skipped) where
Debian's torch 1.13 is not what `import torch` finds."""
import ctypes
import os
import sys

SYMBOL = (b"_ZN4gloo10rendezvous7Context15connectFullMeshERNS0_5StoreERSt10"
          b"shared_ptrINS_9transport6DeviceEE")


def main():
    probe_path, preload = sys.argv[1], sys.argv[2]
    try:
        import torch
    except ImportError as e:
        print("skip: no torch for %s (%s)" % (sys.executable, e))
        return 77
    if not torch.__version__.startswith("1.13"):
        print("skip: torch %s, not Debian's 1.13" % torch.__version__)
        return 77
    probe = ctypes.CDLL(probe_path)
    probe.got_probe_slot.argtypes = [ctypes.c_char_p, ctypes.c_char_p,
                                     ctypes.c_char_p, ctypes.c_ulong]
    probe.got_probe_fast_path.argtypes = [ctypes.c_char_p]
    probe.got_probe_last_error.restype = ctypes.c_char_p
    where = ctypes.create_string_buffer(8192)

    def slot():
        n = probe.got_probe_slot(b"libtorch_cpu.so", SYMBOL, where, len(where))
        if n != 1:
            sys.exit("FAIL: libtorch_cpu.so's slots of connectFullMesh: %d (%s)"
                     % (n, probe.got_probe_last_error().decode()))
        path, name = where.value.decode().split(" ", 1)
        return os.path.basename(path), name

    lib, name = slot()
    if not lib.startswith("libgloo.so") or name != SYMBOL.decode():
        sys.exit("FAIL: the slot points at %s in %s, not at libgloo.so.0's "
                 "connectFullMesh" % (name, lib))
    print("ok: libtorch_cpu.so's slot points at %s's connectFullMesh, "
          "patched and restored" % lib)

    # libhpct_torch.so wants hpct_preload_world from the preload: loaded as
    # LD_PRELOAD would have it, in the global scope (HPCT_USE_ROOTLESS=0:
    # it does nothing when loaded)
    ctypes.CDLL(preload, mode=ctypes.RTLD_GLOBAL)
    rc = probe.got_probe_fast_path(os.path.dirname(preload).encode())
    if rc != 1:
        sys.exit("FAIL: hpct__torch_gloo_fast_path: %d (%s)"
                 % (rc, probe.got_probe_last_error().decode()))
    lib, name = slot()
    if lib != "libhpct_torch.so" or name != SYMBOL.decode():
        sys.exit("FAIL: after the fast path the slot points at %s in %s, "
                 "not at libhpct_torch.so's connectFullMesh" % (name, lib))
    print("ok: hpct__torch_gloo_fast_path put libhpct_torch.so's "
          "connectFullMesh in libtorch_cpu.so's slot")

    n = probe.got_probe_slot(b"libtorch_cpu.so", b"hpct_not_imported", where, len(where))
    if n != 0:
        sys.exit("FAIL: a symbol libtorch_cpu.so does not import: %d" % n)
    print("ok: a symbol libtorch_cpu.so does not import: 0 slots")
    return 0


if __name__ == "__main__":
    sys.exit(main())
