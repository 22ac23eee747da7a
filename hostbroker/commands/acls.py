"""``hostbroker acls add|remove|list``: a broker's ACLs, in the shape of Kafka's
``kafka-acls.sh`` (docs/tools.md, docs/security.md).

- ``add``: every ``--allow-principal`` from every ``--allow-host`` (default
  ``*``), and every ``--deny-principal`` from every ``--deny-host``, is
  allowed (denied) every ``--operation`` on every resource given (``--topic``,
  ``--group``, ``--cluster``), as literal names or (``--resource-pattern-type
  prefixed``) prefixes: one CREATE_ACLS.
- ``remove``: the same bindings, or, without principals, every binding of the
  resources given (of the operations given, if any): one DELETE_ACLS of a
  filter each; what was removed is printed.
- ``list``: the bindings of the resources given (every one without), of the
  principals given; ``--resource-pattern-type`` ``any`` (the default here),
  ``match`` (every binding that applies to the named resource: its name,
  ``*`` and its prefixes), ``literal`` or ``prefixed``.

Everything given is checked here before anything is sent (a bad principal,
host, operation or an operation a resource type has not got: one line,
status 2); a broker's refusal is one line, status 1.

Where the ACLs live is a backend: :class:`BrokerAcls` talks to a broker
(``--bootstrap``); another (ZooKeeper's) is one more class with the same
three methods, chosen in :func:`backend`.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Iterable, Sequence

from hostbroker.commands import check_bootstrap
from hostbroker.exits import EXIT_OK, CommandError, usage_error
from hostbroker.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    binding_to_json,
    check_host,
    check_resource_name,
    operation_named,
    pattern_named,
)
from hostbroker.security.principals import Principal



@dataclasses.dataclass(frozen=True)
class AclSpec:
    """What the command line names, checked: resources (type, name),
    principals with their permission, hosts, operations and pattern type."""

    resources: tuple[tuple[ResourceType, str], ...] = ()
    principals: tuple[Principal, ...] = ()  # either permission (remove, list)
    allow: tuple[Principal, ...] = ()
    deny: tuple[Principal, ...] = ()
    allow_hosts: tuple[str, ...] = ()
    deny_hosts: tuple[str, ...] = ()
    operations: tuple[Operation, ...] = ()
    pattern: PatternType = PatternType.LITERAL


def spec(*, topics: Sequence[str] = (), groups: Sequence[str] = (), cluster: bool = False,
         principals: Sequence[str] = (),
         allow_principals: Sequence[str] = (), deny_principals: Sequence[str] = (),
         allow_hosts: Sequence[str] = (), deny_hosts: Sequence[str] = (),
         operations: Sequence[str] = (), pattern: str | None = None,
         action: str = "add") -> AclSpec:
    """The checked :class:`AclSpec` of the options; a usage error names the
    first bad one."""
    try:
        if pattern is None:
            pattern_type = PatternType.ANY if action == "list" else PatternType.LITERAL
        else:
            pattern_type = pattern_named(pattern, filtering=action != "add")
        resources = [(ResourceType.TOPIC, t) for t in topics]
        resources += [(ResourceType.GROUP, g) for g in groups]
        if cluster:
            resources.append((ResourceType.CLUSTER, CLUSTER_NAME))
        for rtype, name in resources:
            if rtype is ResourceType.CLUSTER:
                continue
            check_resource_name(rtype, name, pattern_type if pattern_type in (
                PatternType.LITERAL, PatternType.PREFIXED) else PatternType.LITERAL)
        made = AclSpec(
            resources=tuple(dict.fromkeys(resources)),
            principals=tuple(dict.fromkeys(Principal.parse(p) for p in principals)),
            allow=tuple(dict.fromkeys(Principal.parse(p) for p in allow_principals)),
            deny=tuple(dict.fromkeys(Principal.parse(p) for p in deny_principals)),
            allow_hosts=tuple(dict.fromkeys(check_host(h) for h in allow_hosts)),
            deny_hosts=tuple(dict.fromkeys(check_host(h) for h in deny_hosts)),
            operations=tuple(dict.fromkeys(operation_named(o) for o in operations)),
            pattern=pattern_type)
    except ValueError as e:
        raise usage_error(str(e)) from None
    if made.allow_hosts and not made.allow:
        raise usage_error("--allow-host: give --allow-principal too")
    if made.deny_hosts and not made.deny:
        raise usage_error("--deny-host: give --deny-principal too")
    if action == "add":
        if made.principals:
            raise usage_error("add: --principal is for remove and list; give "
                              "--allow-principal or --deny-principal")
        if not made.resources:
            raise usage_error("add: give --topic, --group or --cluster")
        if not (made.allow or made.deny):
            raise usage_error("add: give --allow-principal or --deny-principal")
        if not made.operations:
            raise usage_error("add: give --operation")
    if action == "remove" and not made.resources:
        raise usage_error("remove: give --topic, --group or --cluster")
    return made


def _grants(s: AclSpec, default_host: str | None):
    """(principal, host, permission) of every principal given; a principal
    without hosts of its permission is from ``default_host``."""
    for principal in s.principals:
        yield principal, None, Permission.ANY
    for principals, hosts, permission in ((s.allow, s.allow_hosts, Permission.ALLOW),
                                          (s.deny, s.deny_hosts, Permission.DENY)):
        for principal in principals:
            for host in hosts or (default_host,):
                yield principal, host, permission


def bindings_of(s: AclSpec) -> list[AclBinding]:
    """The bindings ``add`` makes; a usage error for one the model refuses
    (``Write`` on a Group)."""
    made = []
    for rtype, name in s.resources:
        for principal, host, permission in _grants(s, "*"):
            for operation in s.operations:
                try:
                    made.append(AclBinding.checked(rtype, name, s.pattern, principal, host,
                                                   operation, permission))
                except ValueError as e:
                    raise usage_error(str(e)) from None
    return list(dict.fromkeys(made))


def filters_of(s: AclSpec, default_host: str | None = None) -> list[AclFilter]:
    """The filters ``remove`` and ``list`` select with: resources x (principal,
    host, permission) x operations, each left open where nothing is given; an
    ``--allow-principal``/``--deny-principal`` without hosts of its permission
    is from ``default_host`` (``remove``: ``*``, what ``add`` made)."""
    resources = s.resources or ((None, None),)
    grants = list(_grants(s, default_host)) or [(None, None, Permission.ANY)]
    operations = s.operations or (Operation.ANY,)
    filters = []
    for rtype, name in resources:
        for principal, host, permission in grants:
            for operation in operations:
                filters.append(AclFilter(rtype, name, s.pattern, principal, host,
                                         operation, permission))
    return list(dict.fromkeys(filters))


# -- backends --------------------------------------------------------------

class BrokerAcls:
    """The ACLs of the broker at ``bootstrap`` (CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS)."""

    def __init__(self, bootstrap: str):
        from hostbroker.client.simple import SimpleClient

        self.client = SimpleClient(admin_bootstrap(bootstrap))

    def close(self) -> None:
        self.client.close()

    def create(self, bindings: Sequence[AclBinding]) -> list[str | None]:
        """Per binding, None or the broker's refusal."""
        from hostbroker.protocol import acls as wire
        from hostbroker.security.admin_wire import entry_of

        answer = self.client.request(wire.CreateAclsRequest(tuple(entry_of(b)
                                                                  for b in bindings)))
        _check_count(answer.results, bindings, "ACLs")
        return [refusal_line(r.error_code, r.error_message) for r in answer.results]

    def delete(self, filters: Sequence[AclFilter]) -> list[tuple[str | None, list[AclBinding]]]:
        """Per filter, (None or the refusal, the bindings removed)."""
        from hostbroker.protocol import acls as wire

        answer = self.client.request(wire.DeleteAclsRequest(tuple(_wire_filter(f)
                                                                  for f in filters)))
        _check_count(answer.results, filters, "filters")
        return [(refusal_line(r.error_code, r.error_message), [_from_wire(e) for e in r.deleted])
                for r in answer.results]

    def describe(self, f: AclFilter) -> tuple[list[AclBinding], str | None]:
        """(the bindings ``f`` matches, a note when the answer was cut)."""
        from hostbroker.protocol import acls as wire

        answer = self.client.request(wire.DescribeAclsRequest(_wire_filter(f)))
        refusal = refusal_line(answer.error_code, answer.error_message)
        if refusal:
            raise CommandError(refusal)
        return [_from_wire(e) for e in answer.acls], \
            (answer.error_message or "cut") if answer.truncated else None


