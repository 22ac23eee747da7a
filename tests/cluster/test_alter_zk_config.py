"""``topics alter --zookeeper --config`` on a running cluster (issue 37): three real
brokers on a real ZooKeeper, a replicated topic under an acks=-1 producer's load.

A config set acts on every replica without a restart (``retention.bytes``
deletes old segments on the leader and on both followers), and a config deleted
is gone from every replica's ``partition.json``: its default applies again
(issue 35 left a removed override on the replicas).
"""

from __future__ import annotations

import io
import json
import os

from hostbroker.commands.topics_alter_zk import alter_cluster
from hostbroker.errors import ErrorCode
from tests.cluster.test_alter_zk import cluster  # noqa: F401 - fixture
from tests.replication.support import Feeder, create, poll, settled


def alter(zookeeper, topic, set_configs=None, delete_configs=()) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert alter_cluster(zookeeper.connect, topic, None, dict(set_configs or {}),
                         list(delete_configs), out, err) == 0, err.getvalue()


def replica_dir(broker, topic: str, partition: int) -> str:
    base = broker.settings["log.dirs"]
    return os.path.join(base, f"{topic}_{partition}")


def overrides(broker, topic: str, partition: int) -> dict[str, str]:
    with open(os.path.join(replica_dir(broker, topic, partition), "partition.json")) as f:
        return json.load(f)["config"]


def segments(broker, topic: str, partition: int) -> int:
    return sum(name.endswith(".kafka")
               for name in os.listdir(replica_dir(broker, topic, partition)))


def test_a_config_acts_on_every_replica_and_a_deleted_one_is_gone_from_every_replica(
        cluster, zookeeper, zk):
    topic = "conf"
    create(zookeeper, topic, 1, 3, "segment.bytes=1024", "min.insync.replicas=2")
    poll(lambda: settled(zk, topic, 1, 3), what="the partition led, three in sync")
    brokers = list(cluster.values())
    poll(lambda: all(overrides(b, topic, 0) == {"segment.bytes": "1024",
                                                 "min.insync.replicas": "2"}
                     for b in brokers), what="every replica created with the configs")
    feeder = Feeder(cluster, topic, 1)
    try:
        poll(lambda: all(segments(b, topic, 0) >= 12 for b in brokers), timeout=60,
             what="a dozen segments on every replica")
        alter(zookeeper, topic, set_configs={"retention.bytes": "2048"})
        poll(lambda: all(overrides(b, topic, 0).get("retention.bytes") == "2048"
                         for b in brokers), timeout=10, what="every replica told")
        # it acts: retention keeps about two segments' worth on the leader and on both
        # followers, while the producer goes on
        poll(lambda: all(segments(b, topic, 0) <= 5 for b in brokers), timeout=20,
             what="old segments deleted on every replica")
        acked = len(feeder.acked)
        poll(lambda: len(feeder.acked) > acked + 20, what="the producer going on")

        alter(zookeeper, topic, delete_configs=["retention.bytes", "min.insync.replicas"])
        poll(lambda: all(overrides(b, topic, 0) == {"segment.bytes": "1024"}
                         for b in brokers), timeout=10,
             what="the deleted overrides gone from every replica")
        # retention.bytes is unlimited again: segments pile up on every replica
        poll(lambda: all(segments(b, topic, 0) >= 10 for b in brokers), timeout=60,
             what="segments kept again")
    finally:
        feeder.stop()
    assert json.loads(zk.get(f"/config/topics/{topic}")[0])["config"] == {
        "segment.bytes": "1024"}
    assert not [e for e in feeder.errors if e[1] == ErrorCode.NOT_ENOUGH_REPLICAS]
