"""The ZooKeeper side of changing a replicated topic (hostbroker/cluster/topic_changes.py,
controller_topics.checked_config): pure, no ZooKeeper."""

from __future__ import annotations

import random

import pytest

from hostbroker.cluster.controller_topics import checked_config
from hostbroker.cluster.topic_changes import (
    added_replicas,
    changed_config,
    decode_change,
    encode_change,
)


def test_a_change_node_names_its_topic_as_a_json_string():
    assert encode_change("orders") == b'"orders"'  # Kafka 0.8.1's value
    assert decode_change(encode_change("orders"), "/config/changes/c") == "orders"
    assert decode_change(encode_change("t\u00e9"), "/config/changes/c") == "t\u00e9"


def test_added_partitions_keep_the_old_ones_and_the_replication_factor():
    old = {0: [2, 3], 1: [3, 1], 2: [1, 2]}
    added = added_replicas(old, [1, 2, 3, 4], 7, random.Random(1))
    assert sorted(added) == [3, 4, 5, 6]
    assert all(len(r) == 2 and len(set(r)) == 2 for r in added.values())
    assert all(set(r) <= {1, 2, 3, 4} for r in added.values())
    # the round-robin goes on from partition 0's broker: leaders follow each other
    leaders = [added[p][0] for p in sorted(added)]
    ordered = [1, 2, 3, 4]
    first = ordered.index(2)
    assert leaders == [ordered[(first + p) % 4] for p in range(3, 7)]


def test_added_partitions_of_a_topic_whose_first_broker_is_gone_still_spread():
    added = added_replicas({0: [9, 1]}, [1, 2, 3], 4, random.Random(2))
    assert sorted(added) == [1, 2, 3]
    assert sorted(r[0] for r in added.values()) == [1, 2, 3]


@pytest.mark.parametrize("old, brokers, count, said", [
    ({0: [1], 1: [2]}, [1, 2], 2, "partitions only grow"),
    ({0: [1], 1: [2]}, [1, 2], 1, "partitions only grow"),
    ({0: [1, 2, 3]}, [1, 2], 2, "larger than the 2 available brokers"),
])
def test_what_cannot_be_added_is_one_line(old, brokers, count, said):
    with pytest.raises(ValueError, match=said) as caught:
        added_replicas(old, brokers, count)
    assert len(str(caught.value).splitlines()) == 1


def test_a_config_change_sets_and_deletes_keys():
    current = {"retention.ms": "1000", "segment.bytes": "4096"}
    assert changed_config(current, {"retention.ms": "5"}, ["segment.bytes"]) == \
        {"retention.ms": "5"}
    assert changed_config(current, {}, ["flush.ms"]) == current  # not set: no change
    with pytest.raises(ValueError, match="both set and deleted"):
        changed_config(current, {"flush.ms": "1"}, ["flush.ms"])


@pytest.mark.parametrize("config, problem", [
    ({"retention.ms": "1000", "min.insync.replicas": "2"}, None),
    ({"unclean.leader.election.enable": "TRUE"}, None),
    ({"no.such.key": "1"}, "no.such.key"),
    ({"segment.bytes": "12"}, "segment.bytes"),
    ({"retention.ms": "soon"}, "retention.ms"),
    ({"min.insync.replicas": "3"}, "over the replication factor"),
    ({"unclean.leader.election.enable": "maybe"}, "true or false"),
])
def test_a_replicated_topics_config_is_what_its_writers_can_take(config, problem):
    said = checked_config(config, 2)
    if problem is None:
        assert said is None
    else:
        assert problem in said and len(said.splitlines()) == 1
