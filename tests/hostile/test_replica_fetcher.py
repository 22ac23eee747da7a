"""Hostile leaders: what a follower's ``hb-replica`` does with a "leader" that
sends garbage, answers larger than it asked for, entries that do not check,
data from a leader epoch that is not yet, or nothing at all.

The follower is a real broker in cluster mode (broker 2), made a follower by
a LEADER_AND_ISR sent here by hand (as the controller ZooKeeper names:
broker 99 in epoch 1); the leader is a socket server of this
test that speaks as it is told. In every case the follower drops what it was
sent, appends nothing that does not check, says so in its log, tries again
after ``replica.fetch.backoff.ms`` (or ``replica.socket.timeout.ms`` of
silence) on a new connection, and its hb-replica is the same process
throughout.
"""

from __future__ import annotations

import glob
import os
import socket
import struct
import threading
import time
from contextlib import ExitStack

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.log.segments import partition_dirname
from hostbroker.protocol import replication as rproto
from hostbroker.protocol.bodies import MetadataBroker
from tests.cluster.controller_by_hand import be_the_controller
from tests.cluster.zkserver import ZooKeeperServer
from tests.integration.broker import Broker
from tests.integration.wire_helpers import RawSocket, new_topic

FOLLOWER = 2
EPOCH = 3
SETTINGS = {"num.processors": 1, "num.handlers": 1, "broker.id": FOLLOWER,
            "replica.fetch.wait.max.ms": 100, "replica.fetch.backoff.ms": 100,
            "replica.socket.timeout.ms": 700}
_leader_ids = iter(range(11, 1000))


@pytest.fixture(scope="module")
def follower(tmp_path_factory):
    zk = ZooKeeperServer(tmp_path_factory.mktemp("zk")).start()
    broker = None
    stack = ExitStack()
    try:
        stack.enter_context(be_the_controller(zk.connect, 99))
        broker = Broker(tmp_path_factory.mktemp("follower"), **{
            **SETTINGS, "zookeeper.connect": zk.connect}).start()
        yield broker
    finally:
        if broker is not None:
            broker.finish()
        stack.close()
        zk.stop()


class FakeLeader(threading.Thread):
    """A leader of this test's making: ``answer(n, request)`` gives the bytes to
    send for the n-th request it receives (over all connections), None for
    silence. Every connection and decoded request is kept."""

    def __init__(self, answer):
        super().__init__(daemon=True)
        self.answer = answer
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.connections = 0
        self.requests: list = []
        self.halt = threading.Event()
        self.start()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn) -> None:
        conn.settimeout(0.2)
        buf = b""
        with conn:
            while not self.halt.is_set():
                try:
                    data = conn.recv(1 << 16)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                buf += data
                while len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">i", buf[:4])[0]:
                    size = struct.unpack(">i", buf[:4])[0]
                    frame, buf = buf[4:4 + size], buf[4 + size:]
                    header, request = rproto.decode_request(frame)
                    self.requests.append(request)
                    out = self.answer(len(self.requests) - 1, header.correlation_id, request)
                    if out:
                        try:
                            conn.sendall(out)
                        except OSError:
                            return

    def stop(self) -> None:
        self.halt.set()
        self.join(5)
        self.server.close()


def fetch_answer(corr: int, request, message_set: bytes, *, hw: int | None = None,
                 data_epoch: int = EPOCH, error: int = 0) -> bytes:
    part = request.partitions[0]
    end = part.offset + len(message_set)
    return rproto.encode_response(corr, rproto.FetchResponseV1((rproto.FetchPartitionResultV1(
        part.topic, part.partition, error, end if hw is None else hw, end, data_epoch,
        message_set),)))


def follow(broker, topic: str, leader: int, port: int) -> None:
    body = rproto.LeaderAndIsrRequest(99, 1, (rproto.LeaderAndIsrPartition(
        topic, 0, leader, EPOCH, (leader, FOLLOWER), 0, (leader, FOLLOWER)),), (),
        (MetadataBroker(leader, "127.0.0.1", port, None),))
    with RawSocket(broker.tcp) as sock:
        sock.send(rproto.encode_request(body, 1, "test"))
        _, answer = rproto.decode_response(sock.read_frame(), rproto.LeaderAndIsrResponse)
    assert answer.error_code == ErrorCode.NONE
    assert [p.error_code for p in answer.partitions] == [ErrorCode.NONE]


