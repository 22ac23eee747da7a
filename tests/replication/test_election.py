"""Who may lead: the first live ISR member in replica order (unless unclean), and
the controller's decisions built on it never pick a broker outside the ISR, never
empty the ISR, and bump the leader epoch exactly when the leader changes."""

from hypothesis import given, settings
from hypothesis import strategies as st

from hostbroker.cluster.controller_decisions import after_failure, after_return
from hostbroker.replication.election import elect_leader
from hostbroker.cluster.replica_nodes import PartitionState


def test_elect_leader_takes_the_first_live_isr_member_in_replica_order():
    assert elect_leader([1, 2, 3], {3, 2}, {1, 2, 3}) == 2
    assert elect_leader([1, 2, 3], {1, 2, 3}, {3, 2}) == 2
    assert elect_leader([1, 2, 3], {1}, {2, 3}) is None
    assert elect_leader([1, 2, 3], {1}, {2, 3}, unclean=True) == 2
    assert elect_leader([1, 2, 3], {1}, set(), unclean=True) is None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=4, unique=True), st.data())
def test_a_clean_election_never_picks_a_broker_outside_the_isr(replicas, data):
    isr = tuple(data.draw(st.lists(st.sampled_from(replicas), min_size=1, unique=True)))
    leader = data.draw(st.sampled_from((-1, *isr)))
    before = PartitionState(leader, 3, isr, 1)
    live = set(data.draw(st.lists(st.integers(0, 5), unique=True)))
    decide = after_return if leader == -1 else after_failure  # as the controller does
    after = decide(replicas, before, live)
    if after is None:
        return
    assert set(after.isr) <= set(isr) and after.isr
    if after.leader != -1:
        assert after.leader in live and after.leader in after.isr
    assert after.leader_epoch == (3 if after.leader == leader else 4)
