"""The leader epoch cache of a replicated partition: where each leadership's
messages start, kept with the log in ``leader-epoch-checkpoint``.

Owned by the writer process of the partition's log dir (the only one that
mutates it); the handler reads the file (:func:`load`) to answer
OFFSET_FOR_LEADER_EPOCH and to cap a follower's fetch at the end of an epoch.

Each entry is ``(epoch, start_offset)``: the leader of ``epoch`` appended its
first message at ``start_offset``, and the epoch's messages run up to the
next entry's start (the last one's up to the log end). Epochs strictly
increase from entry to entry and starts never decrease. A follower that
returns asks its leader where its own latest epoch ends
(:meth:`LeaderEpochCache.end_offset_for` on the leader) and truncates to
exactly there, instead of to its high watermark: what both logs hold below
that offset was written by the same leaders at the same offsets, so it is the
same bytes, and nothing acknowledged above it is lost.

The file, in ASCII::

    0                       version
    <count>                 number of entries
    <epoch> <start_offset>  one line per entry, oldest first

It is replaced whole (``files.write_file_atomically``) by every change, so a
crash leaves the old or the new file. It is read as hostile: anything this
module would not have written (another version, a count that does not match,
a malformed line, an epoch that does not increase, a start that decreases,
a file over :data:`MAX_FILE_BYTES`) is a :class:`StorageError` naming the
file, and the partition goes offline rather than answering from a guess.
A missing file is an empty cache (a partition that never had a leader yet).
"""

from __future__ import annotations

import bisect
import os
import re

from hostbroker.errors import StorageError
from hostbroker.log.files import describe, read_file, write_file_atomically

__all__ = [
    "EPOCH_FILE",
    "FILE_VERSION",
    "MAX_ENTRIES",
    "MAX_FILE_BYTES",
    "NO_EPOCH",
    "NO_OFFSET",
    "LeaderEpochCache",
    "format_entries",
    "load",
    "parse_entries",
]

EPOCH_FILE = "leader-epoch-checkpoint"
FILE_VERSION = 0
NO_EPOCH = -1
NO_OFFSET = -1
MAX_EPOCH = 2**31 - 1
MAX_OFFSET = 2**63 - 1
# Leaderships remembered: far more than a retained log sees; past it the
# oldest are forgotten (their messages then count as the next epoch's).
MAX_ENTRIES = 100_000
# Each line: an int32, a space, an int64, a newline.
MAX_FILE_BYTES = 64 + MAX_ENTRIES * 32
_NUMBER = re.compile(r"[0-9]{1,19}")

Entry = tuple[int, int]


def format_entries(entries: list[Entry] | tuple[Entry, ...]) -> bytes:
    """The file content recording ``entries``."""
    lines = [str(FILE_VERSION), str(len(entries))]
    lines += [f"{epoch} {start}" for epoch, start in entries]
    return "".join(line + "\n" for line in lines).encode("ascii")


def _check_order(entries: list[Entry]) -> None:
    for (e0, s0), (e1, s1) in zip(entries, entries[1:]):
        if e1 <= e0:
            raise ValueError(f"epoch {e1} follows epoch {e0}: epochs must increase")
        if s1 < s0:
            raise ValueError(f"epoch {e1} starts at {s1}, before epoch {e0} at {s0}")


def parse_entries(data: bytes) -> list[Entry]:
    """The entries a file holds; ValueError for anything :func:`format_entries`
    would not have written (see the module docstring)."""
    if not data:
        raise ValueError("empty file")
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"longer than {MAX_FILE_BYTES} bytes")
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise ValueError("not ASCII text") from None
    if not text.endswith("\n"):
        raise ValueError("the last line is cut off")
    lines = text[:-1].split("\n")
    if len(lines) < 2:
        raise ValueError("no version and count lines")
    version, count, lines = lines[0], lines[1], lines[2:]
    if version != str(FILE_VERSION):
        raise ValueError(f"unknown version {version[:20]!r}")
    if not _NUMBER.fullmatch(count) or int(count) != len(lines):
        raise ValueError(f"count {count[:20]!r} does not match its {len(lines)} lines")
    if len(lines) > MAX_ENTRIES:
        raise ValueError(f"{len(lines)} entries are over {MAX_ENTRIES}")
    entries = []
    for line in lines:
        fields = line.split(" ")
        if len(fields) != 2 or not all(map(_NUMBER.fullmatch, fields)):
            raise ValueError(f"malformed line {line[:60]!r}")
        epoch, start = int(fields[0]), int(fields[1])
        if epoch > MAX_EPOCH or start > MAX_OFFSET:
            raise ValueError(f"line {line[:60]!r} is out of range")
        entries.append((epoch, start))
    _check_order(entries)
    return entries


def load(directory: str) -> LeaderEpochCache:
    """The cache of the partition dir ``directory`` (see :meth:`LeaderEpochCache.load`)."""
    return LeaderEpochCache.load(directory)


