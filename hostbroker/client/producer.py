"""The producer: values in, acknowledged entries in partitions out.

``Producer(bootstrap, config, **options)`` takes its settings from
:data:`PRODUCER_SETTINGS` (resolved by :mod:`hostbroker.client.settings`;
docs/producer.md has the table). It does no I/O until the first message.

Pipeline of a message::

    send() ── encode (Encoder), size check ──► queue ──► partition (Partitioner,
    Cluster metadata) ──► message sets per partition (compressed: one wrapper
    per batch and partition, split so that no wrapper passes message.max.bytes,
    compressed or inflated) ──►
    PRODUCE requests per broker (at most max.request.bytes, at most
    max.in.flight.requests.per.connection unanswered per connection) ──►
    answer: acknowledged, or retried after retry.backoff.ms, or failed

Sync mode (``producer.type=sync``): ``send`` runs the pipeline in the caller's
thread under the producer's lock (so a sync producer may be shared by
threads, one call at a time) and returns after the answer, raising
:class:`DeliveryError` for what failed. Async mode: ``send`` appends to a
bounded queue (``queue.size`` messages) and returns; one background thread
takes a batch when ``batch.size`` messages are queued, ``queue.time`` ms
passed since the oldest was queued, or a flush or close asks (several
batches at once, into one request, when it fell behind), and owns the
connections, the metadata and the partitioner from then on. ``send_many``
encodes plain message sets in the caller's thread, so that the sending
thread, which shares the interpreter lock with the callers, only routes them. A full queue
blocks the caller, or raises :class:`QueueFullError` at once or after a wait
(``queue.enqueue.timeout.ms``).

Every message ends acknowledged or failed, never silently dropped: failures
go to ``ProducerCallbacks.on_failed`` and, in async mode, are raised as one
:class:`DeliveryError` by the next ``flush()`` or ``close()``. Retries
re-send the same bytes, so a message whose answer was lost may be appended
twice (at-least-once), and with more than one request in flight a retried
batch may land after later ones.

Sending-thread state (the dispatcher, its connections and in-flight
requests) is touched only by the sending thread, or by the caller under the
lock in sync mode; the queue and the counters shared with callers are
guarded by the producer's lock.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from hostbroker.client.cluster import Cluster, PartitionRef, TopicPartitions
from hostbroker.client.connection import DEFAULT_CLIENT_ID, BrokerConnection
from hostbroker.client.encoder import DefaultEncoder, Encoder
from hostbroker.client.errors import (
    BrokerError,
    ConnectionClosedError,
    DeliveryError,
    DeliveryFailure,
    ProducerError,
    QueueFullError,
    RecordTooLargeError,
)
from hostbroker.client.partitioner import DefaultPartitioner, Partitioner
from hostbroker.client.settings import broker_uris, resolve
from hostbroker.config import Setting, at_least, one_of
from hostbroker.errors import ConfigError, ErrorCode, ProtocolError
from hostbroker.log.message import (
    CODEC_GZIP,
    CODEC_NONE,
    CODEC_SNAPPY,
    MIN_LENGTH_V1,
    encode_message_set,
)
from hostbroker.log.segments import validate_topic_name
from hostbroker.protocol import api


PRODUCER_SETTINGS: tuple[Setting, ...] = (
    Setting("broker.list", str, "tcp://127.0.0.1:9092",
            "Brokers to produce to: tcp://HOST:PORT or unix:///PATH URIs. The bootstrap "
            "argument overrides it.", kind="list"),
    Setting("client.id", str, DEFAULT_CLIENT_ID, "Names this client in every request."),
    Setting("producer.type", str, "sync",
            "sync: send() waits for the answer; async: send() queues, a thread sends batches.",
            one_of("sync", "async")),
    Setting("request.required.acks", int, 1,
            "0: no answer; 1: answered once in the page cache; -1: answered once flushed.",
            lambda v: None if v in (0, 1, -1) else "must be 0, 1 or -1"),
    Setting("request.timeout.ms", int, 10000,
            "How long the broker may wait for an acks=-1 flush, and how long the client "
            "waits on a socket (connect, send, answer).", at_least(1)),
    Setting("compression.codec", str, "none",
            "none, gzip or snappy: one compressed wrapper per batch and partition.",
            one_of("none", "gzip", "snappy")),
    Setting("batch.size", int, 200, "Async: messages sent together in one batch.",
            at_least(1)),
    Setting("queue.time", int, 5000,
            "Async: longest time (ms) a message waits in the queue for its batch to fill.",
            at_least(0)),
    Setting("queue.size", int, 10000, "Async: messages the queue holds at most.", at_least(1)),
    Setting("queue.enqueue.timeout.ms", int, -1,
            "Async, queue full: -1 blocks until there is room, 0 raises QueueFullError at "
            "once, N waits N ms then raises.",
            lambda v: None if v >= -1 else "must be -1, 0 or more"),
    Setting("message.send.max.retries", int, 3,
            "Times a message set is sent again after a retriable error.", at_least(0)),
    Setting("retry.backoff.ms", int, 100,
            "Wait before a retry (metadata is refreshed first when the error calls for it).",
            at_least(0)),
    Setting("max.in.flight.requests.per.connection", int, 5,
            "Unanswered requests per broker connection (pipelining).", at_least(1)),
    Setting("message.max.bytes", int, 1000000,
            "Largest entry (length field) sent; a bigger message is refused before it is "
            "queued. Compressed batches are split so that each wrapper fits it, and so "
            "does the message set it inflates to.",
            lambda v: None if MIN_LENGTH_V1 <= v < 2**31 else "must be between 6 and 2**31-1"),
    Setting("max.request.bytes", int, 1048576,
            "Largest PRODUCE request; bigger batches are split into several requests "
            "(smaller requests keep the broker's pipeline busier).",
            lambda v: None if v < 2**31 else "must be below 2**31"),
    Setting("topic.metadata.refresh.interval.ms", int, 600000,
            "Ask the brokers for a topic's partitions again after this long.", at_least(0)),
    Setting("max.failures.kept", int, 1000,
            "Failed message sets a DeliveryError lists (all are counted).", at_least(1)),
)

_CODECS = {"none": CODEC_NONE, "gzip": CODEC_GZIP, "snappy": CODEC_SNAPPY}

# Bytes an entry adds to its payload: length field and v1 header.
_ENTRY_OVERHEAD = 4 + MIN_LENGTH_V1
# A PRODUCE request without its partitions and client id: size, api key,
# version, correlation id, client id length, acks, timeout, partition count.
_REQUEST_OVERHEAD = 4 + 2 + 2 + 4 + 2 + 2 + 4 + 4
# One partition of it without the topic's bytes and the set.
_PARTITION_OVERHEAD = 2 + 4 + 4
_MAX_TOPIC_BYTES = 249
# An async sending thread that finds several batches queued takes up to this
# many at once.
_MAX_BATCHES_PER_TAKE = 8

# Wire errors worth another try: the broker or the partition may come back,
# metadata may have changed. Anything else (INVALID_MESSAGE, MESSAGE_TOO_LARGE,
# INVALID_REQUEST, INVALID_TOPIC, NOT_AUTHORIZED, REQUEST_TOO_LARGE, ...) says
# the same bytes will be refused again.
RETRIABLE_CODES = frozenset({
    ErrorCode.UNKNOWN,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.STORAGE_ERROR,
    ErrorCode.BROKER_NOT_AVAILABLE,
})
# Errors after which the partition may live elsewhere: ask the brokers again.
_REFRESH_CODES = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.STORAGE_ERROR,
    ErrorCode.BROKER_NOT_AVAILABLE,
})


def retriable(error: BaseException) -> bool:
    """True for errors a retry may overcome: a lost or refused connection, a
    timeout, an answer that did not decode, a wire code in RETRIABLE_CODES."""
    if isinstance(error, BrokerError):
        return error.code in RETRIABLE_CODES
    return isinstance(error, (OSError, ProtocolError))


def _needs_refresh(error: BaseException) -> bool:
    if isinstance(error, BrokerError):
        return error.code in _REFRESH_CODES
    return isinstance(error, (OSError, ProtocolError))


class RecordMetadata(NamedTuple):
    """Where an acknowledged message is: ``offset`` is its entry's byte offset
    (every message of a compressed wrapper has the wrapper's offset)."""

    topic: str
    partition: int
    offset: int


@dataclasses.dataclass(frozen=True, slots=True)
class SentRequest:
    """One PRODUCE request as sent; ``partitions`` holds
    ``(topic, partition, message_count, byte_count)`` per partition."""

    correlation_id: int
    broker: str
    partitions: tuple[tuple[str, int, int, int], ...]
    message_count: int
    byte_count: int
    acks: int
    sent_at: float
    acked_at: float | None = None


class ProducerCallbacks:
    """Hooks at each stage of the pipeline; subclass and override what you need.

    ``on_enqueued`` runs in the thread that called ``send`` (``partition`` is
    the one given, or None when the partitioner chooses later); the others
    run in the sending thread (the caller's in sync mode). An exception raised
    by a hook in the async sending thread stops the producer: what is
    outstanding is failed, and later calls raise ProducerError.
    """

    def on_enqueued(self, topic: str, partition: int | None, value: bytes) -> None:
        pass

    def on_sent(self, request: SentRequest) -> None:
        pass

    def on_acknowledged(self, request: SentRequest, results) -> None:
        """The broker answered ``request``; ``results`` are its ProducePartitionResults
        (a partition with a non-zero error code is also reported to on_failed or retried)."""

    def on_failed(self, request: SentRequest | None, error: Exception) -> None:
        """Messages failed for good; ``error`` is a DeliveryError with one DeliveryFailure,
        caused by the wire or connection error. ``request`` is the last request that
        carried them, None when they were never sent."""


def _split_by_size(values: list[bytes], budget: int) -> list[list[bytes]]:
    """``values`` cut into runs whose plain entries take at most ``budget`` bytes each."""
    if sum(map(len, values)) + _ENTRY_OVERHEAD * len(values) <= budget:
        return [values]
    pieces = []
    start = size = 0
    for i, value in enumerate(values):
        add = len(value) + _ENTRY_OVERHEAD
        if size + add > budget and i > start:
            pieces.append(values[start:i])
            start, size = i, 0
        size += add
    pieces.append(values[start:])
    return pieces


def encode_batch(values: list[bytes], codec: int,
                 max_message_bytes: int) -> tuple[bytes, tuple[tuple[int, int], ...] | None]:
    """One partition's message set for ``values``, and its wrappers.

    Uncompressed: the plain set, wrappers None. Compressed: the values are
    first cut into runs whose plain message set (what a wrapper inflates to,
    known exactly from the value lengths) takes at most ``max_message_bytes``,
    so that a consumer whose fetch.message.max.bytes holds one entry of that
    size accepts every wrapper; each run is compressed once. A run whose
    wrapper's length field still passes ``max_message_bytes`` (data that does
    not compress) is halved until each wrapper fits, and a single message
    that cannot be wrapped within the bound goes as a plain entry. Wrappers
    are ``(message_count, entry_bytes)`` in order, which gives each message
    its offset.
    """
    if codec == CODEC_NONE:
        return encode_message_set(values), None
    runs = _split_by_size(values, max_message_bytes)
    if len(runs) == 1:
        return _wrap(values, codec, max_message_bytes)
    data = []
    wrappers: tuple[tuple[int, int], ...] = ()
    for run in runs:
        run_data, run_wrappers = _wrap(run, codec, max_message_bytes)
        data.append(run_data)
        wrappers += run_wrappers
    return b"".join(data), wrappers


def _wrap(values: list[bytes], codec: int,
          max_message_bytes: int) -> tuple[bytes, tuple[tuple[int, int], ...]]:
    """``values`` (whose plain set fits ``max_message_bytes`` unless it is one
    message) as wrappers whose length fields fit it; see encode_batch."""
    if len(values) == 1 and len(values[0]) + _ENTRY_OVERHEAD > max_message_bytes:
        data = encode_message_set(values)
        return data, ((1, len(data)),)
    data = encode_message_set(values, codec=codec)
    if len(data) - 4 <= max_message_bytes:
        return data, ((len(values), len(data)),)
    if len(values) == 1:
        data = encode_message_set(values)
        return data, ((1, len(data)),)
    half = len(values) // 2
    first, first_wrappers = _wrap(values[:half], codec, max_message_bytes)
    second, second_wrappers = _wrap(values[half:], codec, max_message_bytes)
    return first + second, first_wrappers + second_wrappers


class _Encoded:
    """Values already encoded as one plain message set (by ``send_many``, in the
    caller's thread, so that the sending thread only routes it). ``len()`` is
    the number of messages."""

    __slots__ = ("values", "data")

    def __init__(self, values: list[bytes]):
        self.values = values
        self.data = encode_message_set(values)

    def __len__(self) -> int:
        return len(self.values)


def _add(pieces: list, value) -> None:
    """Append a value, a list of values or an _Encoded to a group's pieces, in order;
    consecutive values share one list (one message set, one wrapper)."""
    if type(value) is _Encoded:
        pieces.append(value)
    elif pieces and type(pieces[-1]) is list:
        if type(value) is list:
            pieces[-1] += value
        else:
            pieces[-1].append(value)
    else:
        pieces.append(list(value) if type(value) is list else [value])


def _runs(values: list) -> list:
    """A queued keyless list that may hold _Encoded elements, as pieces."""
    pieces: list = []
    for value in values:
        _add(pieces, value)
    return pieces


def _batches(pieces: list, size: int | None) -> list[list]:
    """``pieces`` (value lists and _Encoded sets) cut into batches of about ``size``
    messages; an _Encoded set is never cut."""
    if size is None:
        return [pieces]
    batches: list[list] = [[]]
    room = size
    for piece in pieces:
        if type(piece) is _Encoded:
            if room <= 0:
                batches.append([])
                room = size
            batches[-1].append(piece)
            room -= len(piece)
            continue
        start = 0
        while start < len(piece):
            if room <= 0:
                batches.append([])
                room = size
            part = piece[start:start + room] if start or len(piece) > room else piece
            batches[-1].append(part)
            room -= len(part)
            start += len(part)
    return batches


def _flatten(pieces: list) -> list[bytes]:
    return [v for piece in pieces for v in (piece.values if type(piece) is _Encoded else piece)]


def take_batch(keyless: dict[str, list], chunked: set[str], items: list[tuple],
               limit: int) -> tuple[dict[str, list], list[tuple], set[str], int]:
    """Take about ``limit`` messages out of an async queue, keyed items first.

    The queue is ``keyless`` (topic -> values and _Encoded sets, in the order
    sent; ``chunked`` names the topics whose list holds _Encoded sets) and
    ``items``; what is taken is removed from them. Returns the taken
    ``(keyless, items, chunked, message count)``. Item lists and _Encoded
    sets are taken whole, so the count may pass ``limit`` by less than one of
    them (a send_many piece is at most batch.size messages).
    """
    room = limit
    taken = 0
    for item in items:
        if room <= 0:
            break
        room -= 1 if type(item[3]) is bytes else len(item[3])
        taken += 1
    taken_items = items[:taken]
    del items[:taken]
    taken_keyless: dict[str, list] = {}
    taken_chunked: set[str] = set()
    for topic, values in list(keyless.items()):
        if room <= 0:
            break
        if topic in chunked:
            taken_chunked.add(topic)
            end = 0
            for value in values:
                if room <= 0:
                    break
                room -= 1 if type(value) is bytes else len(value)
                end += 1
        else:
            end = min(room, len(values))
            room -= end
        if end == len(values):
            taken_keyless[topic] = keyless.pop(topic)
            chunked.discard(topic)
        else:
            taken_keyless[topic] = values[:end]
            del values[:end]
    return taken_keyless, taken_items, taken_chunked, limit - room


class _Set:
    """Messages for one partition, encoded once, sent until acknowledged or failed.

    ``slot`` is the logical partition (None while the topic's partitions are
    unknown: then ``items`` keeps the queued items to partition later).
    ``pinned`` sets (a key or an explicit partition) keep their slot on retry.
    """

    __slots__ = ("topic", "slot", "pinned", "values", "data", "wrappers", "items", "seq",
                 "attempts", "retry_at", "ref", "request", "base_offset", "error")

    def __init__(self, topic, slot, pinned, values, data, wrappers, seq, attempts=0, items=None):
        self.topic = topic
        self.slot = slot
        self.pinned = pinned
        self.values = values
        self.data = data
        self.wrappers = wrappers
        self.items = items
        self.seq = seq
        self.attempts = attempts
        self.retry_at = 0.0
        self.ref: PartitionRef | None = None
        self.request: SentRequest | None = None
        self.base_offset = -1
        self.error: BaseException | None = None

    def offsets(self) -> list[int]:
        base = self.base_offset
        if self.wrappers is None:
            sizes = [len(v) + _ENTRY_OVERHEAD for v in self.values]
            return list(itertools.accumulate(sizes[:-1], initial=base))
        offsets = []
        for count, size in self.wrappers:
            offsets += [base] * count
            base += size
        return offsets


class _Dispatcher:
    """Turns queued items into requests and answers into outcomes.

    Owned by one thread at a time (see the module docstring). ``done(set)``
    is called once for every set that ends, with ``set.error`` None when it
    was acknowledged (or sent, with acks=0).
    """

    def __init__(self, settings, cluster: Cluster, partitioner: Partitioner,
                 callbacks: ProducerCallbacks, stats: dict[str, int], done):
        self.cluster = cluster
        self.partitioner = partitioner
        self.callbacks = callbacks
        self.stats = stats
        self.done = done
        self.acks = settings["request.required.acks"]
        self.timeout_ms = settings["request.timeout.ms"]
        self.codec = _CODECS[settings["compression.codec"]]
        self.max_message_bytes = settings["message.max.bytes"]
        self.max_request_bytes = settings["max.request.bytes"]
        self.max_retries = settings["message.send.max.retries"]
        self.backoff = settings["retry.backoff.ms"] / 1000
        self.max_in_flight = settings["max.in.flight.requests.per.connection"]
        self.client_id = settings["client.id"]
        self.request_overhead = _REQUEST_OVERHEAD + len(self.client_id.encode())
        self.connections: dict[str, BrokerConnection] = {}
        self.in_flight: dict[str, collections.deque] = {}
        self.retries: list[_Set] = []
        self._seq = itertools.count()

    # -- state ---------------------------------------------------------------

    def awaiting_answers(self) -> bool:
        return any(self.in_flight.values())

    def next_retry_at(self) -> float | None:
        return min((s.retry_at for s in self.retries), default=None)

    def busy(self) -> bool:
        return bool(self.retries) or self.awaiting_answers()

    def close(self) -> None:
        self.abandon()
        self.cluster.close()

    def abandon(self) -> None:
        """Forget every request in flight and every retry, and close the connections."""
        for connection in self.connections.values():
            connection.close()
        for queue in self.in_flight.values():
            queue.clear()
        self.retries = []

    # -- items to sets ----------------------------------------------------------

    def _topic(self, topic: str) -> TopicPartitions:
        if self.cluster.needs_refresh(topic):
            self.partitioner.rotate(topic)
        return self.cluster.partitions(topic)

    def set_budget(self, topic: str) -> int:
        """Most bytes one message set for ``topic`` may take in a request."""
        return (self.max_request_bytes - self.request_overhead - _PARTITION_OVERHEAD
                - len(topic.encode()))

    def _choose(self, topic: str, key: bytes | None, n: int) -> int:
        slot = self.partitioner.partition(topic, key, n)
        if type(slot) is not int or not 0 <= slot < n:
            raise ProducerError(
                f"the partitioner chose {slot!r} for a topic of {n} partitions ({topic})")
        return slot

    def _count(self, topic: str, counts: dict, unresolved: dict) -> int:
        """``topic``'s number of partitions, once per batch; 0 when no broker told."""
        n = counts.get(topic)
        if n is None:
            try:
                n = len(self._topic(topic).partitions)
            except Exception as exc:  # noqa: BLE001 - no broker answered: retried later
                unresolved[topic] = ([], exc)
                n = 0
            counts[topic] = n
        return n

    def make_sets(self, keyless: dict[str, list], items, attempts: int = 0,
                  chunked: set[str] | frozenset = frozenset(),
                  batch_size: int | None = None) -> list[_Set]:
        """Partition and encode what was taken off the queue.

        ``keyless`` maps a topic to values with neither key nor partition (the
        lists become the sets' own; those of the topics in ``chunked`` also
        hold _Encoded elements); ``items`` are ``(topic, key, partition,
        value, [values] or _Encoded)``. Keyless messages of a topic share one
        partition per batch of ``batch_size`` (all of them when None): the
        partitioner is asked once per batch and told to rotate after it; each
        batch is its own message set (its own wrapper when compressed).
        """
        counts: dict[str, int] = {}
        unresolved: dict[str, tuple[list, BaseException]] = {}
        groups: dict[tuple[str, int], list] = {}
        keyless_slot: dict[str, int] = {}
        rotate: set[str] = set()
        partitioner = self.partitioner
        refused: list[tuple[str, int, list, BaseException]] = []
        for topic, values in keyless.items():
            pieces = _runs(values) if topic in chunked else [values]
            n = self._count(topic, counts, unresolved)
            if not n:
                unresolved[topic][0].extend((topic, None, None, piece) for piece in pieces)
                continue
            for batch in _batches(pieces, batch_size):
                slot = keyless_slot[topic] = self._choose(topic, None, n)
                partitioner.rotate(topic)
                group = groups.get((topic, slot))
                if group is None:
                    groups[(topic, slot)] = [batch, False]
                else:
                    group[0] += batch
        for item in items:
            topic, key, partition, value = item
            n = self._count(topic, counts, unresolved)
            if not n:
                unresolved[topic][0].append(item)
                continue
            if partition is not None:
                slot = partition
            elif key is not None:
                slot = self._choose(topic, key, n)
            else:
                slot = keyless_slot.get(topic)
                if slot is None:
                    slot = keyless_slot[topic] = self._choose(topic, None, n)
                    rotate.add(topic)
            group = groups.get((topic, slot))
            if group is None:
                group = groups[(topic, slot)] = [[], False]
            _add(group[0], value)
            if key is not None or partition is not None:
                group[1] = True
        sets = []
        for (topic, slot), (pieces, pinned) in groups.items():
            known = self.cluster.cached(topic)
            if known.known and slot >= counts[topic]:
                refused.append((topic, slot, _flatten(pieces), BrokerError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"partition {slot!r} of {counts[topic]}", topic=topic, partition=slot)))
                continue
            # A compressed set is cut where its wrappers would be (at most
            # message.max.bytes inflated, below the request budget, which
            # holds one such entry): cutting at the budget first could leave
            # a wrapper of one message at the end of each set.
            budget = self.set_budget(topic) if self.codec == CODEC_NONE else self.max_message_bytes
            for piece in pieces:
                if type(piece) is _Encoded:
                    sets.append(_Set(topic, slot, pinned, piece.values, piece.data, None,
                                     next(self._seq), attempts))
                    continue
                for values in _split_by_size(piece, budget):
                    data, wrappers = encode_batch(values, self.codec, self.max_message_bytes)
                    sets.append(_Set(topic, slot, pinned, values, data, wrappers,
                                     next(self._seq), attempts))
        for topic in rotate:  # the batch is out: a new keyless choice next time
            partitioner.rotate(topic)
        for topic, slot, values, error in refused:
            failed = _Set(topic, slot, True, values, b"", None, next(self._seq), attempts)
            self._finish(failed, error)
        for topic, (topic_items, error) in unresolved.items():
            values = _flatten([item[3] if type(item[3]) is not bytes else [item[3]]
                               for item in topic_items])
            pending = _Set(topic, None, True, values, b"", None, next(self._seq), attempts,
                           items=topic_items)
            self._attempt_failed(pending, error)
        return sets

    # -- sending -------------------------------------------------------------

    def _route(self, s: _Set) -> PartitionRef:
        known = self.cluster.cached(s.topic)
        if known.known:
            return known.partitions[s.slot]
        first = known.partitions[0]
        return PartitionRef(first.broker_id, first.uri, s.slot)

    def dispatch(self, sets: list[_Set]) -> None:
        """Send ``sets`` in requests of at most max.request.bytes, one broker at a time."""
        by_broker: dict[str, list[_Set]] = {}
        for s in sets:
            known = self.cluster.cached(s.topic)
            if known is None or (known.known and s.slot >= len(known.partitions)):
                self._finish(s, BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                            "not among the topic's partitions after a refresh",
                                            topic=s.topic, partition=s.slot))
                continue
            s.ref = self._route(s)
            by_broker.setdefault(s.ref.uri, []).append(s)
        for uri, broker_sets in by_broker.items():
            parts: dict[tuple[str, int], list[_Set]] = {}
            size = self.request_overhead
            for s in broker_sets:
                key = (s.topic, s.ref.partition)
                add = len(s.data)
                if key not in parts:
                    add += _PARTITION_OVERHEAD + len(s.topic.encode())
                if parts and size + add > self.max_request_bytes:
                    self._send(uri, parts)
                    parts, size = {}, self.request_overhead
                    add = len(s.data) + _PARTITION_OVERHEAD + len(s.topic.encode())
                parts.setdefault(key, []).append(s)
                size += add
            if parts:
                self._send(uri, parts)

    def _connection(self, uri: str) -> BrokerConnection:
        connection = self.connections.get(uri)
        if connection is None:
            connection = self.connections[uri] = BrokerConnection(
                uri, timeout=self.timeout_ms / 1000, client_id=self.client_id)
            self.in_flight[uri] = collections.deque()
        if not connection.connected:
            connection.connect()
        return connection

    def _send(self, uri: str, parts: dict[tuple[str, int], list[_Set]]) -> None:
        groups = list(parts.values())
        try:
            while len(self.in_flight.get(uri, ())) >= self.max_in_flight:
                self.receive(uri)
            connection = self._connection(uri)
            # The sets go to the socket as they are: no join, no copy into a frame.
            correlation_id = connection.send_produce(self.acks, self.timeout_ms, [
                (topic, partition, [s.data for s in group])
                for (topic, partition), group in parts.items()])
        except (OSError, ProtocolError) as exc:
            self._lose_connection(uri, exc, [s for group in groups for s in group])
            return
        summary = tuple(
            (topic, partition, sum(len(s.values) for s in group), sum(len(s.data) for s in group))
            for (topic, partition), group in parts.items())
        sent = SentRequest(correlation_id, uri, summary, sum(p[2] for p in summary),
                           sum(p[3] for p in summary), self.acks, time.monotonic())
        self.stats["requests"] += 1
        self.stats["sent"] += sent.message_count
        for group in groups:
            for s in group:
                s.request = sent
        self.callbacks.on_sent(sent)
        if self.acks == 0:
            for group in groups:
                for s in group:
                    self._finish(s, None)
        else:
            self.in_flight[uri].append((sent, groups))

    # -- answers ---------------------------------------------------------------

    def receive_oldest(self) -> None:
        """Wait for the answer to the oldest request in flight on any connection."""
        uri = min((q[0][0].sent_at, uri) for uri, q in self.in_flight.items() if q)[1]
        self.receive(uri)

    def receive(self, uri: str) -> None:
        """Wait for the answer to the oldest request in flight on ``uri``; settle its sets."""
        queue = self.in_flight[uri]
        sent, groups = queue[0]
        try:
            response = self.connections[uri].receive(api.ApiKey.PRODUCE)
        except BrokerError as exc:  # an error frame: this request refused, the connection gone
            queue.popleft()
            for group in groups:
                for s in group:
                    self._attempt_failed(s, exc)
            self._lose_connection(uri, ConnectionClosedError(f"connection to {uri} closed"), [])
            return
        except (OSError, ProtocolError) as exc:
            self._lose_connection(uri, exc, [])
            return
        queue.popleft()
        acknowledged = dataclasses.replace(sent, acked_at=time.monotonic())
        results = {(r.topic, r.partition): r for r in response.partitions}
        ok = 0
        for group in groups:
            first = group[0]
            result = results.get((first.topic, first.ref.partition))
            if result is None:
                error: BaseException | None = ProtocolError(
                    f"the answer to request {sent.correlation_id} has no result for "
                    f"{first.topic}/{first.ref.partition}")
            elif result.error_code != ErrorCode.NONE:
                error = BrokerError(result.error_code, topic=first.topic,
                                    partition=first.ref.partition)
            else:
                error = None
                offset = result.base_offset
                for s in group:
                    s.base_offset = offset
                    offset += len(s.data)
            for s in group:
                s.request = acknowledged
                if error is None:
                    ok += len(s.values)
                    self._finish(s, None)
                else:
                    self._attempt_failed(s, error)
        self.stats["acknowledged"] += ok
        self.callbacks.on_acknowledged(acknowledged, response.partitions)

    def _lose_connection(self, uri: str, error: BaseException, unsent: list[_Set]) -> None:
        """The connection to ``uri`` broke: every set on it, sent or not, tries again."""
        connection = self.connections.get(uri)
        if connection is not None:
            connection.close()
        queue = self.in_flight.get(uri)
        lost = list(unsent)
        while queue:
            _, groups = queue.popleft()
            lost += [s for group in groups for s in group]
        for s in lost:
            self._attempt_failed(s, error)

    # -- retries and outcomes -------------------------------------------------------

    def _attempt_failed(self, s: _Set, error: BaseException) -> None:
        s.attempts += 1
        if retriable(error) and s.attempts <= self.max_retries:
            self.stats["retries"] += 1
            s.retry_at = time.monotonic() + self.backoff
            if _needs_refresh(error):
                self.cluster.invalidate(s.topic)
            self.retries.append(s)
        else:
            self._finish(s, error)

    def _finish(self, s: _Set, error: BaseException | None) -> None:
        s.error = error
        if error is not None:
            self.stats["failed"] += len(s.values)
            failure = DeliveryError([DeliveryFailure(s.topic, s.slot, s.values, error)])
            failure.__cause__ = error
            self.callbacks.on_failed(s.request, failure)
        elif s.ref is not None and not self.cluster.cached(s.topic).known:
            self.cluster.invalidate(s.topic)  # auto-created by this produce: learn its partitions
        self.done(s)

    def send_due_retries(self, now: float) -> None:
        due = [s for s in self.retries if s.retry_at <= now]
        if not due:
            return
        self.retries = [s for s in self.retries if s.retry_at > now]
        again = []
        topics: dict[str, TopicPartitions | Exception] = {}  # one refresh a topic
        for s in due:
            if s.items is not None:  # its topic's partitions were never learned
                again += self.make_sets({}, s.items, s.attempts)
                continue
            info = topics.get(s.topic)
            if info is None:
                try:
                    info = self._topic(s.topic)
                except Exception as exc:  # noqa: BLE001 - no broker answered: an attempt
                    info = exc
                topics[s.topic] = info
            if isinstance(info, Exception):
                self._attempt_failed(s, info)
                continue
            if not s.pinned:
                s.slot = self._choose(s.topic, None, len(info.partitions))
            again.append(s)
        self.dispatch(again)

    def step(self, deadline: float | None) -> None:
        """One unit of work for a caller waiting on outstanding sets: send due retries,
        else wait for one answer, else sleep until the next retry (at most to ``deadline``)."""
        now = time.monotonic()
        next_retry = self.next_retry_at()
        if next_retry is not None and next_retry <= now:
            self.send_due_retries(now)
        elif self.awaiting_answers():
            self.receive_oldest()
        elif next_retry is not None:
            until = next_retry if deadline is None else min(next_retry, deadline)
            time.sleep(max(0.0, until - now))


