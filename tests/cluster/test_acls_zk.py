"""The ACLs and quotas of a cluster in ZooKeeper (hostbroker/cluster/acls_zk.py and
acls_zk_store.py): Kafka's layout round trip, hostile nodes, two writers at once,
old notices removed. A real ZooKeeper (one for the module, a chroot per test)."""

from __future__ import annotations

import json
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostbroker.cluster import acls_zk as layout
from hostbroker.cluster import acls_zk_store as store
from hostbroker.cluster import zkread
from hostbroker.cluster.topic_changes import OtherEntityChange, decode_change
from hostbroker.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from hostbroker.security.principals import Principal
from hostbroker.security.quota import Quota, QuotaSet
from tests.cluster.zkfixtures import cluster, kazoo, zkserver  # noqa: F401 - fixtures

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED


def acl(rtype=T, name="orders", pattern=LIT, who="User:alice", op=Operation.READ,
        perm=Permission.ALLOW, host="*") -> AclBinding:
    return AclBinding.checked(rtype, name, pattern, Principal.parse(who), host, op, perm)


# -- pure ------------------------------------------------------------------------------

def test_acl_node_round_trip_in_kafkas_form():
    bindings = [acl(), acl(who="User:bob", op=Operation.WRITE, perm=Permission.DENY,
                           host="10.0.0.1")]
    data = layout.encode_acl_node(bindings)
    assert json.loads(data) == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read",
         "host": "*"},
        {"principal": "User:bob", "permissionType": "Deny", "operation": "Write",
         "host": "10.0.0.1"}]}
    path = layout.resource_path(T, "orders", LIT)
    assert path == "/kafka-acl/Topic/orders"
    assert layout.decode_acl_node(data, path, (T, "orders", LIT)) == sorted(bindings)
    assert layout.resource_path(G, "app-", PRE) == "/kafka-acl-extended/prefixed/Group/app-"
    assert layout.resource_path(C, CLUSTER_NAME, LIT) == "/kafka-acl/Cluster/kafka-cluster"


@pytest.mark.parametrize("name, why", [("a/b", "ZooKeeper"), ("..", "ZooKeeper"),
                                       (".", "ZooKeeper"), ("x\u0085y", "control character"),
                                       ("\ue000", "ZooKeeper")])
def test_a_name_zookeeper_cannot_hold_is_refused_in_one_line(name, why):
    with pytest.raises(ValueError) as e:
        layout.resource_path(T, name, LIT)
    assert "\n" not in str(e.value) and why in str(e.value)


@pytest.mark.parametrize("data, problem", [
    (b"not json", "not JSON"),
    (b"{{{", "nested deeper"),
    (b"\xff\xfe", "not UTF-8"),
    (b'{"version":2,"acls":[]}', "expected"),
    (b'{"version":1,"acls":{}}', "expected"),
    (b"[" * 100000, "nested deeper"),
    (b'{"version":1,"acls":[{"principal":"alice","permissionType":"Allow",'
     b'"operation":"Read","host":"*"}]}', "ACL 0: principal 'alice'"),
    (b'{"version":1,"acls":[{"principal":"User:a","permissionType":"Allow",'
     b'"operation":"Write","host":"*"}]}', "Write on a Group"),
    (b'{"version":1,"acls":[{"principal":"User:a","permissionType":"Allow",'
     b'"operation":"Read","host":"*","extra":"1"}]}', "unknown field"),
    (b'{"version":1,"acls":[{"principal":"User:a","permissionType":"Maybe",'
     b'"operation":"Read","host":"*"}]}', "permission type"),
    (b'{"version":1,"acls":[{"principal":"User:a","permissionType":"Allow",'
     b'"operation":"Read","host":"nowhere"}]}', "host"),
    (b'{"version":1,"acls":[1]}', "not a JSON object"),
])
def test_hostile_acl_nodes_are_named_in_one_line(data, problem):
    path = "/kafka-acl/Group/g"
    with pytest.raises(ValueError) as e:
        layout.decode_acl_node(data, path, (G, "g", LIT))
    text = str(e.value)
    assert text.startswith(path) and "\n" not in text
    assert problem in text


