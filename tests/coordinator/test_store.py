"""The group state file (hostbroker/coordinator/store.py, docs/spec/groups.md "The
state file"): a journal that a replacement process takes over; any content of it
loses at most the groups it holds, with one log line; limits apply on load as on
requests; links and directories planted in the log dir are never followed nor
fatal; a change writes what its group holds, whatever the number of groups."""

from __future__ import annotations

import itertools
import json
import os
import random
import struct
import zlib

import pytest

from hostbroker.coordinator import Coordinator, GroupPhase, Limits, Pending
from hostbroker.coordinator.store import (
    COMPACT_SUFFIX,
    FILENAME,
    LEGACY_FILENAME,
    GroupStore,
    record_max_bytes,
)

SESSION = 1000
REBALANCE = 3000


def make(limits: Limits = Limits(), partitions=None) -> Coordinator:
    ids = itertools.count(1)
    return Coordinator(limits, partitions=partitions or {"t": 6, "u": 2},
                       new_member_id=lambda client: f"{client}-{next(ids)}")


def join(c, now, group, member_id="", client="c", sub=None):
    return c.join(now, group, member_id, client, SESSION, REBALANCE, sub or {"t": 1})


def frame(payload: bytes) -> bytes:
    """One record as the spec lays it out: length:int32 crc:uint32 payload."""
    return struct.pack(">iI", len(payload), zlib.crc32(payload)) + payload


class Lines(list):
    def __call__(self, line: str) -> None:
        assert "\n" not in line
        self.append(line)


def busy_state() -> Coordinator:
    """Three groups: STABLE with two members, PREPARING with one waiting, STABLE alone."""
    c = make()
    join(c, 0, "g1", client="a")
    join(c, 10, "g1", client="b", sub={"t": 2, "u": 1})
    join(c, 20, "g1", "a-1", client="a")
    join(c, 30, "g2", client="x")
    assert isinstance(join(c, 40, "g2", client="y"), Pending)
    join(c, 50, "g3", client="z", sub={"u": 2})
    c.completed()
    return c


def saved(tmp_path, c: Coordinator) -> GroupStore:
    lines = Lines()
    store = GroupStore.start(str(tmp_path), c.limits, lines)
    store.save(c, c.changed())
    assert lines == []
    return store


def take_over(tmp_path, limits=Limits(), now=1000.0):
    lines = Lines()
    fresh = make(limits, partitions={})
    store = GroupStore.take_over(str(tmp_path), fresh, now, lines)
    return fresh, store, lines


def kept(c: Coordinator) -> dict:
    """What a replacement must have: each group's record without heartbeat times."""
    out = {}
    for name in c.groups:
        r = c.group_record(name)
        for m in r["members"]:
            m.pop("last_heartbeat")
        r.pop("rebalance_deadline")
        out[name] = r
    return out


# -- what is written is taken over ------------------------------------------------

def test_a_replacement_takes_over_every_group_and_carries_on(tmp_path):
    c = busy_state()
    saved(tmp_path, c).close()
    fresh, store, lines = take_over(tmp_path, now=100.0)
    assert lines == []
    assert kept(fresh) == kept(c)
    assert fresh.groups["g2"].phase is GroupPhase.PREPARING_REBALANCE
    # the waiting rebalance completes in the replacement as it would have
    answer = fresh.join(110, "g2", "x-3", "x", SESSION, REBALANCE, {"t": 1})
    assert answer.generation == 2 and answer.members == ("x-3", "y-4")
    assert fresh.sync(120, "g1", 2, "b-2").assignment == {"t": ((2, 3), (4, 5)), "u": ((0, 1),)}
    # sessions restarted at the take-over, not at the heartbeats the file saw
    fresh.expire(100 + SESSION)
    assert set(fresh.groups) == {"g1", "g2", "g3"}
    store.close()


