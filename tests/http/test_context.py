"""Which listener hb-http's broker client uses (the broker's own, never another host)."""

from __future__ import annotations

import pytest

from hostbroker.config import Config
from hostbroker.workers.http.context import broker_uri


@pytest.mark.parametrize("listeners, uri", [
    ("tcp://127.0.0.1:9092,unix://./data/hb.sock", "unix://./data/hb.sock"),
    ("tcp://127.0.0.1:9092", "tcp://127.0.0.1:9092"),
    ("tcp://0.0.0.0:9092", "tcp://127.0.0.1:9092"),
    ("tcp://:9092", "tcp://127.0.0.1:9092"),
    ("tcp://[::]:9092", "tcp://[::1]:9092"),
    ("tcp://[::1]:9092", "tcp://[::1]:9092"),
    ("tcp://10.0.0.5:9092,tcp://127.0.0.1:9093", "tcp://10.0.0.5:9092"),
])
def test_the_broker_is_reached_on_its_first_unix_listener_else_its_first_tcp(listeners, uri):
    assert broker_uri(Config.build(overrides=[f"listeners={listeners}"])) == uri
