"""A real broker with an ``ssl://`` listener: requests over TLS, refusals, deadlines.

The tests on the default settings share one module broker (``tls_broker``), with topic
names of their own and log lines looked for only in what the log gained during the test
(its handshake failures, 6 in all, stay under the 10 a minute a processor says); the two
with ``ssl.max.handshakes`` 1 on one processor share another (``one_handshake_broker``).
The tests of other settings, of a start of their own, or that count the whole log's
lines keep their own broker (``make_tls_broker``)."""

from __future__ import annotations

import socket
import ssl
import threading
import time
import warnings

import pytest

from hostbroker.client.connection import BrokerConnection
from hostbroker.client.simple import SimpleClient
from hostbroker.log.message import encode_message_set, iter_messages
from hostbroker.protocol import api
from tests.integration.wire_helpers import new_topic
from tests.tls.conftest import module_tls_broker


# the module's broker on the default settings: its tests change nothing broker-wide
tls_broker = module_tls_broker()
# one handshake step a loop round on one processor, for the two tests of it
one_handshake_broker = module_tls_broker(**{"ssl.max.handshakes": 1, "num.processors": 1})


class LogSince:
    """What a shared broker's log gained since this was made."""

    def __init__(self, broker):
        self.broker = broker
        self.start = len(broker.log())

    def __call__(self) -> str:
        return self.broker.log()[self.start:]


def test_produce_fetch_metadata_offsets_over_tls(tls_broker, certs):
    t = new_topic("t")
    with SimpleClient(tls_broker.ssl, tls=certs.client("alice")) as client:
        client.create_topic(t, 2)
        meta = client.metadata([t])
        assert [x.topic for x in meta.topics] == [t]
        assert len(meta.topics[0].partitions) == 2
        for i in range(20):
            client.produce(t, i % 2, encode_message_set([f"m{i}".encode()]))
        result = client.fetch(t, 0, 0, 1 << 20)
        got = [m.payload for m in iter_messages(result.message_set, 0)]
        assert got == [f"m{i}".encode() for i in range(0, 20, 2)]
        assert client.offsets(t, 1)[0] > 0  # (offsets are byte positions)
    # what went in over TLS is what a plain client reads
    with SimpleClient(tls_broker.unix) as plain:
        result = plain.fetch(t, 1, 0, 1 << 20)
        assert [m.payload for m in iter_messages(result.message_set, 0)] == [
            f"m{i}".encode() for i in range(1, 20, 2)]


def test_large_fetch_is_a_file_piece_written_through_tls(make_tls_broker, certs):
    """With processor.fetch.copy.max.bytes 0 every fetch answer's data is a
    file piece (never copied into memory): sent from the segment file (pread
    + TLS writes), a small one and one of 3 MB (many 256 KiB chunks)."""
    tls_broker = make_tls_broker(**{"processor.fetch.copy.max.bytes": 0})
    big = [bytes([i % 251]) * 50_000 for i in range(60)]  # 3 MB in all
    with SimpleClient(tls_broker.ssl, tls=certs.client("alice")) as client:
        client.create_topic("small", 1)
        client.produce("small", 0, encode_message_set([b"tiny"]))
        result = client.fetch("small", 0, 0, 1 << 20)
        assert [m.payload for m in iter_messages(result.message_set, 0)] == [b"tiny"]
        client.create_topic("big", 1)
        for i in range(0, 60, 20):
            client.produce("big", 0, encode_message_set(big[i:i + 20]))  # 1 MB frames
        result = client.fetch("big", 0, 0, 8 << 20)
        assert [m.payload for m in iter_messages(result.message_set, 0)] == big


