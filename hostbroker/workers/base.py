"""What every worker process shares: naming, signals, heartbeat, exit codes.

A worker object is built in the supervisor before the fork and does nothing
there; :meth:`Worker.init_process` runs in the child (names the process for
``ps``/psutil, installs signal handlers, attaches shared memory), then
:meth:`Worker.run` loops until asked to stop. Signal handlers only set a flag
and ring the worker's own doorbell so the loop wakes up; the loop does the work.
"""

from __future__ import annotations

import ctypes
import os
import selectors
import signal
import sys
import time

from hostbroker.shm.channel import Receiver, Sender
from hostbroker.shm import procs
from hostbroker.shm.procs import ProcessBoard
from hostbroker.shm.ring import Ring
from hostbroker.workers.plan import BrokerPlan

EXIT_OK = 0
EXIT_BOOT_FAILED = 3  # the supervisor halts the broker instead of respawning

_PR_SET_NAME = 15
_libc = None


def set_process_name(name: str) -> None:
    """Set the kernel's name of this process (``ps -o comm``, psutil ``name()``)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    _libc.prctl(_PR_SET_NAME, name.encode()[:15], 0, 0, 0)


def now_ms() -> int:
    return int(time.time() * 1000)


class Worker:
    kind = "worker"
    process_name = "hb-worker"

    def __init__(self, plan: BrokerPlan, index: int, epoch: int = 0):
        self.plan = plan
        self.config = plan.config
        self.index = index
        self.epoch = epoch
        self.stopping = False
        self.board: ProcessBoard | None = None
        self.slot = plan.board_slot(self.kind, index)
        self._inputs: list[Ring] = []  # the rings this worker consumes

    @property
    def name(self) -> str:
        return f"{self.process_name}-{self.index}" if self.kind != "acceptor" else self.process_name

    def init_process(self) -> None:
        set_process_name(self.name)
        signal.signal(signal.SIGTERM, self._on_stop_signal)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        self.board = ProcessBoard.attach(self.plan.board_name)
        self.doorbell = self.plan.doorbell(self.kind, self.index)

    def _on_stop_signal(self, signum, frame) -> None:
        self.stopping = True
        self.doorbell.ring()

    def heartbeat(self) -> None:
        """Say we are alive, and how much waits in our input rings (once per loop)."""
        self.board.heartbeat(self.slot)
        self.board.set(self.slot, procs.RING_OCCUPANCY,
                       sum(ring.pending_bytes() for ring in self._inputs))

    def count(self, counter: int, n: int = 1) -> None:
        self.board.add(self.slot, counter, n)

    # -- rings -----------------------------------------------------------
    def _attach(self, kind: str, producer: int, consumer: int) -> Ring:
        return Ring.attach(self.plan.ring_name(kind, producer, consumer))

    def sender(self, kind: str, producer: int, consumer: int) -> Sender:
        return Sender(self._attach(kind, producer, consumer))

    def receiver(self, kind: str, producer: int, consumer: int) -> Receiver:
        ring = self._attach(kind, producer, consumer)
        self._inputs.append(ring)
        return Receiver(ring)

    def serve_rings(self) -> None:
        """The loop of a worker whose only input is its rings (handlers, writers):
        sleep until the doorbell rings or ``_timeout()`` passes, run ``_cycle()``;
        after a stop signal, one last cycle for what already arrived."""
        sel = selectors.DefaultSelector()
        sel.register(self.doorbell.fileno(), selectors.EVENT_READ)
        while not self.stopping:
            sel.select(self._timeout())
            self.doorbell.drain()
            self.heartbeat()
            self._cycle()
        self._cycle()
        sel.close()

    def run(self) -> None:  # pragma: no cover - each kind has its own loop
        raise NotImplementedError

    def main(self) -> int:
        """Entry point in the child after fork; returns the exit code."""
        try:
            self.init_process()
        except Exception as e:  # noqa: BLE001 - report why it could not boot, then halt
            print(f"hostbroker: {self.name} failed to start: {e}", file=sys.stderr, flush=True)
            return EXIT_BOOT_FAILED
        self.run()
        return EXIT_OK


def child_main(worker: Worker) -> None:
    """Run ``worker`` in a freshly forked child and never return."""
    code = 1
    try:
        code = worker.main()
    except BaseException:  # noqa: BLE001 - a crashing worker is restarted; show why
        import traceback
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
