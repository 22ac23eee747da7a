"""The writer's flusher thread and its acks=-1 waiters (part of ``hb-writer-N``;
``hb-coordinator`` runs a flusher too, for the offsets store).

Owns: :class:`Flusher`, the one helper thread of a writer, which runs the
fdatasyncs the writer hands it; and :class:`Waiter`, an acks=-1 append the
writer holds until its data is flushed. Both carry the partition log they
belong to, so the writer can tell them from those of a partition created
since in the same table slot (see ``writer.py``).
"""

from __future__ import annotations

import os
import queue
import threading


class Flusher(threading.Thread):
    """The writer's one helper thread: runs fdatasync (which releases the GIL)
    so appends and acks=1 answers go on while the disk catches up. It touches
    no partition state: it gets ``(slot, plog, fd, offset)``, syncs and closes
    the fd, reports ``(slot, plog, offset, error)`` and rings the writer's
    doorbell. ``plog`` only travels along, so the writer can tell a flush of a
    partition deleted meanwhile (whose slot may hold a new one) from a live one.
    The coordinator runs one for the offsets store's syncs, as slot
    ``OFFSETS_SLOT`` with its ``OffsetsHost`` for ``plog``
    (``coordinator/offsets.py``)."""

    def __init__(self, doorbell):
        super().__init__(name="flusher", daemon=True)
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.done: queue.SimpleQueue = queue.SimpleQueue()
        self.doorbell = doorbell

    def run(self) -> None:
        while (job := self.jobs.get()) is not None:
            slot, plog, fd, offset = job
            error = None
            try:
                os.fdatasync(fd)
            except OSError as e:
                error = e
            finally:
                os.close(fd)
            self.done.put((slot, plog, offset, error))
            self.doorbell.ring()

    def stop(self) -> None:
        self.jobs.put(None)
        self.join()


class Waiter:
    """An acks=-1 append waiting for its data to be flushed into ``plog``
    (the partition it was appended to, whatever later takes its slot)."""

    __slots__ = ("handler", "token", "index", "slot", "plog", "base", "end", "deadline_ms")

    def __init__(self, handler, token, index, slot, plog, base, end, deadline_ms):
        self.handler = handler
        self.token = token
        self.index = index
        self.slot = slot
        self.plog = plog
        self.base = base
        self.end = end
        self.deadline_ms = deadline_ms
