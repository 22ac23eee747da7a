"""``hostbroker quotas set|remove|list``: a broker's quotas per principal
(docs/tools.md, docs/security.md).

- ``set``: give each ``--principal`` (or the ``--default`` every principal
  without its own has) the rates named: ``--producer-byte-rate``,
  ``--consumer-byte-rate`` (bytes per second), ``--request-rate`` (requests
  per second); the rates not named stay as they are. One ALTER_QUOTAS.
- ``remove``: drop the rates named (all three when none is), so the entity
  falls back to the default (or, for the default, to none).
- ``list``: the rates of the entities named, or of every entity that has any.

A bad principal or rate is one line, status 2; a broker's refusal one line,
status 1. As ``acls``, where the quotas live is a backend
(:class:`BrokerQuotas`; ZooKeeper's is one more class with the same methods,
chosen in :func:`backend`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from hostbroker.exits import EXIT_OK, CommandError, usage_error
from hostbroker.security.quota import DEFAULT_ENTITY, MAX_RATE, QUOTA_KEYS, Quota, check_bound



def entities(principals: Sequence[str], default: bool, action: str) -> list[str]:
    """The entities named on the command line, checked; a usage error for a bad one."""
    from hostbroker.security.admin_wire import entity_named

    named = []
    for text in principals:
        if text == DEFAULT_ENTITY:
            raise usage_error(f"--principal {text}: give --default")
        try:
            named.append(entity_named(text))
        except ValueError as e:
            raise usage_error(f"--principal: {e}") from None
    if default:
        named.append(DEFAULT_ENTITY)
    if not named and action != "list":
        raise usage_error(f"{action}: give --principal or --default")
    return list(dict.fromkeys(named))


def rates(action: str, producer_byte_rate=None, consumer_byte_rate=None,
          request_rate=None) -> dict[str, int | None]:
    """The changes ``set`` (the rates given) or ``remove`` (the rates flagged
    true, all three when none is) sends: key -> rate (None: removed)."""
    values = (producer_byte_rate, consumer_byte_rate, request_rate)
    if action == "remove":
        flagged = [k for k, v in zip(QUOTA_KEYS, values) if v]
        return {k: None for k in (flagged or QUOTA_KEYS)}
    given = {k: v for k, v in zip(QUOTA_KEYS, values) if v is not None}
    for key, value in given.items():
        try:
            check_bound(key, value)
        except ValueError:
            raise usage_error(f"--{key.replace('_', '-')} {value}: expected a whole number "
                              f"from 1 to {MAX_RATE}") from None
    if not given:
        raise usage_error("set: give --producer-byte-rate, --consumer-byte-rate or "
                          "--request-rate")
    return given


class BrokerQuotas:
    """The quotas of the broker at ``bootstrap`` (ALTER_QUOTAS, DESCRIBE_QUOTAS)."""

    def __init__(self, bootstrap: str):
        from hostbroker.client.simple import SimpleClient

        from hostbroker.commands.acls import admin_bootstrap

        self.client = SimpleClient(admin_bootstrap(bootstrap))

    def close(self) -> None:
        self.client.close()

    def alter(self, names: Sequence[str], changes: dict[str, int | None]) -> list[str | None]:
        """Per entity, None or the broker's refusal."""
        from hostbroker.commands.acls import refusal_line
        from hostbroker.protocol import acls as wire

        values = tuple(wire.QuotaValue(k, wire.REMOVE if v is None else v)
                       for k, v in changes.items())
        answer = self.client.request(wire.AlterQuotasRequest(
            tuple(wire.QuotaEntity(n, values) for n in names)))
        if len(answer.results) != len(names):
            raise CommandError(f"the broker answered {len(answer.results)} results for "
                               f"{len(names)} entities")
        return [refusal_line(r.error_code, r.error_message) for r in answer.results]

    def describe(self, names: Sequence[str]) -> tuple[dict[str, Quota], bool]:
        """(entity -> its rates, whether the answer was cut)."""
        from hostbroker.commands.acls import refusal_line
        from hostbroker.protocol import acls as wire
        from hostbroker.security.admin_wire import entity_named

        answer = self.client.request(wire.DescribeQuotasRequest(tuple(names)))
        refusal = refusal_line(answer.error_code, None)
        if refusal:
            raise CommandError(refusal)
        shown = {}
        for entity in answer.entities:
            try:
                shown[entity_named(entity.entity)] = Quota().merged(
                    {v.key: v.value for v in entity.quotas})
            except ValueError as e:
                raise CommandError(f"the broker sent a quota that does not hold: {e}") from None
        return shown, bool(answer.truncated)


def backend(*, bootstrap: str | None = None, zookeeper: str | None = None):
    """Where the quotas are changed: a standalone broker (--bootstrap) or a
    cluster's ZooKeeper (--zookeeper; :mod:`hostbroker.commands.access_zk`)."""
    if zookeeper is not None:
        from hostbroker.commands.access_zk import ZooKeeperQuotas

        return ZooKeeperQuotas(zookeeper)
    return BrokerQuotas(bootstrap)


def change(action: str, names: Sequence[str], changes: dict[str, int | None], *,
           out=None, **where) -> int:
    """``set`` or ``remove``: one line per entity changed."""
    out = out or sys.stdout
    store = backend(**where)
    try:
        refusals = store.alter(names, changes)
    finally:
        store.close()
    said = ", ".join(f"{k}={'removed' if v is None else v}" for k, v in changes.items())
    for name, refusal in zip(names, refusals):
        if not refusal:
            out.write(f"{name}: {said}\n")
    failed = [(n, r) for n, r in zip(names, refusals) if r]
    if failed:
        raise CommandError(f"{failed[0][0]}: {failed[0][1]}")
    return EXIT_OK


def list_quotas(names: Sequence[str], *, as_json: bool = False, out=None, **where) -> int:
    out = out or sys.stdout
    store = backend(**where)
    try:
        shown, cut = store.describe(names)
    finally:
        store.close()
    if as_json:
        json.dump({"quotas": [{"entity": e, **q.as_dict()} for e, q in shown.items()]},
                  out, indent=1)
        out.write("\n")
    else:
        for entity, quota in shown.items():
            rates_shown = " ".join(f"{k}={v}" for k, v in quota.as_dict().items()) or "(none)"
            out.write(f"{entity} {rates_shown}\n")
    if cut:
        print("hostbroker quotas list: the answer was cut (response.max.bytes); name the "
              "principals", file=sys.stderr)
    return EXIT_OK
