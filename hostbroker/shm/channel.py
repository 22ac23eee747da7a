"""Messages of any size over a :class:`~hostbroker.shm.ring.Ring`.

Owns: turning messages (a header plus body parts, up to hundreds of MB) into
ring records and back. A :class:`Sender` is used by the ring's one producer,
a :class:`Receiver` by its one consumer; neither blocks nor wakes anyone
(see ``doorbell.py``).

Every record carries one message or one fragment of one; its payload starts
with a flag byte::

    WHOLE  0  flag, message                  the message fits in one record
    FIRST  1  flag, total u64 (LE), bytes    first fragment; total = message size
    MIDDLE 2  flag, bytes
    LAST   3  flag, bytes                    completes the message

A message whose size plus the flag is at most ``max_record`` always goes
WHOLE, and the receiver hands it out as a zero-copy view. Larger messages are
cut into fragments sized to the space free at the time (but not smaller than
``max_record // 8`` unless it is the rest of the message), so a message much
larger than the ring flows through it while the receiver copies fragments into
one preallocated bytearray.

Half messages are never delivered as whole, whatever died when:

- A receiver that starts mid-message (it replaced a dead one, after
  ``ring.reset_consumer()`` or from the old tail) is not assembling anything,
  so it drops MIDDLE and LAST fragments until the next FIRST or WHOLE.
- A sender that died mid-message leaves a FIRST without its LAST. Its
  replacement starts with a FIRST or WHOLE, and a receiver that gets either
  while assembling drops what it has.
- A LAST must complete exactly ``total`` bytes, or the message is dropped.

:attr:`Receiver.dropped` counts the discarded partial messages and orphan
fragments.
"""

from __future__ import annotations

import struct
from collections import deque

from hostbroker.shm.ring import Ring

WHOLE = 0
FIRST = 1
MIDDLE = 2
LAST = 3

_WHOLE = bytes([WHOLE])
_MIDDLE = bytes([MIDDLE])
_LAST = bytes([LAST])
_FIRST = struct.Struct("<BQ")


class Sender:
    """Queues messages and moves them into a ring as space allows.

    The queue is unbounded on purpose: the caller bounds it (a processor
    stops reading its sockets while :meth:`queued_bytes` is high). Parts are
    referenced, not copied, until :meth:`pump` has written them; the caller
    must not change them before.
    """

    def __init__(self, ring: Ring):
        self._ring = ring
        self._queue: deque[tuple[tuple, int]] = deque()
        self._queued_bytes = 0
        self._max_whole = ring.max_record - 1
        self._min_fragment = ring.max_record // 8
        # Progress through the fragmented message at the head of the queue.
        self._sent = 0
        self._part = 0
        self._part_offset = 0
        # An open claim (claim(..., give_back=f)) and what to call to give it back.
        self._claim: memoryview | None = None
        self._give_back = None

    def send(self, *parts) -> None:
        """Queue one message: the concatenation of ``parts`` (bytes-like).

        Never blocks; nothing reaches the ring before :meth:`pump`.
        """
        size = 0
        for part in parts:
            size += len(part)
        self._queue.append((parts, size))
        self._queued_bytes += size

    def pump(self) -> bool:
        """Write as much of the queue as fits, publish once.

        Returns True when the queue is empty afterwards. Wakes nobody: after
        a pump with something queued, the caller rings the consumer's
        doorbell. When the ring is full it sets the ring's producer-waiting
        flag, so the consumer's next ``done()`` returns True and the consumer
        wakes the caller.
        """
        ring = self._ring
        if self._give_back is not None:
            self._end_open_claim()
        self._put_queued()
        if self._queue:
            # Full: ask the consumer to ring our doorbell when it frees space, then
            # try once more in case it freed some before it could see the flag.
            ring.set_producer_waiting()
            self._put_queued()
        ring.publish()
        return not self._queue

    @property
    def max_whole(self) -> int:
        """The largest message that goes into the ring as one record."""
        return self._max_whole

    def try_send(self, *parts) -> bool:
        """Put one message straight into the ring and publish it, if nothing is
        queued ahead of it and it fits whole now; False, queuing nothing, if not.
        Wakes nobody (as :meth:`pump`)."""
        if self._queue:
            return False
        if self._give_back is not None:
            self._end_open_claim()
        size = 0
        for part in parts:
            size += len(part)
        ring = self._ring
        if size > self._max_whole or not ring.try_put(_WHOLE, *parts):
            return False
        ring.publish()
        return True

    def _put_queued(self) -> None:
        ring = self._ring
        queue = self._queue
        max_whole = self._max_whole
        while queue:
            parts, size = queue[0]
            if size <= max_whole:
                if not ring.try_put(_WHOLE, *parts):
                    return
            elif not self._put_fragments(parts, size):
                return
            queue.popleft()
            self._queued_bytes -= size

    def claim(self, header: bytes, n: int, give_back=None) -> memoryview | None:
        """A message of ``header`` plus ``n`` bytes to be filled in place: the
        view of those ``n`` bytes, straight in the ring, or None (something is
        queued ahead of it, it would be fragmented, or there is no room now).

        Without ``give_back``, fill it, then :meth:`pump` publishes it; or
        :meth:`unclaim` before anything else is sent.

        With ``give_back`` (a callable) the claim stays open while the view is
        filled bit by bit (a frame arriving over many socket reads), and
        nothing waits behind it: a :meth:`pump`, :meth:`try_send` or another
        claim first calls ``give_back()``, which must copy out what it needs of
        the view, and then takes the claim back. :meth:`commit` publishes it.
        """
        if self._give_back is not None:
            self._end_open_claim()
        size = len(header) + n
        if self._queue or size > self._max_whole:
            return None
        record = self._ring.try_claim(1 + size)
        if record is None:
            return None
        record[0] = WHOLE
        record[1 : 1 + len(header)] = header
        if give_back is not None:
            self._claim, self._give_back = record, give_back
        return record[1 + len(header) :]

    @property
    def claim_open(self) -> bool:
        """Whether a claim made with ``give_back`` is open."""
        return self._give_back is not None

    def commit(self, header: bytes = b"") -> None:
        """Publish the open claim, its header first replaced by ``header``
        when given (same length)."""
        if header:
            self._claim[1 : 1 + len(header)] = header
        self._claim = self._give_back = None
        self._ring.publish()

    def unclaim(self) -> None:
        """Give back the message of the last :meth:`claim`, unfilled."""
        self._claim = self._give_back = None
        self._ring.unclaim()

    def _end_open_claim(self) -> None:
        give_back = self._give_back
        self._claim = self._give_back = None
        give_back()
        self._ring.unclaim()

    def own(self) -> None:
        """Copy the parts of every queued message the ring has not taken yet.

        Call it before reusing or releasing buffers that queued parts refer
        to (a socket read buffer, a view into another ring). A message already
        partly written as fragments keeps its parts: copying them is the same
        bytes, so its progress through them stays valid.
        """
        self._queue = deque((tuple(bytes(p) for p in parts), size)
                            for parts, size in self._queue)

    def pending(self) -> int:
        """Messages queued and not completely written to the ring."""
        return len(self._queue)

    def queued_bytes(self) -> int:
        """Bytes of the queued messages (a partly written one counts whole)."""
        return self._queued_bytes

    def _put_fragments(self, parts: tuple, size: int) -> bool:
        """Write fragments of the head message; True once its LAST is written."""
        ring = self._ring
        while self._sent < size:
            first = self._sent == 0
            header = _FIRST.pack(FIRST, size) if first else None
            remaining = size - self._sent
            n = min(remaining, ring.max_put() - (_FIRST.size if first else 1))
            if n < remaining and n < self._min_fragment:
                return False
            if not first:
                header = _LAST if n == remaining else _MIDDLE
            if not ring.try_put(header, *self._take(parts, n)):
                raise AssertionError("ring refused a fragment sized by max_put")
            self._sent += n
        self._sent = self._part = self._part_offset = 0
        return True

    def _take(self, parts: tuple, n: int) -> list[memoryview]:
        """Views of the next ``n`` bytes of the message, across parts."""
        views = []
        while n:
            part = memoryview(parts[self._part])
            start = self._part_offset
            take = min(n, len(part) - start)
            views.append(part[start : start + take])
            n -= take
            if start + take == len(part):
                self._part += 1
                self._part_offset = 0
            else:
                self._part_offset = start + take
        return views


