"""ZooKeeper is not trusted blindly (issue 34), for real: a broker's nodes deleted,
rewritten or forged by another session are put back by its registrar with one
line; phantom numbers in ZooKeeper are left out by every client that reads it,
with one line, while memory stays bounded; a second broker with a live broker's
``broker.id`` never accepts a connection and exits non-zero with one line.

Shared broker: the tests that only read the cluster with clients (the producer, the
group consumer, the Spark snapshot and planner, the client bounds) share one broker 1
in a chroot of their own (``shared``), the phantom nodes, groups and topics other than
``t`` they make removed after each (the planner plans every topic); the registrar tests
keep their own broker (they delete, rewrite and forge its registration and count its
lines of repair, which the registrar says at most once a while per node and backs off)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time

import psutil
import pytest

from hostbroker.client import ConsumerConnector, Producer
from hostbroker.cluster import paths, zkread
from hostbroker.cluster.discovery import read_snapshot
from hostbroker.log.message import encode_message_set
from tests.cluster.test_broker_registration import LEAN, cluster_broker, node, registered
from tests.cluster.test_discovery import wait_until
from tests.integration.wire_helpers import new_topic

REPAIR_S = 5  # "within a few seconds"


def owner_of(zk, path: str) -> int | None:
    """The session holding ``path`` (None while it is gone: a repair deletes a forged
    node before it creates ours)."""
    from kazoo.exceptions import NoNodeError

    try:
        return zk.get(path)[1].ephemeralOwner
    except NoNodeError:
        return None


def put_back_lines(broker, path: str) -> list[str]:
    return [line for line in broker.log().splitlines()
            if f"{path} was " in line and "put it back" in line]


@pytest.fixture
def other_session(zookeeper):
    """A second kazoo session: anyone else writing to the cluster's ZooKeeper."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zookeeper.connect, timeout=5.0)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def live(make_broker, tmp_path, zookeeper, zk):
    """Broker 1 registered, with topic ``t`` of 2 partitions registered too."""
    broker = cluster_broker(make_broker, tmp_path, zookeeper, zk, 1)
    with broker.client() as c:
        c.create_topic("t", 2)
    wait_until(lambda: zk.exists(paths.topic_broker_path("t", 1)) is not None)
    return broker


@pytest.fixture(scope="module")
def shared_cluster(zookeeper_of_module, tmp_path_factory):
    """Broker 1 with topic ``t`` of 2 partitions, in a chroot of its own, for the
    tests that only read the cluster (see the module's docstring)."""
    from tests.cluster.conftest import broker_in_chroot
    from tests.cluster.zkfixtures import kazoo

    with broker_in_chroot(zookeeper_of_module, tmp_path_factory.mktemp("trust"),
                          "/shared-trust", **LEAN) as (broker, zookeeper):
        with broker.client() as c:
            c.create_topic("t", 2)
        with kazoo(zookeeper.connect) as zk:
            wait_until(lambda: zk.exists(paths.topic_broker_path("t", 1)) is not None)
        yield broker, zookeeper


@pytest.fixture
def shared(shared_cluster):
    """(the shared broker 1, its ZooKeeper, a kazoo client on it); the nodes a test
    forges there (phantom, wide, /brokers/ids/77), its groups and the topics it
    creates on the broker are deleted after it."""
    from tests.cluster.zkfixtures import kazoo

    broker, zookeeper = shared_cluster
    with kazoo(zookeeper.connect) as zk:
        try:
            yield broker, zookeeper, zk
        finally:
            for path in (paths.topic_path("phantom"), paths.topic_path("wide"),
                         f"{paths.BROKER_IDS}/77", paths.CONSUMERS):
                if zk.exists(path):
                    zk.delete(path, recursive=True)
            for topic in zk.get_children(paths.BROKER_TOPICS):
                if topic != "t":
                    with broker.client() as c:
                        c.delete_topic(topic)
                    wait_until(lambda: zk.exists(paths.topic_path(topic)) is None)  # noqa: B023


# -- the registrar puts its nodes back --------------------------------------------------

