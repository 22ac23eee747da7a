"""The network processor under pipelined load: frames that straddle its
receive buffer, written to the socket faster than the broker reads them;
its memory under stalled, large, many and unread connections; fairness
between connections of one handler.

The two straddling tests share a broker (``served``; a topic each, nothing
broker-wide asserted); every other test keeps its own (``make_broker``): it
has settings of its own, or measures the processor's RSS or connection count,
which another test's leftovers would shift, or asserts the exact topic list."""

import socket
import struct
import threading
import time

import pytest

from hostbroker.client.connection import BrokerConnection
from hostbroker.log.message import encode_message_set, iter_messages
from hostbroker.protocol import api
from tests.integration.connection_helpers import MiB, open_connections, processor_rss
from tests.integration.wire_helpers import RawSocket, module_broker, wait_for

served = module_broker()


@pytest.mark.parametrize("kind", ["tcp", "unix"])
def test_pipelined_large_produces_straddling_the_receive_buffer(served, kind):
    broker = served
    uri = getattr(broker, kind)
    topic = f"straddle-{kind}"
    with broker.client(uri) as c:
        c.create_topic(topic, 1)
    # ~110 KB frames of slightly different sizes: never a multiple of the buffer
    sets = [encode_message_set([bytes([i % 251]) * (100 + i % 7)] * 1000) for i in range(48)]
    conn = BrokerConnection(uri, timeout=60).connect()
    correlation_ids = [conn.send(api.ProduceRequest(1, 10000, (api.ProducePartition(topic, 0, s),)))
                       for s in sets]
    offsets = []
    for cid in correlation_ids:
        result = conn.receive(api.ApiKey.PRODUCE).partitions[0]
        assert result.error_code == 0
        offsets.append((result.base_offset, result.log_end_offset))
    conn.close()
    expected, position = [], 0
    for s in sets:
        expected.append((position, position + len(s)))
        position += len(s)
    assert offsets == expected
    with broker.client(uri) as c:
        for s, (base, end) in zip(sets, offsets):
            fetched = c.fetch(topic, 0, base, end - base)
            assert bytes(fetched.message_set) == s
            assert len(list(iter_messages(fetched.message_set, base))) == 1000


# Memory: a connection holds the bytes that came, not what a header claims, and
# gives them back when its frame is done or it goes away.


def _connect(broker) -> socket.socket:
    return socket.create_connection(("127.0.0.1", broker.port), timeout=10)


def _stalled_header(claimed: int, correlation_id: int) -> bytes:
    """14 bytes of a METADATA frame claiming ``claimed`` bytes, the rest never sent."""
    return struct.pack(">ihhih", claimed, api.ApiKey.METADATA, 0, correlation_id, 0)


def _closed_within(sock: socket.socket, timeout: float) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_stalled_frames_pin_no_memory_and_are_closed_at_the_deadline(make_broker):
    broker = make_broker(socket_request_read_timeout_ms=3000)
    before = processor_rss(broker)
    stalled = [_connect(broker) for _ in range(10)]
    try:
        for i, sock in enumerate(stalled):
            sock.sendall(_stalled_header(100 * MiB, i))
        started = time.monotonic()
        time.sleep(1)
        assert processor_rss(broker) - before < 16 * MiB
        with broker.client(broker.tcp) as c:
            assert c.metadata() is not None
        assert not _closed_within(stalled[0], 1.0)  # not before the deadline
        for sock in stalled:
            assert _closed_within(sock, max(0.1, started + 6 - time.monotonic()))
    finally:
        for sock in stalled:
            sock.close()


def test_a_frame_must_be_complete_within_the_deadline(make_broker):
    broker = make_broker(socket_request_read_timeout_ms=1500)
    frame = api.encode_request(api.MetadataRequest(()), 42)
    with RawSocket(broker.tcp) as raw:
        for i in range(len(frame)):  # ~0.5 s for the frame
            raw.send(frame[i:i + 1])
            time.sleep(0.02)
        assert raw.read_response(api.ApiKey.METADATA)[0] == 42
        # a byte now and then keeps no frame alive past its deadline (slowloris)
        started = time.monotonic()
        with pytest.raises((BrokenPipeError, ConnectionResetError)):
            for i in range(len(frame)):
                raw.send(frame[i:i + 1])
                time.sleep(0.25)
        assert 1.4 < time.monotonic() - started < 4.5


