#!/usr/bin/env python3
"""How close does the wire protocol itself come to the machine's limits? Throughput of a
real ``hostbroker serve``, next to page-cache writes and ``sendfile``.

Run by hand (not a test), from the repository with its venv::

    .venv/bin/python tools/bench/broker_throughput.py --uri-kind both
    .venv/bin/python tools/bench/broker_throughput.py --uri-kind unix --json
    .venv/bin/python tools/bench/broker_throughput.py --profile /tmp/hb-prof   # needs py-spy

What it does, every step bounded in time and size:

1. The machine's limits: page-cache write MB/s with ``dd`` (into a file it
   has already written, and into a fresh one), disk write MB/s (``dd`` with
   ``conv=fdatasync``), and ``os.sendfile`` MB/s from a page-cached file to a
   loopback TCP socket and to a Unix socket, read by a forked receiver
   process into a 256 KiB buffer (and, for comparison, into a 4 MiB one).
2. Starts its own broker (``hostbroker serve`` on a free TCP port and a Unix
   socket, data in a temporary directory, ``--set`` options passed through)
   and always stops it by PID with SIGTERM at the end.
3. Per socket kind: one producer process sends 100-byte messages in batches
   of 1000 (acks=1, one partition) with a bounded number of requests in
   flight; then one consumer process fetches them all twice (max_bytes 4 MiB,
   pipelined): walking entry lengths only, and with every CRC checked; then
   the same with 10 KiB messages in batches of 100 (~1 MiB requests).
4. Prints each phase's messages/s and MB/s, the CPU each broker process
   kind used, and a summary table of ratios to the machine limits and the
   targets. ``--json`` prints one JSON document instead.

Conventions: MB is 10^6 bytes and counts *log bytes* (entries with their
10-byte v1 headers: 110 B per 100-byte message), which is what is written to
the page cache and sent with sendfile. The producer sends prebuilt message
sets (8 distinct sets, each reused; the broker still checks every CRC).

Pipelined fetches: the consumer asks for contiguous 4 MiB byte ranges of the
partition several at a time (the broker serves any byte range and does not
check entry boundaries, docs/spec/protocol.md FETCH) and re-joins the one entry cut at
each range boundary, so it needs no entry boundary before sending the next
fetch. The "crc" walk is :func:`crc_check_walk` below: the library's
``count_entries`` finds the whole entries of each range and its
``validate_message_set`` checks all of them (a bad CRC stops the run);
``--iter-messages`` also times the library's ``iter_messages``.

This machine is shared and noisy: before each phase the benchmark waits (up
to ``--wait-quiet`` seconds) for a second in which the machine is mostly
idle, and prints how busy it was. Run it a few times and compare.

Owns: the producer and consumer roles, the consumer's walks, the phases
and the report against the targets. The broker under test, the child
processes and the CPU accounting are :mod:`harness`'s, the machine's
limits :mod:`machine_limits`', both shared with the other benchmarks here.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import struct
import sys
import tempfile
import time

from harness import (
    MB,
    MIB,
    BenchError,
    Broker,
    Child,
    Profiler,
    busy_cpu_seconds,
    cpu_seconds,
    emit,
    handshake,
    log,
    machine_info,
    output,
    process_kind,
    wait_quiet,
    warm_up,
)
from machine_limits import measure_pagecache, measure_sendfile

SCRIPT = os.path.abspath(__file__)  # what a Child runs, with --role
V1_HEADER = 10  # length:int32 magic:int8 attributes:int8 crc:uint32

TARGETS = {
    "produce_small_msgs": 1_500_000,  # 100 B messages/s, acks=1, one producer
    "fetch_lengths_msgs": 3_000_000,  # 100 B messages/s walking lengths
    "fetch_crc_msgs": 1_500_000,  # 100 B messages/s with every CRC checked
    "big_produce_vs_pagecache": 0.5,  # 10 KiB produce MB/s / page-cache write MB/s
    "big_fetch_vs_sendfile": 0.5,  # 10 KiB fetch MB/s / loopback sendfile MB/s
}


# ---------------------------------------------------------------------------
# Consumer-side walks over a fetched message set: each returns
# (whole entries, bytes they span) and stops at a trailing partial entry.

_LENGTH = struct.Struct(">i")


def crc_check_walk(buf, max_message_bytes: int = 1_000_000) -> tuple[int, int]:
    """Check every whole entry of ``buf`` (length, magic, attributes, CRC) with the library.

    ``count_entries`` finds the whole entries (a fetched range ends with a cut
    one); ``validate_message_set`` checks that prefix and raises
    InvalidMessageError / MessageTooLargeError at the first entry that breaks
    a rule, so a bad CRC stops the read. What follows the whole entries must
    be the start of one entry with a plausible length: a bad length there
    would otherwise look like a cut entry.
    """
    from hostbroker.log.message import MIN_LENGTH_V0, count_entries, validate_message_set

    view = memoryview(buf)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    count, nbytes = count_entries(view)
    checked = validate_message_set(view[:nbytes], max_message_bytes)
    if checked != count:
        raise BenchError(f"validate_message_set checked {checked} entries, "
                         f"count_entries found {count}")
    if len(view) - nbytes >= 4:
        (length,) = _LENGTH.unpack_from(view, nbytes)
        if not MIN_LENGTH_V0 <= length <= max_message_bytes:
            validate_message_set(view[nbytes:], max_message_bytes)  # says what is wrong
            raise BenchError(f"entry at {nbytes} has length {length}")  # pragma: no cover
    return count, nbytes


def lengths_walk(buf) -> tuple[int, int]:
    from hostbroker.log.message import count_entries

    return count_entries(buf)


def iter_walk(buf) -> tuple[int, int]:
    """``iter_messages`` with CRC checks, as an application would read."""
    from hostbroker.log.message import iter_messages

    count = 0
    last = 0
    for message in iter_messages(buf, 0):
        count += 1
        last = message.next_offset
    return count, last


WALKS = {"lengths": lengths_walk, "crc": crc_check_walk, "iter": iter_walk}


# ---------------------------------------------------------------------------
# Child roles (harness.Child): each runs in its own process, says READY on
# stdout once set up, waits for GO on stdin, then times its work and prints
# one JSON line.

def role_producer(p: dict) -> None:
    from hostbroker.client.connection import BrokerConnection
    from hostbroker.log.message import encode_message_set
    from hostbroker.protocol import api

    size, batch = p["message_bytes"], p["batch"]
    batches = max(1, p["messages"] // batch)
    sets = [encode_message_set([os.urandom(size) for _ in range(batch)])
            for _ in range(p["distinct_sets"])]
    requests = [api.ProduceRequest(1, 30_000, (api.ProducePartition(p["topic"], 0, s),))
                for s in sets]
    set_bytes = len(sets[0])
    conn = BrokerConnection(p["uri"], client_id="hb-bench-producer").connect()
    window = p["in_flight"]
    handshake()
    deadline = time.monotonic() + p["max_seconds"]
    t0 = time.perf_counter()
    sent = received = 0
    first_base = last_end = None
    capped = False
    while received < batches:
        while sent < batches and conn.pending < window:
            if time.monotonic() > deadline:
                capped = True
                batches = sent
                break
            conn.send(requests[sent % len(requests)])
            sent += 1
        if received == batches:
            break
        result = conn.receive().partitions[0]
        if result.error_code != 0:
            raise BenchError(f"produce answered {result!r}")
        if first_base is None:
            first_base = result.base_offset
        last_end = result.log_end_offset
        received += 1
    seconds = time.perf_counter() - t0
    conn.close()
    emit({"messages": received * batch, "requests": received, "bytes": received * set_bytes,
          "payload_bytes": received * batch * size, "seconds": seconds, "capped": capped,
          "first_base": first_base, "end_offset": last_end})


def role_consumer(p: dict) -> None:
    from hostbroker.client.connection import BrokerConnection
    from hostbroker.protocol import api

    walk = WALKS[p["walk"]]
    topic, start, end = p["topic"], p["start"], p["end"]
    max_bytes, window = p["max_bytes"], p["in_flight"]
    conn = BrokerConnection(p["uri"], client_id="hb-bench-consumer").connect()

    def fetch(offset: int) -> None:
        conn.send(api.FetchRequest(0, 0, (api.FetchPartition(topic, 0, offset, max_bytes),)))

    handshake()
    deadline = time.monotonic() + p["max_seconds"]
    t0 = time.perf_counter()
    inflight: collections.deque[int] = collections.deque()
    next_offset = start  # the byte offset the next fetch asks for
    pos = start  # everything before pos is walked (whole entries)
    carry = bytearray()  # the start of an entry cut at the last range boundary
    count = fetches = short = 0
    capped = False
    while pos < end:
        if time.monotonic() > deadline:
            capped = True
            break
        while len(inflight) < window and next_offset < end:
            fetch(next_offset)
            inflight.append(next_offset)
            next_offset += max_bytes
        offset = inflight.popleft()
        result = conn.receive().partitions[0]
        fetches += 1
        if result.error_code != 0:
            raise BenchError(f"fetch at {offset} answered error {result.error_code}")
        data = result.message_set
        if offset != pos + len(carry):
            raise BenchError(f"fetch at {offset} does not follow {pos}+{len(carry)}")
        skip = 0
        if carry:
            # complete the entry cut at the range boundary and walk it alone
            need = min(4 - len(carry), len(data)) if len(carry) < 4 else 0
            if need:
                carry += data[:need]
                skip = need
            if len(carry) >= 4:
                whole = 4 + _LENGTH.unpack_from(carry)[0]
                take = min(whole - len(carry), len(data) - skip)
                carry += data[skip:skip + take]
                skip += take
                if len(carry) == whole:
                    n, nbytes = walk(carry)
                    if (n, nbytes) != (1, whole):
                        raise BenchError(f"entry at {pos} does not walk: {(n, nbytes)}")
                    count += 1
                    pos += whole
                    carry = bytearray()
        if not carry:
            n, nbytes = walk(data[skip:])
            count += n
            pos += nbytes
            carry = bytearray(data[skip + nbytes:])
        if len(data) < min(max_bytes, end - offset):
            # a short answer (segment boundary): the ranges in flight no longer
            # follow on; drop them and ask again from where this one stopped
            short += 1
            while inflight:
                inflight.popleft()
                conn.receive()
            next_offset = offset + len(data)
    seconds = time.perf_counter() - t0
    conn.close()
    if not capped and (pos != end or carry):
        raise BenchError(f"walked to {pos} with {len(carry)} bytes left over, log ends at {end}")
    emit({"messages": count, "bytes": pos - start, "seconds": seconds, "fetches": fetches,
          "short_fetches": short, "capped": capped})


ROLES = {"producer": role_producer, "consumer": role_consumer}


# ---------------------------------------------------------------------------
# The orchestrating side.

def run_phase(name: str, role: str, params: dict, broker: Broker, workdir: str,
              profiler: Profiler, max_seconds: float, quiet_wait: float = 0) -> dict:
    child = Child(SCRIPT, role, params, workdir, timeout=max_seconds + 120)
    try:
        child.ready()
        pids = dict(broker.worker_pids, client=child.pid)
        idle_before = wait_quiet(quiet_wait) if quiet_wait else None
        profiler.start(name, pids, max_seconds)
        before = cpu_seconds(pids)
        system_before = busy_cpu_seconds()
        wall0 = time.perf_counter()
        child.go()
        result = child.result()
        wall = time.perf_counter() - wall0
        after = cpu_seconds(pids)
        system_busy = busy_cpu_seconds() - system_before
    finally:
        profiler.stop()
        child.end()
    cpu = {n: (after[n] - before[n]) / wall * 100 for n in after if n in before}
    cpu["client"] = result["cpu_seconds"] / result["seconds"] * 100  # it has exited
    # CPU used meanwhile by everything else on the machine (other work, py-spy,
    # the kernel's own threads): a large figure means this phase was disturbed
    ours = sum(after[n] - before[n] for n in after if n in before) + result["cpu_seconds"]
    result["others_cpu_percent"] = max(0.0, (system_busy - ours) / wall * 100)
    result["machine_busy_before"] = idle_before
    by_kind: dict[str, float] = collections.defaultdict(float)
    for n, pct in cpu.items():
        by_kind[process_kind(n)] += pct
    result.update(phase=name, cpu_percent=cpu, cpu_percent_by_kind=dict(by_kind),
                  msgs_per_s=result["messages"] / result["seconds"],
                  mb_per_s=result["bytes"] / result["seconds"] / MB)
    return result


# ---------------------------------------------------------------------------
# Report.

def summarize(report: dict) -> list[dict]:
    """Rows: what was measured, against what, the ratio, and the goal if there is one.

    ``goal`` is the ratio a row must reach (None: shown for information);
    ``met`` says whether it did.
    """
    rows = []
    limits = report.get("limits", {})
    pc = limits.get("pagecache", {})
    sf = limits.get("sendfile", {})
    for kind, phases in report["runs"].items():
        def row(what, value, unit, ref_name, ref, goal):
            ratio = value / ref if ref else None
            rows.append({"socket": kind, "what": what, "value": value, "unit": unit,
                         "reference": ref_name, "ref_value": ref, "ratio": ratio, "goal": goal,
                         "met": None if goal is None or ratio is None else ratio >= goal})

        sendfile = (f"sendfile {kind}", sf.get(f"{kind}_mb_s"))
        p = phases.get("produce_100B")
        if p:
            row("produce 100 B", p["msgs_per_s"], "msg/s", "target msg/s",
                TARGETS["produce_small_msgs"], 1.0)
            row("produce 100 B", p["mb_per_s"], "MB/s", "page cache, fresh file",
                pc.get("fresh_file_mb_s"), None)
        for walk, target in (("lengths", "fetch_lengths_msgs"), ("crc", "fetch_crc_msgs"),
                             ("iter", "fetch_crc_msgs")):
            f = phases.get(f"fetch_100B_{walk}")
            if f:
                row(f"fetch 100 B, {walk}", f["msgs_per_s"], "msg/s", "target msg/s",
                    TARGETS[target], 1.0)
                row(f"fetch 100 B, {walk}", f["mb_per_s"], "MB/s", *sendfile, None)
        p = phases.get("produce_10KiB")
        if p:
            goal = TARGETS["big_produce_vs_pagecache"]
            row("produce 10 KiB", p["mb_per_s"], "MB/s", "page cache, fresh file",
                pc.get("fresh_file_mb_s"), goal)
            row("produce 10 KiB", p["mb_per_s"], "MB/s", "page cache, reused file",
                pc.get("reused_file_mb_s"), goal)
            row("produce 10 KiB", p["mb_per_s"], "MB/s", "disk (dd fdatasync)",
                pc.get("fdatasync_fresh_file_mb_s"), None)
        for walk in ("lengths", "crc"):
            f = phases.get(f"fetch_10KiB_{walk}")
            if f:
                row(f"fetch 10 KiB, {walk}", f["mb_per_s"], "MB/s", *sendfile,
                    TARGETS["big_fetch_vs_sendfile"])
    return rows


def print_report(report: dict) -> None:
    m = report["machine"]
    print(f"machine: {m['nproc']} CPUs ({m['cpu_model']}), {m['ram_gib']} GiB, "
          f"Linux {m['kernel']}, Python {m['python']}, hostbroker {m['git']}")
    for key in ("producer", "consumer", "mb"):
        print(f"{key}: {report['notes'][key]}")
    limits = report.get("limits", {})
    if "pagecache" in limits:
        pc = limits["pagecache"]
        print(f"page-cache write (dd bs=1M count={pc['mib']}, best of "
              f"{len(pc['fresh_runs'])}): fresh file {pc['fresh_file_mb_s']:.0f} MB/s, "
              f"reused file {pc['reused_file_mb_s']:.0f} MB/s")
        if pc.get("fdatasync_fresh_file_mb_s"):
            print(f"disk write (dd bs=1M count={pc['fdatasync_mib']} conv=fdatasync, fresh file): "
                  f"{pc['fdatasync_fresh_file_mb_s']:.0f} MB/s")
    if "sendfile" in limits:
        sf = limits["sendfile"]
        print(f"os.sendfile page cache -> loopback, {sf['chunk_bytes'] // MIB} MiB calls, best of "
              f"{len(sf['tcp_runs'])}, receiver reading into {sf['recv_bytes'] // 1024} KiB: "
              f"TCP {sf['tcp_mb_s']:.0f} MB/s, Unix {sf['unix_mb_s']:.0f} MB/s "
              f"(into {sf['large_recv_bytes'] // MIB} MiB: TCP {sf['tcp_large_recv_mb_s']:.0f}, "
              f"Unix {sf['unix_large_recv_mb_s']:.0f})")
    print()
    print(f"{'socket':6} {'phase':20} {'messages':>9} {'s':>6} {'msgs/s':>9} {'MB/s':>6}"
          f"  CPU % of one core (client, broker processes over 1 %)")
    for kind, phases in report["runs"].items():
        for name, r in phases.items():
            cpu = r["cpu_percent"]
            shown = " ".join(f"{n}:{cpu[n]:.0f}" for n in sorted(cpu) if cpu[n] >= 1)
            cap = " CAPPED" if r.get("capped") else ""
            pre = r.get("machine_busy_before")
            disturbed = "" if pre is None else (
                f" (machine {max(pre, 0):.0%} busy before" + (", NOISY)" if pre >= 0.15 else ")"))
            print(f"{kind:6} {name:20} {r['messages']:>9} {r['seconds']:>6.2f} "
                  f"{r['msgs_per_s']:>9.0f} {r['mb_per_s']:>6.0f}  {shown}{disturbed}{cap}")
    print()
    print(f"{'socket':6} {'measure':22} {'value':>14}  {'vs':24} {'ref':>9} {'ratio':>6}  goal")
    for row in report["summary"]:
        ratio = "" if row["ratio"] is None else f"{row['ratio']:.2f}"
        ref = "" if row["ref_value"] is None else f"{row['ref_value']:.0f}"
        goal = "" if row["goal"] is None else (
            f">= {row['goal']:.1f} " + {True: "met", False: "MISSED", None: "?"}[row["met"]])
        value = f"{row['value']:.0f} {row['unit']}"
        print(f"{row['socket']:6} {row['what']:22} {value:>14}  {row['reference']:24} "
              f"{ref:>9} {ratio:>6}  {goal}")


# ---------------------------------------------------------------------------

def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--uri-kind", choices=("unix", "tcp", "both"), default="unix",
                    help="socket the clients use (default unix)")
    ap.add_argument("--messages", type=int, default=2_000_000,
                    help="100-byte messages to produce and fetch (default 2,000,000)")
    ap.add_argument("--big-messages", type=int, default=100_000,
                    help="10 KiB messages to produce and fetch (default 100,000, ~1 GB)")
    ap.add_argument("--max-seconds", type=float, default=60,
                    help="cap on each produce/fetch phase (default 60)")
    ap.add_argument("--in-flight", type=int, default=16, help="produce requests in flight (default 16)")
    ap.add_argument("--fetch-in-flight", type=int, default=4, help="fetch requests in flight (default 4)")
    ap.add_argument("--fetch-max-bytes", type=int, default=4 * MIB,
                    help="max_bytes of each fetch, also the sendfile call size (default 4 MiB)")
    ap.add_argument("--iter-messages", action="store_true",
                    help="also time a fetch read with the library's iter_messages")
    ap.add_argument("--phases", metavar="LIST",
                    help="only these phases, e.g. produce_100B,fetch_100B_crc (a fetch phase "
                         "runs after the produce phase of its size, which always runs)")
    ap.add_argument("--skip-limits", action="store_true", help="do not measure dd / sendfile")
    ap.add_argument("--dd-mib", type=int, default=1024, help="MiB written per dd run (default 1024)")
    ap.add_argument("--dd-sync-mib", type=int, default=512,
                    help="MiB written per dd run with conv=fdatasync (disk speed; default 512; "
                         "0: skip)")
    ap.add_argument("--sendfile-mib", type=int, default=1024, help="MiB sent per sendfile run (default 1024)")
    ap.add_argument("--repeats", type=int, default=2, help="runs of each machine limit, the best is kept (default 2)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="broker setting passed to hostbroker serve (repeatable)")
    ap.add_argument("--workdir", help="where data goes (default: a new temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--profile", metavar="DIR",
                    help="record py-spy raw profiles of every worker and client per phase")
    ap.add_argument("--profile-rate", type=int, default=100, help="py-spy samples/s (default 100)")
    ap.add_argument("--wait-quiet", type=float, default=30, metavar="SECONDS",
                    help="before each phase wait up to this long for a mostly idle machine "
                         "(default 30; 0: do not wait)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of tables")
    ap.add_argument("--json-out", metavar="FILE", help="also write the JSON report to FILE")
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("params", nargs="?", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.role:
        ROLES[args.role](json.loads(args.params))
        return 0

    def on_term(signum, frame):
        raise SystemExit(f"benchmark stopped by signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    workdir = args.workdir or tempfile.mkdtemp(prefix="hb-bench-")
    os.makedirs(workdir, exist_ok=True)
    kinds = ["unix", "tcp"] if args.uri_kind == "both" else [args.uri_kind]
    report: dict = {
        "machine": machine_info(),
        "args": {k: v for k, v in vars(args).items() if k not in ("role", "params")},
        "notes": {
            "producer": "one process, BrokerConnection, acks=1, one partition, "
                        f"{args.in_flight} requests in flight, 8 prebuilt message sets reused "
                        "(the broker checks every CRC)",
            "consumer": f"one process, contiguous {args.fetch_max_bytes // MIB} MiB byte ranges, "
                        f"{args.fetch_in_flight} fetches in flight; 'lengths' = count_entries, "
                        "'crc' = every entry's CRC checked (count_entries, then "
                        "validate_message_set on the whole entries), "
                        "'iter' = iter_messages with CRC",
            "mb": "MB = 10^6 log bytes (entries incl. 10-byte headers)",
        },
        "limits": {},
        "runs": {},
    }
    profiler = Profiler(args.profile, args.profile_rate)
    broker = None
    try:
        if not args.skip_limits:
            log("measuring page-cache writes (dd) ...")
            report["limits"]["pagecache"] = measure_pagecache(workdir, args.dd_mib, args.repeats,
                                                              args.dd_sync_mib)
            log("measuring loopback sendfile ...")
            report["limits"]["sendfile"] = measure_sendfile(
                workdir, min(256, args.sendfile_mib), args.sendfile_mib, args.fetch_max_bytes,
                args.repeats)
        broker = Broker(workdir, args.set)
        report["broker_settings"] = broker.settings
        log(f"starting hostbroker serve in {workdir} ...")
        broker.start()
        report["broker_workers"] = sorted(broker.worker_pids)
        warm_up(broker)
        for kind in kinds:
            report["runs"][kind] = _run_kind(kind, broker, workdir, profiler, args)
    finally:
        profiler.stop()
        if broker is not None:
            code = broker.stop()
            report["broker_exit_code"] = code
            if code not in (0, None):
                log(f"broker exited with {code}:\n{broker.log()}")
        if not args.keep and not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    report["summary"] = summarize(report)
    output(report, args, print_report)
    return 0


def _run_kind(kind: str, broker: Broker, workdir: str, profiler: Profiler,
              args: argparse.Namespace) -> dict:
    from hostbroker.client.simple import SimpleClient

    uri = broker.uri(kind)
    cap = args.max_seconds
    phases = {}
    wanted = set(args.phases.split(",")) if args.phases else None
    for label, size, batch, count in (("100B", 100, 1000, args.messages),
                                      ("10KiB", 10 * 1024, 100, args.big_messages)):
        if wanted is not None and not any(w.endswith(label) or f"_{label}_" in w
                                          for w in wanted):
            continue
        topic = f"bench-{kind}-{label}"
        with SimpleClient(uri) as client:
            client.create_topic(topic, 1)
        name = f"produce_{label}"
        log(f"[{kind}] {name}: {count} messages ...")
        phases[name] = run_phase(f"{kind}-{name}", "producer", {
            "uri": uri, "topic": topic, "message_bytes": size, "batch": batch,
            "messages": count, "in_flight": args.in_flight, "distinct_sets": 8,
            "max_seconds": cap}, broker, workdir, profiler, cap,
            args.wait_quiet)
        produced = phases[name]
        walks = ["lengths", "crc"] + (["iter"] if args.iter_messages and label == "100B" else [])
        for walk in walks:
            name = f"fetch_{label}_{walk}"
            if wanted is not None and name not in wanted:
                continue
            log(f"[{kind}] {name} ...")
            phases[name] = run_phase(f"{kind}-{name}", "consumer", {
                "uri": uri, "topic": topic, "start": produced["first_base"],
                "end": produced["end_offset"], "max_bytes": args.fetch_max_bytes,
                "in_flight": args.fetch_in_flight, "walk": walk, "max_seconds": cap},
                broker, workdir, profiler, cap, args.wait_quiet)
            if not phases[name]["capped"] and phases[name]["messages"] != produced["messages"]:
                raise BenchError(f"{name} read {phases[name]['messages']} messages, "
                                 f"{produced['messages']} were produced")
    return phases


if __name__ == "__main__":
    sys.exit(main())
