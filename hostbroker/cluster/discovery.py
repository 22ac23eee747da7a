"""What a cluster holds, as ZooKeeper says: live brokers and each topic's partitions.

:class:`ClusterView` reads ``/brokers/ids`` and ``/brokers/topics`` (layout in
``paths``) into a :class:`Snapshot`, and keeps it current: kazoo watches on
those paths (and on every topic's children and value: a replicated topic's
partitions added show at once) only wake a refresher thread,
which reads the whole picture again and swaps it in at once, so a reader
never sees half of a change. The refresher also runs every ``refresh_ms``
and whenever the session connects again, so a watch lost with a session is
never the end of news; between two refreshes it rests at least as long as
the last one took, so a storm of changes cannot keep it busy.
``on_change(snapshot)`` is called from that thread after every refresh that
changed something.

A topic's partitions are the sorted ``(broker_id, partition)`` pairs of the
live brokers that registered it (docs/spec/zookeeper.md): a broker that
leaves takes its pairs with it, one that joins adds them as soon as its
nodes appear. A replicated topic (its ``/brokers/topics/[topic]`` holds an
assignment) is apart, in ``Snapshot.replicated``: its partition count,
whichever brokers are live (its leaders are the clients' business,
:mod:`hostbroker.client.leaders`); :meth:`Snapshot.group_partitions` gives
both kinds as pairs, a replicated partition's broker id being
:data:`~hostbroker.cluster.paths.REPLICATED`. Every value is read through :mod:`~hostbroker.cluster.zkread`:
one that does not follow the layout or passes a bound (a phantom partition
count, a huge node, too many children) is left out with a rate-limited
warning, never fatal, and the rest of the picture is used.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from hostbroker.cluster import paths, zkread
from hostbroker.cluster import replica_nodes

log = logging.getLogger(__name__)

DEFAULT_REFRESH_MS = 10_000
MIN_REFRESH_GAP_S = 0.05  # the least rest of the refresher between two refreshes


@dataclass(frozen=True)
class Snapshot:
    """The cluster at one moment: ``brokers`` by id, ``topics`` -> sorted (broker_id, partition)
    of the 0.7-style topics, ``replicated`` -> the partition count of each replicated topic."""

    brokers: dict[int, paths.BrokerInfo] = field(default_factory=dict)
    topics: dict[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    replicated: dict[str, int] = field(default_factory=dict)

    def partitions(self, topic: str) -> tuple[tuple[int, int], ...]:
        """A 0.7-style topic's pairs (none for a replicated topic)."""
        return self.topics.get(topic, ())

    def group_partitions(self, topic: str) -> tuple[tuple[int, int], ...]:
        """What a consumer group deals out of ``topic``: its pairs, or for a replicated
        topic ``(REPLICATED, p)`` for each of its partitions."""
        count = self.replicated.get(topic)
        if count is not None:
            return tuple((paths.REPLICATED, p) for p in range(count))
        return self.topics.get(topic, ())

    def topic_names(self) -> list[str]:
        """Every topic of either kind, sorted."""
        return sorted({*self.topics, *self.replicated})


def read_snapshot(client, report: zkread.Reporter | None = None,
                  bounds: zkread.Bounds = zkread.DEFAULT) -> Snapshot:
    """The cluster as ZooKeeper holds it now, every value checked against ``bounds``
    (what fails is left out and told to ``report``; by default a Reporter of its own)."""
    if report is None:
        report = zkread.Reporter(log)

    def bad(path: str, problem: str) -> None:
        report(path, problem if problem.endswith(("left out", "are used")) else
               f"{problem}; left out")

    brokers: dict[int, paths.BrokerInfo] = {}
    for name in zkread.children(client, paths.BROKER_IDS, bounds, bad):
        path = f"{paths.BROKER_IDS}/{name}"
        if not name.isascii() or not name.isdigit() or len(name) > 10:
            bad(path, f"{path[:120]}: not a broker id")
            continue
        found = zkread.value(client, path, bounds, bad)
        if found is None:
            continue
        try:
            brokers[int(name)] = paths.decode_broker(int(name), found[0], path, bounds)
        except ValueError as exc:
            bad(path, str(exc))
    topics: dict[str, tuple[tuple[int, int], ...]] = {}
    replicated: dict[str, int] = {}
    total = 0
    for topic in zkread.children(client, paths.BROKER_TOPICS, bounds, bad):
        if not zkread.name_ok(topic):
            bad(paths.topic_path(topic), f"{paths.topic_path(topic)[:120]!r}: not a topic name")
            continue
        count = _replicated_count(client, topic, bounds, bad)
        if count is not None:
            if total + count > bounds.partitions:
                bad(paths.topic_path(topic), f"{paths.topic_path(topic)}: {count} more "
                    f"partitions would pass zookeeper.max.partitions ({bounds.partitions}) "
                    "for the whole cluster")
            elif count:
                total += count
                replicated[topic] = count
            continue  # a replicated topic: 0.7-style registrations under it are not its
        pairs = []
        for holder in zkread.children(client, paths.topic_path(topic), bounds, bad):
            if (not holder.isascii() or not holder.isdigit() or len(holder) > 10
                    or int(holder) not in brokers):
                continue  # a broker that is not (or no longer) live
            path = paths.topic_broker_path(topic, int(holder))
            found = zkread.value(client, path, bounds, bad)
            if found is None:
                continue
            try:
                count = paths.decode_count(found[0], path, bounds)
            except ValueError as exc:
                bad(path, str(exc))
                continue
            if total + count > bounds.partitions:
                bad(path, f"{path}: {count} more partitions would pass zookeeper.max.partitions "
                          f"({bounds.partitions}) for the whole cluster")
                continue
            total += count
            pairs.extend((int(holder), p) for p in range(count))
        if pairs:
            topics[topic] = tuple(sorted(pairs))
    return Snapshot(brokers, topics, replicated)


