"""A handler's view of a partition whose replicas sit on several log dirs
(``workers/topicview.py``): which of its slots serves it, in which order its
replicas come, and what METADATA v0 and the fetch path make of it.

Real partition and log dir tables in shared memory, written as the writers
and hb-logdirs write them (no processes)."""

from __future__ import annotations

import itertools
import os
import types

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.log.config import LogConfig
from hostbroker.log.segments import partition_dirname
from hostbroker.protocol import api
from hostbroker.shm import partitions as ptable
from hostbroker.shm.logdirs import LogDirTable
from hostbroker.shm.region import broker_prefix, region_name, remove_stale
from hostbroker.workers.answers import TableAnswers, fetch_part
from hostbroker.workers.topicview import TopicView

from tests.workers.handler_rig import BROKER_ID, claim, make_table

_runs = itertools.count()
IDS = [7, 3, 5]  # writer 0 holds log dir id 7, writer 1 id 3, writer 2 id 5


@pytest.fixture
def tables(tmp_path):
    token = f"tv{os.getpid()}n{next(_runs)}"
    table = make_table(token)
    logdirs = LogDirTable.create(region_name(token, "logdirs", 0), IDS)
    dirs = []
    for w in range(len(IDS)):
        (tmp_path / f"d{w}").mkdir()
        dirs.append(str(tmp_path / f"d{w}"))
    yield table, logdirs, dirs
    table.close()
    logdirs.close()
    remove_stale(broker_prefix(token))


def view_of(tables) -> TopicView:
    table, logdirs, dirs = tables
    return TopicView(table, dirs, LogConfig(), logdirs)


def test_the_leader_serves_and_the_replicas_come_in_replica_order(tables):
    table = tables[0]
    # replicas [5, 7, 3]: writer 2, writer 0, writer 1; claimed in another order
    claim(table, 0, "t", 0, owner=1, replicas=[5, 7, 3])
    claim(table, 1, "t", 0, owner=0, replicas=[5, 7, 3])
    claim(table, 2, "t", 0, owner=2, replicas=[5, 7, 3], role=ptable.ROLE_LEADER, leader=5)
    table.write(5, state=ptable.ONLINE, name="plain", partition=0, owner=1, start_offset=0,
                end_offset=3, flushed_offset=3, segment_generation=1)
    table.bump_generation()
    view = view_of(tables)
    view.refresh()
    assert view.slot("t", 0) == 2
    assert view.replica_slots("t", 0) == (2, 1, 0)
    assert view.dirs_placed == frozenset({0, 1, 2})
    assert {0, 1, 2} <= view.replicated
    assert view.topics["t"] == [2]  # one partition, not three
    assert view.replica_slots("plain", 0) == (5,)
    assert view.replica_slots("t", 1) == () and view.replica_slots("nope", 0) == ()


def test_without_its_log_dir_table_a_view_orders_replicas_by_writer(tables):
    table, _, dirs = tables
    claim(table, 0, "t", 0, owner=2, replicas=[5, 7])
    claim(table, 1, "t", 0, owner=0, replicas=[5, 7], role=ptable.ROLE_LEADER, leader=7)
    table.bump_generation()
    view = TopicView(table, dirs, LogConfig())  # (a processor's view)
    view.refresh()
    assert view.slot("t", 0) == 1 and view.replica_slots("t", 0) == (1, 0)


def test_the_newest_leader_serves_when_an_old_one_still_says_leader(tables):
    table = tables[0]
    claim(table, 0, "t", 0, owner=0, replicas=[7, 3], role=ptable.ROLE_LEADER, leader=7, epoch=1)
    claim(table, 1, "t", 0, owner=1, replicas=[7, 3], role=ptable.ROLE_LEADER, leader=3, epoch=2)
    table.bump_generation()
    view = view_of(tables)
    view.refresh()
    assert view.slot("t", 0) == 1
    # an OFFLINE replica never serves while another is ONLINE, whatever its role says
    table.write(1, state=ptable.OFFLINE)
    table.bump_generation()
    view.refresh()
    assert view.slot("t", 0) == 0


