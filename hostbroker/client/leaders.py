"""Where each partition of a replicated topic is led: the clients' leader map.

A replicated topic (docs/cluster.md, "Replicated topics") has global partition
numbers; each partition has one leader, the only broker that takes its
produces and serves its consumers. Leaders move (a broker dies, the
controller elects another, a preferred-replica election moves one back), so
every client keeps a :class:`LeaderMap` and asks it again when a broker
says so. The map learns a topic from one of two sources:

- :class:`ZooKeeperLeaders` (clients given ``zookeeper.connect``): the
  topic's assignment ``/brokers/topics/[topic]`` (``{"version":1,
  "partitions":{"0":[1,2],...}}``), each partition's
  ``/brokers/topics/[topic]/partitions/[p]/state`` and the live brokers of
  ``/brokers/ids`` (given by the caller, who keeps them current). A topic
  whose node holds no assignment is not replicated (a 0.7-style topic): the
  source says None and the caller uses its per-broker partitions.
- :class:`MetadataLeaders` (clients given brokers): METADATA version 1 asked
  of each broker of the list; for each partition the answer with the
  highest leader epoch wins (a broker that has not heard of the last
  election yet says an older leader). A topic is replicated when some
  partition has a leader epoch (a broker's unreplicated partitions say -1,
  one replica, itself as leader). A broker holds only its own replicas: a
  topic no broker of the list holds is asked of the other brokers their
  answers name.

Everything read is hostile: ZooKeeper values go through
:mod:`hostbroker.cluster.zkread` (bounded size, depth, counts; a bad
assignment makes the topic LEADER_NOT_AVAILABLE, a bad state node makes its
partition leaderless, both reported once a minute, never fatal), and a
metadata answer's replica lists and partition numbers are checked the same
way.

A leader the map cannot name (-1, offline, or not among the live brokers)
is LEADER_NOT_AVAILABLE: :meth:`LeaderMap.leader` refreshes and waits
``retry.backoff.ms`` between tries, at most ``message.send.max.retries``
times, then raises it. Callers invalidate a topic after
NOT_LEADER_FOR_PARTITION, LEADER_NOT_AVAILABLE, FENCED_LEADER_EPOCH or a
lost connection (:data:`LEADER_CODES`, :func:`leader_moved`).

Not thread safe: each client thread (a producer's sending thread, a
consumer) keeps its own map, or uses it under its lock. No I/O in the
constructors; the ZooKeeper source uses the caller's kazoo client.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from hostbroker.client.errors import BrokerError
from hostbroker.cluster import paths, zkread
from hostbroker.errors import ErrorCode, ProtocolError
from hostbroker.protocol.replica_fields import MAX_REPLICAS
from hostbroker.cluster import replica_nodes

log = logging.getLogger(__name__)

# Wire errors after which a partition's leader may be elsewhere.
LEADER_CODES = frozenset({
    ErrorCode.NOT_LEADER_FOR_PARTITION,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.REPLICA_NOT_AVAILABLE,
})


def leader_moved(error: BaseException) -> bool:
    """Whether ``error`` calls for asking again where the leader is: a leader
    code from the broker, a lost or refused connection, a bad answer."""
    if isinstance(error, BrokerError):
        return error.code in LEADER_CODES
    return isinstance(error, (OSError, ProtocolError))


@dataclass(frozen=True)
class PartitionLeader:
    """One partition of a replicated topic: its leader (-1 when none), the leader's
    epoch, the replicas (the first is the preferred leader) and the in-sync replicas."""

    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class TopicLeaders:
    """A replicated topic: ``partitions[p]`` is partition ``p``; ``uris`` the URI of
    each live broker that leads one of them. ``error`` is set (and ``partitions``
    empty) when the topic's assignment could not be read."""

    topic: str
    partitions: tuple[PartitionLeader, ...]
    uris: Mapping[int, str] = field(default_factory=dict)
    error: BrokerError | None = None

    def leader_uri(self, partition: int) -> tuple[int, str] | None:
        """``(broker_id, uri)`` of ``partition``'s leader; None when it has none that
        is live (or the partition does not exist)."""
        if not 0 <= partition < len(self.partitions):
            return None
        leader = self.partitions[partition].leader
        uri = self.uris.get(leader)
        return None if uri is None else (leader, uri)


# -- what ZooKeeper holds (decoded by hostbroker.cluster.replica_nodes) ----------------------


