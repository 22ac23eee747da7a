#!/usr/bin/env python3
"""What one produce request costs each process, one at a time against pipelined.

Run by hand (not a test), from the repository with its venv::

    .venv/bin/python tools/bench/request_cpu.py
    .venv/bin/python tools/bench/request_cpu.py --loads sync,big --rounds 3 --warm-mib 3072
    sudo .venv/bin/python tools/bench/request_cpu.py --cpu-latency 0
    sudo .venv/bin/python tools/bench/request_cpu.py --perf-sched /tmp/sched.data --loads sync

Starts one ``hostbroker serve`` (defaults; ``--set`` passed through) and the
naive one-process broker of ``latency.py`` (``--target``), each with a topic
of one partition, and runs, for ``--seconds`` each, one client producing
(acks=1, over ``--socket``, Unix by default): ``sync1`` one message per
request, one at a time; ``pipe1`` the same with 16 in flight; ``sync``
1,000-message sets of 100 B one at a time; ``pipe`` the same 16 in flight;
``big1`` sets of 100 messages of 10 KiB (~1 MiB) one at a time; ``big`` the
same 4 in flight; ``e2e`` the end-to-end load of ``latency.py`` (one message
per PRODUCE at ``--e2e-rate`` messages/s, acks=1, a consumer long-polling
in a process of its own), whose figures are per message and add the
consumer's CPU to the client's; ``parts`` one client's FETCHes of all
``--partitions`` partitions of a topic (one 100-byte message in each, from
offset 0), one at a time; ``fetch`` one client reading ``--fetch-mib``
of 10 KiB messages (written once per broker) over and over in 4 MiB
FETCHes, 4 in flight. Each load runs on each broker in turn, ``--rounds``
times. After each round of ``fetch`` a bare stream of hostbroker's segment
file (blocking ``sendfile`` from a forked sender, read into one 4 MiB buffer
as the client reads) gives what receiving the same bytes costs without a
broker: MB/s and each side's CPU per 4 MiB.

For each it prints requests per second and the CPU every process spent per
request: hostbroker's processes by name, from ``/proc/PID/task/*/schedstat``
(every thread, ns of CPU, and how often each was put on a CPU: its
wake-ups, printed as ``runs`` per request); the naive broker as one process (its connection
threads end with their connection, so from the process's own times, which
keep theirs); the client's from its own ``process_time``. It adds them up:
one request at a time nothing overlaps, so that sum is what a request takes
on one core, the floor under its round trip. One at a time every process in
the chain sleeps between requests, so the difference between a load and its
pipelined twin is what the wake-ups cost.

The big loads stop after ``--big-mib`` (default 1,024 MiB), since both
brokers keep every byte. ``--warm-mib N`` writes and deletes N MiB before
each big load (see ``latency_loads.warm_free_memory``), so that both
brokers' page-cache writes find memory the guest has just freed.
``--pin-broker CPUS`` puts every thread of each broker on those CPUs
(the threads they start later inherit it) and ``--pin-client CPUS`` this
process, which runs the clients: with ``--pin-broker 1 --pin-client 0``
hostbroker's processes wake each other on one CPU, and only the client's
wake-ups cross to the other.
``--baseline TREE`` runs a third broker, ``hostbroker serve`` from another
source tree (a worktree or clone: ``PYTHONPATH`` names it), in each round
after this tree's, for an A/B of two commits in the same run (named
``baseline``; ``--target hostbroker`` leaves the naive broker out).
``--cpu-latency US`` holds a CPU wake-up latency request of ``US`` µs
(``hostbroker.cpulatency``, what the broker's ``cpu.wakeup.latency.us``
holds) for the whole run. ``--perf-sched FILE`` records the scheduler
(``perf sched record -a``) during the loads named by ``--loads``; read it
with ``perf sched timehist -i FILE -w --state`` (who woke whom, how long
each waited for a CPU, how long it ran) or ``perf sched latency -i FILE``.
A kernel may leave switches from the idle task out of the record (the
6.18 guest of docs/benchmarks.md's eleventh round drops about half):
timehist then shows a CPU idle while a process ran on it.
"""

