"""The per-partition and per-API counters of shm/stats.py."""

import pytest

from hostbroker.shm import stats
from hostbroker.shm.region import LayoutError
from hostbroker.shm.stats import ApiStats, PartitionStats
from tests.shm.procutil import fork, wait_ok


def test_partition_rows_count_per_column(created, names):
    table = created(PartitionStats, "pstats", 8)
    table.add(3, stats.MESSAGES_IN, 5)
    table.add(3, stats.BYTES_IN, 500)
    table.add(3, stats.BYTES_OUT, 1000)
    table.add(3, stats.FETCHES)
    table.add(7, stats.FETCHES, 2)
    assert table.row(3) == (5, 500, 1000, 1)
    assert table.row(0) == (0, 0, 0, 0)
    assert list(table.rows()) == [(3, (5, 500, 1000, 1)), (7, (0, 0, 0, 2))]
    assert list(table.rows(4)) == [(3, (5, 500, 1000, 1))]
    assert len(table.flat(2)) == 2 * stats.COLUMN_COUNT
    with pytest.raises(IndexError):
        table.add(8, stats.FETCHES)
    with pytest.raises(IndexError):
        table.add(0, stats.COLUMN_COUNT)
    with pytest.raises(IndexError):
        table.row(8)
    table.clear(3)
    assert table.row(3) == (0, 0, 0, 0) and table.row(7) == (0, 0, 0, 2)


def test_a_reader_attaches_read_only_and_sums_processes(created, names):
    one = created(PartitionStats, "pstats", 4)
    two = PartitionStats.create(names("pstats", 1), 4)
    try:
        def child():
            mine = PartitionStats.attach(names("pstats", 1))
            mine.add(2, stats.BYTES_OUT, 70)
            mine.add(2, stats.FETCHES)
            mine.close()

        wait_ok(fork(child))
        one.add(2, stats.BYTES_OUT, 30)
        one.add(1, stats.MESSAGES_IN, 9)
        reader = PartitionStats.attach(names("pstats", 1), readonly=True)
        try:
            with pytest.raises(TypeError):
                reader.add(0, stats.FETCHES)  # a read-only mapping
            assert reader.row(2) == (0, 0, 70, 1)
        finally:
            reader.close()
        totals = stats.partition_totals([one, two], 3)
        assert totals[2 * 4:3 * 4] == [0, 0, 100, 1]
        assert totals[1 * 4:2 * 4] == [9, 0, 0, 0]
        assert stats.partition_totals([], 2) == [0] * 8
        stats.clear_row([one, two], 2)
        assert one.row(2) == two.row(2) == (0, 0, 0, 0) and one.row(1) == (9, 0, 0, 0)
        stats.clear_row([one], 99)  # past the table: nothing
    finally:
        two.close()


def test_attach_refuses_another_layout(created, names):
    created(ApiStats, "astats")
    with pytest.raises(LayoutError):
        PartitionStats.attach(names("astats"))
    created(PartitionStats, "pstats", 2)
    with pytest.raises(LayoutError):
        ApiStats.attach(names("pstats"))
    with pytest.raises(ValueError):
        PartitionStats.create(names("pstats", 5), 0)


def test_api_latency_lands_in_its_bucket(created):
    api = created(ApiStats, "astats")
    api.request(0, 300_000)  # 0.3 ms: first bucket (<= 0.5 ms)
    api.request(0, 500_000)  # exactly 0.5 ms: still the first (le)
    api.request(0, 3_000_000)  # 3 ms: the 5 ms bucket
    api.request(0, 4_000_000_000)  # 4 s: +Inf only
    api.error(0)
    api.error(1, 2)
    requests, errors, sum_ns, buckets = api.snapshot()[0]
    assert (requests, errors) == (4, 1)
    assert sum_ns == 300_000 + 500_000 + 3_000_000 + 4_000_000_000
    assert len(buckets) == len(stats.LATENCY_BOUNDS) == 12
    assert buckets[0] == 2  # <= 0.5 ms
    assert buckets[2] == 2  # <= 2.5 ms
    assert buckets[3] == 3  # <= 5 ms
    assert buckets[-1] == 3  # <= 2.5 s: the 4 s request is above every bound
    assert api.snapshot()[1] == (0, 2, 0, (0,) * 12)  # errors alone still show
    assert set(api.snapshot()) == {0, 1}
    assert api.key(5) == (0, 0, 0, (0,) * 12)
    api.request(32, 1)  # no such key: not counted
    api.request(-1, 1)
    api.error(99)
    assert set(api.snapshot()) == {0, 1}


def test_api_snapshots_merge_and_buckets_never_pass_requests(created, names):
    one = created(ApiStats, "astats")
    two = created(ApiStats, "astats2")
    one.request(3, 1_000)
    two.request(3, 20_000_000)
    two.error(3)
    merged = stats.merge_api([one.snapshot(), two.snapshot()])
    requests, errors, sum_ns, buckets = merged[3]
    assert (requests, errors, sum_ns) == (2, 1, 20_001_000)
    assert buckets[0] == 1 and buckets[5] == 2  # 20 ms <= 25 ms
    # a torn read (a bucket stored, requests not yet): +Inf is never below a bucket
    one.words[3 * stats.KEY_WORDS + stats.FIRST_BUCKET] += 1
    requests, _, _, buckets = one.snapshot()[3]
    assert requests == buckets[-1] == 2
