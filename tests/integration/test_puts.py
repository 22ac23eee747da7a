"""Lone PRODUCEs that a processor sends straight to the partition's writer
(PUTs, ``processor.direct.produce``): which go that way, that the writer
answers them exactly as a handler would (bad entries, too large, empty, no
such partition), that a connection's later requests cannot overtake one,
and that a writer that dies with one in hand answers it UNKNOWN.

Tests that only send to their own topic and read process-board counters as
deltas from their own start share a module broker per settings (``served``,
``puts_on``, ``puts_off``); a test that stops or kills a writer, or whose
settings no other test uses, keeps its own (``make_broker``)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.protocol import api
from tests.integration.wire_helpers import (RawSocket, created_topic, module_broker,
                                            produce_request, read_log)

# Shared: each test its own topic, counters read as deltas over the test.
served = module_broker()
puts_on = module_broker(**{"processor.direct.produce": "true"})
puts_off = module_broker(**{"processor.direct.produce": "false"})


def frame(topic: str, data: bytes, correlation_id: int, partition: int = 0) -> bytes:
    return api.encode_request(produce_request(topic, partition, data), correlation_id)


def answer(sock: RawSocket) -> tuple[int, int, int, int]:
    correlation_id, response = sock.read_response(api.ApiKey.PRODUCE)
    [p] = response.partitions
    return correlation_id, p.error_code, p.base_offset, p.log_end_offset


def corrupt(data: bytes) -> bytes:
    """``data`` with one payload byte of its last entry flipped (CRC mismatch)."""
    return data[:-1] + bytes([data[-1] ^ 0xFF])


@pytest.mark.parametrize("puts, busy_max", [(True, None), (True, 0), (False, None)])
def test_who_takes_a_lone_produce(request, make_broker, puts, busy_max):
    if busy_max is None:  # shared with test_a_writer_answers_a_put_as_a_handler_would
        broker = request.getfixturevalue("puts_on" if puts else "puts_off")
    else:  # settings of its own
        broker = make_broker(**{"processor.direct.produce": str(puts).lower(),
                                "processor.direct.produce.busy.max.bytes": str(busy_max)})
    topic = created_topic(broker.tcp)
    data = encode_message_set([b"p" * 50] * 3)
    handler_before = broker.counter("handler", "requests")
    writer_before = broker.counter("writer", "requests")
    with RawSocket(broker.tcp) as sock:
        for i in range(25):  # one at a time, the writer back asleep in between
            time.sleep(0.03)
            sock.send(frame(topic, data, i))
            assert answer(sock) == (i, 0, i * len(data), (i + 1) * len(data))
    handler = broker.counter("handler", "requests") - handler_before
    writer = broker.counter("writer", "requests") - writer_before
    assert writer == 25  # the writer answered every one: directly, or for the handler
    if not puts:
        assert handler == 25
    elif busy_max is None:
        assert handler == 0  # small: past the handler whatever the writer was doing
    else:
        # only to a sleeping writer: any that came while it was awake (a flush
        # of its own, or a machine so busy it had not got to sleep) took the handler
        assert handler <= 8, handler


def test_small_lone_produces_from_many_clients_all_go_past_the_handler(served):
    """Four clients producing small sets one at a time, side by side, keep the
    writer busy; under processor.direct.produce.busy.max.bytes each set still
    goes straight to it, and every answer is right."""
    broker = served
    topic = created_topic(broker.tcp)
    data = encode_message_set([b"m" * 100] * 5)
    assert len(frame(topic, data, 0)) <= 4096
    handler_before = broker.counter("handler", "requests")
    writer_before = broker.counter("writer", "requests")
    failures: list[str] = []

    def client(n: int) -> None:
        try:
            with RawSocket(broker.tcp) as sock:
                for i in range(100):
                    sock.send(frame(topic, data, i))
                    correlation_id, code, base, end = answer(sock)
                    if (correlation_id, code) != (i, 0) or end - base != len(data):
                        failures.append(f"client {n}, request {i}: {correlation_id, code, base, end}")
        except Exception as e:  # noqa: BLE001 - reported by the test's thread
            failures.append(f"client {n}: {e!r}")

    threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert failures == []
    assert broker.counter("writer", "requests") - writer_before == 400
    assert broker.counter("handler", "requests") - handler_before == 0
    with broker.client(broker.tcp) as client:
        assert read_log(client, topic, 0, 0, 400 * len(data), max_bytes=1 << 16) == data * 400


def test_large_lone_sets_go_past_the_handler_received_into_the_put_ring(served):
    """Sets of ~300 KiB, one at a time, trickling in: each told a PUT from its
    first bytes, its message set received straight into a put ring record."""
    broker = served
    topic = created_topic(broker.tcp)
    sets = [encode_message_set([bytes([i]) * 10_000] * 30) for i in range(6)]
    before = broker.counter("handler", "requests")
    copied = broker.counter("processor", "bytes_copied")
    sent = 0
    with RawSocket(broker.unix) as sock:
        for i, data in enumerate(sets):
            time.sleep(0.03)  # the writer back asleep
            f = frame(topic, data, i)
            for at in range(0, len(f), 16 * 1024):
                sock.send(f[at:at + 16 * 1024])
                time.sleep(0.002)
            sent += len(f)
            assert answer(sock)[:3] == (i, 0, sum(map(len, sets[:i])))
    assert broker.counter("handler", "requests") - before <= 3
    # gathered and copied into the put ring it would be ~2 copies of each byte;
    # a frame whose first bytes found its writer awake (a busy machine) is
    # gathered: two of six allowed
    assert broker.counter("processor", "bytes_copied") - copied <= 0.4 * sent
    with broker.client(broker.tcp) as client:
        assert read_log(client, topic, 0, 0, sum(map(len, sets)),
                        max_bytes=4 << 20) == b"".join(sets)


def test_a_put_record_half_received_gives_way_to_another_put(make_broker):
    """One processor: a large lone PRODUCE stalls halfway into its put ring
    record; a small lone PRODUCE of another connection for the same writer
    goes first (the half that came moves to its connection's buffer), and
    the large one still lands whole once the rest comes."""
    broker = make_broker(**{"num.processors": 1})
    topic = created_topic(broker.tcp)
    large = encode_message_set([b"L" * 10_000] * 30)
    small = encode_message_set([b"small"])
    f = frame(topic, large, 7)
    half = len(f) // 2
    copied = broker.counter("processor", "bytes_copied")
    writer_requests = broker.counter("writer", "requests")
    with RawSocket(broker.unix) as slow, RawSocket(broker.tcp) as other:
        for at in range(0, half, 16 * 1024):
            slow.send(f[at:min(at + 16 * 1024, half)])
            time.sleep(0.002)
        # a small one goes as a PUT only to a sleeping writer (else through the
        # handler, another ring): tried until one took the large one's place
        sent = 0
        while sent < 10:
            time.sleep(0.05)
            started = time.monotonic()
            other.send(frame(topic, small, sent))
            assert answer(other)[:3] == (sent, 0, sent * len(small))
            assert time.monotonic() - started < 2.0
            sent += 1
            if broker.counter("processor", "bytes_copied") - copied >= half - 4:
                break  # what had come of the large one moved to its buffer
        else:
            pytest.fail("no small PUT went while the large one was half received")
        slow.send(f[half:])
        assert answer(slow)[:3] == (7, 0, sent * len(small))
    assert broker.counter("writer", "requests") - writer_requests == sent + 1
    with broker.client(broker.tcp) as client:
        assert read_log(client, topic, 0, 0, sent * len(small) + len(large),
                        max_bytes=1 << 20) == small * sent + large


@pytest.mark.parametrize("gather_max", [None, 1024 * 1024])
def test_lone_sets_not_told_early_are_gathered_up_to_the_limit(request, make_broker,
                                                               gather_max):
    """A frame whose first 4 KiB do not show where its message set begins (a
    long client id) is gathered and decided whole up to
    ``processor.direct.produce.max.bytes`` (256 KiB by default): a PUT; over
    it, it takes the handler's way."""
    if gather_max is None:  # the default settings: shared
        broker = request.getfixturevalue("served")
    else:  # settings of its own
        broker = make_broker(**{"processor.direct.produce.max.bytes": gather_max})
    topic = created_topic(broker.tcp)
    sets = [encode_message_set([bytes([i]) * 10_000] * 30) for i in range(6)]
    before = broker.counter("handler", "requests")
    with RawSocket(broker.tcp) as sock:
        for i, data in enumerate(sets):
            time.sleep(0.03)  # the writer back asleep
            sock.send(api.encode_request(produce_request(topic, 0, data), i, "c" * 5000))
            assert answer(sock)[:3] == (i, 0, sum(map(len, sets[:i])))
    through_handler = broker.counter("handler", "requests") - before
    if gather_max is None:
        assert through_handler == len(sets)
    else:
        assert through_handler <= 3  # PUTs, but for any that found the writer awake
    with broker.client(broker.tcp) as client:
        assert read_log(client, topic, 0, 0, sum(map(len, sets)),
                        max_bytes=4 << 20) == b"".join(sets)


def test_pipelined_produces_go_through_the_handler(served):
    broker = served
    topic = created_topic(broker.tcp)
    data = encode_message_set([b"q" * 50])
    before = broker.counter("handler", "requests")
    with RawSocket(broker.tcp) as sock:
        sock.send(b"".join(frame(topic, data, i) for i in range(10)))  # in one write
        assert [answer(sock)[:3] for _ in range(10)] == [(i, 0, i * len(data)) for i in range(10)]
    # all but at most the last one came in behind others
    assert broker.counter("handler", "requests") - before >= 9


def test_a_writer_answers_a_put_as_a_handler_would(puts_on, puts_off):
    """The same requests, one at a time, to a broker with PUTs and to one
    without: the same answers, and the connection stays open after errors."""
    got = {}
    for puts, broker in ((True, puts_on), (False, puts_off)):
        topic = created_topic(broker.tcp, partitions=2, configs={"max.message.bytes": "1000"})
        good = encode_message_set([b"g" * 100, b"h" * 200])
        big = encode_message_set([b"b" * 2000])
        # ~280 KiB: received into a put ring record as it comes, then checked
        large = encode_message_set([b"l" * 900] * 300)
        large_big = encode_message_set([b"l" * 900] * 300 + [b"b" * 2000])
        with RawSocket(broker.tcp) as sock:
            answers = []
            for i, (data, partition) in enumerate([
                    (good, 0), (corrupt(good), 0), (big, 1), (b"", 0), (good, 9), (good, 1),
                    (good[:-3], 0), (good, 0), (large, 0), (corrupt(large), 0),
                    (large_big, 0), (large[:-3], 0), (large, 0)]):
                time.sleep(0.01)
                sock.send(frame(topic, data, i, partition))
                answers.append(answer(sock))
            got[puts] = answers
            with broker.client(broker.tcp) as client:
                end = 2 * len(good) + 2 * len(large)
                assert read_log(client, topic, 0, 0, end, max_bytes=1 << 20) == \
                    good * 2 + large * 2
    assert got[True] == got[False]
    codes = [a[1] for a in got[True]]
    assert codes[0] == codes[5] == codes[7] == codes[8] == codes[12] == ErrorCode.NONE
    assert all(codes[i] != 0 for i in (1, 6, 9, 11))  # CRC mismatches, partial entries
    assert codes[2] == codes[10] == ErrorCode.MESSAGE_TOO_LARGE
    assert got[True][3] == (3, 0, len(good), len(good))  # empty: nothing appended
    assert codes[4] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def pipeline_once(broker, sock, topic: str, a: bytes, b: bytes, c: bytes) -> list:
    """Have ``sock``'s connection pipeline: ``a`` (correlation id 1) held as
    a PUT at its stopped writer while ``b`` and ``c`` (2, 3) come behind it
    in one write; the three answers' (correlation id, error, base offset)."""
    writer = broker.workers()["hb-writer-0"]
    time.sleep(0.3)  # the writer asleep: the lone one goes past the handler
    os.kill(writer, signal.SIGSTOP)
    try:
        sock.send(frame(topic, a, 1))
        time.sleep(0.2)
        sock.send(frame(topic, b, 2) + frame(topic, c, 3))
        time.sleep(0.2)
    finally:
        os.kill(writer, signal.SIGCONT)
    return [answer(sock)[:3] for _ in range(3)]


def test_requests_behind_a_put_wait_for_it(make_broker):
    """A PRODUCE that arrives while the connection's PUT is at its writer is
    read only once the PUT is answered, so it cannot reach the log first
    through the handler; and a connection that sent more while a PUT was out
    pipelines, so it keeps the handler's way (until it waits for each answer
    again: the next test). The writer is stopped meanwhile to hold the PUT."""
    broker = make_broker()
    topic = created_topic(broker.tcp)
    a, b, c = (encode_message_set([bytes([x]) * 40]) for x in b"abc")
    before = broker.counter("handler", "requests")
    with RawSocket(broker.tcp) as sock:
        assert pipeline_once(broker, sock, topic, a, b, c) == [
            (1, 0, 0), (2, 0, len(a)), (3, 0, len(a) + len(b))]
        time.sleep(0.3)
        sock.send(frame(topic, a, 4))  # alone, but this connection pipelines
        assert answer(sock)[:3] == (4, 0, 3 * len(a))
    assert broker.counter("handler", "requests") - before == 3  # b, c and the last
    with broker.client(broker.tcp) as client:
        assert read_log(client, topic, 0, 0, 4 * len(a)) == a + b + c + a


@pytest.mark.parametrize("lone_after, entries", [(3, 1), (3, 100), (0, 1)])
def test_a_connection_that_waits_again_goes_past_the_handler_again(make_broker, lone_after,
                                                                   entries):
    """After it pipelined, a connection's requests take the handler's way
    until ``processor.direct.lone.after`` of them in a row came with nothing
    else of it in flight; a pair sent together starts the count again; 0
    keeps the handler's way for good. Small frames, and large ones (~90 KiB,
    received into their ring records as they come)."""
    broker = make_broker(**{"processor.direct.lone.after": str(lone_after)})
    topic = created_topic(broker.tcp)
    data = encode_message_set([b"r" * 900] * entries)
    ways = []  # per request or pair: through the handler (True) or past it

    with RawSocket(broker.tcp) as sock:
        assert [x[:2] for x in pipeline_once(broker, sock, topic, data, data, data)] == [
            (1, 0), (2, 0), (3, 0)]
        correlation_id = 4

        def send(pair: bool = False) -> None:
            nonlocal correlation_id
            ids = [correlation_id, correlation_id + 1] if pair else [correlation_id]
            correlation_id += len(ids)
            time.sleep(0.05)  # the writer asleep: a large one may go past the handler
            before = broker.counter("handler", "requests")
            frames = [frame(topic, data, i) for i in ids]
            if pair:  # the first one's last byte comes with the second: read behind it
                sock.send(frames[0][:-1])
                time.sleep(0.1)
                frames[0] = frames[0][-1:]
            sock.send(b"".join(frames))
            assert [answer(sock)[:2] for _ in ids] == [(i, 0) for i in ids]
            ways.append(broker.counter("handler", "requests") - before == len(ids))

        for _ in range(2):
            send()
        send(pair=True)  # not alone: the count starts again
        for _ in range(5):
            send()
    if lone_after:
        assert ways == [True, True, True, True, True, True, False, False]
    else:
        assert all(ways)
    with broker.client(broker.tcp) as client:
        assert read_log(client, topic, 0, 0, 12 * len(data), max_bytes=2 << 20) == data * 12


def test_a_put_its_writer_never_answered_is_answered_unknown(make_broker):
    broker = make_broker()
    topic = created_topic(broker.tcp)
    data = encode_message_set([b"w" * 40])
    writer = broker.workers()["hb-writer-0"]
    with RawSocket(broker.tcp, timeout=30) as sock:
        sock.send(frame(topic, data, 1))
        assert answer(sock) == (1, 0, 0, len(data))
        time.sleep(0.3)  # asleep again
        os.kill(writer, signal.SIGSTOP)  # holds the next PUT unread, then dies with it
        sock.send(frame(topic, data, 2))
        time.sleep(0.3)
        os.kill(writer, signal.SIGKILL)
        broker.wait_worker_replaced("hb-writer-0", writer)
        assert answer(sock) == (2, ErrorCode.UNKNOWN, -1, -1)
        # the connection goes on, with the replacement
        sock.send(frame(topic, data, 3))
        assert answer(sock) == (3, 0, len(data), 2 * len(data))
