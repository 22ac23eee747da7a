"""Large message sets appended by the writer straight from the request ring
(``produce.ring.append.min.bytes``): which sets take that way, that the log
gets exactly the bytes sent while held ring space wraps around many times,
and that a handler killed while writers append from its ring leaves every
answered set intact and no torn bytes in the log."""

from __future__ import annotations

import os
import signal
import threading
import time

from hostbroker.client.simple import SimpleClient
from hostbroker.log.message import encode_message_set, validate_message_set
from hostbroker.protocol import api
from tests.integration.broker import Broker
from tests.integration.wire_helpers import (  # noqa: F401 (uri is a fixture)
    RawSocket,
    created_topic,
    log_end,
    module_broker,
    produce_request,
    read_log,
    stop_or_kill,
    uri,
)

# 1 MiB rings (a record holds up to 256 KiB): a few held sets fill one
served = module_broker(ring_bytes=1024 * 1024, **{"produce.ring.append.min.bytes": 32 * 1024})


def entries(count: int, tag: int, size: int = 10 * 1024) -> bytes:
    return encode_message_set([bytes([tag, i % 251]) * ((size - 10) // 2) for i in range(count)])


def frame(topic: str, message_set: bytes, correlation_id: int, acks: int = 1,
          partition: int = 0) -> bytes:
    return api.encode_request(produce_request(topic, partition, message_set, acks=acks),
                              correlation_id)


def answers(sock: RawSocket, count: int) -> list[tuple[int, int, int]]:
    out = []
    for _ in range(count):
        correlation_id, response = sock.read_response(api.ApiKey.PRODUCE)
        for result in response.partitions:
            out.append((correlation_id, result.error_code, result.base_offset))
    return out


def whole_log(uri_: str, topic: str, partition: int = 0) -> bytes:
    with SimpleClient(uri_) as client:
        end = log_end(client, topic, partition)
        return read_log(client, topic, partition, 0, end, max_bytes=2 * 1024 * 1024)


def test_large_acks1_sets_are_appended_from_the_ring_and_land_intact(served, uri):
    topic = created_topic(uri)
    sets = [entries(6 + i % 12, i) for i in range(40)]  # 60-180 KiB: the ring wraps ~5 times
    before = served.counter("writer", "ring_appends")
    with RawSocket(uri) as sock:
        sock.send(b"".join(frame(topic, s, i) for i, s in enumerate(sets)))
        got = answers(sock, len(sets))
    bases = [sum(map(len, sets[:i])) for i in range(len(sets))]
    assert got == [(i, 0, bases[i]) for i in range(len(sets))]
    assert served.counter("writer", "ring_appends") - before == len(sets)
    assert whole_log(uri, topic) == b"".join(sets)


def test_small_sets_and_other_acks_are_copied(served, uri):
    topic = created_topic(uri)
    small = entries(2, 1)  # 20 KiB: under the 32 KiB setting
    large = entries(8, 2)
    before = served.counter("writer", "ring_appends")
    with RawSocket(uri) as sock:
        sock.send(frame(topic, small, 1) + frame(topic, large, 2, acks=-1)
                  + frame(topic, large, 3, acks=0) + frame(topic, large, 4))
        got = answers(sock, 3)  # acks=0 is not answered
    assert [(c, e) for c, e, _ in got] == [(1, 0), (2, 0), (4, 0)]
    assert served.counter("writer", "ring_appends") - before == 1  # only the last
    assert whole_log(uri, topic) == small + large + large + large


def test_a_multi_partition_produce_appends_each_large_set_from_the_ring(served, uri):
    topic = created_topic(uri, partitions=2)
    a, b = entries(7, 5), entries(9, 6)
    request = api.ProduceRequest(acks=1, timeout_ms=5000, partitions=(
        api.ProducePartition(topic, 0, a), api.ProducePartition(topic, 1, b)))
    before = served.counter("writer", "ring_appends")
    with RawSocket(uri) as sock:
        sock.send(api.encode_request(request, 9) * 3)
        got = answers(sock, 3)
    assert got == [(9, 0, 0), (9, 0, 0), (9, 0, len(a)), (9, 0, len(b)),
                   (9, 0, 2 * len(a)), (9, 0, 2 * len(b))]
    assert served.counter("writer", "ring_appends") - before == 6
    assert whole_log(uri, topic, 0) == a * 3
    assert whole_log(uri, topic, 1) == b * 3


def test_a_handler_killed_while_writers_append_from_its_ring_tears_nothing(tmp_path):
    """Producers pipeline large sets while the handler is killed twice. Every
    set answered without error is in the log at its answered offset, byte for
    byte; every entry of the log passes its CRC check; the broker serves on."""
    broker = Broker(tmp_path, ring_bytes=1024 * 1024,
                    **{"produce.ring.append.min.bytes": 16 * 1024}).start()
    try:
        uri_ = broker.tcp
        topic = created_topic(uri_)
        acked: list[tuple[int, bytes]] = []
        lock = threading.Lock()
        done = threading.Event()  # set once the handler was killed twice
        deadline = time.monotonic() + 30

        def going(n: int) -> bool:
            return not done.is_set() and n < 2400 and time.monotonic() < deadline

        def produce(tag: int) -> None:
            n = 0  # bounded: at most 300 rounds of 8 sets of 20-70 KiB each
            while going(n):
                try:
                    with RawSocket(uri_) as sock:
                        while going(n):
                            sets = [entries(2 + (n + k) % 6, (tag * 40 + n + k) % 256)
                                    for k in range(8)]
                            n += 8
                            time.sleep(0.02)
                            sock.send(b"".join(frame(topic, s, k) for k, s in enumerate(sets)))
                            for (k, error, base), s in zip(answers(sock, len(sets)), sets):
                                if error == 0:
                                    with lock:
                                        acked.append((base, s))
                except (OSError, EOFError, ConnectionError):
                    time.sleep(0.05)  # the connection went with the handler: again

        threads = [threading.Thread(target=produce, args=(t,)) for t in range(3)]
        for t in threads:
            t.start()
        for _ in range(2):
            time.sleep(1.5)
            pid = broker.workers()["hb-handler-0"]
            os.kill(pid, signal.SIGKILL)
            broker.wait_worker_replaced("hb-handler-0", pid)
        time.sleep(0.5)
        done.set()
        for t in threads:
            t.join(30)
        assert not any(t.is_alive() for t in threads)
        assert len(acked) > 50
        log = whole_log(uri_, topic)
        assert validate_message_set(log, 1 << 30) > 0  # every entry's CRC, no torn bytes
        for base, s in acked:
            assert log[base:base + len(s)] == s
        # and it serves on
        with RawSocket(uri_) as sock:
            sock.send(frame(topic, entries(4, 7), 1))
            assert answers(sock, 1) == [(1, 0, len(log))]
    finally:
        stop_or_kill(broker)
