"""The ``hostbroker`` command: one entry point, one subcommand per job.

``serve`` runs the broker; ``top`` watches one; ``cpu-latency`` shows or
holds the machine's CPU wake-up latency request. The client commands
(``topics``, ``produce``, ``consume``, ``dump-log``, ``mirror``, ``perf``,
``load``, ``groups``) do their work in ``hostbroker.commands``, one module
each, imported only when the command runs. This module only parses
arguments and dispatches; the admin subcommands (``topics``, ``leaders``,
``reassign``, ``replicas``, ``logdirs``) are parsed in :mod:`hostbroker.cli_admin`,
the access control ones (``acls``, ``quotas``) in :mod:`hostbroker.cli_access`.
"""

from __future__ import annotations

import argparse
import sys

from hostbroker import __version__, commands, exits
from hostbroker.cli_access import add_acls, add_quotas
from hostbroker.cli_admin import (
    add_client_target,
    add_leaders,
    add_logdirs,
    add_reassign,
    add_replicas,
    add_topics,
    target,
)
from hostbroker.cli_tls import add_command_config, apply_command_config
from hostbroker.commands import DEFAULT_BOOTSTRAP
from hostbroker.config import Config, help_text
from hostbroker.errors import ConfigError


class _BadConfig(Exception):
    """Already said on stderr; exit status 2."""


class _Parser(argparse.ArgumentParser):
    """Refuses a bad command line in one line on stderr (docs/spec/operations.md), status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _positive(kind: type):
    """An argparse type: a finite number above zero, or a one-line usage error."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"must be above 0, got {text!r}")
        return value
    return parse


def _config(args: argparse.Namespace) -> Config:
    try:
        return Config.load(args.config, args.set or ())
    except ConfigError as e:
        print(f"hostbroker: {e}", file=sys.stderr)
        raise _BadConfig from None


def _use_command_config(args: argparse.Namespace) -> None:
    """A command's --command-config: its TLS settings for every ssl:// connection it makes."""
    try:
        apply_command_config(args)
    except ConfigError as e:
        print(f"hostbroker: {e}", file=sys.stderr)
        raise _BadConfig from None


def _add_config_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="TOML configuration file")
    parser.add_argument("--set", metavar="KEY=VALUE", action="append",
                        help="set one configuration key (repeatable)")


def _serve(args: argparse.Namespace) -> int:
    try:
        from hostbroker.workers.startup import take_stop_signals

        take_stop_signals()  # before anything can wait: Ctrl-C stops even the config read
        config = _config(args)
        from hostbroker.workers.supervisor import serve
    except KeyboardInterrupt:
        # before the supervisor exists there is nothing to stop: as its own
        # Ctrl-C while starting, one line and status 0
        print("hostbroker: stopped while starting", file=sys.stderr, flush=True)
        return 0
    return serve(config)


def _top(args: argparse.Namespace) -> int:
    config = _config(args)
    from hostbroker import top

    try:
        return top.run(config, as_json=args.json, interval=args.interval,
                       iterations=args.iterations, once=args.once)
    except KeyboardInterrupt:
        return 0


def _cpu_latency(args: argparse.Namespace) -> int:
    from hostbroker.commands import cpulatency

    if args.hold is None:
        return commands.run("cpu-latency", cpulatency.show)
    return commands.run("cpu-latency", cpulatency.hold, args.hold)


def _microseconds(text: str) -> int:
    from hostbroker.cpulatency import MAX_US

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole microseconds, got {text!r}") from None
    if not 0 <= value <= MAX_US:
        raise argparse.ArgumentTypeError(f"must be 0 to {MAX_US}, got {text!r}")
    return value


# Client commands (docs/tools.md). Each hands plain values to hostbroker.commands.


