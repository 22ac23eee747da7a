"""The high-level consumer: a group's partitions as streams of messages.

:class:`ConsumerConnector` turns a subscription (``{topic: n}``, or a
:class:`Whitelist` / :class:`Blacklist` of topics and ``n``) into ``n``
iterators (:class:`KafkaStream`) of :class:`MessageAndMetadata`. Each
stream is fed by partitions of its own: a :class:`PartitionAssignor` spreads
the partitions over the streams (standalone: this connector owns every
partition of its topics, dealt round-robin).

Threads. ``num.consumer.fetchers`` fetcher threads, each with its own
connection, fetch their partitions with one (long-poll) FETCH per round and
put each non-empty :class:`FetchedSet` (a *chunk*) on the queue of the
partition's stream. A queue holds at most ``queued.max.message.chunks``
chunks per fetcher feeding it (a fetcher asks only for partitions whose
stream has room; fetchers that share a stream may each fill that room at
once), so memory stays bounded whatever the consumers' pace. The first
fetcher also does the housekeeping: every ``topic.refresh.interval.ms`` it looks for new
topics and partitions of the subscription (a filter never matches internal
topics, whose names start with ``__``), and every
``auto.commit.interval.ms`` it commits offsets. The streams are read in the
caller's threads (one thread per stream, or one thread for several).

Offsets. A stream keeps, per partition, the ``next_offset`` of the last
message it handed out. :meth:`ConsumerConnector.commit_offsets` stores those
positions through an :class:`OffsetStorage` (default
:class:`BrokerOffsetStorage`: the broker's OFFSET_COMMIT / OFFSET_FETCH),
and a new connector of the same ``group.id`` resumes from them. Commit after
processing what you were handed and you get at-least-once delivery. The
interval commit is more careful: it stores only what a stream has moved past
(the message in the caller's hands when it runs is not committed), so a
crash between two commits replays messages but never skips one. Where no
offset is stored, or the stored one is outside the log,
``auto.offset.reset`` chooses the earliest or latest offset.

ZooKeeper-coordinated groups (docs/spec/zookeeper.md) plug in through the
two interfaces: a rebalancing assignor and a ZooKeeper offset storage.
"""

from __future__ import annotations

import abc
import logging
import queue
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from hostbroker.client.connection import ConnectionClosedError
from hostbroker.client.consumer import (EARLIEST, FETCH_SETTINGS, LATEST, FetchedSet,
                                        SimpleConsumer, _Connector)
from hostbroker.client.errors import BrokerError, ConsumerTimeoutError, OffsetOutOfRangeError
from hostbroker.client.settings import broker_uris, resolve
from hostbroker.config import Setting, between, one_of
from hostbroker.errors import ConfigError, ErrorCode, HostbrokerError, ProtocolError
from hostbroker.protocol import api

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

INTERNAL_TOPIC_PREFIX = "__"


GROUP_SETTINGS: tuple[Setting, ...] = FETCH_SETTINGS + (
    Setting("group.id", str, "", "The consumer group whose offsets this consumer stores "
            "(required)."),
    Setting("consumer.timeout.ms", int, -1,
            "A stream with no message for this long raises ConsumerTimeoutError "
            "(-1: wait forever).",
            lambda v: None if v == -1 or v >= 0 else "must be -1 or at least 0"),
    Setting("auto.commit.enable", bool, True,
            "Commit offsets every auto.commit.interval.ms, and on shutdown()."),
    Setting("auto.commit.interval.ms", int, 60000, "How often offsets are committed.",
            between(1, 2**31 - 1)),
    Setting("auto.offset.reset", str, "latest",
            "Where to start when the group has no offset for a partition, or its offset is "
            "outside the log: earliest or latest.", one_of("earliest", "latest")),
    Setting("queued.max.message.chunks", int, 4,
            "Fetched sets each stream's queue holds; fetching for a stream pauses while "
            "it is full.", between(1, 100000)),
    Setting("topic.refresh.interval.ms", int, 30000,
            "How often the consumer looks for new topics and partitions of its subscription.",
            between(1, 2**31 - 1)),
    Setting("num.consumer.fetchers", int, 1,
            "Fetcher threads, each with its own connection and share of the partitions.",
            between(1, 64)),
    Setting("retry.backoff.ms", int, 200,
            "Pause before fetching again after a connection failure or a transient error.",
            between(0, 2**31 - 1)),
)

