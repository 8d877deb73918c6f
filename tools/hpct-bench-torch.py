#!/usr/bin/python3
# A rank of hpct-bench --scenario torch: an ordinary PyTorch job (no hpct
# import), run as it is on the stock path and, under libhpct_preload.so,
# on the rootless one.  Timed from the moment every rank has imported
# torch (hpct-bench's gate) to the end of the first all_reduce.
import os
import struct
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def fd(name):
    return int(os.environ[name])


# imported: say so, then wait until hpct-bench lets every rank go at once
os.write(fd("HPCT_BENCH_READY_FD"), b"r")
while os.read(fd("HPCT_BENCH_GATE_FD"), 1):
    pass

rc = 0
try:
    dist.init_process_group(
        "gloo", timeout=timedelta(seconds=float(os.environ.get("HPCT_TIMEOUT", "120"))))
    t = torch.ones(1)
    dist.all_reduce(t)
    if t.item() != dist.get_world_size():
        rc = 1
except Exception as e:  # reported as a failed rank, with its message
    print(f"hpct-bench-torch: rank {os.environ.get('RANK')}: {e}", file=sys.stderr)
    rc = 2
done = time.monotonic()  # CLOCK_MONOTONIC, as hpct-bench's clock

rss_kb = 0
with open("/proc/self/status") as f:
    for line in f:
        if line.startswith("VmRSS:"):
            rss_kb = int(line.split()[1])
# struct record of tools/bench_rank.h: done, conns, rc, msgs, rss_kb
os.write(fd("HPCT_BENCH_FD"), struct.pack("@diiqq", done, 0, rc, 0, rss_kb))
os.read(fd("HPCT_BENCH_RELEASE_FD"), 1)  # until every rank has reported
if rc == 0:
    dist.destroy_process_group()
sys.exit(rc)
