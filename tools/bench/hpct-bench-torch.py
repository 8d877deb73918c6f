#!/usr/bin/python3
# A rank of hpct-bench --scenario torch: an ordinary PyTorch job (no hpct
# import), run as it is on the stock path and, under libhpct_preload.so,
# on the rootless one.  hpct-bench runs it with the Python of the torch
# it measures (--torch).  Timed from the moment every rank has imported
# torch (hpct-bench's gate) to the end of init_process_group, one
# new_group over all ranks and the first all_reduce, on the backend
# HPCT_BENCH_BACKEND names: "gloo", or "nccl" (eager: device_id, the
# communicator made inside init_process_group; a device a local rank).
# On the test-only stand-in driver (tests/standin: no kernel runs) NCCL's
# all_reduce computes nothing, so its value is checked on a real device
# only, and a communicator that has run work cannot be destroyed there:
# the rank ends with os._exit once every rank has reported.  With --reinit
# (HPCT_BENCH_GATE2_FD set), the ranks then destroy the process group, say
# so, and at a second gate do the same again: a second incarnation, timed
# from that gate.  Started directly by hpct-bench, a rank inherits its pipes;
# as a worker of torchrun (HPCT_BENCH_SOCKET set), which closes inherited
# fds, it is handed the same pipes first thing.  With HPCT_BENCH_STORE_OPS=K
# (hpct-bench --store-ops K), after the timed part each rank does K rounds
# of SET, GET, ADD, COMPARE_SET, WAIT and MULTI_GET on keys of its own in
# its process group's store, all ranks at once, and reports the median and
# the 99th percentile of each (us).  Each record also carries the rank's
# established TCP sockets and its peak resident memory.
import ctypes
import os
import socket
import struct
import sys
import threading
import time
from datetime import timedelta


def take_pipes():
    """Under torchrun: fetches the pipes from hpct-bench's socket, each under
    the name of the variable that carries it to a rank started directly."""
    path = os.environ.get("HPCT_BENCH_SOCKET")
    if not path:
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.connect(path)
        names, fds, flags, _ = socket.recv_fds(s, 4096, 16)
    if flags & socket.MSG_CTRUNC or len(names.split()) != len(fds):
        sys.exit(f"hpct-bench-torch: rank {os.environ.get('RANK')}: "
                 f"pipes from {path} cut short")
    for name, f in zip(names.decode().split(), fds):
        os.environ[name] = str(f)


take_pipes()  # before import torch: what follows is as in a direct launch

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def fd(name):
    return int(os.environ[name])


def say(msg):
    sys.stderr.write(f"hpct-bench-torch: rank {os.environ.get('RANK')}: {msg}\n")
    sys.stderr.flush()


def gate(name):
    """Says this rank is ready, then waits until hpct-bench lets every rank
    go at once (EOF on the gate pipe)."""
    os.write(fd("HPCT_BENCH_READY_FD"), b"r")
    while os.read(fd(name), 1):
        pass


BACKEND = os.environ.get("HPCT_BENCH_BACKEND", "gloo")
STANDIN = "HPCT stand-in"  # tests/standin's device name (STANDIN_NAME)


def device():
    """The rank's device for nccl, None for gloo: every rank of a run is on
    this machine (hpct-bench's nodes are addresses of one namespace, one
    host to NCCL), so its rank's, round the devices (more ranks than
    devices share them: NCCL_MULTI_RANK_GPU_ENABLE, hpct-bench sets it)."""
    if BACKEND != "nccl":
        return None
    dev = torch.device("cuda", int(os.environ["RANK"]) % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    return dev


def on_standin():
    return BACKEND == "nccl" and torch.cuda.get_device_name().startswith(STANDIN)


def incarnation():
    """The timed work; 0, or 1 (a wrong sum) or 2 (an exception, said)."""
    try:
        dev = device()
        timeout = timedelta(seconds=float(os.environ.get("HPCT_TIMEOUT", "120")))
        if dev is None:
            dist.init_process_group(BACKEND, timeout=timeout)
        else:
            dist.init_process_group(BACKEND, timeout=timeout, device_id=dev)
        n = dist.get_world_size()
        dist.new_group(list(range(n)))  # kept by torch until destroy_process_group
        t = torch.ones(1, device=dev)
        dist.all_reduce(t)
        if dev is not None:
            torch.cuda.synchronize()
        return 0 if t.item() == n or on_standin() else 1
    except Exception as e:  # reported as a failed rank, with its message
        say(e)
        return 2


# The store operations --store-ops times, in the record's order (op_us:
# their medians, then their 99th percentiles); multi_get is 2.x's only
OPS = ("set", "get", "add", "compare_set", "wait", "multi_get")


# Where a store round's CPU goes, in the record's order after op_us (cpu_us:
# us per round): the thread that calls the store, the served store's
# listener (the shim's threads that speak TCPStore's protocol), its server
# (the key's home: requests and replication), and every other thread (on
# stock's rank 0, TCPStore's server)
THREADS = ("client", "listener", "server", "other")


def thread_cpu(me):
    """Each of THREADS' CPU so far, ns, from the kernel's per-task counts."""
    cpu = [0] * len(THREADS)
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):  # the thread ended
            continue
        cls = (0 if int(tid) == me else 1 if comm.startswith("hpct-tcpstore")
               else 2 if comm.startswith("hpct-store") else 3)
        cpu[cls] += ns
    return cpu