def test_pipelined_requests_over_tls(tls_broker, certs):
    pipe = new_topic("pipe")
    conn = BrokerConnection(tls_broker.ssl, tls=certs.client("alice")).connect()
    try:
        SimpleClient(tls_broker.unix).create_topic(pipe, 1)
        for i in range(50):
            conn.send(api.ProduceRequest(1, 5000, (api.ProducePartition(
                pipe, 0, encode_message_set([b"x" * (i * 100)])),)))
        answers = [conn.receive() for _ in range(50)]
        offsets = [a.partitions[0].base_offset for a in answers]
        assert offsets == sorted(offsets) and len(set(offsets)) == 50
        assert all(a.partitions[0].error_code == 0 for a in answers)
    finally:
        conn.close()


def test_plain_tcp_client_at_the_tls_port_is_closed_without_harm(tls_broker, certs):
    log = LogSince(tls_broker)
    with SimpleClient(tls_broker.ssl, tls=certs.client("alice")) as good:
        good.metadata()
        raw = socket.create_connection(("127.0.0.1", tls_broker.ssl_port), timeout=10)
        try:
            raw.sendall(api.encode_request(api.MetadataRequest(()), 1, "plain"))
            data = b""
            try:
                while True:  # no broker answer comes, then the broker closes
                    chunk = raw.recv(4096)
                    if not chunk:
                        break
                    data += chunk
            except ConnectionResetError:  # (closed with the request unread)
                pass
            assert not data.startswith(b"\x00\x00")  # no answer frame (a TLS alert at most)
        finally:
            raw.close()
        good.metadata()  # the TLS client before it goes on
    assert "TLS handshake with 127.0.0.1 failed" in log()


def test_client_certificates_refused(tls_broker, certs):
    since = LogSince(tls_broker)
    for name in ("mallory", "expired"):
        with pytest.raises(OSError):
            with SimpleClient(tls_broker.ssl, tls=certs.client(name), timeout=10) as client:
                client.metadata()  # (under TLS 1.3 the refusal comes after the handshake)
    with pytest.raises(OSError):
        with SimpleClient(tls_broker.ssl, tls=certs.client(None), timeout=10) as client:
            client.metadata()
    # a certificate without a CN is not a principal: refused, said in the log
    with pytest.raises(OSError):
        with SimpleClient(tls_broker.ssl, tls=certs.client("nocn"), timeout=10) as client:
            client.metadata()
    with SimpleClient(tls_broker.ssl, tls=certs.client("alice")) as client:
        client.metadata()
    log = since()
    assert "certificate has expired" in log or "certificate verify failed" in log
    assert "no common name" in log


def test_requested_client_auth_lets_a_client_without_certificate_in(make_tls_broker, certs):
    broker = make_tls_broker(**{"ssl.client.auth": "requested"})
    with SimpleClient(broker.ssl, tls=certs.client(None)) as client:
        client.metadata()
    with pytest.raises(OSError):  # one it shows is still checked
        with SimpleClient(broker.ssl, tls=certs.client("mallory"), timeout=10) as client:
            client.metadata()


