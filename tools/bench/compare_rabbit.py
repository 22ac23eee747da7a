"""RabbitMQ Streams for compare.py: its server and its producer and consumer roles (not a
benchmark itself).

The server is Debian's ``rabbitmq-server`` with only the ``rabbitmq_stream``
plugin enabled, run as its own node (``bench-<pid>@localhost``) with its
data, logs, config file, Erlang cookie and plugin list in a temporary
directory, on free loopback ports (AMQP, distribution, stream), and with its
own ``epmd`` on a private port, so nothing of a system RabbitMQ or a shared
epmd is touched. Both processes are stopped by PID (the server's start
script stops the VM on SIGTERM).

The client is ``rstream`` (asyncio): the producer sends batches with
``send_batch`` and counts publish confirmations, keeping at most 20 batches
unconfirmed; the consumer subscribes from the first offset with the swept
``initial_credit`` (chunks the server may send ahead) and counts messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import time

import harness
from compare_peers import (POOL, PeerServer, _consumed, _produced, asyncio_role, cycled,
                           payloads)

USER = PASSWORD = "guest"  # the default user, allowed over loopback only
WINDOW_BATCHES = 20  # unconfirmed batches a producer keeps in flight


async def _rabbit_producer(p: dict) -> dict:
    from rstream import Producer

    size, count, name, batch = p["size"], p["count"], p["topic"], p["value"]
    ring = cycled(payloads(size), batch)
    window = WINDOW_BATCHES * batch
    confirmed = 0
    failed: list = []
    room = asyncio.Event()
    sent = 0

    def on_confirm(status) -> None:
        nonlocal confirmed
        if status.is_confirmed:
            confirmed += 1
        else:
            failed.append(status)
        if sent - confirmed - len(failed) < window:
            room.set()

    producer = Producer("127.0.0.1", p["port"], username=USER, password=PASSWORD)
    await producer.start()
    await producer.create_stream(name, exists_ok=True)
    await asyncio.get_running_loop().run_in_executor(None, harness.handshake)
    deadline = time.monotonic() + p["max_seconds"]
    start = time.monotonic()
    while sent < count:
        if time.monotonic() > deadline:
            break
        while sent - confirmed - len(failed) >= window:
            room.clear()
            await room.wait()
        n = min(batch, count - sent)
        at = sent % POOL
        sent += n
        await producer.send_batch(name, ring[at:at + n], on_publish_confirm=on_confirm)
    wait_until = time.monotonic() + 60
    while confirmed + len(failed) < sent:
        if time.monotonic() > wait_until:
            raise harness.BenchError(f"{sent - confirmed - len(failed)} of {sent} never confirmed")
        room.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(room.wait(), 1)
    result = _produced(sent, size, start, sent < count)
    if failed:
        raise harness.BenchError(f"{len(failed)} publishes failed, the first: {failed[0]!r}")
    await producer.close()
    return result


async def _rabbit_consumer(p: dict) -> dict:
    from rstream import Consumer, ConsumerOffsetSpecification, OffsetType

    size, count, name = p["size"], p["count"], p["topic"]
    n = nbytes = 0
    done = asyncio.Event()

    async def on_message(msg, context) -> None:
        nonlocal n, nbytes
        n += 1
        nbytes += len(msg)
        if n >= count:
            done.set()

    consumer = Consumer("127.0.0.1", p["port"], username=USER, password=PASSWORD)
    await consumer.start()
    await asyncio.get_running_loop().run_in_executor(None, harness.handshake)
    start = time.monotonic()
    await consumer.subscribe(name, on_message, initial_credit=p["value"],
                             offset_specification=ConsumerOffsetSpecification(
                                 OffsetType.FIRST, None))
    capped = False
    try:
        await asyncio.wait_for(done.wait(), max(0.0, start + p["max_seconds"] - time.monotonic()))
    except asyncio.TimeoutError:
        capped = True
    # more than count may arrive in the last chunk: count only what was asked for
    result = _consumed(min(n, count), nbytes if n <= count else count * size, size, start,
                       capped)
    await consumer.close()
    return result


ROLES = {"rabbitmq-producer": asyncio_role(_rabbit_producer),
         "rabbitmq-consumer": asyncio_role(_rabbit_consumer)}


class RabbitServer(PeerServer):
    """A RabbitMQ node of its own with the stream plugin, and its own epmd."""

    name = "rabbitmq"
    binary = "rabbitmq-server"
    script = "/usr/lib/rabbitmq/bin/rabbitmq-server"  # runs as the caller (root), no su
    durability = ("stream, one replica: confirmed once written to the page cache (a quorum "
                  "of one); never fsynced by the server, the OS writes back when it will")

    def __init__(self, workdir: str):
        super().__init__(workdir)  # self.port: the stream protocol's port
        self.amqp_port = harness.free_port()
        self.dist_port = harness.free_port()
        self.epmd_port = harness.free_port()
        self.node = f"bench-{os.getpid()}@localhost"
        self.epmd: subprocess.Popen | None = None
        conf = os.path.join(self.dir, "rabbitmq.conf")
        with open(conf, "w") as f:
            f.write(f"listeners.tcp.1 = 127.0.0.1:{self.amqp_port}\n"
                    f"stream.listeners.tcp.1 = 127.0.0.1:{self.port}\n"
                    "stream.advertised_host = 127.0.0.1\n"
                    f"stream.advertised_port = {self.port}\n")
        with open(os.path.join(self.dir, "enabled_plugins"), "w") as f:
            f.write("[rabbitmq_stream].\n")
        self.env = dict(
            os.environ, HOME=self.dir, ERL_EPMD_PORT=str(self.epmd_port),
            RABBITMQ_NODENAME=self.node, RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
            RABBITMQ_NODE_PORT=str(self.amqp_port), RABBITMQ_DIST_PORT=str(self.dist_port),
            RABBITMQ_MNESIA_BASE=os.path.join(self.dir, "mnesia"),
            RABBITMQ_LOG_BASE=os.path.join(self.dir, "log"), RABBITMQ_CONFIG_FILE=conf,
            RABBITMQ_ENABLED_PLUGINS_FILE=os.path.join(self.dir, "enabled_plugins"))

    def argv(self) -> list[str]:
        return [self.script]

    def popen_env(self) -> dict:
        return self.env

    def answers(self, sock: socket.socket) -> bool:
        return True  # the stream listener opens once the plugin has started

    def start(self, timeout: float = 120.0) -> None:
        self.epmd = subprocess.Popen(["epmd", "-port", str(self.epmd_port), "-address",
                                      "127.0.0.1"], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        super().start(timeout)

    def stop(self, timeout: float = 60.0) -> int | None:
        try:
            return super().stop(timeout)
        finally:
            epmd, self.epmd = self.epmd, None
            if epmd is not None:
                if epmd.poll() is None:
                    epmd.terminate()
                try:
                    epmd.wait(10)
                except subprocess.TimeoutExpired:
                    epmd.kill()
                    epmd.wait(10)

    def version(self) -> str:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "rabbitmq-server"],
                             capture_output=True, text=True, timeout=30)
        return f"RabbitMQ {out.stdout.strip() or 'unknown'} (rabbitmq_stream plugin)"

    def drop(self, streams: list[str]) -> None:
        from rstream import Producer

        async def delete() -> None:
            producer = Producer("127.0.0.1", self.port, username=USER, password=PASSWORD)
            await producer.start()
            for name in streams:
                await producer.delete_stream(name, missing_ok=True)
            await producer.close()

        asyncio.run(delete())
