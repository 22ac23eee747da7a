"""Pieces of the replication end-to-end tests: a cluster of real brokers on a real
ZooKeeper, replicated topics made with ``hostbroker topics create --replication-factor``,
and a small wire client that finds leaders with METADATA v1 and produces with acks=-1.

The client here is deliberately the protocol itself (no retries hidden in a library):
the tests see every answer a producer would see, and count what was acknowledged.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import threading
import time

import psutil

from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.protocol import api
from hostbroker.protocol import replication as rp

BROKER_SESSION_MS = 2000
SETTINGS = {"num.processors": 1, "num.handlers": 1,
            "zookeeper.session.timeout.ms": BROKER_SESSION_MS,
            "replica.lag.time.max.ms": 3000,
            "replica.fetch.wait.max.ms": 100,
            # retention runs often enough for a topic with retention.bytes to be seen
            "log.retention.check.interval.ms": 200,
            # a process stopped on purpose is not replaced meanwhile
            "worker.heartbeat.timeout.ms": 30000}


def poll(condition, timeout=30.0, what="condition", every=0.05):
    """Wait until ``condition()`` is true; an exception while asking counts as false."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            if condition():
                return
        except Exception as exc:  # noqa: BLE001 - a broker or ZooKeeper not there yet
            last = exc
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what} ({last!r})"
        time.sleep(every)


def kill_hard(broker) -> float:
    """SIGKILL every process of ``broker`` (stopped first, so nothing closes its session)."""
    tree = [psutil.Process(broker.proc.pid), *psutil.Process(broker.proc.pid).children()]
    for p in tree:
        p.send_signal(signal.SIGSTOP)
    for p in tree:
        p.send_signal(signal.SIGKILL)
    return time.monotonic()


def state(zk, topic: str, partition: int) -> dict:
    data, _ = zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
    return json.loads(data)


def create(zookeeper, topic, partitions, rf, *config) -> None:
    """``hostbroker topics create --zookeeper ... --replication-factor rf``, as a user runs it."""
    from tests.integration.cli import hostbroker  # noqa: PLC0415

    done = hostbroker("topics", "create", "--zookeeper", zookeeper.connect, "--topic", topic,
                      "--partitions", partitions, "--replication-factor", rf,
                      *[a for c in config for a in ("--config", c)])
    assert done.returncode == 0, done.stderr.decode()


def settled(zk, topic, partitions, rf) -> bool:
    """Every partition has a leader and a full ISR."""
    for p in range(partitions):
        s = state(zk, topic, p)
        if s["leader"] < 0 or len(s["isr"]) != rf:
            return False
    return True


def assignment(zk, topic: str) -> dict[int, list[int]]:
    data, _ = zk.get(f"/brokers/topics/{topic}")
    return {int(p): r for p, r in json.loads(data)["partitions"].items()}


