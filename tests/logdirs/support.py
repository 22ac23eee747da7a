"""Pieces of the tests of replicas across log dirs: one real ``hostbroker serve``
on several log dirs, topics made and moved with the real tools, a producer that
records what was acknowledged, and checks on every replica's files.

Where a replica is comes from the shared partition table, read as ``hostbroker
top`` reads it: every replica has its own slot, ``owner`` is its writer, and
the writer's index is its log dir's index in ``log.dirs``. That is quick
enough to poll for a leader move timed in milliseconds; what clients see
(METADATA v2, ``topics describe --json``) is asserted through the wire and
the tools themselves.

Failure tests wait on conditions (:func:`poll`), never on sleeps.
"""

from __future__ import annotations

import json
import os
import threading
import time

from hostbroker.client.errors import BrokerError, DeliveryError
from hostbroker.errors import ErrorCode
from hostbroker.log.message import iter_messages
from hostbroker.log.segments import SEGMENT_SUFFIX
from tests.integration.cli import hostbroker
from tests.replication.support import poll

__all__ = ["MOVE_BUDGET_S", "WAIT_S", "AckedLog", "assert_all_acked", "create", "describe",
           "described_partitions", "assignment", "dir_of", "dir_states", "moved", "leader_dir",
           "logdirs", "poll", "read_back", "reassign", "replica_dirs", "replica_files_equal",
           "replica_slots", "top_json", "wait_leader_moved", "wait_replicas_equal"]

# What every broker of these tests runs with besides its log dirs: few workers (the
# machine has 2 cores); the failure checks run at their defaults, named here
# because the tests' time budgets are built on them. A state file write may take
# longer than its default 200 ms when three test processes share two cores and one
# disk; a slow write takes its dir out of the live set and moves leaderships no test
# failed, so these brokers give it 2 s (a write that fails, as on a full dir, still
# fails at once).
SETTINGS = {"num.processors": 1, "num.handlers": 2, "replica.lag.time.max.ms": 3000,
            "logdirs.state.write.timeout.ms": 2000}
CHECK_INTERVAL_MS = 200  # log.dir.check.interval.ms's default: a pulled dir is found within it
# The failure tests prove that leaderships move and that nothing acknowledged is lost,
# not how fast: the 1 s target is measured alone by tools/bench/logdirs.py
# (docs/benchmarks.md). Under CI (six pytest workers on two cores) a broker's
# processes can wait for a CPU for seconds, so the budgets here are wide:
MOVE_BUDGET_S = 10.0  # a failed dir's leaderships moved, counted from the failure seen
WAIT_S = 60.0  # anything else waited for: a topic settled, a move done, a catch-up


# -- the broker's view, from its shared partition table ---------------------------------


def _plan(broker):
    """The broker's plan, built once per set of its settings that name it (the
    tests poll the table often, on a machine whose CPUs the broker needs)."""
    from hostbroker.config import Config
    from hostbroker.workers.plan import BrokerPlan

    overrides = [f"{key}={broker.settings[key]}" for key in ("log.dirs", "broker.id")
                 if key in broker.settings]
    cached = getattr(broker, "_support_plan", None)
    if cached is None or cached[0] != overrides:
        cached = (overrides, BrokerPlan.from_config(Config.build(overrides=overrides)))
        broker._support_plan = cached
    return cached[1]


def replica_slots(broker, topic: str, partition: int) -> list:
    """Every slot of ``topic``-``partition`` in use, one per replica:
    ``(slot index, PartitionSlot)``, in writer order."""
    from hostbroker.shm.partitions import PartitionTable

    table = PartitionTable.attach(_plan(broker).table_name)
    try:
        found = [(i, s) for i, s in table.scan() if s.name == topic and s.partition == partition]
    finally:
        table.close()
    return sorted(found, key=lambda item: item[1].owner)