def test_a_leader_taking_its_role_after_the_generation_moved_is_found(tables):
    # hb-logdirs moved the leadership from dir 5 (offline) to dir 3 and bumped
    # the generation before dir 3's writer took its role
    table = tables[0]
    claim(table, 0, "t", 0, owner=2, replicas=[5, 7, 3], role=ptable.ROLE_LEADER, leader=5,
          state=ptable.OFFLINE)
    claim(table, 1, "t", 0, owner=0, replicas=[5, 7, 3])
    claim(table, 2, "t", 0, owner=1, replicas=[5, 7, 3])
    table.bump_generation()
    view = view_of(tables)
    view.refresh()
    assert view.slot("t", 0) == 1  # no leader: the first ONLINE replica (NOT_LEADER)
    s = table.read(view.slot("t", 0))
    assert (s.state, s.role) == (ptable.ONLINE, ptable.ROLE_FOLLOWER)
    generation = table.generation
    table.write(2, role=ptable.ROLE_LEADER, leader=3, leader_epoch=1)  # its writer, no bump
    assert table.generation == generation
    assert view.slot("t", 0) == 2
    # kept while it leads: a replica that says LEADER in an older epoch changes nothing
    table.write(1, role=ptable.ROLE_LEADER, leader=7, leader_epoch=0)
    assert view.slot("t", 0) == 2


def test_a_leadership_moved_before_the_old_leader_let_go_is_followed(tables):
    # a preferred-leader move: hb-logdirs told dir 3 to lead and dir 7 to follow,
    # and bumped the generation while dir 7's writer still led
    table = tables[0]
    claim(table, 0, "t", 0, owner=0, replicas=[3, 7], role=ptable.ROLE_LEADER, leader=7, epoch=4)
    claim(table, 1, "t", 0, owner=1, replicas=[3, 7], leader=7, epoch=4)
    table.bump_generation()
    view = view_of(tables)
    answers = TableAnswers(view, tables[2], BROKER_ID, ((BROKER_ID, "", -1, ""),), 1 << 20)
    view.refresh()
    assert view.slot("t", 0) == 0
    table.write(0, role=ptable.ROLE_FOLLOWER, leader=3, leader_epoch=5)  # no bump: both
    table.write(1, role=ptable.ROLE_LEADER, leader=3, leader_epoch=5)  # writers took them
    # METADATA (which reads the topics' slots in bulk) follows as well
    (p0,) = answers.metadata(api.MetadataRequest(("t",))).topics[0].partitions
    assert (p0.broker_id, p0.log_dir) == (BROKER_ID, tables[2][1])
    assert view.slot("t", 0) == 1


def test_with_every_replica_offline_the_first_serves_and_answers_storage_error(tables):
    table = tables[0]
    claim(table, 0, "t", 0, owner=0, replicas=[3, 7], state=ptable.OFFLINE)
    claim(table, 1, "t", 0, owner=1, replicas=[3, 7], role=ptable.ROLE_LEADER, leader=3,
          state=ptable.OFFLINE)
    table.bump_generation()
    view = view_of(tables)
    view.refresh()
    assert view.slot("t", 0) == 1  # dir 3 first in replica order
    part = types.SimpleNamespace(topic="t", partition=0, offset=0, max_bytes=100)
    found, slot, _ = fetch_part(view, part, 100)
    assert (slot, found[2]) == (1, ErrorCode.STORAGE_ERROR)