def test_forgotten_groups_stay_forgotten_and_the_start_discards_the_last_run(tmp_path):
    c = busy_state()
    store = saved(tmp_path, c)
    assert c.leave(60, "g3", "z-5") == 0
    store.save(c, c.changed())
    store.close()
    fresh, store, _ = take_over(tmp_path)
    assert set(fresh.groups) == {"g1", "g2"}
    store.close()
    (tmp_path / LEGACY_FILENAME).write_text("[1]")
    GroupStore.start(str(tmp_path), Limits(), Lines()).close()
    assert not (tmp_path / LEGACY_FILENAME).exists()
    fresh, store, lines = take_over(tmp_path)
    assert fresh.groups == {} and lines == []


def test_heartbeats_write_nothing_and_a_change_writes_its_group_alone(tmp_path):
    c = busy_state()
    store = saved(tmp_path, c)
    before = store.bytes_written
    for t in range(100, 1000, 100):
        assert c.heartbeat(t, "g1", 2, "a-1") == 0
    assert c.changed() == set()
    join(c, 1000, "g3", "z-5", client="z", sub={"u": 1})  # a new subscription
    changed = c.changed()
    assert changed == {"g3"}
    store.save(c, changed)
    one = len(json.dumps(c.group_record("g3"), separators=(",", ":"))) + 8
    assert store.bytes_written - before == one


def test_a_group_made_and_forgotten_between_two_saves_writes_nothing(tmp_path):
    c = busy_state()
    store = saved(tmp_path, c)
    before = store.bytes_written
    for i in range(100):
        answer = join(c, 100 + i, f"brief-{i}", client="q")
        assert c.leave(100 + i, f"brief-{i}", answer.member_id) == 0
    store.save(c, c.changed())
    assert store.bytes_written == before


@pytest.mark.parametrize("existing", [10, 2000])
def test_the_bytes_a_join_writes_do_not_grow_with_the_number_of_groups(tmp_path, existing):
    """Each join of a new one-member group appends that group's record and
    nothing else: the same bytes with 10 groups on the broker as with 2,000
    (the whole-state rewrite this replaced wrote ~200 times more at 2,000)."""
    c = make()
    store = GroupStore.start(str(tmp_path), c.limits, Lines())
    for i in range(existing):
        join(c, 0, f"old-{i:05d}", client="m")
    store.save(c, c.changed())
    costs = []
    for i in range(20):
        before = store.bytes_written
        join(c, 1, f"new-{i:05d}", client="n")
        store.save(c, c.changed())
        costs.append(store.bytes_written - before)
    # the record of a one-member group with ids of this length
    assert costs == [costs[0]] * 20
    assert costs[0] < 400


def test_compaction_keeps_the_file_bounded_and_loses_nothing(tmp_path):
    c = make()
    store = GroupStore.start(str(tmp_path), c.limits, Lines())
    for round_ in range(3000):
        group = f"g{round_ % 7}"
        join(c, round_, group, client="m", sub={"t": 1 + round_ % 3})
        store.save(c, c.changed())
        c.completed()
    size = os.path.getsize(tmp_path / FILENAME)
    assert size == store.size <= max(1 << 20, 4 * store.live_bytes) + 4096
    assert store.bytes_written > 2 * size
    store.close()
    fresh, store, lines = take_over(tmp_path)
    assert lines == [] and kept(fresh) == kept(c)


# -- any content loses at most the file's groups, with one line ----------------------

def good_prefix(tmp_path) -> bytes:
    c = busy_state()
    saved(tmp_path, c).close()
    return (tmp_path / FILENAME).read_bytes()


BAD_PAYLOADS = {
    "list-of-one": b"[1]",
    "group-without-fields": b'[{"type":"group"}]',
    "object-without-fields": b'{"type":"group"}',
    "nested-brackets": b"[" * 100000 + b"]" * 100000,
    "nested-objects": b'{"a":' * 50000 + b"1" + b"}" * 50000,
    "not-json": b"{not json",
    "not-utf8": b'{"type":"\xff"}',
    "unknown-type": b'{"type":"partitions","counts":{}}',
}


def bad_phase(record: dict) -> dict:
    return {**record, "phase": "DANCING"}


def mutate_member(**changes):
    def change(record):
        record["members"][0].update(changes)
        return record
    return change


