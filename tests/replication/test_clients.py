"""The library's clients on a replicated topic: real ``hostbroker serve`` brokers on a
real ZooKeeper, the topic made with ``topics create --replication-factor``.

- a Producer with acks=-1 (found through ZooKeeper, and through a broker list)
  keeps sending across a leader SIGKILLed; every message it was told was
  acknowledged is read back afterwards by a SimpleConsumer that follows leaders,
  and by one that was walking the partition when its leader died (and by
  ``consume --zookeeper --partition 0`` running meanwhile);
- min.insync.replicas: a Producer's acks=-1 message fails NOT_ENOUGH_REPLICAS
  once its retries are spent, while acks=1 goes on;
- a SimpleConsumer bootstrapped on a broker that is not the leader reads from the
  leader; console produce and consume work on the topic, through a broker list
  and through ZooKeeper;
- a group of the broker's group coordinator deals out every partition of a
  replicated topic, those its broker holds no replica of included (replication
  factor below the broker count);
- through ZooKeeper, ``consume --partition [--offset]`` and ``perf consume`` read
  the topic's partitions from their leaders, and ``mirror --to-zookeeper`` copies
  into a replicated topic partition for partition.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from hostbroker.client import ConsumerConnector, Producer, SimpleConsumer
from hostbroker.client.errors import DeliveryError
from hostbroker.errors import ErrorCode
from tests.integration.cli import hostbroker
from tests.integration.test_group_coordinator_cli import described
from tests.replication.support import (BROKER_SESSION_MS, assignment, create, kill_hard, poll,
                                       settled, state)

FAST = {"zookeeper_session_timeout_ms": 2000, "zookeeper_connection_timeout_ms": 5000}


def read_all(brokers, topic, partitions) -> dict[int, dict[int, bytes]]:
    """offset -> value of every message of each partition below the high watermark, read
    by a SimpleConsumer given every live broker (it finds each leader itself)."""
    uris = [b.unix for b in brokers.values()]
    out: dict[int, dict[int, bytes]] = {}
    with SimpleConsumer(uris, refresh_leader_backoff_ms=100) as consumer:
        for p in range(partitions):
            out[p] = {offset: value for offset, _, value in
                      consumer.messages(topic, p, 0, stop_at_end=True)}
    return out


class Sender:
    """A sync acks=-1 Producer in a thread, one message at a time, keeping what was
    acknowledged (partition, offset, value) and what failed."""

    def __init__(self, producer: Producer, topic: str):
        self.producer = producer
        self.topic = topic
        self.acked: list[tuple[int, int, bytes]] = []
        self.failed: list[Exception] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        n = 0
        while not self.stop.is_set():
            value = b"m%06d" % n
            n += 1
            try:
                md = self.producer.send(self.topic, value, key=value)
            except DeliveryError as exc:
                self.failed.append(exc)
                continue
            self.acked.append((md.partition, md.offset, value))

    def finish(self):
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive()


class Walker:
    """A SimpleConsumer walking one partition from offset 0 in a thread (``sets``, to
    the log end and again), keeping offset -> value of what it read."""

    def __init__(self, uris, topic, partition):
        self.consumer = SimpleConsumer(uris, refresh_leader_backoff_ms=100,
                                       refresh_leader_max_retries=200)
        self.topic, self.partition = topic, partition
        self.read: dict[int, bytes] = {}
        self.error: list[BaseException] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        position = 0
        try:
            while not self.stop.is_set():
                for fetched in self.consumer.sets(self.topic, self.partition, position,
                                                  stop_at_end=True):
                    for offset, _, value in fetched:
                        self.read[offset] = value
                    position = fetched.next_offset
                time.sleep(0.02)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error.append(exc)
        finally:
            self.consumer.close()

    def finish(self):
        self.stop.set()
        self.thread.join(60)


def _ended(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()
        process.wait(timeout=20)


@pytest.mark.parametrize("found_through", ["zookeeper", "brokers"])
def test_producer_acks_all_across_a_leader_killed_loses_nothing(cluster, zookeeper, zk,
                                                                found_through, tmp_path,
                                                                request):
    topic = "clients"
    create(zookeeper, topic, 2, 3, "min.insync.replicas=2")
    poll(lambda: settled(zk, topic, 2, 3), what="leaders and full ISRs")
    options = dict(request_required_acks=-1, retry_backoff_ms=100,
                   message_send_max_retries=200, request_timeout_ms=5000)
    console = None
    printed = tmp_path / "console.out"
    if found_through == "zookeeper":
        producer = Producer(zookeeper_connect=zookeeper.connect, **FAST, **options)
        # and the console consumer on partition 0 through ZooKeeper, from its leader
        # (its stderr to a file: a pipe nobody reads until the end could fill and stop it)
        with printed.open("wb") as out, (tmp_path / "console.err").open("wb") as errors:
            console = subprocess.Popen(
                [sys.executable, "-m", "hostbroker", "consume", "--zookeeper",
                 zookeeper.connect, "--topic", topic, "--partition", "0", "--from-beginning",
                 "--property", "refresh.leader.backoff.ms=100"],
                stdout=out, stderr=errors, stdin=subprocess.DEVNULL)
        request.addfinalizer(lambda: _ended(console))  # also when a step before fails
    else:
        producer = Producer([b.unix for b in cluster.values()], **options)
    sender = Sender(producer, topic)
    walker = Walker([b.unix for b in cluster.values()], topic, 0)
    try:
        poll(lambda: len(sender.acked) >= 100, what="100 acknowledged before the kill")
        old = state(zk, topic, 0)
        kill_hard(cluster[old["leader"]])
        poll(lambda: state(zk, topic, 0)["leader"] not in (-1, old["leader"]),
             timeout=BROKER_SESSION_MS / 1000 + 15, what="a new leader of partition 0")
        count = len(sender.acked)
        poll(lambda: any(p == 0 for p, _, _ in sender.acked[count:]), timeout=20,
             what="partition 0 acknowledged again at its new leader")
        poll(lambda: len(sender.acked) >= count + 100, what="100 more acknowledged")
    finally:
        sender.finish()
        producer.close()
    assert not sender.failed, sender.failed[:3]
    # the walking consumer went on at the new leader: it reads every acknowledged message
    acked0 = {o: v for p, o, v in sender.acked if p == 0}
    try:
        poll(lambda: walker.error or all(walker.read.get(o) == v for o, v in acked0.items()),
             timeout=30, what="the walker reading every acknowledged message of partition 0")
    finally:
        walker.finish()
    assert not walker.error, walker.error
    if console is not None:
        # it went on at the new leader too: every acknowledged message, in log order
        wanted = set(acked0.values())
        try:
            poll(lambda: console.poll() is None and wanted <= set(printed.read_bytes().split()),
                 timeout=30, what="consume --zookeeper --partition 0 printing every "
                 "acknowledged message of partition 0")
        finally:
            console.terminate()
            console.wait(timeout=20)
        assert console.returncode == 0, (tmp_path / "console.err").read_text()
    cluster[old["leader"]].kill_tree()
    del cluster[old["leader"]]
    logs = read_all(cluster, topic, 2)
    if console is not None:
        # in log order: what it printed is the partition's log from its start (a retried
        # message whose first answer was lost is in the log twice, and printed twice)
        shown = printed.read_bytes().split()
        assert shown == [logs[0][o] for o in sorted(logs[0])][:len(shown)]
    lost = [(p, o, v) for p, o, v in sender.acked if logs[p].get(o) != v]
    assert not lost, f"{len(lost)} of {len(sender.acked)} acknowledged messages lost: {lost[:5]}"


def test_min_insync_refuses_acks_all_and_consumers_follow_the_leader(cluster, zookeeper, zk):
    topic = "insync"
    create(zookeeper, topic, 1, 2, "min.insync.replicas=2")
    poll(lambda: settled(zk, topic, 1, 2), what="leader and full ISR")
    s = state(zk, topic, 0)
    leader = s["leader"]
    (follower,) = [b for b in s["isr"] if b != leader]
    (outsider,) = [b for b in cluster if b not in s["isr"]]
    done = hostbroker("produce", "--zookeeper", zookeeper.connect, "--topic", topic,
                      "--property", "request.required.acks=-1", input=b"one\n")
    assert done.returncode == 0, done.stderr.decode()
    # the consumer connects to the broker that holds no replica, and finds the leader
    # through the follower's answer (a broker tells the leaders of its own replicas)
    bootstrap = [cluster[outsider].unix, cluster[follower].unix]
    with SimpleConsumer(bootstrap, refresh_leader_backoff_ms=50) as consumer:
        assert [v for _, _, v in consumer.messages(topic, 0, 0, stop_at_end=True)] == [b"one"]
        (end,) = consumer.offsets_before(topic, 0, -1)
        assert end > 0
    # the Spark source's planner, on the same two brokers, plans the partition at its
    # leader: the log start and the high watermark
    from hostbroker.spark.options import read_options
    from hostbroker.spark.planning import Planner

    with Planner(read_options({"bootstrap": ",".join(bootstrap), "subscribe": topic},
                              streaming=False)) as planner:
        (planned,) = planner.partitions(must_exist=True).values()
    assert (planned.topic, planned.partition, planned.log_start, planned.log_end) == (
        topic, 0, 0, end)
    # the follower gone: the ISR shrinks below min.insync.replicas
    kill_hard(cluster[follower])
    cluster[follower].kill_tree()
    del cluster[follower]
    poll(lambda: state(zk, topic, 0)["isr"] == [leader], timeout=30,
         what="the killed follower out of the ISR")
    with Producer(zookeeper_connect=zookeeper.connect, request_required_acks=-1,
                  retry_backoff_ms=20, message_send_max_retries=3, **FAST) as producer:
        started = time.monotonic()
        with pytest.raises(DeliveryError) as raised:
            producer.send(topic, b"refused", partition=0)
        assert raised.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
        assert time.monotonic() - started < 10
    with Producer(zookeeper_connect=zookeeper.connect, request_required_acks=1,
                  **FAST) as producer:
        producer.send(topic, b"two", partition=0)
    # console consume through the broker list finds the leader too
    done = hostbroker("consume", "--bootstrap", f"{cluster[outsider].unix},{cluster[leader].unix}",
                      "--topic", topic,
                      "--from-beginning", "--timeout-ms", "1500")
    assert done.returncode == 0, done.stderr.decode()
    # "refused" may be in the log all the same: a leader that hears of the smaller ISR
    # only after appending it answers NOT_ENOUGH_REPLICAS_AFTER_APPEND (the producer then
    # retries and is refused before any append). It was never acknowledged.
    assert [v for v in done.stdout.split() if v != b"refused"] == [b"one", b"two"]
    done = hostbroker("consume", "--zookeeper", zookeeper.connect, "--topic", topic,
                      "--from-beginning", "--timeout-ms", "1500")
    assert done.returncode == 0, done.stderr.decode()
    # "refused" may be in the log all the same: a leader that hears of the smaller ISR
    # only after appending it answers NOT_ENOUGH_REPLICAS_AFTER_APPEND (the producer then
    # retries and is refused before any append). It was never acknowledged.
    assert [v for v in done.stdout.split() if v != b"refused"] == [b"one", b"two"]


def test_async_producer_acks_all_across_a_leader_killed_loses_nothing(cluster, zookeeper, zk):
    topic = "async"
    create(zookeeper, topic, 2, 3, "min.insync.replicas=2")
    poll(lambda: settled(zk, topic, 2, 3), what="leaders and full ISRs")
    values = [b"a%06d" % i for i in range(3000)]
    with Producer(zookeeper_connect=zookeeper.connect, producer_type="async",
                  request_required_acks=-1, batch_size=50, queue_time=10,
                  retry_backoff_ms=100, message_send_max_retries=200, **FAST) as producer:
        for value in values[:1000]:
            producer.send(topic, value, key=value)
        producer.flush()
        old = state(zk, topic, 0)
        kill_hard(cluster[old["leader"]])
        for value in values[1000:]:
            producer.send(topic, value, key=value)
        producer.flush(timeout=60)  # raises DeliveryError for anything not acknowledged
        assert producer.stats["acknowledged"] == len(values)
    assert state(zk, topic, 0)["leader"] != old["leader"]
    cluster[old["leader"]].kill_tree()
    del cluster[old["leader"]]
    logs = read_all(cluster, topic, 2)
    found = [v for log in logs.values() for v in log.values()]
    assert set(values) <= set(found)


def test_a_coordinator_group_gets_every_partition_of_a_replicated_topic(cluster, zookeeper, zk):
    topic, partitions = "spread", 5
    create(zookeeper, topic, partitions, 2)
    poll(lambda: settled(zk, topic, partitions, 2), what="leaders and full ISRs")
    # the coordinator's broker holds no replica of the last partition (2 of 3 brokers do):
    # the highest partition of its own table is not the topic's count
    last = partitions - 1
    (home, *_) = [b for b in sorted(cluster) if b not in assignment(zk, topic)[last]]
    values = {p: b"p%d" % p for p in range(partitions)}
    with Producer(zookeeper_connect=zookeeper.connect, request_required_acks=-1,
                  **FAST) as producer:
        for p, value in values.items():
            producer.send(topic, value, partition=p)
    # the coordinator first, the others to find each leader
    uris = [cluster[home].unix] + [cluster[b].unix for b in sorted(cluster) if b != home]
    config = {"auto.offset.reset": "earliest", "consumer.timeout.ms": 10000,
              "fetch.wait.max.ms": 50, "heartbeat.interval.ms": 100,
              "retry.backoff.ms": 50, "auto.commit.enable": False}
    with ConsumerConnector(uris, config, group_id="spread") as one:
        (stream,) = one.create_message_streams({topic: 1})[topic]
        got = {}
        while len(got) < partitions:
            m = next(stream)  # a partition never assigned: consumer.timeout.ms raises
            got[m.partition] = m.value
        assert got == values
        # a second member: the two split all five partitions between them
        with ConsumerConnector(uris, config, group_id="spread") as two:
            two.create_message_streams({topic: 1})

            def split() -> bool:
                phase, held = described(cluster[home].unix, "spread")
                return (phase == "STABLE" and len(held) == 2 and all(held)
                        and sorted(held[0] + held[1]) == list(range(partitions)))

            poll(split, timeout=20, what="two members sharing every partition")


def test_tools_on_a_replicated_topic_through_zookeeper(cluster, zookeeper, zk, make_broker,
                                                       tmp_path):
    """``consume --zookeeper --partition P [--offset O]`` reads P from its leader
    (given every live replica, as a SimpleConsumer that follows leaders); ``perf
    consume --zookeeper`` reads every global partition from its leader; ``mirror
    --to-zookeeper`` copies a standalone broker's topic into a replicated one
    partition for partition."""
    import json

    topic = "tools"
    create(zookeeper, topic, 2, 2)
    poll(lambda: settled(zk, topic, 2, 2), what="leaders and full ISRs")
    with Producer(zookeeper_connect=zookeeper.connect, request_required_acks=-1,
                  **FAST) as producer:
        for i in range(40):
            producer.send(topic, b"v%02d" % i, partition=i % 2)
    expected = read_all(cluster, topic, 2)
    assert [len(expected[p]) for p in (0, 1)] == [20, 20]

    def consume(partition, *more):
        done = hostbroker("consume", "--zookeeper", zookeeper.connect, "--topic", topic,
                          "--partition", str(partition), *more, "--timeout-ms", "10000")
        assert done.returncode == 0, done.stderr.decode()
        return done.stdout.split()

    for p in (0, 1):
        assert consume(p, "--from-beginning", "--max-messages", "20") == list(
            expected[p].values())
    offsets = sorted(expected[1])
    assert consume(1, "--offset", str(offsets[5]), "--max-messages", "15") == [
        expected[1][o] for o in offsets[5:]]
    missing = hostbroker("consume", "--zookeeper", zookeeper.connect, "--topic", topic,
                         "--partition", "2", "--timeout-ms", "1000")
    assert missing.returncode == 1
    assert missing.stderr.decode().strip().endswith(f"topic {topic} has no partition 2")

    # the Spark source with zookeeper.connect plans (on the driver, no Spark needed)
    # the global partitions, keyed (topic, -1, p), from their leaders' log start and
    # high watermark, each range carrying every live broker (its task finds the leader)
    from hostbroker.spark.cluster import ClusterPlanner
    from hostbroker.spark.options import read_options

    with SimpleConsumer([b.unix for b in cluster.values()]) as consumer:
        ends = {p: consumer.offsets_before(topic, p, -1)[0] for p in (0, 1)}
    with ClusterPlanner(read_options({"zookeeper.connect": zookeeper.connect,
                                      "subscribe": topic}, streaming=False)) as planner:
        ranges = planner.plan()
    assert sorted((r.topic, r.broker, r.partition, r.start, r.end) for r in ranges) == [
        (topic, -1, p, 0, ends[p]) for p in (0, 1)]
    assert all(len(r.uris) == 3 for r in ranges)

    consumed = hostbroker("perf", "consume", "--zookeeper", zookeeper.connect, "--topic",
                          topic, "--messages", "40", "--processes", "2", "--json", timeout=120)
    assert consumed.returncode == 0, consumed.stderr.decode()
    report = json.loads(consumed.stdout)
    assert (report["messages"], report["payload_bytes"]) == (40, 40 * 3)

    # mirror from a standalone broker into a replicated topic of the same name
    root = tmp_path / "source"
    root.mkdir()
    source = make_broker(root=root)
    with source.client() as client:
        client.create_topic("into", 2)
    create(zookeeper, "into", 2, 2)
    poll(lambda: settled(zk, "into", 2, 2), what="leaders and full ISRs of into")
    sent = {p: [b"s%d-%02d" % (p, i) for i in range(10)] for p in (0, 1)}
    with Producer(source.unix) as producer:
        for p, values in sent.items():
            producer.send_many("into", values, partition=p)
    done = hostbroker("mirror", "--from", source.unix, "--to-zookeeper", zookeeper.connect,
                      "--topics", "into", "--max-messages", "20", "--timeout-ms", "15000")
    assert done.returncode == 0, done.stderr.decode()
    poll(lambda: {p: list(v.values()) for p, v in read_all(cluster, "into", 2).items()}
         == sent, timeout=10, what="every message mirrored, in its partition")