def _replicated_count(client, topic: str, bounds: zkread.Bounds, bad) -> int | None:
    """The partition count of ``topic`` if its node holds an assignment (0 when that
    assignment is unreadable: reported, and the topic has no partitions to read);
    None for a 0.7-style topic (a node without a value) or one gone meanwhile."""
    path = paths.topic_path(topic)
    found = zkread.value(client, path, bounds, bad)
    if found is None or not found[0]:
        return None
    try:
        assignment = replica_nodes.decode_assignment(found[0], path, bounds)
    except ValueError as exc:
        bad(path, str(exc))
        return 0
    return None if assignment is None else len(assignment)


class ClusterView:
    """A :class:`Snapshot` kept current through watches (see the module docstring)."""

    def __init__(self, client, on_change: Callable[[Snapshot], None] | None = None,
                 refresh_ms: int = DEFAULT_REFRESH_MS, bounds: zkread.Bounds = zkread.DEFAULT):
        self.client = client
        self.on_change = on_change
        self.refresh_ms = refresh_ms
        self.bounds = bounds
        self.report = zkread.Reporter(log)
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._topic_watches: set[str] = set()
        self._value_watches: set[str] = set()  # kept until the node goes (kazoo's DataWatch)
        self._refreshing = threading.Lock()  # one refresh (and watch set-up) at a time
        self.snapshot = read_snapshot(client, self.report, bounds)
        self.version = 0  # refreshes that changed the snapshot
        client.add_listener(self._on_state)
        client.ensure_path(paths.BROKER_IDS)
        client.ensure_path(paths.BROKER_TOPICS)
        client.ChildrenWatch(paths.BROKER_IDS, self._on_children, send_event=False)
        client.ChildrenWatch(paths.BROKER_TOPICS, self._on_children, send_event=False)
        self._watch_topics()
        self._thread = threading.Thread(target=self._run, name="hb-cluster-view", daemon=True)
        self._thread.start()

    def _on_state(self, state) -> None:
        from kazoo.protocol.states import KazooState

        if state == KazooState.CONNECTED:
            self._wake.set()

    def _on_children(self, _children) -> bool | None:
        if self._closed.is_set():
            return False  # stop watching
        self._wake.set()
        return None

    def _watch_topics(self) -> None:
        """Watch the children of every topic not watched yet (from the refresher thread:
        setting a watch blocks, which a watch callback must not)."""
        from kazoo.exceptions import NoNodeError

        names = zkread.children(self.client, paths.BROKER_TOPICS, self.bounds, self.report)
        # A topic gone takes its watch with it (kazoo stops a watch whose node is
        # deleted): forgotten, so it is watched again if it comes back.
        self._topic_watches.intersection_update(names)
        for topic in names:
            if topic in self._topic_watches or not zkread.name_ok(topic):
                continue
            try:
                self.client.ChildrenWatch(paths.topic_path(topic), self._on_children,
                                          send_event=False)
            except NoNodeError:
                continue
            self._topic_watches.add(topic)
            if topic not in self._value_watches:
                self._value_watches.add(topic)
                self.client.DataWatch(paths.topic_path(topic), self._on_value(topic))

    def _on_value(self, topic: str):
        """A DataWatch callback for one topic's node: a new assignment wakes the
        refresher; the node gone ends the watch (watched again if it comes back)."""
        def on_value(_data, stat) -> bool | None:
            if self._closed.is_set():
                return False
            self._wake.set()
            if stat is None:
                self._value_watches.discard(topic)
                return False
            return None
        return on_value

    def _run(self) -> None:
        while not self._closed.is_set():
            self._wake.wait(self.refresh_ms / 1000.0)
            if self._closed.is_set():
                return
            self._wake.clear()
            started = time.monotonic()
            self.refresh()
            # Watch events come as fast as anyone writes to ZooKeeper: rest at least
            # as long as the refresh took, so news costs this thread half a core at most.
            self._closed.wait(max(MIN_REFRESH_GAP_S, time.monotonic() - started))

    def refresh(self) -> Snapshot:
        """Read the cluster again now; returns the (possibly unchanged) snapshot."""
        with self._refreshing:
            try:
                self._watch_topics()
                fresh = read_snapshot(self.client, self.report, self.bounds)
            except Exception as exc:  # noqa: BLE001 - connection loss: keep the last picture
                log.debug("cluster view not refreshed: %s", exc)
                return self.snapshot
            changed = fresh != self.snapshot
            if changed:
                self.snapshot = fresh
                self.version += 1
        if changed and self.on_change is not None:
            try:
                self.on_change(fresh)
            except Exception:  # noqa: BLE001 - a listener's bug must not stop the view
                log.exception("cluster view listener failed")
        return self.snapshot

    def close(self) -> None:
        self._closed.set()
        self._wake.set()
        self.client.remove_listener(self._on_state)
        if self._thread is not threading.current_thread():
            self._thread.join(5)
