"""Faults caused for real: workers killed with SIGKILL under load, the whole
process tree killed and a garbage tail left on disk, a log dir whose
filesystem is full, and a graceful SIGTERM with work in flight."""

from __future__ import annotations

import glob
import os
import re
import signal
import threading
import time

import psutil
import pytest

from hostbroker.client.errors import BrokerError
from hostbroker.config import Config
from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set, iter_messages
from hostbroker.workers.plan import shm_token
from tests.mounts import tmpfs

WORKER_NAMES = ["hb-writer-0", "hb-handler-0", "hb-handler-1", "hb-proc-0", "hb-proc-1",
                "hb-acceptor"]


def read_all(client, topic: str, partition: int = 0) -> list[bytes]:
    """Every payload of a partition, walking offsets from the log start."""
    start = client.offsets(topic, partition, -2, 1)[0]
    end = client.offsets(topic, partition, -1, 1)[0]
    out, offset = [], start
    while offset < end:
        f = client.fetch(topic, partition, offset, 1 << 20)
        messages = list(iter_messages(f.message_set, offset))
        assert messages, f"no whole entry at {offset}"
        out += [m.payload for m in messages]
        offset = messages[-1].next_offset
    return out


class LoadThread(threading.Thread):
    """Produces batches until stopped, reconnecting after errors, and records
    every batch the broker acknowledged."""

    def __init__(self, broker, topic: str, uri: str, acks: int = 1):
        super().__init__(daemon=True)
        self.broker, self.topic, self.uri, self.acks = broker, topic, uri, acks
        self.acked: list[bytes] = []
        self.failures = 0
        self.stop = threading.Event()

    def run(self) -> None:
        n = 0
        client = self.broker.client(self.uri, timeout=10)
        while not self.stop.is_set():
            batch = [f"{self.topic}-{n}-{i}".encode() * 3 for i in range(50)]
            try:
                client.produce(self.topic, 0, encode_message_set(batch), acks=self.acks)
            except (OSError, BrokerError):
                self.failures += 1
                client.close()
                time.sleep(0.02)
                client = self.broker.client(self.uri, timeout=10)
                continue
            self.acked += batch
            n += 1
        client.close()


@pytest.mark.parametrize("name", WORKER_NAMES)
def test_sigkill_of_a_worker_under_load_loses_no_acknowledged_message(broker, name):
    with broker.client() as c:
        c.create_topic("load", 1)
    loads = [LoadThread(broker, "load", broker.unix), LoadThread(broker, "load", broker.tcp, -1)]
    for t in loads:
        t.start()
    time.sleep(0.5)
    victim = broker.workers()[name]
    os.kill(victim, signal.SIGKILL)
    replacement = broker.wait_worker_replaced(name, victim)
    assert psutil.Process(replacement).name() == name
    time.sleep(1.0)  # the load goes on against the new worker
    for t in loads:
        t.stop.set()
    for t in loads:
        t.join(20)
    acked_before = sum(len(t.acked) for t in loads)
    assert acked_before > 0
    with broker.client(broker.tcp) as c:
        stored = read_all(c, "load")
        # still serving: a fresh produce is acknowledged and readable
        r = c.produce("load", 0, encode_message_set([b"after"]))
        assert r.error_code == ErrorCode.NONE
    stored_set = set(stored)
    for t in loads:
        missing = [m for m in t.acked if m not in stored_set]
        assert not missing, f"{len(missing)} acknowledged messages lost after killing {name}"
    assert f"(pid {victim}) died with signal 9; replacing it" in broker.log()


def test_process_names(broker):
    names = set(broker.workers())
    assert set(WORKER_NAMES) <= names
    assert psutil.Process(broker.proc.pid).name() == "hb-supervisor"


def test_sigkill_of_the_whole_tree_then_garbage_tail_recovers_the_valid_log(make_broker, tmp_path):
    broker = make_broker()
    with broker.client() as c:
        c.create_topic("crash", 2, {"segment.bytes": "4096"})
        acked = {0: [], 1: []}
        for i in range(60):
            p = i % 2
            batch = [f"m{i}-{j}".encode() * 5 for j in range(4)]
            c.produce("crash", p, encode_message_set(batch), acks=-1 if i % 3 else 1)
            acked[p] += batch
        ends = {p: c.offsets("crash", p, -1, 1)[0] for p in (0, 1)}
    broker.kill_tree()
    # garbage after the valid data: a torn entry on one partition, zeros on the other
    seg0 = sorted(glob.glob(os.path.join(broker.root, "logs", "crash_0", "*.kafka")))[-1]
    seg1 = sorted(glob.glob(os.path.join(broker.root, "logs", "crash_1", "*.kafka")))[-1]
    with open(seg0, "ab") as f:
        f.write(b"\x00\x00\x01\x00\x01\x00\xde\xad\xbe\xef" + os.urandom(100))
    with open(seg1, "ab") as f:
        f.write(bytes(4096))
    assert not os.path.exists(os.path.join(broker.root, "logs", ".clean_shutdown"))
    broker.start()
    with broker.client() as c:
        for p in (0, 1):
            assert c.offsets("crash", p, -1, 1)[0] == ends[p]
            assert read_all(c, "crash", p) == acked[p]
        r = c.produce("crash", 0, encode_message_set([b"next"]))
        assert r.base_offset == ends[0]
    assert broker.stop() == 0


