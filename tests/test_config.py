import re

import pytest

from hostbroker.config import SETTINGS, Config, markdown_table, parse_listener
from hostbroker.errors import ConfigError


def test_defaults_match_operations_md():
    c = Config.build()
    assert c.listeners == ["tcp://127.0.0.1:9092", "unix://./data/hostbroker.sock"]
    assert c.log_dirs == ["./data/logs"]
    assert c["num.processors"] == 2 and c["num.handlers"] == 2
    assert c["log.segment.bytes"] == 1073741824
    assert c["auto.create.topics.enable"] is True
    assert c["zookeeper.connect"] == ""


def test_file_then_set_later_wins(tmp_path):
    p = tmp_path / "b.toml"
    p.write_text('"broker.id" = 3\n[log]\ndirs = ["/a", "/b"]\n[num]\nhandlers = 4\n')
    c = Config.load(str(p), ["num.handlers=5", "auto.create.topics.enable=false"])
    assert c["broker.id"] == 3
    assert c.log_dirs == ["/a", "/b"]
    assert c["num.handlers"] == 5
    assert c["auto.create.topics.enable"] is False


@pytest.mark.parametrize("item, words", [
    ("no.such.key=1", "no.such.key: unknown configuration key"),
    ("num.handlers=two", "num.handlers: expected an integer"),
    ("num.handlers=0", "num.handlers: must be between 1 and 256"),
    ("auto.create.topics.enable=yes", "auto.create.topics.enable: expected true or false"),
    ("ring.bytes=100000", "ring.bytes: must be a power of two"),
    ("replica.fetch.backoff.ms=0", "replica.fetch.backoff.ms: must be between 10 and 600000"),
    ("log.dirs=,", "log.dirs: must name at least one entry"),
    ("broker.id", "expected KEY=VALUE"),
])
def test_bad_values_name_the_key(item, words):
    with pytest.raises(ConfigError) as e:
        Config.build(overrides=[item])
    assert words in str(e.value)
    assert "\n" not in str(e.value)


def test_bad_toml_type_names_the_key(tmp_path):
    p = tmp_path / "b.toml"
    p.write_text('"num.partitions" = "many"\n')
    with pytest.raises(ConfigError, match="num.partitions: expected an integer"):
        Config.load(str(p))


def test_missing_file_is_one_line():
    with pytest.raises(ConfigError, match="config file /nonexistent.toml"):
        Config.load("/nonexistent.toml")


def test_docs_table_lists_every_setting():
    table = markdown_table()
    for s in SETTINGS:
        assert f"`{s.key}`" in table


def test_docs_configuration_page_is_generated_from_the_declaration():
    import pathlib

    page = (pathlib.Path(__file__).parent.parent / "docs" / "configuration.md").read_text()
    assert markdown_table() in page, "regenerate with: python -m hostbroker.config"


@pytest.mark.parametrize("page, attribute", [
    ("producer.md", "hostbroker.client.producer:PRODUCER_SETTINGS"),
    ("consumer.md", "hostbroker.client.consumer:CONSUMER_SETTINGS"),
    ("consumer.md", "hostbroker.client.group:GROUP_SETTINGS"),
])
def test_docs_client_tables_are_generated_from_the_declarations(page, attribute):
    import importlib
    import pathlib

    module, _, name = attribute.partition(":")
    text = (pathlib.Path(__file__).parent.parent / "docs" / page).read_text()
    table = markdown_table(getattr(importlib.import_module(module), name))
    assert table in text, f"regenerate with: python -m hostbroker.config {attribute}"


@pytest.mark.parametrize("uri, parsed", [
    ("tcp://127.0.0.1:9092", ("tcp", "127.0.0.1", 9092)),
    ("tcp://:0", ("tcp", "", 0)),
    ("tcp://[::1]:65535", ("tcp", "::1", 65535)),
    ("tcp://localhost:9092", ("tcp", "localhost", 9092)),
    ("unix://./data/hb.sock", ("unix", "./data/hb.sock")),
    ("unix:///run/hostbroker/hostbroker.sock", ("unix", "/run/hostbroker/hostbroker.sock")),
])
def test_listeners_parse(uri, parsed):
    assert parse_listener(uri) == parsed
    assert Config.build(overrides=[f"listeners={uri}"]).listeners == [uri]


@pytest.mark.parametrize("uri, words", [
    ("tcp://127.0.0.1:99999", "port 99999 is not between 0 and 65535"),
    ("tcp://127.0.0.1:", "expected tcp://HOST:PORT"),
    ("tcp://127.0.0.1:９０", "expected tcp://HOST:PORT"),  # digits, but not ASCII ones
    ("tcp://fe80::1:80", "an IPv6 host goes in brackets"),
    ("tcp://h/x:80", "is not a host name or address"),
    ("udp://127.0.0.1:9092", "expected tcp://HOST:PORT, ssl://HOST:PORT or unix://PATH"),
    ("unix:/x.sock", "expected tcp://HOST:PORT, ssl://HOST:PORT or unix://PATH"),
    ("unix://a\0b", "the path holds a NUL byte"),
    ("unix:///" + "d/" * 54, "longer than 107 bytes"),
])
def test_bad_listeners_are_configuration_errors(uri, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        parse_listener(uri)
    with pytest.raises(ConfigError) as e:
        Config.build(overrides=[f"listeners=tcp://127.0.0.1:9092,{uri}"])
    assert str(e.value).startswith(f"listeners: {uri}: ") and words in str(e.value)
    assert "\n" not in str(e.value)


def test_heartbeat_defaults_detect_a_hang_in_seconds_and_a_stall_later():
    c = Config.build()
    assert c["worker.heartbeat.timeout.ms"] <= 5000
    assert c["worker.stall.timeout.ms"] > c["admin.lock.timeout.ms"]