from __future__ import annotations

import argparse
import glob
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(os.path.dirname(HERE))]

from harness import Broker, machine_info  # noqa: E402
from latency_loads import (  # noqa: E402
    NaiveBroker,
    run_e2e,
    run_fetch,
    run_pipelined,
    warm_free_memory,
)
from tree_ab import start_from  # noqa: E402

from hostbroker import cpulatency  # noqa: E402
from hostbroker.log.segments import partition_dirname  # noqa: E402

# load -> (message size, messages per request, requests in flight)
LOADS = {"sync1": (100, 1, 1), "pipe1": (100, 1, 16), "sync": (100, 1000, 1),
         "pipe": (100, 1000, 16), "big1": (10 * 1024, 100, 1), "big": (10 * 1024, 100, 4),
         "e2e": (100, 1, 1), "fetch": (10 * 1024, 100, 4), "parts": (100, 1, 1)}
TOPIC = "cpu"
PARTS_TOPIC = "cpu-parts"  # the parts load's: --partitions partitions, a message in each
FETCH_TOPIC = "cpu-fetch"  # the fetch load's data, written once per broker
FETCH_BYTES = 4 << 20  # max_bytes of each FETCH
ENTRY_10K = 10 * 1024 + 10  # a 10 KiB message in the log, its header included
MIB = 1 << 20


def schedstat(pid: int) -> tuple[int, int]:
    """CPU time of every live thread of ``pid`` so far, ns, and how many times
    they were put on a CPU ((0, 0) once it is gone)."""
    total = runs = 0
    for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            with open(path) as f:
                fields = f.read().split()
            total += int(fields[0])
            runs += int(fields[2])
        except (OSError, ValueError, IndexError):
            pass
    return total, runs


def cpu_ns(pid: int) -> int:
    """CPU time of every live thread of ``pid`` so far, ns (0 once it is gone)."""
    return schedstat(pid)[0]


def process_cpu_ns(pid: int) -> int:
    """CPU time of ``pid`` so far, ended threads included, ns (clock-tick resolution)."""
    import psutil

    times = psutil.Process(pid).cpu_times()
    return int((times.user + times.system) * 1e9)


def meters(name: str, broker) -> dict:
    """Process name -> a function giving its (CPU so far in ns, runs so far;
    0 where not known)."""
    import psutil

    if name == "naive":
        pid = broker.proc.pid
        return {"naive": lambda: (process_cpu_ns(pid), 0)}
    return {p.name(): (lambda pid=p.pid: schedstat(pid))
            for p in psutil.Process(broker.proc.pid).children()}


def pin(broker, cpus: set[int]) -> None:
    """Every thread of ``broker``'s processes onto ``cpus`` (what ``taskset``
    does for one). Threads started later inherit their process's."""
    import psutil

    root = psutil.Process(broker.proc.pid)
    for proc in [root] + root.children(recursive=True):
        for thread in proc.threads():
            try:
                os.sched_setaffinity(thread.id, cpus)
            except OSError:  # ended meanwhile
                pass


def _cpus(text: str) -> set[int]:
    return {int(c) for c in text.split(",") if c}


