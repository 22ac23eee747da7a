"""Brokers in cluster mode, for real: ``hostbroker serve`` processes registering in a real
ZooKeeper through their hb-registrar, refusals at start, clean stops, crashes, a
ZooKeeper outage and a registrar frozen past its session timeout."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time

import psutil

from hostbroker.cluster import paths
from hostbroker.log.message import encode_message_set
from tests.cluster.test_discovery import wait_until
from tests.integration.broker import free_port
from tests.integration.cli import one_line_error
from tests.integration.test_faults import read_all

LEAN = {"num.processors": 1, "num.handlers": 1}
AGAIN = "registered broker 1 in ZooKeeper again"


def cluster_broker(make_broker, tmp_path, zookeeper, zk, broker_id: int, start=True, **settings):
    """A broker of its own root (ports, log dir) in ``zookeeper``'s cluster; started, it
    is returned once its /brokers/ids node is there."""
    root = tmp_path / f"b{broker_id}"
    root.mkdir(exist_ok=True)
    broker = make_broker(root=root, start=start, **{
        **LEAN, "zookeeper.connect": zookeeper.connect, "broker.id": broker_id, **settings})
    if start:
        wait_until(lambda: zk.exists(paths.broker_path(broker_id)) is not None)
    return broker


def registered(broker, broker_id: int) -> dict:
    return {"version": 1, "host": "127.0.0.1", "port": broker.port, "unix": broker.unix_path,
            "endpoints": [f"PLAINTEXT://127.0.0.1:{broker.port}"]}


def node(zk, path: str):
    from kazoo.exceptions import NoNodeError

    try:
        return zk.get(path)[0]
    except NoNodeError:  # (deleted between a look and a read, too)
        return None


def kill_hard(broker) -> float:
    """SIGKILL every process of ``broker``, all stopped first: a worker told of its
    supervisor's death (SIGTERM) would otherwise close its ZooKeeper session cleanly.
    Returns the monotonic time of the kill; ``broker.kill_tree()`` reaps them."""
    tree = [psutil.Process(broker.proc.pid), *psutil.Process(broker.proc.pid).children()]
    for p in tree:
        p.send_signal(signal.SIGSTOP)
    for p in tree:
        p.send_signal(signal.SIGKILL)
    return time.monotonic()


def serve(broker, timeout=60) -> subprocess.CompletedProcess:
    """``hostbroker serve`` of a broker that is expected to refuse its start."""
    return subprocess.run(broker.args(), cwd=broker.root, capture_output=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def test_three_brokers_register_their_listeners_and_topics(make_broker, tmp_path, zookeeper, zk):
    brokers = {i: cluster_broker(make_broker, tmp_path, zookeeper, zk, i) for i in (1, 2, 3)}
    assert sorted(zk.get_children(paths.BROKER_IDS)) == ["1", "2", "3"]
    for i, b in brokers.items():
        assert json.loads(node(zk, paths.broker_path(i))) == registered(b, i)
        assert "hb-registrar" in b.workers()
    with brokers[1].client() as c:
        c.create_topic("events", 3)
    with brokers[2].client() as c:
        c.create_topic("events", 2)
        # auto-created (num.partitions 1) once the broker has read ZooKeeper's topics
        # after the first ask (LEADER_NOT_AVAILABLE until then, at once here)
        wait_until(lambda: c.produce("auto", 0, encode_message_set([b"x"]),
                                     raise_on_error=False).error_code == 0)
    # each registrar writes its topics one node at a time, in no set order
    for topic, broker_id in (("auto", 2), ("events", 1), ("events", 2)):
        wait_until(lambda: zk.exists(paths.topic_broker_path(topic, broker_id)) is not None)
    assert sorted(zk.get_children(paths.topic_path("events"))) == ["1", "2"]
    assert node(zk, paths.topic_broker_path("events", 1)) == b"3"
    assert node(zk, paths.topic_broker_path("events", 2)) == b"2"
    assert zk.get_children(paths.topic_path("auto")) == ["2"]
    assert node(zk, paths.topic_broker_path("auto", 2)) == b"1"
    assert zk.get(paths.topic_broker_path("events", 1))[1].ephemeralOwner != 0
    with brokers[1].client() as c:
        c.delete_topic("events")
    wait_until(lambda: zk.exists(paths.topic_broker_path("events", 1)) is None)
    assert zk.get_children(paths.topic_path("events")) == ["2"]
    with brokers[2].client() as c:
        c.delete_topic("events")
    wait_until(lambda: zk.exists(paths.topic_path("events")) is None)  # with its last broker
    assert zk.get_children(paths.topic_path("auto")) == ["2"]
    for b in brokers.values():
        assert AGAIN not in b.log()


def test_duplicate_broker_id_refused_with_one_line(make_broker, tmp_path, zookeeper, zk):
    first = cluster_broker(make_broker, tmp_path, zookeeper, zk, 1)
    second = cluster_broker(make_broker, tmp_path, zookeeper, zk, 2, start=False, **{
        "broker.id": 1})
    result = serve(second)
    assert result.returncode == 78, result.stderr
    assert one_line_error(result) == (
        f"hostbroker: broker.id 1 is already registered in ZooKeeper by another broker "
        f"(unix://{first.unix_path}, tcp://127.0.0.1:{first.port})")
    assert json.loads(node(zk, paths.broker_path(1))) == registered(first, 1)
    with first.client() as c:  # the first one is untouched
        assert c.metadata().broker_id == 1
    assert not os.path.exists(second.unix_path)


def test_bad_zookeeper_connect_refused_with_one_line(make_broker, tmp_path):
    broker = make_broker(start=False, **{"zookeeper.connect": "zk1:2181,zk2/kafka"})
    result = serve(broker)
    assert result.returncode == 2
    assert one_line_error(result) == (
        "hostbroker: zookeeper.connect: 'zk2' is not host:port (got 'zk1:2181,zk2/kafka')")


def test_no_zookeeper_at_start_refused_with_one_line(make_broker, tmp_path):
    port = free_port()  # nothing listens there
    broker = make_broker(start=False, **{"zookeeper.connect": f"127.0.0.1:{port}",
                                         "zookeeper.connection.timeout.ms": 800, **LEAN})
    started = time.monotonic()
    result = serve(broker)
    assert result.returncode == 78
    assert one_line_error(result) == (
        f"hostbroker: zookeeper.connect: no ZooKeeper server of 127.0.0.1:{port} answered "
        "within 800 ms; not starting")
    assert time.monotonic() - started < 30
    assert not os.path.exists(broker.unix_path)


def test_a_stop_while_waiting_for_zookeeper_is_a_stop_not_a_refusal(make_broker, tmp_path):
    """SIGTERM while the registrar still waits for ZooKeeper: the broker stops as
    asked, status 0, with nothing left. Until its broker.id is registered the
    listeners refuse every connection (nothing is accepted or answered)."""
    port = free_port()  # nothing listens there
    broker = make_broker(start=False, **{"zookeeper.connect": f"127.0.0.1:{port}",
                                         "zookeeper.connection.timeout.ms": 60000, **LEAN})
    with open(broker.log_path, "ab") as out:
        proc = subprocess.Popen(broker.args(), cwd=broker.root, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_until(lambda: "hb-registrar" in workers_of(proc.pid), 30)
        for family, where in ((socket.AF_INET, ("127.0.0.1", broker.port)),
                              (socket.AF_UNIX, broker.unix_path)):
            with socket.socket(family, socket.SOCK_STREAM) as s:
                try:
                    s.connect(where)
                    raise AssertionError(f"{where} accepted before broker.id was registered")
                except (ConnectionRefusedError, FileNotFoundError):
                    pass
        assert "hostbroker: serving" not in broker.log()  # still starting
        started = time.monotonic()
        proc.terminate()
        assert proc.wait(30) == 0, broker.log()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert time.monotonic() - started < 20
    assert "stopped while starting" in broker.log()
    assert not os.path.exists(broker.unix_path)


def workers_of(pid: int) -> set[str]:
    names = set()
    for child in psutil.Process(pid).children():
        try:
            names.add(child.name())
        except psutil.NoSuchProcess:
            pass
    return names


def test_clean_stop_removes_registration_before_the_listener_closes(
        make_broker, tmp_path, zookeeper, zk):
    broker = cluster_broker(make_broker, tmp_path, zookeeper, zk, 1)
    with broker.client() as c:
        c.create_topic("t", 2)
    wait_until(lambda: zk.exists(paths.topic_broker_path("t", 1)) is not None)
    gone: list[float] = []
    refused: list[float] = []

    def on_data(data, stat):
        if data is None and not gone:
            gone.append(time.monotonic())
            return False
        return None
    zk.DataWatch(paths.broker_path(1), on_data)

    def probe():
        while not refused:
            try:
                socket.create_connection(("127.0.0.1", broker.port), timeout=1).close()
            except OSError:
                refused.append(time.monotonic())
            time.sleep(0.005)
    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    assert broker.stop() == 0
    prober.join(10)
    wait_until(lambda: gone)
    assert gone[0] <= refused[0]
    assert zk.get_children(paths.BROKER_IDS) == []
    assert zk.get_children(paths.topic_path("t")) == []


def test_sigkilled_broker_leaves_after_the_session_timeout(make_broker, tmp_path, zookeeper, zk):
    broker = cluster_broker(make_broker, tmp_path, zookeeper, zk, 1,
                            **{"zookeeper.session.timeout.ms": 1500})
    with broker.client() as c:
        c.create_topic("t", 1)
    wait_until(lambda: zk.exists(paths.topic_broker_path("t", 1)) is not None)
    killed = kill_hard(broker)
    assert zk.exists(paths.broker_path(1)) is not None
    wait_until(lambda: zk.exists(paths.broker_path(1)) is None)
    # the last ping may have been up to a third of the timeout before the kill
    assert 0.9 < time.monotonic() - killed < 8
    broker.kill_tree()
    wait_until(lambda: zk.exists(paths.topic_broker_path("t", 1)) is None)


def test_zookeeper_outage_stops_no_produce_or_fetch_and_the_broker_registers_again(
        make_broker, tmp_path, zookeeper, zk):
    broker = cluster_broker(make_broker, tmp_path, zookeeper, zk, 1,
                            **{"zookeeper.session.timeout.ms": 1500})
    registrar = broker.workers()["hb-registrar"]
    with broker.client() as c:
        c.create_topic("t", 1)
    wait_until(lambda: zk.exists(paths.topic_broker_path("t", 1)) is not None)
    sent = []
    zookeeper.stop()
    down = time.monotonic()
    with broker.client(timeout=5) as c:
        while time.monotonic() - down < 3.0:  # produce and fetch go on throughout
            batch = [f"m{len(sent) + j}".encode() for j in range(10)]
            c.produce("t", 0, encode_message_set(batch))
            sent += batch
            assert read_all(c, "t")[-10:] == batch
            time.sleep(0.05)
    assert len(sent) >= 100
    zookeeper.start()
    zk_ok = time.monotonic()
    wait_until(lambda: AGAIN in broker.log(), timeout=20)
    assert time.monotonic() - zk_ok < 15
    wait_until(lambda: zk.connected and zk.exists(paths.broker_path(1)) is not None)
    assert json.loads(node(zk, paths.broker_path(1))) == registered(broker, 1)
    assert node(zk, paths.topic_broker_path("t", 1)) == b"1"
    with broker.client() as c:
        assert read_all(c, "t") == sent
    assert broker.workers()["hb-registrar"] == registrar  # by itself, not replaced
    log = broker.log()
    assert log.count(AGAIN) == 1
    assert log.count("local produce and fetch go on") == 1


def test_registrar_frozen_past_its_session_registers_again_by_itself(
        make_broker, tmp_path, zookeeper, zk):
    broker = cluster_broker(make_broker, tmp_path, zookeeper, zk, 1, **{
        "zookeeper.session.timeout.ms": 1500, "worker.heartbeat.timeout.ms": 30000})
    with broker.client() as c:
        c.create_topic("t", 2)
    wait_until(lambda: zk.exists(paths.topic_broker_path("t", 1)) is not None)
    owner = zk.exists(paths.broker_path(1)).ephemeralOwner
    registrar = broker.workers()["hb-registrar"]
    os.kill(registrar, signal.SIGSTOP)
    try:
        wait_until(lambda: zk.exists(paths.broker_path(1)) is None)  # its session expired
        assert zk.exists(paths.topic_broker_path("t", 1)) is None
        with broker.client() as c:  # the broker serves meanwhile
            c.produce("t", 1, encode_message_set([b"while frozen"]))
    finally:
        os.kill(registrar, signal.SIGCONT)
    wait_until(lambda: zk.exists(paths.topic_broker_path("t", 1)) is not None)
    stat = zk.exists(paths.broker_path(1))
    assert stat is not None and stat.ephemeralOwner != owner  # a new session
    assert json.loads(node(zk, paths.broker_path(1))) == registered(broker, 1)
    assert node(zk, paths.topic_broker_path("t", 1)) == b"2"
    assert broker.workers()["hb-registrar"] == registrar
    wait_until(lambda: AGAIN in broker.log())
    assert broker.log().count(AGAIN) == 1
    assert "session expired" in broker.log()


def test_a_killed_registrar_is_replaced_and_registers_once_its_old_session_expired(
        make_broker, tmp_path, zookeeper, zk):
    broker = cluster_broker(make_broker, tmp_path, zookeeper, zk, 1,
                            **{"zookeeper.session.timeout.ms": 1500})
    owner = zk.exists(paths.broker_path(1)).ephemeralOwner
    registrar = broker.workers()["hb-registrar"]
    os.kill(registrar, signal.SIGKILL)
    replacement = broker.wait_worker_replaced("hb-registrar", registrar)
    wait_until(lambda: getattr(zk.exists(paths.broker_path(1)), "ephemeralOwner", owner) != owner)
    assert json.loads(node(zk, paths.broker_path(1))) == registered(broker, 1)
    assert broker.workers()["hb-registrar"] == replacement
    log = broker.log()
    assert log.count("still registered by this broker's previous registrar") <= 1
    with broker.client() as c:
        assert c.metadata().broker_id == 1


def test_a_broker_restarted_at_once_after_a_kill_waits_for_its_old_session(
        make_broker, tmp_path, zookeeper, zk):
    settings = {"zookeeper.session.timeout.ms": 5000}
    broker = cluster_broker(make_broker, tmp_path, zookeeper, zk, 1, **settings)
    owner = zk.exists(paths.broker_path(1)).ephemeralOwner
    kill_hard(broker)
    assert zk.exists(paths.broker_path(1)).ephemeralOwner == owner  # not expired yet
    broker.kill_tree()
    again = cluster_broker(make_broker, tmp_path, zookeeper, zk, 1, start=False, **settings)
    again.port = broker.port  # the same listeners: the same registration value
    again.settings.update(broker.settings)
    again.start()
    wait_until(lambda: getattr(zk.exists(paths.broker_path(1)), "ephemeralOwner", owner) != owner,
               timeout=20)
    assert json.loads(node(zk, paths.broker_path(1))) == registered(broker, 1)
    assert again.proc.poll() is None
    assert again.log().count("still registered by a previous run of this broker; waiting") == 1
