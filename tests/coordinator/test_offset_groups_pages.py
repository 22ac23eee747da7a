"""LIST_OFFSET_GROUPS in pages, as hb-coordinator answers a handler that filters
(workers/coordinator/offsets.py): each page starts after the group named, ends at
a whole group, and the pages together are the whole list, in order."""

from __future__ import annotations

import pytest

from hostbroker.log.offsetstore import OffsetStore
from hostbroker.workers.coordinator.offsets import _groups_within


@pytest.fixture
def store(tmp_path):
    s = OffsetStore.open(str(tmp_path))
    for i in range(30):
        s.commit([(f"g{i:02d}", f"topic-{j}", 0, 0, None) for j in range(i % 4 + 1)])
    s.commit([("huge", f"t{j:03d}", 0, 0, None) for j in range(60)])
    yield s
    s.close()


def test_pages_end_at_whole_groups_and_add_up_to_the_whole_list(store):
    whole = _groups_within(store, [], 1 << 20)["groups"]
    for max_bytes in (60, 97, 150, 400):
        pages, after = [], None
        for _ in range(100):
            page = _groups_within(store, [], max_bytes, paged=True, after=after)
            assert page["groups"] or not page["truncated"], page  # never stuck
            pages.extend(page["groups"])
            if not page["truncated"]:
                break
            if page.get("partial"):
                assert len(page["groups"]) == 1 and page["groups"][0][0] == "huge"
            after = page["groups"][-1][0]
        assert [g for g, _ in pages] == [g for g, _ in whole]
        # every group whole but one too big for a page alone
        assert [(g, t) for g, t in pages if g != "huge"] == \
            [(g, t) for g, t in whole if g != "huge"]


def test_a_page_of_named_groups_starts_after_the_one_named(store):
    page = _groups_within(store, ["g05", "g01", "g09", "nobody"], 1 << 20, paged=True,
                          after="g01")
    assert [g for g, _ in page["groups"]] == ["g05", "g09"] and not page["truncated"]


def test_a_group_whose_name_passes_a_page_is_skipped_not_the_end(tmp_path):
    s = OffsetStore.open(str(tmp_path))
    try:
        s.commit([("!" + "a" * 5000, "t", 0, 0, None)])
        s.commit([(f"zz-{i}", "t", 0, 0, None) for i in range(5)])
        page = _groups_within(s, [], 4096, paged=True)
        assert page == {"error": 0, "groups": [], "truncated": True, "skip": "!" + "a" * 5000}
        page = _groups_within(s, [], 4096, paged=True, after=page["skip"])
        assert [g for g, _ in page["groups"]] == [f"zz-{i}" for i in range(5)]
        assert not page["truncated"]
    finally:
        s.close()


def test_the_names_stay_sorted_as_groups_are_added(tmp_path):
    s = OffsetStore.open(str(tmp_path))
    try:
        for name in ("m", "c", "x", "a", "n", "c"):
            s.commit([(name, "t", 0, 0, None)])
        assert s.groups() == ["a", "c", "m", "n", "x"]
        assert list(s.groups_after("c")) == ["m", "n", "x"]
        assert list(s.groups_after("b")) == ["c", "m", "n", "x"]
        s.commit([(f"g{i:03d}", "t", 0, 0, None) for i in range(0, 1000, 2)])  # many: merged
        s.commit([("g501", "t", 0, 0, None)])  # one among many: put in its place
        assert list(s.groups_after("g499"))[:3] == ["g500", "g501", "g502"]
        assert s.groups() == sorted(s.groups())
        s.close()
        s = OffsetStore.open(str(tmp_path))  # replayed: sorted as well
        assert list(s.groups_after(None))[:5] == ["a", "c", "g000", "g002", "g004"]
    finally:
        s.close()
