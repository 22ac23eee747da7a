#!/usr/bin/env python3
"""What does a ``/metrics`` scrape cost a broker of many partitions?

Run by hand (not a test), from the repository with its venv::

    .venv/bin/python tools/bench/metrics.py --topics 100 --partitions 100 --scrapes 20

Starts ``hostbroker serve`` (``--set`` passed through) with an HTTP
listener on a free loopback port, creates ``--topics`` topics of
``--partitions`` partitions, produces one message set to every partition
(so offsets and counters are not all zero), and gives ``--groups`` groups
a member and committed offsets on one topic each (so the scrape carries
group lag). One scrape warms hb-http up (its label cache, its first group
refresh). Then two phases of ``--seconds`` each, the broker otherwise idle:

- **quiet**: nothing; the CPU every broker process uses anyway;
- **scraping**: ``--scrapes`` GETs of ``/metrics`` spread over the phase,
  one at a time over one keep-alive connection (as Prometheus keeps one).

It reports, per scrape: hb-http's CPU (psutil, user + system), the answer's
bytes and lines and the client's wall time; the rest of the broker's CPU
during the scrapes against the quiet phase (what a scrape costs the
processes that serve clients: nothing but noise is expected); and what a
scrape every 15 s costs as a share of one core. The group offsets are read
at most every ``http.metrics.lag.interval.ms`` (15 s by default), so a
scraping phase of 15 s or more includes a refresh; ``--lag-every-scrape``
sets the interval to 0 to time a refresh with every scrape.
"""

from __future__ import annotations

import argparse
import http.client
import os
import sys
import tempfile
import time

sys.path[:0] = [os.path.dirname(os.path.abspath(__file__))]

import harness  # noqa: E402


def _setup(broker: harness.Broker, topics: int, partitions: int, groups: int) -> list:
    """Topics, one message set per partition, and groups with a member each
    (their clients, to close at the end)."""
    from hostbroker.client.coordinator_requests import CoordinatorClient
    from hostbroker.client.simple import SimpleClient
    from hostbroker.log.message import encode_message_set

    names = [f"bench-{i:04d}" for i in range(topics)]
    data = encode_message_set([b"m" * 100] * 10)
    with SimpleClient(broker.uri("unix"), timeout=120) as client:
        for name in names:
            client.create_topic(name, partitions)
        for name in names:
            client.produce_many([(name, p, data) for p in range(partitions)])
    members = []
    for g in range(groups):
        topic = names[g % len(names)]
        member = CoordinatorClient([broker.uri("unix")], timeout=30, client_id="bench-metrics")
        joined = member.join_group(f"bench-group-{g}", "", {topic: 1},
                                   session_timeout_ms=300000, rebalance_timeout_ms=5000)
        member.sync_group(f"bench-group-{g}", joined.generation, joined.member_id)
        member.commit(f"bench-group-{g}", joined.generation, joined.member_id,
                      [(topic, p, 0, None) for p in range(partitions)])
        members.append(member)
    return members


def _scrape(conn: http.client.HTTPConnection) -> bytes:
    conn.request("GET", "/metrics")
    answer = conn.getresponse()
    body = answer.read()
    if answer.status != 200:
        raise harness.BenchError(f"/metrics answered {answer.status}: {body[:200]!r}")
    return body


def _busy(broker: harness.Broker) -> dict[str, float]:
    return harness.cpu_seconds(broker.workers())


