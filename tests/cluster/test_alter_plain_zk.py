"""``topics alter`` of a 0.7-style topic (per-broker partitions, no controller) on a
cluster (issue 37): two real brokers on a real ZooKeeper.

A 0.7 topic's partitions and configs are each broker's, as its ``create`` and
``delete`` are: ``--bootstrap`` changes the broker it reaches and no other
(its registration in ZooKeeper counts the new partitions, so producers through
ZooKeeper find them), ``--zookeeper`` changes every live broker holding it (a
broker altered before is left as it is: running it again brings the others
in step). Configs act at once on each broker changed (``max.message.bytes``
refuses a produce over it); ``topics describe --zookeeper`` shows each
broker's overrides when they differ, one line when they agree; nothing
produced before is lost. A replicated topic is the cluster's: ``--bootstrap`` to
one of its brokers refuses it in one line, naming ``--zookeeper``.
"""

from __future__ import annotations

import json

from hostbroker.client.simple import SimpleClient
from hostbroker.cluster import paths
from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from tests.cluster.test_alter_zk_cli import pair  # noqa: F401 - fixture
from tests.integration.cli import hostbroker, one_line_error
from tests.integration.wire_helpers import log_end, produce_request
from tests.replication.support import assignment, create, poll, settled

TOPIC = "plain"


def produced(broker, partition: int, size: int) -> ErrorCode:
    with SimpleClient(broker.unix) as client:
        (part,) = client.request(produce_request(
            TOPIC, partition, encode_message_set([b"v" * size]), acks=1)).partitions
        return part.error_code


def partitions_of(broker) -> list[int]:
    with SimpleClient(broker.unix) as client:
        (topic,) = client.metadata([TOPIC]).topics
        return sorted(p.partition for p in topic.partitions)


def ends(broker) -> dict[int, int]:
    with SimpleClient(broker.unix) as client:
        return {p: log_end(client, TOPIC, p) for p in partitions_of(broker)}


def registered(zk, broker_id: int) -> bytes:
    return zk.get(paths.topic_broker_path(TOPIC, broker_id))[0]


def ok(*args) -> str:
    done = hostbroker(*args)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


def described(zookeeper) -> tuple[list[str], dict]:
    text = ok("topics", "describe", "--zookeeper", zookeeper.connect, TOPIC).splitlines()
    document = json.loads(ok("topics", "describe", "--zookeeper", zookeeper.connect, "--json",
                             TOPIC))
    (topic,) = document["topics"]
    return text, topic