def _groups_run(action: str, args: argparse.Namespace, *work_args, **kwargs) -> int:
    """``groups ACTION`` on a standalone broker's stored offsets (--bootstrap), or on the
    group in ZooKeeper (--zookeeper): the ``*_cluster`` function of the same action."""
    from hostbroker.commands import groups, groups_standalone

    name = action.split("-")[0]  # reset-offsets: reset_cluster, reset_standalone
    if args.zookeeper is not None:
        return commands.run(f"groups {action}", getattr(groups, f"{name}_cluster"),
                            *work_args, zookeeper=args.zookeeper, **kwargs)
    return commands.run(f"groups {action}", getattr(groups_standalone, f"{name}_standalone"),
                        *work_args, bootstrap=args.bootstrap or DEFAULT_BOOTSTRAP, **kwargs)


def _add_whoami(sub) -> None:
    who = sub.add_parser("whoami", help="the principal, groups and host a broker sees for "
                                        "this connection (docs/security.md)")
    who.add_argument("--bootstrap", metavar="URI",
                     help=f"broker: tcp://HOST:PORT, ssl://HOST:PORT or unix:///PATH "
                          f"(default {DEFAULT_BOOTSTRAP})")
    add_command_config(who)
    who.add_argument("--json", action="store_true", help="one JSON object")
    who.set_defaults(func=lambda args: commands.run(
        "whoami", _whoami_work(), as_json=args.json,
        bootstrap=args.bootstrap or DEFAULT_BOOTSTRAP))


def _whoami_work():
    from hostbroker.commands.whoami import whoami

    return whoami


def _add_groups(sub) -> None:
    groups = sub.add_parser(
        "groups", help="consumer groups: list, describe (owners, offsets, lag), reset offsets",
        description="A consumer group's state. With --zookeeper: the group as ZooKeeper holds "
                    "it. With --bootstrap: the group as the standalone broker's group "
                    "coordinator holds it, with the offsets the broker keeps.")
    actions = groups.add_subparsers(dest="action", required=True)
    listing = actions.add_parser(
        "list", help="the groups in ZooKeeper (--zookeeper), or on the broker (--bootstrap): "
                     "with members, or with committed offsets only (marked)")
    describe = actions.add_parser(
        "describe", help="members, then owner, committed offset, log end and lag per partition",
        description="With --zookeeper: the members and every partition of the group's topics "
                    "(or of the --topic ones). With --bootstrap: the topics its members "
                    "subscribe to and those it has committed offsets on (or the --topic "
                    "ones). "
                    "Exit status 1 for a group the broker or ZooKeeper does not know, or if "
                    "a broker cannot be asked.")
    reset = actions.add_parser(
        "reset-offsets", help="set the committed offsets of a topic's partitions",
        description="Set the group's offset of every partition of --topic to each broker's "
                    "earliest or latest offset, or its offset for a time. Refused while the "
                    "group has a live member (in ZooKeeper, or on the broker's group "
                    "coordinator): stop the group's consumers first.")
    for parser in (listing, describe, reset):
        add_client_target(parser)
    for parser in (describe, reset):
        parser.add_argument("--group", required=True, metavar="GROUP", help="the group.id")
    describe.add_argument("--topic", action="append", default=[], metavar="TOPIC",
                          help="a topic of the group (repeatable)")
    describe.add_argument("--json", action="store_true", help="one JSON document")
    listing.add_argument("--json", action="store_true", help="one JSON document")
    reset.add_argument("--topic", required=True, metavar="TOPIC")
    reset.add_argument("--to", required=True, metavar="earliest|latest|TIME",
                       help="TIME: ms since the epoch, or ISO-8601 (UTC unless given)")
    listing.set_defaults(func=lambda args: _groups_run("list", args, as_json=args.json))
    describe.set_defaults(func=lambda args: _groups_run(
        "describe", args, args.group, args.topic, as_json=args.json))
    reset.set_defaults(func=lambda args: _groups_run(
        "reset-offsets", args, args.group, args.topic, args.to))


def _add_properties(parser: argparse.ArgumentParser, what: str = "client") -> None:
    parser.add_argument("--property", metavar="KEY=VALUE", action="append", default=[],
                        help=f"any {what} setting, dotted name (repeatable; the options "
                             "above win over it)")


