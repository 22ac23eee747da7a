"""The high-level consumer on a standalone broker: partitions given by the broker's
group coordinator (docs/spec/groups.md).

Without ``zookeeper.connect`` (and without an ``assignor`` of the caller's) a
:class:`~hostbroker.client.group.ConsumerConnector` is a member of its group on the
broker (it hands itself in as a
:class:`~hostbroker.client.group_assignments.GroupConnector`).
:class:`CoordinatorSide` is what the connector does there; its
:class:`CoordinatedMember` runs the member's life cycle:

- **join, sync, fetch**: JOIN_GROUP with the subscription (``{topic: streams}``; a
  filter's matching topics, each with every stream), SYNC_GROUP for this member's
  streams and partitions, their committed offsets read (``auto.offset.reset`` where
  there are none), the rebalance listener's ``on_partitions_assigned``, then fetching
  by ``num.consumer.fetchers`` fetcher threads. The first join is made in the caller's
  thread (``create_message_streams``): a broker that cannot be reached fails the call,
  and one that answers the join UNSUPPORTED_VERSION (it does not serve groups) makes
  the connector fall back to reading every partition itself (one warning).
- **heartbeats** from a thread of their own every ``heartbeat.interval.ms``, so a slow
  message handler does not end the session.
- **rebalance** (a heartbeat answered REBALANCE_IN_PROGRESS): the member thread stops
  fetching every partition, commits what was handed out of them (still allowed: the
  generation is current until the rebalance completes), fires
  ``on_partitions_revoked``, joins again and syncs, and reads the new assignment
  from the committed offsets. ILLEGAL_GENERATION: the member missed a generation: it
  gives its partitions up without a commit (they may be another's now) and rejoins;
  UNKNOWN_MEMBER_ID: the same, as a new member. From then until the next sync nothing
  is committed (:attr:`CoordinatedMember.session_lost`).
- **commits** are OFFSET_COMMIT v1 with the member's generation and id
  (:class:`FencedOffsets`); one refused ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID fences
  the member too (a rebalance follows). A member that is no member any more
  (UNKNOWN_MEMBER_ID) commits what it handed out from outside the group, which the
  broker stores only while the group has no members, and only where the stored
  offsets are still the ones it last read or wrote (no one else committed since).
- **shutdown**: the connector commits last, then the member leaves (LEAVE_GROUP), so
  the others rebalance at once.

Partitions are keyed ``(topic, partition)``; each assignment's key objects are its
own (:class:`~hostbroker.client.group_assignments.Assignments`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from hostbroker.client.coordinator_requests import CoordinatorClient
from hostbroker.client.errors import BrokerError
from hostbroker.client.consumer import SimpleConsumer
from hostbroker.client.group_assignments import GroupConnector, give_up
from hostbroker.client.group_plugins import BrokerOffsetStorage
from hostbroker.client.streams import Backoff, Fetcher, TopicPartition
from hostbroker.errors import ErrorCode

log = logging.getLogger(__name__)

TICK_S = 0.1  # the member thread's pace: interval commits, filter refreshes
_FENCED = frozenset({ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID})
# A heartbeat answered with these changes nothing (BROKER_NOT_AVAILABLE: a process of
# the broker was replaced meanwhile; the next beat asks again).
_PASSING = frozenset({ErrorCode.NONE, ErrorCode.BROKER_NOT_AVAILABLE})
_LEAVE_TIMEOUT_S = 5.0


class GroupsNotServed(Exception):
    """The broker answered JOIN_GROUP UNSUPPORTED_VERSION: it does not serve groups."""


class FencedOffsets:
    """The group's offsets on the broker: read with OFFSET_FETCH, stored with
    OFFSET_COMMIT v1 as the member's current ``(generation, member_id)``. A commit
    refused ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID fences the member. Thread safe."""

    def __init__(self, member: CoordinatedMember, uris: list[str], config: Mapping[str, Any]):
        self.member = member
        self._reads = BrokerOffsetStorage(uris, config)
        self._client = member.new_client()
        self._lock = threading.Lock()
        self.refused = 0  # commits refused by the fence (for tools and tests)
        # The stored offsets as this member last read or wrote them (-1: none).
        self._known: dict[TopicPartition, int] = {}

    def fetch(self, group: str, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        partitions = list(partitions)
        found = self._reads.fetch(group, partitions)
        with self._lock:
            self._known.update({tp: found.get(tp, -1) for tp in partitions})
        return found

    def commit(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        entries = [(t, p, o, None) for (t, p), o in sorted(offsets.items())]
        if not entries:
            return
        with self._lock:
            generation, member_id = self.member.ids
            if generation < 0:  # not a member now: a commit from outside the group
                member_id = ""
                self._refuse_stale(group, entries)
            try:
                codes = self._client.commit(group, generation, member_id, entries)
            except ConnectionError:
                codes = self._client.commit(group, generation, member_id, entries)
            if (generation >= 0 and self.member.closed and codes
                    and set(codes.values()) == {ErrorCode.UNKNOWN_MEMBER_ID}):
                # The last commit of a member that is gone (the broker restarted, the
                # session ended) before it learned so: from outside, as on a rejoin.
                generation = -1
                self._refuse_stale(group, entries)
                codes = self._client.commit(group, -1, "", entries)
            self._known.update({(t, p): o for t, p, o, _ in entries
                                if codes.get((t, p)) == ErrorCode.NONE})
        for (topic, partition), code in sorted(codes.items()):
            if code in _FENCED:
                self.refused += 1
                self.member.fence(generation, code)
            if code != ErrorCode.NONE:
                raise BrokerError(code, topic=topic, partition=partition)

    def _refuse_stale(self, group: str, entries: list) -> None:
        """A commit from outside the group (the member lost its membership) is stored
        by the broker while the group has no members, also after another member took
        these partitions, committed and left: refuse it, as the broker refuses a fenced
        member, when a stored offset is not the one this member last read or wrote
        (someone else committed since; storing would overwrite it, maybe lower it)."""
        stored = self._reads.fetch(group, [(t, p) for t, p, _, _ in entries])
        for topic, partition, _, _ in entries:
            now, known = stored.get((topic, partition), -1), self._known.get((topic, partition))
            if now != known:
                self.refused += 1
                raise BrokerError(ErrorCode.UNKNOWN_MEMBER_ID,
                                  f"not a member, and group {group} has stored offset {now} "
                                  f"since this member's {known}",
                                  topic=topic, partition=partition)

    def close(self) -> None:
        with self._lock:
            self._client.close()
        self._reads.close()


class CoordinatedMember:
    """The member's life cycle (module docstring): its ids, the member and heartbeat
    threads, and each connection they use."""

    def __init__(self, side: CoordinatorSide):
        self.side = side
        c = side.connector
        self.group = c.group
        settings = c.settings
        self.session_ms = settings["session.timeout.ms"]
        self.rebalance_ms = settings["rebalance.timeout.ms"]
        self.interval = settings["heartbeat.interval.ms"] / 1000
        self.ids: tuple[int, str] = (-1, "")  # (generation, member_id), set together
        self.session_lost = False  # fenced: nothing is committed until the next sync
        self.closed = False
        self.rebalances = 0  # completed syncs (for tools and tests)
        self._joining = True  # the heartbeat thread waits meanwhile
        self._problem: tuple[int, int] | None = None  # (generation, code) to act on
        self._wake = threading.Event()
        self._closing = threading.Event()  # ends the heartbeat thread's wait
        self._backoff = Backoff(settings["retry.backoff.ms"] / 1000,
                                settings["retry.backoff.max.ms"] / 1000)
        self._client = self.new_client()  # the member thread's
        self._beats = self.new_client()  # the heartbeat thread's
        self.thread = threading.Thread(target=self._run, name="hb-group-member", daemon=True)
        self.heart = threading.Thread(target=self._beat, name="hb-group-heartbeat", daemon=True)

    @property
    def generation(self) -> int:
        return self.ids[0]

    @property
    def member_id(self) -> str:
        return self.ids[1]

    def new_client(self) -> CoordinatorClient:
        s = self.side.connector.settings
        return CoordinatorClient(self.side.connector._uris,
                                 timeout=s["socket.timeout.ms"] / 1000,
                                 setup_timeout=s["socket.connection.setup.timeout.ms"] / 1000,
                                 client_id=s["client.id"], tls=s)

    # Threads.

    def first_join(self) -> None:
        """In the caller's thread: join and sync once (GroupsNotServed, or the error)."""
        try:
            self._join_and_sync(first=True)
        except BrokerError as exc:
            if exc.code == ErrorCode.UNSUPPORTED_VERSION:
                raise GroupsNotServed(str(exc)) from None
            raise

    def start(self) -> None:
        self.thread.start()
        self.heart.start()

    def _run(self) -> None:
        while not self.closed:
            self._wake.wait(TICK_S)
            self._wake.clear()
            if self.closed:
                break
            try:
                self.side.tick()
                problem, self._problem = self._problem, None
                if problem is not None and problem[0] == self.generation:
                    self._rebalance(problem[1])
                elif self.side.subscription_changed():
                    self._rebalance(ErrorCode.REBALANCE_IN_PROGRESS)
            except (BrokerError, OSError, ConnectionError) as exc:
                # The broker (or its offsets) for now: join again after a pause.
                log.warning("consumer group %s: %s; joining again", self.group, exc)
                self._problem = (self.generation, ErrorCode.REBALANCE_IN_PROGRESS)
                self._pause()
            except Exception as exc:
                # Nothing a retry cures (an offset storage's error, a listener's...):
                # have the readers raise it rather than wait for ever.
                log.exception("consumer group %s: member stopped", self.group)
                for stream in self.side.connector._streams:
                    stream.fail(exc)
                break

    def _beat(self) -> None:
        while not self.closed:
            self._closing.wait(self.interval)
            if self.closed or self._joining:
                continue
            generation, member_id = self.ids
            try:
                code = self._beats.heartbeat(self.group, generation, member_id)
            except Exception as exc:  # noqa: BLE001 - beat again at the next interval
                log.warning("consumer group %s: heartbeat failed: %s", self.group, exc)
                self._beats.close()
                continue
            if code not in _PASSING and not self._joining:
                log.info("consumer group %s: heartbeat of generation %d: error code %d",
                         self.group, generation, code)
                self._problem = (generation, code)
                self._wake.set()

    def fence(self, generation: int, code: int) -> None:
        """A commit of ``generation`` was refused ``code``: stop committing; rejoin."""
        if generation == self.generation:
            self.session_lost = True
            self._problem = (generation, code)
            self._wake.set()

    def _pause(self) -> None:
        deadline = time.monotonic() + self._backoff.next()
        while not self.closed and time.monotonic() < deadline:
            time.sleep(min(0.05, max(deadline - time.monotonic(), 0)))

    # The life cycle.

    def _rebalance(self, code: int) -> None:
        # Heartbeats go on while the partitions are given up (a slow listener keeps
        # the session); they stop for the join, whose wait does not end it.
        commit = not self.session_lost
        if code == ErrorCode.ILLEGAL_GENERATION:
            commit = False  # a later generation may own them: commits are refused
            self.session_lost = True
        elif code == ErrorCode.UNKNOWN_MEMBER_ID:
            # No member any more (the session ended, the broker restarted): what was
            # handed out is committed from outside the group, which the broker stores
            # only while the group has no members, so only if no one else reads them.
            self.ids = (-1, "")
            commit = True
        self.side.revoke_all(commit=commit)
        self._join_and_sync()

    def _join_and_sync(self, first: bool = False) -> None:
        """Join (again) and sync until this member has a generation's assignment."""
        self._joining = True
        while not self.closed:
            try:
                joined = self._client.join_group(
                    self.group, self.member_id, self.side.subscription(),
                    session_timeout_ms=self.session_ms, rebalance_timeout_ms=self.rebalance_ms)
                if joined.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                    self.ids = (-1, "")
                    continue
                if joined.error_code == ErrorCode.BROKER_NOT_AVAILABLE:
                    self._pause()  # not served now (spec): nothing changed, join again
                    continue
                if joined.error_code != ErrorCode.NONE:
                    raise BrokerError(joined.error_code, f"joining group {self.group}")
                if self.closed:
                    return
                code, assignment = self._client.sync_group(self.group, joined.generation,
                                                           joined.member_id)
            except (BrokerError, OSError, ConnectionError) as exc:
                self._client.close()
                if first:
                    raise
                log.warning("consumer group %s: joining failed: %s", self.group, exc)
                self._pause()
                continue
            if code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.ids = (-1, "")
                continue
            if code != ErrorCode.NONE:  # another rebalance began: join again as this member
                self.ids = (self.generation, joined.member_id)
                continue
            self._backoff.reset()
            self.ids = (joined.generation, joined.member_id)
            self.session_lost = False
            self._problem = None
            self.rebalances += 1
            log.info("consumer group %s: member %s of generation %d", self.group,
                     self.member_id, self.generation)
            self.side.assign(assignment)
            self._joining = False
            return

    def close(self) -> None:
        """No rebalance from here on (the connector shuts down)."""
        self.closed = True
        self._wake.set()
        self._closing.set()

    def leave(self) -> None:
        """After the last commit: LEAVE_GROUP (which also ends a join waiting in the
        member thread), then close the connections."""
        if self.member_id:
            client = self.new_client()
            try:
                client.leave_group(self.group, self.member_id)
            except Exception as exc:  # noqa: BLE001 - the session ends the membership
                log.warning("consumer group %s: leaving failed: %s", self.group, exc)
            finally:
                client.close()
        for thread in (self.thread, self.heart):
            if thread.is_alive() and thread is not threading.current_thread():
                thread.join(_LEAVE_TIMEOUT_S)
        self._client.close()
        self._beats.close()


