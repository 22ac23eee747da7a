"""Where a cluster's ACLs and quotas are changed: ZooKeeper (``hostbroker acls
--zookeeper``, ``hostbroker quotas --zookeeper``; docs/security.md, "In a
cluster").

Owns: :class:`ZooKeeperAcls` and :class:`ZooKeeperQuotas`, the second backend
of :mod:`hostbroker.commands.acls` and :mod:`hostbroker.commands.quotas`, with
the same methods as their broker ones. Each writes Kafka's layout through
:mod:`hostbroker.cluster.acls_zk_store` (versioned sets, a change notice per
node), which every broker's hb-registrar watches and publishes. A node of the
layout that does not hold is passed over with one line on stderr (the brokers
allow only their super users until it is mended).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from hostbroker.exits import CommandError
from hostbroker.commands.console import check_zookeeper, zookeeper_client, zookeeper_errors
from hostbroker.security.acl import AclBinding, AclFilter
from hostbroker.security.quota import Quota


def _report(path: str, problem: str) -> None:
    print(f"hostbroker: {path}: {problem} (passed over; the brokers allow only their "
          "super users until it is mended)", file=sys.stderr)


class _ZooKeeper:
    def __init__(self, zookeeper: str):
        self.client = zookeeper_client(check_zookeeper(zookeeper))

    def close(self) -> None:
        self.client.stop()
        self.client.close()

    def _call(self, what, *args, **kwargs):
        """One call of the store: a refusal or a busy node becomes a command error."""
        from hostbroker.cluster.acls_zk_store import ConflictError

        with zookeeper_errors():
            try:
                return what(self.client, *args, **kwargs)
            except ConflictError as exc:
                raise CommandError(f"ZooKeeper: {exc}") from None


class ZooKeeperAcls(_ZooKeeper):
    """The ACLs of the cluster whose ZooKeeper is ``zookeeper``."""

    def create(self, bindings: Sequence[AclBinding]) -> list[str | None]:
        """Per binding, None or the refusal (one for all: a change is made whole)."""
        from hostbroker.cluster import acls_zk_store as store

        try:
            self._call(store.add_acls, bindings)
        except ValueError as exc:
            return [str(exc)] * len(bindings)
        return [None] * len(bindings)

    def delete(self, filters: Sequence[AclFilter]) -> list[tuple[str | None, list[AclBinding]]]:
        """Per filter, (None, the bindings it removed): each removed binding is told
        under the first filter that matches it."""
        from hostbroker.cluster import acls_zk_store as store

        removed = self._call(store.remove_acls, filters, report=_report)
        shown: list[list[AclBinding]] = [[] for _ in filters]
        for binding in removed:
            for i, f in enumerate(filters):
                if f.matches(binding):
                    shown[i].append(binding)
                    break
        return [(None, kept) for kept in shown]

    def describe(self, f: AclFilter) -> tuple[list[AclBinding], str | None]:
        from hostbroker.cluster import acls_zk_store as store

        return self._call(store.list_acls, f, report=_report), None


class ZooKeeperQuotas(_ZooKeeper):
    """The quotas of the cluster whose ZooKeeper is ``zookeeper`` (users and the default)."""

    def alter(self, names: Sequence[str], changes: dict[str, int | None]) -> list[str | None]:
        from hostbroker.cluster import acls_zk_store as store

        refusals: list[str | None] = []
        for name in names:
            try:
                self._call(store.set_quota, name, changes)
            except ValueError as exc:
                refusals.append(str(exc))
            else:
                refusals.append(None)
        return refusals

    def describe(self, names: Sequence[str]) -> tuple[dict[str, Quota], bool]:
        from hostbroker.cluster import acls_zk_store as store

        quotas = self._call(store.list_quotas, report=_report)
        wanted = set(names)
        return {e: q for e, q in sorted(quotas.entities.items())
                if not wanted or e in wanted}, False
