"""The default partitioner: stable_hash is the same everywhere, keys map by modulo,
keyless messages stick to one partition until rotate()."""

import os
import random
import subprocess
import sys

import pytest

from hostbroker.client import DefaultPartitioner, Partitioner, stable_hash

# zlib.crc32 of the bytes: fixed here so a change of definition fails the test.
EXPECTED = {
    b"": 0,
    b"key": 2324736937,
    b"user-42": 2097592435,
    "ключ".encode(): 212833818,
}


@pytest.mark.parametrize("key, value", EXPECTED.items())
def test_stable_hash_fixed_values(key, value):
    assert stable_hash(key) == value


def test_stable_hash_same_in_other_processes():
    """Python's hash() of bytes changes with PYTHONHASHSEED; stable_hash must not."""
    code = ("from hostbroker.client import stable_hash;"
            "print([stable_hash(k) for k in (b'', b'key', b'user-42', 'ключ'.encode())],"
            " hash(b'key'))")
    outputs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True, timeout=60).stdout.split("] ")
        outputs.append(out)
    assert outputs[0][0] == outputs[1][0] == str(list(EXPECTED.values()))[:-1]
    assert outputs[0][1] != outputs[1][1]  # the salted hash differs: the check has teeth


def test_key_goes_to_hash_modulo_partitions():
    partitioner = DefaultPartitioner()
    assert partitioner.partition("t", b"key", 7) == 2324736937 % 7 == 5
    assert partitioner.partition("t", b"user-42", 7) == 1
    assert partitioner.partition("other", b"key", 1) == 0
    keys = [f"k{i}".encode() for i in range(200)]
    chosen = {partitioner.partition("t", key, 4) for key in keys}
    assert chosen == {0, 1, 2, 3}


def test_keyless_is_sticky_until_rotate():
    partitioner = DefaultPartitioner(random.Random(7))
    first = partitioner.partition("t", None, 16)
    assert all(partitioner.partition("t", None, 16) == first for _ in range(50))
    seen = {first}
    for _ in range(200):
        partitioner.rotate("t")
        seen.add(partitioner.partition("t", None, 16))
    assert len(seen) > 8  # rotation draws again
    assert seen <= set(range(16))


def test_keyless_sticky_per_topic_and_within_range():
    partitioner = DefaultPartitioner(random.Random(1))
    a = partitioner.partition("a", None, 1000)
    partitioner.rotate("b")  # another topic's rotation leaves "a" alone
    assert partitioner.partition("a", None, 1000) == a
    # Fewer partitions than the sticky choice (metadata changed): choose again, in range.
    assert 0 <= partitioner.partition("a", None, 1) == 0


def test_seeded_rng_repeats():
    one = DefaultPartitioner(random.Random(3))
    two = DefaultPartitioner(random.Random(3))
    assert one.partition("t", None, 100) == two.partition("t", None, 100)


def test_base_partitioner_must_be_overridden():
    with pytest.raises(NotImplementedError):
        Partitioner().partition("t", b"k", 3)
    Partitioner().rotate("t")  # optional: does nothing
