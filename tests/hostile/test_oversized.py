"""Oversized and repeated fields, one case per known class (issue 7, items 1
to 5 and 14). Each request goes through :func:`fuzzlib.exchange` (answers in
order and decodable, or an error frame and the close, never a hang); the
``session`` fixture then checks workers, memory, a normal client and the
witness data."""

from __future__ import annotations

import time

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.protocol import api
from tests.hostile import fuzzlib
from tests.hostile.invariants import Violation


def send(session, request: api.Request, uri: str | None = None) -> fuzzlib.Outcome:
    frame = api.encode_request(request, 11, "oversized")
    return fuzzlib.exchange(uri or session.uris[0], [frame])


def answer(session, request: api.Request):
    """The decoded answer to ``request`` (None when refused with an error frame)."""
    with session.broker.client(timeout=fuzzlib.EXCHANGE_TIMEOUT) as client:
        try:
            return client.request(request)
        except Exception:  # noqa: BLE001 - refused: exchange() checks how
            send(session, request)
            return None


@pytest.mark.parametrize("length", [232, 240, 249, 255])
def test_a_topic_with_a_long_name_is_created_and_deleted_or_refused(session, length):
    """Item 1: every accepted name fits every file name derived from it."""
    topic = "n" * (length - 3) + "abc"
    created = answer(session, api.CreateTopicRequest(topic, 2, ()))
    if created is not None and created.error_code == ErrorCode.NONE:
        with session.broker.client() as client:
            client.produce(topic, 1, encode_message_set([b"x"]))
        deleted = answer(session, api.DeleteTopicRequest(topic))
        assert deleted is not None and deleted.error_code == ErrorCode.NONE, deleted
        session.tree.check()
        with session.broker.client() as client:
            (meta,) = client.metadata([topic]).topics
        assert meta.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # A produce auto-creating the same name must not break anything either.
    send(session, api.ProduceRequest(1, 1000, (api.ProducePartition(
        "p" * length, 0, encode_message_set([b"y"])),)))
    send(session, api.DeleteTopicRequest("p" * length))


@pytest.mark.parametrize("request_", [
    api.DeleteTopicRequest("d" * 32759),
    api.DeleteTopicRequest("é" * 16383),
    api.CreateTopicRequest("/" * 32767, 1, ()),
    api.CreateTopicRequest("c" * 32767, 1, ()),
    api.CreateTopicRequest("ok-name", 1, (api.TopicConfigEntry("x" * 32767, "y" * 32767),)),
    api.CreateTopicRequest("ok-name-2", 1, (api.TopicConfigEntry("retention.ms", "9" * 32767),)),
    api.MetadataRequest(("m" * 32767,) * 3),
    api.OffsetsRequest("o" * 32767, 0, -1, 1),
    api.OffsetCommitRequest("g" * 32767, (api.OffsetCommitPartition("fz-data-0", 0, 1, "x"),)),
    api.OffsetFetchRequest("g" * 32767, (api.OffsetFetchPartition("t" * 32767, 0),)),
], ids=lambda r: type(r).__name__)
def test_long_strings_echoed_into_answers_stay_encodable(session, request_):
    """Item 2: every answer is encodable whatever the request held."""
    for uri in session.uris:
        send(session, request_, uri)


def test_a_fetch_whose_answer_would_pass_2_gib_is_bounded(session):
    """Item 3: 2,200 entries of 1 MB max_bytes on a partition holding over 1 MB."""
    topic = "fz-big"
    with session.broker.client() as client:
        client.create_topic(topic, 1)
        for i in range(3):
            client.produce(topic, 0, encode_message_set([bytes([i]) * 500_000]))
    request = api.FetchRequest(0, 0, (api.FetchPartition(topic, 0, 0, 1_000_000),) * 2200)
    outcome = send(session, request)
    assert outcome.seconds < fuzzlib.EXCHANGE_TIMEOUT


def test_offset_fetch_does_not_amplify_memory(session):
    """Item 4: one commit with long metadata, then one OFFSET_FETCH naming it 20,000 times."""
    metadata = "M" * 32767
    send(session, api.OffsetCommitRequest("amp", (
        api.OffsetCommitPartition("fz-data-0", 0, 5, metadata),)))
    send(session, api.OffsetCommitRequest("amp", (
        api.OffsetCommitPartition("fz-data-0", 1, 5, "M" * 4096),)))
    for partition in (0, 1):
        request = api.OffsetFetchRequest("amp", (api.OffsetFetchPartition("fz-data-0",
                                                                          partition),) * 20_000)
        send(session, request)
        session.tree.check(settle=2.0)


def test_a_commit_the_store_cannot_replay_is_never_acknowledged(session):
    """Item 5: a ~70 MB OFFSET_COMMIT is refused or kept across a restart; junk keys refused."""
    entries = tuple(api.OffsetCommitPartition("fz-data-0", p % 4, 1000 + p, "R" * 32767)
                    for p in range(2100))
    big = answer(session, api.OffsetCommitRequest("replay", entries))
    acked = big is not None and all(r.error_code == ErrorCode.NONE for r in big.partitions)
    junk = answer(session, api.OffsetCommitRequest("junk", tuple(
        api.OffsetCommitPartition(f"no-such-topic-{i}", 0, 1, None) for i in range(50)) + (
        api.OffsetCommitPartition("fz-data-0", 999, 1, None),)))
    assert junk is None or all(r.error_code != ErrorCode.NONE for r in junk.partitions), junk
    with session.broker.client() as client:
        client.offset_commit("after-big", [("fz-data-1", 0, 77, "kept")])
    session.restart_and_check()
    with session.broker.client() as client:
        after = client.offset_fetch("after-big", [("fz-data-1", 0)])[0]
        assert (after.offset, after.metadata) == (77, "kept")
        if acked:
            got = client.offset_fetch("replay", [("fz-data-0", p) for p in range(4)])
            assert [r.offset for r in got] == [1000 + 2096 + p for p in range(4)]


def test_a_long_poll_on_an_unknown_partition_is_answered_at_once(session):
    """Item 14: the error comes now, not after max_wait."""
    for topic, partition in (("no-such-topic", 0), ("fz-data-0", 999), ("fz-data-0", -1)):
        request = api.FetchRequest(1000, 1 << 20, (api.FetchPartition(topic, partition, 0, 1024),))
        outcome = send(session, request)
        assert outcome.seconds < 0.5, f"{topic}/{partition} answered after {outcome.seconds:.2f}s"


def test_a_metadata_request_naming_a_million_topics_is_bounded(session):
    """Item 14: the request's cost is bounded; other clients are not held up meanwhile."""
    request = api.MetadataRequest(tuple(f"x{i}" for i in range(1_000_000)))
    start = time.monotonic()
    outcome = send(session, request)
    if outcome.seconds > 3.0:
        raise Violation(f"a METADATA of a million topics took {time.monotonic() - start:.1f}s")
