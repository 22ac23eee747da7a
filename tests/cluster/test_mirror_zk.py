"""``hostbroker mirror`` between brokers and clusters, run as a user would: source and
destination clusters are brokers that register themselves under their own chroot of one
real ZooKeeper (``/src``, ``/dst``); standalone ends are plain brokers.

Shared ends: the tests that leave their brokers alone (no stop, no setting changed) use
the module's ends (``shared_ends``), each test with topics and a group of its own that
only its ``--topics`` matches; the one that stops a source broker keeps its own."""

from __future__ import annotations

import signal

import pytest

from hostbroker.cluster import paths
from hostbroker.log.message import encode_message_set
from tests.cluster.test_console_zk import chroot_broker, registered, values
from tests.cluster.test_discovery import wait_until
from tests.integration.broker import Broker, free_port
from tests.integration.cli import hostbroker, lines, one_line_error, running, terminate
from tests.integration.wire_helpers import new_topic

FAST = ("--consumer-property", "zookeeper.session.timeout.ms=1000",
        "--consumer-property", "rebalance.backoff.ms=200")


class End:
    """One end of a mirror: a standalone broker, or the brokers registered under a chroot."""

    def __init__(self, make_broker, tmp_path, zookeeper, zk, kind: str, chroot: str,
                 brokers: int = 2):
        self.kind, self.chroot, self.zk = kind, chroot, zk
        if kind == "cluster":
            self.brokers = {i: chroot_broker(make_broker, tmp_path, zookeeper, zk, i, chroot)
                            for i in range(1, brokers + 1)}
            self.connect = zookeeper.connect + chroot
        else:
            root = tmp_path / f"standalone{chroot.replace('/', '-')}"
            root.mkdir()
            self.brokers = {0: make_broker(root=root)}

    def args(self, direction: str) -> tuple[str, str]:
        if self.kind == "cluster":
            return f"--{direction}-zookeeper", self.connect
        return f"--{direction}", self.brokers[0].unix

    @property
    def name(self) -> str:
        return f"zookeeper {self.connect}" if self.kind == "cluster" else self.brokers[0].unix

    def create(self, topic: str, pairs: int) -> None:
        """``topic`` with ``pairs`` partitions in all (split evenly over a cluster's brokers)."""
        each = pairs // len(self.brokers)
        for broker in self.brokers.values():
            with broker.client() as client:
                client.create_topic(topic, each)
        if self.kind == "cluster":
            registered(self.zk, self.chroot, topic, self.brokers)

    def by_index(self, topic: str) -> list[list[bytes]]:
        """Every partition's values, in index order: sorted (broker_id, partition)."""
        held = {(b, p): vs for b, broker in self.brokers.items()
                for p, vs in values(broker, topic).items()}
        return [held[pair] for pair in sorted(held)]

    def produce_each(self, topic: str, messages: list[list[bytes]]) -> None:
        """``messages[i]`` to the partition of index i."""
        for index, mine in enumerate(messages):
            self.produce(topic, index, mine)

    def produce(self, topic: str, index: int, messages: list[bytes]) -> None:
        pair = sorted((b, p) for b, broker in self.brokers.items()
                      for p in values(broker, topic))[index]
        with self.brokers[pair[0]].client() as client:
            for i in range(0, len(messages), 1000):
                client.produce(topic, pair[1], encode_message_set(messages[i:i + 1000]))


class SharedEnds:
    """``ends(kind, chroot)``: the module's End of that kind and chroot, started on first
    use and kept for the module: clusters under a module chroot of the module's
    ZooKeeper (read through ``zk``, a client on that chroot)."""

    def __init__(self, server, tmp_path):
        from kazoo.client import KazooClient

        self.tmp_path = tmp_path
        self.started: list[Broker] = []
        self.ends: dict[tuple[str, str], End] = {}
        chroot = "/mirror-shared"
        root = KazooClient(hosts=server.connect, timeout=5.0)
        root.start(timeout=10)
        try:
            root.ensure_path(chroot)
        finally:
            root.stop()
            root.close()
        self.zookeeper = type("ModuleChroot", (), {"connect": server.connect + chroot})()
        self.zk = KazooClient(hosts=self.zookeeper.connect, timeout=5.0)
        self.zk.start(timeout=10)

    def _make(self, root, **settings) -> Broker:
        broker = Broker(root, **settings)
        self.started.append(broker)
        return broker.start()

    def __call__(self, kind: str, chroot: str) -> End:
        if (kind, chroot) not in self.ends:
            self.ends[kind, chroot] = End(self._make, self.tmp_path, self.zookeeper, self.zk,
                                          kind, chroot)
        return self.ends[kind, chroot]

    def close(self) -> None:
        for broker in self.started:
            broker.finish()
        self.zk.stop()
        self.zk.close()


