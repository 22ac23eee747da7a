"""The client roles and servers of hostbroker, Redis Streams and NATS JetStream for compare.py
(not a benchmark itself).

Each role runs in its own process (``compare.py --role NAME PARAMS``): it
connects, prints READY, waits for GO, does its work with the swept setting
``params["value"]`` (see compare_sweep.GRIDS) and prints one JSON line
(harness's handshake). Producers return {messages, payload_bytes,
start, end, capped}; consumers the same for what they read. start/end are
time.monotonic(), one clock for all processes on the machine.

Also here: the peer servers (PeerServer and its Redis and NATS kinds), each
on a free loopback port with its data in a temporary directory and stopped
by PID, and installing missing servers with apt-get.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import time

import harness

POOL = 1024  # distinct payloads per size, sent in turn


def payloads(size: int) -> list[bytes]:
    """The payload pool for ``size``: the same bytes in every process."""
    rng = random.Random(size)
    return [rng.randbytes(size) for _ in range(POOL)]


def cycled(pool: list[bytes], batch: int) -> list[bytes]:
    """The pool repeated so that ``[i % POOL : i % POOL + batch]`` is message i's batch."""
    return pool * (batch // len(pool) + 2)


class Capped(Exception):
    pass


def _produced(count: int, size: int, start: float, capped: bool) -> dict:
    end = time.monotonic()
    return {"messages": count, "payload_bytes": count * size, "start": start, "end": end,
            "seconds": end - start, "capped": capped}


def _consumed(count: int, nbytes: int, size: int, start: float, capped: bool) -> dict:
    end = time.monotonic()
    if nbytes != count * size and not capped:  # (a cap may land between two counts)
        raise harness.BenchError(f"read {count} messages of {nbytes} bytes, expected {size} each")
    return {"messages": count, "payload_bytes": nbytes, "start": start, "end": end,
            "seconds": end - start, "capped": capped}


def role_hb_producer(p: dict) -> None:
    """``Producer`` in async mode, ``send_many()`` of ``value`` messages (one message set)."""
    from hostbroker.client import Producer, SimpleClient

    size, count, topic, batch = p["size"], p["count"], p["topic"], p["value"]
    ring = cycled(payloads(size), batch)
    with SimpleClient(p["uri"]) as admin:
        admin.create_topic(topic, 1)
    queue = max(4 * batch, 100_000 if size <= 1000 else 10_000)
    producer = Producer(p["uri"], {"producer.type": "async", "batch.size": batch,
                                   "queue.size": queue})
    harness.handshake()
    deadline = time.monotonic() + p["max_seconds"]
    start = time.monotonic()
    sent = 0
    send_many = producer.send_many
    while sent < count:
        if time.monotonic() > deadline:
            break
        n = min(batch, count - sent)
        at = sent % POOL
        send_many(topic, ring[at:at + n])
        sent += n
    producer.flush()
    result = _produced(sent, size, start, sent < count)
    producer.close()
    harness.emit(result)


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
    consumer = SimpleConsumer(p["uri"], {"fetch.size": p["value"]})
    harness.handshake()
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
    harness.emit(result)


def role_redis_producer(p: dict) -> None:
    import redis

    size, count, key = p["size"], p["count"], p["topic"]
    pool = payloads(size)
    batch = p["value"]
    r = redis.Redis(host="127.0.0.1", port=p["port"])
    r.ping()
    harness.handshake()
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
        raise harness.BenchError(f"XLEN {key} is {stored}, {sent} were added")
    r.close()
    harness.emit(result)


def role_redis_consumer(p: dict) -> None:
    import redis

    size, count, key = p["size"], p["count"], p["topic"]
    read = p["value"]
    r = redis.Redis(host="127.0.0.1", port=p["port"])
    r.ping()
    harness.handshake()
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
    harness.emit(result)


async def _nats(p: dict):
    import nats

    nc = await nats.connect(f"nats://127.0.0.1:{p['port']}", allow_reconnect=False)
    return nc


async def _nats_producer(p: dict) -> dict:
    from nats.js.api import StorageType

    size, count, name = p["size"], p["count"], p["topic"]
    pool = payloads(size)
    nc = await _nats(p)
    js = nc.jetstream(publish_async_max_pending=p["value"])
    await js.add_stream(name=name, subjects=[name], storage=StorageType.FILE)
    errors: list[BaseException] = []

    def check(future) -> None:
        if not future.cancelled() and future.exception() is not None:
            errors.append(future.exception())

    await asyncio.get_running_loop().run_in_executor(None, harness.handshake)
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
        raise harness.BenchError(f"{len(errors)} publishes failed, the first: {errors[0]!r}")
    info = await js.stream_info(name)
    if info.state.messages != sent:
        raise harness.BenchError(f"stream {name} holds {info.state.messages} messages, {sent} sent")
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
            # a durable of its own: every run reads the stream from the first message
            return policy, await js.pull_subscribe(name, durable=f"{name}-reader-{os.getpid()}",
                                                   stream=name, config=config)
        except BadRequestError:
            if policy is AckPolicy.ALL:
                raise
    raise AssertionError("unreachable")


async def _nats_consumer(p: dict) -> dict:
    from nats.js.api import AckPolicy

    size, count, name = p["size"], p["count"], p["topic"]
    read = p["value"]
    nc = await _nats(p)
    js = nc.jetstream()
    policy, sub = await _nats_subscription(js, name)
    await asyncio.get_running_loop().run_in_executor(None, harness.handshake)
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


def asyncio_role(work):
    """A role of ``work(params)``, a coroutine function whose result is the role's line."""
    def role(p: dict) -> None:
        harness.emit(asyncio.run(work(p)))
    return role


ROLES = {
    "hostbroker-producer": role_hb_producer, "hostbroker-consumer": role_hb_consumer,
    "redis-producer": role_redis_producer, "redis-consumer": role_redis_consumer,
    "nats-producer": asyncio_role(_nats_producer),
    "nats-consumer": asyncio_role(_nats_consumer),
}


# ---------------------------------------------------------------------------
# The servers.

def ensure_installed(binaries: list[str]) -> None:
    """``apt-get install -y`` the Debian packages of the missing servers (one line if it fails)."""
    missing = [b for b in binaries if shutil.which(b) is None]
    if not missing:
        return
    harness.log(f"installing {' '.join(missing)} with apt-get ...")
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
        self.port = harness.free_port()
        self.log_path = os.path.join(self.dir, "server.log")
        self.proc: subprocess.Popen | None = None

    def argv(self) -> list[str]:
        raise NotImplementedError

    def answers(self, sock: socket.socket) -> bool:
        """Whether the server behind ``sock`` is ready to serve."""
        raise NotImplementedError

    def popen_env(self) -> dict:
        return dict(os.environ)

    def version(self) -> str:
        return version_of([self.binary, "--version"])

    def start(self, timeout: float = 30.0) -> None:
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(self.argv(), cwd=self.dir, stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True, env=self.popen_env())
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise harness.BenchError(f"{self.name} exited with {self.proc.returncode}:\n"
                                         f"{self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock:
                    if self.answers(sock):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise harness.BenchError(f"{self.name} not up after {timeout:.0f}s:\n{self.log()}")
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
                harness.log(f"{self.name} {proc.pid} still running {timeout:.0f}s after SIGTERM: "
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
