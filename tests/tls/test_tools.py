"""Every ``hostbroker`` command that reaches a broker, run once against a
broker whose only listener is ``ssl://`` and requires a client certificate,
with its ``--command-config`` (docs/tools.md): nothing reaches that broker
without the file's certificate, so a command that left the file out fails
to connect.

One subprocess per command, in an order that gives each what it needs (a
topic, messages, a group's offsets); each is bounded by the helper's timeout.
``load`` (Spark) hands the file to its source: that is checked without a
JVM, and tests/spark/test_ssl.py runs the source over TLS.
"""

from __future__ import annotations

import argparse
import json

import pytest

from hostbroker.cli import build_parser
from tests.integration.cli import hostbroker
from tests.tls.ssl_only import SslOnlyBroker

# What a command says when it could not reach the broker over TLS.
_UNREACHED = ("cannot reach", "TLS", "certificate", "handshake")


@pytest.fixture(scope="module")
def brokers(tmp_path_factory, certs):
    started = []
    try:
        for name in ("source", "destination"):
            started.append(SslOnlyBroker(tmp_path_factory.mktemp(name), certs).start())
        yield started
    finally:
        for broker in started:
            broker.finish()


def _commands(b: str, log_dir: str, moves: str, to: str) -> list[tuple[tuple, bytes | None, int]]:
    """``(arguments, stdin, status)`` of each command, in the order run."""
    t = ("--topic", "tls-tools")
    return [
        (("topics", "create", b, *t, "--partitions", "2"), None, 0),
        (("topics", "list", b), None, 0),
        (("topics", "describe", b, *t), None, 0),
        (("topics", "alter", b, *t, "--config", "retention.ms=3600000"), None, 0),
        (("produce", b, *t, "--sync"), b"one\ntwo\nthree\n", 0),
        (("consume", b, *t, "--from-beginning", "--max-messages", "3"), None, 0),
        (("consume", b, *t, "--group", "g", "--from-beginning", "--max-messages", "3"),
         None, 0),
        (("groups", "list", b), None, 0),
        (("groups", "describe", b, "--group", "g"), None, 0),
        (("groups", "reset-offsets", b, "--group", "g", *t, "--to", "earliest"), None, 0),
        (("whoami", b), None, 0),
        (("acls", "add", b, "--allow-principal", "User:bob", "--operation", "Read", *t),
         None, 0),
        (("acls", "list", b), None, 0),
        (("acls", "remove", b, "--allow-principal", "User:bob", "--operation", "Read", *t),
         None, 0),
        (("quotas", "set", b, "--principal", "User:bob", "--producer-byte-rate", "1000000"),
         None, 0),
        (("quotas", "list", b), None, 0),
        (("quotas", "remove", b, "--principal", "User:bob", "--producer-byte-rate"), None, 0),
        (("logdirs", "list", b), None, 0),
        # answered by the broker: the dir is online already / no dir has that id
        (("logdirs", "online", b, "--log-dir", log_dir), None, None),
        (("logdirs", "forget", b, "--log-dir-id", "99"), None, None),
        (("reassign", "generate", b, "--topics-to-move-json-file", moves,
          "--dir-list", log_dir), None, None),
        (("perf", "produce", b, *t, "--messages", "50", "--size", "10"), None, 0),
        (("perf", "consume", b, *t, "--messages", "50"), None, 0),
        (("perf", "latency", b, *t, "--api", "metadata,produce", "--load", "idle",
          "--seconds", "0.3"), None, 0),
        (("mirror", "--from", b.split("=", 1)[1], "--to", to, "--topics", "tls-tools",
          "--max-messages", "3", "--timeout-ms", "5000"), None, 0),
        (("topics", "delete", b, *t), None, 0),
    ]


def test_every_connecting_command_reaches_an_ssl_only_broker_with_its_command_config(
        brokers, tmp_path):
    source, destination = brokers
    config = source.command_config(tmp_path)
    moves = tmp_path / "moves.json"
    moves.write_text(json.dumps({"version": 1, "topics": [{"topic": "tls-tools"}]}))
    log_dir = source.settings["log.dirs"]
    ran = set()
    for args, stdin, status in _commands(f"--bootstrap={source.ssl}", log_dir, str(moves),
                                         destination.ssl):
        done = hostbroker(*args, "--command-config", config, input=stdin)
        said = done.stderr.decode(errors="replace")
        where = f"hostbroker {' '.join(args)}: status {done.returncode}: {said}"
        assert not any(word in said for word in _UNREACHED), where
        if status is None:  # the broker's own answer, a refusal or not
            assert done.returncode in (0, 1), where
        else:
            assert done.returncode == status, where
        ran.add(" ".join(args))
    with destination.client() as client:  # mirror copied the three messages there
        meta = client.metadata(["tls-tools"])
    assert meta.topics[0].error_code == 0 and any(
        p.log_end_offset > 0 for p in meta.topics[0].partitions)
    missed = {c for c in _connecting_commands() - {"load"}
              if not any(r.startswith(c + " ") for r in ran)}
    assert not missed, missed


def _connecting_commands() -> set[str]:
    """Every command of the parser with --command-config (those that reach a broker)."""
    found = set()

    def walk(parser: argparse.ArgumentParser, path: tuple) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, (*path, name))
        if "--command-config" in {o for a in parser._actions for o in a.option_strings}:
            found.add(" ".join(path))

    walk(build_parser(), ())
    return found


def test_the_commands_that_reach_a_broker_without_bootstrap_take_command_config():
    """mirror reaches its --from and --to brokers; the others of the parser
    without --command-config reach none (serve, top, cpu-latency, dump-log:
    local files and memory; leaders elect, replicas verify: ZooKeeper and the
    brokers' registered listeners)."""
    assert "mirror" in _connecting_commands()


def test_load_hands_its_command_config_to_the_spark_source(certs, tmp_path):
    from hostbroker.client.tls import set_tls_defaults
    from hostbroker.commands.load import _job
    from hostbroker.spark.options import read_options

    set_tls_defaults(certs.client("alice"))
    try:
        job = _job("ssl://127.0.0.1:9093", "t.*", str(tmp_path / "out"), "parquet", "local[1]",
                   None, True, None, ["ssl.key.password=", "fetch.size=1000"])
    finally:
        set_tls_defaults({})
    options = job.source_options()
    assert {k: options[k] for k in certs.client("alice")} == certs.client("alice")
    assert read_options(options, streaming=True).client["ssl.keystore.location"] == \
        certs.keystore("alice")