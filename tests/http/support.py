"""A real broker with its HTTP listener, and raw HTTP over real sockets.

Test code only: the HTTP port comes from the kernel (bind to port 0), the
broker is ``tests.integration.broker.Broker`` (``hostbroker serve`` as a
subprocess), and answers are read with nothing between the socket and the
test, so what the listener sends is what is checked.
"""

from __future__ import annotations

import json
import socket
import time

from tests.integration.broker import Broker
from tests.ports import free_port


def http_broker(root, **settings) -> Broker:
    """A started broker serving HTTP on a free loopback port (``broker.http_port``)."""
    port = free_port()
    broker = Broker(root, **settings)
    broker.settings["http.listeners"] = f"http://127.0.0.1:{port}"
    broker.http_port = port
    broker.start()
    wait_http(port)
    return broker


def wait_http(port: int, timeout: float = 20.0) -> None:
    """Until the listener answers a request (hb-http starts after the acceptor)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with connect(port, 2.0) as sock:
                sock.sendall(b"GET /-/ready HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                if read_answer(sock) is not None:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"no HTTP answer on port {port} within {timeout} s")
        time.sleep(0.05)


def connect(port: int, timeout: float = 10.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.settimeout(timeout)
    return sock


class Answer:
    def __init__(self, status: int, headers: dict[str, str], body: bytes):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self):
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"<Answer {self.status} {self.body[:200]!r}>"


def read_answer(sock: socket.socket, buffer: bytearray | None = None,
                head_only: bool = False) -> Answer | None:
    """One answer from ``sock`` (None when it closed first); ``buffer`` keeps what
    was read past it, for pipelined answers."""
    buf = buffer if buffer is not None else bytearray()
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buf += chunk
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    lines = head.decode("ascii").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = 0 if head_only or status == 100 else int(headers.get("content-length", 0))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"closed within an answer of {length} bytes: {head!r}")
        rest += chunk
    buf[:] = rest[length:]
    return Answer(status, headers, rest[:length])


def request(port: int, method: str, path: str, body: bytes = b"",
            headers: dict[str, str] | None = None) -> Answer:
    """One request on a fresh connection, closed after its answer."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close"]
    for name, value in (headers or {}).items():
        lines.append(f"{name}: {value}")
    if body or method == "POST":
        lines.append(f"Content-Length: {len(body)}")
    with connect(port) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        answer = read_answer(sock, head_only=method == "HEAD")
    assert answer is not None, f"{method} {path}: closed with no answer"
    return answer


def closed_within(sock: socket.socket, seconds: float) -> bytes:
    """What the listener sent before closing ``sock``; AssertionError if it did
    not close within ``seconds``."""
    deadline = time.monotonic() + seconds
    data = bytearray()
    while time.monotonic() < deadline:
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return bytes(data)
        except socket.timeout:
            break
        if not chunk:
            return bytes(data)
        data += chunk
    raise AssertionError(f"not closed within {seconds} s; got {bytes(data)[:200]!r}")
