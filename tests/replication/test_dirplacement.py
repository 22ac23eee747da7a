"""Placement of replicas across log dirs (hostbroker/replication/dirplacement.py):
distinct usable dirs, balanced by replicas and leaders, distinct devices first,
the refusals' lines."""

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostbroker.replication.dirplacement import DirLoad, place_replicas


def fresh(n, devices=None):
    return {d: DirLoad(0, 0, 0, (devices or {}).get(d, d)) for d in range(1, n + 1)}


def counts(plan):
    replicas = Counter(d for dirs in plan.values() for d in dirs)
    leaders = Counter(dirs[0] for dirs in plan.values())
    return replicas, leaders


def test_rf_2_on_three_dirs_balances_replicas_and_leaders():
    plan = place_replicas(fresh(3), range(3), 2)
    assert plan == {0: [1, 2], 1: [3, 1], 2: [2, 3]}
    replicas, leaders = counts(plan)
    assert set(replicas.values()) == {2} and set(leaders.values()) == {1}


def test_rf_3_on_three_dirs_rotates_the_leader():
    plan = place_replicas(fresh(3), range(6), 3)
    replicas, leaders = counts(plan)
    assert all(sorted(dirs) == [1, 2, 3] for dirs in plan.values())
    assert set(leaders.values()) == {2}


@settings(deadline=None, max_examples=200)
@given(st.integers(1, 10), st.integers(1, 40), st.data())
def test_every_partition_gets_rf_distinct_dirs_spread_evenly(n, partitions, data):
    rf = data.draw(st.integers(1, min(n, 8)))
    plan = place_replicas(fresh(n), range(partitions), rf)
    assert sorted(plan) == list(range(partitions))
    for dirs in plan.values():
        assert len(dirs) == rf and len(set(dirs)) == rf and set(dirs) <= set(range(1, n + 1))
    replicas, leaders = counts(plan)
    spread = [replicas.get(d, 0) for d in range(1, n + 1)]
    assert max(spread) - min(spread) <= 1
    lead = [leaders.get(d, 0) for d in range(1, n + 1)]
    assert max(lead) - min(lead) <= 1
    assert place_replicas(fresh(n), range(partitions), rf) == plan  # repeatable


def test_the_existing_load_is_taken_into_account():
    dirs = {1: DirLoad(10, 5, 0, 1), 2: DirLoad(0, 0, 0, 2), 3: DirLoad(0, 0, 0, 3)}
    plan = place_replicas(dirs, [0, 1], 2)
    assert plan == {0: [2, 3], 1: [3, 2]}


def test_bytes_then_id_break_ties():
    dirs = {1: DirLoad(1, 0, 500, 1), 2: DirLoad(1, 0, 100, 2), 3: DirLoad(1, 0, 100, 3)}
    assert place_replicas(dirs, [7], 2) == {7: [2, 3]}


def test_the_preferred_leader_is_the_chosen_dir_leading_fewest():
    dirs = {1: DirLoad(1, 1, 0, 1), 2: DirLoad(1, 0, 0, 2), 3: DirLoad(5, 0, 0, 3)}
    assert place_replicas(dirs, [0], 2) == {0: [2, 1]}


def test_distinct_devices_first_while_enough_exist():
    # dirs 1 and 2 share a disk, 3 and 4 another
    dirs = fresh(4, devices={1: 10, 2: 10, 3: 20, 4: 20})
    plan = place_replicas(dirs, range(8), 2)
    for dirs_of in plan.values():
        assert {(d > 2) for d in dirs_of} == {False, True}
    # three replicas on two disks: both disks, one of them twice
    plan = place_replicas(fresh(4, devices={1: 10, 2: 10, 3: 20, 4: 20}), range(4), 3)
    for dirs_of in plan.values():
        assert {(d > 2) for d in dirs_of} == {False, True}


def test_unusable_dirs_are_not_placed_on():
    dirs = {1: DirLoad(0, 0, 0, 1, usable=False), 2: DirLoad(3, 3, 0, 2), 3: DirLoad(3, 3, 0, 3)}
    plan = place_replicas(dirs, range(4), 2)
    assert all(sorted(d) == [2, 3] for d in plan.values())


@pytest.mark.parametrize("n, offline, rf, line", [
    (3, 1, 3, "replication factor 3 needs 3 usable log dirs; the broker has 2 (1 offline)"),
    (2, 0, 3, "replication factor 3 needs 3 usable log dirs; the broker has 2"),
    (9, 0, 9, "replication factor 9 must be 1 to 8"),
    (2, 0, 0, "replication factor 0 must be 1 to 8"),
])
def test_refusals_say_why_in_one_line(n, offline, rf, line):
    dirs = {d: DirLoad(0, 0, 0, d, usable=d > offline) for d in range(1, n + 1)}
    with pytest.raises(ValueError) as info:
        place_replicas(dirs, [0], rf)
    assert str(info.value) == line