# Errors of one partition that may pass: fetch it again after a pause.
_TRANSIENT = frozenset({ErrorCode.STORAGE_ERROR, ErrorCode.BROKER_NOT_AVAILABLE,
                        ErrorCode.REQUEST_TIMED_OUT, ErrorCode.UNKNOWN})


class MessageAndMetadata(NamedTuple):
    """One message handed out by a stream; commit ``next_offset`` once it is processed."""

    topic: str
    partition: int
    offset: int
    next_offset: int
    value: bytes


_new_message = tuple.__new__


# Topic filters.


class TopicFilter:
    """Which topics a filter subscription takes; ``regex`` must match a whole name."""

    def __init__(self, regex: str):
        try:
            self.pattern = re.compile(regex)
        except re.error as exc:
            raise ConfigError(f"topic filter {regex!r}: {exc}") from None
        self.regex = regex

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.regex!r})"

    def matches(self, topic: str) -> bool:
        raise NotImplementedError


class Whitelist(TopicFilter):
    """Topics whose whole name matches ``regex`` (never internal ``__`` topics)."""

    def matches(self, topic: str) -> bool:
        return (not topic.startswith(INTERNAL_TOPIC_PREFIX)
                and self.pattern.fullmatch(topic) is not None)


class Blacklist(TopicFilter):
    """Topics whose whole name does not match ``regex`` (never internal ``__`` topics)."""

    def matches(self, topic: str) -> bool:
        return (not topic.startswith(INTERNAL_TOPIC_PREFIX)
                and self.pattern.fullmatch(topic) is None)


# Assignment and offset storage: where a coordinated group plugs in.


class PartitionAssignor(abc.ABC):
    """Decides which partitions feed which stream."""

    @abc.abstractmethod
    def assign(self, partitions: Mapping[str, Sequence[int]],
               streams: int) -> list[list[TopicPartition]]:
        """For ``topic -> partitions`` this consumer may read, the partitions of each of
        ``streams`` streams (a list per stream; a partition in at most one)."""


class RoundRobinAssignor(PartitionAssignor):
    """Standalone: every partition, sorted, dealt to the streams in turn."""

    def assign(self, partitions: Mapping[str, Sequence[int]],
               streams: int) -> list[list[TopicPartition]]:
        out: list[list[TopicPartition]] = [[] for _ in range(streams)]
        every = sorted((topic, p) for topic, ps in partitions.items() for p in ps)
        for i, tp in enumerate(every):
            out[i % streams].append(tp)
        return out


