"""Replica assignment: Kafka's round-robin spread, and every refusal in one line."""

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostbroker.replication import MAX_REPLICAS
from hostbroker.replication.assignment import (
    assign_replicas,
    reassignment_plan,
    replication_factor_of,
)


def test_a_fixed_start_and_shift_give_kafkas_layout():
    # 5 brokers, 10 partitions, RF 3, start 0, shift 0: the first replicas walk
    # the brokers; followers sit 1 + (shift + j) mod 4 after, shift +1 per round.
    got = assign_replicas([0, 1, 2, 3, 4], 10, 3, start=0, shift=0)
    assert got == {
        0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
        5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2],
    }


def test_broker_ids_are_used_in_sorted_order():
    assert assign_replicas([30, 10, 20], 3, 1, start=0, shift=0) == {0: [10], 1: [20], 2: [30]}


def test_first_partition_continues_a_topic():
    whole = assign_replicas([1, 2, 3, 4], 8, 2, start=1, shift=2)
    tail = assign_replicas([1, 2, 3, 4], 3, 2, start=1, shift=2 + 1, first_partition=5)
    assert tail == {p: whole[p] for p in (5, 6, 7)}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 1000), min_size=1, max_size=12, unique=True),
       st.integers(1, 60), st.data())
def test_replicas_are_distinct_and_leaders_spread_evenly(brokers, partitions, data):
    rf = data.draw(st.integers(1, min(len(brokers), MAX_REPLICAS)))
    got = assign_replicas(brokers, partitions, rf, rng=random.Random(data.draw(st.integers())))
    assert sorted(got) == list(range(partitions))
    for replicas in got.values():
        assert len(replicas) == rf and len(set(replicas)) == rf
        assert set(replicas) <= set(brokers)
    leaders = Counter(replicas[0] for replicas in got.values())
    assert max(leaders.values()) - min(leaders.get(b, 0) for b in brokers) <= 1
    replicas_per_broker = Counter(b for replicas in got.values() for b in replicas)
    assert max(replicas_per_broker.values()) - min(
        replicas_per_broker.get(b, 0) for b in brokers) <= rf


def test_random_starts_differ_between_calls():
    layouts = {tuple(map(tuple, assign_replicas(range(6), 6, 2).values())) for _ in range(40)}
    assert len(layouts) > 1


@pytest.mark.parametrize("brokers, partitions, rf, problem", [
    ([1, 2], 3, 3, "replication factor 3 is larger than the 2 available brokers"),
    ([1], 3, 2, "larger than the 1 available broker$"),
    (list(range(10)), 3, MAX_REPLICAS + 1, f"over the most replicas a partition may have"),
    ([1, 2], 3, 0, "not positive"),
    ([1, 2], 0, 1, "partition count 0"),
    ([1, 1], 3, 1, "twice"),
    ([], 3, 1, "larger than the 0 available brokers"),
    ([-1, 2], 3, 1, "broker id"),
])
def test_refusals_name_the_problem(brokers, partitions, rf, problem):
    with pytest.raises(ValueError, match=problem):
        assign_replicas(brokers, partitions, rf)


def test_a_reassignment_plan_moves_topics_to_the_new_brokers():
    current = {"a": {0: [1, 2], 1: [2, 1]}, "b": {0: [1], 1: [2], 2: [1]}}
    plan = reassignment_plan(current, [3, 4, 5], start=0, shift=0)
    assert plan == {("a", 0): [3, 4], ("a", 1): [4, 5],
                    ("b", 0): [3], ("b", 1): [4], ("b", 2): [5]}
    unchanged = reassignment_plan({"a": {0: [3, 4], 1: [4, 5]}}, [3, 4, 5], start=0, shift=0)
    assert unchanged == {}
    with pytest.raises(ValueError, match="topic a: replication factor 2 is larger"):
        reassignment_plan(current, [3])
    assert replication_factor_of({0: [1, 2, 3], 1: [1]}) == 3
    with pytest.raises(ValueError):
        replication_factor_of({})
