"""The collectors over a real broker's shared memory, checked against what
the broker answers over the wire (log end offsets, its processes, its
groups' committed offsets)."""

from __future__ import annotations

import os

import psutil

from hostbroker.client.coordinator_requests import CoordinatorClient
from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.metrics.collectors import (
    BrokerCollector,
    GroupCollector,
    PartitionCollector,
    PartitionView,
    ProcessCollector,
)
from hostbroker.metrics.lag import GroupLag
from tests.integration.conftest import make_broker  # noqa: F401 - fixture
from tests.integration.wire_helpers import log_end, module_broker, new_topic, wait_for
from tests.metrics.scrape import Parsed, collected, context  # noqa: F401 - fixture

served = module_broker()


def test_partition_offsets_are_what_the_broker_answers(served, context):
    topic = new_topic("m")
    with served.client() as c:
        c.create_topic(topic, 3)
        c.produce(topic, 0, encode_message_set([b"a" * 100, b"b" * 50]))
        c.produce(topic, 0, encode_message_set([b"c" * 10]))
        c.produce(topic, 2, encode_message_set([b"d" * 1000]))
        ends = {p: log_end(c, topic, p) for p in range(3)}
    assert ends[2] > ends[0] > 0 == ends[1]
    got = Parsed(collected(PartitionCollector(context, 20000)))
    for p, end in ends.items():
        labels = {"topic": topic, "partition": p}
        assert got.value("hostbroker_partition_log_end_offset", **labels) == end
        assert got.value("hostbroker_partition_log_start_offset", **labels) == 0
        assert got.value("hostbroker_partition_high_watermark", **labels) == end
        assert got.value("hostbroker_partition_size_bytes", **labels) == end
        assert got.value("hostbroker_partition_leader", **labels) == 1
        assert got.value("hostbroker_partition_offline", **labels) == 0
        # an unreplicated partition has no replicas to be short of
        assert not got.has("hostbroker_partition_under_replicated", **labels)
    assert got.value("hostbroker_metrics_partitions_omitted") == 0


def test_partitions_past_the_bound_are_left_out_and_counted(served, context):
    with served.client() as c:
        c.create_topic(new_topic("m"), 4)
    total = len(PartitionView(context.table).keys)
    got = Parsed(collected(PartitionCollector(context, 2)))
    assert len(got.series("hostbroker_partition_log_end_offset")) == 2
    assert got.value("hostbroker_metrics_partitions_omitted") == total - 2 > 0


def test_every_process_is_reported(served, context):
    got = Parsed(collected(ProcessCollector(context)))
    workers = served.workers()  # hb-writer-0 -> pid ...
    kinds = {s.labels["kind"] for s in got.series("hostbroker_process_up")}
    assert {"writer", "handler", "processor", "acceptor", "coordinator"} <= kinds
    assert len(got.series("hostbroker_process_up")) >= len(
        [n for n in workers if n.startswith("hb-") and n != "hb-supervisor"]) - 1
    for s in got.series("hostbroker_process_up"):
        assert s.value == 1, s
        assert got.value("hostbroker_process_restarts_total", **s.labels) == 0
    cpu = {(s.labels["kind"], s.labels["index"]): s.value
           for s in got.series("hostbroker_process_cpu_seconds_total")}
    supervisor = psutil.Process(served.proc.pid).cpu_times()
    assert 0 < cpu[("supervisor", "0")] <= supervisor.user + supervisor.system + 0.5
    assert all(v >= 0 for v in cpu.values())
    assert got.value("hostbroker_process_resident_memory_bytes", kind="supervisor",
                     index=0) > 1 << 20


def test_broker_gauges_and_log_dir(served, context):
    with served.client() as c:
        c.metadata()  # this connection is held while the collector reads
        got = Parsed(collected(BrokerCollector(context)))
    assert got.value("hostbroker_connections") >= 1
    assert got.value("hostbroker_fetch_long_polls") == 0
    log_dir = os.path.abspath(served.settings["log.dirs"])
    assert got.value("hostbroker_log_dir_online", log_dir=log_dir, dir_id=-1) == 1
    info = got.series("hostbroker_broker_info")
    assert len(info) == 1 and info[0].labels["mode"] == "standalone"
    assert info[0].labels["broker_id"] == "0"


