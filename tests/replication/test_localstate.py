"""The replication state file of replicas across log dirs
(hostbroker/replication/localstate.py): round trips, every rule checked at
decode (hostile input: random garbage, mutated documents), newest wins and
when it is certain."""

import json
import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostbroker.errors import StorageError
from hostbroker.replication.localstate import (
    STATE_MAX_BYTES,
    LocalState,
    PartitionState,
    TopicState,
    decode_state,
    encode_state,
    newest,
)

PATH = "/srv/d1/log-dirs-state"

STATE = LocalState(
    seq=7, online=(1, 2), dirs={1: "/srv/d1", 2: "/srv/d2", 3: "/srv/d3"},
    topics={"t": TopicState({"retention.ms": "60000"}, {
        0: PartitionState((1, 2), 1, 3, (1, 2), 5),
        1: PartitionState((2, 3), -1, 4, (2,), 9, target=(3, 1)),
    })},
    deleting=("gone",),
)


def doc(**changes):
    d = json.loads(encode_state(STATE))
    d.update(changes)
    return d


def part(**changes):
    p = {"replicas": [1, 2], "leader": 1, "leader_epoch": 0, "isr": [1, 2], "version": 0}
    p.update(changes)
    return doc(topics={"t": {"config": {}, "partitions": {"0": p}}})


def test_the_document_is_the_documented_json():
    assert json.loads(encode_state(STATE)) == {
        "version": 1, "seq": 7, "online": [1, 2],
        "dirs": {"1": "/srv/d1", "2": "/srv/d2", "3": "/srv/d3"},
        "topics": {"t": {"config": {"retention.ms": "60000"}, "partitions": {
            "0": {"replicas": [1, 2], "leader": 1, "leader_epoch": 3, "isr": [1, 2],
                  "version": 5},
            "1": {"replicas": [2, 3], "leader": -1, "leader_epoch": 4, "isr": [2],
                  "version": 9, "target": [3, 1]}}}},
        "deleting": ["gone"],
    }
    assert decode_state(encode_state(STATE), PATH) == STATE


def test_helpers_build_the_next_document():
    t = STATE.topics["t"]
    t = replace(t, partitions={**t.partitions, 0: PartitionState((1, 2), 2, 4, (2,), 6)})
    nxt = replace(STATE, topics={**STATE.topics, "t": t}).next([2, 1, 2])
    assert (nxt.seq, nxt.online) == (8, (1, 2))
    assert nxt.partition("t", 0).leader == 2 and STATE.partition("t", 0).leader == 1
    assert nxt.partition("t", 5) is None and nxt.partition("x", 0) is None
    assert STATE.known_ids() == {1, 2, 3}
    assert decode_state(encode_state(LocalState()), PATH) == LocalState()


dir_ids = st.integers(1, 2**31 - 1)


@st.composite
def partition_states(draw):
    replicas = tuple(draw(st.lists(dir_ids, min_size=1, max_size=8, unique=True)))
    isr = tuple(r for r in replicas if draw(st.booleans()))
    target = tuple(draw(st.lists(dir_ids, max_size=8, unique=True)))
    return PartitionState(replicas, draw(st.sampled_from((-1, *replicas))),
                          draw(st.integers(0, 2**31 - 1)), isr,
                          draw(st.integers(0, 2**31 - 1)), target)


topic_names = st.text("abcXYZ019._-", min_size=1, max_size=20).filter(
    lambda n: n not in (".", ".."))
states = st.builds(
    LocalState, st.integers(0, 2**63 - 1), st.lists(dir_ids, max_size=8, unique=True).map(tuple),
    st.dictionaries(dir_ids, st.text(min_size=1, max_size=20).filter(lambda p: "\0" not in p),
                    max_size=4),
    st.dictionaries(topic_names, st.builds(
        TopicState, st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=2),
        st.dictionaries(st.integers(0, 2**31 - 1), partition_states(), min_size=1,
                        max_size=3)), max_size=3),
    st.lists(topic_names, max_size=3, unique=True).map(tuple))


@settings(deadline=None, max_examples=200)
@given(states)
def test_every_state_round_trips(state):
    decoded = decode_state(encode_state(state), PATH)
    assert decoded.seq == state.seq and set(decoded.online) == set(state.online)
    assert decoded.topics == state.topics and decoded.dirs == state.dirs
    assert set(decoded.deleting) == set(state.deleting)


