"""What the torch jobs of the tests (job.py, nccl_pg.py, conns.py) read of
this host's TCP sockets (/proc/net/tcp and tcp6): the established
connections to or from a port, e.g. MASTER_PORT, where rank 0's TCPStore
server listens idle under the shim (there must be none), and the
established sockets this process holds."""
import os


def tcp_table():
    """The rows, each as (state, local "ADDR:PORT" in hex, remote, inode):
    state "01" is established."""
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(name).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            yield f[3], f[1], f[2], f[9]


def port_of(addr):
    return int(addr.rsplit(":", 1)[1], 16)


def master_conns(port):
    return [f"{local} -> {remote}" for state, local, remote, _ in tcp_table()
            if state == "01" and port in (port_of(local), port_of(remote))]


def own_sockets(ports):
    """This process's established TCP sockets (its descriptors' inodes; both
    ends of a connection to itself count): all, and those with an end in
    PORTS (a range)."""
    mine = set()
    for f in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{f}")
        except OSError:
            continue
        if link.startswith("socket:["):
            mine.add(link[8:-1])
    n = store = 0
    for state, local, remote, inode in tcp_table():
        if state == "01" and inode in mine:
            n += 1
            store += port_of(local) in ports or port_of(remote) in ports
    return n, store