def test_a_follower_serving_answers_not_leader_and_the_leader_serves_its_high_watermark(tables):
    table, _, dirs = tables
    claim(table, 0, "t", 0, owner=0, replicas=[7, 3], end=10, hw=6)
    claim(table, 1, "t", 0, owner=1, replicas=[7, 3], end=10, hw=6)
    os.mkdir(os.path.join(dirs[0], partition_dirname("t", 0)))  # (its segments listed)
    table.bump_generation()
    view = view_of(tables)
    part = types.SimpleNamespace(topic="t", partition=0, offset=0, max_bytes=100)
    view.refresh()
    assert fetch_part(view, part, 100)[0][2] == ErrorCode.NOT_LEADER_FOR_PARTITION
    table.write(0, role=ptable.ROLE_LEADER, leader=7, leader_epoch=1)
    table.bump_generation()
    found, slot, _ = fetch_part(view, part, 100)
    assert slot == 0 and found[2:4] == (ErrorCode.NONE, 6)


def test_metadata_v0_names_this_broker_as_leader_while_a_replica_leads(tables):
    table, logdirs, dirs = tables
    claim(table, 0, "t", 0, owner=0, replicas=[7, 3], end=9, hw=4)
    claim(table, 1, "t", 0, owner=1, replicas=[7, 3], end=9, hw=4)
    claim(table, 2, "t", 1, owner=2, replicas=[5, 3], role=ptable.ROLE_LEADER, leader=5, end=8,
          hw=8)
    claim(table, 3, "t", 1, owner=1, replicas=[5, 3], end=8, hw=8)
    table.bump_generation()
    answers = TableAnswers(view_of(tables), dirs, BROKER_ID, ((BROKER_ID, "", -1, ""),), 1 << 20)
    p0, p1 = answers.metadata(api.MetadataRequest(("t",))).topics[0].partitions
    assert (p0.partition, p0.broker_id, p0.log_end_offset, p0.log_dir) == (0, -1, 4, dirs[0])
    assert (p1.partition, p1.broker_id, p1.log_end_offset, p1.log_dir) == (1, BROKER_ID, 8, dirs[2])
    # the packed frame says the same as the schema codec's answer (and the bulk read too)
    frame, failed = answers.metadata_frame(9, api.MetadataRequest(("t",) * 20))
    assert not failed
    _, decoded = api.decode_response(api.ApiKey.METADATA, frame[4:])
    assert decoded.topics[0].partitions == (p0, p1)


def test_a_log_dir_table_slot_left_mid_write_neither_stalls_nor_fails_a_refresh(tables):
    import time

    table, logdirs, _ = tables
    claim(table, 0, "t", 0, owner=1, replicas=[5, 7, 3])
    claim(table, 1, "t", 0, owner=0, replicas=[5, 7, 3])
    claim(table, 2, "t", 0, owner=2, replicas=[5, 7, 3])  # no leader: replica order serves
    table.bump_generation()
    logdirs._u64[logdirs._offset(0) >> 3] += 1  # hb-logdirs killed writing writer 0's slot
    view = view_of(tables)
    started = time.monotonic()
    view.refresh()
    assert time.monotonic() - started < 0.1
    assert view.replica_slots("t", 0) == (2, 1, 0) and view.slot("t", 0) == 2


def test_a_processors_view_orders_replicas_by_the_log_dir_table_too(tables):
    from hostbroker.workers.topicview import log_dir_table

    table, logdirs, dirs = tables
    claim(table, 0, "t", 0, owner=1, replicas=[5, 7, 3])
    claim(table, 1, "t", 0, owner=2, replicas=[5, 7, 3])
    table.bump_generation()
    plan = types.SimpleNamespace(logdirs_name=logdirs.region.name)
    found = log_dir_table(plan)
    try:
        view = TopicView(table, dirs, LogConfig(), found)  # as processor.py builds it
        view.refresh()
        assert view.replica_slots("t", 0) == (1, 0)  # dir 5 (writer 2) first
    finally:
        found.close()
    assert log_dir_table(types.SimpleNamespace(logdirs_name=None)) is None
    assert log_dir_table(types.SimpleNamespace(logdirs_name="/hb-nothing-here")) is None
