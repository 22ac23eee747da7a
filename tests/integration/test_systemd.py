"""The broker under a service manager: sd_notify over a real NOTIFY_SOCKET."""

import socket
import time


def messages_until(sock: socket.socket, wanted: str, timeout: float = 20.0) -> list[str]:
    got = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            got.append(sock.recv(4096).decode())
        except TimeoutError:
            break
        if any(wanted in m for m in got):
            return got
    raise AssertionError(f"no {wanted!r} among {got}")


def test_ready_watchdog_and_stopping_are_sent(make_broker, tmp_path):
    path = str(tmp_path / "notify.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(path)
    broker = make_broker(start=False)
    broker.env = {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "200000"}
    broker.start()
    got = messages_until(listener, "READY=1")
    assert any("STATUS=serving" in m for m in got)
    # once ready, ping the watchdog at half its period (0.1 s here)
    t = time.monotonic()
    pings = 0
    while time.monotonic() - t < 1.0:
        pings += sum("WATCHDOG=1" in m for m in messages_until(listener, "WATCHDOG=1", 1))
    assert pings >= 6, f"{pings} watchdog pings in a second; systemd wants one per 0.2 s"

    assert broker.stop() == 0
    assert any("STOPPING=1" in m for m in messages_until(listener, "STOPPING=1", 5))
    listener.close()
