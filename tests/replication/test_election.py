"""The controller's choices: leaders from the ISR only (unless unclean), the ISR
never emptied by deaths, a new epoch at every leader change."""

from hypothesis import given, settings
from hypothesis import strategies as st

from hostbroker.replication.election import (
    elect_leader,
    next_state,
    preferred_leader,
    shrink_isr,
    without_broker,
)
from hostbroker.replication.zknodes import PartitionState


def test_elect_leader_takes_the_first_live_isr_member_in_replica_order():
    assert elect_leader([1, 2, 3], {3, 2}, {1, 2, 3}) == 2
    assert elect_leader([1, 2, 3], {1, 2, 3}, {3, 2}) == 2
    assert elect_leader([1, 2, 3], {1}, {2, 3}) is None
    assert elect_leader([1, 2, 3], {1}, {2, 3}, unclean=True) == 2
    assert elect_leader([1, 2, 3], {1}, set(), unclean=True) is None


def test_preferred_leader_only_when_it_may_lead():
    assert preferred_leader([1, 2], {1, 2}, {1, 2}) == 1
    assert preferred_leader([1, 2], {2}, {1, 2}) is None
    assert preferred_leader([1, 2], {1, 2}, {2}) is None
    assert preferred_leader([], (), ()) is None


def test_shrink_isr_never_empties_it():
    assert shrink_isr([1, 2, 3], {1, 3}) == (1, 3)
    assert shrink_isr([1, 2], set()) == (1, 2)
    assert without_broker([1, 2], 2) == (1,)
    assert without_broker([2], 2) == (2,)


def test_a_new_partition():
    assert next_state([1, 2, 3], None, {2, 3}, 4) == PartitionState(2, 0, (2, 3), 4)
    assert next_state([1, 2], None, set(), 4) == PartitionState(-1, 0, (1, 2), 4)


def test_a_live_leader_stays_and_the_isr_shrinks():
    before = PartitionState(1, 5, (1, 2, 3), 2)
    assert next_state([1, 2, 3], before, {1, 2, 3}, 3) == PartitionState(1, 5, (1, 2, 3), 3)
    assert next_state([1, 2, 3], before, {1, 3}, 3) == PartitionState(1, 5, (1, 3), 3)


def test_a_dead_leader_is_replaced_from_the_isr_with_a_new_epoch():
    before = PartitionState(1, 5, (1, 3), 2)
    assert next_state([1, 2, 3], before, {2, 3}, 3) == PartitionState(3, 6, (3,), 3)


def test_the_last_isr_member_dying_leaves_no_leader_and_keeps_the_isr():
    before = PartitionState(1, 5, (1,), 2)
    offline = next_state([1, 2], before, {2}, 3)
    assert offline == PartitionState(-1, 6, (1,), 3)
    # 2 was not in sync: it may not lead; 1 returning leads again.
    assert next_state([1, 2], offline, {2}, 3) == offline
    assert next_state([1, 2], offline, {1, 2}, 3) == PartitionState(1, 7, (1,), 3)


def test_unclean_election_takes_any_live_replica_and_resets_the_isr():
    before = PartitionState(-1, 6, (1,), 2)
    assert next_state([1, 2], before, {2}, 3, unclean=True) == PartitionState(2, 7, (2,), 3)


def test_an_asked_leader_is_granted_only_from_the_live_isr():
    before = PartitionState(2, 5, (1, 2), 2)
    assert next_state([1, 2], before, {1, 2}, 3, leader=1) == PartitionState(1, 6, (1, 2), 3)
    assert next_state([1, 2], PartitionState(2, 5, (2,), 2), {1, 2}, 3, leader=1) == \
        PartitionState(2, 5, (2,), 3)


def test_isr_members_no_longer_replicas_are_dropped():
    before = PartitionState(4, 5, (4, 1), 2)
    assert next_state([1, 2], before, {1, 2, 4}, 3) == PartitionState(1, 6, (1,), 3)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=4, unique=True), st.data())
def test_a_clean_election_never_picks_a_broker_outside_the_isr(replicas, data):
    isr = tuple(data.draw(st.lists(st.sampled_from(replicas), min_size=1, unique=True)))
    leader = data.draw(st.sampled_from((-1, *isr)))
    before = PartitionState(leader, 3, isr, 1)
    live = set(data.draw(st.lists(st.integers(0, 5), unique=True)))
    after = next_state(replicas, before, live, 2)
    assert set(after.isr) <= set(isr) and after.isr
    if after.leader != -1:
        assert after.leader in live and after.leader in after.isr
    assert after.leader_epoch == (3 if after.leader == leader else 4)
