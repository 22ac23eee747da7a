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
    # (load: below, without a JVM; replicas verify: below, on its connection alone)
    missed = {c for c in CONNECTING - {"load", "replicas verify"}
              if not any(r.startswith(c + " ") or r == c for r in ran)}
    assert not missed, missed


# Every command, classified by hand: whether it opens a connection to a broker.
# A new command fails the test below until it is put in one of the two.
CONNECTING = frozenset({
    "topics create", "topics list", "topics describe", "topics alter", "topics delete",
    "reassign", "replicas verify", "logdirs list", "logdirs online", "logdirs forget",
    "acls add", "acls remove", "acls list", "quotas set", "quotas remove", "quotas list",
    "groups list", "groups describe", "groups reset-offsets", "whoami", "produce", "consume",
    "mirror", "perf produce", "perf consume", "perf latency", "load",
})
# serve, top, cpu-latency, dump-log: local files and memory; leaders elect: ZooKeeper only
NOT_CONNECTING = frozenset({"serve", "top", "cpu-latency", "dump-log", "leaders elect"})


def _commands_of_the_parser() -> dict[str, bool]:
    """Each command of the parser (its path of subcommands): whether it takes --command-config."""
    found = {}

    def walk(parser: argparse.ArgumentParser, path: tuple) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        for action in subs:
            for name, sub in action.choices.items():
                walk(sub, (*path, name))
        if not subs:
            found[" ".join(path)] = "--command-config" in {
                o for a in parser._actions for o in a.option_strings}

    walk(build_parser(), ())
    return found


def test_every_command_that_connects_to_a_broker_takes_command_config():
    commands = _commands_of_the_parser()
    assert set(commands) == CONNECTING | NOT_CONNECTING, \
        set(commands) ^ (CONNECTING | NOT_CONNECTING)
    assert not CONNECTING & NOT_CONNECTING
    assert {c for c in CONNECTING if not commands[c]} == set()


def test_replicas_verify_reaches_an_ssl_listener_with_the_process_certificate(brokers, certs):
    """Its connection to a registered broker, whose listener is ssl://."""
    from hostbroker.client.tls import set_tls_defaults
    from hostbroker.commands.replicas import _Wire
    from hostbroker.protocol import replication as rp

    class Registered:  # a broker registered with its ssl:// listener only
        unix = None

        def uris(self):
            return [brokers[0].ssl]

    set_tls_defaults(certs.client("alice"))
    try:
        wire = _Wire(Registered())
        try:
            answer = wire.ask(rp.MetadataRequestV1(()), rp.MetadataResponseV1)
        finally:
            wire.close()
    finally:
        set_tls_defaults({})
    assert isinstance(answer, rp.MetadataResponseV1)
    set_tls_defaults(certs.client(None))  # no certificate: the broker refuses the handshake
    try:
        with pytest.raises(OSError):
            _Wire(Registered()).ask(rp.MetadataRequestV1(()), rp.MetadataResponseV1)
    finally:
        set_tls_defaults({})


def test_mirror_reaches_each_end_with_that_ends_own_ssl_properties(brokers, certs,
                                                                   make_tls_broker, tmp_path):
    """No --command-config: the ssl-only destination is reached, its admin
    connection included, with the --producer-property ssl.* alone."""
    from hostbroker.log.message import encode_message_set

    source = make_tls_broker()  # (reached over its Unix socket)
    with source.client() as client:
        client.create_topic("per-end", 1)
        client.produce("per-end", 0, encode_message_set([b"a", b"b", b"c"]))
    destination = brokers[1]
    properties = [a for k, v in certs.client("alice").items()
                  for a in ("--producer-property", f"{k}={v}")]
    done = hostbroker("mirror", "--from", source.unix, "--to", destination.ssl,
                      "--topics", "per-end", "--max-messages", "3", "--timeout-ms", "5000",
                      *properties)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    with destination.client() as client:
        fetched = client.fetch("per-end", 0, 0, 100_000)
    assert fetched.log_end_offset > 0


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