def test_a_deleted_registration_is_put_back_with_one_line(live, zk):
    session = zk.get(paths.broker_path(1))[1].ephemeralOwner
    for path in (paths.broker_path(1), paths.topic_broker_path("t", 1)):
        want = node(zk, path)
        zk.delete(path)
        wait_until(lambda: node(zk, path) == want, REPAIR_S)  # noqa: B023 - waited for here
        assert zk.get(path)[1].ephemeralOwner == session
        wait_until(lambda: len(put_back_lines(live, path)) == 1, REPAIR_S)  # noqa: B023
        assert "was deleted by someone else" in put_back_lines(live, path)[0]
    assert json.loads(node(zk, paths.broker_path(1))) == registered(live, 1)


def test_a_rewritten_registration_is_put_back(live, zk):
    path = paths.broker_path(1)
    forged = paths.encode_broker(paths.BrokerInfo(1, "127.0.0.1", 1, None))
    zk.set(path, forged)
    wait_until(lambda: json.loads(node(zk, path)) == registered(live, 1), REPAIR_S)
    wait_until(lambda: len(put_back_lines(live, path)) == 1, REPAIR_S)
    assert "was changed by someone else" in put_back_lines(live, path)[0]
    topic = paths.topic_broker_path("t", 1)
    zk.set(topic, b"10000000")
    wait_until(lambda: node(zk, topic) == b"2", REPAIR_S)


def test_a_registration_forged_by_another_session_is_taken_back(live, zk, other_session):
    path = paths.broker_path(1)
    ours = zk.get(path)[1].ephemeralOwner
    forged = paths.encode_broker(paths.BrokerInfo(1, "127.0.0.1", 1, None))
    # At once: between a delete and a create the registrar may put its own node back.
    forgery = other_session.transaction()
    forgery.delete(path)
    forgery.create(path, forged, ephemeral=True)
    assert all(r is True or isinstance(r, str) for r in forgery.commit())
    wait_until(lambda: owner_of(zk, path) == ours, REPAIR_S)
    assert json.loads(node(zk, path)) == registered(live, 1)
    wait_until(lambda: len(put_back_lines(live, path)) == 1, REPAIR_S)
    assert "replaced by another session" in put_back_lines(live, path)[0]
    with live.client() as c:
        assert c.metadata().broker_id == 1


def test_a_node_rewritten_over_and_over_costs_the_registrar_little(live, zk):
    """A writer racing the repair neither makes the registrar spin nor floods the log."""
    path = paths.broker_path(1)
    registrar = psutil.Process(live.workers()["hb-registrar"])
    cpu_before = sum(registrar.cpu_times()[:2])
    forged = paths.encode_broker(paths.BrokerInfo(1, "127.0.0.1", 1, None))
    deadline = time.monotonic() + 4
    writes = 0
    while time.monotonic() < deadline:
        zk.set(path, forged)
        writes += 1
        time.sleep(0.005)
    wait_until(lambda: json.loads(node(zk, path)) == registered(live, 1), 15)
    cpu = sum(registrar.cpu_times()[:2]) - cpu_before
    assert writes > 100
    assert cpu < 2.0, f"registrar used {cpu:.2f} s of CPU for {writes} rewrites"
    assert len(put_back_lines(live, path)) == 1, live.log()


# -- clients leave phantom numbers out ---------------------------------------------------

def rss() -> int:
    return psutil.Process().memory_info().rss


class Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.fixture
def warnings_of_cluster():
    handler = Lines()
    logger = logging.getLogger("hostbroker.cluster")
    logger.addHandler(handler)
    yield handler.lines
    logger.removeHandler(handler)


PHANTOM = 1_000_000


def test_a_phantom_partition_count_is_left_out_by_the_producer(shared, warnings_of_cluster):
    live, zookeeper, zk = shared
    phantom = paths.topic_broker_path("phantom", 1)
    zk.create(phantom, str(PHANTOM).encode(), makepath=True)
    before = rss()
    with Producer(zookeeper_connect=zookeeper.connect) as producer:
        for i in range(20):
            producer.send("t", f"m{i}".encode())
        producer.flush()
        time.sleep(1.0)  # the view refreshes meanwhile
    grown = rss() - before
    assert grown < 40 << 20, f"RSS grew by {grown >> 20} MiB"
    said = [line for line in warnings_of_cluster if phantom in line]
    assert len(said) == 1, warnings_of_cluster
    assert "zookeeper.max.partitions.per.registration" in said[0]
    with live.client() as c:
        assert sum(c.offsets("t", p, -1, 1)[0] for p in range(2)) >= 20


