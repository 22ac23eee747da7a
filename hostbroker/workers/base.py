"""What every worker process shares: naming, signals, heartbeat, exit codes.

A worker object is built in the supervisor before the fork and does nothing
there; right after the fork the child asks the kernel for SIGTERM when the
supervisor dies (:func:`die_with_parent`), then :meth:`Worker.init_process`
names the process for ``ps``/psutil, installs signal handlers and attaches
shared memory, and :meth:`Worker.run` loops until asked to stop. Signal
handlers only set a flag and ring the worker's own doorbell so the loop wakes
up; the loop does the work.

Sleeping: a worker sleeps on its doorbell through a
:class:`~hostbroker.shm.doorbell.Sleeper`, which flags it asleep on the board
first, so peers ring it (through :meth:`Worker.waker`) only then; after a round
that had work it may spin ``worker.spin.us`` first. Each round it adds to its
board counters where its time went: ring wait (from the enqueue stamps of what
it took), work, wake-ups, bells rung and skipped, spin hits.

Liveness: a ``heartbeat`` thread writes the worker's heartbeat on the process
board every ``worker.heartbeat.timeout.ms / 8``, so a stopped or frozen process
is seen within the (short) heartbeat timeout whatever its main thread is busy
with; it beats only while the main loop has come round (:meth:`Worker.heartbeat`)
within ``worker.stall.timeout.ms``, so a loop stuck for good is seen too.

A worker whose supervisor is gone (SIGKILLed) stops as on SIGTERM, draining
what it can, and ends itself ``shutdown.timeout.ms`` + 1 s later at the latest.
"""

from __future__ import annotations

import ctypes
import os
import selectors
import signal
import sys
import threading
import time

from hostbroker.shm.channel import Receiver, Sender
from hostbroker.shm import procs
from hostbroker.shm.doorbell import Sleeper, Waker
from hostbroker.shm.procs import ProcessBoard
from hostbroker.shm.ring import Ring
from hostbroker.workers.plan import BrokerPlan

EXIT_OK = 0
EXIT_BOOT_FAILED = 3  # the supervisor halts the broker instead of respawning
EXIT_ORPHANED = 4  # the supervisor died before the worker could start
EXIT_REFUSED = 5  # the worker printed why this machine's state refuses the start (one line);
#                   the supervisor halts the broker with ExitStatus.REFUSED and adds nothing
EXIT_REOPEN = 6  # an offline writer told to open its log dir afresh (OP_DIR_REOPEN): the
#                  supervisor replaces it at once and prints no "died" line

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
_libc = None
_U64 = (1 << 64) - 1  # the board's counters wrap here


