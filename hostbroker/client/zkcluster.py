"""What a producer knows of the brokers when ZooKeeper tells it (``zookeeper.connect``).

:class:`ZkCluster` has the interface the producer's Dispatcher uses of
:class:`~hostbroker.client.cluster.Cluster` (``cached``, ``invalidate``,
``needs_refresh``, ``partitions``, ``refresh``, ``close``), but takes topic
metadata from a :class:`~hostbroker.cluster.discovery.ClusterView` instead of
asking brokers:

- A topic's partitions are the sorted ``(broker_id, partition)`` pairs of the
  live brokers that registered it (docs/spec/zookeeper.md), as
  :class:`PartitionRef` s whose URI is the broker's first listener in
  :meth:`BrokerInfo.uris` order (Unix first when it has one). The Dispatcher
  keeps one pipelined connection per broker URI it sends to, and closes an
  idle one whose broker is no longer live (:meth:`live_uris`).
- The ClusterView's watches call :meth:`ZkCluster._on_change` from its own
  thread; that only swaps in the new snapshot. The thread that owns the
  Dispatcher adopts it the next time it looks at a topic
  (``needs_refresh`` is then true), so a batch is partitioned and routed
  with one list, a broker that left is out of the next batch's list and one
  that joined is in it.
- A topic no live broker registered is *provisional*: partition 0 of one
  live broker chosen at random (kept while it stays live), where the
  produce auto-creates it. Once that produce is acknowledged (the
  Dispatcher says so, :meth:`ZkCluster.created`), the next look waits up to
  ``registration_wait_ms`` for the broker's registration of the topic,
  once per topic; until it appears the provisional partition is used.
- A replicated topic (its ``/brokers/topics/[topic]`` node holds an
  assignment) is its global partitions in order, each at its leader, as a
  :class:`~hostbroker.client.leaders.LeaderMap` over
  :class:`~hostbroker.client.leaders.ZooKeeperLeaders` reads them (the
  assignment, each partition's state node, the snapshot's live brokers).
  Leaders are not watched: they are read again when the topic is
  invalidated (the Dispatcher does after NOT_LEADER_FOR_PARTITION,
  LEADER_NOT_AVAILABLE or a lost connection), when the snapshot changes (a
  broker came or went) and every ``refresh_interval_ms``. A partition
  without a live leader has broker id -1: a produce to it waits
  (LEADER_NOT_AVAILABLE, retriable).
- No live broker at all: :meth:`partitions` raises BROKER_NOT_AVAILABLE,
  a retriable error, so messages wait within the retry settings and then
  fail with it.

What ZooKeeper says is read through :mod:`hostbroker.cluster.zkread`
(``bounds``): a phantom partition count or a malformed registration is left
out with a warning, and the rest of the cluster is used.

Not thread safe beyond the snapshot swap: used by the producer's sending
thread, or under its lock.
"""

from __future__ import annotations

import random
import threading
import time

from hostbroker.client.cluster import PartitionRef, TopicPartitions, leader_refs
from hostbroker.client.errors import BrokerError
from hostbroker.client.leaders import LeaderMap, ZooKeeperLeaders
from hostbroker.cluster import zkread
from hostbroker.cluster.discovery import ClusterView, Snapshot
from hostbroker.cluster.zk import make_client
from hostbroker.errors import ErrorCode


