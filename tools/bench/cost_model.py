#!/usr/bin/env python3
"""What does a message cost each broker process kind, and what does that predict for a large host?

Run by hand (not a test), from the repository with its venv::

    .venv/bin/python tools/bench/cost_model.py
    .venv/bin/python tools/bench/cost_model.py --repeats 3 --json-out /tmp/cost.json

What it does, every step bounded in count and time:

1. Starts one ``hostbroker serve`` (``harness.Broker``: free
   ports, temporary data, stopped by PID) and measures one disk's
   sustained write rate with ``dd conv=fdatasync`` (for information).
2. For each repeat, and in it for each core setting in turn (interleaved:
   2 cores, 1 core, 2 cores, ...), pins every thread of the broker, the
   clients and itself to those cores (``sched_setaffinity``; "1" = CPU 0,
   as ``taskset -c 0``) and runs, for 100 B messages (batches of 1000) and
   10 KiB messages (batches of 100): one pipelined producer
   (``broker_throughput``'s producer role, acks=1, one partition) and then
   one pipelined consumer reading them back with every CRC checked.
3. Per phase: the CPU seconds each broker process used (all its threads,
   from ``/proc/PID/task/*/schedstat``, in ns), summed by kind, and the client's own, over the messages and the
   requests of the phase; the wall-clock messages/s; the stage counters of
   the process board (``work_ns``, ``wakeups``; read 0.5 s after the phase,
   once the heartbeat has published them); the CPU the rest of the machine
   used meanwhile.
4. Keeps the costs of the repeat with the lowest CPU per message (and each
   kind's median), predicts with ``cost_predict.predict`` what 1 and 2 cores give
   and prints it next to what they gave, then the recommended settings and
   predictions for hosts of 32, 64 and 128 cores with 8 disks.

CPU time, not wall time, is the measure: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import broker_throughput  # noqa: E402
import cost_predict as cp  # noqa: E402
import harness  # noqa: E402
from machine_limits import measure_pagecache  # noqa: E402

SIZES = (("100B", 100, 1000), ("10KiB", 10 * 1024, 100))
V1_HEADER = broker_throughput.V1_HEADER


def pin(pids, cpus: set[int]) -> None:
    """Every thread of every process in ``pids`` (and this process) onto ``cpus``."""
    for pid in pids:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            for tid in os.listdir(f"/proc/{pid}/task"):
                with contextlib.suppress(ProcessLookupError):
                    os.sched_setaffinity(int(tid), cpus)
    os.sched_setaffinity(0, cpus)  # the client processes started from here inherit it


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds each process has run, all its threads (``/proc/PID/task/*/schedstat``,
    nanoseconds: psutil's user + system time counts 10 ms ticks, too coarse here)."""
    out = {}
    for name, pid in pids.items():
        total = 0
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            for tid in os.listdir(f"/proc/{pid}/task"):
                with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                    with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                        total += int(f.read().split()[0])
            out[name] = total / 1e9
    return out


def stage_reader(settings: dict):
    """The board's stage counters, or None where they cannot be read."""
    try:
        import latency_stages

        return latency_stages.StageCounters(settings)
    except Exception as exc:  # noqa: BLE001 - informational only
        harness.log(f"stage counters not read: {exc}")
        return None


def read_stages(reader) -> dict:
    if reader is None:
        return {}
    try:
        return reader.read()
    except Exception as exc:  # noqa: BLE001
        harness.log(f"stage counters not read: {exc}")
        return {}


