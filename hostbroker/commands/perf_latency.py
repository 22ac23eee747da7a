"""``hostbroker perf latency``: per-API request latency percentiles at three loads.

For each API asked for (by default METADATA, PRODUCE, FETCH and OFFSETS; on
request also OFFSET_COMMIT, OFFSET_FETCH and HEARTBEAT) and each load:

- ``idle``: one connection, one request at a time, for ``--seconds``;
- ``full``: ``--clients`` connections (one thread each), each sending its
  next request as soon as the last one is answered (closed loop); the
  requests/s it reaches is the API's *capacity*;
- ``moderate``: the same connections, each sending on a fixed schedule so
  that together they offer half of that capacity (measured first, for
  ``min(--seconds, 1)`` s, when ``full`` is not asked for). A request is
  timed from its send; one whose slot came while the last was still out goes
  when that one is answered (``achieved_per_s`` says what was reached).

Every request is timed from just before its send to its decoded answer with
``time.perf_counter_ns``; the report gives, per API and load, the number of
requests, requests/s, answers with an error code, and the latency
percentiles p50, p99 and p99.9 and the maximum in milliseconds (nearest
rank, as ``perf produce``). The requests: METADATA of the topic; PRODUCE of
one 100-byte message (``acks = 1``); FETCH of up to 1 KiB from the log
start (``max_wait_ms = 0``); OFFSETS latest; OFFSET_COMMIT (version 0) of
partition 0's log start and OFFSET_FETCH of it, for the group
``hostbroker-perf`` (the offset it commits stays); HEARTBEAT of one member of
that group, which joins (session timeout 10 s) before the API's loads and
leaves after them, so it needs a broker that serves groups (standalone): a
join the broker refuses is tried, and fails the run, before anything is
measured. The topic gets ten messages first (created if the broker creates
topics on produce) so that FETCH has something to read. Client threads share
one interpreter: at full load the client's own work counts in the latencies,
as it does for any Python client.

The measuring loops (:func:`time_requests`, :func:`measure`) are shared with
``tools/bench/latency.py``, which runs them against hostbroker and a naive
broker side by side.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TextIO

from hostbroker.commands import DEFAULT_BOOTSTRAP, check_bootstrap, check_topic, describe_error
from hostbroker.exits import EXIT_OK, usage_error
from hostbroker.commands.perf import PERCENTILES, percentile
from hostbroker.errors import HostbrokerError

APIS = ("metadata", "produce", "fetch", "offsets", "offset_commit", "offset_fetch", "heartbeat")
DEFAULT_APIS = APIS[:4]  # what every broker serves, the naive one of tools/bench too
LOADS = ("idle", "moderate", "full")
GROUP = "hostbroker-perf"
SESSION_TIMEOUT_MS = 10_000
MESSAGE_BYTES = 100
FETCH_BYTES = 1024
SECONDS_LIMITS = (0.1, 3600.0)
CLIENTS_LIMITS = (1, 64)
DEFAULT_CLIENTS = 4
# Share of the measured capacity that ``moderate`` offers.
MODERATE_SHARE = 0.5
_TIMEOUT = 30.0


@dataclass
class Timings:
    """What one or more connections measured: latencies in ns, one per answered request."""

    latencies: list[int] = field(default_factory=list)
    errors: int = 0
    seconds: float = 0.0
    failure: str | None = None

    def merge(self, other: Timings) -> None:
        self.latencies += other.latencies
        self.errors += other.errors
        self.failure = self.failure or other.failure


def summary(timings: Timings) -> dict:
    """Requests, requests/s, errors and latency percentiles (ms) of ``timings``."""
    values = sorted(timings.latencies)
    out = {"requests": len(values), "seconds": round(timings.seconds, 3),
           "requests_per_s": round(len(values) / timings.seconds, 1) if timings.seconds else 0.0,
           "errors": timings.errors, "latency_ms": None}
    if values:
        out["latency_ms"] = {
            **{f"p{p:g}": round(percentile(values, p) / 1e6, 4) for p in PERCENTILES},
            "max": round(values[-1] / 1e6, 4)}
    if timings.failure:
        out["failure"] = timings.failure
    return out


def answer_errors(response) -> int:
    """How many of an answer's parts carry an error code."""
    from hostbroker.protocol import api

    if isinstance(response, api.OffsetsResponse):
        return int(response.error_code != 0)
    if isinstance(response, api.MetadataResponse):
        return sum(t.error_code != 0 for t in response.topics)
    parts = getattr(response, "partitions", None)
    if parts is None:  # HEARTBEAT
        return int(response.error_code != 0)
    return sum(p.error_code != 0 for p in parts)


