#!/usr/bin/env python3
"""How fast is hostbroker on this host, and against what: the one benchmark suite.

Run by hand (not a test), from the repository with its venv, as root for the peers::

    .venv/bin/pip install -e '.[bench]'      # matplotlib, and the peers' clients
    .venv/bin/python tools/bench/suite.py --quick                 # under 3 minutes
    .venv/bin/python tools/bench/suite.py --out docs/bench        # the full run, under 30

One command, one JSON result file (``OUT/suite.json``) and the plots
(``OUT/*.png``), and a short table on stdout. Every broker and server is
started here on loopback (free ports, data in a temporary directory) and
stopped by PID at the end, also after an error or Ctrl-C. Every load is
bounded in count and in time. The sections, in this order:

1. **limits**: the machine's own page-cache and disk write speed (``dd``) and
   loopback ``sendfile`` (:mod:`machine_limits`).
2. **table**: the variables of Kafka 0.8's performance-testing page, one at a
   time from a base point (1 producer, 100-byte messages, 1 partition,
   replication factor 1, 1 consumer): producers, message size, partitions
   (one standalone ``hostbroker serve``), replication factor (three brokers
   on one ZooKeeper, each its own log dir) and consumers (reading a topic of
   3 partitions written before). Each cell: messages/s, MB/s (10^6 payload
   bytes), and the broker's CPU (cores busy) and memory (PSS of its process
   tree, mean and peak) sampled over the cell; each cell is run ``repeats``
   times in turns and its best repeat kept (other work on a shared machine
   only slows a cell down), every repeat's figure beside it. Clients: ``Producer`` (async,
   default settings, ``send_many`` of one ``batch.size`` at a time) and
   ``SimpleConsumer`` (default settings, every CRC checked), each in its own
   process (:mod:`suite_roles`).
3. **naive**: the base cells and 10,000-byte messages on the naive
   one-process broker (``naive_broker.py``), same clients, same run: ratios.
4. **raw**: 10 KiB messages produced and fetched with the wire protocol
   itself on both brokers (``broker_throughput.py``'s roles), against the
   page cache and ``sendfile``: how close each comes to the machine.
5. **latency**: p50/p99/p99.9 of a PRODUCE (acks=1, one 100-byte message,
   one at a time) and of a produce-to-consume round trip (one message a
   PRODUCE at a fixed rate, a consumer long-polling: ``latency_loads``), on
   both brokers, interleaved.
6. **peers**: Redis Streams, NATS JetStream and RabbitMQ Streams, each at its
   best setting of a small sweep (``compare.py``'s), beside hostbroker's
   public API at its best; a peer whose server or client is missing is
   skipped with one line saying so.

``--quick`` runs fewer cells, shorter, without the peers; ``--smoke`` is the
smallest run (seconds, for its test: its figures mean nothing). The machine
this runs on may be shared: compare figures of one run (the ratios), not of
two runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [HERE, ROOT]

import harness  # noqa: E402
import suite_roles  # noqa: E402
import suite_tables  # noqa: E402

SCRIPT = os.path.abspath(__file__)
MB = 1_000_000
KIB = 1024
BASE = {"producers": 1, "size": 100, "partitions": 1, "rf": 1, "consumers": 1}
CONSUME_PARTITIONS = 3  # the topic the consumer cells read: room for 3 consumers
PEERS = ("redis", "nats", "rabbitmq")

# what each mode runs: the values of each variable, the cap on one cell, the
# messages a producer sends at most (by size), repeats, and the other sections
MODES = {
    "full": {"producers": (1, 2, 3), "size": (10, 100, 1000, 10000), "partitions": (1, 3, 9),
             "rf": (1, 2, 3), "acks": (1, -1), "consumers": (1, 2, 3), "seconds": 8.0,
             "repeats": 3,
             "counts": {10: 6_000_000, 100: 4_000_000, 1000: 1_200_000, 10000: 120_000},
             "dd_mib": 512, "sendfile_mib": 512, "raw_messages": 60_000,
             "latency_seconds": 6.0, "e2e_rate": 1000, "limit_repeats": 2, "peers": True,
             "peer_seconds": 3.0, "peer_messages": 200_000, "peer_big_messages": 20_000},
    "quick": {"producers": (1, 3), "size": (10, 100, 10000), "partitions": (1, 9),
              "rf": (1, 3), "acks": (1, -1), "consumers": (1, 3), "seconds": 2.5,
              "repeats": 1,
              "counts": {10: 2_000_000, 100: 1_000_000, 1000: 300_000, 10000: 40_000},
              "dd_mib": 128, "sendfile_mib": 128, "raw_messages": 10_000,
              "latency_seconds": 2.0, "e2e_rate": 500, "limit_repeats": 2, "peers": False},
    "smoke": {"producers": (1,), "size": (100,), "partitions": (1,), "rf": (), "acks": (1,),
              "consumers": (1,), "seconds": 0.5, "repeats": 1, "counts": {100: 5_000},
              "dd_mib": 8, "sendfile_mib": 8, "raw_messages": 200,
              "latency_seconds": 0.3, "e2e_rate": 200, "limit_repeats": 1, "peers": False,
              "naive_consume": False},
}


class Run:
    """What one suite run shares: its mode, work dir, sampler and report."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.mode = dict(MODES[args.mode])
        if args.seconds:
            self.mode["seconds"] = args.seconds
        self.workdir = tempfile.mkdtemp(prefix="hb-suite-", dir=args.workdir)
        self.sampler = suite_roles.Sampler(0.25 if args.mode == "smoke" else 0.5)
        self.t0 = time.monotonic()
        self.report: dict = {
            "suite": {"mode": args.mode, "command": " ".join(["tools/bench/suite.py",
                                                              *sys.argv[1:]]),
                      "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                      "base": BASE, "consume_partitions": CONSUME_PARTITIONS,
                      "cell_seconds": self.mode["seconds"], "repeats": self.mode["repeats"]},
            "machine": dict(harness.machine_info(), disk=disk_info(self.workdir)),
            "skipped": [], "limits": {}, "table": [], "naive": {}, "raw": {},
            "latency": {}, "peers": {}}
        self._n = 0

    def skip(self, what: str) -> None:
        harness.log(f"skipped: {what}")
        self.report["skipped"].append(what)

    def topic(self, label: str) -> str:
        self._n += 1
        return f"suite-{self._n}-{label}"

    def since(self, t: float) -> float:
        return round(t - self.t0, 2)


