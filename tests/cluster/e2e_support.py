"""Pieces of the end-to-end cluster tests (tests/cluster/test_e2e_zk.py).

A :class:`Cluster` is three ``hostbroker serve`` brokers that register
themselves in the test's ZooKeeper and a topic of 4 partitions on each (12
in all), created as ``topics create --zookeeper`` does. :class:`Feeder` is a
producer through ZooKeeper in a thread, recording every acknowledged value
and every failure. :class:`ConsumerProcess` runs :data:`CONSUMER_SCRIPT`, a
group consumer in a process of its own that prints what it is handed, what
it commits and which partitions it is given, so that a test can check
ownership, consumption and the bound on duplicates (:func:`check_duplicates`);
its log (stderr) goes to a file of its own.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict

from hostbroker.client import Producer
from hostbroker.client.errors import DeliveryError
from hostbroker.cluster import paths, rebalance
from hostbroker.commands.topics import create_cluster
from tests.integration.test_faults import read_all

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SETTLE_S = 15.0  # a rebalance's bound on this busy two-core machine
BROKER_SESSION_MS = 1500
CONSUMER_SESSION_MS = 2000
TOPIC = "e2e"
GROUP = "g"
PER_BROKER = 4
BROKER_SETTINGS = {"num.processors": 1, "num.handlers": 1,
                   "zookeeper.session.timeout.ms": BROKER_SESSION_MS,
                   # a registrar stopped on purpose is not replaced meanwhile
                   "worker.heartbeat.timeout.ms": 30000}

CONSUMER_SCRIPT = """
import signal, sys, threading
from hostbroker.client import ConsumerConnector, ConsumerTimeoutError
from hostbroker.cluster.membership import ZooKeeperOffsets

zk, group, topic, session_ms = sys.argv[1:5]
lock = threading.Lock()

def say(*words):
    with lock:
        print(*words, flush=True)

class Reported:
    # The group's offsets in ZooKeeper; every commit that was stored is printed.
    inner = None
    def fetch(self, group, keys):
        return self.inner.fetch(group, keys)
    def commit(self, group, offsets):
        self.inner.commit(group, offsets)
        for key, offset in sorted(offsets.items()):
            say("c", key.broker_id, key.partition, offset)
    def close(self):
        pass

class Listener:
    def on_partitions_revoked(self, keys):
        say("r", *(k.name for k in keys))
    def on_partitions_assigned(self, keys):
        say("a", *(k.name for k in keys))

stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
storage = Reported()
connector = ConsumerConnector(zookeeper_connect=zk, group_id=group, auto_offset_reset="earliest",
                              consumer_timeout_ms=100, auto_commit_interval_ms=200,
                              zookeeper_session_timeout_ms=int(session_ms),
                              fetch_wait_max_ms=50, offset_storage=storage,
                              rebalance_listener=Listener())
storage.inner = ZooKeeperOffsets(connector.cluster.client)
say("id", connector.cluster.member.consumer_id)
(stream,) = connector.create_message_streams({topic: 1})[topic]
say("ready")
while not stop.is_set():
    try:
        m = next(stream)
    except ConsumerTimeoutError:
        continue
    say("m", m.broker_id, m.partition, m.offset, m.value.decode())
