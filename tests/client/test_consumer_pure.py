"""What the consumers decide without a broker: sets, filters, assignment, settings."""

import pytest

from hostbroker.client import (CONSUMER_SETTINGS, GROUP_SETTINGS, Blacklist, FetchedSet,
                               RoundRobinAssignor, Whitelist)
from hostbroker.client.settings import resolve
from hostbroker.errors import ConfigError, InvalidMessageError
from hostbroker.log.message import CODEC_SNAPPY, encode_message_set


def test_a_set_ends_before_a_partial_entry():
    data = encode_message_set([b"one", b"two", b"three"])
    whole = len(encode_message_set([b"one", b"two"]))
    fetched = FetchedSet("t", 0, 1000, memoryview(data)[: whole + 5], 5000)
    assert list(fetched) == [(1000, 1013, b"one"), (1013, 1026, b"two")]
    assert (fetched.entries, fetched.next_offset) == (2, 1000 + whole)
    assert (len(fetched), bool(fetched)) == (2, True)
    assert not fetched.at_end
    empty = FetchedSet("t", 0, 1000, data[:5], 5000)
    assert (empty.entries, empty.next_offset, list(empty), bool(empty)) == (0, 1000, [], False)


def test_a_wrapper_counts_one_entry_and_yields_its_messages():
    data = encode_message_set([b"a", b"b", b"c"], codec=CODEC_SNAPPY)
    fetched = FetchedSet("t", 3, 0, data, len(data))
    assert (fetched.entries, len(fetched), fetched.at_end) == (1, 3, True)
    assert list(fetched) == [(0, 0, b"a"), (0, 0, b"b"), (0, len(data), b"c")]
    # len() decoded once; iterating again gives the same messages.
    assert list(fetched) == list(fetched)


def test_a_bad_crc_raises_after_the_good_messages():
    data = bytearray(encode_message_set([b"good", b"bad!"]))
    data[-1] ^= 0xFF
    fetched = FetchedSet("t", 0, 0, data, len(data))
    it = iter(fetched)
    assert next(it)[2] == b"good"
    with pytest.raises(InvalidMessageError, match="CRC"):
        next(it)
    unchecked = FetchedSet("t", 0, 0, data, len(data), check_crcs=False)
    assert len(unchecked) == 2


def test_filters_match_whole_names_and_never_internal_topics():
    white = Whitelist(r"logs\.(web|db)")
    assert [t for t in ["logs.web", "logs.db", "logs.webx", "xlogs.db", "__logs.web"]
            if white.matches(t)] == ["logs.web", "logs.db"]
    black = Blacklist(r"logs\..*")
    assert [t for t in ["logs.web", "metrics", "__consumer_offsets"]
            if black.matches(t)] == ["metrics"]
    assert not Whitelist(".*").matches("__internal")
    with pytest.raises(ConfigError, match=r"topic filter '\[': "):
        Blacklist("[")


def test_round_robin_deals_sorted_partitions_to_the_streams():
    assignment = RoundRobinAssignor().assign({"b": [1, 0], "a": [0]}, 2)
    assert assignment == [[("a", 0), ("b", 1)], [("b", 0)]]
    assert RoundRobinAssignor().assign({"a": [0]}, 3) == [[("a", 0)], [], []]


def test_defaults_differ_where_the_consumers_do():
    simple = resolve(CONSUMER_SETTINGS)
    group = resolve(GROUP_SETTINGS, {"group.id": "g"})
    assert simple["auto.offset.reset"] == "none" and group["auto.offset.reset"] == "latest"
    assert simple["fetch.size"] == group["fetch.size"] == 1024 * 1024
    assert simple["fetch.message.max.bytes"] == 1_000_004
    assert (group["consumer.timeout.ms"], group["auto.commit.enable"]) == (-1, True)
    with pytest.raises(ConfigError, match="broker.list: bad broker URI"):
        resolve(CONSUMER_SETTINGS, {"broker.list": "tcp://ok:1,localhost:9092"})


def test_backoff_doubles_up_to_its_cap_and_resets():
    from hostbroker.client.streams import Backoff

    backoff = Backoff(0.2, 10)
    assert [backoff.next() for _ in range(9)] == [0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 10, 10, 10]
    backoff.reset()
    assert backoff.next() == 0.2
    assert [Backoff(0, 0).next() for _ in range(2)] == [0, 0]
