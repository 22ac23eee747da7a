"""How fast can this machine write the page cache and the disk, and ``sendfile`` to a socket?

Owns: page-cache and disk write speed with ``dd`` (:func:`measure_pagecache`)
and ``os.sendfile`` from a page-cached file to a loopback TCP or Unix socket,
read by a forked receiver (:func:`measure_sendfile`). ``broker_throughput.py``
and ``latency.py`` measure them beside the broker in the same run.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from harness import MB, MIB, BenchError


def _dd(path: str, mib: int, conv: str = "notrunc") -> float:
    out = subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={mib}",
                          f"conv={conv}"], capture_output=True, text=True, timeout=300, check=True)
    # "1073741824 bytes (1.1 GB, 1.0 GiB) copied, 0.31 s, 3.5 GB/s"
    line = [x for x in out.stderr.splitlines() if " copied, " in x][-1]
    nbytes = int(line.split()[0])
    seconds = float(line.split(" copied, ")[1].split()[0].replace(",", "."))
    return nbytes / seconds / MB


def measure_pagecache(workdir: str, mib: int, repeats: int, sync_mib: int) -> dict:
    """dd into a fresh file and over the same file again (page cache only), and
    with fdatasync into a fresh file (what the disk takes, for the flush policy)."""
    path = os.path.join(workdir, "dd.bin")
    try:
        fresh = []
        for _ in range(repeats):
            if os.path.exists(path):
                os.unlink(path)
            fresh.append(_dd(path, mib))
        reused = [_dd(path, mib) for _ in range(repeats)]  # over the resident pages
        synced = []
        for _ in range(repeats if sync_mib else 0):
            os.unlink(path)
            synced.append(_dd(path, sync_mib, "notrunc,fdatasync"))
    finally:
        if os.path.exists(path):
            os.unlink(path)  # drops its dirty pages before they are written back
    return {"mib": mib, "fresh_file_mb_s": max(fresh), "reused_file_mb_s": max(reused),
            "fresh_runs": fresh, "reused_runs": reused, "fdatasync_mib": sync_mib,
            "fdatasync_fresh_file_mb_s": max(synced) if synced else None,
            "fdatasync_runs": synced}


def _sink(family: int, address, recv_bytes: int) -> None:
    """In a forked child: read one connection to EOF into a buffer, ack with one byte."""
    code = 1
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(120)
        sock.connect(address)
        view = memoryview(bytearray(recv_bytes))
        while sock.recv_into(view):
            pass
        sock.sendall(b"k")
        sock.close()
        code = 0
    finally:
        os._exit(code)


def _sendfile_once(kind: str, path: str, total: int, chunk: int, workdir: str,
                   recv_bytes: int) -> float:
    """Send ``total`` bytes of the page-cached file ``path`` to a forked receiver.

    Forked, not a fresh program: on this VM a receiver that was exec'd reads a
    Unix socket at a third of the speed of a forked one (same code; its kernel
    time per byte is ~4x higher), and the broker's own fetches beat that slower
    figure, so it is no limit.
    """
    if kind == "unix":
        address = os.path.join(workdir, "sink.sock")
        if os.path.exists(address):
            os.unlink(address)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(address)
    else:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        address = listener.getsockname()
    listener.listen(1)
    listener.settimeout(60)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        listener.close()
        _sink(listener.family, address, recv_bytes)
    try:
        conn, _ = listener.accept()
        conn.setblocking(True)  # os.sendfile on a socket in timeout mode gets EAGAIN
        fd = os.open(path, os.O_RDONLY)
        size = os.fstat(fd).st_size
        try:
            time.sleep(0.2)  # the receiver is in its loop
            t0 = time.perf_counter()
            sent = 0
            while sent < total:
                position = sent % size
                n = os.sendfile(conn.fileno(), fd, position,
                                min(chunk, size - position, total - sent))
                if n == 0:
                    raise BenchError("sendfile sent nothing")
                sent += n
            conn.shutdown(socket.SHUT_WR)
            conn.settimeout(120)
            if conn.recv(1) != b"k":
                raise BenchError("the receiver did not acknowledge")
            seconds = time.perf_counter() - t0
        finally:
            os.close(fd)
            conn.close()
    finally:
        listener.close()
        _, status = os.waitpid(pid, 0)
    if status != 0:
        raise BenchError(f"the receiver exited with status {status}")
    return total / seconds / MB


SINK_RECV_BYTES = 256 * 1024


def measure_sendfile(workdir: str, file_mib: int, total_mib: int, chunk: int,
                     repeats: int) -> dict:
    path = os.path.join(workdir, "sendfile.bin")
    block = os.urandom(MIB)
    with open(path, "wb") as f:
        for _ in range(file_mib):
            f.write(block)
    with open(path, "rb") as f:  # resident in the page cache
        while f.read(8 * MIB):
            pass
    # The receiver's buffer decides the figure: one that fits the CPU cache
    # (256 KiB) measures what the kernel can move; a 4 MiB one, like a client
    # that keeps each 4 MiB answer whole, is limited by its cache misses.
    out = {"file_mib": file_mib, "total_mib": total_mib, "chunk_bytes": chunk,
           "recv_bytes": SINK_RECV_BYTES, "large_recv_bytes": chunk}
    try:
        for kind in ("tcp", "unix"):
            for key, recv_bytes in (("", SINK_RECV_BYTES), ("_large_recv", chunk)):
                runs = [_sendfile_once(kind, path, total_mib * MIB, chunk, workdir, recv_bytes)
                        for _ in range(repeats)]
                out[f"{kind}{key}_mb_s"] = max(runs)
                out[f"{kind}{key}_runs"] = runs
    finally:
        os.unlink(path)
    return out