def _add_producer_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--compression", choices=("none", "gzip", "snappy"),
                        help="compression.codec: one compressed wrapper per batch and "
                             "partition (default none)")
    parser.add_argument("--acks", type=int, choices=(-1, 0, 1),
                        help="request.required.acks: 0 no answer, 1 written, -1 flushed (and, "
                             "for a replicated topic, held by every in-sync replica) "
                             "(default 1)")
    parser.add_argument("--batch-size", type=int, metavar="N",
                        help="batch.size: messages per batch in async mode (default 200)")


def _produce(args: argparse.Namespace) -> int:
    from hostbroker.commands import console

    return commands.run("produce", console.produce, args.topic,
                        key_separator=args.key_separator, compression=args.compression,
                        acks=args.acks, batch_size=args.batch_size, sync=args.sync,
                        properties=args.property, **target(args))


def _add_produce(sub) -> None:
    produce = sub.add_parser(
        "produce", help="console producer: one message per stdin line",
        description="Send each stdin line (without its newline) as one message. With "
                    "--key-separator the text before the first separator is the key: the log "
                    "format has no key field, so the key only chooses the partition (same key, "
                    "same partition) and is not stored; the message is the rest of the line. "
                    "With --zookeeper the partitions are the cluster's sorted (broker, "
                    "partition) pairs, or a replicated topic's partitions, each sent to its "
                    "leader. Exit status 1 if any message was not acknowledged.")
    add_client_target(produce)
    produce.add_argument("--topic", required=True)
    produce.add_argument("--key-separator", metavar="S",
                         help="split each line into key S value (a line without S is not sent)")
    _add_producer_options(produce)
    produce.add_argument("--sync", action="store_true",
                         help="producer.type=sync: wait for each message's acknowledgement")
    _add_properties(produce, "producer")
    produce.set_defaults(func=_produce)


def _consume(args: argparse.Namespace) -> int:
    from hostbroker.commands import console

    return commands.run("consume", console.consume, args.topic,
                        from_beginning=args.from_beginning, group=args.group,
                        max_messages=args.max_messages, timeout_ms=args.timeout_ms,
                        partition=args.partition, offset=args.offset,
                        skip_bad_messages=args.skip_bad_messages,
                        properties=args.property, **target(args))


def _add_consume(sub) -> None:
    consume = sub.add_parser(
        "consume", help="console consumer: one payload per stdout line",
        description="Write each message's payload to stdout followed by a newline. Without "
                    "--group: every partition (or --partition P), from the log end unless "
                    "--from-beginning or --offset; no offsets are kept. With --group: from "
                    "the group's committed offsets (--from-beginning where it has none), and "
                    "what was printed is committed on exit. With --zookeeper: every (broker, "
                    "partition) of the cluster (a replicated topic's partitions: each read "
                    "from its leader), as a member of --group in ZooKeeper, or "
                    "without --group of a group of its own that keeps nothing. Stops after "
                    "--max-messages, after --timeout-ms without a message, or on "
                    "Ctrl-C/SIGTERM (status 0).")
    add_client_target(consume)
    consume.add_argument("--topic", required=True)
    consume.add_argument("--from-beginning", action="store_true",
                         help="start at the log start (with --group: where the group has "
                              "no offset)")
    consume.add_argument("--group", metavar="G", help="consumer group (group.id)")
    consume.add_argument("--max-messages", type=int, metavar="N", help="stop after N messages")
    consume.add_argument("--timeout-ms", type=int, metavar="MS",
                         help="stop after MS milliseconds without a message")
    consume.add_argument("--partition", type=int, metavar="P", help="only this partition")
    consume.add_argument("--offset", type=int, metavar="O",
                         help="with --partition: start at this offset (an entry boundary)")
    consume.add_argument("--skip-bad-messages", action="store_true",
                         help="skip an entry that cannot be read (CRC, a compressed wrapper "
                              "that does not decompress or inflates past "
                              "fetch.message.max.bytes) with a warning, instead of stopping")
    _add_properties(consume, "consumer")
    consume.set_defaults(func=_consume)