connector.shutdown()
say("bye")
"""


def poll(condition, timeout=SETTLE_S, what="condition"):
    """Wait until ``condition()`` is true; a ZooKeeper error while asking counts as false."""
    from kazoo.exceptions import KazooException

    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except KazooException:
            pass
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.05)


# The brokers.


class Cluster:
    """Brokers 1, 2 and 3 registered in ``zookeeper``, ``TOPIC`` with 4 partitions on each."""

    def __init__(self, make_broker, tmp_path, zookeeper, zk):
        self.zookeeper = zookeeper
        self.zk = zk
        self.brokers = {}
        for broker_id in (1, 2, 3):
            root = tmp_path / f"b{broker_id}"
            root.mkdir()
            self.brokers[broker_id] = make_broker(root=root, **{
                **BROKER_SETTINGS, "zookeeper.connect": zookeeper.connect,
                "broker.id": broker_id})
        poll(lambda: sorted(zk.get_children(paths.BROKER_IDS)) == ["1", "2", "3"],
             what="three brokers registered")
        out, err = io.StringIO(), io.StringIO()
        assert create_cluster(TOPIC, PER_BROKER, zookeeper=zookeeper.connect, out=out,
                              err=err) == 0, err.getvalue()
        poll(lambda: self.registered() == [1, 2, 3], what="the topic registered by all three")

    def registered(self) -> list[int]:
        """The brokers whose /brokers/topics node of TOPIC holds PER_BROKER, and that are live."""
        live = {int(b) for b in self.zk.get_children(paths.BROKER_IDS)}
        out = []
        for name in self.zk.get_children(paths.topic_path(TOPIC)):
            found = self.zk.exists(paths.topic_broker_path(TOPIC, int(name)))
            if found is not None and int(name) in live and self.zk.get(
                    paths.topic_broker_path(TOPIC, int(name)))[0] == str(PER_BROKER).encode():
                out.append(int(name))
        return sorted(out)

    def log_ends(self) -> dict[tuple[int, int], int]:
        """(broker_id, partition) -> log end offset, from each broker's METADATA."""
        out = {}
        for broker_id, broker in self.brokers.items():
            with broker.client() as client:
                (answer,) = client.metadata([TOPIC]).topics
                out.update({(broker_id, p.partition): p.log_end_offset
                            for p in answer.partitions})
        return out

    def values_on(self, broker_id: int) -> set[str]:
        """Every value in broker ``broker_id``'s partitions of TOPIC."""
        with self.brokers[broker_id].client() as client:
            return {v.decode() for p in range(PER_BROKER) for v in read_all(client, TOPIC, p)}


def pairs_of(broker_ids) -> list[tuple[int, int]]:
    return [(b, p) for b in sorted(broker_ids) for p in range(PER_BROKER)]


# Ownership.


def owners(zk, group=GROUP, topic=TOPIC) -> dict[str, str]:
    """{broker_id-partition: consumer_id-stream} as ZooKeeper holds it."""
    from kazoo.exceptions import NoNodeError

    path = paths.owners_path(group, topic)
    out = {}
    try:
        names = zk.get_children(path)
    except NoNodeError:
        return out
    for name in names:
        try:
            out[name] = zk.get(f"{path}/{name}")[0].decode()
        except NoNodeError:
            continue  # released between the two reads
    return out


def expected_owners(consumer_ids, broker_ids=(1, 2, 3)) -> dict[str, str]:
    """The range assignment of the spec for one stream per consumer."""
    plan = rebalance.assign_group({TOPIC: pairs_of(broker_ids)},
                                  {c: {TOPIC: 1} for c in consumer_ids})[TOPIC]
    return {paths.partition_name(b, p): f"{c}-{i}" for (c, i), ps in plan.items() for b, p in ps}


def settled(zk, consumers, broker_ids=(1, 2, 3)) -> bool:
    """The live consumers are the group's members and own every partition as the range
    assignment says (one owner each, no one else)."""
    ids = [c.consumer_id for c in consumers]
    return (sorted(zk.get_children(paths.group_ids_path(GROUP))) == sorted(ids)
            and owners(zk) == expected_owners(ids, broker_ids))


# The producer.


class Feeder:
    """A sync producer through ZooKeeper in a thread: values "000000", "000001", ...
    about 40 a second, keyless (a random pair each), at most ``limit``."""

    def __init__(self, connect: str, limit: int = 20000, **options):
        self.producer = Producer(zookeeper_connect=connect, zookeeper_session_timeout_ms=4000,
                                 retry_backoff_ms=300, message_send_max_retries=20, **options)
        self.acked: list[str] = []
        self.failed: list[tuple[str, str]] = []
        self.sent = 0  # values handed to send so far (the next value's number)
        self.limit = limit
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping.is_set() and self.sent < self.limit:
            value = f"{self.sent:06d}"
            self.sent += 1
            try:
                self.producer.send(TOPIC, value.encode())
            except DeliveryError as exc:
                self.failed.append((value, str(exc)))
            else:
                self.acked.append(value)
            self.stopping.wait(0.025)

    def mark(self) -> int:
        """The number of the next value: every value from it on is produced after now."""
        return self.sent

    def stop(self) -> None:
        """Stop sending and close the producer (once; again does nothing)."""
        if self.stopping.is_set():
            return
        self.stopping.set()
        self.thread.join(60)
        assert not self.thread.is_alive()
        self.producer.close()


# The consumers.


