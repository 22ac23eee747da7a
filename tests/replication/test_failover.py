"""Replication as one system: real ``hostbroker serve`` brokers on a real ZooKeeper, a
replicated topic made with ``topics create --replication-factor``, a producer with
acks=-1 that follows leaders, and faults caused for real: a leader SIGKILLed, a follower
SIGSTOPped past ``replica.lag.time.max.ms``, an old leader coming back.

Each test reads back every acknowledged message from the leaders afterwards, and
compares the replicas' bytes below the high watermark.
"""

from __future__ import annotations

import os
import signal
import time

import psutil

from hostbroker.log.hwcheckpoint import read_high_watermarks
from tests.replication.support import (
    BROKER_SESSION_MS, Feeder, Wire, assignment, create, fetch_all, kill_hard, poll,
    segment_bytes, settled, state)

TOPIC = "ha"


def read_back(brokers, zk, topic, partitions) -> dict[int, list[tuple[int, bytes]]]:
    out = {}
    for p in range(partitions):
        leader = state(zk, topic, p)["leader"]
        wire = Wire(brokers[leader].unix_path)
        try:
            out[p] = fetch_all(wire, topic, p)
        finally:
            wire.close()
    return out


def check_acked(feeder: Feeder, logs: dict[int, list[tuple[int, bytes]]]) -> None:
    where = {p: dict(log) for p, log in logs.items()}
    lost = [(p, off, v) for p, off, v in feeder.acked if where[p].get(off) != v]
    assert not lost, f"{len(lost)} of {len(feeder.acked)} acknowledged messages lost: {lost[:5]}"


def high_watermark(broker, topic, partition) -> int:
    wire = Wire(broker.unix_path)
    try:
        (t,) = wire.metadata([topic]).topics
        (p,) = [p for p in t.partitions if p.partition == partition]
        return p.high_watermark
    finally:
        wire.close()


def test_leader_killed_under_acks_all_loses_nothing(cluster, zookeeper, zk):
    create(zookeeper, TOPIC, 2, 3, "min.insync.replicas=2")
    poll(lambda: settled(zk, TOPIC, 2, 3), what="leaders and full ISRs")
    assert sorted(map(sorted, assignment(zk, TOPIC).values())) == [[1, 2, 3], [1, 2, 3]]
    feeder = Feeder(cluster, TOPIC, 2)
    try:
        poll(lambda: len(feeder.acked) >= 200, what="200 acknowledged before the kill")
        old = state(zk, TOPIC, 0)
        killed_at = kill_hard(cluster[old["leader"]])
        poll(lambda: state(zk, TOPIC, 0)["leader"] not in (-1, old["leader"]),
             timeout=BROKER_SESSION_MS / 1000 + 15, what="a new leader of partition 0")
        new = state(zk, TOPIC, 0)
        assert new["leader_epoch"] > old["leader_epoch"]
        assert old["leader"] not in new["isr"]
        count = len(feeder.acked)
        poll(lambda: len(feeder.acked) >= count + 200, what="200 acknowledged after the failover")
    finally:
        feeder.stop()
    cluster[old["leader"]].kill_tree()
    # produce was acknowledged again within the session timeout and a margin for this machine
    assert feeder.gaps and max(feeder.gaps) < BROKER_SESSION_MS / 1000 + 10, feeder.gaps
    del cluster[old["leader"]]
    check_acked(feeder, read_back(cluster, zk, TOPIC, 2))
    assert time.monotonic() - killed_at < 120


def test_old_leader_returns_truncates_and_matches(cluster, zookeeper, zk):
    create(zookeeper, TOPIC, 1, 3, "min.insync.replicas=2")
    poll(lambda: settled(zk, TOPIC, 1, 3), what="leader and full ISR")
    feeder = Feeder(cluster, TOPIC, 1)
    try:
        poll(lambda: len(feeder.acked) >= 100, what="100 acknowledged")
        old = state(zk, TOPIC, 0)["leader"]
        kill_hard(cluster[old])
        cluster[old].kill_tree()
        poll(lambda: state(zk, TOPIC, 0)["leader"] not in (-1, old), timeout=20,
             what="a new leader")
        count = len(feeder.acked)
        poll(lambda: len(feeder.acked) >= count + 100, what="100 more acknowledged")
        # the old leader comes back: it truncates to where it diverged and catches up
        cluster[old].start()  # the same broker.id, listeners and log dir
        poll(lambda: old in state(zk, TOPIC, 0)["isr"], timeout=30,
             what="the old leader back in the ISR")
    finally:
        feeder.stop()
    check_acked(feeder, read_back(cluster, zk, TOPIC, 1))
    leader = state(zk, TOPIC, 0)["leader"]
    poll(lambda: all(high_watermark(cluster[leader], TOPIC, 0) <= len(segment_bytes(b, TOPIC, 0))
                     for b in cluster.values()), what="every replica up to the high watermark")
    hw = high_watermark(cluster[leader], TOPIC, 0)
    reference = segment_bytes(cluster[leader], TOPIC, 0)[:hw]
    for broker_id, broker in cluster.items():
        assert segment_bytes(broker, TOPIC, 0)[:hw] == reference, f"broker {broker_id} differs"


