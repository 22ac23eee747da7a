import dataclasses

import pytest

from hostbroker.errors import ConfigError, ErrorCode
from hostbroker.log.config import TOPIC_CONFIG_KEYS, LogConfig


def test_defaults():
    config = LogConfig()
    assert config.segment_bytes == 1073741824
    assert config.retention_ms == 168 * 3600 * 1000
    assert config.retention_bytes == -1
    assert config.flush_messages == 10000
    assert config.flush_ms == 1000
    assert config.max_message_bytes == 1000000


def test_keys_name_every_field_but_the_broker_wide_one():
    fields = sorted(f.name for f in dataclasses.fields(LogConfig))
    assert sorted(TOPIC_CONFIG_KEYS.values()) == [f for f in fields if f != "preallocate_bytes"]
    with pytest.raises(ConfigError, match="unknown topic config key"):
        LogConfig().with_overrides({"preallocate.bytes": "1"})
    with pytest.raises(ConfigError, match="log.preallocate.bytes"):
        LogConfig(preallocate_bytes=-1)


def test_overrides_parse_strings():
    config = LogConfig().with_overrides({"segment.bytes": "64", "retention.ms": "-1",
                                         "retention.bytes": "0", "flush.messages": "1",
                                         "flush.ms": " 5 ", "max.message.bytes": "6"})
    assert config == LogConfig(segment_bytes=64, retention_ms=-1, retention_bytes=0,
                               flush_messages=1, flush_ms=5, max_message_bytes=6)


def test_overrides_keep_the_base():
    base = LogConfig(flush_ms=7)
    assert base.with_overrides({"flush.messages": "3"}) == LogConfig(flush_ms=7, flush_messages=3)
    assert base.with_overrides({}) == base


@pytest.mark.parametrize("key, value", [
    ("segment.bytes", "63"), ("segment.bytes", str(2**31)), ("segment.bytes", "1e6"),
    ("segment.bytes", "-1"), ("retention.ms", "-2"), ("retention.bytes", "-5"),
    ("flush.messages", "0"), ("flush.ms", "0"), ("max.message.bytes", "5"),
    ("max.message.bytes", "abc"), ("flush.ms", ""), ("flush.ms", "1.5"), ("flush.ms", None),
    ("flush.ms", True),
])
def test_bad_values_name_the_key(key, value):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")) as info:
        LogConfig().with_overrides({key: value})
    assert info.value.code == ErrorCode.INVALID_CONFIG


def test_unknown_key():
    with pytest.raises(ConfigError, match="cleanup.policy"):
        LogConfig().with_overrides({"cleanup.policy": "delete"})


def test_constructor_checks_bounds():
    with pytest.raises(ConfigError, match="segment.bytes"):
        LogConfig(segment_bytes=10)


def test_to_overrides_round_trip():
    base = LogConfig(flush_ms=10)
    config = base.with_overrides({"retention.bytes": "1000", "flush.ms": "10"})
    assert config.to_overrides(base) == {"retention.bytes": "1000"}
    assert config.to_overrides() == {"retention.bytes": "1000", "flush.ms": "10"}
    assert base.with_overrides(config.to_overrides(base)) == config
    assert config.overrides_of(["flush.ms"]) == {"flush.ms": "10"}