def test_tls_1_1_refused(tls_broker, certs):
    log = LogSince(tls_broker)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(certs.ca)
    ctx.load_cert_chain(certs.keystore("alice"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # (TLS 1.1 is, on purpose)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_1
        ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    ctx.set_ciphers("ALL:@SECLEVEL=0")
    with socket.create_connection(("127.0.0.1", tls_broker.ssl_port), timeout=10) as raw:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    # refused by the broker (its ClientHello went out), not by this side's OpenSSL
    deadline = time.monotonic() + 10
    while "unsupported protocol" not in log() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "TLS handshake with 127.0.0.1 failed: unsupported protocol" in log()
    # and TLS 1.2 alone works
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(certs.ca)
    ctx.load_cert_chain(certs.keystore("alice"))
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    with socket.create_connection(("127.0.0.1", tls_broker.ssl_port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            assert tls.version() == "TLSv1.2"


def test_slow_handshake_cut_at_its_deadline(make_tls_broker, certs):
    broker = make_tls_broker(**{"ssl.handshake.timeout.ms": 500, "ssl.max.handshakes": 2})
    # more silent clients than handshake steps a round: every one is cut at its deadline
    silent = [socket.create_connection(("127.0.0.1", broker.ssl_port), timeout=10)
              for _ in range(5)]
    try:
        # half a ClientHello from one of them
        silent[0].sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
        started = time.monotonic()
        for raw in silent:
            raw.settimeout(10)
            assert raw.recv(100) == b""  # closed by the broker
        assert time.monotonic() - started < 5
        # while a client that does its handshake is served
        with SimpleClient(broker.ssl, tls=certs.client("alice")) as client:
            client.metadata()
    finally:
        for raw in silent:
            raw.close()
    assert "not done within ssl.handshake.timeout.ms" in broker.log()


def test_silent_connections_hold_no_handshake_turn(one_handshake_broker, certs):
    """Connections to the TLS port that send nothing (more of them than
    ssl.max.handshakes) cost no handshake step: a real client is served at
    once beside them."""
    broker = one_handshake_broker
    silent = [socket.create_connection(("127.0.0.1", broker.ssl_port), timeout=10)
              for _ in range(20)]
    try:
        time.sleep(0.3)  # all handed to the processor
        took = []
        for _ in range(3):
            started = time.monotonic()
            with BrokerConnection(broker.ssl, tls=certs.client("alice"), timeout=5) as c:
                assert c.request(api.MetadataRequest(())).broker_id == 0
            took.append(time.monotonic() - started)
        assert sorted(took)[1] < 0.5, took
    finally:
        for raw in silent:
            raw.close()


def test_handshakes_beyond_a_rounds_steps_are_served_next_rounds(one_handshake_broker, certs):
    """ssl.max.handshakes 1: one handshake step a loop round; many clients
    handshaking at once are all served (the steps owed wait a round each)."""
    broker = one_handshake_broker
    results: list = []

    def client() -> None:
        try:
            with BrokerConnection(broker.ssl, tls=certs.client("alice"), timeout=20) as c:
                results.append(c.request(api.MetadataRequest(())).broker_id)
        except Exception as e:  # noqa: BLE001 - counted below
            results.append(e)

    threads = [threading.Thread(target=client) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == [0] * 12


def test_hostname_is_checked_by_default(make_tls_broker, tls_broker, certs):
    with SimpleClient(f"ssl://localhost:{tls_broker.ssl_port}", tls=certs.client("alice")) as c:
        c.metadata()  # localhost is in the certificate
    # a broker whose certificate names another host: refused unless identification is off
    # (its own broker, in the test's own directory: the module broker has another)
    elsewhere = make_tls_broker(**{"ssl.keystore.location": certs.keystore("elsewhere")})
    with pytest.raises(OSError, match="certificate"):
        with SimpleClient(elsewhere.ssl, tls=certs.client("alice"), timeout=10) as client:
            client.metadata()
    with SimpleClient(elsewhere.ssl, tls=certs.client(
            "alice", **{"ssl.endpoint.identification.algorithm": ""})) as client:
        client.metadata()


def _raw_tls(broker, certs) -> ssl.SSLSocket:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(certs.ca)
    ctx.load_cert_chain(certs.keystore("alice"))
    raw = socket.create_connection(("127.0.0.1", broker.ssl_port), timeout=10)
    return ctx.wrap_socket(raw, server_hostname="127.0.0.1")


def _read_frame(sock) -> bytes:
    data = b""
    while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
        chunk = sock.recv(65536)
        assert chunk, "the broker closed the connection"
        data += chunk
    return data


def test_bytes_left_inside_tls_are_read_without_a_socket_event(tls_broker, certs):
    """The end of a large frame and a small one in one TLS record: the large
    frame's rest is read to its end only, so the small one stays decrypted
    inside the TLS object, where epoll does not see it, and nothing more comes
    on the socket: it must still be read and answered."""
    mixed = new_topic("mixed")
    with SimpleClient(tls_broker.unix) as plain:
        plain.create_topic(mixed, 1)
    large = api.encode_request(api.ProduceRequest(1, 5000, (api.ProducePartition(
        mixed, 0, encode_message_set([b"L" * 100_000])),)), 1, "raw")
    small = api.encode_request(api.MetadataRequest((mixed,)), 2, "raw")
    with _raw_tls(tls_broker, certs) as tls:
        tls.sendall(large[:70_000])
        time.sleep(0.3)  # read by the processor: the rest is read to the frame's end
        tls.sendall(large[70_000:] + small)  # (one buffer: its last record holds both)
        tls.settimeout(10)
        first = _read_frame(tls)
        assert int.from_bytes(first[4:8], "big") == 1
        rest = first[4 + int.from_bytes(first[:4], "big"):]
        second = rest if len(rest) >= 8 else _read_frame(tls)
        assert int.from_bytes(second[4:8], "big") == 2


def test_error_frame_then_close_over_tls(tls_broker, certs):
    """A frame over socket.request.max.bytes: REQUEST_TOO_LARGE through TLS,
    then the end of the stream (the linger's shutdown goes through TLS too)."""
    with _raw_tls(tls_broker, certs) as tls:
        tls.sendall((200 << 20).to_bytes(4, "big") + b"\x00\x00\x00\x00\x00\x00\x00\x07")
        tls.settimeout(10)
        frame = _read_frame(tls)
        assert frame[:4] == (6).to_bytes(4, "big")
        assert int.from_bytes(frame[4:8], "big") == 7
        assert int.from_bytes(frame[8:10], "big", signed=True) != 0  # REQUEST_TOO_LARGE
        try:
            assert tls.recv(100) == b""
        except (ssl.SSLError, ConnectionResetError):
            pass  # (the end of the stream without a close_notify is one too)
    with SimpleClient(tls_broker.ssl, tls=certs.client("alice")) as client:
        client.metadata()


def test_plaintext_inside_tls_is_read_as_soon_as_reading_resumes(tls_broker, certs):
    """A PRODUCE (acks=1, at its writer: the connection may not read) and a
    METADATA sharing its last TLS record: the METADATA, decrypted and left
    inside the TLS object while reading is off, is read when reading turns on
    again, not a whole idle round (up to a second) later."""
    stall = new_topic("stall")
    with SimpleClient(tls_broker.unix) as plain:
        plain.create_topic(stall, 1)
    gaps = []
    with _raw_tls(tls_broker, certs) as tls:
        tls.settimeout(10)
        for i in range(20):
            large = api.encode_request(api.ProduceRequest(1, 5000, (api.ProducePartition(
                stall, 0, encode_message_set([b"L" * 100_000])),)), 2 * i, "raw")
            small = api.encode_request(api.MetadataRequest((stall,)), 2 * i + 1, "raw")
            sent = time.monotonic()
            tls.sendall(large + small)
            data = b""
            ids = []
            while len(ids) < 2:
                while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
                    chunk = tls.recv(65536)
                    assert chunk, "the broker closed the connection"
                    data += chunk
                size = int.from_bytes(data[:4], "big")
                ids.append(int.from_bytes(data[4:8], "big"))
                data = data[4 + size:]
            assert ids == [2 * i, 2 * i + 1]
            gaps.append(time.monotonic() - sent)
    gaps.sort()
    assert gaps[len(gaps) // 2] < 0.3, gaps
    assert sum(g > 0.9 for g in gaps) <= 1, gaps  # (one for a loaded machine)


def test_ssl_listener_on_ipv6_loopback_beside_plain_ipv4_on_the_same_port(make_tls_broker,
                                                                           certs):
    """ssl://[::1]:P and tcp://127.0.0.1:P: each hand-off is told by its own
    listener (its family counts), TLS on one, plain Kafka on the other."""
    broker = make_tls_broker(start=False)
    port = broker.ssl_port
    broker.settings["listeners"] = (f"unix://{broker.unix_path},ssl://[::1]:{port},"
                                    f"tcp://127.0.0.1:{port}")
    broker.port = port  # (the tcp:// listener the start waits for)
    broker._may_move = False
    broker.start()
    tls = certs.client("alice", **{"ssl.endpoint.identification.algorithm": ""})
    with SimpleClient(f"ssl://[::1]:{port}", tls=tls) as secure:
        secure.create_topic("v6", 1)
        secure.produce("v6", 0, encode_message_set([b"over ::1"]))
    with SimpleClient(f"tcp://127.0.0.1:{port}") as plain:
        got = plain.fetch("v6", 0, 0, 1 << 20)
        assert [m.payload for m in iter_messages(got.message_set, 0)] == [b"over ::1"]


def test_tls_1_3_only_refuses_a_tls_1_2_client(make_tls_broker, certs):
    broker = make_tls_broker(**{"ssl.enabled.protocols": "TLSv1.3"})
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(certs.ca)
    ctx.load_cert_chain(certs.keystore("alice"))
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    with socket.create_connection(("127.0.0.1", broker.ssl_port), timeout=10) as raw:
        with pytest.raises((ssl.SSLError, ConnectionResetError)):
            ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    with socket.create_connection(("127.0.0.1", broker.ssl_port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            assert tls.version() == "TLSv1.3"


def test_client_auth_none_serves_clients_without_certificates(make_tls_broker, certs):
    """ssl.client.auth none (no truststore needed): a client without a
    certificate is served; one that shows a certificate is not asked for it."""
    broker = make_tls_broker(**{"ssl.client.auth": "none", "ssl.truststore.location": ""})
    with SimpleClient(broker.ssl, tls=certs.client(None)) as client:
        assert client.metadata().brokers
    with SimpleClient(broker.ssl, tls=certs.client("mallory")) as client:
        assert client.metadata().brokers


def test_handshake_failures_reach_the_log_at_a_bounded_rate(make_tls_broker, certs):
    """30 plain clients at the TLS port of one processor: at most 10 lines
    of it in the broker log this minute. (Its own broker: it counts the whole log.)"""
    broker = make_tls_broker(**{"num.processors": 1})
    for _ in range(30):
        with socket.create_connection(("127.0.0.1", broker.ssl_port), timeout=10) as raw:
            raw.sendall(api.encode_request(api.MetadataRequest(()), 1, "plain"))
            raw.settimeout(10)
            try:
                while raw.recv(4096):
                    pass
            except OSError:
                pass
    with SimpleClient(broker.ssl, tls=certs.client("alice")) as client:
        client.metadata()
    said = [line for line in broker.log().splitlines() if "TLS handshake with" in line]
    assert 1 <= len(said) <= 10, said


def test_large_frames_over_tls_go_straight_into_their_ring_records(tls_broker, certs):
    """With processor.ring.receive (the default) a large PRODUCE over TLS is
    received in its ring record as over TCP, not copied through a buffer of
    the processor: most of its bytes are never counted as copied."""
    direct = new_topic("direct")
    with SimpleClient(tls_broker.unix) as plain:
        plain.create_topic(direct, 2)
    payload = [bytes([i]) * 100_000 for i in range(10)]  # ~1 MB frames
    with SimpleClient(tls_broker.ssl, tls=certs.client("alice")) as client:
        client.metadata()
        before = tls_broker.counter("processor", "bytes_copied")
        for p in (0, 1):
            client.produce(direct, p, encode_message_set(payload))
        copied = tls_broker.counter("processor", "bytes_copied") - before
        for p in (0, 1):
            got = client.fetch(direct, p, 0, 4 << 20)
            assert [m.payload for m in iter_messages(got.message_set, 0)] == payload
    assert copied < 500_000, copied  # of 2 MB sent
