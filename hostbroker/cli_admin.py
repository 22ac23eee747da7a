"""The admin subcommands of ``hostbroker``: ``topics``, ``leaders``, ``reassign``,
``replicas`` and ``logdirs`` (docs/tools.md), and the ``--bootstrap`` /
``--zookeeper`` choice every client command shares.

Like :mod:`hostbroker.cli`, which builds the parser and calls ``add_*`` here
for these subcommands, this module only parses arguments and dispatches:
the work is in :mod:`hostbroker.commands`, imported when a command runs.
"""

from __future__ import annotations

import argparse
import sys

from hostbroker import commands, exits
from hostbroker.cli_tls import add_command_config
from hostbroker.commands import DEFAULT_BOOTSTRAP


def _topics_run(action: str, args: argparse.Namespace, *work_args, **kwargs) -> int:
    """``topics ACTION`` on one broker (--bootstrap), or on every live broker of
    the cluster (--zookeeper): the ``*_cluster`` function of the same action."""
    from hostbroker.commands import topics

    name = {"list": "list_topics"}.get(action, action)
    if args.zookeeper is not None:
        return commands.run(f"topics {action}", getattr(topics, f"{action}_cluster"),
                            *work_args, zookeeper=args.zookeeper, **kwargs)
    return commands.run(f"topics {action}", getattr(topics, name), *work_args,
                        bootstrap=args.bootstrap or DEFAULT_BOOTSTRAP, **kwargs)


def _topics_create(args: argparse.Namespace) -> int:
    if args.replication_factor is not None:
        return _topics_run("create", args, args.topic, args.partitions, args.config or (),
                           replication_factor=args.replication_factor)
    return _topics_run("create", args, args.topic, args.partitions, args.config or ())


def _topics_list(args: argparse.Namespace) -> int:
    return _topics_run("list", args)


def _topics_describe(args: argparse.Namespace) -> int:
    return _topics_run("describe", args, [*args.topics, *(args.topic or ())], as_json=args.json)


def _topics_alter(args: argparse.Namespace) -> int:
    return _topics_run("alter", args, args.topic, args.partitions, args.config or (),
                       args.delete_config or ())


def _topics_delete(args: argparse.Namespace) -> int:
    return _topics_run("delete", args, args.topic)


def add_client_target(parser: argparse.ArgumentParser) -> None:
    """--bootstrap URI, or --zookeeper for cluster mode; both together: one line, status 2."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--bootstrap", metavar="URI",
                       help=f"broker: tcp://HOST:PORT, ssl://HOST:PORT or unix:///PATH "
                            f"(default {DEFAULT_BOOTSTRAP})")
    group.add_argument("--zookeeper", metavar="HOST:PORT[,...][/CHROOT]",
                       help="cluster mode: the brokers registered in this ZooKeeper "
                            "(instead of --bootstrap)")
    add_command_config(parser)


def target(args: argparse.Namespace) -> dict:
    """The keywords of a command taking add_client_target's options."""
    if args.zookeeper is not None:
        return {"zookeeper": args.zookeeper}
    return {"bootstrap": args.bootstrap or DEFAULT_BOOTSTRAP}


