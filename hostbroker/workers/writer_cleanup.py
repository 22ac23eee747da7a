"""Retention, recovery checkpoints and partition deletion of a writer (part
of ``hb-writer-N``).

Mixed into :class:`~hostbroker.workers.writer.WriterWorker`, whose partition
logs, table slots and books (dirty, flushing, waiting and published slots)
it uses. Owns: deleting segments past a partition's retention, recording
every partition's flushed offset for crash recovery, and deleting a
partition (its slot marked DELETING, everything held for it dropped, its dir
removed, the slot freed), retried at every retention check while the file
system refuses; and changing a partition's topic config and partition count
(one partition of an ALTER_TOPIC, :meth:`Cleanup._alter`).
"""

from __future__ import annotations

import sys

from hostbroker.errors import ConfigError, ErrorCode, HostbrokerError, StorageError
from hostbroker.log.partition import SegmentDeleteError
from hostbroker.shm import partitions as ptable
from hostbroker.shm import procs


class Cleanup:
    """Mixin of :class:`WriterWorker`: retention, checkpoints, deletes."""

    def _retention(self, now: int) -> None:
        self.next_retention_ms = now + self.config["log.retention.check.interval.ms"]
        if self.offline:
            return
        if self.undeletable:
            try:
                with self.lock:
                    for slot, (topic, partition) in list(self.undeletable.items()):
                        self._delete_slot(slot, topic, partition, retry=True)
                    self.table.bump_generation()
            except TimeoutError:
                pass  # the admin lock is busy (a large create): retried at the next check
        for slot, plog in list(self.slots.items()):
            try:
                deleted = plog.enforce_retention(now)
            except SegmentDeleteError as e:
                # one file that will not go takes nothing offline; said once per partition
                if slot not in self.retention_stuck:
                    print(f"hostbroker: {self.name}: retention: {e}; retrying at every "
                          "check", file=sys.stderr, flush=True)
                    self.retention_stuck.add(slot)
                    self.count(procs.ERRORS)
                self._publish(slot, plog)
                continue
            except (OSError, StorageError) as e:
                self._go_offline(e)
                return
            self.retention_stuck.discard(slot)
            if deleted:
                book = self.books.get(slot)
                if book is not None and book.plog is plog:
                    try:  # a replica's epochs start where its log now does
                        book.epochs.truncate_from_start(plog.log_start_offset)
                    except StorageError as e:
                        self._go_offline(e)
                        return
                self._publish(slot, plog)

    def _checkpoint(self, now: int) -> None:
        """Record every partition's flushed offset: recovery after a crash starts there."""
        self.next_checkpoint_ms = now + self.config["log.flush.offset.checkpoint.interval.ms"]
        if self.offline:
            return
        try:
            self.logdir.checkpoint_recovery_points()
        except (OSError, StorageError) as e:
            self._go_offline(e)
            return
        self._checkpoint_hws()

    def _delete(self, request: dict) -> dict:
        """Delete one partition: mark its slot DELETING (the slot's writer is
        the only process that writes a slot in use), forget everything held for
        it, so nothing later indexes a freed (or re-used) slot, remove its dir
        and free the slot. Every acks=-1 append still waiting on it is answered
        now: success if its data was flushed before the delete (and, for a
        replica, is below its high watermark), UNKNOWN_TOPIC_OR_PARTITION if
        not. A flush in flight finishes in the flusher thread and is then
        dropped. A slot that no longer holds the
        partition named (a DELETE_TOPIC sent alongside freed it first) is left
        alone: the partition is gone, which is what was asked. When the admin
        lock stays busy past ``admin.lock.timeout.ms`` nothing changes and the
        delete fails with BROKER_NOT_AVAILABLE (the client may retry)."""
        slot, key = request["slot"], (request["topic"], request["partition"])
        try:
            self.lock.acquire()
        except TimeoutError as e:
            return {"error": int(ErrorCode.BROKER_NOT_AVAILABLE),
                    "message": f"topic admin busy: {e}"}
        try:
            s = self.table.read(slot)
            if s.state == ptable.FREE or s.owner != self.index or (s.name, s.partition) != key:
                return {"error": 0}
            if s.state != ptable.DELETING:
                self.table.write(slot, state=ptable.DELETING)
            self.slots.pop(slot, None)
            self.dirty.discard(slot)
            self.flushing.pop(slot, None)
            self.retention_stuck.discard(slot)
            self.published.pop(slot, None)
            if any(w.slot == slot for w in self.waiters):
                # the slot has no log now: answers them all (a replica's by its
                # book: success only for what its high watermark covers)
                self._answer_waiters()
            self._drop_book(slot)
            error = self._delete_slot(slot, *key)
            self.table.bump_generation()
        finally:
            self.lock.release()
        if error is not None:
            return {"error": int(ErrorCode.STORAGE_ERROR), "message": error}
        return {"error": 0}

    def _alter(self, request: dict) -> dict:
        """One partition of an ALTER_TOPIC: its ``partition.json`` takes the
        new partition count and the topic's whole new config, unless it holds
        a newer change's (the request's ``stamp``, ``PartitionLog.alter``),
        written atomically, then applied to the open log: appends, rolls,
        flushes and retention go by it from now. A slot that no longer holds
        the partition is UNKNOWN_TOPIC_OR_PARTITION (deleted meanwhile), an offline one
        STORAGE_ERROR, a value this partition refuses INVALID_CONFIG."""
        slot, key = request["slot"], (request["topic"], request["partition"])
        s = self.table.read(slot)
        where = f"{key[0]}-{key[1]}"
        if s.state == ptable.FREE or s.owner != self.index or (s.name, s.partition) != key \
                or s.state == ptable.DELETING:
            return {"error": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                    "message": f"{where} was deleted"}
        plog = self.slots.get(slot) or (None if self.offline else self._adopt(slot))
        if self.offline or plog is None or s.state == ptable.OFFLINE:
            return {"error": int(ErrorCode.STORAGE_ERROR),
                    "message": f"{where}: its log dir {self.path} is offline"}
        try:
            config = request.get("config")
            if not isinstance(config, dict):
                raise ConfigError("no config map")
            stamp = request.get("stamp")
            plog.alter(self.defaults, config, request.get("partitions"),
                       stamp if type(stamp) is int and stamp > 0 else 0)
        except ConfigError as e:
            return {"error": int(ErrorCode.INVALID_CONFIG), "message": f"{where}: {e}"}
        except (OSError, StorageError) as e:
            self._go_offline(e)
            return {"error": int(ErrorCode.STORAGE_ERROR), "message": f"{where}: {e}"}
        return {"error": 0}

    def _delete_slot(self, slot: int, topic: str, partition: int, retry: bool = False) -> str | None:
        """Remove a DELETING partition's dir and free its slot; caller holds the admin lock.

        A dir that cannot be removed (any OSError: an immutable dir, a failing
        disk) stops nothing: one line says so, the slot stays DELETING (the
        topic cannot be created again meanwhile), and the delete is retried at
        every retention check and by every DELETE_TOPIC of it. Returns the
        error, or None when the slot was freed.
        """
        try:
            if self.logdir is None:
                raise StorageError(f"log dir {self.path} is offline")
            try:
                self.logdir.delete_partition(topic, partition)
            except HostbrokerError as e:
                if e.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    raise
        except (OSError, HostbrokerError) as e:
            if slot not in self.undeletable:
                print(f"hostbroker: {self.name}: cannot delete partition {topic}-{partition} "
                      f"({e}); retrying every log.retention.check.interval.ms",
                      file=sys.stderr, flush=True)
                self.count(procs.ERRORS)
            self.undeletable[slot] = (topic, partition)
            return str(e)
        if self.undeletable.pop(slot, None) is not None and retry:
            print(f"hostbroker: {self.name}: deleted partition {topic}-{partition} on retry",
                  file=sys.stderr, flush=True)
        self.table.free(slot)
        self.stats.freed(slot)  # a topic created into it starts from zero
        return None
