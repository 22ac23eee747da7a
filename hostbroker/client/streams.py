"""The high-level consumer's streams and the fetcher threads that feed them.

A :class:`KafkaStream` is an iterator of :class:`MessageAndMetadata` over
the chunks (non-empty :class:`FetchedSet`\\ s) on its queue. A
:class:`Fetcher` is one thread and one connection fetching its partitions
into their streams' queues. The connector that owns them (``ConsumerConnector``,
above this module) deals the partitions out and owns the offsets; the streams
and fetchers reach it only through :class:`StreamsOwner`, the few members
they use, so this module imports nothing of the connector or of its group.

Every partition is read, fairly. A round's FETCH asks for every partition
of the fetcher whose stream has room (at least one free chunk) and is not
paused, up to :data:`MAX_FETCH_PARTITIONS`, so an idle partition never keeps
a busy one out of the request and a busy one never starves another: each
answer puts at most one chunk per partition on a queue. After each round
the partitions it asked for move to the back of the fetcher's order (those
that brought data last), so the ones left out (past the cap, or given an
empty set because the broker's ``fetch.max.bytes`` ran out) come first in
the next request: Kafka's rotation. A queue therefore holds at most ``queued.max.message.chunks - 1`` chunks
plus one per partition its fetcher reads for it (a stream of 40 partitions
and one fetcher: at most ``queued.max.message.chunks + 39`` chunks, each at
most ``fetch.size`` bytes, or up to ``fetch.message.max.bytes`` for a larger
entry): the bound Kafka's consumer has too, which holds one whole answer
while it waits for room.

Each chunk travels with the key the connector names its partition by
(``(topic, partition)``, or in cluster mode a ``PartitionKey`` that also
names the broker); in cluster mode a stream hands out only chunks of
partitions it still owns, so a rebalance needs no wait for fetches in
flight (:meth:`Fetcher.remove` takes effect at the next round).

A fetcher that loses its broker retries with exponential back-off, from
``retry.backoff.ms`` doubling up to ``retry.backoff.max.ms``, one log line
per attempt; the first answer resets it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Collection, Iterator
from itertools import islice, repeat
from typing import Any, NamedTuple, Protocol

from hostbroker.client.connection import ConnectionClosedError
from hostbroker.client.errors import (BrokerError, ConsumerTimeoutError, InvalidEntryError,
                                      OffsetOutOfRangeError)
from hostbroker.client.fetched import FetchedSet
from hostbroker.client.throttle_stats import AnswerShapeError, VersionRefusedError
from hostbroker.errors import ErrorCode, HostbrokerError, ProtocolError
from hostbroker.log.message import Message
from hostbroker.protocol import api

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class StreamsOwner(Protocol):
    """What the streams and fetchers use of the connector that owns them.

    ``_owned`` maps a partition's key to its stream (in a group, only for the
    key object of the partition's current assignment), ``_done`` the position a
    stream moved past per partition; ``cluster`` is the group's side, or None
    when the connector deals every partition itself. The fetcher that does the
    housekeeping calls ``_housekeeping`` and waits ``_idle_wait()`` between
    rounds; a partition the broker no longer has is ``_forget``-ten; a stream
    that made room in its queue calls ``_room_made``.
    """

    settings: Any
    closed: bool
    cluster: Any
    _owned: dict
    _done: dict
    _streams: list
    _fetchers: list

    def _new_consumer(self, uris: list[str] | None = None) -> Any: ...
    def _reset_offset(self, consumer: Any, tp: TopicPartition) -> int: ...
    def _housekeeping(self, fetcher: Fetcher) -> None: ...
    def _idle_wait(self) -> float: ...
    def _forget(self, tp: TopicPartition) -> None: ...
    def _room_made(self) -> None: ...

# Partitions in one FETCH request (brokers refuse requests of more than their
# request.max.entries, 10,000 by default); the rest wait for the next round.
MAX_FETCH_PARTITIONS = 1000

# Errors of one partition that may pass: fetch it again after a pause.
_TRANSIENT = frozenset({ErrorCode.STORAGE_ERROR, ErrorCode.BROKER_NOT_AVAILABLE,
                        ErrorCode.REQUEST_TIMED_OUT, ErrorCode.UNKNOWN,
                        # a replicated partition's leader moving or being elected
                        ErrorCode.NOT_LEADER_FOR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE,
                        ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.REPLICA_NOT_AVAILABLE})


class MessageAndMetadata(NamedTuple):
    """One message handed out by a stream; commit ``next_offset`` once it is processed."""

    topic: str
    partition: int
    offset: int
    next_offset: int
    value: bytes
    broker_id: int = -1  # the partition's broker in cluster mode (-1 standalone)


_new_message = tuple.__new__

# Messages decoded and handed out at a time (KafkaStream): enough that the work
# per batch is lost among its messages, few enough that the garbage collector's
# young generation (700 objects) seldom has to scan a batch's decoded messages
# (64 to 256 cost the same per message here; 512 and more, a fifth more).
BATCH = 256


class Backoff:
    """Delays that start at ``initial`` seconds and double up to ``cap``; reset() starts over."""

    def __init__(self, initial: float, cap: float):
        self.initial = initial
        self.cap = max(cap, initial)
        self._next = initial

    def next(self) -> float:
        """The delay before the next attempt (and double it for the one after)."""
        delay = self._next
        self._next = min(max(2 * delay, 0.001), self.cap)
        return delay

    def reset(self) -> None:
        self._next = self.initial


# Streams.

_END = object()  # put on a stream's queue by shutdown()
_BATCH_END = object()  # ends the deque of a batch, or cuts it when put in front


class _Chunk:
    """A fetched set a stream is handing out: its key, its messages still to decode
    (``FetchedSet.messages()``), and whether a rebalance or shutdown cut it
    (:meth:`KafkaStream.cut`)."""

    __slots__ = ("key", "source", "head", "cut", "error")

    def __init__(self, key: Any, fetched: FetchedSet, broker_id: int):
        self.key = key
        self.source = fetched.messages()
        self.head = (fetched.topic, fetched.partition, broker_id)
        self.cut = False
        self.error: InvalidEntryError | None = None  # met while decoding; raised after the rest


class KafkaStream:
    """An iterator of :class:`MessageAndMetadata` fed by the partitions assigned to it.

    Raises ConsumerTimeoutError after ``consumer.timeout.ms`` without a
    message (iterate again to keep waiting), an error a fetcher met for one of
    its partitions (OffsetOutOfRangeError with no reset possible,
    MessageSizeTooLargeError, BrokerError), and the error that stopped its
    fetcher. An entry that cannot be read (InvalidEntryError: CRC mismatch, a
    compressed wrapper that does not decompress or inflates past
    ``fetch.message.max.bytes``) is skipped with a warning under
    ``skip.bad.messages``; otherwise it stops the stream: this and every later
    ``next()`` raise it, and the offsets committed stay before it. Ends
    (StopIteration) after the connector's ``shutdown()``. Read one stream
    from one thread.

    Hand-off. A chunk taken from the queue is decoded a batch (:data:`BATCH`
    messages) at a time into columns, and the batch is handed out by C code: a
    ``MessageAndMetadata`` is made as it is taken, by ``map`` and ``zip`` over
    the columns, the offsets popped from a deque that ends with a marker
    (``iter(deque.popleft, marker)``); a ``for`` loop over the stream reaches it
    through one generator (``next()`` through :meth:`__next__`). Nothing is
    recorded per message: what a reader was handed is read off the batch
    (:meth:`progress`: the offsets still in the deque are the messages not handed
    out), and a cut puts a marker in front of them (one ``appendleft``, atomic
    under the GIL), so no message is handed out after it and the position it
    leaves is exact.
    """

    def __init__(self, connector: StreamsOwner, index: int, chunks: int, timeout_ms: int):
        self.index = index
        self.partitions: list[TopicPartition] = []
        self._connector = connector
        # Bounded by the fetchers (module docstring), not by the queue: an
        # error or the end must always find a place after the chunks.
        self._queue: queue.Queue = queue.Queue()
        self._chunks = chunks
        self._timeout = None if timeout_ms < 0 else timeout_ms / 1000
        self._chunk: _Chunk | None = None  # being handed out (None: take the next one)
        # The batch handed out now: (its chunk, its messages' next_offsets, the offsets
        # of those not yet handed out followed by _BATCH_END, next_offset of the chunk's
        # message before the batch or None). Replaced whole by the reader, so any
        # thread reads it consistently.
        self._batch: tuple[_Chunk, tuple[int, ...], deque, int | None] | None = None
        self._popper: Iterator[MessageAndMetadata] = iter(())
        self._ended = False
        self._stopped_by: InvalidEntryError | None = None

    def __repr__(self) -> str:
        return f"<KafkaStream {self.index} of {self.partitions}>"

    def __iter__(self) -> Iterator[MessageAndMetadata]:
        return self._iterate()

    def _iterate(self) -> Iterator[MessageAndMetadata]:
        # State lives in the stream, not here: a loop broken off (or ended by an
        # error) and started again, or mixed with next(), goes on where it was.
        while True:
            yield from self._popper
            if not self._refill():
                return

    def __next__(self) -> MessageAndMetadata:
        while True:
            message = next(self._popper, None)
            if message is not None:
                return message
            if not self._refill():
                raise StopIteration

    def _refill(self) -> bool:
        """For a reader whose batch ran out: the next batch of this chunk, or of the
        next chunk on the queue (waiting up to consumer.timeout.ms). False once the
        stream ended."""
        while True:
            if self._ended or self._connector.closed:
                self._ended = True
                return False
            if self._stopped_by is not None:
                raise self._stopped_by
            chunk = self._chunk
            if chunk is None:
                self._take()
            elif not chunk.cut and self._next_batch(chunk):
                return True
            else:
                self._finish(chunk)

    def _next_batch(self, chunk: _Chunk) -> bool:
        decoded: list[Message] = []
        try:
            decoded.extend(islice(chunk.source, BATCH))
        except InvalidEntryError as exc:  # after the messages before it
            chunk.error = exc
            chunk.source = iter(())
        if not decoded:
            return False
        # Columns; a message is made as it is handed out, from the next of each (zip
        # refills its own tuple: one allocation per message, its MessageAndMetadata).
        # The offsets come first and from a deque: what the reader has not taken yet,
        # and where a cut puts the end marker in front.
        offsets, next_offsets, values, _, _ = zip(*decoded)
        left = deque(offsets)
        left.append(_BATCH_END)
        last = self._batch
        before = last[1][-1] if last is not None and last[0] is chunk else None
        self._batch = (chunk, next_offsets, left, before)
        # After publishing: a cut either saw this batch or is seen here.
        if chunk.cut:
            left.appendleft(_BATCH_END)
        topic, partition, broker_id = chunk.head
        self._popper = map(_new_message, repeat(MessageAndMetadata), zip(
            repeat(topic), repeat(partition), iter(left.popleft, _BATCH_END), next_offsets,
            values, repeat(broker_id)))
        return True

    def _finish(self, chunk: _Chunk) -> None:
        """The reader asked for more after the last message it will get of ``chunk``:
        that one is moved past (for the interval commit)."""
        self._chunk = None
        progress = self.progress()
        if progress is not None and progress[0] is chunk.key and progress[1] is not None:
            self._connector._done[chunk.key] = progress[1]
        if chunk.error is not None and not chunk.cut:
            self._stopped_by = chunk.error
            raise chunk.error

    def _take(self) -> None:
        try:
            item = self._queue.get(timeout=self._timeout)
        except queue.Empty:
            raise ConsumerTimeoutError(
                f"no message within consumer.timeout.ms = {self._timeout * 1000:.0f}") from None
        self._connector._room_made()
        if item is _END:
            self._ended = True
        elif isinstance(item, BaseException):
            raise item
        else:
            key, fetched = item
            chunk = _Chunk(key, fetched, key[2] if len(key) > 2 else -1)
            # Set before the check: a rebalance that gives the partition up after
            # the check finds the chunk here and cuts it.
            self._chunk = chunk
            connector = self._connector
            if connector.cluster is not None and connector._owned.get(key) is not self:
                self._chunk = None  # fetched before its partition was given up: not ours

    def progress(self) -> tuple[Any, int | None, int | None] | None:
        """For any thread: the partition of the batch handed out now, the next_offset
        of the last message handed out of it, and of the last one the reader moved
        past (asked for another after it); None where there is none (before the first
        batch, or nothing of the chunk handed out yet)."""
        batch = self._batch
        if batch is None:
            return None
        chunk, next_offsets, left, before = batch
        while True:
            try:
                rest = list(left)  # one C call: the reader pops nothing meanwhile
                break
            except RuntimeError:  # "deque mutated during iteration": a rare GIL switch
                continue
        not_handed = len(rest) - sum(1 for m in rest if m is _BATCH_END)
        handed = len(next_offsets) - not_handed
        last = next_offsets[handed - 1] if handed else before
        if not rest:  # the reader took the end marker: it asked for the next message
            moved = last
        else:
            moved = next_offsets[handed - 2] if handed >= 2 else before
        return chunk.key, last, moved

    def cut(self, keys: Collection[Any] | None = None) -> None:
        """From any thread: hand out nothing more of the current chunk if it is of
        ``keys`` (any chunk with None); what was handed out stays in :meth:`progress`."""
        chunk = self._chunk
        if chunk is not None and (keys is None or chunk.key in keys):
            chunk.cut = True  # the reader checks it after publishing a batch
        batch = self._batch
        if batch is not None and (keys is None or batch[0].key in keys):
            batch[0].cut = True
            batch[2].appendleft(_BATCH_END)

    def release(self, keys: Collection[Any]) -> None:
        """For a rebalance giving up ``keys``: drop the rest of the current chunk if it is
        theirs (queued chunks of theirs are dropped when taken)."""
        self.cut(keys)

    def room(self) -> int:
        """Chunks the queue may still take (0 or below: fetch nothing for this stream)."""
        return self._chunks - self._queue.qsize()

    def put(self, item: Any) -> None:
        """For fetchers, which ask only for partitions of streams with room; never blocks."""
        self._queue.put_nowait(item)

    def fail(self, error: BaseException) -> None:
        """For a fetcher that stops: raise ``error`` in the reader after what is queued."""
        self._queue.put_nowait(error)

    def end(self) -> None:
        """Drop what is queued and end the iteration (after the fetchers stopped)."""
        self.cut()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._queue.put_nowait(_END)


# Fetchers.


class Fetcher:
    """One thread and connection fetching its partitions into their streams' queues."""

    def __init__(self, connector: StreamsOwner, index: int, uris: list[str] | None = None,
                 housekeeping: bool | None = None):
        self.connector = connector
        self.index = index
        # The first fetcher does the connector's housekeeping unless told otherwise.
        self.housekeeping = index == 0 if housekeeping is None else housekeeping
        self.stopped = False  # set by stop(): the thread ends after its round
        self.consumer = connector._new_consumer(uris)
        self.positions: dict[TopicPartition, int] = {}  # next offset to fetch
        self.streams: dict[TopicPartition, KafkaStream] = {}
        self.paused_until: dict[TopicPartition, float] = {}
        # Partitions to start (stream, offset) or to stop (None, -1), in order.
        self.incoming: list[tuple[TopicPartition, KafkaStream | None, int]] = []
        self.lock = threading.Lock()
        self.wake = threading.Event()
        settings = connector.settings
        self.backoff = Backoff(settings["retry.backoff.ms"] / 1000,
                               settings["retry.backoff.max.ms"] / 1000)
        self.thread = threading.Thread(target=self.run, name=f"hb-consumer-fetcher-{index}",
                                       daemon=True)

    def add(self, tp: TopicPartition, stream: KafkaStream, offset: int) -> None:
        with self.lock:
            self.incoming.append((tp, stream, offset))
        self.wake.set()

    def remove(self, tps: Collection[TopicPartition]) -> None:
        """Stop fetching ``tps`` from the next round on (a round in flight still delivers)."""
        with self.lock:
            self.incoming.extend((tp, None, -1) for tp in tps)
        self.wake.set()

    def stop(self) -> None:
        """End the thread after its round (it closes its connection)."""
        self.stopped = True
        self.wake.set()

    def run(self) -> None:
        connector = self.connector
        while not connector.closed and not self.stopped:
            try:
                if self.housekeeping:
                    connector._housekeeping(self)
                self._round()
                self.backoff.reset()
            except (VersionRefusedError, AnswerShapeError) as exc:  # no retry cures these
                log.error("consumer fetcher %d stopped: %s", self.index, exc)
                self._stop_on(exc)
                break
            except (OSError, ConnectionClosedError, ProtocolError) as exc:
                self.consumer.close()
                self._retry_after(exc)
            except BrokerError as exc:  # an error frame, or a reset that could not be done
                self._retry_after(exc)
            except Exception as exc:
                # Nothing a retry cures: stop, and have the readers raise it
                # rather than wait for ever.
                log.exception("consumer fetcher %d stopped", self.index)
                self._stop_on(exc)
                break
        self.consumer.close()

    def _stop_on(self, exc: BaseException) -> None:
        """Have the readers of every stream this fetcher feeds raise ``exc``. Its
        housekeeping (commits, new partitions) passes to a fetcher still running;
        with none left, every stream of the connector raises ``exc``."""
        streams = set(self.streams.values())
        if self.housekeeping:
            self.housekeeping = False
            heir = next((f for f in self.connector._fetchers
                         if f is not self and not f.stopped and f.thread.is_alive()), None)
            if heir is not None:
                heir.housekeeping = True
                heir.wake.set()
            else:
                streams.update(self.connector._streams)
        for stream in streams:
            stream.fail(exc)

    def _retry_after(self, exc: BaseException) -> None:
        """Log the failure and sleep the next back-off (cut short only by shutdown)."""
        delay = self.backoff.next()
        log.warning("consumer fetcher %d: %s; retrying in %.3g s", self.index, exc, delay)
        deadline = time.monotonic() + delay
        while not self.connector.closed and not self.stopped:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            # wake is also set when a reader takes a chunk: wait out the rest.
            self.wake.wait(left)
            self.wake.clear()

    def _take_incoming(self) -> None:
        with self.lock:
            incoming, self.incoming = self.incoming, []
        for tp, stream, offset in incoming:
            if stream is None:
                self.streams.pop(tp, None)
                self.positions.pop(tp, None)
                self.paused_until.pop(tp, None)
            else:
                self.streams[tp] = stream
                self.positions[tp] = offset

    def _request_parts(self) -> tuple[list[TopicPartition], list[api.FetchPartition]]:
        """Every partition whose stream has room and that is not paused, in the
        fetcher's order (``positions``' order), at most MAX_FETCH_PARTITIONS: their
        keys (as the connector names them) and what to ask for."""
        now = time.monotonic()
        # Room is not reserved for the time of a fetch (a long poll of an idle
        # partition would keep it from the others): another fetcher feeding
        # the same stream may fill it meanwhile.
        open_streams: dict[int, bool] = {}
        size = self.consumer.fetch_size
        keys, parts = [], []
        for tp in self.positions:
            if len(parts) == MAX_FETCH_PARTITIONS:
                break
            stream = self.streams[tp]
            has_room = open_streams.get(id(stream))
            if has_room is None:
                has_room = open_streams[id(stream)] = stream.room() > 0
            if has_room and self.paused_until.get(tp, 0) <= now:
                keys.append(tp)
                parts.append(api.FetchPartition(tp[0], tp[1], self.positions[tp], size))
        return keys, parts

    def _round(self) -> None:
        """One FETCH for every partition whose stream has room, or a wait for room."""
        # Cleared before looking at the queues: a chunk taken after this
        # sets it again, so no wake-up is lost.
        self.wake.clear()
        self._take_incoming()
        keys, parts = self._request_parts()
        if not parts:
            self.wake.wait(self.connector._idle_wait() if self.housekeeping else 1.0)
            return
        # A replicated partition is fetched from its leader, followed when it moves.
        results = self.consumer.fetch_following(parts)
        fetched = []
        for tp, result in zip(keys, results):
            if isinstance(result, FetchedSet):
                if result.entries:
                    fetched.append(tp)
                    self.streams[tp].put((tp, result))
                # To the back of the order: what this request left out goes first next.
                del self.positions[tp]
                self.positions[tp] = result.next_offset
            else:
                self._failed(tp, result)
        for tp in fetched:  # behind those that asked and got nothing
            self.positions[tp] = self.positions.pop(tp)
        if not fetched and (self.consumer.max_wait_ms == 0 or self.consumer.min_bytes == 0):
            # No long poll to pace the rounds (no wait, or an answer due at
            # once with fetch.min.bytes 0): do not spin on an idle log.
            self.wake.wait(self.connector.settings["retry.backoff.ms"] / 1000)

    def _failed(self, tp: TopicPartition, error: HostbrokerError) -> None:
        code = getattr(error, "code", None)
        if isinstance(error, OffsetOutOfRangeError):
            self.positions[tp] = self.connector._reset_offset(self.consumer, tp)
        elif code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            # Deleted: forget it; a refresh adds it again if it comes back.
            del self.positions[tp]
            del self.streams[tp]
            self.connector._forget(tp)
        elif code in _TRANSIENT or isinstance(error, OSError):  # OSError: a leader lost
            log.warning("consumer: %s; retrying", error)
            backoff = self.connector.settings["retry.backoff.ms"] / 1000
            self.paused_until[tp] = time.monotonic() + backoff
        else:
            # MessageSizeTooLargeError or a code no retry cures: the reader must know.
            self.streams[tp].put(error)
            del self.positions[tp]
