"""The group coordinator's state file: ``__groups.log`` in the first log dir.

Owned by the process that hosts the coordinator; not thread safe. It keeps
the groups for a process that *replaces* that one inside a running broker
(docs/spec/groups.md, "The state file"); a broker start discards it.

The file is a journal of records::

    length:int32  crc:uint32  payload

big-endian, CRC-32 of the payload, which is the JSON of one group as
:func:`hostbroker.coordinator.records.group_record` gives it, or
``{"type": "gone", "group": name}`` for a group forgotten. After each pass
of its loop the host appends one record per group that changed
(:meth:`GroupStore.save`), so a change costs what its group holds, never
what the other groups hold; heartbeats change nothing kept. When the file
is over :data:`COMPACT_MIN_BYTES` and :data:`COMPACT_RATIO` times its live
records, it is rewritten with one record per group (:meth:`GroupStore.rewrite`):
into ``__groups.log.compact``, renamed over the journal. Nothing is synced:
the page cache outlives a process, and a host that crashes starts the
broker again, which discards the file anyway.

Loading (:meth:`GroupStore.take_over`) trusts nothing in the file: it opens
it without following a symbolic link and without waiting on a FIFO, reads
only a regular file, one record at a time, each at most
:func:`record_max_bytes` (what the biggest group the limits allow takes,
so whatever this module wrote is read back), checks each record's CRC, its
JSON (nesting included) and every field against the limits as a JOIN_GROUP
would be checked, and stops at the first record that fails: the groups
before it are kept, the rest is lost, and one line says so. Then the file is
rewritten with what was kept, so the next process reads a clean one.

Files are opened as every state file of a log dir is
(:mod:`hostbroker.log.files`): never through a link, ``O_CLOEXEC``; whatever
is at the temporary path is removed first and the file created with
``O_EXCL``, mode 0o666 less the process umask; the rename over the
journal replaces a link there, never what it points to. A directory at the
journal's path makes saving fail (it is left as it is): one line, and the
broker goes on without a copy of the groups (a replacement process starts
with none).
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Callable, Iterable

from hostbroker.coordinator.model import Group, Limits
from hostbroker.coordinator.records import RecordError, group_of_record
from hostbroker.coordinator.state import Coordinator
from hostbroker.log import files

FILENAME = "__groups.log"
LEGACY_FILENAME = "__groups.json"  # the whole-state file of earlier versions
COMPACT_SUFFIX = ".compact"
COMPACT_MIN_BYTES = 1 << 20
COMPACT_RATIO = 4
_HEAD = struct.Struct(">iI")
_READ_CHUNK = 1 << 20


def record_max_bytes(limits: Limits) -> int:
    """The most bytes one group's record takes within ``limits``: every id,
    client id and topic name at its longest with every byte JSON-escaped
    (6 bytes), each member's id four times (member, generation, assignment),
    each topic three times (subscription, counts, assignment), and every
    partition at most once."""
    return 8192 * limits.max_members + 5120 * limits.max_streams \
        + 12 * limits.max_partitions + 4096


def _encode(record: dict) -> bytes:
    payload = json.dumps(record, separators=(",", ":")).encode()
    return _HEAD.pack(len(payload), zlib.crc32(payload)) + payload


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class GroupStore:
    """The state file of one coordinator (see the module docstring).

    ``log`` takes the one line each problem is worth (the host prints it
    with its name); a failing save is said once until a save succeeds
    again."""

    def __init__(self, log_dir: str, limits: Limits, log: Callable[[str], None]):
        self.path = os.path.join(log_dir, FILENAME)
        self.log_dir = log_dir
        self.limits = limits
        self.log = log
        self.record_max = record_max_bytes(limits)
        self.size = 0  # bytes in the journal
        self.live: dict[str, int] = {}  # group -> bytes of its last record
        self.live_bytes = 0
        self.bytes_written = 0  # every byte this store wrote, compactions included
        self._fd: int | None = None
        self._failed = False
        self._retry_in = 0  # saves to skip before a failed store tries a rewrite again
        self._retry_every = 1

    # -- start and take-over ----------------------------------------------------
    @classmethod
    def start(cls, log_dir: str, limits: Limits, log: Callable[[str], None]) -> GroupStore:
        """The store of a broker that starts: whatever state file is there is
        discarded (members of the last run join again) and an empty one made."""
        store = cls(log_dir, limits, log)
        try:
            os.unlink(os.path.join(log_dir, LEGACY_FILENAME))
        except OSError:
            pass  # not there, or not a file of ours to remove
        store.rewrite(Coordinator(limits))
        return store

    @classmethod
    def take_over(cls, log_dir: str, coordinator: Coordinator, now: float,
                  log: Callable[[str], None]) -> GroupStore:
        """The store of a process that replaces the coordinator's host: the
        groups in the file are added to ``coordinator`` (sessions restarting
        at ``now``), then the file is rewritten with them."""
        store = cls(log_dir, coordinator.limits, log)
        problem = store._load(coordinator, now)
        if problem:
            log(f"group state {store.path}: {problem}; {len(coordinator.groups)} groups "
                "kept, members of the others join again")
            store._failed = True  # that line said it: a rewrite that fails says no more
        store.rewrite(coordinator)
        return store

    def _load(self, coordinator: Coordinator, now: float) -> str | None:
        try:
            fd = files.open_file(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        except OSError as e:
            return f"cannot be opened: {files.describe(e)}"
        groups: dict[str, Group] = {}
        try:
            with os.fdopen(fd, "rb", buffering=_READ_CHUNK, closefd=True) as f:
                problem = self._read(f, groups, now)
        except OSError as e:
            problem = f"cannot be read ({e.strerror})"
        for g in groups.values():
            coordinator.install_group(g)
        return problem

    def _read(self, f, groups: dict[str, Group], now: float) -> str | None:
        """Records of ``f`` into ``groups`` up to the first that fails; what failed.
        A forgotten group leaves no entry, so ``groups`` holds at most
        ``group.max.groups`` whatever the file holds."""
        index = pos = 0
        while True:
            head = f.read(_HEAD.size)
            if not head:
                return None
            where = f"record {index} at byte {pos}"
            if len(head) < _HEAD.size:
                return f"{where} is cut short"
            length, crc = _HEAD.unpack(head)
            if not 2 <= length <= self.record_max:
                return f"{where} has length {length}, not 2 to {self.record_max}"
            payload = f.read(length)
            if len(payload) < length:
                return f"{where} is cut short"
            if zlib.crc32(payload) != crc:
                return f"{where} fails its CRC"
            try:
                record = json.loads(payload)
            except (ValueError, RecursionError) as e:
                return f"{where} is not JSON ({str(e)[:80] or type(e).__name__})"
            try:
                name, group = self._group(record, now)
            except RecordError as e:
                return f"{where}: {str(e)[:200]}"
            if group is None:
                groups.pop(name, None)
            elif name in groups or len(groups) < self.limits.max_groups:
                groups[name] = group
            else:
                return f"{where} is past group.max.groups ({self.limits.max_groups})"
            pos += _HEAD.size + length
            index += 1

    def _group(self, record, now: float) -> tuple[str, Group | None]:
        if isinstance(record, dict) and record.get("type") == "gone" and record.keys() == {
                "type", "group"}:
            name = record["group"]
            if not isinstance(name, str):
                raise RecordError("a forgotten group's name is not a string")
            return name, None
        g = group_of_record(record, self.limits, now)
        return g.name, g

    # -- saving ------------------------------------------------------------------
    def save(self, coordinator: Coordinator, names: Iterable[str]) -> None:
        """Append the records of groups ``names`` (as :meth:`Coordinator.changed`
        named them: each as it is now, or forgotten); compact when due."""
        names = sorted(names)
        if not names:
            return
        if self._fd is None:
            if self._retry_in > 0:
                self._retry_in -= 1
                return
            self.rewrite(coordinator)
            return
        chunks = []
        for name in names:
            record = coordinator.group_record(name)
            if record is None and name not in self.live:
                continue  # made and forgotten since the last save: nothing to undo
            data = _encode(record if record is not None else {"type": "gone", "group": name})
            if len(data) - _HEAD.size > self.record_max:  # never, within the limits
                self._fail(f"group {name[:64]!r} does not fit a record")
                data = _encode({"type": "gone", "group": name})
                record = None
            self.live_bytes -= self.live.pop(name, 0)
            if record is not None:
                self.live[name] = len(data)
                self.live_bytes += len(data)
            chunks.append(data)
        if not chunks:
            return
        data = b"".join(chunks)
        try:
            _write_all(self._fd, data)
        except OSError as e:
            self._fail(f"cannot be written ({e.strerror})")
            self._close()
            return
        self.size += len(data)
        self.bytes_written += len(data)
        if self.size > COMPACT_MIN_BYTES and self.size > COMPACT_RATIO * self.live_bytes:
            self.rewrite(coordinator)

    def rewrite(self, coordinator: Coordinator) -> None:
        """Write the journal anew with one record per group of ``coordinator``."""
        self._close()
        tmp = self.path + COMPACT_SUFFIX
        fd = -1
        try:
            fd = files.create_exclusive(tmp)
            live, chunks, size = {}, [], 0
            for name in coordinator.groups:
                data = _encode(coordinator.group_record(name))
                if len(data) - _HEAD.size > self.record_max:
                    continue  # never, within the limits
                live[name] = len(data)
                chunks.append(data)
                size += len(data)
                if len(chunks) >= 256:
                    _write_all(fd, b"".join(chunks))
                    chunks = []
            _write_all(fd, b"".join(chunks))
            os.rename(tmp, self.path)
        except OSError as e:
            if fd >= 0:
                os.close(fd)
            self._fail(f"cannot be written ({e.strerror})")
            self._retry_in = self._retry_every
            self._retry_every = min(2 * self._retry_every, 1024)
            return
        self._fd = fd
        self.live, self.live_bytes, self.size = live, sum(live.values()), size
        self.bytes_written += size
        self._failed, self._retry_every = False, 1

    def _fail(self, problem: str) -> None:
        if not self._failed:
            self.log(f"group state {self.path} {problem}; a replacement of this process "
                     "will not have the groups")
        self._failed = True

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        self._close()
