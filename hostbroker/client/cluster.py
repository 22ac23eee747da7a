"""What a producer knows of the brokers: each topic's partitions and who serves them.

:class:`Cluster` asks METADATA of every broker in its broker list (one
:class:`SimpleClient` per URI, reopened after an error, separate from the
producer's pipelined connections) and keeps, per topic, the list of
:class:`PartitionRef` ``(broker_id, uri, partition)``:

- Each answering broker contributes the partitions it reports, with the URI
  it was reached at for its own partitions and, for partitions it says
  another broker serves, that broker's listener from the answer (the scheme
  of the URI it was reached at when the broker has both).
- With a static ``broker.list`` of several standalone brokers (Kafka 0.7's
  model) a topic's partitions are the union of the ``(broker, partition)``
  pairs, in a stable order: broker id, then partition. A producer's partition
  index is a position in that list. Two URIs whose brokers answer with the
  same broker id are one broker (the first URI listed is used).
- A broker that does not answer keeps the partitions it had in the previous
  answer, so a key keeps its partition while a broker restarts.
- A replicated topic (one whose partitions METADATA version 1 shows with
  several replicas, or led by another broker than the one that answered)
  is the topic's global partitions in order, each at its leader, as the
  :class:`~hostbroker.client.leaders.LeaderMap` of the same broker list
  says; a partition without a live leader has broker id -1, and a produce
  to it waits (LEADER_NOT_AVAILABLE, retriable).
- A topic no broker knows is *provisional*: partition 0 of the first broker
  of the list that answers, where a produce auto-creates it (with the broker's
  ``num.partitions``); the producer refreshes after that produce.

Metadata is refreshed when first needed, when older than the refresh
interval, and after :meth:`Cluster.invalidate` (the producer calls it after
UNKNOWN_TOPIC_OR_PARTITION or a lost connection). Not thread safe: used by
the producer's sending thread, or under its lock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from hostbroker.client.leaders import LeaderMap, MetadataLeaders, TopicLeaders, broker_uri
from hostbroker.client.simple import SimpleClient
from hostbroker.errors import ErrorCode
from hostbroker.protocol import api


class PartitionRef(NamedTuple):
    """One partition of a topic: the broker serving it, reached at ``uri``."""

    broker_id: int
    uri: str
    partition: int


class TopicPartitions(NamedTuple):
    """A topic's partitions in producer order; ``known`` is False for a provisional entry.

    ``replicated``: a replicated topic, whose ``partitions[p]`` is global partition
    ``p`` at its leader (broker id -1 and no URI while it has no live leader)."""

    topic: str
    partitions: tuple[PartitionRef, ...]
    known: bool
    fetched_at: float
    replicated: bool = False


def leader_refs(leaders: TopicLeaders, now: float) -> TopicPartitions:
    """The producer's view of a replicated topic: partition ``p`` at its leader."""
    refs = []
    for part in leaders.partitions:
        found = leaders.leader_uri(part.partition)
        refs.append(PartitionRef(*(found or (-1, "")), part.partition))
    return TopicPartitions(leaders.topic, tuple(refs), True, now, True)


