"""``hostbroker whoami``: the principal, groups and host a broker sees for
this client's connection, and whether its authorizer is on (WHOAMI, key 27;
docs/tools.md).

One request on one connection of its own: a Unix socket's principal is the
user the command runs as (the kernel's peer credentials), a plain TCP
connection's ``User:ANONYMOUS``.
"""

from __future__ import annotations

import json
import socket
import struct
import sys

from hostbroker.commands import EXIT_OK, CommandError

_SIZE = struct.Struct(">i")
_MAX_ANSWER = 1 << 20


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise CommandError("the broker closed the connection before answering")
        data += chunk
    return bytes(data)


def whoami(*, bootstrap: str, timeout: float = 10.0, as_json: bool = False,
           out=None) -> int:
    from hostbroker.client.connection import parse_uri
    from hostbroker.protocol import acls, api

    out = out or sys.stdout
    try:
        family, address = parse_uri(bootstrap)
    except ValueError as exc:
        raise CommandError(str(exc), 2) from None
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(address)
        sock.sendall(api.encode_request(acls.WhoamiRequest(), 1, "hostbroker-whoami"))
        size = _SIZE.unpack(_recv_exactly(sock, _SIZE.size))[0]
        if not 0 < size <= _MAX_ANSWER:
            raise CommandError(f"the broker's answer claims {size} bytes: not a broker")
        frame = _recv_exactly(sock, size)
    if api.is_error_frame(frame):
        _, code = api.decode_error_frame(frame)
        name = getattr(code, "name", str(code))
        raise CommandError(f"the broker refused WHOAMI: {name}")
    _, answer = acls.decode_response(frame, acls.WhoamiResponse)
    if as_json:
        print(json.dumps({"principal": answer.principal, "groups": list(answer.groups),
                          "host": answer.host, "authorizer": bool(answer.authorizer)}),
              file=out)
    else:
        print(f"principal: {answer.principal}", file=out)
        print(f"groups: {', '.join(answer.groups) or '-'}", file=out)
        print(f"host: {answer.host}", file=out)
        print(f"authorizer: {'on' if answer.authorizer else 'off'}", file=out)
    return EXIT_OK
