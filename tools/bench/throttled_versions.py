#!/usr/bin/env python3
"""What the versions that carry a throttle time (PRODUCE v1, FETCH v2) cost
against version 0, one broker, measured alternately.

Run by hand (not a test), from the repository with its venv::

    .venv/bin/python tools/bench/throttled_versions.py --rounds 3 --seconds 3

Starts one ``hostbroker serve`` (``harness.Broker``: free port, Unix socket,
scratch data, stopped by PID; ``--set`` passed through) with no quotas, and
runs in turns, ``--rounds`` times, each load bounded by ``--seconds``:

- ``sync``: one client over the Unix socket, one 100-byte message a PRODUCE
  (acks=1), one request at a time, as a sync producer sends: records/s with
  version 0 and with version 1;
- ``e2e``: one message every ``--interval-ms`` ms, one a PRODUCE (version 0
  or 1), a consumer in a spawned process long-polling (FETCH version 0 or
  2, max_wait 100 ms, min_bytes 1) over the Unix socket: delivery latency
  (the consumer's receive time minus the send time in the payload), p50 and
  p99 in ms.

Prints each round and the median of each side. Alternating in one run is
what makes the two comparable on a shared machine.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(os.path.dirname(HERE))]

from hostbroker.client.connection import BrokerConnection  # noqa: E402
from hostbroker.client.simple import SimpleClient  # noqa: E402
from hostbroker.log.message import encode_message_set, iter_messages  # noqa: E402
from hostbroker.protocol import api, throttled  # noqa: E402
from harness import BenchError, Broker, log, machine_info, warm_up  # noqa: E402

TOPIC = "throttled-versions"
FETCHES = {0: api.FetchRequest, 1: throttled.FetchRequestV2}  # by the PRODUCE version
MAX_SECONDS = 30.0


def sync_rate(uri: str, version: int, seconds: float) -> float:
    """Records/s of one message a PRODUCE of ``version``, one at a time."""
    data = encode_message_set([b"x" * 100])
    with BrokerConnection(uri, timeout=30).connect() as conn:
        done = 0
        end = time.monotonic() + seconds
        start = time.monotonic()
        while time.monotonic() < end:
            conn.send_produce(1, 10_000, [(TOPIC, 0, [data])], version)
            answer = conn.receive(api.ApiKey.PRODUCE)
            if answer.partitions[0].error_code:
                raise BenchError(f"produce answered {answer.partitions[0].error_code}")
            done += 1
        return done / (time.monotonic() - start)


def _consumer(uri: str, version: int, offset: int, count: int, seconds: float, pipe) -> None:
    """In a spawned process: long-poll until ``count`` messages came or
    ``seconds`` passed; send back the latencies (ns)."""
    latencies = []
    request = FETCHES[version]
    with BrokerConnection(uri, timeout=30).connect() as conn:
        pipe.send("ready")
        end = time.monotonic() + seconds
        while len(latencies) < count and time.monotonic() < end:
            answer = conn.request(request(100, 1, (api.FetchPartition(TOPIC, 0, offset,
                                                                      1 << 20),)))
            now = time.monotonic_ns()
            [part] = answer.partitions
            if part.error_code:
                raise BenchError(f"fetch answered {part.error_code}")
            for message in iter_messages(part.message_set, offset):
                latencies.append(now - int.from_bytes(message.payload[:8], "big"))
                offset = message.next_offset
    pipe.send(latencies)


def e2e_latency(uri: str, version: int, seconds: float, interval_ms: float) -> tuple:
    """(p50, p99) ms of delivery, one message every ``interval_ms``."""
    with SimpleClient(uri) as client:
        offset = client.offsets(TOPIC, 0)[0]
    count = int(seconds * 1000 / interval_ms)
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    consumer = context.Process(target=_consumer, daemon=True,
                               args=(uri, version, offset, count, seconds + 10, theirs))
    consumer.start()
    try:
        if not ours.poll(60) or ours.recv() != "ready":
            raise BenchError("the consumer did not start")
        padding = b"p" * 92
        with BrokerConnection(uri, timeout=30).connect() as conn:
            t0 = time.monotonic()
            for i in range(count):
                delay = t0 + (i + 1) * interval_ms / 1000 - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                value = time.monotonic_ns().to_bytes(8, "big") + padding
                conn.send_produce(1, 10_000, [(TOPIC, 0, [encode_message_set([value])])],
                                  version)
                conn.receive(api.ApiKey.PRODUCE)
        if not ours.poll(seconds + 30):
            raise BenchError("the consumer sent nothing back")
        latencies = sorted(ours.recv())
    finally:
        consumer.join(10)
        if consumer.is_alive():
            consumer.kill()
    if not latencies:
        raise BenchError("no message came")
    return (latencies[len(latencies) // 2] / 1e6,
            latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] / 1e6)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--interval-ms", type=float, default=4.0)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    if not (1 <= args.rounds <= 20 and 0 < args.seconds <= MAX_SECONDS
            and 1 <= args.interval_ms <= 1000):
        ap.error(f"--rounds 1..20, --seconds up to {MAX_SECONDS:g}, --interval-ms 1..1000")
    info = machine_info()
    log(f"machine: {info}")
    with tempfile.TemporaryDirectory(prefix="hb-versions-") as workdir:
        broker = Broker(workdir, args.set)
        broker.start()
        try:
            uri = broker.uri("unix")
            with SimpleClient(uri) as client:
                client.create_topic(TOPIC, 1)
            warm_up(broker)
            rates: dict[int, list] = {0: [], 1: []}
            e2e: dict[int, list] = {0: [], 1: []}
            for r in range(args.rounds):
                for version in (0, 1):
                    rates[version].append(sync_rate(uri, version, args.seconds))
                    e2e[version].append(e2e_latency(uri, version, args.seconds,
                                                    args.interval_ms))
                    p50, p99 = e2e[version][-1]
                    log(f"round {r + 1} PRODUCE v{version} / FETCH v{2 * version}: "
                        f"sync {rates[version][-1]:,.0f} records/s, "
                        f"e2e p50 {p50:.2f} ms p99 {p99:.2f} ms")
            for version in (0, 1):
                print(f"PRODUCE v{version} / FETCH v{2 * version}: sync median "
                      f"{statistics.median(rates[version]):,.0f} records/s; e2e median p50 "
                      f"{statistics.median(x[0] for x in e2e[version]):.2f} ms, p99 "
                      f"{statistics.median(x[1] for x in e2e[version]):.2f} ms")
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