class OffsetStorage(abc.ABC):
    """Where a group's consumed offsets live between runs. Must be thread safe."""

    @abc.abstractmethod
    def fetch(self, group: str, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The stored offset of each partition; -1 where the group has none."""

    @abc.abstractmethod
    def commit(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Store ``offsets``; raises if any is not stored."""

    def close(self) -> None:
        """Release connections; the storage is not used afterwards."""


class BrokerOffsetStorage(OffsetStorage):
    """Offsets kept by the broker (OFFSET_COMMIT / OFFSET_FETCH), over a connection of its own."""

    def __init__(self, bootstrap: str | Sequence[str] | None = None,
                 config: Mapping[str, Any] | None = None, **options: Any):
        settings = resolve(FETCH_SETTINGS, config, options)
        self._connector = _Connector(broker_uris(bootstrap, settings), settings)
        self._lock = threading.Lock()

    def _request(self, request: api.Request) -> Any:
        with self._lock:
            return self._connector.request(request)

    def fetch(self, group: str, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        asked = tuple(api.OffsetFetchPartition(t, p) for t, p in partitions)
        if not asked:
            return {}
        out: dict[TopicPartition, int] = {}
        for result in self._request(api.OffsetFetchRequest(group, asked)).partitions:
            if result.error_code not in (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                raise BrokerError(result.error_code, topic=result.topic,
                                  partition=result.partition)
            out[(result.topic, result.partition)] = result.offset
        return out

    def commit(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        entries = tuple(api.OffsetCommitPartition(t, p, o, None)
                        for (t, p), o in sorted(offsets.items()))
        if not entries:
            return
        for result in self._request(api.OffsetCommitRequest(group, entries)).partitions:
            if result.error_code != ErrorCode.NONE:
                raise BrokerError(result.error_code, topic=result.topic,
                                  partition=result.partition)

    def close(self) -> None:
        with self._lock:
            self._connector.close()


# Streams.

_END = object()  # put on a stream's queue by shutdown()


class KafkaStream:
    """An iterator of :class:`MessageAndMetadata` fed by the partitions assigned to it.

    Raises ConsumerTimeoutError after ``consumer.timeout.ms`` without a
    message (iterate again to keep waiting), an error a fetcher met for one of
    its partitions (OffsetOutOfRangeError with no reset possible,
    MessageSizeTooLargeError, BrokerError), the error that stopped its
    fetcher, and InvalidMessageError for a message that fails its check. Ends (StopIteration) after
    :meth:`ConsumerConnector.shutdown`. Read one stream from one thread.
    """

    def __init__(self, connector: ConsumerConnector, index: int, chunks: int, timeout_ms: int):
        self.index = index
        self.partitions: list[TopicPartition] = []
        self._connector = connector
        # Bounded by the fetchers, which ask only when room() > 0, not by the
        # queue: fetchers sharing a stream may fill the same room at once, and
        # an error or the end must always find a place after the chunks.
        self._queue: queue.Queue = queue.Queue()
        self._chunks = chunks
        self._timeout = None if timeout_ms < 0 else timeout_ms / 1000
        self._current: Iterator[tuple[int, int, bytes]] | None = None
        self._topic = ""
        self._partition = -1
        self._last: tuple[TopicPartition, int] | None = None  # handed out, not yet moved past
        self._ended = False

    def __repr__(self) -> str:
        return f"<KafkaStream {self.index} of {self.partitions}>"

    def __iter__(self) -> KafkaStream:
        return self

    def __next__(self) -> MessageAndMetadata:
        last = self._last
        if last is not None:
            self._connector._done[last[0]] = last[1]
            self._last = None
        while True:
            if self._ended or self._connector.closed:
                self._ended = True
                raise StopIteration
            current = self._current
            if current is not None:
                message = next(current, None)
                if message is not None:
                    offset, next_offset, value = message
                    self._last = ((self._topic, self._partition), next_offset)
                    return _new_message(MessageAndMetadata, (
                        self._topic, self._partition, offset, next_offset, value))
                self._current = None
            self._take()

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
            self._topic, self._partition = item.topic, item.partition
            self._current = iter(item)

    def handed(self) -> tuple[TopicPartition, int] | None:
        """The partition and next_offset of the message last handed out and not moved past."""
        return self._last

    def room(self) -> int:
        """Chunks the queue may still take (below 0 when fetchers filled it at once)."""
        return self._chunks - self._queue.qsize()

    def put(self, item: Any) -> None:
        """For fetchers, which ask only for partitions of streams with room; never blocks."""
        self._queue.put_nowait(item)

    def fail(self, error: BaseException) -> None:
        """For a fetcher that stops: raise ``error`` in the reader after what is queued."""
        self._queue.put_nowait(error)

    def end(self) -> None:
        """Drop what is queued and end the iteration (after the fetchers stopped)."""
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._queue.put_nowait(_END)


# Fetchers.


class _Fetcher:
    """One thread and connection fetching its partitions into their streams' queues."""

    def __init__(self, connector: ConsumerConnector, index: int):
        self.connector = connector
        self.index = index
        self.consumer = connector._new_consumer()
        self.positions: dict[TopicPartition, int] = {}  # next offset to fetch
        self.streams: dict[TopicPartition, KafkaStream] = {}
        self.paused_until: dict[TopicPartition, float] = {}
        self.incoming: list[tuple[TopicPartition, KafkaStream, int]] = []
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.thread = threading.Thread(target=self.run, name=f"hb-consumer-fetcher-{index}",
                                       daemon=True)

    def add(self, tp: TopicPartition, stream: KafkaStream, offset: int) -> None:
        with self.lock:
            self.incoming.append((tp, stream, offset))
        self.wake.set()

    def run(self) -> None:
        connector = self.connector
        backoff = connector.settings["retry.backoff.ms"] / 1000
        while not connector.closed:
            try:
                if self.index == 0:
                    connector._housekeeping(self)
                self._round()
            except (OSError, ConnectionClosedError, ProtocolError) as exc:
                log.warning("consumer fetcher %d: %s; retrying", self.index, exc)
                self.consumer.close()
                self.wake.wait(backoff)
                self.wake.clear()
            except BrokerError as exc:  # an error frame, or a reset that could not be done
                log.warning("consumer fetcher %d: %s; retrying", self.index, exc)
                self.wake.wait(backoff)
                self.wake.clear()
            except Exception as exc:
                # Nothing a retry cures: stop, and have the readers raise it
                # rather than wait for ever.
                log.exception("consumer fetcher %d stopped", self.index)
                for stream in set(self.streams.values()):
                    stream.fail(exc)
                break
        self.consumer.close()

    def _take_incoming(self) -> None:
        with self.lock:
            incoming, self.incoming = self.incoming, []
        for tp, stream, offset in incoming:
            self.streams[tp] = stream
            self.positions[tp] = offset

    def _round(self) -> None:
        """One FETCH for every partition whose stream has room, or a wait for room."""
        # Cleared before looking at the queues: a chunk taken after this
        # sets it again, so no wake-up is lost.
        self.wake.clear()
        self._take_incoming()
        now = time.monotonic()
        # Room is not reserved for the time of a fetch (a long poll of an idle
        # partition would keep it from the others): another fetcher feeding
        # the same stream may fill it meanwhile, by at most as much.
        room = {id(s): s.room() for s in set(self.streams.values())}
        parts = []
        for tp, offset in self.positions.items():
            stream = self.streams[tp]
            if room[id(stream)] > 0 and self.paused_until.get(tp, 0) <= now:
                room[id(stream)] -= 1
                parts.append(api.FetchPartition(tp[0], tp[1], offset, self.consumer.fetch_size))
        if not parts:
            self.wake.wait(self.connector._idle_wait())
            return
        self.consumer.send_fetch(parts)
        results = self.consumer.receive_fetch(parts, raise_on_error=False)
        fetched = False
        for part, result in zip(parts, results):
            tp = (part.topic, part.partition)
            if isinstance(result, FetchedSet):
                if result.entries:
                    fetched = True
                    self.positions[tp] = result.next_offset
                    self.streams[tp].put(result)
            else:
                self._failed(tp, result)
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
        elif code in _TRANSIENT:
            log.warning("consumer: %s; retrying", error)
            backoff = self.connector.settings["retry.backoff.ms"] / 1000
            self.paused_until[tp] = time.monotonic() + backoff
        else:
            # MessageSizeTooLargeError or a code no retry cures: the reader must know.
            self.streams[tp].put(error)
            del self.positions[tp]


# The connector.


class ConsumerConnector:
    """The high-level consumer of one ``group.id``.

    ``bootstrap`` (a URI or a list) overrides ``broker.list``; settings as for
    :class:`SimpleConsumer` plus GROUP_SETTINGS. ``offset_storage`` defaults to
    :class:`BrokerOffsetStorage` on the same brokers, ``assignor`` to
    :class:`RoundRobinAssignor`. Streams are created once per connector,
    by :meth:`create_message_streams` or :meth:`create_message_streams_by_filter`;
    :meth:`shutdown` ends them. Usable as a context manager (shutdown on exit).
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str] | None = None,
        config: Mapping[str, Any] | None = None,
        *,
        offset_storage: OffsetStorage | None = None,
        assignor: PartitionAssignor | None = None,
        **options: Any,
    ):
        self.settings = resolve(GROUP_SETTINGS, config, options)
        self.group: str = self.settings["group.id"]
        if not self.group:
            raise ConfigError("group.id: required by the high-level consumer")
        self._uris = broker_uris(bootstrap, self.settings)
        if offset_storage is None:
            offset_storage = BrokerOffsetStorage(self._uris, self._fetch_config())
            self._own_storage = True
        else:
            self._own_storage = False
        self.offset_storage = offset_storage
        self.assignor = assignor or RoundRobinAssignor()
        self.closed = False
        self._streams: list[KafkaStream] = []
        # Subscription: per topic its streams, or one filter over all of them.
        self._topic_streams: dict[str, list[KafkaStream]] = {}
        self._filter: TopicFilter | None = None
        self._fetchers: list[_Fetcher] = []
        self._owned: dict[TopicPartition, KafkaStream] = {}
        self._done: dict[TopicPartition, int] = {}  # moved past: safe for the interval commit
        self._committed: dict[TopicPartition, int] = {}
        self._commit_lock = threading.Lock()
        self._next_refresh = 0.0
        self._next_commit = 0.0
        self._shutdown_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<ConsumerConnector group {self.group!r}, {len(self._owned)} partitions>"

    def __enter__(self) -> ConsumerConnector:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def _fetch_config(self) -> dict[str, Any]:
        return {s.key: self.settings[s.key] for s in FETCH_SETTINGS}

    def _new_consumer(self) -> SimpleConsumer:
        return SimpleConsumer(self._uris, self._fetch_config(), auto_offset_reset="none")

    # Subscriptions.

    def create_message_streams(
        self, topic_count: Mapping[str, int]
    ) -> dict[str, list[KafkaStream]]:
        """``n`` streams for each ``topic: n``; partitions of a topic created later join it."""
        for topic, n in topic_count.items():
            if not isinstance(n, int) or n < 1:
                raise ValueError(f"{topic}: the number of streams must be at least 1, not {n!r}")
        self._begin()
        for topic, n in topic_count.items():
            self._topic_streams[topic] = self._new_streams(n)
        self._start()
        return {topic: list(streams) for topic, streams in self._topic_streams.items()}

    def create_message_streams_by_filter(self, topic_filter: TopicFilter,
                                         num_streams: int = 1) -> list[KafkaStream]:
        """``num_streams`` streams over every topic the filter takes, now or later."""
        if not isinstance(topic_filter, TopicFilter):
            raise TypeError(f"expected a Whitelist or Blacklist, not {topic_filter!r}")
        if not isinstance(num_streams, int) or num_streams < 1:
            raise ValueError(f"the number of streams must be at least 1, not {num_streams!r}")
        self._begin()
        self._filter = topic_filter
        streams = self._new_streams(num_streams)
        self._start()
        return streams

    def _begin(self) -> None:
        if self.closed:
            raise RuntimeError("this consumer connector is shut down")
        if self._streams:
            raise RuntimeError("streams are created once per connector")

    def _new_streams(self, n: int) -> list[KafkaStream]:
        streams = [KafkaStream(self, len(self._streams) + i,
                               self.settings["queued.max.message.chunks"],
                               self.settings["consumer.timeout.ms"]) for i in range(n)]
        self._streams += streams
        return streams

    def _start(self) -> None:
        self._fetchers = [_Fetcher(self, i) for i in range(self.settings["num.consumer.fetchers"])]
        # The first assignment runs here, so that a broker that cannot be
        # reached or a group whose offsets cannot be read fails the call.
        try:
            self._refresh(self._fetchers[0].consumer)
        except BaseException:
            for fetcher in self._fetchers:  # their threads never start
                fetcher.consumer.close()
            raise
        self._next_commit = time.monotonic() + self.settings["auto.commit.interval.ms"] / 1000
        for fetcher in self._fetchers:
            fetcher.thread.start()

    # Housekeeping, in the first fetcher's thread.

    def _idle_wait(self) -> float:
        due = min(self._next_refresh, self._next_commit) - time.monotonic()
        return min(max(due, 0.0), 1.0)

    def _housekeeping(self, fetcher: _Fetcher) -> None:
        now = time.monotonic()
        if now >= self._next_refresh:
            self._refresh(fetcher.consumer)
        if self.settings["auto.commit.enable"] and now >= self._next_commit:
            self._next_commit = now + self.settings["auto.commit.interval.ms"] / 1000
            try:
                self._commit(dict(self._done))
            except (HostbrokerError, OSError) as exc:
                log.warning("consumer group %s: auto commit failed: %s", self.group, exc)

    def _refresh(self, consumer: SimpleConsumer) -> None:
        """Find the subscription's partitions; start the new ones where the group left off."""
        self._next_refresh = time.monotonic() + self.settings["topic.refresh.interval.ms"] / 1000
        topics = sorted(self._topic_streams) if self._filter is None else []
        metadata = consumer.metadata(topics)
        found: dict[str, list[int]] = {}
        for topic in metadata.topics:
            if topic.error_code != ErrorCode.NONE:
                continue
            if self._filter is not None and not self._filter.matches(topic.topic):
                continue
            found[topic.topic] = sorted(p.partition for p in topic.partitions)
        if self._filter is not None:
            plan = self._plan(found, self._streams)
        else:
            plan = {}
            for topic, streams in self._topic_streams.items():
                if topic in found:
                    plan.update(self._plan({topic: found[topic]}, streams))
        new = {tp: stream for tp, stream in plan.items() if tp not in self._owned}
        if not new:
            return
        stored = self.offset_storage.fetch(self.group, sorted(new))
        for i, (tp, stream) in enumerate(sorted(new.items(), key=lambda item: item[0])):
            offset = stored.get(tp, -1)
            if offset < 0:
                offset = self._reset_offset(consumer, tp)
            self._owned[tp] = stream
            stream.partitions.append(tp)
            self._fetchers[i % len(self._fetchers)].add(tp, stream, offset)

    def _plan(self, partitions: Mapping[str, Sequence[int]],
              streams: Sequence[KafkaStream]) -> dict[TopicPartition, KafkaStream]:
        assignment = self.assignor.assign(partitions, len(streams))
        if len(assignment) != len(streams):
            raise ValueError(
                f"{self.assignor!r} assigned {len(assignment)} streams, not {len(streams)}")
        plan: dict[TopicPartition, KafkaStream] = {}
        for stream, tps in zip(streams, assignment):
            for tp in tps:
                # A partition stays on the stream that first had it while
                # this connector lives: moving it would need a rebalance.
                plan[tuple(tp)] = self._owned.get(tuple(tp), stream)
        return plan

    def _reset_offset(self, consumer: SimpleConsumer, tp: TopicPartition) -> int:
        reset = self.settings["auto.offset.reset"]
        when = EARLIEST if reset == "earliest" else LATEST
        (offset,) = consumer.offsets_before(tp[0], tp[1], when)
        return offset

    def _forget(self, tp: TopicPartition) -> None:
        stream = self._owned.pop(tp, None)
        if stream is not None and tp in stream.partitions:
            stream.partitions.remove(tp)

    def _room_made(self) -> None:
        for fetcher in self._fetchers:
            fetcher.wake.set()

    # Offsets.

    def positions(self) -> dict[TopicPartition, int]:
        """Per partition, the next_offset of the last message handed out (what a commit stores)."""
        handed = dict(self._done)
        for stream in self._streams:
            last = stream.handed()
            if last is not None:
                handed[last[0]] = last[1]
        return handed

    def commit_offsets(self) -> None:
        """Store the positions of every partition a message was handed out of since the last
        commit. Raises the storage's error (BrokerError, connection errors)."""
        self._commit(self.positions())

    def _commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        with self._commit_lock:
            changed = {tp: o for tp, o in offsets.items() if self._committed.get(tp) != o}
            if changed:
                self.offset_storage.commit(self.group, changed)
                self._committed.update(changed)

    def shutdown(self) -> None:
        """Stop fetching, commit (with ``auto.commit.enable``) and end every stream.

        Safe to call twice and from any thread; a stream waiting for a
        message stops waiting.
        """
        with self._shutdown_lock:
            if self.closed:
                return
            self.closed = True
        for fetcher in self._fetchers:
            fetcher.wake.set()
        for fetcher in self._fetchers:
            if fetcher.thread.is_alive() and fetcher.thread is not threading.current_thread():
                fetcher.thread.join()
        try:
            if self.settings["auto.commit.enable"] and self._streams:
                self.commit_offsets()
        finally:
            for stream in self._streams:
                stream.end()
            if self._own_storage:
                self.offset_storage.close()
