"""Consumer groups on a standalone broker (docs/spec/groups.md), end to end: real
``hostbroker serve``, consumer processes (``ConsumerConnector`` without ZooKeeper,
members of the broker's group coordinator) and a producer thread.

Each consumer process prints what it is handed (``m 0 partition offset value``), every
commit the broker stored (``c 0 partition offset``) or refused (``refused code``), its
generation when it is given partitions (``g generation``) and the partitions given and
taken (``a``/``r`` with ``0-partition`` names), so the tests can check who owns what, that
every produced message is consumed and that duplicates are only hand-outs that were not
committed (tests/cluster/e2e_support.check_duplicates).
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import threading
import time

import pytest

from hostbroker.client import ConsumerConnector
from hostbroker.client.errors import BrokerError
from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from tests.cluster.e2e_support import GROUP, TOPIC, ConsumerProcess, check_duplicates, poll

PARTITIONS = 12
SESSION_MS = 1500
REBALANCE_MS = 3000
# A change settles within the session and the rebalance wait; the rest is this busy
# two-core machine starting processes.
SETTLE_S = (SESSION_MS + REBALANCE_MS) / 1000 + 10

CONSUMER_SCRIPT = """
import signal, sys, threading
from hostbroker.client import ConsumerConnector, ConsumerTimeoutError
from hostbroker.client.errors import BrokerError

uri, group, topic, session_ms = sys.argv[1:5]
lock = threading.Lock()

def say(*words):
    with lock:
        print(*words, flush=True)

class Reported:
    # The connector's own (fenced) offsets; every stored or refused commit is printed.
    def __init__(self, inner):
        self.inner = inner
    def fetch(self, group, keys):
        return self.inner.fetch(group, keys)
    def commit(self, group, offsets):
        try:
            self.inner.commit(group, offsets)
        except BrokerError as exc:
            say("refused", int(exc.code))
            raise
        for (t, p), offset in sorted(offsets.items()):
            say("c", 0, p, offset)
    def close(self):
        self.inner.close()

class Listener:
    def on_partitions_revoked(self, keys):
        say("r", *(f"0-{p}" for t, p in keys))
    def on_partitions_assigned(self, keys):
        say("g", connector.cluster.member.generation)
        say("a", *(f"0-{p}" for t, p in keys))

stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
connector = ConsumerConnector(uri, group_id=group, auto_offset_reset="earliest",
                              consumer_timeout_ms=100, fetch_wait_max_ms=50,
                              auto_commit_interval_ms=%(commit_ms)d,
                              session_timeout_ms=int(session_ms),
                              rebalance_timeout_ms=%(rebalance_ms)d,
                              rebalance_listener=Listener())
connector.offset_storage = Reported(connector.offset_storage)
(stream,) = connector.create_message_streams({topic: 1})[topic]
say("id", connector.cluster.member.member_id)
say("ready")
while not stop.is_set():
    try:
        m = next(stream)
    except ConsumerTimeoutError:
        continue
    say("m", 0, m.partition, m.offset, m.value.decode())