def slots_said(broker, topic: str, partition: int) -> str:
    """The replicas' slots in one line each, for an assertion's message."""
    return "\n".join(
        f"slot {i} dir {dir_of(broker, s)} state {s.state} role {s.role} epoch "
        f"{s.leader_epoch} replicas {s.replicas} isr {s.isr_ids} end {s.end_offset} "
        f"hw {s.high_watermark}" for i, s in replica_slots(broker, topic, partition))


def dir_of(broker, slot) -> str:
    """The log dir (as configured, absolute) of a replica's slot."""
    return os.path.abspath(broker.dirs[slot.owner])


def leader_dir(broker, topic: str, partition: int) -> str | None:
    """The log dir of the ONLINE replica that leads in the highest leader epoch, or
    None while no replica leads."""
    from hostbroker.shm.partitions import ONLINE, ROLE_LEADER

    leaders = [s for _, s in replica_slots(broker, topic, partition)
               if s.role == ROLE_LEADER and s.state == ONLINE]
    if not leaders:
        return None
    return dir_of(broker, max(leaders, key=lambda s: s.leader_epoch))


def replica_dirs(broker, topic: str, partition: int) -> set[str]:
    """The log dirs that hold a replica of the partition now."""
    return {dir_of(broker, s) for _, s in replica_slots(broker, topic, partition)}


def wait_leader_moved(broker, topic: str, partition: int, old_dir: str,
                      timeout: float = WAIT_S) -> tuple[str, float]:
    """Wait until a replica on another dir than ``old_dir`` leads; its dir and
    the monotonic time it was first seen leading."""
    old_dir = os.path.abspath(old_dir)
    found: list[str] = []

    def moved() -> bool:
        now = leader_dir(broker, topic, partition)
        if now is not None and now != old_dir:
            found.append(now)
            return True
        return False

    poll(moved, timeout, f"{topic}-{partition}'s leader to leave {old_dir}", every=0.02)
    return found[-1], time.monotonic()


def _segments(path: str) -> list[tuple[int, str]]:
    names = sorted(n for n in os.listdir(path) if n.endswith(SEGMENT_SUFFIX))
    return [(int(n[:-len(SEGMENT_SUFFIX)]), os.path.join(path, n)) for n in names]


def _log_bytes(path: str, start: int, end: int) -> bytes:
    """The bytes of the log in partition dir ``path`` from byte offset ``start`` to ``end``."""
    out = bytearray()
    for base, name in _segments(path):
        size = os.path.getsize(name)
        lo, hi = max(start, base), min(end, base + size)
        if lo < hi:
            with open(name, "rb") as f:
                f.seek(lo - base)
                out += f.read(hi - lo)
    return bytes(out)


def replica_files_equal(broker, topic: str, partition: int) -> bool:
    """Whether every replica's segment bytes are the leader's, from the highest log
    start of them to the leader's high watermark (offsets are byte positions, so equal
    logs are equal bytes). False while no replica leads."""
    from hostbroker.shm.partitions import ONLINE, ROLE_LEADER

    slots = [s for _, s in replica_slots(broker, topic, partition)]
    leaders = [s for s in slots if s.role == ROLE_LEADER and s.state == ONLINE]
    if len(slots) < 2 or not leaders:
        return False
    leader = max(leaders, key=lambda s: s.leader_epoch)
    start, hw = max(s.start_offset for s in slots), leader.high_watermark
    if any(s.end_offset < hw for s in slots):
        return False
    name = f"{topic}_{partition}"
    copies = {dir_of(broker, s): _log_bytes(os.path.join(dir_of(broker, s), name), start, hw)
              for s in slots}
    mine = copies[dir_of(broker, leader)]
    return len(mine) == hw - start and all(c == mine for c in copies.values())


def wait_replicas_equal(broker, topic: str, partition: int, timeout: float = WAIT_S) -> None:
    poll(lambda: replica_files_equal(broker, topic, partition), timeout,
         f"every replica of {topic}-{partition} equal to its leader below the HW")


# -- the tools, as an operator runs them ------------------------------------------------


def _run(*args) -> str:
    done = hostbroker(*args)
    assert done.returncode == 0, (args, done.stderr.decode())
    return done.stdout.decode()


