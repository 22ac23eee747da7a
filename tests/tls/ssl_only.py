"""A broker whose only listener is ``ssl://`` requiring a client certificate:
what the Spark and the commands' TLS tests reach, so that nothing of theirs
can slip through a plain listener."""

from __future__ import annotations

import os

from hostbroker.client.simple import SimpleClient
from tests.integration.broker import Broker
from tests.ports import free_port, start_moving
from tests.tls.certs import Certs


class SslOnlyBroker(Broker):
    """``hostbroker serve`` with one ``ssl://127.0.0.1:PORT`` listener
    (``ssl.client.auth`` required); :meth:`client` connects as ``alice``."""

    def __init__(self, root, certs: Certs, **settings):
        self.certs = certs
        super().__init__(root, **{"ssl.keystore.location": certs.keystore("server"),
                                  "ssl.truststore.location": certs.ca,
                                  "ssl.client.auth": "required", **settings})

    def _listeners(self) -> str:
        return f"ssl://127.0.0.1:{self.port}"

    @property
    def ssl(self) -> str:
        return f"ssl://127.0.0.1:{self.port}"

    def tls(self, name: str = "alice") -> dict:
        return self.certs.client(name)

    def client(self, uri: str | None = None, **kw) -> SimpleClient:
        return SimpleClient(uri or self.ssl, tls=self.tls(), **kw)

    def start(self, timeout: float = 30.0) -> SslOnlyBroker:
        def move() -> None:
            self._log.close()
            self.port = free_port()
            self.settings["listeners"] = self._listeners()

        start_moving(lambda: self._start(timeout), move, self.log_path,
                     lambda: f"cannot bind ssl://127.0.0.1:{self.port}: Address already in use")
        return self

    def _answers(self) -> None:
        with self.client() as c:  # (its one listener)
            c.metadata()

    def command_config(self, directory, name: str = "alice") -> str:
        """A ``--command-config`` file of ``name``'s certificate, in ``directory``."""
        path = os.path.join(str(directory), f"{name}.properties")
        with open(path, "w") as f:
            f.write("".join(f"{k}={v}\n" for k, v in self.tls(name).items()))
        return path