def test_sigterm_drains_in_flight_long_poll_and_exits_zero(broker):
    with broker.client() as c:
        c.create_topic("drain", 1)
        c.produce("drain", 0, encode_message_set([b"x"]))
    result = {}

    def long_poll():
        with broker.client() as c2:
            t = time.monotonic()
            result["fetch"] = c2.fetch("drain", 0, 0, 1 << 20, max_wait_ms=20000, min_bytes=1 << 20)
            result["seconds"] = time.monotonic() - t

    t = threading.Thread(target=long_poll)
    t.start()
    time.sleep(0.5)
    workers = list(broker.workers().values())
    token = shm_token(Config.build(overrides=[f"log.dirs={broker.settings['log.dirs']}"]))
    assert [n for n in os.listdir("/dev/shm") if n.startswith(token)]
    assert broker.stop(timeout=30) == 0
    t.join(10)
    assert result["seconds"] < 15, "the parked fetch waited for its deadline instead of draining"
    assert [m.payload for m in iter_messages(result["fetch"].message_set, 0)] == [b"x"]
    assert os.path.exists(os.path.join(broker.root, "logs", ".clean_shutdown"))
    assert not os.path.exists(broker.unix_path)
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(token)]
    assert not [pid for pid in workers if psutil.pid_exists(pid)]


@pytest.fixture
def small_disk(tmp_path):
    """A real 2 MiB filesystem that fills up: a disk failing with ENOSPC."""
    with tmpfs(str(tmp_path / "small"), "2m") as path:
        yield path


def test_a_full_disk_takes_only_its_own_partitions_offline(make_broker, tmp_path, small_disk):
    big = str(tmp_path / "big")
    broker = make_broker(**{"log.dirs": f"{big},{small_disk}"})
    with broker.client() as c:
        c.create_topic("spread", 2)  # one partition on each log dir
        meta = c.metadata(["spread"]).topics[0].partitions
        on_small = [p.partition for p in meta if p.log_dir == small_disk]
        on_big = [p.partition for p in meta if p.log_dir == big]
        assert len(on_small) == 1 and len(on_big) == 1
        small_p, big_p = on_small[0], on_big[0]
        payload = [os.urandom(500) for _ in range(200)]
        codes = []
        for _ in range(40):  # ~4 MB into a 2 MB filesystem
            r = c.produce("spread", small_p, encode_message_set(payload), raise_on_error=False)
            codes.append(r.error_code)
            if r.error_code:
                break
        assert codes[-1] == ErrorCode.STORAGE_ERROR
        # the failed disk's partitions stay offline; the other disk keeps serving
        r = c.produce("spread", small_p, encode_message_set([b"x"]), raise_on_error=False)
        assert r.error_code == ErrorCode.STORAGE_ERROR
        f = c.fetch("spread", small_p, 0, 1024, raise_on_error=False)
        assert f.error_code == ErrorCode.STORAGE_ERROR
        r = c.produce("spread", big_p, encode_message_set([b"still here"]))
        assert r.error_code == ErrorCode.NONE
        assert read_all(c, "spread", big_p) == [b"still here"]
        meta = {p.partition: p.error_code for p in c.metadata(["spread"]).topics[0].partitions}
        assert meta == {small_p: ErrorCode.STORAGE_ERROR, big_p: ErrorCode.NONE}


def test_retention_by_size_moves_the_log_start(make_broker):
    broker = make_broker(**{"log.retention.check.interval.ms": 200})
    with broker.client() as c:
        c.create_topic("ret", 1, {"segment.bytes": "2048", "retention.bytes": "4096"})
        for i in range(40):
            c.produce("ret", 0, encode_message_set([b"r" * 200]))
        end = c.offsets("ret", 0, -1, 1)[0]
        # a check may come while the produces still run (the machine is slow): the log
        # start has moved only once the first check after the last produce is done
        deadline = time.monotonic() + 10
        while (end - c.offsets("ret", 0, -2, 1)[0] > 4096 + 2048
               and time.monotonic() < deadline):
            time.sleep(0.1)
        start = c.offsets("ret", 0, -2, 1)[0]
        assert 0 < start <= end
        assert end - start <= 4096 + 2048
        with pytest.raises(BrokerError) as e:
            c.fetch("ret", 0, 0, 1024)
        assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert len(read_all(c, "ret")) == (end - start) // (4 + 6 + 200)


