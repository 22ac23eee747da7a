"""Consumer groups in cluster mode: real ZooKeeper, real brokers, the range rebalance.

Two brokers hold three partitions of ``t`` each (six partitions). Until
brokers register themselves, :func:`register_brokers` writes their nodes the
way the spec says a broker does (one place to swap out later).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time

from hostbroker.client import ConsumerConnector, ConsumerTimeoutError, SimpleClient
from hostbroker.cluster import paths, rebalance
from hostbroker.cluster.membership import PartitionKey
from hostbroker.log.message import encode_message_set
from tests.cluster.e2e_support import owners
from tests.cluster.test_producer_zk import register

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PARTITIONS = 3
FAST = {"auto.offset.reset": "earliest", "consumer.timeout.ms": 200,
        "zookeeper.session.timeout.ms": 2000, "fetch.wait.max.ms": 50}
SETTLE_S = 8.0  # "within a few seconds" of a join or leave, on a busy two-core machine

CONSUMER_SCRIPT = """
import signal, sys, threading
from hostbroker.client import ConsumerConnector, ConsumerTimeoutError

zk, group, topic = sys.argv[1:4]
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
connector = ConsumerConnector(zookeeper_connect=zk, group_id=group, auto_offset_reset="earliest",
                              consumer_timeout_ms=100, auto_commit_interval_ms=200,
                              zookeeper_session_timeout_ms=2000, fetch_wait_max_ms=50)
(stream,) = connector.create_message_streams({topic: 1})[topic]
print("id", connector.cluster.member.consumer_id, flush=True)
while not stop.is_set():
    try:
        m = next(stream)
    except ConsumerTimeoutError:
        continue
    print("m", m.broker_id, m.partition, m.offset, m.value.decode(), flush=True)
connector.shutdown()
print("bye", flush=True)
"""


def wait_until(condition, timeout=SETTLE_S, what="condition"):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def register_brokers(zk, brokers, topics):
    """The nodes brokers register (docs/spec/zookeeper.md): ``brokers`` id -> Broker,
    ``topics`` topic -> partitions on each broker; ephemeral on ``zk``'s session."""
    for broker_id, broker in brokers.items():
        register(zk, broker_id, broker, topics)


def two_brokers(make_broker, tmp_path, zk, topic="t"):
    brokers = {}
    for broker_id in (1, 2):
        root = tmp_path / f"broker-{broker_id}"
        root.mkdir()
        brokers[broker_id] = make_broker(root=root)
        with brokers[broker_id].client() as client:
            client.create_topic(topic, PARTITIONS)
    register_brokers(zk, brokers, {topic: PARTITIONS})
    return brokers


def produce(brokers, topic, per_partition, prefix):
    """``per_partition`` messages "prefix-b-p-i" on every partition; their values."""
    out = []
    for broker_id, broker in brokers.items():
        with broker.client() as client:
            for p in range(PARTITIONS):
                values = [f"{prefix}-{broker_id}-{p}-{i}" for i in range(per_partition)]
                client.produce(topic, p, encode_message_set([v.encode() for v in values]))
                out += values
    return out


def expected_owners(consumer_ids, streams=1):
    pairs = [(b, p) for b in (1, 2) for p in range(PARTITIONS)]
    plan = rebalance.assign_group({"t": pairs}, {c: {"t": streams} for c in consumer_ids})["t"]
    return {paths.partition_name(b, p): f"{c}-{i}" for (c, i), ps in plan.items() for b, p in ps}


