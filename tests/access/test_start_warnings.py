"""What a broker says at start about what its access control cannot do as
configured: brokers of a cluster seen as User:ANONYMOUS, hb-http without a
Unix listener; nothing with the authorizer off."""

from __future__ import annotations

import os

from hostbroker.config import Config
from hostbroker.security.requests import start_warnings
from tests.integration.broker import Broker, free_port


def _config(**settings) -> Config:
    return Config.build(overrides=[f"{k}={v}" for k, v in settings.items()])


def test_the_warnings_follow_the_configuration():
    base = {"log.dirs": "/nonexistent", "listeners": "unix:///tmp/x.sock,tcp://127.0.0.1:0"}
    assert start_warnings(_config(**base)) == []
    assert start_warnings(_config(**base, **{"authorizer.enable": "true"})) == []
    cluster = start_warnings(_config(**base, **{"authorizer.enable": "true",
                                                "zookeeper.connect": "127.0.0.1:2181"}))
    assert len(cluster) == 1 and "User:ANONYMOUS" in cluster[0] and \
        "ClusterAction" in cluster[0]
    tcp_only = {**base, "listeners": "tcp://127.0.0.1:0", "authorizer.enable": "true"}
    (http,) = start_warnings(_config(**tcp_only))
    assert "hb-http" in http and "unix://" in http
    assert start_warnings(_config(**tcp_only, **{"http.listeners": ""})) == []
    assert start_warnings(_config(**{**tcp_only, "authorizer.enable": "false"})) == []


class TcpOnlyBroker(Broker):
    """A broker with no Unix listener (its start waits on TCP alone)."""

    @property
    def unix(self) -> str:
        return self.tcp


def test_a_broker_says_it_once_at_start(tmp_path):
    os.makedirs(tmp_path / "logs")
    broker = TcpOnlyBroker(tmp_path, authorizer_enable="true",
                    http_listeners=f"http://127.0.0.1:{free_port()}")
    broker.settings["listeners"] = broker.tcp  # (no Unix listener)
    broker._may_move = True
    broker.start()
    try:
        assert broker.log().count("hostbroker: warning: authorizer.enable with hb-http "
                                  "and no unix:// listener") == 1
    finally:
        broker.finish()