def time_requests(uri: str, make_request: Callable[[], object], seconds: float, *,
                  interval: float | None = None, stop_at: float | None = None,
                  connection=None) -> Timings:
    """One connection sending ``make_request()`` one at a time for ``seconds``.

    With ``interval`` the sends follow a fixed schedule (one every
    ``interval`` s, late ones sent at once); without, each follows the
    last answer. ``stop_at`` (a ``time.monotonic`` value) overrides
    ``seconds``. Failures of the connection end the loop with ``failure`` set.
    """
    from hostbroker.client.coordinator_requests import GroupConnection

    timings = Timings()
    conn = connection or GroupConnection(uri, timeout=_TIMEOUT, client_id="hostbroker-perf")
    clock = time.perf_counter_ns
    try:
        if not conn.connected:
            conn.connect()
        start = time.monotonic()
        end = stop_at if stop_at is not None else start + seconds
        latencies = timings.latencies
        slot = start
        while True:
            now = time.monotonic()
            if interval is not None:
                slot += interval
                if slot > now:
                    if slot >= end:
                        break
                    time.sleep(slot - now)
            elif now >= end:
                break
            request = make_request()
            t0 = clock()
            response = conn.request(request)
            latencies.append(clock() - t0)
            timings.errors += answer_errors(response)
            if interval is not None and time.monotonic() >= end:
                break
        timings.seconds = time.monotonic() - start
    except (OSError, HostbrokerError) as exc:
        timings.failure = describe_error(exc, uri)[0]
    finally:
        if connection is None:
            conn.close()
    return timings


