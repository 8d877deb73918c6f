"""The console scripts pip installs: each runs the program of the same name
from the package's bin/ in this process (exec), with the same arguments."""
import os
import sys

from . import program


def _exec(name):
    path = program(name)
    os.execv(path, [name] + sys.argv[1:])


def hpct_run():
    _exec("hpct-run")


def hpct_info():
    _exec("hpct-info")


def hpct_bench():
    _exec("hpct-bench")