class CoordinatorSide:
    """What a connector does as a member of a group on the broker (module docstring)."""

    def __init__(self, connector: GroupConnector):
        self.connector = connector
        self.member = CoordinatedMember(self)
        self._lookup: SimpleConsumer | None = None  # offsets and metadata, member thread
        self._next_refresh = 0.0
        self._topics: tuple[str, ...] = ()  # a filter's matching topics at the last join

    def offset_storage(self) -> FencedOffsets:
        c = self.connector
        return FencedOffsets(self.member, c._uris, c._fetch_config())

    def _consumer(self) -> SimpleConsumer:
        if self._lookup is None:
            self._lookup = self.connector._new_consumer()
        return self._lookup

    # The subscription.

    def _matching(self) -> tuple[str, ...]:
        c = self.connector
        self._next_refresh = time.monotonic() + c.settings["topic.refresh.interval.ms"] / 1000
        metadata = self._consumer().metadata([])
        return tuple(sorted(t.topic for t in metadata.topics
                            if t.error_code == ErrorCode.NONE and c._filter.matches(t.topic)))

    def subscription(self) -> dict[str, int]:
        c = self.connector
        if c._filter is None:
            return {topic: len(streams) for topic, streams in c._topic_streams.items()}
        self._topics = self._matching()
        # A filter matching nothing yet subscribes to a name no topic can have, so the
        # member still joins (a subscription has at least one topic).
        topics = self._topics or ("__none__",)
        return {topic: len(c._streams) for topic in topics}

    def subscription_changed(self) -> bool:
        """A filter's matching topics changed since the last join (checked every
        ``topic.refresh.interval.ms``)."""
        c = self.connector
        if c._filter is None or time.monotonic() < self._next_refresh:
            return False
        return self._matching() != self._topics

    def _streams_of(self, topic: str) -> list:
        c = self.connector
        return c._streams if c._filter is not None else c._topic_streams.get(topic, [])

    # Partitions.

    def begin(self) -> bool:
        """In ``create_message_streams``: join the group and start fetching what it
        assigns; False (and the connector reads every partition itself from now on)
        when the broker does not serve groups. Raises what the first join or sync met."""
        c = self.connector
        # The member thread, not the first fetcher, does the housekeeping.
        c._fetchers = [Fetcher(c, i, housekeeping=False)
                       for i in range(c.settings["num.consumer.fetchers"])]
        try:
            self.member.first_join()
        except GroupsNotServed as exc:
            log.warning("consumer group %s: the broker does not serve consumer groups (%s); "
                        "this consumer reads every partition of its topics", c.group, exc)
            self._fall_back()
            return False
        except BaseException:
            for fetcher in c._fetchers:  # their threads never start
                fetcher.consumer.close()
            self.member.close()
            self.close()
            raise
        c._next_commit = time.monotonic() + c.settings["auto.commit.interval.ms"] / 1000
        for fetcher in c._fetchers:
            fetcher.thread.start()
        self.member.start()
        return True

    def _fall_back(self) -> None:
        """The connector without a group: every partition, dealt by its assignor."""
        c = self.connector
        c.cluster, c._coordinated = None, False
        for fetcher in c._fetchers:
            fetcher.consumer.close()
        c._fetchers = []
        self.member.close()
        self.close()
        c._owned = {}
        c._done = {}
        if c._own_storage:
            c.offset_storage.close()
            c.offset_storage = BrokerOffsetStorage(c._uris, c._fetch_config())

    def assign(self, assignment: Mapping[str, Mapping[int, Iterable[int]]]) -> None:
        """Read the partitions of this generation's assignment from the group's offsets."""
        c = self.connector
        keys: dict[TopicPartition, int] = {}
        for topic, streams in assignment.items():
            if c._filter is not None and topic not in self._topics:
                continue  # the placeholder of a filter that matched nothing
            for stream, partitions in streams.items():
                if stream < len(self._streams_of(topic)):
                    keys.update({(topic, p): stream for p in partitions})
        ordered = sorted(keys)
        stored = c.offset_storage.fetch(c.group, ordered)
        offsets = {}
        for tp in ordered:
            offset = stored.get(tp, -1)
            offsets[tp] = offset if offset >= 0 else c._reset_offset(self._consumer(), tp)
        c._notify("on_partitions_assigned", ordered)
        for i, tp in enumerate(ordered):
            stream = self._streams_of(tp[0])[keys[tp]]
            key = (tp[0], tp[1])  # this assignment's own object (see Assignments)
            c._owned[key] = stream
            stream.partitions.append(key)
            if c._fetchers:
                c._fetchers[i % len(c._fetchers)].add(key, stream, offsets[tp])

    def revoke_all(self, commit: bool) -> None:
        c = self.connector
        keys = sorted(c._owned)
        for fetcher in c._fetchers:
            fetcher.remove(keys)
        give_up(c, keys, commit)

    def forget(self, tp: TopicPartition) -> None:
        """From a fetcher: the broker has no such partition (deleted): the coordinator
        rebalances the group on the partition count's change."""
        log.info("consumer group %s: the broker has no partition %d of %s",
                 self.connector.group, tp[1], tp[0])

    def tick(self) -> None:
        if not self.member.session_lost:
            self.connector._auto_commit(time.monotonic())

    def close(self) -> None:
        """After the fetchers stopped and the last commit: tell the listener, leave."""
        c = self.connector
        owned = sorted(c._owned)
        if owned:
            c._notify("on_partitions_revoked", owned)
        self.member.leave()
        if self._lookup is not None:
            self._lookup.close()
