"""The watch-and-read round the registrar's ZooKeeper readers share (cluster
mode; part of ``hb-registrar``).

Owns: :class:`WatchedReader`, the base of :class:`~hostbroker.workers.
registrar_fence.ControllerFence` and :class:`~hostbroker.workers.
registrar_names.ReplicatedTopics`. Each reads some ZooKeeper nodes and
publishes what it found into shared memory for the other workers:

- a kazoo watch (:meth:`WatchedReader.watch`, set on a thread of its own,
  once per client) only notes that a read is due and rings the registrar's
  doorbell: kazoo's threads never read or publish;
- the registrar's loop calls :meth:`WatchedReader.poll`, which reads
  (:meth:`WatchedReader.read`) when a watch fired, when the reader says so
  (:meth:`WatchedReader.wanted`), or every ``POLL_S`` in case a watch was
  lost;
- a failed read is said once (the same failure again is not repeated) and
  tried again after ``RETRY_S``; nothing is published from it.

What is read is bounded by the reader (``zkread.Bounds``) and each read
waits at most ``timeout_s``, so a slow or hostile ZooKeeper holds the loop
(and its heartbeat) no longer than that.
"""

from __future__ import annotations

import logging
import threading
import time

from hostbroker.cluster import zkread

log = logging.getLogger("hostbroker.registrar")


class WatchedReader:
    """A reader of ZooKeeper nodes on the registrar's loop (see the module
    docstring). ``worker`` is the RegistrarWorker: its ``client``,
    ``doorbell`` and ``stopping``. Subclasses give :meth:`watch`, :meth:`read`
    and ``WHAT`` (what a failed read was reading, for its log line)."""

    POLL_S = 2.0  # read again this often even without a watch event
    RETRY_S = 0.5  # a failed read is tried again after this
    WHAT = "ZooKeeper nodes"

    def __init__(self, worker, bounds: zkread.Bounds, timeout_s: float,
                 clock=time.monotonic):
        self.worker = worker
        self.bounds = bounds
        self.clock = clock
        self.report = zkread.Reporter(log)
        self.timeout_s = timeout_s
        self.due = True
        self.next_read = 0.0
        self.said_error: str | None = None
        self._watched = None  # the client whose nodes are watched

    # -- kazoo's threads: note and ring -------------------------------------------
    def note(self) -> None:
        self.due = True
        self.worker.doorbell.ring()

    def watch(self, client, on_change) -> None:
        """Set the kazoo watches that call ``on_change`` (any arguments) on a change."""
        raise NotImplementedError

    def _arm(self, client) -> None:
        if self._watched is client:
            return
        self._watched = client

        def on_change(*_args) -> bool | None:
            if self._watched is not client or self.worker.stopping:
                return False  # a client replaced, or the registrar stopping: unwatch
            self.note()
            return None

        def arm() -> None:
            try:
                self.watch(client, on_change)
            except Exception:  # noqa: BLE001 - not set: armed again by the loop
                if self._watched is client:
                    self._watched = None
                self.note()

        threading.Thread(target=arm, name="hb-registrar-watch", daemon=True).start()

    # -- the loop -------------------------------------------------------------------
    def wanted(self, now: float) -> bool:
        """Whether to read now: a watch fired, or ``POLL_S`` went by."""
        return self.due or now >= self.next_read

    def read(self, client, now: float) -> None:
        """Read and publish; any exception is a failed read (retried)."""
        raise NotImplementedError

    def poll(self) -> None:
        """One round on the registrar's loop: read and publish when due."""
        client = self.worker.client
        if client is None:
            return
        from kazoo.protocol.states import KazooState

        if client.state != KazooState.CONNECTED:
            return
        self._arm(client)
        now = self.clock()
        if not self.wanted(now):
            return
        self.due = False
        self.next_read = now + self.POLL_S
        try:
            self.read(client, now)
        except Exception as exc:  # noqa: BLE001 - ZooKeeper trouble: read again soon
            what = f"{type(exc).__name__}: {exc}"
            if what != self.said_error:
                self.said_error = what
                log.warning("hb-registrar: reading %s from ZooKeeper: %s", self.WHAT, what)
            self.next_read = now + self.RETRY_S
            return
        self.said_error = None
