"""The data source and ``hostbroker load`` in cluster mode: a real ZooKeeper, brokers that
register themselves in it (``hostbroker serve`` processes), and the session's Spark.

One ZooKeeper and two brokers (ids 1 and 2) serve the module; each test has its own
topics, created on each broker with its own partition count, so a topic's partitions
are (broker, partition) pairs. Expected rows come from a plain consumer on each broker.
Replicated topics (``topics create --replication-factor 2``) are read by their global
partitions, rows of broker -1, expected rows from a consumer that follows leaders.
"""

from __future__ import annotations

import collections
import glob
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from hostbroker.client import EARLIEST, Producer, SimpleConsumer, stable_hash
from hostbroker.cluster import paths
from hostbroker.cluster.discovery import read_snapshot
from tests.cluster.test_discovery import wait_until
from tests.cluster.zkserver import ZooKeeperServer, free_port
from tests.integration.broker import Broker
from tests.integration.wire_helpers import stop_or_kill
from tests.spark.test_loader import ENV, RUN_TIMEOUT, refused, summary
from tests.spark.test_read import rows_of

LEAN = {"num.processors": 1, "num.handlers": 1}
COLUMNS = ["topic", "broker", "partition", "offset", "next_offset", "value"]


class Cluster:
    """The module's ZooKeeper, a kazoo client on it, and its brokers by id."""

    def __init__(self, root):
        from kazoo.client import KazooClient

        self.root = root
        (root / "zk").mkdir()
        self.server = ZooKeeperServer(root / "zk").start()
        self.connect = self.server.connect
        self.zk = KazooClient(hosts=self.connect, timeout=5.0)
        self.zk.start(timeout=20)
        self.brokers: dict[int, Broker] = {}

    def add(self, broker_id: int) -> Broker:
        root = self.root / f"b{broker_id}"
        root.mkdir(exist_ok=True)
        broker = Broker(root, **LEAN, **{"zookeeper.connect": self.connect,
                                         "broker.id": broker_id}).start()
        self.brokers[broker_id] = broker
        wait_until(lambda: self.zk.exists(paths.broker_path(broker_id)) is not None, 30)
        return broker

    def remove(self, broker_id: int) -> None:
        stop_or_kill(self.brokers.pop(broker_id))
        wait_until(lambda: self.zk.exists(paths.broker_path(broker_id)) is None, 30)

    def create(self, topic: str, counts: dict[int, int]) -> None:
        """``topic`` with ``counts[b]`` partitions on broker b, once ZooKeeper shows them."""
        for broker_id, count in counts.items():
            with self.brokers[broker_id].client() as client:
                client.create_topic(topic, count)
        want = {(b, p) for b, n in counts.items() for p in range(n)}
        wait_until(lambda: want <= set(read_snapshot(self.zk).partitions(topic)), 30)

    def close(self) -> None:
        for broker_id in list(self.brokers):
            stop_or_kill(self.brokers.pop(broker_id))
        self.zk.stop()
        self.zk.close()
        self.server.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("cluster"))
    try:
        c.add(1)
        c.add(2)
        yield c
    finally:
        c.close()


def produce(broker, topic, partition, values):
    with Producer(broker.unix) as producer:
        producer.send_many(topic, values, partition=partition)


def fill(cluster, topic, counts, tag="m", n=20):
    """``n`` messages (of varying sizes) into every (broker, partition) of ``topic``."""
    for broker_id, count in counts.items():
        for p in range(count):
            produce(cluster.brokers[broker_id], topic, p,
                    [f"{tag}-{broker_id}-{p}-{i}".encode() * (1 + i % 3) for i in range(n)])


def cluster_rows(cluster, topic, broker_ids=None):
    """Every message of ``topic`` on the brokers, as rows of the cluster schema."""
    rows = []
    for broker_id in broker_ids or sorted(cluster.brokers):
        with SimpleConsumer(cluster.brokers[broker_id].unix) as consumer:
            (found,) = consumer.metadata([topic]).topics
            for part in found.partitions:
                (start,) = consumer.offsets_before(topic, part.partition, EARLIEST)
                rows += [(topic, broker_id, part.partition, o, n, v) for o, n, v in
                         consumer.messages(topic, part.partition, start, stop_at_end=True)]
    return sorted(rows)


def read(spark, cluster, **options):
    return (spark.read.format("hostbroker")
            .options(**{"zookeeper.connect": cluster.connect, **options}).load())


