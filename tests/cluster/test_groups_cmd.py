"""``hostbroker groups list|describe|reset-offsets``, run as a user would: against a real
ZooKeeper with brokers that register themselves and real consumers of a group, and
against a standalone broker's stored offsets.

Shared broker: the two tests of one broker 1 (an unknown group or topic, a registered
broker that cannot be asked) share it in a chroot of their own (``shared``), the group
nodes written there deleted after each; the whole-group test keeps its two brokers (it
lists every group and describes every broker holding ``t``), the standalone test its
standalone broker."""

from __future__ import annotations

import io
import json
import time

import pytest

from hostbroker.client import ConsumerConnector
from hostbroker.cluster import paths
from hostbroker.commands.groups import list_cluster
from hostbroker.commands.groups_standalone import list_standalone
from hostbroker.log.message import encode_message_set
from tests.cluster.test_broker_registration import cluster_broker
from tests.cluster.test_discovery import wait_until
from tests.integration.broker import free_port
from tests.integration.cli import hostbroker, lines, one_line_error
from tests.integration.test_group_coordinator import NoGroupsProxy

# messages per (broker, partition); 2 partitions of "t" on each of brokers 1 and 2
COUNTS = {(1, 0): 5, (1, 1): 3, (2, 0): 4, (2, 1): 0}
CONSUMER = {"consumer.timeout.ms": 2000, "fetch.wait.max.ms": 50,
            "zookeeper.session.timeout.ms": 2000, "auto.commit.enable": False}


def take(stream, count):
    return [next(stream) for _ in range(count)]


def log_ends(brokers, topic):
    """(broker_id, partition) -> log end offset, from each broker's METADATA."""
    out = {}
    for broker_id, broker in brokers.items():
        with broker.client() as client:
            (answer,) = client.metadata([topic]).topics
            out.update({(broker_id, p.partition): p.log_end_offset for p in answer.partitions})
    return out


def zk_offsets(zk, group, topic):
    path = paths.offsets_path(group, topic)
    return {paths.parse_partition_name(n): int(zk.get(f"{path}/{n}")[0])
            for n in zk.get_children(path)}


@pytest.fixture(scope="module")
def shared_cluster(zookeeper_of_module, tmp_path_factory):
    """Broker 1, registered in a chroot of its own, for the tests that need one."""
    from tests.cluster.conftest import broker_in_chroot

    with broker_in_chroot(zookeeper_of_module, tmp_path_factory.mktemp("groups"),
                          "/shared-groups", **{"num.processors": 1,
                                               "num.handlers": 1}) as shared:
        yield shared


@pytest.fixture
def shared(shared_cluster):
    """(the shared broker 1, its ZooKeeper, a kazoo client on it); the groups a test
    leaves there are deleted after it, its ephemeral nodes go with its client."""
    from tests.cluster.zkfixtures import kazoo

    broker, zookeeper = shared_cluster
    with kazoo(zookeeper.connect) as zk:
        try:
            yield broker, zookeeper, zk
        finally:
            if zk.exists(paths.CONSUMERS):
                zk.delete(paths.CONSUMERS, recursive=True)