class ConsumerProcess:
    """The consumer script in a process of its own; its printed lines collected."""

    def __init__(self, script, zk_connect, group, topic="t"):
        env = {**os.environ, "PYTHONPATH": REPO}
        self.proc = subprocess.Popen([sys.executable, str(script), zk_connect, group, topic],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, text=True, env=env, cwd=REPO)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        wait_until(lambda: self.consumer_id is not None or self.proc.poll() is not None,
                   30, "the consumer to start")
        assert self.consumer_id is not None, "\n".join(self.lines)

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def consumer_id(self):
        for line in self.lines:
            if line.startswith("id "):
                return line[3:]
        return None

    def values(self):
        return [line.split()[4] for line in list(self.lines) if line.startswith("m ")]

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(30) == 0, "\n".join(self.lines[-20:])
        self.reader.join(10)
        assert self.lines[-1] == "bye", "\n".join(self.lines[-20:])

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def test_three_consumer_processes_join_then_leave_one_at_a_time(zookeeper, zk, make_broker,
                                                                tmp_path):
    brokers = two_brokers(make_broker, tmp_path, zk)
    script = tmp_path / "consume.py"
    script.write_text(CONSUMER_SCRIPT)
    produced: list[str] = []
    stop = threading.Event()

    def producer():
        clients = {b: broker.client() for b, broker in brokers.items()}
        try:
            i = 0
            while not stop.is_set() and i < 5000:  # bounded: about 50 a second
                b, p = divmod(i % (2 * PARTITIONS), PARTITIONS)
                value = f"{i:05d}"
                clients[b + 1].produce("t", p, encode_message_set([value.encode()]))
                produced.append(value)
                i += 1
                stop.wait(0.02)
        finally:
            for client in clients.values():
                client.close()

    thread = threading.Thread(target=producer)
    thread.start()
    live: list[ConsumerProcess] = []
    settle_times = []

    def settled():
        ids = [c.consumer_id for c in live]
        want = expected_owners(ids)
        if not (sorted(zk.get_children(paths.group_ids_path("g"))) == sorted(ids)
                and owners(zk, "g", "t") == want):
            return False
        return True

    def check_after_change():
        started = time.monotonic()
        wait_until(settled, what="every partition owned once by the live consumers")
        settle_times.append(time.monotonic() - started)
        mark = len(produced)
        for consumer in live:  # each live stream consumes what comes after the change
            wait_until(lambda: any(int(v) >= mark for v in consumer.values()),
                       what=f"{consumer.consumer_id} to consume")
        # ... and only from the partitions it owns now.
        for consumer in live:
            mine = {n for n, o in owners(zk, "g", "t").items()
                    if o == f"{consumer.consumer_id}-0"}
            fresh = [f for f in (line.split() for line in list(consumer.lines))
                     if f[0] == "m" and int(f[4]) >= mark]
            assert fresh and {f"{f[1]}-{f[2]}" for f in fresh} <= mine

    everyone: list[ConsumerProcess] = []
    try:
        for _ in range(3):
            consumer = ConsumerProcess(script, zookeeper.connect, "g")
            everyone.append(consumer)
            live.append(consumer)
            check_after_change()
        while len(live) > 1:
            live.pop(0).stop()
            check_after_change()
        stop.set()
        thread.join()
        wait_until(lambda: {v for c in everyone for v in c.values()} >= set(produced),
                   what="the last consumer to catch up")
        last = live.pop()
        last.stop()
    finally:
        stop.set()
        thread.join()
        for consumer in everyone:
            consumer.kill()
    assert owners(zk, "g", "t") == {} and zk.get_children(paths.group_ids_path("g")) == []
    assert max(settle_times) < SETTLE_S

    # What the group committed resumes a new member: with everything consumed
    # by the processes, it finds at most what was handed out after the last
    # commit, and together they saw every message produced.
    seen = {v for consumer in everyone for v in consumer.values()}
    with ConsumerConnector(config={**FAST, "zookeeper.connect": zookeeper.connect,
                                   "group.id": "g"}) as drain:
        (stream,) = drain.create_message_streams({"t": 1})["t"]
        again = take_until_quiet(stream)
    assert again == []  # every process committed all it printed when it left
    assert seen == set(produced) and len(produced) > 50
    offsets = zk.get_children(paths.offsets_path("g", "t"))
    assert sorted(offsets) == sorted(expected_owners(["x"]))


def take_until_quiet(stream):
    out = []
    while True:
        try:
            out.append(next(stream))
        except ConsumerTimeoutError:
            return out


def test_committed_offsets_resume_a_restarted_group(zookeeper, zk, make_broker, tmp_path):
    brokers = two_brokers(make_broker, tmp_path, zk)
    everything = produce(brokers, "t", 10, "a")
    config = {**FAST, "zookeeper.connect": zookeeper.connect, "group.id": "resume",
              "auto.commit.enable": False}
    first = ConsumerConnector(config=config)
    (stream,) = first.create_message_streams({"t": 1})["t"]
    committed_part = [next(stream) for _ in range(25)]
    first.commit_offsets()
    positions = first.positions()
    handed = [next(stream) for _ in range(7)]  # handed out, never committed
    first.shutdown()
    for key, offset in positions.items():
        path = paths.offset_path("resume", key.topic, key.broker_id, key.partition)
        assert zk.get(path)[0] == str(offset).encode()
    assert all(isinstance(k, PartitionKey) for k in positions)
    # Each message's partition is named with its broker.
    assert {(m.broker_id, m.partition) for m in committed_part} <= {
        (b, p) for b in (1, 2) for p in range(PARTITIONS)}

    with ConsumerConnector(config=config) as second:
        (stream,) = second.create_message_streams({"t": 1})["t"]
        rest = take_until_quiet(stream)
    values = [m.value.decode() for m in rest]
    assert sorted(values) == sorted(set(everything) - {m.value.decode() for m in committed_part})
    reread = set(values) & {m.value.decode() for m in committed_part + handed}
    assert reread == {m.value.decode() for m in handed}  # exactly what was not committed