def run_phase(role: str, params: dict, broker: harness.Broker, workdir: str, reader,
              max_seconds: float, wait_quiet: float) -> dict:
    """One client phase: CPU seconds by kind (schedstat), wall messages/s, stage counters."""
    import latency_stages

    child = harness.Child(broker_throughput.SCRIPT, role, params, workdir,
                          timeout=max_seconds + 120)
    try:
        child.ready()
        busy_before = harness.wait_quiet(wait_quiet) if wait_quiet else None
        stages0 = read_stages(reader)
        before = cpu_seconds(broker.worker_pids)
        machine0 = harness.busy_cpu_seconds()
        wall0 = time.perf_counter()
        child.go()
        result = child.result()
        wall = time.perf_counter() - wall0
        after = cpu_seconds(broker.worker_pids)
        machine = harness.busy_cpu_seconds() - machine0
    finally:
        child.end()
    time.sleep(0.5)  # the heartbeat publishes the timing counters every ~0.4 s
    stages = latency_stages.delta(stages0, read_stages(reader)) if stages0 else {}
    cpu = {k: 0.0 for k in (*cp.KINDS, "supervisor+acceptor")}
    for name, seconds in after.items():
        if name not in before:
            continue
        kind = {"hb-proc": "processor", "hb-handler": "handler",
                "hb-writer": "writer"}.get(harness.process_kind(name), "supervisor+acceptor")
        cpu[kind] += seconds - before[name]
    cpu["client"] = result["cpu_seconds"]
    requests = result.get("requests") or result.get("fetches")
    return {"messages": result["messages"], "requests": requests, "bytes": result["bytes"],
            "seconds": result["seconds"], "wall": wall, "capped": result["capped"],
            "msgs_per_s": result["messages"] / result["seconds"],
            "mb_per_s": result["bytes"] / result["seconds"] / harness.MB,
            "cpu_seconds": cpu, "others_cpu_seconds": max(0.0, machine - sum(cpu.values())),
            "machine_busy_before": busy_before, "stages": stages,
            "first_base": result.get("first_base"), "end_offset": result.get("end_offset")}


def run_size(label: str, size: int, batch: int, count: int, tag: str, broker: harness.Broker,
             workdir: str, reader, args) -> dict:
    from hostbroker.client.simple import SimpleClient

    uri = broker.uri(args.uri_kind)
    topic = f"cost-{label}-{tag}"
    with SimpleClient(uri) as client:
        client.create_topic(topic, 1)
    out = {}
    try:
        out["produce"] = produced = run_phase("producer", {
            "uri": uri, "topic": topic, "message_bytes": size, "batch": batch,
            "messages": count, "in_flight": args.in_flight, "distinct_sets": 8,
            "max_seconds": args.max_seconds}, broker, workdir, reader, args.max_seconds,
            args.wait_quiet)
        out["fetch"] = run_phase("consumer", {
            "uri": uri, "topic": topic, "start": produced["first_base"],
            "end": produced["end_offset"], "max_bytes": args.fetch_max_bytes,
            "in_flight": args.fetch_in_flight, "walk": "crc",
            "max_seconds": args.max_seconds}, broker, workdir, reader, args.max_seconds,
            args.wait_quiet)
    finally:
        with SimpleClient(uri) as client:  # frees the disk for the next repeat
            client.delete_topic(topic, raise_on_error=False)
    return out


# ---------------------------------------------------------------------------
# Turning phases into costs and checks.

def costs_of(phases: list[dict]) -> dict:
    """Per kind: µs per message and per request of the repeat whose total CPU per message
    (broker and client) was lowest, and each kind's median over the repeats.

    One repeat's breakdown, not each kind's own lowest: a kind is cheap in a
    repeat where another paid for it (bigger batches after a stall), so lows of
    different repeats do not add up to a cost any run had.
    """
    kinds = (*cp.KINDS, "client")
    best = min(phases, key=lambda p: sum(p["cpu_seconds"][k] for k in kinds) / p["messages"])
    out = {}
    for kind in kinds:
        per_msg = [p["cpu_seconds"][kind] / p["messages"] * 1e6 for p in phases]
        per_req = [p["cpu_seconds"][kind] / p["requests"] * 1e6 for p in phases]
        out[kind] = {"us_per_msg": best["cpu_seconds"][kind] / best["messages"] * 1e6,
                     "us_per_msg_median": statistics.median(per_msg),
                     "us_per_req": best["cpu_seconds"][kind] / best["requests"] * 1e6,
                     "us_per_req_median": statistics.median(per_req)}
    return out


