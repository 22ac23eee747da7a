"""Client settings: defaults, dotted keys, keyword options, one-line refusals."""

import pytest

from hostbroker.client.settings import parse_properties, resolve
from hostbroker.config import Setting, one_of
from hostbroker.errors import ConfigError

DECLARED = (
    Setting("batch.size", int, 200, "Messages per batch.", lambda v: None if v >= 1 else "must be at least 1"),
    Setting("producer.type", str, "sync", "sync or async.", one_of("sync", "async")),
    Setting("check.crcs", bool, True, "Check CRCs."),
)


def test_defaults_then_config_then_options():
    assert dict(resolve(DECLARED)) == {"batch.size": 200, "producer.type": "sync", "check.crcs": True}
    settings = resolve(DECLARED, {"batch.size": "50", "check.crcs": "false"}, {"batch_size": 7})
    assert settings["batch.size"] == 7
    assert settings["check.crcs"] is False


@pytest.mark.parametrize("config, options, message", [
    ({"batch.sizes": 1}, None, "batch.sizes: unknown client configuration key"),
    (None, {"batchsize": 1}, "batchsize: unknown client option"),
    ({"batch.size": 0}, None, "batch.size: must be at least 1 (got 0)"),
    ({"batch.size": "ten"}, None, "batch.size: expected an integer, got 'ten'"),
    (None, {"producer_type": "asynch"}, "producer.type: must be one of sync, async (got 'asynch')"),
])
def test_refusals_name_the_key(config, options, message):
    with pytest.raises(ConfigError) as info:
        resolve(DECLARED, config, options)
    assert str(info.value) == message


def test_parse_properties():
    assert parse_properties(["a.b=1", " c = x=y"]) == {"a.b": "1", "c": " x=y"}
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        parse_properties(["novalue"])
