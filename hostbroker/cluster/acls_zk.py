"""The ACLs and quotas of a cluster in ZooKeeper: their paths and the values stored there.

Kafka's layout (docs/spec/zookeeper.md, "Access control")::

    /kafka-acl/[Topic|Group|Cluster]/[name]                    {"version":1,"acls":[...]}
    /kafka-acl-extended/prefixed/[Topic|Group|Cluster]/[name]  {"version":1,"acls":[...]}
    /kafka-acl-changes/acl_changes_NNNNNNNNNN                  "Topic:orders"
    /kafka-acl-extended-changes/acl_changes_NNNNNNNNNN         {"version":1,"resourceType":...}
    /config/users/[sanitized user name | <default>]            {"version":1,"config":{...}}
    /config/changes/config_change_NNNNNNNNNN                   {"version":2,"entity_path":..}

One ACL node per resource pattern holds every binding of it, each entry
``{"principal": "User:alice", "permissionType": "Allow", "operation":
"Read", "host": "*"}``; the Cluster resource is ``kafka-cluster``. A quota
node holds a user's bounds as decimal strings (``"producer_byte_rate":
"1048576"``). A user's name in a path is sanitized as Kafka sanitizes it
(percent-encoded, so ``/`` and ``:`` cannot split or forge a path).

Every value read is hostile: :func:`decode_acl_node` and
:func:`decode_quota_node` check the size (``zookeeper.max.node.bytes``),
the JSON depth, the shape, every field, and the count of bindings
(``acl.max.bindings``) before anything is built, and raise
:class:`ValueError` with one line naming the path.

Pure: no I/O (the reads and writes are :mod:`.acls_zk_store`'s).
"""

from __future__ import annotations

import json
import urllib.parse

from hostbroker.cluster.zkread import DEFAULT, Bounds, check_size, json_object
from hostbroker.security.acl import (
    AclBinding,
    PatternType,
    ResourceType,
    check_resource_name,
    operation_named,
    pattern_named,
    permission_named,
    resource_type_named,
)
from hostbroker.security.principals import Principal
from hostbroker.security.quota import DEFAULT_ENTITY, QUOTA_KEYS, Quota, check_bound

LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
PREFIXED_CHANGES = "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"
USERS_ROOT = "/config/users"
CONFIG_CHANGES = "/config/changes"  # shared with the topics' config changes (topic_changes.py)
CONFIG_CHANGE_PREFIX = "config_change_"
USER_TYPE = "User"  # the principal type quotas are kept for in ZooKeeper (Kafka's users)

ROOTS = {PatternType.LITERAL: LITERAL_ROOT, PatternType.PREFIXED: PREFIXED_ROOT}
CHANGES = {PatternType.LITERAL: LITERAL_CHANGES, PatternType.PREFIXED: PREFIXED_CHANGES}
ENTRY_FIELDS = ("principal", "permissionType", "operation", "host")
_NOT_IN_NODE_NAMES = "/"


def _zookeeper_unfit(name: str) -> str | None:
    """Why ZooKeeper cannot hold ``name`` as one node name, or None."""
    if name in (".", ".."):
        return "is a name ZooKeeper reserves"
    if _NOT_IN_NODE_NAMES in name:
        return "holds a '/'"
    for c in name:
        o = ord(c)
        if o <= 0x1F or 0x7F <= o <= 0x9F or 0xD800 <= o <= 0xF8FF or o >= 0xFFF0:
            return f"holds the character U+{o:04X}, which ZooKeeper refuses in a path"
    return None


def resource_path(resource_type: ResourceType, name: str, pattern: PatternType) -> str:
    """The node of a resource pattern; ValueError (one line) for a name ZooKeeper
    cannot hold as a node (a ``/``, ``.``, ``..``, characters it refuses)."""
    if pattern not in ROOTS:
        raise ValueError(f"pattern type {pattern.title}: a binding is Literal or Prefixed")
    name = check_resource_name(resource_type, name, pattern)
    unfit = _zookeeper_unfit(name)
    if unfit:
        raise ValueError(f"{resource_type.title} {name[:60]!r} {unfit}: it cannot be an "
                         "ACL node in ZooKeeper")
    return f"{ROOTS[pattern]}/{resource_type.title}/{name}"


