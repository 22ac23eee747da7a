"""The controller's admin requests, each from its node under ``/admin`` to its end.

Mixed into :class:`~hostbroker.cluster.controller.Controller`, which owns the
view of the cluster, the bounded ZooKeeper calls and the version-checked
state writes these use; the pure decisions are in
hostbroker/cluster/controller_decisions.py. What this module owns
(layout: docs/spec/zookeeper.md, "Replication"):

- ``/admin/delete_topics/[topic]``: a topic deletion, pending until every
  replica has answered a STOP_REPLICA with delete; a replica broker that is
  down gets it when it returns (:meth:`AdminRequests.resend_deletions`). While
  pending the topic is out of the view (no leader elected, no broker told of
  it) and its nodes stay; once all have answered, its nodes go, then the
  request. At most ``controller.deletions.per.pass`` deletions start per pass,
  so a hostile node with many children costs bounded work each time; each
  broker gets one STOP_REPLICA for all the deletions begun in a pass (and one
  for all it missed, with its strays, when it returns).
- ``/admin/preferred_replica_election``: leadership back to preferred replicas.
- ``/admin/controlled_shutdown/[id]``: a stopping broker's leaderships moved.
- ``/admin/reassign_partitions``: partitions moved to new replica lists, of
  the same length or not (the replication factor changes with them). A
  replica moved away from a broker that is down is a *stray*: that broker is
  told to delete it when it returns (kept in memory only: a new controller
  does not know of it).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from hostbroker.cluster import zkread
from hostbroker.cluster.controller_decisions import (
    STOP_REPLICA,
    TP,
    Notice,
    Partition,
    preferred,
    without,
)
from hostbroker.cluster import replica_nodes
from hostbroker.replication import MAX_REPLICAS
from hostbroker.replication.election import elect_leader
from hostbroker.cluster.replica_nodes import PartitionState

log = logging.getLogger("hostbroker.controller")


class AdminRequests:
    """Mixin of :class:`~hostbroker.cluster.controller.Controller`: the requests
    under ``/admin`` (see the module docstring). ``deleting`` maps each topic
    whose deletion is pending to the partitions each broker has not yet
    confirmed deleted; ``delete_requested`` is what ``/admin/delete_topics``
    named at the last look (those topics are not loaded into the view)."""

    deleting: dict[str, dict[int, list[TP]]]
    delete_requested: set[str]
    deletes_per_pass: int
    strays: dict[int, set[TP]]  # broker -> copies a reassignment moved away, not yet deleted

    # -- topic deletion ------------------------------------------------------------
    def delete_topics(self) -> None:
        """One pass over ``/admin/delete_topics``: at most ``deletes_per_pass``
        deletions started (each live replica told STOP_REPLICA with delete), and
        every deletion whose replicas have all answered finished."""
        names = self._children(replica_nodes.DELETE_TOPICS)
        self.delete_requested = set(names)
        started = 0
        begun: list[str] = []
        for topic in names:
            if topic in self.deleting:
                continue
            if started >= self.deletes_per_pass:
                break  # the rest at the next pass
            started += 1
            assigned = None
            if zkread.name_ok(topic):
                parts = self.topics.pop(topic, None)
                assigned = ({p: part.replicas for p, part in parts.items()}
                            if parts is not None else self.read_assignment(topic))
            if assigned is None:  # not a replicated topic (or no more)
                self._delete(replica_nodes.delete_topic_path(topic))
                continue
            self.configs.pop(topic, None)
            waiting: dict[int, list[TP]] = {}
            for p, replicas in sorted(assigned.items()):
                for b in replicas:
                    waiting.setdefault(b, []).append((topic, p))
            self.deleting[topic] = waiting
            log.info("controller: deleting replicated topic %s", topic)
            begun.append(topic)
        # one request per broker for every deletion begun (one per topic would
        # overflow a broker's sender queue, and each overflow resends everything)
        for b in sorted({b for topic in begun for b in self.deleting[topic]}):
            self._send_deletions(b, begun)
        self._finish_deletions()

    def _send_deletions(self, broker_id: int, topics: Iterable[str],
                        also: Iterable[TP] = ()) -> None:
        """One STOP_REPLICA with delete to ``broker_id`` (when live) for its
        partitions of the pending deletions of ``topics``, and ``also``."""
        tps = {tp for topic in topics for tp in self.deleting.get(topic, {}).get(broker_id, ())}
        tps.update(also)
        if tps and broker_id in self.live:
            self.tell(Notice(STOP_REPLICA, broker_id, self.epoch, stop=sorted(tps), delete=True))

    def resend_deletions(self, broker_id: int) -> None:
        """The pending deletions' STOP_REPLICA again to ``broker_id`` (back, or its
        sender lost requests), with the strays it holds, in one request."""
        # a stray that is a replica again (a later move, a topic made anew) is no stray
        strays = {(t, p) for t, p in self.strays.pop(broker_id, set())
                  if broker_id not in getattr(self.topics.get(t, {}).get(p), "replicas", ())}
        if strays:
            self.strays[broker_id] = strays
        self._send_deletions(broker_id, self.deleting, strays)

    def replicas_deleted(self, notice: Notice) -> None:
        """``notice`` (a STOP_REPLICA with delete) was answered without error."""
        if notice.kind != STOP_REPLICA or not notice.delete or notice.epoch != self.epoch:
            return
        done = set(notice.stop)
        strays = self.strays.get(notice.broker_id)
        if strays is not None:
            strays -= done
            if not strays:
                del self.strays[notice.broker_id]
        for topic in {t for t, _ in done}:
            waiting = self.deleting.get(topic)
            if waiting is None or notice.broker_id not in waiting:
                continue
            left = [tp for tp in waiting[notice.broker_id] if tp not in done]
            if left:
                waiting[notice.broker_id] = left
            else:
                del waiting[notice.broker_id]
        self._finish_deletions()

    def _finish_deletions(self) -> None:
        for topic in sorted(t for t, waiting in self.deleting.items() if not waiting):
            self._delete(replica_nodes.assignment_path(topic), recursive=True)
            self._delete(replica_nodes.topic_config_path(topic))
            self._delete(replica_nodes.delete_topic_path(topic))
            del self.deleting[topic]
            self.delete_requested.discard(topic)
            log.info("controller: deleted replicated topic %s", topic)

    def preferred_election(self, only: Iterable[TP] | None = None) -> list[TP]:
        """Leadership moved back to each partition's preferred replica where it can
        (the partitions of ``/admin/preferred_replica_election``, or ``only``);
        the admin node removed. Returns the partitions moved."""
        path = replica_nodes.PREFERRED_REPLICA_ELECTION
        if only is None:
            found = self._request(path, replica_nodes.decode_preferred_election)
            if found is None:
                return []
            only = found[0]
        live = set(self.live)
        moved = []
        for topic, p in sorted(set(only)):
            if p not in self.topics.get(topic, {}):
                continue
            if self._write(topic, p, lambda part: preferred(part.replicas, part.state, live)
                           if part.state is not None else None):
                moved.append((topic, p))
        self._tell(moved)
        self._delete(path)
        return moved

    def controlled_shutdown(self) -> list[int]:
        """``/admin/controlled_shutdown/[id]``: that broker's leaderships moved to other
        ISR members, it left the ISRs, everyone concerned told; then the node
        removed. Returns the brokers done."""
        done = []
        for name in self._children(replica_nodes.CONTROLLED_SHUTDOWN):
            path = f"{replica_nodes.CONTROLLED_SHUTDOWN}/{name}"
            try:
                broker_id = replica_nodes.decode_broker_id_name(name, path)
            except ValueError as exc:
                self.report(path, f"{exc}; removed")
                self._delete(path)
                continue
            self.shut_down(broker_id)
            self._delete(path)
            done.append(broker_id)
        return done

    def shut_down(self, gone: int) -> list[TP]:
        live = set(self.live)
        moved = []
        for topic, parts in sorted(self.topics.items()):
            for p, part in sorted(parts.items()):
                if gone not in part.replicas:
                    continue
                if self._write(topic, p, lambda part: without(part.replicas, part.state, gone,
                                                              live)
                               if part.state is not None else None):
                    moved.append((topic, p))
        self._tell(moved)
        log.info("controller: broker %d stopping: %d partitions moved", gone, len(moved))
        return moved

    # -- reassignment ------------------------------------------------------------
    def reassign(self) -> list[TP]:
        """Move partitions to the replicas ``/admin/reassign_partitions`` asks for (more
        or fewer than now: the replication factor changes), one step per call for
        each: the new replicas added (told to hold old + new);
        then, once all of them are in the ISR, a leader among them, the old
        replicas stopped (deleted) and the assignment written. Finished partitions
        leave the admin node; the node goes with the last. Returns those finished."""
        from kazoo.exceptions import BadVersionError, NoNodeError

        path = replica_nodes.REASSIGN_PARTITIONS
        found = self._request(path, replica_nodes.decode_reassignment)
        if found is None:
            return []
        wanted = found[0]
        done = []
        for (topic, p), target in sorted(wanted.items()):
            if self._reassign_one(topic, p, list(target)):
                done.append((topic, p))
        if not done:
            return done
        remaining = {tp: r for tp, r in wanted.items() if tp not in done}
        try:
            if remaining:
                self._wait(self.client.set_async(
                    path, replica_nodes.encode_reassignment(remaining),
                    version=found[1].version))
            else:
                self._wait(self.client.delete_async(path, version=found[1].version))
        except (BadVersionError, NoNodeError):
            pass  # rewritten meanwhile: the next look goes on from there
        return done

    def _bad_target(self, target: list[int]) -> str | None:
        if not target or len(set(target)) != len(target):
            return "replicas must be distinct broker ids, at least one"
        if len(target) > MAX_REPLICAS:
            return f"{len(target)} replicas are over the most a partition may have ({MAX_REPLICAS})"
        if any(type(b) is not int or not 0 <= b <= zkread.MAX_BROKER_ID for b in target):
            return "replicas must be broker ids"
        return None

    def _reassign_one(self, topic: str, p: int, target: list[int]) -> bool:
        """One step of moving ``topic``-``p`` to ``target``; True once finished (or
        dropped as impossible, reported)."""
        part = self.topics.get(topic, {}).get(p)
        where = f"{replica_nodes.REASSIGN_PARTITIONS}: {topic}-{p}"
        if part is None:
            self.report(where, f"{where}: no such replicated partition; dropped")
            return True
        problem = self._bad_target(target)
        if problem is not None:
            self.report(where, f"{where}: {problem}; dropped")
            return True
        if part.assigned == target and part.replicas == target:
            return True
        union = target + [b for b in part.assigned if b not in target]
        if len(union) > MAX_REPLICAS:  # no request could carry them (nor a partition hold)
            self.report(where, f"{where}: old and new replicas together are {len(union)} "
                               f"brokers, over the most a partition may have ({MAX_REPLICAS}); "
                               "dropped (move it in smaller steps)")
            return True
        if part.replicas != union:
            part.replicas = union
            for b in union:  # told to hold a copy: not to delete it when back
                self.strays.get(b, set()).discard((topic, p))
            self._tell([(topic, p)])
            return False
        state, version = self.read_state(topic, p)
        part.state, part.version = state, version
        if state is None or not all(b in state.isr for b in target):
            return False  # the new replicas are catching up
        live = set(self.live)

        def settle(part: Partition) -> PartitionState | None:
            s = part.state
            if s is None or not all(b in s.isr for b in target):
                return None
            leader = s.leader
            epoch = s.leader_epoch
            if leader not in target or leader not in live:
                leader = elect_leader(target, s.isr, live, False)
                if leader is None:
                    return None
                epoch += 1
            return PartitionState(leader, epoch, [b for b in s.isr if b in target],
                                  s.controller_epoch)

        if not self._write(topic, p, settle, fresh=False):
            # not settled: a new replica left the ISR, none of them can lead, or the
            # races went on; the old replicas keep their copies until the next look
            return False
        old = [b for b in union if b not in target]
        self._write_assignment(topic, p, target)
        part.replicas = target
        part.assigned = list(target)
        self._tell([(topic, p)])
        for b in old:
            self.strays.setdefault(b, set()).add((topic, p))  # until it answers
            if b in self.live:
                self.tell(Notice(STOP_REPLICA, b, self.epoch, stop=[(topic, p)], delete=True))
        log.info("controller: %s-%d reassigned to %s", topic, p, target)
        return True

    def _write_assignment(self, topic: str, p: int, replicas: list[int]) -> None:
        """The assignment of ``topic`` with partition ``p`` on ``replicas`` (version-checked
        read-modify-write)."""
        from kazoo.exceptions import BadVersionError

        path = replica_nodes.assignment_path(topic)
        for _ in range(5):
            found = self._get(path)
            if found is None:
                raise RuntimeError(f"{path} is gone")
            assignment = replica_nodes.decode_assignment(found[0], path, self.bounds)
            assignment[p] = list(replicas)
            try:
                self._wait(self.client.set_async(path, replica_nodes.encode_assignment(assignment),
                                                 version=found[1].version))
                return
            except BadVersionError:
                continue
        raise RuntimeError(f"{path} keeps changing")