def test_acl_node_bounds():
    big = layout.encode_acl_node([acl(who=f"User:u{i}") for i in range(20)])
    bounds = zkread.Bounds.of({"zookeeper.max.node.bytes": 1024})
    with pytest.raises(ValueError, match="zookeeper.max.node.bytes"):
        layout.decode_acl_node(big, "/p", (T, "orders", LIT), bounds)
    with pytest.raises(ValueError, match="acl.max.bindings"):
        layout.decode_acl_node(big, "/p", (T, "orders", LIT), max_bindings=19)


@pytest.mark.parametrize("user", ["alice", "CN=a b,O=x/y", "*", "é~:%", "a.b-c_d"])
def test_user_names_sanitized_as_kafka_and_back(user):
    node = layout.quota_node_name(f"User:{user}")
    assert "/" not in node and ":" not in node and "*" not in node and "~" not in node
    assert layout.entity_of(node) == f"User:{user}"


def test_quota_entities_and_nodes():
    assert layout.quota_path("<default>") == "/config/users/<default>"
    assert layout.quota_path("User:CN=a b") == "/config/users/CN%3Da%20b"
    with pytest.raises(ValueError, match="User: principals"):
        layout.quota_path("Group:ops")
    with pytest.raises(ValueError, match="not a sanitized user name"):
        layout.entity_of("%61lice")  # a second spelling of alice
    with pytest.raises(ValueError, match="not a sanitized"):
        layout.entity_of("%ff")
    data = layout.encode_quota_node(Quota(producer_byte_rate=1048576, request_rate=10))
    assert json.loads(data) == {"version": 1, "config": {"producer_byte_rate": "1048576",
                                                          "request_rate": "10"}}
    kafkas = b'{"version":1,"config":{"consumer_byte_rate":"2048","request_percentage":"5"}}'
    assert layout.decode_quota_node(kafkas, "/q") == (Quota(consumer_byte_rate=2048),
                                                      ["request_percentage"])
    for bad in (b'{"version":1,"config":{"request_rate":"-1"}}',
                b'{"version":1,"config":{"request_rate":"1e3"}}',
                b'{"version":1,"config":{"request_rate":"' + b"9" * 30 + b'"}}',
                b'{"version":1,"config":[]}', b"nope"):
        with pytest.raises(ValueError, match="^/q: "):
            layout.decode_quota_node(bad, "/q")


def test_the_controller_passes_over_a_users_quota_notice():
    with pytest.raises(OtherEntityChange):
        decode_change(layout.encode_quota_change("User:alice"), "/config/changes/c")
    assert decode_change(b'"orders"', "/config/changes/c") == "orders"


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["version", "acls", "config", "principal", "permissionType",
                         "operation", "host", "request_rate", "entity_path", "resourceType",
                         "name", "patternType", "x"]), inner, max_size=6),
    max_leaves=20)


def _kafka_like(draw_json) -> bytes:
    return json.dumps(draw_json).encode()


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=200), _json.map(_kafka_like),
                 st.text(max_size=60).map(str.encode)))
def test_every_decoder_decodes_or_names_the_problem_never_anything_else(data):
    """Whatever a node holds: a value, or ValueError naming the path."""
    resource = (G, "g", LIT)
    for decode in (lambda: layout.decode_acl_node(data, "/n", resource),
                   lambda: layout.decode_quota_node(data, "/n"),
                   lambda: layout.decode_acl_change(data, "/n")):
        try:
            decode()
        except ValueError as exc:
            assert str(exc).startswith("/n") and "\n" not in str(exc)
    layout.decode_quota_change(data, "/n")  # None or a node name, never raises
    try:
        layout.entity_of(data.decode(errors="replace"))
    except ValueError:
        pass


# -- on a real ZooKeeper -----------------------------------------------------------------

