"""``topics alter --zookeeper`` while the controller dies (issue 37): three real
brokers on a real ZooKeeper, a replicated topic of two partitions (two replicas
each) holding acknowledged messages.

The command writes ZooKeeper only (the config node and a change node, the
grown assignment); applying it is the controller's. Here the controller
broker is SIGKILLed around that write, at two moments:

- ``frozen``: every process of the controller broker is stopped (SIGSTOP)
  before the command runs, so the change is written while no controller can
  act on it, and killed right after: nothing of it was applied;
- ``racing``: the controller runs, and is killed the moment the command
  returns, while its watches are firing: some of it may be applied, some not;
- ``applying``: the controller runs, and is killed the moment the state node
  of the first new partition appears in ZooKeeper (a watch on it): the
  controller has begun applying the change (its leaders decided, maybe
  naming the dying broker) and has told the replicas little or nothing.

Either way the next controller finishes it from ZooKeeper at its take-over:
the new partitions get leaders among the live replicas, every live replica of
every partition (old and new) takes the new config (``partition.json``, and a
produce over the new ``max.message.bytes`` is refused by every leader), a
produce to the new partitions is acknowledged, and every message acknowledged
before is still there. When the dead broker returns, its replicas (of the new
partitions too) are created with the new config and rejoin the ISR.
"""

from __future__ import annotations

import json
import os
import signal
import threading

import psutil
import pytest

from hostbroker.errors import ErrorCode
from tests.cluster.test_alter_zk import alter, cluster  # noqa: F401 - fixture
from tests.replication.support import (
    BROKER_SESSION_MS,
    Wire,
    assignment,
    create,
    fetch_all,
    kill_hard,
    poll,
    segment_bytes,
    settled,
    state,
)

TOPIC = "crash"
LIMIT = 600  # max.message.bytes the alter sets: a 1000-byte value is over it


def overrides(broker, topic: str, partition: int) -> dict[str, str] | None:
    path = os.path.join(broker.settings["log.dirs"], f"{topic}_{partition}", "partition.json")
    try:
        with open(path) as f:
            return json.load(f)["config"]
    except (OSError, ValueError):
        return None


def produce(cluster, zk, topic: str, partition: int, value: bytes) -> tuple[int, int]:
    """(error code, offset) of one acks=-1 produce to the partition's leader."""
    leader = state(zk, topic, partition)["leader"]
    wire = Wire(cluster[leader].unix_path)
    try:
        return wire.produce(topic, partition, [value])
    finally:
        wire.close()


def produce_acked(cluster, zk, topic: str, partition: int, value: bytes) -> int:
    """The offset of ``value`` produced with acks=-1 to the partition's leader,
    asking again while the broker ZooKeeper names has not been told it leads
    (NOT_LEADER_FOR_PARTITION, refused before any append: nothing doubled)."""
    answers = []

    def acked() -> bool:
        answers.append(produce(cluster, zk, topic, partition, value))
        return answers[-1][0] != ErrorCode.NOT_LEADER_FOR_PARTITION

    poll(acked, timeout=20, what=f"{topic}-{partition}'s leader taking a produce")
    code, offset = answers[-1]
    assert code == ErrorCode.NONE, f"produce to {topic}-{partition}: {code}"
    return offset


def serves(cluster, zk, topic: str, partition: int) -> dict[int, bytes]:
    """offset -> value of every message below the high watermark, from the leader
    ZooKeeper names (an error, such as a leader not told yet, raises)."""
    leader = state(zk, topic, partition)["leader"]
    wire = Wire(cluster[leader].unix_path)
    try:
        return dict(fetch_all(wire, topic, partition))
    finally:
        wire.close()


def controller_of(zk) -> int | None:
    if zk.exists("/controller") is None:
        return None
    return json.loads(zk.get("/controller")[0])["brokerid"]


def stop_all(broker) -> None:
    """SIGSTOP every process of ``broker``: its ZooKeeper session lives on until
    it times out, but nothing of it acts."""
    root = psutil.Process(broker.proc.pid)
    for p in [root, *root.children(recursive=True)]:
        p.send_signal(signal.SIGSTOP)


def when_started(zk, topic: str, partition: int) -> threading.Event:
    """Set the moment the partition's state node exists (a ZooKeeper watch)."""
    started = threading.Event()
    path = f"/brokers/topics/{topic}/partitions/{partition}/state"

    def watch(event=None) -> None:
        if zk.exists(path, watch=watch) is not None:
            started.set()

    watch()
    return started


