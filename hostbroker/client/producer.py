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
bounded queue (``queue.size`` messages, ``queue.bytes`` bytes of values and
keys) and returns; one background thread takes a batch when
``batch.size`` messages are queued, ``queue.time`` ms passed since the
oldest was queued, a send found no room, or a flush or close asks (every whole
batch queued when it fell behind, or gathered while every connection's
requests in flight waited for answers), and owns the
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

Where the parts live: the settings in :mod:`~hostbroker.client.producer_settings`,
batch encoding and compression in :mod:`~hostbroker.client.producer_batches`,
the async queue and sending thread in :mod:`~hostbroker.client.producer_queue`,
requests, answers and retries in :mod:`~hostbroker.client.producer_requests`.
This module is the Producer's caller side: construction, the checks every
send makes in the caller's thread, sync mode, flush and close.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from hostbroker.client.cluster import Cluster
from hostbroker.client.encoder import DefaultEncoder, Encoder
from hostbroker.client.errors import (
    DeliveryError,
    DeliveryFailure,
    ProducerError,
    RecordTooLargeError,
)
from hostbroker.client.partitioner import DefaultPartitioner, Partitioner
from hostbroker.client.producer_batches import encode_batch, take_batch
from hostbroker.client.producer_queue import AsyncQueue
from hostbroker.client.producer_requests import (
    MAX_TOPIC_BYTES,
    PARTITION_OVERHEAD,
    REQUEST_OVERHEAD,
    RETRIABLE_CODES,
    Dispatcher,
    PendingSet,
    ProducerCallbacks,
    SentRequest,
    retriable,
)
from hostbroker.client.producer_settings import PRODUCER_SETTINGS
from hostbroker.client.settings import broker_uris, resolve
from hostbroker.client.throttle_stats import ThrottleStats
from hostbroker.client.zkcluster import ZkCluster
from hostbroker.cluster.zkread import Bounds
from hostbroker.errors import ConfigError
from hostbroker.log.message import MIN_LENGTH_V1
from hostbroker.log.segments import validate_topic_name
from hostbroker.zkconnect import parse_connect

__all__ = [
    "PRODUCER_SETTINGS",
    "RETRIABLE_CODES",
    "Producer",
    "ProducerCallbacks",
    "RecordMetadata",
    "SentRequest",
    "encode_batch",
    "retriable",
    "take_batch",
]


class RecordMetadata(NamedTuple):
    """Where an acknowledged message is: ``offset`` is its entry's byte offset
    (every message of a compressed wrapper has the wrapper's offset)."""

    topic: str
    partition: int
    offset: int