class LeaderEpochCache:
    """The ``(epoch, start_offset)`` entries of one partition and their file.

    Not thread safe; owned by the writer of the partition's log dir. Every
    method that changes the entries writes the file before it returns
    (:class:`StorageError` when that fails; the entries in memory are then
    unchanged). Building one does no I/O: :meth:`load` reads.
    """

    __slots__ = ("path", "_epochs", "_starts")

    def __init__(self, path: str, entries: list[Entry] | tuple[Entry, ...] = ()):
        entries = list(entries)
        _check_order(entries)
        self.path = path
        self._epochs = [epoch for epoch, _ in entries]
        self._starts = [start for _, start in entries]

    @classmethod
    def load(cls, directory: str) -> LeaderEpochCache:
        """The cache kept in ``directory``/leader-epoch-checkpoint; empty when there
        is no such file. StorageError naming the file when it cannot be read or
        is not one this module writes."""
        path = os.path.join(directory, EPOCH_FILE)
        try:
            data = read_file(path, MAX_FILE_BYTES)
        except FileNotFoundError:
            return cls(path)
        except OSError as exc:
            raise StorageError(f"{path}: {describe(exc)}") from exc
        try:
            return cls(path, parse_entries(data))
        except ValueError as exc:
            raise StorageError(f"{path}: {exc}") from None

    # -- reading ------------------------------------------------------------

    @property
    def entries(self) -> tuple[Entry, ...]:
        """``(epoch, start_offset)`` pairs, oldest first."""
        return tuple(zip(self._epochs, self._starts))

    @property
    def latest_epoch(self) -> int:
        """The newest epoch, or -1 when there is none."""
        return self._epochs[-1] if self._epochs else NO_EPOCH

    @property
    def latest_start(self) -> int:
        """Where the newest epoch starts, or -1 when there is none."""
        return self._starts[-1] if self._starts else NO_OFFSET

    def __len__(self) -> int:
        return len(self._epochs)

    def end_offset_for(self, epoch: int, log_end: int) -> tuple[int, int]:
        """``(epoch', end)`` for OFFSET_FOR_LEADER_EPOCH: ``epoch'`` is the largest
        epoch <= ``epoch`` this log knows, ``end`` the start of the first epoch
        after ``epoch'`` (``log_end`` when ``epoch'`` is the newest). ``(-1, -1)``
        when the log knows no epoch <= ``epoch``."""
        if not self._epochs or epoch < self._epochs[0]:
            return NO_EPOCH, NO_OFFSET
        i = bisect.bisect_right(self._epochs, epoch) - 1
        if i == len(self._epochs) - 1:
            return self._epochs[i], log_end
        return self._epochs[i], self._starts[i + 1]

    def epoch_at(self, offset: int, log_end: int = NO_OFFSET) -> tuple[int, int]:
        """``(epoch, end)``: the epoch whose leader wrote ``offset`` and the offset
        where that epoch's messages end (the next epoch's start; ``log_end`` for
        the newest epoch). An offset before the first entry (messages written
        before any leader epoch) is ``(-1, first start)``."""
        i = bisect.bisect_right(self._starts, offset) - 1
        if i < 0:
            return NO_EPOCH, self._starts[0] if self._starts else log_end
        # starts may repeat only in a file written elsewhere; the last of equal starts holds
        if i == len(self._starts) - 1:
            return self._epochs[i], log_end
        return self._epochs[i], self._starts[i + 1]

    # -- changing ------------------------------------------------------------

    def assign(self, epoch: int, start: int) -> bool:
        """Record that ``epoch`` starts at ``start`` (a new leader's log end, or
        the first message of ``epoch`` a follower appends). Nothing changes when
        ``epoch`` is the newest already (False). Entries starting at or after
        ``start`` hold no message and are replaced. ValueError for an epoch below
        the newest or a negative one, or a negative start."""
        if epoch < 0 or start < 0 or epoch > MAX_EPOCH or start > MAX_OFFSET:
            raise ValueError(f"epoch {epoch} at {start} is out of range")
        if self._epochs and epoch < self._epochs[-1]:
            raise ValueError(f"epoch {epoch} is below the newest epoch {self._epochs[-1]}")
        if self._epochs and epoch == self._epochs[-1]:
            return False
        keep = bisect.bisect_left(self._starts, start)
        epochs = self._epochs[:keep] + [epoch]
        starts = self._starts[:keep] + [start]
        if len(epochs) > MAX_ENTRIES:
            del epochs[0], starts[0]
        self._save(epochs, starts)
        return True

    def truncate_from_end(self, end: int) -> bool:
        """Forget the epochs that start at or after ``end`` (the log was cut to
        ``end``); True when something was forgotten."""
        keep = bisect.bisect_left(self._starts, end)
        if keep == len(self._starts):
            return False
        self._save(self._epochs[:keep], self._starts[:keep])
        return True

    def truncate_from_start(self, start: int) -> bool:
        """The log now starts at ``start`` (retention, or a follower's log reset):
        forget the epochs that end at or before it, and move the start of the one
        holding ``start`` up to it. True when something changed."""
        i = bisect.bisect_right(self._starts, start) - 1
        if i < 0 or (i == 0 and self._starts[0] == start):
            return False
        epochs = self._epochs[i:]
        starts = [start] + self._starts[i + 1:]
        self._save(epochs, starts)
        return True

    def clear(self) -> bool:
        """Forget every epoch (the log was emptied). True when there were any."""
        if not self._epochs:
            return False
        self._save([], [])
        return True

    def _save(self, epochs: list[int], starts: list[int]) -> None:
        try:
            write_file_atomically(self.path, format_entries(list(zip(epochs, starts))))
        except OSError as exc:
            raise StorageError(f"{self.path}: {describe(exc)}") from exc
        self._epochs, self._starts = epochs, starts
