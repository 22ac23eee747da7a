"""A connection's identity told to its handler (REQ_PRINCIPAL) is not a
request: it adds nothing to the handler's ring-wait counter, which stays the
time requests really waited (a stamp of 0 once added the host's uptime per
connection, until the counter overflowed the board and the handler was
aborted)."""

from __future__ import annotations

import os
import time

from tests.integration.broker import Broker

CONNECTIONS = 20


def test_identities_add_no_ring_wait(tmp_path):
    os.makedirs(tmp_path / "logs")
    broker = Broker(tmp_path, num_handlers=1, processor_local_requests="false").start()
    try:
        for _ in range(CONNECTIONS):
            with broker.client(broker.unix) as client:
                client.metadata([])  # answered by the handler (local requests off)
        time.sleep(1.0)  # the heartbeat thread publishes the timing counters every ~0.4 s
        assert broker.counter("handler", "requests") >= CONNECTIONS
        # each request waited well under a second; the uptime would be far more
        assert 0 < broker.counter("handler", "wait_ns") < CONNECTIONS * 10**9
    finally:
        broker.finish()