def test_crash_recovery_starts_at_the_checkpointed_recovery_point(make_broker):
    broker = make_broker(**{"log.flush.offset.checkpoint.interval.ms": 100,
                            "log.flush.interval.ms": 50})
    with broker.client() as c:
        c.create_topic("ckpt", 1, {"segment.bytes": "2048"})
        acked = []
        for i in range(120):  # ~10 segments of 2 KiB, all flushed and checkpointed
            batch = [f"early-{i}".encode() * 20]
            c.produce("ckpt", 0, encode_message_set(batch))
            acked += batch
        time.sleep(0.5)
        late = [b"late"] * 3
        c.produce("ckpt", 0, encode_message_set(late))
        acked += late
    broker.kill_tree()
    active = sorted(glob.glob(os.path.join(broker.root, "logs", "ckpt_0", "*.kafka")))[-1]
    with open(active, "ab") as f:
        f.write(os.urandom(64))
    broker.start()
    with broker.client() as c:
        assert read_all(c, "ckpt") == acked
    line = [ln for ln in broker.log().splitlines() if "recovered" in ln][-1]
    skipped = int(re.search(r"trusted (\d+) segments?\b", line).group(1))
    scanned = int(re.search(r"scanned (\d+) segments?\b", line).group(1))
    assert skipped >= 8 and scanned <= 2, line


def test_a_second_broker_on_the_same_log_dirs_is_refused_and_harms_nothing(make_broker, tmp_path):
    first = make_broker()
    second = make_broker(root=tmp_path / "other", start=False)
    (tmp_path / "other").mkdir()
    second.settings["log.dirs"] = first.settings["log.dirs"]
    with pytest.raises(RuntimeError) as e:
        second.start(timeout=20)
    assert "is in use by another broker" in str(e.value)
    assert f"(pid {first.proc.pid})" in str(e.value)
    # the first broker still owns its shared memory: a replaced worker attaches fine
    victim = first.workers()["hb-handler-0"]
    os.kill(victim, signal.SIGKILL)
    first.wait_worker_replaced("hb-handler-0", victim)
    with first.client() as c:
        assert c.produce("still", 0, encode_message_set([b"ok"])).error_code == ErrorCode.NONE


def test_fetch_across_segments_after_the_writer_is_replaced(broker):
    with broker.client() as c:
        c.create_topic("gen", 1, {"segment.bytes": "1024"})
        c.fetch("gen", 0, 0, 1024)  # the handlers cache the (one-segment) list now
        c.fetch("gen", 0, 0, 1024)  # on both handlers' connections, whichever we got
        acked = []
        for i in range(20):  # ~10 segments
            batch = [f"g{i}".encode() * 100]
            c.produce("gen", 0, encode_message_set(batch))
            acked += batch
    victim = broker.workers()["hb-writer-0"]
    os.kill(victim, signal.SIGKILL)
    broker.wait_worker_replaced("hb-writer-0", victim)
    for uri in (broker.unix, broker.tcp, broker.unix, broker.tcp):  # reach both handlers
        with broker.client(uri) as c:
            deadline = time.monotonic() + 10
            while c.offsets("gen", 0, -1, 1)[0] == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert read_all(c, "gen") == acked


def test_a_recreated_topic_never_sees_the_old_segments(broker):
    with broker.client() as c:
        c.create_topic("again", 1, {"segment.bytes": "1024"})
        for i in range(10):
            c.produce("again", 0, encode_message_set([b"old" * 200]))
        assert len(read_all(c, "again")) == 10
        c.delete_topic("again")
        c.create_topic("again", 1)
        c.produce("again", 0, encode_message_set([b"new"]))
        assert read_all(c, "again") == [b"new"]


def test_a_writer_killed_mid_slot_write_is_replaced_and_its_partition_serves(broker):
    from hostbroker.shm.partitions import PartitionTable
    from hostbroker.workers.plan import BrokerPlan

    with broker.client() as c:
        c.create_topic("torn", 1)
        c.produce("torn", 0, encode_message_set([b"before"]))
    time.sleep(1.5)  # let the writer's flush publish; then it leaves the slot alone
    plan = BrokerPlan.from_config(
        Config.build(overrides=[f"log.dirs={broker.settings['log.dirs']}"]))
    table = PartitionTable.attach(plan.table_name)
    slot = next(i for i, s in table.scan() if s.name == "torn")
    # A SIGKILL inside a seqlock write cannot be timed from outside: leave the
    # slot as such a death would (sequence odd), then kill the writer for real.
    table._u64[table._offset(slot) >> 3] += 1
    victim = broker.workers()["hb-writer-0"]
    os.kill(victim, signal.SIGKILL)
    broker.wait_worker_replaced("hb-writer-0", victim)
    assert table.mid_write(slot) is None
    table.close()
    with broker.client() as c:
        c.produce("torn", 0, encode_message_set([b"after"]))
        assert read_all(c, "torn") == [b"before", b"after"]
    assert "repaired 1 partition slot(s) left mid-write" in broker.log()