def test_offsets_storage_broker_keeps_each_offset_on_its_broker(zookeeper, zk, make_broker,
                                                                tmp_path):
    brokers = two_brokers(make_broker, tmp_path, zk)
    produce(brokers, "t", 2, "b")
    config = {**FAST, "zookeeper.connect": zookeeper.connect, "group.id": "kept",
              "offsets.storage": "broker"}
    with ConsumerConnector(config=config) as connector:
        (stream,) = connector.create_message_streams({"t": 1})["t"]
        assert len(take_until_quiet(stream)) == 12
        positions = connector.positions()
    assert not zk.exists(paths.offsets_path("kept", "t"))
    from hostbroker.protocol import api
    for broker_id, broker in brokers.items():
        with SimpleClient(broker.unix) as client:
            asked = tuple(api.OffsetFetchPartition("t", p) for p in range(PARTITIONS))
            answer = client.request(api.OffsetFetchRequest("kept", asked))
        got = {r.partition: r.offset for r in answer.partitions}
        assert got == {p: positions[PartitionKey("t", p, broker_id)] for p in range(PARTITIONS)}


class Recorder:
    def __init__(self, zk, group):
        self.zk = zk
        self.group = group
        self.calls = []
        self.consumer_id = None

    def _owned_by_me(self, keys):
        """Whether each key's owner node is ours when the listener runs."""
        return [owners(self.zk, self.group, "t").get(k.name, "").startswith(f"{self.consumer_id}-")
                for k in keys]

    def on_partitions_revoked(self, partitions):
        self.calls.append(("revoked", list(partitions), self._owned_by_me(partitions)))

    def on_partitions_assigned(self, partitions):
        self.calls.append(("assigned", list(partitions), self._owned_by_me(partitions)))


def test_rebalance_listener_calls_in_order(zookeeper, zk, make_broker, tmp_path):
    two_brokers(make_broker, tmp_path, zk)
    config = {**FAST, "zookeeper.connect": zookeeper.connect, "group.id": "ln"}
    every = [PartitionKey("t", p, b) for b in (1, 2) for p in range(PARTITIONS)]
    first, second = Recorder(zk, "ln"), Recorder(zk, "ln")
    a = ConsumerConnector(config=config, rebalance_listener=first)
    first.consumer_id = a.cluster.member.consumer_id
    a.create_message_streams({"t": 1})
    assert first.calls == [("assigned", every, [True] * 6)]
    b = ConsumerConnector(config=config, rebalance_listener=second)
    second.consumer_id = b.cluster.member.consumer_id
    b.create_message_streams({"t": 1})
    a_first = first.consumer_id < second.consumer_id
    b_takes = every[3:] if a_first else every[:3]
    assert second.calls == [("assigned", b_takes, [True] * 3)]
    wait_until(lambda: len(first.calls) == 2, what="the first consumer to give up partitions")
    # Revoked while still owned (state saved before the release), then released.
    assert first.calls[1] == ("revoked", b_takes, [True] * 3)
    b.shutdown()
    assert second.calls[1] == ("revoked", b_takes, [True] * 3)
    wait_until(lambda: len(first.calls) == 3, what="the first consumer to take them back")
    assert first.calls[2] == ("assigned", b_takes, [True] * 3)
    a.shutdown()
    assert first.calls[3:] == [("revoked", every, [True] * 6)]
    assert owners(zk, "ln", "t") == {}


