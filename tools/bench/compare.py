#!/usr/bin/env python3
"""How does hostbroker compare with the peers a user would pick instead, each at its best?

Run by hand (not a test), from the repository with its venv, as root::

    .venv/bin/pip install -e '.[bench]'   # redis, hiredis, nats-py, rstream
    .venv/bin/python tools/bench/compare.py                 # the full run, ~6-9 minutes
    .venv/bin/python tools/bench/compare.py --quick         # a smoke run
    .venv/bin/python tools/bench/compare.py --systems hostbroker-unix,redis --size 100

The systems, each started by this script on loopback with its data in a
temporary directory, and always stopped by PID at the end (SIGTERM, then
SIGKILL), also after an error or Ctrl-C:

- **hostbroker** (``hostbroker serve``, default settings, one TCP port and
  one Unix socket). Clients use the public API only: ``Producer`` in async
  mode with ``send_many()`` of one message set at a time, and
  ``SimpleConsumer`` iterating messages with every CRC checked. Durability:
  acks=1, the message set is in the page cache when acknowledged, and each
  partition is fdatasynced every ``log.flush.interval.messages`` (10,000)
  messages or ``log.flush.interval.ms`` (1 s).
- **Redis Streams** (Debian's ``redis-server``, command-line options only, so
  the built-in defaults). redis-py with hiredis: XADD in pipelines, XREAD
  COUNT batches. Durability: RDB snapshots by the built-in save rules, no
  AOF: no write is fsynced when acknowledged.
- **NATS JetStream** (Debian's ``nats-server -js``, one file-store stream,
  one replica). nats-py: ``publish_async`` per message with a bounded number
  of acks pending, a pull consumer fetching batches. Durability: the file
  store's default, in the page cache, fsynced every 2 minutes.
- **RabbitMQ Streams** (Debian's ``rabbitmq-server`` with the
  ``rabbitmq_stream`` plugin, a node of its own; see compare_rabbit.py).
  rstream: ``send_batch`` with publish confirms, ``subscribe`` from the first
  offset. Durability: confirmed once in the page cache, never fsynced by
  the server.

The peers are reached over loopback TCP; hostbroker over its Unix socket and
over TCP. Missing servers are installed with ``apt-get install -y`` (the
script runs as root; a failure says so in one line, as does a missing client).

Every system at its best: for each message size, each system's batch or
pipeline setting is swept over a small grid (compare_sweep.GRIDS), for
producing and for consuming, each value ``--repeats`` times, interleaved
(every system runs value i of repeat r before any runs value i+1). A
system's figure is the median of its repeats at its best value; ratios are
hostbroker-best / peer-best. The whole sweep is printed and in the JSON.

One run of a producer writes up to ``--messages`` (100 B) or
``--big-messages`` (10 KiB) into a new topic / stream / key, timed from its
first send to its last acknowledgement, stopped at ``--max-seconds`` (a
capped run is measured over what it did). The consume sweep reads one
stream per system written beforehand with its best producer setting, timed
from the first fetch to the last message. The phase "both" (not in the
default) runs a producer and a consumer at once at the best settings. Every
client runs in its own process and sends the same payloads (a pool of 1024
random payloads, in turn). MB is 10^6 payload bytes. During each run the
CPU used by everything else on the machine is recorded (``others %``): the
machine is shared, and that is how noisy each figure was.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
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

import harness  # noqa: E402  (the broker helper and the child handshake)
import compare_peers  # noqa: E402
import compare_rabbit  # noqa: E402
import compare_sweep as sweep  # noqa: E402
from compare_peers import (NatsServer, PeerServer, RedisServer, ensure_installed,  # noqa: E402,F401
                           hostbroker_durability, payloads)

MB = 1_000_000
KIB = 1024

SYSTEMS = ("hostbroker-unix", "hostbroker-tcp", "redis", "nats", "rabbitmq")
HOSTBROKERS = ("hostbroker-unix", "hostbroker-tcp")
PEERS = ("redis", "nats", "rabbitmq")
PHASES = ("produce", "consume", "both")
LABELS = {"hostbroker-unix": "hostbroker unix", "hostbroker-tcp": "hostbroker tcp",
          "redis": "Redis Streams", "nats": "NATS JetStream", "rabbitmq": "RabbitMQ Streams"}
SERVERS = {"redis": RedisServer, "nats": NatsServer, "rabbitmq": compare_rabbit.RabbitServer}
CLIENTS = {"redis": ("redis", "hiredis"), "nats": ("nats-py",), "rabbitmq": ("rstream",)}
MODULES = {"redis": ("redis", "hiredis"), "nats": ("nats",), "rabbitmq": ("rstream",)}
ROLES = dict(compare_peers.ROLES, **compare_rabbit.ROLES)

INSTALL_CLIENTS = "install the peers' clients with: .venv/bin/pip install -e '.[bench]'"


# ---------------------------------------------------------------------------
# Processes: the clients and the servers.

class Systems:
    """The servers of one run, started together and always stopped together."""

    def __init__(self, names: list[str], workdir: str, broker_settings: list[str]):
        self.names = names
        self.workdir = workdir
        self.broker = None
        self.peers: dict[str, PeerServer] = {}
        self.pids: dict[str, dict[str, int]] = {}
        if any(n.startswith("hostbroker") for n in names):
            self.broker = harness.Broker(workdir, broker_settings)
        for name, cls in SERVERS.items():
            if name in names:
                self.peers[name] = cls(workdir)

    def start(self) -> None:
        import psutil

        if self.broker is not None:
            harness.log(f"starting hostbroker serve in {self.workdir} ...")
            self.broker.start()
            harness.warm_up(self.broker)
        for name, peer in self.peers.items():
            harness.log(f"starting {' '.join(peer.argv())} ...")
            peer.start()
            pids = {name: peer.proc.pid}  # and its children: RabbitMQ's VM is one
            for child in psutil.Process(peer.proc.pid).children(recursive=True):
                pids[f"{name}-{child.pid}"] = child.pid
            self.pids[name] = pids

    def stop(self) -> dict:
        codes = {}
        for name, peer in self.peers.items():
            with contextlib.suppress(Exception):
                codes[name] = peer.stop()
        if self.broker is not None:
            codes["hostbroker"] = self.broker.stop()
        return codes

    def server_pids(self, system: str) -> dict[str, int]:
        if system.startswith("hostbroker"):
            return dict(self.broker.worker_pids)
        return self.pids.get(system, {})

    def params(self, system: str) -> dict:
        if system.startswith("hostbroker"):
            return {"uri": self.broker.uri(system.split("-")[1])}
        return {"port": self.peers[system].port}

    def describe(self) -> dict:
        out = {}
        if self.broker is not None:
            out["hostbroker"] = {"version": harness.machine_info()["git"],
                                 "durability": hostbroker_durability(),
                                 "transport": "Unix socket and loopback TCP",
                                 "client": "hostbroker.client Producer (async, send_many() "
                                           "per message set) and SimpleConsumer (CRC checked)"}
        for name, peer in self.peers.items():
            out[name] = {"version": peer.version(), "durability": peer.durability,
                         "transport": "loopback TCP",
                         "client": ", ".join(f"{c} {importlib.metadata.version(c)}"
                                             for c in CLIENTS[name])}
        return out

    def drop(self, system: str, topics: list[str]) -> None:
        if system in self.peers:
            self.peers[system].drop(topics)


def _role_prefix(system: str) -> str:
    return "hostbroker" if system.startswith("hostbroker") else system


def run_phase(systems: Systems, system: str, phase: str, size: int, count: int, topic: str,
              values: dict[str, int], max_seconds: float, args: argparse.Namespace) -> dict:
    """One run: ``values`` holds the swept setting of each role ("producer", "consumer")."""
    base = dict(systems.params(system), size=size, count=count, topic=topic,
                max_seconds=max_seconds)
    roles = {"produce": ["producer"], "consume": ["consumer"],
             "both": ["producer", "consumer"]}[phase]
    children: dict[str, harness.Child] = {}
    pids = systems.server_pids(system)
    try:
        for role in roles:  # the producer first: it creates the topic / stream
            child = harness.Child(os.path.abspath(__file__), f"{_role_prefix(system)}-{role}",
                                  dict(base, value=values[role]), systems.workdir,
                                  timeout=max_seconds + 120)
            children[role] = child
            child.ready()
        busy = harness.wait_quiet(args.wait_quiet) if args.wait_quiet else None
        cpu0 = harness.cpu_seconds(pids)
        machine0 = harness.busy_cpu_seconds()
        wall0 = time.perf_counter()
        for child in reversed(children.values()):  # the consumer is waiting first
            child.go()
        results = {role: child.result() for role, child in children.items()}
        wall = time.perf_counter() - wall0
        machine = harness.busy_cpu_seconds() - machine0
        cpu1 = harness.cpu_seconds(pids)
    finally:
        for child in children.values():
            child.end()
    server = sum(cpu1[n] - cpu0[n] for n in cpu1 if n in cpu0)
    clients = sum(r["cpu_seconds"] for r in results.values())
    start = min(r["start"] for r in results.values())
    end = max(r["end"] for r in results.values())
    last = results.get("consumer", results.get("producer"))
    seconds = end - start
    out = {"system": system, "phase": phase, "size": size,
           "value": values["producer" if phase == "produce" else "consumer"],
           "values": values, "messages": last["messages"], "seconds": seconds,
           "msgs_per_s": last["messages"] / seconds,
           "mb_per_s": last["messages"] * size / seconds / MB,
           "capped": any(r["capped"] for r in results.values()),
           "server_cpu_percent": server / wall * 100,
           "client_cpu_percent": {role: r["cpu_seconds"] / r["seconds"] * 100
                                  for role, r in results.items()},
           # CPU used meanwhile by everything else on the machine (other work)
           "others_cpu_percent": max(0.0, (machine - server - clients) / wall * 100),
           "machine_busy_before": busy}
    if phase == "both":
        p, c = results["producer"], results["consumer"]
        out["producer_msgs_per_s"] = p["messages"] / p["seconds"]
        out["consumer_msgs_per_s"] = c["messages"] / c["seconds"]
    return out


def _kind(system: str) -> str:
    return system.replace("hostbroker-", "hb")


def _log_run(row: dict, rep: int) -> None:
    harness.log(f"  {LABELS[row['system']]:17} {row['phase']:7} {size_label(row['size']):>6} "
                f"value {row['value']:>8} rep {rep}: {row['msgs_per_s']:>10,.0f} msgs/s "
                f"{row['mb_per_s']:7.1f} MB/s, others {row['others_cpu_percent']:3.0f} %"
                f"{' CAPPED' if row['capped'] else ''}")


def sweep_size(systems: Systems, names: list[str], size: int, count: int,
               args: argparse.Namespace) -> list[dict]:
    """The produce sweep, then the consume sweep (then "both" at the best), interleaved."""
    runs: list[dict] = []

    def one(system: str, phase: str, n: int, topic: str, values: dict, rep: int) -> None:
        row = run_phase(systems, system, phase, size, n, topic, values, args.max_seconds, args)
        _log_run(row, rep)
        runs.append(dict(row, rep=rep))

    for rep, i, system, value in sweep.interleaved(names, "produce", size, args.repeats):
        topic = f"cmp-{_kind(system)}-{size}-p{i}-r{rep}"
        one(system, "produce", count, topic, {"producer": value}, rep)
        systems.drop(system, [topic])
    chosen = sweep.best(sweep.summarise(runs))
    if "consume" not in args.phases and "both" not in args.phases:
        return runs
    sources = {}
    for system in names:  # what the consumers read: written at the system's best
        value = chosen[(system, size, "produce")]["value"]
        topic = f"cmp-{_kind(system)}-{size}-source"
        harness.log(f"[{system}] writing {count} messages of {size} B to read (value {value}) ...")
        row = run_phase(systems, system, "produce", size, count, topic, {"producer": value},
                        args.max_seconds * 5, args)
        sources[system] = (topic, row["messages"])
    if "consume" in args.phases:
        for rep, i, system, value in sweep.interleaved(names, "consume", size, args.repeats):
            topic, n = sources[system]
            one(system, "consume", n, topic, {"consumer": value}, rep)
    for system in names:
        systems.drop(system, [sources[system][0]])
    if "both" in args.phases:
        chosen = sweep.best(sweep.summarise(runs))
        for rep in range(args.repeats):
            k = rep % len(names)
            for system in names[k:] + names[:k]:
                best_consume = chosen.get((system, size, "consume"))
                values = {"producer": chosen[(system, size, "produce")]["value"],
                          "consumer": best_consume["value"] if best_consume
                          else sweep.grid(system, "consume", size)[-1]}
                topic = f"cmp-{_kind(system)}-{size}-both-r{rep}"
                one(system, "both", count, topic, values, rep)
                systems.drop(system, [topic])
    return runs


# ---------------------------------------------------------------------------
# Report.

def size_label(size: int) -> str:
    return f"{size // KIB} KiB" if size % KIB == 0 else f"{size} B"


def noise(runs: list[dict]) -> dict:
    """How busy the rest of the machine was during the runs (% of one core)."""
    others = [r["others_cpu_percent"] for r in runs]
    if not others:
        return {}
    return {"others_cpu_percent_median": statistics.median(others),
            "others_cpu_percent_max": max(others),
            "runs_with_others_over_20_percent": sum(o > 20 for o in others),
            "runs": len(others)}


def build_report(report: dict, names: list[str]) -> None:
    runs = report["runs"]
    report["sweep"] = sweep.summarise(runs)
    chosen = sweep.best(report["sweep"])
    report["best"] = list(chosen.values())
    report["ratios"] = sweep.ratios(chosen, [n for n in names if n in HOSTBROKERS],
                                    [n for n in names if n in PEERS])
    report["noise"] = noise(runs)


def print_report(report: dict) -> None:
    m = report["machine"]
    print(f"machine: {m['nproc']} CPUs ({m['cpu_model']}), {m['ram_gib']} GiB, "
          f"Linux {m['kernel']}, Python {m['python']}, hostbroker {m['git']}")
    for name, s in report["systems"].items():
        print(f"{name}: {s['version']}; {s['transport']}; client {s['client']}")
        print(f"  durability: {s['durability']}")
    print("MB = 10^6 payload bytes; msgs/s: median of the repeats (slowest-fastest); "
          "* = the system's best value")
    chosen = {(b["system"], b["size"], b["phase"]): b for b in report["best"]}
    for size in sorted({e["size"] for e in report["sweep"]}):
        for phase in PHASES:
            entries = [e for e in report["sweep"] if e["size"] == size and e["phase"] == phase]
            if not entries:
                continue
            print(f"\n{size_label(size)} {phase}")
            print(f"  {'system':17} {'setting':>9} {'msgs/s':>11} {'MB/s':>8}  range")
            for e in entries:
                mark = "*" if chosen[(e["system"], size, phase)] is e else " "
                print(f"  {LABELS[e['system']]:17} {e['value']:>9} {e['median']:>11,.0f} "
                      f"{e['median'] * size / MB:>8.1f}{mark} {e['worst']:,.0f}-{e['best']:,.0f}"
                      f"{' CAPPED' if e['capped'] else ''}")
            direction = "consume" if phase == "consume" else "produce"
            for name in sorted({e["system"] for e in entries}, key=SYSTEMS.index):
                print(f"    {LABELS[name]}: {sweep.meaning(name, direction)}")
    if report["ratios"]:
        print("\nhostbroker best / peer best (medians)")
        for r in report["ratios"]:
            print(f"  {size_label(r['size']):>6} {r['phase']:7} {LABELS[r['hostbroker']]:16} / "
                  f"{LABELS[r['peer']]:17} {r['ratio']:6.2f}x  ({r['hostbroker_msgs_per_s']:,.0f}"
                  f" / {r['peer_msgs_per_s']:,.0f} msgs/s)")
    n = report.get("noise")
    if n:
        print(f"\nothers' CPU during the runs: median {n['others_cpu_percent_median']:.0f} %, "
              f"max {n['others_cpu_percent_max']:.0f} % of one core; "
              f"{n['runs_with_others_over_20_percent']} of {n['runs']} runs over 20 %")


# ---------------------------------------------------------------------------

def _csv(value: str, allowed: tuple[str, ...]) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in items if v not in allowed]
    if bad or not items:
        raise argparse.ArgumentTypeError(f"{', '.join(bad) or 'none given'} "
                                         f"(choose from {', '.join(allowed)})")
    return items


def _sizes(value: str) -> list[int]:
    try:
        sizes = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"byte counts like 100,10240, not {value!r}") from None
    if not sizes or any(not 1 <= s <= 1_000_000 for s in sizes):
        raise argparse.ArgumentTypeError("each size must be 1 .. 1,000,000 bytes")
    return sizes


def add_common_options(ap: argparse.ArgumentParser, quiet_default: float = 10) -> None:
    """Options every benchmark here takes , and the hidden --role."""
    ap.add_argument("--wait-quiet", type=float, default=quiet_default, metavar="SECONDS",
                    help="before each run wait up to this long for a mostly idle machine "
                         f"(default {quiet_default:g}; 0: do not wait)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="hostbroker setting passed to hostbroker serve (repeatable)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of tables")
    ap.add_argument("--json-out", metavar="FILE", help="also write the JSON report to FILE")
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("params", nargs="?", help=argparse.SUPPRESS)


def new_report(args: argparse.Namespace) -> dict:
    return {"machine": harness.machine_info(), "command": sys.argv,
            "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "args": {k: v for k, v in vars(args).items() if k not in ("role", "params")}}


def stop_on_sigterm() -> None:
    def on_term(signum, frame):
        raise SystemExit(f"benchmark stopped by signal {signum}")

    signal.signal(signal.SIGTERM, on_term)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000,
                    help="messages a run writes, sizes up to 1000 B (default 200,000)")
    ap.add_argument("--big-messages", type=int, default=20_000,
                    help="messages a run writes, larger sizes (default 20,000: ~200 MB of 10 KiB)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="runs of every setting of every system (default 3; the median counts)")
    ap.add_argument("--size", type=_sizes, default=[100, 10 * KIB],
                    help="payload sizes in bytes, comma separated (default 100,10240)")
    ap.add_argument("--systems", type=lambda v: _csv(v, SYSTEMS),
                    default=list(SYSTEMS), help=f"default {','.join(SYSTEMS)}")
    ap.add_argument("--phases", type=lambda v: _csv(v, PHASES),
                    default=["produce", "consume"], help="default produce,consume; both: a "
                    "producer and a consumer at once, at the best settings")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: 5,000 small and 500 big messages, one repeat "
                         "(start-up dominates its figures: not for comparison)")
    ap.add_argument("--max-seconds", type=float, default=4,
                    help="cap on each run (default 4; the stream the consumers read: 5 times it)")
    ap.add_argument("--workdir", help="where data goes (default: a new temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    add_common_options(ap, quiet_default=0)
    args = ap.parse_args(argv)
    if args.quick:
        args.messages, args.big_messages, args.repeats, args.wait_quiet = 5_000, 500, 1, 0
    if args.messages < 1 or args.big_messages < 1 or args.repeats < 1:
        ap.error("--messages, --big-messages and --repeats must be at least 1")
    if "produce" not in args.phases:
        ap.error("--phases: the best producer setting writes what is read; give produce too")
    return args


def check_installed(names: list[str]) -> None:
    """Exit with one line naming what is missing: a client module, or a server apt cannot add."""
    peers = [s for s in names if s in PEERS]
    for peer in peers:
        for module in MODULES[peer]:
            try:
                __import__(module)
            except ImportError:
                raise SystemExit(f"{LABELS[peer]}: the Python module {module} is missing: "
                                 f"{INSTALL_CLIENTS}") from None
    ensure_installed([SERVERS[s].binary for s in peers])
    if "rabbitmq" in peers:
        for path in (compare_rabbit.RabbitServer.script, shutil.which("epmd")):
            if not path or not os.access(path, os.X_OK):
                raise SystemExit(f"RabbitMQ Streams: {path or 'epmd'} is missing "
                                 "(apt-get install -y rabbitmq-server)")


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.role:
        ROLES[args.role](json.loads(args.params))
        return 0
    check_installed(args.systems)
    stop_on_sigterm()
    workdir = args.workdir or tempfile.mkdtemp(prefix="hb-compare-")
    os.makedirs(workdir, exist_ok=True)
    report = dict(new_report(args), runs=[])
    systems = Systems(args.systems, workdir, args.set)
    t0 = time.monotonic()
    try:
        systems.start()
        report["systems"] = systems.describe()
        for size in args.size:
            count = args.messages if size <= 1000 else args.big_messages
            harness.log(f"--- {size_label(size)}: {count} messages a run, {args.repeats} repeats")
            report["runs"] += sweep_size(systems, args.systems, size, count, args)
    finally:
        report["exit_codes"] = systems.stop()
        if not args.keep and not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    report["seconds"] = time.monotonic() - t0
    build_report(report, args.systems)
    harness.output(report, args, print_report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
