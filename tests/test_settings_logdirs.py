"""The settings of replicas across log dirs (hostbroker/settings_logdirs.py):
declared once, joined to the broker's settings, bounded, and the one line
refusing a default replication factor the log dirs cannot hold."""

import pytest

from hostbroker import settings_logdirs
from hostbroker.config import SETTINGS_BY_KEY, Config
from hostbroker.errors import ConfigError
from hostbroker.protocol.replica_fields import MAX_REPLICAS
from hostbroker.settings_logdirs import LOGDIRS_SETTINGS, replication_factor_problem


def test_they_are_broker_settings_with_their_defaults():
    config = Config.build()
    assert {key: config[key] for key, *_ in LOGDIRS_SETTINGS} == {
        "default.replication.factor": 1, "log.dir.check.interval.ms": 200,
        "logdirs.state.write.timeout.ms": 200, "logdirs.state.write.fail.ms": 600,
        "logdirs.state.retry.ms": 1000,
        "logdirs.state.max.bytes": 64 << 20, "logdirs.state.max.online": 256,
        "logdirs.writer.grace.ms": 300, "logdirs.create.round.ms": 50,
        "logdirs.online.wait.ms": 20000}
    assert all(key in SETTINGS_BY_KEY for key, *_ in LOGDIRS_SETTINGS)
    assert settings_logdirs.MAX_REPLICAS == MAX_REPLICAS


@pytest.mark.parametrize("item", [
    "default.replication.factor=0", "default.replication.factor=9",
    "log.dir.check.interval.ms=0", "logdirs.state.write.timeout.ms=5",
    "logdirs.writer.grace.ms=-1", "default.replication.factor=two",
])
def test_values_out_of_range_are_refused_naming_the_key(item):
    with pytest.raises(ConfigError) as info:
        Config.build(overrides=[item])
    assert str(info.value).startswith(item.split("=")[0] + ":")


def test_in_range_values_are_taken():
    config = Config.build(overrides=["default.replication.factor=8",
                                     "logdirs.writer.grace.ms=0"])
    assert (config["default.replication.factor"], config["logdirs.writer.grace.ms"]) == (8, 0)


def test_a_default_replication_factor_above_the_log_dirs():
    assert replication_factor_problem(3, 2, cluster=False) == \
        "default.replication.factor 3 needs 3 log.dirs; 2 are configured"
    assert replication_factor_problem(2, 1, cluster=False) == \
        "default.replication.factor 2 needs 2 log.dirs; 1 is configured"
    assert replication_factor_problem(2, 2, cluster=False) is None
    assert replication_factor_problem(3, 1, cluster=True) is None  # ignored in cluster mode


def test_the_log_dir_errors_have_their_wire_codes():
    from hostbroker.errors import ErrorCode

    assert ErrorCode.INVALID_REPLICATION_FACTOR == 30
    assert ErrorCode.LOG_DIR_NOT_FOUND == 31
