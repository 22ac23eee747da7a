"""The replication nodes of ZooKeeper: the documented bytes, round trips, and
every hostile value refused with one line naming its path."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostbroker.cluster.zkread import Bounds
from hostbroker.cluster import replica_nodes as z
from hostbroker.cluster.replica_nodes import PartitionState


def test_paths():
    assert z.assignment_path("t") == "/brokers/topics/t"
    assert z.partitions_path("t") == "/brokers/topics/t/partitions"
    assert z.partition_path("t", 3) == "/brokers/topics/t/partitions/3"
    assert z.state_path("t", 3) == "/brokers/topics/t/partitions/3/state"
    assert z.topic_config_path("t") == "/config/topics/t"
    assert z.delete_topic_path("t") == "/admin/delete_topics/t"
    assert z.controlled_shutdown_path(4) == "/admin/controlled_shutdown/4"
    assert (z.CONTROLLER, z.CONTROLLER_EPOCH) == ("/controller", "/controller_epoch")
    assert z.PREFERRED_REPLICA_ELECTION == "/admin/preferred_replica_election"
    assert z.REASSIGN_PARTITIONS == "/admin/reassign_partitions"


def test_the_values_are_the_documented_json():
    assert z.encode_assignment({1: [2, 3], 0: [1, 2]}) == \
        b'{"version":1,"partitions":{"0":[1,2],"1":[2,3]}}'
    assert z.encode_state(PartitionState(2, 5, (2, 3), 7)) == \
        b'{"version":1,"leader":2,"leader_epoch":5,"isr":[2,3],"controller_epoch":7}'
    assert z.encode_topic_config({"min.insync.replicas": "2"}) == \
        b'{"version":1,"config":{"min.insync.replicas":"2"}}'
    assert z.encode_controller(3, 1700000000000) == \
        b'{"version":1,"brokerid":3,"timestamp":"1700000000000"}'
    assert z.encode_controller_epoch(12) == b"12"
    assert z.encode_preferred_election([("t", 0)]) == \
        b'{"version":1,"partitions":[{"topic":"t","partition":0}]}'
    assert z.encode_reassignment({("t", 1): [3, 4]}) == \
        b'{"version":1,"partitions":[{"topic":"t","partition":1,"replicas":[3,4]}]}'


def test_round_trips():
    assert z.decode_assignment(z.encode_assignment({0: [1, 2], 1: [2, 1]}), "/p") == \
        {0: (1, 2), 1: (2, 1)}
    # a reassignment may leave partitions with different replication factors
    assert z.decode_assignment(z.encode_assignment({0: [1, 2], 1: [3]}), "/p") == \
        {0: (1, 2), 1: (3,)}
    state = PartitionState(-1, 9, (3,), 2)
    assert z.decode_state(z.encode_state(state), "/p") == state
    assert z.decode_topic_config(z.encode_topic_config({"a": "1"}), "/p") == {"a": "1"}
    assert z.decode_controller(z.encode_controller(7)) == 7
    assert z.decode_controller_info(z.encode_controller(7, 5)) == z.ControllerInfo(7, 5)
    assert z.decode_controller_epoch(b"12") == 12
    assert z.decode_preferred_election(z.encode_preferred_election([("t", 1), ("u", 0)])) == \
        [("t", 1), ("u", 0)]
    assert z.decode_reassignment(z.encode_reassignment({("t", 1): [3, 4]})) == {("t", 1): (3, 4)}
    assert z.decode_broker_id_name("12", "/p") == 12


def test_an_empty_topic_node_is_a_0_7_topic():
    assert z.decode_assignment(b"", "/brokers/topics/t") is None


def j(value) -> bytes:
    return json.dumps(value).encode()


def assignment(partitions, version=1):
    return j({"version": version, "partitions": partitions})


def state(leader=1, epoch=0, isr=(1,), controller_epoch=0, **extra):
    return j({"version": 1, "leader": leader, "leader_epoch": epoch, "isr": list(isr),
              "controller_epoch": controller_epoch, **extra})


SMALL = Bounds.of({"zookeeper.max.partitions.per.registration": 4,
                   "zookeeper.max.partitions": 3})

HOSTILE = [
    (z.decode_assignment, b"{\"a\":}", "not JSON"),
    (z.decode_assignment, b"[1]", "not a JSON object"),
    (z.decode_assignment, b"\xff", "UTF-8"),
    (z.decode_assignment, b"[" * 10 + b"]" * 10, "nested"),
    (z.decode_assignment, b" " * 300000, "over zookeeper.max.node.bytes"),
    (z.decode_assignment, assignment({"0": [1]}, version=2), "not version 1"),
    (z.decode_assignment, assignment({"0": [1]}, version=True), "not version 1"),
    (z.decode_assignment, assignment({}), "non-empty"),
    (z.decode_assignment, assignment([1]), "non-empty object"),
    (z.decode_assignment, assignment({"1": [1]}), "not numbered 0 to 0"),
    (z.decode_assignment, assignment({"0": [1], "2": [1]}), "not numbered"),
    (z.decode_assignment, assignment({"-1": [1]}), "not a partition number"),
    (z.decode_assignment, assignment({"01": [1]}), "not a partition number"),
    (z.decode_assignment, assignment({"x": [1]}), "not a partition number"),
    (z.decode_assignment, assignment({"0": []}), "list of 1 to 8"),
    (z.decode_assignment, assignment({"0": list(range(9))}), "list of 1 to 8"),
    (z.decode_assignment, assignment({"0": [1, 1]}), "twice"),
    (z.decode_assignment, assignment({"0": [1, "2"]}), "broker id"),
    (z.decode_assignment, assignment({"0": [1, True]}), "broker id"),
    (z.decode_assignment, assignment({"0": [1, 2**31]}), "broker id"),
    (z.decode_assignment, assignment({"0": [1, -1]}), "broker id"),
    (z.decode_assignment, assignment({"0": [1.5]}), "broker id"),
    (z.decode_state, state(leader=5), "not in the ISR"),
    (z.decode_state, state(leader=-2), "leader"),
    (z.decode_state, state(leader=None), "leader"),
    (z.decode_state, state(epoch=-1), "leader_epoch"),
    (z.decode_state, state(epoch=2**31), "leader_epoch"),
    (z.decode_state, state(controller_epoch="1"), "controller_epoch"),
    (z.decode_state, state(isr=(1, 1)), "twice"),
    (z.decode_state, state(isr=tuple(range(1, 10)), leader=1), "isr is not a list"),
    (z.decode_state, state(isr=(), leader=1), "not in the ISR"),
    (z.decode_state, j({"leader": 1}), "not version 1"),
    (z.decode_topic_config, j({"version": 1, "config": []}), "not an object"),
    (z.decode_topic_config, j({"version": 1, "config": {"a": 1}}), "not a string"),
    (z.decode_topic_config, j({"version": 1, "config": {"a": "x" * 5000}}), "not a string"),
    (z.decode_topic_config, j({"version": 1, "config": {"": "1"}}), "not a config key"),
    (z.decode_topic_config, j({"version": 1, "config": {"a\n": "1"}}), "not a config key"),
    (z.decode_topic_config, j({"version": 1, "config": {str(i): "1" for i in range(300)}}),
     "over 256"),
    (z.decode_controller, j({"version": 1, "brokerid": -1, "timestamp": "1"}), "brokerid"),
    (z.decode_controller, j({"version": 1, "brokerid": 1, "timestamp": 1}), "timestamp"),
    (z.decode_controller, j({"version": 1, "brokerid": 1, "timestamp": "1" * 20}), "timestamp"),
    (z.decode_controller_epoch, b"-1", "not a decimal"),
    (z.decode_controller_epoch, b"2147483648", "over the largest epoch"),
    (z.decode_controller_epoch, b"1e3", "not a decimal"),
    (z.decode_preferred_election, j({"version": 1, "partitions": {}}), "not a list"),
    (z.decode_preferred_election, j({"version": 1, "partitions": [1]}), "not an object"),
    (z.decode_preferred_election, j({"version": 1, "partitions": [
        {"topic": "t", "partition": 0}, {"topic": "t", "partition": 0}]}), "named twice"),
    (z.decode_preferred_election, j({"version": 1, "partitions": [
        {"topic": "a/b", "partition": 0}]}), "not a topic name"),
    (z.decode_preferred_election, j({"version": 1, "partitions": [
        {"topic": "t", "partition": -1}]}), "partition"),
    (z.decode_reassignment, j({"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "replicas": []}]}), "list of 1 to 8"),
    (z.decode_reassignment, j({"version": 1, "partitions": [
        {"topic": "t", "partition": 0}]}), "list of 1 to 8"),
    (z.decode_reassignment, j({"version": 1, "partitions": [
        {"topic": "", "partition": 0, "replicas": [1]}]}), "not a topic name"),
]


@pytest.mark.parametrize("decode, data, problem", HOSTILE,
                         ids=[f"{d.__name__}-{p}" for d, _, p in HOSTILE])
def test_hostile_values_are_refused_naming_the_path(decode, data, problem):
    with pytest.raises(ValueError, match=problem) as info:
        decode(data, "/some/path")
    assert str(info.value).startswith("/some/path: ")


def test_bounds_from_settings_are_kept():
    with pytest.raises(ValueError, match="zookeeper.max.partitions.per.registration"):
        z.decode_assignment(assignment({str(p): [1] for p in range(5)}), "/p", SMALL)
    assert len(z.decode_assignment(assignment({str(p): [1] for p in range(4)}), "/p", SMALL)) == 4
    with pytest.raises(ValueError, match="zookeeper.max.partitions "):
        z.decode_reassignment(j({"version": 1, "partitions": [
            {"topic": "t", "partition": p, "replicas": [1]} for p in range(4)]}), "/p", SMALL)
    with pytest.raises(ValueError, match="partition"):
        z.decode_preferred_election(j({"version": 1, "partitions": [
            {"topic": "t", "partition": 4}]}), "/p", SMALL)


def test_broker_id_names():
    for name in ("-1", "x", "2147483648", "1" * 11, ""):
        with pytest.raises(ValueError, match="not a broker id"):
            z.decode_broker_id_name(name, "/admin/controlled_shutdown")


DECODERS = [z.decode_assignment, z.decode_state, z.decode_topic_config, z.decode_controller,
            z.decode_controller_epoch, z.decode_preferred_election, z.decode_reassignment]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 2**40) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=4),
    max_leaves=12)
shaped = st.fixed_dictionaries({
    "version": st.sampled_from([1, 1, 1, 2, "1", True]),
    "partitions": json_values | st.dictionaries(st.sampled_from(["0", "1", "01", "x"]),
                                                st.lists(st.integers(-2, 10), max_size=9)),
    "leader": st.integers(-3, 3), "leader_epoch": st.integers(-1, 3),
    "isr": st.lists(st.integers(-1, 3), max_size=9), "controller_epoch": json_values,
    "config": json_values, "brokerid": json_values, "timestamp": json_values,
})


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(DECODERS), st.binary(max_size=100) | json_values.map(j) | shaped.map(j))
def test_any_value_decodes_or_is_a_value_error(decode, data):
    try:
        decode(data, "/p")
    except ValueError as exc:
        assert str(exc).startswith("/p: ")
