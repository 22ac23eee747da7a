"""The cluster's replicated topic names, published for this broker's handlers
(cluster mode; part of ``hb-registrar``).

A handler's auto-create and CREATE_TOPIC know nothing of ZooKeeper; without
this, a PRODUCE for a replicated topic reaching a broker that holds no
replica of it (a client with stale metadata, an old leader after a
reassignment) would make a plain local topic of that name and acknowledge
writes that land outside the replicated topic. :class:`ReplicatedTopics`
reads the children of ``/brokers/topics`` and each topic's node (through
``zkread`` and ``cluster/replica_nodes.py``, bounded, hostile) and publishes
the names of the replicated ones (those whose node holds an assignment), each
with its assignment's partition count, in ``shm/topicnames.py``. The group
coordinator deals out a replicated topic's partitions by that count (a
broker holds replicas of only some of them):

- on every change of the children (a kazoo ``ChildrenWatch``; the callback
  only notes and rings the doorbell, the registrar's loop reads); a new
  name's node is read once;
- on every change of a topic's node (a one-shot data watch set with each
  read of it): that node is read again at once, so partitions added to a
  replicated topic (``topics alter --partitions``) reach the group
  coordinator's counts within a moment;
- every ``POLL_S`` the children again, and every ``_FULL_S`` every node
  again, in case a watch was lost or a node was rewritten (the round is
  ``registrar_watch.py``'s, shared with ``registrar_fence.py``);
- when a handler asks for a view read after a moment (``wanted`` past
  ``as_of`` in ``shm/topicnames.py``: an auto-create waiting), at once
  after a ``sync`` (the server caught up with the ensemble), but at most once
  per ``zookeeper.topics.recheck.ms``; every read that publishes stamps the
  view with when it began (``as_of``).

Failing closed: a topic node too long or not a valid assignment counts as
replicated, with no partition count (one reported line); more children than ``zookeeper.max.children``
publish the view INCOMPLETE (every name not held locally counts as
replicated). The first view is read before the registrar says it is ready,
so the listeners open with it (see registrar.py). Nothing here writes to
ZooKeeper.
"""

from __future__ import annotations

import time

from hostbroker.cluster import zkread
from hostbroker.cluster.paths import BROKER_TOPICS
from hostbroker.cluster import replica_nodes
from hostbroker.shm.topicnames import ReplicatedNames
from hostbroker.workers.registrar_watch import WatchedReader

_FULL_S = 30.0  # every topic node read again this often
_READ_MAX_S = 5.0  # one batch of reads waits at most this long


class ReplicatedTopics(WatchedReader):
    """Publishes the replicated topic names into ``names`` (see the module
    docstring). ``worker`` is the RegistrarWorker: its client, doorbell,
    ``connection_ms`` and ``stopping``."""

    WHAT = "the replicated topics"

    def __init__(self, worker, names: ReplicatedNames, bounds: zkread.Bounds = zkread.DEFAULT,
                 clock=time.monotonic, recheck_s: float = 0.02):
        super().__init__(worker, bounds, min(max(worker.connection_ms / 1000, 1.0), _READ_MAX_S),
                         clock)
        self.names = names
        self.recheck_s = recheck_s
        self.next_recheck = 0.0
        self.next_full = 0.0
        # topic -> its partition count (0: replicated, count not known; None: plain)
        self.known: dict[str, int | None] = {}
        self.published: tuple[dict[str, int], bool] | None = None
        self.changed: set[str] = set()  # topic nodes whose watch fired (kazoo's thread)
        self._client = None  # the client whose one-shot node watches are ours

    def _node_changed(self, event) -> None:
        """kazoo's thread: a topic node changed (or went): read it again."""
        if self.worker.stopping or self._client is not getattr(self.worker, "client", None):
            return
        prefix = replica_nodes.assignment_path("")
        path = getattr(event, "path", None)
        if path is None:  # the session expired: kazoo dropped every watch
            self._client = None  # so the next read is a whole one, watching again
            self.note()
        elif path.startswith(prefix):
            self.changed.add(path[len(prefix):])
            self.note()

    def watch(self, client, on_change) -> None:
        client.ChildrenWatch(BROKER_TOPICS, on_change, send_event=False)

    def asked(self) -> bool:
        """A handler waits for a view read after the one published."""
        return self.names.wanted_ns > self.names.as_of_ns

    def wanted(self, now: float) -> bool:
        return super().wanted(now) or (self.asked() and now >= self.next_recheck)

    def read(self, client, now: float) -> None:
        began = time.monotonic_ns()
        if self.asked():
            self.next_recheck = now + self.recheck_s
            # what the client that asked may have seen on any server is on ours too
            client.sync_async(BROKER_TOPICS).get(timeout=self.timeout_s)
        full = now >= self.next_full
        self.read_and_publish(client, full)
        self.names.mark_read(began)
        if full:
            self.next_full = now + _FULL_S

    def read_and_publish(self, client, full: bool = True) -> None:
        """Read the topics (every node when ``full``, else only new names) and
        publish the replicated ones."""
        from kazoo.exceptions import NoNodeError

        try:  # bounded like every read here: the loop's heartbeat waits with it
            children = client.get_children_async(BROKER_TOPICS).get(timeout=self.timeout_s)
        except NoNodeError:
            children = []
        complete = len(children) <= self.bounds.children
        names = sorted(children)[:self.bounds.children]
        if not complete:
            self.report(BROKER_TOPICS, f"{BROKER_TOPICS}: {len(children)} children are over "
                                       f"zookeeper.max.children ({self.bounds.children}); "
                                       "every topic not held here counts as replicated")
        listed = set(names)
        if client is not self._client:  # a new session: no watch of ours is set
            self._client, full = client, True
        changed = set(self.changed)  # taken off once read (a failed read keeps them)
        known = {} if full else {n: r for n, r in self.known.items()
                                 if n in listed and n not in changed}
        todo = [n for n in names if n not in known]
        reads = [(n, client.get_async(replica_nodes.assignment_path(n), watch=self._node_changed))
                 for n in todo if zkread.name_ok(n)]
        deadline = self.clock() + self.timeout_s
        for name, result in reads:
            try:
                data, _stat = result.get(timeout=max(0.0, deadline - self.clock()))
            except NoNodeError:
                continue  # deleted since it was listed
            known[name] = self.partitions(name, data)
        self.known = known
        self.changed -= changed
        self.publish({n: count for n, count in known.items() if count is not None}, complete)

    def partitions(self, name: str, data: bytes | None) -> int | None:
        """The partition count of a replicated topic's assignment, None for a
        topic node that holds none (a 0.7-style topic). One that cannot be read
        counts as replicated with no count known, 0 (reported)."""
        path = replica_nodes.assignment_path(name)
        try:
            zkread.check_size(data or b"", path, self.bounds)
            assignment = replica_nodes.decode_assignment(data or b"", path, self.bounds)
        except ValueError as exc:
            self.report(path, f"{exc}; counted as a replicated topic")
            return 0
        return None if assignment is None else len(assignment)

    def publish(self, topics: dict[str, int], complete: bool) -> None:
        if self.published == (topics, complete):
            return
        self.published = (topics, complete)
        self.names.publish(topics, complete)
