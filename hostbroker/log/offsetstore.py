"""Consumer group offsets committed to the broker (OFFSET_COMMIT / OFFSET_FETCH).

Owned by the writer process of the first log dir; not thread safe. The store
is one append-only file, ``__consumer_offsets.log``, of records::

    length:int32  crc:uint32  payload (JSON: [[group, topic, partition, offset, metadata], ...])

big-endian, CRC-32 of the payload, one record per commit request. Each commit
is fdatasynced before it is acknowledged, so an answered commit survives a
crash of the host. Loading replays the records (the last value of a key wins)
and truncates at the first invalid record, as log recovery does. When the file
holds far more records than live keys it is rewritten (write a new file,
fsync, rename over, fsync the directory).
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Iterable

FILENAME = "__consumer_offsets.log"
_HEAD = struct.Struct(">iI")
_MAX_RECORD = 64 * 1024 * 1024

Key = tuple[str, str, int]


class OffsetStore:
    def __init__(self, path: str, fd: int, offsets: dict[Key, tuple[int, str]], records: int):
        self.path = path
        self._fd = fd
        self._offsets = offsets
        self._records = records

    @classmethod
    def open(cls, log_dir: str) -> "OffsetStore":
        path = os.path.join(log_dir, FILENAME)
        offsets: dict[Key, tuple[int, str]] = {}
        records = 0
        valid_end = 0
        data = b""
        if os.path.exists(path):
            with open(path, "rb") as f:
                data = f.read()
        pos = 0
        while pos + _HEAD.size <= len(data):
            length, crc = _HEAD.unpack_from(data, pos)
            end = pos + _HEAD.size + length
            if length < 0 or length > _MAX_RECORD or end > len(data):
                break
            payload = data[pos + _HEAD.size:end]
            if zlib.crc32(payload) != crc:
                break
            try:
                entries = json.loads(payload)
                for group, topic, partition, offset, metadata in entries:
                    offsets[(group, topic, int(partition))] = (int(offset), metadata)
            except (ValueError, TypeError):
                break
            records += 1
            pos = valid_end = end
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        if valid_end < len(data):
            os.ftruncate(fd, valid_end)
            os.fsync(fd)
        return cls(path, fd, offsets, records)

    def commit(self, entries: Iterable[tuple[str, str, int, int, str]]) -> None:
        """Durably record offsets; returns once they are on disk."""
        entries = [list(e) for e in entries]
        if not entries:
            return
        payload = json.dumps(entries, separators=(",", ":")).encode()
        record = _HEAD.pack(len(payload), zlib.crc32(payload)) + payload
        written = 0
        while written < len(record):
            written += os.write(self._fd, record[written:])
        os.fdatasync(self._fd)
        for group, topic, partition, offset, metadata in entries:
            self._offsets[(group, topic, int(partition))] = (int(offset), metadata)
        self._records += 1
        if self._records > 2 * len(self._offsets) + 10000:
            self._rewrite()

    def fetch(self, group: str, topic: str, partition: int) -> tuple[int, str]:
        """(offset, metadata); (-1, "") when never committed."""
        return self._offsets.get((group, topic, partition), (-1, ""))

    def _rewrite(self) -> None:
        tmp = self.path + ".tmp"
        entries = [[g, t, p, o, m] for (g, t, p), (o, m) in self._offsets.items()]
        payload = json.dumps(entries, separators=(",", ":")).encode()
        with open(tmp, "wb") as f:
            f.write(_HEAD.pack(len(payload), zlib.crc32(payload)) + payload)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, self.path)
        dirfd = os.open(os.path.dirname(self.path), os.O_RDONLY)
        try:
            os.fsync(dirfd)
        finally:
            os.close(dirfd)
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self._records = 1

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