def create(broker, topic: str, partitions: int, rf: int, *config: str) -> None:
    """``topics create --bootstrap ... --replication-factor rf``; waits until every
    partition has a leader and a full ISR."""
    _run("topics", "create", "--bootstrap", broker.unix, "--topic", topic,
         "--partitions", partitions, "--replication-factor", rf,
         *[a for c in config for a in ("--config", c)])
    poll(lambda: all(_settled(broker, topic, p, rf) for p in range(partitions)), WAIT_S,
         f"{topic}: a leader and a full ISR on every partition")


def _settled(broker, topic: str, partition: int, rf: int) -> bool:
    from hostbroker.shm.partitions import ONLINE, ROLE_LEADER

    slots = [s for _, s in replica_slots(broker, topic, partition)]
    return (len(slots) == rf
            and any(s.role == ROLE_LEADER and s.state == ONLINE and len(s.isr_ids) == rf
                    for s in slots))


def describe(broker, topic: str | None = None) -> list:
    """``topics describe --bootstrap ... --json``, decoded: a list of topics."""
    args = ["topics", "describe", "--bootstrap", broker.unix, "--json"]
    if topic is not None:
        args += ["--topic", topic]
    return json.loads(_run(*args))


def described_partitions(document: list, topic: str) -> dict[int, dict]:
    """partition -> its entry in a ``describe`` document."""
    (entry,) = [t for t in document if t["topic"] == topic]
    return {p["partition"]: p for p in entry["partitions"]}


def reassign(broker, tmp_path, action: str, moves: dict[tuple[str, int], list[str]],
             check: bool = True):
    """``reassign ACTION --bootstrap ... --reassignment-json-file F`` for ``moves``
    ((topic, partition) -> log dir paths, the preferred leader first); the finished
    process."""
    path = os.path.join(str(tmp_path), f"reassign-{time.monotonic_ns()}.json")
    with open(path, "w") as f:
        json.dump({"version": 1, "partitions": [
            {"topic": t, "partition": p, "log_dirs": dirs} for (t, p), dirs in moves.items()]}, f)
    done = hostbroker("reassign", action, "--bootstrap", broker.unix,
                      "--reassignment-json-file", path)
    if check:
        assert done.returncode == 0, done.stderr.decode()
    return done


DIR_ONLINE, DIR_OFFLINE, DIR_MISSING = 0, 1, 2  # METADATA v2's dir states


def dir_states(broker) -> dict[str | int, int]:
    """METADATA v2's table of this broker's log dirs: path (or, with no path, the
    id) -> state (DIR_ONLINE, DIR_OFFLINE, DIR_MISSING)."""
    with broker.client() as c:
        answer = c.metadata_v2([])
    return {d.path if d.path is not None else d.dir_id: d.state for d in answer.log_dirs}


def assignment(broker, topic: str) -> dict[int, tuple[list[str], list[str]]]:
    """METADATA v2's assignment of ``topic``: partition -> (replica dirs, reassignment
    target dirs), as paths (a dir without one as ``missing:<id>``)."""
    with broker.client() as c:
        answer = c.metadata_v2([topic])
    paths = {d.dir_id: d.path or f"missing:{d.dir_id}" for d in answer.log_dirs}
    (entry,) = answer.topics
    return {p.partition: ([paths[i] for i in p.replica_dirs], [paths[i] for i in p.target_dirs])
            for p in entry.partitions}


def moved(broker, topic: str, partition: int, target: list[str]) -> bool:
    """Whether a reassignment of ``topic``-``partition`` to ``target`` is done, as
    ``reassign verify`` reads it: no target left, the replicas the plan's."""
    replicas, pending = assignment(broker, topic)[partition]
    return not pending and replicas == list(target)


def logdirs(broker, action: str, *args, check: bool = True):
    """``hostbroker logdirs ACTION --bootstrap ... ARGS``; the finished process."""
    done = hostbroker("logdirs", action, "--bootstrap", broker.unix, *args)
    if check:
        assert done.returncode == 0, done.stderr.decode()
    return done


