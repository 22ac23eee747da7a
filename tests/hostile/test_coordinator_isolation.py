"""A client that sends the largest JOIN_GROUPs the limits allow, one after
the other (issue 34: one cost writer 0 seconds of CPU, and its partitions'
produces waited behind it): the joins are the coordinator's work alone
(``hb-coordinator``), so a produce to the first log dir's partitions
meanwhile is answered in a small fraction of a join's CPU time.

The bounds are generous (two shared cores): the median produce latency seen
while the joins run must stay under a quarter of the coordinator's CPU time
per join, and the worst under that time plus 0.5 s. In one process with the
appends, a produce waits on average half a join when joins come back to
back.
"""

from __future__ import annotations

import threading
import time

import psutil
import pytest

from hostbroker.config import Config
from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.protocol.groups import MAX_STREAMS_PER_TOPIC
from tests.integration.broker import Broker
from tests.integration.coordinator_wire import GroupWire
from tests.integration.wire_helpers import created_topic, stop_or_kill

JOIN_SECONDS = 3.0  # joins go on, one after the other, at least this long
MAX_JOINS = 200


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path).start()
    yield b
    stop_or_kill(b)


def _cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def test_the_largest_join_does_not_hold_up_produces(broker):
    topic = created_topic(broker.tcp)
    config = Config.build()
    max_topics = config["group.max.topics.per.member"]
    streams = min(MAX_STREAMS_PER_TOPIC, config["group.max.streams"] // max_topics)
    subscription = {f"big-{i:04d}": streams for i in range(max_topics - 1)}
    subscription[topic] = streams
    coordinator = psutil.Process(broker.workers()["hb-coordinator"])
    joining = threading.Event()
    done = threading.Event()
    latencies: list[float] = []
    errors: list = []

    def produce() -> None:
        data = encode_message_set([b"x" * 100])
        with broker.client(broker.tcp, timeout=60) as client:
            client.produce(topic, 0, data)  # connected and warm
            joining.wait(30)
            while not done.is_set():
                start = time.monotonic()
                result = client.produce(topic, 0, data, raise_on_error=False)
                latencies.append(time.monotonic() - start)
                if result.error_code != ErrorCode.NONE:
                    errors.append(result.error_code)
                time.sleep(0.01)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    cpu_before = _cpu_s(coordinator)
    joins = 0
    try:
        with GroupWire(broker.unix, timeout=120) as wire:
            joining.set()
            until = time.monotonic() + JOIN_SECONDS
            while joins < MAX_JOINS and (joins == 0 or time.monotonic() < until):
                answer = wire.join(f"big-group-{joins}", subscription, session_ms=30000)
                assert answer.error_code == ErrorCode.NONE, answer.error_code  # allowed
                joins += 1
    finally:
        done.set()
        producer.join(60)
    per_join = (_cpu_s(coordinator) - cpu_before) / joins
    assert errors == []
    assert len(latencies) >= 10, (len(latencies), joins, per_join)
    latencies.sort()
    median, worst = latencies[len(latencies) // 2], latencies[-1]
    assert median < per_join / 4, (median, per_join, joins)
    assert worst < 0.5 + per_join, (worst, per_join, latencies[-5:])