@pytest.fixture(scope="module")
def shared_ends(zookeeper_of_module, tmp_path_factory):
    """Ends shared by the tests that do not stop, restart or reconfigure a broker: each
    test creates its own topics (``new_topic``) and mirrors them with a group of its own,
    and asserts only about those, so no test sees another's."""
    ends = SharedEnds(zookeeper_of_module, tmp_path_factory.mktemp("mirror"))
    try:
        yield ends
    finally:
        ends.close()


def cluster_to_broker(make_broker, tmp_path, zookeeper, zk) -> tuple[End, End]:
    """A source cluster of two brokers under /src and a destination broker."""
    return (End(make_broker, tmp_path, zookeeper, zk, "cluster", "/src"),
            End(make_broker, tmp_path, zookeeper, zk, "broker", "/dst"))


def mirror_args(source: End, destination: End, topics: str, group: str,
                commit_interval_ms: int) -> tuple[str, ...]:
    return ("mirror", *source.args("from"), *destination.args("to"), "--topics", topics,
            "--group", group, "--commit-interval-ms", str(commit_interval_ms), *FAST)


def in_order_within(merged: list[bytes], sources: list[list[bytes]]) -> bool:
    """``merged`` is exactly the ``sources`` interleaved, each keeping its order."""
    rest = list(merged)
    for source in sources:
        mine = set(source)
        if [v for v in rest if v in mine] != source:
            return False
        rest = [v for v in rest if v not in mine]
    return rest == []


T_COUNTS = [3, 5, 0, 4]
U_COUNTS = [2, 1, 2, 1]


@pytest.mark.parametrize("source_kind, destination_kind", [
    ("cluster", "cluster"), ("cluster", "broker"), ("broker", "cluster"), ("broker", "broker")])
def test_mirror_copies_partition_for_partition(shared_ends, source_kind, destination_kind):
    source = shared_ends(source_kind, "/src")
    destination = shared_ends(destination_kind, "/dst")
    # names of this test's own ("t-...", "u-...": sorted, t before u)
    t_name, u_name, other_name = new_topic("t"), new_topic("u"), new_topic("other")
    group = new_topic("copier")
    source.create(t_name, 4)
    source.create(u_name, 4)
    source.create(other_name, 2)
    destination.create(u_name, 2)  # fewer: index i goes to i % 2
    t = [[b"t-%d-%d" % (i, n) for n in range(count)] for i, count in enumerate(T_COUNTS)]
    u = [[b"u-%d-%d" % (i, n) for n in range(count)] for i, count in enumerate(U_COUNTS)]
    source.produce_each(t_name, t)
    source.produce_each(u_name, u)
    source.produce(other_name, 0, [b"not copied"])
    total = sum(T_COUNTS) + sum(U_COUNTS)

    args = mirror_args(source, destination, f"{t_name}|{u_name}", group, 100)
    first = hostbroker(*args, "--max-messages", str(total), "--timeout-ms", "20000")
    assert first.returncode == 0, first.stderr
    assert lines(first) == [f"mirrored {total} messages of {t_name}, {u_name} from "
                            f"{source.name} to {destination.name}"]
    # t was missing: created with as many partitions (pairs) as the source's, copied index
    # for index; u has 2: index i to i % 2, each source partition in order.
    assert destination.by_index(t_name) == t
    copied_u = destination.by_index(u_name)
    assert len(copied_u) == 2
    assert in_order_within(copied_u[0], [u[0], u[2]])
    assert in_order_within(copied_u[1], [u[1], u[3]])
    if destination_kind == "cluster":  # ceil(4 pairs / 2 live brokers) on each broker
        assert {b: len(values(broker, t_name))
                for b, broker in destination.brokers.items()} == {1: 2, 2: 2}
    with destination.brokers[min(destination.brokers)].client() as client:
        (other,) = client.metadata([other_name]).topics
    assert other.partitions == ()

    if source_kind == "cluster":  # offsets in the source's ZooKeeper, by broker-partition
        zk = source.zk
        path = source.chroot + paths.offsets_path(group, t_name)
        stored = {paths.parse_partition_name(n): int(zk.get(f"{path}/{n}")[0])
                  for n in zk.get_children(path)}
        expected = {(b, p): len(encode_message_set(t[i]))
                    for i, (b, p) in enumerate([(1, 0), (1, 1), (2, 0), (2, 1)]) if t[i]}
        assert stored == expected
    again = hostbroker(*args, "--timeout-ms", "1500")  # everything was committed
    assert again.returncode == 0, again.stderr
    assert lines(again)[0].startswith("mirrored 0 messages")


