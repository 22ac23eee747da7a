"""The loads of ``latency.py`` and ``suite.py`` and the naive broker they run them on (not a
benchmark itself).

Owns: :class:`NaiveBroker` (``naive_broker.py`` in a subprocess), putting a
broker's processes at a nice value or a real-time priority, the busy
neighbour, warming free memory before a page-cache write, the topics every
phase uses, and one function per measurement (``run_rtt``, ``run_e2e``,
``run_api``, ``run_pipelined``, ``run_fetch``), each taking a broker URI and
returning one run's figures. ``latency.py`` repeats and reports them;
``ab_settings.py``, ``e2e_trace.py`` and ``suite.py`` reuse them.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [HERE, REPO]

from harness import MB, MIB, BenchError, free_port  # noqa: E402

from hostbroker.commands import perf_latency as pl  # noqa: E402


class NaiveBroker:
    """``naive_broker.py`` in a subprocess, stopped by PID with SIGTERM."""

    def __init__(self, workdir: str):
        self.port = free_port()
        self.unix_path = os.path.join(workdir, "naive.sock")
        self.data = os.path.join(workdir, "naive-data")
        self.log_path = os.path.join(workdir, "naive.log")
        self.proc: subprocess.Popen | None = None

    def uri(self, kind: str) -> str:
        return f"unix://{self.unix_path}" if kind == "unix" else f"tcp://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "naive_broker.py"), "--listen", self.uri("tcp"),
             "--listen", self.uri("unix"), "--data", self.data],
            stdout=subprocess.PIPE, stderr=self._log, stdin=subprocess.DEVNULL, cwd=REPO)
        line = self.proc.stdout.readline()
        if b"ready" not in line:
            raise BenchError(f"the naive broker did not start ({self.proc.poll()})")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None
        self._log.close()


def reprioritize(pid: int, nice: int | None, rr: int | None) -> None:
    """Give ``pid``, every process under it and all their threads the nice value
    ``nice`` or the real-time round-robin priority ``rr`` (Linux keeps both per
    thread; threads started later inherit them)."""
    import psutil

    root = psutil.Process(pid)
    for proc in [root] + root.children(recursive=True):
        for thread in proc.threads():
            if rr is not None:
                os.sched_setscheduler(thread.id, os.SCHED_RR, os.sched_param(rr))
            elif nice is not None:
                os.setpriority(os.PRIO_PROCESS, thread.id, nice)


@contextlib.contextmanager
def busy_neighbour(seconds: float):
    """One process spinning on a core for at most ``seconds`` (ended by PID on exit)."""
    code = ("import time\nend = time.monotonic() + %f\nwhile time.monotonic() < end:\n"
            "    sum(range(1000))\n" % seconds)
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(0.2)
        yield
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)


# -- measurements: each takes a broker URI and returns one run's figures ------

def run_rtt(uri: str, topic: str, seconds: float) -> dict:
    from hostbroker.protocol import api

    request = api.MetadataRequest((topic,))
    return pl.summary(pl.time_requests(uri, lambda: request, seconds))


def _e2e_consumer(uri: str, topic: str, offsets: list, count: int, seconds: float,
                  conn, keep: bool = False) -> None:
    """In a spawned process: long-poll ``topic``'s partitions 0, 1, ... from
    ``offsets`` (one FETCH for all of them) until ``count`` messages came or
    ``seconds`` passed; send back the latencies (and, with ``keep``, each
    message's send time: CLOCK_MONOTONIC ns)."""
    from hostbroker.client.connection import BrokerConnection
    from hostbroker.log.message import iter_messages
    from hostbroker.protocol import api

    latencies = []
    stamps = []
    fetches = 0
    offsets = list(offsets)
    broker = BrokerConnection(uri, timeout=30).connect()
    conn.send("ready")
    end = time.monotonic() + seconds
    clock = time.monotonic_ns
    while len(latencies) < count and time.monotonic() < end:
        answer = broker.request(api.FetchRequest(100, 1, tuple(
            api.FetchPartition(topic, p, offset, 1 << 20) for p, offset in enumerate(offsets))))
        now = clock()
        fetches += 1
        for p, part in enumerate(answer.partitions):
            if part.error_code:
                raise BenchError(f"fetch answered {part.error_code}")
            for message in iter_messages(part.message_set, offsets[p]):
                stamp = int.from_bytes(message.payload[:8], "big")
                latencies.append(now - stamp)
                if keep:
                    stamps.append(stamp)
                offsets[p] = message.next_offset
    broker.close()
    conn.send((latencies, fetches, stamps))


def run_e2e(uri: str, topic: str, seconds: float, rate: float, keep: bool = False,
            partitions: int = 1, pair_every: int = 0) -> dict:
    """One message a PRODUCE at ``rate`` for ``seconds`` (acks=1), a consumer
    long-polling in a spawned process: latency percentiles. With
    ``partitions`` above 1 (``topic`` has that many), message i goes to
    partition i % partitions and the consumer fetches them all in each
    FETCH. ``pair_every`` N above 0: every Nth message's PRODUCE is sent
    together with the next one's, both before either answer is read (a
    client that pipelines now and then). ``keep`` adds ``messages``, each
    message's (send time, latency) in ns, and ``pids``, the producer's (this
    process) and the consumer's."""
    from hostbroker.client.connection import BrokerConnection
    from hostbroker.client.simple import SimpleClient
    from hostbroker.log.message import encode_message_set
    from hostbroker.protocol import api

    with SimpleClient(uri) as client:
        starts = []
        for p in range(partitions):
            client.produce(topic, p, encode_message_set([b"x" * 100]))
            starts.append(client.offsets(topic, p)[0])
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    count = round(seconds * rate)
    # the consumer waits for all of them: a producer that falls behind its pace
    # (each PRODUCE waits for its answer) sends its last ones late
    consumer = context.Process(target=_e2e_consumer, args=(uri, topic, starts, count,
                                                          seconds + 30.0, theirs, keep),
                               daemon=True)
    consumer.start()
    try:
        if not ours.poll(60) or ours.recv() != "ready":
            raise BenchError("the end-to-end consumer did not start")
        conn = BrokerConnection(uri, timeout=30).connect()
        padding = b"p" * 92
        interval = 1 / rate
        sent = 0
        t0 = time.monotonic()
        while sent < count:
            slot = t0 + (sent + 1) * interval
            delay = slot - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            n = 2 if pair_every and (sent + 1) % pair_every == 0 and sent + 1 < count else 1
            for i in range(sent, sent + n):
                value = time.monotonic_ns().to_bytes(8, "big") + padding
                conn.send(api.ProduceRequest(1, 10_000, (api.ProducePartition(
                    topic, i % partitions, encode_message_set([value])),)))
            for _ in range(n):
                answer = conn.receive(api.ApiKey.PRODUCE)
                if answer.partitions[0].error_code:
                    raise BenchError(f"produce answered {answer.partitions[0].error_code}")
            sent += n
        conn.close()
        if not ours.poll(seconds + 60):
            raise BenchError("the end-to-end consumer sent nothing back")
        latencies, fetches, stamps = ours.recv()
    finally:
        consumer.join(10)
        if consumer.is_alive():
            consumer.kill()
    out = pl.summary(pl.Timings(latencies=latencies, seconds=seconds))
    out.update(sent=sent, received=len(latencies), fetches=fetches)
    if keep:
        out.update(messages=list(zip(stamps, latencies)), pids=(os.getpid(), consumer.pid))
    return out


def run_api(uri: str, topic: str, seconds: float, clients: int) -> dict:
    return pl.measure(uri, pl.Requests.prepare(uri, topic), pl.DEFAULT_APIS, pl.LOADS, seconds,
                      clients)


def _message_set(size: int, count: int) -> bytes:
    from hostbroker.log.message import encode_message_set

    return encode_message_set([os.urandom(size) for _ in range(count)])


def run_pipelined(uri: str, topic: str, seconds: float, size: int, batch: int, window: int,
                  max_bytes: int | None = None) -> dict:
    """One connection producing sets of ``batch`` messages with ``window`` in flight
    (``window=1``: synchronous) for ``seconds`` or until ``max_bytes``."""
    from hostbroker.client.connection import BrokerConnection
    from hostbroker.protocol import api

    sets = [_message_set(size, batch) for _ in range(4)]
    requests = [api.ProduceRequest(1, 30_000, (api.ProducePartition(topic, 0, s),)) for s in sets]
    conn = BrokerConnection(uri, timeout=60).connect()
    sent = received = 0
    first = last = None
    t0 = time.perf_counter()
    end = time.monotonic() + seconds
    limit = max_bytes // len(sets[0]) if max_bytes else None
    while True:
        more = time.monotonic() < end and (limit is None or sent < limit)
        while more and conn.pending < window:
            conn.send(requests[sent % len(requests)])
            sent += 1
            more = limit is None or sent < limit
        if not conn.pending:
            break
        part = conn.receive().partitions[0]
        if part.error_code:
            raise BenchError(f"produce answered {part.error_code}")
        first = part.base_offset if first is None else first
        last = part.log_end_offset
        received += 1
    elapsed = time.perf_counter() - t0
    conn.close()
    log_bytes = received * len(sets[0])
    return {"messages": received * batch, "requests": received, "seconds": round(elapsed, 3),
            "msgs_per_s": round(received * batch / elapsed, 1),
            "mb_per_s": round(log_bytes / elapsed / MB, 1), "start": first, "end": last}


def run_fetch(uri: str, topic: str, start: int, end: int, seconds: float,
              max_bytes: int = 4 * MIB, window: int = 4) -> dict:
    """Fetch [start, end) of partition 0 in contiguous ranges, ``window`` in flight."""
    from hostbroker.client.connection import BrokerConnection
    from hostbroker.protocol import api

    conn = BrokerConnection(uri, timeout=60, reuse_buffer=True).connect()
    got = fetches = 0
    position = start
    t0 = time.perf_counter()
    deadline = time.monotonic() + seconds
    while True:
        while conn.pending < window and position < end and time.monotonic() < deadline:
            conn.send(api.FetchRequest(0, 0, (api.FetchPartition(topic, 0, position, max_bytes),)))
            position += max_bytes
        if not conn.pending:
            break
        part = conn.receive().partitions[0]
        if part.error_code:
            raise BenchError(f"fetch answered {part.error_code}")
        got += len(part.message_set)
        fetches += 1
    elapsed = time.perf_counter() - t0
    conn.close()
    return {"bytes": got, "requests": fetches, "seconds": round(elapsed, 3), "mb_per_s": round(got / elapsed / MB, 1)}


def warm_free_memory(workdir: str, mib: int) -> None:
    """Write ``mib`` MiB into a scratch file and delete it (0: do nothing).

    A VM that hands the memory its guest frees back to the host (free page
    reporting) makes the page-cache writes that come next fault that memory
    back in from the host: ``dd`` then runs at a tenth of its speed. Run
    before each ``dd`` and each 10 KiB produce, this gives all of them
    memory the guest freed a moment ago and has not handed back yet, as a
    host without a hypervisor always has."""
    if mib <= 0:
        return
    path = os.path.join(workdir, "warm.bin")
    chunk = bytes(MIB)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for _ in range(mib):
            os.write(fd, chunk)
    finally:
        os.close(fd)
        os.unlink(path)  # its dirty pages go without being written back


def create_topics(uri: str) -> None:
    """Every topic the phases use, with one message, so that no phase times a creation."""
    from hostbroker.client.simple import SimpleClient
    from hostbroker.log.message import encode_message_set

    with SimpleClient(uri) as client:
        for topic in ("lat-rtt", "lat-e2e", "lat-api", "lat-sync", "lat-pipe", "lat-large"):
            client.produce(topic, 0, encode_message_set([b"x" * 100]))
