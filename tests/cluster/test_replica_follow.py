"""Followers copying their leader, for real: two ``hostbroker serve`` processes
in cluster mode, told who leads by LEADER_AND_ISR requests sent here by hand
(the controller's part is not needed to see the follower's: the test is the
controller ZooKeeper names, broker 99 in epoch 1), ``hb-replica``
of the follower fetching over the leader's listener and appending through its
writer. Replicas are byte-identical, so their segment files are compared.

One ZooKeeper and one pair of brokers serve the module; each test has topics
of its own.
"""

from __future__ import annotations

import glob
import os
import signal
import time
from contextlib import ExitStack

import psutil
import pytest

from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.log.segments import partition_dirname
from hostbroker.protocol import replication as rproto
from hostbroker.protocol.bodies import MetadataBroker, TopicConfigEntry
from tests.cluster.controller_by_hand import be_the_controller
from tests.cluster.zkserver import ZooKeeperServer
from tests.integration.broker import Broker
from tests.integration.wire_helpers import RawSocket, new_topic

FAST = {"num.processors": 1, "num.handlers": 1, "replica.fetch.wait.max.ms": 200,
        "replica.fetch.backoff.ms": 100, "message.max.bytes": 4 * 1024 * 1024,
        "log.retention.check.interval.ms": 100,
        # a process stopped on purpose is not replaced meanwhile
        "worker.heartbeat.timeout.ms": 30000}
CONTROLLER = 99


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    zk = ZooKeeperServer(tmp_path_factory.mktemp("zk")).start()
    brokers = {}
    stack = ExitStack()
    try:
        stack.enter_context(be_the_controller(zk.connect, CONTROLLER))
        for broker_id in (1, 2):
            brokers[broker_id] = Broker(tmp_path_factory.mktemp(f"b{broker_id}"), **{
                **FAST, "zookeeper.connect": zk.connect, "broker.id": broker_id}).start()
        yield brokers
    finally:
        for broker in brokers.values():
            broker.finish()
        stack.close()
        zk.stop()


def ask(broker, body, cls):
    with RawSocket(broker.tcp) as sock:
        sock.send(rproto.encode_request(body, 5, "test"))
        corr, answer = rproto.decode_response(sock.read_frame(), cls)
    assert corr == 5
    return answer


def lead(pair, to, topic: str, leader: int, epoch: int, isr=(1, 2), configs=None) -> None:
    """LEADER_AND_ISR of ``topic`` partition 0 (replicas 1 and 2) to brokers ``to``,
    with the topic's ``configs`` (a dict) if given."""
    brokers = tuple(MetadataBroker(i, "127.0.0.1", b.port, b.unix_path) for i, b in pair.items())
    topic_configs = () if configs is None else (rproto.TopicConfigs(topic, tuple(
        TopicConfigEntry(k, v) for k, v in configs.items())),)
    body = rproto.LeaderAndIsrRequest(CONTROLLER, 1, (rproto.LeaderAndIsrPartition(
        topic, 0, leader, epoch, tuple(isr), 0, (1, 2)),), topic_configs, brokers)
    for broker_id in to:
        answer = ask(pair[broker_id], body, rproto.LeaderAndIsrResponse)
        assert answer.error_code == ErrorCode.NONE
        assert [p.error_code for p in answer.partitions] == [ErrorCode.NONE]


def log_bytes(broker, topic: str) -> bytes:
    out = b""
    for log_dir in broker.settings["log.dirs"].split(","):
        where = os.path.join(log_dir, partition_dirname(topic, 0), "*.kafka")
        for path in sorted(glob.glob(where)):
            with open(path, "rb") as f:
                out += f.read()
    return out


def produce(broker, topic: str, payloads: list[bytes], acks: int = 1):
    with broker.client(broker.tcp, timeout=30) as client:
        return client.produce(topic, 0, encode_message_set(payloads), acks=acks,
                              timeout_ms=10000, raise_on_error=False)


