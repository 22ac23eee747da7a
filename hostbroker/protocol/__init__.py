"""Sans-IO codecs of the hostbroker wire protocol (docs/spec/protocol.md), v0.

Shared by the broker and the clients. Nothing here touches a socket: bytes go
in, frozen dataclasses come out, and back. Message sets stay opaque bytes
(their format belongs to ``hostbroker.log``).

- ``primitives``  Reader and Writer of the wire types
- ``schema``      wire types declared on dataclass fields; codecs derived from them
- ``bodies``      ApiKey and the request and response bodies of every API
- ``api``         whole frames: encode, decode, peek, error frames, fetch header
                  parts; re-exports the bodies and errors as one namespace
- ``groups``      the consumer group APIs (docs/spec/groups.md) and OFFSET_COMMIT v1,
                  decoded by ``groups.decode_any_request`` only
- ``replication`` METADATA v1, FETCH v1, LEADER_AND_ISR, STOP_REPLICA,
                  OFFSET_FOR_LEADER_EPOCH; ``replication.decode_any_request`` decodes all
- ``logdirs``     METADATA v2, CREATE_TOPIC v1, ALTER_REPLICA_DIRS, LOG_DIR_ADMIN
                  (replicas across log dirs), routed by ``replication.decode_any_request``
- ``topics_admin`` ALTER_TOPIC, LIST_OFFSET_GROUPS (changing topics, groups with
                  stored offsets), routed by ``replication.decode_any_request``
- ``acls``        CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS, ALTER_QUOTAS, DESCRIBE_QUOTAS
                  (access control), routed by ``replication.decode_any_request``; WHOAMI
- ``throttled``   PRODUCE v1, FETCH v2 (answers with the time a quota held them),
                  routed by ``replication.decode_any_request``
- ``framing``     FrameReader: a byte stream cut into frames
- ``errors``      HeaderTooShortError, FrameTooLargeError

Every decoding failure is a :class:`hostbroker.errors.ProtocolError` carrying
the wire code to answer with; after one, the connection must close.

This package re-exports ``api`` and ``FrameReader``: ``from hostbroker.protocol
import decode_request`` and ``from hostbroker.protocol import api`` both work.
"""

from hostbroker.protocol import api
from hostbroker.protocol.api import *  # noqa: F403 (the package's public names)
from hostbroker.protocol.framing import DEFAULT_MAX_FRAME_BYTES, FrameReader

__all__ = [*api.__all__, "DEFAULT_MAX_FRAME_BYTES", "FrameReader", "api"]