def _children_cpu() -> float:
    """CPU of this process's ended and waited-for children so far, s."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def fetch_for(uri: str, span: tuple[int, int], seconds: float, window: int) -> dict:
    """4 MiB FETCHes of ``span`` (start, end), ``window`` in flight, from its
    start again each time it is read through, for ``seconds``."""
    got = requests = 0
    elapsed = 0.0
    while elapsed < seconds:
        r = run_fetch(uri, FETCH_TOPIC, span[0], span[1], seconds - elapsed, FETCH_BYTES, window)
        got += r["bytes"]
        requests += r["requests"]
        elapsed += r["seconds"]
    return {"requests": requests, "seconds": elapsed, "msgs_per_s": got / ENTRY_10K / elapsed,
            "mb_per_s": got / elapsed / 1e6, "bytes": got}


def fetch_data(name: str, broker, a) -> tuple[int, int]:
    """The offsets of ``--fetch-mib`` of 10 KiB messages in ``broker``'s fetch
    topic, written on the first call."""
    span = a.fetch_spans.get(name)
    if span is None:
        r = run_pipelined(broker.uri(a.socket), FETCH_TOPIC, 600, 10 * 1024, 100, 4,
                          a.fetch_mib * MIB)
        span = a.fetch_spans[name] = (r["start"], r["end"])
    return span


def segment_file(broker) -> str:
    """The largest segment file of ``broker``'s fetch topic (hostbroker's layout)."""
    folder = os.path.join(broker.settings["log.dirs"], partition_dirname(FETCH_TOPIC, 0))
    return max(glob.glob(os.path.join(folder, "*.kafka")), key=os.path.getsize)


def sendfile_reference(path: str, seconds: float) -> dict:
    """A bare stream of ``path`` (page-cached): a forked child sends it with
    blocking ``sendfile`` in 4 MiB calls over loopback TCP for ``seconds``;
    this process reads it as the fetch client does (``recv_into`` one 4 MiB
    buffer, a socket timeout set). MB/s, and each side's CPU per 4 MiB."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(60)
    address = listener.getsockname()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the sender
        code = 1
        try:
            listener.close()
            sock = socket.create_connection(address, timeout=60)
            sock.setblocking(True)
            fd = os.open(path, os.O_RDONLY)
            size = os.fstat(fd).st_size
            position = 0
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                n = os.sendfile(sock.fileno(), fd, position, min(FETCH_BYTES, size - position))
                position = (position + n) % size
            sock.close()
            code = 0
        finally:
            os._exit(code)
    received = 0
    children = _children_cpu()
    try:
        conn, _ = listener.accept()
        conn.settimeout(60)
        view = memoryview(bytearray(FETCH_BYTES))
        mine = time.process_time()
        t0 = time.perf_counter()
        while n := conn.recv_into(view):
            received += n
        elapsed = time.perf_counter() - t0
        mine = time.process_time() - mine
        conn.close()
    finally:
        listener.close()
        os.waitpid(pid, 0)
    per = received / FETCH_BYTES
    return {"bytes": received, "mb_per_s": received / elapsed / 1e6,
            "receiver_us": mine * 1e6 / per, "sender_us": (_children_cpu() - children) * 1e6 / per}


def fetch_parts_for(uri: str, partitions: int, seconds: float) -> dict:
    """FETCHes of ``PARTS_TOPIC``'s partitions from offset 0, one at a time."""
    from hostbroker.client.connection import BrokerConnection
    from hostbroker.protocol import api

    request = api.FetchRequest(0, 1, tuple(api.FetchPartition(PARTS_TOPIC, p, 0, 1 << 20)
                                           for p in range(partitions)))
    n = got = 0
    with BrokerConnection(uri, timeout=30).connect() as conn:
        t0 = time.perf_counter()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for part in conn.request(request).partitions:
                if part.error_code or not part.message_set:
                    raise SystemExit(f"parts: partition {part.partition} answered "
                                     f"{part.error_code} with {len(part.message_set)} bytes")
                got += len(part.message_set)
            n += 1
        elapsed = time.perf_counter() - t0
    return {"requests": n, "seconds": elapsed, "msgs_per_s": n * partitions / elapsed,
            "mb_per_s": got / elapsed / 1e6}


