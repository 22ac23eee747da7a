"""A partition's config changing while it is open: ALTER_TOPIC's whole
override map with its change stamp, and a replica's keys set by its leader.

Mixed into :class:`~hostbroker.log.partition.PartitionLog` and working on
its state (the overrides, the config, the partition count, the stamp, the
largest ``max.message.bytes`` ever set, the active segment's reservation).
Every change is written to ``partition.json`` in one atomic write before it
applies (``partition_file.py``); from then on appends, rolls, flushes and
retention go by the new config, and recovery checks entries against the
largest limit the partition ever had (docs/storage.md, "Recovery"). Like the
rest of a ``PartitionLog``, only the writer of its log dir calls them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from hostbroker.log.config import LogConfig
from hostbroker.log.files import storage_errors, write_file_atomically
from hostbroker.log.partition_file import PARTITION_FILE, format_partition_file


class LogConfigChanges:
    """Changing an open partition's config (module docstring)."""

    @property
    def stamp(self) -> int:
        """The ALTER_TOPIC change whose config the partition holds (0: none yet)."""
        return self._stamp

    @property
    def max_message_bytes_seen(self) -> int:
        """The largest ``max.message.bytes`` the partition ever had: what
        recovery and a follower's copies check entries against."""
        return self._max_seen

    def _record(self, overrides: Mapping[str, str], count: int, stamp: int, seen: int,
                config: LogConfig) -> None:
        # the largest limit is written only while it is above the current one
        seen = seen if seen > config.max_message_bytes else 0
        with storage_errors(f"cannot update {os.path.join(self._path, PARTITION_FILE)}"):
            write_file_atomically(os.path.join(self._path, PARTITION_FILE), format_partition_file(
                self._topic, self._partition, count, overrides,
                self._replicated, self._placement, stamp, seen))

    def set_overrides(self, changes: Mapping[str, str]) -> bool:
        """Set topic config keys (the current ``min.insync.replicas`` of a
        replica, say), recorded in partition.json before they apply. False
        when nothing changes. ConfigError for a bad key or value (nothing
        written), StorageError when the disk fails."""
        config = self._config.with_overrides(changes)
        overrides = {**self._overrides, **config.overrides_of(changes)}
        if overrides == self._overrides:
            return False
        seen = max(self._max_seen, config.max_message_bytes)
        self._record(overrides, self._num_partitions, self._stamp, seen, config)
        self._overrides, self._config, self._max_seen = overrides, config, seen
        return True

    def alter(self, defaults: LogConfig, overrides: Mapping[str, str] | None,
              num_partitions: int | None = None, stamp: int = 0) -> bool:
        """A topic changed on a running broker (ALTER_TOPIC, or a replica's
        new config): ``overrides`` is the topic's whole new override map (None:
        the config stays), ``num_partitions`` its count (never fewer than
        recorded: a count below, from a change overtaken by another, keeps the
        larger). With a ``stamp``, the map applies only when the stamp is newer
        than the one the partition holds, so changes that reach partitions in
        different orders leave them all with the newest. Everything goes into
        partition.json in one atomic write before it applies; from then on
        appends, rolls (``segment.bytes``: a larger active segment rolls at
        its next append), flushes and retention go by the new config, and
        ``max_message_bytes_seen`` keeps the largest limit ever set. False
        when nothing changes. ConfigError for a bad key or value (nothing
        written), StorageError when the disk fails."""
        config, new_stamp = self._config, self._stamp
        new = self._overrides
        if overrides is not None and (not stamp or stamp > self._stamp):
            config = defaults.with_overrides(overrides)
            new = config.overrides_of(overrides)  # each value as the config reads it
            new_stamp = max(stamp, self._stamp)
        count = max(self._num_partitions, num_partitions or 0)
        seen = max(self._max_seen, config.max_message_bytes)
        if (new, count, new_stamp, seen) == (self._overrides, self._num_partitions,
                                             self._stamp, self._max_seen):
            return False
        self._record(new, count, new_stamp, seen, config)
        changed = new != self._overrides or count != self._num_partitions
        self._overrides, self._config, self._num_partitions = new, config, count
        self._stamp, self._max_seen = new_stamp, seen
        self._reservation.segment_bytes = config.segment_bytes
        return changed
