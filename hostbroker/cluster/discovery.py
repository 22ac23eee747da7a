"""What a cluster holds, as ZooKeeper says: live brokers and each topic's partitions.

:class:`ClusterView` reads ``/brokers/ids`` and ``/brokers/topics`` (layout in
``paths``) into a :class:`Snapshot`, and keeps it current: kazoo watches on
those paths (and on every topic's children) only wake a refresher thread,
which reads the whole picture again and swaps it in at once, so a reader
never sees half of a change. The refresher also runs every ``refresh_ms``
and whenever the session connects again, so a watch lost with a session is
never the end of news. ``on_change(snapshot)`` is called from that thread
after every refresh that changed something.

A topic's partitions are the sorted ``(broker_id, partition)`` pairs of the
live brokers that registered it (docs/spec/zookeeper.md): a broker that
leaves takes its pairs with it, one that joins adds them as soon as its
nodes appear. A value that does not follow the layout is logged once and
left out, never fatal.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from hostbroker.cluster import paths

log = logging.getLogger(__name__)

DEFAULT_REFRESH_MS = 10_000


@dataclass(frozen=True)
class Snapshot:
    """The cluster at one moment: ``brokers`` by id, ``topics`` -> sorted (broker_id, partition)."""

    brokers: dict[int, paths.BrokerInfo] = field(default_factory=dict)
    topics: dict[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)

    def partitions(self, topic: str) -> tuple[tuple[int, int], ...]:
        return self.topics.get(topic, ())


def read_snapshot(client, bad: set[str] | None = None) -> Snapshot:
    """The cluster as ZooKeeper holds it now (``bad``: paths already reported as malformed)."""
    from kazoo.exceptions import NoNodeError

    seen_bad = bad if bad is not None else set()

    def report(exc: ValueError, path: str) -> None:
        if path not in seen_bad:
            seen_bad.add(path)
            log.warning("ZooKeeper: %s; left out", exc)

    brokers: dict[int, paths.BrokerInfo] = {}
    try:
        ids = client.get_children(paths.BROKER_IDS)
    except NoNodeError:
        ids = []
    for name in ids:
        path = f"{paths.BROKER_IDS}/{name}"
        if not name.isdigit():
            report(ValueError(f"{path}: not a broker id"), path)
            continue
        try:
            data, _ = client.get(path)
            brokers[int(name)] = paths.decode_broker(int(name), data, path)
        except NoNodeError:
            continue
        except ValueError as exc:
            report(exc, path)
    topics: dict[str, tuple[tuple[int, int], ...]] = {}
    try:
        names = client.get_children(paths.BROKER_TOPICS)
    except NoNodeError:
        names = []
    for topic in sorted(names):
        pairs = []
        try:
            holders = client.get_children(paths.topic_path(topic))
        except NoNodeError:
            continue
        for holder in holders:
            if not holder.isdigit() or int(holder) not in brokers:
                continue  # a broker that is not (or no longer) live
            path = paths.topic_broker_path(topic, int(holder))
            try:
                data, _ = client.get(path)
                count = paths.decode_count(data, path)
            except NoNodeError:
                continue
            except ValueError as exc:
                report(exc, path)
                continue
            pairs.extend((int(holder), p) for p in range(count))
        if pairs:
            topics[topic] = tuple(sorted(pairs))
    return Snapshot(brokers, topics)


class ClusterView:
    """A :class:`Snapshot` kept current through watches (see the module docstring)."""

    def __init__(self, client, on_change: Callable[[Snapshot], None] | None = None,
                 refresh_ms: int = DEFAULT_REFRESH_MS):
        self.client = client
        self.on_change = on_change
        self.refresh_ms = refresh_ms
        self._bad: set[str] = set()
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._topic_watches: set[str] = set()
        self._refreshing = threading.Lock()  # one refresh (and watch set-up) at a time
        self.snapshot = read_snapshot(client, self._bad)
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

        try:
            names = self.client.get_children(paths.BROKER_TOPICS)
        except NoNodeError:
            return
        for topic in names:
            if topic in self._topic_watches:
                continue
            try:
                self.client.ChildrenWatch(paths.topic_path(topic), self._on_children,
                                          send_event=False)
            except NoNodeError:
                continue
            self._topic_watches.add(topic)

    def _run(self) -> None:
        while not self._closed.is_set():
            self._wake.wait(self.refresh_ms / 1000.0)
            if self._closed.is_set():
                return
            self._wake.clear()
            self.refresh()

    def refresh(self) -> Snapshot:
        """Read the cluster again now; returns the (possibly unchanged) snapshot."""
        with self._refreshing:
            try:
                self._watch_topics()
                fresh = read_snapshot(self.client, self._bad)
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
