"""DESCRIBE_TOPIC_CONFIGS at many topics, and what a config change of a
topic placed on log dirs costs the handlers' topic views (issue 37): a
handler reads a bounded number of partition files per request, and a
change moves the table's generation a few times, not once per replica."""

from __future__ import annotations

import json
import os
import time

from hostbroker.config import Config
from hostbroker.errors import ErrorCode
from hostbroker.top import attach
from hostbroker.workers.handler_alter import MAX_CONFIG_READS


def test_one_request_reads_a_bounded_number_of_files(make_broker):
    """Past MAX_CONFIG_READS topics not read since the table last changed, a
    request answers BROKER_NOT_AVAILABLE (retriable); asked again, the rest
    are read from disk, and every topic is answered from what was kept."""
    broker = make_broker(num_handlers=1)
    extra = 7
    with broker.client() as client:
        for n in range(MAX_CONFIG_READS + extra):
            client.create_topic(f"t{n:04d}", 1, {"flush.ms": str(1000 + n)})
        first = client.describe_topic_configs()
        codes = [t.error_code for t in first]
        assert codes.count(ErrorCode.NONE) == MAX_CONFIG_READS
        assert codes.count(ErrorCode.BROKER_NOT_AVAILABLE) == extra
        assert all(t.configs == () for t in first
                   if t.error_code == ErrorCode.BROKER_NOT_AVAILABLE)
        again = client.describe_topic_configs()
        assert [t.error_code for t in again] == [ErrorCode.NONE] * len(codes)
        assert [{e.key: e.value for e in t.configs} for t in again] == [
            {"flush.ms": str(1000 + n)} for n in range(MAX_CONFIG_READS + extra)]


def _generation(broker) -> int:
    _, table, _ = attach(Config.build(overrides=broker._naming()))
    try:
        return table.generation
    finally:
        table.close()


def _replica_configs(dirs, topic: str) -> list[dict]:
    out = []
    for d in dirs:
        for name in os.listdir(d):
            if name.startswith(f"{topic}_"):
                with open(os.path.join(d, name, "partition.json")) as f:
                    out.append(json.load(f)["config"])
    return out


def test_a_dir_placed_change_moves_the_generation_a_few_times(make_broker, tmp_path):
    """A topic of 30 partitions with two replicas each: its config change
    reaches all 60 replicas with a handful of generation bumps (hb-logdirs
    bumps once a pass after the replicas answer), not one per replica."""
    dirs = [str(tmp_path / f"d{i}") for i in range(3)]
    broker = make_broker(log_dirs=",".join(dirs))
    with broker.client() as client:
        client.create_topic("spread", 30, {"segment.bytes": "4096"}, replication_factor=2)
    deadline = time.monotonic() + 20
    while True:  # settled: every replica made, no bump in a second
        before = _generation(broker)
        time.sleep(1.0)
        if _generation(broker) == before and len(_replica_configs(dirs, "spread")) == 60:
            break
        assert time.monotonic() < deadline
    with broker.client() as client:
        assert client.alter_topic("spread", set_configs={"flush.ms": "777"}
                                  ).error_code == ErrorCode.NONE
    wanted = {"segment.bytes": "4096", "flush.ms": "777"}
    deadline = time.monotonic() + 20
    while not all(c == wanted for c in _replica_configs(dirs, "spread")):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    time.sleep(0.5)  # the last answers' bump
    bumps = _generation(broker) - before
    assert 1 <= bumps <= 10, bumps
    with broker.client() as client:
        (described,) = client.describe_topic_configs(["spread"])
    assert {e.key: e.value for e in described.configs} == wanted
