"""The ``hostbroker`` command: one entry point, one subcommand per job.

``serve`` runs the broker; ``top`` watches one. Each command's work lives in
its own module; this one only parses arguments and dispatches.
"""

from __future__ import annotations

import argparse
import sys

from hostbroker import __version__
from hostbroker.config import Config, help_text
from hostbroker.errors import ConfigError


class _BadConfig(Exception):
    pass


def _config(args: argparse.Namespace) -> Config:
    try:
        return Config.load(args.config, args.set or ())
    except ConfigError as e:
        print(f"hostbroker: {e}", file=sys.stderr)
        raise _BadConfig from None


def _add_config_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="TOML configuration file")
    parser.add_argument("--set", metavar="KEY=VALUE", action="append",
                        help="set one configuration key (repeatable)")


def _serve(args: argparse.Namespace) -> int:
    config = _config(args)
    from hostbroker.workers.supervisor import serve

    return serve(config)


def _top(args: argparse.Namespace) -> int:
    config = _config(args)
    from hostbroker import top

    try:
        return top.run(config, as_json=args.json, interval=args.interval,
                       iterations=args.iterations)
    except KeyboardInterrupt:
        return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hostbroker", description="A persistent, partitioned, replayable log broker.")
    parser.add_argument("--version", action="version", version=f"hostbroker {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve", help="run the broker in the foreground",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run the broker until SIGTERM/SIGINT (graceful: answers in-flight "
                    "requests, flushes, writes the clean-shutdown marker, exits 0).",
        epilog="configuration keys (TOML file or --set KEY=VALUE, later wins):\n" + help_text())
    _add_config_options(serve)
    serve.set_defaults(func=_serve)

    top = sub.add_parser("top", help="live view of a running broker's processes and counters",
                         description="Find the broker by the same configuration serve takes.")
    _add_config_options(top)
    top.add_argument("--json", action="store_true", help="one JSON document per reading")
    top.add_argument("--interval", type=float, default=1.0, help="seconds between readings")
    top.add_argument("--iterations", type=int, default=None,
                     help="stop after this many readings (default: run until interrupted)")
    top.set_defaults(func=_top)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except _BadConfig:
        return 2


if __name__ == "__main__":
    sys.exit(main())
