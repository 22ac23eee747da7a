"""What must stay true of a broker whatever its clients send (issue 7).

- :class:`Tree`: no worker replaced (the supervisor's children keep their
  pids) and the memory of the whole process tree within a bound: its
  proportional set size (PSS), which counts a page the workers share (the
  rings, the tables) once, where a sum of resident sets counts it in every
  process that touched it;
- :func:`prompt_client`: a normal client is answered promptly, over TCP and
  the Unix socket (a METADATA, and a produce with acks=-1 fetched back);
- :class:`Witness`: nothing acknowledged is lost: messages produced with
  acks=-1 and offsets committed at the start read back intact at the end and
  after a restart.

Shared by the standing suite and ``tools/fuzz_broker.py``.
"""

from __future__ import annotations

import os
import time

import psutil

from hostbroker.client.simple import SimpleClient
from hostbroker.log.message import encode_message_set, iter_messages
from tests.hostile.fuzzlib import Violation

# Memory (PSS) the broker tree may gain over its figure at start.
MEMORY_MARGIN_BYTES = int(os.environ.get("HB_FUZZ_MEMORY_MARGIN_MIB", "256")) * 2**20
PROMPT_SECONDS = 2.0


class Tree:
    """The broker's process tree as it was when checked last."""

    def __init__(self, supervisor_pid: int, margin: int = MEMORY_MARGIN_BYTES, peak: int = 0):
        """``peak``: the most memory of the tree seen before (a broker restarted)."""
        self.supervisor_pid = supervisor_pid
        self.workers = self.pids()
        self.baseline = self.memory()
        self.bound = self.baseline + margin
        self.peak = max(self.baseline, peak)

    def _procs(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.supervisor_pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            raise Violation(f"the supervisor (pid {self.supervisor_pid}) is gone") from None

    def pids(self) -> dict[str, int]:
        out = {}
        for p in self._procs()[1:]:
            try:
                out[p.name()] = p.pid
            except psutil.NoSuchProcess:
                pass
        return out

    def memory(self) -> int:
        """The tree's PSS in bytes."""
        total = 0
        for p in self._procs():
            try:
                total += p.memory_full_info().pss
            except psutil.NoSuchProcess:
                pass
        return total

    def sample(self) -> None:
        """Note the tree's memory now in ``peak`` (between checks)."""
        self.peak = max(self.peak, self.memory())

    def check(self, settle: float = 0.0) -> None:
        """Raise Violation if a worker was replaced or memory is over the bound."""
        pids = self.pids()
        if pids != self.workers:
            changed = sorted(k for k in self.workers.keys() | pids.keys()
                             if self.workers.get(k) != pids.get(k))
            raise Violation(f"workers replaced or gone: {changed} "
                            f"(before {self.workers}, now {pids})")
        memory = self.memory()
        deadline = time.monotonic() + settle
        while memory > self.bound and time.monotonic() < deadline:
            time.sleep(0.2)
            memory = self.memory()
        self.peak = max(self.peak, memory)
        if memory > self.bound:
            raise Violation(f"broker tree PSS {memory / 2**20:.0f} MiB over its bound "
                            f"{self.bound / 2**20:.0f} MiB (start {self.baseline / 2**20:.0f})")

    def rebase(self) -> None:
        """Accept the current workers (after a violation already reported)."""
        self.workers = self.pids()


def read_partition(client: SimpleClient, topic: str, partition: int) -> list[bytes]:
    """Every payload of a partition from its log start to its log end."""
    offset = client.offsets(topic, partition, -2, 1)[0]
    end = client.offsets(topic, partition, -1, 1)[0]
    out = []
    while offset < end:
        fetched = client.fetch(topic, partition, offset, 1 << 20)
        messages = list(iter_messages(fetched.message_set, offset))
        if not messages:
            raise Violation(f"{topic}/{partition}: no whole entry at {offset} (log end {end})")
        out += [m.payload for m in messages]
        offset = messages[-1].next_offset
    return out


def prompt_client(uris: list[str], witness: Witness, payload: bytes,
                  seconds: float = PROMPT_SECONDS) -> None:
    """A METADATA and a produce (acks=-1) + fetch over each uri, each within ``seconds``.

    The produced message goes to the witness topic's partition 0 and, once
    acknowledged, joins what must never be lost.
    """
    topic = witness.topic
    for uri in uris:
        start = time.monotonic()
        try:
            with SimpleClient(uri, timeout=seconds + 1) as client:
                client.metadata()
                offset = client.produce(topic, 0, encode_message_set([payload]), acks=-1).base_offset
                witness.record(0, payload)
                fetched = client.fetch(topic, 0, offset, 4096)
        except Exception as exc:  # noqa: BLE001 - any failure of a normal client is the finding
            raise Violation(f"a normal client over {uri} failed: {exc!r}") from None
        took = time.monotonic() - start
        messages = list(iter_messages(fetched.message_set, offset))
        if not messages or messages[0].payload != payload:
            raise Violation(f"{topic}/0 at {offset}: produced {payload!r}, fetched {messages[:1]}")
        if took > seconds:
            raise Violation(f"a normal client over {uri} took {took:.1f}s (bound {seconds}s)")


class Witness:
    """Acknowledged data to find again: acks=-1 messages and a group's commits."""

    PARTITIONS = 3

    def __init__(self, uri: str, seed: int):
        self.uri = uri
        self.topic = f"witness-{seed}-topic"
        self.group = f"witness-{seed}-group"
        self.acked: dict[int, list[bytes]] = {p: [] for p in range(self.PARTITIONS)}
        self.committed: dict[int, tuple[int, str]] = {}

    @property
    def protected(self) -> tuple[bytes, ...]:
        return (self.topic.encode(), self.group.encode())

    def write(self, rounds: int = 20) -> None:
        with SimpleClient(self.uri) as client:
            client.create_topic(self.topic, self.PARTITIONS)
            for r in range(rounds):
                for p in range(self.PARTITIONS):
                    batch = [f"{self.topic}/{p}/{r}/{i}".encode() * (1 + i % 7) for i in range(25)]
                    client.produce(self.topic, p, encode_message_set(batch), acks=-1)
                    self.acked[p] += batch
            for p in range(self.PARTITIONS):
                self.committed[p] = (len(self.acked[p]) * 10 + p, f"meta-{p}")
            client.offset_commit(self.group, [(self.topic, p, o, m)
                                              for p, (o, m) in self.committed.items()])

    def record(self, partition: int, payload: bytes) -> None:
        """A message produced with acks=-1 by a probe, acknowledged."""
        self.acked[partition].append(payload)

    def check(self, uri: str | None = None) -> None:
        with SimpleClient(uri or self.uri, timeout=30) as client:
            for p, expected in self.acked.items():
                got = read_partition(client, self.topic, p)
                if got[:len(expected)] != expected:
                    lost = sum(1 for m in expected if m not in set(got))
                    raise Violation(f"{self.topic}/{p}: {lost} of {len(expected)} acknowledged "
                                    f"messages lost or changed")
            results = client.offset_fetch(self.group, [(self.topic, p) for p in self.committed],
                                          raise_on_error=False)
            for r in results:
                if (r.offset, r.metadata) != self.committed[r.partition] or r.error_code:
                    raise Violation(f"group {self.group} {self.topic}/{r.partition}: committed "
                                    f"{self.committed[r.partition]}, fetched "
                                    f"{(r.offset, r.metadata)} error {r.error_code}")