def disk_info(path: str) -> dict:
    """The block device under ``path``: name, size, rotational, model (lsblk)."""
    try:
        dev = subprocess.run(["findmnt", "-no", "SOURCE", "-T", path], capture_output=True,
                             text=True, timeout=10).stdout.strip()
        out = subprocess.run(["lsblk", "-dno", "NAME,SIZE,ROTA,MODEL", dev],
                             capture_output=True, text=True, timeout=10).stdout.split()
        return {"device": dev, "size": out[1] if len(out) > 1 else "",
                "rotational": out[2] == "1" if len(out) > 2 else None,
                "model": " ".join(out[3:])}
    except (OSError, IndexError, subprocess.SubprocessError):
        return {}


# ---------------------------------------------------------------------------
# One cell: some producers or consumers at once, the broker sampled meanwhile.

def run_clients(run: Run, role: str, params: list[dict], target: str,
                timeout: float) -> dict:
    children = []
    try:
        for p in params:
            child = harness.Child(SCRIPT, role, p, run.workdir, timeout=timeout + 120)
            children.append(child)
        for child in children:
            child.ready()
        before = run.sampler.sample().get(target, (0.0, 0.0))[0]
        go = time.monotonic()
        for child in children:
            child.go()
        results = [child.result() for child in children]
        after = run.sampler.sample().get(target, (0.0, 0.0))[0]
        wall = time.monotonic() - go
    finally:
        for child in children:
            child.end()
    start = min(r["start"] for r in results)
    end = max(r["end"] for r in results)
    messages = sum(r["messages"] for r in results)
    nbytes = sum(r["payload_bytes"] for r in results)
    seconds = end - start
    out = {"messages": messages, "seconds": round(seconds, 3),
           "msgs_per_s": round(messages / seconds, 1), "mb_per_s": round(nbytes / seconds / MB, 2),
           "capped": any(r["capped"] for r in results),
           "client_cpu_cores": round(sum(r["cpu_seconds"] for r in results) / seconds, 3),
           "t0": run.since(start), "t1": run.since(end)}
    out.update(run.sampler.window(target, start, end))
    # the CPU from exact samples at GO and after the last result (not the sampler's
    # ticks) over the cell's own time: before its start and after its end the
    # broker has nothing of it to do
    cores = max(0.0, after - before) / min(wall, max(seconds, 1e-3))
    out.update(cpu_cores=round(cores, 3),
               cpu_percent_of_machine=round(cores / (os.cpu_count() or 1) * 100, 1))
    return out


