"""A log dir table slot left mid-write by a dead ``hb-logdirs`` (its only
writer): readers of ids neither stall nor fail on it, and the next
``hb-logdirs`` repairs it as it starts.

Real shared tables; the slot is torn as a writer killed between its two seq
stores leaves it (seq odd)."""

from __future__ import annotations

import time

import pytest

from hostbroker.shm.logdirs import LD_ONLINE
from hostbroker.shm.table import TornSlotError

from tests.workers.test_logdirs_worker import IDS, Harness


def tear(table, index: int) -> None:
    table._u64[table._offset(index) >> 3] += 1  # seq odd: a write begun, never ended


def test_a_torn_slot_is_read_for_its_id_at_once_and_repaired_by_the_next_hb_logdirs(
        tmp_path, capsys):
    h = Harness(tmp_path)
    try:
        h.w.writers.close()
        tear(h.dirtable, 1)
        started = time.monotonic()
        assert [h.dirtable.dir_id(i) for i in range(3)] == IDS
        assert time.monotonic() - started < 0.1  # (a seqlock read waits 0.5 s, then raises)
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
