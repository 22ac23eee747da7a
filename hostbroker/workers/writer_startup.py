"""How a writer takes its log dir's partitions into the partition table at
start (part of ``hb-writer-N``).

Mixed into :class:`~hostbroker.workers.writer.WriterWorker`. Owns the
registration: every partition of the log dir gets its slot, ONLINE when it
opened, OFFLINE when it is damaged (or the whole log dir is unusable), the
slots a predecessor left are taken back (bytes it never published cut),
and deletions a previous writer could not finish are finished. Replicas get
their books here (``writer_replicas._open_book``; a replica placed on log
dirs always opens STOPPED).
"""

from __future__ import annotations

import os
import sys

from hostbroker.errors import HostbrokerError, StorageError
from hostbroker.log.partition_file import PLACEMENT_LOG_DIRS, read_partition_record
from hostbroker.log.segments import parse_partition_dirname, partition_dirname
from hostbroker.shm import partitions as ptable


class Startup:
    """Mixin of :class:`WriterWorker`: the start-up registration."""

    def _register_partitions(self) -> None:
        """Give every partition of our log dir its table slot: ONLINE when it
        opened, OFFLINE when it is damaged (or the whole log dir is unusable),
        and finish deletions that a previous writer could not."""
        with self.lock:
            mine = {}
            for i, s in self.table.scan():
                if s.owner == self.index:
                    self.table.repair(i)
                    s = self.table.read(i)
                    mine[(s.name, s.partition)] = (i, s)
            self.table.set_log_dir_offline(self.index, self.logdir is None)
            if self.logdir is None:
                for key in mine.keys() | self._names_on_disk():
                    i, s = mine.get(key, (None, None))
                    if s is not None and s.state == ptable.DELETING:
                        self.undeletable[i] = key
                    else:
                        self._register_offline(i, *key)
                self.table.bump_generation()
                return
            for (topic, partition), plog in list(self.logdir.partitions.items()):
                i, s = mine.pop((topic, partition), (None, None))
                if s is not None and s.state == ptable.DELETING:
                    self._delete_slot(i, topic, partition)
                    continue
                if i is None:
                    i = self.table.find_free()
                    if i is None:
                        raise StorageError(f"partition table full ({self.table.slot_count} slots): "
                                           "raise max.partitions")
                elif plog.log_start_offset <= s.end_offset < plog.log_end_offset:
                    # written by a predecessor that died before publishing: never acknowledged
                    try:
                        plog.truncate_to(s.end_offset)
                    except StorageError as e:
                        print(f"hostbroker: {self.name}: partition {topic}-{partition} is "
                              f"offline: {e}", file=sys.stderr, flush=True)
                        plog.close(flush=False)
                        del self.logdir.partitions[(topic, partition)]
                        self.logdir.offline[(topic, partition)] = str(e)
                        self._register_offline(i, topic, partition)
                        continue
                replication = {}
                if plog.replicated:
                    try:
                        replication = self._open_book(i, plog, s)
                    except StorageError as e:
                        print(f"hostbroker: {self.name}: partition {topic}-{partition} is "
                              f"offline: {e}", file=sys.stderr, flush=True)
                        plog.close(flush=False)
                        del self.logdir.partitions[(topic, partition)]
                        self.logdir.offline[(topic, partition)] = str(e)
                        self._register_offline(i, topic, partition)
                        continue
                self.slots[i] = plog
                self._publish(i, plog, state=ptable.ONLINE, name=topic, partition=partition,
                              owner=self.index, **replication)
            for (topic, partition) in list(self.logdir.offline):
                i, s = mine.pop((topic, partition), (None, None))
                if s is not None and s.state == ptable.DELETING:
                    self._delete_slot(i, topic, partition)
                else:
                    self._register_offline(i, topic, partition)
            for (topic, partition), (i, s) in mine.items():
                # slots of ours with no log opened yet: created by a handler while we were down
                if s.state == ptable.DELETING:
                    self._delete_slot(i, topic, partition)
                elif self._adopt(i) is None:
                    self.table.free(i)
                    self.stats.freed(i)
            self.table.bump_generation()

    def _register_offline(self, slot: int | None, topic: str, partition: int) -> None:
        """Show a partition we cannot serve as OFFLINE (it answers STORAGE_ERROR).
        Its slot says where it is placed: a slot it held keeps its own
        placement; a new one takes it from the partition's ``partition.json``
        when that can still be read (else placed as a plain partition), so
        a replica placed on log dirs shows as that dir's offline replica."""
        placement = None
        if slot is None:
            slot = self.table.find_free()
            if slot is None:
                print(f"hostbroker: {self.name}: no partition table slot for the offline "
                      f"partition {topic}-{partition}: raise max.partitions",
                      file=sys.stderr, flush=True)
                return
            placement = self._placement_on_disk(topic, partition)
        fields = {} if placement is None else {"placement": placement}
        self.table.write(slot, state=ptable.OFFLINE, name=topic, partition=partition,
                         owner=self.index, start_offset=0, end_offset=0, flushed_offset=0,
                         **fields)

    def _placement_on_disk(self, topic: str, partition: int) -> int:
        """The table placement ``partition.json`` names (PLACEMENT_BROKERS
        when it cannot be read)."""
        try:
            record = read_partition_record(os.path.join(self.path,
                                                        partition_dirname(topic, partition)))
        except (OSError, ValueError, HostbrokerError):
            return ptable.PLACEMENT_BROKERS
        return (ptable.PLACEMENT_LOG_DIRS if record[5] == PLACEMENT_LOG_DIRS
                else ptable.PLACEMENT_BROKERS)

    def _names_on_disk(self) -> set[tuple[str, int]]:
        """The partitions an unusable log dir seems to hold, by their dir names."""
        try:
            names = os.listdir(self.path)
        except OSError:
            return set()
        return {key for key in map(parse_partition_dirname, names) if key is not None}