def test_streams_beyond_the_partitions_own_nothing_and_say_so(zookeeper, zk, make_broker,
                                                              tmp_path, caplog):
    brokers = two_brokers(make_broker, tmp_path, zk)
    produce(brokers, "t", 1, "c")
    config = {**FAST, "zookeeper.connect": zookeeper.connect, "group.id": "wide"}
    with caplog.at_level(logging.WARNING, logger="hostbroker.cluster.membership"):
        with ConsumerConnector(config=config) as connector:
            streams = connector.create_message_streams({"t": 8})["t"]
            me = connector.cluster.member.consumer_id
            assert [len(s.partitions) for s in streams] == [1] * 6 + [0, 0]
            assert owners(zk, "wide", "t") == expected_owners([me], streams=8)
            got = {m.value.decode() for s in streams[:6] for m in take_until_quiet(s)}
            assert len(got) == 6
    idle = [r.getMessage() for r in caplog.records if "owns no partition" in r.getMessage()]
    assert idle == [f"consumer group wide: stream {i} of {me} owns no partition of t "
                    f"(6 partitions, 8 streams in the group)" for i in (6, 7)]


def expire_session(zookeeper, client):
    """End ``client``'s session from the server's side, as a long pause past its timeout
    does: another client attaches to the session and closes it."""
    from kazoo.client import KazooClient

    session_id, password = client.client_id
    twin = KazooClient(hosts=zookeeper.connect, client_id=(session_id, password))
    twin.start(timeout=10)
    twin.stop()
    twin.close()


def test_a_consumer_whose_session_expired_registers_again(zookeeper, zk, make_broker, tmp_path):
    brokers = two_brokers(make_broker, tmp_path, zk)
    config = {**FAST, "zookeeper.connect": zookeeper.connect, "group.id": "exp"}
    with ConsumerConnector(config=config) as a, ConsumerConnector(config=config) as b:
        (sa,) = a.create_message_streams({"t": 1})["t"]
        (sb,) = b.create_message_streams({"t": 1})["t"]
        ids = [a.cluster.member.consumer_id, b.cluster.member.consumer_id]
        wait_until(lambda: owners(zk, "exp", "t") == expected_owners(ids), what="settled")
        old_session = a.cluster.client.client_id[0]
        expire_session(zookeeper, a.cluster.client)
        wait_until(lambda: (a.cluster.client.client_id or (old_session,))[0] != old_session
                   and owners(zk, "exp", "t") == expected_owners(ids)
                   and sorted(zk.get_children(paths.group_ids_path("exp"))) == sorted(ids),
                   what="the expired consumer to register and claim again")
        produce(brokers, "t", 1, "after")
        got = {m.value.decode() for s in (sa, sb) for m in take_until_quiet(s)}
        assert {v for v in got if v.startswith("after")} == {
            f"after-{b}-{p}-0" for b in (1, 2) for p in range(PARTITIONS)}


def test_bootstrap_with_zookeeper_connect_is_refused(zookeeper):
    import pytest

    from hostbroker.errors import ConfigError

    with pytest.raises(ConfigError, match="^zookeeper.connect: not together with a bootstrap"):
        ConsumerConnector("tcp://127.0.0.1:9092", zookeeper_connect=zookeeper.connect,
                          group_id="g")


def test_a_topic_filter_registers_the_topics_it_takes_and_follows_new_ones(
        zookeeper, zk, make_broker, tmp_path):
    from hostbroker.client import Whitelist

    brokers = two_brokers(make_broker, tmp_path, zk, topic="feed.a")
    config = {**FAST, "zookeeper.connect": zookeeper.connect, "group.id": "f"}
    with ConsumerConnector(config=config) as connector:
        (stream,) = connector.create_message_streams_by_filter(Whitelist(r"feed\..*"), 1)
        me = connector.cluster.member.consumer_id
        path = paths.consumer_path("f", me)
        assert zk.get(path)[0] == b'{"feed.a":1}'
        for broker in brokers.values():
            with broker.client() as client:
                client.create_topic("feed.b", 1)
                client.create_topic("other", 1)
                for topic in ("feed.b", "other"):  # as the broker registers a new topic
                    zk.create(paths.topic_broker_path(topic, broker_id_of(brokers, broker)),
                              paths.encode_count(1), ephemeral=True, makepath=True)
        wait_until(lambda: zk.get(path)[0] == b'{"feed.a":1,"feed.b":1}'
                   and owners(zk, "f", "feed.b") == {"1-0": f"{me}-0", "2-0": f"{me}-0"},
                   what="the new topic to be registered and owned")
        assert owners(zk, "f", "other") == {}
        for broker_id, broker in brokers.items():
            with broker.client() as client:
                client.produce("feed.b", 0, encode_message_set([f"new-{broker_id}".encode()]))
        got = sorted(m.value.decode() for m in take_until_quiet(stream))
    assert got == ["new-1", "new-2"]


