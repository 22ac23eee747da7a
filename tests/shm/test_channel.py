import hashlib
import os
import random
import struct

import pytest

from hostbroker.shm.channel import FIRST, LAST, MIDDLE, Receiver, Sender
from hostbroker.shm.doorbell import Doorbell
from hostbroker.shm.ring import HEADER_SIZE, MIN_CAPACITY, Ring
from tests.shm.procutil import fork, kill, wait_ok, wait_until


@pytest.fixture
def ring(created):
    return created(Ring, "ring", MIN_CAPACITY)


def _exchange(sender: Sender, receiver: Receiver) -> list[bytes]:
    """Pump and poll in one process until the sender's queue is empty."""
    out = []
    while True:
        empty = sender.pump()
        out += [bytes(m) for m in receiver.poll()]
        receiver.done()
        if empty:
            out += [bytes(m) for m in receiver.poll()]
            receiver.done()
            return out


def test_small_messages_arrive_whole_as_views(ring):
    sender, receiver = Sender(ring), Receiver(ring)
    sender.send(b"head", b"er", b"-body")
    sender.send(b"")
    assert sender.pending() == 2 and sender.queued_bytes() == 11
    assert sender.pump()
    assert sender.pending() == 0 and sender.queued_bytes() == 0
    messages = receiver.poll()
    assert all(isinstance(m, memoryview) for m in messages)
    assert [bytes(m) for m in messages] == [b"header-body", b""]
    assert not receiver.done()


def test_messages_of_every_size_round_trip(ring):
    sender, receiver = Sender(ring), Receiver(ring)
    rng = random.Random(5)
    expected = []
    for size in [0, 1, ring.max_record - 1, ring.max_record, 3 * ring.capacity] + [rng.randrange(200_000) for _ in range(40)]:
        message = rng.randbytes(size)
        cuts = sorted(rng.randrange(size + 1) for _ in range(rng.randrange(5)))
        parts = [message[a:b] for a, b in zip([0] + cuts, cuts + [size])]
        sender.send(*parts)
        expected.append(message)
    assert _exchange(sender, receiver) == expected
    assert receiver.dropped == 0


def _consume(name, bell, sender_bell, digests):
    ring = Ring.attach(name)
    receiver = Receiver(ring)
    got = []
    while len(got) < len(digests):
        bell.wait(2.0)
        bell.drain()
        for message in receiver.poll():
            got.append(hashlib.sha256(message).hexdigest())
        if receiver.done():
            sender_bell.ring()
    assert got == digests
    assert receiver.dropped == 0


def test_message_three_times_the_ring_through_a_live_consumer(ring):
    bell, sender_bell = Doorbell(), Doorbell()
    big = os.urandom(3 * (HEADER_SIZE + ring.capacity))
    messages = [(b"hdr1", big[:1000], big[1000:]), (b"small",), (b"hdr2", big)]
    digests = [hashlib.sha256(b"".join(m)).hexdigest() for m in messages]
    pid = fork(_consume, ring.name, bell, sender_bell, digests)
    try:
        sender = Sender(ring)
        for message in messages:
            sender.send(*message)
        while not sender.pump():
            bell.ring()
            ring.set_producer_waiting()
            sender_bell.wait(1.0)
            sender_bell.drain()
        bell.ring()
        wait_ok(pid)
    finally:
        bell.close()
        sender_bell.close()


def test_a_new_receiver_drops_the_rest_of_a_message_it_missed_the_start_of(ring):
    sender, old = Sender(ring), Receiver(ring)
    sender.send(bytes(3 * ring.capacity))
    sender.pump()
    assert old.poll() == []  # the FIRST fragment and more, assembling
    old.done()
    replacement = Receiver(Ring.attach(ring.name))
    sender.send(b"next")
    assert [bytes(m) for m in _exchange(sender, replacement)] == [b"next"]
    assert replacement.dropped >= 1


def test_a_new_receiver_after_reset_starts_at_a_whole_message(ring):
    sender = Sender(ring)
    sender.send(bytes(3 * ring.capacity))
    sender.pump()
    replacement_ring = Ring.attach(ring.name)
    replacement_ring.reset_consumer()
    receiver = Receiver(replacement_ring)
    sender.send(b"after")
    assert _exchange(sender, receiver) == [b"after"]
    assert receiver.dropped >= 1


def _send_forever(name):
    sender = Sender(Ring.attach(name))
    sender.send(bytes(range(256)) * 40_000)
    while not sender.pump():
        pass
    raise AssertionError("a 10 MB message went through a ring nobody drains")


def test_a_sender_killed_mid_message_never_yields_a_half_message(ring):
    pid = fork(_send_forever, ring.name)
    receiver = Receiver(ring)
    try:
        def some_fragments_assembled():
            assert receiver.poll() == []
            receiver.done()
            return receiver._filled > 2 * ring.capacity

        wait_until(some_fragments_assembled)
    finally:
        kill(pid)
    assert receiver.poll() == []
    receiver.done()
    replacement = Sender(Ring.attach(ring.name))
    replacement.send(b"from the replacement")
    assert _exchange(replacement, receiver) == [b"from the replacement"]
    assert receiver.dropped == 1


