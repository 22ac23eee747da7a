"""Standing cases: hostile input to replication (issue 35).

Whoever can write to the cluster's ZooKeeper writes replication nodes
(assignments, partition states, controller, admin requests) of any size and
shape; whoever can reach a listener sends LEADER_AND_ISR and friends with any
bytes; whoever can write a log dir leaves any leader-epoch-checkpoint. Each
is refused with one line naming what is wrong, quickly and in bounded memory,
and never by another exception. Real ZooKeeper (one for the module), real files.
"""

from __future__ import annotations

import json
import os
import threading
import time

import psutil
import pytest

from hostbroker.cluster import zkread
from hostbroker.errors import ErrorCode, ProtocolError, StorageError
from hostbroker.log import epochs
from hostbroker.protocol import replication as rp
from hostbroker.cluster import replica_nodes as z
from tests.cluster.zkfixtures import Said, kazoo, zkserver  # noqa: F401 - fixture
from tests.protocol.wire import array, i32, i64, request_frame, string


@pytest.fixture(scope="module")
def zk(zkserver):  # noqa: F811 - the imported fixture
    with kazoo(zkserver.connect) as client:
        yield client


def read_node(zk, path, decode, said, bounds=zkread.DEFAULT):
    """What a replication reader does: a bounded read, then the decoder; a bad
    value is one report and None."""
    found = zkread.value(zk, path, bounds, said)
    if found is None:
        return None
    try:
        return decode(found[0], path, bounds)
    except ValueError as exc:
        said(path, f"{exc}; left out")
        return None


def test_hostile_replication_nodes_are_left_out_with_one_line_each(zk):
    good_state = z.encode_state(z.PartitionState(1, 0, (1, 2), 0))
    zk.create(z.assignment_path("real"), z.encode_assignment({0: [1, 2]}), makepath=True)
    zk.create(z.state_path("real", 0), good_state, makepath=True)
    many = {str(p): [1] for p in range(20_000)}
    hostile = {
        z.assignment_path("huge"): (json.dumps({"version": 1, "partitions": many}).encode(),
                                    z.decode_assignment),
        z.assignment_path("nine"): (z.encode_assignment({0: list(range(9))}), z.decode_assignment),
        z.assignment_path("deep"): (b"[" * 15_000 + b"]" * 15_000, z.decode_assignment),
        z.assignment_path("gap"): (b'{"version":1,"partitions":{"0":[1],"7":[1]}}',
                                   z.decode_assignment),
        z.state_path("real", 1): (b'{"version":1,"leader":9,"leader_epoch":0,"isr":[1],'
                                  b'"controller_epoch":0}', z.decode_state),
        z.state_path("real", 2): (b'{"version":1,"leader":1,"leader_epoch":-5,"isr":[1],'
                                  b'"controller_epoch":0}', z.decode_state),
        z.state_path("real", 3): (b"\xff" * 1000, z.decode_state),
        z.topic_config_path("real"): (json.dumps({"version": 1, "config": {
            f"k{i}": "v" for i in range(5000)}}).encode(), z.decode_topic_config),
        "/controller_x": (b'{"version":1,"brokerid":"1","timestamp":"0"}', z.decode_controller),
        "/controller_epoch_x": (b"9" * 5000, z.decode_controller_epoch),
        "/admin/preferred_replica_election_x": (json.dumps({"version": 1, "partitions": [
            {"topic": "t", "partition": 0}] * 3}).encode(), z.decode_preferred_election),
        "/admin/reassign_partitions_x": (json.dumps({"version": 1, "partitions": [
            {"topic": "t", "partition": p, "replicas": [1]} for p in range(300_000)]}).encode()[
                :250_000] + b"]}", z.decode_reassignment),
    }
    for path, (value, _) in hostile.items():
        zk.create(path, value, makepath=True)
    said = Said()
    before = psutil.Process().memory_info().rss
    started = time.monotonic()
    assert read_node(zk, z.assignment_path("real"), z.decode_assignment, said) == {0: (1, 2)}
    assert read_node(zk, z.state_path("real", 0), z.decode_state, said).leader == 1
    for path, (_, decode) in hostile.items():
        assert read_node(zk, path, decode, said) is None
    assert time.monotonic() - started < 5
    assert psutil.Process().memory_info().rss - before < 40 << 20
    assert sorted(p for p, _ in said.lines) == sorted(hostile)  # one line each
    assert all("\n" not in problem and len(problem) < 300 for _, problem in said.lines)