class Receiver:
    """Takes complete messages out of a ring.

    Whole messages come out as views into the ring, valid until :meth:`done`;
    reassembled ones as bytearrays that the caller keeps.
    """

    def __init__(self, ring: Ring):
        self._ring = ring
        self._partial: bytearray | None = None
        self._filled = 0
        self.dropped = 0

    def poll(self) -> list[memoryview | bytearray]:
        """Every message completed by the records published so far."""
        messages: list[memoryview | bytearray] = []
        for record in self._ring.read():
            flag = record[0]
            if flag == WHOLE:
                self._drop_partial()
                messages.append(record[1:])
            elif flag == FIRST:
                self._drop_partial()
                _, total = _FIRST.unpack_from(record)
                data = record[_FIRST.size :]
                self._partial = bytearray(total)
                self._partial[: len(data)] = data
                self._filled = len(data)
            elif flag == MIDDLE or flag == LAST:
                message = self._append(record[1:], flag == LAST)
                if message is not None:
                    messages.append(message)
            else:
                raise ValueError(f"{self._ring.name}: unknown fragment flag {flag}")
        return messages

    def hold(self, view) -> tuple[int, int] | None:
        """Keep ``view`` (part of a whole message :meth:`poll` returned) in the
        ring past :meth:`done`, for another process to read: its ``(data
        offset, position)``, the position for :meth:`unhold`; None if it is
        not in the ring (a reassembled message)."""
        offset = self._ring.data_offset(view)
        if offset is None:
            return None
        return offset, self._ring.hold(offset)

    def unhold(self, pos: int) -> None:
        self._ring.unhold(pos)

    def has_unread(self) -> bool:
        """Records were published that :meth:`poll` has not returned yet."""
        return self._ring.has_unread()

    def done(self) -> bool:
        """Free the ring space of everything polled so far (up to the first
        view still held).

        Returns True if the sender was waiting for space: wake it.
        """
        return self._ring.release()

    def _append(self, data: memoryview, last: bool) -> bytearray | None:
        partial = self._partial
        if partial is None:
            self.dropped += 1  # the rest of a message whose start we missed
            return None
        end = self._filled + len(data)
        if end > len(partial) or (last and end != len(partial)):
            self._drop_partial()
            return None
        partial[self._filled : end] = data
        self._filled = end
        if not last:
            return None
        self._partial = None
        return partial

    def _drop_partial(self) -> None:
        if self._partial is not None:
            self._partial = None
            self.dropped += 1