def test_bootstrap_alters_one_broker_and_zookeeper_every_broker_holding_the_topic(
        pair, zookeeper, zk):
    ok("topics", "create", "--zookeeper", zookeeper.connect, "--topic", TOPIC,
       "--partitions", 2)
    for broker in pair.values():
        for p in (0, 1):
            assert produced(broker, p, 1000) == ErrorCode.NONE
    before = {b: ends(broker) for b, broker in pair.items()}
    assert all(e[0] > 0 and e == {0: e[0], 1: e[0]} for e in before.values())  # (bytes)

    # --bootstrap: broker 1 only
    said = ok("topics", "alter", "--bootstrap", pair[1].unix, "--topic", TOPIC,
              "--partitions", 3, "--config", "max.message.bytes=600")
    assert said.strip() == f"altered topic {TOPIC}: 3 partitions, max.message.bytes=600"
    assert partitions_of(pair[1]) == [0, 1, 2] and partitions_of(pair[2]) == [0, 1]
    assert all(produced(pair[1], p, 1000) == ErrorCode.MESSAGE_TOO_LARGE for p in (0, 1, 2))
    assert produced(pair[1], 2, 100) == ErrorCode.NONE
    assert produced(pair[2], 0, 1000) == ErrorCode.NONE  # broker 2 keeps its config
    poll(lambda: registered(zk, 1) == b"3", timeout=10, what="broker 1 registering 3")
    assert registered(zk, 2) == b"2"
    text, document = described(zookeeper)
    assert "  config on broker 1: max.message.bytes=600" in text
    assert "  config on broker 2: none" in text
    assert not any(line.startswith("  config: ") for line in text)
    assert document["config"] is None
    assert document["broker_configs"] == [{"broker": 1, "config": {"max.message.bytes": "600"}},
                                          {"broker": 2, "config": {}}]

    # --zookeeper: every broker holding it, broker 1 already there (no change for it)
    said = ok("topics", "alter", "--zookeeper", zookeeper.connect, "--topic", TOPIC,
              "--partitions", 3, "--config", "max.message.bytes=600")
    assert said.strip() == (f"altered topic {TOPIC} on brokers 1, 2: 3 partitions on each, "
                            "max.message.bytes=600")
    for b, broker in pair.items():
        assert partitions_of(broker) == [0, 1, 2]
        assert all(produced(broker, p, 1000) == ErrorCode.MESSAGE_TOO_LARGE
                   for p in (0, 1, 2))
        poll(lambda: registered(zk, b) == b"3", timeout=10, what=f"broker {b} registering 3")
    text, document = described(zookeeper)
    assert text.count("  config: max.message.bytes=600") == 1
    assert not any(line.startswith("  config on broker") for line in text)
    assert document["config"] == {"max.message.bytes": "600"}
    assert "topic: plain  brokers: 2  partitions: 6" in text

    # a key deleted goes back to the broker's default on every broker
    ok("topics", "alter", "--zookeeper", zookeeper.connect, "--topic", TOPIC,
       "--delete-config", "max.message.bytes")
    for broker in pair.values():
        assert all(produced(broker, p, 1000) == ErrorCode.NONE for p in (0, 1, 2))
    text, document = described(zookeeper)
    assert document["config"] == {} and not any("config" in line for line in text)
    # nothing produced before is lost: each old partition holds its first message and
    # the one just produced, of the same size (offsets are byte positions), and broker
    # 2's partition 0 the one it took under its own config
    for b, broker in pair.items():
        now = ends(broker)
        assert {p: now[p] for p in (0, 1)} == {
            p: (3 if (b, p) == (2, 0) else 2) * before[b][p] for p in (0, 1)}

    # shrinking either way is refused (by each broker, one line each), status 1, and
    # changes nothing
    for where in (("--bootstrap", pair[2].unix), ("--zookeeper", zookeeper.connect)):
        done = hostbroker("topics", "alter", *where, "--topic", TOPIC, "--partitions", 2)
        assert done.returncode == 1, done.stderr.decode()
        assert "partitions only grow" in done.stderr.decode()
    assert all(partitions_of(broker) == [0, 1, 2] for broker in pair.values())


def test_bootstrap_refuses_a_replicated_topic_in_one_line(pair, zookeeper, zk):
    create(zookeeper, "rep", 2, 2)
    poll(lambda: settled(zk, "rep", 2, 2), what="the topic led")
    for broker in pair.values():
        done = hostbroker("topics", "alter", "--bootstrap", broker.unix, "--topic", "rep",
                          "--partitions", 3, "--config", "retention.ms=60000")
        assert done.returncode == 1
        assert "change it with hostbroker topics alter --zookeeper" in one_line_error(done)
    assert sorted(assignment(zk, "rep")) == [0, 1]  # nothing changed
    # a broker that holds no replica of the topic names --zookeeper too, not "no topic"
    create(zookeeper, "rep1", 1, 1)
    poll(lambda: settled(zk, "rep1", 1, 1), what="the topic led")
    (holder,) = assignment(zk, "rep1")[0]
    (other,) = [b for b in pair if b != holder]

    def refused():
        done = hostbroker("topics", "alter", "--bootstrap", pair[other].unix, "--topic", "rep1",
                          "--partitions", 2)
        assert done.returncode == 1
        return one_line_error(done)
    poll(lambda: "--zookeeper" in refused(), what="the registrar's names read", every=0.5)
    line = refused()
    assert "holds no replica of topic rep1" in line and "no topic rep1" not in line
    assert sorted(assignment(zk, "rep1")) == [0]
    assert zk.exists("/config/topics/rep") is None or \
        b"60000" not in zk.get("/config/topics/rep")[0]
