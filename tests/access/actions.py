"""Client side of the access tests, run as a test user (``python -m
tests.access.actions URI JSON``): each action of the JSON list is one request
over one connection (opened again after a refusal closed it), and what the
broker answered is printed as one JSON list, an action's result each:

- an error code's name (``NONE``, ``TOPIC_AUTHORIZATION_FAILED``), or a list
  of them (one per partition), for the data and admin requests;
- ``frame:NAME`` for an error frame (the request refused whole);
- the principal, groups, host and authorizer of WHOAMI; the topic names and
  their codes of METADATA; the groups of LIST_GROUPS.
"""

from __future__ import annotations

import json
import socket
import struct
import sys

from hostbroker.client.connection import parse_uri
from hostbroker.client.errors import BrokerError
from hostbroker.client.simple import SimpleClient
from hostbroker.errors import ErrorCode
from hostbroker.protocol import acls, api, controller_requests, groups, logdirs, replication

_SIZE = struct.Struct(">i")


def _name(code) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def _raw(uri: str, body, decode, short: bool = False):
    """One request on a connection of its own, for the requests SimpleClient
    does not decode (groups, WHOAMI)."""
    family, address = parse_uri(uri)
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(20)
        sock.connect(address)
        sock.sendall(api.encode_request(body, 7, "access-test"))
        head = b""
        while len(head) < 4:
            chunk = sock.recv(4 - len(head))
            if not chunk:
                return "closed"
            head += chunk
        size = _SIZE.unpack(head)[0]
        frame = b""
        while len(frame) < size:
            chunk = sock.recv(size - len(frame))
            if not chunk:
                return "closed"
            frame += chunk
    if api.is_error_frame(frame) and not short:  # (a HEARTBEAT's answer is as short)
        return "frame:" + _name(api.decode_error_frame(frame)[1])
    return decode(frame)


def _group(uri: str, body):
    def decode(frame):
        _, answer = groups.decode_group_response(body.API_KEY, body.API_VERSION, frame)
        if isinstance(answer, groups.ListGroupsResponse):
            return [_name(answer.error_code), list(answer.groups)]
        return _name(answer.error_code)
    return _raw(uri, body, decode, body.API_KEY in groups.SHORT_ANSWER_KEYS)


def act(client: SimpleClient, uri: str, a: dict):
    op = a["op"]
    t, p = a.get("topic", ""), a.get("partition", 0)
    if op == "whoami":
        def decode(frame):
            answer = acls.decode_response(frame, acls.WhoamiResponse)[1]
            return [answer.principal, list(answer.groups), answer.host, answer.authorizer]
        return _raw(uri, acls.WhoamiRequest(), decode)
    if op == "produce":
        parts = a.get("parts") or [[t, p]]
        results = client.produce_many([(topic, part, _message_set()) for topic, part in parts],
                                      acks=a.get("acks", 1), raise_on_error=False)
        return [_name(r.error_code) for r in results]
    if op == "fetch":
        parts = a.get("parts") or [[t, p]]
        results = client.fetch_many([(topic, part, 0, 4096) for topic, part in parts],
                                    raise_on_error=False)
        return [_name(r.error_code) for r in results]
    if op == "offsets":
        return _name(client.request(api.OffsetsRequest(t, p, api.LATEST_TIME, 1)).error_code)
    if op == "metadata":
        answer = client.metadata(a.get("topics", ()))
        return {m.topic: _name(m.error_code) for m in answer.topics}
    if op == "metadata_v2":
        answer = client.metadata_v2(a.get("topics", ()))
        return sorted(m.topic for m in answer.topics)
    if op == "create":
        return _name(client.create_topic(t, 1, raise_on_error=False).error_code)
    if op == "delete":
        return _name(client.delete_topic(t, raise_on_error=False).error_code)
    if op == "alter":
        return _name(client.alter_topic(t, set_configs={"retention.ms": "3600000"},
                                        raise_on_error=False).error_code)
    if op == "commit":
        results = client.offset_commit(a["group"], [(topic, part, 1, None)
                                                    for topic, part in a["parts"]],
                                       raise_on_error=False)
        return [_name(r.error_code) for r in results]
    if op == "offset_fetch":
        results = client.offset_fetch(a["group"], [tuple(x) for x in a["parts"]],
                                      raise_on_error=False)
        return [_name(r.error_code) for r in results]
    if op == "join":
        return _group(uri, groups.JoinGroupRequest(a["group"], 10_000, 10_000, "",
                                                   (groups.SubscribedTopic(t, 1),)))
    if op == "heartbeat":
        return _group(uri, groups.HeartbeatRequest(a["group"], 1, "nobody-1"))
    if op == "list_groups":
        return _group(uri, groups.ListGroupsRequest())
    if op == "configs":
        return sorted(t.topic for t in client.describe_topic_configs(()))
    if op == "offset_groups":
        answer = client.list_offset_groups(())
        return [_name(answer.error_code), sorted(g.group for g in answer.groups)]
    if op == "leader_and_isr":
        answer = client.request(controller_requests.LeaderAndIsrRequest(1, 1, ()))
        return _name(answer.error_code)
    if op == "follower_fetch":
        answer = client.request(replication.FetchRequestV1(
            1, 0, 0, (replication.FetchPartitionV1(t, p, -1, 0, 4096),)))
        return [_name(r.error_code) for r in answer.partitions]
    if op == "log_dir_admin":
        return _name(client.log_dir_admin(logdirs.ACTION_FORGET, None, 99).error_code)
    raise ValueError(f"no action {op!r}")


def _message_set() -> bytes:
    from hostbroker.log.message import encode_message_set
    return encode_message_set([b"access"])


def main(uri: str, actions: list) -> list:
    results = []
    client = SimpleClient(uri, timeout=20)
    try:
        for a in actions:
            try:
                results.append(act(client, uri, a))
            except BrokerError as e:
                results.append("frame:" + _name(e.code))
                client.close()
                client = SimpleClient(uri, timeout=20)
    finally:
        client.close()
    return results


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], json.loads(sys.argv[2]))))