def run_clients(uri: str, make_request: Callable[[], object], seconds: float, clients: int,
                rate: float | None = None) -> Timings:
    """``clients`` threads, each running :func:`time_requests` on its own connection;
    with ``rate`` (requests/s over all of them) each is paced at its share."""
    from hostbroker.client.coordinator_requests import GroupConnection

    if clients == 1:
        return time_requests(uri, make_request, seconds,
                             interval=None if rate is None else 1 / rate)
    results: list[Timings] = [Timings() for _ in range(clients)]
    # Connect first, so that connecting is not in the timed window.
    conns = [GroupConnection(uri, timeout=_TIMEOUT, client_id="hostbroker-perf").connect()
             for _ in range(clients)]
    interval = None if rate is None else clients / rate
    stop_at = time.monotonic() + seconds

    def work(i: int) -> None:
        results[i] = time_requests(uri, make_request, seconds, interval=interval,
                                   stop_at=stop_at, connection=conns[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(clients)]
    started = time.monotonic()
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for conn in conns:
            conn.close()
    total = Timings(seconds=time.monotonic() - started)
    for r in results:
        total.merge(r)
    return total


class Requests:
    """The request each API is measured with, for one topic (partition 0)."""

    def __init__(self, topic: str, fetch_offset: int):
        from hostbroker.log.message import encode_message_set
        from hostbroker.protocol import api

        self.topic = topic
        message_set = encode_message_set([b"m" * MESSAGE_BYTES])
        self._made = {
            "metadata": api.MetadataRequest((topic,)),
            "produce": api.ProduceRequest(1, 10_000, (api.ProducePartition(topic, 0, message_set),)),
            "fetch": api.FetchRequest(0, 0, (api.FetchPartition(topic, 0, fetch_offset,
                                                                FETCH_BYTES),)),
            "offsets": api.OffsetsRequest(topic, 0, api.LATEST_TIME, 1),
            "offset_commit": api.OffsetCommitRequest(GROUP, (
                api.OffsetCommitPartition(topic, 0, fetch_offset, ""),)),
            "offset_fetch": api.OffsetFetchRequest(GROUP, (api.OffsetFetchPartition(topic, 0),)),
        }

    def maker(self, name: str) -> Callable[[], object]:
        request = self._made[name]
        return lambda: request

    @contextmanager
    def serving(self, uri: str, name: str):
        """What ``name``'s requests need while they are timed: for HEARTBEAT, a
        member of :data:`GROUP` (joined first, left after; BrokerError when the
        broker refuses the join)."""
        if name != "heartbeat":
            yield
            return
        from hostbroker.client.coordinator_requests import CoordinatorClient
        from hostbroker.client.errors import BrokerError
        from hostbroker.errors import ErrorCode
        from hostbroker.protocol import groups as gp

        client = CoordinatorClient([uri], timeout=_TIMEOUT, client_id="hostbroker-perf")
        joined = client.join_group(GROUP, "", {self.topic: 1},
                                   session_timeout_ms=SESSION_TIMEOUT_MS,
                                   rebalance_timeout_ms=SESSION_TIMEOUT_MS)
        if joined.error_code != ErrorCode.NONE:
            client.close()
            raise BrokerError(joined.error_code, f"joining group {GROUP} to time HEARTBEAT "
                                                 f"(session timeout {SESSION_TIMEOUT_MS} ms)")
        request = gp.HeartbeatRequest(GROUP, joined.generation, joined.member_id)
        self._made["heartbeat"] = request
        try:
            yield
        finally:
            del self._made["heartbeat"]
            try:
                client.leave_group(GROUP, joined.member_id)
            except (OSError, HostbrokerError):
                pass  # its session ends it
            client.close()

    @classmethod
    def prepare(cls, uri: str, topic: str) -> Requests:
        """Put ten messages into ``topic`` (creating it where the broker does) and
        find its log start; raises the broker's error (status 1) when it cannot."""
        from hostbroker.client.simple import SimpleClient
        from hostbroker.log.message import encode_message_set

        with SimpleClient(uri, "hostbroker-perf", timeout=_TIMEOUT) as client:
            client.produce(topic, 0, encode_message_set([b"m" * MESSAGE_BYTES] * 10))
            start = client.offsets(topic, 0, -2, 1)[0]
        return cls(topic, start)


def measure(uri: str, requests: Requests, apis: Sequence[str], loads: Sequence[str],
            seconds: float, clients: int = DEFAULT_CLIENTS,
            progress: Callable[[str], None] | None = None) -> dict:
    """``{api: {load: summary}}`` for every API and load asked for (module docstring)."""
    results: dict[str, dict] = {}
    for name in apis:
        with requests.serving(uri, name):
            results[name] = _measure_api(uri, requests.maker(name), name, loads, seconds,
                                         clients, progress)
    return results


def _measure_api(uri: str, make: Callable[[], object], name: str, loads: Sequence[str],
                 seconds: float, clients: int,
                 progress: Callable[[str], None] | None) -> dict:
    """``{load: summary}`` of one API (module docstring)."""
    row: dict[str, dict] = {}
    if progress:
        progress(f"{name} ...")
    if "idle" in loads:
        row["idle"] = summary(time_requests(uri, make, seconds))
    full = None
    if "full" in loads or "moderate" in loads:
        full = run_clients(uri, make, seconds if "full" in loads else min(seconds, 1.0),
                           clients)
    if "moderate" in loads:
        capacity = len(full.latencies) / full.seconds if full.seconds else 0.0
        rate = max(capacity * MODERATE_SHARE, 1.0)
        timed = run_clients(uri, make, seconds, clients, rate=rate)
        row["moderate"] = {**summary(timed), "offered_per_s": round(rate, 1),
                           "capacity_per_s": round(capacity, 1)}
        row["moderate"]["achieved_per_s"] = row["moderate"].pop("requests_per_s")
    if "full" in loads:
        row["full"] = {**summary(full), "clients": clients}
    return {load: row[load] for load in LOADS if load in row}


def _choice_list(option: str, text: str | None, allowed: Sequence[str],
                 every: str | None = None) -> list[str]:
    if text is None:
        return list(allowed)
    items = [x.strip() for x in text.split(",") if x.strip()]
    if every is not None and items == [every]:
        return list(allowed)
    bad = [x for x in items if x not in allowed]
    if bad or not items:
        raise usage_error(f"{option} {text!r}: expected a comma-separated list of "
                          f"{', '.join(allowed)}" + (f" (or {every})" if every else ""))
    return list(dict.fromkeys(items))


def format_report(report: dict) -> str:
    lines = [f"request latency (ms) on {report['bootstrap']}, topic {report['topic']}, "
             f"{report['seconds']:g} s per load, {report['clients']} clients at full load"]
    lines.append(f"{'api':13} {'load':9} {'requests':>9} {'req/s':>9} {'p50':>8} {'p99':>8} "
                 f"{'p99.9':>8} {'max':>8} {'errors':>6}")
    for name, loads in report["results"].items():
        for load, r in loads.items():
            lat = r["latency_ms"] or {}
            rate = r.get("requests_per_s", r.get("achieved_per_s", 0.0))
            cells = "".join(f" {lat.get(k, float('nan')):8.3f}" for k in ("p50", "p99", "p99.9",
                                                                          "max"))
            lines.append(f"{name:13} {load:9} {r['requests']:>9,} {rate:>9,.0f}{cells} "
                         f"{r['errors']:>6}")
    return "\n".join(lines)


def latency(topic: str, *, apis: str | None = None, loads: str | None = None,
            seconds: float = 2.0, clients: int = DEFAULT_CLIENTS, as_json: bool = False,
            bootstrap: str = DEFAULT_BOOTSTRAP, out: TextIO = sys.stdout,
            err: TextIO = sys.stderr) -> int:
    """Run ``perf latency`` (module docstring)."""
    check_topic(topic)
    check_bootstrap(bootstrap)
    api_list = list(DEFAULT_APIS) if apis is None else _choice_list("--api", apis, APIS,
                                                                     every="all")
    load_list = _choice_list("--load", loads, LOADS, every="all")
    if not SECONDS_LIMITS[0] <= seconds <= SECONDS_LIMITS[1]:
        raise usage_error(f"--seconds must be between {SECONDS_LIMITS[0]:g} and "
                          f"{SECONDS_LIMITS[1]:g}, not {seconds:g}")
    if not CLIENTS_LIMITS[0] <= clients <= CLIENTS_LIMITS[1]:
        raise usage_error(f"--clients must be between {CLIENTS_LIMITS[0]} and "
                          f"{CLIENTS_LIMITS[1]}, not {clients}")
    requests = Requests.prepare(bootstrap, topic)
    if "heartbeat" in api_list:  # a join the broker refuses fails the run before it starts
        with requests.serving(bootstrap, "heartbeat"):
            pass
    results = measure(bootstrap, requests, api_list, load_list, seconds, clients)
    report = {"test": "latency", "bootstrap": bootstrap, "topic": topic, "seconds": seconds,
              "clients": clients, "message_bytes": MESSAGE_BYTES, "results": results}
    failures = [r["failure"] for loads_ in results.values() for r in loads_.values()
                if r.get("failure")]
    print(json.dumps(report) if as_json else format_report(report), file=out)
    if failures:
        print(f"hostbroker perf latency: {failures[0]}", file=err)
        return 1
    return EXIT_OK
