"""The Producer with ``zookeeper.connect``: brokers and partitions found through a real
ZooKeeper, messages read back from real ``hostbroker serve`` brokers.

The brokers here run standalone; :func:`register` writes their ZooKeeper nodes
(the values of docs/spec/zookeeper.md, ephemeral, on the test's own session),
so a broker "leaves" when its nodes are deleted and its processes SIGKILLed.
"""

from __future__ import annotations

import threading
import time
import zlib

import pytest

from hostbroker.client import Producer
from hostbroker.client.errors import DeliveryError
from hostbroker.client.simple import SimpleClient
from hostbroker.cluster import paths
from hostbroker.cluster.zk import ZooKeeperUnavailable
from hostbroker.errors import ConfigError, ErrorCode
from hostbroker.log.message import iter_messages
from tests.cluster.zkserver import free_port
from tests.integration.broker import Broker
from tests.integration.wire_helpers import log_end, new_topic, read_log

FAST = {"zookeeper_session_timeout_ms": 2000, "zookeeper_connection_timeout_ms": 5000}


@pytest.fixture(scope="module")
def trio(tmp_path_factory):
    """Brokers 1, 2 and 3, shared by the tests of this module (none of them is stopped)."""
    brokers = []
    for broker_id in (1, 2, 3):
        root = tmp_path_factory.mktemp(f"b{broker_id}")
        brokers.append(Broker(root, broker_id=broker_id, num_processors=1,
                              num_handlers=1).start())
    yield dict(zip((1, 2, 3), brokers))
    for broker in brokers:
        try:
            broker.stop(timeout=20)
        except Exception:  # noqa: BLE001 - make sure nothing is left
            broker.kill_tree()


def register(zk, broker_id: int, broker: Broker, topics: dict[str, int]) -> None:
    """What a broker registers: /brokers/ids/[id] and /brokers/topics/[topic]/[id]."""
    info = paths.BrokerInfo(broker_id, "127.0.0.1", broker.port, broker.unix_path)
    zk.create(paths.broker_path(broker_id), paths.encode_broker(info), ephemeral=True,
              makepath=True)
    for topic, count in topics.items():
        zk.create(paths.topic_broker_path(topic, broker_id), paths.encode_count(count),
                  ephemeral=True, makepath=True)


def unregister(zk, broker_id: int, topics) -> None:
    for topic in topics:
        zk.delete(paths.topic_broker_path(topic, broker_id))
    zk.delete(paths.broker_path(broker_id))


def create(broker: Broker, topic: str, partitions: int) -> None:
    with SimpleClient(broker.unix) as client:
        client.create_topic(topic, partitions)


def payloads(broker: Broker, topic: str, partition: int) -> list[bytes]:
    with SimpleClient(broker.unix) as client:
        end = log_end(client, topic, partition)
        data = read_log(client, topic, partition, 0, end, max_bytes=1 << 22)
    return [m.payload for m in iter_messages(data, 0)]