class ZkCluster:
    """Topic metadata of the brokers registered under ``connect`` (see the module docstring)."""

    def __init__(self, connect: str, *, session_timeout_ms: int, connection_timeout_ms: int,
                 registration_wait_ms: int, rng: random.Random | None = None,
                 bounds: zkread.Bounds = zkread.DEFAULT, retry_backoff_ms: int = 100,
                 max_retries: int = 3, refresh_interval_ms: int = 600_000):
        self.connect = connect
        self._rng = rng or random.Random()
        self._wait = registration_wait_ms / 1000
        self._changed = threading.Condition()
        self._version = 0
        self._snapshot = Snapshot()
        self._client = make_client(connect, session_timeout_ms, connection_timeout_ms)
        try:
            self._view = ClusterView(self._client, self._on_change, bounds=bounds)
            with self._changed:
                if self._version == 0:  # no change reported while the view started
                    self._snapshot = self._view.snapshot
        except BaseException:
            self._client.stop()
            self._client.close()
            raise
        # topic -> (snapshot version it was built from, its partitions)
        self._topics: dict[str, tuple[int, TopicPartitions]] = {}
        self._stale: set[str] = set()
        self._provisional: dict[str, int] = {}  # topic -> broker id it is auto-created on
        self._waited: set[str] = set()  # topics whose registration was waited for once
        self._created: set[str] = set()  # provisional topics a produce was acknowledged to
        self.leaders = LeaderMap(
            ZooKeeperLeaders(self._client, lambda: self._snapshot.brokers, bounds=bounds,
                             timeout_s=connection_timeout_ms / 1000),
            retry_backoff_ms=retry_backoff_ms, max_retries=max_retries,
            refresh_interval_ms=refresh_interval_ms)
        self.refreshes = 0

    def _on_change(self, snapshot: Snapshot) -> None:
        with self._changed:
            self._snapshot = snapshot
            self._version += 1
            self._changed.notify_all()

    @property
    def snapshot(self) -> Snapshot:
        """The latest picture of the cluster (not necessarily adopted yet)."""
        return self._snapshot

    def live_uris(self) -> set[str]:
        """The URI each live broker is reached at (the Dispatcher closes idle
        connections to the others)."""
        return {info.uris()[0] for info in self._snapshot.brokers.values()}

    def close(self) -> None:
        self._view.close()
        self._client.stop()
        self._client.close()

    def cached(self, topic: str) -> TopicPartitions | None:
        entry = self._topics.get(topic)
        return None if entry is None else entry[1]

    def invalidate(self, topic: str) -> None:
        self._stale.add(topic)
        self.leaders.invalidate(topic)

    def created(self, topic: str) -> None:
        """A produce to ``topic``'s provisional partition was acknowledged: the
        broker made it, and registers it next (a produce refused, such as one
        answered LEADER_NOT_AVAILABLE while the broker reads ZooKeeper's topics,
        made nothing to wait for)."""
        self._created.add(topic)
        self.invalidate(topic)

    def needs_refresh(self, topic: str) -> bool:
        entry = self._topics.get(topic)
        return (entry is None or entry[0] != self._version or not entry[1].known
                or topic in self._stale
                or (entry[1].replicated and self.leaders.needs_refresh(topic)))

    def partitions(self, topic: str) -> TopicPartitions:
        """``topic``'s partitions from the latest snapshot; raises BrokerError
        (BROKER_NOT_AVAILABLE) when no broker is live."""
        if self.needs_refresh(topic):
            self.refresh([topic])
        return self._topics[topic][1]

    def refresh(self, topics) -> None:
        for topic in dict.fromkeys(topics):
            self._topics[topic] = self._build(topic)
            self._stale.discard(topic)
        self.refreshes += 1

    def _registered(self, topic: str) -> bool:
        return bool(self._snapshot.partitions(topic))

    def _build(self, topic: str) -> tuple[int, TopicPartitions]:
        version = self._version
        previous = self._topics.get(topic)
        if previous is not None and previous[0] != version:
            self.leaders.invalidate(topic)  # a broker came or went: leaders may have moved
        try:
            leaders = self.leaders.get(topic)
        except BrokerError:
            # ZooKeeper away and nothing read of the topic yet: a topic brokers
            # registered 0.7-style is not replicated, and its last list serves.
            if not self._snapshot.partitions(topic):
                raise
            leaders = None
        if leaders is not None:
            if leaders.error is not None:
                raise leaders.error
            built = leader_refs(leaders, time.monotonic())
            if previous is not None and previous[1].partitions == built.partitions:
                built = built._replace(fetched_at=previous[1].fetched_at)
            return version, built
        with self._changed:
            if (topic in self._provisional and topic in self._created
                    and topic not in self._waited and not self._registered(topic)):
                # The produce that auto-creates it was acknowledged: its
                # broker registers it next.
                self._waited.add(topic)
                self._created.discard(topic)
                self._changed.wait_for(lambda: self._registered(topic), self._wait)
            snapshot, version = self._snapshot, self._version
        previous = self._topics.get(topic)
        pairs = snapshot.partitions(topic)
        if pairs:
            self._provisional.pop(topic, None)
            uris = {b: info.uris()[0] for b, info in snapshot.brokers.items()}
            refs = tuple(PartitionRef(b, uris[b], p) for b, p in pairs)
            if previous is not None and previous[1].known and previous[1].partitions == refs:
                return version, previous[1]
            return version, TopicPartitions(topic, refs, True, time.monotonic())
        if not snapshot.brokers:
            raise BrokerError(ErrorCode.BROKER_NOT_AVAILABLE,
                              f"no live broker registered in ZooKeeper ({self.connect})",
                              topic=topic)
        chosen = self._provisional.get(topic)
        if chosen not in snapshot.brokers:
            chosen = self._provisional[topic] = self._rng.choice(sorted(snapshot.brokers))
            self._waited.discard(topic)
        ref = PartitionRef(chosen, snapshot.brokers[chosen].uris()[0], 0)
        if previous is not None and not previous[1].known and previous[1].partitions == (ref,):
            return version, previous[1]
        return version, TopicPartitions(topic, (ref,), False, time.monotonic())