def measure(name: str, broker, load: str, a) -> dict:
    size, batch, window = LOADS[load]
    uri = broker.uri(a.socket)
    if load == "fetch":
        span = fetch_data(name, broker, a)
        fetch_for(uri, span, 0.5, window)  # warm up
    cap = a.big_mib << 20 if size > 1000 else None  # the log keeps every byte
    if load == "e2e":
        run_e2e(uri, TOPIC, 1.0, a.e2e_rate)  # warm up
    elif load == "parts":
        fetch_parts_for(uri, a.partitions, 0.5)  # warm up
    elif load != "fetch":
        run_pipelined(uri, TOPIC, 0.5, size, batch, window,
                      cap and min(cap, 64 << 20))  # warm up
    if size > 1000 and load != "fetch":
        warm_free_memory(a.workdir, a.warm_mib)
    procs = meters(name, broker)
    before = {proc: read() for proc, read in procs.items()}
    mine = time.process_time() + _children_cpu()
    if load == "e2e":
        result = run_e2e(uri, TOPIC, a.seconds, a.e2e_rate)
        n = result["received"]
        result.update(msgs_per_s=n / result["seconds"],
                      mb_per_s=n * size / result["seconds"] / 1e6)
    elif load == "fetch":
        result = fetch_for(uri, span, a.seconds, window)
        n = result["requests"]
    elif load == "parts":
        result = fetch_parts_for(uri, a.partitions, a.seconds)
        n = result["requests"]
    else:
        result = run_pipelined(uri, TOPIC, a.seconds, size, batch, window, cap)
        n = result["requests"]
    mine = time.process_time() + _children_cpu() - mine
    spent, runs = {}, {}
    for proc, read in procs.items():
        cpu, count = read()
        us = (cpu - before[proc][0]) / 1000 / n
        if us >= 0.5:
            spent[proc] = round(us, 1)
            runs[proc] = round((count - before[proc][1]) / n, 2)
    spent = dict(sorted(spent.items()))
    spent["client"] = round(mine * 1e6 / n, 1)
    out = {"requests_per_s": round(n / result["seconds"], 1),
           "us_per_request": round(result["seconds"] * 1e6 / n, 1),
           "msgs_per_s": result["msgs_per_s"], "mb_per_s": result["mb_per_s"],
           "cpu_us_per_request": spent, "cpu_us_sum": round(sum(spent.values()), 1),
           "runs_per_request": {p: r for p, r in sorted(runs.items()) if r}}
    if load == "e2e":
        out["latency_ms"] = result["latency_ms"]
    return out


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="request_cpu.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--loads", default="sync1,pipe1,sync,pipe", help=f"of {','.join(LOADS)}")
    ap.add_argument("--target", choices=("hostbroker", "naive", "both"), default="both")
    ap.add_argument("--socket", choices=("unix", "tcp"), default="unix")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--e2e-rate", type=float, default=1000.0, metavar="N",
                    help="messages/s of the e2e load (default 1000)")
    ap.add_argument("--rounds", type=int, default=1, help="each load on each broker this often")
    ap.add_argument("--warm-mib", type=int, default=0, metavar="MIB",
                    help="write and delete this many MiB before each big load")
    ap.add_argument("--big-mib", type=int, default=1024, metavar="MIB",
                    help="each big load stops after this many MiB (default 1024): both "
                         "brokers keep all of it, so the work directory needs about "
                         "2 x rounds x this much for big and big1 together")
    ap.add_argument("--fetch-mib", type=int, default=256, metavar="MIB",
                    help="10 KiB messages the fetch load reads through, again and again "
                         "(written once per broker; default 256)")
    ap.add_argument("--partitions", type=int, default=8, metavar="N",
                    help="partitions each FETCH of the parts load names (default 8)")
    ap.add_argument("--cpu-latency", type=int, default=None, metavar="US",
                    help="hold a CPU wake-up latency request for the run (root)")
    ap.add_argument("--perf-sched", metavar="FILE", help="record the scheduler into FILE")
    ap.add_argument("--pin-broker", type=_cpus, default=None, metavar="CPUS",
                    help="every thread of each broker on these CPUs (e.g. 1)")
    ap.add_argument("--pin-client", type=_cpus, default=None, metavar="CPUS",
                    help="this process (the clients) on these CPUs (e.g. 0)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--baseline", metavar="TREE",
                    help="also run hostbroker from this source tree, after this tree's")
    a = ap.parse_args(argv)
    if a.baseline and not os.path.isfile(os.path.join(a.baseline, "hostbroker", "__init__.py")):
        ap.error(f"--baseline {a.baseline}: no hostbroker package there")
    a.loads = [x for x in a.loads.split(",") if x]
    if set(a.loads) - set(LOADS):
        ap.error(f"unknown loads: {', '.join(sorted(set(a.loads) - set(LOADS)))}")
    if not 1 <= a.partitions <= 1000:
        ap.error("--partitions must be 1 to 1000")
    if (a.rounds < 1 or a.seconds <= 0 or a.warm_mib < 0 or a.big_mib < 1 or a.e2e_rate <= 0
            or a.fetch_mib < 4):
        ap.error("--rounds and --big-mib must be at least 1, --fetch-mib at least 4, "
                 "--seconds and --e2e-rate above 0, --warm-mib at least 0")
    return a


