# A plain PyTorch job (no hpct import): every collective the torch suite
# checks, exact results, over several incarnations of the default group.
# Prints "ok <rank>" at the end; any failure raises.
import ctypes
import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from master_conns import master_conns

rounds = int(os.environ.get("JOB_INCARNATIONS", "1"))

# JOB_HOLD_MASTER=1: no connection may reach MASTER_ADDR:MASTER_PORT, where
# rank 0's TCPStore server listens (idle, under the shim): local rank 0
# looks for established TCP connections to or from that port on this host
# (/proc/net/tcp*) at the end of every incarnation, while the stores live.
held = []


kept = []  # subgroups kept referenced across destroy_process_group

# JOB_DIE_RANK=r: rank r is killed (SIGKILL) in the middle of its first
# init_process_group, once its store exists and before its process group
if os.environ.get("JOB_DIE_RANK") == os.environ.get("RANK"):
    import signal

    c10d = dist.distributed_c10d

    def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)

    c10d._new_process_group_helper = die

# JOB_HOLD_RANKS=r,...: those ranks hold before their first process group
# (their store exists, so they are alive to their peers) until the file
# JOB_HOLD_FILE shows JOB_HOLD_TEXT (another rank's log saying it failed):
# they come late, after the first rank to fail.  60 s is a hang guard.
if os.environ.get("RANK") in os.environ.get("JOB_HOLD_RANKS", "").split(","):
    import time

    c10d = dist.distributed_c10d
    helper = c10d._new_process_group_helper

    def held(*args, **kwargs):
        path, text = os.environ["JOB_HOLD_FILE"], os.environ["JOB_HOLD_TEXT"]
        give_up = time.monotonic() + 60
        while time.monotonic() < give_up:
            with open(path, errors="replace") as f:
                if text in f.read():
                    break
            time.sleep(0.05)
        else:
            print(f"held: '{text}' never showed in {path}", flush=True)
        return helper(*args, **kwargs)

    c10d._new_process_group_helper = held

# JOB_INIT: how the default group finds its store: env (env://), tcp
# (tcp://MASTER_ADDR:MASTER_PORT) or store (a dist.TCPStore made here)
how = os.environ.get("JOB_INIT", "env")
addr, port = os.environ.get("MASTER_ADDR", ""), int(os.environ.get("MASTER_PORT", "0") or 0)


def init():
    if how == "env":
        dist.init_process_group("gloo")
        return
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if how == "tcp":
        dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank,
                                world_size=size)
    else:
        st = dist.TCPStore(addr, port, size, rank == 0, timedelta(seconds=60))
        dist.init_process_group("gloo", store=st, rank=rank, world_size=size)


def routed():
    # TCPStore connections hpct's shim served in this process (0 without it)
    f = getattr(ctypes.CDLL(None), "hpct_preload_store_routed", None)
    if f is None:
        return 0
    f.restype = ctypes.c_long
    return f()


# JOB_FORK_DIE_RANK=r: after init, rank r forks a child that outlives it
# (as a data-loader worker would) and is killed.  Every rank has asked every
# rank's store (num_keys) before, so the others hold connections to rank
# r's store; asked again, they must answer (its keys have other homes) or
# fail naming rank r at once, not when HPCT_TIMEOUT passes on connections
# the child would keep open
if os.environ.get("JOB_FORK_DIE_RANK"):
    die = int(os.environ["JOB_FORK_DIE_RANK"])
    init()
    st = dist.distributed_c10d._get_default_store()
    st.num_keys()
    dist.barrier()
    if dist.get_rank() == die:
        pid = os.fork()
        if pid == 0:
            time.sleep(float(os.environ.get("JOB_CHILD_SLEEP", "90")))
            os._exit(0)
        with open(os.environ["JOB_CHILD_PID_FILE"], "w") as f:
            f.write(str(pid))
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(1)
    t0 = time.monotonic()
    try:
        # with its keys on two homes (the default) the store answers
        # without rank 2; with one, it fails naming rank 2: at once, both
        st.num_keys()
        os.write(1, f"answered-after {time.monotonic() - t0:.1f} s\n".encode())
        sys.exit(0)
    except Exception as e:
        os.write(1, f"failed-after {time.monotonic() - t0:.1f} s: {e}\n".encode())
        sys.exit(1)

# JOB_SHOW_SHIM=1: whether hpct's shim served this rank's store (one
# write per line, print writes the text and the newline apart when stdout
# is unbuffered: ranks share the log, and lines must not mix); in the last
# incarnation, before its closing barrier (no rank leaves while another
# asks its store), an exec'd child of it (a torch process that makes a
# TCPStore to MASTER_PORT, which the shim does not route: rank 0's server
# takes it) and a forked,
# then double-forked one (as NVRx makes its monitor process; the shim
# serves it as its rank) each read a key the ranks set, and the forked one
# sets one its rank reads
def show_children(inc):
    import subprocess

    child = subprocess.run(
        [sys.executable, "-c", f"""
import ctypes, datetime, torch.distributed as dist
try:
    s = dist.TCPStore({addr!r}, {port}, None, False, datetime.timedelta(seconds=10),
                      wait_for_workers=False)
    seen = s.get('shared{inc}-0').decode()
except Exception as e:
    seen = f'nothing ({{e}})'
f = getattr(ctypes.CDLL(None), 'hpct_preload_store_routed', None)
print(('yes' if f is not None and f() > 0 else 'no') + ' saw ' + seen)
"""], capture_output=True, text=True, check=True)
    os.write(1, f"child-shim {rank} {child.stdout.strip()}\n".encode())
    r_fd, w_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r_fd)
        if os.fork() != 0:
            os._exit(0)
        try:
            s = dist.TCPStore(addr, port, None, False, timedelta(seconds=10),
                              wait_for_workers=False)
            s.set(f"forked-{rank}", str(rank))
            got = s.get(f"shared{inc}-0").decode()  # answered: its connection counted
            msg = f"{'yes' if routed() > 0 else 'no'} saw {got}"
        except Exception as e:
            msg = f"nothing ({e})"
        os.write(w_fd, msg.encode())
        os._exit(0)
    os.close(w_fd)
    os.waitpid(pid, 0)
    msg = b""
    while chunk := os.read(r_fd, 4096):
        msg += chunk
    os.close(r_fd)
    s = dist.TCPStore(addr, port, None, False, timedelta(seconds=10), wait_for_workers=False)
    os.write(1, f"forked-shim {rank} {msg.decode()} set {s.get(f'forked-{rank}').decode()}\n".encode())


