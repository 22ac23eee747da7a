"""The high-level consumer: a group's partitions as streams of messages.

:class:`ConsumerConnector` turns a subscription (``{topic: n}``, or a
:class:`Whitelist` / :class:`Blacklist` of topics and ``n``) into ``n``
iterators (:class:`KafkaStream`) of :class:`MessageAndMetadata`. Each
stream is fed by partitions of its own, given by the group (below); only
with an ``assignor`` of the caller's, or a broker that does not serve
groups, does this connector own every partition of its topics, dealt to its
streams by a :class:`PartitionAssignor` (default round-robin).

Threads. ``num.consumer.fetchers`` fetcher threads, each with its own
connection, fetch their partitions with one (long-poll) FETCH per round and
put each non-empty fetched set (a *chunk*) on the queue of the partition's
stream (:mod:`hostbroker.client.streams`: every partition of a stream is
read, fairly; a queue's chunks are bounded by ``queued.max.message.chunks``
plus the partitions feeding it, whatever the consumers' pace). The first
fetcher also does the housekeeping: every ``topic.refresh.interval.ms`` it looks for new
topics and partitions of the subscription (a filter never matches internal
topics, whose names start with ``__``), and every
``auto.commit.interval.ms`` it commits offsets. The streams are read in the
caller's threads (one thread per stream, or one thread for several).

Offsets. A stream knows, per partition, the ``next_offset`` of the last
message it handed out (read off the batch in hand when asked, kept in
``_done`` once per chunk: nothing is recorded per message, see
:class:`~hostbroker.client.streams.KafkaStream`).
:meth:`ConsumerConnector.commit_offsets` stores those positions through an
:class:`OffsetStorage` (default :class:`BrokerOffsetStorage`: the broker's
OFFSET_COMMIT / OFFSET_FETCH), and a new connector of the same ``group.id``
resumes from them. Commit after processing what you were handed and you get
at-least-once delivery. The interval commit is more careful: it stores only
what a stream has moved past (the message in the caller's hands when it runs
is not committed), so a crash between two commits replays messages but never
skips one. Where no offset is stored, or the stored one is outside the log,
``auto.offset.reset`` chooses the earliest or latest offset.

Standalone groups. Without ``zookeeper.connect`` the connector is a member of
its group on the broker (docs/spec/groups.md,
:mod:`hostbroker.client.group_coordinator`): the broker splits the partitions
of the group's topics among its members' streams with the range assignment of
docs/spec/zookeeper.md, so several processes of one ``group.id`` share the
work. A member heartbeats from a thread of its own every
``heartbeat.interval.ms``, is dropped after ``session.timeout.ms`` without one,
and a rebalance waits ``rebalance.timeout.ms`` for the members; on each
rebalance it stops fetching, commits what it handed out (fenced by its
generation: a member that lost its partitions cannot overwrite the new
owner's offsets), fires the rebalance listener and starts again from the
committed offsets. A broker that answers JOIN_GROUP UNSUPPORTED_VERSION gets
the old behaviour, with one warning. An explicit ``assignor`` opts out of the
group: range is the group's contract, so a caller's assignor means this
connector deals every partition itself.

Cluster mode. With ``zookeeper.connect`` the group spans processes
(docs/spec/zookeeper.md): the connector registers in ZooKeeper and its
partitions, ``(topic, partition, broker_id)``, come from the group's range
rebalance (:mod:`hostbroker.client.group_cluster`), fetched from their own
brokers; offsets are kept in ZooKeeper (``offsets.storage``). A
``rebalance_listener`` hears of partitions given up and taken
(``on_partitions_revoked`` / ``on_partitions_assigned``, each with a list of
partitions; without a group, only the latter, as partitions appear).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from hostbroker.client.consumer import EARLIEST, FETCH_SETTINGS, LATEST, SimpleConsumer
from hostbroker.client.group_assignments import Assignments, Progress
from hostbroker.client.group_cluster import ClusterSide
from hostbroker.client.group_coordinator import CoordinatorSide
from hostbroker.client.group_plugins import (Blacklist, BrokerOffsetStorage, OffsetStorage,
                                             PartitionAssignor, RoundRobinAssignor,
                                             TopicFilter, Whitelist)
from hostbroker.client.settings import broker_uris, resolve
from hostbroker.client.streams import Fetcher, KafkaStream, MessageAndMetadata, TopicPartition
from hostbroker.client.throttle_stats import ThrottleStats
from hostbroker.cluster.zkread import SETTINGS as ZK_READ_SETTINGS
from hostbroker.config import Setting, between, one_of
from hostbroker.errors import ConfigError, ErrorCode

__all__ = ["GROUP_SETTINGS", "Blacklist", "BrokerOffsetStorage", "ConsumerConnector",
           "KafkaStream", "MessageAndMetadata", "OffsetStorage", "PartitionAssignor",
           "RoundRobinAssignor", "TopicFilter", "Whitelist"]

log = logging.getLogger(__name__)


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
            "Fetched sets each stream's queue holds before fetching for it pauses (one "
            "fetch may add a set per partition of the stream).", between(1, 100000)),
    Setting("topic.refresh.interval.ms", int, 30000,
            "How often the consumer looks for new topics and partitions of its subscription.",
            between(1, 2**31 - 1)),
    Setting("num.consumer.fetchers", int, 1,
            "Fetcher threads, each with its own connection and share of the partitions.",
            between(1, 64)),
    Setting("retry.backoff.ms", int, 200,
            "Pause before fetching again after a connection failure or a transient error; "
            "doubles at each failure in a row.", between(0, 2**31 - 1)),
    Setting("retry.backoff.max.ms", int, 10000,
            "Longest pause retry.backoff.ms doubles to while the broker cannot be reached.",
            between(0, 2**31 - 1)),
    Setting("zookeeper.connect", str, "",
            "Cluster mode: host:port[,host:port...][/chroot] of the ZooKeeper that "
            "coordinates the group and names the brokers (broker.list is then not used)."),
    Setting("zookeeper.session.timeout.ms", int, 6000,
            "Cluster mode: a consumer silent this long leaves the group (its partitions "
            "are rebalanced).", between(400, 2**31 - 1)),
    Setting("zookeeper.connection.timeout.ms", int, 6000,
            "Cluster mode: how long the first connection to ZooKeeper is waited for.",
            between(1, 2**31 - 1)),
    Setting("rebalance.max.retries", int, 4,
            "Cluster mode: attempts of a rebalance after the first while another consumer "
            "still owns a partition this one is to take.", between(0, 1000)),
    Setting("rebalance.backoff.ms", int, 2000,
            "Cluster mode: longest wait between two attempts of a rebalance (a released "
            "owner node ends it at once).", between(0, 2**31 - 1)),
    Setting("heartbeat.interval.ms", int, 100,
            "Standalone group: how often a member tells the broker's group coordinator it "
            "lives (and learns of a rebalance).", between(1, 2**31 - 1)),
    Setting("session.timeout.ms", int, 6000,
            "Standalone group: a member without a heartbeat this long leaves the group "
            "(within the broker's group.min/max.session.timeout.ms).", between(1, 2**31 - 1)),
    Setting("rebalance.timeout.ms", int, 6000,
            "Standalone group: how long a rebalance this member starts waits for the other "
            "members to join again before going on without them.", between(1, 2**31 - 1)),
    Setting("offsets.storage", str, "zookeeper",
            "Cluster mode: where the group's offsets are kept: zookeeper "
            "(/consumers/[group]/offsets) or broker (each partition's broker). Standalone "
            "offsets are always kept by the broker.", one_of("zookeeper", "broker")),
) + ZK_READ_SETTINGS  # cluster mode: the bounds of what is read from ZooKeeper

# The connector.


class ConsumerConnector:
    """The high-level consumer of one ``group.id``.

    ``bootstrap`` (a URI or a list) overrides ``broker.list``; settings as for
    :class:`SimpleConsumer` plus GROUP_SETTINGS. ``offset_storage`` defaults to
    the group's offsets on the same brokers, committed fenced by the member's
    generation. Without ``zookeeper_connect`` the broker's group coordinator gives
    the partitions; an ``assignor`` (a :class:`PartitionAssignor`) instead makes this
    connector read every partition of its topics, dealt to its streams by it (the
    default then and for a broker that does not serve groups:
    :class:`RoundRobinAssignor`). With ``zookeeper_connect`` the group's rebalance in
    ZooKeeper gives the partitions instead (``bootstrap`` and ``assignor`` are not
    used), and ``offset_storage`` defaults to ``offsets.storage``.
    ``rebalance_listener`` may have ``on_partitions_revoked(partitions)`` and
    ``on_partitions_assigned(partitions)``. Streams are created once per connector,
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
        rebalance_listener: Any = None,
        **options: Any,
    ):
        self.settings = resolve(GROUP_SETTINGS, config, options)
        self._throttle = ThrottleStats("fetch", log)  # of every fetcher's FETCH v2 answers
        self.group: str = self.settings["group.id"]
        if not self.group:
            raise ConfigError("group.id: required by the high-level consumer")
        self._uris = broker_uris(bootstrap, self.settings)
        self.rebalance_listener = rebalance_listener
        # The group's side: ZooKeeper's rebalance, or the broker's group coordinator.
        self.cluster: ClusterSide | CoordinatorSide | None = None
        self._coordinated = False
        if self.settings["zookeeper.connect"]:
            if bootstrap is not None or "broker.list" in (config or {}) or "broker_list" in options:
                raise ConfigError("zookeeper.connect: not together with a bootstrap or "
                                  "broker.list (the brokers come from ZooKeeper)")
            from hostbroker.cluster.zk import make_client

            client = make_client(self.settings["zookeeper.connect"],
                                 self.settings["zookeeper.session.timeout.ms"],
                                 self.settings["zookeeper.connection.timeout.ms"])
            self.cluster = ClusterSide(self, client)
            if offset_storage is None:
                offset_storage = self.cluster.offset_storage()
        elif assignor is None:
            # A member of the group on the broker (group_coordinator); an assignor of
            # the caller's keeps the old way: this connector reads every partition.
            self.cluster = CoordinatorSide(self)
            self._coordinated = True
        self._own_storage = offset_storage is None
        if offset_storage is None:
            if self._coordinated:
                offset_storage = self.cluster.offset_storage()
            else:
                offset_storage = BrokerOffsetStorage(self._uris, self._fetch_config())
        self.offset_storage = offset_storage
        self.assignor = assignor or RoundRobinAssignor()
        self.closed = False
        self._streams: list[KafkaStream] = []
        # Subscription: per topic its streams, or one filter over all of them.
        self._topic_streams: dict[str, list[KafkaStream]] = {}
        self._filter: TopicFilter | None = None
        self._fetchers: list[Fetcher] = []
        self._owned: dict[TopicPartition, KafkaStream] = {}
        self._done: dict[TopicPartition, int] = {}  # moved past: safe for the interval commit
        if self.cluster is not None:
            self._owned = Assignments()
            self._done = Progress(self._owned)
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

    def _new_consumer(self, uris: list[str] | None = None) -> SimpleConsumer:
        return SimpleConsumer(uris or self._uris, self._fetch_config(), auto_offset_reset="none",
                              throttle_stats=self._throttle)

    @property
    def stats(self) -> dict[str, float]:
        """Kafka's ``fetch-throttle-time-avg`` and ``fetch-throttle-time-max``: how long
        the brokers held the FETCH answers of this connector's fetchers for a
        quota, in ms (over the last minute at most, as Kafka's)."""
        return self._throttle.stats()

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
        self._next_commit = time.monotonic() + self.settings["auto.commit.interval.ms"] / 1000
        if self.cluster is not None and not self._coordinated:
            # Registers and rebalances once; its fetchers start as partitions come.
            self.cluster.member.start()
            return
        if self._coordinated and self.cluster.begin():
            return
        self._fetchers = [Fetcher(self, i) for i in range(self.settings["num.consumer.fetchers"])]
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

    def _housekeeping(self, fetcher: Fetcher) -> None:
        now = time.monotonic()
        if now >= self._next_refresh:
            self._refresh(fetcher.consumer)
        self._auto_commit(now)

    def _auto_commit(self, now: float) -> None:
        """Commit what the streams moved past, every auto.commit.interval.ms."""
        if self.settings["auto.commit.enable"] and now >= self._next_commit:
            self._next_commit = now + self.settings["auto.commit.interval.ms"] / 1000
            try:
                self._commit(self._progress(handed=False))
            except Exception as exc:  # noqa: BLE001 - broker or ZooKeeper errors: next interval
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
        self._notify("on_partitions_assigned", sorted(new))

    def _notify(self, method: str, partitions: list) -> None:
        """Call the rebalance listener's ``method`` (if any); its errors are logged."""
        call = getattr(self.rebalance_listener, method, None)
        if call is None:
            return
        try:
            call(partitions)
        except Exception:  # noqa: BLE001 - a listener's bug must not stop the group
            log.exception("consumer group %s: rebalance listener %s failed", self.group, method)

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
        if self.cluster is not None:
            self.cluster.forget(tp)

    def _room_made(self) -> None:
        for fetcher in self._fetchers:
            fetcher.wake.set()

    # Offsets.

    def positions(self) -> dict[TopicPartition, int]:
        """Per partition, the next_offset of the last message handed out (what a commit stores)."""
        return self._progress(handed=True)

    def _progress(self, handed: bool) -> dict[TopicPartition, int]:
        """``_done`` with each stream's batch in hand: the last message it handed out, or
        (for the interval commit) the last it moved past, asking for another after it."""
        out = dict(self._done)  # first: what the streams show next is as new or newer
        for stream in self._streams:
            progress = stream.progress()
            if progress is None:
                continue
            key, last, moved = progress
            if handed and last is not None and not self._reassigned(key):
                out[key] = last
            elif not handed and moved is not None and (self.cluster is None
                                                       or self._owned.get(key) is not None):
                out[key] = moved  # as _done records it: for the current assignment only
        return out

    def owns(self, key: TopicPartition) -> bool:
        """Whether the partition ``key`` (as a message's topic and partition, and in
        cluster mode its broker, name it) is this connector's now."""
        return key in self._owned

    def _reassigned(self, key: TopicPartition) -> bool:
        """Cluster mode: ``key`` (a handed-out message's) was given up and assigned again
        since: its position is the old assignment's, not to be committed."""
        return self.cluster is not None and key in self._owned and self._owned.get(key) is None

    def commit_offsets(self) -> None:
        """Store the positions of every partition a message was handed out of since the last
        commit. Raises the storage's error (BrokerError, connection errors)."""
        self._commit(self.positions())

    def _commit(self, offsets: Mapping[TopicPartition, int], owned_only: bool = True) -> None:
        with self._commit_lock:
            # In cluster mode only what this consumer owns, and nothing while the
            # session its partitions were claimed under is lost (until the rebalance).
            cluster_owned = self.cluster is not None and owned_only
            if cluster_owned and self.cluster.member.session_lost:
                return
            changed = {tp: o for tp, o in offsets.items() if self._committed.get(tp) != o
                       and (not cluster_owned or tp in self._owned)}
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
        if self.cluster is not None:
            self.cluster.member.close()  # no rebalance from here on
        for stream in self._streams:
            stream.cut()  # nothing handed out past what the commit below stores
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
            if self.cluster is not None:
                self.cluster.close()