def test_stopped_follower_leaves_isr_and_min_insync_refuses(cluster, zookeeper, zk):
    create(zookeeper, TOPIC, 1, 2, "min.insync.replicas=2")
    poll(lambda: settled(zk, TOPIC, 1, 2), what="leader and full ISR")
    s = state(zk, TOPIC, 0)
    leader = s["leader"]
    (follower,) = [b for b in s["isr"] if b != leader]
    wire = Wire(cluster[leader].unix_path)
    try:
        assert wire.produce_led(TOPIC, 0, [b"before"])[0] == 0
        # only the follower's fetcher stops: its broker stays registered, so it is the
        # leader that finds it lagging and shrinks the ISR
        tree = [p for p in psutil.Process(cluster[follower].proc.pid).children()
                if p.name().startswith("hb-replica")]
        assert len(tree) == 1, [p.name() for p in psutil.Process(cluster[follower].proc.pid).children()]
        for p in tree:
            p.send_signal(signal.SIGSTOP)
        try:
            # past replica.lag.time.max.ms the leader shrinks the ISR in ZooKeeper
            poll(lambda: state(zk, TOPIC, 0)["isr"] == [leader], timeout=20,
                 what="the stopped follower out of the ISR")
            code, _ = wire.produce(TOPIC, 0, [b"refused"])
            assert code == 23  # NOT_ENOUGH_REPLICAS
            assert wire.produce(TOPIC, 0, [b"acks one"], acks=1)[0] == 0
        finally:
            for p in tree:
                p.send_signal(signal.SIGCONT)
        poll(lambda: sorted(state(zk, TOPIC, 0)["isr"]) == sorted([leader, follower]),
             timeout=30, what="the follower back in the ISR")
        assert wire.produce(TOPIC, 0, [b"after"])[0] == 0
    finally:
        wire.close()
    values = [v for _, v in read_back(cluster, zk, TOPIC, 1)[0]]
    assert values == [b"before", b"acks one", b"after"]


def _stop_all(broker, sig) -> None:
    for p in [psutil.Process(broker.proc.pid), *psutil.Process(broker.proc.pid).children()]:
        p.send_signal(sig)