def _prctl(option: int, arg) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.prctl(option, arg, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def set_process_name(name: str) -> None:
    """Set the kernel's name of this process (``ps -o comm``, psutil ``name()``)."""
    _prctl(_PR_SET_NAME, name.encode()[:15])


def die_with_parent(parent_pid: int, sig: int = signal.SIGTERM) -> None:
    """In a child right after fork: have the kernel send ``sig`` when the parent
    dies; if it died before we asked (the race), leave at once."""
    _prctl(_PR_SET_PDEATHSIG, int(sig))
    if os.getppid() != parent_pid:
        os._exit(EXIT_ORPHANED)


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
        self._wakers: list[Waker] = []
        self.sleeper: Sleeper | None = None
        self.wait_ns = 0  # ns the records this worker took waited in its input rings
        self.work_ns = 0  # ns of loop rounds that had work
        self.supervisor_pid = os.getpid()  # built in the supervisor, before the fork
        self._loop_ns = 0  # when the main loop last came round (for the heartbeat thread)

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
        self._counters = self.board.counters(self.slot)
        self.doorbell = self.plan.doorbell(self.kind, self.index)
        self.sleeper = Sleeper(self.board.flags, self.board.sleeping_index(self.slot),
                               self._has_input, self.config["worker.spin.us"] * 1000)
        self._loop_ns = time.monotonic_ns()
        self.board.heartbeat(self.slot, self._loop_ns)  # the thread's first beat is later
        threading.Thread(target=self._beat, name="heartbeat", daemon=True).start()

    def _on_stop_signal(self, signum, frame) -> None:
        if not self.stopping and os.getppid() != self.supervisor_pid:
            # the supervisor is gone: nobody will wait for us or SIGKILL us, so
            # drain as on a normal stop but end for sure (SIGALRM terminates)
            signal.setitimer(signal.ITIMER_REAL, self.config["shutdown.timeout.ms"] / 1000 + 1)
            os.write(2, f"hostbroker: {self.name}: supervisor gone; stopping\n".encode())
        self.stopping = True
        self.doorbell.ring()

    def heartbeat(self) -> None:
        """The main loop came round (once per loop): the heartbeat thread beats
        on the board for it while this is recent (:meth:`beat_if_alive`)."""
        self._loop_ns = time.monotonic_ns()

    def publish_timing(self) -> None:
        """Copy where the time went (plain counters of the main loop) and how
        much waits in our input rings to the board; the heartbeat thread does
        it, off the main loop's path."""
        board, slot, sleeper = self.board, self.slot, self.sleeper
        board.set(slot, procs.RING_OCCUPANCY, sum(ring.pending_bytes() for ring in self._inputs))
        # (the board's counters are u64: wrap as a counter does, never raise here)
        board.set(slot, procs.WAIT_NS, self.wait_ns & _U64)
        board.set(slot, procs.WORK_NS, self.work_ns & _U64)
        if sleeper is not None:
            board.set(slot, procs.WAKEUPS, sleeper.wakeups)
            board.set(slot, procs.SPIN_HITS, sleeper.spin_hits)
        rung = skipped = 0
        for waker in self._wakers:
            rung += waker.rung
            skipped += waker.skipped
        board.set(slot, procs.BELLS_RUNG, rung)
        board.set(slot, procs.BELLS_SKIPPED, skipped)

    def _beat(self) -> None:
        """The heartbeat thread: beat while the main loop is alive (see the module doc)."""
        interval = self.config["worker.heartbeat.timeout.ms"] / 8000
        while True:
            time.sleep(interval)
            self.beat_if_alive(time.monotonic_ns())
            self.publish_timing()

    def beat_if_alive(self, now_ns: int) -> bool:
        """Beat at ``now_ns`` unless the main loop last came round more than
        ``worker.stall.timeout.ms`` before; return whether it beat."""
        if now_ns - self._loop_ns > self.config["worker.stall.timeout.ms"] * 1_000_000:
            return False
        self.board.heartbeat(self.slot, now_ns)
        return True

    def count(self, counter: int, n: int = 1) -> None:
        self._counters[counter] += n

    # -- rings -----------------------------------------------------------
    def _attach(self, kind: str, producer: int, consumer: int) -> Ring:
        return Ring.attach(self.plan.ring_name(kind, producer, consumer))

    def sender(self, kind: str, producer: int, consumer: int) -> Sender:
        return Sender(self._attach(kind, producer, consumer))

    def receiver(self, kind: str, producer: int, consumer: int) -> Receiver:
        ring = self._attach(kind, producer, consumer)
        self._inputs.append(ring)
        return Receiver(ring)

    def waker(self, kind: str, index: int) -> Waker:
        """The doorbell of worker ``kind`` ``index``, rung only while it sleeps."""
        peer = self.plan.board_slot(kind, index)
        waker = Waker(self.plan.doorbell(kind, index), self.board.flags,
                      self.board.sleeping_index(peer))
        self._wakers.append(waker)
        return waker

    def _has_input(self) -> bool:
        """Work is waiting: an input ring holds a record not read yet."""
        for ring in self._inputs:
            if ring.has_unread():
                return True
        return False

    def serve_rings(self) -> None:
        """The loop of a worker whose only input is its rings (handlers, writers):
        sleep until the doorbell rings or ``_timeout()`` passes (after a round
        with work, spin ``worker.spin.us`` first), run ``_cycle()``; after a
        stop signal, one last cycle for what already arrived."""
        sel = selectors.DefaultSelector()
        sel.register(self.doorbell.fileno(), selectors.EVENT_READ)
        sleeper = self.sleeper
        worked = False
        while not self.stopping:
            if not (worked and sleeper.spin_ns and sleeper.spin()):
                sleeper.sleep(sel.select, self._timeout())
            self.doorbell.drain()
            start = time.monotonic_ns()
            self.heartbeat()
            worked = self._has_input()
            self._cycle()
            if worked:
                self.work_ns += time.monotonic_ns() - start
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
