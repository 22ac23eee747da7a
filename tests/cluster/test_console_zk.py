"""``hostbroker produce``, ``consume`` and ``perf`` with ``--zookeeper``, run as a user would
(``python -m hostbroker`` subprocesses), against brokers that register themselves in a real
ZooKeeper under a chroot; and the one-line refusals of the target flags."""

from __future__ import annotations

import json

from hostbroker.cluster import paths
from tests.cluster.test_broker_registration import LEAN
from tests.cluster.test_discovery import wait_until
from tests.integration.broker import free_port
from tests.integration.cli import hostbroker, lines, one_line_error
from tests.integration.test_cli_mirror import _partitions as partition_values

CHROOT = "/hb"


def chroot_broker(make_broker, tmp_path, zookeeper, zk, broker_id: int, chroot: str = CHROOT):
    """A broker of its own root registered under ``chroot``; returned once registered."""
    root = tmp_path / f"b{broker_id}{chroot.replace('/', '-')}"
    root.mkdir()
    broker = make_broker(root=root, **{**LEAN, "zookeeper.connect": zookeeper.connect + chroot,
                                       "broker.id": broker_id})
    wait_until(lambda: zk.exists(chroot + paths.broker_path(broker_id)) is not None, 30)
    return broker


def registered(zk, chroot: str, topic: str, broker_ids) -> None:
    """Wait until every one of ``broker_ids`` registered ``topic`` under ``chroot``."""
    for broker_id in broker_ids:
        wait_until(lambda: zk.exists(chroot + paths.topic_broker_path(topic, broker_id))
                   is not None, 30)


def values(broker, topic: str) -> dict[int, list[bytes]]:
    """Every value of ``topic`` on ``broker``, by partition."""
    return partition_values(broker.unix, topic)


def test_produce_and_consume_through_zookeeper(make_broker, tmp_path, zookeeper, zk):
    brokers = {i: chroot_broker(make_broker, tmp_path, zookeeper, zk, i) for i in (1, 2)}
    connect = zookeeper.connect + CHROOT
    created = hostbroker("topics", "create", "--zookeeper", connect, "--topic", "t",
                         "--partitions", "2")
    assert created.returncode == 0, created.stderr
    registered(zk, CHROOT, "t", brokers)

    sent = [f"line-{i}" for i in range(40)]
    text = "".join(f"k{i % 8}:{line}\n" for i, line in enumerate(sent)).encode()
    produced = hostbroker("produce", "--zookeeper", connect, "--topic", "t",
                          "--key-separator", ":", input=text)
    assert (produced.returncode, produced.stderr) == (0, b"")
    held = {(b, p): vs for b, broker in brokers.items() for p, vs in values(broker, "t").items()}
    assert sorted(v.decode() for vs in held.values() for v in vs) == sorted(sent)
    assert len([pair for pair, vs in held.items() if vs]) >= 2  # keys spread over the pairs

    # Without --group: every pair, from the log start, and nothing kept in ZooKeeper.
    consumed = hostbroker("consume", "--zookeeper", connect, "--topic", "t",
                          "--from-beginning", "--max-messages", "40", "--timeout-ms", "20000")
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(lines(consumed)) == sorted(sent)
    assert [g for g in zk.get_children(CHROOT + paths.CONSUMERS)
            if g.startswith("hostbroker-console-")] == []
    assert zk.exists(paths.CONSUMERS) is None  # nothing outside the chroot
    missing = hostbroker("consume", "--zookeeper", connect, "--topic", "nope")
    assert missing.returncode == 1
    assert one_line_error(missing) == ("hostbroker consume: no topic nope (no live broker "
                                       "registered it in ZooKeeper)")

    # With --group: the group's offsets in ZooKeeper, a second run goes on from them.
    first = hostbroker("consume", "--zookeeper", connect, "--topic", "t", "--group", "g",
                       "--from-beginning", "--max-messages", "25", "--timeout-ms", "20000")
    assert first.returncode == 0, first.stderr
    offsets_path = CHROOT + paths.offsets_path("g", "t")
    stored = {n: int(zk.get(f"{offsets_path}/{n}")[0]) for n in zk.get_children(offsets_path)}
    assert sum(stored.values()) > 0
    # (--from-beginning: where the first run handed nothing out, the group has no offset)
    rest = hostbroker("consume", "--zookeeper", connect, "--topic", "t", "--group", "g",
                      "--from-beginning", "--max-messages", "15", "--timeout-ms", "20000")
    assert rest.returncode == 0, rest.stderr
    assert sorted(lines(first) + lines(rest)) == sorted(sent)
    nothing = hostbroker("consume", "--zookeeper", connect, "--topic", "t", "--group", "g",
                         "--timeout-ms", "1500")
    assert (nothing.returncode, lines(nothing)) == (0, [])


