"""A replacement hb-http that cannot boot while the broker runs never stops
the broker: the supervisor says so in one line, tries again with backoff,
and HTTP is back once a try boots. The fault is real: the supervisor's open
file limit is lowered (prlimit) so that a freshly forked hb-http cannot open
the file descriptors it needs, then raised again."""

from __future__ import annotations

import os
import resource
import signal
import time

from tests.http.support import http_broker, request, wait_http
from tests.integration.wire_helpers import stop_or_kill

FAILED = "http 0 failed to start (see above); HTTP is down, trying again in"


def _wait_log(broker, text: str, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while broker.log().count(text) < count:
        assert broker.proc.poll() is None, f"the broker stopped:\n{broker.log()[-3000:]}"
        assert time.monotonic() < deadline, broker.log()[-3000:]
        time.sleep(0.1)


def test_an_hb_http_that_cannot_boot_is_retried_and_the_broker_serves_on(tmp_path):
    broker = http_broker(tmp_path)
    # running (said once hb-http is ready): a failure before is a failed start
    _wait_log(broker, f"HTTP on http://127.0.0.1:{broker.http_port}", 1, timeout=30)
    supervisor = broker.proc.pid
    limits = resource.prlimit(supervisor, resource.RLIMIT_NOFILE)
    try:
        old = broker.workers()["hb-http"]
        # every descriptor a new process opens would be number 3 or more: none can be
        resource.prlimit(supervisor, resource.RLIMIT_NOFILE, (3, limits[1]))
        os.kill(old, signal.SIGKILL)
        _wait_log(broker, FAILED, 2, timeout=30)  # failed, retried after 1 s, failed again
        assert "trying again in 1 s" in broker.log() and "trying again in 2 s" in broker.log()
        assert broker.proc.poll() is None
        with broker.client() as client:  # the log broker serves on
            client.metadata()
    finally:
        resource.prlimit(supervisor, resource.RLIMIT_NOFILE, limits)
    try:
        wait_http(broker.http_port, timeout=70)  # the next try boots
        assert request(broker.http_port, "GET", "/nope").status == 404
        new = broker.workers()["hb-http"]
        assert new != old
        assert broker.proc.poll() is None
    finally:
        stop_or_kill(broker)