def work_of(phases: list[dict]) -> dict:
    """Per kind: median board ``work_ns`` per message (µs) and wake-ups per request."""
    out = {}
    for kind in cp.KINDS:
        work = [p["stages"][kind]["work_ns"] / 1e3 / p["messages"] for p in phases
                if p["stages"].get(kind, {}).get("work_ns") is not None]
        wake = [p["stages"][kind]["wakeups"] / p["requests"] for p in phases
                if p["stages"].get(kind, {}).get("wakeups") is not None]
        out[kind] = {"work_us_per_msg": statistics.median(work) if work else None,
                     "wakeups_per_req": statistics.median(wake) if wake else None}
    return out


def seconds_per_msg(costs: dict, fetch: bool = False) -> dict[str, float]:
    """The model's costs (s per message). Writers take no part in a fetch: what they
    use meanwhile (heartbeat, flushing the produce before) is not its cost."""
    out = {k: costs[k]["us_per_msg"] / 1e6 for k in (*cp.KINDS, "client")}
    if fetch:
        out["writer"] = 0.0
    return out


def summarize(report: dict, args) -> dict:
    runs = report["runs"]  # [ {cores: {label: {direction: phase}}} per repeat ]
    model: dict = {"costs": {}, "work": {}, "checks": [], "hosts": []}
    for cores in args.cores:
        for label, size, batch in SIZES:
            for direction in ("produce", "fetch"):
                phases = [r[str(cores)][label][direction] for r in runs]
                key = f"{cores}c {direction} {label}"
                model["costs"][key] = costs_of(phases)
                model["work"][key] = work_of(phases)
                rates = [p["msgs_per_s"] for p in phases]
                model["costs"][key]["measured_msgs_per_s"] = {
                    "best": max(rates), "median": statistics.median(rates)}
                model["costs"][key]["others_cpu_share"] = statistics.median(
                    p["others_cpu_seconds"] / p["wall"] for p in phases)
    base = max(args.cores)  # costs measured with the most cores predict every core count
    settings = report["broker_settings"]
    procs, handlers = int(settings.get("num.processors", 2)), int(settings.get("num.handlers", 2))
    for cores in args.cores:
        for label, size, batch in SIZES:
            for direction in ("produce", "fetch"):
                key = f"{cores}c {direction} {label}"
                phases = [r[str(cores)][label][direction] for r in runs]
                row = {"cores": cores, "workload": f"{direction} {label}",
                       "measured": model["costs"][key]["measured_msgs_per_s"],
                       # CPU our processes got per wall second: under 'cores' when the
                       # rest of the machine took some
                       "cores_obtained": statistics.median(
                           sum(p["cpu_seconds"].values()) / p["seconds"] for p in phases)}
                for source in (base, cores):
                    costs = seconds_per_msg(model["costs"][f"{source}c {direction} {label}"],
                                            direction == "fetch")
                    row[f"predicted_from_{source}c"] = cp.predict(
                        costs, cores=cores, processors=procs, handlers=handlers, writers=1,
                        connections=1, partitions=1)
                base_costs = seconds_per_msg(model["costs"][f"{base}c {direction} {label}"],
                                             direction == "fetch")
                at_got = [cp.predict(base_costs, cores=sum(p["cpu_seconds"].values()) / p["seconds"],
                                     processors=procs, handlers=handlers, writers=1,
                                     connections=1, partitions=1)["msgs_per_s"] for p in phases]
                # per phase: measured / predicted with the cores that phase got
                row["at_got_ratio"] = statistics.median(
                    p["msgs_per_s"] / x for p, x in zip(phases, at_got))
                row["single_connection_limit"] = cp.single_connection_limit(seconds_per_msg(
                    model["costs"][f"{base}c {direction} {label}"], direction == "fetch"))
                model["checks"].append(row)
    workloads = {}
    for label, size, batch in SIZES:
        for direction in ("produce", "fetch"):
            workloads[f"{direction} {label}"] = {
                "costs": seconds_per_msg(model["costs"][f"{base}c {direction} {label}"],
                                         direction == "fetch"),
                "log_bytes": size + V1_HEADER, "produce": direction == "produce"}
        workloads[f"both {label}"] = {
            "costs": cp.mix(workloads[f"produce {label}"]["costs"],
                            workloads[f"fetch {label}"]["costs"]),
            "log_bytes": size + V1_HEADER, "produce": True}
    sized_for = {w: workloads[w] for w in workloads if w.startswith("both")}
    for host_cores in args.host_cores:
        for clients_on_host, per_disk in ((True, 1), (False, 1), (True, 2)):
            pick = cp.choose_workers(sized_for, cores=host_cores, disks=args.disks,
                                     disk_bytes_per_s=args.disk_mb_s * harness.MB,
                                     clients_on_host=clients_on_host, dirs_per_disk=per_disk)
            n, h, w_count = pick["processors"], pick["handlers"], pick["writers"]
            preds = {w: cp.predict(wl["costs"], cores=host_cores, processors=n, handlers=h,
                                   writers=w_count, disks=args.disks,
                                   clients_on_host=clients_on_host,
                                   disk_bytes_per_s=args.disk_mb_s * harness.MB if wl["produce"]
                                   else None, log_bytes_per_message=wl["log_bytes"])
                     for w, wl in workloads.items()}
            client_cores = max(preds[w]["msgs_per_s"] * workloads[w]["costs"]["client"]
                               for w in sized_for) if clients_on_host else 0.0
            workers = n + h + w_count
            rings = cp.ring_count(n, h, w_count)
            ring_bytes = cp.choose_ring_bytes(rings, args.ring_budget_mib * cp.MIB)
            model["hosts"].append({
                "cores": host_cores, "disks": args.disks, "log_dirs": w_count,
                "clients_on_host": clients_on_host,
                "processors": n, "handlers": h,
                "spin_us": cp.spin_advice(workers, client_cores, host_cores),
                "rings": rings + 2 * n * w_count, "ring_bytes": ring_bytes,
                "ring_memory_mib": (rings * ring_bytes + cp.answer_ring_memory(
                    n, w_count, ring_bytes)) / cp.MIB, "client_cores": client_cores,
                "predictions": {w: {"msgs_per_s": p["msgs_per_s"], "binds": p["binds"],
                                    "mb_per_s": (p["msgs_per_s"] * workloads[w]["log_bytes"]
                                                 / harness.MB)}
                                for w, p in preds.items()}})
    return model