def add_topics(sub) -> None:
    topics = sub.add_parser("topics", help="create, list, describe, alter and delete topics")
    actions = topics.add_subparsers(dest="action", required=True)
    create = actions.add_parser(
        "create", help="create a topic",
        description="Create a topic. Topic configs override the broker's log.* defaults: "
                    "segment.bytes, retention.ms, retention.bytes, flush.messages, flush.ms, "
                    "max.message.bytes. With --replication-factor R (and --bootstrap) each "
                    "partition gets R replicas on R distinct log dirs of the broker. With "
                    "--zookeeper the topic gets PARTITIONS partitions on every live broker; "
                    "with --replication-factor too, it is a replicated topic of PARTITIONS "
                    "partitions in all, each on R live brokers (config min.insync.replicas: "
                    "the fewest in-sync replicas acks=-1 needs).")
    add_client_target(create)
    create.add_argument("--topic", required=True)
    create.add_argument("--partitions", type=int, default=1, help="(default 1)")
    create.add_argument("--config", metavar="KEY=VALUE", action="append",
                        help="a topic config (repeatable)")
    create.add_argument("--replication-factor", type=int, metavar="R",
                        help="R replicas of each partition (1 to 8): on R log dirs of the "
                             "broker, or with --zookeeper on R live brokers")
    create.set_defaults(func=_topics_create)
    listing = actions.add_parser("list", help="print every topic name, one a line")
    add_client_target(listing)
    listing.set_defaults(func=_topics_list)
    describe = actions.add_parser(
        "describe", help="partitions of topics: broker, log start/end offsets, log dir, "
                         "replicas and ISR by log dir, error",
        description="Describe the named topics, or every topic. Exit status 1 if a named "
                    "topic does not exist.")
    add_client_target(describe)
    describe.add_argument("topics", nargs="*", metavar="TOPIC")
    describe.add_argument("--topic", action="append",
                          help="a topic to describe (repeatable; the same as naming it)")
    describe.add_argument("--json", action="store_true", help="one JSON document")
    listing.add_argument("--json", action="store_true", help="one JSON document")
    describe.set_defaults(func=_topics_describe)
    alter = actions.add_parser(
        "alter", help="add partitions to a topic, set or delete its configs",
        description="Change a topic on the running broker, checked whole before anything "
                    "changes (a failure part-way is reported; running the same command "
                    "again completes it): grow it to "
                    "--partitions N (partitions only grow; fewer is refused), set topic "
                    "configs (--config KEY=VALUE, the keys of create and "
                    "min.insync.replicas) or delete them (--delete-config KEY: back to the "
                    "broker's log.* default). Configs act without a restart. New partitions "
                    "are seen by producers at their next metadata refresh. With --zookeeper: "
                    "the cluster's topic, through ZooKeeper.")
    add_client_target(alter)
    alter.add_argument("--topic", required=True)
    alter.add_argument("--partitions", type=int, metavar="N",
                       help="the new partition count (not fewer than now)")
    alter.add_argument("--config", metavar="KEY=VALUE", action="append",
                       help="a topic config to set (repeatable)")
    alter.add_argument("--delete-config", metavar="KEY", action="append",
                       help="a topic config to delete (repeatable)")
    alter.set_defaults(func=_topics_alter)
    delete = actions.add_parser("delete", help="delete a topic and its data")
    add_client_target(delete)
    delete.add_argument("--topic", required=True)
    delete.set_defaults(func=_topics_delete)


def _leaders_elect(args: argparse.Namespace) -> int:
    from hostbroker.commands import leaders

    return commands.run("leaders elect", leaders.elect, args.topic or (),
                        zookeeper=args.zookeeper)


def add_leaders(sub) -> None:
    leaders = sub.add_parser("leaders", help="leaders of replicated topics")
    actions = leaders.add_subparsers(dest="action", required=True)
    elect = actions.add_parser(
        "elect", help="move leadership back to the preferred replicas",
        description="Preferred replica election: each partition of the replicated topics "
                    "(or of the --topic ones) whose leader is not its first replica gets that "
                    "replica back as leader, where it is live and in the ISR.")
    elect.add_argument("--zookeeper", metavar="HOST:PORT[,...][/CHROOT]", required=True)
    elect.add_argument("--topic", action="append", help="a topic (repeatable; default: all)")
    elect.set_defaults(func=_leaders_elect)


def _replicas_verify(args: argparse.Namespace) -> int:
    from hostbroker.commands import replicas

    return commands.run("replicas verify", replicas.verify, args.topic or (),
                        zookeeper=args.zookeeper)


def add_replicas(sub) -> None:
    replicas = sub.add_parser("replicas", help="check the replicas of replicated topics")
    actions = replicas.add_subparsers(dest="action", required=True)
    verify = actions.add_parser(
        "verify", help="compare every replica with its leader below the high watermark",
        description="For each partition of the replicated topics (or of the --topic ones), "
                    "read every live replica's copy over the wire and compare its bytes with "
                    "the leader's below the smallest of their high watermarks. Status 1 if "
                    "one differs or cannot be read.")
    verify.add_argument("--zookeeper", metavar="HOST:PORT[,...][/CHROOT]", required=True)
    verify.add_argument("--topic", action="append", help="a topic (repeatable; default: all)")
    add_command_config(verify)  # (the brokers' registered listeners may be ssl://)
    verify.set_defaults(func=_replicas_verify)


def _reassign(args: argparse.Namespace) -> int:
    from hostbroker.commands import reassign

    on_dirs = args.zookeeper is None
    name = f"reassign {args.action}"
    if on_dirs and args.bootstrap is None:
        print(f"hostbroker {name}: needs --zookeeper (brokers) or --bootstrap (the log dirs "
              "of a standalone broker)", file=sys.stderr)
        return exits.EXIT_USAGE
    wrong = "--broker-list" if on_dirs and args.broker_list else \
        "--dir-list" if not on_dirs and args.dir_list else None
    if wrong:
        print(f"hostbroker {name}: {wrong} does not go with "
              f"{'--bootstrap' if on_dirs else '--zookeeper'}", file=sys.stderr)
        return exits.EXIT_USAGE
    if args.action == "generate":
        listed = args.dir_list if on_dirs else args.broker_list
        if not args.topics_to_move_json_file or not listed:
            print(f"hostbroker {name}: needs --topics-to-move-json-file and "
                  f"{'--dir-list' if on_dirs else '--broker-list'}", file=sys.stderr)
            return exits.EXIT_USAGE
        if on_dirs:
            return commands.run(name, reassign.generate_on_dirs, args.topics_to_move_json_file,
                                listed, bootstrap=args.bootstrap,
                                replication_factor=args.replication_factor)
        return commands.run(name, reassign.generate, args.topics_to_move_json_file, listed,
                            zookeeper=args.zookeeper, replication_factor=args.replication_factor)
    if args.replication_factor is not None:
        print(f"hostbroker {name}: --replication-factor is for generate (the "
              "file's replica lists say it)", file=sys.stderr)
        return exits.EXIT_USAGE
    if not args.reassignment_json_file:
        print(f"hostbroker {name}: needs --reassignment-json-file", file=sys.stderr)
        return exits.EXIT_USAGE
    if on_dirs:
        return commands.run(name, getattr(reassign, f"{args.action}_on_dirs"),
                            args.reassignment_json_file, bootstrap=args.bootstrap)
    return commands.run(name, getattr(reassign, args.action),
                        args.reassignment_json_file, zookeeper=args.zookeeper)