def _perf_produce(args: argparse.Namespace) -> int:
    from hostbroker.commands import perf

    return commands.run("perf produce", perf.produce, args.topic, messages=args.messages,
                        size=args.size, batch_size=args.batch_size, acks=args.acks,
                        compression=args.compression, processes=args.processes,
                        producer_type=args.producer_type, properties=args.property,
                        as_json=args.json, **target(args))


def _perf_consume(args: argparse.Namespace) -> int:
    from hostbroker.commands import perf

    return commands.run("perf consume", perf.consume, args.topic, messages=args.messages,
                        fetch_size=args.fetch_size, processes=args.processes,
                        timeout_ms=args.timeout_ms, properties=args.property,
                        as_json=args.json, **target(args))


def _perf_latency(args: argparse.Namespace) -> int:
    from hostbroker.commands import perf_latency

    return commands.run("perf latency", perf_latency.latency, args.topic, apis=args.api,
                        loads=args.load, seconds=args.seconds, clients=args.clients,
                        as_json=args.json, bootstrap=args.bootstrap or DEFAULT_BOOTSTRAP)


def _add_perf(sub) -> None:
    perf = sub.add_parser("perf", help="producer and consumer throughput and latency tests")
    tests = perf.add_subparsers(dest="test", required=True)
    produce = tests.add_parser(
        "produce", help="send N messages of SIZE bytes; print records/s, MB/s, latency",
        description="Send --messages messages of --size bytes (random letters) from "
                    "--processes processes, each with its own producer. Prints records/s, "
                    "MB/s (MB = 10^6 bytes of payload), elapsed time and the p50/p99/p99.9/max "
                    "latency of PRODUCE requests (send to acknowledgement). Exit status 1 if "
                    "any message failed.")
    add_client_target(produce)
    produce.add_argument("--topic", required=True)
    produce.add_argument("--messages", type=int, required=True, metavar="N")
    produce.add_argument("--size", type=int, required=True, metavar="BYTES",
                         help="payload bytes per message")
    _add_producer_options(produce)
    produce.add_argument("--processes", type=int, default=1, metavar="P",
                         help="producer processes (default 1)")
    produce.add_argument("--producer-type", choices=("async", "sync"), default="async",
                         help="(default async)")
    produce.add_argument("--json", action="store_true", help="one JSON document")
    _add_properties(produce, "producer")
    produce.set_defaults(func=_perf_produce)

    consume = tests.add_parser(
        "consume", help="read N messages from the log start; print records/s, MB/s, latency",
        description="Read --messages messages from the log start of the topic's partitions, "
                    "dealt out over --processes processes. Prints records/s, MB/s (MB = 10^6 "
                    "bytes of payload), elapsed time and FETCH round-trip percentiles. Exit "
                    "status 1 if the topic ran out of messages first.")
    add_client_target(consume)
    consume.add_argument("--topic", required=True)
    consume.add_argument("--messages", type=int, required=True, metavar="N")
    consume.add_argument("--fetch-size", type=int, metavar="BYTES",
                         help="fetch.size: bytes asked of a partition per fetch (default 1 MiB)")
    consume.add_argument("--processes", type=int, default=1, metavar="P",
                         help="consumer processes, at most one per partition (default 1)")
    consume.add_argument("--timeout-ms", type=int, default=10000, metavar="MS",
                         help="give up after MS ms without new messages (default 10000)")
    consume.add_argument("--json", action="store_true", help="one JSON document")
    _add_properties(consume, "consumer")
    consume.set_defaults(func=_perf_consume)

    latency = tests.add_parser(
        "latency", help="per-API request latency percentiles at idle, moderate and full load",
        description="Time METADATA, PRODUCE (one 100-byte message, acks=1), FETCH (1 KiB "
                    "from the log start) and OFFSETS requests, and on request OFFSET_COMMIT, "
                    "OFFSET_FETCH and HEARTBEAT (group hostbroker-perf), against one broker: "
                    "at idle (one request at a time), full load (--clients connections in a closed "
                    "loop) and moderate load (the same connections paced at half the "
                    "requests/s full load reached). Prints requests/s and p50/p99/p99.9/max "
                    "latency in ms per API and load. Writes messages to --topic.")
    latency.add_argument("--bootstrap", metavar="URI",
                         help=f"broker: tcp://HOST:PORT, ssl://HOST:PORT or unix:///PATH "
                              f"(default {DEFAULT_BOOTSTRAP})")
    add_command_config(latency)
    latency.add_argument("--topic", required=True)
    latency.add_argument("--api", metavar="LIST",
                         help="comma-separated: metadata,produce,fetch,offsets,offset_commit,"
                              "offset_fetch,heartbeat, or all (default the first four)")
    latency.add_argument("--load", metavar="LIST",
                         help="comma-separated: idle,moderate,full, or all (default all)")
    latency.add_argument("--seconds", type=float, default=2.0, metavar="N",
                         help="seconds per API and load (default 2)")
    latency.add_argument("--clients", type=int, default=4, metavar="C",
                         help="connections at moderate and full load (default 4)")
    latency.add_argument("--json", action="store_true", help="one JSON document")
    latency.set_defaults(func=_perf_latency)