def _broker_ids(value, where: str, what: str, *, empty_ok: bool) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) > MAX_REPLICAS or (not value and not empty_ok):
        raise ValueError(f"{where}: {what} is not a list of 1 to {MAX_REPLICAS} broker ids")
    if any(type(b) is not int or not 0 <= b <= zkread.MAX_BROKER_ID for b in value):
        raise ValueError(f"{where}: {what} holds something that is not a broker id")
    if len(set(value)) != len(value):
        raise ValueError(f"{where}: {what} names a broker twice")
    return tuple(value)


def decode_state(data: bytes, path: str, replicas: tuple[int, ...],
                 bounds: zkread.Bounds = zkread.DEFAULT) -> tuple[int, int, tuple[int, ...]]:
    """``(leader, leader_epoch, isr)`` of a partition's state node (replica_nodes' checks),
    and its leader and ISR within ``replicas`` (ValueError otherwise)."""
    state = replica_nodes.decode_state(data, path, bounds)
    if state.leader != replica_nodes.NO_LEADER and state.leader not in replicas:
        raise ValueError(f"{path}: leader {state.leader} is not one of the replicas "
                         f"{list(replicas)}")
    if not set(state.isr) <= set(replicas):
        raise ValueError(f"{path}: isr {list(state.isr)} is not within the replicas "
                         f"{list(replicas)}")
    return state.leader, state.leader_epoch, state.isr


class _Bounded:
    """The reads zkread makes, each waiting at most ``timeout`` seconds (kazoo's own
    calls wait for as long as the session lives while ZooKeeper is away)."""

    def __init__(self, client, timeout: float):
        self.client = client
        self.timeout = timeout

    def get(self, path: str):
        return self.client.get_async(path).get(timeout=self.timeout)

    def get_children(self, path: str):
        return self.client.get_children_async(path).get(timeout=self.timeout)


class ZooKeeperLeaders:
    """Leaders as ZooKeeper holds them, read with the caller's kazoo ``client``.

    ``brokers()`` gives the live brokers (``{id: BrokerInfo}``, e.g. a
    ClusterView's snapshot); a leader not among them has no URI. Each read
    waits at most ``timeout_s``.
    """

    def __init__(self, client, brokers: Callable[[], Mapping[int, paths.BrokerInfo]], *,
                 bounds: zkread.Bounds = zkread.DEFAULT,
                 report: Callable[[str, str], None] | None = None, timeout_s: float = 5.0):
        self.client = client
        self.reader = _Bounded(client, timeout_s)
        self.brokers = brokers
        self.bounds = bounds
        self.report = report or zkread.Reporter(log)

    def read(self, topics: Iterable[str]) -> dict[str, TopicLeaders | None]:
        """Raises BrokerError BROKER_NOT_AVAILABLE (retriable) when ZooKeeper does not
        answer (at once when the session is not connected)."""
        from kazoo.exceptions import KazooException
        from kazoo.handlers.threading import KazooTimeoutError

        if not self.client.connected:
            raise BrokerError(ErrorCode.BROKER_NOT_AVAILABLE, "ZooKeeper is not connected")
        live = self.brokers()
        try:
            return {topic: self.read_topic(topic, live) for topic in topics}
        except (KazooException, KazooTimeoutError) as exc:
            raise BrokerError(ErrorCode.BROKER_NOT_AVAILABLE,
                              f"ZooKeeper did not answer: {type(exc).__name__}") from exc

    def read_topic(self, topic: str,
                   live: Mapping[int, paths.BrokerInfo]) -> TopicLeaders | None:
        """``topic``'s leaders; None when it is not a replicated topic (or does not exist)."""
        from kazoo.exceptions import NoNodeError

        path = replica_nodes.assignment_path(topic)
        try:
            data, _ = self.reader.get(path)
        except NoNodeError:
            return None
        try:  # a value past zookeeper.max.node.bytes is refused before it is parsed
            assignment = replica_nodes.decode_assignment(data, path, self.bounds)
        except ValueError as exc:
            self.report(path, f"{exc}; the topic has no leaders")
            return TopicLeaders(topic, (), {}, BrokerError(
                ErrorCode.LEADER_NOT_AVAILABLE, f"{path} does not hold a readable assignment",
                topic=topic))
        if assignment is None:
            return None
        partitions = []
        for p, replicas in sorted(assignment.items()):
            where = replica_nodes.state_path(topic, p)
            leader, epoch, isr = -1, -1, ()
            state = zkread.value(self.reader, where, self.bounds, self.report)
            if state is not None:
                try:
                    leader, epoch, isr = decode_state(state[0], where, replicas, self.bounds)
                except ValueError as exc:
                    self.report(where, f"{exc}; the partition has no leader")
            partitions.append(PartitionLeader(p, leader, epoch, replicas, isr))
        uris = {p.leader: live[p.leader].uris()[0] for p in partitions if p.leader in live}
        return TopicLeaders(topic, tuple(partitions), uris)