connector.shutdown()
say("bye")
"""


class Consumer(ConsumerProcess):
    """A member process (CONSUMER_SCRIPT) of GROUP over TOPIC."""

    def current(self) -> tuple[int, frozenset[int]]:
        """Its generation and the partitions it holds now, as its lines say."""
        generation, held = -1, set()
        for line in list(self.lines):
            words = line.split()
            if words[0] == "g":
                generation = int(words[1])
            elif words[0] == "a":
                held |= {int(w[2:]) for w in words[1:]}
            elif words[0] == "r":
                held -= {int(w[2:]) for w in words[1:]}
        return generation, frozenset(held)

    def refused(self) -> list[int]:
        return [int(line.split()[1]) for line in list(self.lines) if line.startswith("refused")]


class Feeder:
    """Values "000000", "000001"... to partition n % 12, about 50 a second, in a thread;
    ``acked`` the ones the broker took."""

    def __init__(self, broker):
        self.client = broker.client()
        self.acked: list[str] = []
        self.sent = 0  # the number of the next value: every later value is produced later
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping.is_set():
            n = self.sent
            value = f"{n:06d}"
            self.sent += 1
            try:
                self.client.produce(TOPIC, n % PARTITIONS, encode_message_set([value.encode()]))
            except (BrokerError, ConnectionError):  # a broker process replaced: not acked
                self.client.close()
            else:
                self.acked.append(value)
            self.stopping.wait(0.02)

    def stop(self) -> None:
        if not self.stopping.is_set():
            self.stopping.set()
            self.thread.join(30)
            self.client.close()


class Group:
    """The topic, a producer running, and the consumer processes started."""

    def __init__(self, broker, tmp_path):
        self.broker = broker
        self.tmp_path = tmp_path
        with broker.client() as client:
            client.create_topic(TOPIC, PARTITIONS)
        self.feeder = Feeder(broker)
        self.started: list[Consumer] = []

    def start(self, commit_ms: int = 200) -> Consumer:
        """A member whose auto.commit.interval.ms is ``commit_ms``."""
        script = self.tmp_path / f"member-{commit_ms}.py"
        script.write_text(CONSUMER_SCRIPT % {"commit_ms": commit_ms,
                                             "rebalance_ms": REBALANCE_MS})
        consumer = Consumer(script, self.broker.unix, SESSION_MS)
        self.started.append(consumer)
        return consumer


@pytest.fixture
def group(broker, tmp_path):
    """A :class:`Group`; its consumer processes and producer stopped after the test."""
    g = Group(broker, tmp_path)
    yield g
    g.feeder.stop()
    for consumer in g.started:
        consumer.kill()


def settled(consumers) -> bool:
    """The live consumers are one generation and each partition is held by exactly one."""
    states = [c.current() for c in consumers]
    if len({generation for generation, _ in states}) != 1:
        return False
    held = [p for _, partitions in states for p in partitions]
    return sorted(held) == list(range(PARTITIONS)) and all(p for _, p in states)


def wait_settled(consumers) -> float:
    started = time.monotonic()
    poll(lambda: settled(consumers), SETTLE_S, f"{len(consumers)} members to settle")
    return time.monotonic() - started


def sizes(consumers) -> list[int]:
    return sorted(len(c.current()[1]) for c in consumers)


def test_members_join_and_leave_while_a_producer_runs(group):
    live = [group.start()]
    wait_settled(live)
    assert sizes(live) == [12]
    for n in (3, 6):  # two join at once, then three
        live += [group.start() for _ in range(n - len(live))]
        wait_settled(live)
        assert sizes(live) == [12 // n] * n
    for n in (4, 1):  # members leave (LEAVE_GROUP on shutdown)
        while len(live) > n:
            live.pop(0).stop()
        wait_settled(live)
        assert sizes(live) == sorted(12 // n + (i < 12 % n) for i in range(n))
    group.feeder.stop()
    produced = set(group.feeder.acked)
    everyone = group.started
    poll(lambda: produced <= set().union(*(c.values() for c in everyone)), SETTLE_S,
         "every produced message to be consumed")
    live[0].stop()
    # Members that left committed before leaving: nothing of theirs was refused.
    assert [c.refused() for c in everyone] == [[]] * len(everyone)
    check_duplicates(everyone)


def test_a_killed_member_s_partitions_move_after_its_session(group):
    live = [group.start() for _ in range(3)]
    wait_settled(live)
    victim = live.pop(1)
    victim.proc.kill()
    killed = time.monotonic()
    victim.proc.wait(10)
    wait_settled(live)
    assert time.monotonic() - killed >= SESSION_MS / 1000 - 0.2
    assert sizes(live) == [6, 6]


def test_a_member_stopped_past_its_session_is_fenced_and_rejoins(group):
    feeder = group.feeder
    # No interval commit: what the stopped one handed out is still uncommitted.
    sleeper = group.start(commit_ms=600000)
    other = group.start()
    wait_settled([sleeper, other])
    handed = len(sleeper.messages())
    poll(lambda: len(sleeper.messages()) > handed, SETTLE_S, "the member to consume")
    generation, _ = sleeper.current()
    sleeper.suspend()
    # Without it, the other takes every partition once its session ended.
    poll(lambda: other.current()[1] == frozenset(range(PARTITIONS)), SETTLE_S,
         "the other member to take every partition")
    sleeper.resume()
    # Its commit of what it handed out is refused: the group has another member now.
    poll(lambda: sleeper.refused(), SETTLE_S, "the stopped member's commit to be refused")
    assert set(sleeper.refused()) <= {ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION}
    wait_settled([sleeper, other])
    assert sleeper.current()[0] > generation
    assert sizes([sleeper, other]) == [6, 6]
    mark = feeder.sent
    poll(lambda: any(int(v) >= mark for v in sleeper.values()), SETTLE_S,
         "the member to consume again")
    check_duplicates([sleeper, other])


# A broker that does not serve groups.


class NoGroupsProxy:
    """A TCP proxy to ``broker`` that answers every group request (api keys 8 to 13) with
    an UNSUPPORTED_VERSION error frame and closes, as a broker without groups does."""

    def __init__(self, broker):
        self.target = ("127.0.0.1", broker.port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.uri = f"tcp://127.0.0.1:{self.listener.getsockname()[1]}"
        self.refused: list[int] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._up, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._down, args=(upstream, client), daemon=True).start()

    def _up(self, client, upstream) -> None:
        buffered = b""
        try:
            while data := client.recv(65536):
                buffered += data
                while len(buffered) >= 8:
                    size, api_key = struct.unpack_from(">ih", buffered)
                    if len(buffered) < 4 + size:
                        break
                    frame, buffered = buffered[:4 + size], buffered[4 + size:]
                    if 8 <= api_key <= 13:
                        self.refused.append(api_key)
                        (correlation_id,) = struct.unpack_from(">i", frame, 8)
                        client.sendall(struct.pack(">iih", 6, correlation_id,
                                                   ErrorCode.UNSUPPORTED_VERSION))
                        raise ConnectionResetError
                    upstream.sendall(frame)
        except OSError:
            pass
        finally:
            client.close()
            upstream.close()

    @staticmethod
    def _down(upstream, client) -> None:
        try:
            while data := upstream.recv(65536):
                client.sendall(data)
        except OSError:
            pass
        finally:
            client.close()
            upstream.close()

    def close(self) -> None:
        self.listener.close()


def test_without_groups_on_the_broker_each_connector_reads_every_partition(broker, caplog):
    with broker.client() as client:
        client.create_topic("old", 2)
        for p in range(2):
            client.produce("old", p, encode_message_set([f"v{p}".encode()]))
    proxy = NoGroupsProxy(broker)
    config = {"group.id": "g", "auto.offset.reset": "earliest", "consumer.timeout.ms": 10000,
              "fetch.wait.max.ms": 50}
    try:
        with caplog.at_level("WARNING", logger="hostbroker.client.group"), \
                ConsumerConnector(proxy.uri, config) as one, \
                ConsumerConnector(proxy.uri, config) as two:
            for connector in (one, two):
                (stream,) = connector.create_message_streams({"old": 1})["old"]
                assert connector.cluster is None
                assert sorted(next(stream).value for _ in range(2)) == [b"v0", b"v1"]
    finally:
        proxy.close()
    assert proxy.refused == [8, 8]  # one join each, then no group request
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2, warnings
    assert all("does not serve consumer groups" in w for w in warnings), warnings


def test_a_slow_handler_keeps_its_session(broker):
    """Heartbeats come from a thread of their own: a reader that holds a message three
    session timeouts long stays a member, and the group does not rebalance."""
    with broker.client() as client:
        client.create_topic("slow", 2)
        for p in range(2):
            client.produce("slow", p, encode_message_set([b"x", b"y"]))
    config = {"group.id": "slow", "auto.offset.reset": "earliest", "session.timeout.ms": 600,
              "consumer.timeout.ms": 10000, "fetch.wait.max.ms": 50}
    with ConsumerConnector(broker.unix, config) as busy, \
            ConsumerConnector(broker.unix, config) as other:
        (slow,) = busy.create_message_streams({"slow": 1})["slow"]
        other.create_message_streams({"slow": 1})
        poll(lambda: busy.cluster.member.generation == other.cluster.member.generation
             and len(busy._owned) == len(other._owned) == 1, SETTLE_S, "the split")
        generation = busy.cluster.member.generation
        next(slow)
        time.sleep(3 * 0.6)  # the message handler at work
        assert next(slow).value == b"y"
        assert (busy.cluster.member.generation, other.cluster.member.generation) == (
            generation, generation)
        assert busy.cluster.member.session_lost is False


def test_the_group_settles_after_the_state_s_process_is_killed_in_a_rebalance(group):
    a, b, c = (group.start() for _ in range(3))
    wait_settled([a, b, c])
    # A rebalance that waits: c is stopped, b leaves, a's join waits for c.
    c.suspend()
    b.stop()
    poll(lambda: phase_of(group.broker) == "PREPARING_REBALANCE", SETTLE_S, "the rebalance")
    coordinator = group.broker.workers()["hb-coordinator"]
    os.kill(coordinator, signal.SIGKILL)
    group.broker.wait_worker_replaced("hb-coordinator", coordinator)
    c.resume()
    wait_settled([a, c])
    assert sizes([a, c]) == [6, 6]
    mark = group.feeder.sent
    for consumer in (a, c):
        poll(lambda: any(int(v) >= mark for v in consumer.values()), SETTLE_S,
             "each member to consume")
    check_duplicates([a, b, c])


def phase_of(broker) -> str:
    from hostbroker.client.coordinator_requests import CoordinatorClient

    client = CoordinatorClient([broker.unix], timeout=10, client_id="test")
    try:
        return client.describe_group(GROUP).phase
    finally:
        client.close()