def test_mirror_killed_mid_copy_and_run_again_loses_nothing(shared_ends):
    source, destination = shared_ends("cluster", "/src"), shared_ends("broker", "/dst")
    feed, group = new_topic("feed"), new_topic("m")
    source.create(feed, 2)
    sent = [[b"feed-%d-%06d" % (i, n) for n in range(15000)] for i in range(2)]
    source.produce_each(feed, sent)
    args = mirror_args(source, destination, feed, group, 50)

    def copied() -> int:
        with destination.brokers[0].client() as client:
            (found,) = client.metadata([feed]).topics
        return sum(p.log_end_offset for p in found.partitions)

    with running(*args) as proc:
        wait_until(lambda: copied() > 0 or proc.poll() is not None, 30)
        # Mid-copy: the first commit has happened and the copy is not done.
        wait_until(lambda: source.zk.exists(source.chroot + paths.offsets_path(group, feed))
                   is not None, 30)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    before = destination.by_index(feed)
    assert 0 < sum(map(len, before)) < 30000, "the copy was not cut short"

    # The new run waits for the killed one's session to end, then goes on from the
    # last commit: some messages are copied twice, none is lost.
    rest = hostbroker(*args, "--timeout-ms", "5000", timeout=120)
    assert rest.returncode == 0, rest.stderr
    after = destination.by_index(feed)
    for i in range(2):
        kept = len(before[i])
        assert after[i][:kept] == before[i] == sent[i][:kept]
        resumed = after[i][kept:]
        start = len(sent[i]) - len(resumed)
        assert 0 <= start <= kept and resumed == sent[i][start:], (i, kept, start)


