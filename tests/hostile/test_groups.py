"""The group APIs fuzzed with real members: a hostile client that holds a
member id the broker gave it, beside members that behave.

The generated group requests of :mod:`tests.hostile.fuzzlib` guess member ids
and so mostly meet refusals. Here each round a hostile connection joins a
group for real, then pipelines requests built on its own member id and
generation: generations off by one or at int32's edges, another member's id,
SYNC and HEARTBEAT in the middle of a rebalance, rejoins that change its
subscription, fenced commits of hostile offsets and partitions, a LEAVE and
requests after it, some byte-mutated. Every batch is checked as the fuzz
checks any (answers in order, each decoding as its API's, an error frame
only where owed, nothing hangs), and the members that behave must still
settle into one generation that owns every partition once when the hostile
member has expired; the ``session`` fixture checks the broker's invariants
after each test.
"""

from __future__ import annotations

import random

from hostbroker.errors import ErrorCode
from hostbroker.protocol import api
from hostbroker.protocol import groups as gp
from tests.hostile import fuzzlib
from tests.integration.coordinator_wire import GroupWire, Member, poll, settled

ROUNDS = 12
GROUP = "fz-live"
# Topics of this test alone: the fuzz's own data topics may have been deleted
# or made again with other partition counts by the tests before it.
TOPICS = ("fz-live-0", "fz-live-1")
PARTITIONS = 4


def _hostile_frames(rng: random.Random, ctx: fuzzlib.FuzzContext, member_id: str,
                    generation: int, others: list[str]) -> list[bytes]:
    """A batch of requests on the hostile member's real id and generation."""
    topics = ctx.topics

    def gen() -> int:
        r = rng.random()
        if r < 0.5:
            return generation
        if r < 0.8:
            return max(0, generation + rng.choice([-1, 1, 2]))
        return rng.choice([0, 2**31 - 1, -1, -(2**31)])

    def mid() -> str:
        r = rng.random()
        if r < 0.6:
            return member_id
        if r < 0.8 and others:
            return rng.choice(others)
        return rng.choice(["", member_id + "x", member_id[:-1], fuzzlib.long_text(rng)])

    def commit():
        entries = tuple(api.OffsetCommitPartition(
            rng.choice(topics) if rng.random() < 0.8 else fuzzlib.name(rng, ctx),
            fuzzlib._partition(rng, ctx), fuzzlib.int64(rng), None if rng.random() < 0.3
            else "m" * rng.choice([0, 10, 4096])) for _ in range(rng.randint(0, 6)))
        return gp.OffsetCommitRequestV1(GROUP, gen(), mid(), entries)

    def rejoin():
        chosen = rng.sample(topics, rng.randint(1, len(topics)))
        return gp.JoinGroupRequest(GROUP, rng.choice([500, 1000, 2000, 2001]),
                                   rng.choice([200, 1000, 5000]), mid(), tuple(
                                       gp.SubscribedTopic(t, rng.choice([1, 2, 4, 1024]))
                                       for t in chosen))

    makers = [
        lambda: gp.SyncGroupRequest(GROUP, gen(), mid()),
        lambda: gp.HeartbeatRequest(GROUP, gen(), mid()),
        commit, commit, rejoin,
        lambda: gp.LeaveGroupRequest(GROUP, mid()),
        lambda: gp.DescribeGroupRequest(GROUP),
        lambda: gp.ListGroupsRequest(),
        lambda: api.OffsetFetchRequest(GROUP, tuple(
            api.OffsetFetchPartition(t, p) for t in topics for p in range(ctx.partitions))),
    ]
    frames = []
    for i in range(rng.randint(3, 16)):
        frame = fuzzlib.encode(rng.choice(makers)(), 100 + i, "hostile")
        if rng.random() < 0.15:
            frame = fuzzlib.mutate(rng, frame)
        if ctx.allowed(frame):
            frames.append(frame)
    return frames


def test_a_hostile_member_beside_members_that_behave(session, seed):
    with session.broker.client() as client:
        for topic in TOPICS:
            client.create_topic(topic, PARTITIONS)
    ctx = fuzzlib.FuzzContext(list(TOPICS), PARTITIONS, session.ctx.protected)
    subscription = {topic: 2 for topic in TOPICS}
    partitions = {topic: PARTITIONS for topic in TOPICS}
    members = [Member(session.uris[i % 2], GROUP, subscription, client_id=f"good-{i}")
               for i in range(2)]
    for member in members:
        member.start()
    try:
        poll(lambda: settled(members, partitions), timeout=20)
        for round_ in range(ROUNDS):
            rng = random.Random(f"groups:{seed}:{round_}")
            with GroupWire(session.uris[round_ % 2], "hostile") as wire:
                joined = wire.join(GROUP, subscription, session_ms=1000, rebalance_ms=1000)
            assert joined.error_code == ErrorCode.NONE, joined
            others = [m.member_id for m in members if m.member_id]
            frames = _hostile_frames(rng, ctx, joined.member_id, joined.generation, others)
            try:
                fuzzlib.exchange(session.uris[(round_ + 1) % 2], frames)
            except fuzzlib.Violation as exc:
                raise fuzzlib.Violation(f"HB_FUZZ_SEED={seed} round {round_}: {exc}") from None
        # the hostile members expire (sessions of 2 s at most, no heartbeats): the
        # group is the members that behave, settled in one generation
        def only_the_good():
            good = sorted(m.member_id for m in members)
            generation = settled(members, partitions)
            with GroupWire(session.uris[0], "check") as wire:
                described = wire.describe(GROUP)
            return (generation is not None and described.phase == "STABLE"
                    and described.generation == generation
                    and sorted(m.member_id for m in described.members) == good)

        poll(only_the_good, timeout=30, interval=0.2)
    finally:
        for member in members:
            member.stop()
    assert all(not m.is_alive() for m in members)
    assert [m.errors for m in members] == [[], []]  # never refused, never cut off


def test_six_byte_answers_are_told_from_error_frames():
    """A HEARTBEAT's or LEAVE_GROUP's answer has an error frame's size; the
    checks read it by the request owed next (docs/spec/groups.md)."""
    beat = ("answer", 5, gp.GroupApiKey.HEARTBEAT)
    leave = ("answer", 5, gp.GroupApiKey.LEAVE_GROUP)
    join = ("answer", 5, gp.GroupApiKey.JOIN_GROUP)
    unanswered = ("none", 4, api.ApiKey.PRODUCE)
    answer = api.encode_error_frame(5, ErrorCode.UNKNOWN_MEMBER_ID)[4:]
    refusal = api.encode_error_frame(5, ErrorCode.INVALID_REQUEST)[4:]
    assert not fuzzlib.is_refusal(answer, [beat])
    assert not fuzzlib.is_refusal(answer, [unanswered, leave])
    assert fuzzlib.is_refusal(refusal, [beat])
    assert fuzzlib.is_refusal(answer, [join])
    assert fuzzlib.is_refusal(api.encode_error_frame(4, ErrorCode.INVALID_REQUEST)[4:],
                              [unanswered, beat])
    assert fuzzlib.is_refusal(api.encode_error_frame(6, ErrorCode.NONE)[4:], [beat])
    assert not fuzzlib.is_refusal(api.encode_response(5, api.MetadataResponse(0, (), ()))[4:],
                                  [join])