def _mirror(args: argparse.Namespace) -> int:
    from hostbroker.commands import mirror

    return commands.run("mirror", mirror.mirror, source=args.source,
                        destination=args.destination, source_zookeeper=args.from_zookeeper,
                        destination_zookeeper=args.to_zookeeper, topics_regex=args.topics,
                        group=args.group, num_streams=args.num_streams,
                        max_messages=args.max_messages, timeout_ms=args.timeout_ms,
                        commit_interval_ms=args.commit_interval_ms,
                        consumer_properties=args.consumer_property,
                        producer_properties=args.producer_property)


def _add_mirror(sub) -> None:
    mirror = sub.add_parser(
        "mirror", help="copy topics from one broker or cluster to another",
        description="Consume every topic matching --topics on the source (a group's consumer) "
                    "and produce it to the destination, partition for partition (the i-th "
                    "partition, or a cluster's i-th sorted (broker, partition) pair, to the "
                    "i-th; i % count where the destination has fewer), creating missing "
                    "topics there with at least the source's partition count. Each end is a "
                    "broker (--from, --to) or a cluster by ZooKeeper (--from-zookeeper, "
                    "--to-zookeeper); mirrors of one --group on a source cluster split its "
                    "partitions. Source offsets are committed only after the producer "
                    "flushed what was consumed, so a restart loses nothing (some messages "
                    "may be copied twice). Stops after --max-messages, after --timeout-ms "
                    "without a message, or on Ctrl-C/SIGTERM (status 0).")
    source = mirror.add_mutually_exclusive_group(required=True)
    source.add_argument("--from", dest="source", metavar="URI",
                        help="source broker: tcp://HOST:PORT, ssl://HOST:PORT or unix:///PATH")
    source.add_argument("--from-zookeeper", metavar="HOST:PORT[,...][/CHROOT]",
                        help="source cluster: the brokers registered in this ZooKeeper")
    destination = mirror.add_mutually_exclusive_group(required=True)
    destination.add_argument("--to", dest="destination", metavar="URI",
                             help="destination broker")
    destination.add_argument("--to-zookeeper", metavar="HOST:PORT[,...][/CHROOT]",
                             help="destination cluster: the brokers registered in this "
                                  "ZooKeeper")
    mirror.add_argument("--topics", metavar="REGEX", required=True,
                        help="whitelist: a regular expression matching whole topic names")
    mirror.add_argument("--group", default="hostbroker-mirror",
                        help="the source consumer group (default hostbroker-mirror)")
    mirror.add_argument("--num-streams", type=int, default=1, metavar="N",
                        help="consumer streams, one thread each (default 1)")
    mirror.add_argument("--max-messages", type=int, metavar="N", help="stop after N messages")
    mirror.add_argument("--timeout-ms", type=int, metavar="MS",
                        help="stop after MS milliseconds without a message")
    mirror.add_argument("--commit-interval-ms", type=int, default=5000, metavar="MS",
                        help="flush and commit this often (default 5000)")
    mirror.add_argument("--consumer-property", metavar="KEY=VALUE", action="append", default=[],
                        help="a source consumer setting (repeatable)")
    mirror.add_argument("--producer-property", metavar="KEY=VALUE", action="append", default=[],
                        help="a destination producer setting (repeatable)")
    # both ends' ssl:// brokers; an end's own ssl.* --consumer/--producer-property wins
    add_command_config(mirror)
    mirror.set_defaults(func=_mirror)


