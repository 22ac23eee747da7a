"""``topics alter --zookeeper`` of a replicated topic changes it whole or not at all
(hostbroker/commands/topics_alter_zk.py, cluster/topic_changes.commit), on a real
ZooKeeper:

- ``--partitions`` with ``--config``: when the grow cannot be written (another
  writer keeps moving the topic's node), the config is not written either, no
  change node is made, and running the command again does both;
- a config node too long to read is replaced whole by the config asked (said on
  stderr), not taken for an absent node (which could never be created);
- a topic node too long to read is said as such in one line, not taken for a
  topic that is gone or not replicated, and nothing is written.

The one fake is the other writer: a real second write of the topic's node, made
just before each of the command's writes of it, which no timing could make
happen every time.
"""

from __future__ import annotations

import io
import json

import pytest

from hostbroker.cluster import paths, zkread
from hostbroker.cluster.topic_changes import CONFIG_CHANGES
from hostbroker.exits import CommandError
from hostbroker.commands.topics_alter_zk import _alter_replicated, alter_cluster
from hostbroker.cluster import replica_nodes
from tests.cluster.zkfixtures import cluster, zkserver  # noqa: F401 - fixtures

TOPIC_NODE = replica_nodes.assignment_path("t")


def live(zk, *ids):
    for i in ids:
        info = paths.BrokerInfo(i, "127.0.0.1", 9000 + i, None)
        zk.create(paths.broker_path(i), paths.encode_broker(info), makepath=True)


def changes(zk) -> list[str]:
    return zk.get_children(CONFIG_CHANGES) if zk.exists(CONFIG_CHANGES) else []


def count(zk) -> int:
    return len(json.loads(zk.get(TOPIC_NODE)[0])["partitions"])


class Overtaken:
    """A real kazoo client, but another writer rewrites the topic's node (same value,
    a new version) just before each of the first ``times`` writes of it."""

    def __init__(self, client, times: int):
        self.client, self.times = client, times

    def __getattr__(self, name):
        return getattr(self.client, name)

    def _overtake(self, path: str) -> None:
        if path == TOPIC_NODE and self.times > 0:
            self.times -= 1
            self.client.set(path, self.client.get(path)[0])

    def set(self, path, value, version=-1):
        self._overtake(path)
        return self.client.set(path, value, version=version)

    def transaction(self):
        outer, txn = self, self.client.transaction()

        class Txn:
            def __getattr__(self, name):
                return getattr(txn, name)

            def set_data(self, path, value, version=-1):
                self.path = path
                return txn.set_data(path, value, version=version)

            def commit(self):
                outer._overtake(getattr(self, "path", ""))
                return txn.commit()
        return Txn()


def test_a_grow_that_cannot_be_written_writes_no_config_and_a_rerun_does_both(cluster):
    connect, zk = cluster
    live(zk, 1, 2)
    zk.create(TOPIC_NODE, replica_nodes.encode_assignment({0: [1, 2], 1: [2, 1]}), makepath=True)
    assignment = replica_nodes.decode_assignment(zk.get(TOPIC_NODE)[0], TOPIC_NODE)
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError, match="try again") as caught:
        _alter_replicated(Overtaken(zk, 100), connect, "t", assignment, 4,
                          {"retention.ms": "5000"}, [], out, err)
    assert len(str(caught.value).splitlines()) == 1
    assert count(zk) == 2
    assert zk.exists(replica_nodes.topic_config_path("t")) is None  # the config not written
    assert changes(zk) == []  # and no controller told of a change
    # the same command again, not overtaken: both
    out = io.StringIO()
    assert alter_cluster(connect, "t", 4, {"retention.ms": "5000"}, [], out, err) == 0
    assert out.getvalue().strip() == "altered topic t: partitions 2 -> 4, retention.ms=5000"
    assert count(zk) == 4
    assert json.loads(zk.get(replica_nodes.topic_config_path("t"))[0])["config"] == {
        "retention.ms": "5000"}
    assert len(changes(zk)) == 1
    # overtaken a few times only: read again and written (the race lost, not the change)
    assert _alter_replicated(Overtaken(zk, 2), connect, "t",
                             replica_nodes.decode_assignment(zk.get(TOPIC_NODE)[0], TOPIC_NODE), 5,
                             {"flush.ms": "10"}, [], io.StringIO(), err) == 0
    assert count(zk) == 5 and len(changes(zk)) == 2
    assert json.loads(zk.get(replica_nodes.topic_config_path("t"))[0])["config"] == {
        "retention.ms": "5000", "flush.ms": "10"}


def test_a_config_node_too_long_to_read_is_replaced_whole(cluster):
    connect, zk = cluster
    live(zk, 1, 2)
    zk.create(TOPIC_NODE, replica_nodes.encode_assignment({0: [1, 2]}), makepath=True)
    too_long = b'{"version":1,"config":{"flush.ms":"' + b"9" * zkread.DEFAULT.node_bytes + \
        b'"}}'
    zk.create(replica_nodes.topic_config_path("t"), too_long, makepath=True)
    out, err = io.StringIO(), io.StringIO()
    assert alter_cluster(connect, "t", None, {"retention.ms": "60000"}, [], out, err) == 0
    assert json.loads(zk.get(replica_nodes.topic_config_path("t"))[0])["config"] == {
        "retention.ms": "60000"}
    assert len(changes(zk)) == 1
    (line,) = err.getvalue().splitlines()
    assert "/config/topics/t" in line and "replaced whole" in line and len(line) < 300


def test_a_topic_node_too_long_to_read_is_said_and_nothing_is_written(cluster):
    connect, zk = cluster
    live(zk, 1, 2)
    zk.create(TOPIC_NODE, b'{"version":1,"partitions":{"0":[1]}}' +
              b" " * zkread.DEFAULT.node_bytes, makepath=True)
    for partitions, config in ((3, {}), (None, {"retention.ms": "1"}), (3, {"flush.ms": "1"})):
        with pytest.raises(CommandError) as caught:
            alter_cluster(connect, "t", partitions, config, [], io.StringIO(), io.StringIO())
        said = str(caught.value)
        assert "zookeeper.max.node.bytes" in said and TOPIC_NODE in said
        assert "gone" not in said and "no topic" not in said
        assert len(said.splitlines()) == 1 and len(said) < 300
    assert zk.exists(replica_nodes.topic_config_path("t")) is None and changes(zk) == []
