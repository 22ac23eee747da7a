"""Loopback ports for the test servers (brokers, ZooKeeper).

Each test process picks from a range of its own (:func:`free_port`): the ports
below the kernel's ephemeral range (32768 and up, where client sockets and
port 0 binds land) are cut into :data:`SLICES` slices, one per pytest-xdist
worker, and a process walks its slice in turn, taking the next port that binds.
So no other worker is handed a port a test of this one uses, and a broker or
ZooKeeper a test stops and starts again finds its port free: its own worker
comes back to it only after every other port of the slice. A port picked may
still be bound by something else before the server binds it (another test run,
another program): :func:`start_moving` starts a server again on a new port when
its first start failed for that reason alone; :func:`taken_port` plays the other.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable, Iterator


LOW, HIGH = 10000, 32000  # below the kernel's ephemeral ports (32768-60999 here)
SLICES = 16  # gw0 to gw14 (their number modulo 15), and the one process without workers


def _slice() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) % (SLICES - 1) if worker[2:].isdigit() else SLICES - 1
    size = (HIGH - LOW) // SLICES
    return range(LOW + index * size, LOW + (index + 1) * size)


_ports = _slice()
_next = os.getpid() % len(_ports)  # where this process starts its walk


def free_port() -> int:
    """The next port of this process's slice that binds on 127.0.0.1 now."""
    global _next
    for _ in range(len(_ports)):
        port = _ports[_next]
        _next = (_next + 1) % len(_ports)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {_ports.start}-{_ports.stop - 1}")


@contextlib.contextmanager
def taken_port(port: int = 0) -> Iterator[int]:
    """Listen on ``port`` (0: one the kernel picks) for the block, as another
    test that took it first would; yields the port."""
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        yield squatter.getsockname()[1]


def start_moving(start: Callable[[], None], move: Callable[[], None], log_path: str,
                 taken: Callable[[], str], tries: int = 5) -> None:
    """Call ``start()``. When it raises RuntimeError and what the server wrote to
    ``log_path`` during that start holds ``taken()`` (its bind failure, naming
    the port it was given), call ``move()`` (pick another port) and start
    again, up to ``tries`` times; any other failure is raised as it is."""
    for _ in range(tries):
        try:
            size = os.path.getsize(log_path)
        except OSError:
            size = 0
        try:
            start()
            return
        except RuntimeError:
            with open(log_path, "rb") as f:
                f.seek(size)
                written = f.read().decode(errors="replace")
            if taken() not in written:
                raise
            move()
    raise RuntimeError(f"the port picked was taken {tries} times in a row")
