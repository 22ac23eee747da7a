"""Cluster mode of the ``hostbroker`` data source: a read over every (broker, partition).

With ``zookeeper.connect`` the brokers of a read are the live ones registered
in ZooKeeper (docs/spec/zookeeper.md). :class:`ClusterPlanner` answers the
same planning questions as :class:`~hostbroker.spark.planning.Planner`, on
the driver only: each time it is asked for the partitions (a batch read's
planning, a stream's every trigger) it reads a fresh
:func:`~hostbroker.cluster.discovery.read_snapshot` over one ZooKeeper
session it keeps, and asks each live broker that registered a topic of the
read, through a :class:`Planner` of that broker (``broker=ID``), for its
partitions' log starts and ends. Keys are ``(topic, broker, partition)``.
Executors never talk to ZooKeeper: a :class:`Range` carries its broker's URIs.

A replicated topic (``Snapshot.replicated``) has global partitions, each
read from its leader: they are keyed ``(topic, -1, partition)``
(``paths.REPLICATED``), planned by one :class:`ReplicatedPlanner` over
every live broker (the consumer's leader map, METADATA version 1: each
partition's log start and high watermark asked of its leader), and their
ranges carry every live broker's URIs, so a task finds the leader, and
follows it when it moves, as a read with a broker list does.

A broker is reached at its TCP listener when it registered one (a Spark task
may run on another host, where a Unix path would name some other broker, or
none), else at its Unix socket. A broker that is registered but does not
answer fails a batch read; a stream leaves its partitions where they were,
as for a broker that left (:meth:`ClusterPlanner.absent`), and reads them
again when it answers.

:func:`make_planner` picks the planner a read's options ask for.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping

from hostbroker.cluster import paths
from hostbroker.cluster.discovery import Snapshot, read_snapshot
from hostbroker.cluster.zk import ZooKeeperUnavailable, make_client
from hostbroker.spark.options import ReadOptions
from hostbroker.spark.planning import (Key, PartitionState, Planner, PlanningError, Range,
                                       key_of, plan)

log = logging.getLogger(__name__)

# The driver's ZooKeeper session: it only reads, so a short timeout frees it soon after a
# driver that died (ZooKeeper's own minimum still applies).
SESSION_TIMEOUT_MS = 10_000


def broker_uris(info: paths.BrokerInfo) -> tuple[str, ...]:
    """Where Spark tasks reach a registered broker: its TCP listener, else its Unix socket."""
    if info.host and info.port:
        return (f"tcp://{info.host}:{info.port}",)
    return tuple(info.uris())


class ReplicatedPlanner(Planner):
    """The replicated topics of a cluster read, over every live broker: their global
    partitions as ``(topic, REPLICATED, partition)``, each asked of its leader."""

    def __init__(self, opts: ReadOptions):
        super().__init__(opts, broker=paths.REPLICATED)
        self.away: set[Key] = set()  # partitions whose leader did not answer at the last look

    def partitions(self, *, must_exist: bool) -> dict[Key, PartitionState]:
        """A stream's partitions whose leader does not answer (a failover under way)
        are left out and kept in :attr:`away`; a batch read fails on them."""
        opts = self.opts
        found: dict[Key, PartitionState] = {}
        present: set = set()
        away: set = set()
        self._replicated_partitions(opts.subscribe, present, found,
                                    None if must_exist else away)
        self.away = {key_of(t, p, paths.REPLICATED) for t, p in away}
        if must_exist:
            for topic in opts.subscribe:
                if topic not in present:
                    raise PlanningError(f"replicated topic {topic}: no live broker of "
                                        f"{self._brokers()} names its leaders")
        out = {}
        for state in found.values():
            state = dataclasses.replace(state, broker=paths.REPLICATED)
            out[state.key] = state
        return dict(sorted(out.items()))


def make_planner(opts: ReadOptions) -> Planner | ClusterPlanner:
    """The planner of a read: over ``bootstrap``, or over a cluster's brokers."""
    return ClusterPlanner(opts) if opts.cluster else Planner(opts)


def live_snapshot(connect: str, timeout_ms: int) -> Snapshot:
    """The cluster as ZooKeeper holds it now, over a session of its own; raises
    ZooKeeperUnavailable, or PlanningError when no broker is registered."""
    client = make_client(connect, SESSION_TIMEOUT_MS, timeout_ms, read_only=True)
    try:
        snapshot = read_snapshot(client)
    finally:
        client.stop()
        client.close()
    if not snapshot.brokers:
        raise PlanningError(f"no live broker is registered in ZooKeeper at {connect}")
    return snapshot