# Brokers asked beyond the list when no broker of it holds a topic.
MAX_DISCOVERED = 16


class MetadataLeaders:
    """Leaders as the brokers of ``uris`` say them (METADATA version 1).

    ``ask(uri, topics)`` sends the request and returns the decoded answer
    (the caller owns the connections; see :class:`~hostbroker.client.cluster.Cluster`).
    """

    def __init__(self, uris: Sequence[str], ask, *, prefer_unix: bool | None = None):
        self.uris = tuple(uris)
        self.ask = ask
        self.prefer_unix = prefer_unix

    def read(self, topics: Iterable[str]) -> dict[str, TopicLeaders | None]:
        """Raises the last broker's error when no broker answers. A topic that no broker
        of the list holds is asked of the other brokers the answers name (at most
        MAX_DISCOVERED of them): a broker holds only its own replicas."""
        topics = tuple(dict.fromkeys(topics))
        answers = []
        last: Exception | None = None
        for uri in self.uris:
            try:
                answers.append((uri, self.ask(uri, topics)))
            except Exception as exc:  # noqa: BLE001 - one broker failing: ask the next
                last = exc
        if not answers:
            assert last is not None, "no broker to ask"
            raise last
        unknown = tuple(t for t in topics if not _held(t, answers))
        if unknown:
            asked = {answer.broker_id for _, answer in answers}
            others: dict[int, str] = {}
            for uri, answer in answers:
                unix = uri.startswith("unix:") if self.prefer_unix is None else self.prefer_unix
                for broker in answer.brokers:
                    where = broker_uri(broker, unix, uri)
                    if where is not None and broker.broker_id not in asked:
                        others.setdefault(broker.broker_id, where)
            for uri in list(others.values())[:MAX_DISCOVERED]:
                try:
                    answers.append((uri, self.ask(uri, unknown)))
                except Exception:  # noqa: BLE001 - one broker failing: ask the next
                    continue
        return {topic: merge_metadata(topic, answers, self.prefer_unix) for topic in topics}


def _held(topic: str, answers) -> bool:
    return any(entry.topic == topic and entry.error_code == ErrorCode.NONE
               for _, answer in answers for entry in answer.topics)


def broker_uri(broker, prefer_unix: bool, asked: str = "") -> str | None:
    """A broker of a METADATA answer as a URI (the one place clients make it):
    its Unix path or its host and port (an IPv6 address in brackets), the
    latter ``ssl://`` when the answer came from an ``ssl://`` listener
    (``asked``), which names the brokers' ``ssl://`` listeners; None when it
    names neither (or a port out of range)."""
    host, port, unix = broker.host, broker.port, broker.unix_path
    scheme = "ssl" if asked.startswith("ssl://") else "tcp"
    if host and ":" in host and not host.startswith("["):
        host = f"[{host}]"
    tcp = f"{scheme}://{host}:{port}" if host and 0 < port < 65536 else None
    unix_uri = f"unix://{unix}" if unix else None
    return (unix_uri or tcp) if prefer_unix else (tcp or unix_uri)