def top_json(broker) -> dict:
    """One reading of ``hostbroker top --json``."""
    out = _run("top", "--json", "--interval", "0.2", "--iterations", "1",
               "--set", f"log.dirs={broker.settings['log.dirs']}")
    return json.loads(out.splitlines()[-1])


# -- producing and reading back ---------------------------------------------------------


class AckedLog(threading.Thread):
    """A producer in a thread: async, acks=-1, through the broker's Unix listener,
    to every partition of ``topic`` in rounds. A round sends ``chunk`` values to
    each partition (named partition, round and index, padded to ``size`` bytes),
    then flushes: what the flush did not report failed was acknowledged.
    ``acked`` holds ``(partition, value)`` in acknowledgement order, ``rounds``
    the round of each; ``errors`` the ``(monotonic time, partition, code)`` of
    every error answer the producer saw (it retries them, for up to ~20 s). Stops after
    ``max_bytes`` acknowledged (:meth:`limit` lowers it), or when asked."""

    def __init__(self, broker, topic: str, partitions: int, *, chunk: int = 20,
                 size: int = 100, max_bytes: int = 4 << 20, pause: float = 0.0,
                 uri: str | None = None):
        super().__init__(daemon=True)
        self.broker, self.topic, self.partitions = broker, topic, partitions
        self.chunk, self.size, self.max_bytes, self.pause = chunk, size, max_bytes, pause
        self.uri = uri or broker.unix
        self.acked: list[tuple[int, bytes]] = []
        self.rounds: list[int] = []
        self.errors: list[tuple[float, int, int]] = []
        self.acked_at: list[tuple[float, int]] = []  # (monotonic time, partition)
        self.failed = 0
        self.acked_bytes = 0
        self.fatal: BaseException | None = None
        self.stop_event = threading.Event()
        self._lock = threading.Lock()

    def value(self, partition: int, n: int, i: int) -> bytes:
        head = f"{self.topic}:{partition}:{n}:{i}:".encode()
        return head + b"x" * max(0, self.size - len(head))

    def run(self) -> None:
        from hostbroker.client import Producer
        from hostbroker.client.producer import ProducerCallbacks

        log = self

        class Seen(ProducerCallbacks):
            def on_acknowledged(self, request, results):
                now = time.monotonic()
                with log._lock:
                    for r in results:
                        if r.error_code != ErrorCode.NONE:
                            log.errors.append((now, r.partition, int(r.error_code)))
                        else:
                            log.acked_at.append((now, r.partition))

        producer = Producer(self.uri, callbacks=Seen(), producer_type="async",
                            request_required_acks=-1, message_send_max_retries=1000,
                            retry_backoff_ms=20, queue_time=5, request_timeout_ms=10000)
        try:
            n = 0
            while not self.stop_event.is_set() and self.acked_bytes < self.max_bytes:
                sent = {p: [self.value(p, n, i) for i in range(self.chunk)]
                        for p in range(self.partitions)}
                for p, values in sent.items():
                    producer.send_many(self.topic, values, partition=p)
                failed: set[bytes] = set()
                try:
                    producer.flush(60)
                except DeliveryError as e:
                    self.failed += e.message_count
                    if sum(len(f.values) for f in e.failures) == e.message_count:
                        # values are unique (partition, round, index): no partition needed
                        failed = {bytes(v) for f in e.failures for v in f.values}
                    else:  # not every failure kept: count none of this round as acknowledged
                        failed = {v for vs in sent.values() for v in vs}
                with self._lock:
                    for p, values in sent.items():
                        for v in values:
                            if v not in failed:
                                self.acked.append((p, v))
                                self.rounds.append(n)
                                self.acked_bytes += len(v)
                n += 1
                if self.pause:
                    self.stop_event.wait(self.pause)
        except BaseException as e:  # noqa: BLE001 - said by stop()
            self.fatal = e
        finally:
            try:
                producer.close(30)
            except Exception:  # noqa: BLE001 - what failed at the end was never counted
                pass

    def wait_acked(self, count: int, timeout: float = 30.0) -> None:
        poll(lambda: len(self.acked) >= count or self.fatal is not None, timeout,
             f"{count} acknowledged messages")
        assert self.fatal is None, repr(self.fatal)

    def limit(self, more_bytes: int) -> None:
        """Stop after about ``more_bytes`` more acknowledged (the round under way ends
        first): what a test's timing does not decide."""
        with self._lock:
            self.max_bytes = min(self.max_bytes, self.acked_bytes + more_bytes)

    def first_error(self, code: int) -> float | None:
        with self._lock:
            return next((t for t, _, c in self.errors if c == code), None)

    def acked_after(self, t: float) -> float | None:
        with self._lock:
            return next((at for at, _ in self.acked_at if at > t), None)

    def stop(self, timeout: float = 90.0) -> None:
        self.stop_event.set()
        self.join(timeout)
        assert not self.is_alive(), "the producer did not stop"
        assert self.fatal is None, repr(self.fatal)