def test_phantom_numbers_are_left_out_by_the_group_consumer(shared, warnings_of_cluster):
    live, zookeeper, zk = shared
    t = new_topic()  # its own: the other tests write to ``t``
    with live.client() as c:
        c.create_topic(t, 2)
    wait_until(lambda: zk.exists(paths.topic_broker_path(t, 1)) is not None)
    zk.create(paths.topic_broker_path("phantom", 1), str(PHANTOM).encode(), makepath=True)
    huge = paths.consumer_path("g", "evil")
    zk.create(huge, json.dumps({t: 2_000_000}).encode(), makepath=True)
    deep = paths.consumer_path("g", "deep")
    zk.create(deep, b"[" * 5000 + b"]" * 5000, makepath=True)
    with live.client() as c:
        c.produce(t, 0, encode_message_set([b"a", b"b"]))
        c.produce(t, 1, encode_message_set([b"c"]))
    before = rss()
    config = {"zookeeper.connect": zookeeper.connect, "group.id": "g",
              "auto.offset.reset": "earliest", "consumer.timeout.ms": 3000,
              "rebalance.backoff.ms": 200}
    got = []
    with ConsumerConnector(config=config) as connector:
        (stream,) = connector.create_message_streams({t: 1})[t]
        try:
            for message in stream:
                got.append(message.value)
                if len(got) == 3:
                    break
        except Exception:  # noqa: BLE001 - ConsumerTimeoutError: the assertion says it
            pass
    grown = rss() - before
    assert sorted(got) == [b"a", b"b", b"c"]
    assert grown < 40 << 20, f"RSS grew by {grown >> 20} MiB"
    for path, bound in ((huge, "zookeeper.max.streams"), (deep, "nested deeper")):
        said = [line for line in warnings_of_cluster if path in line]
        assert len(said) == 1, warnings_of_cluster
        assert bound in said[0]


def test_the_spark_planners_snapshot_leaves_phantoms_out(shared):
    """read_snapshot is what the Spark planner and the commands read the cluster with."""
    live, _, zk = shared
    zk.create(paths.topic_broker_path("phantom", 1), b"10000000", makepath=True)
    zk.create(paths.topic_broker_path("wide", 1), b"9000", makepath=True)
    zk.create(f"{paths.BROKER_IDS}/77", b"{" * 5000, makepath=True)
    lines: list[tuple[str, str]] = []
    bounds = zkread.Bounds.of({"zookeeper.max.partitions": 5000})
    started = time.monotonic()
    snapshot = read_snapshot(zk, lambda path, problem: lines.append((path, problem)), bounds)
    assert time.monotonic() - started < 5
    assert sorted(snapshot.brokers) == [1]
    assert snapshot.partitions("t") == ((1, 0), (1, 1))
    assert "phantom" not in snapshot.topics and "wide" not in snapshot.topics
    assert sorted(p for p, _ in lines) == sorted([
        paths.topic_broker_path("phantom", 1), paths.topic_broker_path("wide", 1),
        f"{paths.BROKER_IDS}/77"])


def test_the_spark_planner_plans_around_a_phantom(shared, warnings_of_cluster):
    """The Spark data source's (and ``load``'s) driver-side planner, without a Spark
    session: it reads ZooKeeper on the driver only."""
    live, zookeeper, zk = shared
    from hostbroker.spark.cluster import ClusterPlanner
    from hostbroker.spark.options import read_options

    phantom = paths.topic_broker_path("phantom", 1)
    zk.create(phantom, str(PHANTOM).encode(), makepath=True)
    with live.client() as c:
        c.produce("t", 0, encode_message_set([b"a"]))
    before = rss()
    opts = read_options({"zookeeper.connect": zookeeper.connect, "subscribePattern": ".*"},
                        streaming=False)
    with ClusterPlanner(opts) as planner:
        ranges = planner.plan()
    assert rss() - before < 40 << 20
    assert {(r.topic, r.broker) for r in ranges} == {("t", 1)}
    assert len([line for line in warnings_of_cluster if phantom in line]) == 1


