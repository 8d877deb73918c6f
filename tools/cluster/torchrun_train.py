# The training loop of tools/cluster/bench-torchrun-cluster, one torchrun worker:
# a plain PyTorch job (no hpct import), Gloo, one allreduce of 1024 floats
# a step, 50 ms apart.  Rank 0 prints "step S restart R at T" (T: seconds
# of the machine's clock, as the benchmark reads them) after each step.  In
# the first run (TORCHELASTIC_RESTART_COUNT=0) rank TRAIN_KILL_RANK prints
# "killed rank K at T" and SIGKILLs itself after step TRAIN_KILL_AT, for
# torchrun's --max-restarts to restart the workers.  Every rank ends with
# "done RANK restart R hpct JOB EPOCH": the job and epoch of the world hpct's
# shim made in this worker, or "hpct none" without one; before it, "phases
# RANK restart R begun T imported T inited T": when this worker's script
# began (before importing torch), when torch was imported, and when
# init_process_group returned.
import time

begun = time.time()

import ctypes  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

imported = time.time()

restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
steps = int(os.environ.get("TRAIN_STEPS", "30"))
kill_at = int(os.environ.get("TRAIN_KILL_AT", "10"))
kill_rank = int(os.environ.get("TRAIN_KILL_RANK", "5"))


class WorldInfo(ctypes.Structure):
    # struct hpct_world_info (include/hpct/hpct.h)
    _fields_ = [("rank", ctypes.c_int), ("size", ctypes.c_int),
                ("local_rank", ctypes.c_int), ("local_size", ctypes.c_int),
                ("node", ctypes.c_int), ("nnodes", ctypes.c_int),
                ("path", ctypes.c_int), ("job", ctypes.c_uint64),
                ("epoch", ctypes.c_uint64), ("job_name", ctypes.c_char * 128),
                ("listen_addr", ctypes.c_char * 64)]


def hpct_world():
    me = ctypes.CDLL(None)
    world = getattr(me, "hpct_preload_world", None)
    if world is None:
        return "none"
    world.restype = ctypes.c_void_p
    w = world()
    if not w:
        return "none"
    info = WorldInfo()
    me.hpct_world_get_info(ctypes.c_void_p(w), ctypes.byref(info))
    return f"{info.job_name.decode()} {info.epoch}"


dist.init_process_group("gloo")
rank = dist.get_rank()
os.write(1, f"phases {rank} restart {restart} begun {begun:.6f} imported {imported:.6f} "
            f"inited {time.time():.6f}\n".encode())
t = torch.ones(1024)
for s in range(steps):
    dist.all_reduce(t)
    assert t[0].item() == dist.get_world_size(), t[0].item()
    t.fill_(1)
    if rank == 0:
        os.write(1, f"step {s} restart {restart} at {time.time():.6f}\n".encode())
    if restart == 0 and s == kill_at and rank == kill_rank:
        os.write(1, f"killed rank {rank} at {time.time():.6f}\n".encode())
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.05)
world = hpct_world()
dist.destroy_process_group()
os.write(1, f"done {rank} restart {restart} hpct {world}\n".encode())
