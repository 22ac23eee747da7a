"""A partition dir's ``partition.json``: what it holds, writing it, and
reading it back as hostile input.

It holds the topic, the partition, the topic's partition count and the
topic config overrides as strings; ``"replicated": true`` for a replica of a
replicated topic (cluster mode, docs/storage.md "Replicas"), absent
otherwise; and ``"placement": "log_dirs"`` besides it for a replica placed on
one of this broker's log dirs (docs/storage.md, "Replicas across log dirs"),
absent for a cluster replica. Two optional counters, absent when 0:
``"stamp"``, the change stamp of the ALTER_TOPIC whose config the file holds
(a change with a stamp not newer is not applied over it), and
``"max_message_bytes_seen"``, the largest ``max.message.bytes`` the
partition ever had, written only while above the current one, which crash
recovery checks entries against (a lowered limit never cuts what an earlier
one accepted). :class:`~hostbroker.log.partition.PartitionLog` writes it
atomically at creation (before any segment), when a topic changes
(ALTER_TOPIC, a replica's new config), and reads it at open; a log dir and the
handlers' topic views read it too. Anything wrong with it is a StorageError
naming the file and the problem (the log dir takes only that partition
offline).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from hostbroker.errors import InvalidTopicError, StorageError
from hostbroker.log.files import describe, read_file
from hostbroker.log.segments import partition_dirname

PARTITION_FILE = "partition.json"
# partition.json holds a few short fields; anything larger is not one.
_MAX_PARTITION_FILE_BYTES = 64 * 1024
PLACEMENT_LOG_DIRS = "log_dirs"  # the one placement partition.json names


def format_partition_file(topic: str, partition: int, num_partitions: int,
                          overrides: Mapping[str, str], replicated: bool,
                          placement: str | None = None, stamp: int = 0,
                          max_message_bytes_seen: int = 0) -> bytes:
    """The bytes of a ``partition.json``; ``placement`` ("log_dirs") only
    for a replicated one."""
    if placement not in (None, PLACEMENT_LOG_DIRS) or (placement and not replicated):
        raise ValueError(f"placement {placement!r}: only a replica is placed, on log_dirs")
    meta = {"topic": topic, "partition": partition, "partitions": num_partitions,
            "config": dict(overrides)}
    if replicated:
        meta["replicated"] = True
    if placement:
        meta["placement"] = placement
    if stamp:
        meta["stamp"] = stamp
    if max_message_bytes_seen:
        meta["max_message_bytes_seen"] = max_message_bytes_seen
    return json.dumps(meta, sort_keys=True).encode()


def read_partition_file(path: str) -> tuple[str, int, int, dict[str, str]]:
    """Return (topic, partition, partition count, config overrides) of a partition dir.

    Raises StorageError as :func:`read_partition_meta` does.
    """
    return read_partition_meta(path)[:4]


def read_partition_meta(path: str) -> tuple[str, int, int, dict[str, str], bool]:
    """Return (topic, partition, partition count, config overrides, replicated)
    of a partition dir.

    Raises StorageError as :func:`read_partition_record` does.
    """
    return read_partition_record(path)[:5]


def read_partition_record(path: str) -> tuple[str, int, int, dict[str, str], bool, str | None]:
    """Return (topic, partition, partition count, config overrides, replicated,
    placement) of a partition dir, as :func:`read_partition_counters` does."""
    return read_partition_counters(path)[:6]


def read_partition_counters(path: str) -> tuple[str, int, int, dict[str, str], bool,
                                                 str | None, int, int]:
    """Return (topic, partition, partition count, config overrides, replicated,
    placement, stamp, max_message_bytes_seen) of a partition dir; placement
    is "log_dirs" or None, the two counters 0 when absent.

    Raises StorageError naming the file and what is wrong with it: unreadable,
    not JSON, not an object with ``topic`` (a valid name), ``partition`` and
    ``partitions`` (integers, 0 <= partition < partitions) and ``config`` (an
    object of strings), a ``replicated`` that is not a boolean, a
    ``placement`` that is not "log_dirs" or on a partition not replicated, a
    counter that is not an integer in 0..2**63-1, or
    naming another partition than the dir's name.
    """
    meta_path = os.path.join(path, PARTITION_FILE)
    try:
        raw = read_file(meta_path, _MAX_PARTITION_FILE_BYTES)
    except OSError as exc:
        raise StorageError(f"cannot read {meta_path}: {describe(exc)}") from exc
    try:
        if len(raw) > _MAX_PARTITION_FILE_BYTES:
            raise ValueError(f"longer than {_MAX_PARTITION_FILE_BYTES} bytes")
        meta = json.loads(raw)
        if not isinstance(meta, dict):
            raise ValueError(f"expected a JSON object, found {type(meta).__name__}")
        missing = {"topic", "partition", "partitions", "config"} - meta.keys()
        if missing:
            raise ValueError(f"no {', '.join(sorted(missing))}")
        topic, partition = meta["topic"], meta["partition"]
        num_partitions, overrides = meta["partitions"], meta["config"]
        if not all(type(n) is int for n in (partition, num_partitions)) \
                or not 0 <= partition < num_partitions:
            raise ValueError(f"partition {partition!r} of {num_partitions!r} is not a "
                             "partition number below the count")
        if not isinstance(overrides, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in overrides.items()):
            raise ValueError("config is not an object of strings")
        replicated = meta.get("replicated", False)
        if type(replicated) is not bool:
            raise ValueError(f"replicated {replicated!r} is not true or false")
        placement = meta.get("placement")
        if placement is not None and (placement != PLACEMENT_LOG_DIRS or not replicated):
            raise ValueError(f"placement {str(placement)[:40]!r} is not \"{PLACEMENT_LOG_DIRS}\" "
                             "of a replicated partition")
        counters = tuple(meta.get(k, 0) for k in ("stamp", "max_message_bytes_seen"))
        if not all(type(n) is int and 0 <= n < 2**63 for n in counters):
            raise ValueError(f"stamp or max_message_bytes_seen {str(counters)[:60]} is not a "
                             "non-negative integer")
        name = partition_dirname(topic, partition)
    except RecursionError:
        raise StorageError(f"{meta_path} is not a valid partition file: nested too deeply") from None
    except (ValueError, InvalidTopicError) as exc:
        raise StorageError(f"{meta_path} is not a valid partition file: {exc}") from None
    if name != os.path.basename(os.path.normpath(path)):
        raise StorageError(f"{meta_path} names partition {topic}-{partition}, not the one its "
                           "directory is named after")
    return (topic, partition, num_partitions, overrides, replicated, placement) + counters