def test_a_restarted_follower_keeps_what_truncating_to_its_high_watermark_would_lose(
        cluster, zookeeper, zk):
    """The scenario that loses acknowledged messages when a returning replica cuts its
    log to its own high watermark (as Kafka 0.8 did): follower B holds every message
    acknowledged with acks=-1, but its high watermark lags (it learns the leader's with
    its next fetch, and its checkpoint lags more). B's fetcher and writer start over
    while leader A cannot answer (stopped), then A is lost and B becomes the leader. Cut to its high
    watermark, B would have dropped acknowledged messages; asking by leader epoch, B
    cuts nothing it cannot confirm, and once it leads, every acknowledged message is
    there. A, back, truncates to where it parts from B and matches it byte for byte."""
    create(zookeeper, TOPIC, 1, 2)
    poll(lambda: settled(zk, TOPIC, 1, 2), what="leader and full ISR")
    s = state(zk, TOPIC, 0)
    a = s["leader"]
    (b,) = [r for r in s["isr"] if r != a]
    wire = Wire(cluster[a].unix_path)
    acked = []
    try:
        for n in range(300):
            value = f"m{n}".encode()
            code, offset = wire.produce_led(TOPIC, 0, [value])
            assert code == 0, code
            acked.append((offset, value))
    finally:
        wire.close()
    # the high watermark B has stored lags what was acknowledged: a replica that cut
    # its log there on starting over (as 0.8 did) would drop acknowledged messages
    marks, problem = read_high_watermarks(cluster[b].settings["log.dirs"])
    assert problem is None
    assert max((hw for key, hw in marks.items() if tuple(key)[:2] == (TOPIC, 0)),
               default=0) <= acked[-1][0]
    _stop_all(cluster[a], signal.SIGSTOP)  # A answers nobody, its session runs out
    try:
        # B's follower side starts over (its fetcher and its writer killed and replaced,
        # its log recovered), as a follower does when told of a new leadership, while
        # A cannot tell it anything: B keeps its session, so it stays in the ISR
        workers = cluster[b].workers()
        for name in ("hb-replica", "hb-writer-0"):
            os.kill(workers[name], signal.SIGKILL)
        for name in ("hb-replica", "hb-writer-0"):
            cluster[b].wait_worker_replaced(name, workers[name])
        # A's session expires: the controller makes B the leader (it is in the ISR)
        poll(lambda: state(zk, TOPIC, 0)["leader"] == b, timeout=30, what="B leading")
    finally:
        _stop_all(cluster[a], signal.SIGCONT)
    got: dict[int, bytes] = {}

    def read_from_b() -> bool:  # once B has heard it leads (ZooKeeper says so first)
        wire = Wire(cluster[b].unix_path)
        try:
            got.update(fetch_all(wire, TOPIC, 0))
        finally:
            wire.close()
        return True

    poll(read_from_b, what="B answering as the leader")
    lost = [(o, v) for o, v in acked if got.get(o) != v]
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged messages lost: {lost[:3]}"
    # A comes back as a follower and ends byte-identical to B below the high watermark
    poll(lambda: sorted(state(zk, TOPIC, 0)["isr"]) == sorted([a, b]), timeout=30,
         what="A back in the ISR")
    hw = high_watermark(cluster[b], TOPIC, 0)
    assert hw >= acked[-1][0]
    poll(lambda: len(segment_bytes(cluster[a], TOPIC, 0)) >= hw, what="A caught up")
    assert segment_bytes(cluster[a], TOPIC, 0)[:hw] == segment_bytes(cluster[b], TOPIC, 0)[:hw]


def log_start(broker, topic: str, partition: int) -> int:
    path = os.path.join(broker.settings["log.dirs"], f"{topic}_{partition}")
    return min(int(n.split(".")[0]) for n in os.listdir(path) if n.endswith(".kafka"))


def test_a_follower_back_behind_the_leaders_log_start_restarts_its_log_there(
        cluster, zookeeper, zk):
    """A follower stopped while the leader's retention deletes past its log
    end: back, it restarts its log at the leader's log start, catches up,
    rejoins the ISR, and ``replicas verify`` finds the copies equal."""
    from tests.integration.cli import hostbroker  # noqa: PLC0415

    create(zookeeper, TOPIC, 1, 2, "segment.bytes=1024", "retention.bytes=2048")
    poll(lambda: settled(zk, TOPIC, 1, 2), what="leader and full ISR")
    s = state(zk, TOPIC, 0)
    leader = s["leader"]
    (follower,) = [b for b in s["isr"] if b != leader]
    wire = Wire(cluster[leader].unix_path)
    try:
        # ZooKeeper names the leader before the leader has been told (NOT_LEADER until then)
        poll(lambda: wire.produce(TOPIC, 0, [b"early-%d" % i * 8 for i in range(5)])[0] == 0,
             what="the leader taking its first produce")
        behind = len(segment_bytes(cluster[leader], TOPIC, 0))
        poll(lambda: len(segment_bytes(cluster[follower], TOPIC, 0)) == behind,
             what="the follower caught up")
        cluster[follower].stop()
        for i in range(20):
            assert wire.produce(TOPIC, 0, [b"late-%d-%d" % (i, j) * 6 for j in range(8)],
                                acks=1)[0] == 0
        poll(lambda: log_start(cluster[leader], TOPIC, 0) > behind, timeout=10,
             what="the leader's retention past the follower's log end")
        cluster[follower].start()
        poll(lambda: sorted(state(zk, TOPIC, 0)["isr"]) == sorted([leader, follower]),
             timeout=30, what="the follower back in the ISR")
        assert wire.produce(TOPIC, 0, [b"after"])[0] == 0
    finally:
        wire.close()
    assert log_start(cluster[follower], TOPIC, 0) > behind
    assert "its log starts there now" in cluster[follower].log()
    verified = []

    def equal() -> bool:
        verified[:] = [hostbroker("replicas", "verify", "--zookeeper", zookeeper.connect,
                                  "--topic", TOPIC)]
        return verified[0].returncode == 0
    poll(equal, timeout=15, every=0.5, what="replicas verify")
    assert "2 replicas equal below" in verified[0].stdout.decode()
