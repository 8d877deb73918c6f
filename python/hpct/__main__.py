"""python -m hpct: where the shim is, and the settings hpct reads (the table
`hpct-info --env` prints)."""
import os
import subprocess
import sys

from . import shim_path, program


def main():
    shim = shim_path()
    print(f"shim: {shim}{'' if os.path.exists(shim) else ' (missing!)'}")
    print("run a command rootless: hpct-run --preload -- COMMAND ARGS...")
    print("  (HPCT_USE_ROOTLESS=1 and LD_PRELOAD=<shim> for the command and its children)")
    print()
    sys.stdout.flush()
    return subprocess.call([program("hpct-info"), "--env"])


if __name__ == "__main__":
    sys.exit(main())
