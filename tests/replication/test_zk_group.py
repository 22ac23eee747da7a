"""ZooKeeper consumer groups (0.7 style) on a replicated topic: real ``hostbroker serve``
brokers on a real ZooKeeper, the topic made with ``topics create --replication-factor``.

- two ConsumerConnectors of one group in ZooKeeper split the topic's global
  partitions (owner nodes ``/consumers/[group]/owners/[topic]/[partition]``),
  read each from its leader through a leader SIGKILLed under an acks=-1
  producer, consume every acknowledged message (each at the offset it was
  acknowledged at: leader data only) and commit their offsets in ZooKeeper
  (``/consumers/[group]/offsets/[topic]/[partition]``);
- ``hostbroker consume --zookeeper --group`` reads the topic and commits, a second
  run starts where the first stopped; ``groups describe`` shows each partition by
  its number with its leader's log end, ``groups reset-offsets`` resets them;
- ``hostbroker mirror --from-zookeeper`` copies it partition for partition to a
  standalone broker.
"""

from __future__ import annotations

import json
import threading

from hostbroker.client import ConsumerConnector, ConsumerTimeoutError, Producer, SimpleConsumer
from hostbroker.client.errors import DeliveryError
from hostbroker.cluster import paths
from tests.integration.cli import hostbroker
from tests.replication.support import BROKER_SESSION_MS, kill_hard, poll, state
from tests.replication.test_clients import FAST, create, settled

GROUP_FAST = {"zookeeper.session.timeout.ms": 2000, "fetch.wait.max.ms": 50,
              "consumer.timeout.ms": 100, "auto.commit.interval.ms": 200,
              "auto.offset.reset": "earliest", "rebalance.backoff.ms": 200,
              "retry.backoff.ms": 50}


class Member:
    """A ConsumerConnector of ``group`` in ZooKeeper, its one stream read by a thread:
    (partition, offset) -> value of everything it was handed."""

    def __init__(self, connect: str, group: str, topic: str):
        self.connector = ConsumerConnector(config={**GROUP_FAST, "zookeeper.connect": connect,
                                                   "group.id": group})
        (self.stream,) = self.connector.create_message_streams({topic: 1})[topic]
        self.read: dict[tuple[int, int], bytes] = {}
        self.brokers: set[int] = set()
        self.errors: list[BaseException] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.is_set():
            try:
                m = next(self.stream)
            except ConsumerTimeoutError:
                continue
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                self.errors.append(exc)
                return
            self.read[(m.partition, m.offset)] = m.value
            self.brokers.add(m.broker_id)

    def finish(self):
        self.stop.set()
        self.thread.join(30)
        self.connector.shutdown()


def committed(zk, group: str, topic: str) -> dict[int, int]:
    path = paths.offsets_path(group, topic)
    if zk.exists(path) is None:
        return {}
    return {int(n): int(zk.get(f"{path}/{n}")[0]) for n in zk.get_children(path)}


def test_a_group_reads_a_replicated_topic_through_a_leader_killed(cluster, zookeeper, zk):
    topic, group = "grouped", "g1"
    create(zookeeper, topic, 4, 3, "min.insync.replicas=2")
    poll(lambda: settled(zk, topic, 4, 3), what="leaders and full ISRs")
    producer = Producer(zookeeper_connect=zookeeper.connect, request_required_acks=-1,
                        retry_backoff_ms=100, message_send_max_retries=200,
                        request_timeout_ms=5000, **FAST)
    acked: dict[tuple[int, int], bytes] = {}
    failed: list[Exception] = []
    stop = threading.Event()

    def send():
        n = 0
        while not stop.is_set():
            value = b"m%06d" % n
            n += 1
            try:
                md = producer.send(topic, value, partition=n % 4)
            except DeliveryError as exc:
                failed.append(exc)
                continue
            acked[(md.partition, md.offset)] = value

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    a = Member(zookeeper.connect, group, topic)
    b = Member(zookeeper.connect, group, topic)
    try:
        owners = paths.owners_path(group, topic)
        poll(lambda: sorted(zk.get_children(owners)) == ["0", "1", "2", "3"], timeout=20,
             what="the four partitions owned, named by their numbers")
        holders = {zk.get(f"{owners}/{p}")[0].rsplit(b"-", 1)[0] for p in "0123"}
        assert len(holders) == 2, holders  # split between the two members
        poll(lambda: len(acked) >= 200, what="200 acknowledged before the kill")
        old = state(zk, topic, 0)
        kill_hard(cluster[old["leader"]])
        poll(lambda: state(zk, topic, 0)["leader"] not in (-1, old["leader"]),
             timeout=BROKER_SESSION_MS / 1000 + 15, what="a new leader of partition 0")
        count = len(acked)
        poll(lambda: len(acked) >= count + 200, timeout=20, what="200 more acknowledged")
        stop.set()
        sender.join(30)
        assert not failed, failed[:3]
        seen = {}
        poll(lambda: (seen.update(a.read) or seen.update(b.read) or True)
             and all(k in seen for k in acked), timeout=25,
             what="every acknowledged message consumed by the group")
        assert not a.errors and not b.errors, (a.errors, b.errors)
        # leader data only: what was read at an acknowledged offset is what was acknowledged
        wrong = [(k, seen[k], v) for k, v in acked.items() if seen[k] != v]
        assert not wrong, wrong[:5]
        assert a.brokers | b.brokers == {paths.REPLICATED}
        ends = {p: max(o for q, o in acked if q == p) + 1 for p in range(4)}
        poll(lambda: all(committed(zk, group, topic).get(p, -1) >= end
                         for p, end in ends.items()), timeout=10,
             what="offsets committed in ZooKeeper past every acknowledged message")
    finally:
        stop.set()
        a.finish()
        b.finish()
        producer.close()


