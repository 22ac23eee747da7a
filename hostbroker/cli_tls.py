"""``--command-config FILE``, the one TLS option of every ``hostbroker``
command that reaches a broker (docs/tools.md): adding it to a parser, and
applying it before the command runs.

A module of its own so that every ``cli_*`` module takes it the same way:
``add_command_config(parser)`` next to each ``--bootstrap``; ``cli.main``
calls :func:`apply_command_config` once with the parsed arguments, before
the command makes any connection, whatever command it is.
"""

from __future__ import annotations

import argparse


def add_command_config(parser: argparse.ArgumentParser) -> None:
    """--command-config FILE: the TLS settings of ssl:// brokers."""
    parser.add_argument("--command-config", metavar="FILE",
                        help="key=value lines of the client's ssl.* settings "
                             "(ssl.truststore.location, ssl.keystore.location, "
                             "ssl.key.password, ssl.endpoint.identification.algorithm) "
                             "for ssl:// brokers")


def apply_command_config(args: argparse.Namespace) -> None:
    """The file of ``args.command_config`` (when the command has the option
    and it was given) made the TLS settings of every ``ssl://`` connection
    of this process, under the command's own client settings. ConfigError
    names a bad file or line."""
    path = getattr(args, "command_config", None)
    if path is None:
        return
    from hostbroker.client.settings import use_command_config

    use_command_config(path)
