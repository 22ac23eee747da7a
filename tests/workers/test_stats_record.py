"""The counting rules of workers/stats_record.py, on real stats regions."""

from __future__ import annotations

import dataclasses

import pytest

from hostbroker.config import Config
from hostbroker.errors import ErrorCode
from hostbroker.protocol import api, bodies, topics_admin
from hostbroker.protocol import controller_requests as creq
from hostbroker.protocol import groups as gproto
from hostbroker.protocol.names import api_name
from hostbroker.shm import stats
from hostbroker.shm.partitions import ONLINE, PartitionTable
from hostbroker.shm.region import remove_stale
from hostbroker.shm.stats import ApiStats, PartitionStats
from hostbroker.workers.envelopes import FilePiece
from hostbroker.workers.plan import BrokerPlan
from hostbroker.workers.stats_record import Recorder, answer_has_error, attach_stats


@pytest.fixture
def plan(tmp_path):
    plan = BrokerPlan.from_config(Config.build(overrides=[
        f"log.dirs={tmp_path}/a,{tmp_path}/b", "num.processors=2", "num.handlers=1",
        "max.partitions=16"]))
    made = [PartitionTable.create(plan.table_name, 16)]
    for kind, index in plan.stats_workers():
        made.append(PartitionStats.create(plan.stats_name(kind, index), 16))
    for kind, index in plan.api_stats_workers():
        made.append(ApiStats.create(plan.api_stats_name(kind, index)))
    yield plan
    for handle in made:
        handle.close()
    remove_stale(plan.shm_prefix)


def test_who_keeps_what(plan):
    assert plan.stats_workers() == [("writer", 0), ("writer", 1), ("handler", 0),
                                    ("processor", 0), ("processor", 1)]
    assert [k for k, _ in plan.api_stats_workers()] == [
        "writer", "writer", "coordinator", "handler", "processor", "processor"]
    assert len({plan.stats_name(k, i) for k, i in plan.stats_workers()}) == 5
    assert all(name.startswith(plan.shm_prefix) for name in (
        plan.stats_name("writer", 0), plan.api_stats_name("coordinator", 0)))


def test_appends_and_fetches_count_per_partition(plan):
    writer = Recorder(plan, "writer", 0)
    processor = Recorder(plan, "processor", 1)
    coordinator = Recorder(plan, "coordinator", 0)
    assert coordinator.partitions is None  # API stats only
    writer.appended(3, 10, 1000)
    writer.appended(99, 1, 1)  # past the table: nothing
    parts = [("t", 0, ErrorCode.NONE, 10, FilePiece("/x", 0, 700)),
             ("t", 1, ErrorCode.NONE, 10, None),
             ("u", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, None)]
    assert processor.fetched(parts, [(3, None), (4, None), (None, None)]) is True
    assert processor.fetched(parts[:2], [(3, None), (4, None)]) is False
    readers, apis = attach_stats(plan, plan.workers())
    try:
        totals = stats.partition_totals(readers, 5)
        assert totals[3 * 4:4 * 4] == [10, 1000, 1400, 2]
        assert totals[4 * 4:5 * 4] == [0, 0, 0, 2]  # an empty answer is still a fetch
        assert len(readers) == 5 and len(apis) == 6
    finally:
        for handle in readers + apis:
            handle.close()


def _fetch(slot: int):
    """A FETCH answer's part of one partition, 100 bytes, and its read."""
    return [("t", 0, ErrorCode.NONE, 10, FilePiece("/x", 0, 100))], [(slot, None)]


def test_a_freed_slot_starts_from_zero_though_an_add_raced_the_free(plan):
    """A processor's ``+=`` is a load, an add and a store. One that loaded
    its count before the slot was freed and stores after it (the race, made
    by hand: it cannot be timed for real) writes the old count back into its
    own row; that row is of the slot's old claim, so readers leave it out,
    and the processor zeroes it before it next counts for the slot."""
    table = PartitionTable.attach(plan.table_name)
    writer = Recorder(plan, "writer", 0)
    processor = Recorder(plan, "processor", 1)
    readers, apis = attach_stats(plan, plan.workers())
    try:
        table.write(3, state=ONLINE, name="old", partition=0, owner=0)
        writer.appended(3, 10, 1000)
        for _ in range(5):
            processor.fetched(*_fetch(3))
        assert stats.partition_totals(readers, 4)[3 * 4:4 * 4] == [10, 1000, 500, 5]

        at = 3 * stats.ROW_WORDS + 1 + stats.FETCHES
        loaded = processor.words[at]  # the processor's += has loaded ...
        others = [bytes(r.region.buf) for r in readers[1:]]
        table.free(3)  # ... when the writer frees the slot
        writer.freed(3)
        assert [bytes(r.region.buf) for r in readers[1:]] == others  # its own row only
        processor.words[at] = loaded + 1  # ... and stores the old count, plus one
        assert stats.partition_totals(readers, 4)[3 * 4:4 * 4] == [0, 0, 0, 0]

        table.write(3, state=ONLINE, name="new", partition=0, owner=1)
        processor.fetched(*_fetch(3))
        writer.appended(3, 1, 7)  # (another writer of the new topic would alike)
        assert stats.partition_totals(readers, 4)[3 * 4:4 * 4] == [1, 7, 100, 1]
        assert processor.partitions.row(3) == (0, 0, 100, 1)
    finally:
        for handle in readers + apis + [table]:
            handle.close()


