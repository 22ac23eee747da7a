"""Codecs of access control (docs/spec/protocol.md, "Access control"):
CREATE_ACLS (22), DELETE_ACLS (23), DESCRIBE_ACLS (24), ALTER_QUOTAS (25),
DESCRIBE_QUOTAS (26) and WHOAMI (27), all ``api_version`` 0.

A binding travels as seven fields, Kafka's: ``resource_type`` (2 Topic,
3 Group, 4 Cluster; a filter's 1 is any), ``resource_name``,
``pattern_type`` (3 literal, 4 prefixed; a filter's 1 any, 2 match),
``principal`` (``User:alice``), ``host``, ``operation`` (2 All, 3 Read,
4 Write, 5 Create, 6 Delete, 7 Alter, 8 Describe, 9 ClusterAction; a
filter's 1 any) and ``permission_type`` (2 Deny, 3 Allow; a filter's 1 any).
A filter's strings are nullable (null: any).

Quotas travel per entity (a principal, or ``<default>``): each change a key
(``producer_byte_rate``, ``consumer_byte_rate``, ``request_rate``) and a
value in units per second, or :data:`REMOVE` to drop that bound.

Pure. The codec checks only the shape (enum values in range); whether a
binding makes sense (Write on a Group, a host that is no address) is the
broker's to answer per entry with INVALID_REQUEST and a message, through
:mod:`hostbroker.security.acl`, so one bad entry does not refuse the others.
"""

from __future__ import annotations

from typing import ClassVar

from hostbroker.errors import ErrorCode, ProtocolError
from hostbroker.protocol import api
from hostbroker.protocol.primitives import Buffer
from hostbroker.protocol.schema import (Array, ErrorCodeField, Int8, Int64, NullableString,
                                        String, wire_record)

CREATE_ACLS = 22
DELETE_ACLS = 23
DESCRIBE_ACLS = 24
ALTER_QUOTAS = 25
DESCRIBE_QUOTAS = 26
WHOAMI = 27
VERSION = 0

REMOVE = -1  # ALTER_QUOTAS: the key's bound goes
ANY = 1  # a filter's enum value that matches every one
# (lowest, highest) of each enum field: in a binding, and in a filter (where 1 is any
# and, for pattern_type, 2 is match)
_BINDING_RANGES = {"resource_type": (2, 4), "pattern_type": (3, 4), "operation": (2, 9),
                   "permission_type": (2, 3)}
_FILTER_RANGES = {"resource_type": (1, 4), "pattern_type": (1, 4), "operation": (1, 9),
                  "permission_type": (1, 3)}


def _check_enums(entry, ranges: dict, what: str) -> None:
    for field, (low, high) in ranges.items():
        value = getattr(entry, field)
        if not low <= value <= high:
            raise ProtocolError(f"{what} {field} {value} is not one of {low}..{high}")


@wire_record
class AclEntry:
    """One binding, as created and as described."""

    resource_type: Int8
    resource_name: String
    pattern_type: Int8
    principal: String
    host: String
    operation: Int8
    permission_type: Int8


@wire_record
class AclFilterEntry:
    resource_type: Int8 = ANY
    resource_name: NullableString = None
    pattern_type: Int8 = ANY
    principal: NullableString = None
    host: NullableString = None
    operation: Int8 = ANY
    permission_type: Int8 = ANY


@wire_record
class EntryResult:
    error_code: ErrorCodeField
    error_message: NullableString = None


# CREATE_ACLS (22)

@wire_record
class CreateAclsRequest:
    """Add ``creations`` (one answer each, in order; a binding already held is NONE)."""

    API_KEY: ClassVar[int] = CREATE_ACLS
    API_VERSION: ClassVar[int] = VERSION
    creations: Array[AclEntry]

    def check(self) -> None:
        for entry in self.creations:
            _check_enums(entry, _BINDING_RANGES, "CREATE_ACLS")


@wire_record
class CreateAclsResponse:
    results: Array[EntryResult]


# DELETE_ACLS (23)

@wire_record
class DeleteAclsRequest:
    """Remove every binding each filter matches (an AclFilterEntry of all ANY and
    nulls matches every binding)."""

    API_KEY: ClassVar[int] = DELETE_ACLS
    API_VERSION: ClassVar[int] = VERSION
    filters: Array[AclFilterEntry]

    def check(self) -> None:
        for entry in self.filters:
            _check_enums(entry, _FILTER_RANGES, "DELETE_ACLS")


