"""The leader's view of its followers, with the clock moved by hand."""

from hostbroker.replication.isr import IsrTracker

LAG_MS = 10_000
LAG_BYTES = 4096


def tracker(now=0, isr=(1, 2, 3)):
    return IsrTracker(1, (1, 2, 3), isr, now)


def test_followers_count_as_caught_up_when_the_leadership_begins():
    t = tracker(now=100)
    assert t.wanted_isr(100 + LAG_MS, LAG_MS, LAG_BYTES, 0) == (1, 2, 3)
    assert t.wanted_isr(101 + LAG_MS, LAG_MS, LAG_BYTES, 0) == (1,)


def test_the_high_watermark_is_the_smallest_leo_in_the_isr():
    t = tracker()
    assert t.high_watermark((1, 2, 3), 500) == -1  # followers not heard from yet
    t.fetched(2, 300, 500, 10)
    t.fetched(3, 450, 500, 10)
    assert t.high_watermark((1, 2, 3), 500) == 300
    assert t.high_watermark((1, 3), 500) == 450
    assert t.high_watermark((1,), 500) == 500
    assert t.high_watermark((1, 9), 500) == 500  # not a replica: not counted


def test_a_follower_that_stops_fetching_leaves_after_the_lag_time():
    t = tracker()
    for now in range(0, 30_000, 1000):
        t.fetched(2, 1000, 1000, now)  # keeps up
    # 3 never fetched since time 0
    assert t.wanted_isr(29_000, LAG_MS, LAG_BYTES, 1000) == (1, 2)


def test_a_follower_under_steady_load_stays_by_reaching_the_previous_leo():
    t = tracker(isr=(1, 2))
    leo = 0
    for now in range(0, 60_000, 500):
        offset = leo  # it always has what the leader had at its previous fetch
        leo += 100  # the leader has moved on since
        t.fetched(2, offset, leo, now)
    assert t.follower(2).last_caught_up >= 59_000
    assert t.wanted_isr(60_000, LAG_MS, LAG_BYTES, leo) == (1, 2)


def test_a_follower_far_behind_in_bytes_leaves():
    t = tracker()
    t.fetched(2, 0, LAG_BYTES + 1, 10)
    t.fetched(3, 1, LAG_BYTES + 1, 10)
    assert t.wanted_isr(20, LAG_MS, LAG_BYTES, LAG_BYTES + 1) == (1, 3)
    assert t.wanted_isr(20, LAG_MS, 0, LAG_BYTES + 1) == (1, 2, 3)  # no byte bound


def test_a_follower_rejoins_once_it_reaches_the_high_watermark():
    t = tracker(isr=(1, 2))
    t.fetched(2, 800, 1000, 0)
    t.fetched(3, 100, 1000, 0)
    assert t.wanted_isr(1, LAG_MS, LAG_BYTES, 1000) == (1, 2)  # 3: below the HW of 800
    t.fetched(2, 1000, 1000, 5)
    t.fetched(3, 1000, 1000, 5)
    t.set_isr((1, 2))
    assert t.wanted_isr(6, LAG_MS, LAG_BYTES, 1000) == (1, 2, 3)
    t.set_isr((1, 2, 3))
    assert t.isr == (1, 2, 3)


def test_nobody_joins_while_the_high_watermark_is_unknown():
    t = tracker(isr=(1, 2))
    t.fetched(3, 1000, 1000, 5)  # 2 has not fetched: the HW is not known
    assert t.wanted_isr(6, LAG_MS, LAG_BYTES, 1000) == (1, 2)
    assert t.wanted_isr(6, LAG_MS, LAG_BYTES, 1000, hw=900) == (1, 2, 3)


def test_fetches_of_strangers_change_nothing():
    t = tracker()
    assert not t.fetched(9, 10, 10, 0)
    assert not t.fetched(1, 10, 10, 0)  # the leader itself
    assert not t.fetched(2, -1, 10, 0)
    assert t.follower(9) is None


def test_reassignment_adds_and_drops_followers():
    t = tracker(isr=(1, 2, 3))
    t.fetched(2, 50, 50, 0)
    t.set_replicas((1, 2, 4), 100)
    t.set_isr((1, 2, 3))
    assert t.isr == (1, 2)
    assert t.follower(2).leo == 50 and t.follower(4).last_caught_up == 100
    assert t.follower(3) is None
    t.set_isr(())
    assert t.isr == (1,)
