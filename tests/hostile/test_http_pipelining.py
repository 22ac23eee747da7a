"""One connection's pipelined requests against a real broker's hb-http: each
connection is answered one request per round of hb-http's loop, so a client
pipelining many costly requests on one connection cannot keep another
connection, the heartbeat or the timeouts waiting (nor get hb-http aborted
as silent)."""

from __future__ import annotations

import statistics
import threading
import time

import pytest

from tests.http.support import connect, http_broker, request
from tests.integration.wire_helpers import stop_or_kill

COSTLY = b"GET /api/groups/nobody HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
PIPELINED = 80


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    broker = http_broker(tmp_path_factory.mktemp("http-pipelining"),
                         **{"max.partitions": 4000})
    try:
        with broker.client() as client:
            for i in range(2):
                client.create_topic(f"wide-{i}", 1000)
        yield broker
    finally:
        stop_or_kill(broker)


def _cost(port: int) -> float:
    """The median time hb-http takes to answer one costly request."""
    times = []
    for _ in range(5):
        started = time.monotonic()
        assert request(port, "GET", "/api/groups/nobody").status == 404
        times.append(time.monotonic() - started)
    return statistics.median(times)


def test_pipelined_costly_requests_do_not_hold_another_connection(served):
    port = served.http_port
    pid = served.workers()["hb-http"]
    cost = _cost(port)
    got = bytearray()
    with connect(port, 120) as pipeliner:
        def read():
            while True:
                try:
                    data = pipeliner.recv(1 << 20)
                except OSError:
                    return
                if not data:
                    return
                got.extend(data)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        pipeliner.sendall(COSTLY * PIPELINED)  # ~4 KB, one or two reads of hb-http
        time.sleep(max(3 * cost, 0.2))  # it is being answered
        waits = []
        for _ in range(3):
            started = time.monotonic()
            assert request(port, "GET", "/nope").status == 404
            waits.append(time.monotonic() - started)
        done_early = got.count(b"HTTP/1.1 404")
        deadline = time.monotonic() + PIPELINED * cost * 4 + 30
        while got.count(b"HTTP/1.1 404") < PIPELINED and time.monotonic() < deadline:
            time.sleep(0.1)
        assert got.count(b"HTTP/1.1 404") == PIPELINED  # every one answered, in the end
    # before its turn came, another connection waited about one request's cost
    # (of the pipeliner's, being answered), not the pipeline's
    assert done_early < PIPELINED, (done_early, cost)
    assert max(waits) < 3 * cost + 0.5, (waits, cost, PIPELINED * cost)
    assert served.workers()["hb-http"] == pid
