"""``/metrics``' collectors over a broker with replicas across log dirs: a
partition held in two slots (a leader and a follower, each on its own log
dir) is one series, led by this broker and not under-replicated once the
follower has caught up; each log dir is reported with its id."""

from __future__ import annotations

import os

import pytest

from hostbroker.log.message import encode_message_set
from hostbroker.metrics.collectors import BrokerCollector, PartitionCollector
from tests.integration.broker import Broker
from tests.integration.wire_helpers import new_topic, stop_or_kill, wait_for
from tests.metrics.scrape import Parsed, collected, context_of


@pytest.fixture(scope="module")
def two_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("dirs")
    dirs = [str(root / f"d{i}") for i in range(2)]
    for path in dirs:
        os.mkdir(path)
    broker = Broker(root, log_dirs=",".join(dirs), num_processors=1,
                    replica_lag_time_max_ms=3000)
    broker.dirs = dirs
    broker.start()
    yield broker
    stop_or_kill(broker)


def test_a_replicated_partition_is_one_series(two_dirs):
    topic = new_topic("r")
    message_set = encode_message_set([b"r" * 120])
    with two_dirs.client() as c:
        c.create_topic(topic, 2, replication_factor=2)

        def produced():
            try:
                return c.produce(topic, 0, message_set)
            except Exception:  # noqa: BLE001 - not led yet
                return None

        result = wait_for(produced, timeout=30)
        assert result, "partition 0 was not led"
    # its log end; consumers (OFFSETS) see it once the follower has it too
    end = result.base_offset + len(message_set)
    context = context_of(two_dirs)
    try:
        def settled():
            got = Parsed(collected(PartitionCollector(context, 20000)))
            labels = {"topic": topic, "partition": 0}
            return (got.value("hostbroker_partition_high_watermark", **labels) == end
                    and got.value("hostbroker_partition_under_replicated", **labels) == 0
                    and all(got.value("hostbroker_partition_leader", topic=topic, partition=p)
                            for p in range(2))
                    and got)

        got = wait_for(settled, timeout=30)
        assert got, "the partitions were not led, or the follower did not catch up"
        for p in range(2):
            labels = {"topic": topic, "partition": p}
            assert len(got.series("hostbroker_partition_log_end_offset", **labels)) == 1
            assert got.value("hostbroker_partition_leader", **labels) == 1
            assert got.value("hostbroker_partition_offline", **labels) == 0
        assert got.value("hostbroker_partition_log_end_offset", topic=topic, partition=0) == end
        assert got.value("hostbroker_partition_messages_in_total", topic=topic,
                         partition=0) >= 1

        broker = Parsed(collected(BrokerCollector(context)))
        info = broker.series("hostbroker_broker_info")
        assert [s.labels["mode"] for s in info] == ["logdirs"]
        online = {s.labels["log_dir"]: s for s in broker.series("hostbroker_log_dir_online")}
        assert set(online) == {os.path.abspath(d) for d in two_dirs.dirs}
        for s in online.values():
            assert s.value == 1 and int(s.labels["dir_id"]) > 0
        assert sum(s.value for s in broker.series("hostbroker_log_dir_replicas")) >= 4
    finally:
        context.close()