def test_perf_through_zookeeper(make_broker, tmp_path, zookeeper, zk):
    brokers = {i: chroot_broker(make_broker, tmp_path, zookeeper, zk, i) for i in (1, 2)}
    connect = zookeeper.connect + CHROOT
    for broker in brokers.values():
        with broker.client() as client:
            client.create_topic("bench", 2)
    registered(zk, CHROOT, "bench", brokers)

    produced = hostbroker("perf", "produce", "--zookeeper", connect, "--topic", "bench",
                          "--messages", "400", "--size", "20", "--batch-size", "20", "--json",
                          timeout=120)
    assert produced.returncode == 0, produced.stderr
    report = json.loads(produced.stdout)
    assert (report["messages"], report["failed"]) == (400, 0)
    held = {(b, p): len(vs) for b, broker in brokers.items()
            for p, vs in values(broker, "bench").items()}
    assert sum(held.values()) == 400
    assert sum(1 for n in held.values() if n) >= 2  # batches spread over the pairs

    consumed = hostbroker("perf", "consume", "--zookeeper", connect, "--topic", "bench",
                          "--messages", "400", "--processes", "2", "--json", timeout=120)
    assert consumed.returncode == 0, consumed.stderr
    report = json.loads(consumed.stdout)
    assert (report["messages"], report["payload_bytes"]) == (400, 400 * 20)

    short = hostbroker("perf", "consume", "--zookeeper", connect, "--topic", "bench",
                       "--messages", "401", "--timeout-ms", "300")
    assert short.returncode == 1
    assert one_line_error(short) == ("hostbroker perf consume: only 400 of 401 messages: "
                                      "nothing new for 300 ms")
    missing = hostbroker("perf", "consume", "--zookeeper", connect, "--topic", "nope",
                         "--messages", "1")
    assert missing.returncode == 1
    assert one_line_error(missing) == (f"hostbroker perf consume: no live broker registered "
                                        f"topic nope in ZooKeeper at {connect}")


def test_target_flags_are_refused_in_one_line(zookeeper):
    connect = zookeeper.connect
    both = ("--bootstrap", "tcp://127.0.0.1:9", "--zookeeper", connect)
    for command in (("produce",), ("consume",), ("perf", "produce", "--messages", "1",
                                                  "--size", "1"),
                    ("perf", "consume", "--messages", "1")):
        result = hostbroker(*command, "--topic", "t", *both, input=b"")
        assert result.returncode == 2, (command, result)
        assert one_line_error(result).endswith(
            "argument --zookeeper: not allowed with argument --bootstrap "
            f"(see hostbroker {' '.join(c for c in command if c in ('perf', 'produce', 'consume'))}"
            " --help)")

    bad = hostbroker("produce", "--zookeeper", "127.0.0.1:notaport", "--topic", "t", input=b"")
    assert bad.returncode == 2
    assert one_line_error(bad) == ("hostbroker produce: --zookeeper: '127.0.0.1:notaport' is "
                                   "not host:port")
    chroot = hostbroker("consume", "--zookeeper", zookeeper.server.connect + "/a/",
                        "--topic", "t")
    assert chroot.returncode == 2
    assert one_line_error(chroot) == ("hostbroker consume: --zookeeper: chroot '/a/' is not a "
                                      "ZooKeeper path")
    one = hostbroker("consume", "--zookeeper", connect, "--topic", "t", "--partition", "0")
    assert one.returncode == 2
    assert "--partition and --offset name one broker's partition" in one_line_error(one)

    nobody = f"127.0.0.1:{free_port()}"
    for command in (("produce",), ("consume",)):
        result = hostbroker(*command, "--zookeeper", nobody, "--topic", "t",
                            "--property", "zookeeper.connection.timeout.ms=500", input=b"x\n")
        assert result.returncode == 1, result
        assert one_line_error(result) == (f"hostbroker {command[0]}: --zookeeper: no ZooKeeper "
                                          f"server of {nobody} answered within 500 ms")
