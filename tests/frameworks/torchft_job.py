# A torchft 0.2.0 replica group of one rank (under its own torchrun), the
# way torchft's own train_ddp example runs: a Manager on the lighthouse at
# TORCHFT_LIGHTHOUSE, its Gloo process group configured per quorum through
# the primary group's store, DDP and the optimizer wrapped.  Prints
# "step N" every 10 steps and "done R" at JOB_STEPS.  JOB_EXIT_AT=S: the
# group exits (code 1) at step S in its first run (or the first step past
# it, when it healed to a later one), for torchrun to restart.
import os
import sys
from datetime import timedelta

import torch
from torch import nn, optim

from torchft import DistributedDataParallel, Manager, Optimizer, ProcessGroupGloo

group = int(os.environ["REPLICA_GROUP_ID"])
steps = int(os.environ.get("JOB_STEPS", "60"))
exit_at = int(os.environ.get("JOB_EXIT_AT", "-1"))
first_run = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"

torch.manual_seed(0)
model = nn.Linear(8, 4)
opt = optim.SGD(model.parameters(), lr=0.01)


def state_dict():
    return {"model": model.state_dict(), "optim": opt.state_dict()}


def load_state_dict(sd):
    model.load_state_dict(sd["model"])
    opt.load_state_dict(sd["optim"])


manager = Manager(
    pg=ProcessGroupGloo(timeout=timedelta(seconds=10)),
    min_replica_size=1,
    load_state_dict=load_state_dict,
    state_dict=state_dict,
    replica_id=f"group_{group}",
    timeout=timedelta(seconds=10),
    quorum_timeout=timedelta(seconds=30),
)
ddp = DistributedDataParallel(manager, model)
optimizer = Optimizer(manager, opt)
x = torch.ones(16, 8)
while manager.current_step() < steps:
    step = manager.current_step()
    if first_run and 0 <= exit_at <= step:
        print(f"group {group} exits at step {step}", flush=True)
        os._exit(1)
    optimizer.zero_grad()
    ddp(x).sum().backward()
    optimizer.step()
    if step % 10 == 0:
        print(f"group {group} step {step} participants {manager.num_participants()}", flush=True)
print(f"done {group} at step {manager.current_step()}", flush=True)
sys.exit(0)
