"""Access control lists in Kafka's model: what a binding says, and what a filter matches.

Owns: the resource types (Topic, Group, Cluster), pattern types (a literal
name, ``*`` among them, or a prefix), operations, permissions,
:class:`AclBinding` (one rule: *principal* from *host* is allowed or denied
*operation* on *resource*), :class:`AclFilter` (what DESCRIBE_ACLS and
DELETE_ACLS select), :class:`BindingIndex` (the bindings a filter can
match, found by name or principal), :func:`normal_host` (the one form of an
address that bindings and connections share) and the JSON form of a binding that the standalone file
and the ZooKeeper nodes share (Kafka's field names and spellings:
``{"principal": "User:alice", "permissionType": "Allow", "operation":
"Read", "host": "*"}``).

Every binding is checked whole when it is made (:meth:`AclBinding.checked`):
an operation a resource type has not got (``Write`` on a Group), a Cluster
resource under another name than :data:`CLUSTER_NAME`, a prefix of ``*``,
a host that is neither ``*`` nor an address nor ``localhost`` (the host of
Unix socket connections), are refused with one line naming the field.

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import enum
import ipaddress
from collections import defaultdict
from collections.abc import Iterable

from hostbroker.security.principals import UNIX_HOST, Principal, has_control

CLUSTER_NAME = "kafka-cluster"  # the one Cluster resource, named as Kafka names it
WILDCARD = "*"  # a literal resource name, principal name or host matching every one
MAX_RESOURCE_BYTES = 255


class ResourceType(enum.IntEnum):
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4

    @property
    def title(self) -> str:
        return self.name.title()


class PatternType(enum.IntEnum):
    """LITERAL and PREFIXED are what a binding holds; ANY and MATCH only filter."""
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4

    @property
    def title(self) -> str:
        return self.name.title()


class Operation(enum.IntEnum):
    ANY = 1  # filters only
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9

    @property
    def title(self) -> str:
        return "".join(part.title() for part in self.name.split("_"))


class Permission(enum.IntEnum):
    ANY = 1  # filters only
    DENY = 2
    ALLOW = 3

    @property
    def title(self) -> str:
        return self.name.title()


# What each resource type may be asked for (Kafka's table for these three).
OPERATIONS = {
    ResourceType.TOPIC: frozenset({Operation.READ, Operation.WRITE, Operation.CREATE,
                                   Operation.DELETE, Operation.ALTER, Operation.DESCRIBE}),
    ResourceType.GROUP: frozenset({Operation.READ, Operation.DELETE, Operation.DESCRIBE}),
    ResourceType.CLUSTER: frozenset({Operation.CREATE, Operation.ALTER, Operation.DESCRIBE,
                                     Operation.CLUSTER_ACTION}),
}
# An allowed operation that also allows another: whoever may read, write,
# delete or alter a resource may describe it.
IMPLIES = {Operation.DESCRIBE: frozenset({Operation.READ, Operation.WRITE, Operation.DELETE,
                                          Operation.ALTER, Operation.DESCRIBE})}


def _by_title(enum_type, text: str, field: str, allowed=None):
    wanted = text.replace("_", "").replace("-", "").lower()
    for member in enum_type:
        if member.title.lower() == wanted and (allowed is None or member in allowed):
            return member
    names = ", ".join(m.title for m in (allowed or enum_type))
    raise ValueError(f"{field} {text[:40]!r}: expected one of {names}")


def resource_type_named(text: str) -> ResourceType:
    return _by_title(ResourceType, text, "resource type")


def operation_named(text: str, *, filtering: bool = False) -> Operation:
    allowed = None if filtering else [o for o in Operation if o is not Operation.ANY]
    return _by_title(Operation, text, "operation", allowed)


def permission_named(text: str, *, filtering: bool = False) -> Permission:
    allowed = None if filtering else [Permission.ALLOW, Permission.DENY]
    return _by_title(Permission, text, "permission type", allowed)


def pattern_named(text: str, *, filtering: bool = False) -> PatternType:
    allowed = None if filtering else [PatternType.LITERAL, PatternType.PREFIXED]
    return _by_title(PatternType, text, "pattern type", allowed)


MAX_HOST_CHARS = 64  # longer than any address's text; a host past it is refused unread


def normal_host(address: str, *, peer: bool = False) -> str:
    """The one form of an IP address that ACL hosts and connections' hosts
    share, so a binding matches the connection it names: compressed, an
    IPv4-mapped IPv6 address as its IPv4 form (``::ffff:10.0.0.5`` is
    ``10.0.0.5``). A scope id (``fe80::1%eth0``) is dropped for a ``peer``
    and refused otherwise (no connection's host holds one). ValueError when
    it is not an address."""
    if len(address) > MAX_HOST_CHARS:
        raise ValueError(f"longer than {MAX_HOST_CHARS} characters")
    if "%" in address:
        if not peer:
            raise ValueError("a scope id (%...) never matches a connection")
        address = address.split("%", 1)[0]
    parsed = ipaddress.ip_address(address)
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
        return str(parsed.ipv4_mapped)
    return str(parsed)


def check_host(host: str) -> str:
    """``*``, ``localhost`` or an IP address (returned in :func:`normal_host`'s form)."""
    if host in (WILDCARD, UNIX_HOST):
        return host
    try:
        return normal_host(host)
    except ValueError as e:
        raise ValueError(f"host {host[:60]!r}: expected *, {UNIX_HOST} (Unix sockets) "
                         f"or an IP address ({e})") from None


def check_resource_name(resource_type: ResourceType, name: str, pattern: PatternType) -> str:
    if resource_type is ResourceType.CLUSTER:
        if name != CLUSTER_NAME or pattern is not PatternType.LITERAL:
            raise ValueError(f"the Cluster resource is the literal {CLUSTER_NAME!r}")
        return name
    if not name:
        raise ValueError(f"a {resource_type.title} name is empty")
    if len(name.encode("utf-8", "surrogatepass")) > MAX_RESOURCE_BYTES:
        raise ValueError(f"{resource_type.title} {name[:40]}...: longer than "
                         f"{MAX_RESOURCE_BYTES} bytes")
    if has_control(name):
        raise ValueError(f"{resource_type.title} {name[:40]!r}: holds a control character")
    if pattern is PatternType.PREFIXED and name == WILDCARD:
        raise ValueError(f"a prefix of {WILDCARD!r}: use the literal {WILDCARD!r} for every "
                         f"{resource_type.title}")
    return name


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    """One rule. Build it with :meth:`checked` (or :func:`binding_from_json`)."""

    resource_type: ResourceType
    name: str
    pattern: PatternType
    principal: Principal
    host: str
    operation: Operation
    permission: Permission

    @classmethod
    def checked(cls, resource_type: ResourceType, name: str, pattern: PatternType,
                principal: Principal, host: str, operation: Operation,
                permission: Permission) -> AclBinding:
        if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise ValueError(f"pattern type {pattern.title}: a binding is Literal or Prefixed")
        if permission not in (Permission.ALLOW, Permission.DENY):
            raise ValueError(f"permission type {permission.title}: a binding is Allow or Deny")
        if operation is not Operation.ALL and operation not in OPERATIONS[resource_type]:
            allowed = ", ".join(sorted(o.title for o in OPERATIONS[resource_type]))
            raise ValueError(f"operation {operation.title} on a {resource_type.title}: "
                             f"expected All or one of {allowed}")
        name = check_resource_name(resource_type, name, pattern)
        principal = Principal.checked(principal.type, principal.name)
        return cls(resource_type, name, pattern, principal, check_host(host), operation,
                   permission)

    def describe(self) -> str:
        """One line for people: ``Allow User:alice from * Read Topic:orders (literal)``."""
        return (f"{self.permission.title} {self.principal} from {self.host} "
                f"{self.operation.title} {self.resource_type.title}:{self.name} "
                f"({self.pattern.title.lower()})")


def binding_to_json(binding: AclBinding) -> dict:
    return {"resourceType": binding.resource_type.title, "name": binding.name,
            "patternType": binding.pattern.title, "principal": str(binding.principal),
            "host": binding.host, "operation": binding.operation.title,
            "permissionType": binding.permission.title}


def binding_from_json(document) -> AclBinding:
    """The binding a JSON object describes; ValueError naming the first bad field."""
    if not isinstance(document, dict):
        raise ValueError("an ACL entry is not a JSON object")
    fields = ("resourceType", "name", "patternType", "principal", "host", "operation",
              "permissionType")
    for field in fields:
        if not isinstance(document.get(field), str):
            raise ValueError(f"an ACL entry's {field!r} is missing or not a string")
    unknown = sorted(set(document) - set(fields))
    if unknown:
        raise ValueError(f"an ACL entry has an unknown field {unknown[0][:40]!r}")
    return AclBinding.checked(resource_type_named(document["resourceType"]), document["name"],
                              pattern_named(document["patternType"]),
                              Principal.parse(document["principal"]), document["host"],
                              operation_named(document["operation"]),
                              permission_named(document["permissionType"]))


@dataclasses.dataclass(frozen=True, slots=True)
class AclFilter:
    """Selects bindings: each field None matches anything. ``pattern`` ANY
    takes both kinds of names; MATCH (with a ``name``) takes every binding
    that would apply to that resource: its literal name, the literal ``*``
    and every prefix of it; LITERAL and PREFIXED only their own kind."""

    resource_type: ResourceType | None = None
    name: str | None = None
    pattern: PatternType = PatternType.ANY
    principal: Principal | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type is not None and b.resource_type is not self.resource_type:
            return False
        if self.principal is not None and b.principal != self.principal:
            return False
        if self.host is not None and b.host != self.host:
            return False
        if self.operation is not Operation.ANY and b.operation is not self.operation:
            return False
        if self.permission is not Permission.ANY and b.permission is not self.permission:
            return False
        if self.pattern is PatternType.MATCH:
            if self.name is None:
                return True
            if b.pattern is PatternType.LITERAL:
                return b.name in (self.name, WILDCARD)
            return self.name.startswith(b.name)
        if self.pattern is not PatternType.ANY and b.pattern is not self.pattern:
            return False
        return self.name is None or b.name == self.name


class BindingIndex:
    """The bindings by resource name and by principal, so a filter naming one
    looks at those only (a MATCH filter at its name, ``*`` and those of its
    prefixes as long as a PREFIXED binding's name)."""

    def __init__(self, bindings: Iterable[AclBinding]):
        self.bindings = sorted(bindings)
        self.by_name: dict[str, list[AclBinding]] = defaultdict(list)
        self.by_principal: dict[Principal, list[AclBinding]] = defaultdict(list)
        lengths = set()
        for b in self.bindings:
            self.by_name[b.name].append(b)
            self.by_principal[b.principal].append(b)
            if b.pattern is PatternType.PREFIXED:
                lengths.add(len(b.name))
        self.prefix_lengths = sorted(lengths)

    def names(self, f: AclFilter) -> list[str]:
        """The names a filter naming one looks at (at most one more than the
        distinct lengths of the PREFIXED bindings' names, and ``*``)."""
        if f.pattern is not PatternType.MATCH:
            return [f.name]
        names = {f.name[:n] for n in self.prefix_lengths if n < len(f.name)}
        return sorted(names | {f.name, WILDCARD})

    def candidates(self, f: AclFilter) -> list[AclBinding]:
        if f.name is not None:
            if f.pattern is PatternType.MATCH:
                return [b for n in self.names(f) for b in self.by_name.get(n, ())]
            return self.by_name.get(f.name, [])
        if f.principal is not None:
            return self.by_principal.get(f.principal, [])
        return self.bindings
