"""``hostbroker whoami``: the principal, groups and host a broker sees for
this client's connection, and whether its authorizer is on (WHOAMI, key 27;
docs/tools.md).

One request on one connection of its own, through the client's
:class:`~hostbroker.client.connection.BrokerConnection` (its framing,
timeouts and TLS): a Unix socket's principal is the user the command runs
as (the kernel's peer credentials), a plain TCP connection's
``User:ANONYMOUS``, an ``ssl://`` one's the common name of the certificate
``--command-config`` gives it.
"""

from __future__ import annotations

import json
import sys

from hostbroker.exits import EXIT_OK, CommandError


def whoami(*, bootstrap: str, timeout: float = 10.0, as_json: bool = False,
           out=None) -> int:
    from hostbroker.client.connection import BrokerConnection
    from hostbroker.client.errors import BrokerError
    from hostbroker.errors import HostbrokerError
    from hostbroker.protocol import acls

    out = out or sys.stdout
    try:
        connection = BrokerConnection(bootstrap, timeout=timeout, setup_timeout=timeout,
                                      client_id="hostbroker-whoami")
    except ValueError as exc:
        raise CommandError(str(exc), 2) from None
    try:
        with connection:
            answer = connection.request(acls.WhoamiRequest())
    except BrokerError as exc:
        name = getattr(exc.code, "name", str(exc.code))
        raise CommandError(f"the broker refused WHOAMI: {name}") from None
    except (HostbrokerError, OSError) as exc:
        raise CommandError(f"no answer from {bootstrap}: {exc}") from None
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
