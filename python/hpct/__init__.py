"""hpct: rootless, storeless bootstrap for NCCL, Gloo and PyTorch.

The wheel holds the C library (lib/libhpct.so), the LD_PRELOAD shim
(lib/libhpct_preload.so, with its PyTorch and Gloo halves where they were
built) and the programs (bin/hpct-run, hpct-info, hpct-bench).  Run an
unmodified job rootless with

    hpct-run --preload -- torchrun --nproc-per-node 8 train.py

which sets HPCT_USE_ROOTLESS=1 and puts the shim in LD_PRELOAD for the
command and its children.  ``python -m hpct`` prints the shim's path and the
settings hpct reads.
"""
import os

__version__ = "0.1.0"

_here = os.path.dirname(os.path.abspath(__file__))


def lib_dir():
    """The folder of hpct's shared libraries."""
    return os.path.join(_here, "lib")


def bin_dir():
    """The folder of hpct's programs."""
    return os.path.join(_here, "bin")


def shim_path():
    """The LD_PRELOAD shim, libhpct_preload.so."""
    return os.path.join(lib_dir(), "libhpct_preload.so")


def program(name):
    """The path of one of hpct's programs (hpct-run, hpct-info, hpct-bench)."""
    path = os.path.join(bin_dir(), name)
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"hpct: no program {name} in {bin_dir()}")
    return path
