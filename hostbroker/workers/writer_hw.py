"""The high watermark a leader computes and the HW checkpoint of a log dir
(part of ``hb-writer-N``; docs/storage.md, "Replicas").

Mixed into :class:`~hostbroker.workers.writer.WriterWorker` beside
:class:`~hostbroker.workers.writer_replicas.Replicas`, whose books it reads.
Owns: a leader's HW (:meth:`HighWatermarks._leader_hw`, the smallest log end
over the committed ISR and the followers it asks to join), and the log
dir's ``replication-offset-checkpoint`` (:meth:`HighWatermarks._checkpoint_hws`),
written when any replica's HW changed.
"""

from __future__ import annotations

from hostbroker.log import hwcheckpoint


class HighWatermarks:
    """Mixin of :class:`WriterWorker`: leaders' HWs and the HW checkpoint."""

    def _leader_hw(self, book) -> int:
        """The smallest log end over the committed ISR (ours included) and the
        followers we ask to join it: ZooKeeper may hold one of those in the
        ISR before we adopt the commit, and from then on it may be elected,
        so nothing it lacks is acknowledged."""
        members = set(book.isr).union(book.isr_wanted)
        hw = book.tracker.high_watermark(members, book.plog.log_end_offset)
        return min(hw, book.plog.log_end_offset)

    def _checkpoint_hws(self) -> None:
        """Record every replica's HW (replication-offset-checkpoint), if changed."""
        if self.logdir is None or self.offline:
            return
        marks = {(b.plog.topic, b.plog.partition): b.hw for b in self.books.values()}
        if not marks and self.hw_checkpoint is None and not self.start_hws:
            return
        data = hwcheckpoint.format_high_watermarks(marks)
        if data == self.hw_checkpoint:
            return
        try:
            hwcheckpoint.write_high_watermarks(self.path, data)
        except OSError as e:
            self._go_offline(e)
            return
        self.hw_checkpoint = data