def _produce(codes):
    return api.ProduceResponse(tuple(api.ProducePartitionResult("t", i, code, 0, 1)
                                     for i, code in enumerate(codes)))


def test_errors_of_a_response_at_any_level():
    ok = _produce([ErrorCode.NONE])
    assert not answer_has_error(ok)
    assert answer_has_error(_produce([ErrorCode.NONE, ErrorCode.NOT_LEADER_FOR_PARTITION]))
    # only the last of many partitions: every one is looked at
    assert answer_has_error(_produce([ErrorCode.NONE] * 999 + [ErrorCode.MESSAGE_TOO_LARGE]))
    assert not answer_has_error(_produce([ErrorCode.NONE] * 1000))
    assert not answer_has_error(_produce([]))
    # a code this version does not name stays a plain int, and still counts
    assert answer_has_error(_produce([ErrorCode.NONE, 99]))
    assert answer_has_error(api.OffsetsResponse(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ()))
    assert not answer_has_error(api.OffsetsResponse(ErrorCode.NONE, (5,)))
    assert answer_has_error(gproto.HeartbeatResponse(ErrorCode.REBALANCE_IN_PROGRESS))
    assert not answer_has_error(api.AdminResponse(ErrorCode.NONE, None))
    assert answer_has_error(api.AdminResponse(ErrorCode.INVALID_REQUEST, "no"))


def test_errors_two_levels_down_and_beside_a_top_level_code():
    def metadata(topic_code, partition_codes):
        return bodies.MetadataResponse(0, (bodies.MetadataBroker(0, "h", 1, None),), (
            bodies.MetadataTopic("a", ErrorCode.NONE, (
                bodies.MetadataPartition(0, ErrorCode.NONE, 0, 0, 0, None),)),
            bodies.MetadataTopic("b", topic_code, tuple(
                bodies.MetadataPartition(i, code, 0, 0, 0, None)
                for i, code in enumerate(partition_codes)))))

    assert not answer_has_error(metadata(ErrorCode.NONE, [ErrorCode.NONE] * 3))
    assert answer_has_error(metadata(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, []))
    assert answer_has_error(metadata(ErrorCode.NONE, [ErrorCode.NONE, ErrorCode.STORAGE_ERROR]))
    # a top-level code and the partitions' codes beside it
    part = creq.PartitionError("t", 0, ErrorCode.NONE)
    bad = creq.PartitionError("t", 1, ErrorCode.NOT_LEADER_FOR_PARTITION)
    assert not answer_has_error(creq.LeaderAndIsrResponse(ErrorCode.NONE, (part, part)))
    assert answer_has_error(creq.LeaderAndIsrResponse(ErrorCode.NONE, (part, bad)))
    assert answer_has_error(creq.LeaderAndIsrResponse(ErrorCode.STALE_CONTROLLER_EPOCH, ()))
    # results whose entries hold no code (a topic's config entries) are not looked into
    configs = topics_admin.TopicConfigs("t", ErrorCode.NONE, (
        bodies.TopicConfigEntry("retention.ms", "1"),))
    assert not answer_has_error(topics_admin.DescribeTopicConfigsResponse((configs,)))
    assert answer_has_error(topics_admin.DescribeTopicConfigsResponse((
        configs, topics_admin.TopicConfigs("u", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ()))))


@dataclasses.dataclass(frozen=True)
class _Node:
    """A result that holds results of its own kind (no response does yet)."""

    error_code: int
    children: tuple[_Node, ...] = ()


def test_errors_of_results_nested_in_their_own_kind_at_any_depth():
    def chain(depth: int, code: int) -> _Node:
        node = _Node(code)
        for _ in range(depth):
            node = _Node(ErrorCode.NONE, (_Node(ErrorCode.NONE), node))
        return node

    assert not answer_has_error(chain(6, ErrorCode.NONE))
    assert answer_has_error(chain(6, ErrorCode.UNKNOWN))
    assert answer_has_error(chain(0, ErrorCode.UNKNOWN))


def test_api_names():
    assert api_name(api.ApiKey.PRODUCE) == "produce"
    assert api_name(gproto.GroupApiKey.JOIN_GROUP) == "join_group"
    assert api_name(api.ApiKey.LOG_DIR_ADMIN) == "log_dir_admin"
    assert api_name(31) == "api_31"
