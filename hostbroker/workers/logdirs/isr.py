"""ISR commits of dir-placed leaders: registrar_isr's protocol with the log dirs'
state file in place of ZooKeeper.

Runs on ``hb-logdirs``' loop. A dir-placed leader's writer publishes the ISR
it wants (``isr_wanted``) and rings hb-logdirs. :class:`LocalIsrCommits`
checks that the slot's leader and leader epoch are still the document's, lets
a dir join only while it is live and its writer READY, and changes the
partition in the document (its ``version`` + 1). Once every leader wanting a
change has been looked at, the document is written once for all of them
(durable on every online dir; on failure every change of the poll is undone
and tried again later), then each commit is stored in the ISR commit table
under the admin lock and its writer rung, as
:class:`~hostbroker.workers.registrar_isr.IsrCommits` does (reused: only
``_ready``, ``_kept``, ``_slots``, ``_write_state`` and ``_flush`` differ).
The slots looked at are the dir-placed ones hb-logdirs' last scan found,
never the whole table. An ISR change is durable before it applies.
"""

from __future__ import annotations

import time

from hostbroker.shm.partitions import PLACEMENT_LOG_DIRS
from hostbroker.workers.registrar_isr import IsrCommits


class LocalIsrCommits(IsrCommits):
    def __init__(self, worker, table):
        super().__init__(worker, table)
        self.commits = worker.commits
        self.lock = worker.lock
        self.staged: dict[tuple[str, int], tuple] = {}  # tp -> (isr, version) before the poll

    def _ready(self) -> bool:
        return not self.worker.frozen

    def _kept(self, s) -> bool:
        return s.placement == PLACEMENT_LOG_DIRS

    def _slots(self):
        """The dir-placed slots the last scan found, read now."""
        return [(i, self.table.read(i)) for i in list(self.worker.slot_states)]

    def _write_state(self, index: int, s, isr: list[int]) -> int | None:
        worker = self.worker
        part = worker.doc.parts.get((s.name, s.partition))
        if part is None or (part.leader, part.leader_epoch) != (s.leader, s.leader_epoch):
            return None  # the document moved on; the next OP_REPLICA_STATE says so
        if s.leader not in isr or s.name in worker.doc.deleting:
            return None
        live = worker.live_dirs(time.monotonic())
        index_of = {d: w for w, d in worker.dirtable.ids().items()}
        for d in set(isr) - set(part.isr):
            if d not in live or not worker.writer_ready(index_of[d]):
                return None  # a dir joins only while online and its writer READY
        self.staged.setdefault((s.name, s.partition), (list(part.isr), part.version))
        part.isr, part.version = list(isr), part.version + 1
        return part.version

    def _flush(self) -> bool:
        staged, self.staged = self.staged, {}
        if self.worker.write_doc():
            return True
        for tp, (isr, version) in staged.items():  # not durable: undone
            part = self.worker.doc.parts[tp]
            part.isr, part.version = isr, version
        return False