def fill(zookeeper, zk, topic: str) -> dict[int, list[bytes]]:
    """A replicated topic of 3 partitions (replication factor 2) with 20 messages each."""
    create(zookeeper, topic, 3, 2)
    poll(lambda: settled(zk, topic, 3, 2), what="leaders and full ISRs")
    sent = {p: [b"p%d-%03d" % (p, i) for i in range(20)] for p in range(3)}
    with Producer(zookeeper_connect=zookeeper.connect, request_required_acks=-1,
                  **FAST) as producer:
        for p, values in sent.items():
            for value in values:
                producer.send(topic, value, partition=p)
    return sent


def log_ends(cluster, topic: str) -> dict[int, int]:
    with SimpleConsumer([b.unix for b in cluster.values()]) as consumer:
        return {p: consumer.offsets_before(topic, p, -1)[0] for p in range(3)}


def test_console_group_and_groups_tool_on_a_replicated_topic(cluster, zookeeper, zk):
    topic = "console"
    sent = fill(zookeeper, zk, topic)
    everything = sorted(v for values in sent.values() for v in values)
    args = ("consume", "--zookeeper", zookeeper.connect, "--topic", topic, "--group", "cg",
            "--from-beginning", "--timeout-ms", "2000")
    done = hostbroker(*args)
    assert done.returncode == 0, done.stderr.decode()
    assert sorted(done.stdout.split()) == everything
    ends = log_ends(cluster, topic)
    assert committed(zk, "cg", topic) == ends  # at /consumers/cg/offsets/console/[p]
    again = hostbroker(*args)  # the group's offsets: nothing more to print
    assert again.returncode == 0, again.stderr.decode()
    assert again.stdout.split() == []
    # groups describe: each partition by its number, log end from its leader, no lag
    described = hostbroker("groups", "describe", "--zookeeper", zookeeper.connect,
                           "--group", "cg", "--topic", topic, "--json")
    assert described.returncode == 0, described.stderr.decode()
    rows = json.loads(described.stdout)["partitions"]
    assert [(r["partition"], r["broker"], r["committed"], r["log_end"], r["lag"])
            for r in rows] == [(p, -1, ends[p], ends[p], 0) for p in range(3)]
    # reset-offsets to earliest, through each partition's leader: read all over again
    reset = hostbroker("groups", "reset-offsets", "--zookeeper", zookeeper.connect,
                       "--group", "cg", "--topic", topic, "--to", "earliest")
    assert reset.returncode == 0, reset.stderr.decode()
    assert committed(zk, "cg", topic) == {0: 0, 1: 0, 2: 0}
    again = hostbroker(*args)
    assert again.returncode == 0, again.stderr.decode()
    assert sorted(again.stdout.split()) == everything


def test_mirror_copies_a_replicated_topic_partition_for_partition(cluster, zookeeper, zk,
                                                                  make_broker, tmp_path):
    topic = "mirrored"
    sent = fill(zookeeper, zk, topic)
    root = tmp_path / "destination"
    root.mkdir()
    destination = make_broker(root=root)
    done = hostbroker("mirror", "--from-zookeeper", zookeeper.connect, "--to", destination.unix,
                      "--topics", topic, "--group", "mg", "--max-messages", "60",
                      "--timeout-ms", "15000", "--consumer-property",
                      "zookeeper.session.timeout.ms=2000")
    assert done.returncode == 0, done.stderr.decode()
    with SimpleConsumer([destination.unix]) as consumer:
        copied = {p: [v for _, _, v in consumer.messages(topic, p, 0, stop_at_end=True)]
                  for p in range(3)}
    assert copied == sent
    assert committed(zk, "mg", topic) == log_ends(cluster, topic)