def test_batch_read_takes_every_broker_partition_pair(spark, cluster):
    counts = {1: 2, 2: 1}
    cluster.create("cb", counts)
    fill(cluster, "cb", counts)
    want = cluster_rows(cluster, "cb")
    assert len(want) == 60

    df = read(spark, cluster, subscribe="cb")
    assert df.columns == COLUMNS
    assert rows_of(df) == want
    assert df.rdd.getNumPartitions() == 3  # one Spark partition per (broker, partition)
    split = read(spark, cluster, subscribe="cb", maxBytesPerPartition="300")
    assert split.rdd.getNumPartitions() > 3 and rows_of(split) == want

    # offsets JSON names BROKER-PARTITION; ranges are exact
    on = {(b, p): [r for r in want if r[1:3] == (b, p)] for b, p in [(1, 1), (2, 0)]}
    start, end = on[(2, 0)][5][3], on[(1, 1)][12][3]
    ranged = read(spark, cluster, assign='{"cb": ["1-1", "2-0"]}',
                  startingOffsets=json.dumps({"cb": {"2-0": start}}),
                  endingOffsets=json.dumps({"cb": {"1-1": end}}))
    assert rows_of(ranged) == sorted(on[(1, 1)][:12] + on[(2, 0)][5:])


@pytest.mark.parametrize("options, line", [
    ({"subscribe": "cb", "startingOffsets": '{"cb": {"0": 0}}'},
     "hostbroker data source: option startingOffsets: topic 'cb': '0' is not BROKER-PARTITION"),
    ({"subscribe": "cb", "bootstrap": "tcp://127.0.0.1:1"},
     "hostbroker data source: option bootstrap: conflicts with zookeeper.connect"),
    ({"subscribe": "nowhere"}, "topic nowhere is not registered by a live broker"),
    ({"assign": '{"cb": ["2-5"]}'}, "partition cb/2-5 is not registered"),
])
def test_read_errors_are_one_line(spark, cluster, options, line):
    with pytest.raises(Exception) as caught:
        read(spark, cluster, **options).collect()
    assert line in str(caught.value)


def test_no_zookeeper_answering_is_one_line(spark):
    connect = f"127.0.0.1:{free_port()}"
    reader = (spark.read.format("hostbroker").option("zookeeper.connect", connect)
              .option("zookeeper.connection.timeout.ms", "500").option("subscribe", "x"))
    with pytest.raises(Exception) as caught:
        reader.load().collect()
    assert (f"zookeeper.connect: no ZooKeeper server of {connect} answered within 500 ms"
            in str(caught.value))


def last_offsets(checkpoint) -> dict:
    """The source's offsets of the checkpoint's latest batch."""
    latest = max(glob.glob(os.path.join(checkpoint, "offsets", "[0-9]*")),
                 key=lambda f: int(os.path.basename(f)))
    with open(latest) as f:
        return json.loads(f.read().splitlines()[-1])