def hostile_frames():
    """Replication requests that a broker must refuse whole: (what, frame)."""
    lai_head = i32(1) + i32(1)
    return [
        ("a count of 2**31-1 partitions", request_frame(14, 1, "h", lai_head + i32(2**31 - 1))),
        ("a replica count of 2**31-1", request_frame(14, 1, "h", lai_head + array(
            string("t") + i32(0) + i32(1) + i32(0) + i32(2**31 - 1)))),
        ("nine replicas", request_frame(14, 1, "h", lai_head + array(
            string("t") + i32(0) + i32(1) + i32(0) + array(i32(1)) + i32(0)
            + array(*[i32(i) for i in range(1, 10)])) + array() + array())),
        ("an ISR outside the replicas", request_frame(14, 1, "h", lai_head + array(
            string("t") + i32(0) + i32(1) + i32(0) + array(i32(1), i32(7)) + i32(0)
            + array(i32(1), i32(2))) + array() + array())),
        ("a partition named 50000 times", request_frame(15, 1, "h", i32(1) + i32(1) + b"\x00"
                                                        + array(*[string("t") + i32(0)] * 50_000))),
        ("a fetch from replica -7", request_frame(1, 1, "h", i32(-7) + i32(0) + i32(0) + array(
            string("t") + i32(0) + i32(0) + i64(0) + i32(1)), api_version=1)),
        ("an epoch of -9", request_frame(16, 1, "h", i32(1) + array(
            string("t") + i32(0) + i32(-9)))),
        ("a 30000-byte topic named twice", request_frame(16, 1, "h", i32(1) + array(
            *[string("x" * 30000) + i32(0) + i32(1)] * 2))),
    ]


def test_hostile_replication_requests_are_refused_whole_and_quickly():
    for what, frame in hostile_frames():
        started = time.thread_time()  # the decode's own CPU, whatever else runs
        with pytest.raises(ProtocolError) as info:
            rp.decode_any_request(frame, max_entries=100_000)
        assert info.value.code == ErrorCode.INVALID_REQUEST, what
        assert "\n" not in str(info.value) and len(str(info.value)) < 300, what
        assert time.thread_time() - started < 1, what


def test_a_hostile_epoch_file_takes_only_its_partition_offline(tmp_path):
    cases = {
        "garbage": os.urandom(100_000),
        "huge": b"0\n1\n" + b"1" * (epochs.MAX_FILE_BYTES + 10) + b" 0\n",
        "backwards": b"0\n2\n5 100\n6 50\n",
        "lying count": b"0\n" + b"9" * 19 + b"\n1 0\n",
    }
    for name, data in cases.items():
        directory = tmp_path / name
        directory.mkdir()
        (directory / epochs.EPOCH_FILE).write_bytes(data)
        started = time.monotonic()
        with pytest.raises(StorageError) as info:
            epochs.load(str(directory))
        assert epochs.EPOCH_FILE in str(info.value) and "\n" not in str(info.value)
        assert time.monotonic() - started < 2, name
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / epochs.EPOCH_FILE)
    done = []

    def load():
        try:
            epochs.load(str(fifo))
        except StorageError as exc:
            done.append(str(exc))

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    thread.join(5)
    assert done and "FIFO" in done[0]  # refused, not waited on
    good = tmp_path / "good"
    good.mkdir()
    (good / epochs.EPOCH_FILE).write_bytes(b"0\n1\n3 10\n")
    assert epochs.load(str(good)).entries == ((3, 10),)