def _read_partition(client, topic: str, partition: int) -> list[bytes]:
    out: list[bytes] = []
    offset = client.offsets(topic, partition, -2, 1)[0]
    while True:
        f = client.fetch(topic, partition, offset, 1 << 20)
        got = list(iter_messages(bytes(f.message_set), offset))
        if not got:
            return out
        out += [bytes(m.payload) for m in got]
        offset = got[-1].next_offset


def read_back(broker, topic: str, timeout: float = WAIT_S) -> dict[int, list[bytes]]:
    """Every value a consumer reads from each partition, log start to high watermark.
    Retriable answers (a leader moving) are asked again until ``timeout``."""
    with broker.client() as c:
        partitions = len(c.metadata([topic]).topics[0].partitions)
    out: dict[int, list[bytes]] = {}
    for p in range(partitions):
        got: list[list[bytes]] = []

        def read(p=p, got=got) -> bool:
            try:
                with broker.client() as c:
                    got.append(_read_partition(c, topic, p))
                return True
            except BrokerError as e:
                if e.code in (ErrorCode.NOT_LEADER_FOR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE,
                              ErrorCode.STORAGE_ERROR, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                    return False
                raise

        poll(read, timeout, f"{topic}-{p} readable")
        out[p] = got[-1]
    return out


def assert_all_acked(acked, read: dict[int, list[bytes]]) -> None:
    """Every acknowledged value is read back, in order per partition: within a
    partition, the first copy of each value of an earlier round comes before
    the first copy of any value of a later round (a retried request may append
    a value twice, and may land after the rest of its own round). ``acked`` is
    an :class:`AckedLog` or a list of ``(partition, value)`` (then each value
    is its own round)."""
    if isinstance(acked, AckedLog):
        pairs, rounds = list(acked.acked), list(acked.rounds)
    else:
        pairs, rounds = list(acked), list(range(len(acked)))
    assert pairs, "nothing was acknowledged"
    by_partition: dict[int, list[tuple[int, bytes]]] = {}
    for (p, v), n in zip(pairs, rounds):
        by_partition.setdefault(p, []).append((n, v))
    for p, values in by_partition.items():
        first: dict[bytes, int] = {}
        for at, v in enumerate(read.get(p, [])):
            first.setdefault(v, at)
        missing = [v for _, v in values if v not in first]
        assert not missing, (f"partition {p}: {len(missing)} of {len(values)} acknowledged "
                             f"values lost, the first {missing[0][:40]!r}")
        spans: dict[int, list[int]] = {}  # round -> [first copy's least, greatest position]
        for n, v in values:
            span = spans.setdefault(n, [first[v], first[v]])
            span[0], span[1] = min(span[0], first[v]), max(span[1], first[v])
        ordered = sorted(spans.items())
        for (n, (_, end)), (m, (begin, _)) in zip(ordered, ordered[1:]):
            assert end < begin, \
                f"partition {p}: a value of round {m} is read before round {n} ended"
