"""A client that sends the largest JOIN_GROUP the limits allow (issue 34:
one cost writer 0 seconds of CPU, and its partitions' produces waited
behind it): the join is the coordinator's work alone (``hb-coordinator``),
so a produce to the first log dir's partitions meanwhile is answered in a
small fraction of the join's CPU time.

The bound is generous (two shared cores): the worst produce latency seen
while the joins run must stay under a quarter of the CPU time the
coordinator spent on them, plus 0.5 s. In one process with the appends
that produce would have waited the whole join.
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

JOINS = 2


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
    max_topics = Config.build()["group.max.topics.per.member"]
    subscription = {f"big-{i:04d}": MAX_STREAMS_PER_TOPIC for i in range(max_topics - 1)}
    subscription[topic] = MAX_STREAMS_PER_TOPIC
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
    try:
        with GroupWire(broker.unix, timeout=120) as wire:
            joining.set()
            for i in range(JOINS):
                # answered, whatever it says (a tighter bound of the coordinator's
                # may refuse it): no produce is to wait for it either way
                wire.join(f"big-group-{i}", subscription, session_ms=30000)
    finally:
        done.set()
        producer.join(60)
    join_cpu = _cpu_s(coordinator) - cpu_before
    assert errors == []
    assert len(latencies) >= 10, (len(latencies), join_cpu)
    worst = max(latencies)
    assert worst < 0.5 + join_cpu / 4, (worst, join_cpu, sorted(latencies)[-5:])
