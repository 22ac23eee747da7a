"""ISR commits of dir-placed leaders: registrar_isr's protocol with the log dirs'
state file in place of ZooKeeper.

Runs on ``hb-logdirs``' loop. A dir-placed leader's writer publishes the ISR
it wants (``isr_wanted``) and rings hb-logdirs. :class:`LocalIsrCommits`
checks that the slot's leader and leader epoch are still the document's, lets
a dir join only while it is live and its writer READY, writes the document
(the partition's ``version`` + 1, durable on every online dir), then stores
the commit in the ISR commit table under the admin lock and rings the writer,
as :class:`~hostbroker.workers.registrar_isr.IsrCommits` does (reused: only
``_ready``, ``_kept`` and ``_write_state`` differ). An ISR change is durable
before it applies.
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

    def _ready(self) -> bool:
        return not self.worker.frozen

    def _kept(self, s) -> bool:
        return s.placement == PLACEMENT_LOG_DIRS

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
        old = (list(part.isr), part.version)
        part.isr, part.version = list(isr), part.version + 1
        if not worker.write_doc():
            part.isr, part.version = old
            return None
        return part.version
