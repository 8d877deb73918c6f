"""PyTorch's NCCL process group, as a user writes it, knowing nothing of
hpct: init_process_group with the backend JOB_BACKEND ("nccl" by default:
ProcessGroupNCCL up to 2.14, nccl2 from 2.15; "nccl-legacy", "nccl2",
"nccl-lazy" by name), then by mode:

  init         eager init (device_id), new_group (split from the eager
               communicator), destroy_process_group and exit
  shrink       as init, then the rank JOB_VICTIM (default the last) leaves
               at once (SIGKILL) once every rank has its groups, and the
               others shrink the default group without it
               (torch.distributed.shrink_group, ncclCommShrink): "shrunk R
               SIZE NEWRANK"
  lazy         no device_id: the communicator is made at the first
               collective (an all_reduce), "lazy R"
  pairs        no device_id, point-to-point only (N even): each rank sends
               to the next and receives from the one before (nccl-lazy
               makes one 2-rank communicator a pair), "pairs R"
  reconfigure  init with enable_reconfigure=True; every rank's reconfigure
               handle set in the store; JOB_VICTIM (if set) SIGKILLs
               itself, and the others make the group anew without it
               (torch.distributed._reconfigure): "reconfigured R SIZE NEWRANK"

lazy, pairs and reconfigure run NCCL work; without a GPU (the stand-in
driver runs no kernel) a communicator that has run work cannot be
destroyed (NCCL's proxy waits for the kernel's side), so those modes end
with os._exit once they have said "ok R".

JOB_HOLD_MASTER=1: no connection may reach MASTER_ADDR:MASTER_PORT, where
rank 0's TCPStore server listens idle under the shim: rank 0 looks for
established TCP connections on that port (/proc/net/tcp*) after init,
after new_group and after the shrink, and says "held N".
JOB_ALLREDUCE=1 (a real GPU only: without one, no kernel runs) adds an
all_reduce whose values are checked.  Every rank prints "init R S" (its
init, seconds), "backend R CLASS" (the NCCL backend's class), "group R",
"ok R"; rank 0 prints the NCCL release torch loaded ("nccl X.Y.Z")."""
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


def wait_for_all(store, key, n):
    """Every rank has come to this point (or 60 s passed)."""
    store.add(key, 1)
    deadline = time.monotonic() + 60
    while store.add(key, 0) < n and time.monotonic() < deadline:
        time.sleep(0.01)


rank = int(os.environ["RANK"])
n = int(os.environ["WORLD_SIZE"])
local = int(os.environ.get("LOCAL_RANK", "0"))
mode = sys.argv[1] if len(sys.argv) > 1 else "init"
backend = os.environ.get("JOB_BACKEND", "nccl")
hold = os.environ.get("JOB_HOLD_MASTER") == "1" and rank == 0
port = int(os.environ.get("MASTER_PORT", "0") or 0)
held = []
dev = torch.device("cuda", local % torch.cuda.device_count())
torch.cuda.set_device(dev)
if rank == 0:
    say("nccl %s" % ".".join(map(str, torch.cuda.nccl.version())))
t0 = time.monotonic()
if mode in ("init", "shrink"):
    dist.init_process_group(backend, device_id=dev)
elif mode == "reconfigure":
    dist.init_process_group(backend, enable_reconfigure=True)
else:
    dist.init_process_group(backend)
say("init %d %.3f" % (rank, time.monotonic() - t0))
say("backend %d %s" % (rank, type(dist.group.WORLD._get_backend(dev)).__name__))
held += master_conns(port) if hold else []
if mode in ("init", "shrink"):
    sub = dist.new_group([0, 1])
    say("group %d" % rank)
    held += master_conns(port) if hold else []
if os.environ.get("JOB_ALLREDUCE") == "1":
    x = torch.full((1 << 20,), float(rank + 1), device=dev)
    dist.all_reduce(x)
    want = n * (n + 1) / 2
    assert bool((x == want).all()), "all_reduce gave %s, want %s" % (x[0].item(), want)
    say("allreduce %d ok" % rank)
store = c10d._get_default_store()
if mode == "shrink":
    victim = int(os.environ.get("JOB_VICTIM", str(n - 1)))
    # every rank holds its groups before the victim goes
    wait_for_all(store, "shrink/ready", n)
    if rank == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    pg = c10d.shrink_group([victim])
    say("shrunk %d %d %d" % (rank, pg.size(), pg.rank()))
    held += master_conns(port) if hold else []
elif mode == "lazy":
    dist.all_reduce(torch.ones(4, device=dev))
    torch.cuda.synchronize()
    say("lazy %d" % rank)
    held += master_conns(port) if hold else []
elif mode == "pairs":
    x = torch.full((4,), float(rank), device=dev)
    y = torch.empty(4, device=dev)
    # one send or recv at a time (nccl-lazy runs a batch of them on its
    # primary communicator, a single one on its pair's), in two rounds of
    # disjoint pairs, (0,1) (2,3) ... then (1,2) (3,4) ...: a pair's
    # communicator is made (a blocking init) while both its ranks are in it
    for first in (0, 1):
        if rank % 2 == first:
            dist.send(x, (rank + 1) % n)
        else:
            dist.recv(y, (rank - 1) % n)
    if os.environ.get("JOB_ALLREDUCE") == "1":  # a real GPU: the value came
        assert bool((y == float((rank - 1) % n)).all()), "received %s" % y[0].item()
        say("pairs %d ok" % rank)
    say("pairs %d" % rank)
    held += master_conns(port) if hold else []
elif mode == "reconfigure":
    victim = int(os.environ.get("JOB_VICTIM", "-1"))
    store.set("reconf/handle/%d" % rank, dist._get_reconfigure_handle())
    wait_for_all(store, "reconf/ready", n)
    if rank == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    handles = [store.get("reconf/handle/%d" % r).decode() for r in range(n) if r != victim]
    dist._reconfigure(uuid=1, handles=handles).wait()
    pg = dist.group.WORLD
    say("reconfigured %d %d %d" % (rank, pg.size(), pg.rank()))
    held += master_conns(port) if hold else []
if hold:
    say("held %d %s" % (len(held), " ".join(held)))
if mode in ("init", "shrink"):
    dist.destroy_process_group()
say("ok %d" % rank)
if mode not in ("init", "shrink"):
    os._exit(0)
