"""A real broker with its HTTP listener and the console's admin enabled, and a
plain HTTP client for it: only test code.

The broker is ``hostbroker serve`` (tests/integration/broker.py) with
``http.listeners`` on a loopback port the kernel picked, ``http.admin.enable``
and a token file of our own (0600). :func:`call` speaks HTTP/1.1 with
``http.client``, one connection per call.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import time

from tests.integration.broker import Broker
from tests.ports import free_port

TOKEN_BYTES = 32


class ConsoleBroker(Broker):
    """A broker whose hb-http serves the console on ``self.http_port``."""

    def __init__(self, root, admin: bool = True, **settings):
        self.http_port = free_port()
        self.token = secrets.token_hex(TOKEN_BYTES // 2)
        token_file = os.path.join(str(root), "admin.token")
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.token)
        web = {"http.listeners": f"http://127.0.0.1:{self.http_port}",
               "http.admin.enable": "true" if admin else "false",
               "http.admin.token.file": token_file}
        web.update(settings)
        super().__init__(root, **web)

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def start(self, timeout: float = 30.0) -> ConsoleBroker:
        super().start(timeout)
        deadline = time.monotonic() + timeout
        while True:  # hb-http comes up last; the supervisor then calls the broker running
            try:
                if call(self, "GET", "/api/rates")[0] == 200 and self.state() == "running":
                    return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the console did not answer in {timeout}s:\n{self.log()}")
            time.sleep(0.1)

    def admin_headers(self, **extra) -> dict[str, str]:
        """What the console's page sends with a change."""
        headers = {"Authorization": f"Bearer {self.token}", "Origin": self.origin,
                   "Content-Type": "application/json", "X-Hostbroker-Console": "1"}
        headers.update(extra)
        return headers

    def post(self, path: str, document=None, **headers):
        body = b"" if document is None else json.dumps(document).encode()
        return call(self, "POST", path, body, self.admin_headers(**headers))


def call(broker: ConsoleBroker, method: str, path: str, body: bytes = b"",
         headers: dict[str, str] | None = None, timeout: float = 20.0):
    """(status, headers with lower-case names, body: JSON decoded when it is JSON)."""
    connection = http.client.HTTPConnection("127.0.0.1", broker.http_port, timeout=timeout)
    try:
        connection.request(method, path, body=body or None, headers=headers or {})
        response = connection.getresponse()
        data = response.read()
        found = {k.lower(): v for k, v in response.getheaders()}
    finally:
        connection.close()
    if found.get("content-type", "").startswith("application/json"):
        data = json.loads(data)
    return response.status, found, data


def get(broker: ConsoleBroker, path: str):
    """The JSON of a GET that must answer 200."""
    status, _, body = call(broker, "GET", path)
    assert status == 200, (path, status, body)
    return body


def wait_listed(broker: ConsoleBroker, *topics: str, seconds: float = 10.0) -> None:
    """Wait until the console's topic list names ``topics``: its METADATA is kept up to
    METADATA_TTL_S, so on a broker tests share, a topic made over the wire may be
    missing from what an earlier test's request read just before."""
    from urllib.parse import quote

    deadline = time.monotonic() + seconds
    for topic in topics:
        while topic not in {row["topic"] for row in get(
                broker, "/api/topics?filter=" + quote(topic, safe=""))["topics"]}:
            assert time.monotonic() < deadline, f"the console never listed {topic}"
            time.sleep(0.1)


def produce(broker: Broker, topic: str, partition: int, payloads: list[bytes]) -> int:
    """Append ``payloads`` (acks=1); the partition's log end offset after."""
    from hostbroker.log.message import encode_message_set

    with broker.client() as c:
        return c.produce(topic, partition, encode_message_set(payloads)).log_end_offset