def same_logs(a, b, topic: str, expected: bytes, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log_bytes(a, topic) == log_bytes(b, topic) == expected:
            return
        time.sleep(0.05)
    raise AssertionError(f"logs differ: {len(log_bytes(a, topic))} and "
                         f"{len(log_bytes(b, topic))} bytes, {len(expected)} expected\n"
                         f"{b.log()[-3000:]}")


def test_a_follower_copies_its_leader_byte_for_byte(pair):
    topic = new_topic("follow")
    lead(pair, (1, 2), topic, leader=1, epoch=1)
    sent = b""
    for i in range(5):
        payloads = [f"m{i}-{j}".encode() * (j + 1) for j in range(20)]
        assert produce(pair[1], topic, payloads).error_code == ErrorCode.NONE
        sent += encode_message_set(payloads)
    same_logs(pair[1], pair[2], topic, sent)
    # the leader's Unix socket is on this host: the follower fetches over it, not TCP
    fetcher = psutil.Process(pair[2].workers()["hb-replica"])
    assert not [c for c in fetcher.net_connections(kind="inet") if c.status != "LISTEN"]
    # acks=-1 is answered once the follower has it: the follower's fetches move
    # the leader's high watermark
    payloads = [b"all-in-sync" * 10]
    result = produce(pair[1], topic, payloads, acks=-1)
    assert result.error_code == ErrorCode.NONE
    sent += encode_message_set(payloads)
    same_logs(pair[1], pair[2], topic, sent)


def test_an_entry_larger_than_replica_fetch_max_bytes_is_copied_whole(pair):
    topic = new_topic("large")
    lead(pair, (1, 2), topic, leader=1, epoch=1)
    payloads = [os.urandom(1024 * 1024 + 5000)]  # past the 1 MiB a fetch asks per partition
    sent = encode_message_set([b"small"]) + encode_message_set(payloads)
    assert produce(pair[1], topic, [b"small"]).error_code == ErrorCode.NONE
    assert produce(pair[1], topic, payloads).error_code == ErrorCode.NONE
    same_logs(pair[1], pair[2], topic, sent)


def test_a_returning_old_leader_cuts_exactly_where_the_logs_parted(pair):
    """Broker 1 leads epoch 1 and both hold A. Broker 2 is made leader of
    epoch 2 while broker 1 still believes it leads and appends B (which
    nobody copies); broker 2 appends C. Told it follows epoch 2, broker 1 cuts
    B away (its own epoch 1 ends at A on the new leader), whatever its high
    watermark, and copies C: both logs are A + C."""
    topic = new_topic("diverge")
    lead(pair, (1, 2), topic, leader=1, epoch=1)
    a = [b"a-%d" % i for i in range(30)]
    assert produce(pair[1], topic, a, acks=-1).error_code == ErrorCode.NONE
    same_logs(pair[1], pair[2], topic, encode_message_set(a))
    lead(pair, (2,), topic, leader=2, epoch=2, isr=(2,))
    b = [b"b-only-on-the-old-leader-%d" % i for i in range(50)]
    assert produce(pair[1], topic, b).error_code == ErrorCode.NONE
    c = [b"c-%d" % i for i in range(7)]
    assert produce(pair[2], topic, c).error_code == ErrorCode.NONE
    assert log_bytes(pair[1], topic) == encode_message_set(a) + encode_message_set(b)
    lead(pair, (1, 2), topic, leader=2, epoch=2, isr=(2,))
    same_logs(pair[1], pair[2], topic, encode_message_set(a) + encode_message_set(c))


def test_the_follower_carries_on_after_its_replica_process_or_writer_is_killed(pair):
    topic = new_topic("killed")
    lead(pair, (1, 2), topic, leader=1, epoch=1)
    sent = b""

    def more(i: int) -> None:
        nonlocal sent
        payloads = [f"k{i}-{j}".encode() * 20 for j in range(30)]
        assert produce(pair[1], topic, payloads).error_code == ErrorCode.NONE
        sent += encode_message_set(payloads)

    more(0)
    same_logs(pair[1], pair[2], topic, sent)
    for name in ("hb-replica", "hb-writer-0"):
        old = pair[2].workers()[name]
        os.kill(old, signal.SIGKILL)
        more(1 if name == "hb-replica" else 2)
        pair[2].wait_worker_replaced(name, old)
        more(3 if name == "hb-replica" else 4)
        same_logs(pair[1], pair[2], topic, sent)


def log_from(broker, topic: str) -> tuple[int, bytes]:
    """(log start, every byte from there) of a replica, from its segment files
    (listed again when retention deleted one between the listing and its read)."""
    [path] = [os.path.join(d, partition_dirname(topic, 0))
              for d in broker.settings["log.dirs"].split(",")
              if os.path.isdir(os.path.join(d, partition_dirname(topic, 0)))]
    for _ in range(100):
        names = sorted(n for n in os.listdir(path) if n.endswith(".kafka"))
        try:
            data = b""
            for name in names:
                with open(os.path.join(path, name), "rb") as f:
                    data += f.read()
        except FileNotFoundError:
            continue
        return int(names[0].split(".")[0]), data
    raise AssertionError(f"{path}: segments deleted under every read")


def test_a_follower_behind_the_leaders_log_start_restarts_its_log_there(pair):
    """The follower stops fetching (its hb-replica SIGSTOPped) while the
    leader appends and its retention deletes past the follower's log end.
    Back, the follower is answered OFFSET_OUT_OF_RANGE, asks the leader's log
    start, has its writer restart its log there, and copies on from there:
    both copies hold the same bytes where both have the log."""
    topic = new_topic("behind")
    lead(pair, (1, 2), topic, leader=1, epoch=1,
         configs={"segment.bytes": "1024", "retention.bytes": "2048"})
    first = [b"early-%d" % i * 8 for i in range(5)]
    assert produce(pair[1], topic, first).error_code == ErrorCode.NONE
    same_logs(pair[1], pair[2], topic, encode_message_set(first))
    behind = len(encode_message_set(first))
    replica = psutil.Process(pair[2].workers()["hb-replica"])
    replica.suspend()
    # A fetch the follower had waiting at the leader is answered by the first of these
    # produces (on a loaded machine maybe a few), into its socket: back, the follower
    # appends that answer before it asks again. So the leader's log must start past
    # what that answer can hold: the first half of them (retention keeps 2,048 bytes).
    answered = behind
    try:
        for i in range(20):
            payloads = [b"late-%d-%d" % (i, j) * 6 for j in range(8)]
            assert produce(pair[1], topic, payloads).error_code == ErrorCode.NONE
            if i < 10:
                answered += len(encode_message_set(payloads))
        deadline = time.monotonic() + 10  # retention checks every 100 ms; CI is loaded
        while log_from(pair[1], topic)[0] <= answered:
            assert time.monotonic() < deadline, "the leader's retention did not run"
            time.sleep(0.02)
    finally:
        replica.resume()
    deadline = time.monotonic() + 10
    while True:
        (start1, data1), (start2, data2) = log_from(pair[1], topic), log_from(pair[2], topic)
        end1, end2 = start1 + len(data1), start2 + len(data2)
        if end1 == end2 and start2 > behind:
            common = max(start1, start2)
            if data1[common - start1:] == data2[common - start2:]:
                break
        assert time.monotonic() < deadline, (
            f"follower [{start2}, {end2}), leader [{start1}, {end1})\n{pair[2].log()[-3000:]}")
        time.sleep(0.05)
    deadline = time.monotonic() + 5  # (the line reaches the broker's log through a pipe)
    while "its log starts there now" not in pair[2].log():
        assert time.monotonic() < deadline, pair[2].log()[-3000:]
        time.sleep(0.05)
    # it goes on following as any follower does
    more = [b"after-the-restart"]
    assert produce(pair[1], topic, more, acks=-1).error_code == ErrorCode.NONE
    # (polled: the ISR may have shrunk to the leader alone while the follower was stopped)
    deadline = time.monotonic() + 10
    while not log_from(pair[2], topic)[1].endswith(encode_message_set(more)):
        assert time.monotonic() < deadline, pair[2].log()[-3000:]
        time.sleep(0.05)


def test_a_replaced_writer_refuses_and_accepts_acks_all_by_the_current_min_insync(pair):
    """The topic is created with min.insync.replicas=2 and its ISR is the leader
    alone; a LEADER_AND_ISR then says 1, later 2 again. A writer SIGKILLed
    after each (the supervisor replaces it) answers acks=-1 by the value the
    last LEADER_AND_ISR carried, not the one the topic was created with."""
    topic = new_topic("min-isr")
    lead(pair, (1,), topic, leader=1, epoch=1, isr=(1,), configs={"min.insync.replicas": "2"})
    assert produce(pair[1], topic, [b"refused"], acks=-1).error_code == \
        ErrorCode.NOT_ENOUGH_REPLICAS
    for value, code in (("1", ErrorCode.NONE), ("2", ErrorCode.NOT_ENOUGH_REPLICAS)):
        lead(pair, (1,), topic, leader=1, epoch=1, isr=(1,),
             configs={"min.insync.replicas": value})
        assert produce(pair[1], topic, [b"before"], acks=-1).error_code == code
        old = pair[1].workers()["hb-writer-0"]
        os.kill(old, signal.SIGKILL)
        pair[1].wait_worker_replaced("hb-writer-0", old)
        assert produce(pair[1], topic, [b"after"], acks=-1).error_code == code, value


def writer_counter(broker, name: str) -> int:
    """A process-board counter summed over the broker's writers, as ``top`` reads it."""
    from hostbroker.config import Config  # noqa: PLC0415
    from hostbroker.top import KIND_NAMES, attach  # noqa: PLC0415

    board, table, _ = attach(Config.build(overrides=[
        f"log.dirs={broker.settings['log.dirs']}", f"broker.id={broker.settings['broker.id']}"]))
    try:
        return sum(row["counters"][name] for row in board.snapshot()
                   if KIND_NAMES.get(row.get("kind")) == "writer")
    finally:
        board.close()
        table.close()


def test_messages_in_counts_produced_messages_only(pair):
    """acks=-1 produces move the leader's high watermark (each move wakes
    fetches parked on it) but count in its writer's ``messages_in`` only as
    the messages produced; the follower's writer counts what it copied in
    ``replica_messages_in``, and moves in ``hw_moves`` are the leader's."""
    topic = new_topic("counted")
    lead(pair, (1, 2), topic, leader=1, epoch=1)
    assert produce(pair[1], topic, [b"warm-up"], acks=-1).error_code == ErrorCode.NONE
    same_logs(pair[1], pair[2], topic, encode_message_set([b"warm-up"]))
    names = ("messages_in", "replica_messages_in", "hw_moves")
    before = {(b, n): writer_counter(pair[b], n) for b in (1, 2) for n in names}
    sent = encode_message_set([b"warm-up"])
    for i in range(6):
        payloads = [b"counted-%d-%d" % (i, j) for j in range(5)]
        assert produce(pair[1], topic, payloads, acks=-1).error_code == ErrorCode.NONE
        sent += encode_message_set(payloads)
    same_logs(pair[1], pair[2], topic, sent)
    # the follower's writer counts what it copied in the round after it wrote it
    deadline = time.monotonic() + 10
    while True:
        moved = {k: writer_counter(pair[k[0]], k[1]) - v for k, v in before.items()}
        if moved[(2, "replica_messages_in")] >= 30 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert moved[(1, "messages_in")] == 30
    assert moved[(1, "hw_moves")] >= 6
    assert moved[(1, "replica_messages_in")] == 0
    assert moved[(2, "messages_in")] == 0
    assert moved[(2, "replica_messages_in")] == 30
