"""Where a follower cuts its log before fetching from a new leader epoch
(hostbroker/workers/replication/truncation.py): exactly where its log parts
from the leader's, by leader epochs, never at a high watermark that keeps
entries the leader does not have or drops ones it has."""

from hostbroker.workers.replication.truncation import MAX_ROUNDS, Step, Truncation


def test_an_empty_log_fetches_from_zero_without_asking():
    assert Truncation([], 0, 0).first() == Step(None, 0)


def test_same_latest_epoch_cuts_at_the_smaller_end():
    t = Truncation([(0, 0), (1, 100)], log_end=150, high_watermark=90)
    assert t.first() == Step(1, None)
    # the leader's epoch 1 ended at 120 (it wrote epoch 2 from there): cut to 120
    assert t.answer(1, 120) == Step(None, 120)
    # the leader has more of epoch 1 than we do: keep everything we have
    t = Truncation([(0, 0), (1, 100)], log_end=150, high_watermark=90)
    t.first()
    assert t.answer(1, 400) == Step(None, 150)


def test_the_scenario_truncating_to_the_high_watermark_gets_wrong():
    """Follower B copied 0..200 of leader A's epoch 1, but had heard of a high
    watermark of 100 only (it learns the next one with its next fetch) when it
    restarted. Cut to its high watermark (0.8), B holds 0..100; if A then dies
    and B leads, 100..200, acknowledged to producers with acks=-1, are gone.
    By epochs B asks A about epoch 1, which ends at A's log end 200: B keeps
    everything and fetches from 200."""
    b = Truncation([(0, 0), (1, 50)], log_end=200, high_watermark=100)
    assert b.first() == Step(1, None)
    assert b.answer(1, 200) == Step(None, 200)


def test_entries_the_leader_never_had_are_cut_where_the_logs_part():
    """A led epoch 1 and appended 100..180 that nobody copied; B (epoch 2) wrote
    other entries from 100. A asks for 1, B answers 1 ending at 100: cut to 100,
    although A's high watermark (say 150, from an older view) is higher."""
    a = Truncation([(0, 0), (1, 60)], log_end=180, high_watermark=150)
    a.first()
    assert a.answer(1, 100) == Step(None, 100)


def test_an_epoch_the_leader_lacks_is_asked_again_one_lower():
    # we have epochs 0, 3 and 5; the leader never had 5 and answers 4 (which we lack)
    t = Truncation([(0, 0), (3, 40), (5, 90)], log_end=120, high_watermark=10)
    assert t.first() == Step(5, None)
    assert t.answer(4, 70) == Step(3, None)  # our largest epoch <= 4
    assert t.answer(3, 70) == Step(None, 70)


def test_no_common_epoch_falls_back_to_the_own_high_watermark():
    t = Truncation([(2, 0)], log_end=50, high_watermark=30)
    t.first()
    assert t.answer(-1, -1) == Step(None, 30)
    # an answer that is no answer (an epoch above the one asked) is not trusted
    t = Truncation([(2, 0)], log_end=50, high_watermark=30)
    t.first()
    assert t.answer(7, 10) == Step(None, 30)
    # a log written before epochs existed
    assert Truncation([], 50, 30).first() == Step(None, 30)


def test_the_questions_are_bounded():
    entries = [(e, e * 10) for e in range(0, 40, 2)]  # even epochs only
    t = Truncation(entries, log_end=400, high_watermark=5)
    step = t.first()
    asked = 1
    while step.ask is not None:
        step = t.answer(step.ask - 1, 300)  # always an odd epoch we do not have
        asked += 1
    assert asked <= MAX_ROUNDS + 1
    assert step == Step(None, 5)


def test_a_cut_is_never_past_the_own_log_end():
    t = Truncation([(0, 0)], log_end=10, high_watermark=50)
    t.first()
    assert t.answer(0, 10**12) == Step(None, 10)
    assert Truncation([], 10, 50).first() == Step(None, 10)