for inc in range(rounds):
    init()
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
    # a key of 8,000 bytes: within the libuv server's 8 KiB, past hpct's old 4 KiB
    st.set(f"long{rank}-" + "k" * 7990, f"v{rank}")
    dist.barrier()
    assert st.get(f"k{(rank + 1) % n}") == f"v{(rank + 1) % n}-{inc}".encode()
    assert st.get(f"long{(rank + 1) % n}-" + "k" * 7990) == f"v{(rank + 1) % n}".encode()
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
    # (those are PyTorch's own keys, under its "default_pg/" prefix) while
    # the stores a program makes at MASTER_ADDR:MASTER_PORT, with a world
    # size or without, share one keyspace with the group's own TCPStore
    mine = dist.TCPStore(addr, port, n, False, timedelta(seconds=60))
    other = dist.TCPStore(addr, port, None, False, timedelta(seconds=60))
    mine.set(f"shared{inc}-{rank}", str(rank))
    other.wait([f"shared{inc}-{r}" for r in range(n)])
    assert other.get(f"shared{inc}-{(rank + 1) % n}") == str((rank + 1) % n).encode()
    tcp = st
    while hasattr(tcp, "underlying_store"):  # 2.x: the TCPStore under the prefixes
        tcp = tcp.underlying_store
    if tcp is not st:
        assert tcp.get(f"shared{inc}-0") == b"0"
    dist.barrier()
    del mine, other
    # the commands 2.x added: append, multi_get/multi_set, the queues,
    # list_keys and Store.barrier (on the TCPStore under the default
    # group's prefix)
    # (a write PyTorch sends without an answer is applied in order with the
    # connection's later requests, but may land after another rank's read
    # even past a collective: each rank says it is done with a key of its
    # own, and the readers wait for those keys)
    base = getattr(st, "underlying_store", st)
    if hasattr(base, "multi_set"):
        base.append(f"ap{inc}", f"{rank},")
        base.multi_set([f"m{inc}-{rank}-a", f"m{inc}-{rank}-b"], [f"{rank}a", f"{rank}b"])
        base.set(f"default_pg/m{inc}-{rank}", f"{rank}pg")  # a key of PyTorch's own kind
        if rank == 0:
            for i in range(n):
                base.queue_push(f"q{inc}", f"item{i}")
        base.set(f"wrote{inc}-{rank}", "1")
        base.wait([f"wrote{inc}-{r}" for r in range(n)])
        got = base.get(f"ap{inc}").decode().split(",")[:-1]
        assert sorted(int(x) for x in got) == list(range(n)), got
        peer = (rank + 1) % n
        assert base.multi_get([f"m{inc}-{peer}-a", f"m{inc}-{peer}-b"]) == [
            f"{peer}a".encode(), f"{peer}b".encode()]
        # PyTorch's kind of key among others: the values in the order asked
        # (the served store's WAIT fetches them by kind, for the MULTI_GET)
        assert base.multi_get([f"m{inc}-{peer}-b", f"default_pg/m{inc}-{peer}",
                               f"m{inc}-{peer}-a"]) == [
            f"{peer}b".encode(), f"{peer}pg".encode(), f"{peer}a".encode()]
        item = base.queue_pop(f"q{inc}", block=True)
        items = [None] * n
        dist.all_gather_object(items, item)
        assert sorted(items) == sorted(f"item{i}".encode() for i in range(n)), items
        assert base.queue_len(f"q{inc}") == 0
        try:
            base.queue_pop(f"q{inc}", block=False)
            raise AssertionError("a pop from an empty queue returned")
        except Exception as e:
            assert "empty" in str(e), e
        keys = base.list_keys()
        assert f"m{inc}-{rank}-a" in keys and f"ap{inc}" in keys, keys
        if hasattr(base, "barrier"):
            base.barrier(f"b{inc}", n)
        dist.barrier()
    if os.environ.get("JOB_HOLD_MASTER") == "1" and os.environ.get("LOCAL_RANK") == "0":
        held += master_conns(port)
    # (JOB_NO_CHILDREN=1: not the children, a torch import each)
    if os.environ.get("JOB_SHOW_SHIM") == "1" and inc == rounds - 1 and \
            os.environ.get("JOB_NO_CHILDREN") != "1":
        show_children(inc)
        dist.barrier()
    dist.destroy_process_group()

assert not held, f"connections to MASTER_PORT {port}: {held}"

if os.environ.get("JOB_SHOW_SHIM") == "1":
    os.write(1, f"shim {rank} {'yes' if routed() > 0 else 'no'}\n".encode())
os.write(1, f"ok {rank}\n".encode())
