"""One connection's pipelined requests against a real broker's hb-http: each
connection is answered one request per round of hb-http's loop, so a client
pipelining many costly requests on one connection cannot keep another
connection, the heartbeat or the timeouts waiting (nor get hb-http aborted
as silent)."""

from __future__ import annotations

import math
import statistics
import threading
import time

import pytest

from tests.http.support import connect, http_broker, request
from tests.integration.wire_helpers import stop_or_kill

COSTLY_PATH = "/api/topics/wide-0?limit=500"  # 500 partition rows of 1,000, with rates
COSTLY = f"GET {COSTLY_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
ANSWERED = b"HTTP/1.1 200 "


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    broker = http_broker(tmp_path_factory.mktemp("http-pipelining"),
                         **{"max.partitions": 4000})
    try:
        with broker.client(timeout=60) as client:
            client.metadata()  # (a connection's first answer is bounded by its setup timeout)
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
        assert request(port, "GET", COSTLY_PATH).status == 200
        times.append(time.monotonic() - started)
    return statistics.median(times)


def test_pipelined_costly_requests_do_not_hold_another_connection(served):
    port = served.http_port
    pid = served.workers()["hb-http"]
    cost = _cost(port)
    pipelined = min(2000, max(80, math.ceil(4.0 / cost)))  # a pipeline of 4 s or more
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
        pipeliner.sendall(COSTLY * pipelined)  # one or a few reads of hb-http
        time.sleep(max(3 * cost, 0.2))  # it is being answered
        waits = []
        for _ in range(3):
            started = time.monotonic()
            assert request(port, "GET", "/nope").status == 404
            waits.append(time.monotonic() - started)
        done_early = got.count(ANSWERED)
        deadline = time.monotonic() + pipelined * cost * 4 + 30
        while got.count(ANSWERED) < pipelined and time.monotonic() < deadline:
            time.sleep(0.1)
        assert got.count(ANSWERED) == pipelined  # every one answered, in the end
    # before its turn came, another connection waited about one request's cost
    # (of the pipeliner's, being answered), not the pipeline's
    assert done_early < pipelined, (done_early, pipelined, cost)
    assert max(waits) < 3 * cost + 0.5, (waits, cost, pipelined * cost)
    assert served.workers()["hb-http"] == pid
