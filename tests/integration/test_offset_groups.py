"""LIST_OFFSET_GROUPS on a real broker (docs/spec/protocol.md, "LIST_OFFSET_GROUPS"):
each group with the topics it has committed offsets on, every group or those
asked for, kept across a restart (the store's replay), and cut to one
answer's bound with ``truncated``, whole groups first."""

from __future__ import annotations

from hostbroker.errors import ErrorCode


def _listed(answer) -> list[tuple[str, tuple[str, ...]]]:
    return [(g.group, g.topics) for g in answer.groups]


def test_each_group_with_its_topics_all_or_those_asked(make_broker):
    broker = make_broker()
    with broker.client() as client:
        for topic in ("a", "b", "c"):
            client.create_topic(topic, 4)
        client.offset_commit("g1", [("b", 3, 0, None), ("a", 2, 0, None)])
        client.offset_commit("g1", [("b", 1, 0, None)])  # a topic already listed
        client.offset_commit("g2", [("c", 0, 0, None)])
        every = client.list_offset_groups()
        asked = client.list_offset_groups(["g2", "nobody", "g2"])
        none = client.list_offset_groups(["nobody"])
    assert (every.error_code, every.truncated) == (ErrorCode.NONE, 0)
    assert _listed(every) == [("g1", ("a", "b")), ("g2", ("c",))]
    assert (asked.error_code, asked.truncated, _listed(asked)) == (ErrorCode.NONE, 0,
                                                                   [("g2", ("c",))])
    assert (none.error_code, none.truncated, _listed(none)) == (ErrorCode.NONE, 0, [])

    broker.stop()
    broker.start()  # the store's replay knows the topics again
    with broker.client() as client:
        assert _listed(client.list_offset_groups(["g1"])) == [("g1", ("a", "b"))]


def test_one_group_s_topics_past_the_bound_are_cut(make_broker):
    broker = make_broker(response_max_bytes=65536)
    topics = [f"{i:03d}" + "t" * 200 for i in range(400)]  # 400 names of 203 bytes
    with broker.client() as client:
        for topic in topics:
            client.create_topic(topic, 1)
        for at in (0, 200):  # (an answer of 400 such names would pass the bound too)
            client.offset_commit("wide", [(t, 0, 0, None) for t in topics[at:at + 200]])
        client.offset_commit("zz", [(topics[0], 0, 0, None)])
        alone = client.list_offset_groups(["wide"])
        every = client.list_offset_groups()
        after = client.list_offset_groups(["zz"])
    assert alone.error_code == ErrorCode.NONE and alone.truncated == 1
    assert [g.group for g in alone.groups] == ["wide"]
    shown = alone.groups[0].topics
    assert 200 < len(shown) < 400 and list(shown) == topics[:len(shown)]
    # the cut is the answer's: "zz" comes after it, and is there when asked alone
    assert [g.group for g in every.groups] == ["wide"] and every.truncated == 1
    assert _listed(after) == [("zz", (topics[0],))] and after.truncated == 0
