"""Recovery of one partition's segments at start-up: scan, cut, report.

Owned by the writer of the log dir, called from :meth:`PartitionLog.open`
before the log is handed out. Two cases:

- **After a crash** (no clean-shutdown marker), :func:`recover` scans every
  segment from the one holding the partition's *recovery point* (the offset
  the log dir's checkpoint recorded as flushed) through the end, and cuts the
  log at the first invalid entry: that file is truncated there and every
  later segment removed. What it scanned and kept is fdatasync'ed.
- **After a clean shutdown**, :func:`verify_tail` checks only the tail of the
  last segment, from the log end the clean shutdown recorded in the
  checkpoint. The marker says the broker stopped cleanly, not that nothing
  touched the files since: a segment truncated mid-entry, or with bytes
  appended, would otherwise leave the log end off an entry boundary, and new
  appends would follow a partial entry that no reader can get past. A last
  segment exactly as long as recorded is not read at all; one whose recorded
  end is unknown (no checkpoint line) or past its end is scanned from its
  first byte; one that grew is scanned from the recorded end. The partial or
  invalid tail is cut with one log line.

An entry is invalid when it runs past the end of the file, fails its CRC or
breaks any rule of docs/spec/log-format.md (``scan_valid_prefix``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import astuple, dataclass

from hostbroker.log.files import fsync_dir, open_file, sync_file
from hostbroker.log.message import LENGTH_SIZE, scan_valid_prefix
from hostbroker.log.segments import locate, segment_filename

log = logging.getLogger(__name__)

# Recovery reads segments in chunks this large (or one entry's worth when the
# max message size is larger), so a 1 GiB segment never sits in memory.
RECOVERY_CHUNK_BYTES = 4 * 1024 * 1024


def valid_segment_length(path: str, max_message_bytes: int, start: int = 0) -> int:
    """Return the position where whole valid entries end in a segment file, reading from ``start``.

    ``start`` must be an entry boundary (0, or a recorded log end). Reads in
    chunks, carrying an entry cut by a chunk boundary over to the next read. A
    leftover that already holds a whole entry's worth of bytes without
    validating is invalid, so the scan stops there.
    """
    chunk = max(RECOVERY_CHUNK_BYTES, max_message_bytes + LENGTH_SIZE)
    valid = start
    carry = b""
    with os.fdopen(open_file(path, os.O_RDONLY), "rb", buffering=0) as segment:
        segment.seek(start)
        while True:
            data = segment.read(chunk)
            if not data:
                return valid
            buf = carry + data if carry else data
            length, _ = scan_valid_prefix(buf, max_message_bytes)
            valid += length
            carry = buf[length:]
            if len(carry) >= max_message_bytes + LENGTH_SIZE:
                return valid


@dataclass(frozen=True)
class RecoveryStats:
    """What a recovery read and what it trusted unread, summed over partitions.

    ``segments_skipped`` / ``bytes_skipped`` are the segments below a recovery
    point; ``full_scans`` counts partitions scanned from their first segment.
    """

    partitions: int = 0
    full_scans: int = 0
    segments_scanned: int = 0
    bytes_scanned: int = 0
    segments_skipped: int = 0
    bytes_skipped: int = 0

    def __add__(self, other: RecoveryStats) -> RecoveryStats:
        return RecoveryStats(*(a + b for a, b in zip(astuple(self), astuple(other))))

    def __str__(self) -> str:
        return f"{_count(self.partitions, 'partition')} recovered {self._detail()}"

    def line(self, path: str) -> str:
        """The one line a writer prints after recovering the log dir ``path``."""
        return (f"recovered {_count(self.partitions, 'partition')} of log dir {path} after an "
                f"unclean shutdown {self._detail()}")

    def _detail(self) -> str:
        return (f"({self.full_scans} from their first segment): scanned "
                f"{_count(self.segments_scanned, 'segment')} "
                f"({_count(self.bytes_scanned, 'byte')}), trusted "
                f"{_count(self.segments_skipped, 'segment')} "
                f"({_count(self.bytes_skipped, 'byte')}) below recovery points")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def first_to_scan(path: str, bases: list[int], sizes: list[int], recovery_point: int) -> int:
    """Index of the segment a recovery starts at: the one ``recovery_point`` falls in."""
    end_on_disk = bases[-1] + sizes[-1]
    if recovery_point > end_on_disk:
        log.warning("%s: recovery point %d is past the log end %d on disk; recovering "
                    "every segment", path, recovery_point, end_on_disk)
        return 0
    # A point below the first segment (retention deleted its own) trusts nothing.
    return max(locate(bases, recovery_point), 0)


def _cut(path: str, bases: list[int], index: int, valid: int) -> None:
    """Truncate segment ``index`` to ``valid`` bytes and remove every later one, durably."""
    segment = os.path.join(path, segment_filename(bases[index]))
    fd = open_file(segment, os.O_WRONLY)
    try:
        os.ftruncate(fd, valid)
        os.fsync(fd)
    finally:
        os.close(fd)
    for later in bases[index + 1:]:
        os.unlink(os.path.join(path, segment_filename(later)))
    fsync_dir(path)


def recover(path: str, bases: list[int], sizes: list[int], max_message_bytes: int,
            first: int) -> tuple[list[int], list[int], RecoveryStats]:
    """Scan ``bases[first:]`` and cut at the first invalid entry; return what is left."""
    kept_bases, kept_sizes = bases, sizes
    scanned = 0
    for index in range(first, len(bases)):
        base = bases[index]
        segment = os.path.join(path, segment_filename(base))
        valid = valid_segment_length(segment, max_message_bytes)
        scanned += 1
        is_last = index == len(bases) - 1
        if valid == sizes[index] and (is_last or base + valid == bases[index + 1]):
            # Its pages may still be only in the page cache of a process that died.
            sync_file(segment)
            continue
        log.warning("%s: valid data ends at offset %d; truncating %s and removing %s",
                    path, base + valid, _count(sizes[index] - valid, "byte"),
                    _count(len(bases) - index - 1, "later segment"))
        _cut(path, bases, index, valid)
        kept_bases, kept_sizes = bases[:index + 1], sizes[:index] + [valid]
        break
    stats = RecoveryStats(partitions=1, full_scans=int(first == 0), segments_scanned=scanned,
                          bytes_scanned=sum(sizes[first:first + scanned]),
                          segments_skipped=first, bytes_skipped=sum(sizes[:first]))
    return kept_bases, kept_sizes, stats


def verify_tail(path: str, bases: list[int], sizes: list[int], max_message_bytes: int,
                clean_end: int | None) -> tuple[list[int], list[int]]:
    """After a clean shutdown, cut a partial or invalid tail of the last segment.

    ``clean_end`` is the log end the clean shutdown recorded (None: unknown).
    Returns the segments' bases and sizes afterwards.
    """
    base, size = bases[-1], sizes[-1]
    if clean_end == base + size:
        return bases, sizes
    start = clean_end - base if clean_end is not None and base <= clean_end < base + size else 0
    segment = os.path.join(path, segment_filename(base))
    valid = valid_segment_length(segment, max_message_bytes, start)
    if valid == size:
        return bases, sizes
    log.warning("%s: %s ends with %s that %s not whole valid entries (after a clean "
                "shutdown that recorded the log end at %s); truncating the log to offset %d",
                path, segment_filename(base), _count(size - valid, "byte"),
                "is" if size - valid == 1 else "are",
                "an unknown offset" if clean_end is None else clean_end, base + valid)
    _cut(path, bases, len(bases) - 1, valid)
    return bases, sizes[:-1] + [valid]
