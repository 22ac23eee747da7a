"""acks=-1 latency against the follower's long poll: real brokers on a real ZooKeeper.

A follower fetches every partition it follows from one leader in one FETCH v1 that
long-polls ``replica.fetch.wait.max.ms`` at the leader. A partition whose append is
still at the follower's writer is not in that FETCH; if the FETCH then long-polled the
whole wait, the partition, back from its writer, could not fetch again until the long
poll ended, and the leader's high watermark (and every acks=-1 produce to it) waited
with it. Here the follower's writer is stopped for real (SIGSTOP) while it holds an
append, so the follower's next FETCH goes out without that partition, and an acks=-1
produce after the writer goes on must be acknowledged far sooner than the long poll.
"""

from __future__ import annotations

import signal
import time

import psutil
import pytest

from tests.replication.support import SETTINGS, Wire, poll, state
from tests.replication.test_failover import create, settled

TOPIC = "lat"
LONG_POLL_MS = 6000


@pytest.fixture
def pair(make_broker, tmp_path, zookeeper, zk):
    """Brokers 1 and 2, long-polling their leaders for ``LONG_POLL_MS``."""
    brokers = {}
    for broker_id in (1, 2):
        root = tmp_path / f"b{broker_id}"
        root.mkdir()
        brokers[broker_id] = make_broker(root=root, **{
            **SETTINGS, "zookeeper.connect": zookeeper.connect, "broker.id": broker_id,
            "replica.fetch.wait.max.ms": LONG_POLL_MS,
            "replica.lag.time.max.ms": 30000})
    poll(lambda: sorted(zk.get_children("/brokers/ids")) == ["1", "2"],
         what="two brokers registered")
    poll(lambda: zk.exists("/controller") is not None, what="a controller")
    return brokers


def test_partition_back_from_a_slow_writer_is_not_held_by_the_long_poll(pair, zookeeper, zk):
    create(zookeeper, TOPIC, 4, 2)
    poll(lambda: settled(zk, TOPIC, 4, 2), what="leaders and full ISRs")
    leaders = {p: state(zk, TOPIC, p)["leader"] for p in range(4)}
    leader = leaders[0]
    assert sum(1 for x in leaders.values() if x == leader) >= 2  # one link, two partitions
    (follower,) = [b for b in pair if b != leader]
    writer = psutil.Process(pair[follower].workers()["hb-writer-0"])
    wire = Wire(pair[leader].unix_path, timeout=30)
    try:
        # the leader ZooKeeper names takes produces once the controller told it
        assert wire.produce_led(TOPIC, 0, [b"first"], acks=-1, timeout_ms=20000)[0] == 0
        for n in range(5):  # flowing: the follower's fetch is parked at the leader
            started = time.monotonic()
            assert wire.produce(TOPIC, 0, [f"warm{n}".encode()], acks=-1,
                                timeout_ms=20000)[0] == 0
            assert time.monotonic() - started < LONG_POLL_MS / 2000
        writer.send_signal(signal.SIGSTOP)
        try:
            # the follower's parked fetch brings this; its append waits at the stopped
            # writer while the follower's next FETCH goes out without partition 0
            assert wire.produce(TOPIC, 0, [b"while stopped"], acks=1)[0] == 0
            time.sleep(0.5)
        finally:
            writer.send_signal(signal.SIGCONT)
        started = time.monotonic()
        code, _ = wire.produce(TOPIC, 0, [b"after"], acks=-1, timeout_ms=20000)
        took = time.monotonic() - started
    finally:
        wire.close()
    assert code == 0
    # the long poll would hold it for most of LONG_POLL_MS; a short poll: well under 2 s
    assert took < 2.0, f"acks=-1 took {took:.2f} s: held behind a {LONG_POLL_MS} ms long poll"