def admin_bootstrap(bootstrap: str | None) -> str:
    """The broker ``--bootstrap`` names, which these commands need said: a
    plain-TCP default would be ``User:ANONYMOUS``, refused once the
    authorizer is on (and granting it Alter would give every plain-TCP
    client the ACLs)."""
    if bootstrap is None:
        raise usage_error("give --bootstrap: unix:///path/of/its.sock (the broker's own "
                          "user there is a super user), or tcp:// or ssl:// as a principal "
                          "allowed Alter on the cluster; or --zookeeper for a cluster")
    return check_bootstrap(bootstrap)


def backend(*, bootstrap: str | None = None, zookeeper: str | None = None):
    """Where the ACLs are changed: a standalone broker (--bootstrap) or a
    cluster's ZooKeeper (--zookeeper; :mod:`hostbroker.commands.access_zk`)."""
    if zookeeper is not None:
        from hostbroker.commands.access_zk import ZooKeeperAcls

        return ZooKeeperAcls(zookeeper)
    return BrokerAcls(bootstrap)


def _check_count(results, sent, what: str) -> None:
    """One result per entry sent, or CommandError (nothing taken for granted)."""
    if len(results) != len(sent):
        raise CommandError(f"the broker answered {len(results)} results for "
                           f"{len(sent)} {what}")


