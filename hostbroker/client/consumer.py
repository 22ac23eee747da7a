"""SimpleConsumer: fetch message sets from given partitions at given offsets.

The caller owns the offsets. :meth:`SimpleConsumer.fetch` asks one partition
for up to ``max_bytes`` of its log and returns a
:class:`~hostbroker.client.fetched.FetchedSet`, whose messages unpack as
``(offset, next_offset, value)``: inner messages of a compressed wrapper
included, a trailing partial entry (a fetch cut at ``max_bytes``) left for
the next fetch, which starts at the set's
``next_offset``. :meth:`SimpleConsumer.multifetch` asks several partitions in
one FETCH request, :meth:`SimpleConsumer.offsets_before` asks where a log
starts, ends, or stood at a time, and :meth:`SimpleConsumer.sets` /
:meth:`SimpleConsumer.messages` walk one partition with the next fetch
already on the wire while the caller reads the current set.

Offsets are byte positions (docs/spec/log-format.md, "Offsets"). A fetch
whose answer holds no whole entry although the log goes on (the first entry
is larger than ``max_bytes``) is repeated with a larger size, at least double
and at least the entry's own size, up to ``fetch.message.max.bytes``; past it
:class:`MessageSizeTooLargeError`. So a fetch never spins and never stalls:
it returns at least one message, or none only at the log end, or raises. In
a fetch of several partitions, one that the broker left out because the
whole answer reached its ``fetch.max.bytes`` (an empty set, or part of an
entry that fits ``max_bytes``) comes back empty, without a fetch of its own:
the next fetch reads it.

An offset outside the log raises :class:`OffsetOutOfRangeError` unless
``auto.offset.reset`` says to move to the log's earliest or latest offset;
the set then says where it moved from (``reset_from``).

One connection, opened on first use and opened again on the next call after
an error closed it; the brokers of ``broker.list`` are tried in order.

A partition of a replicated topic is served by its leader only: a broker
that is not (NOT_LEADER_FOR_PARTITION, LEADER_NOT_AVAILABLE, or
UNKNOWN_TOPIC_OR_PARTITION from a broker that holds no replica of it) or a
leader that stops answering sends the consumer to its
:class:`~hostbroker.client.leaders.LeaderMap` (METADATA version 1 of the
``broker.list`` brokers), and the partition is fetched from its leader from
then on, on a connection of its own; after ``refresh.leader.backoff.ms``
the same, at most ``refresh.leader.max.retries`` times in a row, then the
error is raised. Offsets are byte offsets, the same on every replica, so a
walk goes on at the new leader where it stopped at the old one; a consumer
reads only below the high watermark, what every in-sync replica holds. A call
whose kept connection turns out dead (the broker restarted) is repeated once
on a new one: fetches and offset requests may be repeated. Not
thread safe: give each thread its own consumer.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from hostbroker.client.connection import DEFAULT_CLIENT_ID, BrokerConnection, parse_uri
from hostbroker.client.consumer_leaders import LeaderRouting, _Connector, _leader_trouble
from hostbroker.client.errors import (BrokerError, InvalidEntryError, MessageSizeTooLargeError,
                                      OffsetOutOfRangeError)
from hostbroker.client.fetched import DEFAULT_FETCH_MESSAGE_MAX_BYTES, FetchedSet
from hostbroker.client.settings import QUOTA_HOLD_SETTING, TLS_SETTINGS, broker_uris, resolve
from hostbroker.client.throttle_stats import ThrottleStats, version_refused
from hostbroker.config import Setting, at_least, between, one_of, split_list
from hostbroker.errors import ErrorCode, ProtocolError
from hostbroker.log.message import LENGTH_SIZE, MIN_LENGTH_V0
from hostbroker.protocol import api, throttled

log = logging.getLogger(__name__)

LATEST = api.LATEST_TIME
EARLIEST = api.EARLIEST_TIME

DEFAULT_BROKER = "tcp://127.0.0.1:9092"
_INT32_MAX = 2**31 - 1


def _uris(value: str) -> str | None:
    for uri in split_list(value):
        try:
            parse_uri(uri)
        except ValueError as exc:
            return str(exc)
    return None


# Shared by SimpleConsumer and the high-level consumer (hostbroker.client.group).
FETCH_SETTINGS: tuple[Setting, ...] = (
    Setting("broker.list", str, DEFAULT_BROKER,
            "Brokers to connect to, tried in order (the `bootstrap` argument overrides it).",
            _uris, kind="list"),
    Setting("client.id", str, DEFAULT_CLIENT_ID, "Client id sent with every request."),
    Setting("socket.timeout.ms", int, 30000,
            "Bound on connecting, sending and waiting for an answer (plus the long poll).",
            at_least(1)),
    Setting("socket.connection.setup.timeout.ms", int, 10000,
            "Bound on connecting and on the wait for a new connection's first answer (plus "
            "the long poll), when shorter than socket.timeout.ms: a peer that is not a "
            "broker fails this fast.",
            at_least(1)),
    Setting("fetch.size", int, 1024 * 1024,
            "Bytes asked of each partition per fetch (max_bytes).", between(1, _INT32_MAX)),
    Setting("fetch.message.max.bytes", int, DEFAULT_FETCH_MESSAGE_MAX_BYTES,
            "Largest entry, length field included, the fetch size grows to; beyond it "
            "MessageSizeTooLargeError. At least the topic's max.message.bytes + 4. Also the "
            "most a compressed wrapper may inflate to (beyond it DecompressedTooLargeError).",
            between(1, _INT32_MAX)),
    Setting("fetch.wait.max.ms", int, 100,
            "Long poll: how long the broker may hold a fetch that finds under fetch.min.bytes.",
            between(0, _INT32_MAX)),
    Setting("fetch.min.bytes", int, 1,
            "Bytes a fetch waits for (over all its partitions) before the broker answers.",
            between(0, _INT32_MAX)),
    Setting("check.crcs", bool, True, "Check the CRC of every message read."),
    Setting("skip.bad.messages", bool, False,
            "Skip an entry that cannot be read (CRC mismatch, a compressed wrapper that does "
            "not decompress or inflates past fetch.message.max.bytes) with a warning in the "
            "log, instead of raising InvalidEntryError."),
    Setting("refresh.leader.backoff.ms", int, 200,
            "Replicated topics: wait before asking again where a partition's leader is "
            "(after NOT_LEADER_FOR_PARTITION, LEADER_NOT_AVAILABLE or a lost leader).",
            between(0, _INT32_MAX)),
    Setting("refresh.leader.max.retries", int, 50,
            "Replicated topics: times in a row a partition's leader is looked for again "
            "before its error is raised (with the backoff: how long a failover is waited "
            "for).", between(0, 100000)),
    QUOTA_HOLD_SETTING,
) + TLS_SETTINGS

CONSUMER_SETTINGS: tuple[Setting, ...] = FETCH_SETTINGS + (
    Setting("auto.offset.reset", str, "none",
            "On an offset outside the log: none (raise OffsetOutOfRangeError), earliest "
            "or latest (move there).", one_of("none", "earliest", "latest")),
)

_RESET_TIMES = {"earliest": EARLIEST, "latest": LATEST}

def _cut_by_answer_limit(part: api.FetchPartition, result: api.FetchPartitionResult,
                         head: bytes) -> bool:
    """Whether a set without a whole entry, after partitions that brought data, was cut
    by the broker's limit on the whole answer (``fetch.max.bytes``: nothing, or less
    than an entry that fits ``max_bytes`` and the log), not by an entry larger than
    ``max_bytes`` or a length that is no entry's; the next fetch reads it."""
    if not head:
        return True
    if len(head) < LENGTH_SIZE:
        return False
    needed = LENGTH_SIZE + int.from_bytes(head[:LENGTH_SIZE], "big", signed=True)
    return (LENGTH_SIZE + MIN_LENGTH_V0 <= needed <= part.max_bytes
            and part.offset + needed <= result.log_end_offset)


