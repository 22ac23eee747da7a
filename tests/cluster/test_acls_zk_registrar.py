"""The cluster's ACLs and quotas reaching every process of every broker
(hostbroker/workers/registrar_acls.py): the registrar's reader on its own over a
real shared memory document, then real brokers in cluster mode, the document
read from the test as a processor reads it (AccessView). A real ZooKeeper."""

from __future__ import annotations

import itertools
import os
import signal
import time
from types import SimpleNamespace

import pytest

from hostbroker.cluster import acls_zk_store as store
from hostbroker.config import Config
from hostbroker.security.acl import AclBinding, AclFilter, Operation, PatternType, Permission
from hostbroker.security.acl import ResourceType
from hostbroker.security.principals import Identity, Principal
from hostbroker.security.quota import Quota, QuotaSet
from hostbroker.security.store import decode_published, encode_published
from hostbroker.shm.published import PublishedDocument
from hostbroker.shm.region import SharedRegion
from hostbroker.workers.access import AccessView
from hostbroker.workers.plan import BrokerPlan
from hostbroker.workers.registrar_acls import ClusterAccess
from tests.cluster.test_broker_registration import cluster_broker
from tests.cluster.test_discovery import wait_until
from tests.cluster.zkfixtures import kazoo

ALICE = Identity(Principal("User", "alice"), host="127.0.0.1")
ADMIN = Identity(Principal("User", "admin"), host="127.0.0.1")
T = ResourceType.TOPIC
NOT_READ = encode_published([], QuotaSet(), refused="not read from ZooKeeper yet")
_names = itertools.count()


def read_orders(who: str = "User:alice") -> AclBinding:
    return AclBinding.checked(T, "orders", PatternType.LITERAL, Principal.parse(who), "*",
                              Operation.READ, Permission.ALLOW)


@pytest.fixture
def document():
    name = f"/hbtest-access-{os.getpid()}-{next(_names)}"
    region = SharedRegion.create(name, PublishedDocument.region_size(1 << 16))
    doc = PublishedDocument.create(region, 1 << 16, NOT_READ)
    yield doc
    region.close()
    region.unlink()