@wire_record
class DeleteAclsFilterResult:
    error_code: ErrorCodeField
    error_message: NullableString = None
    deleted: Array[AclEntry] = ()


@wire_record
class DeleteAclsResponse:
    results: Array[DeleteAclsFilterResult]


# DESCRIBE_ACLS (24)

@wire_record
class DescribeAclsRequest:
    API_KEY: ClassVar[int] = DESCRIBE_ACLS
    API_VERSION: ClassVar[int] = VERSION
    filter: AclFilterEntry = AclFilterEntry()

    def check(self) -> None:
        _check_enums(self.filter, _FILTER_RANGES, "DESCRIBE_ACLS")


@wire_record
class DescribeAclsResponse:
    """The bindings the filter matches, sorted; cut to what fits the answer
    bound with ``truncated`` 1."""

    error_code: ErrorCodeField
    error_message: NullableString = None
    acls: Array[AclEntry] = ()
    truncated: Int8 = 0


# ALTER_QUOTAS (25)

@wire_record
class QuotaValue:
    key: String
    value: Int64


@wire_record
class QuotaEntity:
    entity: String
    quotas: Array[QuotaValue] = ()


@wire_record
class AlterQuotasRequest:
    """Set or (``value`` :data:`REMOVE`) drop bounds of each entity; one answer
    per entity, in order."""

    API_KEY: ClassVar[int] = ALTER_QUOTAS
    API_VERSION: ClassVar[int] = VERSION
    entities: Array[QuotaEntity]

    def check(self) -> None:
        return None


@wire_record
class AlterQuotasResponse:
    results: Array[EntryResult]


# DESCRIBE_QUOTAS (26)

@wire_record
class DescribeQuotasRequest:
    """The bounds of ``entities`` (empty: of every entity that has any)."""

    API_KEY: ClassVar[int] = DESCRIBE_QUOTAS
    API_VERSION: ClassVar[int] = VERSION
    entities: Array[String] = ()

    def check(self) -> None:
        return None


@wire_record
class DescribeQuotasResponse:
    error_code: ErrorCodeField
    entities: Array[QuotaEntity] = ()
    truncated: Int8 = 0


# WHOAMI (27)

@wire_record
class WhoamiRequest:
    API_KEY: ClassVar[int] = WHOAMI
    API_VERSION: ClassVar[int] = VERSION

    def check(self) -> None:
        return None


@wire_record
class WhoamiResponse:
    """The principal, groups and host the broker sees on this connection,
    and whether the authorizer is on."""

    principal: String
    groups: Array[String] = ()
    host: String = ""
    authorizer: Int8 = 0


ACLS_REQUEST_TYPES: dict[tuple[int, int], type] = {
    (cls.API_KEY, cls.API_VERSION): cls
    for cls in (CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest, AlterQuotasRequest,
                DescribeQuotasRequest, WhoamiRequest)
}
ACLS_RESPONSE_TYPES: dict[tuple[int, int], type] = {
    (CREATE_ACLS, VERSION): CreateAclsResponse,
    (DELETE_ACLS, VERSION): DeleteAclsResponse,
    (DESCRIBE_ACLS, VERSION): DescribeAclsResponse,
    (ALTER_QUOTAS, VERSION): AlterQuotasResponse,
    (DESCRIBE_QUOTAS, VERSION): DescribeQuotasResponse,
    (WHOAMI, VERSION): WhoamiResponse,
}


def decode_request(frame: Buffer, max_entries: int | None = None):
    """Header and body of a request of this module (frame without size prefix),
    checked; another key or version is UNSUPPORTED_VERSION, a bad value
    INVALID_REQUEST, both as :class:`ProtocolError`."""
    header = api.decode_request_header(frame)
    request_type = ACLS_REQUEST_TYPES.get((header.api_key, header.api_version))
    if request_type is None:
        raise ProtocolError(f"no access control request has api_key {header.api_key} "
                            f"version {header.api_version}", code=ErrorCode.UNSUPPORTED_VERSION)
    request = api.decode_body(request_type, frame, header.body_offset, max_entries)
    request.check()
    return header, request


def decode_response(frame: Buffer, cls: type):
    """``(correlation_id, body)`` of a response frame decoded as ``cls``."""
    if cls not in ACLS_RESPONSE_TYPES.values():
        raise ValueError(f"{cls!r} is not an access control response")
    return api.decode_response_as(cls, frame)