class ClusterPlanner:
    """A read's planning over the live brokers of a cluster (see the module docstring)."""

    def __init__(self, opts: ReadOptions):
        self.opts = opts
        self.snapshot: Snapshot | None = None
        self._client = None
        self._planners: dict[int, Planner] = {}
        self._uris: dict[int, tuple[str, ...]] = {}  # every broker seen, at its latest URIs
        self._live_uris: tuple[str, ...] = ()  # every live broker's, for replicated topics
        self._away: set[int] = set()  # brokers of the last snapshot that did not answer
        self._leaders_away = False  # no live broker named the replicated topics' leaders

    def close(self) -> None:
        for planner in self._planners.values():
            planner.close()
        self._planners.clear()
        if self._client is not None:
            self._client.stop()
            self._client.close()
            self._client = None

    def __enter__(self) -> ClusterPlanner:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- ZooKeeper -----------------------------------------------------------
    def _read(self) -> Snapshot:
        """A fresh snapshot; while ZooKeeper is away, a stream goes on with the last one."""
        try:
            if self._client is None:
                self._client = make_client(self.opts.zookeeper, SESSION_TIMEOUT_MS,
                                           self.opts.zookeeper_timeout_ms, read_only=True)
            snapshot = read_snapshot(self._client)
        except Exception as exc:  # noqa: BLE001 - kazoo's connection errors, and timeouts
            if self.snapshot is None:
                if isinstance(exc, ZooKeeperUnavailable):
                    raise
                raise ZooKeeperUnavailable(f"zookeeper.connect: {self.opts.zookeeper}: "
                                           f"{exc or type(exc).__name__}") from None
            log.warning("ZooKeeper %s did not answer (%s); planning with the brokers it "
                        "named last", self.opts.zookeeper, exc or type(exc).__name__)
            return self.snapshot
        for broker, info in snapshot.brokers.items():
            uris = broker_uris(info)
            if self._uris.get(broker) != uris:
                self._uris[broker] = uris
                old = self._planners.pop(broker, None)
                if old is not None:
                    old.close()
        live = tuple(u for _, info in sorted(snapshot.brokers.items()) for u in broker_uris(info))
        if live and live != self._live_uris:
            self._live_uris = live
            old = self._planners.pop(paths.REPLICATED, None)
            if old is not None:
                old.close()
        self.snapshot = snapshot
        return snapshot

    def _planner(self, broker: int) -> Planner:
        planner = self._planners.get(broker)
        if planner is None and broker == paths.REPLICATED:
            if not self._live_uris:
                self._read()
            if not self._live_uris:
                raise PlanningError(f"no live broker is registered in ZooKeeper at "
                                    f"{self.opts.zookeeper}")
            sub = dataclasses.replace(self.opts, bootstrap=self._live_uris, zookeeper=None,
                                      subscribe=(), pattern=None, assign=None,
                                      **self._offsets_of(broker))
            planner = self._planners[broker] = ReplicatedPlanner(sub)
        if planner is None:
            uris = self._uris.get(broker)
            if uris is None:
                self._read()
                uris = self._uris.get(broker)
            if uris is None:
                raise PlanningError(f"broker {broker} is not registered in ZooKeeper at "
                                    f"{self.opts.zookeeper} (it left the cluster)")
            # The broker's own read: its partitions by number, its offsets of the options.
            sub = dataclasses.replace(self.opts, bootstrap=uris, zookeeper=None, subscribe=(),
                                      pattern=None, assign=None, **self._offsets_of(broker))
            planner = self._planners[broker] = Planner(sub, broker=broker)
        return planner

    # -- partitions ----------------------------------------------------------
    def _wanted(self, snapshot: Snapshot) -> dict[int, dict[str, set[int]]]:
        """broker -> topic -> the partitions of it this read takes, as ZooKeeper says."""
        opts = self.opts
        out: dict[int, dict[str, set[int]]] = {}
        for topic, pairs in snapshot.topics.items():
            if not opts.wants(topic):
                continue
            assigned = None if opts.assign is None else set(opts.assign[topic])
            for broker, partition in pairs:
                if assigned is None or (broker, partition) in assigned:
                    out.setdefault(broker, {}).setdefault(topic, set()).add(partition)
        return out

    def partitions(self, *, must_exist: bool) -> dict[Key, PartitionState]:
        """Every (topic, broker, partition) of the read on the live brokers that answer.

        With ``must_exist`` (batch reads, and ``assign`` always) a subscribed
        topic no live broker registered, an assigned pair that is not
        registered, and a broker that does not answer fail the read;
        otherwise they are left out (and :meth:`absent` says which brokers
        did not answer).
        """
        opts = self.opts
        snapshot = self._read()
        if not snapshot.brokers and must_exist:
            raise PlanningError(f"no live broker is registered in ZooKeeper at {opts.zookeeper}")
        where = f"in ZooKeeper at {opts.zookeeper}"
        for topic in (opts.subscribe or opts.assign or ()) if must_exist else ():
            if not snapshot.group_partitions(topic):
                raise PlanningError(f"topic {topic} is not registered by a live broker {where}")
        for topic, parts in (opts.assign or {}).items():
            for broker, partition in parts:
                # A stream keeps the pairs of a broker that left (it may come back).
                if (broker, partition) not in snapshot.group_partitions(topic) and (
                        must_exist or broker in snapshot.brokers):
                    raise PlanningError(f"partition {topic}/{broker}-{partition} is not "
                                        f"registered {where}")
        found: dict[Key, PartitionState] = {}
        self._away = set()
        for broker, topics in sorted(self._wanted(snapshot).items()):
            planner = self._planner(broker)
            planner.opts = dataclasses.replace(planner.opts, subscribe=tuple(sorted(topics)))
            try:
                states = planner.partitions(must_exist=False)
            except OSError as exc:
                what = f"broker {broker} ({', '.join(planner.opts.bootstrap)}) did not answer"
                if must_exist:
                    raise PlanningError(f"{what}: {exc}") from None
                log.warning("%s: %s; its partitions are read when it answers", what, exc)
                self._away.add(broker)
                planner.close()
                self._planners.pop(broker, None)
                continue
            for topic, partitions in topics.items():
                for partition in sorted(partitions):
                    key = (topic, broker, partition)
                    if key in states:
                        found[key] = states[key]
                    elif must_exist:
                        raise PlanningError(f"partition {topic}/{broker}-{partition} is "
                                            f"registered {where} but its broker does not "
                                            "have it")
        self._replicated(snapshot, found, must_exist)
        return dict(sorted(found.items()))

    def _replicated(self, snapshot: Snapshot, found: dict, must_exist: bool) -> None:
        """Add the partitions of the replicated topics the read takes to ``found``."""
        opts = self.opts
        self._leaders_away = False
        topics = sorted(t for t in snapshot.replicated if opts.wants(t))
        if not topics:
            return
        planner = self._planner(paths.REPLICATED)
        planner.opts = dataclasses.replace(planner.opts, subscribe=tuple(topics))
        try:
            states = planner.partitions(must_exist=must_exist)
        except OSError as exc:
            what = f"the leaders of {', '.join(topics)} did not answer"
            if must_exist:
                raise PlanningError(f"{what}: {exc}") from None
            log.warning("%s: %s; their partitions are read when they answer", what, exc)
            self._leaders_away = True
            planner.close()
            self._planners.pop(paths.REPLICATED, None)
            return
        for key, state in states.items():
            wanted = None if opts.assign is None else opts.assign.get(key[0])
            if wanted is None and opts.assign is not None:
                continue
            if wanted is not None and (key[1], key[2]) not in wanted:
                continue
            found[key] = state
        if must_exist:
            for topic, parts in (opts.assign or {}).items():
                for broker, partition in parts:
                    if broker == paths.REPLICATED and key_of(topic, partition, broker) not in found:
                        raise PlanningError(f"partition {topic}/{broker}-{partition}: no "
                                            f"leader of it answered")

    def _offsets_of(self, broker: int) -> dict[str, object]:
        """startingOffsets / endingOffsets of one broker's partitions, by partition number."""
        out: dict[str, object] = {}
        for name in ("starting", "ending"):
            spec = getattr(self.opts, name)
            if isinstance(spec, Mapping):
                spec = {topic: {p[1]: offset for p, offset in parts.items() if p[0] == broker}
                        for topic, parts in spec.items()}
            out[name] = spec
        return out

    def absent(self, key: Key) -> bool:
        """Whether ``key``'s broker left the cluster or did not answer at the last look
        (a replicated partition: whether its leader, or every live broker, did not)."""
        broker = key[1]
        if broker == paths.REPLICATED:
            planner = self._planners.get(broker)
            return self.snapshot is None or self._leaders_away or (
                isinstance(planner, ReplicatedPlanner) and key in planner.away)
        return (self.snapshot is None or broker not in self.snapshot.brokers
                or broker in self._away)

    # -- offsets and ranges, asked of the key's broker --------------------------
    def resolve(self, states: Mapping[Key, PartitionState], which: str) -> dict[Key, int]:
        out: dict[Key, int] = {}
        by_broker: dict[int, dict[Key, PartitionState]] = {}
        for key, state in states.items():
            by_broker.setdefault(key[1], {})[key] = state
        for broker, part in by_broker.items():
            out.update(self._planner(broker).resolve(part, which))
        return out

    def check_start(self, state: PartitionState, start: int) -> int:
        return self._planner(state.broker).check_start(state, start)

    def boundary(self, key: Key, start: int, limit: int, end: int) -> int:
        return self._planner(key[1]).boundary(key, start, limit, end)

    def range_for(self, key: Key, start: int, end: int) -> Range:
        return self._planner(key[1]).range_for(key, start, end)

    def split(self, rng: Range, max_bytes: int | None) -> list[Range]:
        return self._planner(rng.broker).split(rng, max_bytes)

    def plan(self) -> list[Range]:
        """A batch read's ranges: one or more per (topic, broker, partition)."""
        return plan(self)
