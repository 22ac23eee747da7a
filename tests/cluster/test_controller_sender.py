"""The controller's sender (``BrokerSender``, hostbroker/workers/registrar_controller.py)
against a broker that has not confirmed the controller yet: a request answered
CONTROLLER_NOT_CONFIRMED (or BROKER_NOT_AVAILABLE) is sent again after the
back-off until it is taken, and the requests behind it wait their turn; a
request answered with any other error is not sent again. The broker is a
socket server of the test that answers as it is told (no ZooKeeper needed)."""

from __future__ import annotations

import socket
import struct
import threading
import time

from hostbroker.cluster import paths
from hostbroker.cluster.controller import LEADER_AND_ISR, Notice
from hostbroker.errors import ErrorCode
from hostbroker.protocol import replication as rproto
from hostbroker.cluster.replica_nodes import PartitionState
from hostbroker.workers.registrar_controller import BrokerSender


class Broker(threading.Thread):
    """A socket server that reads controller requests and answers each with
    ``answer(request)``, keeping every request."""

    def __init__(self, path: str, answer):
        super().__init__(daemon=True)
        self.answer = answer
        self.requests: list = []
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(path)
        self.server.listen(4)
        self.server.settimeout(0.2)
        self.halt = threading.Event()
        self.start()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(5)
                try:
                    while not self.halt.is_set():
                        head = conn.recv(4, socket.MSG_WAITALL)
                        if len(head) < 4:
                            break
                        frame = conn.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
                        header, request = rproto.decode_request(frame)
                        self.requests.append(request)
                        conn.sendall(rproto.encode_response(header.correlation_id,
                                                            self.answer(request)))
                except OSError:
                    pass

    def stop(self) -> None:
        self.halt.set()
        self.join(5)
        self.server.close()


def answering(path: str, codes: list[int]) -> Broker:
    """Answers the n-th LEADER_AND_ISR it reads with ``codes[n]`` (the last code
    once they run out)."""
    def answer(request):
        code = codes[min(len(broker.requests), len(codes)) - 1]
        return rproto.LeaderAndIsrResponse(code, ())
    broker = Broker(path, answer)
    return broker


def notice(topic: str) -> Notice:
    return Notice(LEADER_AND_ISR, 7, 3, partitions={
        (topic, 0): (PartitionState(7, 0, (7,), 3), 0, [7])})


def wait_until(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def run(tmp_path, codes, sent_then, *topics):
    """Send ``topics`` through a sender to a broker answering ``codes``; what the
    broker got once ``sent_then`` requests have an answer that ends them."""
    broker = answering(str(tmp_path / "b.sock"), codes)
    stale, unconfirmed = [], []
    sender = BrokerSender(paths.BrokerInfo(7, None, None, str(tmp_path / "b.sock")), 1, 5.0,
                          lambda: stale.append(1), lambda broker_id: None,
                          lambda: unconfirmed.append(1)).start()
    try:
        for topic in topics:
            sender.put(notice(topic))
        wait_until(lambda: sender.sent == sent_then)
        time.sleep(0.5)  # nothing more is sent after
        return broker.requests, sender.sent, stale
    finally:
        sender.stop()
        sender.thread.join(5)
        broker.stop()


def test_a_request_not_confirmed_yet_is_sent_again_and_the_next_waits_behind_it(tmp_path):
    codes = [ErrorCode.CONTROLLER_NOT_CONFIRMED, ErrorCode.BROKER_NOT_AVAILABLE,
             ErrorCode.CONTROLLER_NOT_CONFIRMED, ErrorCode.NONE]
    requests, sent, stale = run(tmp_path, codes, 2, "first", "second")
    assert [r.partitions[0].topic for r in requests] == ["first"] * 4 + ["second"]
    assert all(r.controller_epoch == 3 and r.controller_id == 1 for r in requests)
    assert sent == 2 and not stale


def test_a_request_refused_otherwise_is_not_sent_again(tmp_path):
    requests, sent, stale = run(tmp_path, [ErrorCode.INVALID_REQUEST, ErrorCode.NONE], 2,
                                "first", "second")
    assert [r.partitions[0].topic for r in requests] == ["first", "second"]
    assert sent == 2 and not stale
    (tmp_path / "again").mkdir()
    requests, sent, stale = run(tmp_path / "again", [ErrorCode.STALE_CONTROLLER_EPOCH], 1,
                                "only")
    assert len(requests) == 1 and stale == [1]


def deleting(path: str) -> Broker:
    """Answers every STOP_REPLICA with partition 1 of each topic failed
    (STORAGE_ERROR: its disk refused the delete), the others deleted."""
    return Broker(path, lambda request: rproto.StopReplicaResponse(0, tuple(
        rproto.PartitionError(p.topic, p.partition,
                              ErrorCode.STORAGE_ERROR if p.partition == 1 else ErrorCode.NONE)
        for p in request.partitions)))


def test_a_delete_that_failed_on_the_brokers_disk_is_not_counted_done(tmp_path):
    from hostbroker.cluster.controller import STOP_REPLICA

    path = str(tmp_path / "b.sock")
    broker = deleting(path)
    deleted = []
    sender = BrokerSender(paths.BrokerInfo(7, None, None, path), 1, 5.0, lambda: None,
                          lambda broker_id: None, lambda: None, deleted.append).start()
    try:
        sender.put(Notice(STOP_REPLICA, 7, 3, stop=[("t", 0), ("t", 1), ("t", 2)],
                          delete=True))
        wait_until(lambda: deleted)
        (done,) = deleted
        assert done.stop == [("t", 0), ("t", 2)] and done.broker_id == 7 and done.delete
    finally:
        sender.stop()
        sender.thread.join(5)
        broker.stop()
