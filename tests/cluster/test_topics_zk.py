"""``hostbroker topics create|list|describe|delete --zookeeper``, run as a user would, on
three real brokers registered in a real ZooKeeper.

Every test keeps its own brokers: each asserts the whole cluster (every topic listed,
every live broker named by create and describe), and the chroot test stops its broker."""

from __future__ import annotations

import json

from hostbroker.cluster import paths
from hostbroker.log.message import encode_message_set
from tests.cluster.test_broker_registration import cluster_broker
from tests.cluster.test_discovery import wait_until
from tests.integration.broker import free_port
from tests.integration.cli import hostbroker, lines, one_line_error


def test_topics_over_the_whole_cluster(make_broker, tmp_path, zookeeper, zk):
    brokers = {i: cluster_broker(make_broker, tmp_path, zookeeper, zk, i) for i in (1, 2, 3)}
    result = hostbroker("topics", "create", "--zookeeper", zookeeper.connect, "--topic", "clicks",
                        "--partitions", "2", "--config", "retention.bytes=1000000")
    assert result.returncode == 0, result.stderr
    assert lines(result) == [
        "created topic clicks with 2 partitions on brokers 1, 2, 3 retention.bytes=1000000"]
    for i in (1, 2, 3):
        wait_until(lambda: zk.exists(paths.topic_broker_path("clicks", i)) is not None)
        assert zk.get(paths.topic_broker_path("clicks", i))[0] == b"2"
    with brokers[2].client() as c:
        c.produce("clicks", 1, encode_message_set([b"a", b"b", b"c"]))
        c.create_topic("local", 1)  # on broker 2 only
    with brokers[3].client() as c:
        c.produce("clicks", 0, encode_message_set([b"d"]))

    result = hostbroker("topics", "list", "--zookeeper", zookeeper.connect)
    assert (result.returncode, lines(result)) == (0, ["clicks", "local"])

    result = hostbroker("topics", "describe", "--zookeeper", zookeeper.connect, "--json", "clicks")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["brokers"] == [
        {"broker": i, "uris": [b.unix, b.tcp]} for i, b in brokers.items()]
    (topic,) = document["topics"]
    assert topic["topic"] == "clicks"
    ends = {(p["broker"], p["partition"]): (p["log_start_offset"], p["log_end_offset"], p["error"])
            for p in topic["partitions"]}
    # log end offsets are byte offsets: 1 byte messages take 11 bytes each
    assert ends == {(1, 0): (0, 0, "NONE"), (1, 1): (0, 0, "NONE"),
                    (2, 0): (0, 0, "NONE"), (2, 1): (0, 33, "NONE"),
                    (3, 0): (0, 11, "NONE"), (3, 1): (0, 0, "NONE")}

    result = hostbroker("topics", "describe", "--zookeeper", zookeeper.connect)
    assert result.returncode == 0, result.stderr
    out = lines(result)
    assert out[:3] == [f"broker {i}: {b.unix} {b.tcp}" for i, b in brokers.items()]
    assert out[3] == "topic: clicks  brokers: 3  partitions: 6"
    assert out[4] == "  config: retention.bytes=1000000"  # every broker holds the same
    rows = [line.split()[:5] for line in out[6:12]]
    assert rows == [["0", "1", "0", "0", "0"], ["1", "1", "0", "0", "0"],
                    ["0", "2", "0", "0", "0"], ["1", "2", "0", "33", "33"],
                    ["0", "3", "0", "11", "11"], ["1", "3", "0", "0", "0"]]
    assert out[12] == "topic: local  brokers: 1  partitions: 1"

    result = hostbroker("topics", "describe", "--zookeeper", zookeeper.connect, "nope")
    assert one_line_error(result) == "hostbroker topics describe: no topic nope"
    assert result.returncode == 1

    result = hostbroker("topics", "delete", "--zookeeper", zookeeper.connect, "--topic", "clicks")
    assert (result.returncode, lines(result)) == (0, ["deleted topic clicks on brokers 1, 2, 3"])
    wait_until(lambda: zk.exists(paths.topic_path("clicks")) is None)
    result = hostbroker("topics", "list", "--zookeeper", zookeeper.connect)
    assert lines(result) == ["local"]


def test_a_broker_that_refuses_is_named_and_the_others_still_get_the_topic(
        make_broker, tmp_path, zookeeper, zk):
    brokers = {i: cluster_broker(make_broker, tmp_path, zookeeper, zk, i) for i in (1, 2)}
    with brokers[2].client() as c:
        c.create_topic("t", 4)
    result = hostbroker("topics", "create", "--zookeeper", zookeeper.connect, "--topic", "t",
                        "--partitions", "3")
    assert result.returncode == 1
    assert lines(result) == ["created topic t with 3 partitions on broker 1"]
    assert one_line_error(result) == (
        "hostbroker topics create: broker 2: broker error: TOPIC_ALREADY_EXISTS: "
        "topic t already exists")
    wait_until(lambda: zk.exists(paths.topic_broker_path("t", 1)) is not None)
    assert zk.get(paths.topic_broker_path("t", 1))[0] == b"3"
    assert zk.get(paths.topic_broker_path("t", 2))[0] == b"4"


def test_cluster_commands_refuse_a_bad_or_empty_zookeeper(zookeeper):
    result = hostbroker("topics", "list", "--zookeeper", "localhost")
    assert result.returncode == 2
    assert one_line_error(result) == (
        "hostbroker topics list: --zookeeper: 'localhost' is not host:port")
    result = hostbroker("topics", "create", "--zookeeper", zookeeper.connect, "--topic", "t")
    assert result.returncode == 1
    assert one_line_error(result) == (
        f"hostbroker topics create: no live broker is registered in ZooKeeper at "
        f"{zookeeper.connect}")
    port = free_port()
    result = hostbroker("topics", "describe", "--zookeeper", f"127.0.0.1:{port}", timeout=60)
    assert result.returncode == 1
    assert one_line_error(result) == (
        f"hostbroker topics describe: --zookeeper: no ZooKeeper server of 127.0.0.1:{port} "
        "answered within 6000 ms")


def test_a_cluster_under_a_chroot(make_broker, tmp_path, zookeeper, zk):
    connect = zookeeper.connect + "/teams/a"
    root = tmp_path / "b7"
    root.mkdir()
    broker = make_broker(root=root, **{"zookeeper.connect": connect, "broker.id": 7,
                                       "num.processors": 1, "num.handlers": 1})
    wait_until(lambda: zk.exists("/teams/a" + paths.broker_path(7)) is not None)
    result = hostbroker("topics", "create", "--zookeeper", connect, "--topic", "t")
    assert (result.returncode, lines(result)) == (0, ["created topic t with 1 partition on broker 7"])
    wait_until(lambda: zk.exists("/teams/a" + paths.topic_broker_path("t", 7)) is not None)
    assert zk.exists(paths.broker_path(7)) is None  # nothing outside the chroot
    result = hostbroker("topics", "list", "--zookeeper", connect)
    assert lines(result) == ["t"]
    assert broker.stop() == 0
    assert zk.get_children("/teams/a" + paths.BROKER_IDS) == []
