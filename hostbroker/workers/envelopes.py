"""Byte layouts of the messages that workers pass each other through rings.

Pure: no I/O. Every message starts with a fixed little-endian header; bulk
data (request frames, message sets) follows as-is so it is never re-encoded.

Processor -> handler (request ring)::

    conn_id:u64  seq:u32  flags:u32  stamp_ns:u64  frame...        (REQ_*)

``frame`` is the request as read off the socket without its size prefix;
``seq`` is its place in the connection's order (every request has one).
``stamp_ns`` (here and in answers) is the sender's ``time.monotonic_ns()``
when it queued the message, one clock for every process of the host: the
receiver adds the time the message waited to its ``wait_ns`` counter.
``REQ_CLOSED`` (no frame) tells the handler a connection is gone.
``REQ_PRINCIPAL`` (sent when the processor takes the connection, before
any of its frames, and again after the handler is replaced) carries, in
place of a frame, the connection's identity
(:func:`encode_principal`: its principal, groups, host and whether it came
over TLS, at most
:data:`MAX_IDENTITY_BYTES`), which the handler keeps until ``REQ_CLOSED``.

Handler -> processor (response ring)::

    conn_id:u64  seq:u32  flags:u32  npieces:u32  stamp_ns:u64  pieces...

each piece ``kind:u8`` then ``len:u32 bytes`` (``PIECE_BYTES``) or
``path_len:u16 path pos:u64 len:u64`` (``PIECE_FILE``, sent with sendfile).
An answer with no pieces gives its place back and sends nothing (a PRODUCE
with acks=0). ``RESP_CLOSE_AFTER`` closes the connection once this answer is
written; ``RESP_CLOSE_NOW`` closes it without writing anything.

Handler -> writer (append ring)::

    op:u8  token:u64  ...   APPEND: slot:u32 index:u32 acks:i16 count:u32 deadline_ms:i64
                                    partition:i32 stamp_ns:u64 name_len:u16 name message_set
                            DELETE / OFFSETS / GROUP: json
                            ALTER_TOPIC: json {"slot","topic","partition",
                                  "partitions" (count or null),"set":{k: v},
                                  "delete":[k]}: one partition of an
                                  ALTER_TOPIC -> json {"error","message"}
                            REF_SYNC: sent:u64 (token = the writer's index): after a
                                      writer was replaced, every APPEND_REF sent
                                      to it before this mark is done with once
                                      the mark comes back
                            POLL: slot:u32 partition:i32 offset:i64 max_bytes:i32
                                  min_bytes:i32 deadline_ms:i64 name_len:u16 name
                                  processor:u16 conn_id:u64 seq:u32 correlation_id:i32
                                  a long-poll FETCH of one partition, for the
                                  writer to answer to that processor

Replication (docs/storage.md, "Replicas"), handler -> writer (append ring)::

    op:u8  token:u64  ...   REPLICA_STATE: json {"slot","topic","partition","role"
                                  ("leader"|"follower"|"stopped"),"leader","leader_epoch",
                                  "isr":[ids],"isr_version","replicas":[ids],"delete",
                                  "config":{...} (the topic's whole config: the
                                  replica's overrides become it; null: kept)},
                                  answered {"error"} on the result ring
                            FOLLOWER_POS: slot:u32 partition:i32 replica_id:i32
                                  leader_epoch:i32 offset:i64 name_len:u16 name
                                  (token 0; not answered): a follower fetched at
                                  ``offset``, so it holds everything below

hb-replica -> writer (``rapp`` ring, replica 0 -> writer w), answered on ``rres``::

    op:u8  token:u64  ...   REPLICA_APPEND: slot:u32 partition:i32 leader_epoch:i32
                                  data_epoch:i32 base_offset:i64 leader_hw:i64
                                  name_len:u16 name message_set
                                  -> op:u8 token:u64 error:i16 log_end:i64
                            TRUNCATE: json {"slot","topic","partition","leader_epoch",
                                  "offset"} -> json {"error","log_end"}
                            RESTART_LOG: json, as TRUNCATE; ``offset`` is the
                                  leader's log start, past the log end
                                  -> json {"error","log_end"}

Replicas across log dirs (docs/storage.md, "Replicas across log dirs"),
hb-logdirs -> writer (``dctl`` ring, logdirs 0 -> writer w), answered on ``dres``::
    op:u8  token:u64  ...   REPLICA_STATE: json, as above, plus "placement": "log_dirs",
                                  "replica_slots": {"<dir id>": slot, ...} (every
                                  replica, its own included), "leader_slot":
                                  slot | -1; "config" is the topic's whole
                                  config, taken by the replica (as from the
                                  controller); ids are log dir ids -> json {"error"}
                            DIR_REOPEN: json {"dir_id"}: an offline writer exits
                                  (EXIT_REOPEN) so that its replacement opens the
                                  dir afresh -> json {"error"} (NONE: it was not
                                  offline, nothing to do)
Handler -> hb-logdirs (``dreq`` ring), answered on ``dans`` with the same token::
    op:u8  token:u64  ...   LOCAL_ADMIN: json {"op": "create"|"delete"|"alter"|
                                  "online"|"forget", ...} -> json {"error",
                                  "message", "results": [[topic, p, code], ...]}
Handler -> coordinator (``capp`` ring): GROUP and OFFSETS json, as above.
GROUP carries a consumer group request for ``hb-coordinator``, which holds
the group state (:mod:`hostbroker.workers.coordinator`); OFFSETS commits
carry the committer's ``(generation, member_id)`` there too, for the fence.
Their results come back on the ``cres`` ring as a writer's do.

An APPEND names the partition (topic and number) besides its slot: the
writer appends only if the slot still holds that partition, since a delete
may free the slot, and a create re-use it, while the append is in the ring.

An APPEND_DIRECT (a PRODUCE of one partition with acks=1) is an APPEND
whose name is followed by where its answer goes,
``processor:u16 conn_id:u64 seq:u32 correlation_id:i32``, before the
message set: the writer answers the client's processor itself, through its
answer ring, and tells the handler it did.

An APPEND_REF / APPEND_DIRECT_REF carries no message set: where its name
(and direct answer) would be followed by the set, it names where the set
lies in the request ring it came in on,
``processor:u16 offset:u32 length:u32 handler_epoch:u64`` (the ring from
that processor to the sending handler; ``handler_epoch`` is the sender's).
The handler keeps those bytes from being reused until the writer's REF_DONE
(sent whatever the acks); the writer appends them from there, and only while
that handler lives (``Ring.hold``; docs/architecture.md, "Large messages").

Writer -> handler (result ring)::

    op:u8  token:u64  ...   APPEND: index:u32 error:i16 base:i64 end:i64
                            APPEND_DIRECT: the same, once the answer is in
                                           the processor's answer ring
                            REF_DONE: index:u32, once an APPEND_REF's set was
                                      appended (or refused): its bytes are free
                            REF_SYNC: the handler's mark, sent back as it came
                            POLL_DONE: the writer answered that POLL itself
                            POLL_BACK: it gives the POLL back, unanswered
                            DELETE / OFFSETS / GROUP: json

Writer -> processor (answer ring): a response message as above (the
PRODUCE answer of an APPEND_DIRECT or a PUT); coordinator -> processor
(``cans`` ring): the same, the answer of a GROUP_PUT.

Processor -> writer (put ring): a PUT, laid out as an APPEND_DIRECT with
token 0, index 0, acks 1 and count 0: a lone PRODUCE of one partition that
no handler has seen. The writer checks its message set as a handler would
(``count`` is what that finds) and answers the processor itself.

Processor -> coordinator (``cput`` ring): a GROUP_PUT, ``op:u8 token:u64=0
processor:u16 conn_id:u64 seq:u32 correlation_id:i32`` and json, an
OFFSET_COMMIT, OFFSET_FETCH or HEARTBEAT no handler has seen
(``processor.direct.groups``), whose op
(:mod:`~hostbroker.workers.group_answers`) the coordinator serves and answers.

A GROUP result of a JOIN_GROUP that waits for its rebalance comes when the
rebalance completes, maybe after results of later requests.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from typing import Any, NamedTuple

from hostbroker.security.principals import Identity, Principal

REQ_HEADER = struct.Struct("<QIIQ")
REQ_CLOSED = 2
REQ_PRINCIPAL = 4
MAX_IDENTITY_GROUPS = 256  # groups a REQ_PRINCIPAL carries; more: the identity is refused
MAX_IDENTITY_BYTES = 96 * 1024

RESP_HEADER = struct.Struct("<QIIIQ")
RESP_CLOSE_AFTER = 1
RESP_CLOSE_NOW = 2
RESP_FETCH_V1 = 4  # a FETCH v1 answer (its headers are laid out as replication's)

PIECE_BYTES = 0
PIECE_FILE = 1
_PIECE_BYTES_HEAD = struct.Struct("<BI")
_PIECE_FILE_HEAD = struct.Struct("<BH")
_PIECE_FILE_TAIL = struct.Struct("<QQ")

OP_APPEND = 1
OP_DELETE = 2
OP_OFFSETS = 3
OP_GROUP = 4
OP_APPEND_DIRECT = 5
OP_APPEND_REF = 6
OP_APPEND_DIRECT_REF = 7
OP_REF_DONE = 8
OP_REF_SYNC = 9
OP_PUT = 10
OP_POLL = 11
OP_POLL_DONE = 12
OP_POLL_BACK = 13
OP_GROUP_PUT = 14
OP_REPLICA_STATE = 15
OP_FOLLOWER_POS = 16
OP_REPLICA_APPEND = 17
OP_TRUNCATE = 18
OP_RESTART_LOG = 19
OP_DIR_REOPEN = 20  # hb-logdirs -> writer, json {"dir_id"}
OP_LOCAL_ADMIN = 21  # handler -> hb-logdirs, json
OP_ALTER_TOPIC = 22  # handler -> writer, json (ALTER_TOPIC of one partition)
APPEND_OPS = frozenset((OP_APPEND, OP_APPEND_DIRECT, OP_APPEND_REF, OP_APPEND_DIRECT_REF))
_DIRECT_OPS = frozenset((OP_APPEND_DIRECT, OP_APPEND_DIRECT_REF, OP_PUT))
_OP = struct.Struct("<BQ")
APPEND_HEAD = struct.Struct("<BQIIhIqiQH")
APPEND_RESULT = struct.Struct("<BQIhqq")
REF_DONE = struct.Struct("<BQI")  # op, token, index
REF_SYNC = struct.Struct("<BQQ")  # op, writer, APPEND_REFs the handler had sent it
_DIRECT = struct.Struct("<HQIi")  # processor, conn_id, seq, correlation_id
_REF = struct.Struct("<HIIQ")  # processor, offset, length, handler_epoch
_POLL = struct.Struct("<BQIiqiiqqH")
FOLLOWER_POS = struct.Struct("<BQIiiiqH")
REPLICA_APPEND_HEAD = struct.Struct("<BQIiiiqqH")
REPLICA_APPEND_RESULT = struct.Struct("<BQhq")  # op, token, error, log_end


class FilePiece(NamedTuple):
    path: str
    position: int
    length: int


Piece = bytes | FilePiece


def encode_response(conn_id: int, seq: int, flags: int, pieces: Sequence[Piece],
                    stamp_ns: int = 0) -> list[bytes]:
    """Parts of a response message (give them to ``Sender.send(*parts)``)."""
    parts = [RESP_HEADER.pack(conn_id, seq, flags, len(pieces), stamp_ns)]
    for piece in pieces:
        if isinstance(piece, FilePiece):
            path = piece.path.encode()
            parts.append(_PIECE_FILE_HEAD.pack(PIECE_FILE, len(path)))
            parts.append(path)
            parts.append(_PIECE_FILE_TAIL.pack(piece.position, piece.length))
        else:
            parts.append(_PIECE_BYTES_HEAD.pack(PIECE_BYTES, len(piece)))
            parts.append(piece)
    return parts


def decode_response(buf) -> tuple[int, int, int, list[Piece], int]:
    """(conn_id, seq, flags, pieces, stamp_ns) of a response message; bytes
    pieces are copies."""
    conn_id, seq, flags, n, stamp_ns = RESP_HEADER.unpack_from(buf, 0)
    pos = RESP_HEADER.size
    pieces: list[Piece] = []
    for _ in range(n):
        kind = buf[pos]
        if kind == PIECE_BYTES:
            _, length = _PIECE_BYTES_HEAD.unpack_from(buf, pos)
            pos += _PIECE_BYTES_HEAD.size
            pieces.append(bytes(buf[pos:pos + length]))
            pos += length
        else:
            _, plen = _PIECE_FILE_HEAD.unpack_from(buf, pos)
            pos += _PIECE_FILE_HEAD.size
            path = bytes(buf[pos:pos + plen]).decode()
            pos += plen
            position, length = _PIECE_FILE_TAIL.unpack_from(buf, pos)
            pos += _PIECE_FILE_TAIL.size
            pieces.append(FilePiece(path, position, length))
    return conn_id, seq, flags, pieces, stamp_ns


class Direct(NamedTuple):
    """Where the writer sends the answer of an APPEND_DIRECT."""

    processor: int
    conn_id: int
    seq: int
    correlation_id: int


class Ref(NamedTuple):
    """Where an APPEND_REF's message set lies: ``length`` bytes at data
    ``offset`` of the request ring from ``processor`` to the sending handler,
    whose epoch was ``handler_epoch``."""

    processor: int
    offset: int
    length: int
    handler_epoch: int


class Append(NamedTuple):
    token: int
    slot: int
    index: int
    acks: int
    count: int
    deadline_ms: int
    topic: str
    partition: int
    message_set: Any  # a view of the ring message (empty for a ref)
    stamp_ns: int = 0
    direct: Direct | None = None
    ref: Ref | None = None


def encode_append(token: int, slot: int, topic: str, partition: int, index: int, acks: int,
                  count: int, deadline_ms: int, message_set, stamp_ns: int = 0,
                  direct: Direct | None = None, ref: Ref | None = None) -> tuple[bytes, Any]:
    """An APPEND (with ``direct``: APPEND_DIRECT) of ``message_set``, or
    with ``ref`` of the set it names (``message_set`` is then not sent)."""
    name = topic.encode()
    if ref is None:
        op = OP_APPEND if direct is None else OP_APPEND_DIRECT
    else:
        op = OP_APPEND_REF if direct is None else OP_APPEND_DIRECT_REF
    head = APPEND_HEAD.pack(op, token, slot, index, acks, count, deadline_ms, partition,
                            stamp_ns, len(name)) + name
    if direct is not None:
        head += _DIRECT.pack(*direct)
    if ref is not None:
        return head + _REF.pack(*ref), b""
    return head, message_set


def encode_put(slot: int, topic: str, partition: int, deadline_ms: int, message_set,
               stamp_ns: int, direct: Direct, version: int = 0) -> tuple[bytes, Any]:
    """A PUT (processor -> writer) of ``message_set``, answered to ``direct``
    in the layout of PRODUCE ``version`` (carried as the append's ``index``)."""
    name = topic.encode()
    head = APPEND_HEAD.pack(OP_PUT, 0, slot, version, 1, 0, deadline_ms, partition, stamp_ns,
                            len(name))
    return head + name + _DIRECT.pack(*direct), message_set


def encode_group_put(direct: Direct, op: dict) -> tuple[bytes, bytes]:
    """An OFFSET_COMMIT, OFFSET_FETCH or HEARTBEAT a processor sends the
    coordinator itself (on its ``cput`` ring), its ``op``
    (:mod:`~hostbroker.workers.group_answers`) answered to ``direct``."""
    return (_OP.pack(OP_GROUP_PUT, 0) + _DIRECT.pack(*direct),
            json.dumps(op, separators=(",", ":")).encode())


def decode_group_put(buf) -> tuple[Direct, dict]:
    direct = Direct(*_DIRECT.unpack_from(buf, _OP.size))
    return direct, json.loads(bytes(buf[_OP.size + _DIRECT.size:]))


class Poll(NamedTuple):
    """A long-poll FETCH of one partition a handler leaves to its writer."""

    token: int
    slot: int
    topic: str
    partition: int
    offset: int
    max_bytes: int
    min_bytes: int
    deadline_ms: int
    direct: Direct
    acl_stamp: int = -1  # the ACLs' stamp the handler decided READ at (-1: not asked)


def encode_poll(poll: Poll) -> bytes:
    name = poll.topic.encode()
    return (_POLL.pack(OP_POLL, poll.token, poll.slot, poll.partition, poll.offset,
                       poll.max_bytes, poll.min_bytes, poll.deadline_ms, poll.acl_stamp,
                       len(name))
            + name + _DIRECT.pack(*poll.direct))


def decode_poll(buf) -> Poll:
    _, token, slot, partition, offset, max_bytes, min_bytes, deadline, stamp, \
        name_len = _POLL.unpack_from(buf, 0)
    end = _POLL.size + name_len
    topic = bytes(buf[_POLL.size:end]).decode()
    return Poll(token, slot, topic, partition, offset, max_bytes, min_bytes, deadline,
                Direct(*_DIRECT.unpack_from(buf, end)), stamp)


def encode_op(op: int, token: int) -> bytes:
    """A message that is only an op and a token (POLL_DONE, POLL_BACK)."""
    return _OP.pack(op, token)


def decode_append(buf) -> Append:
    op, token, slot, index, acks, count, deadline, partition, stamp_ns, name_len = \
        APPEND_HEAD.unpack_from(buf, 0)
    end = APPEND_HEAD.size + name_len
    topic = bytes(buf[APPEND_HEAD.size:end]).decode()
    direct = ref = None
    if op in _DIRECT_OPS:
        direct = Direct(*_DIRECT.unpack_from(buf, end))
        end += _DIRECT.size
    if op == OP_APPEND_REF or op == OP_APPEND_DIRECT_REF:
        ref = Ref(*_REF.unpack_from(buf, end))
        end += _REF.size
    return Append(token, slot, index, acks, count, deadline, topic, partition, buf[end:],
                  stamp_ns, direct, ref)


def encode_json(op: int, token: int, payload: Any) -> tuple[bytes, bytes]:
    return _OP.pack(op, token), json.dumps(payload, separators=(",", ":")).encode()


def decode_op(buf) -> tuple[int, int]:
    return _OP.unpack_from(buf, 0)


def decode_json(buf) -> Any:
    return json.loads(bytes(buf[_OP.size:]))


# -- replication ---------------------------------------------------------


def encode_replica_state(token: int, state: dict) -> tuple[bytes, bytes]:
    """An OP_REPLICA_STATE (handler -> writer): the partition's role, leader,
    epoch, ISR and replicas as LEADER_AND_ISR (or STOP_REPLICA) gave them."""
    return encode_json(OP_REPLICA_STATE, token, state)


class FollowerPos(NamedTuple):
    """A follower's fetch position the handler reports to the leader's writer."""

    slot: int
    topic: str
    partition: int
    replica_id: int
    leader_epoch: int
    offset: int


def encode_follower_pos(pos: FollowerPos) -> bytes:
    name = pos.topic.encode()
    return FOLLOWER_POS.pack(OP_FOLLOWER_POS, 0, pos.slot, pos.partition, pos.replica_id,
                             pos.leader_epoch, pos.offset, len(name)) + name


def decode_follower_pos(buf) -> FollowerPos:
    _, _, slot, partition, replica_id, leader_epoch, offset, name_len = \
        FOLLOWER_POS.unpack_from(buf, 0)
    topic = bytes(buf[FOLLOWER_POS.size:FOLLOWER_POS.size + name_len]).decode()
    return FollowerPos(slot, topic, partition, replica_id, leader_epoch, offset)


class ReplicaAppend(NamedTuple):
    """Bytes a follower fetched from its leader, to append at ``base_offset``."""

    token: int
    slot: int
    topic: str
    partition: int
    leader_epoch: int
    data_epoch: int
    base_offset: int
    leader_hw: int
    message_set: Any  # a view of the ring message


def encode_replica_append(a: ReplicaAppend) -> tuple[bytes, Any]:
    """Parts of an OP_REPLICA_APPEND (hb-replica -> writer): the head, then the set."""
    name = a.topic.encode()
    head = REPLICA_APPEND_HEAD.pack(OP_REPLICA_APPEND, a.token, a.slot, a.partition,
                                    a.leader_epoch, a.data_epoch, a.base_offset, a.leader_hw,
                                    len(name)) + name
    return head, a.message_set


def decode_replica_append(buf) -> ReplicaAppend:
    _, token, slot, partition, leader_epoch, data_epoch, base, hw, name_len = \
        REPLICA_APPEND_HEAD.unpack_from(buf, 0)
    end = REPLICA_APPEND_HEAD.size + name_len
    topic = bytes(buf[REPLICA_APPEND_HEAD.size:end]).decode()
    return ReplicaAppend(token, slot, topic, partition, leader_epoch, data_epoch, base, hw,
                         buf[end:])


def encode_replica_append_result(token: int, error: int, log_end: int) -> bytes:
    return REPLICA_APPEND_RESULT.pack(OP_REPLICA_APPEND, token, error, log_end)


def decode_replica_append_result(buf) -> tuple[int, int, int]:
    """``(token, error, log_end)`` of a REPLICA_APPEND's result."""
    _, token, error, log_end = REPLICA_APPEND_RESULT.unpack_from(buf, 0)
    return token, error, log_end


def encode_truncate(token: int, request: dict) -> tuple[bytes, bytes]:
    """An OP_TRUNCATE (hb-replica -> writer): ``{"slot","topic","partition",
    "leader_epoch","offset"}``, answered ``{"error","log_end"}`` (json, same op)."""
    return encode_json(OP_TRUNCATE, token, request)


def encode_restart_log(token: int, request: dict) -> tuple[bytes, bytes]:
    """An OP_RESTART_LOG (hb-replica -> writer): a follower whose log ends below
    its leader's log start empties it and starts it at ``offset`` (the leader's
    log start); the fields and the answer are OP_TRUNCATE's."""
    return encode_json(OP_RESTART_LOG, token, request)


def encode_dir_reopen(token: int, dir_id: int) -> tuple[bytes, bytes]:
    """An OP_DIR_REOPEN (hb-logdirs -> writer): take log dir ``dir_id`` back
    (the writer exits EXIT_REOPEN if its dir is offline)."""
    return encode_json(OP_DIR_REOPEN, token, {"dir_id": dir_id})


def encode_local_admin(token: int, request: dict) -> tuple[bytes, bytes]:
    """An OP_LOCAL_ADMIN (handler -> hb-logdirs): a create, delete, alter,
    online or forget of replicas across log dirs."""
    return encode_json(OP_LOCAL_ADMIN, token, request)


# -- identities (processor -> handler) ---------------------------------------


def tellable(identity: Identity) -> bool:
    """Whether ``identity`` crosses to a handler (:func:`encode_principal`)
    as itself rather than as ``null``."""
    return json.loads(encode_principal(0, identity)[REQ_HEADER.size:]) is not None


def encode_principal(conn_id: int, identity: Identity | None, stamp_ns: int = 0) -> bytes:
    """The REQ_PRINCIPAL of ``conn_id``: its identity as json ``[principal,
    [group, ...], host]``. An identity of more than
    :data:`MAX_IDENTITY_GROUPS` groups (or past :data:`MAX_IDENTITY_BYTES`),
    or None (one its processor refuses), is sent as ``null``: the handler
    then refuses the connection's requests (dropping groups could skip a DENY)."""
    groups = identity.groups if identity is not None else ()
    doc = None
    if identity is not None and len(groups) <= MAX_IDENTITY_GROUPS:
        doc = [str(identity.principal), [str(g) for g in groups], identity.host]
        if identity.tls:
            doc.append(True)  # (over an ssl:// listener: METADATA names ssl endpoints)
    data = json.dumps(doc, separators=(",", ":")).encode()
    if len(data) > MAX_IDENTITY_BYTES:
        data = b"null"
    return REQ_HEADER.pack(conn_id, 0, REQ_PRINCIPAL, stamp_ns) + data


def decode_principal(buf) -> Identity | None:
    """The identity of a REQ_PRINCIPAL message, or None (refused by its
    sender, or not an identity: then nobody)."""
    data = bytes(buf[REQ_HEADER.size:REQ_HEADER.size + MAX_IDENTITY_BYTES + 1])
    if len(data) > MAX_IDENTITY_BYTES:
        return None
    try:
        doc = json.loads(data)
        if doc is None:
            return None
        principal, groups, host, *tls = doc
        if not (isinstance(groups, list) and len(groups) <= MAX_IDENTITY_GROUPS
                and isinstance(host, str) and len(host) <= 255 and tls in ([], [True])):
            return None
        return Identity(Principal.parse(principal), tuple(Principal.parse(g) for g in groups),
                        host, bool(tls))
    except (ValueError, TypeError, AttributeError):
        return None