@pytest.mark.parametrize("moment", ["frozen", "racing", "applying"])
def test_an_alter_the_controller_dies_under_is_finished_by_the_next(cluster, zookeeper, zk,
                                                                   moment):
    create(zookeeper, TOPIC, 2, 2, "retention.ms=600000")
    poll(lambda: settled(zk, TOPIC, 2, 2), what="two partitions led")
    acked = []
    for n in range(40):
        p = n % 2
        value = f"before-{n}".encode()
        acked.append((p, produce_acked(cluster, zk, TOPIC, p, value), value))
    victim = controller_of(zk)
    assert victim in cluster
    if moment == "frozen":
        stop_all(cluster[victim])  # the change is written while it cannot act
    started = when_started(zk, TOPIC, 2) if moment == "applying" else None
    said = alter(zookeeper, TOPIC, 4, {"max.message.bytes": str(LIMIT)})
    if started is not None:
        assert started.wait(10), "the controller never began on the new partitions"
    kill_hard(cluster[victim])
    assert said.strip() == (f"altered topic {TOPIC}: partitions 2 -> 4, "
                            f"max.message.bytes={LIMIT}")
    dead = cluster.pop(victim)
    dead.kill_tree()
    poll(lambda: controller_of(zk) not in (None, victim),
         timeout=BROKER_SESSION_MS / 1000 + 20, what="another controller")
    grown = assignment(zk, TOPIC)
    assert sorted(grown) == [0, 1, 2, 3]

    def led() -> bool:
        return all(state(zk, TOPIC, p)["leader"] in cluster for p in range(4))

    poll(led, timeout=20, what="every partition led by a live broker")
    # every live replica of every partition, old and new, has the config
    replicas = [(b, p) for p, rs in grown.items() for b in rs if b in cluster]
    assert {p for _, p in replicas} == {0, 1, 2, 3}
    poll(lambda: all((overrides(cluster[b], TOPIC, p) or {}).get("max.message.bytes")
                     == str(LIMIT) for b, p in replicas), timeout=20,
         what="the config on every live replica")
    for b, p in replicas:  # the config kept with the change, the old key too
        assert overrides(cluster[b], TOPIC, p) == {"retention.ms": "600000",
                                                  "max.message.bytes": str(LIMIT)}
    for p in range(4):
        poll(lambda: produce(cluster, zk, TOPIC, p, b"x" * 1000)[0]
             == ErrorCode.MESSAGE_TOO_LARGE, timeout=10,
             what=f"partition {p}'s leader refusing a message over the new limit")
    for p in (2, 3):
        value = f"after-{p}".encode()
        acked.append((p, produce_acked(cluster, zk, TOPIC, p, value), value))
    for p in range(4):
        wanted = {o: v for q, o, v in acked if q == p}
        # (a leader just elected serves below its HW, which reaches its log end at
        # its first round: what it serves is read until it holds every acknowledged
        # message; a loss shows with the state and where each replica's log ends)
        try:
            poll(lambda: {o: serves(cluster, zk, TOPIC, p).get(o) for o in wanted} == wanted,
                 timeout=20, what=f"every acknowledged message of {TOPIC}-{p} served")
        except AssertionError as e:
            ends = {b: len(segment_bytes(cluster[b], TOPIC, p)) for b in grown[p] if b in cluster}
            raise AssertionError(f"{e}: state {state(zk, TOPIC, p)}, replica log bytes {ends}, "
                                 f"served offsets {sorted(serves(cluster, zk, TOPIC, p))}") from e

    # the dead broker returns: its replicas, new partitions included, are created
    # with the config and catch up into the ISR
    dead.start()  # the same broker.id, listeners and log dir
    cluster[victim] = dead
    mine = [p for p, rs in grown.items() if victim in rs]
    assert mine
    poll(lambda: all(victim in state(zk, TOPIC, p)["isr"] for p in mine), timeout=30,
         what="the returned broker back in every ISR")
    poll(lambda: all(overrides(dead, TOPIC, p) == {"retention.ms": "600000",
                                                   "max.message.bytes": str(LIMIT)}
                     for p in mine), timeout=20, what="the config on the returned broker")