def test_describe_list_and_reset_a_group_in_zookeeper(make_broker, tmp_path, zookeeper, zk):
    brokers = {i: cluster_broker(make_broker, tmp_path, zookeeper, zk, i) for i in (1, 2)}
    for broker_id, broker in brokers.items():
        with broker.client() as client:
            client.create_topic("t", 2)
            for p in (0, 1):
                values = [f"m-{broker_id}-{p}-{i}".encode() for i in range(COUNTS[broker_id, p])]
                if values:
                    client.produce("t", p, encode_message_set(values))
        wait_until(lambda: zk.exists(paths.topic_broker_path("t", broker_id)) is not None)
    ends = log_ends(brokers, "t")
    config = {**CONSUMER, "zookeeper.connect": zookeeper.connect, "group.id": "g",
              "auto.offset.reset": "earliest"}

    member = ConsumerConnector(config=config)
    (stream,) = member.create_message_streams({"t": 1})["t"]
    take(stream, 7)
    member.commit_offsets()
    consumer_id = member.cluster.member.consumer_id
    committed = zk_offsets(zk, "g", "t")
    assert sum(1 for (b, p), o in committed.items() if o > 0) >= 1
    assert committed == {(k.broker_id, k.partition): o for k, o in member.positions().items()}
    lag = {key: ends[key] - committed[key] for key in committed}

    result = hostbroker("groups", "list", "--zookeeper", zookeeper.connect)
    assert (result.returncode, lines(result)) == (0, ["g"])
    listed = io.StringIO()
    assert list_cluster(as_json=True, zookeeper=zookeeper.connect, out=listed) == 0
    assert json.loads(listed.getvalue()) == {"groups": ["g"]}

    result = hostbroker("groups", "describe", "--zookeeper", zookeeper.connect, "--group", "g")
    assert result.returncode == 0, result.stderr
    out = lines(result)
    assert out[:3] == ["group: g  members: 1", f"member {consumer_id}  t=1",
                       "topic  partition  owner" + out[2][len("topic  partition  owner"):]]
    assert out[2].split() == ["topic", "partition", "owner", "committed", "log", "end", "lag"]
    rows = [line.split() for line in out[3:]]
    expected = []
    for (b, p) in sorted(ends):
        done = committed.get((b, p))
        expected.append(["t", f"{b}-{p}", f"{consumer_id}-0",
                         "-" if done is None else str(done), str(ends[b, p]),
                         "-" if done is None else str(lag[b, p])])
    assert rows == expected

    result = hostbroker("groups", "describe", "--zookeeper", zookeeper.connect, "--group", "g",
                        "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["members"] == [{"id": consumer_id, "subscription": {"t": 1}}]
    assert [(r["broker"], r["partition"], r["owner"], r["committed"], r["log_end"], r["lag"])
            for r in document["partitions"]] == [
        (b, p, f"{consumer_id}-0", committed.get((b, p)), ends[b, p], lag.get((b, p)))
        for b, p in sorted(ends)]

    result = hostbroker("groups", "reset-offsets", "--zookeeper", zookeeper.connect,
                        "--group", "g", "--topic", "t", "--to", "earliest")
    assert one_line_error(result) == (
        f"hostbroker groups reset-offsets: group g has 1 live member ({consumer_id}); "
        "stop its consumers first")
    assert result.returncode == 1
    assert zk_offsets(zk, "g", "t") == committed

    member.shutdown()
    assert zk.get_children(paths.group_ids_path("g")) == []
    result = hostbroker("groups", "reset-offsets", "--zookeeper", zookeeper.connect,
                        "--group", "g", "--topic", "t", "--to", "earliest")
    assert result.returncode == 0, result.stderr
    assert lines(result) == ["group g: reset 4 partitions of t"] + [
        f"  t {b}-{p}: {committed.get((b, p), '-')} -> 0" for b, p in sorted(ends)]
    assert zk_offsets(zk, "g", "t") == {key: 0 for key in ends}

    # a new member starts where the reset put the group, not at its auto.offset.reset
    with ConsumerConnector(config={**config, "auto.offset.reset": "latest"}) as again:
        (stream,) = again.create_message_streams({"t": 1})["t"]
        values = sorted(m.value.decode() for m in take(stream, sum(COUNTS.values())))
    assert values == sorted(f"m-{b}-{p}-{i}" for (b, p), n in COUNTS.items() for i in range(n))

    result = hostbroker("groups", "reset-offsets", "--zookeeper", zookeeper.connect,
                        "--group", "g", "--topic", "t", "--to", "latest")
    assert result.returncode == 0, result.stderr
    assert zk_offsets(zk, "g", "t") == ends
    result = hostbroker("groups", "describe", "--zookeeper", zookeeper.connect, "--group", "g")
    assert lines(result)[0] == "group: g  members: 0"
    assert [line.split()[-1] for line in lines(result)[2:]] == ["0"] * 4


def test_unknown_group_and_topic_in_zookeeper(shared):
    _, zookeeper, _ = shared
    result = hostbroker("groups", "describe", "--zookeeper", zookeeper.connect, "--group", "nope")
    assert one_line_error(result) == "hostbroker groups describe: no group nope in ZooKeeper"
    assert result.returncode == 1
    result = hostbroker("groups", "reset-offsets", "--zookeeper", zookeeper.connect,
                        "--group", "g", "--topic", "missing", "--to", "latest")
    assert one_line_error(result) == (
        "hostbroker groups reset-offsets: no live broker holds topic missing")
    result = hostbroker("groups", "list", "--zookeeper", zookeeper.connect)
    assert (result.returncode, lines(result)) == (0, [])


def test_a_registered_broker_that_cannot_be_asked_is_named(shared):
    broker, zookeeper, zk = shared
    with broker.client() as client:
        client.create_topic("t", 1)
        client.produce("t", 0, encode_message_set([b"x", b"y"]))  # 11 bytes each
    wait_until(lambda: zk.exists(paths.topic_broker_path("t", 1)) is not None)
    port = free_port()  # broker 9 is registered, and nothing listens there
    zk.create(paths.broker_path(9), paths.encode_broker(paths.BrokerInfo(9, "127.0.0.1", port,
                                                                         None)), ephemeral=True)
    zk.create(paths.topic_broker_path("t", 9), paths.encode_count(1), ephemeral=True)
    zk.create(paths.offset_path("g", "t", 1, 0), b"11", makepath=True)
    refused = f"broker 9: cannot reach the broker at tcp://127.0.0.1:{port}: Connection refused"

    result = hostbroker("groups", "describe", "--zookeeper", zookeeper.connect, "--group", "g")
    assert one_line_error(result) == f"hostbroker groups describe: {refused}"
    assert result.returncode == 1
    assert [line.split() for line in lines(result)[2:]] == [
        ["t", "1-0", "-", "11", "22", "11"], ["t", "9-0", "-", "-", "-", "-"]]

    result = hostbroker("groups", "reset-offsets", "--zookeeper", zookeeper.connect,
                        "--group", "g", "--topic", "t", "--to", "latest")
    assert one_line_error(result) == f"hostbroker groups reset-offsets: {refused}"
    assert result.returncode == 1
    assert lines(result) == ["group g: reset 1 partition of t", "  t 1-0: 11 -> 22"]
    assert zk_offsets(zk, "g", "t") == {(1, 0): 22}


def test_unreachable_zookeeper_or_broker_is_one_line(tmp_path):
    port = free_port()
    result = hostbroker("groups", "list", "--zookeeper", f"127.0.0.1:{port}")
    assert result.returncode == 1
    assert one_line_error(result) == (
        f"hostbroker groups list: --zookeeper: no ZooKeeper server of 127.0.0.1:{port} "
        "answered within 6000 ms")
    sock = tmp_path / "none.sock"
    result = hostbroker("groups", "describe", "--bootstrap", f"unix://{sock}", "--group", "g",
                        "--topic", "t")
    assert result.returncode == 1
    assert one_line_error(result) == (
        f"hostbroker groups describe: cannot reach the broker at unix://{sock}: "
        "No such file or directory")
    # without --topic the group's subscription is asked of the broker
    result = hostbroker("groups", "describe", "--bootstrap", f"unix://{sock}", "--group", "g")
    assert result.returncode == 1
    assert one_line_error(result) == (
        f"hostbroker groups describe: cannot reach the broker at unix://{sock}: "
        "No such file or directory")


def test_standalone_describe_and_reset_on_the_brokers_stored_offsets(make_broker, tmp_path):
    broker = make_broker(**{"num.processors": 1, "num.handlers": 1})
    with broker.client() as client:
        client.create_topic("s", 2)
        client.produce("s", 0, encode_message_set([b"a%d" % i for i in range(6)]))
        client.produce("s", 1, encode_message_set([b"b%d" % i for i in range(2)]))
        (answer,) = client.metadata(["s"]).topics
        ends = {p.partition: p.log_end_offset for p in answer.partitions}
    config = {**CONSUMER, "group.id": "sg", "auto.offset.reset": "earliest"}
    with ConsumerConnector(broker.unix, config=config) as connector:
        (stream,) = connector.create_message_streams({"s": 1})["s"]
        take(stream, 5)
        connector.commit_offsets()
        positions = connector.positions()
    with broker.client() as client:
        stored = {r.partition: r.offset for r in client.offset_fetch("sg", [("s", 0), ("s", 1)])}
    assert stored == {p: o for (_, p), o in positions.items()} | {
        p: -1 for p in (0, 1) if ("s", p) not in positions}

    result = hostbroker("groups", "describe", "--bootstrap", broker.unix, "--group", "sg",
                        "--topic", "s")
    assert result.returncode == 0, result.stderr
    out = lines(result)
    assert out[0] == f"group: sg  (offsets kept by the broker at {broker.unix})"
    assert out[1].split() == ["topic", "partition", "committed", "log", "end", "lag"]
    assert [line.split() for line in out[2:]] == [
        ["s", str(p), "-" if stored[p] < 0 else str(stored[p]), str(ends[p]),
         "-" if stored[p] < 0 else str(ends[p] - stored[p])] for p in (0, 1)]

    result = hostbroker("groups", "reset-offsets", "--bootstrap", broker.unix, "--group", "sg",
                        "--topic", "s", "--to", "2000-01-01")
    assert result.returncode == 0, result.stderr
    assert lines(result) == ["group sg: reset 2 partitions of s"] + [
        f"  s {p}: {'-' if stored[p] < 0 else stored[p]} -> 0" for p in (0, 1)]
    with ConsumerConnector(broker.unix, config={**config, "auto.offset.reset": "latest"}) as c:
        (stream,) = c.create_message_streams({"s": 1})["s"]
        assert len(take(stream, 8)) == 8

    later = str(int(time.time() * 1000) + 3_600_000)
    result = hostbroker("groups", "reset-offsets", "--bootstrap", broker.unix, "--group", "sg",
                        "--topic", "s", "--to", later)
    assert result.returncode == 0, result.stderr
    result = hostbroker("groups", "describe", "--bootstrap", broker.unix, "--group", "sg",
                        "--topic", "s", "--json")
    assert [(r["partition"], r["committed"], r["lag"])
            for r in json.loads(result.stdout)["partitions"]] == [(p, ends[p], 0) for p in (0, 1)]

    # list: the groups with members (LIST_GROUPS) and, marked, those with only
    # committed offsets (LIST_OFFSET_GROUPS): sg has only committed offsets now
    result = hostbroker("groups", "list", "--bootstrap", broker.unix)
    assert (result.returncode, lines(result), result.stderr) == (0, ["sg  (no members)"], b"")
    with ConsumerConnector(broker.unix, config={**config, "group.id": "sg"}) as one, \
            ConsumerConnector(broker.unix, config={**config, "group.id": "b-other"}) as two:
        for connector in (one, two):
            connector.create_message_streams({"s": 1})
            assert connector.cluster.member.generation == 1
        result = hostbroker("groups", "list", "--bootstrap", broker.unix)
        assert (result.returncode, lines(result)) == (0, ["b-other", "sg"])
        out = io.StringIO()
        assert list_standalone(as_json=True, bootstrap=broker.tcp, out=out) == 0
        assert json.loads(out.getvalue()) == {"groups": ["b-other", "sg"],
                                              "without_members": []}
    result = hostbroker("groups", "list", "--bootstrap", broker.unix)  # both left
    assert result.returncode == 0 and "sg  (no members)" in lines(result)
    assert all(line.endswith("  (no members)") for line in lines(result))
    proxy = NoGroupsProxy(broker)  # a broker that does not serve groups
    try:
        result = hostbroker("groups", "list", "--bootstrap", proxy.uri)
    finally:
        proxy.close()
    assert (result.returncode, one_line_error(result)) == (
        1, f"hostbroker groups list: the broker at {proxy.uri} does not serve consumer groups "
           "(no LIST_GROUPS); use describe --group G --topic T")
    result = hostbroker("groups", "describe", "--bootstrap", broker.unix, "--group", "sg",
                        "--topic", "nope")
    assert (result.returncode, one_line_error(result)) == (
        1, "hostbroker groups describe: no topic nope")
