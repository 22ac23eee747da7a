"""The leader epoch cache: its file, its answers, its changes, and a hostile file
refused as a StorageError naming it."""

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostbroker.errors import StorageError
from hostbroker.log import epochs
from hostbroker.log.epochs import EPOCH_FILE, LeaderEpochCache


def write(directory, data: bytes) -> str:
    path = os.path.join(directory, EPOCH_FILE)
    with open(path, "wb") as f:
        f.write(data)
    return path


def read(directory) -> bytes:
    with open(os.path.join(directory, EPOCH_FILE), "rb") as f:
        return f.read()


def test_a_missing_file_is_an_empty_cache_and_nothing_is_written(tmp_path):
    cache = epochs.load(str(tmp_path))
    assert cache.entries == () and cache.latest_epoch == -1 and cache.latest_start == -1
    assert cache.end_offset_for(3, 100) == (-1, -1)
    assert cache.epoch_at(5, 100) == (-1, 100)
    assert not os.path.exists(os.path.join(tmp_path, EPOCH_FILE))


def test_the_file_is_the_documented_text_and_loads_back(tmp_path):
    cache = epochs.load(str(tmp_path))
    assert cache.assign(0, 0)
    assert cache.assign(3, 120)
    assert not cache.assign(3, 500)  # the newest epoch already: its start stays
    assert read(tmp_path) == b"0\n2\n0 0\n3 120\n"
    again = LeaderEpochCache.load(str(tmp_path))
    assert again.entries == ((0, 0), (3, 120))
    assert (again.latest_epoch, again.latest_start) == (3, 120)


def test_assign_replaces_epochs_that_hold_no_message(tmp_path):
    cache = epochs.load(str(tmp_path))
    cache.assign(1, 10)
    cache.assign(2, 50)
    cache.assign(4, 50)  # epoch 2 never wrote anything
    assert cache.entries == ((1, 10), (4, 50))
    cache.assign(5, 30)  # a start below the newest: the later entries hold nothing below 30
    assert cache.entries == ((1, 10), (5, 30))
    with pytest.raises(ValueError, match="below the newest"):
        cache.assign(2, 100)
    with pytest.raises(ValueError):
        cache.assign(7, -1)
    assert epochs.load(str(tmp_path)).entries == ((1, 10), (5, 30))


def test_end_offset_for_answers_as_the_spec_says(tmp_path):
    cache = epochs.load(str(tmp_path))
    for epoch, start in ((2, 0), (3, 100), (7, 250)):
        cache.assign(epoch, start)
    assert cache.end_offset_for(1, 400) == (-1, -1)  # before the first epoch
    assert cache.end_offset_for(-1, 400) == (-1, -1)
    assert cache.end_offset_for(2, 400) == (2, 100)
    assert cache.end_offset_for(3, 400) == (3, 250)
    assert cache.end_offset_for(5, 400) == (3, 250)  # an epoch this log never saw
    assert cache.end_offset_for(7, 400) == (7, 400)  # the newest: the log end
    assert cache.end_offset_for(9, 400) == (7, 400)


def test_epoch_at_says_which_leader_wrote_an_offset(tmp_path):
    cache = LeaderEpochCache(os.path.join(tmp_path, EPOCH_FILE), [(2, 10), (3, 100), (7, 250)])
    assert cache.epoch_at(0, 300) == (-1, 10)
    assert cache.epoch_at(10, 300) == (2, 100)
    assert cache.epoch_at(99, 300) == (2, 100)
    assert cache.epoch_at(100, 300) == (3, 250)
    assert cache.epoch_at(260, 300) == (7, 300)
    assert cache.epoch_at(260) == (7, -1)


def test_truncate_from_end_forgets_epochs_at_or_past_the_cut(tmp_path):
    cache = epochs.load(str(tmp_path))
    for epoch, start in ((2, 0), (3, 100), (7, 250)):
        cache.assign(epoch, start)
    assert not cache.truncate_from_end(300)
    assert cache.truncate_from_end(250)
    assert cache.entries == ((2, 0), (3, 100))
    assert cache.truncate_from_end(50)
    assert epochs.load(str(tmp_path)).entries == ((2, 0),)
    assert cache.truncate_from_end(0)
    assert epochs.load(str(tmp_path)).entries == ()