def add_reassign(sub) -> None:
    reassign = sub.add_parser(
        "reassign", help="move replicas to other brokers, or to other log dirs of a broker",
        description="generate: propose an assignment of the topics of "
                    "--topics-to-move-json-file over --broker-list (or, with --bootstrap, "
                    "over the log dirs of --dir-list); execute: start the moves of "
                    "--reassignment-json-file; verify: whether they are done (status 1 "
                    "until all are). Kafka's JSON file formats; with --bootstrap the files "
                    "name log dirs by path (\"log_dirs\") where cluster mode names broker ids "
                    "(\"replicas\").")
    reassign.add_argument("action", choices=("generate", "execute", "verify"))
    target = reassign.add_mutually_exclusive_group()
    target.add_argument("--zookeeper", metavar="HOST:PORT[,...][/CHROOT]",
                        help="cluster mode: move replicas between brokers")
    target.add_argument("--bootstrap", metavar="URI",
                        help="a standalone broker: move replicas between its log dirs")
    add_command_config(reassign)
    reassign.add_argument("--topics-to-move-json-file", metavar="FILE")
    reassign.add_argument("--broker-list", metavar="ID,ID,...")
    reassign.add_argument("--dir-list", metavar="PATH,PATH,...",
                          help="generate with --bootstrap: the log dirs to place replicas on")
    reassign.add_argument("--reassignment-json-file", metavar="FILE")
    reassign.add_argument("--replication-factor", metavar="N", type=int,
                          help="generate: propose N replicas a partition (default: as now)")
    reassign.set_defaults(func=_reassign)


def _logdirs(args: argparse.Namespace) -> int:
    from hostbroker.commands import logdirs

    bootstrap = args.bootstrap or DEFAULT_BOOTSTRAP
    if args.action == "list":
        return commands.run("logdirs list", logdirs.list_dirs, as_json=args.json,
                            bootstrap=bootstrap)
    if args.action == "online":
        return commands.run("logdirs online", logdirs.online, args.log_dir,
                            bootstrap=bootstrap)
    return commands.run("logdirs forget", logdirs.forget, args.log_dir_id, bootstrap=bootstrap)


def add_logdirs(sub) -> None:
    logdirs = sub.add_parser(
        "logdirs", help="a standalone broker's log dirs: list, bring one back, forget one",
        description="The log dirs of a standalone broker that keeps replicas across them "
                    "(docs/runbook-disk.md).")
    actions = logdirs.add_subparsers(dest="action", required=True)
    listing = actions.add_parser(
        "list", help="id, path, state, replicas, leaders and under-replicated partitions "
                     "of each log dir")
    listing.add_argument("--json", action="store_true", help="one JSON document")
    online = actions.add_parser(
        "online", help="bring an offline log dir back while the broker runs",
        description="The dir's writer opens it again; its replicas truncate to where they "
                    "left their leaders' logs, catch up and rejoin the ISR. A new, empty disk "
                    "mounted there gets a new log dir id.")
    online.add_argument("--log-dir", metavar="PATH", required=True,
                        help="the log dir, as log.dirs names it")
    forget = actions.add_parser(
        "forget", help="stop waiting for a log dir that is gone for good",
        description="Partitions kept leaderless because this dir may have held the newest "
                    "replication state elect leaders from the replicas there are. Whatever "
                    "only that dir held is given up.")
    forget.add_argument("--log-dir-id", metavar="N", required=True,
                        help="the dir's id, as logdirs list shows it")
    for action in (listing, online, forget):
        action.add_argument("--bootstrap", metavar="URI",
                            help=f"the broker: tcp://HOST:PORT, ssl://HOST:PORT or "
                                 f"unix:///PATH (default {DEFAULT_BOOTSTRAP})")
        add_command_config(action)
        action.set_defaults(func=_logdirs)