def _load(args: argparse.Namespace) -> int:
    from hostbroker.commands import load

    return commands.run("load", load.load, topics_regex=args.topics, path=args.to,
                        fmt=args.format, master=args.master, from_time=args.from_time,
                        fail_on_data_loss=args.fail_on_data_loss,
                        max_bytes_per_trigger=args.max_bytes_per_trigger,
                        properties=args.property, quiet=args.quiet,
                        bootstrap=args.bootstrap or DEFAULT_BOOTSTRAP, zookeeper=args.zookeeper)


def _add_load(sub) -> None:
    load = sub.add_parser(
        "load", help="copy topics into Parquet/ORC/JSON files on Spark, exactly once",
        description="Copy the messages of every topic matching --topics that are not yet in "
                    "--to into files there (one directory per topic), with a Spark streaming "
                    "query whose checkpoint lives in TO/_checkpoint: a run killed at any "
                    "moment and run again leaves each message in the output once, and the "
                    "next run loads only what arrived since. Read the output through Spark "
                    "(spark.read.parquet(TO)). Progress on stderr, a summary on stdout. "
                    "See docs/spark.md.")
    add_client_target(load)
    load.add_argument("--topics", metavar="REGEX", required=True,
                      help="a regular expression matching whole topic names")
    load.add_argument("--to", metavar="PATH", required=True,
                      help="the output directory (new, empty, or a load's to resume)")
    load.add_argument("--format", default="parquet", choices=("parquet", "orc", "json"),
                      help="file format (default parquet)")
    load.add_argument("--master", default="local[*]",
                      help="Spark master (default local[*])")
    load.add_argument("--from-time", metavar="T",
                      help="start at this time (ms since the epoch, or ISO-8601; UTC unless "
                           "given) instead of the log start; needs a new --to")
    load.add_argument("--fail-on-data-loss", action=argparse.BooleanOptionalAction, default=True,
                      help="stop when messages to load were removed by retention first "
                           "(default: stop)")
    load.add_argument("--max-bytes-per-trigger", type=_positive(int), metavar="BYTES",
                      help="at most this many log bytes per micro-batch (default: no limit)")
    load.add_argument("--quiet", action="store_true", help="no progress lines")
    _add_properties(load, "consumer")
    load.set_defaults(func=_load)


def _dump_log(args: argparse.Namespace) -> int:
    from hostbroker.commands import dumplog

    return commands.run("dump-log", dumplog.dump, args.paths, deep=args.deep,
                        print_payloads=args.print_payloads, summary_only=args.summary,
                        as_json=args.json, max_message_bytes=args.max_message_bytes)


