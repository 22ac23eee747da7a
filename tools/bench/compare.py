#!/usr/bin/env python3
"""One workload against hostbroker and against the peers a user would pick instead.

Run by hand (not a test), from the repository with its venv, as root::

    .venv/bin/pip install -e '.[bench]'          # redis, hiredis, nats-py
    .venv/bin/python tools/bench/compare.py      # the full run, a few minutes
    .venv/bin/python tools/bench/compare.py --quick
    .venv/bin/python tools/bench/compare.py --systems hostbroker-unix,redis --size 100 --json

The systems, each started by this script on loopback with its data in a
temporary directory, and always stopped by PID at the end (SIGTERM, then
SIGKILL), also after an error or Ctrl-C:

- **hostbroker** (``hostbroker serve``, default settings, one TCP port and
  one Unix socket). Clients use the public API only: ``Producer`` in async
  mode (``send()`` per message) and ``SimpleConsumer`` iterating messages
  with every CRC checked. Durability: acks=1, the message set is in the
  page cache when acknowledged, and each partition is fdatasynced every
  ``log.flush.interval.messages`` (10,000) messages or
  ``log.flush.interval.ms`` (1 s).
- **Redis Streams** (``redis-server`` from Debian's package, started with
  command-line options only, so with the server's built-in defaults and no
  config file). Clients: redis-py with hiredis, XADD in pipelines, XREAD in
  large COUNT batches. Durability: RDB snapshots only (the built-in save
  rules: after 3600 s and 1 change, 300 s and 100, 60 s and 10,000), no AOF,
  so no write is fsynced when acknowledged.
- **NATS JetStream** (``nats-server -js -sd DIR`` from Debian's package, one
  file-store stream, one replica). Clients: nats-py, ``publish_async`` per
  message with a bounded number of acks pending, and a pull consumer
  fetching large batches (acknowledging each batch with one AckAll, or none
  at all where the server takes ``ack_policy=none``). Durability: the file
  store's default, written to the page cache and fsynced every 2 minutes.

The peers are reached over loopback TCP (what their clients use by
default); hostbroker over its Unix socket and over TCP, and its ratios to
the peers are given for both.

Missing servers are installed with ``apt-get install -y redis-server
nats-server`` (the script expects to run as root; a failing apt says so in
one line). On a machine whose package install starts a system service,
that service is left alone: the script starts its own servers on free ports.

The workload, per message size (100 B: ``--messages``, default 1,000,000;
10 KiB: ``--big-messages``, default 100,000): one producer alone into a new
topic / stream / key, then one consumer alone reading it all from the start,
then one producer and one consumer at once on another new one. Every client
runs in its own process; the payloads are the same for every system (a pool
of 1024 random payloads, reused in turn). A producer is timed from its first
send to its last acknowledgement, a consumer from its first fetch to its
last message; "both at once" is timed from the producer's first send to the
consumer's last message. Every phase is capped by ``--max-seconds`` (a capped
phase is marked and measured over what it did).

MB is 10^6 payload bytes (no headers or framing of any system).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import broker_throughput as bt  # noqa: E402  (the broker helper and the child handshake)

MB = 1_000_000
KIB = 1024
POOL = 1024  # distinct payloads per size, sent in turn

SYSTEMS = ("hostbroker-unix", "hostbroker-tcp", "redis", "nats")
PEERS = ("redis", "nats")
PHASES = ("produce", "consume", "both")
LABELS = {"hostbroker-unix": "hostbroker unix", "hostbroker-tcp": "hostbroker tcp",
          "redis": "Redis Streams", "nats": "NATS JetStream"}

# Targets: hostbroker's figure over the peer's, same machine, same run.
TARGETS = (
    ("produce", "redis", 5.0),
    ("produce", "nats", 10.0),
    ("consume", "redis", 2.0),
)

INSTALL_CLIENTS = "install the peers' clients with: .venv/bin/pip install -e '.[bench]'"


def payloads(size: int) -> list[bytes]:
    """The payload pool for ``size``: the same bytes in every process."""
    rng = random.Random(size)
    return [rng.randbytes(size) for _ in range(POOL)]


def batching(size: int) -> dict:
    """How each client batches messages of ``size`` bytes (about 100 KB to 1 MB a batch)."""
    small = size <= 1000
    return {"batch": 1000 if small else 100,        # produce batch / pipeline length
            "queue": 100_000 if small else 10_000,  # hostbroker producer queue.size
            "read": 10_000 if small else 1000,      # XREAD COUNT, JetStream fetch batch
            "pending": 10_000 if small else 1000}   # JetStream acks pending


# ---------------------------------------------------------------------------
# Child roles: each runs in its own process, prints READY once connected,
# waits for GO, does its work and prints one JSON line (bt._handshake/_emit).
# Producers return {messages, payload_bytes, start, end, capped}; consumers the
# same for what they read. start/end are time.monotonic(), one clock for all
# processes on the machine.

class Capped(Exception):
    pass


def _produced(count: int, size: int, start: float, capped: bool) -> dict:
    end = time.monotonic()
    return {"messages": count, "payload_bytes": count * size, "start": start, "end": end,
            "seconds": end - start, "capped": capped}


def _consumed(count: int, nbytes: int, size: int, start: float, capped: bool) -> dict:
    end = time.monotonic()
    if nbytes != count * size and not capped:  # (a cap may land between two counts)
        raise bt.BenchError(f"read {count} messages of {nbytes} bytes, expected {size} each")
    return {"messages": count, "payload_bytes": nbytes, "start": start, "end": end,
            "seconds": end - start, "capped": capped}


def role_hb_producer(p: dict) -> None:
    from hostbroker.client import Producer, SimpleClient

    size, count, topic = p["size"], p["count"], p["topic"]
    pool = payloads(size)
    b = batching(size)
    with SimpleClient(p["uri"]) as admin:
        admin.create_topic(topic, 1)
    producer = Producer(p["uri"], {"producer.type": "async", "batch.size": b["batch"],
                                   "queue.size": b["queue"]})
    bt._handshake()
    deadline = time.monotonic() + p["max_seconds"]
    start = time.monotonic()
    sent = 0
    send = producer.send
    while sent < count:
        if time.monotonic() > deadline:
            break
        for i in range(sent, min(count, sent + b["batch"])):
            send(topic, pool[i % POOL])
        sent = min(count, sent + b["batch"])
    producer.flush()
    result = _produced(sent, size, start, sent < count)
    producer.close()
    bt._emit(result)


@contextlib.contextmanager
def capped_after(seconds: float):
    """Raise Capped in this (main) thread after ``seconds``, even from a blocking read."""
    def expire(signum, frame):
        raise Capped()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def role_hb_consumer(p: dict) -> None:
    from hostbroker.client import SimpleConsumer

    size, count, topic = p["size"], p["count"], p["topic"]
    consumer = SimpleConsumer(p["uri"], {"fetch.size": 4 << 20})
    bt._handshake()
    start = time.monotonic()
    n = nbytes = 0
    capped = False
    # messages(): the next fetch is on the wire while this one is read, and
    # an empty fetch long-polls (fetch.wait.max.ms) for the producer.
    try:
        with capped_after(p["max_seconds"]):
            for _, _, value in consumer.messages(topic, 0, 0):
                n += 1
                nbytes += len(value)
                if n == count:
                    break
    except Capped:
        capped = True
    result = _consumed(n, nbytes, size, start, capped)
    consumer.close()
    bt._emit(result)


def role_redis_producer(p: dict) -> None:
    import redis

    size, count, key = p["size"], p["count"], p["topic"]
    pool = payloads(size)
    batch = batching(size)["batch"]
    r = redis.Redis(host="127.0.0.1", port=p["port"])
    r.ping()
    bt._handshake()
    deadline = time.monotonic() + p["max_seconds"]
    start = time.monotonic()
    sent = 0
    while sent < count:
        if time.monotonic() > deadline:
            break
        pipe = r.pipeline(transaction=False)
        upto = min(count, sent + batch)
        for i in range(sent, upto):
            pipe.xadd(key, {"v": pool[i % POOL]})
        pipe.execute()
        sent = upto
    result = _produced(sent, size, start, sent < count)
    stored = r.xlen(key)
    if stored != sent:
        raise bt.BenchError(f"XLEN {key} is {stored}, {sent} were added")
    r.close()
    bt._emit(result)


def role_redis_consumer(p: dict) -> None:
    import redis

    size, count, key = p["size"], p["count"], p["topic"]
    read = batching(size)["read"]
    r = redis.Redis(host="127.0.0.1", port=p["port"])
    r.ping()
    bt._handshake()
    deadline = time.monotonic() + p["max_seconds"]
    start = time.monotonic()
    last = b"0-0"
    n = nbytes = 0
    capped = False
    while n < count:
        if time.monotonic() > deadline:
            capped = True
            break
        answer = r.xread({key: last}, count=min(read, count - n), block=100)
        if not answer:
            continue
        entries = answer[0][1]
        for _, fields in entries:
            nbytes += len(fields[b"v"])
        n += len(entries)
        last = entries[-1][0]
    result = _consumed(n, nbytes, size, start, capped)
    r.close()
    bt._emit(result)


async def _nats(p: dict):
    import nats

    nc = await nats.connect(f"nats://127.0.0.1:{p['port']}", allow_reconnect=False)
    return nc


async def _nats_producer(p: dict) -> dict:
    from nats.js.api import StorageType

    size, count, name = p["size"], p["count"], p["topic"]
    pool = payloads(size)
    nc = await _nats(p)
    js = nc.jetstream(publish_async_max_pending=batching(size)["pending"])
    await js.add_stream(name=name, subjects=[name], storage=StorageType.FILE)
    errors: list[BaseException] = []

    def check(future) -> None:
        if not future.cancelled() and future.exception() is not None:
            errors.append(future.exception())

    await asyncio.get_running_loop().run_in_executor(None, bt._handshake)
    deadline = time.monotonic() + p["max_seconds"]
    start = time.monotonic()
    sent = 0
    publish = js.publish_async
    while sent < count:
        if sent % 1000 == 0 and time.monotonic() > deadline:
            break
        future = await publish(name, pool[sent % POOL])
        future.add_done_callback(check)
        sent += 1
    await js.publish_async_completed()
    result = _produced(sent, size, start, sent < count)
    if errors:
        raise bt.BenchError(f"{len(errors)} publishes failed, the first: {errors[0]!r}")
    info = await js.stream_info(name)
    if info.state.messages != sent:
        raise bt.BenchError(f"stream {name} holds {info.state.messages} messages, {sent} sent")
    await nc.close()
    return result


async def _nats_subscription(js, name: str):
    """A pull consumer from the first message: no acks if the server takes that, else AckAll."""
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
    from nats.js.errors import BadRequestError

    for policy in (AckPolicy.NONE, AckPolicy.ALL):
        config = ConsumerConfig(ack_policy=policy, deliver_policy=DeliverPolicy.ALL,
                                max_ack_pending=-1)
        try:
            return policy, await js.pull_subscribe(name, durable=f"{name}-reader", stream=name,
                                                   config=config)
        except BadRequestError:
            if policy is AckPolicy.ALL:
                raise
    raise AssertionError("unreachable")


async def _nats_consumer(p: dict) -> dict:
    from nats.js.api import AckPolicy

    size, count, name = p["size"], p["count"], p["topic"]
    read = batching(size)["read"]
    nc = await _nats(p)
    js = nc.jetstream()
    policy, sub = await _nats_subscription(js, name)
    await asyncio.get_running_loop().run_in_executor(None, bt._handshake)
    deadline = time.monotonic() + p["max_seconds"]
    start = time.monotonic()
    n = nbytes = 0
    capped = False
    while n < count:
        if time.monotonic() > deadline:
            capped = True
            break
        try:
            msgs = await sub.fetch(batch=min(read, count - n), timeout=1)
        except asyncio.TimeoutError:
            continue
        for msg in msgs:
            nbytes += len(msg.data)
        n += len(msgs)
        if policy is AckPolicy.ALL:
            await msgs[-1].ack()
    result = _consumed(n, nbytes, size, start, capped)
    result["ack_policy"] = policy.value
    await nc.close()
    return result


def role_nats_producer(p: dict) -> None:
    bt._emit(asyncio.run(_nats_producer(p)))


def role_nats_consumer(p: dict) -> None:
    bt._emit(asyncio.run(_nats_consumer(p)))


ROLES = {
    "hostbroker-producer": role_hb_producer, "hostbroker-consumer": role_hb_consumer,
    "redis-producer": role_redis_producer, "redis-consumer": role_redis_consumer,
    "nats-producer": role_nats_producer, "nats-consumer": role_nats_consumer,
}


# ---------------------------------------------------------------------------
# Processes: the clients and the peer servers.

class Child(bt.Child):
    """A role of ``script`` in its own process (READY / GO / one JSON line)."""

    def __init__(self, script: str, role: str, params: dict, workdir: str, timeout: float):
        self.role = role
        self.timeout = timeout
        self.stderr_path = os.path.join(workdir, f"{role}-{time.monotonic_ns()}.err")
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, script, "--role", role, json.dumps(params)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, cwd=bt.REPO)
        self.pid = self.proc.pid
        self._buf = b""


def ensure_installed(binaries: list[str]) -> None:
    """``apt-get install -y`` the Debian packages of the missing servers (one line if it fails)."""
    missing = [b for b in binaries if shutil.which(b) is None]
    if not missing:
        return
    bt.log(f"installing {' '.join(missing)} with apt-get ...")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-q", *missing]
    try:
        done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:  # a stale package list: update once, then again
            subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True,
                           timeout=600)
            done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SystemExit(f"{' '.join(install)} failed: {exc}") from None
    if done.returncode != 0 or any(shutil.which(b) is None for b in missing):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"{' '.join(install)} failed ({done.returncode}): {last}")


def version_of(argv: list[str]) -> str:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    return (out.stdout or out.stderr).strip().splitlines()[0]


class PeerServer:
    """A peer server on a free loopback port, data in ``workdir``, stopped by PID."""

    name = ""

    def __init__(self, workdir: str):
        self.dir = os.path.join(workdir, self.name)
        os.makedirs(self.dir, exist_ok=True)
        self.port = bt.free_port()
        self.log_path = os.path.join(self.dir, "server.log")
        self.proc: subprocess.Popen | None = None

    def argv(self) -> list[str]:
        raise NotImplementedError

    def answers(self, sock: socket.socket) -> bool:
        """Whether the server behind ``sock`` is ready to serve."""
        raise NotImplementedError

    def start(self, timeout: float = 30.0) -> None:
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(self.argv(), cwd=self.dir, stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise bt.BenchError(f"{self.name} exited with {self.proc.returncode}:\n"
                                    f"{self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock:
                    if self.answers(sock):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise bt.BenchError(f"{self.name} not up after {timeout:.0f}s:\n{self.log()}")
            time.sleep(0.1)

    def log(self) -> str:
        with contextlib.suppress(OSError), open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")[-3000:]
        return ""

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM by PID, SIGKILL if it is still running after ``timeout``."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                return proc.wait(timeout)
            except subprocess.TimeoutExpired:
                bt.log(f"{self.name} {proc.pid} still running {timeout:.0f}s after SIGTERM: "
                       "SIGKILL")
                os.kill(proc.pid, signal.SIGKILL)
        return proc.wait(10)


class RedisServer(PeerServer):
    name = "redis"
    binary = "redis-server"
    durability = ("RDB snapshots only, by the built-in save rules (3600 s/1 change, "
                  "300 s/100, 60 s/10,000); no AOF: nothing fsynced when acknowledged")

    def argv(self) -> list[str]:
        # Options only, no config file: every other setting is the server's default.
        return [self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", self.dir, "--daemonize", "no"]

    def answers(self, sock: socket.socket) -> bool:
        sock.sendall(b"PING\r\n")
        return sock.recv(64).startswith(b"+PONG")

    def drop(self, keys: list[str]) -> None:
        """Delete streams once read: memory, and the snapshot the server writes when stopped."""
        import redis

        with redis.Redis(host="127.0.0.1", port=self.port) as r:
            if keys:
                r.delete(*keys)


class NatsServer(PeerServer):
    name = "nats"
    binary = "nats-server"
    durability = ("file store, one replica: written to the page cache, fsynced every "
                  "2 minutes (the default sync interval)")

    def argv(self) -> list[str]:
        return [self.binary, "-a", "127.0.0.1", "-p", str(self.port), "-js",
                "-sd", os.path.join(self.dir, "store")]

    def answers(self, sock: socket.socket) -> bool:
        info = sock.recv(4096)
        return info.startswith(b"INFO ") and b'"jetstream":true' in info.replace(b" ", b"")

    def drop(self, streams: list[str]) -> None:
        import nats

        async def delete() -> None:
            nc = await nats.connect(f"nats://127.0.0.1:{self.port}", allow_reconnect=False)
            js = nc.jetstream()
            for name in streams:
                with contextlib.suppress(Exception):
                    await js.delete_stream(name)
            await nc.close()

        asyncio.run(delete())


def hostbroker_durability() -> str:
    return ("acks=1: in the page cache when acknowledged; each partition fdatasynced every "
            "10,000 messages or 1 s (log.flush.interval.messages / .ms, defaults)")


# ---------------------------------------------------------------------------
# Running the phases.

class Systems:
    """The servers of one run, started together and always stopped together."""

    def __init__(self, names: list[str], workdir: str, broker_settings: list[str]):
        self.names = names
        self.workdir = workdir
        self.broker = None
        self.peers: dict[str, PeerServer] = {}
        if any(n.startswith("hostbroker") for n in names):
            self.broker = bt.Broker(workdir, broker_settings)
        for cls in (RedisServer, NatsServer):
            if cls.name in names:
                self.peers[cls.name] = cls(workdir)

    def start(self) -> None:
        if self.broker is not None:
            bt.log(f"starting hostbroker serve in {self.workdir} ...")
            self.broker.start()
            bt._warm_up(self.broker)
        for peer in self.peers.values():
            bt.log(f"starting {' '.join(peer.argv())} ...")
            peer.start()

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
        proc = self.peers[system].proc
        return {system: proc.pid} if proc else {}

    def params(self, system: str) -> dict:
        if system.startswith("hostbroker"):
            return {"uri": self.broker.uri(system.split("-")[1])}
        return {"port": self.peers[system].port}

    def describe(self) -> dict:
        out = {}
        if self.broker is not None:
            out["hostbroker"] = {"version": bt.machine_info()["git"],
                                 "durability": hostbroker_durability(),
                                 "transport": "Unix socket and loopback TCP",
                                 "client": "hostbroker.client Producer (async, send() per "
                                           "message) and SimpleConsumer (CRC checked)"}
        for name, peer in self.peers.items():
            clients = ("redis", "hiredis") if name == "redis" else ("nats-py",)
            out[name] = {"version": version_of([peer.binary, "--version"]),
                         "durability": peer.durability, "transport": "loopback TCP",
                         "client": ", ".join(f"{c} {importlib.metadata.version(c)}"
                                             for c in clients)}
        return out

    def drop(self, system: str, topics: list[str]) -> None:
        if system in self.peers:
            self.peers[system].drop(topics)


def _role_prefix(system: str) -> str:
    return "hostbroker" if system.startswith("hostbroker") else system


def run_phase(systems: Systems, system: str, phase: str, size: int, count: int, topic: str,
              args: argparse.Namespace) -> dict:
    base = dict(systems.params(system), size=size, count=count, topic=topic,
                max_seconds=args.max_seconds)
    roles = {"produce": ["producer"], "consume": ["consumer"],
             "both": ["producer", "consumer"]}[phase]
    children: dict[str, Child] = {}
    pids = systems.server_pids(system)
    try:
        for role in roles:  # the producer first: it creates the topic / stream
            child = Child(os.path.abspath(__file__), f"{_role_prefix(system)}-{role}", base,
                          systems.workdir, timeout=args.max_seconds + 120)
            children[role] = child
            child.ready()
        busy = bt.wait_quiet(args.wait_quiet) if args.wait_quiet else None
        cpu0 = bt.cpu_seconds(pids)
        wall0 = time.perf_counter()
        for child in reversed(children.values()):  # the consumer is waiting first
            child.go()
        results = {role: child.result() for role, child in children.items()}
        wall = time.perf_counter() - wall0
        cpu1 = bt.cpu_seconds(pids)
    finally:
        for child in children.values():
            child.end()
    server_cpu = sum(cpu1[n] - cpu0[n] for n in cpu1 if n in cpu0) / wall * 100
    start = min(r["start"] for r in results.values())
    end = max(r["end"] for r in results.values())
    last = results.get("consumer", results.get("producer"))
    messages = last["messages"]
    seconds = end - start
    out = {"system": system, "phase": phase, "size": size, "messages": messages,
           "seconds": seconds, "msgs_per_s": messages / seconds,
           "mb_per_s": messages * size / seconds / MB,
           "capped": any(r["capped"] for r in results.values()),
           "server_cpu_percent": server_cpu,
           "client_cpu_percent": {role: r["cpu_seconds"] / r["seconds"] * 100
                                  for role, r in results.items()},
           "machine_busy_before": busy, "clients": results}
    if phase == "both":
        p, c = results["producer"], results["consumer"]
        out["producer_msgs_per_s"] = p["messages"] / p["seconds"]
        out["consumer_msgs_per_s"] = c["messages"] / c["seconds"]
    return out


def run_size(systems: Systems, names: list[str], size: int, count: int,
             args: argparse.Namespace) -> list[dict]:
    rows = []
    for system in names:
        kind = system.replace("hostbroker-", "hb")
        first, second = f"cmp-{kind}-{size}-a", f"cmp-{kind}-{size}-b"
        produced = count
        for phase in args.phases:
            topic = second if phase == "both" else first
            n = produced if phase == "consume" else count
            bt.log(f"[{system}] {phase}, {n} messages of {size} B ...")
            row = run_phase(systems, system, phase, size, n, topic, args)
            if phase == "produce":
                produced = row["messages"]
            if row["capped"]:
                bt.log(f"[{system}] {phase} capped at {args.max_seconds:.0f} s")
            rows.append(row)
        systems.drop(system, [first, second])
    return rows


# ---------------------------------------------------------------------------
# Report.

def ratios(rows: list[dict]) -> None:
    """Add, to each peer row, hostbroker's figure over the peer's (unix and tcp)."""
    by = {(r["size"], r["phase"], r["system"]): r for r in rows}
    for r in rows:
        if r["system"] not in PEERS:
            continue
        for kind in ("unix", "tcp"):
            hb = by.get((r["size"], r["phase"], f"hostbroker-{kind}"))
            r[f"hb_{kind}_ratio"] = hb["msgs_per_s"] / r["msgs_per_s"] if hb else None


def targets(rows: list[dict]) -> list[dict]:
    out = []
    for r in rows:
        for phase, peer, goal in TARGETS:
            if r["phase"] == phase and r["system"] == peer:
                for kind in ("unix", "tcp"):
                    ratio = r.get(f"hb_{kind}_ratio")
                    if ratio is not None:
                        out.append({"size": r["size"], "phase": phase, "peer": peer,
                                    "socket": kind, "ratio": ratio, "goal": goal,
                                    "met": ratio >= goal})
    return out


def size_label(size: int) -> str:
    return f"{size // KIB} KiB" if size % KIB == 0 else f"{size} B"


def print_report(report: dict) -> None:
    m = report["machine"]
    print(f"machine: {m['nproc']} CPUs ({m['cpu_model']}), {m['ram_gib']} GiB, "
          f"Linux {m['kernel']}, Python {m['python']}, hostbroker {m['git']}")
    for name, s in report["systems"].items():
        print(f"{name}: {s['version']}; {s['transport']}; client {s['client']}")
        print(f"  durability: {s['durability']}")
    print("MB = 10^6 payload bytes; 'both' = producer and consumer at once, "
          "first send to last message read")
    print()
    print(f"{'workload':20} {'system':16} {'msgs/s':>10} {'MB/s':>7} {'hb unix/x':>9} "
          f"{'hb tcp/x':>8}  CPU % (clients; server)")
    for r in report["rows"]:
        work = f"{size_label(r['size'])} {r['phase']}"
        ux = r.get("hb_unix_ratio")
        tx = r.get("hb_tcp_ratio")
        ux = "" if ux is None else f"{ux:.2f}"
        tx = "" if tx is None else f"{tx:.2f}"
        clients = "/".join(f"{v:.0f}" for v in r["client_cpu_percent"].values())
        notes = f"  {clients}; {r['server_cpu_percent']:.0f}"
        if r["phase"] == "both":
            notes += (f"  (producer {r['producer_msgs_per_s']:.0f}, "
                      f"consumer {r['consumer_msgs_per_s']:.0f} msgs/s)")
        busy = r.get("machine_busy_before")
        if busy is not None and busy >= 0.15:
            notes += f" NOISY ({busy:.0%} busy before)"
        if r["capped"]:
            notes += " CAPPED"
        print(f"{work:20} {LABELS[r['system']]:16} {r['msgs_per_s']:>10.0f} "
              f"{r['mb_per_s']:>7.1f} {ux:>9} {tx:>8}{notes}")
    if report["targets"]:
        print()
        for t in report["targets"]:
            print(f"target: {size_label(t['size'])} {t['phase']}, hostbroker {t['socket']} >= "
                  f"{t['goal']:.0f}x {LABELS[t['peer']]}: {t['ratio']:.2f}x "
                  f"{'met' if t['met'] else 'MISSED'}")


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


def add_common_options(ap: argparse.ArgumentParser) -> None:
    """Options every benchmark here takes (also producer_api.py), and the hidden --role."""
    ap.add_argument("--wait-quiet", type=float, default=10, metavar="SECONDS",
                    help="before each run wait up to this long for a mostly idle machine "
                         "(default 10; 0: do not wait)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="hostbroker setting passed to hostbroker serve (repeatable)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of tables")
    ap.add_argument("--json-out", metavar="FILE", help="also write the JSON report to FILE")
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("params", nargs="?", help=argparse.SUPPRESS)


def new_report(args: argparse.Namespace) -> dict:
    return {"machine": bt.machine_info(), "command": sys.argv,
            "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "args": {k: v for k, v in vars(args).items() if k not in ("role", "params")}}


def stop_on_sigterm() -> None:
    def on_term(signum, frame):
        raise SystemExit(f"benchmark stopped by signal {signum}")

    signal.signal(signal.SIGTERM, on_term)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000,
                    help="messages of sizes up to 1000 B (default 1,000,000)")
    ap.add_argument("--big-messages", type=int, default=100_000,
                    help="messages of larger sizes (default 100,000: ~1 GB of 10 KiB)")
    ap.add_argument("--size", type=_sizes, default=[100, 10 * KIB],
                    help="payload sizes in bytes, comma separated (default 100,10240)")
    ap.add_argument("--systems", type=lambda v: _csv(v, SYSTEMS),
                    default=list(SYSTEMS), help=f"default {','.join(SYSTEMS)}")
    ap.add_argument("--phases", type=lambda v: _csv(v, PHASES),
                    default=list(PHASES), help=f"default {','.join(PHASES)} "
                    "(consume reads what produce wrote)")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: 20,000 small and 2,000 big messages, no quiet wait "
                         "(start-up dominates its figures: not for comparison)")
    ap.add_argument("--max-seconds", type=float, default=60, help="cap on each phase (default 60)")
    ap.add_argument("--workdir", help="where data goes (default: a new temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    add_common_options(ap)
    args = ap.parse_args(argv)
    if args.quick:
        args.messages, args.big_messages, args.wait_quiet = 20_000, 2_000, 0
    if args.messages < 1 or args.big_messages < 1:
        ap.error("--messages and --big-messages must be at least 1")
    if "consume" in args.phases and "produce" not in args.phases:
        ap.error("--phases: consume reads what produce wrote; give produce too")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.role:
        ROLES[args.role](json.loads(args.params))
        return 0
    needs = [s for s in args.systems if s in PEERS]
    if needs:
        modules = {"redis": ("redis", "hiredis"), "nats": ("nats",)}
        try:
            for module in (m for peer in needs for m in modules[peer]):
                __import__(module)
        except ImportError as exc:
            raise SystemExit(f"{exc.name} is missing: {INSTALL_CLIENTS}") from None
        ensure_installed([{"redis": RedisServer, "nats": NatsServer}[s].binary for s in needs])
    stop_on_sigterm()
    workdir = args.workdir or tempfile.mkdtemp(prefix="hb-compare-")
    os.makedirs(workdir, exist_ok=True)
    report = dict(new_report(args), rows=[])
    systems = Systems(args.systems, workdir, args.set)
    try:
        systems.start()
        report["systems"] = systems.describe()
        for size in args.size:
            count = args.messages if size <= 1000 else args.big_messages
            report["rows"] += run_size(systems, args.systems, size, count, args)
    finally:
        report["exit_codes"] = systems.stop()
        if not args.keep and not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    ratios(report["rows"])
    report["targets"] = targets(report["rows"])
    bt.output(report, args, print_report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