class FrozenClock:
    """The reader's clock, held still: ``POLL_S`` never passes, so only a watch
    (a notice) makes it read."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def reader(client, document, clock=None, **kw):
    if client is not None:  # (as the watches make them: none made while a test runs)
        for root in ("/kafka-acl-changes", "/kafka-acl-extended-changes", "/config/changes"):
            client.ensure_path(root)
    worker = SimpleNamespace(client=client, doorbell=SimpleNamespace(ring=lambda: None),
                             connection_ms=5000, stopping=False)
    said = []
    made = ClusterAccess(worker, document, max_bindings=kw.pop("max_bindings", 1000),
                         max_entities=100, clock=clock or time.monotonic, say=said.append)
    return made, said


def view(document) -> AccessView:
    return AccessView(document, enabled=True, super_users=[ADMIN.principal],
                      say=lambda line: None)


def poll_until(access, condition, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        access.poll()
        time.sleep(0.02)


def test_super_users_only_until_zookeeper_is_read_then_each_notice_is_read(zk, document):
    access, said = reader(None, document, FrozenClock())
    access.poll()  # no session yet: nothing read, nothing published
    seen = view(document)
    assert document.generation == 1
    assert not seen.allows(ALICE, Operation.READ, T, "orders")
    assert seen.allows(ADMIN, Operation.DELETE, T, "orders")
    store.add_acls(zk, [read_orders()])
    for root in ("/kafka-acl-extended-changes", "/config/changes"):
        zk.ensure_path(root)
    access.worker.client = zk
    access.poll()  # the first read, at once
    assert seen.allows(ALICE, Operation.READ, T, "orders")
    assert access.nodes_read == 1 and said == []
    # the clock stands still: only the notice's watch can make it read again
    store.add_acls(zk, [read_orders("User:bob")])
    poll_until(access, lambda: seen.allows(Identity(Principal("User", "bob")), Operation.READ,
                                           T, "orders"))
    generation = document.generation
    access.next_full, access.due = 0, True  # every node read again, nothing changed:
    access.poll()  # nothing published
    assert access.nodes_read == 3 and document.generation == generation
    store.remove_acls(zk, [AclFilter(principal=Principal.parse("User:alice"))])
    poll_until(access, lambda: not seen.allows(ALICE, Operation.READ, T, "orders"))


def test_quotas_are_published_and_a_quota_notice_is_read(zk, document):
    access, _ = reader(zk, document, FrozenClock())
    access.poll()
    seen = view(document)
    assert seen.quotas() == QuotaSet()
    store.set_quota(zk, "User:alice", {"producer_byte_rate": 1000})
    poll_until(access, lambda: seen.quotas().of("User:alice") == Quota(producer_byte_rate=1000))
    zk.create("/config/users/bob", b"{bad")  # no notice: read when next listed
    store.set_quota(zk, "<default>", {"request_rate": 9})
    poll_until(access, lambda: seen.quotas().of("User:carol") == Quota(request_rate=9))
    # each rate resolved on its own: alice's own, the default's where she has none
    assert seen.quotas().of("User:alice") == Quota(producer_byte_rate=1000, request_rate=9)
    assert access.report.reported >= 1  # the bad node, left out


def test_a_notice_missed_is_found_by_the_poll(zk, document):
    clock = FrozenClock()
    access, _ = reader(zk, document, clock)
    access.poll()
    time.sleep(0.5)  # the watches set (on a thread of their own)
    access._watched = "lost"  # the watches stop at their next event...
    for root in ("/kafka-acl-changes", "/kafka-acl-extended-changes", "/config/changes"):
        zk.create(f"{root}/other", b"")
    time.sleep(0.5)
    access._watched = zk  # ...and are not set again: a notice goes unnoticed
    clock.now += access.POLL_S
    access.poll()  # (the notices above, found by the poll)
    access.due = False
    store.add_acls(zk, [read_orders()])
    time.sleep(0.3)
    access.poll()
    seen = view(document)
    assert not access.due and not seen.allows(ALICE, Operation.READ, T, "orders")
    clock.now += access.POLL_S
    access.poll()
    assert seen.allows(ALICE, Operation.READ, T, "orders")


def test_a_notice_has_its_node_read_again_and_only_it(zk, document):
    access, _ = reader(zk, document, FrozenClock())
    store.add_acls(zk, [read_orders(f"User:u{i}") for i in range(3)] +
                   [AclBinding.checked(T, f"t{i}", PatternType.LITERAL,
                                       Principal.parse("User:x"), "*", Operation.READ,
                                       Permission.ALLOW) for i in range(20)])
    access.poll()
    assert access.nodes_read == 21
    seen = view(document)
    store.add_acls(zk, [read_orders()])
    poll_until(access, lambda: seen.allows(ALICE, Operation.READ, T, "orders"))
    assert access.nodes_read == 22  # the one node the notice named


def test_notices_come_and_gone_unseen_have_every_node_read_again_a_chunk_a_round(
        zk, document, monkeypatch):
    from hostbroker.workers import registrar_acls

    monkeypatch.setattr(registrar_acls, "CHUNK", 8)
    access, _ = reader(zk, document, FrozenClock())
    store.add_acls(zk, [AclBinding.checked(T, f"t{i}", PatternType.LITERAL,
                                           Principal.parse("User:x"), "*", Operation.READ,
                                           Permission.ALLOW) for i in range(20)])
    access.poll()
    assert access.nodes_read == 20  # the first read: every node at once
    # a node rewritten by hand, its notice removed before the registrar saw it
    zk.set("/kafka-acl/Topic/t3", layout_node(read_orders().principal, "t3"))
    zk.create("/kafka-acl-changes/acl_changes_", b"Topic:t3", sequence=True)
    for name in zk.get_children("/kafka-acl-changes"):
        zk.delete(f"/kafka-acl-changes/{name}")
    seen = view(document)
    rounds = 0
    while not seen.allows(ALICE, Operation.READ, T, "t3"):
        assert rounds < 10, "not read again"
        before = access.nodes_read
        access.poll()
        assert access.nodes_read - before <= 8
        rounds += 1
        time.sleep(0.05)
    assert rounds >= 2  # a chunk a round


def test_a_node_written_without_a_notice_is_read_at_the_next_full_read(zk, document):
    clock = FrozenClock()
    access, _ = reader(zk, document, clock)
    store.add_acls(zk, [read_orders("User:bob")])
    access.poll()
    zk.set("/kafka-acl/Topic/orders", layout_node(ALICE.principal, "orders"))
    clock.now += access.POLL_S
    access.poll()
    seen = view(document)
    assert not seen.allows(ALICE, Operation.READ, T, "orders")
    clock.now += registrar_acls_full_s()
    access.poll()
    assert seen.allows(ALICE, Operation.READ, T, "orders")


def layout_node(principal, name) -> bytes:
    from hostbroker.cluster.acls_zk import encode_acl_node

    return encode_acl_node([AclBinding.checked(T, name, PatternType.LITERAL, principal, "*",
                                               Operation.READ, Permission.ALLOW)])


def registrar_acls_full_s() -> float:
    from hostbroker.workers.registrar_acls import FULL_S

    return FULL_S


def test_a_bad_acl_node_allows_the_super_users_only_said_once_until_mended(zk, document):
    access, said = reader(zk, document)
    store.add_acls(zk, [read_orders()])
    access.poll()
    seen = view(document)
    assert seen.allows(ALICE, Operation.READ, T, "orders")
    zk.create("/kafka-acl/Topic/evil", b'{"version":1,"acls":[{"principal":"nobody"}]}')
    store.add_acls(zk, [read_orders("User:bob")])  # a notice
    poll_until(access, lambda: not seen.allows(ALICE, Operation.READ, T, "orders"))
    assert seen.allows(ADMIN, Operation.READ, T, "orders")
    bindings, _ = decode_published(document.read()[1], 100, 100)
    assert bindings is None  # refused
    for _ in range(3):
        access.due = True
        access.poll()
    assert len(said) == 1 and said[0].startswith("hb-registrar: /kafka-acl/Topic/evil: ")
    assert "super users only" in said[0]
    zk.delete("/kafka-acl/Topic/evil")
    store.add_acls(zk, [read_orders("User:carol")])
    poll_until(access, lambda: seen.allows(ALICE, Operation.READ, T, "orders"))
    assert len(said) == 2 and "read again" in said[1]


def test_a_layout_longer_than_the_document_allows_the_super_users_only(zk):
    region = SharedRegion.create(f"/hbtest-access-{os.getpid()}-{next(_names)}",
                                 PublishedDocument.region_size(4096))
    try:
        doc = PublishedDocument.create(region, 4096, NOT_READ)
        access, said = reader(zk, doc)
        store.add_acls(zk, [read_orders(f"User:user{i}") for i in range(400)])
        access.poll()
        assert decode_published(doc.read()[1], 100, 100)[0] is None
        assert "acl.max.bytes" in said[0]
    finally:
        region.close()
        region.unlink()


def test_zookeeper_errors_publish_nothing(zookeeper, zk, document):
    access, _ = reader(zk, document)
    store.add_acls(zk, [read_orders()])
    # read (a poll that met trouble on a loaded machine is retried): every node listed
    poll_until(access, lambda: view(document).allows(ALICE, Operation.READ, T, "orders"), 30)
    assert access.listed and not access.urgent
    generation = document.generation
    zookeeper.suspend()  # requests go unanswered
    try:
        access.timeout_s = 0.5
        # a look (as after a notice: every root listed) and a full read (every node)
        # are both due, so ZooKeeper is certainly asked
        access.by_notice = True
        access.next_full = 0
        with pytest.raises(Exception):  # noqa: B017 - a timeout of kazoo's or ours
            access.read(zk, time.monotonic())
    finally:
        zookeeper.resume()
    assert document.generation == generation  # the last document read stays
    assert view(document).allows(ALICE, Operation.READ, T, "orders")


# -- real brokers ---------------------------------------------------------------------

def broker_view(broker) -> AccessView:
    plan = BrokerPlan.from_config(Config.build(overrides=broker._naming()))
    return AccessView(PublishedDocument.attach(plan.access_name, readonly=True), enabled=True,
                      super_users=[ADMIN.principal], say=lambda line: None)


def test_every_broker_of_a_cluster_sees_a_change_within_a_second_or_two(
        make_broker, tmp_path, zookeeper, zk):
    settings = {"authorizer.enable": "true", "super.users": "User:admin"}
    brokers = [cluster_broker(make_broker, tmp_path, zookeeper, zk, i, **settings)
               for i in (1, 2)]
    views = [broker_view(b) for b in brokers]
    for v in views:  # read before the listeners opened: not the "not read yet" document
        assert decode_published(v.document.read()[1], 100, 100)[0] == []
    store.add_acls(zk, [read_orders()])
    start = time.monotonic()
    wait_until(lambda: all(v.allows(ALICE, Operation.READ, T, "orders") for v in views), 5)
    assert time.monotonic() - start < 3.0
    # a user's quotas too; the controller passes over their notice without a word
    store.set_quota(zk, "User:alice", {"producer_byte_rate": 4096})
    wait_until(lambda: all(v.quotas().of("User:alice") == Quota(producer_byte_rate=4096)
                           for v in views), 5)
    # a bad node: every broker allows its super users only, and says so once
    zk.create("/kafka-acl/Group/evil", b"not json", makepath=True)
    store.add_acls(zk, [read_orders("User:bob")])
    wait_until(lambda: not any(v.allows(ALICE, Operation.READ, T, "orders") for v in views), 5)
    assert all(v.allows(ADMIN, Operation.READ, T, "orders") for v in views)
    zk.delete("/kafka-acl/Group/evil")
    store.add_acls(zk, [read_orders("User:carol")])
    wait_until(lambda: all(v.allows(ALICE, Operation.READ, T, "orders") for v in views), 5)
    for b in brokers:
        log = b.log()
        assert log.count("/kafka-acl/Group/evil: not JSON") == 1, log
        assert log.count("the ACLs in ZooKeeper are read again") == 1, log
        assert "config_change_" not in log, log
    # a registrar that dies is replaced, and its replacement reads on
    generation = views[0].document.generation
    old = brokers[0].workers()["hb-registrar"]
    os.kill(old, signal.SIGKILL)
    brokers[0].wait_worker_replaced("hb-registrar", old)
    time.sleep(2.0)  # (its first read done)
    assert views[0].document.generation == generation  # the same copy: not published again
    store.remove_acls(zk, [AclFilter(principal=Principal.parse("User:alice"))])
    wait_until(lambda: not any(v.allows(ALICE, Operation.READ, T, "orders") for v in views), 10)
    # a broker started again has read them before it opens its listeners
    brokers[1].stop()
    brokers[1].start()
    bindings, quotas = decode_published(broker_view(brokers[1]).document.read()[1], 100, 100)
    assert bindings == sorted([read_orders("User:bob"), read_orders("User:carol")])
    assert quotas.of("User:alice") == Quota(producer_byte_rate=4096)


def test_a_layout_past_its_bounds_allows_the_super_users_only(zk, document):
    access, said = reader(zk, document, max_bindings=3)
    store.add_acls(zk, [AclBinding.checked(T, f"t{i}", PatternType.LITERAL,
                                           Principal.parse("User:x"), "*", Operation.READ,
                                           Permission.ALLOW) for i in range(3)])
    access.poll()
    assert decode_published(document.read()[1], 100, 100)[0] is not None
    zk.create("/kafka-acl/Topic/t3", layout_node(ALICE.principal, "t3"))  # 4 resources
    access.due = True
    access.poll()
    assert decode_published(document.read()[1], 100, 100)[0] is None
    assert said[-1].startswith("hb-registrar: /kafka-acl/Topic: 4 resources, more than "
                               "acl.max.bindings (3)")
    zk.delete("/kafka-acl/Topic/t3")
    zk.set("/kafka-acl/Topic/t2", layout_node(ALICE.principal, "t2")[:-2] +
           b',{"principal":"User:y","permissionType":"Allow","operation":"Read","host":"*"}]}')
    access.due = True
    access.next_full = 0  # (no notice: the next full read)
    access.poll()
    assert "4 ACLs, more than acl.max.bindings (3)" in said[-1]


def test_a_registrar_replaced_while_zookeeper_is_away_keeps_the_last_document(
        make_broker, tmp_path, zookeeper, zk):
    """A registrar replaced while ZooKeeper is down keeps the last document read;
    a change made when ZooKeeper is back reaches the broker."""
    b = cluster_broker(make_broker, tmp_path, zookeeper, zk, 1,
                       **{"authorizer.enable": "true", "zookeeper.session.timeout.ms": 4000})
    v = broker_view(b)
    store.add_acls(zk, [read_orders()])
    wait_until(lambda: v.allows(ALICE, Operation.READ, T, "orders"), 5)
    zookeeper.stop()
    try:
        old = b.workers()["hb-registrar"]
        os.kill(old, signal.SIGKILL)
        b.wait_worker_replaced("hb-registrar", old)
        time.sleep(1.0)
        assert v.allows(ALICE, Operation.READ, T, "orders")  # the last document read stays
    finally:
        zookeeper.start()
    with kazoo(zookeeper.connect) as again:
        store.remove_acls(again, [AclFilter()])
    wait_until(lambda: not v.allows(ALICE, Operation.READ, T, "orders"), 20)
