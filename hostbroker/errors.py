"""Wire error codes, the exception hierarchy that carries them, and exit statuses.

Every error the broker can put on the wire is an :class:`ErrorCode`
(docs/spec/protocol.md, "Error codes"). Code that detects a problem raises a
:class:`HostbrokerError` subclass with the code attached; whoever answers the
request turns it into the code. :class:`ExitStatus` is what the ``hostbroker``
command exits with; a service manager tells a refusal from a crash by it.
Nothing here does I/O.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    UNKNOWN = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    INVALID_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    MESSAGE_TOO_LARGE = 5
    REQUEST_TIMED_OUT = 6
    INVALID_REQUEST = 7
    UNSUPPORTED_VERSION = 8
    TOPIC_ALREADY_EXISTS = 9
    INVALID_TOPIC = 10
    NOT_AUTHORIZED = 11
    STORAGE_ERROR = 12
    BROKER_NOT_AVAILABLE = 13
    REQUEST_TOO_LARGE = 14
    INVALID_CONFIG = 15
    # consumer group coordination (docs/spec/groups.md)
    UNKNOWN_MEMBER_ID = 16
    ILLEGAL_GENERATION = 17
    REBALANCE_IN_PROGRESS = 18
    INVALID_SESSION_TIMEOUT = 19
    GROUP_TOO_LARGE = 20
    TOO_MANY_GROUPS = 21
    # replication (docs/spec/protocol.md, "Replication")
    NOT_LEADER_FOR_PARTITION = 22
    NOT_ENOUGH_REPLICAS = 23
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 24
    STALE_CONTROLLER_EPOCH = 25
    FENCED_LEADER_EPOCH = 26
    LEADER_NOT_AVAILABLE = 27
    REPLICA_NOT_AVAILABLE = 28
    CONTROLLER_NOT_CONFIRMED = 29
    # replicas across log dirs (docs/spec/protocol.md, "Replicas across log dirs")
    INVALID_REPLICATION_FACTOR = 30
    LOG_DIR_NOT_FOUND = 31
    # changing a topic (docs/spec/protocol.md, "ALTER_TOPIC (19)")
    INVALID_PARTITIONS = 32
    # access control (docs/spec/protocol.md, "Access control")
    TOPIC_AUTHORIZATION_FAILED = 33
    GROUP_AUTHORIZATION_FAILED = 34
    CLUSTER_AUTHORIZATION_FAILED = 35


class HostbrokerError(Exception):
    """Base of every error we raise on purpose; ``code`` is its wire code."""

    code: ErrorCode = ErrorCode.UNKNOWN

    def __init__(self, message: str = "", code: ErrorCode | None = None):
        super().__init__(message or self.__class__.__name__)
        if code is not None:
            self.code = ErrorCode(code)


class ProtocolError(HostbrokerError):
    """Bytes that do not decode as our protocol. The connection must close."""

    code = ErrorCode.INVALID_REQUEST


class InvalidMessageError(HostbrokerError):
    """An entry breaks a rule of docs/spec/log-format.md (length, magic, attributes, CRC)."""

    code = ErrorCode.INVALID_MESSAGE


class MessageTooLargeError(HostbrokerError):
    """An entry is longer than the partition's max.message.bytes."""

    code = ErrorCode.MESSAGE_TOO_LARGE


class OffsetOutOfRangeError(HostbrokerError):
    code = ErrorCode.OFFSET_OUT_OF_RANGE


class InvalidTopicError(HostbrokerError):
    code = ErrorCode.INVALID_TOPIC


class ConfigError(HostbrokerError):
    """A configuration key or value that cannot be used."""

    code = ErrorCode.INVALID_CONFIG


class StorageError(HostbrokerError):
    """A log dir (disk) failed; its partitions are offline."""

    code = ErrorCode.STORAGE_ERROR


class ExitStatus(enum.IntEnum):
    """Exit statuses of ``hostbroker`` (``serve`` uses all four)."""

    OK = 0
    CRASHED = 1  # an unexpected error: Python's own status for an uncaught exception
    USAGE = 2  # a bad command line or configuration value: one line says which
    REFUSED = 78  # EX_CONFIG: the machine refuses this configuration (log dir unusable,
    #               listener busy, log dirs held by another broker, a worker cannot boot)
