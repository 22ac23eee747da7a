"""Reading and changing a cluster's ACLs and quotas in ZooKeeper (the layout of :mod:`.acls_zk`).

Owns the ZooKeeper side of ACL and quota administration and the whole
read of both that every broker's registrar makes:

- :func:`read_acls` reads every ACL node, bounded: at most
  ``acl.max.bindings`` nodes under each of the six type nodes and bindings
  in all, each node at most ``zookeeper.max.node.bytes``, the whole read
  within ``timeout_s`` and ``PER_NODE_S`` a node (:func:`list_acl_nodes`
  and :func:`read_acl_nodes` are its two halves, which the registrar uses
  to read some nodes at a time). ``strict``: any node that is not an ACL
  node is :class:`AclLayoutError`, one line naming it (as a broker takes
  it: super users only until it is mended, for a rule left out could be a
  Deny). Otherwise (the commands) bad nodes are reported and left out, so
  the others can still be listed and removed.
- :func:`read_quotas` reads ``/config/users`` (:func:`list_quota_nodes`,
  :func:`read_quota_nodes`): at most ``quota.max.principals`` users and the
  default; a bad node is reported and left out (that user is unbounded, as
  without a node).
- :func:`add_acls`, :func:`remove_acls`, :func:`set_quota`: each node
  changed is read, changed and set with the version read (created, or
  deleted when empty, likewise checked); a writer that came first makes us
  read again, at most ``TRIES`` times. Then one change notice per node
  changed (those changed before a failure too), and notices older than ``NOTICE_KEEP_S`` or past the newest
  ``NOTICE_KEEP_COUNT`` are removed (Kafka's rule), so two writers at once
  lose nothing and every broker hears of both. A change reads the six type
  nodes' children and the nodes it may change: a removal the nodes its
  filters may match only (it cannot pass a bound); an add reads every ACL
  node, as the brokers' read does, so its count against
  ``acl.max.bindings`` is exact.
- :func:`list_acls`, :func:`list_quotas`: what is kept now (a filter naming
  a resource reads the nodes it may match only).

Takes a started kazoo client (a command's, or the registrar's).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable

from hostbroker.cluster import acls_zk as layout
from hostbroker.cluster.zkread import DEFAULT, Bounds
from hostbroker.security.acl import WILDCARD, AclBinding, AclFilter, PatternType, ResourceType
from hostbroker.security.quota import DEFAULT_ENTITY, Quota, QuotaSet

TRIES = 20  # a node changed by other writers this many times in a row: give up, say so
NOTICE_KEEP_S = 15 * 60  # notices older than this are removed by the next writer
NOTICE_KEEP_COUNT = 1000  # and those past the newest this many
_PRUNE_MAX = 1000  # most notices one writer removes at once
_TIMEOUT_S = 10.0
PER_NODE_S = 0.001  # a read of many nodes may take this much longer per node


class AclLayoutError(ValueError):
    """The ACLs in ZooKeeper cannot be taken whole; its text is one line."""


class ConflictError(RuntimeError):
    """Other writers kept changing a node; nothing of this change was lost or half-made."""


Report = Callable[[str, str], None]


def _ignore(_path: str, _problem: str) -> None:
    pass


def _children(client, path: str, deadline: float) -> list[str]:
    from kazoo.exceptions import NoNodeError

    try:
        return sorted(client.get_children_async(path).get(timeout=_left(deadline)))
    except NoNodeError:
        return []


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("ZooKeeper did not answer in time")
    return left


def deadline_of(timeout_s: float, nodes: int) -> float:
    """When a read of ``nodes`` nodes sent at once must be done: ``timeout_s``
    and ``PER_NODE_S`` a node (a read of many nodes takes longer, a stuck
    ZooKeeper no longer than that)."""
    return time.monotonic() + timeout_s + nodes * PER_NODE_S


def read_acl_nodes(client, nodes: dict[str, tuple], *, bounds: Bounds = DEFAULT,
                   max_bindings: int = 100_000,
                   timeout_s: float = _TIMEOUT_S) -> dict[str, list[AclBinding] | str]:
    """path -> the bindings of each ACL node of ``nodes`` (path -> its resource),
    or the one line that says why it is not an ACL node; a node gone since it
    was listed holds none. ZooKeeper errors and timeouts are raised."""
    from kazoo.exceptions import NoNodeError

    pending = [(path, resource, client.get_async(path)) for path, resource in nodes.items()]
    deadline = deadline_of(timeout_s, len(pending))
    found: dict[str, list[AclBinding] | str] = {}
    for path, resource, result in pending:
        try:
            data, _stat = result.get(timeout=_left(deadline))
        except NoNodeError:
            found[path] = []
            continue
        try:
            found[path] = layout.decode_acl_node(data or b"", path, resource, bounds,
                                                 max_bindings)
        except ValueError as exc:
            found[path] = str(exc)
    return found


def list_acl_nodes(root: str, pattern: PatternType, resource_type: ResourceType,
                   names: list[str], max_bindings: int) -> tuple[dict[str, tuple], list[str]]:
    """The ACL nodes among ``names`` (the children of ``root``), path -> resource,
    and the lines of what is wrong with the others (too many: the first
    ``max_bindings`` taken; a name that is no resource: left out)."""
    problems = []
    if len(names) > max_bindings:
        problems.append(f"{root}: {len(names)} resources, more than acl.max.bindings "
                        f"({max_bindings})")
        names = names[:max_bindings]
    nodes = {}
    for name in names:
        path = f"{root}/{name}"
        try:
            nodes[path] = layout.resource_of(pattern, resource_type.title, name)
        except ValueError as exc:
            problems.append(f"{path[:200]}: {exc}")
    return nodes, problems


def read_acls(client, *, bounds: Bounds = DEFAULT, max_bindings: int = 100_000,
              strict: bool = True, report: Report = _ignore,
              timeout_s: float = _TIMEOUT_S) -> list[AclBinding]:
    """Every binding kept (module docstring); AclLayoutError when ``strict`` and a
    node is bad. ZooKeeper errors and timeouts are raised as they are."""
    deadline = time.monotonic() + timeout_s
    nodes: dict[str, tuple] = {}
    for root, pattern, resource_type in layout.type_roots():
        found, problems = list_acl_nodes(root, pattern, resource_type,
                                         _children(client, root, deadline), max_bindings)
        if problems and strict:
            raise AclLayoutError(problems[0])
        for problem in problems:
            report(problem.split(":", 1)[0], f"{problem}; left out")
        nodes.update(found)
    bindings: set[AclBinding] = set()
    for path, found in sorted(read_acl_nodes(client, nodes, bounds=bounds,
                                             max_bindings=max_bindings,
                                             timeout_s=timeout_s).items()):
        if isinstance(found, str):
            if strict:
                raise AclLayoutError(found)
            report(path, f"{found}; left out")
            continue
        bindings.update(found)
    if len(bindings) > max_bindings:
        problem = f"{len(bindings)} ACLs, more than acl.max.bindings ({max_bindings})"
        if strict:
            raise AclLayoutError(f"{layout.LITERAL_ROOT}: {problem}")
        report(layout.LITERAL_ROOT, f"{layout.LITERAL_ROOT}: {problem}; the first ones used")
        return sorted(bindings)[:max_bindings]
    return sorted(bindings)


def list_quota_nodes(names: list[str], max_entities: int,
                     report: Report = _ignore) -> dict[str, str]:
    """The quota nodes among ``names`` (the children of ``/config/users``), node
    -> entity: the default and the first ``max_entities`` users; the others
    reported and left out."""
    if len(names) > max_entities + 1:
        report(layout.USERS_ROOT, f"{layout.USERS_ROOT}: {len(names)} users, more than "
                                  f"quota.max.principals ({max_entities}); the first "
                                  f"{max_entities} read")
        names = [n for n in names if n == DEFAULT_ENTITY] + \
            [n for n in names if n != DEFAULT_ENTITY][:max_entities]
    nodes = {}
    for name in names:
        try:
            nodes[name] = layout.entity_of(name)
        except ValueError as exc:
            report(f"{layout.USERS_ROOT}/{name}", f"{exc}; left out")
    return nodes


def read_quota_nodes(client, nodes: Iterable[str], *, bounds: Bounds = DEFAULT,
                     report: Report = _ignore,
                     timeout_s: float = _TIMEOUT_S) -> dict[str, Quota | None]:
    """node -> the quota of each node of ``/config/users`` named (None: gone, no
    value, or bad: reported and left out, that user unbounded)."""
    from kazoo.exceptions import NoNodeError

    pending = [(node, client.get_async(f"{layout.USERS_ROOT}/{node}")) for node in nodes]
    deadline = deadline_of(timeout_s, len(pending))
    found: dict[str, Quota | None] = {}
    for node, result in pending:
        path = f"{layout.USERS_ROOT}/{node}"
        found[node] = None
        try:
            data, _stat = result.get(timeout=_left(deadline))
        except NoNodeError:
            continue
        if not data:
            continue  # a user node holding only client-id children (Kafka's)
        try:
            quota, other = layout.decode_quota_node(data, path, bounds)
        except ValueError as exc:
            report(path, f"{exc}; left out (no bounds for that user)")
            continue
        if other:
            report(path, f"{path}: {', '.join(k[:40] for k in other[:5])} not kept here; "
                         "left out (the rest of the node is used)")
        found[node] = None if quota.empty else quota
    return found


def read_quotas(client, *, bounds: Bounds = DEFAULT, max_entities: int = 4096,
                report: Report = _ignore, timeout_s: float = _TIMEOUT_S) -> QuotaSet:
    """The quotas kept (module docstring): bad nodes reported and left out."""
    names = _children(client, layout.USERS_ROOT, time.monotonic() + timeout_s)
    nodes = list_quota_nodes(names, max_entities, report)
    found = read_quota_nodes(client, nodes, bounds=bounds, report=report, timeout_s=timeout_s)
    return QuotaSet({nodes[n]: q for n, q in found.items() if q is not None})


# -- changing -------------------------------------------------------------------------

def _update(client, path: str, decode, encode, change, empty) -> tuple[object, object]:
    """Read ``path`` (None: absent), ``change`` it, write it back checked against
    the version read; ``empty(value)`` deletes the node. Returns (before, after)."""
    from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

    for attempt in range(TRIES):
        try:
            data, stat = client.get(path)
        except NoNodeError:
            before, version = None, None
        else:
            before, version = decode(data, path), stat.version
        after = change(before)
        if after == before:
            return before, after
        try:
            if version is None:
                if not empty(after):
                    client.create(path, encode(after), makepath=True)
            elif empty(after):
                try:
                    client.delete(path, version=version)
                except NotEmptyError:  # children of another program's (Kafka's client ids)
                    client.set(path, encode(after), version=version)
            else:
                client.set(path, encode(after), version=version)
            return before, after
        except (BadVersionError, NodeExistsError, NoNodeError):
            time.sleep(random.uniform(0, 0.01 * (attempt + 1)))  # another writer: read again
    raise ConflictError(f"{path}: changed by other writers {TRIES} times in a row; "
                        "not changed, try again")


def _notify(client, root: str, prefix: str, values: Iterable[bytes]) -> None:
    for value in values:
        client.create(f"{root}/{prefix}", value, sequence=True, makepath=True)
    prune_notices(client, root)


def prune_notices(client, root: str, now_ms: int | None = None) -> int:
    """Remove the notices under ``root`` older than ``NOTICE_KEEP_S`` and those past
    the newest ``NOTICE_KEEP_COUNT`` (at most ``_PRUNE_MAX`` at once); how many."""
    from kazoo.exceptions import NoNodeError

    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    try:
        names = sorted(client.get_children(root))  # sequence numbers sort as text
    except NoNodeError:
        return 0
    doomed = names[:max(0, len(names) - NOTICE_KEEP_COUNT)][:_PRUNE_MAX]
    for name in names[len(doomed):len(names) - 1]:  # the newest is kept whatever its age
        if len(doomed) >= _PRUNE_MAX:
            break
        stat = client.exists(f"{root}/{name}")
        if stat is not None and now_ms - stat.ctime < NOTICE_KEEP_S * 1000:
            break  # the rest are younger
        doomed.append(name)
    for name in doomed:
        try:
            client.delete(f"{root}/{name}")
        except NoNodeError:
            pass  # another writer removed it
    return len(doomed)


def _resource(binding: AclBinding) -> tuple[ResourceType, str, PatternType]:
    return binding.resource_type, binding.name, binding.pattern


def _acl_node_codec(resource, bounds: Bounds, max_bindings: int):
    def decode(data: bytes, path: str) -> frozenset:
        return frozenset(layout.decode_acl_node(data or b"", path, resource, bounds,
                                                max_bindings))

    def encode(bindings) -> bytes:
        data = layout.encode_acl_node(bindings)
        if len(data) > bounds.node_bytes:
            raise ValueError(f"{resource[0].title} {resource[1][:60]}: its ACLs would take "
                             f"{len(data)} bytes, more than zookeeper.max.node.bytes "
                             f"({bounds.node_bytes}); not changed")
        return data
    return decode, encode


def _change_acls(client, changes: dict, bounds: Bounds, max_bindings: int,
                 step) -> list[AclBinding]:
    """Apply ``step(resource, current frozenset) -> new frozenset`` to each resource
    of ``changes``; notices for those changed. Returns the bindings added or
    removed (what differs)."""
    differ: set[AclBinding] = set()
    notices: dict[PatternType, list[bytes]] = {p: [] for p in layout.ROOTS}
    try:
        for resource in sorted(changes):
            path = layout.resource_path(*resource)
            decode, encode = _acl_node_codec(resource, bounds, max_bindings)
            before, after = _update(client, path, decode, encode,
                                    lambda current, r=resource: step(r, current or frozenset()),
                                    lambda value: not value)
            before, after = before or frozenset(), after or frozenset()
            if before != after:
                differ.update(before ^ after)
                notices[resource[2]].append(layout.encode_acl_change(*resource))
    finally:  # what was changed is told, whatever stopped the rest
        for pattern, values in notices.items():
            if values:
                _notify(client, layout.CHANGES[pattern], layout.ACL_CHANGE_PREFIX, values)
    return sorted(differ)


def _type_children(client, timeout_s: float = _TIMEOUT_S) -> list[tuple]:
    """``(root, pattern, resource type, its children)`` of the six type nodes:
    the names of every ACL node, none of them read (nor checked yet)."""
    deadline = time.monotonic() + timeout_s
    return [(root, pattern, resource_type, _children(client, root, deadline))
            for root, pattern, resource_type in layout.type_roots()]


def _may_hold(f: AclFilter, resource: tuple[ResourceType, str, PatternType]) -> bool:
    """Whether the node of ``resource`` may hold a binding ``f`` matches (its
    resource fields alone: a filter naming a literal resource looks at that
    node, and a MATCH filter at ``*`` and the prefixes of its name too)."""
    resource_type, name, pattern = resource
    if f.resource_type is not None and resource_type is not f.resource_type:
        return False
    if f.name is None:
        return f.pattern in (PatternType.ANY, PatternType.MATCH, pattern)
    if f.pattern is PatternType.MATCH:
        if pattern is PatternType.LITERAL:
            return name in (f.name, WILDCARD)
        return f.name.startswith(name)
    if f.pattern is not PatternType.ANY and pattern is not f.pattern:
        return False
    return name == f.name


def _named(f: AclFilter, pattern: PatternType) -> list[str]:
    """The node names a filter naming a resource may match among the nodes of
    ``pattern`` (its name; with MATCH the literal ``*``, or every prefix)."""
    if f.pattern is PatternType.MATCH:
        if pattern is PatternType.LITERAL:
            return [f.name, WILDCARD]
        return [f.name[:i] for i in range(1, len(f.name) + 1)]
    return [f.name]


def _read_matching(client, filters: list[AclFilter], *, bounds: Bounds, max_bindings: int,
                   report: Report) -> list[AclBinding]:
    """The bindings of the nodes some filter may match (module docstring: a
    filter naming a resource reads its nodes only, and looks at no other
    name), bad nodes reported and left out."""
    nodes: dict[str, tuple] = {}
    for root, pattern, resource_type, children in _type_children(client):
        # (each filter asked of its own name: whether it looks at this type node at all)
        concerned = [f for f in filters if _may_hold(f, (resource_type, f.name or "", pattern))]
        if not concerned:
            continue
        if any(f.name is None for f in concerned):
            names = children
        else:
            held = set(children)
            names = sorted({n for f in concerned for n in _named(f, pattern) if n in held})
        found, problems = list_acl_nodes(root, pattern, resource_type, names, max_bindings)
        for problem in problems:
            report(problem.split(":", 1)[0], f"{problem}; left out")
        nodes.update((path, r) for path, r in found.items()
                     if any(_may_hold(f, r) for f in concerned))
    bindings: set[AclBinding] = set()
    for path, found in sorted(read_acl_nodes(client, nodes, bounds=bounds,
                                             max_bindings=max_bindings).items()):
        if isinstance(found, str):
            report(path, f"{found}; left out")
            continue
        bindings.update(found)
    return sorted(bindings)


def add_acls(client, bindings: Iterable[AclBinding], *, bounds: Bounds = DEFAULT,
             max_bindings: int = 100_000) -> list[AclBinding]:
    """Keep ``bindings`` (those kept already are no change); the ones added.
    Reads every ACL node (as the brokers' read does), so the count against
    ``acl.max.bindings`` is exact: an add accepted never leaves more
    bindings than the brokers take. ValueError (one line, nothing changed)
    when a name cannot be a node, a node changed is not an ACL node or would
    pass ``zookeeper.max.node.bytes``, or the cluster would keep more than
    ``acl.max.bindings``; ConflictError when other writers kept a node busy
    (the nodes before it changed, and told)."""
    by_resource: dict[tuple, set[AclBinding]] = {}
    for binding in bindings:
        layout.resource_path(*_resource(binding))  # a name ZooKeeper cannot hold: refused now
        by_resource.setdefault(_resource(binding), set()).add(binding)
    if not by_resource:
        return []
    kept = set(read_acls(client, bounds=bounds, max_bindings=max_bindings, strict=False))
    paths = {layout.resource_path(*r): r for r in by_resource}
    current = read_acl_nodes(client, paths, bounds=bounds, max_bindings=max_bindings)
    for path, resource in paths.items():  # each node whole, before any is written
        found = current.get(path, [])
        if isinstance(found, str):
            raise ValueError(f"{found}; nothing changed")
        data = layout.encode_acl_node(set(found) | by_resource[resource])
        if len(data) > bounds.node_bytes:
            raise ValueError(f"{resource[0].title} {resource[1][:60]}: its ACLs would take "
                             f"{len(data)} bytes, more than zookeeper.max.node.bytes "
                             f"({bounds.node_bytes}); nothing changed")
    new = {b for group in by_resource.values() for b in group} - kept
    if len(kept) + len(new) > max_bindings:
        raise ValueError(f"{len(kept)} ACLs kept and {len(new)} more would pass "
                         f"acl.max.bindings ({max_bindings}); nothing changed")
    return _change_acls(client, by_resource, bounds, max_bindings,
                        lambda resource, current: current | by_resource[resource])


def remove_acls(client, filters: Iterable[AclFilter], *, bounds: Bounds = DEFAULT,
                max_bindings: int = 100_000, report: Report = _ignore) -> list[AclBinding]:
    """Remove every binding some filter matches; the ones removed (a node left
    empty is deleted). Reads the nodes the filters may match only."""
    filters = list(filters)
    kept = _read_matching(client, filters, bounds=bounds, max_bindings=max_bindings,
                          report=report)
    doomed = {_resource(b) for b in kept if any(f.matches(b) for f in filters)}
    return _change_acls(
        client, {r: None for r in doomed}, bounds, max_bindings,
        lambda _r, current: frozenset(b for b in current
                                      if not any(f.matches(b) for f in filters)))


def list_acls(client, acl_filter: AclFilter | None = None, *, bounds: Bounds = DEFAULT,
              max_bindings: int = 100_000, report: Report = _ignore) -> list[AclBinding]:
    """The bindings kept that ``acl_filter`` matches (all without one), sorted:
    the nodes it may match read only (one naming a literal resource: that
    node, and with ``match`` the literal ``*`` and the prefixes of its name).
    More than ``acl.max.bindings``: the first ones, reported."""
    f = AclFilter() if acl_filter is None else acl_filter
    found = [b for b in _read_matching(client, [f], bounds=bounds, max_bindings=max_bindings,
                                       report=report) if f.matches(b)]
    if len(found) > max_bindings:
        report(layout.LITERAL_ROOT, f"{layout.LITERAL_ROOT}: {len(found)} ACLs, more than "
                                    f"acl.max.bindings ({max_bindings}); the first ones used")
        return found[:max_bindings]
    return found


def set_quota(client, entity: str, values: dict[str, int | None], *,
              bounds: Bounds = DEFAULT, max_entities: int = 4096) -> Quota:
    """Change the bounds of ``entity`` (``User:name`` or ``<default>``): a None
    value removes that bound; a quota left with none is deleted. Its quota
    after; ValueError (one line, nothing changed) for a bad entity or value,
    or a new user past ``quota.max.principals``."""
    path = layout.quota_path(entity)
    Quota().merged(values)  # every key and value checked before anything is read

    def decode(data: bytes, node: str) -> Quota:
        if not data:
            return Quota()
        return layout.decode_quota_node(data, node, bounds)[0]

    def change(current: Quota | None) -> Quota:
        if current is None and entity != DEFAULT_ENTITY:
            users = [n for n in _children(client, layout.USERS_ROOT, time.monotonic() + 10)
                     if n != DEFAULT_ENTITY]
            if len(users) >= max_entities:
                raise ValueError(f"{len(users)} users have quotas, as many as "
                                 f"quota.max.principals ({max_entities}); nothing changed")
        return (current or Quota()).merged(values)

    before, after = _update(client, path, decode, layout.encode_quota_node, change,
                            lambda quota: quota.empty)
    if (before or Quota()) != after:
        _notify(client, layout.CONFIG_CHANGES, layout.CONFIG_CHANGE_PREFIX,
                [layout.encode_quota_change(entity)])
    return after


def list_quotas(client, *, bounds: Bounds = DEFAULT, max_entities: int = 4096,
                report: Report = _ignore) -> QuotaSet:
    return read_quotas(client, bounds=bounds, max_entities=max_entities, report=report)
