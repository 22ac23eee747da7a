"""Client settings: how producers and consumers take their configuration.

Each client class declares its settings once, as a tuple of
:class:`hostbroker.config.Setting` (Kafka's dotted names, a type, a default,
a one-line meaning and a check). :func:`resolve` merges, in this order (later
wins), the defaults, a mapping of dotted keys (``{"batch.size": 500}``, as
from a properties file or ``--property KEY=VALUE`` strings), and keyword
arguments whose names are the dotted keys with ``_`` for ``.``
(``batch_size=500``). An unknown key or a bad value raises ConfigError with
one line naming the key, before any connection is made.

The tables in the client docs come from the same declarations
(``python -m hostbroker.config MODULE:ATTRIBUTE``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hostbroker.client.connection import parse_uri
from hostbroker.client.tls import TLS_DEFAULTS, set_tls_defaults, tls_defaults
from hostbroker.config import Setting, between, checked, split_list
from hostbroker.errors import ConfigError


def _endpoint_problem(value: str) -> str | None:
    return None if value in ("https", "") else "must be https or empty"


# The TLS settings of every client (ssl:// broker URIs), Kafka's names; each
# client's declaration includes them, and its connections are made with them.
TLS_SETTINGS: tuple[Setting, ...] = (
    Setting("ssl.truststore.location", str, TLS_DEFAULTS["ssl.truststore.location"],
            "PEM file of the CA certificates a broker's certificate must chain to (ssl:// "
            "URIs); empty: the system's CAs."),
    Setting("ssl.keystore.location", str, TLS_DEFAULTS["ssl.keystore.location"],
            "PEM file of this client's certificate chain, then its key, shown to a broker "
            "that asks (its CN is the client's principal); empty: none."),
    Setting("ssl.key.password", str, TLS_DEFAULTS["ssl.key.password"],
            "Password of the key in ssl.keystore.location when it is encrypted."),
    Setting("ssl.endpoint.identification.algorithm", str,
            TLS_DEFAULTS["ssl.endpoint.identification.algorithm"],
            "https: a broker's certificate must name the host of its URI; empty: not checked.",
            _endpoint_problem),
)

# The longest a broker holds an answer for a quota (the broker's own setting of
# this name, same default): a PRODUCE v1 or FETCH v2 answer is waited for this
# much longer, so that a held answer is not taken for a lost one (and a produce
# sent again).
QUOTA_HOLD_SETTING = Setting(
    "quota.max.throttle.ms", int, 30000,
    "How much longer than its timeout an answer is waited for, as a broker may hold it "
    "that long for a quota (the brokers' quota.max.throttle.ms).", between(0, 3_600_000))


class Settings(Mapping[str, Any]):
    """Validated client settings, read as ``settings["batch.size"]``."""

    def __init__(self, values: Mapping[str, Any]):
        self._values = dict(values)

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Settings({redacted(self._values)!r})"


def redacted(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with the value of every ``*password`` key given shown as
    ``***``: what a repr or a log line may show of settings."""
    return {k: "***" if str(k).endswith("password") and v else v for k, v in values.items()}


def parse_properties(items: Iterable[str]) -> dict[str, str]:
    """``KEY=VALUE`` strings (a command line's ``--property``) as a mapping."""
    result: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"property {item!r}: expected KEY=VALUE")
        result[key.strip()] = value
    return result


def resolve(
    declared: Iterable[Setting],
    config: Mapping[str, Any] | None = None,
    options: Mapping[str, Any] | None = None,
) -> Settings:
    """Defaults (for ``ssl.*`` the process's, :mod:`hostbroker.client.tls`),
    then ``config`` (dotted keys), then ``options`` (``_`` for ``.``)."""
    by_key = {s.key: s for s in declared}
    by_name = {key.replace(".", "_"): key for key in by_key}
    values = {key: s.default for key, s in by_key.items()}
    # ssl.*: the process's (a --command-config file's) under what is given here
    values.update({k: v for k, v in tls_defaults().items() if k in values})
    for key, raw in (config or {}).items():
        setting = by_key.get(key)
        if setting is None:
            raise ConfigError(f"{key}: unknown client configuration key")
        values[key] = checked(setting, raw)
    for name, raw in (options or {}).items():
        key = by_name.get(name)
        if key is None:
            raise ConfigError(f"{name}: unknown client option")
        values[key] = checked(by_key[key], raw)
    return Settings(values)


def read_command_config(path: str) -> dict[str, str]:
    """A ``--command-config`` file: ``key=value`` lines (``#`` and ``!`` lines
    and blank ones skipped, as a properties file), of the TLS settings.
    ConfigError names the file, the line and the problem."""
    declared = {s.key: s for s in TLS_SETTINGS}
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(1024 * 1024 + 1)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--command-config: {path}: "
                          f"{getattr(exc, 'strerror', None) or exc}") from None
    if len(text) > 1024 * 1024:
        raise ConfigError(f"--command-config: {path}: larger than 1 MiB")
    values: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        where = f"--command-config: {path}: line {number}"
        if not sep or not key:
            raise ConfigError(f"{where}: expected KEY=VALUE")
        if key not in declared:
            raise ConfigError(f"{where}: {key}: not a setting of this command "
                              f"(one of {', '.join(declared)})")
        try:
            values[key] = checked(declared[key], value.strip())
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return values


def use_command_config(path: str | None) -> None:
    """Make a ``--command-config`` file's TLS settings those of every ``ssl://``
    connection of this process."""
    if path is not None:
        set_tls_defaults(read_command_config(path))


def broker_uris(
    bootstrap: str | Sequence[str] | None,
    settings: Mapping[str, Any],
    key: str = "broker.list",
) -> list[str]:
    """The brokers a client talks to: ``bootstrap`` (comma-separated or a
    sequence of URIs) when given, else the ``key`` setting; without repeats.
    ConfigError names an empty list or a URI that does not parse."""
    where = key if bootstrap is None else "bootstrap"
    if bootstrap is None:
        uris = split_list(settings[key])
    elif isinstance(bootstrap, str):
        uris = split_list(bootstrap)
    else:
        uris = [uri.strip() for uri in bootstrap]
    if not uris:
        raise ConfigError(f"{where}: names no broker")
    for uri in uris:
        try:
            parse_uri(uri)
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return list(dict.fromkeys(uris))
