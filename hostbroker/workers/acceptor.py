"""The acceptor process, ``hb-acceptor`` (one per broker).

Owns: the listening sockets (bound by the supervisor before the fork, so a
bind failure stops the start with one line and a replaced acceptor listens on
the very same sockets). Reads: new connections; the process board's
connection counters. Writes: each accepted socket to the processor with the
fewest connections, one fd per SOCK_SEQPACKET message (``socket.send_fds``),
then closes its own copy. Beyond ``max.connections`` a new connection is
closed at once.
"""

from __future__ import annotations

import selectors
import socket

from hostbroker.shm import procs
from hostbroker.workers.base import Worker


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
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.doorbell.fileno(), selectors.EVENT_READ, None)
        for _, listener in self.plan.listeners:
            listener.setblocking(False)
            self.sel.register(listener.fileno(), selectors.EVENT_READ, listener)
        self.board.set_state(self.slot, procs.WORKER_READY)

    def run(self) -> None:
        while not self.stopping:
            for key, _ in self.sel.select(1.0):
                if key.data is None:
                    self.doorbell.drain()
                else:
                    self._accept(key.data)
            self.heartbeat()
        for _, listener in self.plan.listeners:
            listener.close()

    def _connections(self) -> list[int]:
        return [self.board.get(slot, procs.CONNECTIONS) for slot in self.processor_slots]

    def _accept(self, listener: socket.socket) -> None:
        # counters lag behind hand-offs: read them once per burst, count ours on top
        counts = self._connections()
        for _ in range(64):  # bounded burst, then let the loop breathe
            try:
                sock, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self.count(procs.ERRORS)
                return
            if sum(counts) >= self.max_connections:
                sock.close()
                self.count(procs.ERRORS)
                continue
            p = self._hand_off(sock, counts)
            if p is not None:
                counts[p] += 1

    def _hand_off(self, sock: socket.socket, counts: list[int]) -> int | None:
        """Pass ``sock`` to the least loaded processor that takes it; close our copy."""
        try:
            for p in sorted(range(len(self.outs)), key=lambda i: (counts[i], i)):
                try:
                    socket.send_fds(self.outs[p], [b"c"], [sock.fileno()])
                except (BlockingIOError, InterruptedError):
                    continue  # that processor is not keeping up; try the next
                return p
            self.count(procs.ERRORS)
        except OSError:
            self.count(procs.ERRORS)
        finally:
            sock.close()
        return None
