# A plain PyTorch job (no hpct import): every collective the torch suite
# checks, exact results, over several incarnations of the default group.
# Prints "ok <rank>" at the end; any failure raises.
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

rounds = int(os.environ.get("JOB_INCARNATIONS", "1"))

# JOB_HOLD_MASTER=1: local rank 0 holds MASTER_ADDR:MASTER_PORT itself and
# records every connection made to it; a job with a TCPStore server could
# not bind it, and clients of one would be seen here.
held = []
if os.environ.get("JOB_HOLD_MASTER") == "1" and os.environ.get("LOCAL_RANK") == "0":
    import socket
    import threading

    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind((os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])))
    lsock.listen(64)

    def accept():
        while True:
            conn, peer = lsock.accept()
            held.append(peer)
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
kept = []  # subgroups kept referenced across destroy_process_group

# JOB_DIE_RANK=r: rank r is killed (SIGKILL) in the middle of its first
# init_process_group, once its store exists and before its process group
if os.environ.get("JOB_DIE_RANK") == os.environ.get("RANK"):
    import signal

    c10d = dist.distributed_c10d

    def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)

    c10d._new_process_group_helper = die

for inc in range(rounds):
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()

    t = torch.tensor([rank + 1.0 + inc])
    dist.all_reduce(t)
    assert t.item() == n * (n + 1) / 2 + n * inc, (inc, t)

    b = torch.tensor([float(rank)]) if rank == n - 1 else torch.zeros(1)
    dist.broadcast(b, src=n - 1)
    assert b.item() == n - 1, b

    outs = [torch.zeros(2, dtype=torch.int64) for _ in range(n)]
    dist.all_gather(outs, torch.tensor([rank, inc], dtype=torch.int64))
    assert [o.tolist() for o in outs] == [[r, inc] for r in range(n)], outs

    r = torch.tensor([float(rank)])
    dist.reduce(r, dst=0)
    if rank == 0:
        assert r.item() == n * (n - 1) / 2, r

    dist.barrier()

    # a subgroup of the even ranks; odd ranks are not members
    evens = list(range(0, n, 2))
    g = dist.new_group(evens)
    if rank in evens:
        s = torch.tensor([1.0])
        dist.all_reduce(s, group=g)
        assert s.item() == len(evens), s
    kept.append(g)

    objs = [None] * n
    dist.all_gather_object(objs, {"rank": rank, "inc": inc})
    assert objs == [{"rank": i, "inc": inc} for i in range(n)], objs
    lst = ["from-0", inc] if rank == 0 else [None, None]
    dist.broadcast_object_list(lst, src=0)
    assert lst == ["from-0", inc], lst

    # the store itself, through c10d's API
    st = dist.distributed_c10d._get_default_store()
    st.set(f"k{rank}", f"v{rank}-{inc}")
    dist.barrier()
    assert st.get(f"k{(rank + 1) % n}") == f"v{(rank + 1) % n}-{inc}".encode()
    assert st.add("counter", 2) % 2 == 0
    dist.barrier()
    assert st.add("counter", 0) == 2 * n
    st.wait([f"k{i}" for i in range(n)])
    assert st.num_keys() >= n
    if rank == 0:
        assert st.compare_set("cas", "", "first") == b"first"
        assert st.compare_set("cas", "nope", "x") == b"first"
        assert st.compare_set("cas", "first", "second") == b"second"
        assert st.delete_key("cas")
        assert not st.delete_key("cas")
    # a key an earlier incarnation set is not seen
    if inc > 0:
        try:
            st.wait([f"only{inc - 1}"], timedelta(milliseconds=200))
            raise AssertionError("a key of the last incarnation was seen")
        except RuntimeError:
            pass
    st.set(f"only{inc}", "x")
    dist.barrier()
    dist.destroy_process_group()

assert not held, f"connections to MASTER_PORT from {held}"

# JOB_SHOW_SHIM=1: whether hpct's store is in this process, and in a child
# of it that imports torch too (it must not be)
if os.environ.get("JOB_SHOW_SHIM") == "1":
    import subprocess

    def shim_in(maps):
        return any("libhpct_torch" in line for line in maps)

    # one write per line (print writes the text and the newline apart when
    # stdout is unbuffered): ranks share the log, and lines must not mix
    os.write(1, f"shim {rank} {'yes' if shim_in(open('/proc/self/maps')) else 'no'}\n".encode())
    child = subprocess.run(
        [sys.executable, "-c",
         "import torch; print('yes' if any('libhpct_torch' in l for l in open('/proc/self/maps')) else 'no')"],
        capture_output=True, text=True, check=True)
    os.write(1, f"child-shim {rank} {child.stdout.strip()}\n".encode())
os.write(1, f"ok {rank}\n".encode())
