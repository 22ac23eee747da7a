"""The controller's reactions to a replicated topic changed in place: partitions
added to its assignment, and its config changed.

Mixed into :class:`~hostbroker.cluster.controller.Controller` (run by the
controller's ``hb-registrar``), which owns the view, the bounded ZooKeeper
calls and the version-checked state writes these use. What it reads
(layout: hostbroker/cluster/topic_changes.py, docs/spec/zookeeper.md):

- ``/brokers/topics/[topic]``: every replicated topic's node is read with a
  one-shot data watch (set again by each read), as Kafka's controller keeps a
  listener on each topic. When it fires the loop reads the node again and
  gives each partition it does not know a state (the first live replica
  leads, the live replicas are the ISR, epoch 0) and tells their live
  replicas, which create them: at once, not at the registrars' next full
  read. Partitions the controller knows keep their replicas (a reassignment
  is :mod:`~hostbroker.cluster.controller_admin`'s; a node that lists fewer
  partitions than the view is reported and its missing ones kept).
- ``/config/changes/config_change_N``: each new change node names a topic
  (Kafka 0.8.1's notification); its ``/config/topics/[topic]`` is read again
  and every live replica of the topic is told (LEADER_AND_ISR carries the
  whole config: a key no longer there is removed by the writers). A config
  that is not one a writer can take (an unknown key, a value out of bounds,
  a node that does not decode) is reported and not sent: the replicas keep
  what they have. Each look reads the newest ``zookeeper.max.children``
  change nodes and removes every one it has read once their topics are told
  (a flood of change nodes costs one bounded look each and never hides a
  later change); a new controller reads every config at its rebuild and
  removes the nodes there unread.
"""

from __future__ import annotations

import logging
import time

from hostbroker.cluster.controller_decisions import TP, UNCLEAN, Partition
from hostbroker.cluster.topic_changes import CONFIG_CHANGES, OtherEntityChange, decode_change
from hostbroker.cluster import replica_nodes

log = logging.getLogger("hostbroker.controller")


def checked_config(config: dict[str, str], replicas: int) -> str | None:
    """Why a replicated topic's ``config`` cannot be applied by its writers, or
    None when it can: every key a topic config key (or the controller's own
    ``unclean.leader.election.enable``, true or false) with a value in bounds;
    ``min.insync.replicas`` at most the topic's replication factor."""
    from hostbroker.errors import HostbrokerError
    from hostbroker.log.config import LogConfig

    unclean = config.get(UNCLEAN)
    if unclean is not None and unclean.strip().lower() not in ("true", "false"):
        return f"{UNCLEAN}={unclean[:40]!r} is not true or false"
    try:
        effective = LogConfig().with_overrides({k: v for k, v in config.items() if k != UNCLEAN})
    except HostbrokerError as exc:
        return str(exc)
    if "min.insync.replicas" in config and effective.min_insync_replicas > max(replicas, 1):
        return (f"min.insync.replicas={effective.min_insync_replicas} is over the "
                f"replication factor ({replicas})")
    return None


