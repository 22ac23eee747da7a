"""The high-level consumer in cluster mode: partitions given by the group's rebalance.

With ``zookeeper.connect`` a :class:`~hostbroker.client.group.ConsumerConnector`
(handed in as a :class:`~hostbroker.client.group_assignments.GroupConnector`)
does not deal out partitions itself: a
:class:`~hostbroker.cluster.membership.GroupMember` registers it in its
group and runs the range rebalance, and :class:`ClusterSide` carries out
what that decides, as the member's
:class:`~hostbroker.cluster.membership.Owner`:

- partitions are keyed ``PartitionKey(topic, partition, broker_id)``; each
  broker's partitions are fetched by a fetcher thread of their own, on a
  connection to that broker (its listeners as ``/brokers/ids`` gives them,
  Unix socket first); a broker that registers again with other listeners
  gets a new fetcher at them, going on from where the old one stopped
  (:meth:`ClusterSide.follow`, at every rebalance);
- giving partitions up (:meth:`ClusterSide.revoke`) stops their fetching
  and drops what was fetched of them but not handed out, tells the
  rebalance listener (``on_partitions_revoked``), then commits what was
  handed out of them (with ``auto.commit.enable``);
- taking partitions (:meth:`ClusterSide.assign`) reads their committed
  offsets (``auto.offset.reset`` where there are none), tells the listener
  (``on_partitions_assigned``) and starts fetching them;
- a replicated topic's partitions (keys with broker id
  :data:`~hostbroker.cluster.paths.REPLICATED`) are fetched by one fetcher
  of their own whose broker list is every live broker: each partition is
  fetched from its leader, found and followed across failovers by the
  fetcher's SimpleConsumer (METADATA version 1, the client's
  :class:`~hostbroker.client.leaders.LeaderMap`); a non-leader answers
  NOT_LEADER_FOR_PARTITION, so nothing is read but the leader's data below
  its high watermark. That fetcher is made again at the live brokers only
  when none of the brokers it was given is live at them any more;
- a partition its broker answers UNKNOWN_TOPIC_OR_PARTITION for (the topic
  deleted there) is dropped by its fetcher (:meth:`ClusterSide.forget`); the
  member's next rebalance, at most ``RECHECK_S`` later, releases its owner
  node, or reads it again if the broker has it back.

Everything read from ZooKeeper (the cluster, the group's registrations and
offsets) is bounded by :class:`~hostbroker.cluster.zkread.Bounds` taken from
the connector's settings (the ``zookeeper.max.*`` keys; their defaults where
the settings do not declare them).

Offsets: ``offsets.storage=zookeeper`` (the default)
:class:`~hostbroker.cluster.membership.ZooKeeperOffsets`, or ``broker``:
:class:`PerBrokerOffsets`, each partition's offset kept by its own broker
(not for replicated topics, whose partitions have no broker of their own:
their offsets are kept in ZooKeeper only).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from hostbroker.client.consumer import SimpleConsumer
from hostbroker.client.group_assignments import GroupConnector, give_up
from hostbroker.client.group_plugins import BrokerOffsetStorage
from hostbroker.client.streams import Fetcher, KafkaStream
from hostbroker.cluster import paths, zkread
from hostbroker.cluster.discovery import Snapshot
from hostbroker.cluster.membership import GroupMember, PartitionKey, ZooKeeperOffsets, spec_order

log = logging.getLogger(__name__)

MOVE_WAIT_S = 2.0  # wait for a fetcher to end its round (else again at a recheck)


class PerBrokerOffsets:
    """``offsets.storage=broker`` in cluster mode: each partition's offset kept by its broker."""

    def __init__(self, uris_of: Callable[[int], list[str]], config: Mapping[str, Any]):
        self._uris_of = uris_of
        self._config = dict(config)
        self._storages: dict[int, BrokerOffsetStorage] = {}
        self._lock = threading.Lock()  # used from the rebalance and the callers' threads

    def _storage(self, broker_id: int) -> BrokerOffsetStorage:
        with self._lock:
            storage = self._storages.get(broker_id)
            if storage is None:
                storage = BrokerOffsetStorage(self._uris_of(broker_id), self._config)
                self._storages[broker_id] = storage
            return storage

    @staticmethod
    def _by_broker(keys: Iterable[PartitionKey]) -> dict[int, list[PartitionKey]]:
        out: dict[int, list[PartitionKey]] = {}
        for key in keys:
            out.setdefault(key.broker_id, []).append(key)
        return out

    def fetch(self, group: str, keys: Iterable[PartitionKey]) -> dict[PartitionKey, int]:
        out = {}
        for broker_id, mine in self._by_broker(keys).items():
            stored = self._storage(broker_id).fetch(group, [(k.topic, k.partition) for k in mine])
            out.update({k: stored.get((k.topic, k.partition), -1) for k in mine})
        return out

    def commit(self, group: str, offsets: Mapping[PartitionKey, int]) -> None:
        for broker_id, mine in self._by_broker(offsets).items():
            self._storage(broker_id).commit(group, {(k.topic, k.partition): offsets[k]
                                                    for k in mine})

    def drop(self, broker_id: int) -> None:
        """Forget broker ``broker_id``'s connection (it is made again at its listeners)."""
        with self._lock:
            storage = self._storages.pop(broker_id, None)
        if storage is not None:
            storage.close()

    def close(self) -> None:
        with self._lock:
            for storage in self._storages.values():
                storage.close()


