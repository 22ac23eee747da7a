"""The decision: may this identity do this operation on this resource?

Owns: :class:`Authorizer`, built from one ACL set (every binding the broker
holds at one ACL generation), the super users and
``allow.everyone.if.no.acl.found``, and its rule, which is Kafka's:

1. a super user (its principal or one of its groups in ``super.users``) may
   do everything;
2. the bindings that apply to a resource are those of its literal name, of
   the literal ``*`` of its type, and of every prefix of its name
   (PREFIXED); with none, ``allow.everyone.if.no.acl.found`` decides;
3. among them, those whose principal is the identity's, one of its groups
   or ``User:*``, and whose host is the identity's or ``*``: a DENY of the
   operation (or of All) refuses; otherwise an ALLOW of the operation, of All,
   or of an operation that implies it (Read, Write, Delete and Alter imply
   Describe) permits; otherwise refused.

Cost: building indexes the set by resource type, name and principal
(literal names in a dict, prefixes in a dict looked up at each distinct
prefix length held; within each, the bindings by principal), so a decision
reads only the bindings of the identity's principals (its user, its groups,
``User:*``) on the names that apply: a few dict reads per prefix length and
principal, whatever the size of the set or how many other principals share
the name. Decisions are also remembered (``cache_entries`` of them,
forgotten all at once past that). An Authorizer never changes: a new ACL generation
builds a new one.

Pure: no I/O.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from hostbroker.security.acl import (IMPLIES, WILDCARD, AclBinding, Operation, PatternType,
                                     Permission, ResourceType)
from hostbroker.security.principals import EVERYONE, Identity, Principal

DEFAULT_CACHE_ENTRIES = 100_000


def parse_super_users(text: str) -> frozenset[Principal]:
    """``super.users``: principals separated by ``;`` (Kafka's form), blanks ignored."""
    return frozenset(Principal.parse(part.strip()) for part in text.split(";") if part.strip())


class _Bindings:
    """The bindings of one resource type: by literal name and by prefix, and
    within each name or prefix by principal (so a decision reads only the
    bindings of the asking identity's principals, however many other
    principals share the name)."""

    def __init__(self):
        self.literal: dict[str, dict[Principal, list[AclBinding]]] = defaultdict(
            lambda: defaultdict(list))
        self.prefixed: dict[str, dict[Principal, list[AclBinding]]] = defaultdict(
            lambda: defaultdict(list))
        self.prefix_lengths: tuple[int, ...] = ()  # the lengths of the prefixes held

    def add(self, binding: AclBinding) -> None:
        if binding.pattern is PatternType.PREFIXED:
            self.prefixed[binding.name][binding.principal].append(binding)
            if len(binding.name) not in self.prefix_lengths:
                self.prefix_lengths = tuple(sorted({*self.prefix_lengths, len(binding.name)}))
        else:
            self.literal[binding.name][binding.principal].append(binding)

    def applying_to(self, name: str, whom: frozenset[Principal] | set[Principal]
                    ) -> tuple[bool, list[AclBinding]]:
        """Whether any binding applies to ``name`` (its literal name, the
        literal ``*``, a prefix of it), and those of them whose principal is
        in ``whom``. Cost: a few dict reads per distinct prefix length held
        and per principal of ``whom`` (or of the name, when fewer)."""
        keyed = [self.literal.get(name)]
        if name != WILDCARD:
            keyed.append(self.literal.get(WILDCARD))
        if self.prefixed:
            for length in self.prefix_lengths:
                if length > len(name):
                    break
                keyed.append(self.prefixed.get(name[:length]))
        found = False
        mine: list[AclBinding] = []
        for by_principal in keyed:
            if not by_principal:
                continue
            found = True
            if len(by_principal) < len(whom):
                for principal, bindings in by_principal.items():
                    if principal in whom:
                        mine += bindings
            else:
                for principal in whom:
                    bindings = by_principal.get(principal)
                    if bindings:
                        mine += bindings
        return found, mine


class Authorizer:
    """Decisions over one ACL set (module docstring)."""

    def __init__(self, bindings: Iterable[AclBinding], *, super_users: Iterable[Principal] = (),
                 allow_if_no_acl: bool = False, cache_entries: int = DEFAULT_CACHE_ENTRIES):
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self.cache_entries = cache_entries
        self._types = {t: _Bindings() for t in ResourceType}
        self.count = 0
        for binding in bindings:
            self._types[binding.resource_type].add(binding)
            self.count += 1
        self._cache: dict[tuple, bool] = {}

    def authorize(self, identity: Identity, operation: Operation, resource_type: ResourceType,
                  name: str) -> bool:
        key = (identity, operation, resource_type, name)
        decided = self._cache.get(key)
        if decided is None:
            decided = self._decide(identity, operation, resource_type, name)
            if len(self._cache) >= self.cache_entries:
                self._cache.clear()
            self._cache[key] = decided
        return decided

    def is_super_user(self, identity: Identity) -> bool:
        return any(p in self.super_users for p in identity.principals())

    def _decide(self, identity: Identity, operation: Operation, resource_type: ResourceType,
                name: str) -> bool:
        if self.is_super_user(identity):
            return True
        whom = {*identity.principals(), EVERYONE}
        found, bindings = self._types[resource_type].applying_to(name, whom)
        if not found:
            return self.allow_if_no_acl
        hosts = (WILDCARD, identity.host)
        mine = [b for b in bindings if b.host in hosts]
        if any(b.permission is Permission.DENY and b.operation in (operation, Operation.ALL)
               for b in mine):
            return False
        granting = IMPLIES.get(operation, frozenset({operation})) | {Operation.ALL}
        return any(b.permission is Permission.ALLOW and b.operation in granting for b in mine)
