"""One document published to every process: bytes with a generation, read lock-free.

Owns: a shared structure that holds one document (the broker's ACLs and
quotas, encoded by their owner) and a generation that moves each time a new
one is published. Written by one process at a time (its writers hold the
broker's admin lock, or are the supervisor before any worker runs, or the
registrar that reads the document from ZooKeeper); read by every process
that must act on it, which keeps what it built from the document until the
generation moves (:meth:`PublishedDocument.generation` is one aligned load,
cheap enough to ask at every request).

Layout::

    offset  size  field
    0       4     magic ``b"PDOC"``
    4       4     version
    8       4     capacity   bytes the document may take
    12      4     length     bytes the current document takes
    16      8     seq        even: stable; odd: being written
    24      8     generation moves (by one) with every document published
    32      ...   the document

A reader copies the length and the document between two reads of ``seq``
and tries again when they differ (a seqlock: the writer makes ``seq`` odd,
writes, makes it even; a writer that died mid-write leaves it odd, and the
next publish ends on the next even value). A document longer than
``capacity`` is refused (ValueError) and the current one stays.
"""

from __future__ import annotations

import struct
import time

from hostbroker.shm.region import SharedRegion, Structure, tag_magic

_HEADER = 32
_CAPACITY_LENGTH = struct.Struct("<II")
_AT_CAPACITY = 8
_SEQ = 2  # u64 index
_GENERATION = 3  # u64 index
_READ_TRIES = 1000


class TornDocumentError(RuntimeError):
    """The document kept changing (or its writer died mid-write) while read."""


class PublishedDocument(Structure):
    MAGIC = tag_magic(b"PDOC")
    VERSION = 1

    def __init__(self, region: SharedRegion, opened: bool):
        super().__init__(region, opened)
        self._check_stamp()
        self.capacity, _ = _CAPACITY_LENGTH.unpack_from(region.buf, _AT_CAPACITY)
        if region.size < _HEADER + self.capacity:
            raise ValueError(f"{region.name}: {self.capacity} bytes do not fit {region.size}")
        self._words = self._view(0, _HEADER, "Q")

    @staticmethod
    def region_size(capacity: int) -> int:
        return _HEADER + capacity

    @classmethod
    def create(cls, region_or_name: SharedRegion | str, capacity: int,
               document: bytes = b"") -> PublishedDocument:
        """A region of ``capacity`` bytes holding ``document``, generation 1."""
        if capacity < 0 or len(document) > capacity:
            raise ValueError(f"a document of {len(document)} bytes in {capacity}")
        region, opened = cls._open(region_or_name, cls.region_size(capacity))
        try:
            # (only the header: what lies past the document's length is never read,
            # and a region of acl.max.bytes is not all touched at start)
            region.buf[:_HEADER] = bytes(_HEADER)
            cls._stamp(region.buf)
            _CAPACITY_LENGTH.pack_into(region.buf, _AT_CAPACITY, capacity, len(document))
            region.buf[_HEADER:_HEADER + len(document)] = document
            made = cls(region, opened)
            made._words[_GENERATION] = 1
            return made
        except BaseException:
            if opened:
                region.close()
                region.unlink()
            raise

    @classmethod
    def attach(cls, region_or_name: SharedRegion | str,
               readonly: bool = False) -> PublishedDocument:
        return cls._attach(region_or_name, readonly)

    @property
    def generation(self) -> int:
        return self._words[_GENERATION]

    def publish(self, document: bytes) -> int:
        """Make ``document`` the current one; its generation. ValueError when it
        does not fit (the current one stays)."""
        if len(document) > self.capacity:
            raise ValueError(f"{len(document)} bytes, more than the {self.capacity} "
                             f"{self.region.name} holds")
        words, buf = self._words, self.region.buf
        seq = words[_SEQ]
        words[_SEQ] = seq + 1 if seq % 2 == 0 else seq + 2  # odd: being written
        buf[_HEADER:_HEADER + len(document)] = document
        struct.pack_into("<I", buf, _AT_CAPACITY + 4, len(document))
        generation = words[_GENERATION] + 1
        words[_GENERATION] = generation
        words[_SEQ] = words[_SEQ] + 1  # even: stable
        return generation

    def read(self) -> tuple[int, bytes]:
        """``(generation, document)``, read whole; TornDocumentError when it never
        held still (a writer that died mid-write: the next publish ends it)."""
        words, buf = self._words, self.region.buf
        for attempt in range(_READ_TRIES):
            before = words[_SEQ]
            if before % 2 == 0:
                generation = words[_GENERATION]
                _, length = _CAPACITY_LENGTH.unpack_from(buf, _AT_CAPACITY)
                if length <= self.capacity:
                    document = bytes(buf[_HEADER:_HEADER + length])
                    if words[_SEQ] == before:
                        return generation, document
            if attempt > 10:
                time.sleep(0.0001)
        raise TornDocumentError(f"{self.region.name}: the document did not hold still")
