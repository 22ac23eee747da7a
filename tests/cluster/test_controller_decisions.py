"""The controller's decisions, pure: who leads and who is in sync after a failure, a
return, a preferred election and a controlled shutdown."""

from __future__ import annotations

from hostbroker.cluster.controller import after_failure, after_return, preferred, without
from hostbroker.cluster.replica_nodes import PartitionState


def state(leader, epoch, isr):
    return PartitionState(leader, epoch, list(isr), 7)


def test_a_follower_gone_leaves_the_isr_and_the_leader_and_epoch_stay():
    new = after_failure([1, 2, 3], state(1, 4, [1, 2, 3]), live={1, 2})
    assert (new.leader, new.leader_epoch, new.isr) == (1, 4, [1, 2])


def test_a_leader_gone_is_replaced_from_the_isr_in_replica_order_and_the_epoch_bumps():
    new = after_failure([1, 2, 3], state(1, 4, [1, 3, 2]), live={2, 3})
    assert (new.leader, new.leader_epoch, new.isr) == (2, 5, [3, 2])


def test_a_replica_out_of_sync_never_leads_without_unclean_election():
    new = after_failure([1, 2, 3], state(1, 4, [1]), live={2, 3})
    # no one leads; the last ISR member stays the ISR (it may lead again when back)
    assert (new.leader, new.leader_epoch, new.isr) == (-1, 5, [1])
    unclean = after_failure([1, 2, 3], state(1, 4, [1]), live={2, 3}, unclean=True)
    assert (unclean.leader, unclean.leader_epoch, unclean.isr) == (2, 5, [2])


def test_nothing_changes_when_everyone_in_the_state_is_live():
    assert after_failure([1, 2], state(1, 0, [1, 2]), live={1, 2, 3}) is None
    assert after_failure([1, 2], state(-1, 3, [1]), live={2}) is None


def test_the_last_isr_member_back_leads_again():
    assert after_return([1, 2], state(1, 3, [1]), live={1, 2}) is None  # already leads
    new = after_return([1, 2], state(-1, 3, [1]), live={1, 2})
    assert (new.leader, new.leader_epoch, new.isr) == (1, 4, [1])
    assert after_return([1, 2], state(-1, 3, [1]), live={2}) is None


def test_unclean_a_replica_out_of_sync_back_leads_alone():
    new = after_return([1, 2], state(-1, 3, [1]), live={2}, unclean=True)
    assert (new.leader, new.leader_epoch, new.isr) == (2, 4, [2])
    # an ISR member live still comes first
    new = after_return([2, 1], state(-1, 3, [1]), live={1, 2}, unclean=True)
    assert (new.leader, new.leader_epoch, new.isr) == (1, 4, [1])


def test_preferred_election_needs_the_first_replica_live_and_in_sync():
    new = preferred([1, 2, 3], state(2, 5, [2, 1]), live={1, 2, 3})
    assert (new.leader, new.leader_epoch, new.isr) == (1, 6, [2, 1])
    assert preferred([1, 2, 3], state(2, 5, [2, 3]), live={1, 2, 3}) is None  # not in sync
    assert preferred([1, 2, 3], state(2, 5, [2, 1]), live={2, 3}) is None  # not live
    assert preferred([1, 2, 3], state(1, 5, [1, 2]), live={1, 2, 3}) is None  # leads already


def test_a_controlled_shutdown_moves_leadership_and_leaves_the_isr():
    new = without([1, 2, 3], state(1, 2, [1, 2, 3]), gone=1, live={1, 2, 3})
    assert (new.leader, new.leader_epoch, new.isr) == (2, 3, [2, 3])
    follower = without([1, 2, 3], state(2, 2, [1, 2, 3]), gone=1, live={1, 2, 3})
    assert (follower.leader, follower.leader_epoch, follower.isr) == (2, 2, [2, 3])
    # the only one in sync keeps leading until it stops: nothing else has the data
    assert without([1, 2], state(1, 2, [1]), gone=1, live={1, 2}) is None
    assert without([1, 2, 3], state(2, 2, [2, 3]), gone=1, live={1, 2, 3}) is None
