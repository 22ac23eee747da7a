"""What the supervisor does when a worker dies or falls silent (part of
``hb-supervisor``, :mod:`hostbroker.workers.supervisor`).

Owns: the reaping of dead workers and the meaning of their exit codes
(``EXIT_REFUSED`` and ``EXIT_BOOT_FAILED`` stop the broker, except a
replacement hb-http that cannot boot while the broker runs: logged and tried
again with backoff, HTTP down meanwhile, never a halt; ``EXIT_REOPEN``
from a writer is a replacement without a word, anything else a crash,
replaced with one line); their replacement (the rings they consumed reset,
the slots they left mid-write repaired: a dead writer's or handler's
partition slots, a dead hb-logdirs' log dir table slots; then a new epoch);
and the heartbeat watch (SIGABRT with SIGCONT to a worker silent past
``worker.heartbeat.timeout.ms``, SIGKILL a second later).

:class:`Respawn` is mixed into :class:`~hostbroker.workers.supervisor.Supervisor`,
whose state it uses (``children``, ``pids``, ``board``, ``table``,
``logdir_table``, ``stopping``, ``spawn``...).
"""

from __future__ import annotations

import os
import signal
import sys
import time

from hostbroker.errors import ExitStatus
from hostbroker.shm import procs
from hostbroker.shm.ring import Ring
from hostbroker.workers.base import EXIT_BOOT_FAILED, EXIT_REFUSED, EXIT_REOPEN

_ABORT_GRACE_S = 1.0  # SIGABRT (a core or a faulthandler dump) to SIGKILL
_HTTP_RETRY_FIRST_S = 1.0  # a replacement hb-http that could not boot: tried again after
_HTTP_RETRY_MAX_S = 60.0  # ... doubling up to this


