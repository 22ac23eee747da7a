"""PRODUCE v1 and FETCH v2 (the versions that carry a throttle time,
docs/security.md "Quotas") take the ways past the handler that version 0
takes when their connection's principal has no quota: a lone PRODUCE put
straight to its writer (small, and large received into the put ring), a
FETCH answered or parked in the processor. Their answers are in their own
version's layout with a throttle time of 0. A connection with a quota sends
them to the handler, which is how they get their real throttle time
(tests/quota holds those times).

The tests of the default settings share one broker (``served``), those of
``processor.fetch.max.partitions`` 3 another (``served_3``): each works on a
topic of its own and reads the counters relative to its start. The test that
SIGSTOPs and kills a writer, and the two with a quota on ``User:ANONYMOUS``
(every TCP client's principal), keep their own broker."""

from __future__ import annotations

import os
import signal
import time

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.protocol import api, throttled
from hostbroker.security.quota import Quota, QuotaSet
from hostbroker.security.store import write_quotas
from tests.integration.wire_helpers import (
    RawSocket,
    created_topic,
    module_broker,
    produce_request,
    read_log,
    wait_for,
    waiting,
)

PRODUCES = {0: api.ProduceRequest, 1: throttled.ProduceRequestV1}
FETCHES = {0: api.FetchRequest, 2: throttled.FetchRequestV2}

served = module_broker()  # the default settings, for the tests that neither stop nor meter it
served_3 = module_broker(**{"processor.fetch.max.partitions": 3})


def produce_frame(version: int, topic: str, data: bytes, correlation_id: int,
                  partition: int = 0) -> bytes:
    v0 = produce_request(topic, partition, data)
    return api.encode_request(PRODUCES[version](v0.acks, v0.timeout_ms, v0.partitions),
                              correlation_id)


def produced(sock: RawSocket, version: int) -> tuple:
    """(correlation id, error, base offset, log end, throttle time or None) of
    a one-partition PRODUCE's answer, read in ``version``'s layout."""
    frame = sock.read_frame()
    if version == 0:
        correlation_id, response = api.decode_response(api.ApiKey.PRODUCE, frame)
        throttle = None
    else:
        correlation_id, response = throttled.decode_response(frame, throttled.ProduceResponseV1)
        throttle = response.throttle_time_ms
    [p] = response.partitions
    return correlation_id, p.error_code, p.base_offset, p.log_end_offset, throttle


def fetch_frame(version: int, topic: str, partitions, correlation_id: int, offset: int = 0,
                max_wait_ms: int = 0, min_bytes: int = 1) -> bytes:
    return api.encode_request(FETCHES[version](max_wait_ms, min_bytes, tuple(
        api.FetchPartition(topic, p, offset, 1 << 20) for p in partitions)), correlation_id)


def fetched(sock: RawSocket, version: int) -> tuple:
    """(correlation id, [(error, message set)], throttle time or None) of a
    FETCH answer in ``version``'s layout."""
    frame = sock.read_frame()
    if version == 0:
        correlation_id, response = api.decode_response(api.ApiKey.FETCH, frame)
        throttle = None
    else:
        correlation_id, response = throttled.decode_response(frame, throttled.FetchResponseV2)
        throttle = response.throttle_time_ms
    sets = [(p.error_code, bytes(p.message_set)) for p in response.partitions]
    return correlation_id, sets, throttle


def no_throttle(version: int):
    return None if version == 0 else 0


@pytest.mark.parametrize("version", [0, 1])
def test_a_lone_produce_goes_to_its_writer_past_the_handler(served, version):
    broker = served
    topic = created_topic(broker.tcp)
    data = encode_message_set([b"p" * 100] * 3)
    handler_before = broker.counter("handler", "requests")
    writer_before = broker.counter("writer", "requests")
    with RawSocket(broker.tcp) as sock:
        for i in range(20):  # one at a time, as a sync producer sends
            sock.send(produce_frame(version, topic, data, i))
            assert produced(sock, version) == (i, 0, i * len(data), (i + 1) * len(data),
                                               no_throttle(version))
    assert broker.counter("handler", "requests") - handler_before == 0
    assert broker.counter("writer", "requests") - writer_before == 20
    with broker.client(broker.tcp) as client:
        assert read_log(client, topic, 0, 0, 20 * len(data)) == data * 20


