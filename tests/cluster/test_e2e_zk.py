"""Cluster mode as one system: three self-registering ``hostbroker serve`` brokers, a topic
of 12 partitions (4 on each), a producer through ZooKeeper and consumer processes of one
group, through joins and leaves, a broker killed, ZooKeeper stopped and sessions expired.

Every test checks, after each change, that the group settles within SETTLE_S (every
partition owned once, by the stream the range assignment names), that each live
consumer gets new messages, and at the end that every acknowledged message was consumed
and that duplicates are only messages handed out and not committed
(tests/cluster/e2e_support.py).
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from hostbroker.cluster import paths
from hostbroker.log.message import encode_message_set
from tests.cluster.e2e_support import (
    BROKER_SESSION_MS, CONSUMER_SCRIPT, CONSUMER_SESSION_MS, GROUP, PER_BROKER, SETTLE_S,
    TOPIC, Cluster, ConsumerProcess, Feeder, check_consuming, check_duplicates, owners, poll,
    settled)
from tests.cluster.test_broker_registration import kill_hard
from tests.integration.broker import free_port
from tests.integration.cli import hostbroker


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "consume.py"
    path.write_text(CONSUMER_SCRIPT)
    return path


@pytest.fixture
def cluster(make_broker, tmp_path, zookeeper, zk):
    return Cluster(make_broker, tmp_path, zookeeper, zk)


@pytest.fixture
def feeder(cluster, zookeeper):
    """The producer through ZooKeeper, sending from the start; stopped after the test."""
    started = Feeder(zookeeper.connect)
    yield started
    started.stop()


@pytest.fixture
def consumers():
    """Every consumer process a test starts; killed after it if still running."""
    started: list[ConsumerProcess] = []
    yield started
    for consumer in started:
        consumer.kill()


def settle(zk, live, feeder, broker_ids=(1, 2, 3), timeout=SETTLE_S):
    """The group settles on ``live`` and the partitions of ``broker_ids``; each consumes."""
    poll(lambda: settled(zk, live, broker_ids), timeout,
         f"{len(live)} consumers to settle on brokers {broker_ids}")
    check_consuming(zk, live, feeder, broker_ids)


def start_group(zookeeper, zk, script, consumers, feeder, count):
    """``count`` consumer processes started at once, settled; returned."""
    for _ in range(count):
        consumers.append(ConsumerProcess(script, zookeeper.connect))
    live = list(consumers)
    settle(zk, live, feeder)
    return live


def drain_and_check(zk, feeder, everyone, live, also=()):
    """Stop the producer; the live consumers consume everything acknowledged (and the
    values ``also``); every duplicate was handed out and not committed. Returns the
    number of duplicates."""
    feeder.stop()
    acked = set(feeder.acked) | set(also)
    poll(lambda: acked <= {v for c in everyone for v in c.values()}, 30,
         "every acknowledged message to be consumed")
    for consumer in live:
        consumer.stop()
    assert owners(zk) == {}
    return check_duplicates(everyone)


def test_four_consumers_join_then_leave_one_at_a_time_and_groups_describe_shows_the_lag(
        cluster, zookeeper, zk, script, consumers, feeder):
    live: list[ConsumerProcess] = []
    for _ in range(4):
        live.append(ConsumerProcess(script, zookeeper.connect))
        consumers.append(live[-1])
        settle(zk, live, feeder)
    while len(live) > 1:
        live.pop(0).stop()
        settle(zk, live, feeder)
    # enough acknowledged that every partition holds some, so that each has a committed
    # offset below (each settle saw new messages consumed; a quick run has fewer by now)
    poll(lambda: len(feeder.acked) > 100, 30, "100 messages acknowledged")
    drain_and_check(zk, feeder, consumers, live)
    assert feeder.failed == []

    # The group's lag as the test computes it, then as groups describe shows it.
    for broker_id, broker in cluster.brokers.items():
        with broker.client() as client:
            for p in range(PER_BROKER):
                values = [f"late-{broker_id}-{p}-{i}".encode() for i in range(p)]
                if values:
                    client.produce(TOPIC, p, encode_message_set(values))
    ends = cluster.log_ends()
    path = paths.offsets_path(GROUP, TOPIC)
    committed = {paths.parse_partition_name(n): int(zk.get(f"{path}/{n}")[0])
                 for n in zk.get_children(path)}
    assert sorted(committed) == sorted(ends)
    result = hostbroker("groups", "describe", "--zookeeper", zookeeper.connect,
                        "--group", GROUP, "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["members"] == []
    assert [(r["broker"], r["partition"], r["owner"], r["committed"], r["log_end"], r["lag"])
            for r in document["partitions"]] == [
        (b, p, None, committed[b, p], ends[b, p], ends[b, p] - committed[b, p])
        for b, p in sorted(ends)]
    # everything before the late messages was consumed and committed
    assert all((ends[b, p] > committed[b, p]) == (p > 0) for b, p in ends)


def test_a_killed_broker_leaves_after_its_session_and_is_used_again_when_restarted(
        cluster, zookeeper, zk, script, consumers, feeder):
    live = start_group(zookeeper, zk, script, consumers, feeder, 3)

    victim = cluster.brokers[2]
    killed = kill_hard(victim)
    poll(lambda: zk.exists(paths.broker_path(2)) is None, what="broker 2's node to go")
    gone = time.monotonic() - killed
    # its last ping may have been up to a third of the timeout before the kill
    assert BROKER_SESSION_MS / 1000 * 0.6 < gone < BROKER_SESSION_MS / 1000 + 6
    victim.kill_tree()
    settle(zk, live, feeder, (1, 3))
    mark = feeder.mark()
    poll(lambda: len(feeder.acked) > 0 and int(feeder.acked[-1]) >= mark + 40,
         what="the producer to go on")

    victim.start()  # the same broker.id, listeners and log dir
    poll(lambda: cluster.registered() == [1, 2, 3], what="broker 2 to register again")
    settle(zk, live, feeder)
    mark = feeder.mark()
    poll(lambda: any(int(v) >= mark for v in cluster.values_on(2)),
         what="the producer to write to broker 2 again")
    poll(lambda: any(name.startswith("2-") for c in live for name in c.consumed_since(mark)),
         what="broker 2's partitions to be consumed again")
    drain_and_check(zk, feeder, consumers, live)
    # Sends to broker 2 while it was down were retried elsewhere within the retry settings.
    assert feeder.failed == []


def test_zookeeper_stopped_and_started_again_loses_no_acknowledged_message(
        cluster, zookeeper, zk, script, consumers, feeder):
    from hostbroker.client import Producer, SimpleConsumer

    live = start_group(zookeeper, zk, script, consumers, feeder, 2)
    local = cluster.brokers[1]

    zookeeper.stop()
    down = time.monotonic()
    mark = feeder.mark()
    # Local clients of a broker are served throughout, without ZooKeeper.
    with Producer(local.unix) as producer, SimpleConsumer(local.unix) as consumer:
        local_values = []
        while time.monotonic() - down < 4.0:
            value = f"local-{len(local_values)}".encode()
            placed = producer.send(TOPIC, value, partition=3)
            assert next(iter(consumer.fetch(TOPIC, 3, placed.offset)))[2] == value
            local_values.append(value.decode())
            time.sleep(0.05)
    assert len(local_values) >= 20
    # ... and so are the producer and the consumers through ZooKeeper, on what they knew.
    poll(lambda: len(feeder.acked) > 0 and int(feeder.acked[-1]) > mark + 20,
         what="the producer to go on without ZooKeeper")
    for consumer in live:
        poll(lambda: consumer.consumed_since(mark), what="the consumers to go on")
    assert time.monotonic() - down < 12  # well within the outage
    zookeeper.start()

    again = {b: f"registered broker {b} in ZooKeeper again (after: " for b in cluster.brokers}
    poll(lambda: all(again[b] in broker.log() for b, broker in cluster.brokers.items()),
         what="every broker to register again")
    poll(lambda: cluster.registered() == [1, 2, 3], what="the topic registered again")
    settle(zk, live, feeder)
    drain_and_check(zk, feeder, consumers, live, also=local_values)
    assert feeder.failed == []
    assert all(broker.log().count(again[b]) == 1 for b, broker in cluster.brokers.items())


def test_a_broker_and_a_consumer_frozen_past_their_sessions_recover_by_themselves(
        cluster, zookeeper, zk, script, consumers, feeder):
    live = start_group(zookeeper, zk, script, consumers, feeder, 3)

    # The broker's registrar, frozen past its session: the broker leaves the cluster
    # (it keeps serving its local clients), then comes back by itself.
    broker = cluster.brokers[3]
    registrar = broker.workers()["hb-registrar"]
    owner = zk.exists(paths.broker_path(3)).ephemeralOwner
    os.kill(registrar, signal.SIGSTOP)
    try:
        poll(lambda: zk.exists(paths.broker_path(3)) is None, what="broker 3's session to end")
        settle(zk, live, feeder, (1, 2))
        with broker.client() as client:
            client.produce(TOPIC, 0, encode_message_set([b"while-unregistered"]))
    finally:
        os.kill(registrar, signal.SIGCONT)
    poll(lambda: cluster.registered() == [1, 2, 3], what="broker 3 to register again")
    assert zk.exists(paths.broker_path(3)).ephemeralOwner != owner
    assert broker.workers()["hb-registrar"] == registrar
    poll(lambda: "registered broker 3 in ZooKeeper again (after: ZooKeeper session expired)"
         in broker.log(), what="the registrar to say it registered again")
    settle(zk, live, feeder)

    # A consumer frozen past its session: its partitions go to the others, and come
    # back to it when it registers again by itself.
    frozen = live[1]
    frozen.suspend()
    try:
        others = [live[0], live[2]]
        # its partitions go to the others once its session ends
        settle(zk, others, feeder, timeout=CONSUMER_SESSION_MS / 1000 + SETTLE_S)
    finally:
        frozen.resume()
    settle(zk, live, feeder)
    assert [line for line in frozen.log().splitlines() if "expired; giving up" in line] == [
        f"consumer group {GROUP}: ZooKeeper session of {frozen.consumer_id} expired; giving "
        "up its 4 partitions without committing, to claim them again from the group's offsets"]
    drain_and_check(zk, feeder, consumers, live, also=["while-unregistered"])
    assert feeder.failed == []


def produce_everywhere(cluster, prefix, broker_ids=(1, 2, 3)):
    """One message "prefix-b-p" on every partition of ``broker_ids``; their values."""
    values = []
    for broker_id in broker_ids:
        with cluster.brokers[broker_id].client() as client:
            for p in range(PER_BROKER):
                values.append(f"{prefix}-{broker_id}-{p}")
                client.produce(TOPIC, p, encode_message_set([values[-1].encode()]))
    return values


def consumed_by_owners(zk, live, values):
    """Every value ("prefix-b-p") consumed by the consumer owning its partition."""
    now = owners(zk)
    for value in values:
        _, b, p = value.split("-")
        owner = next(c for c in live if now[f"{b}-{p}"] == f"{c.consumer_id}-0")
        poll(lambda: value in owner.values(), what=f"{value} to be consumed by its owner")


def test_a_topic_deleted_on_one_broker_leaves_the_group_and_comes_back_when_created_again(
        cluster, zookeeper, zk, script, consumers):
    live = [ConsumerProcess(script, zookeeper.connect) for _ in range(2)]
    consumers.extend(live)
    poll(lambda: settled(zk, live), what="2 consumers to settle")
    # Nothing on broker 2 yet: the group commits no offset there, so its partitions
    # created again start at auto.offset.reset (a committed offset would point into
    # the deleted log).
    consumed_by_owners(zk, live, produce_everywhere(cluster, "a", (1, 3)))

    with cluster.brokers[2].client() as client:
        client.delete_topic(TOPIC)
    # Its partitions leave the group: nobody owns them, the others are dealt anew.
    poll(lambda: settled(zk, live, (1, 3)), what="the group to settle without broker 2's")
    consumed_by_owners(zk, live, produce_everywhere(cluster, "b", (1, 3)))

    with cluster.brokers[2].client() as client:
        client.create_topic(TOPIC, PER_BROKER)
    poll(lambda: cluster.registered() == [1, 2, 3], what="broker 2 to register the topic again")
    poll(lambda: settled(zk, live), what="the group to settle on all three again")
    consumed_by_owners(zk, live, produce_everywhere(cluster, "c"))
    for consumer in live:
        consumer.stop()
    assert check_duplicates(live) == 0


def test_a_broker_registered_again_with_other_listeners_is_fetched_at_them(
        cluster, zookeeper, zk, script, consumers):
    # A long session: the consumer, frozen, misses the broker's absence altogether.
    consumer = ConsumerProcess(script, zookeeper.connect, session_ms=20000)
    consumers.append(consumer)
    poll(lambda: settled(zk, [consumer]), what="the consumer to own every partition")
    consumed_by_owners(zk, [consumer], produce_everywhere(cluster, "a"))

    broker = cluster.brokers[2]
    before = zk.get(paths.broker_path(2))[0]
    consumer.suspend()
    try:
        assert broker.stop() == 0
        broker.port = free_port()
        broker.unix_path = os.path.join(broker.root, "moved.sock")
        broker.settings["listeners"] = f"{broker.tcp},{broker.unix}"
        broker.start()
        poll(lambda: cluster.registered() == [1, 2, 3], what="broker 2 to register again")
        assert json.loads(zk.get(paths.broker_path(2))[0]) == {
            "version": 1, "host": "127.0.0.1", "port": broker.port, "unix": broker.unix_path,
            "endpoints": [f"PLAINTEXT://127.0.0.1:{broker.port}"]}
        assert zk.get(paths.broker_path(2))[0] != before
    finally:
        consumer.resume()
    consumed_by_owners(zk, [consumer], produce_everywhere(cluster, "b"))
    consumer.stop()
    assert check_duplicates([consumer]) == 0
