"""A log dir table slot left mid-write by a dead ``hb-logdirs`` (its only
writer): readers of ids neither stall nor fail on it, and the next
``hb-logdirs`` repairs it as it starts.

Real shared tables; the slot is torn as a writer killed between its two seq
stores leaves it (seq odd)."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

import pytest

from hostbroker.shm import partitions as ptable
from hostbroker.shm.logdirs import LD_ONLINE
from hostbroker.shm.table import TornSlotError

from hostbroker.workers.logdirs.statefile import STATE_FILE
from tests.workers.test_logdirs_worker import IDS, Harness


def tear(table, index: int) -> None:
    table._u64[table._offset(index) >> 3] += 1  # seq odd: a write begun, never ended


def test_a_torn_slot_is_read_for_its_id_at_once_and_repaired_by_the_next_hb_logdirs(
        tmp_path, capsys, monkeypatch):
    from hostbroker.shm import table

    monkeypatch.setattr(table, "READ_STUCK_SECONDS", 10.0)  # a seqlock read: 10 s, then raises
    h = Harness(tmp_path)
    try:
        h.w.writers.close()
        tear(h.dirtable, 1)
        started = time.monotonic()
        assert [h.dirtable.dir_id(i) for i in range(3)] == IDS
        assert time.monotonic() - started < 5.0  # (far from the seqlock's wait, under load too)
        monkeypatch.setattr(table, "READ_STUCK_SECONDS", 0.5)
        h.start()  # a new hb-logdirs over the same tables
        assert "log dir table slot 1 was left mid-write; repaired" in capsys.readouterr().err
        s = h.dirtable.read(1)  # no TornSlotError
        assert (s.state, s.dir_id) == (LD_ONLINE, IDS[1])
        assert h.dirtable.repair_torn() == []
    finally:
        h.close()


def test_repair_keeps_every_field_as_it_was(tmp_path):
    h = Harness(tmp_path)
    try:
        h.dirtable.set_counts(2, 5, 2, 1, 0)
        tear(h.dirtable, 2)
        with pytest.raises(TornSlotError):
            h.dirtable.read(2)
        assert h.dirtable.repair_torn() == [2]
        s = h.dirtable.read(2)
        assert (s.dir_id, s.replicas, s.leaders, s.under_replicated) == (IDS[2], 5, 2, 1)
    finally:
        h.close()


@pytest.fixture
def quick_torn(monkeypatch):
    """A read of a torn slot gives up after 0.05 s, not 0.5 s."""
    from hostbroker.shm import table

    monkeypatch.setattr(table, "READ_STUCK_SECONDS", 0.05)


def test_a_pass_over_a_table_with_a_torn_slot_decides_nothing(tmp_path, quick_torn):
    from tests.workers.test_logdirs_worker import create

    h = Harness(tmp_path)
    try:
        create(h, partitions=2, rf=2)
        before = {tp: (p.leader, p.leader_epoch, p.isr) for tp, p in h.w.doc.parts.items()}
        seq = h.copy(0).seq
        h.w.writers.close()
        tear(h.table, 0)  # (a dead hb-logdirs' claim, say)
        w = h.start()  # a fresh hb-logdirs: no scan has succeeded
        w._pass(0.0)
        assert {tp: (p.leader, p.leader_epoch, p.isr) for tp, p in w.doc.parts.items()} == before
        assert h.copy(0).seq == seq  # nothing written
        h.table.repair(0)
        w._pass(0.0)
        assert {tp: (p.leader, p.leader_epoch, p.isr) for tp, p in w.doc.parts.items()} == before
    finally:
        h.close()


def test_no_copy_and_a_torn_slot_keep_the_replicas_frozen_until_the_table_is_read(
        tmp_path, quick_torn):
    from tests.workers.test_logdirs_worker import create

    h = Harness(tmp_path)
    try:
        create(h, partitions=2, rf=2)
        h.w.writers.close()
        for path in h.paths:
            os.remove(os.path.join(path, STATE_FILE))
        tear(h.table, 0)
        w = h.start()
        assert w.frozen  # (not known yet whether replicas exist)
        w._pass(0.0)
        assert w.frozen
        h.table.repair(0)
        w._pass(0.0)
        w.admin_round(0.0)
        assert w.frozen  # replicas exist: none is a stray
        got, _ = h.states()
        assert not any(body.get("delete") for body in got.values())
    finally:
        h.close()


def test_without_copy_nor_replicas_a_torn_slot_only_delays_the_start(tmp_path, quick_torn):
    h = Harness(tmp_path)
    try:
        h.w.writers.close()
        slot = h.table.find_free()
        h.table.claim_replica(slot, [1], state=ptable.ONLINE, name="plain", partition=0,
                              owner=0, placement=ptable.PLACEMENT_BROKERS)
        tear(h.table, slot)
        w = h.start()
        assert w.frozen
        h.table.repair(slot)
        w._pass(0.0)
        assert not w.frozen
    finally:
        h.close()


def test_the_supervisor_repairs_a_slot_a_dead_hb_logdirs_left_mid_write(tmp_path, quick_torn):
    from hostbroker.workers.supervisor import Supervisor

    h = Harness(tmp_path)
    try:
        h.w.writers.close()
        slot = h.table.find_free()
        h.table.claim_replica(slot, [1, 2], state=ptable.ONLINE, name="t", partition=0, owner=1,
                              placement=ptable.PLACEMENT_LOG_DIRS)
        tear(h.table, slot)
        sup = Supervisor.__new__(Supervisor)
        sup.table = h.table
        sup.board = SimpleNamespace(set_state=lambda *a: None)
        sup.plan = SimpleNamespace(board_slot=lambda kind, i: 0, rings_consumed_by=lambda k, i: [],
                                   doorbells={})
        sup.started_at = {}
        sup.spawn = lambda kind, index: None
        sup._replace("logdirs", 0)
        assert h.table.read(slot).name == "t"  # no TornSlotError
    finally:
        h.close()