@pytest.mark.parametrize("version", [0, 1])
def test_a_large_lone_produce_is_received_into_the_put_ring(served, version):
    """Sets of ~300 KiB trickling in: told a PUT from their first bytes (a
    frame whose first bytes found its writer awake on a busy machine goes to
    the handler: one of four allowed)."""
    broker = served
    topic = created_topic(broker.tcp)
    sets = [encode_message_set([bytes([i]) * 10_000] * 30) for i in range(4)]
    before = broker.counter("handler", "requests")
    with RawSocket(broker.unix) as sock:
        for i, data in enumerate(sets):
            time.sleep(0.03)  # the writer back asleep
            f = produce_frame(version, topic, data, i)
            for at in range(0, len(f), 32 * 1024):
                sock.send(f[at:at + 32 * 1024])
                time.sleep(0.002)
            base = sum(map(len, sets[:i]))
            assert produced(sock, version) == (i, 0, base, base + len(data),
                                               no_throttle(version))
    assert broker.counter("handler", "requests") - before <= 1


def test_a_put_of_version_1_its_writer_never_answered_is_answered_unknown_as_version_1(
        make_broker):
    broker = make_broker()
    topic = created_topic(broker.tcp)
    data = encode_message_set([b"w" * 40])
    writer = broker.workers()["hb-writer-0"]
    with RawSocket(broker.tcp, timeout=30) as sock:
        sock.send(produce_frame(1, topic, data, 1))
        assert produced(sock, 1) == (1, 0, 0, len(data), 0)
        time.sleep(0.3)  # asleep again
        os.kill(writer, signal.SIGSTOP)  # holds the next PUT unread, then dies with it
        sock.send(produce_frame(1, topic, data, 2))
        time.sleep(0.3)
        os.kill(writer, signal.SIGKILL)
        broker.wait_worker_replaced("hb-writer-0", writer)
        assert produced(sock, 1) == (2, ErrorCode.UNKNOWN, -1, -1, 0)
        sock.send(produce_frame(1, topic, data, 3))
        assert produced(sock, 1) == (3, 0, len(data), 2 * len(data), 0)


@pytest.mark.parametrize("version", [0, 2])
def test_a_fetch_is_answered_in_the_processor(served_3, version):
    """Of one partition and of several (up to processor.fetch.max.partitions),
    the data sent from its file as version 0's is."""
    broker = served_3
    topic = created_topic(broker.tcp, partitions=3)
    data = encode_message_set([b"one", b"two"])
    with broker.client(broker.tcp) as client:
        client.produce(topic, 0, data)
    handler_before = broker.counter("handler", "requests")
    with RawSocket(broker.tcp) as sock:
        for i in range(10):
            sock.send(fetch_frame(version, topic, [0], i))
            assert fetched(sock, version) == (i, [(0, data)], no_throttle(version))
        sock.send(fetch_frame(version, topic, [0, 1, 2], 10))
        assert fetched(sock, version) == (10, [(0, data), (0, b""), (0, b"")],
                                          no_throttle(version))
        sock.send(fetch_frame(version, topic, [0], 11, offset=len(data)))  # at the end
        assert fetched(sock, version) == (11, [(0, b"")], no_throttle(version))
    assert broker.counter("handler", "requests") - handler_before == 0


@pytest.mark.parametrize("version", [0, 2])
def test_a_long_poll_waits_in_the_processor_and_gets_the_data(served, version):
    broker = served
    topic = created_topic(broker.tcp)
    data = encode_message_set([b"late"])
    with broker.client(broker.tcp) as client:
        handler_before = broker.counter("handler", "requests")
        parked_before = broker.counter("processor", "fetch_parked")  # (a gauge)
        with RawSocket(broker.tcp) as sock:
            sock.send(fetch_frame(version, topic, [0], 7, max_wait_ms=10_000))
            assert wait_for(
                lambda: broker.counter("processor", "fetch_parked") == parked_before + 1)
            assert waiting(sock)
            assert broker.counter("handler", "requests") == handler_before
            client.produce(topic, 0, data)
            assert fetched(sock, version) == (7, [(0, data)], no_throttle(version))
            # and one whose deadline passes: answered empty, in its layout
            sock.send(fetch_frame(version, topic, [0], 8, offset=len(data), max_wait_ms=200))
            assert fetched(sock, version) == (8, [(0, b"")], no_throttle(version))
    # the client's PRODUCE was a PUT: the handler saw nothing of either
    assert broker.counter("handler", "requests") == handler_before