def type_root(pattern: PatternType, resource_type: ResourceType) -> str:
    """The node whose children are the resources of one type and pattern."""
    return f"{ROOTS[pattern]}/{resource_type.title}"


def type_roots() -> list[tuple[str, PatternType, ResourceType]]:
    """The six nodes whose children are ACL nodes, with what their children are."""
    return [(type_root(p, t), p, t) for p in ROOTS for t in ResourceType]


def resource_of(pattern: PatternType, type_title: str,
                name: str) -> tuple[ResourceType, str, PatternType]:
    """The resource pattern a node names (read from ZooKeeper: hostile);
    ValueError naming it when it names none."""
    resource_type = resource_type_named(type_title)
    return resource_type, check_resource_name(resource_type, name, pattern), pattern


# -- ACL nodes -------------------------------------------------------------------------

def encode_acl_node(bindings) -> bytes:
    """The value of one resource's node: its bindings' entries, sorted (each once)."""
    entries = [{"principal": str(b.principal), "permissionType": b.permission.title,
                "operation": b.operation.title, "host": b.host}
               for b in sorted(set(bindings))]
    return json.dumps({"version": 1, "acls": entries}, separators=(",", ":")).encode()


def decode_acl_node(data: bytes, path: str, resource: tuple[ResourceType, str, PatternType],
                    bounds: Bounds = DEFAULT, max_bindings: int = 100_000) -> list[AclBinding]:
    """The bindings the node ``path`` of ``resource`` holds; ValueError (one line
    naming ``path``) for a value too long, not JSON, another version, or any
    entry that is not a binding."""
    document = json_object(data, path, bounds, "an ACL node")
    if document.get("version") != 1 or not isinstance(document.get("acls"), list):
        raise ValueError(f'{path}: expected {{"version":1,"acls":[...]}}')
    entries = document["acls"]
    if len(entries) > max_bindings:
        raise ValueError(f"{path}: {len(entries)} ACLs, more than acl.max.bindings "
                         f"({max_bindings})")
    resource_type, name, pattern = resource
    bindings = []
    for i, entry in enumerate(entries):
        try:
            if not isinstance(entry, dict):
                raise ValueError("not a JSON object")
            for field in ENTRY_FIELDS:
                if not isinstance(entry.get(field), str):
                    raise ValueError(f"{field!r} is missing or not a string")
            unknown = sorted(set(entry) - set(ENTRY_FIELDS))
            if unknown:
                raise ValueError(f"unknown field {unknown[0][:40]!r}")
            bindings.append(AclBinding.checked(
                resource_type, name, pattern, Principal.parse(entry["principal"]),
                entry["host"], operation_named(entry["operation"]),
                permission_named(entry["permissionType"])))
        except ValueError as exc:
            raise ValueError(f"{path}: ACL {i}: {exc}") from None
    return sorted(set(bindings))


def encode_acl_change(resource_type: ResourceType, name: str, pattern: PatternType) -> bytes:
    """A change notice's value, Kafka's: ``Topic:orders`` for a literal name,
    ``{"version":1,"resourceType":"TOPIC","name":"app-","patternType":"PREFIXED"}``
    for a prefix."""
    if pattern is PatternType.LITERAL:
        return f"{resource_type.title}:{name}".encode()
    return json.dumps({"version": 1, "resourceType": resource_type.name, "name": name,
                       "patternType": pattern.name}, separators=(",", ":")).encode()


def decode_acl_change(data: bytes, path: str, bounds: Bounds = DEFAULT) -> str:
    """The ACL node a change notice names (hostile: it only says which node to
    read again); ValueError (one line naming ``path``) when it names none."""
    try:
        if data[:1] == b"{":
            document = json_object(data, path, bounds, "an ACL change notice")
            fields = [document.get(k) for k in ("resourceType", "name", "patternType")]
            if document.get("version") != 1 or not all(isinstance(f, str) for f in fields):
                raise ValueError("expected version 1, resourceType, name and patternType")
            kind, name, pattern = fields[0], fields[1], pattern_named(fields[2])
        else:
            check_size(data, path, bounds)
            kind, colon, name = data.decode().partition(":")
            if not colon:
                raise ValueError("expected Type:name")
            pattern = PatternType.LITERAL
        return resource_path(resource_type_named(kind), name, pattern)
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text") from None
    except ValueError as exc:
        text = str(exc)
        raise ValueError(text if text.startswith(path) else f"{path}: {text[:200]}") from None


