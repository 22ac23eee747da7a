import random
import struct
import zlib

import pytest

from hostbroker.shm.doorbell import Doorbell
from hostbroker.shm.region import LayoutError, SharedRegion
from hostbroker.shm.ring import HEADER_SIZE, MIN_CAPACITY, Ring
from tests.shm.procutil import fork, kill, wait_ok, wait_until


@pytest.fixture
def ring(created):
    return created(Ring, "ring", MIN_CAPACITY)


def _payloads(seed: int, count: int, max_size: int):
    rng = random.Random(seed)
    for i in range(count):
        size = rng.choice((0, 1, 7, 8, rng.randrange(max_size), max_size))
        yield i, rng.randbytes(size)


def test_round_trip_of_random_sizes_wraps_many_times(ring):
    expected, received = [], []
    for i, payload in _payloads(1, 3000, ring.max_record):
        parts = (payload[:3], payload[3:10], payload[10:])  # multi-part records too
        while not ring.try_put(*parts):
            ring.publish()
            received += [bytes(r) for r in ring.read()]
            ring.release()
        expected.append(payload)
    ring.publish()
    received += [bytes(r) for r in ring.read()]
    ring.release()
    assert received == expected
    assert ring.pending_bytes() == 0
    assert ring._head > 20 * ring.capacity


def test_records_are_invisible_until_published(ring):
    assert ring.try_put(b"one") and ring.try_put(b"two")
    assert ring.read() == [] and ring.pending_bytes() == 0
    assert ring.publish() and not ring.publish()
    assert [bytes(r) for r in ring.read()] == [b"one", b"two"]
    assert ring.pending_bytes() == 16


def test_full_ring_refuses_then_accepts_after_release(ring):
    record = bytes(1000)
    count = 0
    while ring.try_put(record):
        count += 1
    assert count == MIN_CAPACITY // 1008
    assert ring.free_space() < 1008 and ring.max_put() < 1000
    ring.publish()
    assert not ring.try_put(record)
    assert len(ring.read()) == count
    assert not ring.try_put(record)  # read is not release
    ring.release()
    assert ring.try_put(record)
    assert ring.max_put() == ring.max_record


def test_record_size_limit(ring):
    assert ring.try_put(bytes(ring.max_record))
    with pytest.raises(ValueError):
        ring.try_put(bytes(ring.max_record), b"x")
    with pytest.raises(ValueError):
        ring.put_many([b"fine", bytes(ring.max_record + 1)])
    ring.publish()
    assert [len(r) for r in ring.read()] == [ring.max_record, 4]


def test_put_many_stops_when_full(ring):
    written = ring.put_many([bytes(100)] * 1000)
    assert written == MIN_CAPACITY // 104
    ring.publish()
    assert len(ring.read()) == written


def test_waiting_producer_is_reported_once_by_release(ring):
    ring.try_put(b"x")
    ring.publish()
    ring.set_producer_waiting()
    assert not ring.release()  # nothing read: no space freed
    ring.read()
    assert ring.release()
    ring.try_put(b"y")
    ring.publish()
    ring.read()
    assert not ring.release()


def test_reset_consumer_discards_unread_records(ring):
    ring.put_many([b"a", b"b", b"c"])
    ring.publish()
    ring.set_producer_waiting()
    replacement = Ring.attach(ring.name)
    assert replacement.pending_bytes() == 24
    assert replacement.reset_consumer()
    assert replacement.read() == [] and ring.pending_bytes() == 0
    ring.try_put(b"d")
    ring.publish()
    assert [bytes(r) for r in replacement.read()] == [b"d"]
    replacement.release()
    ring.set_producer_waiting()
    assert replacement.reset_consumer()  # empty, but the producer sleeps
    replacement.close()


def test_attach_checks_the_layout(names, created):
    region = created(SharedRegion, "ring", Ring.region_size(1 << 17))
    Ring.create(region, 1 << 17)
    assert Ring.attach(names("ring")).capacity == 1 << 17
    junk = created(SharedRegion, "junk", HEADER_SIZE + MIN_CAPACITY)
    with pytest.raises(LayoutError):
        Ring.attach(junk)
    with pytest.raises(ValueError):
        Ring.create(names("small"), 1 << 12)
    with pytest.raises(ValueError):
        Ring.create(names("odd"), 3 * MIN_CAPACITY)