def produce_cell(run: Run, target: str, where: dict, topic: str, producers: int, size: int,
                 count: int | None = None, seconds: float | None = None,
                 acks: int = 1) -> dict:
    seconds = seconds or run.mode["seconds"]
    count = count or run.mode["counts"].get(size, 100_000)
    params = [dict(where, topic=topic, size=size, count=count, max_seconds=seconds, acks=acks)
              for _ in range(producers)]
    return run_clients(run, "produce", params, target, seconds)


def consume_cell(run: Run, target: str, uri: str, topic: str, consumers: int,
                 partitions: int, expected: int) -> dict:
    seconds = run.mode["seconds"] * 2
    # each consumer checks nothing alone: the sum over them is checked here
    params = [{"uri": uri, "topic": topic, "partitions": list(range(i, partitions, consumers)),
               "count": None, "max_seconds": seconds} for i in range(consumers)]
    out = run_clients(run, "consume", params, target, seconds)
    if not out["capped"] and out["messages"] != expected:
        raise harness.BenchError(f"{topic}: consumers read {out['messages']}, {expected} there")
    return out


def create(uri: str, topic: str, partitions: int) -> None:
    from hostbroker.client.simple import SimpleClient

    with SimpleClient(uri) as client:
        client.create_topic(topic, partitions)


def best_cell(cells: list[dict]) -> dict:
    """The repeat with the most messages/s (its CPU and memory come with it): on a
    shared machine other work only slows a cell down. Every repeat's figure is kept."""
    out = dict(max(cells, key=lambda c: c["msgs_per_s"]))
    out["repeats_msgs_per_s"] = [c["msgs_per_s"] for c in cells]
    return out


def seed_table(run: Run, broker: harness.Broker) -> None:
    """The standalone variables (producers, size, partitions, consumers), in turns."""
    m = run.mode
    uri = broker.uri("unix")
    cells: dict[tuple, list[dict]] = {}
    wanted = []
    for variable in ("producers", "size", "partitions"):
        for value in m[variable]:
            point = dict(BASE, **{variable: value})
            key = ("produce", point["producers"], point["size"], point["partitions"], 1, 1)
            if key not in wanted:
                wanted.append(key)
    for rep in range(m["repeats"]):
        for key in (wanted if rep % 2 == 0 else wanted[::-1]):
            _, producers, size, partitions, _, _ = key
            topic = run.topic(f"p{producers}-s{size}-n{partitions}")
            create(uri, topic, partitions)
            cell = produce_cell(run, "hostbroker", {"uri": uri}, topic, producers, size)
            harness.log(f"  produce {producers} x {size} B, {partitions} partitions: "
                        f"{cell['msgs_per_s']:,.0f} msgs/s {cell['mb_per_s']:.1f} MB/s, "
                        f"broker {cell['cpu_cores']:.2f} cores")
            cells.setdefault(key, []).append(cell)
    # the consumers read one topic of CONSUME_PARTITIONS, written once at the base size
    source = run.topic("consume-source")
    create(uri, source, CONSUME_PARTITIONS)
    written = produce_cell(run, "hostbroker", {"uri": uri}, source, 1, BASE["size"],
                           seconds=m["seconds"] * 2)
    for rep in range(m["repeats"]):
        for consumers in (m["consumers"] if rep % 2 == 0 else m["consumers"][::-1]):
            cell = consume_cell(run, "hostbroker", uri, source, consumers, CONSUME_PARTITIONS,
                                written["messages"])
            harness.log(f"  consume {consumers} consumers: {cell['msgs_per_s']:,.0f} msgs/s "
                        f"{cell['mb_per_s']:.1f} MB/s, broker {cell['cpu_cores']:.2f} cores")
            cells.setdefault(("consume", 1, BASE["size"], CONSUME_PARTITIONS, 1, consumers),
                             []).append(cell)
    for (kind, producers, size, partitions, rf, consumers), reps in cells.items():
        run.report["table"].append(dict(
            best_cell(reps), kind=kind, broker="standalone", producers=producers, size=size,
            partitions=partitions, rf=rf, consumers=consumers))