def test_inconsistent_fragments_are_dropped(ring):
    receiver = Receiver(ring)
    ring.try_put(bytes([MIDDLE]), b"orphan")
    ring.try_put(bytes([LAST]), b"orphan")
    ring.try_put(struct.pack("<BQ", FIRST, 10), b"abcd")
    ring.try_put(bytes([LAST]), b"efg")  # 7 of 10 bytes
    ring.try_put(struct.pack("<BQ", FIRST, 4), b"abc")
    ring.try_put(bytes([MIDDLE]), b"de")  # past the total
    ring.try_put(struct.pack("<BQ", FIRST, 4), b"ab")
    ring.try_put(bytes([LAST]), b"cd")
    ring.publish()
    messages = receiver.poll()
    assert messages == [bytearray(b"abcd")] and isinstance(messages[0], bytearray)
    assert receiver.dropped == 4
    ring.try_put(b"\x09junk")
    ring.publish()
    with pytest.raises(ValueError):
        receiver.poll()


def test_a_claimed_message_is_filled_in_place_and_delivered_whole(created):
    ring = created(Ring, "ring", MIN_CAPACITY)
    sender, receiver = Sender(ring), Receiver(ring)
    view = sender.claim(b"head", 1000)
    view[:] = bytes(range(250)) * 4
    view = None
    assert sender.pump()
    [message] = receiver.poll()
    assert bytes(message) == b"head" + bytes(range(250)) * 4
    receiver.done()


def test_a_claim_given_back_leaves_nothing_and_later_messages_flow(created):
    ring = created(Ring, "ring", MIN_CAPACITY)
    sender, receiver = Sender(ring), Receiver(ring)
    view = sender.claim(b"h", 500)
    view = None
    sender.unclaim()
    sender.send(b"after")
    assert sender.pump()
    assert [bytes(m) for m in receiver.poll()] == [b"after"]
    receiver.done()


def test_no_claim_behind_queued_messages_past_a_record_or_in_a_full_ring(created):
    ring = created(Ring, "ring", MIN_CAPACITY)
    sender, receiver = Sender(ring), Receiver(ring)
    assert sender.claim(b"", ring.max_record) is None  # needs fragments: never in place
    sender.send(b"x" * (ring.max_record - 1))
    sender.send(b"y" * (ring.max_record - 1))
    sender.send(b"z" * (ring.max_record - 1))
    sender.send(b"w" * (ring.max_record - 1))
    assert not sender.pump()  # the fourth does not fit
    assert sender.claim(b"", 10) is None  # it would overtake the queued one
    receiver.poll()
    receiver.done()
    assert sender.pump()  # the fourth went in: one record in the ring
    sender.send(b"v" * (ring.max_record - 1))
    sender.send(b"u" * (ring.max_record - 1))
    assert sender.pump()  # three records: a fourth of that size does not fit
    assert sender.claim(b"", ring.max_record - 2) is None  # no room now
    assert len(receiver.poll()) == 3
    receiver.done()
    assert sender.claim(b"", ring.max_record - 2) is not None


def test_an_open_claim_is_given_back_before_anything_else_goes_in(created):
    ring = created(Ring, "ring", MIN_CAPACITY)
    sender, receiver = Sender(ring), Receiver(ring)
    given_back = []
    view = sender.claim(b"h", 1000, lambda: given_back.append(bytes(view[:3])))
    view[:3] = b"abc"  # what came so far
    assert sender.claim_open
    sender.send(b"other")
    assert sender.pump()
    assert given_back == [b"abc"] and not sender.claim_open
    assert [bytes(m) for m in receiver.poll()] == [b"other"]  # the claim never shows
    receiver.done()
    view = sender.claim(b"h", 10, lambda: given_back.append(b"second"))
    view = None
    assert sender.try_send(b"now")
    assert given_back[-1] == b"second"
    view = sender.claim(b"h", 10, lambda: given_back.append(b"third"))
    view = None
    assert sender.claim(b"h", 10) is not None  # a new claim takes the ring back first
    assert given_back[-1] == b"third"
    sender.unclaim()
    assert [bytes(m) for m in receiver.poll()] == [b"now"]
    receiver.done()


def test_an_open_claim_commits_with_its_header_restamped(created):
    ring = created(Ring, "ring", MIN_CAPACITY)
    sender, receiver = Sender(ring), Receiver(ring)
    view = sender.claim(b"old!", 6, lambda: pytest.fail("nothing else was sent"))
    view[:3] = b"abc"
    assert not receiver.poll()  # not published while open
    view[3:] = b"def"
    view = None
    sender.commit(b"new!")
    assert not sender.claim_open
    assert [bytes(m) for m in receiver.poll()] == [b"new!abcdef"]
    receiver.done()
    given_back = []
    view = sender.claim(b"h", 10, lambda: given_back.append(1))
    view = None
    sender.unclaim()  # dropped: nothing to give back to
    sender.send(b"x")
    assert sender.pump() and given_back == []
    assert [bytes(m) for m in receiver.poll()] == [b"x"]


def test_try_send_puts_whole_messages_now_or_queues_nothing(created):
    ring = created(Ring, "ring", MIN_CAPACITY)
    sender, receiver = Sender(ring), Receiver(ring)
    assert sender.try_send(b"one", b"-", b"two")
    assert [bytes(m) for m in receiver.poll()] == [b"one-two"]  # published at once
    receiver.done()
    assert not sender.try_send(b"x" * ring.max_record)  # would need fragments
    assert sender.pending() == 0
    for c in b"abc":
        assert sender.try_send(bytes([c]) * (ring.max_record - 1))
    assert not sender.try_send(b"d" * (ring.max_record - 1))  # the ring is full
    assert sender.pending() == 0
    sender.send(b"queued")
    assert not sender.try_send(b"e")  # never ahead of a queued message
    assert [bytes(m)[:1] for m in receiver.poll()] == [b"a", b"b", b"c"]
    receiver.done()
    assert sender.pump()
    assert sender.try_send(b"f")
    assert [bytes(m) for m in receiver.poll()] == [b"queued", b"f"]
    receiver.done()
