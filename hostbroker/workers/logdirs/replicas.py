"""Where ``hb-logdirs`` finds the dir-placed replicas, and what it tells them
(a mixin of :class:`~hostbroker.workers.logdirs.worker.LogDirsWorker`).

Owns the reading of the partition table for the dir-placed replicas
(``slots``: by partition and dir id; ``slot_states``: each slot's last read),
which costs nothing per plain partition: the whole table is scanned only when
its generation (slots claimed or freed), its offline flags or the dir ids
moved, else only the known dir-placed slots are read again. Owns the
OP_REPLICA_STATE each replica on a READY writer is sent (``sent``; ``refused``
ones again after ``worker.RETRY_S``), and the forgetting of what was told to (or
tried on) a replica once it is deleted or its slot no longer holds it, so a
topic created again in the same slots is told its roles afresh and these
records stay as many as the replicas.
"""

from __future__ import annotations

import time

from hostbroker.shm import partitions as ptable
from hostbroker.shm.table import TornSlotError
from hostbroker.workers import envelopes as env

TP = tuple[str, int]


class DirReplicas:
    """Mixin: the dir-placed replicas' slots and what they were told (see the
    module docstring)."""

    def forget_replica(self, slot: int) -> None:
        """The replica in ``slot`` (as last scanned) is deleted: what it was told
        and tried is forgotten, so a replica created later in its place, of the same
        topic too, is told its role again."""
        s = self.slot_states.get(slot)
        if s is None:
            return
        dir_id = self.dirtable.dir_id(s.owner)
        key = (s.name, s.partition, dir_id)
        self.sent.pop(key, None)
        self.refused.pop(key, None)
        self.lost_tried.pop(key, None)
        self.strays_told.pop((slot, s.name, s.partition), None)

    def _prune(self) -> None:
        """Forget what was told to replicas no scanned slot holds any more, and the
        tries of replicas the document no longer assigns (bounded by the replicas)."""
        for records in (self.sent, self.refused):
            for key in [k for k in records if k[2] not in self.slots.get(k[:2], ())]:
                del records[key]
        for key in [k for k in self.lost_tried if k[:2] not in self.doc.parts
                    or k[2] not in self.doc.parts[k[:2]].replicas]:
            del self.lost_tried[key]
        for slot, t, p in [k for k in self.strays_told if k[0] not in self.slot_states
                           or (self.slot_states[k[0]].name,
                               self.slot_states[k[0]].partition) != k[1:]]:
            del self.strays_told[(slot, t, p)]

    # -- the table ---------------------------------------------------------------
    def _scan(self) -> bool:
        """Where every dir-placed replica's slot is, and its state; False when the
        table could not be read (``slots`` stays the last scan's). The whole table
        is scanned only when its generation (slots claimed or freed), its offline
        flags or the dir ids moved since the last scan; otherwise only the known
        dir-placed slots are read again (a pass costs nothing per plain
        partition). One of them found freed or holding another replica sends it
        to the whole table."""
        key = (self.table.generation, frozenset(self.table.offline_log_dirs()),
               tuple(sorted(self.dirtable.ids().items())))
        try:
            if key == self.scan_key and self._read_known():
                return True
            slots = self.table.scan()
        except TornSlotError:  # a worker died mid-write; the supervisor repairs the slot
            return False
        ids = self.dirtable.ids()
        found: dict[TP, dict[int, int]] = {}
        states = {}
        for i, s in slots:
            if s.placement != ptable.PLACEMENT_LOG_DIRS or s.state == ptable.FREE:
                continue
            dir_id = ids.get(s.owner)
            if dir_id is None:
                continue
            found.setdefault((s.name, s.partition), {})[dir_id] = i
            states[i] = s
        self.slots, self.slot_states = found, states
        self.scan_key = key  # (read before the scan: a change during it rescans next time)
        self.scanned = True
        return True

    def _read_known(self) -> bool:
        """Read again the slots the last scan found; False when one no longer holds
        the replica it held (the whole table must be scanned)."""
        states = {}
        for i, old in self.slot_states.items():
            s = self.table.read(i)
            if (s.state == ptable.FREE or s.placement != ptable.PLACEMENT_LOG_DIRS
                    or (s.name, s.partition, s.owner) != (old.name, old.partition, old.owner)):
                return False
            states[i] = s
        self.slot_states = states
        return True

    def replica_live(self, tp: TP, live: set[int]) -> set[int]:
        """The dirs of ``live`` where partition ``tp``'s replica is online."""
        slots = self.slots.get(tp, {})
        return {d for d in live if d in slots
                and self.slot_states[slots[d]].state == ptable.ONLINE}

    def _tell_replicas(self) -> None:
        """Send every replica on a READY writer what the document gives it, when that
        is not what it was sent last: leaders first, then followers, then the rest."""
        orders = []
        now = time.monotonic()
        index_of = {d: w for w, d in self.dirtable.ids().items()}
        offline = self.table.offline_log_dirs()
        for tp, part in self.doc.parts.items():
            if tp[0] in self.doc.deleting:
                continue
            slots = self.slots.get(tp, {})
            replica_slots = {str(d): s for d, s in slots.items()}
            leader_slot = slots.get(part.leader, -1)
            for d, slot in slots.items():
                w = index_of.get(d)
                if w is None or w in offline or not self.writer_ready(w):
                    continue
                if d not in part.replicas and d not in part.target:
                    continue  # a stray: the admin's business
                role = ("leader" if part.leader == d else
                        "stopped" if part.leader == -1 or self.frozen
                        or d in self.blocked or d in self.held else "follower")
                # (the topic's config too: an ALTER_TOPIC sends every replica again)
                told = (role, part.leader, part.leader_epoch, leader_slot,
                        tuple(sorted(slots.items())), tuple(part.replicas),
                        tuple(part.isr) if role == "leader" else (), part.version
                        if role == "leader" else 0,
                        tuple(sorted(self.doc.configs.get(tp[0], {}).items())))
                key = (tp[0], tp[1], d)
                if self.sent.get(key) == told:
                    continue
                refused = self.refused.get(key)
                if refused is not None and refused[0] == told and now < refused[1]:
                    continue
                state = {"slot": slot, "topic": tp[0], "partition": tp[1], "role": role,
                         "leader": part.leader, "leader_epoch": part.leader_epoch,
                         "isr": list(part.isr), "isr_version": part.version,
                         "replicas": list(part.replicas), "delete": False,
                         # the topic's whole config, which the replica takes (ALTER_TOPIC)
                         "config": self.doc.configs.get(tp[0], {}), "placement": "log_dirs",
                         "replica_slots": replica_slots, "leader_slot": leader_slot}
                rank = {"leader": 0, "follower": 1}.get(role, 2)
                orders.append((rank, w, key, told, state))
        for _, w, key, told, state in sorted(orders, key=lambda o: o[0]):
            self.sent[key] = told
            token = self.token(("state", key, told))
            self.to_writers[w].send(*env.encode_replica_state(token, state))