def run(args: argparse.Namespace) -> dict:
    workdir = tempfile.mkdtemp(prefix="hb-bench-metrics-")
    http_port = harness.free_port()
    total = args.topics * args.partitions
    settings = [f"http.listeners=http://127.0.0.1:{http_port}",
                f"max.partitions={max(4096, 2 * total)}",
                f"http.metrics.max.partitions={max(total, 1)}",
                *(["http.metrics.lag.interval.ms=0"] if args.lag_every_scrape else []),
                *args.set]
    broker = harness.Broker(workdir, settings)
    report = {"machine": harness.machine_info(), "topics": args.topics,
              "partitions_per_topic": args.partitions, "partitions": total,
              "groups": args.groups, "scrapes": args.scrapes, "seconds": args.seconds,
              "settings": settings}
    members = []
    broker.start()
    try:
        harness.log(f"creating {total} partitions and {args.groups} groups")
        members = _setup(broker, args.topics, args.partitions, args.groups)
        pids = broker.workers()
        if "hb-http" not in pids:
            raise harness.BenchError("no hb-http process: is http.listeners set?")
        conn = http.client.HTTPConnection("127.0.0.1", http_port, timeout=60)
        first = _scrape(conn)  # hb-http warms up: label strings, the first group refresh
        report["bytes"] = len(first)
        report["lines"] = first.count(b"\n")
        conn.close()  # idle through the quiet phase, hb-http would close it (http.idle.timeout.ms)
        harness.wait_quiet(30)
        harness.log(f"quiet phase, {args.seconds:.0f} s")
        before = _busy(broker)
        time.sleep(args.seconds)
        quiet = {k: v - before.get(k, 0.0) for k, v in _busy(broker).items()}
        harness.log(f"scraping phase: {args.scrapes} scrapes in {args.seconds:.0f} s")
        conn = http.client.HTTPConnection("127.0.0.1", http_port, timeout=60)
        before = _busy(broker)
        walls = []
        started = time.monotonic()
        for i in range(args.scrapes):
            target = started + i * args.seconds / args.scrapes
            time.sleep(max(0.0, target - time.monotonic()))
            t0 = time.perf_counter()
            _scrape(conn)
            walls.append(time.perf_counter() - t0)
        time.sleep(max(0.0, started + args.seconds - time.monotonic()))
        scraping = {k: v - before.get(k, 0.0) for k, v in _busy(broker).items()}
        conn.close()
    finally:
        for member in members:
            member.close()
        broker.stop()
    http_cpu = scraping.get("hb-http", 0.0)
    others = sum(v for k, v in scraping.items() if k != "hb-http")
    others_quiet = sum(v for k, v in quiet.items() if k != "hb-http")
    per_scrape = http_cpu / args.scrapes
    report.update({
        "hb_http_cpu_ms_per_scrape": round(per_scrape * 1000, 1),
        "hb_http_cpu_ms_quiet": round(quiet.get("hb-http", 0.0) * 1000, 1),
        "wall_ms_per_scrape_mean": round(sum(walls) / len(walls) * 1000, 1),
        "wall_ms_per_scrape_max": round(max(walls) * 1000, 1),
        "core_share_at_15s": round(per_scrape / 15, 5),
        "other_processes_cpu_ms_quiet": round(others_quiet * 1000, 1),
        "other_processes_cpu_ms_scraping": round(others * 1000, 1),
        "per_process_cpu_ms_scraping": {k: round(v * 1000, 1) for k, v in sorted(scraping.items())},
        "per_process_cpu_ms_quiet": {k: round(v * 1000, 1) for k, v in sorted(quiet.items())},
    })
    return report


def print_report(r: dict) -> None:
    print(f"{r['partitions']} partitions ({r['topics']} x {r['partitions_per_topic']}), "
          f"{r['groups']} groups, {r['scrapes']} scrapes in {r['seconds']:.0f} s; "
          f"a scrape is {r['bytes'] / 2**20:.1f} MiB, {r['lines']} lines")
    print(f"hb-http CPU per scrape   {r['hb_http_cpu_ms_per_scrape']:8.1f} ms  "
          f"(one every 15 s: {r['core_share_at_15s'] * 100:.2f} % of a core)")
    print(f"client wall per scrape   {r['wall_ms_per_scrape_mean']:8.1f} ms mean, "
          f"{r['wall_ms_per_scrape_max']:.1f} ms max")
    print(f"other processes' CPU     {r['other_processes_cpu_ms_scraping']:8.1f} ms scraping, "
          f"{r['other_processes_cpu_ms_quiet']:.1f} ms quiet (same length)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=100, help="per topic")
    parser.add_argument("--groups", type=int, default=10)
    parser.add_argument("--scrapes", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=30.0, help="length of each phase")
    parser.add_argument("--lag-every-scrape", action="store_true",
                        help="read group offsets at every scrape (lag interval 0)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting (repeatable)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--json-out")
    args = parser.parse_args()
    harness.output(run(args), args, print_report)


if __name__ == "__main__":
    main()
