"""The shared table of quota counters (hostbroker/shm/quotas.py): one part per
processor, a principal's rate summed over the parts, windows that age out,
rows taken over once idle and a full part said by None. The clock is given
to every call (no sleeping)."""

from __future__ import annotations

import pytest

from hostbroker.shm.quotas import QuotaCounters, principal_key
from hostbroker.shm.region import SharedRegion, new_token

WINDOWS, WINDOW_S = 11, 1


@pytest.fixture
def table():
    name = f"/{new_token()}-quotas"
    region = SharedRegion.create(name, QuotaCounters.region_size(2, 4, WINDOWS))
    QuotaCounters.create(region, 2, 4, WINDOWS, WINDOW_S)
    parts = [QuotaCounters.attach(name, part=p) for p in range(2)]
    reader = QuotaCounters.attach(name, readonly=True)
    yield parts, reader
    for t in (*parts, reader):
        t.close()
    region.close()
    region.unlink()


def test_a_principal_rate_is_the_sum_over_processors(table):
    (p0, p1), reader = table
    alice, bob = principal_key("User:alice"), principal_key("User:bob")
    now = 1000.5
    p0.add(p0.row_for(alice, now), now, produce=3000, requests=3)
    p1.add(p1.row_for(alice, now), now, produce=1000, fetch=500, requests=1)
    p1.add(p1.row_for(bob, now), now, produce=7)
    # half a second into the first window: the span is one window at least
    assert reader.rates(alice, now) == (4000.0, 500.0, 4.0, 1.0)
    assert reader.rates(bob, now)[0] == 7.0
    assert reader.rates(principal_key("User:carol"), now) == (0.0, 0.0, 0.0, 1.0)
    assert reader.counted(0, alice, now) == (3000, 0, 3)
    assert reader.counted(1, alice, now) == (1000, 500, 1)
    assert reader.counted(0, bob, now) == (0, 0, 0)
    assert reader.counted(1, alice, now + 11) == (0, 0, 0)  # out of the windows kept


def test_the_span_grows_with_the_history_and_old_windows_age_out(table):
    (p0, _), reader = table
    key = principal_key("User:alice")
    row = p0.row_for(key, 100.0)
    p0.add(row, 100.0, produce=1000)
    p0.add(row, 103.0, produce=1000)
    # from the start of window 100 to 103.5: 2000 bytes over 3.5 s
    produce, _, _, span = reader.rates(key, 103.5)
    assert span == pytest.approx(3.5)
    assert produce == pytest.approx(2000 / 3.5)
    # eleven windows later the first one is gone, the span starts at 103
    produce, _, _, span = reader.rates(key, 111.5)
    assert span == pytest.approx(8.5)
    assert produce == pytest.approx(1000 / 8.5)
    # a slot used again for a new window starts from zero (114 % 11 == 103 % 11):
    # window 103's 1000 bytes are gone, and nothing else is kept
    p0.add(row, 114.2, produce=5)
    assert reader.rates(key, 114.5) == (5.0, 0.0, 0.0, 1.0)


def test_a_full_part_counts_no_new_principal_until_a_row_is_idle(table):
    (p0, p1), reader = table
    keys = [principal_key(f"User:u{i}") for i in range(5)]
    for k in keys[:4]:
        assert p0.row_for(k, 50.0) is not None
        p0.add(p0.row_for(k, 50.0), 50.0, requests=1)
    assert p0.row_for(keys[4], 55.0) is None  # four rows, all counted within the span
    assert p1.row_for(keys[4], 55.0) is not None  # another processor's part is its own
    row = p0.row_for(keys[4], 62.0)  # 50 is out of the eleven windows ending at 62
    assert row is not None
    p0.add(row, 62.0, requests=2)
    assert reader.rates(keys[4], 62.0)[2] == 2.0
    taken = [k for k in keys[:4] if reader.rates(k, 62.0) != (0.0, 0.0, 0.0, 1.0)]
    assert taken == []  # the idle ones read as nothing, the taken-over one is gone


def test_a_restarted_processor_finds_its_rows_again(table):
    (p0, _), reader = table
    key = principal_key("User:alice")
    row = p0.row_for(key, 10.0)
    p0.add(row, 10.0, produce=10)
    again = QuotaCounters.attach(p0.region, part=0)
    assert again.row_for(key, 10.2) == row
    again.add(row, 10.2, produce=10)
    assert reader.rates(key, 10.5)[0] == 20.0
    assert reader.used_rows(0) == 1 and reader.used_rows(1) == 0


def test_a_region_that_is_not_a_quota_table_is_refused():
    name = f"/{new_token()}-notquotas"
    region = SharedRegion.create(name, 4096)
    try:
        with pytest.raises(ValueError, match="QuotaCounters"):
            QuotaCounters.attach(region)
    finally:
        region.close()
        region.unlink()
