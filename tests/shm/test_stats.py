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
    assert len(table.flat(2)) == 2 * stats.ROW_WORDS
    with pytest.raises(IndexError):
        table.add(8, stats.FETCHES)
    with pytest.raises(IndexError):
        table.add(0, stats.COLUMN_COUNT)
    with pytest.raises(IndexError):
        table.row(8)
    assert table.claim(3) == 0
    table.restamp(3, 1)
    assert table.row(3) == (0, 0, 0, 0) and table.row(7) == (0, 0, 0, 2)
    assert table.claim(3) == 1
    table.add(3, stats.FETCHES, 4, claim=1)  # the row's own claim: added to
    assert table.row(3) == (0, 0, 0, 4)
    table.add(3, stats.FETCHES, 1, claim=2)  # a newer one: zeroed first
    assert table.row(3) == (0, 0, 0, 1) and table.claim(3) == 2


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
        assert stats.partition_totals([one], 3)[2 * 4:3 * 4] == [0, 0, 30, 0]
    finally:
        two.close()


def test_readers_leave_out_rows_of_an_earlier_claim(created, names):
    """Slot 2 is freed (its claims move to 1) and taken by another partition:
    the freeing writer's row says so at once, and the other processes' old
    counts stop counting, though nobody but their own process writes them."""
    writer = created(PartitionStats, "pstats", 4)
    handler = PartitionStats.create(names("pstats", 1), 4)
    processor = PartitionStats.create(names("pstats", 2), 4)
    try:
        writer.add(2, stats.MESSAGES_IN, 10)
        handler.add(2, stats.FETCHES, 3)
        processor.add(2, stats.BYTES_OUT, 500)
        processor.add(1, stats.FETCHES, 1)
        everyone = [writer, handler, processor]
        assert stats.partition_totals(everyone, 4)[2 * 4:3 * 4] == [10, 0, 500, 3]
        before = (bytes(handler.region.buf), bytes(processor.region.buf))
        writer.restamp(2, 1)  # what the freeing writer does
        assert (bytes(handler.region.buf), bytes(processor.region.buf)) == before
        totals = stats.partition_totals(everyone, 4)
        assert totals[2 * 4:3 * 4] == [0, 0, 0, 0]
        assert totals[1 * 4:2 * 4] == [0, 0, 0, 1]  # other rows as they were
        # the partition now in slot 2 counts from zero wherever it is counted
        handler.add(2, stats.FETCHES, 1, claim=1)
        assert stats.partition_totals(everyone, 4)[2 * 4:3 * 4] == [0, 0, 0, 1]
        assert processor.row(2) == (0, 0, 500, 0)  # untouched, and left out
        # in any order of the tables
        assert stats.partition_totals(everyone[::-1], 4)[2 * 4:3 * 4] == [0, 0, 0, 1]
    finally:
        handler.close()
        processor.close()


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