class TopicChanges:
    """Mixin of :class:`~hostbroker.cluster.controller.Controller`: partitions added
    and configs changed (see the module docstring). ``on_topic_changed(topic)`` is
    called from kazoo's thread when a watched topic node changes; it must only
    note and ring."""

    topics: dict[str, dict[int, Partition]]
    configs: dict[str, dict[str, str] | None]
    config_seen: dict[str, float]  # change node name -> when this controller saw it

    # -- partitions added ----------------------------------------------------------
    def _assignment_watch(self, event) -> None:
        """kazoo's thread: a topic node changed (or went)."""
        callback = getattr(self, "on_topic_changed", None)
        path = getattr(event, "path", "") or ""
        prefix = replica_nodes.assignment_path("")
        if callback is not None and path.startswith(prefix):
            callback(path[len(prefix):])

    def partitions_added(self, topics) -> list[TP]:
        """Each of ``topics`` (replicated, in the view) read again: partitions of its
        assignment the view lacks get states and their replicas are told.
        Returns the partitions added."""
        added: list[TP] = []
        for topic in sorted(set(topics)):
            parts = self.topics.get(topic)
            if parts is None:
                continue  # a new topic (topics_changed), or one deleted
            assignment = self.read_assignment(topic)  # the watch set again
            if assignment is None:
                continue
            missing = sorted(p for p in parts if p not in assignment)
            if missing:
                path = replica_nodes.assignment_path(topic)
                self.report(path, f"{path}: partitions {missing[:5]} are no longer in the "
                                  "assignment; partitions only grow, they are kept")
            new = sorted(p for p in assignment if p not in parts)
            if not new:
                continue
            for p in new:
                state, version = self.read_state(topic, p)
                parts[p] = Partition(list(assignment[p]), state, version)
            log.info("controller: topic %s grew to %d partitions", topic, len(parts))
            self._start_new([topic])
            self._reelect([topic])
            added.extend((topic, p) for p in new)
        self._tell(added)
        return added

    # -- configs changed -----------------------------------------------------------
    def read_config(self, topic: str) -> dict[str, str] | None:
        """A replicated topic's config overrides ({} without a node); None when the
        node cannot be taken (reported): the replicas keep what they have."""
        path = replica_nodes.topic_config_path(topic)
        found = self._get(path)
        if found is None:
            return {}
        try:
            config = dict(replica_nodes.decode_topic_config(found[0], path, self.bounds))
        except ValueError as exc:
            self.report(path, f"{exc}; not applied")
            return None
        parts = self.topics.get(topic, {})
        factor = max((len(part.assigned) for part in parts.values()), default=0)
        problem = checked_config(config, factor or 1)
        if problem is not None:
            self.report(path, f"{path}: {problem}; not applied")
            return None
        return config

    def _change_nodes(self) -> list[str]:
        """The newest ``zookeeper.max.children`` change nodes, oldest first (sequence
        numbers sort as text): a flood of older ones never hides a new change. The
        rest are reported, and read at a later look once these are removed."""
        from kazoo.exceptions import NoNodeError

        try:
            names = sorted(self._wait(self.client.get_children_async(CONFIG_CHANGES)))
        except NoNodeError:
            return []
        bound = self.bounds.children
        if len(names) > bound:
            self.report(CONFIG_CHANGES, f"{CONFIG_CHANGES}: {len(names)} children are over "
                                        f"zookeeper.max.children ({bound}); the newest "
                                        f"{bound} are read now, the rest later")
            del names[:-bound]
        return names

    def seen_config_changes(self) -> None:
        """Every change node there now taken as seen (a rebuild has just read every
        config): the next look removes them unread."""
        self.config_seen = {name: time.monotonic() for name in self._change_nodes()}

    def config_changes(self, now: float | None = None) -> list[str]:
        """The change nodes not seen yet: their topics' configs read again and every
        live replica told; then every change node seen is removed (at most
        ``zookeeper.max.children`` a look). Returns the topics told."""
        now = time.monotonic() if now is None else now
        names = self._change_nodes()
        seen = {n: t for n, t in self.config_seen.items() if n in names}
        topics = set()
        for name in names:
            if name in seen:
                continue
            seen[name] = now
            path = f"{CONFIG_CHANGES}/{name}"
            found = self._get(path)
            if found is None:
                continue
            try:
                topics.add(decode_change(found[0], path, self.bounds))
            except OtherEntityChange:
                continue  # a user's quotas: every registrar reads them (registrar_acls.py)
            except ValueError as exc:
                self.report(path, f"{exc}; left out")
        self.config_seen = seen
        told = []
        for topic in sorted(topics):
            if topic not in self.topics:
                continue  # not replicated (a 0.7 topic's config is its brokers'), or deleting
            config = self.read_config(topic)
            if config is None:
                continue
            self.configs[topic] = config
            self._refresh_topic(topic)
            # unclean.leader.election.enable turned on may let an offline partition lead
            self._reelect([topic])
            self._tell([(topic, p) for p in self.topics[topic]])
            log.info("controller: topic %s config now %s", topic, config)
            told.append(topic)
        # applied (or reported): removed now, so a flood of them costs one look each
        # and never stands in front of a later change
        for i, name in enumerate(sorted(self.config_seen)):
            self._delete(f"{CONFIG_CHANGES}/{name}")
            del self.config_seen[name]
            if i % 256 == 255:
                self.beat()
        return told

    def _refresh_topic(self, topic: str) -> None:
        """The states of ``topic``'s partitions read again (leaders commit ISRs
        behind the controller's back)."""
        for i, (p, part) in enumerate(sorted(self.topics.get(topic, {}).items())):
            state, version = self.read_state(topic, p)
            if state is not None:
                part.state, part.version = state, version
            if i % 256 == 255:
                self.beat()