class Producer:
    """Sends messages to topics; see the module docstring and docs/producer.md.

    ``bootstrap`` (a URI or a sequence of URIs) overrides ``broker.list``;
    ``config`` holds dotted keys, ``options`` the same keys with ``_`` for
    ``.``. Raises ConfigError for a bad setting before any I/O.
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str] | None = None,
        config: Mapping[str, Any] | None = None,
        *,
        partitioner: Partitioner | None = None,
        encoder: Encoder | None = None,
        callbacks: ProducerCallbacks | None = None,
        **options: Any,
    ):
        settings = resolve(PRODUCER_SETTINGS, config, options)
        self.brokers = tuple(broker_uris(bootstrap, settings))
        self._check(settings)
        self.settings = settings
        self.is_async = settings["producer.type"] == "async"
        self._encoder = encoder or DefaultEncoder()
        self._default_encoder = type(self._encoder) is DefaultEncoder
        self._callbacks = callbacks or ProducerCallbacks()
        on_enqueued = type(self._callbacks).on_enqueued
        self._on_enqueued = (self._callbacks.on_enqueued
                             if on_enqueued is not ProducerCallbacks.on_enqueued else None)
        self._max_value_bytes = settings["message.max.bytes"] - MIN_LENGTH_V1
        self._max_failures = settings["max.failures.kept"]
        self._stats = dict.fromkeys(
            ("enqueued", "sent", "acknowledged", "failed", "requests", "retries"), 0)
        cluster = Cluster(self.brokers, client_id=settings["client.id"],
                          timeout=settings["request.timeout.ms"] / 1000,
                          refresh_interval_ms=settings["topic.metadata.refresh.interval.ms"])
        self._dispatcher = _Dispatcher(settings, cluster, partitioner or DefaultPartitioner(),
                                       self._callbacks, self._stats, self._set_done)
        self._topics: set[str] = set()  # names checked
        self._plain_topics: set[str] = set()  # ... and sent with the default encoder
        self._lock = threading.Lock()
        self._closed = False
        # Failures not yet raised by flush()/close(), and how many messages they hold.
        self._failures: list[DeliveryFailure] = []
        self._failed_messages = 0
        if self.is_async:
            self._init_async(settings)
        else:
            self.send = self._send_sync
            self.send_many = self._send_many_sync
            self._finished: list[_Set] = []

    @staticmethod
    def _check(settings) -> None:
        need = (settings["message.max.bytes"] + 4 + _REQUEST_OVERHEAD + _PARTITION_OVERHEAD
                + _MAX_TOPIC_BYTES + len(settings["client.id"].encode()))
        if settings["max.request.bytes"] < need:
            raise ConfigError(
                f"max.request.bytes: must be at least {need} to hold one message of "
                f"message.max.bytes (got {settings['max.request.bytes']})")
        if settings["batch.size"] > settings["queue.size"]:
            raise ConfigError(
                f"batch.size: must not exceed queue.size ({settings['queue.size']})"
                f" (got {settings['batch.size']})")

    def __repr__(self) -> str:
        mode = "async" if self.is_async else "sync"
        state = "closed" if self._closed else "open"
        return f"<Producer {mode} {','.join(self.brokers)} {state}>"

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
            return
        try:
            self.close()
        except ProducerError:
            pass  # the exception already propagating says more; failures went to on_failed

    @property
    def stats(self) -> dict[str, int]:
        """Counters in messages (``requests`` and ``retries``: requests sent, sets retried)
        and ``queued``, the messages waiting in the async queue."""
        stats = dict(self._stats)
        if self.is_async:
            stats["enqueued"] = self._taken + self._queued
        stats["queued"] = self._queued if self.is_async else 0
        return stats

    # -- what every send checks in the caller's thread -----------------------------

    def _check_target(self, topic: str, partition: Any) -> None:
        if topic not in self._topics:
            validate_topic_name(topic)
            self._topics.add(topic)
            if self._default_encoder:
                self._plain_topics.add(topic)
        if partition is not None and (type(partition) is not int or partition < 0):
            raise ValueError(f"partition must be None or an int >= 0, got {partition!r}")

    def _encode(self, topic: str, value: Any, key: Any,
                partition: Any = None) -> tuple[bytes, bytes | None]:
        self._check_target(topic, partition)
        if type(value) is not bytes or not self._default_encoder:
            value = self._encoder.encode(value)
        if len(value) > self._max_value_bytes:
            self._too_large(topic, value)
        if key is not None:
            key = self._encoder.encode(key)
        return value, key

    def _encode_many(self, topic: str, values, key: Any,
                     partition: Any = None) -> tuple[list[bytes], bytes | None]:
        self._check_target(topic, partition)
        encode = self._encoder.encode
        if self._default_encoder:
            values = [v if type(v) is bytes else encode(v) for v in values]
        else:
            values = [encode(v) for v in values]
        if values and max(map(len, values)) > self._max_value_bytes:
            self._too_large(topic, max(values, key=len))
        if key is not None:
            key = encode(key)
        return values, key

    def _too_large(self, topic: str, value: bytes) -> None:
        raise RecordTooLargeError(
            f"a message of {len(value)} bytes for {topic} exceeds message.max.bytes "
            f"({self.settings['message.max.bytes']}, of which {MIN_LENGTH_V1} are the header)")

    def _set_done(self, s: _Set) -> None:
        if not self.is_async:
            self._record(s)
            self._finished.append(s)
            return
        with self._lock:
            self._record(s)
            self._ended += len(s.values)
            if self._ended == self._taken + self._queued:
                self._idle.notify_all()

    def _record(self, s: _Set) -> None:
        if s.error is not None:
            if len(self._failures) < self._max_failures:
                self._failures.append(DeliveryFailure(s.topic, s.slot, s.values, s.error))
            self._failed_messages += len(s.values)

    def _take_failures(self) -> DeliveryError | None:
        if not self._failed_messages:
            return None
        error = DeliveryError(self._failures, self._failed_messages)
        self._failures, self._failed_messages = [], 0
        return error

    # -- sync mode ---------------------------------------------------------------

    def _run_sync(self, items, count: int) -> list[_Set]:
        with self._lock:
            if self._closed:
                raise ProducerError("the producer is closed")
            self._stats["enqueued"] += count
            dispatcher = self._dispatcher
            self._finished = []
            self._failures, self._failed_messages = [], 0
            try:
                dispatcher.dispatch(dispatcher.make_sets({}, items))
                while dispatcher.busy():
                    dispatcher.step(None)
            except BaseException:
                # A partitioner or a callback raised mid-call: what this call
                # left in flight must not be settled as part of the next one.
                dispatcher.abandon()
                raise
            finished = sorted(self._finished, key=lambda s: s.seq)
            self._finished = []
            error = self._take_failures()
        if error is not None:
            raise error
        return finished

    def _metadata(self, finished: list[_Set]) -> list[RecordMetadata] | None:
        if self.settings["request.required.acks"] == 0:
            return None
        return [RecordMetadata(s.topic, s.ref.partition, offset)
                for s in finished for offset in s.offsets()]

    def _send_sync(self, topic: str, value: Any, key: Any = None,
                   partition: int | None = None) -> RecordMetadata | None:
        value, key = self._encode(topic, value, key, partition)
        if self._on_enqueued is not None:
            self._on_enqueued(topic, partition, value)
        metadata = self._metadata(self._run_sync([(topic, key, partition, value)], 1))
        return None if metadata is None else metadata[0]

    def _send_many_sync(self, topic: str, values, key: Any = None,
                        partition: int | None = None) -> list[RecordMetadata] | None:
        values, key = self._encode_many(topic, values, key, partition)
        if not values:
            return None if self.settings["request.required.acks"] == 0 else []
        if self._on_enqueued is not None:
            for value in values:
                self._on_enqueued(topic, partition, value)
        return self._metadata(self._run_sync([(topic, key, partition, values)], len(values)))

    # -- async mode --------------------------------------------------------------

    def _init_async(self, settings) -> None:
        # The queue: values with neither key nor partition, per topic (one list
        # append per send), and (topic, key, partition, value or [values]) items.
        self._keyless: dict[str, list] = {}
        self._chunked: set[str] = set()  # topics whose keyless list holds _Encoded elements
        self._items: list[tuple] = []
        self._codec = _CODECS[settings["compression.codec"]]
        self._queued = 0  # messages in the queue
        # Messages ever taken off the queue by the sending thread, and ever
        # acknowledged or failed: flush() waits for ended == taken + queued.
        self._taken = 0
        self._ended = 0
        # queue.size, or -1 once closing or stopped: send() compares one number.
        self._limit = settings["queue.size"]
        self._first_at = 0.0  # when the queue last went from empty to not empty
        self._queue_size = settings["queue.size"]
        self._batch_size = settings["batch.size"]
        self._queue_time = settings["queue.time"] / 1000
        self._enqueue_timeout = settings["queue.enqueue.timeout.ms"]
        self._wake = threading.Condition(self._lock)  # the sending thread waits on it
        self._room = threading.Condition(self._lock)  # callers wait for room in the queue
        self._idle = threading.Condition(self._lock)  # flush() waits for nothing outstanding
        self._room_waiters = 0
        self._flushers = 0
        self._closing = False
        self._fatal: BaseException | None = None
        self._abort: BaseException | None = None  # close() ran out of time: fail what is left
        self._refusing = False  # closing or fatal: send() must not queue
        self.send = self._send_async
        self.send_many = self._send_many_async
        self._thread = threading.Thread(target=self._run, name="hostbroker-producer", daemon=True)
        self._thread.start()

    def _send_async(self, topic: str, value: Any, key: Any = None,
                    partition: int | None = None) -> None:
        # The common case (bytes, a topic seen before, no key) costs a lock,
        # a list append and a few counters. acquire/release: measured at half
        # the cost of ``with`` on this path.
        if topic not in self._plain_topics or type(value) is not bytes or key is not None \
                or partition is not None or len(value) > self._max_value_bytes:
            value, key = self._encode(topic, value, key, partition)
        lock = self._lock
        lock.acquire()
        try:
            if self._queued >= self._limit:
                self._wait_for_room(1)
            if key is None and partition is None:
                values = self._keyless.get(topic)
                if values is None:
                    self._keyless[topic] = [value]
                else:
                    values.append(value)
            else:
                self._items.append((topic, key, partition, value))
            queued = self._queued = self._queued + 1
            if queued == 1:
                self._first_at = time.monotonic()
                self._wake.notify()
            elif queued == self._batch_size:
                self._wake.notify()
        finally:
            lock.release()
        if self._on_enqueued is not None:
            self._on_enqueued(topic, partition, value)

    def _send_many_async(self, topic: str, values, key: Any = None,
                         partition: int | None = None) -> None:
        values, key = self._encode_many(topic, values, key, partition)
        batch = self._batch_size
        keyless = key is None and partition is None
        pieces: list = [values[i:i + batch] for i in range(0, len(values), batch)]
        if self._codec == CODEC_NONE:
            # Encoded here, while the sending thread waits on its sockets: it
            # then only routes the set. Compressed batches are built there,
            # one wrapper per batch and partition.
            budget = self._dispatcher.set_budget(topic)
            pieces = [_Encoded(part) for piece in pieces for part in _split_by_size(piece, budget)]
        for piece in pieces:
            n = len(piece)
            lock = self._lock
            lock.acquire()
            try:
                if self._queued + n > self._limit:
                    self._wait_for_room(n)
                if keyless:
                    queued = self._keyless.get(topic)
                    if type(piece) is _Encoded:
                        self._chunked.add(topic)
                        if queued is None:
                            self._keyless[topic] = [piece]
                        else:
                            queued.append(piece)
                    elif queued is None:
                        self._keyless[topic] = list(piece)
                    else:
                        queued += piece
                else:
                    self._items.append((topic, key, partition, piece))
                before = self._queued
                self._queued = before + n
                if before == 0:
                    self._first_at = time.monotonic()
                if before == 0 or before < batch <= before + n:
                    self._wake.notify()
            finally:
                lock.release()
            if self._on_enqueued is not None:
                for value in (piece.values if type(piece) is _Encoded else piece):
                    self._on_enqueued(topic, partition, value)

    def _not_in_sending_thread(self, what: str) -> None:
        """A hook run by the sending thread must not wait for that thread: refuse."""
        if threading.current_thread() is self._thread:
            raise ProducerError(f"{what} from a callback in the sending thread would wait "
                                "for that thread")

    def _wait_for_room(self, n: int) -> None:
        """Called with the lock held and the queue too full for ``n`` more messages."""
        self._not_in_sending_thread("a send to a full queue")
        timeout = self._enqueue_timeout
        self._room_waiters += 1
        try:
            room = self._room.wait_for(
                lambda: self._refusing or self._queued + n <= self._queue_size,
                None if timeout < 0 else timeout / 1000)
        finally:
            self._room_waiters -= 1
        if self._fatal is not None:
            raise ProducerError("the producer's sending thread stopped") from self._fatal
        if self._refusing:
            raise ProducerError("the producer is closed")
        if not room:
            raise QueueFullError(
                f"queue full: {self._queued} of queue.size {self._queue_size} messages"
                f" waiting (queue.enqueue.timeout.ms {timeout})")

    def _take(self) -> tuple[dict, list, set] | None:
        """The next batch to send (empty when the dispatcher has work; None: time to stop)."""
        with self._lock:
            while True:
                if self._abort is not None:
                    return None
                queued = self._queued
                now = time.monotonic()
                if queued and (queued >= self._batch_size or self._flushers or self._closing
                               or now >= self._first_at + self._queue_time):
                    return self._pop_batch()
                dispatcher = self._dispatcher
                if dispatcher.awaiting_answers():
                    return {}, [], set()
                next_retry = dispatcher.next_retry_at()
                if next_retry is not None and next_retry <= now:
                    return {}, [], set()
                if self._closing and not queued and next_retry is None:
                    return None
                waits = []
                if queued:
                    waits.append(self._first_at + self._queue_time - now)
                if next_retry is not None:
                    waits.append(next_retry - now)
                self._wake.wait(min(waits) if waits else None)

    def _pop_batch(self) -> tuple[dict, list, set]:
        """batch.size messages off the queue, or whole multiples of it when more
        are waiting (lock held)."""
        if self._queued <= self._batch_size:
            keyless, self._keyless = self._keyless, {}
            chunked, self._chunked = self._chunked, set()
            items, self._items = self._items, []
            self._taken += self._queued
            self._queued = 0
        else:
            # Behind: take several batches at once, so that one request
            # carries them (fewer requests and thread switches per message;
            # measured: a third less CPU per message for 100-byte sends).
            batches = min(_MAX_BATCHES_PER_TAKE, self._queued // self._batch_size)
            keyless, items, chunked, count = take_batch(
                self._keyless, self._chunked, self._items, self._batch_size * batches)
            self._taken += count
            self._queued -= count
            self._first_at = time.monotonic()
        if self._room_waiters:
            self._room.notify_all()
        return keyless, items, chunked

    def _run(self) -> None:
        dispatcher = self._dispatcher
        try:
            while True:
                batch = self._take()
                if batch is None:
                    if self._abort is not None:
                        # close() ran out of time and no longer closes what
                        # this thread still uses: it is closed here.
                        try:
                            self._stop_with(self._abort, report=True)
                        finally:
                            dispatcher.close()
                    return
                keyless, items, chunked = batch
                if keyless or items:
                    dispatcher.dispatch(dispatcher.make_sets(keyless, items, 0, chunked,
                                                             self._batch_size))
                else:
                    dispatcher.step(None)
        except BaseException as exc:  # noqa: BLE001 - recorded, raised to callers, then stop
            self._stop_with(exc)

    def _stop_with(self, exc: BaseException, report: bool = False) -> None:
        """Stop sending: everything outstanding fails with ``exc``.

        After an exception in the sending thread (``report`` False) the
        callbacks are not called again (one of them may be what failed);
        after close() ran out of time they are.
        """
        with self._lock:
            if not report:
                self._fatal = exc
            self._refusing = True
            self._limit = -1
            keyless, self._keyless = self._keyless, {}
            items, self._items = self._items, []
            self._taken += self._queued
            self._queued = 0
            self._room.notify_all()
        keyless_items = [(topic, None, None, piece) for topic, values in keyless.items()
                         for piece in _runs(values)]
        lost = ProducerError(f"the producer's sending thread stopped: {exc!r}")
        lost.__cause__ = exc
        dispatcher = self._dispatcher
        pending = [s for q in dispatcher.in_flight.values() for _, groups in q
                   for group in groups for s in group] + dispatcher.retries
        for q in dispatcher.in_flight.values():
            q.clear()
        dispatcher.retries = []
        for item in items + keyless_items:
            value = item[3]
            values = _flatten([value if type(value) is not bytes else [value]])
            pending.append(_Set(item[0], item[2], True, values, b"", None, -1))
        for s in pending:
            s.error = lost
            self._stats["failed"] += len(s.values)
            if report:
                failure = DeliveryError([DeliveryFailure(s.topic, s.slot, s.values, lost)])
                self._callbacks.on_failed(s.request, failure)
            self._set_done(s)
        with self._lock:
            # Messages the failure caught between two of the lists above.
            missing = self._taken - self._ended
            self._failed_messages += missing
            self._stats["failed"] += missing
            self._ended = self._taken
            self._idle.notify_all()

    def flush(self, timeout: float | None = None) -> None:
        """Async: send what is queued now and wait until every message is acknowledged or
        failed; then raise DeliveryError for what failed since the last flush. Raises
        TimeoutError if messages are still outstanding after ``timeout`` seconds. Sync: nothing
        is ever outstanding between calls."""
        if not self.is_async:
            return
        self._not_in_sending_thread("flush() or close()")
        with self._lock:
            self._flushers += 1
            self._wake.notify()
            try:
                if not self._idle.wait_for(
                        lambda: self._ended == self._taken + self._queued, timeout):
                    raise TimeoutError(
                        f"flush: {self._taken + self._queued - self._ended} messages still"
                        " outstanding"
                        f" after {timeout}s")
            finally:
                self._flushers -= 1
            error = self._take_failures()
            fatal = self._fatal
        if error is not None:
            raise error
        if fatal is not None:
            raise ProducerError("the producer's sending thread stopped") from fatal

    def close(self, timeout: float | None = None) -> None:
        """Flush, stop the sending thread, close the connections. Idempotent.

        Async: raises DeliveryError for the messages that failed since the last
        flush. If messages are still outstanding after ``timeout`` seconds it
        raises TimeoutError; the sending thread then fails them (on_failed) and
        stops on its own.
        """
        if self._closed:
            return
        if not self.is_async:
            with self._lock:
                self._closed = True
                self._dispatcher.close()
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._closing = self._refusing = True
            self._limit = -1
            self._wake.notify()
            self._room.notify_all()
        try:
            self.flush(timeout)
        except TimeoutError as exc:
            with self._lock:
                self._abort = exc
                self._wake.notify()
            raise
        finally:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            self._thread.join(remaining)
            if not self._thread.is_alive():
                self._dispatcher.close()
            self._closed = True
