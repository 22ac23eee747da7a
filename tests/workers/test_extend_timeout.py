"""The supervisor's EXTEND_TIMEOUT_USEC while it starts or stops: sent at once,
then every 5 s (a fake clock), over a real NOTIFY_SOCKET datagram socket."""

from __future__ import annotations

import socket

import pytest

from hostbroker.config import Config
from hostbroker.workers import supervisor as sup


@pytest.fixture
def notify_socket(tmp_path, monkeypatch):
    path = str(tmp_path / "notify.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(path)
    listener.settimeout(0.2)
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    yield listener
    listener.close()


def _received(listener: socket.socket) -> list[str]:
    got = []
    while True:
        try:
            got.append(listener.recv(4096).decode())
        except TimeoutError:
            return got


def test_extend_at_once_then_every_five_seconds(notify_socket, monkeypatch, tmp_path):
    clock = [1000.0]
    monkeypatch.setattr(sup.time, "monotonic", lambda: clock[0])
    supervisor = sup.Supervisor(Config.build(overrides=[f"log.dirs={tmp_path}/logs"]))
    sent = []
    for t in (1000.0, 1001.0, 1004.9, 1005.0, 1009.0, 1010.0, 1030.0):
        clock[0] = t
        supervisor._extend_timeout(f"starting at {t}")
        sent += [(t, m) for m in _received(notify_socket)]
    assert [t for t, _ in sent] == [1000.0, 1005.0, 1010.0, 1030.0]
    for t, message in sent:
        # each asks for three periods more, so one late loop does not end the start
        assert message == f"EXTEND_TIMEOUT_USEC=15000000\nSTATUS=starting at {t}"


def test_extend_pings_the_watchdog_when_systemd_watches(notify_socket, monkeypatch, tmp_path):
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    supervisor = sup.Supervisor(Config.build(overrides=[f"log.dirs={tmp_path}/logs"]))
    supervisor._extend_timeout("starting")
    [message] = _received(notify_socket)
    assert message.split("\n") == ["EXTEND_TIMEOUT_USEC=15000000", "STATUS=starting",
                                   "WATCHDOG=1"]