def merge_metadata(topic: str, answers, prefer_unix: bool | None = None,
                   bounds: zkread.Bounds = zkread.DEFAULT) -> TopicLeaders | None:
    """``topic``'s leaders from METADATA v1 answers ``[(uri asked, answer)]``; None when
    no answer shows it replicated (see the module docstring). Partition entries that
    break the layout (a number at or past ``zookeeper.max.partitions.per.registration``,
    the bound of an assignment; a replica list of more than MAX_REPLICAS or with
    repeats) are left out."""
    best: dict[int, tuple[PartitionLeader, int]] = {}  # partition -> (entry, answering broker)
    uris: dict[int, str] = {}
    replicated = False
    for uri, answer in answers:
        uris.setdefault(answer.broker_id, uri)
    for uri, answer in answers:
        unix = uri.startswith("unix:") if prefer_unix is None else prefer_unix
        for broker in answer.brokers:
            where = broker_uri(broker, unix, uri)
            if where is not None and 0 <= broker.broker_id <= zkread.MAX_BROKER_ID:
                uris.setdefault(broker.broker_id, where)
        for entry in answer.topics:
            if entry.topic != topic or entry.error_code != ErrorCode.NONE:
                continue
            for part in entry.partitions:
                if part.error_code not in (ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE,
                                           ErrorCode.REPLICA_NOT_AVAILABLE):
                    continue
                try:
                    replicas = _broker_ids(list(part.replicas), topic, "replicas", empty_ok=True)
                    isr = _broker_ids(list(part.isr), topic, "isr", empty_ok=True)
                except ValueError:
                    continue
                if not 0 <= part.partition < bounds.partitions_per_registration:
                    continue  # as ZooKeeper's assignment: at most that many partitions
                leader = part.leader if part.error_code == ErrorCode.NONE else -1
                if part.leader_epoch >= 0 or len(replicas) > 1 or leader != answer.broker_id:
                    replicated = True
                candidate = PartitionLeader(part.partition, leader, part.leader_epoch,
                                            replicas, isr)
                held = best.get(part.partition)
                if (held is None or candidate.leader_epoch > held[0].leader_epoch
                        or (candidate.leader_epoch == held[0].leader_epoch
                            and answer.broker_id == candidate.leader)):
                    best[part.partition] = (candidate, answer.broker_id)
    if not replicated:
        return None
    count = max(best) + 1
    partitions = tuple(best[p][0] if p in best else PartitionLeader(p, -1, -1, (), ())
                       for p in range(count))
    leaders = {p.leader for p in partitions}
    return TopicLeaders(topic, partitions, {b: u for b, u in uris.items() if b in leaders})


# -- the map ----------------------------------------------------------------------------


class LeaderMap:
    """The leaders of the topics a client uses, from ``source`` (see the module docstring).

    A topic is asked of the source when first used, when older than
    ``refresh_interval_ms`` and after :meth:`invalidate`.
    """

    def __init__(self, source, *, retry_backoff_ms: int = 100, max_retries: int = 3,
                 refresh_interval_ms: int = 600_000,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        self.source = source
        self.backoff = retry_backoff_ms / 1000
        self.max_retries = max_retries
        self.refresh_interval = refresh_interval_ms / 1000
        self.clock = clock
        self.sleep = sleep
        self._topics: dict[str, tuple[float, TopicLeaders | None]] = {}
        self._stale: set[str] = set()
        self.refreshes = 0

    def invalidate(self, topic: str) -> None:
        """Ask the source again before ``topic`` is next used."""
        self._stale.add(topic)

    def needs_refresh(self, topic: str) -> bool:
        held = self._topics.get(topic)
        return (held is None or topic in self._stale
                or self.clock() - held[0] >= self.refresh_interval)

    def cached(self, topic: str) -> TopicLeaders | None:
        held = self._topics.get(topic)
        return None if held is None else held[1]

    def refresh(self, topics: Iterable[str]) -> None:
        """Ask the source about ``topics`` now (its errors propagate)."""
        found = self.source.read(topics)
        now = self.clock()
        self.refreshes += 1
        for topic, leaders in found.items():
            self._topics[topic] = (now, leaders)
            self._stale.discard(topic)

    def get(self, topic: str) -> TopicLeaders | None:
        """``topic``'s leaders (None: not a replicated topic), asking the source if
        needed; when the source fails and something is known, that is kept."""
        if self.needs_refresh(topic):
            try:
                self.refresh([topic])
            except Exception:
                if topic not in self._topics:
                    raise
        return self._topics[topic][1]

    def leader(self, topic: str, partition: int) -> tuple[int, str] | None:
        """``(broker_id, uri)`` of the leader of ``topic/partition``; None when
        ``topic`` is not replicated. A partition without a live leader is asked
        again after ``retry.backoff.ms``, up to ``max_retries`` times; then
        BrokerError LEADER_NOT_AVAILABLE (UNKNOWN_TOPIC_OR_PARTITION for a
        partition the topic does not have)."""
        tries = 0
        while True:
            leaders = self.get(topic)
            if leaders is None:
                return None
            if leaders.error is not None:
                error: BrokerError = leaders.error
            elif not 0 <= partition < len(leaders.partitions):
                raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                  f"the topic has {len(leaders.partitions)} partitions",
                                  topic=topic, partition=partition)
            else:
                found = leaders.leader_uri(partition)
                if found is not None:
                    return found
                error = BrokerError(ErrorCode.LEADER_NOT_AVAILABLE,
                                    "no live leader", topic=topic, partition=partition)
            tries += 1
            if tries > self.max_retries:
                raise error
            self.sleep(self.backoff)
            self.invalidate(topic)
