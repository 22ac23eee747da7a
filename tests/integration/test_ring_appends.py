"""Large message sets appended by the writer straight from the request ring
(``produce.ring.append.min.bytes``): which sets take that way, that the log
gets exactly the bytes sent while held ring space wraps around many times,
that a handler killed while writers append from its ring leaves every
answered set intact and no torn bytes in the log, and that a writer killed
meanwhile leaves no ring space held."""

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

# 1 MiB rings (a record holds up to 256 KiB): a few held sets fill one. No
# PUTs: a lone frame would go past the handler (test_puts.py), not counted here.
served = module_broker(ring_bytes=1024 * 1024, **{"produce.ring.append.min.bytes": 32 * 1024,
                                                  "processor.direct.produce": "false"})


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


def test_large_sets_are_appended_from_the_ring_and_land_intact(served, uri):
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


def test_small_sets_are_copied_and_large_ones_go_from_the_ring_whatever_the_acks(served, uri):
    topic = created_topic(uri)
    small = entries(2, 1)  # 20 KiB: under the 32 KiB setting
    large = entries(8, 2)
    before = served.counter("writer", "ring_appends")
    with RawSocket(uri) as sock:
        # acks=-1 sets wait for their flush, acks=0 sets get no answer: neither
        # may keep the ring space they came in (16 of them fill the 1 MiB ring)
        sock.send(frame(topic, small, 1) + b"".join(
            frame(topic, large, 2 + i, acks=(-1, 0, 1)[i % 3]) for i in range(48)))
        got = answers(sock, 33)  # acks=0 is not answered
    assert [(c, e) for c, e, _ in got] == [(1, 0)] + [(2 + i, 0) for i in range(48) if i % 3 != 1]
    assert served.counter("writer", "ring_appends") - before == 48
    assert whole_log(uri, topic) == small + large * 48


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


class Producers:
    """Three connections pipelining rounds of 8 large sets (20-70 KiB) until
    stopped (at most 300 rounds each, 30 s in all), reconnecting when the
    broker closes them; keeps (base offset, set) of every set answered
    without error."""

    def __init__(self, uri_: str, topic: str, pause: float = 0.0):
        self.uri, self.topic, self.pause = uri_, topic, pause
        self.acked: list[tuple[int, bytes]] = []
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.deadline = time.monotonic() + 30
        self.threads = [threading.Thread(target=self._run, args=(t,)) for t in range(3)]
        for t in self.threads:
            t.start()

    def _going(self, n: int) -> bool:
        return not self.done.is_set() and n < 2400 and time.monotonic() < self.deadline

    def _run(self, tag: int) -> None:
        n = 0
        while self._going(n):
            try:
                with RawSocket(self.uri) as sock:
                    while self._going(n):
                        sets = [entries(2 + (n + k) % 6, (tag * 40 + n + k) % 256)
                                for k in range(8)]
                        n += 8
                        time.sleep(self.pause)
                        sock.send(b"".join(frame(self.topic, s, k) for k, s in enumerate(sets)))
                        for (_, error, base), s in zip(answers(sock, len(sets)), sets):
                            if error == 0:
                                with self.lock:
                                    self.acked.append((base, s))
            except (OSError, EOFError, ConnectionError):
                time.sleep(0.05)  # the connection went with a worker: again

    def stop(self) -> list[tuple[int, bytes]]:
        self.done.set()
        for t in self.threads:
            t.join(30)
        assert not any(t.is_alive() for t in self.threads)
        return self.acked


def kill_and_wait(broker: Broker, name: str) -> None:
    pid = broker.workers()[name]
    os.kill(pid, signal.SIGKILL)
    broker.wait_worker_replaced(name, pid)


def assert_log_holds(uri_: str, topic: str, acked: list[tuple[int, bytes]]) -> bytes:
    """Every entry of the log passes its CRC check (no torn bytes) and every
    acked set is at its offset, byte for byte; returns the log."""
    log = whole_log(uri_, topic)
    assert validate_message_set(log, 1 << 30) > 0
    for base, s in acked:
        assert log[base:base + len(s)] == s
    return log


def test_a_handler_killed_while_writers_append_from_its_ring_tears_nothing(tmp_path):
    """Producers pipeline large sets while the handler is killed twice. Every
    set answered without error is in the log at its answered offset, byte for
    byte; every entry of the log passes its CRC check; the broker serves on."""
    broker = Broker(tmp_path, ring_bytes=1024 * 1024,
                    **{"produce.ring.append.min.bytes": 16 * 1024}).start()
    try:
        topic = created_topic(broker.tcp)
        producers = Producers(broker.tcp, topic, pause=0.02)
        for _ in range(2):
            time.sleep(1.5)
            kill_and_wait(broker, "hb-handler-0")
        time.sleep(0.5)
        acked = producers.stop()
        assert len(acked) > 50
        log = assert_log_holds(broker.tcp, topic, acked)
        # and it serves on
        with RawSocket(broker.tcp) as sock:
            sock.send(frame(topic, entries(4, 7), 1))
            assert answers(sock, 1) == [(1, 0, len(log))]
    finally:
        stop_or_kill(broker)


def test_a_writer_killed_while_appending_from_the_ring_leaves_no_space_held(tmp_path):
    """Sets held for a writer that dies are freed (the handler's mark comes back
    through the replacement): afterwards many times the ring's size goes
    through it, and every set answered without error is in the log intact.
    One processor and one handler: one request ring, which a leak would stop."""
    broker = Broker(tmp_path, ring_bytes=1024 * 1024, num_processors=1, num_handlers=1,
                    **{"produce.ring.append.min.bytes": 16 * 1024}).start()
    try:
        topic = created_topic(broker.tcp)
        producers = Producers(broker.tcp, topic)
        time.sleep(1.0)
        kill_and_wait(broker, "hb-writer-0")
        time.sleep(0.5)
        acked = producers.stop()
        # 24 MiB through the ring: none of it may stay held
        for _ in range(3):
            with RawSocket(broker.tcp, timeout=20) as sock:
                sets = [entries(8, i) for i in range(100)]
                sock.send(b"".join(frame(topic, s, i) for i, s in enumerate(sets)))
                got = answers(sock, len(sets))
                assert [e for _, e, _ in got] == [0] * len(sets)
                acked += [(base, s) for (_, _, base), s in zip(got, sets)]
        assert_log_holds(broker.tcp, topic, acked)
    finally:
        stop_or_kill(broker)
