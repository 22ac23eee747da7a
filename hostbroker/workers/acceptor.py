"""The acceptor process, ``hb-acceptor`` (one per broker).

Owns: the listening sockets (bound by the supervisor before the fork, so a
bind failure stops the start with one line and a replaced acceptor listens on
the very same sockets), and the count of open connections that
``max.connections`` bounds. Reads: new connections; each processor's
CONNECTIONS gauge on the process board and its acknowledgements of
hand-offs. Writes: each accepted socket to the processor with the fewest
connections, one fd per SOCK_SEQPACKET message (``socket.send_fds``), then
closes its own copy. When every processor's hand-off queue is full it holds
the one connection it has and accepts no more until a queue has room (the
rest wait in the listen queue), rather than drop a connection it accepted.

Counting: a connection is open while a processor holds it (its gauge, which
drops as soon as the processor closes it) or while it is on its way there
(handed off, not yet acknowledged; the processor raises its gauge before it
acknowledges). At the limit a new connection is closed at once; but while
hand-offs are on their way the acceptor does not decide: it leaves new
connections in the listen queue until the processors have acknowledged them,
so the count it compares is exact, never an estimate. A hand-off not
acknowledged within ``_ACK_PATIENCE_S`` (its processor died holding it) stops
counting.
"""

from __future__ import annotations

import selectors
import socket
import struct
import time

from hostbroker.shm import procs
from hostbroker.workers.base import Worker

_ACK = struct.Struct("<I")  # hand-offs taken, processor -> acceptor
_ACK_PATIENCE_S = 2.0
_BURST = 64  # connections accepted per wake-up, then the loop breathes


class AcceptorWorker(Worker):
    kind = "acceptor"
    process_name = "hb-acceptor"

    def init_process(self) -> None:
        super().init_process()
        self.outs = []
        for acceptor_end, processor_end in self.plan.handoff:
            processor_end.close()
            acceptor_end.setblocking(False)
            self.outs.append(acceptor_end)
        self.max_connections = self.config["max.connections"]
        self.processor_slots = [self.plan.board_slot("processor", p)
                                for p in range(self.plan.num_processors)]
        self.in_transit = [0] * len(self.outs)
        self.last_handoff = 0.0
        self.listening = True
        self.waiting: socket.socket | None = None  # accepted; every processor was full
        for p in range(len(self.outs)):
            self._take_acks(p)  # meant for an acceptor before us
        self.in_transit = [0] * len(self.outs)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.doorbell.fileno(), selectors.EVENT_READ, None)
        for p, out in enumerate(self.outs):
            self.sel.register(out.fileno(), selectors.EVENT_READ, p)
        for _, listener in self.plan.listeners:
            listener.setblocking(False)
            self.sel.register(listener.fileno(), selectors.EVENT_READ, listener)
        self.board.set_state(self.slot, procs.WORKER_READY)

    def run(self) -> None:
        while not self.stopping:
            for key, mask in self.sel.select(0.1 if not self.listening else 1.0):
                data = key.data
                if data is None:
                    self.doorbell.drain()
                elif isinstance(data, int):
                    if mask & selectors.EVENT_READ:
                        self._take_acks(data)
                    if mask & selectors.EVENT_WRITE:
                        self._hand_off_waiting()
                elif self.listening:
                    self._accept(data)
            if not self.listening and self.waiting is None and (
                    not any(self.in_transit) or self._ack_overdue()):
                self._listen(True)
            self.heartbeat()
        for _, listener in self.plan.listeners:
            listener.close()

    # -- counting --------------------------------------------------------------
    def _take_acks(self, p: int) -> None:
        while True:
            try:
                data = self.outs[p].recv(64)
            except (BlockingIOError, InterruptedError):
                return
            if len(data) != _ACK.size:
                return
            self.in_transit[p] = max(0, self.in_transit[p] - _ACK.unpack(data)[0])

    def _ack_overdue(self) -> bool:
        """Hand-offs unacknowledged for long went down with their processor."""
        if time.monotonic() - self.last_handoff < _ACK_PATIENCE_S:
            return False
        self.in_transit = [0] * len(self.outs)
        return True

    def _connections(self) -> list[int]:
        """Open connections per processor: acknowledgements first, then the gauges
        (raised before the acknowledgement), so none is missed."""
        for p in range(len(self.outs)):
            self._take_acks(p)
        counts = [self.board.get(slot, procs.CONNECTIONS) + self.in_transit[p]
                  for p, slot in enumerate(self.processor_slots)]
        if self.waiting is not None:
            counts[0] += 1
        return counts

    def _listen(self, on: bool) -> None:
        if on == self.listening:
            return
        self.listening = on
        for _, listener in self.plan.listeners:
            if on:
                self.sel.register(listener.fileno(), selectors.EVENT_READ, listener)
            else:
                self.sel.unregister(listener.fileno())

    # -- accepting ---------------------------------------------------------------
    def _accept(self, listener: socket.socket) -> None:
        for _ in range(_BURST):
            counts = self._connections()
            full = sum(counts) >= self.max_connections
            if full and any(self.in_transit) and not self._ack_overdue():
                self._listen(False)  # decide once the processors have counted them
                return
            try:
                sock, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self.count(procs.ERRORS)
                return
            if full:
                sock.close()
                self.count(procs.ERRORS)
                continue
            self._place(sock, counts)
            if self.waiting is not None:
                return

    def _place(self, sock: socket.socket, counts: list[int]) -> None:
        try:
            p = self._hand_off(sock, counts)
        except BlockingIOError:
            # every processor is behind: hold it, take no more until one has room
            self.waiting = sock
            self._listen(False)
            self._want_room(True)
            return
        if p is not None:
            self.in_transit[p] += 1
            self.last_handoff = time.monotonic()

    def _hand_off_waiting(self) -> None:
        sock, self.waiting = self.waiting, None
        self._want_room(False)
        if sock is not None:
            self._place(sock, self._connections())

    def _want_room(self, on: bool) -> None:
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if on else 0)
        for p, out in enumerate(self.outs):
            self.sel.modify(out.fileno(), events, p)

    def _hand_off(self, sock: socket.socket, counts: list[int]) -> int | None:
        """Pass ``sock`` to the least loaded processor that takes it and close our
        copy; BlockingIOError (``sock`` kept) when none has room for it now."""
        try:
            for p in sorted(range(len(self.outs)), key=lambda i: (counts[i], i)):
                try:
                    socket.send_fds(self.outs[p], [b"c"], [sock.fileno()])
                except (BlockingIOError, InterruptedError):
                    continue  # that processor is not keeping up; try the next
                sock.close()
                return p
        except OSError:
            self.count(procs.ERRORS)
            sock.close()
            return None
        raise BlockingIOError("every processor's hand-off queue is full")
