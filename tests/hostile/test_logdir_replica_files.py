"""Hostile files of replicas placed on a broker's log dirs, and a log dir
replaced under a running broker (issue 36): a ``partition.json`` whose
``placement`` is not one this broker writes takes only its partition
offline; a dir-placed replica found at start is STOPPED, whatever its slot
or files say, so it appends nothing a producer sends it until the broker
gives it a role; a dir replaced while the broker runs goes offline. Real
broker processes; the replicas are laid out on disk while the broker is
down."""

from __future__ import annotations

import json
import os

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.log.config import LogConfig
from hostbroker.log.message import encode_message_set
from hostbroker.log.partition import PartitionLog
from tests.hostile.invariants import read_partition
from tests.integration.broker import Broker
from tests.integration.wire_helpers import stop_or_kill
from tests.replication.support import poll


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path)
    yield b
    stop_or_kill(b)


def _codes(client, topic):
    meta = {t.topic: t for t in client.metadata([topic]).topics}
    return [meta[topic].error_code] + [p.error_code for p in meta[topic].partitions]


def test_a_bad_placement_or_a_stopped_dir_placed_replica_costs_only_its_own(broker):
    healthy = [b"h%d" % i for i in range(5)]
    broker.start()
    with broker.client() as client:
        client.create_topic("healthy", 1)
        client.produce("healthy", 0, encode_message_set(healthy), acks=-1)
    assert broker.stop() == 0
    log_dir = broker.settings["log.dirs"].split(",")[0]
    for topic, placement, replicated in (("bad-name", "brokers", True),
                                         ("bad-plain", "log_dirs", False),
                                         ("bad-type", ["log_dirs"], True)):
        plog = PartitionLog.create(log_dir, topic, 0, 1, {}, LogConfig(), replicated=True)
        plog.close()
        meta_path = os.path.join(plog.path, "partition.json")
        meta = json.load(open(meta_path))
        meta.update(placement=placement, replicated=replicated)
        with open(meta_path, "w") as f:
            json.dump(meta, f)
    PartitionLog.create(log_dir, "placed", 0, 1, {}, LogConfig(), replicated=True,
                        placement="log_dirs").close()
    broker.start()
    with broker.client() as client:
        assert read_partition(client, "healthy", 0) == healthy
        for topic in ("bad-name", "bad-plain", "bad-type"):
            assert ErrorCode.STORAGE_ERROR in _codes(client, topic), topic
        for acks in (1, -1):
            (result,) = client.produce_many([("placed", 0, encode_message_set([b"x"]))],
                                            acks=acks, raise_on_error=False)
            assert result.error_code == ErrorCode.NOT_LEADER_FOR_PARTITION, (acks, result)
    assert broker.stop() == 0
    placed = os.path.join(log_dir, "placed_0")
    assert os.path.getsize(os.path.join(placed, "00000000000000000000.kafka")) == 0
    assert "log_dirs" in open(os.path.join(placed, "partition.json")).read()


def test_a_log_dir_replaced_under_a_running_broker_goes_offline(tmp_path):
    """A disk pulled and another mounted at its path: writes to the old
    dir's open files would still succeed, unseen by anyone. The writer's
    probe (every ``log.dir.check.interval.ms``) sees another dir there and
    takes its partitions offline: produces answer STORAGE_ERROR instead of
    being acknowledged into files nobody can read. (Only where hb-logdirs
    runs, two log dirs or more: it alone can open a dir again; a one-dir
    broker has no probe, tests/hostile/test_logdirs_control.py.)"""
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    broker = Broker(tmp_path, **{"log.dirs": ",".join(dirs), "log.dir.check.interval.ms": 50})
    try:
        broker.start()
        with broker.client() as client:
            client.create_topic("t", 1)
            (log_dir,) = [d for d in dirs if os.path.isdir(os.path.join(d, "t_0"))]
            client.produce("t", 0, encode_message_set([b"before"]), acks=1)
            os.rename(log_dir, log_dir + ".pulled")
            os.mkdir(log_dir)

            def refused():
                (result,) = client.produce_many([("t", 0, encode_message_set([b"lost?"]))],
                                                acks=1, raise_on_error=False)
                return result.error_code == ErrorCode.STORAGE_ERROR

            poll(refused, 10, "produce refused once the dir is replaced")
        assert "log dir removed or replaced" in broker.log()
    finally:
        stop_or_kill(broker)