class Wire:
    """One blocking connection speaking frames (any api version) to one broker."""

    def __init__(self, address: str, timeout: float = 10.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(address)
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def _recv(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            out += chunk
        return bytes(out)

    def call(self, frame: bytes) -> bytes:
        """Send a whole frame (size prefix included); the answer frame without its prefix."""
        self.sock.sendall(frame)
        (size,) = struct.unpack(">i", self._recv(4))
        return self._recv(size)

    def next_id(self) -> int:
        self.correlation += 1
        return self.correlation

    def metadata(self, topics: list[str]):
        cid = self.next_id()
        answer = self.call(rp.encode_request(rp.MetadataRequestV1(topics=topics), cid, "", 1))
        _, body = rp.decode_response(answer, rp.MetadataResponseV1)
        return body

    def produce(self, topic: str, partition: int, values: list[bytes], acks: int = -1,
                timeout_ms: int = 5000) -> tuple[int, int]:
        """(error code, base offset) of one PRODUCE of ``values`` to one partition."""
        cid = self.next_id()
        request = api.ProduceRequest(acks=acks, timeout_ms=timeout_ms, partitions=[
            api.ProducePartition(topic, partition, encode_message_set(values))])
        answer = self.call(api.encode_request(request, cid))
        if api.is_error_frame(answer):
            return api.decode_error_frame(answer)[1], -1
        _, body = api.decode_response(api.ApiKey.PRODUCE, answer)
        (result,) = body.partitions
        return int(result.error_code), result.base_offset

    def produce_led(self, topic: str, partition: int, values: list[bytes], acks: int = -1,
                    timeout_ms: int = 5000, wait_s: float = 20.0) -> tuple[int, int]:
        """As :meth:`produce`, asking again for up to ``wait_s`` while this broker has
        not been told it leads the partition: ZooKeeper's state node names a leader
        before the controller's LEADER_AND_ISR reaches it, and until then it answers
        NOT_LEADER_FOR_PARTITION (refused before any append: nothing is doubled)."""
        deadline = time.monotonic() + wait_s
        while True:
            code, offset = self.produce(topic, partition, values, acks, timeout_ms)
            if code != ErrorCode.NOT_LEADER_FOR_PARTITION or time.monotonic() > deadline:
                return code, offset
            time.sleep(0.05)


class Feeder:
    """A producer in a thread: acks=-1 to each partition's leader in turn, following
    leaders through METADATA v1 after any error. Records every acknowledged value with
    its partition and offset, the errors seen, and the time of the last error and of
    the first acknowledgement after it (the failover gap)."""

    def __init__(self, brokers: dict, topic: str, partitions: int):
        self.brokers = brokers  # broker id -> tests.integration.broker.Broker
        self.topic = topic
        self.partitions = partitions
        self.acked: list[tuple[int, int, bytes]] = []
        self.errors: list[tuple[float, int, str]] = []
        self.gaps: list[float] = []
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.conns: dict[int, Wire] = {}
        self.leaders: dict[int, int] = {}
        self.thread.start()

    def _conn(self, broker_id: int) -> Wire:
        if broker_id not in self.conns:
            self.conns[broker_id] = Wire(self.brokers[broker_id].unix_path, timeout=10)
        return self.conns[broker_id]

    def _drop(self, broker_id: int) -> None:
        conn = self.conns.pop(broker_id, None)
        if conn is not None:
            conn.close()

    def _refresh(self) -> None:
        """Each partition's leader as the brokers say, the highest leader epoch winning
        (a broker that was told less recently may still name an old leader)."""
        best: dict[int, tuple[int, int]] = {}  # partition -> (leader epoch, leader)
        for broker_id in self.brokers:
            try:
                body = self._conn(broker_id).metadata([self.topic])
            except (OSError, ConnectionError, ValueError):
                self._drop(broker_id)
                continue
            for topic in body.topics:
                for p in topic.partitions:
                    if p.leader >= 0 and (p.leader_epoch, p.leader) > best.get(p.partition, (-1, -1)):
                        best[p.partition] = (p.leader_epoch, p.leader)
        self.leaders.update({p: leader for p, (_, leader) in best.items()})

    def _run(self) -> None:
        n = 0
        failed_at = None
        while not self.stop_event.is_set():
            partition = n % self.partitions
            value = f"v{n}".encode()
            leader = self.leaders.get(partition)
            code, error = -1, "no leader known"
            if leader is not None:
                try:
                    code, base = self._conn(leader).produce(self.topic, partition, [value])
                    error = f"code {code}"
                except (OSError, ConnectionError) as exc:
                    self._drop(leader)
                    code, error = -1, repr(exc)
            if code == 0:
                self.acked.append((partition, base, value))
                if failed_at is not None:
                    self.gaps.append(time.monotonic() - failed_at)
                    failed_at = None
                n += 1
                continue
            now = time.monotonic()
            self.errors.append((now, code, error))
            failed_at = failed_at or now
            time.sleep(0.05)
            self._refresh()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(30)
        for conn in self.conns.values():
            conn.close()


def fetch_all(wire: Wire, topic: str, partition: int) -> list[tuple[int, bytes]]:
    """(offset, value) of every message below the high watermark, as a consumer reads."""
    from hostbroker.log.message import iter_messages  # noqa: PLC0415

    out = []
    offset = 0
    while True:
        cid = wire.next_id()
        request = api.FetchRequest(max_wait_ms=0, min_bytes=0, partitions=[
            api.FetchPartition(topic, partition, offset, 1 << 20)])
        answer = wire.call(api.encode_request(request, cid))
        _, body = api.decode_response(api.ApiKey.FETCH, answer)
        (part,) = body.partitions
        assert int(part.error_code) == 0, f"fetch {topic}-{partition}@{offset}: {part.error_code}"
        got = list(iter_messages(bytes(part.message_set), offset))
        if not got:
            return out
        for message in got:
            out.append((message.offset, bytes(message.payload)))
            offset = message.next_offset


def segment_bytes(broker, topic: str, partition: int) -> bytes:
    """Every byte of a replica's log, segments in order (byte offsets: equal logs, equal bytes)."""
    base = broker.settings["log.dirs"]
    for entry in os.listdir(base):
        path = os.path.join(base, entry)
        if os.path.isdir(path) and entry == f"{topic}_{partition}":
            names = sorted(n for n in os.listdir(path) if n.endswith(".kafka"))
            return b"".join(open(os.path.join(path, n), "rb").read() for n in names)
    raise FileNotFoundError(f"{topic}-{partition} not on broker in {base}")