def _join(broker, group: str, topic: str):
    client = CoordinatorClient([broker.unix], timeout=10, client_id="metrics-test")
    joined = client.join_group(group, "", {topic: 1}, session_timeout_ms=30000,
                               rebalance_timeout_ms=5000)
    assert joined.error_code == ErrorCode.NONE, joined
    code, _ = client.sync_group(group, joined.generation, joined.member_id)
    assert code == ErrorCode.NONE
    return client, joined


def test_a_groups_lag_after_a_known_commit(served, context):
    topic, group = new_topic("m"), new_topic("g")
    with served.client() as c:
        c.create_topic(topic, 2)
        for _ in range(3):
            c.produce(topic, 0, encode_message_set([b"x" * 200]))
        c.produce(topic, 1, encode_message_set([b"y" * 20]))
        ends = [log_end(c, topic, p) for p in range(2)]
    member, joined = _join(served, group, topic)
    try:
        committed = {0: ends[0] // 3, 1: ends[1]}
        codes = member.commit(group, joined.generation, joined.member_id,
                              [(topic, p, o, None) for p, o in committed.items()])
        assert set(codes.values()) == {ErrorCode.NONE}
        partitions = PartitionCollector(context, 20000)
        lag = GroupLag(served.unix, interval_s=15, max_groups=1000, max_keys=20000,
                       max_entries=10000)
        got = Parsed(collected(partitions, GroupCollector(lag, partitions)))
        assert got.value("hostbroker_group_members", group=group) == 1
        for p, offset in committed.items():
            labels = {"group": group, "topic": topic, "partition": p}
            assert got.value("hostbroker_group_committed_offset", **labels) == offset
            assert got.value("hostbroker_group_lag_bytes", **labels) == ends[p] - offset
        assert got.value("hostbroker_metrics_groups_omitted") == 0
        lag.close()
    finally:
        member.close()


class _Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_group_offsets_are_read_at_most_once_an_interval(served):
    topic, group = new_topic("m"), new_topic("g")
    with served.client() as c:
        c.create_topic(topic, 1)
        c.produce(topic, 0, encode_message_set([b"z" * 64]))
    member, joined = _join(served, group, topic)
    clock = _Clock()
    lag = GroupLag(served.unix, interval_s=15, max_groups=1000, max_keys=20000,
                   max_entries=10000, clock=clock)
    try:
        topics = {topic: [0]}
        assert lag.reading(topics).members[group] == 1
        assert (group, topic, 0) not in lag.reading(topics).offsets
        member.commit(group, joined.generation, joined.member_id, [(topic, 0, 5, None)])
        clock.now += 14.9
        assert (group, topic, 0) not in lag.reading(topics).offsets  # cached
        assert lag.refreshes == 1
        clock.now += 0.2
        assert lag.reading(topics).offsets[(group, topic, 0)] == 5
        assert lag.refreshes == 2
    finally:
        lag.close()
        member.close()


def test_a_groups_other_topics_are_read_at_the_first_refresh_within_the_key_budget(served):
    base = new_topic("m")
    topics = [f"{base}-{letter}" for letter in "abcd"]  # in this order when sorted
    group = "0-" + new_topic("g")
    with served.client() as c:
        for t in topics:
            c.create_topic(t, 1)
    # a member assigned topics[0] that commits only for topics[2]
    member, joined = _join(served, group, topics[0])
    member.commit(group, joined.generation, joined.member_id, [(topics[2], 0, 7, None)])
    shape = {t: [0] for t in topics}
    lag = GroupLag(served.unix, interval_s=0, max_groups=1000, max_keys=20000,
                   max_entries=10000)
    try:
        # the groups before this one (other tests') may take keys too: read it alone
        lag.max_groups = 1
        reading = lag.reading(shape)
        assert reading.offsets == {(group, topics[2], 0): 7}
        assert reading.members == {group: 1}
        lag.max_keys = 1  # its two topics' partitions no longer fit: the group is left out
        reading = lag.reading(shape)
        assert reading.offsets == {} and reading.members == {}
        assert reading.omitted >= 1
    finally:
        lag.close()
        member.close()


def test_groups_past_the_bound_are_counted(served):
    topic = new_topic("m")
    with served.client() as c:
        c.create_topic(topic, 1)
    members = [_join(served, new_topic("g"), topic) for _ in range(3)]
    lag = GroupLag(served.unix, interval_s=0, max_groups=1, max_keys=20000, max_entries=10000)
    try:
        reading = wait_for(lambda: (r := lag.reading({topic: [0]})).omitted >= 2 and r)
        assert len(reading.members) == 1
    finally:
        lag.close()
        for client, _ in members:
            client.close()


def test_a_member_less_group_s_one_partition_of_100_shows_at_the_first_refresh(served, context):
    """The group committed only partition 57 (say, its last owner's) and has no
    members: LIST_OFFSET_GROUPS names the topic, so the first refresh reads it."""
    topic, group = new_topic("m"), new_topic("g")
    with served.client() as c:
        c.create_topic(topic, 100)
        c.produce(topic, 57, encode_message_set([b"q" * 300]))
        end = log_end(c, topic, 57)
        c.offset_commit(group, [(topic, 57, 10, None)])
    partitions = PartitionCollector(context, 20000)
    lag = GroupLag(served.unix, interval_s=15, max_groups=1000, max_keys=20000,
                   max_entries=10000)
    try:
        got = Parsed(collected(partitions, GroupCollector(lag, partitions)))
        assert lag.refreshes == 1
        labels = {"group": group, "topic": topic, "partition": 57}
        assert got.value("hostbroker_group_members", group=group) == 0
        assert got.value("hostbroker_group_committed_offset", **labels) == 10
        assert got.value("hostbroker_group_lag_bytes", **labels) == end - 10
        assert got.value("hostbroker_metrics_groups_omitted") == 0
    finally:
        lag.close()


def test_a_truncated_list_of_groups_counts_as_omitted(make_broker):
    """Past LIST_OFFSET_GROUPS' cut the groups are not known: at least one omitted."""
    broker = make_broker(response_max_bytes=65536)
    names = [f"{i:03d}" + "g" * 247 for i in range(300)]  # 300 names of 250 bytes
    with broker.client() as c:
        c.create_topic("t", 1)
        for name in names:
            c.offset_commit(name, [("t", 0, 0, None)])
        assert c.list_offset_groups().truncated == 1
    lag = GroupLag(broker.unix, interval_s=15, max_groups=1000, max_keys=20000,
                   max_entries=10000)
    try:
        reading = lag.reading({"t": [0]})
        assert 200 < len(reading.members) < 300
        assert reading.omitted >= 1
        assert set(reading.members) == set(names[:len(reading.members)])
    finally:
        lag.close()


def test_a_group_with_only_committed_offsets_is_reported(served, context):
    topic, group = new_topic("m"), new_topic("g")
    with served.client() as c:
        c.create_topic(topic, 1)
        c.produce(topic, 0, encode_message_set([b"o" * 500]))
        end = log_end(c, topic, 0)
        c.offset_commit(group, [(topic, 0, 3, None)])  # no member ever joined
    partitions = PartitionCollector(context, 20000)
    lag = GroupLag(served.unix, interval_s=15, max_groups=1000, max_keys=20000,
                   max_entries=10000)
    try:
        got = Parsed(collected(partitions, GroupCollector(lag, partitions)))
        assert got.value("hostbroker_group_members", group=group) == 0
        labels = {"group": group, "topic": topic, "partition": 0}
        assert got.value("hostbroker_group_committed_offset", **labels) == 3
        assert got.value("hostbroker_group_lag_bytes", **labels) == end - 3
    finally:
        lag.close()