def test_add_list_remove_round_trip_at_kafkas_paths(cluster):
    _, zk = cluster
    mine = [acl(), acl(who="User:bob"), acl(G, "app-", PRE, who="User:carol"),
            acl(C, CLUSTER_NAME, op=Operation.ALTER, who="User:admin")]
    assert store.add_acls(zk, mine) == sorted(mine)
    assert store.add_acls(zk, mine[:1]) == []  # kept already: no change, no notice
    assert store.list_acls(zk) == sorted(mine)
    node = json.loads(zk.get("/kafka-acl/Topic/orders")[0])
    assert node["version"] == 1 and len(node["acls"]) == 2
    assert zk.exists("/kafka-acl-extended/prefixed/Group/app-")
    assert zk.exists("/kafka-acl/Cluster/kafka-cluster")
    literal = zk.get_children("/kafka-acl-changes")
    assert len(literal) == 2 and all(n.startswith("acl_changes_") for n in literal)
    assert {zk.get(f"/kafka-acl-changes/{n}")[0] for n in literal} == {
        b"Topic:orders", b"Cluster:kafka-cluster"}
    prefixed = zk.get_children("/kafka-acl-extended-changes")
    assert json.loads(zk.get(f"/kafka-acl-extended-changes/{prefixed[0]}")[0])["name"] == "app-"
    only_topics = AclFilter(resource_type=T)
    assert store.list_acls(zk, only_topics) == sorted(mine[:2])
    removed = store.remove_acls(zk, [AclFilter(principal=Principal.parse("User:alice"))])
    assert removed == [mine[0]]
    assert store.list_acls(zk) == sorted(mine[1:])
    store.remove_acls(zk, [AclFilter(resource_type=T)])
    assert zk.exists("/kafka-acl/Topic/orders") is None  # an empty node is deleted
    assert len(zk.get_children("/kafka-acl-changes")) == 4


def test_quotas_round_trip(cluster):
    _, zk = cluster
    assert store.set_quota(zk, "User:alice", {"producer_byte_rate": 1000}) == \
        Quota(producer_byte_rate=1000)
    store.set_quota(zk, "User:alice", {"request_rate": 5})
    store.set_quota(zk, "<default>", {"consumer_byte_rate": 7})
    assert store.list_quotas(zk) == QuotaSet({
        "User:alice": Quota(producer_byte_rate=1000, request_rate=5),
        "<default>": Quota(consumer_byte_rate=7)})
    notices = zk.get_children("/config/changes")
    assert len(notices) == 3
    assert json.loads(zk.get(f"/config/changes/{sorted(notices)[0]}")[0]) == {
        "version": 2, "entity_path": "users/alice"}
    store.set_quota(zk, "User:alice", {"producer_byte_rate": None, "request_rate": None})
    assert zk.exists("/config/users/alice") is None
    with pytest.raises(ValueError, match="quota.max.principals"):
        store.set_quota(zk, "User:bob", {"request_rate": 1}, max_entities=0)
    with pytest.raises(ValueError, match="whole number"):
        store.set_quota(zk, "User:bob", {"request_rate": 0})
    assert zk.exists("/config/users/bob") is None


def test_writes_are_refused_whole_past_their_bounds(cluster):
    _, zk = cluster
    store.add_acls(zk, [acl(who=f"User:u{i}") for i in range(3)])
    with pytest.raises(ValueError, match="acl.max.bindings"):
        store.add_acls(zk, [acl(who="User:x"), acl(who="User:y")], max_bindings=4)
    small = zkread.Bounds.of({"zookeeper.max.node.bytes": 1024})
    with pytest.raises(ValueError, match="zookeeper.max.node.bytes.*nothing changed"):
        store.add_acls(zk, [acl(name="alone")] + [acl(who=f"User:v{i}") for i in range(30)],
                       bounds=small)  # (the small node first: not written either)
    with pytest.raises(ValueError, match="'/'"):
        store.add_acls(zk, [acl(who="User:z"), acl(name="a/b")])
    assert len(store.list_acls(zk)) == 3  # nothing of the refused ones


def hostile_nodes():
    node = '{"version":1,"acls":[%s]}'
    entry = '{"principal":"User:a","permissionType":"Allow","operation":"Read","host":"*"}'
    return {
        "not JSON": ("/kafka-acl/Topic/bad", b"{{{"),
        "wrong version": ("/kafka-acl/Topic/bad", b'{"version":3,"acls":[]}'),
        "huge": ("/kafka-acl/Topic/bad", (node % ",".join([entry] * 4000)).encode()),
        "bad principal": ("/kafka-acl/Topic/bad", (node % entry.replace("User:a", ":a")).encode()),
        "bad resource name": ("/kafka-acl/Cluster/other", (node % entry).encode()),
    }