def test_truncate_from_start_moves_the_first_epoch_up(tmp_path):
    cache = epochs.load(str(tmp_path))
    for epoch, start in ((2, 0), (3, 100), (7, 250)):
        cache.assign(epoch, start)
    assert not cache.truncate_from_start(0)
    assert cache.truncate_from_start(120)
    assert cache.entries == ((3, 120), (7, 250))
    assert cache.truncate_from_start(250)
    assert epochs.load(str(tmp_path)).entries == ((7, 250),)
    assert cache.truncate_from_start(900)
    assert cache.entries == ((7, 900),)
    assert cache.clear() and epochs.load(str(tmp_path)).entries == ()
    assert not cache.clear()


def test_a_failed_write_is_a_storage_error_and_changes_nothing(tmp_path):
    cache = LeaderEpochCache(os.path.join(tmp_path, "gone", EPOCH_FILE), [(1, 0)])
    with pytest.raises(StorageError, match=EPOCH_FILE):
        cache.assign(2, 10)
    assert cache.entries == ((1, 0),)


HOSTILE = [
    (b"", "empty"),
    (b"0\n", "cut off|no version"),
    (b"1\n0\n", "unknown version"),
    (b"0\n2\n1 0\n", "does not match"),
    (b"0\n1\n1 0", "cut off"),
    (b"0\n1\n1 0 0\n", "malformed"),
    (b"0\n1\n-1 0\n", "malformed"),
    (b"0\n1\n+1 0\n", "malformed"),
    (b"0\n1\n1 x\n", "malformed"),
    (b"0\n1\n 1 0\n", "malformed"),
    (b"0\n1\n2147483648 0\n", "out of range"),
    (b"0\n1\n1 9223372036854775808\n", "out of range"),
    (b"0\n1\n1 99999999999999999999\n", "malformed"),
    (b"0\n2\n3 0\n3 10\n", "must increase"),
    (b"0\n2\n4 0\n3 10\n", "must increase"),
    (b"0\n2\n3 10\n4 5\n", "before epoch"),
    (b"0\n1\n1 \xff\n", "not ASCII"),
    (b"0\n99999999999999999999\n", "does not match"),
    (b"0\n" + str(epochs.MAX_ENTRIES + 1).encode() + b"\n"
     + b"".join(b"%d %d\n" % (i, i) for i in range(epochs.MAX_ENTRIES + 1)), "over"),
    (b"0\n0\n" + b"\n" * (epochs.MAX_FILE_BYTES), "longer than"),
]


@pytest.mark.parametrize("data, problem", HOSTILE, ids=[p for _, p in HOSTILE])
def test_a_hostile_file_is_a_storage_error_naming_it(tmp_path, data, problem):
    path = write(tmp_path, data)
    with pytest.raises(StorageError, match=problem) as info:
        epochs.load(str(tmp_path))
    assert path in str(info.value)


def test_a_link_or_a_directory_in_its_place_is_a_storage_error(tmp_path):
    target = write(tmp_path, b"0\n0\n")
    os.rename(target, os.path.join(tmp_path, "elsewhere"))
    os.symlink(os.path.join(tmp_path, "elsewhere"), os.path.join(tmp_path, EPOCH_FILE))
    with pytest.raises(StorageError, match="symbolic link"):
        epochs.load(str(tmp_path))
    os.unlink(os.path.join(tmp_path, EPOCH_FILE))
    os.mkdir(os.path.join(tmp_path, EPOCH_FILE))
    with pytest.raises(StorageError, match=EPOCH_FILE):
        epochs.load(str(tmp_path))


def test_entries_out_of_order_cannot_be_built():
    with pytest.raises(ValueError):
        LeaderEpochCache("x", [(3, 0), (2, 10)])


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80) | st.text("0123456789 \n-", max_size=40).map(str.encode))
def test_any_bytes_parse_or_raise_value_error(data):
    try:
        entries = epochs.parse_entries(data)
    except ValueError:
        return
    assert epochs.format_entries(entries) == data


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 40)), max_size=12))
def test_assign_keeps_the_order_invariant(tmp_path_factory, steps):
    directory = str(tmp_path_factory.mktemp("e"))
    cache = epochs.load(directory)
    epoch = 0
    for bump, start in steps:
        epoch += bump
        cache.assign(epoch, start)
        entries = cache.entries
        assert [e for e, _ in entries] == sorted({e for e, _ in entries})
        assert [s for _, s in entries] == sorted(s for _, s in entries)
        assert cache.latest_epoch == epoch
    assert epochs.load(directory).entries == cache.entries