def log_bytes(broker, topic: str) -> bytes:
    out = b""
    for path in sorted(glob.glob(os.path.join(broker.settings["log.dirs"],
                                              partition_dirname(topic, 0), "*.kafka"))):
        with open(path, "rb") as f:
            out += f.read()
    return out


def wait_until(what, timeout: float = 10.0, why: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if what():
            return
        time.sleep(0.02)
    raise AssertionError(f"not within {timeout} s: {why}")


def run_case(follower, answer, *, requests: int = 3):
    """Follow a new topic from a fake leader answering with ``answer``; return
    (topic, leader) once it has had ``requests`` requests."""
    replica = follower.workers()["hb-replica"]
    topic = new_topic("hostile-leader")
    leader = FakeLeader(answer)
    try:
        follow(follower, topic, next(_leader_ids), leader.port)
        wait_until(lambda: len(leader.requests) >= requests, why=follower.log()[-2000:])
    finally:
        leader.stop()
    assert follower.workers()["hb-replica"] == replica  # never replaced
    return topic, leader


def test_a_garbage_answer_closes_the_connection_and_the_follower_tries_again(follower):
    good = encode_message_set([b"after the garbage"])

    def answer(n, corr, request):
        if n == 0:
            return struct.pack(">i", 40) + os.urandom(40)
        return fetch_answer(corr, request, good if request.partitions[0].offset == 0 else b"")

    topic, leader = run_case(follower, answer)
    first = leader.requests[0]
    assert isinstance(first, rproto.FetchRequestV1)
    assert first.replica_id == FOLLOWER
    part = first.partitions[0]
    assert (part.topic, part.partition, part.leader_epoch, part.offset) == (topic, 0, EPOCH, 0)
    assert part.max_bytes == 1024 * 1024  # replica.fetch.max.bytes
    assert leader.connections >= 2
    wait_until(lambda: log_bytes(follower, topic) == good, why="the good answer appended")


def test_an_answer_larger_than_the_request_can_bring_is_refused_unread(follower):
    def answer(n, corr, request):
        if n == 0:  # 2 GB announced: refused at the size, nothing allocated
            return struct.pack(">ii", 2**31 - 1, corr)
        return fetch_answer(corr, request, b"")

    _, leader = run_case(follower, answer)
    assert leader.connections >= 2


def test_entries_that_do_not_check_are_not_appended(follower):
    good = encode_message_set([b"x" * 100, b"y" * 100])
    bad = bytearray(good)
    bad[20] ^= 0xFF  # a payload byte: the first entry's CRC no longer matches

    def answer(n, corr, request):
        return fetch_answer(corr, request, bytes(bad) if request.partitions[0].offset == 0
                            else b"")

    topic, leader = run_case(follower, answer, requests=3)
    assert log_bytes(follower, topic) == b""
    assert all(r.partitions[0].offset == 0 for r in leader.requests)
    assert "refused the append at 0" in follower.log()


def test_data_of_a_leader_epoch_not_yet_begun_is_refused(follower):
    data = encode_message_set([b"from the future"])

    def answer(n, corr, request):
        return fetch_answer(corr, request, data, data_epoch=EPOCH + 1)

    topic, leader = run_case(follower, answer, requests=3)
    assert log_bytes(follower, topic) == b""
    assert "data epoch 4" in follower.log()


def test_a_silent_leader_is_left_after_the_socket_timeout(follower):
    started = time.monotonic()
    topic, leader = run_case(follower, lambda n, corr, request: None, requests=2)
    # the second request came on a new connection, after replica.fetch.wait.max.ms
    # + replica.socket.timeout.ms of silence and replica.fetch.backoff.ms
    assert leader.connections >= 2
    assert time.monotonic() - started >= 0.7
    assert "did not answer within replica.socket.timeout.ms" in follower.log()


def test_a_partial_tail_is_fetched_again(follower):
    whole = encode_message_set([b"first" * 10, b"second" * 10])
    cut = len(encode_message_set([b"first" * 10]))

    def answer(n, corr, request):
        offset = request.partitions[0].offset
        if offset == 0:  # the first entry and half of the second
            return fetch_answer(corr, request, whole[:cut + 7], hw=len(whole))
        return fetch_answer(corr, request, whole[offset:], hw=len(whole))

    topic, leader = run_case(follower, answer, requests=3)
    assert [r.partitions[0].offset for r in leader.requests[:2]] == [0, cut]
    wait_until(lambda: log_bytes(follower, topic) == whole, why="the whole set appended")
