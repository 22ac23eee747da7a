"""The controller's state and decisions: leaders, ISRs and epochs of replicated topics.

Run by the ``hb-registrar`` of the one broker that holds ``/controller``
(hostbroker/workers/registrar_controller.py drives it; docs/cluster.md,
"Replicated topics"). :class:`Controller` reads and writes ZooKeeper through
the kazoo client it is given, every call bounded by ``op_timeout_s``, and
never talks to a broker itself: what brokers must be told is handed to the
``tell`` callback as :class:`Notice` values (LEADER_AND_ISR or STOP_REPLICA
for one broker), which the registrar's sender threads deliver.

What it owns in ZooKeeper (layout: docs/spec/zookeeper.md, "Replication")::

    /controller_epoch                              bumped by every new controller
    /brokers/topics/[topic]/partitions/[p]/state   leader, leader_epoch, isr (versioned)
    /admin/delete_topics/[topic], /admin/preferred_replica_election,
    /admin/reassign_partitions, /admin/controlled_shutdown/[id]   removed once done

Every state node is written with a version check against a fresh read: a
write that loses a race (the leader's registrar committing an ISR change)
reads again and decides again. Everything it reads is hostile and goes
through :mod:`hostbroker.cluster.zkread` bounds (via
:mod:`hostbroker.cluster.replica_nodes`); a node that does not decode is
reported and left alone.

The decisions themselves are pure functions in
hostbroker/cluster/controller_decisions.py, tested without ZooKeeper; the
requests under ``/admin`` (deletion, preferred election, controlled shutdown,
reassignment) are hostbroker/cluster/controller_admin.py, and a topic changed
in place (partitions added, config changed) hostbroker/cluster/controller_topics.py,
both mixed in.

The epoch a new controller takes is above every epoch it can see: the
``/controller_epoch`` node (a missing or garbage one counts as 0) and the
``controller_epoch`` of every state node its rebuild reads; so brokers, which
refuse a stale epoch, take it at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from hostbroker.cluster import paths, zkread
from hostbroker.cluster.controller_admin import AdminRequests
from hostbroker.cluster.controller_topics import TopicChanges
from hostbroker.cluster.controller_decisions import (  # noqa: F401 - the controller's API
    LEADER_AND_ISR,
    STOP_REPLICA,
    TP,
    UNCLEAN,
    Notice,
    Partition,
    after_failure,
    after_return,
    preferred,
    unclean_of,
    without,
)
from hostbroker.cluster import replica_nodes
from hostbroker.cluster.replica_nodes import PartitionState

log = logging.getLogger("hostbroker.controller")


class Controller(AdminRequests, TopicChanges):
    """The controller's view of the cluster (rebuilt from ZooKeeper at every take-over)
    and its reactions; see the module docstring. ``tell(notice)`` must not block."""

    def __init__(self, client, broker_id: int, tell: Callable[[Notice], None], *,
                 op_timeout_s: float = 5.0, unclean: bool = False,
                 bounds: zkread.Bounds = zkread.DEFAULT, report=None,
                 beat: Callable[[], None] = lambda: None, deletes_per_pass: int = 100,
                 on_topic_changed: Callable[[str], None] | None = None):
        self.client = client
        self.broker_id = broker_id
        self.tell = tell
        self.op_timeout_s = op_timeout_s
        self.unclean = unclean
        self.bounds = bounds
        self.report = report or zkread.Reporter(log)
        self.beat = beat  # the worker's heartbeat, between reads of many nodes
        self.epoch = 0
        self.epoch_version = -1
        self.live: dict[int, paths.BrokerInfo] = {}
        self.registered: dict[int, int] = {}  # broker id -> czxid of its registration
        self.topics: dict[str, dict[int, Partition]] = {}
        # None: the topic's config node cannot be taken (replicas keep theirs)
        self.configs: dict[str, dict[str, str] | None] = {}
        self.config_seen: dict[str, float] = {}
        self.on_topic_changed = on_topic_changed  # a watched topic node changed
        self.deleting: dict[str, dict[int, list[TP]]] = {}
        self.delete_requested: set[str] = set()
        self.deletes_per_pass = deletes_per_pass
        self.strays: dict[int, set[TP]] = {}

    # -- ZooKeeper calls, each bounded -------------------------------------------
    def _wait(self, async_result):
        return async_result.get(timeout=self.op_timeout_s)

    def _get(self, path: str, remove_too_long: bool = False, watch=None):
        """(data, stat) of ``path``, or None: absent, or too long to read (reported;
        removed with ``remove_too_long``). ``watch``: a one-shot kazoo data watch
        set with the read."""
        from kazoo.exceptions import NoNodeError

        try:
            data, stat = self._wait(self.client.get_async(path, watch=watch))
        except NoNodeError:
            return None
        try:
            zkread.check_size(data, path, self.bounds)
        except ValueError as exc:
            self.report(path, f"{exc}; {'removed' if remove_too_long else 'left out'}")
            if remove_too_long:
                self._delete(path)
            return None
        return data, stat

    def _children(self, path: str) -> list[str]:
        from kazoo.exceptions import NoNodeError

        try:
            names = sorted(self._wait(self.client.get_children_async(path)))
        except NoNodeError:
            return []
        if len(names) > self.bounds.children:
            self.report(path, f"{path}: {len(names)} children are over zookeeper.max.children "
                              f"({self.bounds.children}); the first {self.bounds.children} "
                              "are used")
            del names[self.bounds.children:]
        return names

    def _request(self, path: str, decode):
        """(value, stat) of an admin request node, its value read by ``decode``, or
        None. One too long to read, or that ``decode`` refuses, is removed
        (reported): left in place, it would block every later request."""
        found = self._get(path, remove_too_long=True)
        if found is None:
            return None
        try:
            return decode(found[0], path, self.bounds), found[1]
        except ValueError as exc:
            self.report(path, f"{exc}; removed")
            self._delete(path)
            return None

    def _delete(self, path: str, recursive: bool = False) -> None:
        from kazoo.exceptions import NoNodeError, NotEmptyError

        try:
            self._wait(self.client.delete_async(path))
        except NoNodeError:
            pass
        except NotEmptyError:
            if not recursive:
                raise
            for child in self._children(path):
                self._delete(f"{path}/{child}", True)
            self._delete(path, True)

    # -- taking over -------------------------------------------------------------
    def session(self) -> int | None:
        client_id = self.client.client_id
        return client_id[0] if client_id else None

    def try_elect(self) -> bool:
        """Take ``/controller`` when it is free (or is already ours, on this session)
        and bump ``/controller_epoch``; False when another broker holds it."""
        from kazoo.exceptions import NodeExistsError

        try:
            self._wait(self.client.create_async(
                replica_nodes.CONTROLLER, replica_nodes.encode_controller(self.broker_id),
                ephemeral=True, makepath=True))
        except NodeExistsError:
            found = self._get(replica_nodes.CONTROLLER)
            if found is None or found[1].ephemeralOwner != self.session():
                return False
        self.bump_epoch()
        return True

    def holder(self) -> int | None:
        """The broker id in ``/controller`` (None: free, or unreadable)."""
        found = self._get(replica_nodes.CONTROLLER)
        if found is None:
            return None
        try:
            return replica_nodes.decode_controller(found[0], replica_nodes.CONTROLLER, self.bounds)
        except ValueError as exc:
            self.report(replica_nodes.CONTROLLER, f"{exc}; left out")
            return None

    def still_controller(self) -> bool:
        found = self._get(replica_nodes.CONTROLLER)
        return found is not None and found[1].ephemeralOwner == self.session()

    def bump_epoch(self, floor: int = 0) -> None:
        """``/controller_epoch`` set one above both what it holds (a missing or garbage
        node: 0) and ``floor`` (an epoch seen elsewhere), version-checked."""
        from kazoo.exceptions import BadVersionError, NodeExistsError

        for _ in range(10):
            found = self._get(replica_nodes.CONTROLLER_EPOCH)
            if found is None:
                epoch = min(floor + 1, replica_nodes.MAX_EPOCH)
                try:
                    stat = self._wait(self.client.create_async(
                        replica_nodes.CONTROLLER_EPOCH, str(epoch).encode(), makepath=True))
                except NodeExistsError:
                    continue
                self.epoch, self.epoch_version = epoch, 0
                return
            data, stat = found
            try:
                current = replica_nodes.decode_controller_epoch(
                    data, replica_nodes.CONTROLLER_EPOCH, self.bounds)
            except ValueError as exc:
                self.report(replica_nodes.CONTROLLER_EPOCH, f"{exc}; starting over from it")
                current = 0
            epoch = min(max(current, floor) + 1, replica_nodes.MAX_EPOCH)
            try:
                stat = self._wait(self.client.set_async(
                    replica_nodes.CONTROLLER_EPOCH, str(epoch).encode(), version=stat.version))
            except BadVersionError:
                continue
            self.epoch, self.epoch_version = epoch, stat.version
            return
        raise RuntimeError(f"{replica_nodes.CONTROLLER_EPOCH} keeps changing")

    # -- reading ZooKeeper -------------------------------------------------------
    def read_live(self) -> dict[int, paths.BrokerInfo]:
        """The registered brokers (``registered`` keeps when each registered)."""
        live = {}
        self.registered = {}
        for name in self._children(paths.BROKER_IDS):
            if not name.isascii() or not name.isdigit() or len(name) > 10:
                continue
            path = paths.broker_path(int(name))
            found = self._get(path)
            if found is None:
                continue
            try:
                live[int(name)] = paths.decode_broker(int(name), found[0], path, self.bounds)
            except ValueError as exc:
                self.report(path, f"{exc}; left out")
                continue
            self.registered[int(name)] = found[1].czxid
        return live

    def read_assignment(self, topic: str) -> dict[int, list[int]] | None:
        """The replicas of a replicated topic's partitions; None for a 0.7 topic (or
        a node that does not decode, reported). Sets the topic node's watch
        (controller_topics.py) when there is someone to tell."""
        path = replica_nodes.assignment_path(topic)
        watch = self._assignment_watch if self.on_topic_changed is not None else None
        found = self._get(path, watch=watch)
        if found is None:
            return None
        try:
            return replica_nodes.decode_assignment(found[0], path, self.bounds)
        except ValueError as exc:
            self.report(path, f"{exc}; left out")
            return None

    def read_state(self, topic: str, partition: int) -> tuple[PartitionState | None, int]:
        path = replica_nodes.state_path(topic, partition)
        found = self._get(path)
        if found is None:
            return None, -1
        try:
            return replica_nodes.decode_state(found[0], path, self.bounds), found[1].version
        except ValueError as exc:
            self.report(path, f"{exc}; left out")
            return None, found[1].version

    def _load_topic(self, topic: str) -> bool:
        assignment = self.read_assignment(topic)
        if assignment is None:
            self.topics.pop(topic, None)
            return False
        parts = {}
        for p, replicas in sorted(assignment.items()):
            state, version = self.read_state(topic, p)
            parts[p] = Partition(list(replicas), state, version)
            if p % 256 == 255:
                self.beat()
        self.topics[topic] = parts
        self.configs[topic] = self.read_config(topic)  # (after the view: its replicas)
        return True

    def rebuild(self) -> None:
        """All of the controller's view from ZooKeeper, then every decision due: the
        states of new topics, leaders for partitions whose leader is gone, and every
        live broker told the state of all its partitions."""
        self.live = self.read_live()
        self.topics, self.configs, self.deleting = {}, {}, {}
        # topics marked for deletion stay out of the view (delete_topics resumes them)
        self.delete_requested = set(self._children(replica_nodes.DELETE_TOPICS))
        self.seen_config_changes()  # every config is read below
        for topic in self._children(paths.BROKER_TOPICS):
            if zkread.name_ok(topic) and topic not in self.delete_requested:
                self._load_topic(topic)
        seen = max((part.state.controller_epoch for parts in self.topics.values()
                    for part in parts.values() if part.state is not None), default=0)
        if seen >= self.epoch:  # /controller_epoch was behind (lost, or garbage)
            self.report(replica_nodes.CONTROLLER_EPOCH,
                        f"{replica_nodes.CONTROLLER_EPOCH}: epoch {self.epoch} is not above "
                        f"controller epoch {seen} of a partition state; taking a higher one")
            self.bump_epoch(seen)
        self._start_new(list(self.topics))
        self._reelect(list(self.topics))
        for broker_id in sorted(self.live):
            self._tell_all(broker_id, fresh=False)  # the states were just read (once each)
        self.delete_topics()

    # -- writing states ----------------------------------------------------------
    def _write(self, topic: str, p: int, decide: Callable[[Partition], PartitionState | None],
               fresh: bool = True) -> bool:
        """Apply ``decide`` to the partition (after a fresh read when ``fresh``) and
        write the result with a version check; a lost race reads and decides again.
        Returns whether a new state was written."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        part = self.topics[topic][p]
        for _ in range(5):
            if fresh:
                part.state, part.version = self.read_state(topic, p)
            new = decide(part)
            if new is None:
                return False
            new = PartitionState(new.leader, new.leader_epoch, tuple(new.isr), self.epoch)
            path = replica_nodes.state_path(topic, p)
            data = replica_nodes.encode_state(new)
            try:
                if part.version < 0:
                    self._wait(self.client.create_async(path, data, makepath=True))
                    version = 0
                else:
                    version = self._wait(self.client.set_async(path, data,
                                                               version=part.version)).version
            except (BadVersionError, NodeExistsError, NoNodeError):
                fresh = True
                continue
            part.state, part.version = new, version
            return True
        return False

    def _start_new(self, topics: Iterable[str]) -> set[int]:
        """State nodes for partitions that have none: the first live replica leads, the
        live replicas are the ISR, epoch 0. Returns the brokers to tell."""
        told = set()
        live = set(self.live)
        for topic in topics:
            for p, part in sorted(self.topics.get(topic, {}).items()):
                if part.state is not None or part.version >= 0:
                    continue

                def first(part: Partition) -> PartitionState | None:
                    if part.state is not None:
                        return None
                    isr = [b for b in part.replicas if b in live]
                    leader = isr[0] if isr else -1
                    return PartitionState(leader, 0, isr or list(part.replicas), self.epoch)

                if self._write(topic, p, first, fresh=False):
                    told.update(b for b in part.replicas if b in live)
        return told

    def _reelect(self, topics: Iterable[str]) -> dict[TP, Partition]:
        """Every partition of ``topics`` whose leader or ISR names a broker not live
        decided again (fresh read, version-checked write). Returns the changed ones."""
        live = set(self.live)
        changed = {}
        for topic in topics:
            for p, part in sorted(self.topics.get(topic, {}).items()):
                unclean = unclean_of(self.configs.get(topic) or {}, self.unclean)
                if part.state is None or not (self._due(part.state, live)
                                              or self._due_unclean(part, live, unclean)):
                    continue
                if self._write(topic, p, lambda part: self._decide(part, live, unclean)):
                    changed[(topic, p)] = part
        return changed

    @staticmethod
    def _due(state: PartitionState, live: set[int]) -> bool:
        """Whether a partition needs a decision: its leader or an ISR member gone, or
        no leader while an ISR member is live."""
        if state.leader == -1:
            return any(b in live for b in state.isr)
        return state.leader not in live or any(b not in live for b in state.isr)

    @staticmethod
    def _due_unclean(part: Partition, live: set[int], unclean: bool) -> bool:
        """An offline partition a live replica outside its ISR may lead (unclean)."""
        return (unclean and part.state is not None and part.state.leader == -1
                and any(b in live for b in part.replicas))

    @staticmethod
    def _decide(part: Partition, live: set[int], unclean: bool) -> PartitionState | None:
        if part.state is None:
            return None
        if part.state.leader == -1:
            return after_return(part.replicas, part.state, live, unclean)
        return after_failure(part.replicas, part.state, live, unclean)

    # -- telling brokers ---------------------------------------------------------
    def _notice(self, broker_id: int, parts: Iterable[TP]) -> Notice | None:
        notice = Notice(LEADER_AND_ISR, broker_id, self.epoch)
        for topic, p in parts:
            part = self.topics.get(topic, {}).get(p)
            if part is None or part.state is None or broker_id not in part.replicas:
                continue
            notice.partitions[(topic, p)] = (part.state, part.version, list(part.replicas))
            config = self.configs.get(topic, {})
            if config is not None:  # None: not known, the replicas keep theirs
                notice.configs.setdefault(topic, {k: v for k, v in config.items()
                                                  if k != UNCLEAN})  # the controller's own
            leader = self.live.get(part.state.leader)
            if leader is not None:
                notice.leaders[leader.broker_id] = leader
        return notice if notice.partitions else None

    def _tell(self, parts: Iterable[TP], brokers: Iterable[int] | None = None) -> None:
        """LEADER_AND_ISR about ``parts`` to each live replica of them (or to
        ``brokers`` only)."""
        parts = sorted(set(parts))
        wanted = set(brokers) if brokers is not None else None
        by_broker: dict[int, list[TP]] = {}
        for tp in parts:
            part = self.topics.get(tp[0], {}).get(tp[1])
            if part is None:
                continue
            for b in part.replicas:
                if b in self.live and (wanted is None or b in wanted):
                    by_broker.setdefault(b, []).append(tp)
        for b, tps in sorted(by_broker.items()):
            notice = self._notice(b, tps)
            if notice is not None:
                self.tell(notice)

    def _tell_all(self, broker_id: int, fresh: bool = True) -> None:
        """LEADER_AND_ISR about every partition ``broker_id`` has a replica of, as
        ZooKeeper holds them now (leaders' ISR commits change them behind our back:
        read again unless ``fresh`` is False, the caller having just read them)."""
        parts = [(t, p) for t, ps in self.topics.items() for p, part in ps.items()
                 if broker_id in part.replicas]
        for i, (topic, p) in enumerate(parts if fresh else ()):
            part = self.topics[topic][p]
            state, version = self.read_state(topic, p)
            if state is not None:
                part.state, part.version = state, version
            if i % 256 == 255:
                self.beat()
        notice = self._notice(broker_id, sorted(parts))
        if notice is not None:
            self.tell(notice)

    def _refresh(self, brokers: set[int]) -> None:
        """The states of every partition with a replica on ``brokers`` read again."""
        if not brokers:
            return
        n = 0
        for topic, parts in self.topics.items():
            for p, part in parts.items():
                if brokers.isdisjoint(part.replicas):
                    continue
                state, version = self.read_state(topic, p)
                if state is not None:
                    part.state, part.version = state, version
                n += 1
                if n % 256 == 0:
                    self.beat()

    def resend(self, broker_id: int) -> None:
        """Everything again to one broker (its sender lost requests)."""
        if broker_id in self.live:
            self._tell_all(broker_id)
            self.resend_deletions(broker_id)

    # -- reactions -----------------------------------------------------------------
    def brokers_changed(self) -> None:
        """``/brokers/ids`` changed: partitions led by brokers gone get new leaders and
        ISRs shrink; a broker back is told all its partitions, and leads those it may."""
        before, sessions = set(self.live), self.registered
        self.live = self.read_live()
        now = set(self.live)
        # a broker that registered again between two looks (a quick restart) is back too
        gone = before - now
        back = {b for b in now if b not in before or sessions.get(b) != self.registered.get(b)}
        if gone:
            log.info("controller: brokers gone: %s", sorted(gone))
        # the ISRs leaders committed since are in ZooKeeper, not here: read them again
        self._refresh(gone | back)
        changed = self._reelect(list(self.topics))
        self._tell(changed)
        for b in sorted(back):
            self._tell_all(b, fresh=False)  # refreshed above
            self.resend_deletions(b)  # deletions it missed while down

    def topics_changed(self) -> None:
        """``/brokers/topics`` changed: new replicated topics get their states."""
        names = [t for t in self._children(paths.BROKER_TOPICS) if zkread.name_ok(t)]
        new = [t for t in names if t not in self.topics and t not in self.deleting
               and t not in self.delete_requested and self._load_topic(t)]
        for topic in set(self.topics) - set(names):
            del self.topics[topic]
            self.configs.pop(topic, None)
        if new:
            self._start_new(new)
            self._reelect(new)
            self._tell([(t, p) for t in new for p in self.topics[t]])
