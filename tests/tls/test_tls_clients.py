"""The clients over TLS: the producer, consumers, a group and the commands'
``--command-config``.

The tests that need a broker on the default settings share one (``tls_broker``, module
scoped), each with topic and group names of its own; the one whose broker's certificate
names another host keeps its own (``make_tls_broker``)."""

from __future__ import annotations

import argparse
import os
import pathlib
import socket
import threading
import time

import pytest

from hostbroker.client import EARLIEST, ConsumerConnector, Producer, SimpleConsumer
from hostbroker.client.connection import BrokerConnection
from hostbroker.client.settings import read_command_config
from hostbroker.errors import ConfigError
from hostbroker.log.message import encode_message_set
from tests.integration.cli import hostbroker, lines, one_line_error
from tests.integration.wire_helpers import new_topic
from tests.tls.conftest import module_tls_broker


# the module's broker: its tests change nothing broker-wide but their own topics
tls_broker = module_tls_broker()


def _command_config(tmp_path, certs, name="alice", **more) -> str:
    path = tmp_path / f"{name}.properties"
    settings = {**certs.client(name), **more}
    path.write_text("# the client's TLS\n" + "".join(f"{k}={v}\n" for k, v in settings.items()))
    return str(path)


def test_produce_and_consume_commands_with_command_config(tls_broker, certs, tmp_path):
    config = _command_config(tmp_path, certs)
    cli, group = new_topic("cli"), new_topic("g")
    b = ("--bootstrap", tls_broker.ssl, "--command-config", config, "--topic", cli)
    with tls_broker.client() as client:
        client.create_topic(cli, 1)
    produced = hostbroker("produce", *b, "--sync", input=b"one\ntwo\nthree\n")
    assert produced.returncode == 0, produced.stderr
    consumed = hostbroker("consume", *b, "--from-beginning", "--max-messages", "3")
    assert consumed.returncode == 0, consumed.stderr
    assert lines(consumed) == ["one", "two", "three"]
    grouped = hostbroker("consume", *b, "--group", group, "--from-beginning",
                         "--max-messages", "3")
    assert lines(grouped) == ["one", "two", "three"]
    listed = hostbroker("topics", "list", "--bootstrap", tls_broker.ssl,
                        "--command-config", config)
    assert listed.returncode == 0 and cli in lines(listed), listed.stderr


def test_commands_without_a_usable_certificate_fail_in_one_line(tls_broker, certs, tmp_path):
    b = ("--bootstrap", tls_broker.ssl, "--topic", new_topic("refused"))
    # no --command-config: the broker's CA is not the system's
    refused = hostbroker("consume", *b, "--from-beginning", "--timeout-ms", "300")
    assert "certificate" in one_line_error(refused)
    bad = tmp_path / "bad.properties"
    bad.write_text("ssl.truststore.location=/x\nthis line has no equals sign\n")
    said = one_line_error(hostbroker("consume", *b, "--command-config", str(bad)))
    assert "line 2: expected KEY=VALUE" in said
    bad.write_text("batch.size=3\n")
    said = one_line_error(hostbroker("produce", *b, "--command-config", str(bad), input=b""))
    assert "line 1: batch.size: not a setting of this command" in said
    bad.write_text("ssl.endpoint.identification.algorithm=sha1\n")
    assert "must be https or empty" in one_line_error(
        hostbroker("produce", *b, "--command-config", str(bad), input=b""))
    missing = one_line_error(hostbroker("produce", *b, "--command-config",
                                        str(tmp_path / "none"), input=b""))
    assert "--command-config" in missing and "No such file" in missing


def test_read_command_config_skips_comments(tmp_path):
    path = tmp_path / "c.properties"
    path.write_text("# comment\n! also\n\n ssl.key.password = pw \n")
    assert read_command_config(str(path)) == {"ssl.key.password": "pw"}
    path.write_text("ssl.keystore.location\n")
    with pytest.raises(ConfigError, match="line 1"):
        read_command_config(str(path))


def test_producer_consumers_and_group_take_the_ssl_settings(tls_broker, certs):
    tls = certs.client("alice")
    lib = new_topic("lib")
    with tls_broker.client() as client:
        client.create_topic(lib, 2)
    with Producer(tls_broker.ssl, tls) as producer:
        for i in range(10):
            producer.send(lib, f"v{i}".encode(), key=str(i).encode())
    with SimpleConsumer(tls_broker.ssl, tls) as consumer:
        got = [value for p in range(2) for _, _, value in consumer.messages(
            lib, p, consumer.offsets_before(lib, p, EARLIEST)[0], stop_at_end=True)]
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(10))
    config = {**tls, "auto.offset.reset": "earliest", "consumer.timeout.ms": 15000,
              "fetch.wait.max.ms": 50}
    with ConsumerConnector(tls_broker.ssl, config, group_id=f"{lib}-group") as connector:
        (stream,) = connector.create_message_streams({lib: 1})[lib]
        values = [next(stream).value for _ in range(10)]
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(10))
    # without the client's settings the same code is refused
    with pytest.raises(OSError):
        with SimpleConsumer(tls_broker.ssl, {"socket.connection.setup.timeout.ms": 3000}) as c:
            c.offsets_before(lib, 0, EARLIEST)


def test_producer_refuses_a_bad_ssl_setting_before_connecting():
    with pytest.raises(ConfigError, match="ssl.endpoint.identification.algorithm"):
        Producer("ssl://127.0.0.1:1", {"ssl.endpoint.identification.algorithm": "md5"})