class Respawn:
    """Mixin of :class:`~hostbroker.workers.supervisor.Supervisor`: dead and
    silent workers."""

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            key = self.children.pop(pid, None)
            self.kill_sent.pop(pid, None)
            if key is None:
                continue
            if self.pids.get(key) == pid:
                del self.pids[key]
            code = os.waitstatus_to_exitcode(status)
            if self.stopping:
                continue
            kind, index = key
            if code == EXIT_REFUSED:
                running = self.board.broker_state == procs.BROKER_RUNNING
                self.exit_code = ExitStatus.CRASHED if running else ExitStatus.REFUSED
                self.refused = True
                self.stopping = True
                continue
            if code == EXIT_BOOT_FAILED and kind == "http" and \
                    self.board.broker_state == procs.BROKER_RUNNING:
                self._http_boot_failed(index)
                continue
            if code == EXIT_BOOT_FAILED:
                self.halt_reason = f"{kind} {index} failed to start (see above)"
                # at start this configuration cannot run here; a replacement that
                # cannot boot later is a crash, which a service manager restarts
                running = self.board.broker_state == procs.BROKER_RUNNING
                self.exit_code = ExitStatus.CRASHED if running else ExitStatus.REFUSED
                self.stopping = True
                continue
            if code == EXIT_REOPEN and kind == "writer":  # told to open its dir afresh
                self._replace(kind, index)
                continue
            how = f"signal {-code}" if code < 0 else f"exit code {code}"
            print(f"hostbroker: {kind} {index} (pid {pid}) died with {how}; replacing it",
                  file=sys.stderr, flush=True)
            self._replace(kind, index)

    def _http_boot_failed(self, index: int) -> None:
        """A replacement hb-http that cannot boot (EMFILE, a package file gone
        after an upgrade in place, ...) while the broker runs: HTTP is down
        until a later try boots, the log broker serves on. Tried again after
        :data:`_HTTP_RETRY_FIRST_S`, doubling up to :data:`_HTTP_RETRY_MAX_S`."""
        self.http_boot_failures += 1
        failures = self.http_boot_failures
        delay = min(_HTTP_RETRY_FIRST_S * 2 ** (failures - 1), _HTTP_RETRY_MAX_S)
        self.board.set_state(self.plan.board_slot("http", index), procs.WORKER_EXITED)
        self.http_retry_at = (index, time.monotonic() + delay)
        print(f"hostbroker: http {index} failed to start (see above); HTTP is down, "
              f"trying again in {delay:g} s", file=sys.stderr, flush=True)

    def _retry_http(self) -> None:
        """Start hb-http again once its retry is due; forget the failures once
        one started (is ready)."""
        due = self.http_retry_at
        if due is not None and time.monotonic() >= due[1]:
            self.http_retry_at = None
            self._replace("http", due[0])
        elif due is None and self.http_boot_failures and ("http", 0) in self.pids and \
                self.board.state(self.plan.board_slot("http", 0)) == procs.WORKER_READY:
            self.http_boot_failures = 0

    def _replace(self, kind: str, index: int) -> None:
        # The dead worker's unread input died with it; its replacement starts clean.
        # Marked EXITED first: a writer still appending from request-ring bytes a
        # dead handler held checks this after its write (writer._holder_lives).
        self.board.set_state(self.plan.board_slot(kind, index), procs.WORKER_EXITED)
        for rkind, producer, consumer in self.plan.rings_consumed_by(kind, index):
            Ring.attach(self.plan.ring_name(rkind, producer, consumer)).reset_consumer()
        if kind in ("writer", "handler", "logdirs"):  # (the last two: under the admin lock)
            self._repair_torn_slots(index if kind == "writer" else None)
        if kind == "logdirs":
            self._repair_torn_log_dirs()
        if time.monotonic() - self.started_at.get((kind, index), 0) < 1.0:
            time.sleep(0.5)  # do not spin on a worker that dies at once
        self.spawn(kind, index)
        for bell in self.plan.doorbells.values():
            bell.ring()  # peers notice the new epoch now, not at their next tick

    def _repair_torn_slots(self, writer: int | None) -> None:
        """Make readable again the partition slots a dead worker left mid-write.

        A worker killed inside a seqlock write leaves the slot's sequence odd, and
        every reader (handlers, the replacement writer's start-up scan) would fail
        on it. Slots of a dead writer are safe to repair at once: nobody else
        publishes them (its replacement rewrites their offsets from the log). A
        dead handler wrote slots only under the admin lock; a slot still at the
        same odd sequence a moment later is not a live writer's write.
        """
        table = self.table
        torn = {}
        for i in range(table.high_water):  # every slot above it is FREE, never written
            seq = table.mid_write(i)
            if seq is not None and (writer is None or table.owner(i) == writer):
                torn[i] = seq
        if writer is None and torn:
            time.sleep(0.05)  # a live write lasts microseconds
            torn = {i: seq for i, seq in torn.items() if table.mid_write(i) == seq}
        for i in torn:
            table.repair(i)
        if torn:
            print(f"hostbroker: repaired {len(torn)} partition slot(s) left mid-write",
                  file=sys.stderr, flush=True)

    def _repair_torn_log_dirs(self) -> None:
        """Make readable again the log dir table slots a dead hb-logdirs left
        mid-write: it was their only writer, so they are safe to repair at
        once (as it is: each field is stored whole; the replacement writes
        the states and counts again on its first pass)."""
        table = getattr(self, "logdir_table", None)
        torn = table.repair_torn() if table is not None else []
        if torn:
            print(f"hostbroker: repaired log dir table slot(s) {torn} left mid-write",
                  file=sys.stderr, flush=True)

    def _check_heartbeats(self) -> None:
        timeout_ns = self.config["worker.heartbeat.timeout.ms"] * 1_000_000
        now_ns = time.monotonic_ns()
        for (kind, index), pid in list(self.pids.items()):
            slot = self.plan.board_slot(kind, index)
            if self.board.state(slot) != procs.WORKER_READY:
                continue
            if now_ns - self.board.heartbeat_ns(slot) <= timeout_ns:
                continue
            sent = self.kill_sent.get(pid)
            if sent is None:
                silent_ms = (now_ns - self.board.heartbeat_ns(slot)) // 1_000_000
                print(f"hostbroker: {kind} {index} (pid {pid}) silent for {silent_ms} ms; "
                      "aborting it", file=sys.stderr, flush=True)
                # SIGCONT too: a stopped process takes its SIGABRT only once running
                self._signal(pid, signal.SIGABRT)
                self._signal(pid, signal.SIGCONT)
                self.kill_sent[pid] = (signal.SIGABRT, time.monotonic())
            elif sent[0] == signal.SIGABRT and time.monotonic() - sent[1] > _ABORT_GRACE_S:
                self._signal(pid, signal.SIGKILL)
                self.kill_sent[pid] = (signal.SIGKILL, time.monotonic())

    @staticmethod
    def _signal(pid: int, sig: int) -> None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