def _produce(name, seed, count, consumer_bell, producer_bell):
    ring = Ring.attach(name)
    for _, payload in _payloads(seed, count, 3000):
        while not ring.try_put(payload):
            ring.publish()
            consumer_bell.ring()
            ring.set_producer_waiting()
            if ring.try_put(payload):
                break
            producer_bell.wait(1.0)
            producer_bell.drain()
    ring.publish()
    consumer_bell.ring()


def test_two_processes_with_doorbells_and_backpressure(ring):
    consumer_bell, producer_bell = Doorbell(), Doorbell()
    count = 20_000
    try:
        pid = fork(_produce, ring.name, 2, count, consumer_bell, producer_bell)
        expected = _payloads(2, count, 3000)
        received = 0
        while received < count:
            consumer_bell.wait(1.0)
            consumer_bell.drain()
            for record in ring.read():
                assert record == next(expected)[1]
                received += 1
            if ring.release():
                producer_bell.ring()
        wait_ok(pid)
        assert ring.read() == []
    finally:
        consumer_bell.close()
        producer_bell.close()


_STAMP = struct.Struct("<QI")  # sequence number, crc32 of the rest


def _produce_forever(name):
    ring = Ring.attach(name)
    rng = random.Random(3)
    seq = 0
    while True:
        body = rng.randbytes(rng.randrange(ring.max_record - _STAMP.size))
        if ring.try_put(_STAMP.pack(seq, zlib.crc32(body)), body):
            seq += 1
            if seq % 3 == 0:
                ring.publish()


def test_producer_killed_mid_stream_leaves_only_whole_records(created):
    ring = created(Ring, "ring", 1 << 18)
    pid = fork(_produce_forever, ring.name)
    seen = 0

    def consume():
        nonlocal seen
        for record in ring.read():
            seq, crc = _STAMP.unpack_from(record)
            assert seq == seen and zlib.crc32(record[_STAMP.size :]) == crc
            seen += 1
        ring.release()
        return seen > 300

    try:
        wait_until(consume)
    finally:
        kill(pid)
    consume()
    assert ring.read() == [] and ring.pending_bytes() == 0


def test_held_bytes_survive_release_and_wraps_until_unheld(ring):
    """A consumer holds part of one record and goes on reading: the producer
    reuses everything else, never the held bytes, and gets them back once
    unheld. Holds may end out of order."""
    rng = random.Random(7)
    held = {}  # position -> (offset, expected bytes)
    for round_ in range(400):
        payload = rng.randbytes(rng.randrange(100, 4000))
        if not ring.try_put(b"hd", payload):
            # full: let the oldest hold go (others stay), then release
            oldest = min(held)
            offset, expected = held.pop(oldest)
            assert bytes(ring.view_at(offset, len(expected))) == expected
            ring.unhold(oldest)
            ring.release()
            continue
        ring.publish()
        for record in ring.read():
            if rng.random() < 0.3:
                offset = ring.data_offset(record[2:])
                held[ring.hold(offset)] = (offset, bytes(record[2:]))
        ring.release()
        for pos, (offset, expected) in held.items():
            assert bytes(ring.view_at(offset, len(expected))) == expected, round_
        if held and rng.random() < 0.2:  # one that is not the oldest, sometimes
            pos = rng.choice(sorted(held))
            held.pop(pos)
            ring.unhold(pos)
    assert ring._head > 3 * ring.capacity
    for pos in list(held):
        ring.unhold(pos)
    ring.release()
    assert ring.pending_bytes() == 0


def test_hold_takes_only_views_of_records_read(ring):
    assert ring.data_offset(memoryview(bytearray(10))) is None  # not in the ring
    assert ring.data_offset(memoryview(b"readonly")) is None
    ring.try_put(b"abcdef")
    ring.publish()
    [record] = ring.read()
    offset = ring.data_offset(record[2:])
    assert bytes(ring.view_at(offset, 4)) == b"cdef"
    ring.hold(offset)
    with pytest.raises(ValueError):
        ring.view_at(ring.capacity - 2, 4)
    # a replacement consumer starts with nothing held
    ring.set_producer_waiting()
    assert ring.reset_consumer()
    assert ring.pending_bytes() == 0
