import os
import selectors
import time

from hostbroker.shm.doorbell import Doorbell
from tests.shm.procutil import fork, wait_ok


def test_rings_add_up_and_drain_empties():
    bell = Doorbell()
    try:
        assert bell.drain() == 0
        assert not bell.wait(0.01)
        bell.ring()
        bell.ring()
        assert bell.wait(0)
        assert bell.drain() == 2
        assert bell.drain() == 0
    finally:
        bell.close()
        bell.close()


def test_ring_never_blocks_on_a_saturated_counter():
    bell = Doorbell()
    try:
        os.eventfd_write(bell.fileno(), 0xFFFF_FFFF_FFFF_FFFE)
        bell.ring()
        assert bell.drain() == 0xFFFF_FFFF_FFFF_FFFE
    finally:
        bell.close()


def test_a_forked_child_wakes_a_selector_in_the_parent():
    bell = Doorbell()
    assert os.get_inheritable(bell.fileno())

    def child():
        time.sleep(0.05)
        bell.ring()

    selector = selectors.DefaultSelector()
    selector.register(bell, selectors.EVENT_READ)
    try:
        pid = fork(child)
        start = time.monotonic()
        events = selector.select(timeout=5)
        assert [key.fileobj for key, _ in events] == [bell]
        assert time.monotonic() - start < 4
        assert bell.drain() == 1
        assert selector.select(timeout=0) == []
        wait_ok(pid)
    finally:
        selector.close()
        bell.close()


def test_handle_on_an_inherited_descriptor():
    bell = Doorbell()

    def child(fd):
        Doorbell(fd).ring()

    try:
        wait_ok(fork(child, bell.fileno()))
        assert bell.drain() == 1
    finally:
        bell.close()