def replication_table(run: Run) -> None:
    """Replication factor 1..3: three brokers on one ZooKeeper, a topic of 1 partition,
    produced with acks=1 (the leader's append) and acks=-1 (every in-sync replica's)."""
    import replication

    if not run.mode["rf"]:
        return
    if not shutil.which("java"):
        run.skip("replication factor: no java for ZooKeeper (apt-get install default-jre-headless)")
        return
    harness.log("starting ZooKeeper and three brokers ...")
    root = os.path.join(run.workdir, "cluster")
    os.mkdir(root)
    cluster = replication.Cluster(root, [])
    try:
        run.sampler.watch("cluster", [b.proc.pid for b in cluster.brokers.values()])
        where = {"zookeeper": cluster.server.connect}
        cells: dict[tuple[int, int], list[dict]] = {}
        order = [(rf, acks) for rf in run.mode["rf"] for acks in run.mode["acks"]]
        for rep in range(run.mode["repeats"]):
            for rf, acks in (order if rep % 2 == 0 else order[::-1]):
                topic = run.topic(f"rf{rf}")
                cluster.create(topic, BASE["partitions"], rf)
                cell = produce_cell(run, "cluster", where, topic, 1, BASE["size"], acks=acks)
                harness.log(f"  produce RF {rf} acks={acks}: {cell['msgs_per_s']:,.0f} "
                            f"msgs/s, brokers {cell['cpu_cores']:.2f} cores")
                cells.setdefault((rf, acks), []).append(cell)
        for (rf, acks), reps in cells.items():
            run.report["table"].append(dict(
                best_cell(reps), kind="produce", broker="3 brokers, ZooKeeper", rf=rf,
                acks=acks, producers=1, size=BASE["size"], partitions=BASE["partitions"],
                consumers=1))
    finally:
        run.sampler.forget("cluster")
        cluster.close()


def naive_section(run: Run, hb: harness.Broker, naive) -> None:
    """The same base cells on both brokers, interleaved: hostbroker / naive."""
    out: dict[str, dict[str, list]] = {}
    targets = {"hostbroker": hb.uri("unix"), "naive": naive.uri("unix")}
    for rep in range(run.mode["repeats"]):
        for name, uri in (targets.items() if rep % 2 == 0 else list(targets.items())[::-1]):
            for size in sorted({BASE["size"], max(run.mode["size"])}):
                topic = run.topic(f"{name}-s{size}")
                create(uri, topic, 1)
                cell = produce_cell(run, name, {"uri": uri}, topic, 1, size)
                out.setdefault(f"produce {size} B", {}).setdefault(name, []).append(cell)
            if not run.mode.get("naive_consume", True):
                continue
            topic = run.topic(f"{name}-consume")
            create(uri, topic, CONSUME_PARTITIONS)
            written = produce_cell(run, name, {"uri": uri}, topic, 1, BASE["size"])
            cell = consume_cell(run, name, uri, topic, 1, CONSUME_PARTITIONS, written["messages"])
            out.setdefault(f"consume {BASE['size']} B", {}).setdefault(name, []).append(cell)
    for what, by in out.items():
        hbc, nc = best_cell(by["hostbroker"]), best_cell(by["naive"])
        run.report["naive"][what] = {"hostbroker": hbc, "naive": nc,
                                     "ratio": round(hbc["msgs_per_s"] / nc["msgs_per_s"], 2)}
        harness.log(f"  {what}: hostbroker {hbc['msgs_per_s']:,.0f}, naive "
                    f"{nc['msgs_per_s']:,.0f} msgs/s: {run.report['naive'][what]['ratio']}x")


def raw_section(run: Run, hb: harness.Broker, naive) -> None:
    """10 KiB messages with the wire protocol itself, against the machine's limits."""
    import broker_throughput as bt

    n = run.mode["raw_messages"]
    seconds = run.mode["seconds"] * 2
    profiler = harness.Profiler(None, 0)
    limits = run.report["limits"]
    page = limits.get("pagecache", {}).get("fresh_file_mb_s")
    send = limits.get("sendfile", {}).get("unix_mb_s")
    for name, broker in (("hostbroker", hb),
                         ("naive", types.SimpleNamespace(worker_pids={"naive": naive.proc.pid}))):
        uri = broker.uri("unix") if name == "hostbroker" else naive.uri("unix")
        topic = run.topic(f"raw-{name}")
        create(uri, topic, 1)
        p = bt.run_phase(f"{name}-produce", "producer", {
            "uri": uri, "topic": topic, "message_bytes": 10 * KIB, "batch": 100, "messages": n,
            "in_flight": 16, "distinct_sets": 8, "max_seconds": seconds},
            broker, run.workdir, profiler, seconds)
        f = bt.run_phase(f"{name}-fetch", "consumer", {
            "uri": uri, "topic": topic, "start": p["first_base"], "end": p["end_offset"],
            "max_bytes": 4 << 20, "in_flight": 4, "walk": "crc", "max_seconds": seconds},
            broker, run.workdir, profiler, seconds)
        run.report["raw"][name] = {
            "produce_mb_per_s": round(p["mb_per_s"], 1), "fetch_mb_per_s": round(f["mb_per_s"], 1),
            "produce_vs_pagecache": round(p["mb_per_s"] / page, 3) if page else None,
            "fetch_vs_sendfile": round(f["mb_per_s"] / send, 3) if send else None,
            "produce_msgs_per_s": round(p["msgs_per_s"]),
            "fetch_msgs_per_s": round(f["msgs_per_s"])}
        harness.log(f"  raw 10 KiB {name}: produce {p['mb_per_s']:.0f} MB/s, "
                    f"fetch {f['mb_per_s']:.0f} MB/s")


