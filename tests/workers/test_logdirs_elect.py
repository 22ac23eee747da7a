"""hb-logdirs' decisions over log dir ids: leaders only from the ISR, in replica
order; the ISR never emptied; a partition whose ISR names a dir missing from an
uncertain state file keeps no leader; a reassignment's leader move."""

from types import SimpleNamespace

from hostbroker.workers.logdirs.elect import decide, failover, moved_leader


def part(replicas, leader, epoch, isr):
    return SimpleNamespace(replicas=list(replicas), leader=leader, leader_epoch=epoch,
                           isr=list(isr))


def test_a_live_leader_with_a_full_isr_stays():
    assert decide([1, 2, 3], 1, 4, [1, 2, 3], {1, 2, 3}) is None


def test_the_leader_s_dir_leaves_the_next_isr_member_in_replica_order_leads():
    new = decide([1, 2, 3], 1, 4, [1, 3, 2], {2, 3})
    assert (new.leader, new.leader_epoch, sorted(new.isr)) == (2, 5, [2, 3])


def test_a_follower_s_dir_leaves_only_the_isr_shrinks():
    new = decide([1, 2, 3], 1, 4, [1, 2, 3], {1, 3})
    assert (new.leader, new.leader_epoch, list(new.isr)) == (1, 4, [1, 3])


def test_a_replica_outside_the_isr_never_leads_and_the_isr_is_never_emptied():
    new = decide([1, 2], 1, 7, [1], {2})
    assert new.leader == -1 and list(new.isr) == [1]
    assert new.leader_epoch == 8
    # nothing more changes while dir 1 stays away
    assert decide([1, 2], -1, 8, [1], {2}) is None
    # unclean: the out-of-sync replica leads, its ISR starts again with it alone
    new = decide([1, 2], -1, 8, [1], {2}, unclean=True)
    assert (new.leader, list(new.isr)) == (2, [2])


def test_a_leaderless_partition_gets_its_isr_member_back_when_its_dir_returns():
    new = decide([1, 2], -1, 8, [1], {1, 2})
    assert (new.leader, new.leader_epoch, list(new.isr)) == (1, 9, [1])


def test_an_uncertain_state_keeps_a_partition_leaderless_while_its_isr_names_a_missing_dir():
    # dir 3 is missing and may hold a newer copy: even a live leader steps down
    new = decide([1, 3], 1, 2, [1, 3], {1}, blocked={3})
    assert (new.leader, new.leader_epoch) == (-1, 3)
    assert decide([1, 3], -1, 3, [1, 3], {1}, blocked={3}) is None
    # a partition whose ISR does not name it is not held
    new = decide([1, 2], 1, 2, [1, 2], {1, 2}, blocked={3})
    assert new is None


def test_one_pass_over_the_document_returns_only_what_changes():
    parts = [(("a", 0), part([1, 2], 1, 0, [1, 2]), {}, {2}),
             (("a", 1), part([2, 1], 2, 0, [2, 1]), {}, {2}),
             (("b", 0), part([1, 2], 1, 0, [1]), {"unclean.leader.election.enable": "true"},
              {2})]
    changes = failover(parts)
    assert set(changes) == {("a", 0), ("a", 1), ("b", 0)}
    assert changes[("a", 0)].leader == 2 and changes[("a", 0)].leader_epoch == 1
    assert changes[("a", 1)].leader == 2 and list(changes[("a", 1)].isr) == [2]
    assert changes[("b", 0)].leader == 2  # the topic's unclean election
    assert failover([(tp, p, c, {1, 2}) for tp, p, c, _ in parts[:2]]) == {}
    # each partition its own live dirs (where its replica is online)
    assert set(failover([(("a", 0), part([1, 2], 1, 0, [1, 2]), {}, {1, 2}),
                         (("a", 1), part([1, 2], 1, 0, [1, 2]), {}, {2})])) == {("a", 1)}


def test_a_reassignment_moves_the_leader_only_once_every_target_is_in_sync():
    assert moved_leader([1, 2, 3], [3, 2], 1, 5, [1, 2], {1, 2, 3}) is None
    new = moved_leader([1, 2, 3], [3, 2], 1, 5, [1, 2, 3], {1, 2, 3})
    assert (new.leader, new.leader_epoch) == (3, 6)
    assert moved_leader([1, 2, 3], [2, 1], 1, 5, [1, 2, 3], {1, 2, 3}) is None