def store_ops(k):
    """The median and 99th percentile of k rounds of each of OPS, us (not
    timed into the init: measured after it), 0 for one this torch lacks;
    then THREADS' CPU per round, us."""
    store = dist.distributed_c10d._get_default_store()
    me = os.environ.get("RANK", "0")
    key, counter, cas = f"hpct-bench/{me}/k", f"hpct-bench/{me}/n", f"hpct-bench/{me}/c"
    value = b"x" * 64
    has_multi = hasattr(store, "multi_get")
    times = [[] for _ in OPS]
    store.set(cas, b"0")
    me_tid = threading.get_native_id()
    cpu0 = thread_cpu(me_tid)
    for i in range(k):
        t = [time.perf_counter()]
        store.set(key, value)
        t.append(time.perf_counter())
        store.get(key)
        t.append(time.perf_counter())
        store.add(counter, 1)
        t.append(time.perf_counter())
        store.compare_set(cas, str(i).encode(), str(i + 1).encode())
        t.append(time.perf_counter())
        store.wait([key])
        t.append(time.perf_counter())
        if has_multi:
            store.multi_get([key, cas])
        t.append(time.perf_counter())
        for o in range(len(OPS)):
            times[o].append((t[o + 1] - t[o]) * 1e6)
    cpu = [(b - a) / 1e3 / k for a, b in zip(cpu0, thread_cpu(me_tid))]
    if not has_multi:
        times[OPS.index("multi_get")] = [0.0]
    def pct(v, p):
        v = sorted(v)
        return v[min(len(v) - 1, int(len(v) * p))]
    return [pct(v, 0.5) for v in times] + [pct(v, 0.99) for v in times] + cpu