# -- quota nodes -----------------------------------------------------------------------

def sanitize(user: str) -> str:
    """A user's name as a node name: percent-encoded as Kafka's sanitizer does
    (letters, digits, ``.``, ``-`` and ``_`` kept, everything else ``%XX`` of
    its UTF-8 bytes)."""
    return urllib.parse.quote(user, safe="").replace("~", "%7E")


def desanitize(node: str) -> str:
    return urllib.parse.unquote(node, errors="strict")


def quota_node_name(entity: str) -> str:
    """The node name of a quota entity: ``<default>`` or a ``User:`` principal's
    sanitized name; ValueError for another principal type (ZooKeeper keeps
    users' quotas only, as Kafka's ``/config/users``)."""
    if entity == DEFAULT_ENTITY:
        return DEFAULT_ENTITY
    principal = Principal.parse(entity)
    if principal.type != USER_TYPE:
        raise ValueError(f"quotas of {str(principal)[:60]}: a cluster keeps quotas of "
                         f"{USER_TYPE}: principals and {DEFAULT_ENTITY} only")
    return sanitize(principal.name)


def quota_path(entity: str) -> str:
    return f"{USERS_ROOT}/{quota_node_name(entity)}"


def entity_of(node: str) -> str:
    """The quota entity a node of ``/config/users`` names (hostile); ValueError."""
    if node == DEFAULT_ENTITY:
        return DEFAULT_ENTITY
    try:
        name = desanitize(node)
    except UnicodeDecodeError:
        raise ValueError(f"{USERS_ROOT}/{node[:60]}: not a sanitized user name") from None
    if sanitize(name) != node:  # one spelling of each name: no two nodes of one user
        raise ValueError(f"{USERS_ROOT}/{node[:60]}: not a sanitized user name")
    return str(Principal.checked(USER_TYPE, name))


def encode_quota_node(quota: Quota) -> bytes:
    config = {k: str(v) for k, v in quota.as_dict().items()}
    return json.dumps({"version": 1, "config": config}, separators=(",", ":"),
                      sort_keys=True).encode()


def decode_quota_node(data: bytes, path: str,
                      bounds: Bounds = DEFAULT) -> tuple[Quota, list[str]]:
    """The bounds a quota node holds and the keys it holds that are not ours
    (Kafka's ``request_percentage``...: left out); ValueError (one line naming
    ``path``) for anything else wrong."""
    document = json_object(data, path, bounds, "a quota node")
    if document.get("version") != 1 or not isinstance(document.get("config"), dict):
        raise ValueError(f'{path}: expected {{"version":1,"config":{{...}}}}')
    values, other = {}, []
    for key, value in document["config"].items():
        if key not in QUOTA_KEYS:
            other.append(key)
            continue
        if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 20:
            value = int(value)
        try:
            check_bound(key, value)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
        values[key] = value
    return Quota().merged(values), sorted(other)


def encode_quota_change(entity: str) -> bytes:
    """A ``/config/changes`` notice of a user's quotas (Kafka's version 2)."""
    return json.dumps({"version": 2, "entity_path": f"users/{quota_node_name(entity)}"},
                      separators=(",", ":")).encode()


def decode_quota_change(data: bytes, path: str, bounds: Bounds = DEFAULT) -> str | None:
    """The ``/config/users`` node a ``/config/changes`` notice names; None for a
    notice of anything else (a topic's config) or one that cannot be read
    (hostile: it only says which node to read again)."""
    try:
        document = json_object(data, path, bounds, "a config change notice")
    except ValueError:
        return None
    entity_path = document.get("entity_path")
    if document.get("version") != 2 or not isinstance(entity_path, str):
        return None
    kind, slash, node = entity_path.partition("/")
    if kind != "users" or not slash or not node or _zookeeper_unfit(node):
        return None
    return node