def wait_until(condition, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def spread(trio, zk, counts: dict[int, int]) -> tuple[str, list[tuple[int, int]]]:
    """A new topic with ``counts[id]`` partitions on broker id, registered; its sorted pairs."""
    topic = new_topic()
    for broker_id, count in counts.items():
        create(trio[broker_id], topic, count)
        register(zk, broker_id, trio[broker_id], {topic: count})
    return topic, sorted((b, p) for b, c in counts.items() for p in range(c))


def test_keyed_sends_land_on_crc32_modulo_the_sorted_pairs(trio, zk, zookeeper):
    topic, pairs = spread(trio, zk, {3: 2, 1: 2, 2: 1})  # (1,0) (1,1) (2,0) (3,0) (3,1)
    keys = [f"key-{i}" for i in range(40)]
    with Producer(zookeeper_connect=zookeeper.connect, **FAST) as producer:
        placed = [producer.send(topic, k, key=k) for k in keys]
    expected = {pair: [] for pair in pairs}
    for key, md in zip(keys, placed):
        broker_id, partition = pairs[zlib.crc32(key.encode()) % len(pairs)]
        assert md.partition == partition
        expected[(broker_id, partition)].append(key.encode())
    for (broker_id, partition), values in expected.items():
        assert payloads(trio[broker_id], topic, partition) == values


def test_partitions_for_is_the_sorted_pairs_an_explicit_partition_indexes(trio, zk, zookeeper):
    topic, pairs = spread(trio, zk, {2: 1, 1: 2})  # (1,0) (1,1) (2,0)
    with Producer(zookeeper_connect=zookeeper.connect, **FAST) as producer:
        wait_until(lambda: producer.partitions_for(topic) == tuple(pairs), what="the pairs")
        assert producer.partitions_for(new_topic()) == ()
        placed = [producer.send(topic, b"to-%d" % i, partition=i) for i in range(3)]
    assert [md.partition for md in placed] == [0, 1, 0]
    for i, (broker_id, partition) in enumerate(pairs):
        assert payloads(trio[broker_id], topic, partition) == [b"to-%d" % i]
    with Producer(trio[1].unix) as standalone:
        assert standalone.partitions_for(topic) is None


def test_keyless_sends_spread_over_every_pair(trio, zk, zookeeper):
    topic, pairs = spread(trio, zk, {1: 1, 2: 2, 3: 1})
    values = [b"v%04d" % i for i in range(400)]
    with Producer(zookeeper_connect=zookeeper.connect, producer_type="async", batch_size=5,
                  queue_time=10, **FAST) as producer:
        for value in values:
            producer.send(topic, value)
    found = {pair: payloads(trio[pair[0]], topic, pair[1]) for pair in pairs}
    assert all(found.values()), {pair: len(v) for pair, v in found.items()}
    assert sorted(v for vs in found.values() for v in vs) == values


def test_broker_that_leaves_while_sending_loses_no_acknowledged_message(
        trio, zk, zookeeper, make_broker, tmp_path):
    leaving = make_broker(root=tmp_path, broker_id=4, num_processors=1, num_handlers=1)
    topic = new_topic()
    for broker_id, broker in ((1, trio[1]), (3, trio[3]), (4, leaving)):
        create(broker, topic, 2)
        register(zk, broker_id, broker, {topic: 2})
    sent = []
    error = []
    with Producer(zookeeper_connect=zookeeper.connect, producer_type="async", batch_size=20,
                  queue_time=5, retry_backoff_ms=50, message_send_max_retries=5,
                  **FAST) as producer:
        def send_all():
            for i in range(6000):
                value = b"m%06d" % i
                key = None if i % 3 else b"k%d" % (i % 50)
                producer.send(topic, value, key=key)
                sent.append(value)
                if i % 200 == 0:
                    time.sleep(0.01)  # spread over the leave
        sender = threading.Thread(target=send_all)
        sender.start()
        wait_until(lambda: log_end_of(leaving, topic) > 0, what="broker 4 written to")
        unregister(zk, 4, [topic])
        leaving.kill_tree()
        sender.join(60)
        assert not sender.is_alive()
        try:
            producer.flush(60)
        except DeliveryError as exc:
            error.append(exc)
        stats = producer.stats
    failed = {v for exc in error for f in exc.failures for v in f.values}
    assert stats["acknowledged"] + stats["failed"] == len(sent) == 6000
    leaving.start()  # its log survived the kill: read what it acknowledged
    logs = set()
    for broker in (trio[1], trio[3], leaving):
        for partition in (0, 1):
            logs.update(payloads(broker, topic, partition))
    assert set(sent) - failed <= logs
    assert all(f.error is not None for exc in error for f in exc.failures)


def log_end_of(broker: Broker, topic: str) -> int:
    with SimpleClient(broker.unix) as client:
        try:
            return log_end(client, topic, 0) + log_end(client, topic, 1)
        except Exception:  # noqa: BLE001 - not created yet
            return 0


def test_broker_that_joins_gets_messages_within_a_second(trio, zk, zookeeper):
    topic, _ = spread(trio, zk, {1: 1})
    create(trio[2], topic, 1)
    stop = threading.Event()
    with Producer(zookeeper_connect=zookeeper.connect, producer_type="async", batch_size=10,
                  queue_time=5, **FAST) as producer:
        def send_all():
            i = 0
            while not stop.is_set():
                producer.send(topic, b"j%06d" % i)
                i += 1
                if i % 10 == 0:
                    time.sleep(0.002)
        sender = threading.Thread(target=send_all)
        sender.start()
        try:
            wait_until(lambda: log_end_of_partition(trio[1], topic) > 0, what="broker 1")
            register(zk, 2, trio[2], {topic: 1})
            joined = time.monotonic()
            wait_until(lambda: log_end_of_partition(trio[2], topic) > 0, timeout=5,
                       what="broker 2 written to")
            assert time.monotonic() - joined < 1.0
        finally:
            stop.set()
            sender.join(30)


def test_broker_that_leaves_and_comes_back_is_reached_on_a_new_connection(
        trio, zk, zookeeper, make_broker, tmp_path):
    topic, _ = spread(trio, zk, {1: 1})
    returning = make_broker(root=tmp_path, broker_id=4, num_processors=1, num_handlers=1)
    create(returning, topic, 1)
    register(zk, 4, returning, {topic: 1})
    with Producer(zookeeper_connect=zookeeper.connect, **FAST) as producer:
        wait_until(lambda: producer._dispatcher.cluster.snapshot.partitions(topic)
                   == ((1, 0), (4, 0)), what="broker 4 seen")
        producer.send(topic, b"before", partition=1)
        unregister(zk, 4, [topic])
        returning.stop()
        wait_until(lambda: producer._dispatcher.cluster.snapshot.partitions(topic)
                   == ((1, 0),), what="broker 4 gone")
        producer.send(topic, b"meanwhile", partition=0)  # its connection closes here
        returning.start()
        register(zk, 4, returning, {topic: 1})
        wait_until(lambda: producer._dispatcher.cluster.snapshot.partitions(topic)
                   == ((1, 0), (4, 0)), what="broker 4 back")
        producer.send(topic, b"after", partition=1)
        assert producer.stats["retries"] == 0
    assert payloads(returning, topic, 0) == [b"before", b"after"]
    assert payloads(trio[1], topic, 0) == [b"meanwhile"]


def log_end_of_partition(broker: Broker, topic: str) -> int:
    with SimpleClient(broker.unix) as client:
        return log_end(client, topic, 0)


def register_unreachable(zk, topic: str) -> None:
    """Broker 2 with one partition of ``topic``, at a port nothing listens on."""
    gone = paths.BrokerInfo(2, "127.0.0.1", free_port(), None)
    zk.create(paths.broker_path(2), paths.encode_broker(gone), ephemeral=True)
    zk.create(paths.topic_broker_path(topic, 2), b"1", ephemeral=True)


def leave_after_first_failure(producer, zk, topic: str) -> threading.Thread:
    """A thread that unregisters broker 2 once the producer's first attempt failed."""
    def leave():
        wait_until(lambda: producer.stats["retries"] >= 1, what="the first attempt failed")
        unregister(zk, 2, [topic])
    leaver = threading.Thread(target=leave)
    leaver.start()
    return leaver


def test_key_retried_after_its_broker_left_is_hashed_into_the_new_list(trio, zk, zookeeper):
    topic, _ = spread(trio, zk, {1: 1, 3: 1})
    register_unreachable(zk, topic)
    # pairs (1,0) (2,0) (3,0): a key of index 1 goes to broker 2, then to crc32 % 2
    key = next(f"k{i}" for i in range(100) if zlib.crc32(f"k{i}".encode()) % 3 == 1)
    after = (1, 3)[zlib.crc32(key.encode()) % 2]
    with Producer(zookeeper_connect=zookeeper.connect, retry_backoff_ms=3000,
                  request_timeout_ms=2000, **FAST) as producer:
        leaver = leave_after_first_failure(producer, zk, topic)
        md = producer.send(topic, b"moved", key=key)
        leaver.join(10)
        assert producer.stats["retries"] == 1
    assert md.partition == 0
    assert payloads(trio[after], topic, 0) == [b"moved"]


def test_explicit_partition_of_a_broker_that_left_fails_with_its_error(trio, zk, zookeeper):
    topic, _ = spread(trio, zk, {1: 1})
    register_unreachable(zk, topic)
    with Producer(zookeeper_connect=zookeeper.connect, retry_backoff_ms=300,
                  message_send_max_retries=2, **FAST) as producer:
        leaver = leave_after_first_failure(producer, zk, topic)
        with pytest.raises(DeliveryError) as raised:
            producer.send(topic, b"pinned", partition=1)  # (2, 0)
        leaver.join(10)
    (failure,) = raised.value.failures
    assert list(failure.values) == [b"pinned"]
    assert failure.error.code == ErrorCode.BROKER_NOT_AVAILABLE
    assert payloads(trio[1], topic, 0) == []


def test_batch_of_a_key_and_an_explicit_partition_split_when_their_broker_left(
        trio, zk, zookeeper):
    topic, _ = spread(trio, zk, {1: 1, 3: 1})
    register_unreachable(zk, topic)
    key = next(f"k{i}" for i in range(100) if zlib.crc32(f"k{i}".encode()) % 3 == 1)
    after = (1, 3)[zlib.crc32(key.encode()) % 2]
    with Producer(zookeeper_connect=zookeeper.connect, producer_type="async", batch_size=2,
                  queue_time=60_000, retry_backoff_ms=3000, message_send_max_retries=1,
                  request_timeout_ms=2000, **FAST) as producer:
        leaver = leave_after_first_failure(producer, zk, topic)
        producer.send(topic, b"keyed", key=key)  # both to (2, 0): one message set
        producer.send(topic, b"pinned", partition=1)
        with pytest.raises(DeliveryError) as raised:
            producer.flush(30)
        leaver.join(10)
        assert producer.stats["retries"] == 1
    (failure,) = raised.value.failures
    assert list(failure.values) == [b"pinned"]
    assert failure.error.code == ErrorCode.BROKER_NOT_AVAILABLE
    assert payloads(trio[after], topic, 0) == [b"keyed"]
    assert payloads(trio[4 - after], topic, 0) == []


def test_unknown_topic_is_created_on_one_live_broker_then_learned(trio, zk, zookeeper):
    topic = new_topic()
    for broker_id in (1, 2, 3):
        register(zk, broker_id, trio[broker_id], {})
    with Producer(zookeeper_connect=zookeeper.connect, **FAST) as producer:
        first = producer.send(topic, b"first", key="a")
        holders = [b for b in (1, 2, 3) if payloads_or_none(trio[b], topic) == [b"first"]]
        assert first.partition == 0 and len(holders) == 1
        register_topic = threading.Timer(0.2, lambda: zk.create(
            paths.topic_broker_path(topic, holders[0]), b"1", ephemeral=True, makepath=True))
        register_topic.start()
        started = time.monotonic()
        second = producer.send(topic, b"second", key="b")  # waits for the registration
        assert time.monotonic() - started < 3
        register_topic.join()
    assert second.partition == 0
    assert payloads(trio[holders[0]], topic, 0) == [b"first", b"second"]


def payloads_or_none(broker: Broker, topic: str):
    try:
        return payloads(broker, topic, 0)
    except Exception:  # noqa: BLE001 - the broker does not have the topic
        return None


def test_bad_connect_strings_and_broker_lists_are_refused_with_one_line(zookeeper):
    for bad in ("nohost", "127.0.0.1:0", "127.0.0.1:2181/chroot/"):
        with pytest.raises(ConfigError) as raised:
            Producer(zookeeper_connect=bad)
        assert "zookeeper.connect" in str(raised.value) and "\n" not in str(raised.value)
    for extra in ({"bootstrap": "tcp://127.0.0.1:9092"},
                  {"broker_list": "tcp://127.0.0.1:9092"}):
        with pytest.raises(ConfigError) as raised:
            Producer(zookeeper_connect=zookeeper.connect, **extra)
        assert str(raised.value) == ("zookeeper.connect: brokers come from ZooKeeper; give "
                                     "no broker list (bootstrap or broker.list) with it")


def test_no_zookeeper_answering_is_one_line():
    port = free_port()
    started = time.monotonic()
    with pytest.raises(ZooKeeperUnavailable) as raised:
        Producer(zookeeper_connect=f"127.0.0.1:{port}", zookeeper_connection_timeout_ms=500)
    assert time.monotonic() - started < 5
    message = str(raised.value)
    assert "\n" not in message and f"127.0.0.1:{port}" in message and "500 ms" in message


def test_zookeeper_stopped_keeps_the_last_list(trio, zk, zookeeper):
    topic, pairs = spread(trio, zk, {1: 1, 2: 1})
    keys = [f"z{i}" for i in range(20)]
    with Producer(zookeeper_connect=zookeeper.connect, **FAST) as producer:
        zookeeper.stop()
        try:
            placed = [producer.send(topic, k, key=k) for k in keys]
        finally:
            zookeeper.start()
        placed.append(producer.send(topic, b"again", partition=1))
    for key, md in zip(keys, placed):
        broker_id, _ = pairs[zlib.crc32(key.encode()) % 2]
        assert key.encode() in payloads(trio[broker_id], topic, md.partition)
    assert payloads(trio[2], topic, 0)[-1] == b"again"


def test_brokers_that_register_themselves_a_killed_one_is_left_then_used_again(
        make_broker, tmp_path, zookeeper, zk):
    """hb-registrar's own registration: a SIGKILLed broker's keys move once its session
    expires (sends meanwhile wait in their retries), and it is used again after a restart."""
    brokers = {}
    for broker_id in (1, 2, 3):
        root = tmp_path / f"r{broker_id}"
        root.mkdir()
        brokers[broker_id] = make_broker(
            root=root, broker_id=broker_id, zookeeper_connect=zookeeper.connect,
            zookeeper_session_timeout_ms=1000, num_processors=1, num_handlers=1)
    topic = new_topic()
    for broker in brokers.values():
        create(broker, topic, 1)
    wait_until(lambda: all(zk.exists(paths.topic_broker_path(topic, b)) for b in brokers),
               what="the topic registered by every broker")

    def keyed(producer, prefix, live):
        keys = [f"{prefix}{i}" for i in range(30)]
        for key in keys:
            producer.send(topic, key, key=key)
        return {key.encode(): live[zlib.crc32(key.encode()) % len(live)] for key in keys}

    with Producer(zookeeper_connect=zookeeper.connect, retry_backoff_ms=300,
                  message_send_max_retries=20, **FAST) as producer:
        view = producer._dispatcher.cluster
        wait_until(lambda: len(view.snapshot.partitions(topic)) == 3, what="3 pairs")
        expected = keyed(producer, "a", (1, 2, 3))
        brokers[2].kill_tree()
        during = [f"b{i}" for i in range(30)]
        for key in during:  # broker 2's keys wait in their retries until its node goes
            producer.send(topic, key, key=key)
        assert zk.exists(paths.broker_path(2)) is None
        expected.update(keyed(producer, "c", (1, 3)))
        brokers[2].start()
        wait_until(lambda: len(view.snapshot.partitions(topic)) == 3, what="broker 2 back")
        expected.update(keyed(producer, "d", (1, 2, 3)))
        fresh = new_topic()  # auto-created by its first message, registered by its broker
        producer.send(fresh, b"first")
        producer.send(fresh, b"second")  # after waiting for the registration
        assert view.cached(fresh).known
        (ref,) = view.cached(fresh).partitions
        assert payloads(brokers[ref.broker_id], fresh, 0) == [b"first", b"second"]
        assert producer.stats["failed"] == 0
    logs = {b: payloads(broker, topic, 0) for b, broker in brokers.items()}
    for value, broker_id in expected.items():
        assert value in logs[broker_id], (value, broker_id)
    assert {k.encode() for k in during} <= set(logs[1]) | set(logs[3])
    assert not any(v.startswith(b"b") for v in logs[2])
    assert any(v.startswith(b"d") for v in logs[2])
