"""``hostbroker topics alter --zookeeper`` as a user runs it (issue 37): two real
brokers on a real ZooKeeper.

- a replicated topic: grown and its config changed in ZooKeeper, ``topics
  describe --zookeeper --json`` showing both; shrinking is one line, status 1;
- a 0.7-style topic (per-broker partitions): ALTER_TOPIC on every broker that
  holds it, each broker's registration counting the new partitions.
"""

from __future__ import annotations

import io
import json

import pytest

from hostbroker.cluster import paths
from hostbroker.commands.topics import create_cluster
from tests.integration.cli import hostbroker, one_line_error
from tests.replication.support import SETTINGS, create, poll, settled


@pytest.fixture
def pair(make_broker, tmp_path, zookeeper, zk):
    brokers = {}
    for broker_id in (1, 2):
        root = tmp_path / f"b{broker_id}"
        root.mkdir()
        brokers[broker_id] = make_broker(root=root, **{
            **SETTINGS, "zookeeper.connect": zookeeper.connect, "broker.id": broker_id})
    poll(lambda: sorted(zk.get_children(paths.BROKER_IDS)) == ["1", "2"],
         what="two brokers registered")
    poll(lambda: zk.exists("/controller") is not None, what="a controller")
    return brokers


def described(zookeeper, topic: str) -> dict:
    done = hostbroker("topics", "describe", "--zookeeper", zookeeper.connect, "--json", topic)
    assert done.returncode == 0, done.stderr.decode()
    (document,) = [t for t in json.loads(done.stdout)["topics"] if t["topic"] == topic]
    return document


def test_topics_alter_zookeeper_on_a_replicated_topic(pair, zookeeper, zk):
    create(zookeeper, "rep", 2, 2, "retention.ms=600000")
    poll(lambda: settled(zk, "rep", 2, 2), what="the topic led")
    done = hostbroker("topics", "alter", "--zookeeper", zookeeper.connect, "--topic", "rep",
                      "--partitions", 3, "--config", "segment.bytes=65536",
                      "--delete-config", "retention.ms")
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().count("\n") == 1
    poll(lambda: settled(zk, "rep", 3, 2), timeout=10, what="the new partition led")
    document = described(zookeeper, "rep")
    assert document["config"] == {"segment.bytes": "65536"}
    assert [p["partition"] for p in document["partitions"]] == [0, 1, 2]
    assert all(p["leader"] >= 0 and len(p["isr"]) == 2 for p in document["partitions"])

    shrink = hostbroker("topics", "alter", "--zookeeper", zookeeper.connect, "--topic", "rep",
                        "--partitions", 2)
    assert shrink.returncode == 1
    assert "partitions only grow" in one_line_error(shrink)
    bad = hostbroker("topics", "alter", "--zookeeper", zookeeper.connect, "--topic", "rep",
                     "--config", "retention.ms=soon")
    assert bad.returncode == 2 and "retention.ms" in one_line_error(bad)
    assert described(zookeeper, "rep")["config"] == {"segment.bytes": "65536"}


def test_topics_alter_zookeeper_on_a_plain_topic_alters_every_broker_holding_it(
        pair, zookeeper, zk):
    out, err = io.StringIO(), io.StringIO()
    assert create_cluster("plain", 2, zookeeper=zookeeper.connect, out=out, err=err) == 0, \
        err.getvalue()
    done = hostbroker("topics", "alter", "--zookeeper", zookeeper.connect, "--topic", "plain",
                      "--partitions", 3, "--config", "retention.ms=60000")
    assert done.returncode == 0, done.stderr.decode()
    assert "on brokers 1, 2" in done.stdout.decode()
    for broker_id, broker in pair.items():
        with broker.client() as client:
            (topic,) = client.metadata(["plain"]).topics
            assert [p.partition for p in topic.partitions] == [0, 1, 2]
        # the registrar keeps the broker's registration in step with its partitions
        poll(lambda: zk.get(paths.topic_broker_path("plain", broker_id))[0] == b"3",
             timeout=10, what=f"broker {broker_id} registering 3 partitions")
    missing = hostbroker("topics", "alter", "--zookeeper", zookeeper.connect, "--topic",
                         "nowhere", "--partitions", 2)
    assert missing.returncode == 1 and "nowhere" in one_line_error(missing)