class Producer(AsyncQueue):
    """Sends messages to topics; see the module docstring and docs/producer.md.

    ``bootstrap`` (a URI or a sequence of URIs) overrides ``broker.list``;
    ``config`` holds dotted keys, ``options`` the same keys with ``_`` for
    ``.``. Raises ConfigError for a bad setting before any I/O. With
    ``zookeeper.connect`` (no broker list then) brokers and partitions come
    from ZooKeeper (:mod:`hostbroker.client.zkcluster`): the constructor
    connects, and raises ZooKeeperUnavailable when no server answers within
    ``zookeeper.connection.timeout.ms``.
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
        zookeeper = settings["zookeeper.connect"].strip()
        if zookeeper:
            if (bootstrap is not None or "broker.list" in (config or {})
                    or "broker_list" in options):
                raise ConfigError("zookeeper.connect: brokers come from ZooKeeper; give "
                                  "no broker list (bootstrap or broker.list) with it")
            parse_connect(zookeeper)
            self.brokers: tuple[str, ...] = ()
        else:
            self.brokers = tuple(broker_uris(bootstrap, settings))
        self.zookeeper = zookeeper
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
        if zookeeper:  # connects now: a ZooKeeper that does not answer is refused here
            cluster: Cluster | ZkCluster = ZkCluster(
                zookeeper, session_timeout_ms=settings["zookeeper.session.timeout.ms"],
                connection_timeout_ms=settings["zookeeper.connection.timeout.ms"],
                registration_wait_ms=settings["zookeeper.connection.timeout.ms"],
                bounds=Bounds.of(settings), retry_backoff_ms=settings["retry.backoff.ms"],
                max_retries=settings["message.send.max.retries"],
                refresh_interval_ms=settings["topic.metadata.refresh.interval.ms"])
        else:
            cluster = Cluster(self.brokers, client_id=settings["client.id"],
                              timeout=settings["request.timeout.ms"] / 1000,
                              refresh_interval_ms=settings["topic.metadata.refresh.interval.ms"],
                              retry_backoff_ms=settings["retry.backoff.ms"],
                              max_retries=settings["message.send.max.retries"], tls=settings)
        self._dispatcher = Dispatcher(settings, cluster, partitioner or DefaultPartitioner(),
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
            self._finished: list[PendingSet] = []

    @staticmethod
    def _check(settings) -> None:
        need = (settings["message.max.bytes"] + 4 + REQUEST_OVERHEAD + PARTITION_OVERHEAD
                + MAX_TOPIC_BYTES + len(settings["client.id"].encode()))
        if settings["max.request.bytes"] < need:
            raise ConfigError(
                f"max.request.bytes: must be at least {need} to hold one message of "
                f"message.max.bytes (got {settings['max.request.bytes']})")
        if settings["queue.bytes"] < settings["message.max.bytes"]:
            raise ConfigError(
                f"queue.bytes: must be at least message.max.bytes "
                f"({settings['message.max.bytes']}) to hold one message "
                f"(got {settings['queue.bytes']})")
        if settings["batch.size"] > settings["queue.size"]:
            raise ConfigError(
                f"batch.size: must not exceed queue.size ({settings['queue.size']})"
                f" (got {settings['batch.size']})")

    def __repr__(self) -> str:
        mode = "async" if self.is_async else "sync"
        state = "closed" if self._closed else "open"
        where = f"zookeeper {self.zookeeper}" if self.zookeeper else ",".join(self.brokers)
        return f"<Producer {mode} {where} {state}>"

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
    def stats(self) -> dict[str, float]:
        """Counters in messages (``requests`` and ``retries``: requests sent, sets retried),
        ``queued``, the messages waiting in the async queue, and Kafka's
        ``produce-throttle-time-avg`` and ``produce-throttle-time-max``: how long the
        brokers held the answers for a quota, in ms (over the last minute at most, as
        Kafka's; :attr:`throttle` has the totals since the producer was made)."""
        stats: dict[str, float] = dict(self._stats)
        if self.is_async:
            stats["enqueued"] = self._taken + self._queued
        stats["queued"] = self._queued if self.is_async else 0
        stats.update(self._dispatcher.throttle.stats())
        return stats

    @property
    def throttle(self) -> ThrottleStats:
        """How long the brokers held this producer's answers for a quota."""
        return self._dispatcher.throttle

    def partitions_for(self, topic: str) -> tuple[tuple[int, int], ...] | None:
        """Cluster mode: ``topic``'s sorted ``(broker_id, partition)`` pairs in the
        producer's latest picture of ZooKeeper, which an explicit ``partition=i``
        indexes (empty while no live broker has registered the topic); for a
        replicated topic ``(leader, partition)`` per global partition, as last read
        (leader -1: none live, or not looked up yet: nothing sent to it so far).
        None for a producer given brokers, whose explicit partitions are the
        broker's own (a replicated topic's: its global ones)."""
        cluster = self._dispatcher.cluster
        if not isinstance(cluster, ZkCluster):
            return None
        known = cluster.cached(topic)
        if known is not None and known.replicated:
            return tuple((ref.broker_id, ref.partition) for ref in known.partitions)
        snapshot = cluster.snapshot
        count = snapshot.replicated.get(topic)
        if count:
            return tuple((-1, p) for p in range(count))
        return tuple(snapshot.partitions(topic))

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

    def _set_done(self, s: PendingSet) -> None:
        if not self.is_async:
            self._record(s)
            self._finished.append(s)
            return
        with self._lock:
            self._record(s)
            self._ended += len(s.values)
            if self._ended == self._taken + self._queued:
                self._idle.notify_all()

    def _record(self, s: PendingSet) -> None:
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

    def _run_sync(self, items, count: int) -> list[PendingSet]:
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

    def _metadata(self, finished: list[PendingSet]) -> list[RecordMetadata] | None:
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
                    left = self._taken + self._queued - self._ended
                    raise TimeoutError(
                        f"flush: {left} message{'' if left == 1 else 's'} still outstanding"
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
