"""Table answers (workers/answers.py) where the partition table and the
segment files disagree for a moment: retention deletes a segment's file
before it publishes the log start past it."""

from __future__ import annotations

import itertools
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostbroker.errors import ErrorCode, HostbrokerError
from hostbroker.log.config import LogConfig
from hostbroker.log.segments import partition_dirname, segment_filename
from hostbroker.protocol import api
from hostbroker.shm import partitions as ptable
from hostbroker.shm.partitions import PartitionTable
from hostbroker.shm.region import broker_prefix, region_name, remove_stale
from hostbroker.workers.answers import TableAnswers
from hostbroker.workers.topicview import TopicView

_runs = itertools.count()


@pytest.fixture
def answers(tmp_path):
    token = f"a{os.getpid()}n{next(_runs)}"
    table = PartitionTable.create(region_name(token, "partitions", 0), 4)
    yield TableAnswers(TopicView(table, [str(tmp_path)], LogConfig()), [str(tmp_path)], 0,
                       ((0, "127.0.0.1", 1, ""),), 1 << 20)
    table.close()
    remove_stale(broker_prefix(token))


def test_earliest_is_the_published_log_start_while_retention_is_mid_way(answers, tmp_path):
    part = tmp_path / partition_dirname("ret", 0)
    part.mkdir()
    (part / segment_filename(360)).write_bytes(b"x" * 90)  # 0..270 deleted, not yet published
    answers.table.write(0, state=ptable.ONLINE, name="ret", partition=0, owner=0,
                        start_offset=0, end_offset=450, flushed_offset=450, segment_generation=1)
    answers.table.bump_generation()
    earliest = answers.offsets(api.OffsetsRequest("ret", 0, api.EARLIEST_TIME, 5))
    assert (earliest.error_code, earliest.offsets) == (ErrorCode.NONE, (0,))
    (meta,) = answers.metadata(api.MetadataRequest(("ret",))).topics[0].partitions
    assert (meta.log_start_offset, meta.log_end_offset) == (0, 450)  # the same start
    latest = answers.offsets(api.OffsetsRequest("ret", 0, api.LATEST_TIME, 5))
    assert latest.offsets == (450,)
    # by time: only segments whose files are there
    assert answers.offsets(api.OffsetsRequest("ret", 0, 4_000_000_000_000, 5)).offsets == (
        450, 360)
    assert answers.offsets(api.OffsetsRequest("ret", 0, api.EARLIEST_TIME, 0)).offsets == ()


def _frame(request, corr: int) -> memoryview:
    return memoryview(api.encode_request(request, corr, "t")[4:])  # without its size


def test_metadata_answers_from_the_cache_are_the_answers_built_afresh(answers, tmp_path):
    table = answers.table
    (tmp_path / partition_dirname("t", 0)).mkdir()
    table.write(0, state=ptable.ONLINE, name="t", partition=0, owner=0,
                start_offset=0, end_offset=0, flushed_offset=0, segment_generation=1)
    table.bump_generation()
    requests = [api.MetadataRequest(("t",)), api.MetadataRequest(()),
                api.MetadataRequest(("t", "nope", "t"))]

    def check(corr: int) -> None:
        for request in requests:
            pieces, flags = answers.answer_frame(_frame(request, corr), 1000)
            fresh, failed = api.encode_answer(corr, answers.metadata(request), 1 << 20)
            assert (pieces, flags, failed) == ([fresh], 0, False)
            assert api.decode_response(api.ApiKey.METADATA, fresh[4:])[0] == corr

    check(1)
    check(2)  # the same answers again: only the correlation id differs
    table.write(0, end_offset=90)  # the log moved
    check(3)
    table.write(0, state=ptable.OFFLINE)  # the partition went offline
    check(4)
    table.write(1, state=ptable.ONLINE, name="t", partition=1, owner=0,
                start_offset=0, end_offset=0, flushed_offset=0, segment_generation=1)
    table.bump_generation()  # a partition more
    check(5)
    (topic,) = api.decode_response(
        api.ApiKey.METADATA, answers.answer_frame(_frame(requests[0], 6), 1000)[0][0][4:]
    )[1].topics
    assert [(p.partition, p.error_code, p.log_end_offset) for p in topic.partitions] == [
        (0, ErrorCode.STORAGE_ERROR, 90), (1, ErrorCode.NONE, 0)]