def test_plain_and_tls_clients_side_by_side(tls_broker, certs):
    both = new_topic("both")
    with tls_broker.client(tls_broker.tcp) as plain:
        plain.create_topic(both, 1)
        plain.produce(both, 0, encode_message_set([b"plain"]))
    with tls_broker.client(tls_broker.ssl, tls=certs.client("alice")) as secure:
        secure.produce(both, 0, encode_message_set([b"secure"]))
        assert secure.offsets(both, 0)[0] > 0


def test_perf_processes_take_the_command_config(tls_broker, certs, tmp_path):
    """perf's worker processes (spawned) connect with the file's settings too."""
    config = _command_config(tmp_path, certs)
    perf = new_topic("perf")
    with tls_broker.client() as client:
        client.create_topic(perf, 2)
    done = hostbroker("perf", "produce", "--bootstrap", tls_broker.ssl, "--command-config",
                      config, "--topic", perf, "--messages", "200", "--size", "100",
                      "--processes", "2", timeout=120)
    assert done.returncode == 0, done.stderr


def test_property_wins_over_the_command_config(make_tls_broker, certs, tmp_path):
    """A --property ssl.* value wins over the file's, even when it is the
    built-in default (https over a file that turned host checks off).
    (Its own broker: its certificate names another host.)"""
    root = tmp_path / "elsewhere"
    root.mkdir()
    elsewhere = make_tls_broker(root=str(root), **{
        "ssl.keystore.location": certs.keystore("elsewhere")})
    with elsewhere.client() as client:
        client.create_topic("t", 1)
    config = _command_config(tmp_path, certs, **{"ssl.endpoint.identification.algorithm": ""})
    b = ("--bootstrap", elsewhere.ssl, "--command-config", config, "--topic", "t", "--sync")
    taken = hostbroker("produce", *b, input=b"x\n")  # (the file: the host is not checked)
    assert taken.returncode == 0, taken.stderr
    refused = hostbroker("produce", *b, "--property",
                         "ssl.endpoint.identification.algorithm=https", input=b"x\n")
    assert "the broker's certificate is refused" in one_line_error(refused)


def test_resolve_puts_the_given_ssl_settings_over_the_process_defaults():
    from hostbroker.client.settings import TLS_SETTINGS, resolve
    from hostbroker.client.tls import set_tls_defaults, tls_settings

    set_tls_defaults({"ssl.endpoint.identification.algorithm": "",
                      "ssl.truststore.location": "/etc/x.pem"})
    try:
        assert tls_settings(resolve(TLS_SETTINGS))["ssl.truststore.location"] == "/etc/x.pem"
        given = resolve(TLS_SETTINGS, {"ssl.endpoint.identification.algorithm": "https",
                                       "ssl.truststore.location": ""})
        found = tls_settings(given)
        assert found["ssl.endpoint.identification.algorithm"] == "https"
        assert found["ssl.truststore.location"] == ""
    finally:
        set_tls_defaults({})


def test_pem_files_that_are_not_regular_files_are_refused_at_once(tmp_path, certs):
    """A FIFO or a device as keystore or truststore: one line, no wait (client side)."""
    from hostbroker.client.tls import tls_context

    fifo = tmp_path / "fifo.pem"
    os.mkfifo(fifo)
    for bad in (str(fifo), "/dev/zero"):
        for key in ("ssl.truststore.location", "ssl.keystore.location"):
            with pytest.raises(ValueError, match=f"{key}: .*not a regular file"):
                tls_context({**certs.client("alice"), key: bad})


def test_client_handshake_is_bounded_as_a_whole(certs):
    """A peer that trickles its handshake (a byte at a time, each well within
    the timeout) fails the connect within its timeout, not per read."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    stop = threading.Event()

    def trickle() -> None:
        peer, _ = server.accept()
        with peer:
            peer.sendall(b"\x16\x03\x03\x40\x00")  # a record header of 16 KiB to come
            while not stop.wait(0.2):
                try:
                    peer.sendall(b"\x00")
                except OSError:
                    return

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    uri = f"ssl://127.0.0.1:{server.getsockname()[1]}"
    started = time.monotonic()
    try:
        with pytest.raises(TimeoutError, match="no TLS handshake within"):
            BrokerConnection(uri, tls=certs.client("alice"), timeout=1.0).connect()
        assert time.monotonic() - started < 3
    finally:
        stop.set()
        server.close()
        thread.join(5)


def test_the_command_config_example_of_the_docs_parses(tmp_path):
    """docs/tools.md's --command-config example, copied as written."""
    page = (pathlib.Path(__file__).parent.parent.parent / "docs" / "tools.md").read_text()
    block = page.split("```\n# alice.properties", 1)[1].split("```", 1)[0]
    path = tmp_path / "alice.properties"
    path.write_text("# alice.properties" + block)
    assert read_command_config(str(path)) == {
        "ssl.truststore.location": "/etc/hostbroker/ca.pem",
        "ssl.keystore.location": "/home/alice/alice.pem",
        "ssl.key.password": "",
        "ssl.endpoint.identification.algorithm": "https"}


def _subparsers(parser: argparse.ArgumentParser, path=()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _subparsers(sub, (*path, name))


def test_every_command_with_bootstrap_takes_command_config():
    """The next command that reaches a broker cannot miss --command-config."""
    from hostbroker.cli import build_parser

    checked, missing = 0, []
    for path, parser in _subparsers(build_parser()):
        options = {o for a in parser._actions for o in a.option_strings}
        if "--bootstrap" in options:
            checked += 1
            if "--command-config" not in options:
                missing.append(" ".join(path))
    assert checked > 10 and missing == []
