"""What the torch jobs of the tests (job.py, nccl_pg.py) look for: the
established TCP connections to or from a port on this host (/proc/net/tcp
and tcp6), e.g. MASTER_PORT, where rank 0's TCPStore server listens idle
under the shim: there must be none."""


def master_conns(port):
    found = []
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(name).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            lport, rport, state = int(f[1].rsplit(":", 1)[1], 16), int(f[2].rsplit(":", 1)[1], 16), f[3]
            if state == "01" and port in (lport, rport):
                found.append(f"{f[1]} -> {f[2]}")
    return found
