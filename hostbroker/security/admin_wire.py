"""The access control admin requests' entries between the wire
(:mod:`hostbroker.protocol.acls`) and the model (:mod:`.acl`, :mod:`.quota`):
a CREATE_ACLS entry as a checked binding, a filter as an :class:`AclFilter`,
a quota entity's name, the bytes an entry takes in an answer, and an
answer's messages fitted to its bound (:func:`fit_messages`). Used by the
handler that answers them and by the ``acls`` and ``quotas`` commands, which
check what a broker sends as any input.

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses

from hostbroker.protocol import acls as wire
from hostbroker.security.acl import (
    MAX_RESOURCE_BYTES,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    check_host,
)
from hostbroker.security.principals import Principal
from hostbroker.security.quota import DEFAULT_ENTITY


def binding_of(entry: wire.AclEntry) -> AclBinding:
    """The binding a CREATE_ACLS entry asks for; ValueError naming what is wrong."""
    return AclBinding.checked(ResourceType(entry.resource_type), entry.resource_name,
                              PatternType(entry.pattern_type), Principal.parse(entry.principal),
                              entry.host, Operation(entry.operation),
                              Permission(entry.permission_type))


def entry_of(b: AclBinding) -> wire.AclEntry:
    return wire.AclEntry(int(b.resource_type), b.name, int(b.pattern), str(b.principal),
                         b.host, int(b.operation), int(b.permission))


def filter_of(entry: wire.AclFilterEntry) -> AclFilter:
    """The filter a wire filter is; ValueError naming what is wrong."""
    pattern = PatternType(entry.pattern_type)
    name = entry.resource_name
    if name is not None and not 0 < len(name.encode("utf-8", "surrogatepass")) \
            <= MAX_RESOURCE_BYTES:
        raise ValueError(f"resource name {name[:40]!r}: 1 to {MAX_RESOURCE_BYTES} bytes")
    return AclFilter(
        resource_type=(None if entry.resource_type == wire.ANY
                       else ResourceType(entry.resource_type)),
        name=name, pattern=pattern,
        principal=None if entry.principal is None else Principal.parse(entry.principal),
        host=None if entry.host is None else check_host(entry.host),
        operation=Operation(entry.operation), permission=Permission(entry.permission_type))


def entry_bytes(entry: wire.AclEntry) -> int:
    """The bytes ``entry`` takes in an answer."""
    return (10 + len(entry.resource_name.encode("utf-8", "surrogatepass"))
            + len(entry.principal.encode("utf-8", "surrogatepass"))
            + len(entry.host.encode("utf-8", "surrogatepass")))


def quota_entity_bytes(entity: wire.QuotaEntity) -> int:
    """The bytes ``entity`` takes in an answer: its name (2 + n), its count
    of values (4), each value's key (2 + n) and number (8)."""
    return (6 + len(entity.entity.encode("utf-8", "surrogatepass"))
            + sum(10 + len(q.key.encode("utf-8", "surrogatepass")) for q in entity.quotas))


def entity_named(text: str) -> str:
    """A quota entity: ``<default>`` or a user principal (``User:alice``; a
    connection's quotas are its principal's, never its groups'); ValueError."""
    if text == DEFAULT_ENTITY:
        return text
    try:
        principal = Principal.parse(text)
    except ValueError as e:
        raise ValueError(f"quota entity: {e} (or {DEFAULT_ENTITY})") from None
    if principal.type != "User":
        raise ValueError(f"quota entity {text[:80]!r}: quotas are a User's (or "
                         f"{DEFAULT_ENTITY}); a {principal.type}'s would never apply")
    return str(principal)


def fit_messages(results: list, budget: int, fixed: int = 4) -> list:
    """``results`` (each with ``error_message``; ``fixed`` bytes each besides
    it) whose messages past ``budget`` bytes are dropped (the codes stay), so
    an answer of many refusals is never too large to send."""
    used = fixed * len(results)
    fitted = []
    for r in results:
        size = len(r.error_message.encode("utf-8", "surrogatepass")) if r.error_message else 0
        if r.error_message and used + size > budget:
            r = dataclasses.replace(r, error_message=None)
        else:
            used += size
        fitted.append(r)
    return fitted
