#!/usr/bin/env python3
"""How many times a processor copies the bytes of large request frames.

Run by hand (not a test), from the repository with its venv::

    .venv/bin/python tools/bench/frame_copies.py
    .venv/bin/python tools/bench/frame_copies.py --set processor.ring.receive=false

Starts one ``hostbroker serve`` (``harness.Broker``: free ports,
temporary data, stopped by PID; PUTs off, so every PRODUCE takes the request
ring) and sends PRODUCE frames of ``--frame-kib`` of 10 KiB messages on one
connection, over the Unix socket and then TCP, two ways:

- ``trickled``: each frame written in 16 KiB pieces 2 ms apart, one frame
  at a time (a slow or distant sender);
- ``pipelined``: ``--frames`` frames written at once, then their answers.

For each it reads the processors' board counters before and after and
prints ``bytes_copied / bytes_in``: the request bytes a processor copied in
memory (into a ring, or into a connection's buffer) per byte it received.
1.0 is one copy of every byte; 0 is every byte received straight into its
ring record. Bounded: ``--frames`` frames per row, 8 rows at most.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import struct
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(os.path.dirname(HERE))]

from harness import Broker  # noqa: E402

TOPIC = "copies"


def produce_frame(topic: str, message_set: bytes, correlation_id: int) -> bytes:
    from hostbroker.protocol import api

    request = api.ProduceRequest(acks=1, timeout_ms=10000, partitions=(
        api.ProducePartition(topic, 0, message_set),))
    return api.encode_request(request, correlation_id)


def read_answer(sock: socket.socket) -> None:
    need, got = 4, b""
    while len(got) < need:
        chunk = sock.recv(need - len(got))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        got += chunk
        if need == 4 and len(got) == 4:
            need += struct.unpack(">i", got)[0]


def processor_counters(settings: dict) -> tuple[int, int]:
    from hostbroker import top
    from hostbroker.config import Config

    board, table, _ = top.attach(Config.load(None, [f"{k}={v}" for k, v in settings.items()]))
    try:
        rows = [r for r in board.snapshot() if top.KIND_NAMES.get(r.get("kind")) == "processor"]
        return (sum(r["counters"]["bytes_copied"] for r in rows),
                sum(r["counters"]["bytes_in"] for r in rows))
    finally:
        board.close()
        table.close()


def connect(broker: Broker, kind: str) -> socket.socket:
    if kind == "unix":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(broker.unix_path)
    else:
        sock = socket.create_connection(("127.0.0.1", broker.port))
    sock.settimeout(30)
    return sock


def run(broker: Broker, kind: str, way: str, frames: list[bytes]) -> float:
    time.sleep(0.6)  # the board's counters are published with the heartbeat
    copied, received = processor_counters(broker.settings)
    with connect(broker, kind) as sock:
        if way == "trickled":
            for frame in frames:
                for at in range(0, len(frame), 16 * 1024):
                    sock.sendall(frame[at:at + 16 * 1024])
                    time.sleep(0.002)
                read_answer(sock)
        else:
            sock.sendall(b"".join(frames))
            for _ in frames:
                read_answer(sock)
    time.sleep(0.6)
    copied2, received2 = processor_counters(broker.settings)
    return (copied2 - copied) / max(1, received2 - received)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="frame_copies.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--frame-kib", type=int, default=1000, help="frame size (default 1000 KiB)")
    ap.add_argument("--frames", type=int, default=8, help="frames per row (default 8, at most 64)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    if not 64 <= args.frame_kib <= 3000 or not 1 <= args.frames <= 64:
        ap.error("--frame-kib 64..3000 and --frames 1..64")
    from hostbroker.client.simple import SimpleClient
    from hostbroker.log.message import encode_message_set

    workdir = tempfile.mkdtemp(prefix="hb-copies-")
    broker = Broker(workdir, ["processor.direct.produce=false", *args.set])
    try:
        broker.start()
        with SimpleClient(broker.uri("tcp")) as client:
            client.create_topic(TOPIC, 1)
        count = max(1, args.frame_kib // 10)
        frames = [produce_frame(TOPIC, encode_message_set(
            [bytes([i % 251]) * (10 * 1024 - 30)] * count), i) for i in range(args.frames)]
        print(f"{args.frames} frames of {len(frames[0]):,} bytes; "
              f"settings: {' '.join(args.set) or 'defaults'}")
        print(f"{'socket':8} {'way':10} bytes_copied / bytes_in")
        for kind in ("unix", "tcp"):
            for way in ("trickled", "pipelined"):
                print(f"{kind:8} {way:10} {run(broker, kind, way, frames):.3f}", flush=True)
    finally:
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
