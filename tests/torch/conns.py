# A plain PyTorch job (no hpct import) for the torch suite's count of
# connections: JOB_INCARNATIONS (3) times init_process_group("gloo"), a
# new_group over every rank, an all_reduce and a store round over keys of
# every rank, then destroy_process_group.  Each rank prints, per
# incarnation, when it began (time.time(), the clock of strace -ttt) and
# the established TCP sockets it holds at the end (while its groups live),
# all and the store's, then when it ended and "ok <rank>"; first its pid.
import os
import time

import torch
import torch.distributed as dist
from master_conns import own_sockets


# the served store's ports: JOB_STORE_PORTS, hpct's defaults
lo, hi = (int(x) for x in os.environ.get("JOB_STORE_PORTS", "1808-9999").split("-"))


os.write(1, f"pid {os.environ['RANK']} {os.getpid()}\n".encode())
for inc in range(int(os.environ.get("JOB_INCARNATIONS", "3"))):
    os.write(1, f"begin {os.environ['RANK']} {inc} {time.time():.6f}\n".encode())
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    g = dist.new_group(list(range(n)))
    t = torch.ones(1)
    dist.all_reduce(t, group=g)
    assert t.item() == n, t
    st = dist.distributed_c10d._get_default_store()
    # (the default group's store: its keys are the incarnation's own, as
    # PyTorch's are, under the same names each time)
    st.set(f"k-{rank}", f"{rank}-{inc}")
    st.wait([f"k-{r}" for r in range(n)])
    assert st.get(f"k-{(rank + 1) % n}") == f"{(rank + 1) % n}-{inc}".encode()
    dist.barrier()
    os.write(1, "sockets {} {} {} {}\n".format(rank, inc, *own_sockets(range(lo, hi + 1))).encode())
    dist.barrier()
    dist.destroy_process_group()
os.write(1, f"end {rank} {time.time():.6f}\nok {rank}\n".encode())
