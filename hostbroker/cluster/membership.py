"""A consumer's side of its group in ZooKeeper: registration, watches, owner claims, offsets.

:class:`GroupMember` registers the consumer under
``/consumers/[group]/ids/[consumer_id]`` (ephemeral, value ``{topic:
number_of_streams}``), watches the group's ids and, through a
:class:`~hostbroker.cluster.discovery.ClusterView`, ``/brokers/ids`` and
``/brokers/topics``, and rebalances after every change in a thread of its
own (docs/spec/zookeeper.md, "Consumer group rebalance"):

1. compute the range assignment (:mod:`hostbroker.cluster.rebalance`) from
   the live brokers' partitions (and the partitions of each replicated
   topic, whichever brokers lead them) and the members' registrations;
2. give up what moves: the owner (the consumer connector) stops fetching
   those partitions and commits what it handed out of them
   (:meth:`Owner.revoke`), then their owner nodes are deleted;
3. claim ``/consumers/[group]/owners/[topic]/[broker_id-partition]``
   (``[partition]`` for a replicated topic's; ephemeral, value
   ``consumer_id-stream_index``) for every partition of
   the new assignment (the ones kept are checked to be still ours); a node
   another consumer still holds fails the attempt: the nodes claimed in it
   are released, and the attempt is made again after
   ``rebalance.backoff.ms``, or as soon as that node is deleted, at most
   ``rebalance.max.retries`` times in a row (then an error in the log, and
   the next change or ``RETRY_AFTER_GIVING_UP_S`` tries again);
4. hand the new partitions to the owner (:meth:`Owner.assign`).

Only partitions whose stream changes move: a rebalance that leaves a
partition on the same stream does not stop its fetching. A session lost and
made again registers the consumer again (its ephemeral nodes went with the
old session) and rebalances; the partitions claimed under the lost session
are given up first without a commit (others may have read them meanwhile:
:attr:`GroupMember.session_lost` holds every commit back until then) and
claimed again from the group's offsets.

:class:`ZooKeeperOffsets` keeps a group's offsets under
``/consumers/[group]/offsets/[topic]/[broker_id-partition]`` (a replicated
topic's: ``.../[topic]/[partition]``; persistent, decimal); it has the
methods of the client's ``OffsetStorage``.

Keys: a partition of the cluster is a :class:`PartitionKey` ``(topic,
partition, broker_id)``, a tuple whose first two items are what a FETCH
asks for; ``broker_id`` is :data:`~hostbroker.cluster.paths.REPLICATED`
for a replicated topic's partition (fetched from its leader, wherever that
is).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple, Protocol

from hostbroker.cluster import paths, rebalance, zkread
from hostbroker.cluster.discovery import ClusterView, Snapshot

log = logging.getLogger(__name__)

RETRY_AFTER_GIVING_UP_S = 10.0
RECHECK_S = 1.0  # a partition its broker no longer had is looked at again this much later
TICK_S = 0.5  # how often Owner.tick runs (interval commits)


class PartitionKey(NamedTuple):
    """One partition of the cluster: ``partition`` of ``topic`` on broker ``broker_id``
    (REPLICATED: a replicated topic's partition, at its leader)."""

    topic: str
    partition: int
    broker_id: int

    @property
    def name(self) -> str:
        return paths.partition_name(self.broker_id, self.partition)


def spec_order(key: PartitionKey) -> tuple[str, int, int]:
    """Sort key of the spec's order: topic, then broker, then partition."""
    return key.topic, key.broker_id, key.partition


def new_consumer_id() -> str:
    """``hostname:uuid`` (docs/spec/zookeeper.md)."""
    return f"{socket.gethostname()}:{uuid.uuid4()}"


class Owner(Protocol):
    """What the member drives: the consumer connector, whose streams read the partitions."""

    def owned(self) -> dict[PartitionKey, int]:
        """Each partition read now and the index of its stream (within its topic's streams)."""

    def revoke(self, keys: list[PartitionKey], commit: bool = True) -> None:
        """Stop fetching ``keys`` and (with ``commit``) commit what was handed out of them."""

    def assign(self, keys: dict[PartitionKey, int], snapshot: Snapshot) -> None:
        """Start reading ``keys`` (-> stream index) where the group left off."""

    def tick(self) -> None:
        """Called every TICK_S from the member's thread (interval commits)."""

    def follow(self, snapshot: Snapshot) -> None:
        """Reach each broker at the listeners ``snapshot`` gives it (a broker may have
        registered again with other ones while its partitions stayed here)."""

    def forgotten(self) -> set[PartitionKey]:
        """Partitions it stopped reading by itself since last asked (their broker answered
        UNKNOWN_TOPIC_OR_PARTITION); they are in :meth:`owned` no more."""


class ZooKeeperOffsets:
    """A group's offsets in ZooKeeper (thread safe, as kazoo's client is)."""

    def __init__(self, client, bounds: zkread.Bounds = zkread.DEFAULT):
        self.client = client
        self.bounds = bounds
        self.report = zkread.Reporter(log)

    def fetch(self, group: str, keys: Iterable[PartitionKey]) -> dict[PartitionKey, int]:
        from kazoo.exceptions import NoNodeError

        out = {}
        for key in keys:
            path = paths.offset_path(group, key.topic, key.broker_id, key.partition)
            try:
                data, _ = self.client.get(path)
                out[key] = paths.decode_offset(data, path, self.bounds)
            except NoNodeError:
                out[key] = -1
            except ValueError as exc:
                self.report(path, f"{exc}; reading from auto.offset.reset instead")
                out[key] = -1
        return out

    def commit(self, group: str, offsets: Mapping[PartitionKey, int]) -> None:
        from kazoo.exceptions import NoNodeError

        for key, offset in sorted(offsets.items()):
            path = paths.offset_path(group, key.topic, key.broker_id, key.partition)
            value = paths.encode_count(offset)
            try:
                self.client.set(path, value)
            except NoNodeError:
                self.client.create(path, value, makepath=True)

    def close(self) -> None:
        """The client belongs to the member; nothing to release here."""


class GroupMember:
    """One consumer of ``group`` in ZooKeeper (see the module docstring).

    ``subscription(snapshot)`` says which topics the consumer reads and with
    how many streams each (a topic filter's answer changes with the
    snapshot); ``owner`` is driven as :class:`Owner` describes.
    """

    def __init__(self, client, group: str, owner: Owner,
                 subscription: Callable[[Snapshot], dict[str, int]], *,
                 consumer_id: str | None = None, max_retries: int = 4,
                 backoff_ms: int = 2000, bounds: zkread.Bounds = zkread.DEFAULT):
        self.client = client
        self.group = group
        self.owner = owner
        self.subscription = subscription
        self.consumer_id = consumer_id or new_consumer_id()
        self.max_retries = max_retries
        self.backoff = backoff_ms / 1000
        self.bounds = bounds
        self.report = zkread.Reporter(log)
        self.path = paths.consumer_path(group, self.consumer_id)
        self.rebalances = 0  # attempts that ended with every partition claimed
        # Sessions lost (counted by the state listener) and how many of them a
        # rebalance has dealt with: see session_lost.
        self._losses = 0
        self._losses_handled = 0
        self._recheck_at: float | None = None  # see recheck_soon
        self._registered: bytes | None = None
        self._idle_logged: set[tuple[str, int]] = set()
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._lock = threading.Lock()  # one rebalance at a time
        self._thread: threading.Thread | None = None
        self.view: ClusterView | None = None

    # Start and stop.

    def start(self) -> None:
        """Register, set the watches and rebalance once (retrying as a rebalance does);
        then keep the group in step from a thread of its own."""
        client = self.client
        client.ensure_path(paths.group_ids_path(self.group))
        self.view = ClusterView(client, on_change=lambda _snapshot: self._wake.set(),
                                bounds=self.bounds)
        client.add_listener(self._on_state)
        client.ChildrenWatch(paths.group_ids_path(self.group), self._on_members,
                             send_event=False)
        ok = self._rebalance_with_retries()
        self._thread = threading.Thread(target=self._run, args=(ok,), daemon=True,
                                        name="hb-consumer-rebalance")
        self._thread.start()

    def close(self) -> None:
        """Stop rebalancing; the owner then stops and commits; :meth:`leave` removes the nodes."""
        self._closed.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        if self.view is not None:
            self.view.close()
        self.client.remove_listener(self._on_state)

    def leave(self, keys: Iterable[PartitionKey]) -> None:
        """Delete the owner nodes of ``keys`` that are ours, then the registration
        (owners first: the others rebalance on the registration's removal)."""
        from kazoo.exceptions import KazooException, NoNodeError

        try:
            self._release(keys)
            self.client.delete(self.path)
        except NoNodeError:
            pass  # never registered, or the session already ended
        except KazooException as exc:
            log.warning("consumer group %s: leaving: %s (the session's end removes "
                        "the nodes)", self.group, exc)

    # Watches and the thread.

    def _on_state(self, state) -> None:
        from kazoo.protocol.states import KazooState

        if state == KazooState.LOST:
            self._registered = None  # ephemeral nodes went with the session
            self._losses += 1
        elif state == KazooState.CONNECTED:
            self._wake.set()

    @property
    def session_lost(self) -> bool:
        """Whether a session ended since the partitions held now were claimed: their owner
        nodes went with it and other consumers may read them already, so nothing may be
        committed for them until the next rebalance gave them up."""
        return self._losses != self._losses_handled

    def recheck_soon(self) -> None:
        """Rebalance RECHECK_S from now (for a partition the owner stopped reading: its
        owner node is released, or it is read again if its broker has it back)."""
        if self._recheck_at is None:
            self._recheck_at = time.monotonic() + RECHECK_S

    def _on_members(self, _children) -> bool | None:
        if self._closed.is_set():
            return False
        self._wake.set()
        return None

    def _run(self, ok: bool) -> None:
        due = None if ok else time.monotonic() + RETRY_AFTER_GIVING_UP_S
        while not self._closed.is_set():
            wait = TICK_S if due is None else min(TICK_S, max(due - time.monotonic(), 0))
            woke = self._wake.wait(wait)
            if self._closed.is_set():
                return
            recheck = self._recheck_at
            if recheck is not None and time.monotonic() >= recheck:
                self._recheck_at = None
                woke = True
            try:
                self.owner.tick()
            except Exception:  # noqa: BLE001 - the owner logs its own; keep rebalancing
                log.exception("consumer group %s: periodic work failed", self.group)
            if woke or (due is not None and time.monotonic() >= due):
                due = None if self._rebalance_with_retries() else (
                    time.monotonic() + RETRY_AFTER_GIVING_UP_S)

    # Rebalancing.

    def _rebalance_with_retries(self) -> bool:
        for attempt in range(1, self.max_retries + 2):
            if self._closed.is_set():
                return True
            self._wake.clear()
            try:
                conflict = self._rebalance_once()
            except Exception as exc:  # noqa: BLE001 - ZooKeeper or a broker unreachable
                log.warning("consumer group %s: rebalance attempt %d failed: %s",
                            self.group, attempt, exc)
                conflict = ""
            if conflict is None:
                self.rebalances += 1
                return True
            if attempt > self.max_retries:
                break
            if conflict:
                log.info("consumer group %s: %s still owned; retrying (attempt %d)",
                         self.group, conflict, attempt)
                self._watch_deletion(conflict)
            self._wake.wait(self.backoff)
        log.error("consumer group %s: rebalance failed after %d attempts; trying again at "
                  "the next change", self.group, self.max_retries + 1)
        return False

    def _watch_deletion(self, path: str) -> None:
        """Wake the rebalance as soon as ``path`` is gone."""
        def on_event(_event) -> None:
            self._wake.set()
        try:
            if self.client.exists(path, watch=on_event) is None:
                self._wake.set()
        except Exception:  # noqa: BLE001 - the back-off still ends the wait
            pass

    def _register(self, topics: dict[str, int]) -> None:
        from kazoo.exceptions import NodeExistsError

        value = paths.encode_subscription(topics)
        if self._registered == value and self.client.exists(self.path) is not None:
            return
        try:
            self.client.create(self.path, value, ephemeral=True, makepath=True)
        except NodeExistsError:
            self.client.set(self.path, value)
        self._registered = value

    def members(self) -> dict[str, dict[str, int]]:
        """consumer_id -> subscription of every registered consumer of the group, each
        checked against the bounds: one that passes them is left out (with a warning),
        as are the registrations that would take a topic's streams over the whole group
        past ``zookeeper.max.group.streams``."""
        from kazoo.exceptions import NoNodeError

        bounds, out = self.bounds, {}
        streams: dict[str, int] = {}  # topic -> streams of the group so far
        ids = paths.group_ids_path(self.group)
        for consumer in zkread.children(self.client, ids, bounds, self.report):
            path = f"{ids}/{consumer}"
            if not zkread.name_ok(consumer):
                self.report(path, f"{path[:120]}: not a consumer id")
                continue
            try:
                data, _ = self.client.get(path)
                subscription = paths.decode_subscription(data, path, bounds)
            except NoNodeError:
                continue
            except ValueError as exc:
                self.report(path, f"{exc}; that consumer is left out of the rebalance")
                continue
            over = [t for t, n in subscription.items()
                    if streams.get(t, 0) + n > bounds.group_streams]
            if over:
                self.report(path, f"{path}: its streams of {over[0][:80]} take the group past "
                                  f"zookeeper.max.group.streams ({bounds.group_streams}); that "
                                  "consumer is left out of the rebalance")
                continue
            for t, n in subscription.items():
                streams[t] = streams.get(t, 0) + n
            out[consumer] = subscription
        return out

    def plan(self, snapshot: Snapshot, topics: dict[str, int]) -> dict[PartitionKey, int]:
        """This consumer's partitions (-> stream index) under the range assignment."""
        members = self.members()
        members[self.consumer_id] = topics
        plan = rebalance.assign_group({t: snapshot.group_partitions(t) for t in topics},
                                      members)
        mine: dict[PartitionKey, int] = {}
        for topic, streams in plan.items():
            for (consumer, index), pairs in streams.items():
                if consumer != self.consumer_id:
                    continue
                for broker_id, partition in pairs:
                    mine[PartitionKey(topic, partition, broker_id)] = index
                idle = (topic, index)
                if not pairs and idle not in self._idle_logged:
                    self._idle_logged.add(idle)
                    log.warning("consumer group %s: stream %d of %s owns no partition of "
                                "%s (%d partitions, %d streams in the group)", self.group,
                                index, self.consumer_id, topic,
                                len(snapshot.group_partitions(topic)),
                                len(streams))
                elif pairs:
                    self._idle_logged.discard(idle)
        return mine

    def _rebalance_once(self) -> str | None:
        """One attempt: None when every partition of the assignment is ours, else the
        owner path that another consumer still holds ("" when there is none to name)."""
        with self._lock:
            assert self.view is not None
            snapshot = self.view.refresh()
            self.owner.follow(snapshot)
            topics = self.subscription(snapshot)
            self._register(topics)
            mine = self.plan(snapshot, topics)
            current = self.owner.owned()
            losses = self._losses
            if losses != self._losses_handled:
                if current:
                    # Claimed under a session that ended: another consumer may have
                    # read them since from the group's offsets, so what was handed
                    # out of them is not committed over its progress.
                    log.warning("consumer group %s: ZooKeeper session of %s expired; giving "
                                "up its %d partitions without committing, to claim them "
                                "again from the group's offsets", self.group,
                                self.consumer_id, len(current))
                    self.owner.revoke(sorted(current, key=spec_order), commit=False)
                    current = {}
                self._losses_handled = losses
            # Dropped by the owner (its broker said it has it no more): released
            # unless the assignment still has it here, which reads it again.
            self._release(sorted((k for k in self.owner.forgotten()
                                  if k not in mine and k not in current), key=spec_order))
            revoked = sorted((k for k, i in current.items() if mine.get(k) != i), key=spec_order)
            if revoked:
                self.owner.revoke(revoked)
                self._release(revoked)
            claimed: list[PartitionKey] = []
            for key, index in sorted(mine.items(), key=lambda item: spec_order(item[0])):
                state = self._claim(key, index)
                if state == "created":
                    claimed.append(key)
                elif state == "taken":
                    if key in current and key not in revoked:
                        # Ours no more (a session lost in between): stop reading it,
                        # committing nothing over its new owner's progress.
                        self.owner.revoke([key], commit=False)
                    self._release(claimed)
                    return paths.owner_path(self.group, key.topic, key.broker_id,
                                            key.partition)
            added = {k: i for k, i in mine.items() if current.get(k) != i}
            if added:
                self.owner.assign(added, snapshot)
            log.info("consumer group %s: %s owns %d partitions (%d new, %d given up)",
                     self.group, self.consumer_id, len(mine), len(added), len(revoked))
            return None

    def _claim(self, key: PartitionKey, index: int) -> str:
        """"created", "ours" (already held by this stream) or "taken" (by another)."""
        from kazoo.exceptions import NodeExistsError, NoNodeError

        path = paths.owner_path(self.group, key.topic, key.broker_id, key.partition)
        value = paths.encode_owner(self.consumer_id, index)
        try:
            self.client.create(path, value, ephemeral=True, makepath=True)
            return "created"
        except NodeExistsError:
            pass
        try:
            data, stat = self.client.get(path)
        except NoNodeError:
            return "taken"  # released meanwhile: the next attempt takes it
        if data == value and stat.ephemeralOwner == self.client.client_id[0]:
            return "ours"
        return "taken"

    def _release(self, keys: Iterable[PartitionKey]) -> None:
        """Delete the owner nodes of ``keys`` that this session holds."""
        from kazoo.exceptions import NoNodeError

        session = self.client.client_id[0] if self.client.client_id else None
        for key in keys:
            path = paths.owner_path(self.group, key.topic, key.broker_id, key.partition)
            try:
                _, stat = self.client.get(path)
                if stat.ephemeralOwner == session:
                    self.client.delete(path, version=stat.version)
            except NoNodeError:
                continue
