"""A log dir table slot left mid-write (its seq odd, as a writer killed inside
a write leaves it) costs only itself: readers get the ids at once and the
slot as unknown after one bounded wait; the owner's handle (hb-logdirs') and
the supervisor repair it while the broker runs."""

from __future__ import annotations

import struct
import time

import pytest

from hostbroker import top
from hostbroker.shm.logdirs import LD_ONLINE, LogDirTable
from hostbroker.shm.region import SharedRegion
from hostbroker.shm.table import READ_STUCK_SECONDS, TABLE_HEADER_SIZE, TornSlotError
from hostbroker.workers.respawn import Respawn

BOUND_S = READ_STUCK_SECONDS + 4.0  # the one wait, with room for a loaded machine


def tear(name: str, index: int) -> int:
    """Make slot ``index``'s seq odd through the shared memory, as a writer
    killed between its two seq stores leaves it; the odd seq."""
    region = SharedRegion.attach(name)
    try:
        at = TABLE_HEADER_SIZE + index * LogDirTable.LAYOUT.slot_size
        (seq,) = struct.unpack_from("<Q", region.buf, at)
        struct.pack_into("<Q", region.buf, at, seq + 1)
        return seq + 1
    finally:
        region.close()


def seq_of(table: LogDirTable, index: int) -> int:
    return table._u64[(TABLE_HEADER_SIZE + index * table.slot_size) >> 3]


@pytest.fixture
def made(names):
    name = names("logdirs")
    table = LogDirTable.create(name, [4, 9])  # (the supervisor's handle)
    table.set_counts(1, replicas=3, leaders=1, under_replicated=0, offline_replicas=0)
    opened = [table]

    def attach(readonly: bool) -> LogDirTable:
        opened.append(LogDirTable.attach(name, readonly=readonly))
        return opened[-1]

    yield name, table, attach
    for handle in opened:
        handle.close()


def test_a_reader_gets_the_ids_at_once_and_the_torn_slot_as_unknown_once_waited(made):
    name, _, attach = made
    reader = attach(readonly=True)
    tear(name, 1)
    started = time.monotonic()
    assert reader.ids() == {0: 4, 1: 9} and reader.index_of(9) == 1
    assert reader.dir_id(1) == 9
    assert time.monotonic() - started < 0.5  # no seqlock, no wait
    started = time.monotonic()
    assert reader.slot(1) is None
    assert time.monotonic() - started < BOUND_S
    started = time.monotonic()
    assert [i for i, _ in reader.scan()] == [0]
    with pytest.raises(TornSlotError):
        reader.read(1)
    rows = top.log_dir_rows(reader, ["/a", "/b"])
    assert time.monotonic() - started < 0.5  # waited once, not again
    assert rows[1] == {"id": 9, "path": "/b", "state": "unknown", "replicas": None,
                       "leaders": None, "under_replicated": None, "offline_replicas": None}
    assert rows[0]["state"] == "online"
    assert "unknown" in top.render({"broker_state": "running", "supervisor_pid": 1,
                                    "workers": [], "log_dirs": rows}, None, 1.0)


@pytest.mark.parametrize("look", ["ids", "read", "write"])
def test_the_owners_handle_repairs_a_torn_slot_as_soon_as_it_looks(made, look):
    name, _, attach = made
    owner, reader = attach(readonly=False), attach(readonly=True)
    assert owner.owner and not reader.owner
    tear(name, 1)
    if look == "ids":
        assert owner.ids() == {0: 4, 1: 9}
    elif look == "read":
        assert owner.read(1).replicas == 3
    else:
        owner.set_counts(1, replicas=4, leaders=1, under_replicated=0, offline_replicas=0)
    assert owner.repaired == [1] and seq_of(owner, 1) % 2 == 0
    s = reader.slot(1)
    assert (s.state, s.dir_id, s.replicas) == (LD_ONLINE, 9, 4 if look == "write" else 3)


def test_a_reader_sees_the_slot_again_once_it_is_repaired(made):
    name, table, attach = made
    reader = attach(readonly=True)
    tear(name, 0)
    assert reader.slot(0) is None
    assert table.repair_torn() == [0]
    assert reader.slot(0).dir_id == 4
    tear(name, 0)  # torn again, at another seq: waited for again, then unknown
    assert reader.slot(0) is None


class _Supervisor(Respawn):
    def __init__(self, table):
        self.logdir_table = table


def test_the_supervisor_repairs_what_a_dead_hb_logdirs_left_mid_write(made, capsys):
    name, table, attach = made
    reader = attach(readonly=True)
    tear(name, 1)
    _Supervisor(table)._repair_torn_log_dirs()
    assert capsys.readouterr().err == (
        "hostbroker: repaired log dir table slot(s) [1] left mid-write\n")
    assert reader.slot(1).replicas == 3
    _Supervisor(table)._repair_torn_log_dirs()  # nothing torn: nothing said
    assert capsys.readouterr().err == ""
