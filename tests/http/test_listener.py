"""hb-http on a real broker: it serves its listener, is one process counted on
the board, is replaced on the same socket when it dies, stops cleanly with a
connection open, and a listener or token file that cannot be used refuses
the start in one line. Its HttpContext reads the broker's tables and asks
the broker over its own listener."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from hostbroker.config import Config
from hostbroker.errors import ExitStatus
from hostbroker.workers.http.context import HttpContext
from hostbroker.workers.plan import BrokerPlan
from tests.http.support import connect, http_broker, read_answer, request, wait_http
from tests.integration.broker import Broker, serve_args
from tests.integration.wire_helpers import stop_or_kill
from tests.ports import free_port, taken_port


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    broker = http_broker(tmp_path_factory.mktemp("http"))
    yield broker
    stop_or_kill(broker)


def test_an_unknown_page_is_a_json_404_with_the_listener_s_headers(served):
    answer = request(served.http_port, "GET", "/no/such/page")
    assert answer.status == 404
    assert answer.headers["content-type"] == "application/json"
    assert answer.json() == {"error": "no such page"}
    assert answer.headers["content-security-policy"] == "default-src 'self'"
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["connection"] == "close"


def test_a_connection_is_kept_alive_between_requests(served):
    with connect(served.http_port) as sock:
        buf = bytearray()
        for _ in range(3):
            sock.sendall(b"GET /nope HTTP/1.1\r\nHost: localhost\r\n\r\n")
            answer = read_answer(sock, buf)
            assert answer.status == 404 and "connection" not in answer.headers


def test_hb_http_is_one_process_counted_on_the_board(served):
    assert "hb-http" in served.workers()
    before = served.counter("http", "requests")
    errors = served.counter("http", "errors")
    for _ in range(5):
        request(served.http_port, "GET", "/nope")
    assert served.counter("http", "requests") == before + 5
    assert served.counter("http", "errors") == errors + 5  # 404s
    assert served.counter("http", "bytes_in") > 0 and served.counter("http", "bytes_out") > 0
    assert served.counter("http", "connections") == 0  # Kafka clients only


def test_a_dead_hb_http_is_replaced_on_the_same_socket(served):
    old = served.workers()["hb-http"]
    os.kill(old, signal.SIGKILL)
    served.wait_worker_replaced("hb-http", old)
    wait_http(served.http_port)
    assert request(served.http_port, "GET", "/nope").status == 404
    with served.client() as client:  # the broker went on serving meanwhile
        client.metadata()


def test_a_stopped_hb_http_is_aborted_and_replaced(served):
    old = served.workers()["hb-http"]
    with connect(served.http_port) as held:  # a connection it held goes with it
        held.sendall(b"GET /nope HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert read_answer(held).status == 404  # accepted by it, kept alive
        os.kill(old, signal.SIGSTOP)
        served.wait_worker_replaced("hb-http", old, timeout=3.0 + 10)
        wait_http(served.http_port)
        assert request(served.http_port, "GET", "/nope").status == 404
        held.settimeout(5)
        assert held.recv(1) == b""
    assert "silent for" in served.log()


def test_the_context_reads_the_tables_and_asks_the_broker(served):
    config = Config.build(overrides=[f"{k}={v}" for k, v in served.settings.items()])
    context = HttpContext(BrokerPlan.from_config(config))
    try:
        with served.client() as client:
            client.create_topic("ctx-topic", 3)
        assert [s.partition for _, s in context.table.scan() if s.name == "ctx-topic"] \
            and len(context.board.snapshot()) >= 7
        metadata = context.broker_client().metadata(["ctx-topic"])
        assert len(metadata.topics[0].partitions) == 3
        context.drop_client()
        assert context.broker_client().metadata(["ctx-topic"]).topics
    finally:
        context.close()


def test_without_http_listeners_there_is_no_hb_http(tmp_path):
    broker = Broker(tmp_path)  # http.listeners= by the test default
    broker.start()
    try:
        assert not [name for name in broker.workers() if name.startswith("hb-http")]
    finally:
        stop_or_kill(broker)


def test_every_listener_is_served_ipv4_and_ipv6(tmp_path):
    with socket.socket(socket.AF_INET6) as probe:
        probe.bind(("::1", 0))
        v6 = probe.getsockname()[1]
    broker = http_broker(tmp_path)
    broker.stop()
    broker.settings["http.listeners"] += f",http://[::1]:{v6}"
    broker.start()
    try:
        wait_http(broker.http_port)
        with socket.create_connection(("::1", v6), timeout=10) as sock:
            sock.sendall(b"GET /nope HTTP/1.1\r\nHost: [::1]\r\n\r\n")
            assert read_answer(sock).status == 404
        line = f"HTTP on http://127.0.0.1:{broker.http_port}, http://[::1]:{v6}"
        deadline = time.monotonic() + 10  # said once hb-http is ready, maybe after it answered
        while line not in broker.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert line in broker.log()
    finally:
        stop_or_kill(broker)


def test_a_stop_with_connections_open_is_clean(tmp_path):
    broker = http_broker(tmp_path)
    idle = connect(broker.http_port)
    half = connect(broker.http_port)
    half.sendall(b"GET /nope HTTP/1.1\r\nHo")
    try:
        assert broker.stop() == 0
        assert "stopped cleanly" in broker.log()
        assert "Traceback" not in broker.log()
    finally:
        idle.close()
        half.close()
        stop_or_kill(broker)


def _serve(tmp_path, settings: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hostbroker", *serve_args(tmp_path, settings)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def test_an_http_listener_that_cannot_be_bound_refuses_the_start_in_one_line(tmp_path):
    with taken_port() as port:
        result = _serve(tmp_path, {"http.listeners": f"http://127.0.0.1:{port}"})
    assert result.returncode == ExitStatus.REFUSED, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines == [f"hostbroker: http.listeners: cannot bind http://127.0.0.1:{port}: "
                     "Address already in use"], result.stderr


@pytest.mark.parametrize("case", ["http twice", "http wildcard", "kafka wildcard",
                                  "kafka and http", "http v6 wildcard"])
def test_listeners_on_overlapping_addresses_refuse_the_start_in_one_line(tmp_path, case):
    port = free_port()
    settings = {
        "http twice": {"http.listeners": f"http://127.0.0.1:{port},http://127.0.0.1:{port}"},
        "http wildcard": {"http.listeners": f"http://0.0.0.0:{port},http://127.0.0.1:{port}"},
        "kafka wildcard": {"listeners": f"tcp://127.0.0.1:{port},tcp://0.0.0.0:{port}"},
        "kafka and http": {"listeners": f"tcp://127.0.0.1:{port}",
                           "http.listeners": f"http://127.0.0.1:{port}"},
        "http v6 wildcard": {"http.listeners": f"http://[::]:{port},http://127.0.0.1:{port}"},
    }[case]
    started = time.monotonic()
    result = _serve(tmp_path, settings)
    assert result.returncode == ExitStatus.REFUSED, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith(
        f":{port} take one port on overlapping addresses"), lines
    assert lines[0].startswith("hostbroker: listeners and http.listeners:" if case ==
                               "kafka and http" else "hostbroker: http.listeners:" if "http" in
                               case else "hostbroker: listeners:"), lines
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("case", ["missing", "group readable", "unset"])
def test_a_token_file_that_cannot_be_used_refuses_the_start_in_one_line(tmp_path, case):
    token = tmp_path / "admin.token"
    if case != "missing":
        token.write_text("0123456789abcdef0123\n")
        os.chmod(token, 0o640 if case == "group readable" else 0o600)
    result = _serve(tmp_path, {"http.listeners": "http://127.0.0.1:0",
                               "http.admin.enable": "true",
                               "http.admin.token.file": "" if case == "unset" else token})
    assert result.returncode == ExitStatus.REFUSED, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hostbroker: http.admin.token.file"), lines
    assert not (tmp_path / "logs").exists() or not os.listdir(tmp_path / "logs")


def test_changes_are_refused_while_the_admin_is_off(served):
    port = served.http_port
    answer = request(port, "POST", "/api/topics", b'{"name": "never-made"}', {
        "Origin": f"http://127.0.0.1:{port}", "Content-Type": "application/json",
        "X-Hostbroker-Console": "1", "Authorization": "Bearer 0123456789abcdef0123"})
    assert answer.status == 403 and "http.admin.enable" in answer.json()["error"]