def print_model(report: dict) -> None:
    model = report["model"]
    print("machine: {nproc} CPUs ({cpu_model}), {ram_gib} GiB, Linux {kernel}, Python {python}, "
          "hostbroker {git}".format(**report["machine"]))
    print(f"broker: {report['broker_settings_shown']}; clients over {report['args']['uri_kind']}; "
          f"disk (dd conv=fdatasync): {report.get('disk_mb_s') or '-'} MB/s")
    print("\nCPU µs per message (per request) in the repeat of lowest total CPU per message "
          "[median of the repeats]; "
          "msgs/s best [median]; others = CPU share the rest of the machine used")
    print(f"{'run':22} {'processor':>18} {'handler':>18} {'writer':>18} {'client':>18}"
          f" {'msgs/s':>17} {'others':>6}")
    for key, c in model["costs"].items():
        cells = [f"{c[k]['us_per_msg']:.3f}({c[k]['us_per_req']:.0f})[{c[k]['us_per_msg_median']:.3f}]"
                 for k in (*cp.KINDS, "client")]
        rate = c["measured_msgs_per_s"]
        print(f"{key:22} " + " ".join(f"{x:>18}" for x in cells) +
              f" {rate['best'] / 1e3:>8.0f}k[{rate['median'] / 1e3:.0f}k] {c['others_cpu_share']:>5.0%}")
    print("\nboard counters (median): work µs per message / wake-ups per request")
    for key, w in model["work"].items():
        cells = []
        for k in cp.KINDS:
            a, b = w[k]["work_us_per_msg"], w[k]["wakeups_per_req"]
            cells.append(f"{k} " + ("-" if a is None else f"{a:.3f}") + " / " +
                         ("-" if b is None else f"{b:.2f}"))
        print(f"  {key:22} " + "   ".join(cells))
    print("\nchecks: one producer or consumer (1 connection, 1 partition), predicted (from the "
          "costs of the most cores, and from the run's own) vs measured best; got = cores our "
          "processes obtained (median CPU s per wall s); at got = median over the repeats of measured / "
          "predicted with the cores that repeat got")
    print(f"{'cores':>5} {'workload':15} {'measured best':>13} {'median':>9} "
          f"{'predicted':>10} {'binds':>10} {'ratio':>6}  {'own costs':>10} {'ratio':>6}"
          f"  {'got':>4} {'at got':>6}  one-connection limit")
    for row in model["checks"]:
        base = [k for k in row if k.startswith("predicted_from_")]
        first, own = row[base[0]], row[base[-1]]
        best = row["measured"]["best"]
        lim, kind = row["single_connection_limit"]
        print(f"{row['cores']:>5} {row['workload']:15} {best:>13.0f} {row['measured']['median']:>9.0f} "
              f"{first['msgs_per_s']:>10.0f} {first['binds']:>10} {best / first['msgs_per_s']:>6.2f}"
              f"  {own['msgs_per_s']:>10.0f} {best / own['msgs_per_s']:>6.2f}"
              f"  {row['cores_obtained']:>4.2f} {row['at_got_ratio']:>6.2f}"
              f"  {lim:.0f} ({kind})")
    print("\nrecommended settings (log.preallocate.bytes=64MiB in all) and predicted M msgs/s "
          "(binding resource), many connections and partitions, "
          f"{report['args']['disk_mb_s']:.0f} MB/s per disk sustained")
    names = list(model["hosts"][0]["predictions"]) if model["hosts"] else []
    print(f"{'cores':>5} {'clients':8} {'N':>3} {'H':>3} {'dirs':>4} {'spin':>4} {'ring':>5}"
          + "".join(f" {w:>20}" for w in names))
    for h in model["hosts"]:
        cells = "".join(f" {p['msgs_per_s'] / 1e6:>7.2f} ({p['binds']:>10})"
                        for p in h["predictions"].values())
        print(f"{h['cores']:>5} {'on host' if h['clients_on_host'] else 'away':8} "
              f"{h['processors']:>3} {h['handlers']:>3} {h['log_dirs']:>4} {h['spin_us']:>4} "
              f"{h['ring_bytes'] // cp.MIB:>3}Mi{cells}")
    print("  N = num.processors, H = num.handlers, dirs = log.dirs over the disks, spin = "
          "worker.spin.us, ring = ring.bytes; rings: " + ", ".join(
              f"{h['rings']} ({h['ring_memory_mib'] / 1024:.1f} GiB)" for h in model["hosts"]))


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="cost_model.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--small-messages", type=int, default=300_000,
                    help="100 B messages per phase (default 300,000)")
    ap.add_argument("--big-messages", type=int, default=20_000,
                    help="10 KiB messages per phase (default 20,000)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of every phase (default 3)")
    ap.add_argument("--cores", default="2,1",
                    help="core settings, interleaved in each repeat; N = CPUs 0..N-1 (default 2,1)")
    ap.add_argument("--uri-kind", choices=("unix", "tcp"), default="unix")
    ap.add_argument("--in-flight", type=int, default=16, help="produce requests in flight")
    ap.add_argument("--fetch-in-flight", type=int, default=4, help="fetches in flight")
    ap.add_argument("--fetch-max-bytes", type=int, default=4 * harness.MIB)
    ap.add_argument("--max-seconds", type=float, default=60, help="cap on each phase")
    ap.add_argument("--wait-quiet", type=float, default=10,
                    help="before each phase wait up to this long for a mostly idle machine")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="broker setting passed to hostbroker serve (repeatable)")
    ap.add_argument("--dd-sync-mib", type=int, default=256,
                    help="MiB for the dd conv=fdatasync disk figure (0: skip)")
    ap.add_argument("--host-cores", default="32,64,128", help="hosts to recommend settings for")
    ap.add_argument("--disks", type=int, default=8, help="disks (log dirs) of those hosts")
    ap.add_argument("--disk-mb-s", type=float, default=1000,
                    help="sustained write MB/s of one of their disks (default 1000, an NVMe SSD)")
    ap.add_argument("--ring-budget-mib", type=int, default=4096,
                    help="shared memory the rings of a big host may take (default 4096)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of tables")
    ap.add_argument("--json-out", metavar="FILE", help="also write the JSON report to FILE")
    ap.add_argument("--replay", metavar="FILE", nargs="+",
                    help="run nothing: model the runs of earlier --json-out reports again "
                         "(several: their repeats pooled; machine and settings of the first)")
    args = ap.parse_args(argv)
    args.cores = [int(x) for x in args.cores.split(",")]
    args.host_cores = [int(x) for x in args.host_cores.split(",")]
    if max(args.cores) > (os.cpu_count() or 1):
        ap.error(f"--cores: this machine has {os.cpu_count()} CPUs")
    return args