def latency_section(run: Run, hb: harness.Broker, naive) -> None:
    """p50/p99/p99.9 of PRODUCE acks=1 and of produce-to-consume, both brokers in turns."""
    import latency_loads

    from hostbroker.commands import perf_latency as pl
    from hostbroker.log.message import encode_message_set
    from hostbroker.protocol import api

    seconds, rate = run.mode["latency_seconds"], run.mode["e2e_rate"]
    one = encode_message_set([b"x" * 100])
    out: dict[str, dict[str, list]] = {}
    targets = {"hostbroker": hb.uri("unix"), "naive": naive.uri("unix")}
    for uri in targets.values():
        for topic in ("suite-lat-produce", "suite-lat-e2e"):
            create(uri, topic, 1)
    request = api.ProduceRequest(1, 10_000, (api.ProducePartition("suite-lat-produce", 0, one),))
    for rep in range(run.mode["repeats"]):
        for name, uri in (targets.items() if rep % 2 == 0 else list(targets.items())[::-1]):
            produce = pl.summary(pl.time_requests(uri, lambda: request, seconds))
            e2e = latency_loads.run_e2e(uri, "suite-lat-e2e", seconds, rate)
            out.setdefault("produce acks=1", {}).setdefault(name, []).append(produce)
            e2e_label = f"produce to consume, {rate} msgs/s"
            out.setdefault(e2e_label, {}).setdefault(name, []).append(e2e)
    for what, by in out.items():
        run.report["latency"][what] = {}
        for name, results in by.items():
            ms = {k: statistics.median(r["latency_ms"][k] for r in results)
                  for k in ("p50", "p99", "p99.9")}
            run.report["latency"][what][name] = dict(
                ms, samples=sum(r["requests"] for r in results))
        harness.log(f"  latency {what}: " + ", ".join(
            f"{n} p50 {v['p50']:.3f} p99 {v['p99']:.3f} p99.9 {v['p99.9']:.3f} ms"
            for n, v in run.report["latency"][what].items()))


def peers_section(run: Run) -> None:
    """compare.py's sweep: hostbroker (Unix socket) and each peer found here, at their best."""
    import compare

    names = ["hostbroker-unix"]
    for peer in PEERS:
        server = compare.SERVERS[peer]
        missing = [m for m in compare.MODULES[peer] if not _importable(m)]
        binary = server.script if peer == "rabbitmq" else shutil.which(server.binary)
        if missing:
            run.skip(f"{compare.LABELS[peer]}: Python module {', '.join(missing)} missing "
                     "(pip install -e '.[bench]')")
        elif not binary or not os.access(binary, os.X_OK) or (
                peer == "rabbitmq" and not shutil.which("epmd")):
            package = "rabbitmq-server" if peer == "rabbitmq" else server.binary
            run.skip(f"{compare.LABELS[peer]}: its server is not installed "
                     f"(apt-get install {package})")
        else:
            names.append(peer)
    if len(names) == 1:
        return
    m = run.mode
    args = compare.parse_args(["--systems", ",".join(names), "--repeats", "1",
                               "--max-seconds", str(m["peer_seconds"]),
                               "--messages", str(m["peer_messages"]),
                               "--big-messages", str(m["peer_big_messages"])])
    workdir = os.path.join(run.workdir, "peers")
    os.mkdir(workdir)
    report = {"runs": []}
    systems = compare.Systems(names, workdir, [])
    try:
        systems.start()
        report["systems"] = systems.describe()
        for size in args.size:
            count = args.messages if size <= 1000 else args.big_messages
            report["runs"] += compare.sweep_size(systems, names, size, count, args)
    finally:
        systems.stop()
    compare.build_report(report, names)
    run.report["peers"] = {"systems": report["systems"], "best": report["best"],
                           "ratios": report["ratios"], "noise": report["noise"]}