def broker_id_of(brokers, broker):
    """The broker id ``broker`` is registered under."""
    return next(b for b, known in brokers.items() if known is broker)


def test_a_killed_consumer_process_leaves_after_its_session_timeout(zookeeper, zk, make_broker,
                                                                     tmp_path):
    brokers = two_brokers(make_broker, tmp_path, zk)
    script = tmp_path / "consume.py"
    script.write_text(CONSUMER_SCRIPT)
    first = ConsumerProcess(script, zookeeper.connect, "k")
    second = ConsumerProcess(script, zookeeper.connect, "k")
    try:
        both = [first.consumer_id, second.consumer_id]
        wait_until(lambda: owners(zk, "k", "t") == expected_owners(both), what="settled")
        first.kill()  # SIGKILL: nothing released; the session timeout (2 s) ends it
        wait_until(lambda: owners(zk, "k", "t") == expected_owners([second.consumer_id]),
                   timeout=2.0 + SETTLE_S, what="the survivor to own every partition")
        values = produce(brokers, "t", 1, "late")
        wait_until(lambda: set(values) <= set(second.values()), what="the survivor to consume")
        second.stop()
    finally:
        first.kill()
        second.kill()


def test_chunks_queued_before_a_partition_moved_away_are_not_handed_out_when_it_comes_back(
        zookeeper, zk, make_broker, tmp_path):
    brokers = two_brokers(make_broker, tmp_path, zk)
    everything = set()
    for i in range(10):
        everything.update(produce(brokers, "t", 1, f"q{i}"))  # 10 entries on each partition
    config = {**FAST, "zookeeper.connect": zookeeper.connect, "group.id": "back",
              "consumer.timeout.ms": 1000}
    a = ConsumerConnector(config=config)
    try:
        (sa,) = a.create_message_streams({"t": 1})["t"]
        got_a = [next(sa)]
        # The other five partitions' chunks wait in the stream's queue.
        wait_until(lambda: sa.room() <= a.settings["queued.max.message.chunks"] - 5,
                   what="a chunk of every partition queued")
        with ConsumerConnector(config=config) as b:  # takes half of them, reads, commits
            (sb,) = b.create_message_streams({"t": 1})["t"]
            got_b = take_until_quiet(sb)
        me = a.cluster.member.consumer_id
        wait_until(lambda: owners(zk, "back", "t") == expected_owners([me]),
                   what="the partitions to come back")
        got_a += take_until_quiet(sa)
    finally:
        a.shutdown()
    values_a = [m.value.decode() for m in got_a]
    values_b = [m.value.decode() for m in got_b]
    # b read its three partitions but for a message a had taken before it joined.
    assert len(values_b) >= 29 and not set(values_a) & set(values_b)
    assert sorted(values_a + values_b) == sorted(everything)


def test_a_message_held_while_its_partition_moved_away_and_back_commits_nothing_old(
        zookeeper, zk, make_broker, tmp_path):
    brokers = two_brokers(make_broker, tmp_path, zk)
    for i in range(3):
        produce(brokers, "t", 1, f"h{i}")
    config = {**FAST, "zookeeper.connect": zookeeper.connect, "group.id": "held",
              "auto.commit.enable": False, "consumer.timeout.ms": 1000}
    a = ConsumerConnector(config=config)
    b = ConsumerConnector(config=config)
    try:
        (sa,) = a.create_message_streams({"t": 1})["t"]
        ids = [a.cluster.member.consumer_id, b.cluster.member.consumer_id]
        b_half = {n for n, o in expected_owners(ids).items() if o == f"{ids[1]}-0"}
        held = next(sa)
        while f"{held.broker_id}-{held.partition}" not in b_half:
            held = next(sa)
        # b takes the held message's partition, reads it to its end and commits.
        (sb,) = b.create_message_streams({"t": 1})["t"]
        take_until_quiet(sb)
        b.commit_offsets()
        b.shutdown()
        wait_until(lambda: owners(zk, "held", "t") == expected_owners(ids[:1]),
                   what="the partitions to come back")
        path = paths.offset_path("held", "t", held.broker_id, held.partition)
        end = int(zk.get(path)[0])
        assert end > held.next_offset
        a.commit_offsets()  # the held message's old position is not committed ...
        assert int(zk.get(path)[0]) == end
        take_until_quiet(sa)  # ... nor once the reader moves past it
        a.commit_offsets()
        assert int(zk.get(path)[0]) == end
    finally:
        a.shutdown()
        b.shutdown()