class ConsumerProcess:
    """:data:`CONSUMER_SCRIPT` in a process of its own; its printed lines collected."""

    def __init__(self, script, zk_connect: str, session_ms: int = CONSUMER_SESSION_MS):
        env = {**os.environ, "PYTHONPATH": REPO}
        fd, self.log_path = tempfile.mkstemp(".log", "consumer-", os.path.dirname(script))
        try:
            self.proc = subprocess.Popen(
                [sys.executable, str(script), zk_connect, GROUP, TOPIC, str(session_ms)],
                stdout=subprocess.PIPE, stderr=fd, stdin=subprocess.DEVNULL,
                text=True, env=env, cwd=REPO)
        finally:
            os.close(fd)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        poll(lambda: "ready" in self.lines or self.proc.poll() is not None, 60,
             "the consumer to start")
        assert "ready" in self.lines, self.log()
        self.consumer_id = next(line[3:] for line in self.lines if line.startswith("id "))

    def log(self) -> str:
        """What it wrote to stderr (its log)."""
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def messages(self) -> list[tuple[int, int, int, str]]:
        """(broker_id, partition, offset, value) of every message handed out, in order."""
        out = []
        for line in list(self.lines):
            if line.startswith("m "):
                _, b, p, o, v = line.split()
                out.append((int(b), int(p), int(o), v))
        return out

    def values(self) -> set[str]:
        return {m[3] for m in self.messages()}

    def consumed_since(self, mark: int) -> set[str]:
        """broker_id-partition names of the messages numbered ``mark`` or later it consumed."""
        return {paths.partition_name(b, p) for b, p, _, v in self.messages()
                if v.isdigit() and int(v) >= mark}

    def suspend(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(30) == 0, self.log()
        self.reader.join(10)
        assert self.lines[-1] == "bye", self.log()

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)


def check_consuming(zk, consumers, feeder: Feeder, broker_ids=(1, 2, 3)) -> None:
    """After the group settled: each live consumer gets messages produced from now on,
    from the partitions it owns and from no other. The group may rebalance once more
    after it looked settled (sessions coming back after a ZooKeeper outage, say): when
    the owners moved while the consumers consumed, it settles and is looked at again."""
    for _ in range(3):
        before = owners(zk)
        mark = feeder.mark()
        for consumer in consumers:
            poll(lambda: consumer.consumed_since(mark), what=f"{consumer.consumer_id} to consume")
        now = owners(zk)
        if now == before:
            for consumer in consumers:
                mine = {name for name, owner in now.items()
                        if owner == f"{consumer.consumer_id}-0"}
                assert consumer.consumed_since(mark) <= mine, (consumer.consumer_id, now)
            return
        poll(lambda: settled(zk, consumers, broker_ids), what="the group to settle again")
    raise AssertionError(f"the group's owners kept moving: {before}, then {now}")


def check_duplicates(consumers) -> int:
    """Every message handed out more than once was, in all its hand-outs but one, handed
    out and not committed: a hand-out is committed when the process that printed it
    reported a commit of that partition past it while it still had the partition (up to
    its next assignment of it). Returns the number of duplicate hand-outs."""
    seen: dict[tuple[int, int, int], int] = defaultdict(int)
    uncommitted: dict[tuple[int, int, int], int] = defaultdict(int)
    for consumer in consumers:
        period: dict[str, int] = defaultdict(int)  # partition -> assignments so far
        handed: dict[tuple[str, int], list[int]] = defaultdict(list)  # (name, period) -> offsets
        committed: dict[tuple[str, int], int] = {}  # (name, period) -> highest commit
        for line in list(consumer.lines):
            words = line.split()
            if words[0] == "a":
                for name in words[1:]:
                    period[name] += 1
            elif words[0] == "m":
                name = paths.partition_name(int(words[1]), int(words[2]))
                handed[name, period[name]].append(int(words[3]))
            elif words[0] == "c":
                name = paths.partition_name(int(words[1]), int(words[2]))
                key = (name, period[name])
                committed[key] = max(committed.get(key, -1), int(words[3]))
        for (name, n), offsets in handed.items():
            b, p = paths.parse_partition_name(name)
            for offset in offsets:
                seen[b, p, offset] += 1
                if committed.get((name, n), -1) <= offset:
                    uncommitted[b, p, offset] += 1
    duplicates = 0
    for key, count in seen.items():
        if count > 1:
            duplicates += count - 1
            assert uncommitted[key] >= count - 1, (key, count, uncommitted[key])
    return duplicates