def _importable(module: str) -> bool:
    try:
        __import__(module)
        return True
    except ImportError:
        return False


# ---------------------------------------------------------------------------

def run_suite(args: argparse.Namespace) -> dict:
    from latency_loads import NaiveBroker
    from machine_limits import measure_pagecache, measure_sendfile

    run = Run(args)
    m = run.mode
    hb = naive = None
    run.sampler.start()
    try:
        harness.log("machine limits: dd, sendfile ...")
        repeats = m["limit_repeats"]
        run.report["limits"]["pagecache"] = measure_pagecache(run.workdir, m["dd_mib"], repeats,
                                                              m["dd_mib"] // 2)
        run.report["limits"]["sendfile"] = measure_sendfile(
            run.workdir, min(256, m["sendfile_mib"]), m["sendfile_mib"], 4 << 20, repeats)
        os.mkdir(os.path.join(run.workdir, "hb"))
        hb = harness.Broker(os.path.join(run.workdir, "hb"), [])
        hb.start()
        harness.warm_up(hb)
        run.sampler.watch("hostbroker", [hb.proc.pid])
        harness.log("the table: producers, size, partitions, consumers ...")
        seed_table(run, hb)
        replication_table(run)
        naive = NaiveBroker(run.workdir)
        naive.start()
        run.sampler.watch("naive", [naive.proc.pid])
        harness.log("the naive broker ...")
        naive_section(run, hb, naive)
        harness.log("raw 10 KiB against the machine ...")
        raw_section(run, hb, naive)
        harness.log("latency ...")
        latency_section(run, hb, naive)
        run.sampler.forget("naive")
        naive.stop()
        naive = None
        if m["peers"] and not args.no_peers:
            harness.log("peers ...")
            peers_section(run)
        elif m["peers"] is False:
            run.skip(f"peers: not in --{args.mode}")
    finally:
        run.sampler.stop()
        if naive is not None:
            naive.stop()
        if hb is not None:
            hb.stop()
        shutil.rmtree(run.workdir, ignore_errors=True)
    run.report["series"] = run.sampler.series()
    run.report["suite"]["seconds"] = round(time.monotonic() - run.t0, 1)
    return run.report


def write_json(report: dict, path: str) -> None:
    """The report, indented, with the sampler's series on one line (thousands of points)."""
    body = json.dumps({k: v for k, v in report.items() if k != "series"}, indent=1)
    series = json.dumps(report.get("series", {}), separators=(",", ":"))
    with open(path, "w") as f:
        f.write(body[:-2] + ',\n "series": ' + series + "\n}\n")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", dest="mode", action="store_const", const="quick",
                      help="fewer cells, shorter, no peers (under 3 minutes)")
    mode.add_argument("--smoke", dest="mode", action="store_const", const="smoke",
                      help="the smallest run, seconds long (its figures mean nothing)")
    ap.set_defaults(mode="full")
    ap.add_argument("--out", default="suite-out", metavar="DIR",
                    help="where suite.json and the plots go (default ./suite-out)")
    ap.add_argument("--seconds", type=float, help="cap on one cell instead of the mode's")
    ap.add_argument("--no-peers", action="store_true", help="skip the peers in a full run")
    ap.add_argument("--no-plots", action="store_true", help="write the JSON only")
    ap.add_argument("--workdir", help="where the scratch directory goes (default: /tmp)")
    ap.add_argument("--tables", metavar="JSON",
                    help="run nothing: print a run's suite.json as the Markdown tables of "
                         "docs/benchmarks.md")
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("params", nargs="?", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.seconds is not None and not 0 < args.seconds <= 60:
        ap.error("--seconds must be above 0 and at most 60")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.role:
        suite_roles.ROLES[args.role](json.loads(args.params))
        return 0
    if args.tables:
        with open(args.tables) as f:
            print(suite_tables.markdown(json.load(f)), end="")
        return 0

    def on_term(signum, frame):
        raise SystemExit(f"suite stopped by signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    report = run_suite(args)
    os.makedirs(args.out, exist_ok=True)
    write_json(report, os.path.join(args.out, "suite.json"))
    if not args.no_plots:
        import suite_plots

        report["plots"] = suite_plots.write_all(report, args.out)
    print(suite_tables.short(report))
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
