#!/usr/bin/env python3
"""What does TLS cost a producer? Produce throughput over TLS against plain TCP, one run.

Run by hand (not a test), from the repository with its venv::

    .venv/bin/python tools/bench/tls_throughput.py
    .venv/bin/python tools/bench/tls_throughput.py --rounds 3 --json

What it does, every step bounded in time and size:

1. Makes a CA, a server certificate (127.0.0.1) and a client certificate
   (CN=bench) with ``openssl`` in a scratch directory.
2. Starts one broker (:class:`harness.Broker`) with a ``tcp://`` and an
   ``ssl://`` listener (``ssl.client.auth=required``), always stopped by PID.
3. For each message shape (100-byte messages in sets of 1000, 10 KiB
   messages in sets of 100: ~110 KB and ~1 MB requests), ``--rounds`` times
   in turn: one producer process (acks=1, one partition, a window of
   ``--in-flight`` requests) over plain TCP, then the same over TLS (TLS 1.3,
   the handshake before the clock starts), each for at most
   ``--max-seconds``.
4. Prints MB/s of each (log bytes: entries with their headers), the best
   round of each, their ratio TLS / TCP (the goal is at least 0.5) and the
   CPU the broker's processes used per MB.

The producer role is :func:`broker_throughput.role_producer`'s loop with TLS
settings. The machine is shared: each phase waits (up to ``--wait-quiet``
seconds) for a quiet second first, and the best of the rounds is compared.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from harness import (MB, BenchError, Broker, Child, busy_cpu_seconds,  # noqa: E402
                     cpu_seconds, emit, free_port, handshake, log, machine_info, wait_quiet)

SCRIPT = os.path.abspath(__file__)
SHAPES = ((100, 1000), (10 * 1024, 100))  # (message bytes, messages per set)


def make_certs(d: str) -> dict:
    """CA, server (127.0.0.1) and client (CN=bench) PEM files under ``d``."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def run(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, timeout=60)

    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=bench-ca",
        "-days", "2")
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1\n"),
                      ("client", "extendedKeyUsage=clientAuth\n")):
        run("req", "-new", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN={'bench' if name == 'client' else '127.0.0.1'}")
        with open(os.path.join(d, f"{name}.ext"), "w") as f:
            f.write(ext)
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext")
        with open(os.open(os.path.join(d, f"{name}.keystore.pem"),
                         os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
            for part in (f"{name}.pem", f"{name}.key"):
                with open(os.path.join(d, part)) as f:
                    out.write(f.read())
    return {"ca": os.path.join(d, "ca.pem"), "server": os.path.join(d, "server.keystore.pem"),
            "client": os.path.join(d, "client.keystore.pem")}


# ---------------------------------------------------------------------------
# The producer role (harness.Child).

def role_producer(p: dict) -> None:
    from hostbroker.client.connection import BrokerConnection
    from hostbroker.log.message import encode_message_set
    from hostbroker.protocol import api

    size, batch = p["message_bytes"], p["batch"]
    sets = [encode_message_set([os.urandom(size) for _ in range(batch)]) for _ in range(8)]
    requests = [api.ProduceRequest(1, 30_000, (api.ProducePartition(p["topic"], 0, s),))
                for s in sets]
    conn = BrokerConnection(p["uri"], client_id="hb-bench-tls", tls=p.get("tls")).connect()
    handshake()
    deadline = time.monotonic() + p["max_seconds"]
    t0 = time.perf_counter()
    sent = received = 0
    while True:
        while conn.pending < p["in_flight"] and time.monotonic() < deadline:
            conn.send(requests[sent % len(requests)])
            sent += 1
        if not conn.pending:
            break
        result = conn.receive().partitions[0]
        if result.error_code != 0:
            raise BenchError(f"produce answered {result!r}")
        received += 1
    seconds = time.perf_counter() - t0
    conn.close()
    emit({"requests": received, "bytes": received * len(sets[0]),
          "messages": received * batch, "seconds": seconds})


ROLES = {"producer": role_producer}


# ---------------------------------------------------------------------------
# The orchestrating side.

def run_phase(kind: str, params: dict, broker: Broker, workdir: str, quiet: float) -> dict:
    child = Child(SCRIPT, "producer", params, workdir, timeout=params["max_seconds"] + 120)
    try:
        child.ready()
        if quiet:
            wait_quiet(quiet)
        pids = dict(broker.worker_pids)
        before = cpu_seconds(pids)
        busy0 = busy_cpu_seconds()
        child.go()
        result = child.result()
        after = cpu_seconds(pids)
        busy = busy_cpu_seconds() - busy0
    finally:
        child.end()
    broker_cpu = sum(after[n] - before[n] for n in after if n in before)
    mb = result["bytes"] / MB
    result.update(kind=kind, mb_per_s=mb / result["seconds"],
                  broker_cpu_s_per_mb=broker_cpu / mb if mb else None,
                  machine_busy_cpu_s=busy)
    return result


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("params", nargs="?", help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=2, help="TCP then TLS, this many times")
    ap.add_argument("--max-seconds", type=float, default=8.0, help="per phase")
    ap.add_argument("--in-flight", type=int, default=8, help="requests in flight")
    ap.add_argument("--wait-quiet", type=float, default=5.0,
                    help="seconds to wait for a quiet machine before each phase")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker setting (repeatable)")
    ap.add_argument("--json", action="store_true")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.role:
        ROLES[args.role](json.loads(args.params))
        return 0
    if not 1 <= args.rounds <= 10 or not 0 < args.max_seconds <= 120:
        raise SystemExit("--rounds 1..10, --max-seconds up to 120")
    workdir = tempfile.mkdtemp(prefix="hb-bench-tls-")
    broker = None
    try:
        certs = make_certs(workdir)
        broker = Broker(workdir, args.set)
        ssl_port = free_port()
        broker.settings["listeners"] += f",ssl://127.0.0.1:{ssl_port}"
        broker.settings.setdefault("ssl.keystore.location", certs["server"])
        broker.settings.setdefault("ssl.truststore.location", certs["ca"])
        broker.start()
        from hostbroker.client.simple import SimpleClient

        tls = {"ssl.truststore.location": certs["ca"], "ssl.keystore.location": certs["client"]}
        uris = {"tcp": broker.uri("tcp"), "tls": f"ssl://127.0.0.1:{ssl_port}"}
        results = []
        for size, batch in SHAPES:
            for r in range(args.rounds):
                for kind in ("tcp", "tls"):
                    topic = f"bench-{kind}-{size}-{r}"
                    with SimpleClient(broker.uri("unix")) as client:
                        client.create_topic(topic, 1)
                    params = {"uri": uris[kind], "tls": tls if kind == "tls" else None,
                              "topic": topic, "message_bytes": size, "batch": batch,
                              "in_flight": args.in_flight, "max_seconds": args.max_seconds}
                    result = run_phase(kind, params, broker, workdir, args.wait_quiet)
                    result.update(message_bytes=size, batch=batch, round=r)
                    results.append(result)
                    log(f"{kind} {size} B x {batch}, round {r}: {result['mb_per_s']:.1f} MB/s")
        summary = []
        for size, batch in SHAPES:
            best = {kind: max(x["mb_per_s"] for x in results
                              if x["kind"] == kind and x["message_bytes"] == size)
                    for kind in ("tcp", "tls")}
            summary.append({"message_bytes": size, "batch": batch, "tcp_mb_per_s": best["tcp"],
                            "tls_mb_per_s": best["tls"], "ratio": best["tls"] / best["tcp"],
                            "goal": 0.5})
        report = {"machine": machine_info(), "args": vars(args), "phases": results,
                  "summary": summary}
        if args.json:
            print(json.dumps(report, indent=2))
        else:
            print(f"{'message':>8} {'set':>5} {'TCP MB/s':>9} {'TLS MB/s':>9} {'TLS/TCP':>8}"
                  f"  goal")
            for row in summary:
                print(f"{row['message_bytes']:>8} {row['batch']:>5} {row['tcp_mb_per_s']:>9.1f} "
                      f"{row['tls_mb_per_s']:>9.1f} {row['ratio']:>8.2f}  >= {row['goal']}")
        return 0
    except BenchError as e:
        log(f"tls_throughput: {e}")
        return 1
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