@pytest.mark.parametrize("value", [b'"' + b'\\"' * 40_000, b'{"t": "' + b'\\"' * 40_000,
                                   b'"\\' * 40_000], ids=["string", "member", "pairs"])
def test_a_node_of_escaped_quotes_costs_no_more_than_reading_it(value):
    # Before: every later quote started the search for a closing one again, about
    # 20 s for this node (minutes for one of zookeeper.max.node.bytes).
    started = time.process_time()
    with pytest.raises(ValueError, match="not JSON|not a JSON object|subscription"):
        paths.decode_subscription(value, "/consumers/g/ids/c")
    assert time.process_time() - started < 2


def test_reporter_says_each_node_once_and_few_lines_in_a_storm():
    lines: list[str] = []

    class Log:
        def warning(self, fmt, *args):
            lines.append(fmt % args)

    now = [0.0]
    report = zkread.Reporter(Log(), interval_s=60, burst=3, clock=lambda: now[0])
    for _ in range(5):
        report("/a", "/a: bad")
    assert lines == ["ZooKeeper: /a: bad"]
    for i in range(1000):
        report(f"/n{i}", f"/n{i}: bad")
    assert len(lines) == 3
    now[0] = 61.0
    report("/z", "/z: bad")
    assert lines[-1] == "ZooKeeper: /z: bad (998 more bad ZooKeeper nodes not named)"


def test_docs_table_of_the_bounds_is_generated_from_the_declarations():
    import pathlib

    from hostbroker.config import markdown_table

    page = (pathlib.Path(__file__).parent.parent.parent / "docs" / "cluster.md").read_text()
    assert markdown_table(zkread.SETTINGS) in page, (
        "regenerate with: python -m hostbroker.config hostbroker.cluster.zkread:SETTINGS")


def test_a_starting_brokers_unix_socket_is_not_taken_for_stale(make_broker, tmp_path):
    """Bound but not listening yet (its registrar waits for ZooKeeper): a second broker
    on the same unix path is refused, and the file stays the first one's."""
    from tests.integration.broker import free_port

    dead = f"127.0.0.1:{free_port()}"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = make_broker(root=tmp_path / "a", start=False, **{
        **LEAN, "zookeeper.connect": dead, "zookeeper.connection.timeout.ms": 60000})
    with open(first.log_path, "ab") as out:
        proc = subprocess.Popen(first.args(), cwd=first.root, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_until(lambda: os.path.exists(first.unix_path), 30)
        inode = os.stat(first.unix_path).st_ino
        second = make_broker(root=tmp_path / "b", start=False, **{
            **LEAN, "listeners": f"unix://{first.unix_path}"})
        result = subprocess.run(second.args(), cwd=second.root, capture_output=True,
                                timeout=60, stdin=subprocess.DEVNULL)
        assert result.returncode == 78
        assert result.stderr.decode().strip() == (
            f"hostbroker: listeners: unix://{first.unix_path}: another broker is listening "
            f"on {first.unix_path}")
        assert os.stat(first.unix_path).st_ino == inode
    finally:
        proc.terminate()
        assert proc.wait(30) == 0


def test_the_bounds_are_client_settings(shared, warnings_of_cluster):
    _, zookeeper, _ = shared
    from hostbroker.client.group import GROUP_SETTINGS
    from hostbroker.client.producer_settings import PRODUCER_SETTINGS
    from hostbroker.client.settings import resolve

    for declared in (GROUP_SETTINGS, PRODUCER_SETTINGS):
        settings = resolve(declared, {"zookeeper.max.partitions": "500"})
        assert zkread.Bounds.of(settings).partitions == 500
    # a producer told to keep at most one partition per registration leaves t's two out
    with Producer(zookeeper_connect=zookeeper.connect,
                  zookeeper_max_partitions_per_registration=1) as producer:
        assert producer._dispatcher.cluster.snapshot.partitions("t") == ()
    path = paths.topic_broker_path("t", 1)
    assert [line for line in warnings_of_cluster if path in line] != []
