import os

import pytest

from hostbroker.workers.processor import SegmentFiles


def test_reuses_open_files_and_never_serves_a_replaced_path(tmp_path):
    path = str(tmp_path / "00000000000000000000.kafka")
    with open(path, "wb") as f:
        f.write(b"old")
    files = SegmentFiles(limit=2)
    fd = files.open(path)
    assert files.open(path) == fd
    os.unlink(path)  # a topic deleted and created again under the same name
    with open(path, "wb") as f:
        f.write(b"new")
    fd2 = files.open(path)
    assert os.pread(fd2, 3, 0) == b"new"
    files.close()


def test_bounded_and_sweeps_deleted_files(tmp_path):
    paths = []
    for i in range(4):
        p = str(tmp_path / f"{i:020d}.kafka")
        open(p, "wb").close()
        paths.append(p)
    files = SegmentFiles(limit=2)
    for p in paths:
        files.open(p)
    assert len(files.files) == 2 and list(files.files) == paths[2:]
    os.unlink(paths[3])
    files.sweep()  # retention removed it: let its space go
    assert list(files.files) == paths[2:3]
    with pytest.raises(FileNotFoundError):
        files.open(paths[3])
    files.close()


def test_a_segment_deleted_while_open_is_still_read_to_the_end(tmp_path):
    path = str(tmp_path / "00000000000000000000.kafka")
    with open(path, "wb") as f:
        f.write(b"held open")
    files = SegmentFiles(limit=4)
    fd = files.open(path)
    os.unlink(path)  # retention deletes it mid-send
    assert files.open(path) == fd
    assert os.pread(fd, 9, 0) == b"held open"
    files.close()
