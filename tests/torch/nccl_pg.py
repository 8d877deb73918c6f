"""PyTorch's NCCL process group, as a user writes it, knowing nothing of
hpct: eager init (init_process_group with device_id), new_group (split
from the eager communicator), then by mode:

  init      destroy_process_group and exit
  shrink    the rank JOB_VICTIM (default the last) leaves at once (SIGKILL)
            once every rank has its groups, and the others shrink the
            default group without it (torch.distributed.shrink_group,
            ncclCommShrink): "shrunk R SIZE NEWRANK"

JOB_HOLD_MASTER=1: no connection may reach MASTER_ADDR:MASTER_PORT, where
rank 0's TCPStore server listens idle under the shim: rank 0 looks for
established TCP connections on that port (/proc/net/tcp*) after init,
after new_group and after the shrink, and says "held N".
JOB_ALLREDUCE=1 (a real GPU only: without one, no kernel runs) adds an
all_reduce whose values are checked.  Every rank prints "init R S" (its
init, seconds), "group R", "ok R"; rank 0 prints the NCCL
release torch loaded ("nccl X.Y.Z")."""
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from master_conns import master_conns

def say(line):
    # one write a line: the ranks share one output file, and print()'s
    # text and newline may reach it apart, between another rank's
    os.write(1, (line + "\n").encode())


rank = int(os.environ["RANK"])
n = int(os.environ["WORLD_SIZE"])
local = int(os.environ.get("LOCAL_RANK", "0"))
mode = sys.argv[1] if len(sys.argv) > 1 else "init"
hold = os.environ.get("JOB_HOLD_MASTER") == "1" and rank == 0
port = int(os.environ.get("MASTER_PORT", "0") or 0)
held = []
dev = torch.device("cuda", local % torch.cuda.device_count())
torch.cuda.set_device(dev)
if rank == 0:
    say("nccl %s" % ".".join(map(str, torch.cuda.nccl.version())))
t0 = time.monotonic()
dist.init_process_group("nccl", device_id=dev)
say("init %d %.3f" % (rank, time.monotonic() - t0))
held += master_conns(port) if hold else []
sub = dist.new_group([0, 1])
say("group %d" % rank)
held += master_conns(port) if hold else []
if os.environ.get("JOB_ALLREDUCE") == "1":
    x = torch.full((1 << 20,), float(rank + 1), device=dev)
    dist.all_reduce(x)
    want = n * (n + 1) / 2
    assert bool((x == want).all()), "all_reduce gave %s, want %s" % (x[0].item(), want)
    say("allreduce %d ok" % rank)
if mode == "shrink":
    victim = int(os.environ.get("JOB_VICTIM", str(n - 1)))
    # every rank holds its groups before the victim goes
    store = c10d._get_default_store()
    store.add("shrink/ready", 1)
    deadline = time.monotonic() + 60
    while store.add("shrink/ready", 0) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    if rank == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    pg = c10d.shrink_group([victim])
    say("shrunk %d %d %d" % (rank, pg.size(), pg.rank()))
    held += master_conns(port) if hold else []
if hold:
    say("held %d %s" % (len(held), " ".join(held)))
dist.destroy_process_group()
say("ok %d" % rank)
