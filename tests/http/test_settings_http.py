"""The http.* settings: declared once (in settings_http.py, gathered by config),
listeners parsed as http://HOST:PORT, empty meaning no HTTP listener."""

from __future__ import annotations

import pytest

from hostbroker.config import SETTINGS_BY_KEY, Config
from hostbroker.errors import ConfigError
from hostbroker.settings_http import HTTP_SETTINGS, parse_http_listener
from hostbroker.workers.plan import BrokerPlan


def test_every_row_is_a_broker_setting_with_its_default():
    for key, _, default, _, _ in HTTP_SETTINGS:
        assert SETTINGS_BY_KEY[key].default == default
    c = Config.build()
    assert c.http_listeners == ["http://127.0.0.1:9644"]
    assert c["http.admin.enable"] is False and c["http.admin.token.file"] == ""


@pytest.mark.parametrize("value, listeners", [
    ("", []),
    (" , ", []),
    ("http://127.0.0.1:0", ["http://127.0.0.1:0"]),
    ("http://[::1]:9644,http://localhost:80", ["http://[::1]:9644", "http://localhost:80"]),
])
def test_listeners(value, listeners):
    c = Config.build(overrides=[f"http.listeners={value}"])
    assert c.http_listeners == listeners
    assert BrokerPlan.from_config(c).http == bool(listeners)


def test_listeners_from_toml_arrays():
    c = Config.build({"http": {"listeners": ["http://127.0.0.1:1", "http://127.0.0.1:2"]}})
    assert c.http_listeners == ["http://127.0.0.1:1", "http://127.0.0.1:2"]


@pytest.mark.parametrize("uri, words", [
    ("tcp://127.0.0.1:9644", "expected http://HOST:PORT"),
    ("https://127.0.0.1:9644", "expected http://HOST:PORT"),
    ("http://127.0.0.1:9644/", "expected http://HOST:PORT"),
    ("http://127.0.0.1", "expected http://HOST:PORT"),
    ("http://127.0.0.1:99999", "port 99999 is not between 0 and 65535"),
    ("http://::1:80", "an IPv6 host goes in brackets: http://[::1]:PORT"),
])
def test_bad_listeners_are_one_line_naming_the_key(uri, words):
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("]", r"\]")):
        parse_http_listener(uri)
    with pytest.raises(ConfigError) as e:
        Config.build(overrides=[f"http.listeners={uri}"])
    assert str(e.value).startswith(f"http.listeners: {uri}: ") and words in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("item, words", [
    ("http.max.connections=0", "must be between 1 and 65536"),
    ("http.max.connections.per.client=0", "must be between 1 and 65536"),
    ("http.allowed.hosts=a.example:80", "not a host name"),
    ("http.request.max.bytes=100", "must be between 1024"),
    ("http.request.timeout.ms=0", "must be between 100"),
    ("http.admin.enable=yes", "expected true or false"),
    ("http.console.page.max=0", "must be between 1"),
])
def test_bounds(item, words):
    with pytest.raises(ConfigError, match=words):
        Config.build(overrides=[item])


def test_the_admin_token_is_not_in_the_plan_s_repr():
    plan = BrokerPlan.from_config(Config.build(overrides=["http.listeners="]))
    plan.http_admin_token = b"0123456789abcdef-secret"
    assert "secret" not in repr(plan) and plan.http_admin_token.endswith(b"secret")
