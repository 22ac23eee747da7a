#!/usr/bin/env python3
"""Produce and fetch latency of every partition while consumer groups load the
coordinator (issue 34's target): with ``--groups`` one-member groups joining
and heartbeating, and the largest JOIN_GROUP the limits allow arriving every
``--big-every`` seconds, produce/fetch p99 on every partition should stay
within 2x its idle value.

Run by hand (not a test), from the repository with its venv::

    .venv/bin/python tools/bench/coordinator_isolation.py
    .venv/bin/python tools/bench/coordinator_isolation.py --groups 2000 --seconds 15

``--groups`` is 9,999 by default: ``group.max.groups`` (10,000) less the
group of the largest JOIN, which would be refused TOO_MANY_GROUPS.

One ``hostbroker serve`` (tools/bench/harness.py) with two log dirs, so two
writers, started here and stopped by PID at the end; ``--set KEY=VALUE``
passes broker settings. A topic of two partitions (one per log dir) is
probed by one client: each round, for each partition, a 100-byte PRODUCE
(acks=1) and a FETCH of what it wrote (max_wait 0), each timed, then 5 ms
of sleep. Two phases of ``--seconds`` each, in one run: *idle* (the probe
alone), then *load*: ``--loaders`` processes join ``--groups`` groups in
all (one member each, pipelined JOIN and SYNC on one connection per loader)
and heartbeat each every ``--heartbeat-ms``, while a thread sends the
largest JOIN the limits allow (``group.max.topics.per.member`` topics of
1,024 streams, or fewer where ``group.max.streams`` bounds a group's
streams; the topics need not exist) of a new group every ``--big-every`` seconds (the
next one as soon as the last was answered when it took longer), and
leaves it. Printed: each partition's p50 and p99 per phase and the load/idle
ratio of p99, what the load did (groups joined, heartbeats answered, big
joins and their time), and the CPU seconds of each broker process kind in
the load phase. Every phase is bounded in time; the loaders end themselves
``--seconds`` + 60 s after they start at the latest.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

import harness  # noqa: E402

TOPIC = "probe"
BATCH = 200  # requests pipelined on a loader's connection before it reads the answers


# -- the wire, for the loaders and the big joiner ------------------------------
class Wire:
    """One connection that pipelines group requests and reads their answers."""

    def __init__(self, path: str, timeout: float = 120.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.corr = 0

    def send(self, bodies) -> None:
        from hostbroker.protocol import api

        out = []
        for body in bodies:
            self.corr += 1
            out.append(api.encode_request(body, self.corr, "bench"))
        self.sock.sendall(b"".join(out))

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            buf += chunk
        return bytes(buf)

    def answers(self, body_type, n: int) -> list:
        from hostbroker.protocol import groups as gp

        out = []
        for _ in range(n):
            (size,) = struct.unpack(">i", self._exact(4))
            frame = self._exact(size)
            out.append(gp.decode_group_response(body_type.API_KEY, body_type.API_VERSION,
                                                frame)[1])
        return out

    def close(self) -> None:
        self.sock.close()


def loader(path: str, first: int, count: int, heartbeat_ms: int, seconds: float) -> None:
    """Join groups ``first`` .. ``first+count-1`` (one member each), then heartbeat
    each every ``heartbeat_ms`` until stdin closes (or ``seconds`` + 60 s)."""
    from hostbroker.protocol import groups as gp

    harness.handshake()
    end = time.monotonic() + seconds + 60
    wire = Wire(path)
    members = []  # (group, generation, member id)
    join_errors = 0
    start = time.monotonic()
    for at in range(first, first + count, BATCH):
        names = [f"g{i:05d}" for i in range(at, min(at + BATCH, first + count))]
        wire.send(gp.JoinGroupRequest(n, 30000, 30000, "", (gp.SubscribedTopic(TOPIC, 1),))
                  for n in names)
        joined = wire.answers(gp.JoinGroupRequest, len(names))
        ok = [(n, j) for n, j in zip(names, joined) if j.error_code == 0]
        join_errors += len(names) - len(ok)
        wire.send(gp.SyncGroupRequest(n, j.generation, j.member_id) for n, j in ok)
        wire.answers(gp.SyncGroupRequest, len(ok))
        members += [(n, j.generation, j.member_id) for n, j in ok]
    joined_s = time.monotonic() - start
    beats = beat_errors = 0
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    interval = heartbeat_ms / 1000
    while not stop.is_set() and time.monotonic() < end:
        round_start = time.monotonic()
        for at in range(0, len(members), BATCH):
            part = members[at:at + BATCH]
            wire.send(gp.HeartbeatRequest(*m) for m in part)
            answered = wire.answers(gp.HeartbeatRequest, len(part))
            beats += len(answered)
            beat_errors += sum(1 for a in answered if a.error_code != 0)
            if stop.is_set():
                break
            # spread the round's heartbeats over its interval
            time.sleep(max(0.0, interval * len(part) / max(1, len(members)) - 0.001))
        stop.wait(max(0.0, interval - (time.monotonic() - round_start)))
    wire.close()
    harness.emit({"joined": len(members), "join_errors": join_errors, "joined_s": joined_s,
                  "heartbeats": beats, "heartbeat_errors": beat_errors})


# -- the orchestrator ----------------------------------------------------------
def largest_join(settings: list[str]) -> tuple[int, int]:
    """Topics and streams per topic of the largest JOIN_GROUP the broker's
    limits allow: ``group.max.topics.per.member`` topics of up to 1,024
    streams, and no more streams in all than ``group.max.streams`` where
    the broker has that bound."""
    from hostbroker.config import SETTINGS_BY_KEY, Config
    from hostbroker.protocol import groups as gp

    config = Config.build(overrides=settings)
    topics = config["group.max.topics.per.member"]
    streams = gp.MAX_STREAMS_PER_TOPIC
    if "group.max.streams" in SETTINGS_BY_KEY:
        streams = max(1, min(streams, config["group.max.streams"] // topics))
    return topics, streams


def big_joins(path: str, every: float, stop: threading.Event, out: dict,
              settings: list[str]) -> None:
    from hostbroker.protocol import groups as gp

    topics, streams = largest_join(settings)
    subscription = tuple(gp.SubscribedTopic(f"big-{i:04d}", streams) for i in range(topics))
    wire = Wire(path)
    n = 0
    times, errors = [], 0
    next_at = time.monotonic()
    while not stop.wait(max(0.0, next_at - time.monotonic())):
        next_at = time.monotonic() + every
        start = time.monotonic()
        wire.send([gp.JoinGroupRequest(f"big-{n}", 30000, 30000, "", subscription)])
        (joined,) = wire.answers(gp.JoinGroupRequest, 1)
        times.append(time.monotonic() - start)
        if joined.error_code:
            errors += 1
        else:
            wire.send([gp.LeaveGroupRequest(f"big-{n}", joined.member_id)])
            wire.answers(gp.LeaveGroupRequest, 1)
        n += 1
    wire.close()
    out.update(big_joins=n, big_join_errors=errors,
               big_join_s_mean=statistics.fmean(times) if times else None,
               big_join_s_max=max(times) if times else None)


def probe(broker: harness.Broker, seconds: float) -> dict:
    """Produce and fetch each partition in turn for ``seconds``; latencies by (op, partition)."""
    from hostbroker.client.simple import SimpleClient
    from hostbroker.log.message import encode_message_set

    data = encode_message_set([b"x" * 100])
    lat: dict[str, list[float]] = {}
    with SimpleClient(broker.uri("tcp"), timeout=60) as client:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for p in (0, 1):
                t0 = time.monotonic()
                base = client.produce(TOPIC, p, data).base_offset
                t1 = time.monotonic()
                client.fetch(TOPIC, p, base, 4096)
                t2 = time.monotonic()
                lat.setdefault(f"produce p{p}", []).append(t1 - t0)
                lat.setdefault(f"fetch p{p}", []).append(t2 - t1)
            time.sleep(0.005)
    return lat


def quantiles(values: list[float]) -> dict:
    q = statistics.quantiles(values, n=100, method="inclusive")
    return {"n": len(values), "p50_ms": q[49] * 1000, "p99_ms": q[98] * 1000}


def run(args: argparse.Namespace) -> dict:
    workdir = tempfile.mkdtemp(prefix="hb-coord-bench-")
    logs = [os.path.join(workdir, "logs0"), os.path.join(workdir, "logs1")]
    broker = harness.Broker(workdir, [f"log.dirs={','.join(logs)}"] + args.set)
    report = {"machine": harness.machine_info(), "groups": args.groups,
              "seconds": args.seconds, "big_every_s": args.big_every,
              "heartbeat_ms": args.heartbeat_ms, "largest_join": largest_join(args.set)}
    broker.start()
    try:
        from hostbroker.client.simple import SimpleClient

        harness.warm_up(broker)
        with SimpleClient(broker.uri("unix")) as client:
            client.create_topic(TOPIC, 2)
        from hostbroker.log.segments import partition_dirname

        report["partition_log_dirs"] = {  # which writer serves each partition
            p: [i for i, d in enumerate(logs)
                if os.path.isdir(os.path.join(d, partition_dirname(TOPIC, p)))]
            for p in (0, 1)}
        idle = probe(broker, args.seconds)
        per = max(1, args.groups // args.loaders)
        children = []
        for i in range(args.loaders):
            count = min(per, args.groups - i * per) if i < args.loaders - 1 \
                else args.groups - i * per
            children.append(subprocess.Popen(
                [sys.executable, __file__, "--loader", broker.unix_path, str(i * per), str(count),
                 str(args.heartbeat_ms), str(args.seconds)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
        for child in children:
            line = child.stdout.readline().strip()
            if line != "READY":
                raise harness.BenchError(f"a loader said {line!r}")
        pids = broker.workers()
        cpu0 = harness.cpu_seconds(pids)
        for child in children:
            child.stdin.write("GO\n")
            child.stdin.flush()
        stop = threading.Event()
        big: dict = {}
        joiner = threading.Thread(target=big_joins,
                                  args=(broker.unix_path, args.big_every, stop, big,
                                        args.set))
        joiner.start()
        time.sleep(args.warm)  # the loaders' joins under way first
        loaded = probe(broker, args.seconds)
        stop.set()
        cpu1 = harness.cpu_seconds(pids)
        loads = []
        for child in children:
            child.stdin.close()
            loads.append(json.loads(child.stdout.readline()))
            child.wait(60)
        joiner.join(300)
        cpu: dict[str, float] = {}
        for name, seconds in cpu1.items():
            kind = harness.process_kind(name)
            cpu[kind] = cpu.get(kind, 0.0) + seconds - cpu0.get(name, 0.0)
        report["load"] = {
            "groups_joined": sum(x["joined"] for x in loads),
            "join_errors": sum(x["join_errors"] for x in loads),
            "groups_joined_in_s": max(x["joined_s"] for x in loads),
            "heartbeats": sum(x["heartbeats"] for x in loads),
            "heartbeat_errors": sum(x["heartbeat_errors"] for x in loads), **big}
        report["cpu_s_load_phase"] = {k: round(v, 2) for k, v in sorted(cpu.items())}
        report["latency"] = {}
        for key in sorted(idle):
            i, loaded_q = quantiles(idle[key]), quantiles(loaded[key])
            report["latency"][key] = {"idle": i, "load": loaded_q,
                                      "p99_ratio": loaded_q["p99_ms"] / i["p99_ms"]}
    finally:
        broker.stop()
    return report


def print_report(report: dict) -> None:
    m = report["machine"]
    print(f"nproc {m['nproc']}, {m['ram_gib']} GiB, Python {m['python']}, {m['git']}")
    topics, streams = report["largest_join"]
    print(f"groups {report['groups']}, heartbeat every {report['heartbeat_ms']} ms, "
          f"largest JOIN ({topics} topics x {streams} streams) every {report['big_every_s']} s, "
          f"{report['seconds']} s per phase")
    print(json.dumps(report["load"]))
    print("cpu s in the load phase:", json.dumps(report["cpu_s_load_phase"]))
    print(f"{'':12} {'idle p50':>9} {'idle p99':>9} {'load p50':>9} {'load p99':>9} {'p99 x':>6}")
    for key, row in report["latency"].items():
        print(f"{key:12} {row['idle']['p50_ms']:9.2f} {row['idle']['p99_ms']:9.2f} "
              f"{row['load']['p50_ms']:9.2f} {row['load']['p99_ms']:9.2f} "
              f"{row['p99_ratio']:6.2f}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--loader":
        path, first, count, heartbeat_ms, seconds = sys.argv[2:7]
        loader(path, int(first), int(count), int(heartbeat_ms), float(seconds))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # group.max.groups (10,000) less the one the largest JOIN makes (and leaves)
    parser.add_argument("--groups", type=int, default=9999)
    parser.add_argument("--loaders", type=int, default=2)
    parser.add_argument("--heartbeat-ms", type=int, default=3000)
    parser.add_argument("--big-every", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warm", type=float, default=2.0,
                        help="seconds of load before the probe starts timing")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--json-out")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    harness.output(run(args), args, print_report)


if __name__ == "__main__":
    main()
