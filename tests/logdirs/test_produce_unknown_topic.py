"""A produce naming a topic the broker does not have, on a standalone broker
whose ``default.replication.factor`` is 2: the topic is hb-logdirs' to make,
so it stays unknown for a while and every entry of the produce names it again.
The handler looks (admin lock, a scan of the partition table) once, not once
per entry, and answers each entry LEADER_NOT_AVAILABLE (retriable); the topic
is then made and served.

The cost is read from the handlers' own CPU time (``/proc`` through psutil):
with a thousand partitions in the table, a look per entry of a thousand-entry
produce is seconds of one handler's loop.
"""

from __future__ import annotations

import time

import psutil

from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from tests.logdirs.support import poll

FILLER_PARTITIONS = 1000  # what each look scans
ENTRIES = 1000  # entries of the one produce, all for the unknown topic
HANDLER_CPU_S = 0.5  # the handlers' CPU for that produce (a look per entry: ~2 s)


def _handlers_cpu(broker) -> float:
    total = 0.0
    for name, pid in broker.workers().items():
        if name.startswith("hb-handler-"):
            times = psutil.Process(pid).cpu_times()
            total += times.user + times.system
    return total


def test_one_produce_of_many_entries_for_an_unknown_topic_looks_once(dirs_broker):
    broker = dirs_broker(2, **{"default.replication.factor": 2})
    data = encode_message_set([b"x"])
    with broker.client(timeout=120) as client:
        client.metadata()  # (a connection's first answer is bounded by its setup timeout)
        # plain topic (version 0): partitions every look of the table goes through
        client.create_topic("filler", FILLER_PARTITIONS)
        before = _handlers_cpu(broker)
        started = time.monotonic()
        results = client.produce_many([("fresh", p, data) for p in range(ENTRIES)], acks=1,
                                      raise_on_error=False)
        took = time.monotonic() - started
        spent = _handlers_cpu(broker) - before
        assert [r.error_code for r in results] == [ErrorCode.LEADER_NOT_AVAILABLE] * ENTRIES
        assert spent < HANDLER_CPU_S, (
            f"the handlers spent {spent:.2f} s of CPU ({took:.2f} s) on one produce of "
            f"{ENTRIES} entries for one unknown topic")
        # asked for once: hb-logdirs makes it, and the producer's retry is served
        poll(lambda: client.produce("fresh", 0, data, acks=-1, raise_on_error=False)
             .error_code == ErrorCode.NONE, 30, "fresh made and led")
