import os

import pytest

from hostbroker.shm.region import SharedRegion, broker_prefix, region_name, remove_stale
from tests.shm.procutil import fork, wait_ok


def test_attached_process_sees_and_writes_the_same_bytes(names):
    region = SharedRegion.create(names("r"), 10_000)
    try:
        region.buf[:5] = b"hello"

        def child():
            other = SharedRegion.attach(names("r"))
            assert other.size == 10_000 and bytes(other.buf[:5]) == b"hello"
            other.buf[9_995:] = b"world"
            other.close()

        wait_ok(fork(child))
        assert bytes(region.buf[9_995:]) == b"world"
    finally:
        region.close()


def test_create_fails_if_the_name_exists_and_attach_if_it_does_not(names):
    region = SharedRegion.create(names("r"), 4096)
    try:
        with pytest.raises(FileExistsError):
            SharedRegion.create(names("r"), 4096)
        with pytest.raises(FileNotFoundError):
            SharedRegion.attach(names("other"))
    finally:
        region.close()


def test_read_only_attach_cannot_write(names):
    region = SharedRegion.create(names("r"), 4096)
    monitor = SharedRegion.attach(names("r"), readonly=True)
    try:
        region.buf[0] = 7
        assert monitor.buf[0] == 7
        with pytest.raises(TypeError):
            monitor.buf[0] = 1
    finally:
        monitor.close()
        region.close()


def test_only_the_creator_unlinks(names):
    region = SharedRegion.create(names("r"), 4096)
    other = SharedRegion.attach(names("r"))
    with pytest.raises(PermissionError):
        other.unlink()
    region.unlink()
    assert not os.path.exists("/dev/shm" + names("r"))
    other.buf[0] = 1  # the mapping outlives the name
    other.close()
    region.close()


def test_close_with_a_view_still_held_defers_the_unmap(names):
    region = SharedRegion.create(names("r"), 4096)
    region.buf[:3] = b"abc"
    view = region.buf[:3]
    region.close()
    region.close()
    assert bytes(view) == b"abc"
    view.release()


def test_remove_stale_removes_exactly_one_brokers_regions():
    mine, theirs = f"s{os.getpid()}", f"s{os.getpid()}x"
    created = [SharedRegion.create(region_name(mine, kind, i), 4096) for kind in ("ring", "table") for i in range(2)]
    other = SharedRegion.create(region_name(theirs, "ring", 0), 4096)
    try:
        removed = remove_stale(broker_prefix(mine))
        assert sorted(removed) == sorted(r.name for r in created)
        assert not [e for e in os.listdir("/dev/shm") if e.startswith(broker_prefix(mine)[1:])]
        assert os.path.exists("/dev/shm" + other.name)
        assert remove_stale(broker_prefix(mine)) == []
    finally:
        for region in created + [other]:
            region.close()
        remove_stale(broker_prefix(theirs))


def test_names():
    assert region_name("ab12", "ring", 3) == "/hb-ab12-ring-3"
    assert region_name("ab12", "ring", 3).startswith(broker_prefix("ab12"))
    with pytest.raises(ValueError):
        region_name("a-b", "ring", 0)
    with pytest.raises(ValueError):
        SharedRegion.create("no-slash", 4096)
    with pytest.raises(ValueError):
        remove_stale("/")
