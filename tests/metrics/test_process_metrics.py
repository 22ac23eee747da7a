"""``/metrics``' per-process series across a worker's replacement: the
restart is counted, the new process is up and read, the partition counters
its predecessor kept are still there."""

from __future__ import annotations

import os
import signal

from hostbroker.log.message import encode_message_set
from hostbroker.metrics.collectors import PartitionCollector, ProcessCollector
from tests.integration.wire_helpers import module_broker, new_topic, wait_for
from tests.metrics.scrape import Parsed, collected, context  # noqa: F401 - fixture

served = module_broker()


def test_a_replaced_worker_counts_a_restart_and_keeps_its_counts(served, context):
    topic = new_topic("w")
    with served.client() as c:
        c.create_topic(topic, 1)
        c.produce(topic, 0, encode_message_set([b"w" * 100] * 3))
    labels = {"topic": topic, "partition": 0}
    before = Parsed(collected(PartitionCollector(context, 20000)))
    assert before.value("hostbroker_partition_messages_in_total", **labels) == 3
    old = served.workers()["hb-writer-0"]
    os.kill(old, signal.SIGKILL)
    served.wait_worker_replaced("hb-writer-0", old)
    processes = ProcessCollector(context)

    def replaced():
        got = Parsed(collected(processes))
        return (got.value("hostbroker_process_restarts_total", kind="writer", index=0) == 1
                and got.value("hostbroker_process_up", kind="writer", index=0) == 1
                and got)

    got = wait_for(replaced, timeout=30)
    assert got, "the writer's restart did not show"
    assert got.value("hostbroker_process_cpu_seconds_total", kind="writer", index=0) >= 0
    assert got.value("hostbroker_process_restarts_total", kind="handler", index=0) == 0
    after = Parsed(collected(PartitionCollector(context, 20000)))
    assert after.value("hostbroker_partition_messages_in_total", **labels) == 3