def settled_split(zk, chroot: str, group: str, topic: str, pairs: int) -> bool:
    """Two members registered, and every pair owned, half by each (read while the group
    may still be rebalancing: a node that goes between two reads means not yet)."""
    from kazoo.exceptions import NoNodeError

    owners_path = chroot + paths.owners_path(group, topic)
    try:
        ids = set(zk.get_children(chroot + paths.group_ids_path(group)))
        held = [paths.decode_owner(zk.get(f"{owners_path}/{n}")[0], n)[0]
                for n in zk.get_children(owners_path)]
    except NoNodeError:
        return False
    return (len(ids) == 2 and len(held) == pairs and set(held) == ids
            and all(held.count(member) == pairs // 2 for member in ids))


def test_two_mirrors_of_one_group_split_the_source_partitions(shared_ends):
    source, destination = shared_ends("cluster", "/src"), shared_ends("broker", "/dst")
    topic, group = new_topic("t"), new_topic("pair")
    source.create(topic, 4)
    destination.create(topic, 4)
    args = mirror_args(source, destination, topic, group, 100)
    with running(*args) as one, running(*args) as two:
        wait_until(lambda: settled_split(source.zk, source.chroot, group, topic, 4), 30)
        counts = [5, 7, 11, 13]
        sent = [[b"t-%d-%d" % (i, n) for n in range(c)] for i, c in enumerate(counts)]
        source.produce_each(topic, sent)
        wait_until(lambda: sum(map(len, destination.by_index(topic))) >= sum(counts), 30)
        outs = [terminate(proc) for proc in (one, two)]
    assert [proc.returncode for proc in (one, two)] == [0, 0], outs
    # The range rebalance gives the first member (by id) pairs 0-1, the other 2-3; each
    # mirror copied exactly the messages of its own.
    reported = sorted(int(out.decode().split()[1]) for out, _ in outs)
    assert reported == sorted([counts[0] + counts[1], counts[2] + counts[3]])
    assert destination.by_index(topic) == sent


def test_mirror_end_flags_are_refused_in_one_line(zookeeper):
    connect = zookeeper.connect
    uri = "tcp://127.0.0.1:9"
    for args, needle in [
        (("--to", uri), "one of the arguments --from --from-zookeeper is required"),
        (("--from", uri), "one of the arguments --to --to-zookeeper is required"),
        (("--from", uri, "--from-zookeeper", connect, "--to", uri),
         "argument --from-zookeeper: not allowed with argument --from"),
        (("--from-zookeeper", connect, "--to", uri, "--to-zookeeper", connect),
         "argument --to-zookeeper: not allowed with argument --to"),
        (("--from-zookeeper", zookeeper.server.connect + "/src/", "--to", uri),
         "--from-zookeeper: chroot '/src/' is not a ZooKeeper path"),
        (("--from", uri, "--to-zookeeper", "nohost"), "--to-zookeeper: 'nohost' is not host:port"),
    ]:
        result = hostbroker("mirror", "--topics", "t", *args)
        assert result.returncode == 2, (args, result)
        assert needle in one_line_error(result), args
    nobody = f"127.0.0.1:{free_port()}"
    for args, option in [(("--from-zookeeper", nobody, "--to", uri), "--from-zookeeper"),
                         (("--from", uri, "--to-zookeeper", nobody), "--to-zookeeper")]:
        result = hostbroker("mirror", "--topics", "t", *args,
                            "--consumer-property", "zookeeper.connection.timeout.ms=300",
                            "--producer-property", "zookeeper.connection.timeout.ms=300")
        assert result.returncode == 1
        assert one_line_error(result) == (f"hostbroker mirror: {option}: no ZooKeeper server "
                                          f"of {nobody} answered within 300 ms")


def test_a_source_broker_that_leaves_shifts_the_indices_and_loses_nothing(make_broker, tmp_path,
                                                                          zookeeper, zk):
    """Ends of its own: it stops a source broker."""
    source, destination = cluster_to_broker(make_broker, tmp_path, zookeeper, zk)
    source.create("t", 2)  # pairs (1, 0) and (2, 0): indices 0 and 1
    destination.create("t", 2)
    early = [[b"early-%d-%d" % (i, n) for n in range(4)] for i in range(2)]
    source.produce_each("t", early)
    args = mirror_args(source, destination, "t", "m", 100)
    with running(*args) as proc:
        wait_until(lambda: destination.by_index("t") == early, 30)
        source.brokers[1].stop()  # its registration goes: (2, 0) is now index 0
        # The group rebalanced without it (its owner node went), so the mirror's view of
        # the pairs, kept by the same watches, has it gone too.
        wait_until(lambda: zk.exists(source.chroot + paths.owner_path("m", "t", 1, 0)) is None,
                   30)
        late = [b"late-%d" % n for n in range(5)]
        with source.brokers[2].client() as client:
            client.produce("t", 0, encode_message_set(late))
        wait_until(lambda: sum(map(len, destination.by_index("t"))) >= 13, 30)
        out, err = terminate(proc)
    assert proc.returncode == 0, err
    assert out.decode().startswith("mirrored 13 messages of t")
    # Broker 2's partition went to destination partition 1, then (index 0) to partition 0:
    # every message copied once, each run of it in order.
    assert destination.by_index("t") == [early[0] + late, early[1]]
