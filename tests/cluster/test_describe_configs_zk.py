"""``topics describe --zookeeper`` shows each topic's config overrides (issue 37), laid
out as standalone ``describe`` lays them out: two real brokers on a real ZooKeeper.

A replicated topic's overrides are read from ``/config/topics/[topic]`` (where
the cluster keeps them, and where ``topics alter --zookeeper`` writes them), a
0.7 topic's from the brokers holding it. ZooKeeper's nodes are hostile: a
config node that does not decode is one line on stderr naming it (the topic
is still shown, without overrides; ``"config": null``), a value that would
break the line is shown escaped, and every other topic is described.
"""

from __future__ import annotations

import json

from hostbroker.cluster import replica_nodes
from tests.cluster.test_alter_zk_cli import pair  # noqa: F401 - fixture
from tests.integration.cli import hostbroker
from tests.replication.support import create, poll, settled


def after(text: list[str], header: str) -> list[str]:
    """The lines of one topic's block: its header line up to the next topic's."""
    (start,) = [i for i, line in enumerate(text) if line.startswith(header)]
    end = next((i for i in range(start + 1, len(text)) if text[i].startswith("topic: ")),
               len(text))
    return text[start:end]


def test_describe_shows_every_topics_overrides_and_names_a_bad_config_node(
        pair, zookeeper, zk):
    create(zookeeper, "rep", 2, 2, "retention.ms=600000", "min.insync.replicas=2")
    create(zookeeper, "bare", 1, 1)
    create(zookeeper, "broken", 1, 1, "retention.ms=1000")
    done = hostbroker("topics", "create", "--zookeeper", zookeeper.connect, "--topic", "old",
                      "--partitions", 1, "--config", "retention.bytes=100000")
    assert done.returncode == 0, done.stderr.decode()
    for topic, parts, rf in (("rep", 2, 2), ("bare", 1, 1), ("broken", 1, 1)):
        poll(lambda: settled(zk, topic, parts, rf), what=f"{topic} led")

    done = hostbroker("topics", "describe", "--zookeeper", zookeeper.connect)
    assert done.returncode == 0, done.stderr.decode()
    text = done.stdout.decode().splitlines()
    assert after(text, "topic: rep ")[1] == "  config: min.insync.replicas=2 retention.ms=600000"
    assert after(text, "topic: broken ")[1] == "  config: retention.ms=1000"
    assert not any("config" in line for line in after(text, "topic: bare "))
    assert after(text, "topic: old ")[1] == "  config: retention.bytes=100000"
    assert done.stderr == b""

    # garbage in one config node, a line-breaking value in another
    zk.set(replica_nodes.topic_config_path("broken"), b'{"version":1,"config":[1,2')
    zk.set(replica_nodes.topic_config_path("rep"), replica_nodes.encode_topic_config(
        {"retention.ms": "600000\ntopic: forged  partitions: 9"}))
    done = hostbroker("topics", "describe", "--zookeeper", zookeeper.connect)
    assert done.returncode == 0, done.stderr.decode()
    (problem,) = done.stderr.decode().splitlines()
    assert problem.startswith("hostbroker topics describe: /config/topics/broken: ")
    assert problem.endswith("; overrides not shown")
    text = done.stdout.decode().splitlines()
    assert not any("forged" in line and not line.startswith("  config: ") for line in text)
    assert after(text, "topic: rep ")[1] == \
        "  config: retention.ms=600000\\ntopic: forged  partitions: 9"
    broken = after(text, "topic: broken ")
    assert not any("config" in line for line in broken) and len(broken) == 3  # + 2 rows
    assert after(text, "topic: old ")[1] == "  config: retention.bytes=100000"

    done = hostbroker("topics", "describe", "--zookeeper", zookeeper.connect, "--json")
    assert done.returncode == 0, done.stderr.decode()
    topics = {t["topic"]: t for t in json.loads(done.stdout)["topics"]}
    assert topics["broken"]["config"] is None
    assert topics["bare"]["config"] == {}
    assert topics["rep"]["config"] == {"retention.ms": "600000\ntopic: forged  partitions: 9"}
    assert topics["old"]["config"] == {"retention.bytes": "100000"}
    assert [c["broker"] for c in topics["old"]["broker_configs"]] == [1, 2]
