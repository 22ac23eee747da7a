"""Talking to systemd without a dependency: ``sd_notify`` and the watchdog period.

The supervisor calls :func:`notify` with ``READY=1`` once every worker is up,
``STATUS=...`` as it changes, ``WATCHDOG=1`` from its loop and ``STOPPING=1``
on shutdown. Without ``NOTIFY_SOCKET`` (not started by systemd) every call is a
no-op.
"""

from __future__ import annotations

import os
import socket


def notify(state: str, env: dict[str, str] | None = None) -> bool:
    """Send ``state`` (e.g. ``"READY=1"``) to systemd; return whether it was sent."""
    env = os.environ if env is None else env
    addr = env.get("NOTIFY_SOCKET")
    if not addr:
        return False
    if addr[0] == "@":  # abstract namespace
        addr = "\0" + addr[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.connect(addr)
            s.sendall(state.encode())
        return True
    except OSError:
        return False


def watchdog_interval_s(env: dict[str, str] | None = None) -> float | None:
    """Half of ``WATCHDOG_USEC`` in seconds (how often to ping), or None."""
    env = os.environ if env is None else env
    usec = env.get("WATCHDOG_USEC")
    pid = env.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        return int(usec) / 2_000_000
    except ValueError:
        return None