def main(argv=None) -> int:
    from hostbroker.client.simple import SimpleClient
    from hostbroker.log.message import encode_message_set

    a = parse_args(argv)
    held = cpulatency.hold(a.cpu_latency) if a.cpu_latency is not None else None
    a.workdir = tempfile.mkdtemp(prefix="hb-reqcpu-")
    a.fetch_spans = {}
    brokers = {}
    perf = None
    try:
        if a.target in ("hostbroker", "both"):
            brokers["hostbroker"] = Broker(a.workdir, a.set)
        if a.baseline:
            brokers["baseline"] = Broker(os.path.join(a.workdir, "baseline"), a.set)
        if a.target in ("naive", "both"):
            brokers["naive"] = NaiveBroker(a.workdir)
        for name, broker in brokers.items():
            if name == "baseline":
                os.makedirs(os.path.join(a.workdir, "baseline"))
                start_from(broker, os.path.abspath(a.baseline))
            else:
                broker.start()
            with SimpleClient(broker.uri("unix")) as client:
                client.create_topic(TOPIC, 1)
                if "fetch" in a.loads:
                    client.create_topic(FETCH_TOPIC, 1)
                if "parts" in a.loads:
                    client.create_topic(PARTS_TOPIC, a.partitions)
                    for p in range(a.partitions):
                        client.produce(PARTS_TOPIC, p, encode_message_set([b"x" * 100]))
            if a.pin_broker:
                pin(broker, a.pin_broker)
        if a.pin_client:
            os.sched_setaffinity(0, a.pin_client)
        print(machine_info(), f"CPU wake-up latency target {cpulatency.current()} µs"
              if os.geteuid() == 0 else "", flush=True)
        if a.perf_sched:
            perf = subprocess.Popen(["perf", "sched", "record", "-a", "-o", a.perf_sched],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1)
        for load in a.loads:
            for _ in range(a.rounds):
                for name, broker in brokers.items():
                    r = measure(name, broker, load, a)
                    cpu = "  ".join(f"{k} {v}" for k, v in r["cpu_us_per_request"].items())
                    runs = "  ".join(f"{k} {v}" for k, v in r["runs_per_request"].items())
                    latency = ""
                    if "latency_ms" in r:
                        ms = r["latency_ms"]
                        latency = (f"   latency p50 {ms['p50']} p99 {ms['p99']} "
                                   f"p99.9 {ms['p99.9']} ms")
                    print(f"{load:6} {name:10} {r['requests_per_s']:>9,.0f} requests/s "
                          f"{r['msgs_per_s']:>11,.0f} msgs/s {r['mb_per_s']:>7,.0f} MB/s   "
                          f"µs per request: wall {r['us_per_request']}, CPU {r['cpu_us_sum']} "
                          f"= {cpu}" + (f"   runs per request: {runs}" if runs else "")
                          + latency, flush=True)
                reference = brokers.get("hostbroker") or brokers.get("baseline")
                if load == "fetch" and reference is not None:
                    r = sendfile_reference(segment_file(reference), a.seconds)
                    print(f"{load:6} {'sendfile':10} {r['mb_per_s']:>7,.0f} MB/s   µs of CPU "
                          f"per 4 MiB: receiver (as the client) {r['receiver_us']:.1f}, "
                          f"sender {r['sender_us']:.1f}", flush=True)
    finally:
        if perf is not None:
            perf.send_signal(signal.SIGINT)
            perf.wait(60)
        for broker in brokers.values():
            broker.stop()
        shutil.rmtree(a.workdir, ignore_errors=True)
        if held is not None:
            os.close(held)
    return 0


if __name__ == "__main__":
    sys.exit(main())
