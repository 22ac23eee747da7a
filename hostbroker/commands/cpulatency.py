"""``hostbroker cpu-latency``: the CPU wake-up latency target in force, or a request held.

Without ``--hold`` it prints the kernel's target now, in microseconds: the
lowest request any process on the machine holds, 2000000000 when nobody holds
one. With ``--hold US`` it holds a request of ``US`` (:mod:`hostbroker.cpulatency`)
until SIGTERM or Ctrl-C, tells systemd ``READY=1`` once the request is held,
and exits 0 when told to stop; the request goes with it. This gives a broker
run by the hardened unit (no devices, not root) what ``cpu.wakeup.latency.us``
gives a broker run as root: ``systemd/hostbroker-cpu-latency.service`` runs it
as root beside the broker. A request that cannot be held or read ends the
command with one line and status 78, as it ends the broker's start.
"""

from __future__ import annotations

import os
import signal
import sys

from hostbroker import cpulatency, systemd
from hostbroker.exits import CommandError
from hostbroker.errors import ExitStatus


def show() -> int:
    try:
        print(cpulatency.current())
    except cpulatency.CpuLatencyError as e:
        raise CommandError(str(e), ExitStatus.REFUSED) from None
    return 0


def hold(us: int) -> int:
    """Hold ``us`` until SIGTERM or SIGINT; 0 once told to stop."""
    stops = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stops)  # taken by sigwait, not by handlers
    try:
        fd = cpulatency.hold(us)
    except cpulatency.CpuLatencyError as e:
        raise CommandError(str(e), ExitStatus.REFUSED) from None
    try:
        try:
            now = f"{cpulatency.current()} µs"
        except cpulatency.CpuLatencyError:
            now = "unknown"  # written, not readable: the request holds all the same
        print(f"hostbroker cpu-latency: holding {us} µs ({cpulatency.DEVICE}); the target in "
              f"force is {now}; SIGTERM or Ctrl-C withdraws it", file=sys.stderr, flush=True)
        why = cpulatency.no_effect()
        if why is not None:
            print(f"hostbroker cpu-latency: {why}", file=sys.stderr, flush=True)
        systemd.notify(f"READY=1\nSTATUS=holding {us} µs")
        signal.sigwait(stops)
        systemd.notify("STOPPING=1")
    finally:
        os.close(fd)
    return 0