@pytest.mark.parametrize("version", [0, 2])
def test_an_unknown_partition_is_answered_in_its_layout(served, version):
    broker = served
    topic = created_topic(broker.tcp)
    handler_before = broker.counter("handler", "requests")
    with RawSocket(broker.tcp) as sock:
        sock.send(fetch_frame(version, topic, [5], 1))
        assert fetched(sock, version) == (1, [(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, b"")],
                                          no_throttle(version))
    assert broker.counter("handler", "requests") == handler_before


def test_a_connection_with_a_quota_sends_the_throttled_versions_to_the_handler(
        make_broker, tmp_path):
    """A quota far above what the test sends: nothing is held, but v1 and v2
    go to the handler (whose answers the processor's throttle meters), while
    version 0 still takes the ways past it."""
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    write_quotas(str(logs), QuotaSet({"User:ANONYMOUS": Quota(producer_byte_rate=10**9,
                                                              consumer_byte_rate=10**9)}))
    broker = make_broker()
    topic = created_topic(broker.tcp)
    data = encode_message_set([b"q" * 100])
    with RawSocket(broker.tcp) as sock:  # over TCP: User:ANONYMOUS
        before = broker.counter("handler", "requests")
        for i in range(5):
            sock.send(produce_frame(1, topic, data, i))
            assert produced(sock, 1) == (i, 0, i * len(data), (i + 1) * len(data), 0)
            sock.send(fetch_frame(2, topic, [0], 100 + i))
            assert fetched(sock, 2)[0] == 100 + i
        assert broker.counter("handler", "requests") - before == 10
        before = broker.counter("handler", "requests")
        for i in range(5, 10):
            time.sleep(0.03)  # the writer back asleep
            sock.send(produce_frame(0, topic, data, i))
            assert produced(sock, 0)[:2] == (i, 0)
            sock.send(fetch_frame(0, topic, [0], 100 + i))
            assert fetched(sock, 0)[0] == 100 + i
        assert broker.counter("handler", "requests") - before == 0


def test_a_metered_connections_large_produce_v1_is_received_into_its_handlers_ring_record(
        make_broker, tmp_path):
    """A metered connection's PRODUCE v1 is no PUT, which its first bytes
    tell: a large one trickling in is received straight into the record of
    its handler's request ring, not gathered in the connection's buffer
    (up to ``processor.direct.produce.max.bytes``) and copied."""
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    write_quotas(str(logs), QuotaSet({"User:ANONYMOUS": Quota(producer_byte_rate=10**9,
                                                              consumer_byte_rate=10**9)}))
    broker = make_broker(**{"processor.direct.produce.max.bytes": 1 << 20})
    topic = created_topic(broker.tcp)
    sets = [encode_message_set([bytes([i]) * 10_000] * 30) for i in range(3)]
    before = broker.counter("handler", "requests")
    copied = broker.counter("processor", "bytes_copied")
    sent = 0
    with RawSocket(broker.tcp) as sock:  # over TCP: User:ANONYMOUS
        for i, data in enumerate(sets):
            f = produce_frame(1, topic, data, i)
            for at in range(0, len(f), 32 * 1024):
                sock.send(f[at:at + 32 * 1024])
                time.sleep(0.002)
            sent += len(f)
            base = sum(map(len, sets[:i]))
            assert produced(sock, 1) == (i, 0, base, base + len(data), 0)
    assert broker.counter("handler", "requests") - before == 3
    # gathered here first, each byte would be copied once more into the ring
    assert broker.counter("processor", "bytes_copied") - copied <= 0.4 * sent