BAD_RECORDS = {
    "bad-phase": bad_phase,
    "empty-phase": lambda r: {**r, "phase": "EMPTY"},
    "phase-list": lambda r: {**r, "phase": ["STABLE"]},
    "phase-object": lambda r: {**r, "phase": {"STABLE": 1}},
    "generation-string": lambda r: {**r, "generation": "2"},
    "generation-huge": lambda r: {**r, "generation": 2**63},
    "deadline-nan": lambda r: {**r, "phase": "PREPARING_REBALANCE", "rebalance_deadline": "NaN"},
    "deadline-huge-integer": lambda r: {**r, "phase": "PREPARING_REBALANCE",
                                        "rebalance_deadline": 10**400},
    "heartbeat-huge-integer": mutate_member(last_heartbeat=-10**400),
    "no-members": lambda r: {**r, "members": []},
    "member-id-long": mutate_member(member_id="m" * 256),
    "session-past-limit": mutate_member(session_timeout_ms=10**9),
    "streams-past-limit": mutate_member(subscription={"t": 1025}),
    "joined-not-bool": mutate_member(joined=1),
    "extra-key": lambda r: {**r, "surprise": 1},
    "assignment-of-stranger": lambda r: {**r, "assignment": {"nobody": {}}},
    "partition-past-count": lambda r: {**r, "assignment": {
        r["members"][0]["member_id"]: {"t": [[99]]}}},
}


def assert_one_line_and_prefix(tmp_path, lines, fresh):
    assert len(lines) == 1, lines
    assert FILENAME in lines[0] and "3 groups kept" in lines[0]
    assert set(fresh.groups) == {"g1", "g2", "g3"}


@pytest.mark.parametrize("kind", sorted(BAD_PAYLOADS))
def test_a_bad_record_loses_only_what_follows_it_with_one_line(tmp_path, kind):
    prefix = good_prefix(tmp_path)
    tail = frame(BAD_PAYLOADS[kind]) + frame(b'{"type":"gone","group":"g1"}')
    (tmp_path / FILENAME).write_bytes(prefix + tail)
    fresh, store, lines = take_over(tmp_path)
    assert_one_line_and_prefix(tmp_path, lines, fresh)
    store.close()
    # the file was rewritten clean: the next take-over says nothing
    fresh, _, lines = take_over(tmp_path)
    assert lines == [] and set(fresh.groups) == {"g1", "g2", "g3"}


@pytest.mark.parametrize("kind", sorted(BAD_RECORDS))
def test_a_record_past_the_limits_or_misshapen_is_refused(tmp_path, kind):
    prefix = good_prefix(tmp_path)
    c = make()
    join(c, 0, "g9", client="q")
    record = BAD_RECORDS[kind](json.loads(json.dumps(c.group_record("g9"))))
    (tmp_path / FILENAME).write_bytes(prefix + frame(json.dumps(record).encode()))
    fresh, _, lines = take_over(tmp_path)
    assert_one_line_and_prefix(tmp_path, lines, fresh)


@pytest.mark.parametrize("content", [b"[1]", b'[{"type":"group"}]', b"[" * 100000, b"",
                                     b"\x00" * 7, b"\x7f\xff\xff\xff" + b"\x00" * 100])
def test_whole_file_garbage_is_one_line_and_no_groups(tmp_path, content):
    (tmp_path / FILENAME).write_bytes(content)
    fresh, store, lines = take_over(tmp_path)
    assert fresh.groups == {}
    assert len(lines) == (0 if content == b"" else 1), lines
    store.close()


def test_limits_apply_on_load_as_on_requests(tmp_path):
    c = make(Limits(max_members=3, max_streams=4))
    join(c, 0, "g", client="a", sub={"t": 2})
    join(c, 1, "g", client="b", sub={"t": 2})
    join(c, 2, "h", client="a")
    store = GroupStore.start(str(tmp_path), c.limits, Lines())
    store.save(c, c.changed())
    store.close()
    written = (tmp_path / FILENAME).read_bytes()
    # the same file under tighter limits: g has 4 streams, more than 3
    fresh, _, lines = take_over(tmp_path, Limits(max_members=3, max_streams=3))
    assert len(lines) == 1 and "streams" in lines[0]
    (tmp_path / FILENAME).write_bytes(written)
    fresh, _, lines = take_over(tmp_path, Limits(max_groups=1))
    assert len(lines) == 1 and "group.max.groups" in lines[0] and len(fresh.groups) == 1