def test_the_caches_stay_bounded_and_an_oversized_answer_is_never_kept(answers):
    for i in range(300):
        answers.answer_frame(_frame(api.MetadataRequest((f"topic-{i}",)), i), 1000)
    assert len(answers._decoded) <= 256 and len(answers._frames) <= 64
    answers.max_response_bytes = 40
    answers._frames.clear()
    for corr in (1, 2):
        pieces, flags = answers.answer_frame(_frame(api.MetadataRequest(("x" * 50,)), corr), 1000)
        assert flags and api.decode_error_frame(pieces[0][4:]) == (corr, ErrorCode.INVALID_REQUEST)
    assert answers._frames == {}


def test_metadata_of_many_topics_reads_the_table_as_it_is_each_time(tmp_path):
    """Twenty topics: answers naming them all (or none) read the whole table
    at once and reuse each topic's packed bytes while its partitions hold
    still; every answer is the one the schema codec gives for what the
    table holds, read slot by slot, at that moment."""
    token = f"b{os.getpid()}n{next(_runs)}"
    table = PartitionTable.create(region_name(token, "partitions", 0), 128)
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    answers = TableAnswers(TopicView(table, dirs, LogConfig()), dirs, 3,
                           ((3, "127.0.0.1", 1, ""),), 1 << 20)
    try:
        slots = {}  # (topic, partition) -> slot; partition 1 of every third topic is missing
        for t in range(20):
            for p in range(3):
                if p != 1 or t % 3:
                    slot = slots[f"topic-{t}", p] = len(slots)
                    table.write(slot, state=ptable.ONLINE, name=f"topic-{t}", partition=p,
                                owner=slot % 2, start_offset=slot, end_offset=10 * slot)
        table.bump_generation()
        everything = api.MetadataRequest(())
        named = api.MetadataRequest(tuple(f"topic-{t}" for t in reversed(range(20))) + ("nope",))

        def expect(request):
            topics = []
            for name in request.topics or sorted({t for t, _ in slots}):
                if not any(t == name for t, _ in slots):
                    topics.append(api.MetadataTopic(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ()))
                    continue
                parts = []
                for (t, p), slot in sorted(slots.items()):
                    if t == name:
                        s = table.read(slot)
                        code = (ErrorCode.STORAGE_ERROR if s.state == ptable.OFFLINE
                                else ErrorCode.NONE)
                        parts.append(api.MetadataPartition(p, code, 3, s.start_offset,
                                                           s.end_offset, dirs[s.owner]))
                topics.append(api.MetadataTopic(name, ErrorCode.NONE, tuple(parts)))
            return api.MetadataResponse(3, answers.brokers, tuple(topics))

        def check(corr):
            for request in (everything, named):
                pieces, flags = answers.answer_frame(_frame(request, corr), 1000)
                assert (pieces, flags) == ([api.encode_answer(corr, expect(request), 1 << 20)[0]], 0)

        check(1)
        check(2)
        assert len(answers._topics) == 20  # each known topic packed once, kept
        table.write(slots["topic-4", 2], end_offset=12_345)  # one log moved
        check(3)
        table.write(slots["topic-9", 0], state=ptable.OFFLINE)
        check(4)
        table.write(slots["topic-9", 0], state=ptable.ONLINE, start_offset=-1)
        check(5)
        slots["topic-3", 1] = slot = len(slots)  # a partition more: the cache starts again
        table.write(slot, state=ptable.ONLINE, name="topic-3", partition=1, owner=1,
                    start_offset=0, end_offset=1)
        table.bump_generation()
        check(6)
    finally:
        table.close()
        remove_stale(broker_prefix(token))


