"""Loopback ports for the test servers (brokers, ZooKeeper), picked from the kernel.

A port is picked by binding port 0 and closing the socket, so another test
may bind it before the server does. :func:`start_moving` starts a server
again on a new port when its start failed for that reason alone;
:func:`taken_port` plays the other test.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable, Iterator


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