BAD = [
    ("not JSON", b"{\"version\": 1,"),
    ("not UTF-8", b"\xff\xfe\x00{"),
    ("a list", b"[]"),
    ("deeply nested", b"[" * 100000 + b"]" * 100000),
    ("version 2", doc(version=2)),
    ("version true", doc(version=True)),
    ("no seq", {k: v for k, v in doc().items() if k != "seq"}),
    ("unknown key", doc(extra=1)),
    ("negative seq", doc(seq=-1)),
    ("float seq", doc(seq=1.0)),
    ("online a dict", doc(online={})),
    ("online id 0", doc(online=[0])),
    ("online id too large", doc(online=[2**31])),
    ("online twice", doc(online=[1, 1])),
    ("dir key not a number", doc(dirs={"x": "/a"})),
    ("dir key 007", doc(dirs={"007": "/a"})),
    ("dir path empty", doc(dirs={"1": ""})),
    ("dir path NUL", doc(dirs={"1": "/a\0b"})),
    ("dir path not a string", doc(dirs={"1": 5})),
    ("topics a list", doc(topics=[])),
    ("bad topic name", doc(topics={"a/b": {"config": {}, "partitions": {}}})),
    ("topic without partitions", doc(topics={"t": {"config": {}, "partitions": {}}})),
    ("config not strings", doc(topics={"t": {"config": {"k": 1}, "partitions": {}}})),
    ("partition key -1", doc(topics={"t": {"config": {}, "partitions": {"-1": {}}}})),
    ("partition key +1", doc(topics={"t": {"config": {}, "partitions": {"+1": {}}}})),
    ("nine replicas", part(replicas=list(range(1, 10)))),
    ("no replicas", part(replicas=[], isr=[], leader=-1)),
    ("replica twice", part(replicas=[1, 1])),
    ("replica id 0", part(replicas=[0, 1], isr=[1])),
    ("ISR outside", part(isr=[3])),
    ("ISR twice", part(isr=[1, 1])),
    ("leader outside", part(leader=3)),
    ("leader -2", part(leader=-2)),
    ("leader a string", part(leader="1")),
    ("leader -1.0", part(leader=-1.0)),
    ("negative epoch", part(leader_epoch=-1)),
    ("epoch past int64", part(leader_epoch=2**63)),
    ("epoch past int32", part(leader_epoch=2**31)),  # what the writers take
    ("version past int32", part(version=2**31)),
    ("version a bool", part(version=False)),
    ("target empty", part(target=[])),
    ("target twice", part(target=[2, 2])),
    ("partition unknown key", part(extra=1)),
    ("partition missing isr", {**part(), "topics": {"t": {"config": {}, "partitions": {
        "0": {"replicas": [1], "leader": 1, "leader_epoch": 0, "version": 0}}}}}),
    ("deleting not names", doc(deleting=[1])),
    ("deleting twice", doc(deleting=["a", "a"])),
    ("deleting bad name", doc(deleting=[".."])),
]


@pytest.mark.parametrize("what, content", BAD, ids=[case[0] for case in BAD])
def test_every_rule_is_checked(what, content):
    raw = content if isinstance(content, bytes) else json.dumps(content).encode()
    with pytest.raises(StorageError) as info:
        decode_state(raw, PATH)
    assert str(info.value).startswith(PATH + ": ") and "\n" not in str(info.value)


def test_a_document_over_the_limit_is_refused_unparsed():
    raw = encode_state(STATE)[:-1] + b" " * STATE_MAX_BYTES + b"}"
    with pytest.raises(StorageError, match="longer than"):
        decode_state(raw, PATH)


def test_fifty_random_garbage_files():
    """As Kafka's recovery tests append garbage to a log: each file is refused in
    one line (StorageError), never any other exception."""
    rng = random.Random(36)
    good = encode_state(STATE)
    for i in range(50):
        kind = i % 3
        if kind == 0:
            raw = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400)))
        elif kind == 1:  # a torn or scribbled copy of a good one
            raw = bytearray(good[:rng.randrange(1, len(good))])
            for _ in range(rng.randrange(0, 4)):
                raw[rng.randrange(len(raw))] = rng.randrange(256)
            raw = bytes(raw)
        else:  # a good one with garbage after it
            raw = good + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
        try:
            decode_state(raw, PATH)
        except StorageError as e:
            assert "\n" not in str(e)


@settings(deadline=None, max_examples=300)
@given(st.binary(max_size=300))
def test_any_bytes_decode_or_storage_error(raw):
    try:
        decode_state(raw, PATH)
    except StorageError:
        pass


@settings(deadline=None, max_examples=300)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=20),
       st.sampled_from(["seq", "online", "dirs", "topics", "deleting", "version"]))
def test_any_json_in_any_field_decodes_or_storage_error(value, key):
    try:
        decode_state(json.dumps(doc(**{key: value})).encode(), PATH)
    except StorageError:
        pass


def copy(seq, online):
    return LocalState(seq=seq, online=tuple(online))


def test_the_highest_seq_wins_and_is_certain_when_every_online_dir_is_present():
    state, certain = newest({1: copy(4, [1, 2]), 2: copy(5, [1, 2]), 3: None})
    assert (state.seq, certain) == (5, True)


def test_a_missing_online_dir_makes_it_uncertain():
    # dir 3 was online at seq 5 and is not present now: it may hold seq 6
    state, certain = newest({1: copy(5, [1, 3]), 2: copy(3, [1, 2])})
    assert (state.seq, certain) == (5, False)


def test_a_present_dir_without_a_readable_copy_makes_it_uncertain():
    # dir 2 was online at seq 5 and holds no copy that decodes: it may have held seq 6
    assert newest({1: copy(5, [1, 2]), 2: None}) == (copy(5, [1, 2]), False)
    assert newest({1: copy(5, [1]), 2: None}) == (copy(5, [1]), True)


def test_no_copy_at_all():
    assert newest({}) == (None, False)
    assert newest({1: None, 2: None}) == (None, False)


def test_equal_seqs_take_the_lowest_dir_id():
    a, b = LocalState(seq=3, online=(1, 2), deleting=("a",)), LocalState(seq=3, online=(1, 2))
    assert newest({2: a, 1: b})[0] is b