def test_memory_returns_after_connections_close(make_broker):
    broker = make_broker()
    with broker.client(broker.tcp) as c:
        c.create_topic("big", 1)
    before = processor_rss(broker)
    # 300 connections, each 200 KiB into a 1 MiB frame: their bytes are held...
    partial = _stalled_header(MiB, 1) + bytes(200 * 1024)
    socks = [_connect(broker) for _ in range(300)]
    try:
        for sock in socks:
            sock.sendall(partial)
        assert wait_for(lambda: processor_rss(broker) - before > 40 * MiB, timeout=20)
    finally:
        for sock in socks:
            sock.close()
    # ...and given back when they close
    assert wait_for(lambda: processor_rss(broker) - before < 12 * MiB, timeout=20), \
        processor_rss(broker) - before
    # A connection does not keep the buffer of its largest frame.
    data = encode_message_set([bytes([i]) * 900_000 for i in range(8)])
    with BrokerConnection(broker.tcp, timeout=60) as conn:
        for _ in range(8):
            response = conn.request(api.ProduceRequest(1, 10000, (
                api.ProducePartition("big", 0, data),)))
            assert response.partitions[0].error_code == 0
        assert wait_for(lambda: processor_rss(broker) - before < 12 * MiB, timeout=20), \
            processor_rss(broker) - before
        assert isinstance(conn.request(api.MetadataRequest(())), api.MetadataResponse)


# Answers count until written; a connection's burst does not hold up others.


def _wide_metadata_broker(make_broker, **settings):
    broker = make_broker(num_handlers=1, **settings)
    with broker.client(broker.tcp) as c:
        for t in range(40):
            c.create_topic(f"wide-{t:02d}-" + "x" * 40, 16)
        width = len(api.encode_request(api.MetadataRequest(()), 0))
        answer = len(c.metadata().topics)
    assert answer == 40 and width < 64
    return broker


def _metadata_latency(broker, seconds: float, busy=lambda: True) -> tuple[float, int]:
    """The slowest of METADATA answers asked for on another connection over
    ``seconds``, or until ``busy()`` says False, and how many came while it
    said True."""
    worst, during = 0.0, 0
    with BrokerConnection(broker.unix, timeout=30) as conn:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and busy():
            t = time.monotonic()
            conn.request(api.MetadataRequest(()))
            worst = max(worst, time.monotonic() - t)
            during += busy()
            time.sleep(0.02)
    return worst, during


def test_a_client_that_never_reads_its_answers_is_bounded(make_broker):
    broker = _wide_metadata_broker(make_broker)
    before = processor_rss(broker)
    count = 2000
    hog = _connect(broker)
    requests = b"".join(api.encode_request(api.MetadataRequest(()), i) for i in range(count))
    hog.settimeout(10)
    try:
        hog.sendall(requests)  # ~200 KB: the kernel takes it whether the broker reads or not
        time.sleep(2)
        grown = processor_rss(broker) - before
        # ~45 KB answers: unbounded, 2,000 of them would be 90 MB
        assert grown < 24 * MiB, grown
        assert _metadata_latency(broker, 2.0)[0] < 2.0
        # nothing was lost on the way: every answer comes, in order
        raw = RawSocket.__new__(RawSocket)
        raw.sock = hog
        assert [raw.read_response(api.ApiKey.METADATA)[0] for _ in range(count)] == \
            list(range(count))
    finally:
        hog.close()


def test_a_burst_on_one_connection_does_not_hold_up_another(make_broker):
    broker = _wide_metadata_broker(make_broker)
    count = 1500
    hog = _connect(broker)
    hog.settimeout(60)
    received = []

    def drain():
        raw = RawSocket.__new__(RawSocket)
        raw.sock = hog
        for _ in range(count):
            received.append(raw.read_response(api.ApiKey.METADATA)[0])

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        hog.sendall(b"".join(api.encode_request(api.MetadataRequest(()), i)
                             for i in range(count)))
        # measured while the burst lasts: how fast the broker gets through it
        # varies with the machine
        worst, during = _metadata_latency(broker, 2.0, busy=lambda: len(received) < count)
        assert worst < 1.0
        assert during >= 3, f"the burst was over after {during} answers on the other connection"
        reader.join(60)
        assert received == list(range(count))
    finally:
        hog.close()
        reader.join(5)


def test_idle_connections_hold_no_buffers(make_broker):
    broker = make_broker()
    before = processor_rss(broker)
    raws = [RawSocket(broker.tcp if i % 2 else broker.unix) for i in range(1000)]
    try:
        for i, raw in enumerate(raws):
            raw.send(api.encode_request(api.MetadataRequest(()), i))
        for i, raw in enumerate(raws):
            assert raw.read_response(api.ApiKey.METADATA)[0] == i
        # a 256 KiB receive buffer each would be 250 MiB
        assert processor_rss(broker) - before < 24 * MiB, processor_rss(broker) - before
    finally:
        for raw in raws:
            raw.sock.close()
    assert wait_for(lambda: open_connections(broker) == 0)