def refusal_line(code, message) -> str | None:
    if code == 0:
        return None
    from hostbroker.errors import ErrorCode

    name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
    return f"{name}: {message}" if message else name


def _wire_filter(f: AclFilter):
    from hostbroker.protocol import acls as wire

    return wire.AclFilterEntry(wire.ANY if f.resource_type is None else int(f.resource_type),
                               f.name, int(f.pattern),
                               None if f.principal is None else str(f.principal), f.host,
                               int(f.operation), int(f.permission))


def _from_wire(entry) -> AclBinding:
    """A binding the broker sent, checked as any input."""
    from hostbroker.security.admin_wire import binding_of

    try:
        return binding_of(entry)
    except ValueError as e:
        raise CommandError(f"the broker sent an ACL that does not hold: {e}") from None


def _print(bindings: Iterable[AclBinding], as_json: bool, out, verb: str = "") -> None:
    bindings = sorted(bindings)
    if as_json:
        json.dump({"acls": [binding_to_json(b) for b in bindings]}, out, indent=1)
        out.write("\n")
        return
    for b in bindings:
        out.write(f"{verb}{b.describe()}\n")


# -- the actions -----------------------------------------------------------

def add(s: AclSpec, *, as_json: bool = False, out=None, **where) -> int:
    out = out or sys.stdout
    bindings = bindings_of(s)
    store = backend(**where)
    try:
        refusals = store.create(bindings)
    finally:
        store.close()
    failed = [(b, r) for b, r in zip(bindings, refusals) if r]
    _print([b for b, r in zip(bindings, refusals) if not r], as_json, out, "added: ")
    if failed:
        b, r = failed[0]
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        raise CommandError(f"{b.describe()}: {r}{more}")
    return EXIT_OK


def remove(s: AclSpec, *, as_json: bool = False, out=None, **where) -> int:
    out = out or sys.stdout
    store = backend(**where)
    try:
        results = store.delete(filters_of(s, "*"))
    finally:
        store.close()
    removed = {b for _, deleted in results for b in deleted}
    _print(removed, as_json, out, "removed: ")
    refusals = [r for r, _ in results if r]
    if refusals:
        raise CommandError(refusals[0])
    return EXIT_OK


def list_acls(s: AclSpec, *, as_json: bool = False, out=None, **where) -> int:
    out = out or sys.stdout
    store = backend(**where)
    found, notes = set(), []
    wanted = filters_of(s)
    # one request per resource and principal; hosts, permissions and operations
    # picked here (the broker narrows by name and principal, by index)
    per_resource = dict.fromkeys(AclFilter(f.resource_type, f.name, f.pattern, f.principal)
                                 for f in wanted)
    try:
        for f in per_resource:
            bindings, note = store.describe(f)
            found.update(b for b in bindings if any(w.matches(b) for w in wanted))
            if note:
                notes.append(note)
    finally:
        store.close()
    _print(found, as_json, out)
    if notes:
        print(f"hostbroker acls list: {notes[0]}", file=sys.stderr)
    return EXIT_OK