def stream_once(spark, cluster, out, checkpoint, **options):
    query = (spark.readStream.format("hostbroker").option("zookeeper.connect", cluster.connect)
             .option("subscribe", "cs").option("startingOffsets", "earliest").options(**options)
             .load()
             .writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    assert query.exception() is None
    return sorted(tuple(r) for r in spark.read.parquet(str(out)).select(*COLUMNS).collect())


def test_stream_follows_brokers_that_join_and_leave(spark, cluster, tmp_path):
    out, checkpoint = tmp_path / "out", str(tmp_path / "checkpoint")
    cluster.create("cs", {1: 1, 2: 2})
    fill(cluster, "cs", {1: 1, 2: 2}, n=10)
    # in bounded batches, each cut at an entry boundary read on its broker
    assert (stream_once(spark, cluster, out, checkpoint, maxBytesPerTrigger="600")
            == cluster_rows(cluster, "cs"))
    batches = glob.glob(os.path.join(checkpoint, "offsets", "[0-9]*"))
    assert len(batches) >= 2
    first = last_offsets(checkpoint)
    assert sorted(first["cs"]) == ["1-0", "2-0", "2-1"]

    # broker 3 joins, with the topic: read from its log start on the next run
    third = cluster.add(3)
    try:
        cluster.create("cs", {3: 1})
        fill(cluster, "cs", {1: 1, 3: 1}, tag="later", n=5)
        second = stream_once(spark, cluster, out, checkpoint)
        assert second == cluster_rows(cluster, "cs")
        offsets = last_offsets(checkpoint)["cs"]
        assert sorted(offsets) == ["1-0", "2-0", "2-1", "3-0"]
        with SimpleConsumer(third.unix) as consumer:
            assert offsets["3-0"] == consumer.offsets_before("cs", 0, -1)[0]
        kept = offsets["3-0"]
    finally:
        cluster.remove(3)
    # broker 3 has left: its offset stays in the checkpoint, the others go on
    saved = [r for r in second if r[1] == 3]
    fill(cluster, "cs", {2: 1}, tag="last", n=4)
    got = stream_once(spark, cluster, out, checkpoint)
    assert [r for r in got if r[1] != 3] == cluster_rows(cluster, "cs")
    assert [r for r in got if r[1] == 3] == saved and len(saved) == 5
    assert last_offsets(checkpoint)["cs"]["3-0"] == kept


def load(cluster, path, *extra, mode=("--zookeeper",)):
    where = list(mode) + ([cluster.connect] if mode == ("--zookeeper",) else [])
    return subprocess.run([sys.executable, "-m", "hostbroker", "load", *where,
                           "--topics", "cl_.*", "--to", str(path), "--master", "local[2]",
                           *extra], env=ENV, text=True, capture_output=True,
                          stdin=subprocess.DEVNULL, timeout=RUN_TIMEOUT)


def loaded(spark, path):
    frame = spark.read.schema("broker int, partition int, offset long, next_offset long, "
                              "value binary, topic string").parquet(str(path))
    return sorted(tuple(r) for r in frame.select(*COLUMNS).collect())


def test_load_with_zookeeper_then_only_what_is_new(spark, cluster, tmp_path):
    out = tmp_path / "out"
    cluster.create("cl_a", {1: 1, 2: 2})
    fill(cluster, "cl_a", {1: 1, 2: 2}, n=8)
    # and a replicated topic: its global partitions, each from its leader (broker -1)
    create_replicated(cluster, "cl_r", 2)
    with Producer(zookeeper_connect=cluster.connect, request_required_acks=-1) as producer:
        for i in range(10):
            producer.send("cl_r", b"r%02d" % i, partition=i % 2)
    replicated = replicated_rows(cluster, "cl_r", 2)
    assert len(replicated) == 10
    first = load(cluster, out, "--quiet")
    assert summary(first)["messages"] == 34 and summary(first)["partitions"] == 5
    assert loaded(spark, out) == sorted(cluster_rows(cluster, "cl_a") + replicated)

    fill(cluster, "cl_a", {2: 1}, tag="new", n=3)
    second = load(cluster, out, "--quiet")
    assert summary(second) | {"bytes": 0} == {"messages": 3, "bytes": 0, "topics": 1,
                                             "partitions": 1}
    assert loaded(spark, out) == sorted(cluster_rows(cluster, "cl_a") + replicated)

    wrong = load(cluster, out, mode=("--bootstrap", cluster.brokers[1].unix))
    refused(wrong, 2, f"--to {out}: holds a load made with --zookeeper, which cannot be "
                      "resumed with --bootstrap")


def test_load_refuses_a_zookeeper_that_does_not_answer(tmp_path):
    result = subprocess.run([sys.executable, "-m", "hostbroker", "load", "--zookeeper",
                             f"127.0.0.1:{free_port()}", "--topics", "x", "--to",
                             str(tmp_path / "out")], env=ENV, text=True, capture_output=True,
                            stdin=subprocess.DEVNULL, timeout=60)
    refused(result, 1, "--zookeeper: no ZooKeeper server of 127.0.0.1:")
    assert not os.path.exists(tmp_path / "out" / "_spark_metadata")


def test_write_with_zookeeper_lands_every_row(spark, cluster):
    counts = {1: 2, 2: 1}
    cluster.create("cw", counts)
    rows = [(f"k{i % 17}", f"value {i}") for i in range(340)]
    df = spark.createDataFrame(rows, "key string, value string").repartition(2)
    (df.write.format("hostbroker").mode("append").option("zookeeper.connect", cluster.connect)
     .option("topic", "cw").save())
    pairs = [(1, 0), (1, 1), (2, 0)]  # the producer's sorted (broker, partition) list
    want = collections.Counter()
    for key, value in rows:
        want[pairs[stable_hash(key.encode()) % 3] + (value.encode(),)] += 1
    got = collections.Counter((r[1], r[2], r[5]) for r in cluster_rows(cluster, "cw"))
    assert got == want

    refused_df = spark.createDataFrame([(0, "v")], "partition int, value string")
    with pytest.raises(Exception, match="column partition: not taken with zookeeper.connect"):
        (refused_df.write.format("hostbroker").mode("append")
         .option("zookeeper.connect", cluster.connect).option("topic", "cw").save())


def test_a_checkpoint_or_load_of_the_other_mode_is_refused(tmp_path):
    from hostbroker.exits import CommandError
    from hostbroker.spark.loader import check_output
    from hostbroker.spark.stream import CheckpointError, from_offsets, to_offsets

    offsets = to_offsets({("t", 2, 0): 5, ("t", 1, 3): 7})
    assert offsets == {"t": {"1-3": 7, "2-0": 5}}
    assert from_offsets(offsets, cluster=True) == {("t", 1, 3): 7, ("t", 2, 0): 5}
    # a replicated topic's partition P is "-1-P" in a checkpoint
    assert to_offsets({("r", -1, 0): 5}) == {"r": {"-1-0": 5}}
    assert from_offsets({"r": {"-1-0": 5}}, cluster=True) == {("r", -1, 0): 5}
    with pytest.raises(CheckpointError, match="t/1-3, a partition of a cluster"):
        from_offsets(offsets)
    with pytest.raises(CheckpointError, match="t/0, a partition of a read without zookeeper"):
        from_offsets({"t": {"0": 1}}, cluster=True)

    # a load made before the mode was kept, or with --bootstrap: not resumed with --zookeeper
    (tmp_path / "out" / "_checkpoint").mkdir(parents=True)
    (tmp_path / "out" / "_checkpoint" / "hostbroker-load.json").write_text('{"from_time": null}')
    assert check_output(str(tmp_path / "out"), None) == (True, None)
    with pytest.raises(CommandError, match="holds a load made with --bootstrap, which cannot "
                       "be resumed with --zookeeper") as caught:
        check_output(str(tmp_path / "out"), None, cluster=True)
    assert caught.value.status == 2


def replicated_state(cluster, topic, p) -> dict:
    return json.loads(cluster.zk.get(f"/brokers/topics/{topic}/partitions/{p}/state")[0])


def create_replicated(cluster, topic, partitions):
    """``topic`` with ``partitions`` partitions of 2 replicas (brokers 1 and 2), made
    with ``topics create``; returned once each has a leader and both in its ISR."""
    from kazoo.exceptions import NoNodeError

    created = subprocess.run([sys.executable, "-m", "hostbroker", "topics", "create",
                              "--zookeeper", cluster.connect, "--topic", topic,
                              "--partitions", str(partitions), "--replication-factor", "2"],
                             env=ENV, capture_output=True, text=True, timeout=60)
    assert created.returncode == 0, created.stderr

    def settled():
        try:
            return all(replicated_state(cluster, topic, p)["leader"] >= 0
                       and len(replicated_state(cluster, topic, p)["isr"]) == 2
                       for p in range(partitions))
        except NoNodeError:  # the controller has not written it yet
            return False

    wait_until(settled, 30)


def replicated_rows(cluster, topic, partitions):
    """Every message of a replicated ``topic`` below the high watermark, read from each
    partition's leader, as rows of the cluster schema (broker -1)."""
    rows = []
    uris = [b.unix for b in cluster.brokers.values()]
    with SimpleConsumer(uris, refresh_leader_backoff_ms=100) as consumer:
        for p in range(partitions):
            rows += [(topic, -1, p, o, n, v) for o, n, v in
                     consumer.messages(topic, p, 0, stop_at_end=True)]
    return sorted(rows)


def test_a_replicated_topic_written_and_read_through_zookeeper(spark, cluster):
    """Its global partitions, each from its leader (broker -1), also after the leader of
    one moved away (its broker stopped, then back)."""
    topic = "rep"
    create_replicated(cluster, topic, 2)
    rows = [(f"k{i % 7}", f"value {i}") for i in range(60)]
    df = spark.createDataFrame(rows, "key string, value string").repartition(2)
    (df.write.format("hostbroker").mode("append").option("zookeeper.connect", cluster.connect)
     .option("topic", topic).option("acks", "-1").save())
    want = replicated_rows(cluster, topic, 2)
    assert sorted(r[5] for r in want) == sorted(v.encode() for _, v in rows)
    assert {r[2] for r in want} == {0, 1}

    got = read(spark, cluster, subscribe=topic)
    assert got.rdd.getNumPartitions() == 2  # one Spark partition per global partition
    assert rows_of(got) == want
    on_1 = [r for r in want if r[2] == 1]
    start = on_1[3][3]
    ranged = read(spark, cluster, assign=json.dumps({topic: ["-1-1"]}),
                  startingOffsets=json.dumps({topic: {"-1-1": start}}))
    assert rows_of(ranged) == on_1[3:]

    # the leader of partition 0 stops (it hands its leaderships over): read from the other
    leader = replicated_state(cluster, topic, 0)["leader"]
    cluster.remove(leader)
    try:
        wait_until(lambda: replicated_state(cluster, topic, 0)["leader"] not in (leader, -1),
                   30)
        wait_until(lambda: replicated_rows(cluster, topic, 2) == want, 30)
        assert rows_of(read(spark, cluster, subscribe=topic)) == want
    finally:
        cluster.add(leader)


def test_a_stream_keeps_replicated_partitions_while_no_broker_names_their_leaders():
    """A stream's planner of replicated topics, no live broker answering METADATA: it
    raises (the ClusterPlanner then takes every replicated partition for away and keeps
    its offset), never answers "no partitions" (which reads as a deleted topic); a batch
    read fails with one line."""
    from hostbroker.spark.cluster import ReplicatedPlanner
    from hostbroker.spark.options import read_options
    from hostbroker.spark.planning import PlanningError

    nowhere = f"tcp://127.0.0.1:{free_port()}"
    opts = read_options({"bootstrap": nowhere, "subscribe": "r"}, streaming=True)
    with ReplicatedPlanner(opts) as planner:
        with pytest.raises(OSError):
            planner.partitions(must_exist=False)
        with pytest.raises(PlanningError, match="no live broker of .* names its leaders"):
            planner.partitions(must_exist=True)


def test_a_stream_of_a_replicated_topic_goes_on_across_a_leader_change(spark, cluster,
                                                                      tmp_path):
    """A running stream of a 2-partition RF 2 topic: the leader of partition 0 is
    SIGKILLed while acks=-1 sends go on, the other replica leads, and the sink ends with every acknowledged message once per
    offset; a restart from the checkpoint then takes only what is new."""

    topic = "rs"
    out, checkpoint = tmp_path / "out", str(tmp_path / "checkpoint")
    create_replicated(cluster, topic, 2)

    def send(tag, n, pause=0.0):
        with Producer(zookeeper_connect=cluster.connect, request_required_acks=-1,
                      retry_backoff_ms=100, message_send_max_retries=150) as producer:
            for i in range(n):
                for p in range(2):
                    producer.send_many(topic, [f"{tag}-{p}-{i}".encode()], partition=p)
                time.sleep(pause)

    def sunk():
        try:
            return sorted(tuple(r) for r in
                          spark.read.parquet(str(out)).select(*COLUMNS).collect())
        except Exception:  # no file written yet
            return []

    def once_each(rows):
        assert len({(r[2], r[3]) for r in rows}) == len(rows)
        return rows

    send("a", 8)
    query = (spark.readStream.format("hostbroker").option("zookeeper.connect", cluster.connect)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("maxBytesPerTrigger", "200").load()
             .writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", checkpoint)
             .trigger(processingTime="200 milliseconds").start())
    leader = None
    try:
        first = replicated_rows(cluster, topic, 2)
        wait_until(lambda: sunk() == first, 60)
        assert len(glob.glob(os.path.join(checkpoint, "commits", "[0-9]*"))) >= 2
        assert sorted(last_offsets(checkpoint)[topic]) == ["-1-0", "-1-1"]

        # acks=-1 sends go on while the leader of partition 0 dies and the other leads
        leader = replicated_state(cluster, topic, 0)["leader"]
        failed = []

        def sending():
            try:
                send("b", 30, 0.02)
            except Exception as e:  # seen by the test thread below
                failed.append(e)

        sender = threading.Thread(target=sending)
        sender.start()
        try:
            time.sleep(0.1)
            killed = cluster.brokers.pop(leader)
            killed.kill_tree()
            killed.remove_leftovers()
            wait_until(lambda: replicated_state(cluster, topic, 0)["leader"]
                       not in (leader, -1), 30)
        finally:
            sender.join(60)
        assert not failed and not sender.is_alive()
        second = replicated_rows(cluster, topic, 2)
        # every acknowledged message; a send the killed leader took but never answered
        # is sent again (at least once), so a message may be there twice
        sent = {f"b-{p}-{i}".encode() for p in range(2) for i in range(30)}
        assert sent <= {r[5] for r in second} and len(second) >= len(first) + 60
        wait_until(lambda: once_each(sunk()) == second, 60)
        assert query.exception() is None
    finally:
        query.stop()
        if leader is not None and leader not in cluster.brokers:
            cluster.add(leader)
    # restarted from its checkpoint (the killed broker back as a follower): only what is new
    wait_until(lambda: len(replicated_state(cluster, topic, 0)["isr"]) == 2, 30)
    send("c", 5)
    third = replicated_rows(cluster, topic, 2)
    assert once_each(stream_once(spark, cluster, out, checkpoint, subscribe=topic)) == third
    assert [r[3] for r in third if r[2] == 0][-1] < last_offsets(checkpoint)[topic]["-1-0"]


def test_a_range_read_goes_on_when_its_leader_is_killed(cluster):
    """A task's range of a replicated partition whose leader is SIGKILLed as the read
    starts: ZooKeeper still names the dead broker until its session ends, its socket
    refuses, and the read looks the leader up again (refresh.leader.*) until the other
    replica leads, then reads the whole range from it. With too few lookups allowed it
    fails with one line naming the partition."""
    from hostbroker.spark.arrow import LeaderLostError, read_range
    from hostbroker.spark.planning import Range

    topic = "rk"
    create_replicated(cluster, topic, 1)
    with Producer(zookeeper_connect=cluster.connect, request_required_acks=-1) as producer:
        producer.send_many(topic, [f"k-{i}".encode() * 20 for i in range(200)], partition=0)
    want = replicated_rows(cluster, topic, 1)
    assert len(want) == 200
    with SimpleConsumer([b.unix for b in cluster.brokers.values()]) as consumer:
        assert consumer.leader_log_end(topic, 0, want[-1][4]) == want[-1][4]
    rng = Range(tuple(b.unix for b in cluster.brokers.values()), topic, 0, 0, want[-1][4])
    leader = replicated_state(cluster, topic, 0)["leader"]
    killed = cluster.brokers.pop(leader)
    killed.kill_tree()
    try:
        few = {"refresh.leader.backoff.ms": 10, "refresh.leader.max.retries": 2}
        with pytest.raises(LeaderLostError, match=r"^rk/0: no leader answered in 3 tries"):
            list(read_range(rng, few, True))
        client = {"fetch.size": 1024, "refresh.leader.backoff.ms": 100,
                  "refresh.leader.max.retries": 300}
        got = [row for batch in read_range(rng, client, True)
               for row in zip(*batch.to_pydict().values())]
        assert sorted((t, -1, p, o, n, v) for t, p, o, n, v in got) == want
    finally:
        wait_until(lambda: cluster.zk.exists(paths.broker_path(leader)) is None, 30)
        cluster.add(leader)
        wait_until(lambda: len(replicated_state(cluster, topic, 0)["isr"]) == 2, 30)


def test_a_high_watermark_below_the_streams_offset_after_a_failover_is_not_data_loss():
    """A new leader's high watermark starts at what it knew of its followers and may be
    below a stream's next offset: up to the leader's log end that offset stands (nothing
    planned for the partition yet); past the log end it is data loss, as before."""
    from hostbroker.spark.options import read_options
    from hostbroker.spark.planning import DataLossError, PartitionState, Planner

    opts = read_options({"bootstrap": f"tcp://127.0.0.1:{free_port()}", "subscribe": "r"},
                        streaming=True)
    state = PartitionState("r", 0, 0, 100, 0, None, leader_end=150)
    with Planner(opts) as planner:
        assert planner.check_start(state, 120) == 120
        assert planner.check_start(state, 150) == 150
        with pytest.raises(DataLossError, match="offset 151 is past the log end 100"):
            planner.check_start(state, 151)
        with pytest.raises(DataLossError, match="past the log end"):
            planner.check_start(PartitionState("r", 0, 0, 100, 0), 120)
