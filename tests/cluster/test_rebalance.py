"""The range assignment of a consumer group, pure: its properties over any group and topic."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hostbroker.cluster import rebalance

pairs_st = st.sets(st.tuples(st.integers(0, 12), st.integers(0, 20)), max_size=40)
members_st = st.dictionaries(st.text("abcxyz:-0123456789", min_size=1, max_size=6),
                             st.integers(1, 5), max_size=8)


@given(pairs_st, members_st)
def test_every_partition_owned_once_in_contiguous_ranges(pairs, streams_per_member):
    members = {cid: {"t": n} for cid, n in streams_per_member.items()}
    plan = rebalance.assign_group({"t": list(pairs)}, members)["t"]
    streams = rebalance.group_streams(members, "t")
    assert sorted(plan) == streams  # every stream has an entry, none more
    if not streams:
        return
    ordered = sorted(pairs)
    # Concatenated in stream order, the ranges are the sorted partitions: each
    # partition owned exactly once, each stream's share contiguous.
    assert [p for s in streams for p in plan[s]] == ordered
    sizes = [len(plan[s]) for s in streams]
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)  # the first len(P) % n get one more
    idle = [s for s in streams if not plan[s]]
    assert len(idle) == max(0, len(streams) - len(ordered))
    assert idle == streams[len(streams) - len(idle):]  # those beyond the partitions


@given(st.integers(0, 50), st.integers(1, 20))
def test_ranges_sizes(partitions, streams):
    out = rebalance.ranges(partitions, streams)
    assert len(out) == streams
    size, extra = divmod(partitions, streams)
    assert [len(r) for r in out] == [size + 1] * extra + [size] * (streams - extra)
    assert out[0].start == 0 and out[-1].stop == partitions
    assert all(a.stop == b.start for a, b in zip(out, out[1:]))


def test_the_spec_example_two_brokers_three_consumers():
    pairs = [(2, 0), (1, 2), (1, 0), (2, 2), (1, 1), (2, 1), (1, 3)]
    members = {"b:2": {"t": 1}, "a:1": {"t": 2, "u": 1}, "c:3": {"u": 4}}
    plan = rebalance.assign_group({"t": pairs, "u": [(1, 0), (2, 0)]}, members)
    assert plan["t"] == {("a:1", 0): [(1, 0), (1, 1), (1, 2)],
                         ("a:1", 1): [(1, 3), (2, 0)],
                         ("b:2", 0): [(2, 1), (2, 2)]}
    assert plan["u"] == {("a:1", 0): [(1, 0)], ("c:3", 0): [(2, 0)], ("c:3", 1): [],
                         ("c:3", 2): [], ("c:3", 3): []}


def test_no_streams_no_assignment():
    assert rebalance.assign([(1, 0)], []) == {}
    assert rebalance.ranges(3, 0) == []
