"""Hostile replica files and appends at a writer (issue 35): a damaged
``leader-epoch-checkpoint`` takes only its replica offline, a damaged
``replication-offset-checkpoint`` costs only the high watermarks (one line),
and a replica that does not lead appends nothing a producer sends it,
whatever the acks. Real broker processes; the replicas are laid out on disk
as a LEADER_AND_ISR would have created them, while the broker is down."""

from __future__ import annotations

import os

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.log.config import LogConfig
from hostbroker.log.message import encode_message_set
from hostbroker.log.partition import PartitionLog
from tests.hostile.invariants import read_partition
from tests.integration.broker import Broker
from tests.integration.wire_helpers import stop_or_kill

NOT_LEADER_FOR_PARTITION = 22


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path)
    yield b
    stop_or_kill(b)


def make_replica(broker: Broker, topic: str, epochs: bytes | None = None) -> str:
    log_dir = broker.settings["log.dirs"].split(",")[0]
    plog = PartitionLog.create(log_dir, topic, 0, 1, {}, LogConfig(), replicated=True)
    plog.close()
    if epochs is not None:
        with open(os.path.join(plog.path, "leader-epoch-checkpoint"), "wb") as f:
            f.write(epochs)
    return log_dir


def test_damaged_replica_files_cost_only_their_own(broker):
    healthy = [b"h%d" % i for i in range(10)]
    broker.start()
    with broker.client() as client:
        client.create_topic("healthy", 1)
        client.produce("healthy", 0, encode_message_set(healthy), acks=-1)
    assert broker.stop() == 0
    log_dir = make_replica(broker, "bad-epochs", b"0\n7\n1 0\n")  # a count that lies
    make_replica(broker, "follower")
    with open(os.path.join(log_dir, "replication-offset-checkpoint"), "wb") as f:
        f.write(b"\xff garbage")
    broker.start()
    with broker.client() as client:
        assert read_partition(client, "healthy", 0) == healthy
        meta = {t.topic: t for t in client.metadata(["bad-epochs"]).topics}
        codes = [meta["bad-epochs"].error_code] + [p.error_code for p in
                                                   meta["bad-epochs"].partitions]
        assert ErrorCode.STORAGE_ERROR in codes, codes
        # a replica with no leadership known takes no produce, with any acks
        for acks in (1, -1):
            (result,) = client.produce_many([("follower", 0, encode_message_set([b"x"]))],
                                            acks=acks, raise_on_error=False)
            assert result.error_code == NOT_LEADER_FOR_PARTITION, (acks, result)
        client.produce("healthy", 0, encode_message_set([b"after"]), acks=-1)
    assert "replication-offset-checkpoint" in broker.log()
    assert broker.stop() == 0
    assert os.path.getsize(os.path.join(log_dir, "follower_0", "00000000000000000000.kafka")) == 0
