"""The access control subcommands of ``hostbroker``: ``acls`` and ``quotas``
(docs/tools.md, docs/security.md).

As :mod:`hostbroker.cli_admin`, this module only parses arguments and
dispatches (:mod:`hostbroker.commands.acls`, :mod:`hostbroker.commands.quotas`,
imported when a command runs). Where the ACLs and quotas are changed is the
command's ``backend``: ``--bootstrap`` (a standalone broker) or
``--zookeeper`` (a cluster: Kafka's layout in ZooKeeper).
"""

from __future__ import annotations

import argparse

from hostbroker import commands
from hostbroker.cli_tls import add_command_config


def _where(args: argparse.Namespace) -> dict:
    # (no default: commands.acls.admin_bootstrap)
    return {"bootstrap": args.bootstrap, "zookeeper": args.zookeeper}


def _acls(args: argparse.Namespace) -> int:
    from hostbroker.commands import acls

    def work(**where) -> int:
        spec = acls.spec(topics=args.topic, groups=args.group, cluster=args.cluster,
                         principals=args.principal, allow_principals=args.allow_principal,
                         deny_principals=args.deny_principal, allow_hosts=args.allow_host,
                         deny_hosts=args.deny_host, operations=args.operation,
                         pattern=args.resource_pattern_type, action=args.action)
        run = {"add": acls.add, "remove": acls.remove, "list": acls.list_acls}[args.action]
        return run(spec, as_json=args.json, **where)

    return commands.run(f"acls {args.action}", work, **_where(args))


def _quotas(args: argparse.Namespace) -> int:
    from hostbroker.commands import quotas

    def work(**where) -> int:
        names = quotas.entities(args.principal, args.default, args.action)
        if args.action == "list":
            return quotas.list_quotas(names, as_json=args.json, **where)
        changes = quotas.rates(args.action, args.producer_byte_rate, args.consumer_byte_rate,
                               args.request_rate)
        return quotas.change(args.action, names, changes, **where)

    return commands.run(f"quotas {args.action}", work, **_where(args))


def _rate(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {text!r}")
    return value


def _bootstrap(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--bootstrap", metavar="URI",
                       help="a standalone broker: unix:///PATH (its own user there is a "
                            "super user), tcp://HOST:PORT or ssl://HOST:PORT")
    where.add_argument("--zookeeper", metavar="HOST:PORT[,...][/CHROOT]",
                       help="a cluster: its ZooKeeper, where every broker reads the ACLs "
                            "and quotas (docs/security.md, \"In a cluster\")")
    add_command_config(parser)


def add_acls(sub) -> None:
    acls = sub.add_parser(
        "acls", help="add, remove and list ACLs (Kafka's kafka-acls.sh shape)",
        description="A standalone broker's ACLs (docs/security.md). Each --allow-principal "
                    "(from each --allow-host, default *) and --deny-principal (from each "
                    "--deny-host) is allowed or denied each --operation on each resource. "
                    "Operations: Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                    "All. remove without principals removes every ACL of the resources "
                    "(of the operations given). list without resources lists every ACL.")
    actions = acls.add_subparsers(dest="action", required=True)
    for action, text in (("add", "add ACLs"), ("remove", "remove ACLs"),
                         ("list", "list ACLs")):
        parser = actions.add_parser(action, help=text)
        _bootstrap(parser)
        parser.add_argument("--allow-principal", action="append", default=[], metavar="P",
                            help="TYPE:NAME allowed (repeatable), e.g. User:alice")
        parser.add_argument("--deny-principal", action="append", default=[], metavar="P",
                            help="TYPE:NAME denied (repeatable)")
        parser.add_argument("--allow-host", action="append", default=[], metavar="H",
                            help="a host the allowed principals connect from: an IP address, "
                                 "localhost (the Unix socket) or * (repeatable; default *)")
        parser.add_argument("--deny-host", action="append", default=[], metavar="H",
                            help="a host the denied principals connect from (repeatable)")
        parser.add_argument("--principal", action="append", default=[], metavar="P",
                            help=argparse.SUPPRESS if action == "add" else
                            "a principal whose ACLs of either permission (repeatable)")
        parser.add_argument("--operation", action="append", default=[], metavar="OP",
                            help="an operation (repeatable)")
        parser.add_argument("--topic", action="append", default=[], metavar="T",
                            help="a topic (repeatable; a prefix with --resource-pattern-type "
                                 "prefixed, * for every topic)")
        parser.add_argument("--group", action="append", default=[], metavar="G",
                            help="a consumer group (repeatable)")
        parser.add_argument("--cluster", action="store_true", help="the cluster resource")
        parser.add_argument("--resource-pattern-type", metavar="TYPE",
                            choices=(("literal", "prefixed") if action == "add" else
                                     ("literal", "prefixed", "any", "match")),
                            help="literal or prefixed names"
                                 + ("" if action == "add" else
                                    "; any or match (every ACL that applies to the named "
                                    "resource) to select")
                                 + f" (default {'any' if action == 'list' else 'literal'})")
        parser.add_argument("--json", action="store_true", help="one JSON document")
        parser.set_defaults(func=_acls)


def add_quotas(sub) -> None:
    quotas = sub.add_parser(
        "quotas", help="set, remove and list quotas per principal",
        description="A standalone broker's quotas (docs/security.md): byte rates of "
                    "produce and fetch answers and a request rate per principal, and a "
                    "default for every principal without its own.")
    actions = quotas.add_subparsers(dest="action", required=True)
    for action, text in (("set", "set rates"), ("remove", "remove rates (all without any "
                                                           "named)"),
                         ("list", "list rates")):
        parser = actions.add_parser(action, help=text)
        _bootstrap(parser)
        parser.add_argument("--principal", action="append", default=[], metavar="P",
                            help="TYPE:NAME (repeatable)")
        parser.add_argument("--default", action="store_true",
                            help="the default of every principal without its own")
        for option, unit in (("--producer-byte-rate", "bytes/s"),
                             ("--consumer-byte-rate", "bytes/s"),
                             ("--request-rate", "requests/s")):
            if action == "set":
                parser.add_argument(option, type=_rate, metavar="N", help=unit)
            elif action == "remove":
                parser.add_argument(option, action="store_true", help="remove this rate")
        parser.set_defaults(func=_quotas, json=False, producer_byte_rate=None,
                            consumer_byte_rate=None, request_rate=None)
        if action == "list":
            parser.add_argument("--json", action="store_true", help="one JSON document")
