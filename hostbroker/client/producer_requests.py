"""The producer's request, answer and retry path: the :class:`Dispatcher`.

The Dispatcher turns what was taken off the queue into :class:`PendingSet` s
(partitioned with the Cluster's metadata and the Partitioner, encoded by
:mod:`hostbroker.client.producer_batches`), packs them into PRODUCE requests
per broker (at most ``max.request.bytes``, at most
``max.in.flight.requests.per.connection`` unanswered per connection), reads
the answers in order and ends every set: acknowledged, retried after
``retry.backoff.ms`` (metadata refreshed first when the error calls for it),
or failed. :class:`SentRequest` and :class:`ProducerCallbacks` are what it
reports through, and :func:`retriable` what it retries
(:mod:`hostbroker.client.producer_outcomes`).

Owned by one thread at a time: the async producer's sending thread, or the
caller under the producer's lock in sync mode. It owns the broker
connections, the requests in flight and the retries.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import time

from hostbroker.client.cluster import Cluster, PartitionRef, TopicPartitions
from hostbroker.client.connection import BrokerConnection
from hostbroker.client.errors import (
    BrokerError,
    ConnectionClosedError,
    DeliveryError,
    DeliveryFailure,
    ProducerError,
)
from hostbroker.client.partitioner import Partitioner
from hostbroker.client.producer_batches import (
    Encoded,
    add_piece,
    as_pieces,
    cut_batches,
    encode_batch,
    flatten_pieces,
    split_by_size,
)
from hostbroker.client.producer_outcomes import (  # (the first four re-exported)
    RETRIABLE_CODES,
    PendingSet,
    ProducerCallbacks,
    SentRequest,
    calls_for_refresh,
    retriable,
)
from hostbroker.client.producer_settings import CODECS
from hostbroker.client.throttle_stats import ThrottleStats, version_refused
from hostbroker.errors import ErrorCode, ProtocolError
from hostbroker.log.message import CODEC_NONE
from hostbroker.protocol import api, throttled

log = logging.getLogger("hostbroker.client.producer")

# A PRODUCE request without its partitions and client id: size, api key,
# version, correlation id, client id length, acks, timeout, partition count.
REQUEST_OVERHEAD = 4 + 2 + 2 + 4 + 2 + 2 + 4 + 4
# One partition of it without the topic's bytes and the set.
PARTITION_OVERHEAD = 2 + 4 + 4
MAX_TOPIC_BYTES = 249

class Dispatcher:
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
        self.codec = CODECS[settings["compression.codec"]]
        self.max_message_bytes = settings["message.max.bytes"]
        self.max_request_bytes = settings["max.request.bytes"]
        self.max_retries = settings["message.send.max.retries"]
        self.backoff = settings["retry.backoff.ms"] / 1000
        self.max_in_flight = settings["max.in.flight.requests.per.connection"]
        self.client_id = settings["client.id"]
        self.tls = settings  # (its ssl.* settings, for ssl:// URIs)
        self.quota_hold = settings["quota.max.throttle.ms"] / 1000
        self.request_overhead = REQUEST_OVERHEAD + len(self.client_id.encode())
        self.connections: dict[str, BrokerConnection] = {}
        self.in_flight: dict[str, collections.deque] = {}
        self.retries: list[PendingSet] = []
        self._seq = itertools.count()
        # PRODUCE v1: each answer says how long a quota held it
        self.throttle = ThrottleStats("produce", log)

    # -- state ---------------------------------------------------------------

    def awaiting_answers(self) -> bool:
        return any(self.in_flight.values())

    def full_connection(self) -> str | None:
        """When every connection has max.in.flight.requests.per.connection
        unanswered requests: the one whose oldest request went out first (its
        answer is likely the next); else None (one has a free slot)."""
        limit = self.max_in_flight
        oldest = None
        for uri, queue in self.in_flight.items():
            if len(queue) < limit:
                return None
            sent_at = queue[0][0].sent_at
            if oldest is None or sent_at < oldest[0]:
                oldest = (sent_at, uri)
        return None if oldest is None else oldest[1]

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
        if not self.cluster.needs_refresh(topic):
            return self.cluster.partitions(topic)
        self.partitioner.rotate(topic)
        info = self.cluster.partitions(topic)
        live = getattr(self.cluster, "live_uris", None)
        if live is not None:
            self._close_departed(live())
        return info

    def _close_departed(self, live: set[str]) -> None:
        """Close the idle connections to brokers that are no longer live (a broker
        that comes back at the same URI is then reached on a new connection)."""
        for uri in [u for u in self.connections if u not in live and not self.in_flight[u]]:
            self.connections.pop(uri).close()
            del self.in_flight[uri]

    def set_budget(self, topic: str) -> int:
        """Most bytes one message set for ``topic`` may take in a request."""
        return (self.max_request_bytes - self.request_overhead - PARTITION_OVERHEAD
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
                  batch_size: int | None = None) -> list[PendingSet]:
        """Partition and encode what was taken off the queue.

        ``keyless`` maps a topic to values with neither key nor partition (the
        lists become the sets' own; those of the topics in ``chunked`` also
        hold Encoded elements); ``items`` are ``(topic, key, partition,
        value, [values] or Encoded)``. Keyless messages of a topic share one
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
            pieces = as_pieces(values) if topic in chunked else [values]
            n = self._count(topic, counts, unresolved)
            if not n:
                unresolved[topic][0].extend((topic, None, None, piece) for piece in pieces)
                continue
            for batch in cut_batches(pieces, batch_size):
                slot = keyless_slot[topic] = self._choose(topic, None, n)
                partitioner.rotate(topic)
                group = groups.get((topic, slot))
                if group is None:
                    groups[(topic, slot)] = [batch, False, None]
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
                group = groups[(topic, slot)] = [[], False, []]
            elif group[2] is None:  # keyless values came first
                group[2] = [(None, None)] * sum(map(len, group[0]))
            add_piece(group[0], value)
            group[2] += [(key, partition)] * (1 if type(value) is bytes else len(value))
            if key is not None or partition is not None:
                group[1] = True
        sets = []
        for (topic, slot), (pieces, pinned, origins) in groups.items():
            known = self.cluster.cached(topic)
            if known.known and slot >= counts[topic]:
                refused.append((topic, slot, flatten_pieces(pieces), BrokerError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"partition {slot!r} of {counts[topic]}", topic=topic, partition=slot)))
                continue
            # A compressed set is cut where its wrappers would be (at most
            # message.max.bytes inflated, below the request budget, which
            # holds one such entry): cutting at the budget first could leave
            # a wrapper of one message at the end of each set.
            budget = self.set_budget(topic) if self.codec == CODEC_NONE else self.max_message_bytes
            if not pinned:
                origins = None
            start = 0  # of the set's values in the group's, which origins follow
            for piece in pieces:
                if type(piece) is Encoded:
                    end = start + len(piece)
                    sets.append(PendingSet(topic, slot, pinned, piece.values, piece.data, None,
                                     next(self._seq), attempts,
                                     origins=origins and origins[start:end]))
                    start = end
                    continue
                for values in split_by_size(piece, budget):
                    data, wrappers = encode_batch(values, self.codec, self.max_message_bytes)
                    end = start + len(values)
                    sets.append(PendingSet(topic, slot, pinned, values, data, wrappers,
                                     next(self._seq), attempts,
                                     origins=origins and origins[start:end]))
                    start = end
        for topic in rotate:  # the batch is out: a new keyless choice next time
            partitioner.rotate(topic)
        for topic, slot, values, error in refused:
            failed = PendingSet(topic, slot, True, values, b"", None, next(self._seq), attempts)
            self._finish(failed, error)
        for topic, (topic_items, error) in unresolved.items():
            values = flatten_pieces([item[3] if type(item[3]) is not bytes else [item[3]]
                               for item in topic_items])
            pending = PendingSet(topic, None, True, values, b"", None, next(self._seq), attempts,
                           items=topic_items)
            self._attempt_failed(pending, error)
        return sets

    # -- sending -------------------------------------------------------------

    def _route(self, s: PendingSet) -> PartitionRef:
        known = self.cluster.cached(s.topic)
        if known.known:
            return known.partitions[s.slot]
        first = known.partitions[0]
        return PartitionRef(first.broker_id, first.uri, s.slot)

    def dispatch(self, sets: list[PendingSet]) -> None:
        """Send ``sets`` in requests of at most max.request.bytes, one broker at a time."""
        by_broker: dict[str, list[PendingSet]] = {}
        for s in sets:
            known = self.cluster.cached(s.topic)
            if known is None or (known.known and s.slot >= len(known.partitions)):
                self._finish(s, BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                            "not among the topic's partitions after a refresh",
                                            topic=s.topic, partition=s.slot))
                continue
            s.ref = self._route(s)
            s.placed = known.partitions
            if s.ref.broker_id < 0:  # a replicated partition without a live leader
                self._attempt_failed(s, BrokerError(
                    ErrorCode.LEADER_NOT_AVAILABLE, "no live leader", topic=s.topic,
                    partition=s.slot))
                continue
            by_broker.setdefault(s.ref.uri, []).append(s)
        for uri, broker_sets in by_broker.items():
            parts: dict[tuple[str, int], list[PendingSet]] = {}
            size = self.request_overhead
            for s in broker_sets:
                key = (s.topic, s.ref.partition)
                add = len(s.data)
                if key not in parts:
                    add += PARTITION_OVERHEAD + len(s.topic.encode())
                if parts and size + add > self.max_request_bytes:
                    self._send(uri, parts)
                    parts, size = {}, self.request_overhead
                    add = len(s.data) + PARTITION_OVERHEAD + len(s.topic.encode())
                parts.setdefault(key, []).append(s)
                size += add
            if parts:
                self._send(uri, parts)

    def _connection(self, uri: str) -> BrokerConnection:
        connection = self.connections.get(uri)
        if connection is None:
            connection = self.connections[uri] = BrokerConnection(
                uri, timeout=self.timeout_ms / 1000, client_id=self.client_id, tls=self.tls,
                quota_hold=self.quota_hold)
            self.in_flight[uri] = collections.deque()
        if not connection.connected:
            connection.connect()
        return connection

    def _send(self, uri: str, parts: dict[tuple[str, int], list[PendingSet]]) -> None:
        groups = list(parts.values())
        try:
            while len(self.in_flight.get(uri, ())) >= self.max_in_flight:
                self.receive(uri)
            connection = self._connection(uri)
            # The sets go to the socket as they are: no join, no copy into a frame.
            correlation_id = connection.send_produce(self.acks, self.timeout_ms, [
                (topic, partition, [s.data for s in group])
                for (topic, partition), group in parts.items()], throttled.PRODUCE_V1)
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
            exc = version_refused(exc, uri, "PRODUCE version 1")
            for group in groups:
                for s in group:
                    self._attempt_failed(s, exc)
            self._lose_connection(uri, ConnectionClosedError(f"connection to {uri} closed"), [])
            return
        except (OSError, ProtocolError) as exc:
            self._lose_connection(uri, exc, [])
            return
        queue.popleft()
        self.throttle.record(response.throttle_time_ms, uri)
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

    def _lose_connection(self, uri: str, error: BaseException, unsent: list[PendingSet]) -> None:
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

    def _attempt_failed(self, s: PendingSet, error: BaseException) -> None:
        s.attempts += 1
        if retriable(error) and s.attempts <= self.max_retries:
            self.stats["retries"] += 1
            s.retry_at = time.monotonic() + self.backoff
            if calls_for_refresh(error):
                self.cluster.invalidate(s.topic)
            self.retries.append(s)
        else:
            self._finish(s, error)

    def _finish(self, s: PendingSet, error: BaseException | None) -> None:
        s.error = error
        if error is not None:
            self.stats["failed"] += len(s.values)
            failure = DeliveryError([DeliveryFailure(s.topic, s.slot, s.values, error)])
            failure.__cause__ = error
            self.callbacks.on_failed(s.request, failure)
        elif s.ref is not None and not self.cluster.cached(s.topic).known:
            self.cluster.created(s.topic)  # auto-created by this produce: learn its partitions
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
            elif (s.origins is not None and s.placed is not None
                    and s.placed is not info.partitions and s.placed != info.partitions
                    # a replicated topic's partition is the same one at a new leader
                    and not (info.replicated and len(s.placed) == len(info.partitions))):
                again += self._place_again(s, info)
                continue
            again.append(s)
        self.dispatch(again)

    def _place_again(self, s: PendingSet, info: TopicPartitions) -> list[PendingSet]:
        """Sets for a pinned set's values after its topic's partitions changed: keyed
        (and keyless) values partitioned again in the new list; values sent to an
        explicit partition follow the (broker, partition) pair they went to, and
        fail this attempt (BROKER_NOT_AVAILABLE) while it is not in the list."""
        moved, kept = [], []
        for (key, partition), value in zip(s.origins, s.values):
            if partition is None:
                moved.append((s.topic, key, None, value))
            else:
                kept.append(value)
        out = self.make_sets({}, moved, s.attempts) if moved else []
        if not kept:
            return out
        if len(kept) == len(s.values):
            follow = s
        else:
            data, wrappers = encode_batch(kept, self.codec, self.max_message_bytes)
            follow = PendingSet(s.topic, s.slot, True, kept, data, wrappers, next(self._seq),
                                s.attempts, origins=[(None, s.slot)] * len(kept))
            follow.ref, follow.placed, follow.request = s.ref, s.placed, s.request
        index: int | None = follow.slot
        if info.known and follow.ref is not None:
            pair = (follow.ref.broker_id, follow.ref.partition)
            index = next((i for i, ref in enumerate(info.partitions)
                          if (ref.broker_id, ref.partition) == pair), None)
        if index is None:
            self._attempt_failed(follow, BrokerError(
                ErrorCode.BROKER_NOT_AVAILABLE,
                f"broker {pair[0]} of partition {pair[1]} is not live", topic=s.topic,
                partition=follow.slot))
        else:
            follow.slot = index
            out.append(follow)
        return out

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
