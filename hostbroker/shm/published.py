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
    8       4     capacity   bytes a document may take (each half)
    12      4     (zero)
    16      8     state      generation * 2 + the half holding the current document
    24      8     length of the document in half 0
    32      8     length of the document in half 1
    40      8     (zero)
    48      ...   half 0, then half 1 (``capacity`` bytes each)

A writer fills the idle half and its length, then stores the new state (the
next generation, that half) in one aligned word: the current document is
never written over, so a writer killed mid-write leaves it whole and
readable, and the next publish simply writes the idle half again. A reader
copies the current half between two reads of the state and tries again when
they differ (a writer flipped, and may be writing the half it read); after
:data:`_READ_TRIES` it gives up (TornDocumentError: only a writer publishing
without pause, or a region written by something else, does that). A
document longer than ``capacity`` is refused (ValueError) and the current
one stays.
"""

from __future__ import annotations

import struct
import time

from hostbroker.shm.region import SharedRegion, Structure, tag_magic

_HEADER = 48
_CAPACITY_LENGTH = struct.Struct("<II")
_AT_CAPACITY = 8
_STATE = 2  # u64 index: generation * 2 + current half
_LENGTH = 3  # u64 index of half 0's length (half 1's follows)
_READ_TRIES = 1000


class TornDocumentError(RuntimeError):
    """The document kept changing (or its writer died mid-write) while read."""


class PublishedDocument(Structure):
    MAGIC = tag_magic(b"PDOC")
    VERSION = 2

    def __init__(self, region: SharedRegion, opened: bool):
        super().__init__(region, opened)
        self._check_stamp()
        self.capacity, _ = _CAPACITY_LENGTH.unpack_from(region.buf, _AT_CAPACITY)
        if region.size < self.region_size(self.capacity):
            raise ValueError(f"{region.name}: {self.capacity} bytes do not fit {region.size}")
        self._words = self._view(0, _HEADER, "Q")

    @staticmethod
    def region_size(capacity: int) -> int:
        return _HEADER + 2 * capacity

    def _half(self, half: int) -> int:
        return _HEADER + half * self.capacity

    @classmethod
    def create(cls, region_or_name: SharedRegion | str, capacity: int,
               document: bytes = b"") -> PublishedDocument:
        """A region of two halves of ``capacity`` bytes, holding ``document``
        (generation 1)."""
        if capacity < 0 or len(document) > capacity:
            raise ValueError(f"a document of {len(document)} bytes in {capacity}")
        region, opened = cls._open(region_or_name, cls.region_size(capacity))
        try:
            # (only the header: what lies past a document's length is never read,
            # and a region of twice acl.max.bytes is not all touched at start)
            region.buf[:_HEADER] = bytes(_HEADER)
            cls._stamp(region.buf)
            _CAPACITY_LENGTH.pack_into(region.buf, _AT_CAPACITY, capacity, 0)
            region.buf[_HEADER:_HEADER + len(document)] = document
            made = cls(region, opened)
            made._words[_LENGTH] = len(document)
            made._words[_STATE] = 1 << 1  # generation 1, half 0
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
        return self._words[_STATE] >> 1

    def publish(self, document: bytes) -> int:
        """Make ``document`` the current one; its generation. ValueError when it
        does not fit (the current one stays)."""
        if len(document) > self.capacity:
            raise ValueError(f"{len(document)} bytes, more than the {self.capacity} "
                             f"{self.region.name} holds")
        words, buf = self._words, self.region.buf
        state = words[_STATE]
        idle = 1 - (state & 1)
        start = self._half(idle)
        buf[start:start + len(document)] = document
        words[_LENGTH + idle] = len(document)
        generation = (state >> 1) + 1
        words[_STATE] = generation << 1 | idle  # one aligned store: the flip
        return generation

    def read(self) -> tuple[int, bytes]:
        """``(generation, document)``, read whole; TornDocumentError when the
        state never held still while it was copied (module docstring)."""
        words, buf = self._words, self.region.buf
        for attempt in range(_READ_TRIES):
            state = words[_STATE]
            half = state & 1
            length = words[_LENGTH + half]
            if length <= self.capacity:
                start = self._half(half)
                document = bytes(buf[start:start + length])
                if words[_STATE] == state:
                    return state >> 1, document
            if attempt > 10:
                time.sleep(0.0001)
        raise TornDocumentError(f"{self.region.name}: the document did not hold still")