def test_a_record_longer_than_any_group_can_be_is_not_read(tmp_path):
    limits = Limits(max_members=1, max_streams=1, max_partitions=1)
    prefix = good_prefix(tmp_path)
    big = record_max_bytes(limits) + 1
    # the header alone says it: nothing of it is read into memory
    (tmp_path / FILENAME).write_bytes(prefix + struct.pack(">iI", big, 0) + b" " * 10)
    fresh, _, lines = take_over(tmp_path)
    assert fresh.groups.keys() == {"g1", "g2", "g3"} and lines == [lines[0]]
    (tmp_path / FILENAME).write_bytes(struct.pack(">iI", big, 0) + b" " * 10)
    fresh, _, lines = take_over(tmp_path, limits)
    assert len(lines) == 1 and f"length {big}" in lines[0]


def test_the_biggest_group_the_limits_allow_fits_its_record():
    limits = Limits(max_members=4, max_streams=8, max_topics_per_member=2, max_partitions=40)
    ids = itertools.count()
    worst = "\x01" * 222  # control characters: six bytes each in JSON
    c = Coordinator(limits, partitions={"\x01" * 249: 20, "\x02" * 249: 20},
                    new_member_id=lambda client: f"{worst}-{next(ids):032d}")
    for _ in range(4):
        c.join(0, "\x03" * 255, "", "\x04" * 255, SESSION, REBALANCE,
               {"\x01" * 249: 1, "\x02" * 249: 1})
    g = c.groups["\x03" * 255]
    assert len(g.members) == 4 and g.streams == 8
    size = len(json.dumps(c.group_record(g.name), separators=(",", ":")))
    assert size <= record_max_bytes(limits)


@pytest.mark.parametrize("cut_from_end", [1, 2, 7, 8, 9, 40])
def test_a_truncated_journal_keeps_every_whole_record(tmp_path, cut_from_end):
    prefix = good_prefix(tmp_path)
    c = make()
    join(c, 0, "g9", client="q")
    last = frame(json.dumps(c.group_record("g9")).encode())
    (tmp_path / FILENAME).write_bytes(prefix + last[:-cut_from_end])
    fresh, _, lines = take_over(tmp_path)
    assert_one_line_and_prefix(tmp_path, lines, fresh)
    assert "cut short" in lines[0]


def test_random_garbage_appended_fifty_times(tmp_path):
    rng = random.Random(7)
    prefix = good_prefix(tmp_path)
    for _ in range(50):
        (tmp_path / FILENAME).write_bytes(prefix + rng.randbytes(rng.randint(1, 300)))
        fresh, store, lines = take_over(tmp_path)
        store.close()
        assert set(fresh.groups) == {"g1", "g2", "g3"} and len(lines) == 1


# -- what is planted in the log dir ------------------------------------------------

def test_a_directory_in_its_place_does_not_stop_the_start(tmp_path):
    (tmp_path / FILENAME).mkdir()
    (tmp_path / FILENAME / "inside").write_text("x")
    lines = Lines()
    c = busy_state()
    store = GroupStore.start(str(tmp_path), c.limits, lines)
    for _ in range(5):
        store.save(c, c.changed() | {"g1"})
    assert len(lines) == 1 and FILENAME in lines[0]
    assert (tmp_path / FILENAME / "inside").read_text() == "x"
    fresh, store, lines = take_over(tmp_path)
    assert fresh.groups == {} and len(lines) == 1
    (tmp_path / FILENAME / "inside").unlink()
    (tmp_path / FILENAME).rmdir()
    for _ in range(3):  # a later save (they back off) finds the way free again
        store.save(c, {"g1", "g2", "g3"})
    store.close()
    fresh, _, lines = take_over(tmp_path)
    assert set(fresh.groups) == {"g1", "g2", "g3"} and lines == []


