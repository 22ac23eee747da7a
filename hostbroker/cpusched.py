"""The broker's CPU scheduling policy: a real-time priority for all its processes.

Owns putting the calling process (every thread it has) under ``SCHED_RR`` at
a priority, and telling which policy a process runs under (for the broker's
start and for ``hostbroker top``). On a machine
where other work keeps the CPUs busy (a build, a test suite, a batch job),
an ordinary process that wakes up waits its turn behind them, and a request
crosses several of the broker's processes, each of which may wait so: the
tail of latency is then set by the scheduler (docs/benchmarks-history.md, "Sixth
round"). A real-time process that wakes takes a CPU from any ordinary one at
once.

The supervisor calls :func:`use_round_robin` before it forks anything, so
every worker (and every thread a worker starts) inherits the policy. A
real-time process that never sleeps keeps ordinary processes off its CPU (the
kernel leaves them 5 % of each second by default,
``kernel.sched_rt_runtime_us``), so the broker refuses to spin while it runs
under a real-time policy, whoever gave it (:func:`realtime_policy`).
Nothing here outlives the processes.
"""

from __future__ import annotations

import errno
import os

MAX_PRIORITY = 99  # the kernel's highest SCHED_RR priority
RT_RUNTIME = "/proc/sys/kernel/sched_rt_runtime_us"
POLICY_NAMES = {os.SCHED_RR: "SCHED_RR", os.SCHED_FIFO: "SCHED_FIFO"}  # the real-time ones
_ORDINARY = {os.SCHED_OTHER: "SCHED_OTHER", getattr(os, "SCHED_BATCH", 3): "SCHED_BATCH",
             getattr(os, "SCHED_IDLE", 5): "SCHED_IDLE"}


class CpuSchedError(Exception):
    """The policy cannot be had; the message is one line."""


def use_round_robin(priority: int) -> None:
    """Put every thread of this process under SCHED_RR at ``priority`` (1-99);
    threads and processes started from them afterwards inherit it."""
    if not 1 <= priority <= MAX_PRIORITY:
        raise CpuSchedError(f"a real-time priority is 1 to {MAX_PRIORITY}, not {priority}")
    try:
        threads = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        threads = [0]
    for tid in threads:
        try:
            os.sched_setscheduler(tid, os.SCHED_RR, os.sched_param(priority))
        except ProcessLookupError:
            continue  # a thread that ended meanwhile
        except OSError as e:
            if e.errno == errno.EPERM:
                raise CpuSchedError(
                    f"SCHED_RR at priority {priority}: permission denied (it needs root, "
                    f"CAP_SYS_NICE or a real-time priority limit of at least {priority}, "
                    f"`ulimit -r`; under systemd leave this 0 and set CPUSchedulingPolicy=rr "
                    f"and CPUSchedulingPriority={priority} in the unit, see systemd/README.md)"
                ) from None
            raise CpuSchedError(f"SCHED_RR at priority {priority}: {e.strerror or e}") from None


def _policy(pid: int) -> tuple[int, int]:
    """``(policy, priority)`` of ``pid`` (0: this thread), without the
    reset-on-fork flag."""
    policy = os.sched_getscheduler(pid) & ~getattr(os, "SCHED_RESET_ON_FORK", 0)
    return policy, os.sched_getparam(pid).sched_priority


def realtime_policy(pid: int = 0) -> tuple[str, int] | None:
    """``(policy name, priority)`` when ``pid`` (0: this thread) runs under a
    real-time policy, else None."""
    policy, priority = _policy(pid)
    return (POLICY_NAMES[policy], priority) if policy in POLICY_NAMES else None


def describe(pid: int) -> str | None:
    """``pid``'s policy as ``hostbroker top`` shows it ("SCHED_RR 3",
    "SCHED_OTHER"), None when it cannot be read (the process is gone)."""
    try:
        policy, priority = _policy(pid)
    except OSError:
        return None
    if policy in POLICY_NAMES:
        return f"{POLICY_NAMES[policy]} {priority}"
    return _ORDINARY.get(policy, f"policy {policy}")


def throttled(path: str = RT_RUNTIME) -> bool:
    """Whether the kernel keeps real-time processes from all of a CPU's time
    (``kernel.sched_rt_runtime_us`` is not -1); True when it cannot be read."""
    try:
        with open(path) as f:
            return int(f.read().strip()) >= 0
    except (OSError, ValueError):
        return True