def tcp_table():
    """The rows of /proc/net/tcp and tcp6, each as (state, local port,
    remote port, inode): "01" established, "0A" listening."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            col = line.split()
            yield (col[3], int(col[1].rsplit(":", 1)[1], 16),
                   int(col[2].rsplit(":", 1)[1], 16), col[9])


def socket_inodes(pid="self"):
    """The inodes of the sockets process PID holds (its /proc/PID/fd)."""
    found = set()
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return found
    for f in names:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{f}")
        except OSError:
            continue
        if link.startswith("socket:["):
            found.add(link[8:-1])
    return found


def sockets():
    """This process's established TCP sockets: both ends of a loopback
    connection it holds count, as on any other rank."""
    mine = socket_inodes()
    return sum(1 for state, _, _, inode in tcp_table() if state == "01" and inode in mine)


def report(rc, done, ops=(0.0,) * (2 * len(OPS) + len(THREADS))):
    rss_kb = 0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):  # the peak
                rss_kb = int(line.split()[1])
    # struct record of tools/common/bench_rank.h: done, conns (here: the
    # established TCP sockets the process holds), rc, msgs, rss_kb, then
    # fields of other scenarios, zero here, to the size the launcher says
    # (one write: the pipe keeps records of different ranks whole) and
    # op_us and cpu_us, the record's last fields: the store operations'
    # medians and 99th percentiles, and where a round's CPU went
    head = struct.pack("@diiqq", done, sockets(), rc, 0, rss_kb)
    tail = struct.pack(f"@{2 * len(OPS) + len(THREADS)}d", *ops)
    size = int(os.environ.get("HPCT_BENCH_RECORD_SIZE", len(head) + len(tail)))
    os.write(fd("HPCT_BENCH_FD"),
             head + bytes(max(size - len(head) - len(tail), 0)) + tail)


def destroy():
    try:
        dist.destroy_process_group()
        return 0
    except Exception as e:
        say(f"destroy_process_group: {e}")
        return 2


want = os.environ.get("HPCT_BENCH_TORCH")
if want and not torch.__version__.startswith(want + "."):
    say(f"{sys.executable} has torch {torch.__version__}, hpct-bench asked for {want}")
    os.write(fd("HPCT_BENCH_READY_FD"), b"f")  # no gate to wait for
    sys.exit(3)
why = None
if BACKEND == "nccl" and not (dist.is_nccl_available() and torch.cuda.is_available()):
    why = (f"torch {torch.__version__} has no NCCL or no CUDA device here "
           "(nccl wants a CUDA torch, 2.14 or 2.15, and a GPU or tests/standin "
           "first on LD_LIBRARY_PATH)")
elif BACKEND == "nccl" and "HPCT_BENCH_GATE2_FD" in os.environ and on_standin():
    why = ("--reinit: the stand-in driver cannot destroy a communicator that has "
           "run work (tests/standin/README.md); --reinit with nccl wants a GPU")
if why:
    say(f"--backend {BACKEND}: {why}")
    os.write(fd("HPCT_BENCH_READY_FD"), b"f")
    sys.exit(3)

# rootless: the shim serves the store in the rank only for a torch whose
# protocol it knows; otherwise PyTorch keeps its own (said on stderr), which
# is no rootless run: checked after the timed part, so a row never shows
# stock figures as rootless ones.  Under torchrun 2.x the workers are on
# the agent's store, which the shim leaves the job's on both paths
# (TORCHELASTIC_USE_AGENT_STORE=True): there the rows differ only in what
# else the shim does (NCCL), nothing for Gloo
def not_rootless():
    if os.environ.get("HPCT_USE_ROOTLESS") != "1":
        return False
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        return False
    f = getattr(ctypes.CDLL(None), "hpct_preload_store_routed", None)
    if f is not None:
        f.restype = ctypes.c_long
    if f is None or f() == 0:
        say(f"torch {torch.__version__}: libhpct_preload.so did not serve this rank's "
            "TCPStore: not a rootless run")
        return True
    return False


# torchrun: the store these workers used is the agent's (TCPStore clients
# only: TORCHELASTIC_USE_AGENT_STORE, and the listener on MASTER_PORT is
# the agent's, this worker's parent, not this one's; under the shim too,
# whose workers leave the agent's store alone).  Checked after the timed
# part, as the shim's.
def listening_sockets(port):
    return {inode for state, lport, _, inode in tcp_table() if state == "0A" and lport == port}


def holds(pid, inodes):
    return bool(socket_inodes(pid) & inodes)


def not_agent_store():
    if "HPCT_BENCH_SOCKET" not in os.environ:
        return False
    port = int(os.environ["MASTER_PORT"])
    sockets = listening_sockets(port)
    why = None
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        why = ("TORCHELASTIC_USE_AGENT_STORE="
               f"{os.environ.get('TORCHELASTIC_USE_AGENT_STORE')}")
    elif holds(os.getpid(), sockets):
        why = f"this worker listens on MASTER_PORT {port}"
    elif not holds(os.getppid(), sockets):
        why = f"its agent (pid {os.getppid()}) does not listen on MASTER_PORT {port}"
    if why:
        say(f"torch {torch.__version__} under torchrun: not the agent's store: {why}")
    return why is not None


gate("HPCT_BENCH_GATE_FD")
rc = incarnation()
done = time.monotonic()  # CLOCK_MONOTONIC, as hpct-bench's clock
if rc == 0 and not_rootless():
    rc = 4
if rc == 0 and not_agent_store():
    rc = 5
ops = (0.0,) * (2 * len(OPS) + len(THREADS))
if rc == 0 and int(os.environ.get("HPCT_BENCH_STORE_OPS", "0")) > 0:
    try:
        ops = store_ops(int(os.environ["HPCT_BENCH_STORE_OPS"]))
    except Exception as e:
        say(f"store operations: {e}")
        rc = 6
report(rc, done, ops)  # CLOCK_MONOTONIC, as hpct-bench's clock
os.read(fd("HPCT_BENCH_RELEASE_FD"), 1)  # until every rank has reported
if on_standin():  # no destroy after work there (above)
    sys.stderr.flush()
    os._exit(rc)
if rc == 0:
    rc = destroy()
if "HPCT_BENCH_GATE2_FD" in os.environ:
    if rc != 0:
        os.write(fd("HPCT_BENCH_READY_FD"), b"f")  # no second incarnation
        sys.exit(rc)
    gate("HPCT_BENCH_GATE2_FD")
    rc = incarnation()
    report(rc, time.monotonic())
    os.read(fd("HPCT_BENCH_RELEASE2_FD"), 1)
    if rc == 0:
        rc = destroy()
sys.exit(rc)
