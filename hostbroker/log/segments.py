"""Naming and arithmetic of segments: file names, partition dirs, fetch ranges.

Pure functions over names and sorted base offsets, no I/O, but for
:func:`list_segment_bases`, which only lists a partition dir. The request
handlers use :func:`fetch_range` and :func:`offsets_before` on the segment list
published by a writer without owning the log, so nothing here may change files.

Because an offset *is* a byte position in the partition's stream
(docs/spec/log-format.md, "Offsets"), a segment with base ``b`` holds offset ``o`` at
file position ``o - b``, and its size is the next segment's base minus ``b``
(the log end offset minus ``b`` for the active one).
"""

from __future__ import annotations

import bisect
import os
import re
from collections.abc import Sequence

from hostbroker.errors import ErrorCode, HostbrokerError, InvalidTopicError, OffsetOutOfRangeError

SEGMENT_SUFFIX = ".kafka"
# The longest file name Linux file systems take. Every name derived from a
# topic is "<topic>_<partition>": 249 characters of topic, "_" and at most 5
# digits (max.partitions.per.topic is at most 100000, so partitions are numbered
# below 100000) make 255. Deleted partition dirs move into the log dir's
# .trash/ under short names of their own, so no derived name is longer.
MAX_FILE_NAME_BYTES = 255
MAX_TOPIC_NAME_LENGTH = 249
MAX_PARTITIONS_PER_TOPIC = 100_000
_SEGMENT_NAME = re.compile(r"([0-9]{20})\.kafka")
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,%d}" % MAX_TOPIC_NAME_LENGTH)
_INT32_MAX = 2**31 - 1
# How partition_dirname writes a partition number: decimal, no leading zero.
_PARTITION_NUMBER = re.compile(r"0|[1-9][0-9]*")

LATEST_TIME = -1
EARLIEST_TIME = -2


def segment_filename(base_offset: int) -> str:
    """Return the file name of the segment starting at ``base_offset``."""
    if base_offset < 0:
        raise ValueError(f"negative base offset {base_offset}")
    return f"{base_offset:020d}{SEGMENT_SUFFIX}"


def parse_segment_filename(name: str) -> int | None:
    """Return the base offset named by a segment file name, or None if it is not one."""
    match = _SEGMENT_NAME.fullmatch(name)
    return int(match.group(1)) if match else None


def list_segment_bases(path: str, start: int, end: int) -> list[int]:
    """Sorted base offsets of the segments of the partition dir ``path`` that
    hold the log ``[start, end)`` as its writer published it, read without
    owning the log (a handler's fetch, a dir-placed follower's copy).

    A listing races the writer: segments deleted since by retention fall
    below ``start`` and are dropped, one rolled past ``end`` is left out, and
    the first base is ``start`` when the oldest one listed is above it (the
    segment holding ``start`` went meanwhile). OSError if the dir cannot be
    listed."""
    bases = []
    for name in os.listdir(path):
        base = parse_segment_filename(name)
        if base is not None and base <= end:
            bases.append(base)
    bases.sort()
    bases = [b for b in bases if b >= start] or [start]
    if bases[0] > start:
        bases.insert(0, start)
    return bases


def validate_topic_name(name: str) -> None:
    """Raise InvalidTopicError unless ``name`` is 1..249 of [A-Za-z0-9._-], not "." or ".."."""
    if not isinstance(name, str) or not _TOPIC_NAME.fullmatch(name) or name in (".", ".."):
        raise InvalidTopicError(f"invalid topic name {name!r}: 1 to 249 characters of "
                                "[A-Za-z0-9._-], not '.' or '..'")


def partition_dirname(topic: str, partition: int) -> str:
    """Return ``"<topic>_<partition>"``, the directory of one partition.

    Raises InvalidTopicError for an invalid topic name or a name longer than
    a file name may be (only with partition numbers of 100000 and above),
    ValueError for a negative partition.
    """
    validate_topic_name(topic)
    if partition < 0:
        raise ValueError(f"negative partition {partition}")
    name = f"{topic}_{partition}"
    if len(name) > MAX_FILE_NAME_BYTES:
        raise InvalidTopicError(f"partition dir name {name[:40]}... is {len(name)} bytes, more "
                                f"than a file name may have ({MAX_FILE_NAME_BYTES})")
    return name


def parse_partition_dirname(name: str) -> tuple[str, int] | None:
    """Return (topic, partition) of a partition directory name, or None if it is not one.

    Only names :func:`partition_dirname` could write are: a valid topic name,
    and a partition number without leading zeros (so no two names give the same
    partition) that fits the wire's int32.
    """
    topic, sep, number = name.rpartition("_")
    if not sep or not _PARTITION_NUMBER.fullmatch(number) or int(number) > _INT32_MAX:
        return None
    try:
        validate_topic_name(topic)
    except InvalidTopicError:
        return None
    return topic, int(number)


def locate(bases: Sequence[int], offset: int) -> int:
    """Return the index of the segment holding ``offset`` in sorted ``bases``.

    An offset on a boundary belongs to the later segment. The caller checks
    that ``offset >= bases[0]``.
    """
    return bisect.bisect_right(bases, offset) - 1


def fetch_range(bases: Sequence[int], log_end_offset: int, offset: int,
                max_bytes: int) -> tuple[int, int, int]:
    """Return (segment index, position in its file, length) for a fetch at ``offset``.

    The range never crosses a segment boundary: length is
    ``min(max_bytes, end of that segment - offset)``, so a fetch near a boundary
    may return less than ``max_bytes`` although more data follows. At
    ``offset == log_end_offset`` the length is 0 (the empty set), with the last
    segment and the position where the next append will land.

    Raises OffsetOutOfRangeError outside [log start, log end] and a
    HostbrokerError with INVALID_FETCH_SIZE for ``max_bytes <= 0``.
    """
    if max_bytes <= 0:
        raise HostbrokerError(f"max_bytes {max_bytes} must be positive", ErrorCode.INVALID_FETCH_SIZE)
    if not bases or not bases[0] <= offset <= log_end_offset:
        start = bases[0] if bases else None
        raise OffsetOutOfRangeError(
            f"offset {offset} is outside the log [{start}, {log_end_offset}]")
    index = locate(bases, offset)
    segment_end = bases[index + 1] if index + 1 < len(bases) else log_end_offset
    return index, offset - bases[index], min(max_bytes, segment_end - offset)


def offsets_before(segments: Sequence[tuple[int, int]], log_end_offset: int, now_ms: int,
                   time: int, max_offsets: int) -> list[int]:
    """Answer an OFFSETS request (docs/spec/protocol.md, "OFFSETS (2)").

    ``segments`` is (base offset, mtime in ms) of every segment, oldest first.
    Together with (log end offset, now) they form the candidate list.
    ``time == -1`` gives ``[log end offset]``, ``time == -2`` gives
    ``[log start offset]``; any other time gives the candidates whose mtime is
    at or before it, newest first. Every answer holds at most ``max_offsets``.
    """
    if time == LATEST_TIME:
        found = [log_end_offset]
    elif time == EARLIEST_TIME:
        found = [segments[0][0] if segments else log_end_offset]
    else:
        candidates: dict[int, int] = {}
        # An empty active segment has the log end as its base: one offset, known
        # since the segment's mtime.
        for offset, mtime in [*segments, (log_end_offset, now_ms)]:
            candidates[offset] = min(mtime, candidates.get(offset, mtime))
        found = sorted((offset for offset, mtime in candidates.items() if mtime <= time), reverse=True)
    return found[:max(max_offsets, 0)]