def _stopped(signum, frame):
    raise SystemExit(f"cost model stopped by signal {signum}")


def main(argv=None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _stopped)
    if args.replay:
        reports = []
        for path in args.replay:
            with open(path) as f:
                reports.append(json.load(f))
        report = reports[0]
        report["runs"] = [run for r in reports for run in r["runs"]]
        report["model"] = summarize(report, args)
        harness.output(report, args, print_model)
        return 0
    all_cpus = os.sched_getaffinity(0)
    workdir = tempfile.mkdtemp(prefix="hb-cost-")
    report: dict = {"machine": harness.machine_info(), "args": vars(args), "runs": []}
    broker = None
    reader = None
    try:
        if args.dd_sync_mib:
            harness.log("measuring the disk (dd conv=fdatasync) ...")
            pc = measure_pagecache(workdir, 64, 1, args.dd_sync_mib)
            report["disk_mb_s"] = round(pc["fdatasync_fresh_file_mb_s"])
        broker = harness.Broker(workdir, args.set)
        report["broker_settings"] = broker.settings
        report["broker_settings_shown"] = " ".join(
            f"{k}={v}" for k, v in broker.settings.items() if k not in ("listeners", "log.dirs")
        ) or "default settings (2 processors, 2 handlers, 1 log dir)"
        harness.log(f"starting hostbroker serve in {workdir} ...")
        broker.start()
        harness.warm_up(broker)
        reader = stage_reader(broker.settings)
        for rep in range(args.repeats):
            run = {}
            for cores in args.cores:
                pin(broker.worker_pids.values(), set(range(cores)))
                run[str(cores)] = {}
                for label, size, batch in SIZES:
                    count = args.small_messages if label == "100B" else args.big_messages
                    harness.log(f"repeat {rep + 1}/{args.repeats}, {cores} core(s), {label} ...")
                    run[str(cores)][label] = run_size(label, size, batch, count,
                                                      f"{cores}c-{rep}", broker, workdir,
                                                      reader, args)
            report["runs"].append(run)
    finally:
        with contextlib.suppress(Exception):
            pin(broker.worker_pids.values() if broker else (), all_cpus)
        if reader is not None:
            reader.close()
        if broker is not None:
            report["broker_exit_code"] = broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json_out:  # the runs, even if modelling them fails
        with open(args.json_out, "w") as f:
            json.dump(report, f, indent=2)
    report["model"] = summarize(report, args)
    harness.output(report, args, print_model)
    return 0


if __name__ == "__main__":
    sys.exit(main())