class ClusterSide:
    """What a connector does in cluster mode (see the module docstring)."""

    def __init__(self, connector: GroupConnector, client):
        self.connector = connector
        self.client = client
        self.fetchers: dict[int, Fetcher] = {}
        self._fetcher_uris: dict[int, list[str]] = {}  # the listeners each fetcher uses
        self._lookups: dict[int, SimpleConsumer] = {}  # offsets_before, rebalance thread only
        self._forgotten: set[PartitionKey] = set()  # see forget()
        self._forgotten_lock = threading.Lock()
        settings = connector.settings
        self.bounds = zkread.Bounds.of(settings)  # the zookeeper.max.* keys, where declared
        self.member = GroupMember(client, connector.group, self, self._subscription,
                                  max_retries=settings["rebalance.max.retries"],
                                  backoff_ms=settings["rebalance.backoff.ms"],
                                  bounds=self.bounds)

    def offset_storage(self):
        if self.connector.settings["offsets.storage"] == "zookeeper":
            return ZooKeeperOffsets(self.client, self.bounds)
        return PerBrokerOffsets(self.uris, self.connector._fetch_config())

    def uris(self, broker_id: int) -> list[str]:
        if broker_id == paths.REPLICATED:
            raise LookupError("offsets.storage=broker keeps no offsets of replicated topics "
                              "(they have no broker of their own): use "
                              "offsets.storage=zookeeper")
        view = self.member.view
        info = view.snapshot.brokers.get(broker_id) if view is not None else None
        if info is None:
            raise LookupError(f"broker {broker_id} is not registered in ZooKeeper")
        return info.uris()

    # The member's Owner.

    def _subscription(self, snapshot: Snapshot) -> dict[str, int]:
        c = self.connector
        if c._filter is None:
            return {topic: len(streams) for topic, streams in c._topic_streams.items()}
        return {topic: len(c._streams) for topic in snapshot.topic_names()
                if c._filter.matches(topic)}

    def _streams_of(self, topic: str) -> list[KafkaStream]:
        c = self.connector
        return c._streams if c._filter is not None else c._topic_streams[topic]

    def owned(self) -> dict[PartitionKey, int]:
        return {key: self._streams_of(key.topic).index(stream)
                for key, stream in self.connector._owned.items()}

    def revoke(self, keys: list[PartitionKey], commit: bool = True) -> None:
        c = self.connector
        for broker_id, mine in PerBrokerOffsets._by_broker(keys).items():
            fetcher = self.fetchers.get(broker_id)
            if fetcher is not None:
                fetcher.remove(mine)
        give_up(c, keys, commit)
        busy = {key.broker_id for key in c._owned}
        for broker_id in [b for b in self.fetchers if b not in busy]:
            fetcher = self.fetchers.pop(broker_id)
            self._fetcher_uris.pop(broker_id, None)
            fetcher.stop()
            if fetcher in c._fetchers:
                c._fetchers.remove(fetcher)
            self._close_lookup(broker_id)

    def assign(self, keys: dict[PartitionKey, int], snapshot: Snapshot) -> None:
        c = self.connector
        ordered = sorted(keys, key=spec_order)
        stored = c.offset_storage.fetch(c.group, ordered)
        offsets = {}
        for key in ordered:
            offset = stored.get(key, -1)
            if offset < 0:
                offset = c._reset_offset(self._lookup(key.broker_id, snapshot), key)
            offsets[key] = offset
        c._notify("on_partitions_assigned", ordered)
        for key in ordered:
            stream = self._streams_of(key.topic)[keys[key]]
            key = PartitionKey(*key)  # this assignment's own object (see group_assignments.Assignments)
            c._owned[key] = stream
            stream.partitions.append(key)
            self._fetcher(key.broker_id, snapshot).add(key, stream, offsets[key])

    def follow(self, snapshot: Snapshot) -> None:
        """A broker registered again with other listeners: its fetcher is replaced by one
        at the new ones, which goes on from where the old one stopped (what the old one
        queued is still handed out); its other connections are made again on use."""
        c = self.connector
        for broker_id, fetcher in list(self.fetchers.items()):
            if broker_id == paths.REPLICATED:
                # Leaders are followed by the fetcher itself; made again only when
                # none of the brokers it knows is live at those listeners.
                uris = _live_uris(snapshot)
                if not uris or set(uris) & set(self._fetcher_uris.get(broker_id, ())):
                    continue
            else:
                info = snapshot.brokers.get(broker_id)
                if info is None or info.uris() == self._fetcher_uris.get(broker_id):
                    continue
                uris = info.uris()
            if not fetcher.stopped:
                log.info("consumer group %s: broker %d is at %s now", c.group, broker_id,
                         ", ".join(uris))
                self._close_lookup(broker_id)
                if isinstance(c.offset_storage, PerBrokerOffsets):
                    c.offset_storage.drop(broker_id)
                fetcher.stop()
            fetcher.thread.join(MOVE_WAIT_S)
            if fetcher.thread.is_alive():
                # In a round on a connection that does not answer: where it stops is
                # known only once it has; the partitions wait for that.
                self.member.recheck_soon()
                continue
            del self.fetchers[broker_id]
            if fetcher in c._fetchers:
                c._fetchers.remove(fetcher)
            fetcher._take_incoming()
            for key, offset in list(fetcher.positions.items()):
                if c._owned.get(key) is fetcher.streams[key]:
                    self._fetcher(broker_id, snapshot).add(key, fetcher.streams[key], offset)

    def forget(self, key: PartitionKey) -> None:
        """From a fetcher: ``key``'s broker answered UNKNOWN_TOPIC_OR_PARTITION and the
        connector dropped it. The member's next rebalance, at the latest RECHECK_S later,
        releases its owner node, or reads it again if the broker has it back."""
        log.info("consumer group %s: broker %d has no partition %d of %s; looking at it "
                 "again at the next rebalance", self.connector.group, key.broker_id,
                 key.partition, key.topic)
        with self._forgotten_lock:
            self._forgotten.add(key)
        self.member.recheck_soon()

    def forgotten(self) -> set[PartitionKey]:
        with self._forgotten_lock:
            keys, self._forgotten = self._forgotten, set()
        c = self.connector
        for key in keys:
            if key not in c._owned:
                c._done.pop(key, None)
                c._committed.pop(key, None)
        return keys

    def tick(self) -> None:
        if not self.member.session_lost:  # else the next rebalance gives them up uncommitted
            self.connector._auto_commit(time.monotonic())

    # Per-broker connections.

    @staticmethod
    def _uris_of(broker_id: int, snapshot: Snapshot) -> list[str]:
        """Where ``broker_id``'s partitions are fetched: its listeners, or for the
        replicated topics' (REPLICATED) every live broker's, to find leaders through."""
        if broker_id == paths.REPLICATED:
            uris = _live_uris(snapshot)
            if not uris:
                raise LookupError("no live broker is registered in ZooKeeper")
            return uris
        return snapshot.brokers[broker_id].uris()

    def _lookup(self, broker_id: int, snapshot: Snapshot) -> SimpleConsumer:
        consumer = self._lookups.get(broker_id)
        if consumer is None:
            consumer = self.connector._new_consumer(self._uris_of(broker_id, snapshot))
            self._lookups[broker_id] = consumer
        return consumer

    def _close_lookup(self, broker_id: int) -> None:
        consumer = self._lookups.pop(broker_id, None)
        if consumer is not None:
            consumer.close()

    def _fetcher(self, broker_id: int, snapshot: Snapshot) -> Fetcher:
        fetcher = self.fetchers.get(broker_id)
        if fetcher is None:
            c = self.connector
            uris = self._uris_of(broker_id, snapshot)
            fetcher = Fetcher(c, broker_id, uris, housekeeping=False)
            self._fetcher_uris[broker_id] = uris
            fetcher.thread.name = ("hb-consumer-fetcher-replicated"
                                   if broker_id == paths.REPLICATED
                                   else f"hb-consumer-fetcher-broker-{broker_id}")
            self.fetchers[broker_id] = fetcher
            c._fetchers.append(fetcher)
            fetcher.thread.start()
        return fetcher

    def close(self) -> None:
        """After the fetchers stopped and the last commit: leave the group, close the client."""
        owned = sorted(self.connector._owned, key=spec_order)
        if owned:
            self.connector._notify("on_partitions_revoked", owned)
        self.member.leave(owned)
        for broker_id in list(self._lookups):
            self._close_lookup(broker_id)
        try:
            self.client.stop()
        finally:
            self.client.close()


def _live_uris(snapshot: Snapshot) -> list[str]:
    """The first listener of every live broker (its Unix socket when it has one, as
    :meth:`BrokerInfo.uris` orders them), brokers in id order."""
    return [snapshot.brokers[b].uris()[0] for b in sorted(snapshot.brokers)]
