"""Log dir ids (hostbroker/log/dirids.py): the ``log-dir-id`` file written
atomically and read as hostile input, the ids given at start, duplicates refused."""

import os
import stat

import pytest

from hostbroker.errors import StorageError
from hostbroker.log import dirids
from hostbroker.log.dirids import (
    DuplicateDirIdError,
    assign_dir_ids,
    read_dir_id,
    write_dir_id,
)


def id_file(d):
    return d / "log-dir-id"


def test_written_then_read(tmp_path):
    assert read_dir_id(str(tmp_path)) is None
    write_dir_id(str(tmp_path), 3)
    assert id_file(tmp_path).read_bytes() == b"3\n"
    assert read_dir_id(str(tmp_path)) == 3
    write_dir_id(str(tmp_path), 2**31 - 1)
    assert read_dir_id(str(tmp_path)) == 2**31 - 1
    assert not (tmp_path / "log-dir-id.tmp").exists()


def test_the_file_is_not_for_others(tmp_path):
    old = os.umask(0o027)
    try:
        write_dir_id(str(tmp_path), 5)
    finally:
        os.umask(old)
    assert stat.S_IMODE(id_file(tmp_path).stat().st_mode) == 0o640


@pytest.mark.parametrize("dir_id", [0, -1, 2**31, True, "3"])
def test_an_id_out_of_range_is_not_written(tmp_path, dir_id):
    with pytest.raises(ValueError):
        write_dir_id(str(tmp_path), dir_id)
    assert not id_file(tmp_path).exists()


@pytest.mark.parametrize("content", [
    b"", b"\n", b"3", b"03\n", b"+3\n", b"-3\n", b"0\n", b" 3\n", b"3 \n", b"3\n\n",
    b"3\r\n", b"2147483648\n", b"99999999999\n", b"x\n", "٣\n".encode(), b"3\x00\n",
    b"1" * 40 + b"\n",
])
def test_a_bad_file_is_a_storage_error_naming_it(tmp_path, content):
    id_file(tmp_path).write_bytes(content)
    with pytest.raises(StorageError) as info:
        read_dir_id(str(tmp_path))
    assert str(id_file(tmp_path)) in str(info.value) and "\n" not in str(info.value)


def test_a_link_a_directory_or_a_fifo_is_not_an_id_file(tmp_path):
    (tmp_path / "target").write_bytes(b"3\n")
    for kind in ("link", "dir", "fifo"):
        d = tmp_path / kind
        d.mkdir()
        if kind == "link":
            os.symlink(tmp_path / "target", id_file(d))
        elif kind == "dir":
            id_file(d).mkdir()
        else:
            os.mkfifo(id_file(d))
        with pytest.raises(StorageError):
            read_dir_id(str(d))


def make_dirs(tmp_path, n):
    paths = []
    for i in range(n):
        d = tmp_path / f"d{i}"
        d.mkdir()
        paths.append(str(d))
    return paths


def test_fresh_dirs_get_ids_in_config_order(tmp_path):
    paths = make_dirs(tmp_path, 3)
    assert assign_dir_ids(paths, set()) == [1, 2, 3]
    assert [read_dir_id(p) for p in paths] == [1, 2, 3]
    # reordered in the config: each keeps its own
    assert assign_dir_ids(paths[::-1], set()) == [3, 2, 1]


def test_a_fresh_disk_never_takes_a_known_id(tmp_path):
    paths = make_dirs(tmp_path, 3)
    write_dir_id(paths[0], 1)
    write_dir_id(paths[2], 2)
    # the state names a dead disk's id 7: the fresh one gets 8
    assert assign_dir_ids(paths, {1, 2, 7}) == [1, 8, 2]
    assert read_dir_id(paths[1]) == 8


def test_a_bad_id_file_starts_that_dir_offline(tmp_path):
    paths = make_dirs(tmp_path, 3)
    write_dir_id(paths[0], 4)
    os.mkdir(os.path.join(paths[1], "log-dir-id"))  # an id file that is a directory
    lines = []
    assert assign_dir_ids(paths, set(), report=lines.append) == [4, None, 5]
    assert len(lines) == 1 and paths[1] in lines[0] and "offline" in lines[0]
    assert os.path.isdir(os.path.join(paths[1], "log-dir-id"))  # left as found


def test_a_dir_that_cannot_be_written_starts_offline(tmp_path):
    paths = make_dirs(tmp_path, 2)
    missing = str(tmp_path / "gone")  # not there: the id cannot be written
    lines = []
    assert assign_dir_ids([paths[0], missing, paths[1]], set(), report=lines.append) \
        == [1, None, 2]
    assert len(lines) == 1 and missing in lines[0]


def test_two_dirs_with_one_id_are_refused_in_one_line(tmp_path):
    paths = make_dirs(tmp_path, 3)
    write_dir_id(paths[0], 3)
    write_dir_id(paths[2], 3)
    with pytest.raises(DuplicateDirIdError) as info:
        assign_dir_ids(paths, set())
    assert str(info.value) == (f"log.dirs: {paths[0]} and {paths[2]} both hold log dir id 3 "
                               "(a copied dir?)")
    assert read_dir_id(paths[1]) is None  # nothing written before the refusal


def test_no_id_left(tmp_path):
    paths = make_dirs(tmp_path, 2)
    write_dir_id(paths[0], dirids.MAX_DIR_ID)
    lines = []
    assert assign_dir_ids(paths, set(), report=lines.append) == [dirids.MAX_DIR_ID, None]
    assert len(lines) == 1
