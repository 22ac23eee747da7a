"""LIST_OFFSET_GROUPS' answer as hb-coordinator builds it
(workers/coordinator/offsets.py): cut where the encoded answer would pass
its bound, names of any script counted as the wire counts them."""

from __future__ import annotations

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.log.offsetstore import OffsetStore
from hostbroker.protocol import api
from hostbroker.protocol import topics_admin as ta
from hostbroker.workers.coordinator.offsets import _groups_within
from hostbroker.workers.handler_alter import _GROUPS_OVERHEAD


def _encoded(result: dict) -> int:
    body = ta.ListOffsetGroupsResponse(
        ErrorCode.NONE, tuple(ta.OffsetGroup(g, tuple(t)) for g, t in result["groups"]),
        1 if result["truncated"] else 0)
    return len(api.encode_response(1, body))


@pytest.fixture
def store(tmp_path):
    s = OffsetStore.open(str(tmp_path))
    for i in range(40):
        group = f"grüppe-{i:02d}-" + "ß" * (i % 7)
        s.commit([(group, f"tøpic-{j}" + "é" * j, 0, 0, None) for j in range(i % 5 + 1)])
    yield s
    s.close()


def test_every_cut_fits_and_one_more_would_not(store):
    whole = _groups_within(store, [], 1 << 20)
    assert not whole["truncated"] and len(whole["groups"]) == 40
    full = _encoded(whole)
    for max_bytes in range(0, full - _GROUPS_OVERHEAD, 37):
        cut = _groups_within(store, [], max_bytes)
        assert cut["truncated"]
        assert _encoded(cut) <= max_bytes + _GROUPS_OVERHEAD
        # what was left out: the next group (or topic) would not have fitted
        flat = [(g, t) for g, ts in whole["groups"] for t in [None, *ts]]
        kept = [(g, t) for g, ts in cut["groups"] for t in [None, *ts]]
        assert flat[:len(kept)] == kept
        g, t = flat[len(kept)]
        more = len((g if t is None else t).encode()) + (6 if t is None else 2)
        assert _encoded(cut) + more > max_bytes + _GROUPS_OVERHEAD


def test_the_groups_asked_for_those_held(store):
    asked = _groups_within(store, ["grüppe-03-ßßß", "nobody", "grüppe-01-ß"], 1 << 20)
    assert [g for g, _ in asked["groups"]] == ["grüppe-01-ß", "grüppe-03-ßßß"]
    assert asked["groups"][1][1] == ["tøpic-0", "tøpic-1é", "tøpic-2éé", "tøpic-3ééé"]
