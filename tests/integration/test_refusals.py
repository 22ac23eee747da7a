"""Refusals through the real command line: ``python -m hostbroker serve`` and
``top`` with a bad value exit 2 (configuration) or 78 (this machine refuses
it) with exactly one line on stderr, no traceback, and nothing created."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from hostbroker.errors import ExitStatus
from tests.integration.broker import free_port


def _run(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hostbroker", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def _serve(tmp_path, *settings: str) -> subprocess.CompletedProcess:
    args = ["serve", f"--set=log.dirs={tmp_path}/logs", "--set=http.listeners="]
    return _run(tmp_path, *args, *(f"--set={s}" for s in settings))


def _assert_one_line(result: subprocess.CompletedProcess, code: int, *words: str) -> None:
    lines = result.stderr.splitlines()
    assert result.returncode == code, (result.returncode, result.stderr)
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stdout == ""
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize("listener, words", [
    ("tcp://127.0.0.1:99999", "port 99999 is not between 0 and 65535"),
    ("tcp://127.0.0.1:-1", "expected tcp://HOST:PORT"),
    ("tcp://127.0.0.1", "expected tcp://HOST:PORT"),
    ("tcp://::1:9092", "an IPv6 host goes in brackets"),
    ("tcp://[::1:9092", "an IPv6 host goes in brackets"),
    ("tcp://a b:9092", "is not a host name or address"),
    ("http://127.0.0.1:9092", "expected tcp://HOST:PORT, ssl://HOST:PORT or unix://PATH"),
    ("127.0.0.1:9092", "expected tcp://HOST:PORT, ssl://HOST:PORT or unix://PATH"),
    ("unix://", "expected unix://PATH"),
    ("unix:///tmp/" + "x" * 120, "longer than 107 bytes"),
])
def test_a_bad_listener_is_a_configuration_error(tmp_path, listener, words):
    result = _serve(tmp_path, f"listeners={listener}")
    _assert_one_line(result, ExitStatus.USAGE, "listeners:", words)
    assert os.listdir(tmp_path) == [], "nothing is created for a bad configuration"


@pytest.mark.parametrize("where", ["absolute", "relative"])
def test_a_unix_socket_in_a_missing_directory_is_refused(tmp_path, where):
    path = f"{tmp_path}/missing/hb.sock" if where == "absolute" else "missing/hb.sock"
    result = _serve(tmp_path, f"listeners=tcp://127.0.0.1:{free_port()},unix://{path}")
    _assert_one_line(result, ExitStatus.REFUSED, f"directory {tmp_path}/missing does not exist")
    assert os.listdir(tmp_path) == [], "neither the socket's directory nor a log dir is made"


def test_a_unix_socket_in_the_log_dirs_parent_is_made_with_the_log_dir(tmp_path):
    """The default layout (./data/hostbroker.sock beside ./data/logs) starts in
    an empty directory: the socket's directory comes with the log dir."""
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [sys.executable, "-m", "hostbroker", "serve", f"--set=log.dirs={data}/logs",
         f"--set=listeners=tcp://127.0.0.1:{free_port()},unix://{data}/hb.sock",
         "--set=http.listeners="],
        cwd=tmp_path, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        assert "hostbroker: serving" in proc.stderr.readline()
        assert (data / "hb.sock").is_socket()
    finally:
        proc.terminate()
        assert proc.wait(30) == 0


@pytest.mark.parametrize("layout", ["file", "under a file"])
def test_a_log_dir_that_is_a_file_says_so(tmp_path, layout):
    file = tmp_path / "afile"
    file.write_text("not a log dir")
    log_dir = file if layout == "file" else file / "logs"
    result = _run(tmp_path, "serve", f"--set=log.dirs={log_dir}",
                  f"--set=listeners=tcp://127.0.0.1:{free_port()}", "--set=http.listeners=")
    _assert_one_line(result, ExitStatus.REFUSED, f"log.dirs: cannot use {log_dir}",
                     f"{'' if layout == 'file' else str(file) + ' '}is a file, not a directory")
    assert file.read_text() == "not a log dir"


def test_a_busy_port_is_a_refusal_not_a_configuration_error(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _serve(tmp_path, f"listeners=tcp://127.0.0.1:{port}")
    _assert_one_line(result, ExitStatus.REFUSED, f"cannot bind tcp://127.0.0.1:{port}")


def test_a_unix_listener_that_never_accepts_is_a_refusal_not_a_hang(tmp_path):
    """A process holding the socket path whose accept queue is full: the probe
    of whether the file is stale gives up after a second instead of waiting."""
    path = str(tmp_path / "hb.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as held:
        held.bind(path)
        held.listen(0)
        waiting = []
        try:
            while len(waiting) < 64:  # fill its queue: a further connect would block
                c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                c.setblocking(False)
                waiting.append(c)
                c.connect(path)
        except BlockingIOError:
            pass
        try:
            result = _serve(tmp_path, f"listeners=unix://{path}")
        finally:
            for c in waiting:
                c.close()
    _assert_one_line(result, ExitStatus.REFUSED, f"another broker is listening on {path}")


def test_an_unknown_key_is_a_configuration_error(tmp_path):
    _assert_one_line(_serve(tmp_path, "no.such.key=1"), ExitStatus.USAGE, "no.such.key")


@pytest.mark.parametrize("option, value", [("--interval", "-1"), ("--interval", "0"),
                                           ("--interval", "nan"), ("--interval", "inf"),
                                           ("--interval", "soon"), ("--iterations", "0"),
                                           ("--iterations", "-3")])
def test_top_refuses_a_bad_number_in_one_line(tmp_path, option, value):
    result = _run(tmp_path, "top", f"--set=log.dirs={tmp_path}/logs", f"{option}={value}")
    _assert_one_line(result, ExitStatus.USAGE, f"argument {option}:", repr(value))


def test_the_test_broker_moves_off_a_port_taken_before_its_first_start(tmp_path):
    """(The test harness itself.) Another test may bind the port picked for a
    broker before the broker does: its first start moves to another port."""
    from tests.integration.broker import Broker
    from tests.ports import taken_port

    broker = Broker(tmp_path)
    taken = broker.port
    with taken_port(taken):
        broker.start()
        try:
            assert broker.port != taken
            assert f"cannot bind tcp://127.0.0.1:{taken}: Address already in use" in broker.log()
            with broker.client(broker.tcp) as c:
                assert c.metadata().brokers[0].port == broker.port
        finally:
            assert broker.stop() == 0
