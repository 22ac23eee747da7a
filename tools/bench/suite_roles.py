"""The suite's client roles and its CPU and memory sampler (used by ``suite.py``).

Owns: the producer and consumer of one cell of the suite's table, each a
process of its own (``suite.py --role NAME PARAMS``, :class:`harness.Child`:
READY, GO, one JSON line), both on the public client API with its default
settings; and :class:`Sampler`, a thread that samples the CPU time and the
memory of brokers' whole process trees while the suite runs.
"""

from __future__ import annotations

import os
import threading
import time

import harness
from compare_peers import Capped, capped_after, cycled, payloads

MB = 1_000_000


def role_produce(p: dict) -> None:
    """``Producer`` (async, every other setting at its default) sending ``count``
    messages of ``size`` bytes with ``send_many`` in chunks of its ``batch.size``,
    to a broker list (``uri``) or through ZooKeeper (``zookeeper``)."""
    from hostbroker.client import Producer

    size, count, topic = p["size"], p["count"], p["topic"]
    config = {"producer.type": "async", "request.required.acks": p.get("acks", 1)}
    if p.get("zookeeper"):
        producer = Producer(config=dict(config, **{"zookeeper.connect": p["zookeeper"]}))
    else:
        producer = Producer(p["uri"], config)
    batch = producer.settings["batch.size"]
    ring = cycled(payloads(size), batch)
    pool = len(ring) - batch
    harness.handshake()
    deadline = time.monotonic() + p["max_seconds"]
    start = time.monotonic()
    sent = 0
    send_many = producer.send_many
    while sent < count and time.monotonic() < deadline:
        n = min(batch, count - sent)
        at = sent % pool
        send_many(topic, ring[at:at + n])
        sent += n
    producer.flush()
    end = time.monotonic()
    acknowledged = producer.stats["acknowledged"]
    producer.close()
    if acknowledged != sent:
        raise harness.BenchError(f"{topic}: {acknowledged} of {sent} acknowledged")
    harness.emit({"messages": sent, "payload_bytes": sent * size, "start": start, "end": end,
                  "seconds": end - start, "capped": sent < count})


def role_consume(p: dict) -> None:
    """``SimpleConsumer`` (default settings, every CRC checked) reading each of its
    ``partitions`` from offset 0 to its end, one after the other."""
    from hostbroker.client import SimpleConsumer

    topic = p["topic"]
    consumer = SimpleConsumer(p["uri"], {})
    harness.handshake()
    start = time.monotonic()
    n = nbytes = 0
    capped = False
    try:
        with capped_after(p["max_seconds"]):
            for partition in p["partitions"]:
                for _, _, value in consumer.messages(topic, partition, 0, stop_at_end=True):
                    n += 1
                    nbytes += len(value)
    except Capped:
        capped = True
    end = time.monotonic()
    consumer.close()
    if not capped and p.get("count") is not None and n != p["count"]:
        raise harness.BenchError(f"{topic}: read {n} messages, {p['count']} were there")
    harness.emit({"messages": n, "payload_bytes": nbytes, "start": start, "end": end,
                  "seconds": end - start, "capped": capped})


ROLES = {"produce": role_produce, "consume": role_consume}


class Sampler:
    """Every ``interval`` s: the CPU seconds and the memory of the process trees
    under the root PIDs of each named target (a broker: its supervisor's tree).

    Memory is the sum of each process's PSS (shared pages, such as the rings,
    divided among the processes that map them), or of RSS where PSS cannot
    be read. ``samples`` holds ``(t, {target: (cpu_seconds, mem_bytes)})``,
    ``t`` in ``time.monotonic()`` seconds.
    """

    def __init__(self, interval: float = 0.25):
        self.interval = interval
        self.roots: dict[str, list[int]] = {}
        self._procs: dict[int, object] = {}
        self._cpu_gone: dict[str, float] = {}
        self.samples: list[tuple[float, dict]] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="suite-sampler", daemon=True)

    def watch(self, target: str, pids: list[int]) -> None:
        with self._lock:
            self.roots[target] = list(pids)

    def forget(self, target: str) -> None:
        with self._lock:
            self.roots.pop(target, None)

    def start(self) -> "Sampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _tree(self, pid: int) -> list:
        import psutil

        try:
            root = self._procs.get(pid) or psutil.Process(pid)
            self._procs[pid] = root
            out = [root]
            for child in root.children(recursive=True):
                out.append(self._procs.setdefault(child.pid, child))
            return out
        except psutil.NoSuchProcess:
            return []

    def sample(self) -> dict:
        import psutil
        from cost_model import cpu_seconds  # all threads, in ns: psutil counts 10 ms ticks

        with self._lock:
            roots = dict(self.roots)
        out = {}
        for target, pids in roots.items():
            cpu = mem = 0.0
            for proc in (p for pid in pids for p in self._tree(pid)):
                try:
                    # schedstat counts ns but only live threads; the process's
                    # own times (10 ms ticks) keep the threads that ended too
                    # (the naive broker's, one a connection): the larger of the two
                    t = proc.cpu_times()
                    cpu += max(cpu_seconds({"p": proc.pid}).get("p", 0.0), t.user + t.system)
                    try:
                        mem += proc.memory_full_info().pss
                    except (psutil.AccessDenied, AttributeError):
                        mem += proc.memory_info().rss
                except psutil.NoSuchProcess:
                    continue
            out[target] = (cpu, mem)
        return out

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), self.sample()))
            self._stop.wait(self.interval)

    def window(self, target: str, t0: float, t1: float) -> dict:
        """CPU (cores busy, mean) and memory (MB, mean and peak) of ``target`` in [t0, t1]."""
        inside = [(t, s[target]) for t, s in self.samples if t0 <= t <= t1 and target in s]
        before = [(t, s[target]) for t, s in self.samples if t < t0 and target in s]
        after = [(t, s[target]) for t, s in self.samples if t > t1 and target in s]
        points = before[-1:] + inside + after[:1]
        if len(points) < 2:
            now = self.sample().get(target, (0.0, 0.0))
            points = points + [(time.monotonic(), now)]
        (ta, (ca, _)), (tb, (cb, _)) = points[0], points[-1]
        mems = [m for _, (_, m) in (inside or points)]
        cores = max(0.0, (cb - ca) / (tb - ta)) if tb > ta else 0.0
        return {"cpu_cores": round(cores, 3),
                "cpu_percent_of_machine": round(cores / (os.cpu_count() or 1) * 100, 1),
                "mem_mb_mean": round(sum(mems) / len(mems) / MB, 1),
                "mem_mb_peak": round(max(mems) / MB, 1)}

    def series(self) -> dict:
        """target -> [(t, cores busy since the last sample, MB)], t from the first sample."""
        if not self.samples:
            return {}
        t_first = self.samples[0][0]
        out: dict[str, list] = {}
        last: dict[str, tuple[float, float]] = {}
        for t, s in self.samples:
            for target, (cpu, mem) in s.items():
                if target in last:
                    tp, cp = last[target]
                    cores = max(0.0, (cpu - cp) / (t - tp)) if t > tp else 0.0
                    out.setdefault(target, []).append(
                        (round(t - t_first, 2), round(cores, 3), round(mem / MB, 1)))
                last[target] = (t, cpu)
        return out
