"""``hostbroker whoami`` over TLS: ``--bootstrap ssl://…`` with
``--command-config`` prints the principal of its certificate's CN (it once
sent the request in clear to the TLS port), and without a certificate the
broker's CA is not trusted: one line, no traceback."""

from __future__ import annotations

import json

from tests.integration.cli import hostbroker, one_line_error
from tests.tls.conftest import certs, make_tls_broker  # noqa: F401 (fixtures)


def test_whoami_over_tls_names_the_certificate(make_tls_broker, certs, tmp_path):  # noqa: F811
    broker = make_tls_broker(**{"ssl.client.auth": "required"})
    path = tmp_path / "alice.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in certs.client("alice").items()))
    done = hostbroker("whoami", "--json", "--bootstrap", broker.ssl,
                      "--command-config", str(path))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"principal": "User:alice", "groups": [],
                                       "host": "127.0.0.1", "authorizer": False}
    said = one_line_error(hostbroker("whoami", "--bootstrap", broker.ssl))
    assert said.startswith("hostbroker whoami: no answer from ssl://"), said