class SimpleConsumer(LeaderRouting):
    """Fetches from partitions and offsets the caller chooses.

    ``bootstrap`` (a broker URI, or a list of them) overrides ``broker.list``;
    ``config`` holds dotted keys, ``options`` the same with ``_`` for ``.``
    (CONSUMER_SETTINGS). Bad settings raise ConfigError before any I/O.
    Its FETCHes are version 2, whose answers say how long a quota held them
    (:attr:`stats`); ``throttle_stats`` gathers them with other consumers'
    (the high-level consumer's fetchers share one).
    """

    settings_declared = CONSUMER_SETTINGS

    def __init__(
        self,
        bootstrap: str | Sequence[str] | None = None,
        config: Mapping[str, Any] | None = None,
        *,
        throttle_stats: ThrottleStats | None = None,
        **options: Any,
    ):
        self.throttle = throttle_stats or ThrottleStats("fetch", log)
        self.settings = resolve(self.settings_declared, config, options)
        self._init_routing(broker_uris(bootstrap, self.settings), self.settings)
        self.fetch_size: int = self.settings["fetch.size"]
        self.max_fetch_size: int = max(self.settings["fetch.message.max.bytes"], self.fetch_size)
        self.max_wait_ms: int = self.settings["fetch.wait.max.ms"]
        self.min_bytes: int = self.settings["fetch.min.bytes"]
        self.check_crcs: bool = self.settings["check.crcs"]
        self.skip_bad: bool = self.settings["skip.bad.messages"]
        self.reset: str = self.settings["auto.offset.reset"]

    def __repr__(self) -> str:
        return f"<SimpleConsumer {self._connector.uris}>"

    def __enter__(self) -> SimpleConsumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections; safe to call twice (a later call opens new ones)."""
        self._close_connections()

    @property
    def stats(self) -> dict[str, float]:
        """Kafka's ``fetch-throttle-time-avg`` and ``fetch-throttle-time-max``: how long
        the brokers held this consumer's FETCH answers for a quota, in ms (over
        the last minute at most, as Kafka's; :attr:`throttle` has the totals)."""
        return self.throttle.stats()

    @property
    def connection(self) -> BrokerConnection:
        """The open connection (opened if needed)."""
        return self._connector.get()

    def _request(self, request: api.Request) -> Any:
        return self._connector.request(request)

    # FETCH

    def fetch(self, topic: str, partition: int, offset: int,
              max_bytes: int | None = None) -> FetchedSet:
        """Up to ``max_bytes`` (default ``fetch.size``) of ``topic/partition`` from ``offset``.

        Long-polls up to ``fetch.wait.max.ms`` for ``fetch.min.bytes``. Raises
        OffsetOutOfRangeError (``auto.offset.reset = none``),
        MessageSizeTooLargeError, BrokerError for any other error code, and
        the connection's errors.
        """
        return self.multifetch([(topic, partition, offset, max_bytes or self.fetch_size)])[0]

    def multifetch(self, requests: Iterable[tuple]) -> list[FetchedSet]:
        """Fetch ``(topic, partition, offset[, max_bytes])``s in one FETCH request.

        Sets come back in the order asked. A partition whose answer holds no
        whole entry although its log goes on, or that is out of range with a
        reset policy, is fetched again on its own. Errors as for :meth:`fetch`.
        """
        parts = tuple(self._fetch_partition(r) for r in requests)
        if not parts:
            return []
        out = self._fetch_routed(parts, self.leader_retries)
        for result in out:
            if isinstance(result, Exception):
                raise result
        return out

    def fetch_following(self, parts: Sequence[api.FetchPartition]) -> list[Any]:
        """One FETCH of ``parts`` per leader, a set or an error per partition (as
        :meth:`receive_fetch` with ``raise_on_error=False``). A partition with
        leader trouble has its leader looked up once, without waiting, and is
        fetched again from it; what still fails is returned in its place (the
        caller pauses it: the high-level consumer's fetchers)."""
        return self._fetch_routed(tuple(parts), 1)

    def _fetch_partition(self, request: tuple) -> api.FetchPartition:
        if len(request) == 3:
            topic, partition, offset = request
            max_bytes = self.fetch_size
        else:
            topic, partition, offset, max_bytes = request
            max_bytes = max_bytes or self.fetch_size
        if not 0 < max_bytes <= _INT32_MAX:
            raise ValueError(
                f"max_bytes {max_bytes} for {topic}/{partition}: must be 1 to {_INT32_MAX}")
        if offset < 0:
            raise ValueError(f"offset {offset} for {topic}/{partition}: must not be negative")
        return api.FetchPartition(topic, partition, offset, max_bytes)

    def send_fetch(self, parts: Sequence[api.FetchPartition],
                   connector: _Connector | None = None) -> None:
        """Send one FETCH for ``parts`` without waiting (pipelining; see :meth:`receive_fetch`),
        on ``connector`` (default: the broker list's connection, or for one partition
        of a replicated topic the connection to its leader, once it was looked up)."""
        (connector or self._default_for(parts)).get().send(
            throttled.FetchRequestV2(self.max_wait_ms, self.min_bytes, tuple(parts)))

    def receive_fetch(self, parts: Sequence[api.FetchPartition], *,
                      raise_on_error: bool = True, connector: _Connector | None = None
                      ) -> list[Any]:
        """The sets answering the FETCH of ``parts`` sent earlier, oldest pending first.

        With ``raise_on_error=False`` a partition's error is returned in its
        place (a BrokerError, OffsetOutOfRangeError or
        MessageSizeTooLargeError) instead of raised.
        """
        connector = connector or self._default_for(parts)
        connection = connector.get()
        response = self._fetch_answer(connector, lambda: connection.receive(api.ApiKey.FETCH))
        results = response.partitions
        if len(results) != len(parts):
            raise ProtocolError(f"FETCH of {len(parts)} partitions answered with {len(results)}")
        for part, result in zip(parts, results):
            if (result.topic, result.partition) != (part.topic, part.partition):
                raise ProtocolError(
                    f"FETCH answer for {result.topic}/{result.partition},"
                    f" expected {part.topic}/{part.partition}")
        if len(results) > 1:
            # Settling one partition may send a request, whose answer reuses
            # the buffer the others' sets are still views into.
            results = [dataclasses.replace(r, message_set=bytes(r.message_set)) for r in results]
        out: list[Any] = []
        answered = 0  # message-set bytes of the partitions before this one
        for part, result in zip(parts, results):
            try:
                out.append(self._settle(part, result, cut_possible=answered > 0,
                                        connector=connector))
            except (BrokerError, MessageSizeTooLargeError, InvalidEntryError) as exc:
                if raise_on_error:
                    raise
                out.append(exc)
            answered += len(result.message_set)
        return out

    def _settle(self, part: api.FetchPartition, result: api.FetchPartitionResult,
                reset_from: int | None = None, cut_possible: bool = False,
                connector: _Connector | None = None) -> FetchedSet:
        """The set for one partition's answer, fetching it again alone when it must."""
        while True:
            code = result.error_code
            out_of_range = code == ErrorCode.OFFSET_OUT_OF_RANGE
            if out_of_range and self.reset != "none" and reset_from is None:
                reset_from = part.offset
                when = _RESET_TIMES[self.reset]
                (offset,) = self.offsets_before(part.topic, part.partition, when)
                part = api.FetchPartition(part.topic, part.partition, offset, part.max_bytes)
                result = self._fetch_one(part, connector)
                continue
            if out_of_range:
                raise OffsetOutOfRangeError(part.topic, part.partition, part.offset,
                                            result.log_end_offset)
            if code != ErrorCode.NONE:
                raise BrokerError(code, topic=part.topic, partition=part.partition)
            fetched = FetchedSet(part.topic, part.partition, part.offset, result.message_set,
                                 result.log_end_offset, check_crcs=self.check_crcs,
                                 max_message_bytes=self.max_fetch_size, reset_from=reset_from,
                                 skip_bad=self.skip_bad)
            if (fetched.entries or part.offset >= result.log_end_offset
                    or (cut_possible and _cut_by_answer_limit(part, result, fetched.message_set))):
                return fetched
            part = self._grown(part, fetched.message_set, result.log_end_offset)
            result = self._fetch_one(part, connector)

    def _grown(self, part: api.FetchPartition, head: bytes,
               log_end: int) -> api.FetchPartition:
        """``part`` asking for enough to hold the entry that did not fit in ``head``."""
        needed = None
        if len(head) >= LENGTH_SIZE:
            needed = LENGTH_SIZE + int.from_bytes(head[:LENGTH_SIZE], "big", signed=True)
            # Not an entry's length (the broker holds whole entries only): growing
            # the fetch would never make it one.
            if needed < LENGTH_SIZE + MIN_LENGTH_V0:
                raise InvalidEntryError(part.topic, part.partition, part.offset, -1,
                                        f"length {needed - LENGTH_SIZE} is below the minimum")
            if part.offset + needed > log_end:
                raise InvalidEntryError(part.topic, part.partition, part.offset, -1,
                                        f"length {needed - LENGTH_SIZE} runs past the log end "
                                        f"{log_end}")
        size = max(2 * part.max_bytes, needed or 0)
        if part.max_bytes >= self.max_fetch_size or (needed or 0) > self.max_fetch_size:
            raise MessageSizeTooLargeError(part.topic, part.partition, part.offset,
                                           self.max_fetch_size, needed)
        return api.FetchPartition(part.topic, part.partition, part.offset,
                                  min(size, self.max_fetch_size))

    def _fetch_one(self, part: api.FetchPartition,
                   connector: _Connector | None = None) -> api.FetchPartitionResult:
        # No long poll: the log is known to hold data at this offset.
        connector = connector or self._connector
        response = self._fetch_answer(
            connector, lambda: connector.request(throttled.FetchRequestV2(0, 0, (part,))))
        if len(response.partitions) != 1:
            raise ProtocolError(f"FETCH of one partition answered with {len(response.partitions)}")
        return response.partitions[0]

    def _fetch_answer(self, connector: _Connector, wait: Callable[[], Any]) -> Any:
        """The FETCH v2 answer ``wait()`` brings on ``connector``'s connection, its
        throttle time recorded; an error frame of UNSUPPORTED_VERSION raised as
        VersionRefusedError."""
        try:
            response = wait()
        except BrokerError as exc:  # (an answer came: the connector has its connection)
            raise version_refused(exc, connector.connection.uri, "FETCH version 2") from None
        self.throttle.record(response.throttle_time_ms, connector.connection.uri)
        return response

    def sets(self, topic: str, partition: int, offset: int, *,
             max_bytes: int | None = None, stop_at_end: bool = False) -> Iterator[FetchedSet]:
        """The sets of ``topic/partition`` from ``offset`` on, fetch after fetch.

        The next fetch is sent before a set is handed over, so the broker
        works while the caller reads. Empty sets (a long poll that found
        nothing) are skipped. With ``stop_at_end`` the walk ends at the log
        end it last saw; otherwise it long-polls for more, forever. Errors as
        for :meth:`fetch`. A walk stopped early (closed or collected) closes
        the connection rather than wait for the answer in flight; the next
        call opens a new one.
        """
        size = max_bytes or self.fetch_size
        part = self._fetch_partition((topic, partition, offset, size))
        connector = self._connector_for(topic, partition)
        pending = False
        tries = 0
        try:
            while True:
                try:
                    if not pending:
                        connector = self._connector_for(topic, partition)
                        self.send_fetch((part,), connector)
                        pending = True
                    pending = False
                    (fetched,) = self.receive_fetch((part,), connector=connector)
                except (BrokerError, OSError) as exc:
                    pending = False
                    if not _leader_trouble(exc):
                        raise
                    tries += 1
                    if not self._follow(topic, partition, tries):
                        raise
                    continue
                tries = 0
                done = stop_at_end and fetched.at_end
                if not done:
                    part = api.FetchPartition(topic, partition, fetched.next_offset, size)
                    connector = self._connector_for(topic, partition)
                    self.send_fetch((part,), connector)
                    pending = True
                if fetched.entries:
                    yield fetched
                if done:
                    return
        finally:
            if pending:
                connector.close()

    def messages(self, topic: str, partition: int, offset: int, *,
                 max_bytes: int | None = None,
                 stop_at_end: bool = False) -> Iterator[tuple[int, int, bytes]]:
        """Every ``(offset, next_offset, value)`` of :meth:`sets`, one flat iterator.

        Chained in C: no Python frame per message on top of decoding it.
        """
        return itertools.chain.from_iterable(
            self.sets(topic, partition, offset, max_bytes=max_bytes, stop_at_end=stop_at_end))

    # OFFSETS and METADATA

    def offsets_before(self, topic: str, partition: int, time: int,
                       max_offsets: int = 1) -> list[int]:
        """Offsets at or before ``time`` (ms since the epoch, LATEST or EARLIEST), newest first."""
        def ask(connector: _Connector) -> list[int]:
            response = connector.request(api.OffsetsRequest(topic, partition, time, max_offsets))
            if response.error_code != ErrorCode.NONE:
                raise BrokerError(response.error_code, topic=topic, partition=partition)
            return list(response.offsets)
        return self._on_leader(topic, partition, ask)

    def metadata(self, topics: Iterable[str] = ()) -> api.MetadataResponse:
        """Brokers and topics (all topics when ``topics`` is empty); errors stay in the answer."""
        return self._request(api.MetadataRequest(tuple(topics)))