@pytest.mark.parametrize("kind", sorted(hostile_nodes()))
def test_a_hostile_node_refuses_the_whole_strict_read_and_is_passed_over_by_commands(
        cluster, kind):
    _, zk = cluster
    good = acl()
    store.add_acls(zk, [good])
    path, data = hostile_nodes()[kind]
    zk.create(path, data, makepath=True)
    with pytest.raises(store.AclLayoutError) as e:
        store.read_acls(zk)
    assert str(e.value).startswith(path) and "\n" not in str(e.value)
    said = []
    assert store.list_acls(zk, report=lambda p, line: said.append((p, line))) == [good]
    assert said and said[0][0] == path
    assert store.remove_acls(zk, [AclFilter()]) == [good]  # removed around the bad node


def test_too_many_resources_refuse_the_strict_read(cluster):
    _, zk = cluster
    store.add_acls(zk, [acl(name=f"t{i}") for i in range(5)])
    assert len(store.read_acls(zk, max_bindings=5)) == 5
    with pytest.raises(store.AclLayoutError, match="more than acl.max.bindings"):
        store.read_acls(zk, max_bindings=4)
    store.add_acls(zk, [acl(name="t0", who="User:b")])
    with pytest.raises(store.AclLayoutError, match="more than acl.max.bindings"):
        store.read_acls(zk, max_bindings=5)  # 5 nodes, 6 bindings


def test_hostile_quota_nodes_are_left_out_and_the_rest_kept(cluster):
    _, zk = cluster
    store.set_quota(zk, "User:alice", {"request_rate": 5})
    zk.create("/config/users/bob", b'{"version":1,"config":{"request_rate":"x"}}')
    zk.create("/config/users/%61lice", b'{"version":1,"config":{"request_rate":"9"}}')
    zk.create("/config/users/carol", b"")  # a user node of client-id children only
    said = []
    quotas = store.read_quotas(zk, report=lambda p, line: said.append(p))
    assert quotas == QuotaSet({"User:alice": Quota(request_rate=5)})
    assert sorted(said) == ["/config/users/%61lice", "/config/users/bob"]
    for i in range(4):
        store.set_quota(zk, f"User:u{i}", {"request_rate": 1})
    zk.delete("/config/users/bob")
    zk.delete("/config/users/%61lice")
    said.clear()
    assert len(store.read_quotas(zk, max_entities=3, report=lambda p, line: said.append(p))
               .entities) <= 3
    assert said == ["/config/users"]


def test_two_writers_at_once_lose_nothing(zkserver, cluster):
    connect, zk = cluster
    errors = []

    def writer(who: str) -> None:
        try:
            with kazoo(connect) as client:
                for i in range(25):
                    store.add_acls(client, [acl(who=f"User:{who}{i}")])
                    store.set_quota(client, f"User:{who}", {"request_rate": i + 1})
                    store.set_quota(client, "<default>", {"request_rate": 1000})
                store.remove_acls(client, [AclFilter(principal=Principal.parse(f"User:{who}0"))])
        except Exception as exc:  # noqa: BLE001 - said by the test
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    kept = store.list_acls(zk)
    assert {str(b.principal) for b in kept} == (
        {f"User:a{i}" for i in range(1, 25)} | {f"User:b{i}" for i in range(1, 25)})
    assert store.list_quotas(zk).entities == {"User:a": Quota(request_rate=25),
                                              "User:b": Quota(request_rate=25),
                                              "<default>": Quota(request_rate=1000)}
    assert len(zk.get_children("/kafka-acl-changes")) == 52  # a notice per change


def test_old_notices_are_removed_by_the_next_writer(cluster, monkeypatch):
    _, zk = cluster
    for i in range(5):
        store.add_acls(zk, [acl(who=f"User:u{i}")])
    root = "/kafka-acl-changes"
    newest = max(zk.get_children(root))
    assert len(zk.get_children(root)) == 5
    assert store.prune_notices(zk, root) == 0  # young, and fewer than the count bound
    later = zk.exists(f"{root}/{newest}").ctime + store.NOTICE_KEEP_S * 1000 + 1
    assert store.prune_notices(zk, root, now_ms=later) == 4
    assert zk.get_children(root) == [newest]  # the newest stays whatever its age
    monkeypatch.setattr(store, "NOTICE_KEEP_COUNT", 3)
    for i in range(5):
        store.add_acls(zk, [acl(who=f"User:w{i}")])
    assert len(zk.get_children(root)) == 3
