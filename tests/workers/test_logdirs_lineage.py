"""The state file's lineage: a copy ``logdirs online`` refused stays refused.

Pure first (``replication/localstate.start_copy``: which copy a start takes,
and which dirs are foreign), then hb-logdirs driven pass by pass (the harness
of test_logdirs_worker): the refusal is recorded durably under a new history
and a seq past the refused copy's; a restart, however far this broker's seq
went meanwhile, holds the dir, deletes no stray and says the way out; the
way out (``forget`` then ``online``) takes the dir back."""

from __future__ import annotations

import pytest

from hostbroker.errors import ErrorCode, StorageError
from hostbroker.replication.localstate import (
    LocalState,
    StateLimits,
    decode_state,
    encode_state,
    new_history,
    start_copy,
)
from tests.workers.test_logdirs_worker import _back_with, h, online  # noqa: F401

A, B = "a" * 16, "b" * 16


def test_a_refused_copy_never_wins_even_when_its_seq_is_higher():
    mine = LocalState(seq=9, online=(1, 2), history=B, refused={3: (12, A)})
    theirs = LocalState(seq=12, online=(1, 2, 3), history=A)
    found = start_copy({1: mine, 2: mine, 3: theirs})
    assert found.state is mine and not found.certain
    assert set(found.foreign) == {3}


def test_another_history_is_foreign_and_no_history_is_of_the_current_lineage():
    mine = LocalState(seq=9, online=(1, 2), history=B)
    old = LocalState(seq=4, online=(1, 2, 3))  # written before histories
    assert start_copy({1: mine, 2: mine, 3: old}).certain
    other = LocalState(seq=4, online=(1, 2, 3), history=A)
    found = start_copy({1: mine, 2: mine, 3: other})
    assert found.state is mine and not found.certain and set(found.foreign) == {3}


def test_a_dir_recorded_as_refused_is_foreign_without_its_copy():
    mine = LocalState(seq=9, online=(1, 2), history=B, refused={3: (12, A)})
    found = start_copy({1: mine, 2: mine, 3: None})
    assert not found.certain and set(found.foreign) == {3}


def test_the_lineage_fields_are_read_hostile():
    good = LocalState(seq=2, online=(1,), history=new_history(), refused={2: (1, "")})
    assert decode_state(encode_state(good), "p") == good
    for bad in (b'"history":"xyz"', b'"history":""', b'"history":7',
                b'"refused":{"2":{"seq":-1,"history":""}}',
                b'"refused":{"02":{"seq":1,"history":""}}',
                b'"refused":{"2":{"seq":1}}', b'"refused":[]'):
        raw = encode_state(LocalState(seq=2))[:-1] + b"," + bad + b"}"
        with pytest.raises(StorageError, match="^p: "):
            decode_state(raw, "p")


def test_the_limits_are_enforced_on_read_and_write():
    limits = StateLimits(max_bytes=4096, max_online=2)
    three = LocalState(seq=1, online=(1, 2, 3))
    with pytest.raises(StorageError, match="logdirs.state.max.online 2"):
        decode_state(encode_state(three), "p", limits)
    with pytest.raises(ValueError, match="logdirs.state.max.online 2"):
        encode_state(three, limits)
    big = LocalState(seq=1, dirs={i: "/d" * 300 for i in range(1, 20)})
    with pytest.raises(StorageError, match="logdirs.state.max.bytes 4096"):
        decode_state(encode_state(big), "p", limits)
    with pytest.raises(ValueError, match="logdirs.state.max.bytes 4096"):
        encode_state(big, limits)


def _refused(h):
    """Dir 3 back holding a copy newer than the start's, refused by `online`."""
    w, started = _back_with(h, 5)
    answer = online(h, h.paths[2])
    assert answer["error"] == ErrorCode.INVALID_REQUEST, answer
    return w, started


def test_a_refusal_is_durable_under_a_new_history_past_the_refused_seq(h):
    w, started = _refused(h)
    assert "holds a newer state file" in w.held[3] and "logdirs forget" in w.held[3]
    for i in (0, 1):
        copy = h.copy(i)
        assert copy.refused == {3: (started.seq + 5, started.history)}
        assert copy.history and copy.history != started.history
        assert copy.seq > started.seq + 5
    assert h.copy(2).seq == started.seq + 5  # not written over
    assert online(h, h.paths[2])["message"] == w.held[3]  # asked again: the same line


def test_a_limit_below_the_log_dirs_is_refused_in_one_line():
    from hostbroker.settings_logdirs import state_online_problem

    assert state_online_problem(2, 3, False) == (
        "logdirs.state.max.online 2 is below the 3 log.dirs configured")
    assert state_online_problem(3, 3, False) is None
    assert state_online_problem(2, 3, True) is None  # (cluster mode keeps no state file)


def test_a_restart_after_a_refusal_holds_the_dir_and_deletes_no_stray(h):
    from hostbroker.shm.logdirs import LD_OFFLINE

    w, started = _refused(h)
    for _ in range(8):
        w.write_doc()  # (later changes)
    h.w.writers.close()
    h.dirtable.fill([1, 2, 3])  # (restarted: dir 3's id file read again)
    h.table.set_log_dir_offline(2, False)
    w = h.start()
    assert 3 in w.held and 2 in w.unidentified and "another" not in w.held[3]
    w._pass(0.0)
    got, _ = h.states()
    assert all(body["role"] == "stopped" for (_, _, d), body in got.items() if d == 3), got
    w._update_dirtable()
    assert h.dirtable.read(2).state == LD_OFFLINE
    assert h.copy(2).seq == started.seq + 5  # still not written over
    assert 3 not in h.copy(0).online
    # the way out: keep this broker's state
    assert w._forget(3)["error"] == ErrorCode.NONE
    assert 3 not in h.copy(0).refused
    assert online(h, h.paths[2]) is None  # reopened
    assert 3 not in w.held and 2 not in w.unidentified
