"""A greedy client for the quota tests, run as its own process (so its load
does not share the test's interpreter): ``python -m tests.quota.greedy URI
KIND SECONDS [TOPIC]`` sends one request after another for SECONDS (bounded)
and prints one JSON line: the bytes moved, the requests, the time taken, the
throttle times the broker said (PRODUCE v1 / FETCH v2) and, after each
answer, the time, bytes and requests so far.

KIND: ``produce`` (20 KB message sets), ``fetch`` (50 KB at a time of a
topic of such sets, from the start again at the log's end; ``fetch0`` the
same with version 0), ``metadata`` (a request flood)."""

from __future__ import annotations

import json
import sys
import time

from hostbroker.client.simple import SimpleClient
from hostbroker.log.message import encode_message_set

MAX_SECONDS = 10.0
SET = encode_message_set([b"g" * 20_000])  # one entry; a fetched topic holds only these
FETCH_BYTES = 50_000


def main(uri: str, kind: str, seconds: float, topic: str = "greedy") -> dict:
    seconds = min(seconds, MAX_SECONDS)
    moved = requests = 0
    throttles: list[int] = []
    marks: list[tuple[float, int, int]] = []  # (seconds since start, bytes moved, requests)
    offset = 0
    with SimpleClient(uri, timeout=60) as client:
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            if kind == "produce":
                client.produce(topic, 0, SET, version=1)
                moved += len(SET)
                throttles.append(client.throttle_time_ms)
            elif kind in ("fetch", "fetch0"):  # (version 0: answered by the processor)
                result = client.fetch(topic, 0, offset, FETCH_BYTES,
                                      version=0 if kind == "fetch0" else 2)
                moved += len(result.message_set)
                throttles.append(client.throttle_time_ms or 0)
                whole = len(result.message_set) // len(SET) * len(SET)
                offset = offset + whole if whole else 0  # (at the end: from the start again)
            else:
                client.metadata([topic])
            requests += 1
            marks.append((time.monotonic() - start, moved, requests))
        elapsed = time.monotonic() - start
    return {"moved": moved, "requests": requests, "elapsed": elapsed, "throttles": throttles,
            "marks": marks}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], float(sys.argv[3]), *sys.argv[4:])))
