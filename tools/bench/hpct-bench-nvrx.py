#!/usr/bin/env python3
# A rank of hpct-bench --scenario nvrx and of tests/test_frameworks.sh:
# NVIDIA Resiliency Extension 0.4.1's in-process restart around a DDP loop
# on Gloo (no hpct import: the shim makes it rootless), the way its basic example runs: inprocess.Wrapper (its store at
# MASTER_ADDR:MASTER_PORT, hosted by rank 0, and a monitor process forked
# and double-forked by every rank) calls train(); train makes the job's
# store, a client of the same address, and a process group on it under the
# restart iteration's prefix.  Prints "done <initial rank> <world size>"
# when the loop ends.  JOB_KILL_RANK=r: rank r SIGKILLs itself at step
# JOB_KILL_AT of the first iteration (the others restart without it),
# saying "fault <t>" first; every rank says "pg <iteration> <t>" once it
# has its process group (t: CLOCK_MONOTONIC, the machine's).
import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import nvidia_resiliency_ext.inprocess as inprocess

if os.environ.get("JOB_LOG"):  # NVRx's own log, on stderr
    import logging

    logging.basicConfig(level=logging.DEBUG, format=f"rank {os.environ['RANK']}: %(message)s")
steps = int(os.environ.get("JOB_STEPS", "30"))
kill_rank = int(os.environ.get("JOB_KILL_RANK", "-1"))
kill_at = int(os.environ.get("JOB_KILL_AT", "10"))
initial = int(os.environ["RANK"])
job_store = None
s = datetime.timedelta(seconds=1)


@inprocess.Wrapper(
    store_kwargs={"timeout": datetime.timedelta(seconds=30)},
    initialize=inprocess.initialize.RetryController(max_iterations=3, min_world_size=2),
    monitor_thread_interval=s,
    monitor_process_interval=s,
    progress_watchdog_interval=s,
    heartbeat_interval=s,
    soft_timeout=datetime.timedelta(seconds=20),
    hard_timeout=datetime.timedelta(seconds=30),
    heartbeat_timeout=datetime.timedelta(seconds=10),
    barrier_timeout=datetime.timedelta(seconds=40),
    completion_timeout=datetime.timedelta(seconds=30),
    termination_grace_time=datetime.timedelta(seconds=2),
    monitor_process_logfile=os.environ.get("JOB_MONITOR_LOG"),
)
def train(call_wrapper: inprocess.CallWrapper = None):
    global job_store
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if job_store is None:
        job_store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                                  None, False, datetime.timedelta(seconds=30))
    t0 = time.monotonic()
    dist.init_process_group("gloo", store=dist.PrefixStore(str(call_wrapper.iteration), job_store),
                            rank=rank, world_size=size, timeout=datetime.timedelta(seconds=3))
    t1 = time.monotonic()
    print(f"rank {initial} iteration {call_wrapper.iteration}: process group of {size} "
          f"in {t1 - t0:.3f} s", flush=True)
    print(f"pg {call_wrapper.iteration} {t1:.6f}", flush=True)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.ones(4, 8)
    for step in range(steps):
        if initial == kill_rank and step == kill_at and call_wrapper.iteration == 0:
            print(f"fault {time.monotonic():.6f}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
        call_wrapper.ping()
        time.sleep(0.05)
    return size


got = train()
if got is not None:
    print(f"done {initial} {got}", flush=True)
sys.exit(0)