def _add_dump_log(sub) -> None:
    dump = sub.add_parser(
        "dump-log", help="print the entries of segment files and where they stop being valid",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Read segment files (or every segment of a partition dir) without a "
                    "broker.\nEach entry: offset, position, length, magic, codec, CRC, valid; "
                    "then a summary:\nthe byte where the file stops being valid and why.",
        epilog="exit status: 0 every file valid to its end, 3 a file is not (or, with "
               "--deep,\na compressed wrapper does not open), 2 a path cannot be read")
    dump.add_argument("paths", nargs="+", metavar="PATH", help="segment file or partition dir")
    dump.add_argument("--deep", action="store_true",
                      help="open compressed wrappers and show the messages inside")
    dump.add_argument("--print-payloads", action="store_true",
                      help="show payloads (as Python bytes literals, without b'')")
    dump.add_argument("--summary", action="store_true", help="only the summary of each file")
    dump.add_argument("--json", action="store_true", help="one JSON object a line")
    dump.add_argument("--max-message-bytes", type=int, default=1000000,
                      help="longest valid entry (the topic's max.message.bytes; default 1000000)")
    dump.set_defaults(func=_dump_log)


def _add_serve(sub) -> None:
    serve = sub.add_parser(
        "serve", help="run the broker in the foreground",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run the broker until SIGTERM/SIGINT (graceful: answers in-flight "
                    "requests, flushes, writes the clean-shutdown marker, exits 0).",
        epilog="configuration keys (TOML file or --set KEY=VALUE, later wins):\n" + help_text())
    _add_config_options(serve)
    serve.set_defaults(func=_serve)


def _add_top(sub) -> None:
    top = sub.add_parser("top", help="live view of a running broker's processes and counters",
                         description="Find the broker by the same configuration serve takes.")
    _add_config_options(top)
    top.add_argument("--json", action="store_true", help="one JSON document per reading")
    top.add_argument("--interval", type=_positive(float), default=1.0,
                     help="seconds between readings")
    top.add_argument("--iterations", type=_positive(int), default=None,
                     help="stop after this many readings (default: run until interrupted)")
    top.add_argument("--once", action="store_true",
                     help="one screen (its rates over --interval), as plain lines, then stop")
    top.set_defaults(func=_top)


def _add_cpu_latency(sub) -> None:
    cpu = sub.add_parser(
        "cpu-latency", help="the CPU wake-up latency target in force, or hold one (root)",
        description="Print the kernel's CPU wake-up latency target (PM QoS, "
                    "/dev/cpu_dma_latency) in microseconds, or with --hold keep a request "
                    "until SIGTERM/Ctrl-C, as the broker's cpu.wakeup.latency.us does.")
    cpu.add_argument("--hold", type=_microseconds, metavar="US",
                     help="hold a request of US microseconds (0: idle CPUs poll)")
    cpu.set_defaults(func=_cpu_latency)


# Each command and what adds its parser, in the order --help lists them.
_COMMANDS = (
    ("serve", _add_serve), ("top", _add_top), ("cpu-latency", _add_cpu_latency),
    ("topics", add_topics), ("leaders", add_leaders), ("reassign", add_reassign),
    ("replicas", add_replicas), ("logdirs", add_logdirs), ("acls", add_acls),
    ("quotas", add_quotas), ("groups", _add_groups), ("whoami", _add_whoami),
    ("produce", _add_produce), ("consume", _add_consume), ("dump-log", _add_dump_log),
    ("mirror", _add_mirror), ("perf", _add_perf), ("load", _add_load),
)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: every command's, or with ``command`` (one of
    them) only that one's, as :func:`main` parses a command line: a tenth of the
    work (argparse looks up a translation for each of its messages) for the
    same result, since a command's options and help do not depend on the others."""
    parser = _Parser(
        prog="hostbroker", description="A persistent, partitioned, replayable log broker.")
    parser.add_argument("--version", action="version", version=f"hostbroker {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    adders = [add for name, add in _COMMANDS if name == command]
    for add in adders or [add for _, add in _COMMANDS]:
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit status. Ctrl-C that no command took is status 130,
    without a traceback."""
    try:
        words = sys.argv[1:] if argv is None else argv
        parser = build_parser(words[0] if words else None)
        args = parser.parse_args(words)
        _use_command_config(args)
        return args.func(args)
    except _BadConfig:
        return 2
    except KeyboardInterrupt:
        return exits.EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