def test_symbolic_links_in_its_place_are_never_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    # a planted state file: not read, not written through
    os.symlink(victim, log_dir / FILENAME)
    os.symlink(victim, log_dir / (FILENAME + COMPACT_SUFFIX))
    fresh, store, lines = take_over(log_dir)
    assert fresh.groups == {} and len(lines) == 1 and "symbolic link" in lines[0]
    c = busy_state()
    store.save(c, c.changed())
    store.close()
    assert victim.read_bytes() == b"precious"
    assert not os.path.islink(log_dir / FILENAME)
    # the broker's start replaces links as well
    os.symlink(victim, log_dir / (FILENAME + COMPACT_SUFFIX))
    os.unlink(log_dir / FILENAME)
    os.symlink(victim, log_dir / FILENAME)
    os.symlink(victim, log_dir / LEGACY_FILENAME)
    lines = Lines()
    store = GroupStore.start(str(log_dir), Limits(), lines)
    store.save(c, c.changed() | {"g1"})
    store.close()
    assert lines == [] and victim.read_bytes() == b"precious"
    assert not os.path.lexists(log_dir / LEGACY_FILENAME)


def test_a_fifo_in_its_place_does_not_hang_the_take_over(tmp_path):
    os.mkfifo(tmp_path / FILENAME)
    fresh, store, lines = take_over(tmp_path)
    assert fresh.groups == {} and len(lines) == 1 and "regular file" in lines[0]
    store.close()


def test_files_are_created_with_the_process_umask(tmp_path):
    old = os.umask(0o027)
    try:
        c = busy_state()
        store = saved(tmp_path, c)
        store.close()
    finally:
        os.umask(old)
    assert os.stat(tmp_path / FILENAME).st_mode & 0o777 == 0o640


def test_a_directory_at_the_temporary_path_does_not_stop_saving(tmp_path):
    (tmp_path / (FILENAME + COMPACT_SUFFIX)).mkdir()
    (tmp_path / (FILENAME + COMPACT_SUFFIX) / "inside").write_text("x")
    lines = Lines()
    c = busy_state()
    store = GroupStore.start(str(tmp_path), c.limits, lines)
    store.save(c, c.changed())
    store.close()
    assert lines == []
    fresh, store, lines = take_over(tmp_path)
    assert set(fresh.groups) == {"g1", "g2", "g3"} and lines == []
    store.close()


def test_a_generation_at_the_int32_limit_wraps_to_one(tmp_path):
    """A record may hold any int32 generation; the next one must still fit the
    wire's int32, or every join of the group would be answered with an error."""
    c = make()
    join(c, 0, "g", client="a")
    record = json.loads(json.dumps(c.group_record("g")))
    record["generation"] = 2**31 - 1
    (tmp_path / FILENAME).write_bytes(frame(json.dumps(record).encode()))
    fresh, store, lines = take_over(tmp_path)
    store.close()
    assert lines == [] and fresh.groups["g"].generation == 2**31 - 1
    answer = join(fresh, 2000, "g", client="b")
    assert isinstance(answer, Pending)
    fresh.expire(2000 + REBALANCE)
    assert fresh.groups["g"].generation == 1


def test_forgotten_groups_in_the_file_take_no_memory_on_load(tmp_path):
    """A journal of nothing but groups made and forgotten (any number of names)
    leaves nothing to hold while it is read, within group.max.groups."""
    c = make(Limits(max_groups=2))
    records = []
    for i in range(20000):
        join(c, i, f"brief-{i}", client="q")
        records.append(frame(json.dumps(c.group_record(f"brief-{i}")).encode()))
        records.append(frame(json.dumps({"type": "gone", "group": f"brief-{i}"}).encode()))
        del c.groups[f"brief-{i}"]
    (tmp_path / FILENAME).write_bytes(b"".join(records))
    store = GroupStore(str(tmp_path), c.limits, Lines())
    groups = {}
    with open(tmp_path / FILENAME, "rb") as f:
        assert store._read(f, groups, 0.0) is None
    assert groups == {}
