"""Quota bounds and the throttle arithmetic, with the clock given."""

import pytest

from hostbroker.security.quota import (DEFAULT_ENTITY, Quota, QuotaSet, RateWindows,
                                       throttle_ms)


def test_bounds_are_checked_and_changed_by_key():
    q = Quota().merged({"producer_byte_rate": 1000})
    assert q.as_dict() == {"producer_byte_rate": 1000}
    assert q.merged({"producer_byte_rate": None}).empty
    for bad in (0, -1, 1.5, float("inf"), float("nan"), True, "10", 2**54):
        with pytest.raises(ValueError, match="producer_byte_rate"):
            Quota().merged({"producer_byte_rate": bad})
    with pytest.raises(ValueError, match="expected one of"):
        Quota().merged({"bytes": 1})


def test_a_principal_without_its_own_bounds_has_the_default():
    quotas = QuotaSet().changed(DEFAULT_ENTITY, {"request_rate": 100}) \
        .changed("User:alice", {"consumer_byte_rate": 5})
    # each rate on its own: alice's own consumer rate, the default's request rate
    assert quotas.of("User:alice") == Quota(consumer_byte_rate=5, request_rate=100)
    assert quotas.of("User:bob") == Quota(request_rate=100)
    assert quotas.changed("User:alice", {"request_rate": 7}).of("User:alice") == \
        Quota(consumer_byte_rate=5, request_rate=7)
    assert QuotaSet().of("User:bob").empty
    assert "User:alice" not in quotas.changed("User:alice", {"consumer_byte_rate": None}).entities


def test_the_throttle_brings_the_rate_back_to_the_bound():
    assert throttle_ms(100, 100, 10, 30_000) == 0
    # 200/s over 10 s against 100/s: 1,000 more than allowed, 10 s more at the bound
    assert throttle_ms(200, 100, 10, 30_000) == 10_000
    assert throttle_ms(10_000, 100, 10, 30_000) == 30_000  # capped


def test_windows_measure_over_what_they_keep():
    w = RateWindows(num=3, size_s=1.0)
    w.record(10.0, 100)
    assert w.rate(10.5) == pytest.approx(100 / 1.0)  # at least one window of span
    w.record(11.2, 100)
    assert w.rate(11.5) == pytest.approx(200 / 1.5)  # history since the first window only
    w.record(12.0, 100)
    assert w.rate(12.5) == pytest.approx(300 / 2.5)
    assert w.rate(13.5) == pytest.approx(200 / 2.5)  # the window of 10 s has gone
    assert w.rate(20.0) == 0
    with pytest.raises(ValueError):
        RateWindows(1, 1.0)


def test_many_changes_apply_in_turn_in_one_copy():
    before = QuotaSet().changed("User:a", {"request_rate": 1})
    after = before.changed_many([("User:a", {"request_rate": None}),
                                 ("User:b", {"producer_byte_rate": 9}),
                                 ("User:b", {"request_rate": 3})])
    assert after.entities == {"User:b": Quota(producer_byte_rate=9, request_rate=3)}
    assert before.entities == {"User:a": Quota(request_rate=1)}  # unchanged