class Cluster:
    """Topic metadata from the brokers of ``broker_list`` (URIs, in order)."""

    def __init__(
        self,
        broker_list: Sequence[str],
        *,
        client_id: str,
        timeout: float,
        refresh_interval_ms: int,
        clock: Callable[[], float] = time.monotonic,
        retry_backoff_ms: int = 100,
        max_retries: int = 3,
        tls: Mapping[str, Any] | None = None,
    ):
        if not broker_list:
            raise ValueError("the broker list is empty")
        self.broker_list = tuple(broker_list)
        self._clients = {uri: SimpleClient(uri, client_id, timeout=timeout, tls=tls)
                         for uri in broker_list}
        self._refresh_interval = refresh_interval_ms / 1000
        self._clock = clock
        self._topics: dict[str, TopicPartitions] = {}
        self._stale: set[str] = set()
        self.refreshes = 0
        self.leaders = LeaderMap(MetadataLeaders(self.broker_list, self._ask_leaders),
                                 retry_backoff_ms=retry_backoff_ms, max_retries=max_retries,
                                 refresh_interval_ms=refresh_interval_ms, clock=clock)

    def _ask_leaders(self, uri: str, topics: tuple[str, ...]):
        client = self._clients[uri]
        try:
            return client.metadata_v1(topics)
        except Exception:
            client.close()
            raise

    def close(self) -> None:
        for client in self._clients.values():
            client.close()

    def cached(self, topic: str) -> TopicPartitions | None:
        """What is known of ``topic`` without asking any broker."""
        return self._topics.get(topic)

    def invalidate(self, topic: str) -> None:
        """Ask the brokers again before ``topic`` is next used."""
        self._stale.add(topic)
        self.leaders.invalidate(topic)

    def created(self, topic: str) -> None:
        """A produce that auto-created ``topic`` was acknowledged: learn its partitions."""
        self.invalidate(topic)

    def needs_refresh(self, topic: str) -> bool:
        known = self._topics.get(topic)
        return (known is None or not known.known or topic in self._stale
                or self._clock() - known.fetched_at >= self._refresh_interval)

    def partitions(self, topic: str) -> TopicPartitions:
        """``topic``'s partitions, asking the brokers first if needed.

        Raises the last broker's error (OSError, BrokerError, ProtocolError)
        when no broker answers and nothing is known of the topic yet; with
        something known, an unanswered refresh keeps it.
        """
        if self.needs_refresh(topic):
            try:
                self.refresh([topic])
            except Exception:
                if topic not in self._topics:
                    raise
        return self._topics[topic]

    def refresh(self, topics: Iterable[str]) -> None:
        """Ask every broker of the list about ``topics``; raises when none answers."""
        topics = tuple(dict.fromkeys(topics))
        answers: list[tuple[str, api.MetadataResponse]] = []
        silent: list[str] = []
        last_error: Exception | None = None
        for uri, client in self._clients.items():
            try:
                answers.append((uri, client.metadata(topics)))
            except Exception as exc:  # noqa: BLE001 - any failure of one broker: ask the next
                client.close()
                silent.append(uri)
                last_error = exc
        if not answers:
            assert last_error is not None
            raise last_error
        self.refreshes += 1
        now = self._clock()
        try:
            self.leaders.refresh(topics)
        except Exception:  # noqa: BLE001 - no broker answers version 1: what was known stays
            pass
        for topic in topics:
            leaders = self.leaders.cached(topic)
            if leaders is not None and leaders.error is None:
                self._topics[topic] = leader_refs(leaders, now)
            else:
                self._topics[topic] = self._merge(topic, answers, silent, now)
            self._stale.discard(topic)

    def _merge(self, topic: str, answers, silent: list[str], now: float) -> TopicPartitions:
        uri_of: dict[int, str] = {}
        refs: dict[tuple[int, int], PartitionRef] = {}
        known = False
        for uri, answer in answers:
            uri_of.setdefault(answer.broker_id, uri)
        for uri, answer in answers:
            others = {b.broker_id: b for b in answer.brokers}
            prefer_unix = uri.startswith("unix:")
            for entry in answer.topics:
                if entry.topic != topic or entry.error_code != ErrorCode.NONE:
                    continue
                known = True
                for part in entry.partitions:
                    where = uri_of.get(part.broker_id)
                    if where is None and part.broker_id in others:
                        where = broker_uri(others[part.broker_id], prefer_unix, uri)
                    if where is not None:
                        refs.setdefault((part.broker_id, part.partition),
                                        PartitionRef(part.broker_id, where, part.partition))
        previous = self._topics.get(topic)
        if previous is not None and previous.known:
            for ref in previous.partitions:
                if ref.uri in silent:
                    known = True
                    refs.setdefault((ref.broker_id, ref.partition), ref)
        if not known:
            uri, answer = answers[0]  # the first broker of the list that answered
            return TopicPartitions(topic, (PartitionRef(answer.broker_id, uri, 0),), False, now)
        ordered = tuple(refs[k] for k in sorted(refs))
        return TopicPartitions(topic, ordered, True, now)
