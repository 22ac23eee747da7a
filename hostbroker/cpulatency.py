"""The broker's CPU wake-up latency request (Linux PM QoS, ``/dev/cpu_dma_latency``).

Owns the one open file that holds the request. A request crosses several
processes (processor, writer, handler), and each crossing that finds the next
process asleep on an idle CPU waits for that CPU to leave its idle state: on
bare metal a deep C-state takes tens to hundreds of microseconds to leave, in
a virtual machine a halted vCPU costs an exit to the host and an interrupt to
come back. While a file descriptor of ``/dev/cpu_dma_latency`` is open with a
value written to it, the kernel's idle governor takes only idle states whose
exit latency is within that value, on every CPU; 0 keeps idle CPUs polling.
Closing the last descriptor (or the process dying) withdraws the request.

``hold`` opens and writes the request; ``current`` reads the kernel's target
now in force (the lowest of all requests held on the machine). Both raise
:class:`CpuLatencyError` with one line naming the problem. Nothing else on
the machine is changed and nothing outlives the holder.

The request acts through the kernel's ``cpuidle`` driver. Without one (some
virtual machines: ``current_driver`` reads ``none``) idle CPUs halt whatever
is asked; :func:`no_effect` says so in one line, which the broker and
``hostbroker cpu-latency --hold`` print at start.
"""

from __future__ import annotations

import errno
import os
import struct

DEVICE = "/dev/cpu_dma_latency"
IDLE_DRIVER = "/sys/devices/system/cpu/cpuidle/current_driver"
DEFAULT_US = 2_000_000_000  # the kernel's target when nobody holds a request
MAX_US = DEFAULT_US
_VALUE = struct.Struct("=i")  # the device takes and gives a native 32-bit int


class CpuLatencyError(Exception):
    """The request cannot be held (or read); the message is one line."""


def _reason(e: OSError, path: str) -> str:
    if e.errno in (errno.EACCES, errno.EPERM):
        return (f"cannot open {path}: permission denied (it is root's: run the broker "
                "as root, or hold the request with `hostbroker cpu-latency --hold` "
                "from a root unit, systemd/hostbroker-cpu-latency.service)")
    if e.errno == errno.ENOENT:
        return f"{path} does not exist (a kernel without PM QoS, or a container without it)"
    return f"cannot use {path}: {e.strerror or e}"


def hold(us: int, path: str = DEVICE) -> int:
    """Open ``path``, ask for idle states that wake within ``us`` microseconds,
    and return the descriptor that holds the request (close it to withdraw)."""
    if not 0 <= us <= MAX_US:
        raise CpuLatencyError(f"a CPU wake-up latency is 0 to {MAX_US} microseconds, not {us}")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except OSError as e:
        raise CpuLatencyError(_reason(e, path)) from None
    try:
        written = os.write(fd, _VALUE.pack(us))
    except OSError as e:
        os.close(fd)
        raise CpuLatencyError(_reason(e, path)) from None
    if written != _VALUE.size:
        os.close(fd)
        raise CpuLatencyError(f"{path} took {written} of {_VALUE.size} bytes")
    return fd


def current(path: str = DEVICE) -> int:
    """The wake-up latency target in force now, in microseconds (the lowest
    request held by anyone; ``DEFAULT_US`` when nobody holds one)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise CpuLatencyError(_reason(e, path)) from None
    try:
        data = os.read(fd, _VALUE.size)
    except OSError as e:
        raise CpuLatencyError(_reason(e, path)) from None
    finally:
        os.close(fd)
    if len(data) != _VALUE.size:
        raise CpuLatencyError(f"{path} gave {len(data)} bytes, not {_VALUE.size}")
    return _VALUE.unpack(data)[0]


def no_effect(driver_path: str = IDLE_DRIVER) -> str | None:
    """One line saying why a request has no effect on this machine (no
    ``cpuidle`` driver), or None when it has one, or when that cannot be told."""
    try:
        with open(driver_path) as f:
            driver = f.read().strip()
    except OSError:
        return None  # no sysfs to read: nothing known either way
    if driver and driver != "none":
        return None
    return (f"a CPU wake-up latency request has no effect here: {driver_path} says "
            f"{driver or 'nothing'}, so idle CPUs halt whatever it asks (a KVM guest's "
            "kernel takes cpuidle_haltpoll.force=1, or any kernel idle=poll)")