_DIRS = ["/var/lib/hostbroker/a", "/srv/dísk-b", "/d"]
_names = st.text(min_size=1, max_size=12)
_part = st.none() | st.tuples(st.sampled_from(ptable.PartitionState), st.integers(-2**63, 2**63 - 1),
                              st.integers(-2**63, 2**63 - 1), st.integers(0, len(_DIRS) - 1))
_topic = st.none() | st.lists(_part, max_size=6).map(tuple)


@pytest.fixture(scope="module")
def three_dirs():
    token = f"m{os.getpid()}n{next(_runs)}"
    table = PartitionTable.create(region_name(token, "partitions", 0), 4)
    yield TableAnswers(TopicView(table, _DIRS, LogConfig()), _DIRS, 7,
                       ((7, "127.0.0.1", 9092, "/run/hb.sock"),), 1 << 20)
    table.close()
    remove_stale(broker_prefix(token))


def _both_ways(answers, corr: int, names: tuple, snapshot: dict):
    """(direct, schema codec): the frame or the error each way gives."""
    def schema():
        try:
            return api.encode_answer(corr, answers._build(names, snapshot),
                                     answers.max_response_bytes)
        except HostbrokerError as e:
            return e.code

    try:
        frame = answers._encode_metadata(corr, names, snapshot)
    except HostbrokerError as e:
        return e.code, schema()
    if frame is None:
        return None, schema()
    if len(frame) > answers.max_response_bytes:
        frame, failed = api.encode_error_frame(corr, ErrorCode.INVALID_REQUEST), True
    else:
        failed = False
    return (frame, failed), schema()


@settings(max_examples=300, deadline=None)
@given(corr=st.integers(-2**31, 2**31 - 1),
       topics=st.dictionaries(_names, _topic, max_size=5),
       repeat=st.lists(st.integers(0, 9), max_size=8),
       limit=st.sampled_from([1 << 20, 60, 200, 700]))
def test_metadata_frames_packed_directly_are_the_schema_codecs(three_dirs, corr, topics,
                                                               repeat, limit):
    names = tuple(topics)
    names += tuple(names[i % len(names)] for i in repeat) if names else ()  # named again
    three_dirs.max_response_bytes = limit
    direct, schema = _both_ways(three_dirs, corr, names, topics)
    assert direct == schema


def test_names_the_direct_way_cannot_pack_go_to_the_schema_codec(three_dirs):
    three_dirs.max_response_bytes = 1 << 20
    for name in ("bad\udc80name", "x" * 32768):
        direct, schema = _both_ways(three_dirs, 5, (name,), {name: None})
        assert direct is None and schema == (api.encode_error_frame(5, ErrorCode.INVALID_REQUEST),
                                             True)
    name = "é" * 16383  # 32,766 bytes: the longest that fits
    direct, schema = _both_ways(three_dirs, 5, (name,), {name: ((ptable.ONLINE, 0, 1, 1),)})
    assert direct == schema and not direct[1]
    past = {"t": ((ptable.ONLINE, 0, 2**63, 0),)}  # a figure past its wire type
    direct, schema = _both_ways(three_dirs, 5, ("t",), past)
    assert direct is None and schema == (api.encode_error_frame(5, ErrorCode.INVALID_REQUEST), True)


def test_fetch_answer_pieces_put_each_file_range_between_its_headers():
    from hostbroker.workers.answers import fetch_answer_pieces
    from hostbroker.workers.envelopes import FilePiece

    a, b = FilePiece("/x/0.log", 10, 30), FilePiece("/y/0.log", 0, 5)
    parts = [("t", 0, 0, 40, a), ("t", 1, 3, -1, None), ("u", 0, 0, 5, b)]
    pieces = fetch_answer_pieces(7, parts, 1 << 20)
    headers = api.encode_fetch_response_parts(7, [("t", 0, 0, 40, 30), ("t", 1, 3, -1, 0),
                                                  ("u", 0, 0, 5, 5)])
    # h0 a h1 h2 b (h3 is empty): the frame a handler or a writer sends
    assert pieces == [headers[0], a, headers[1], headers[2], b]
    with pytest.raises(ValueError):
        fetch_answer_pieces(7, parts, sum(map(len, headers)) - 1)
