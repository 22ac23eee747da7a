"""Certificates for the TLS tests, made with the ``openssl`` command in a tmp dir.

A CA; a server certificate for 127.0.0.1 and localhost (its keystore: the
certificate then the key, and the same with the key under a password); client
certificates of CN=alice, of no CN, an expired one, and one from another CA.
"""

from __future__ import annotations

import os
import subprocess

EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]
PASSWORD = "s3cret"


def _run(*args: str, cwd: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(d: str, name: str) -> None:
    _run("req", "-x509", *EC, "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem",
         "-subj", f"/CN={name}", "-days", "3", cwd=d)


def _leaf(d: str, name: str, subject: str, ca: str, ext: str, days: str = "3") -> None:
    _run("req", "-new", *EC, "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
         "-subj", subject, cwd=d)
    with open(os.path.join(d, f"{name}.ext"), "w") as f:
        f.write(ext)
    _run("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
         "-CAcreateserial", "-out", f"{name}.pem", "-days", days, "-extfile", f"{name}.ext",
         cwd=d)
    with open(os.open(os.path.join(d, f"{name}.keystore.pem"),
                         os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
        for part in (f"{name}.pem", f"{name}.key"):
            with open(os.path.join(d, part)) as f:
                out.write(f.read())


class Certs:
    def __init__(self, d: str):
        self.dir = d
        _ca(d, "ca")
        _ca(d, "otherca")
        server_ext = ("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
                      "extendedKeyUsage=serverAuth\n")
        client_ext = "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n"
        _leaf(d, "server", "/CN=localhost", "ca", server_ext)
        _leaf(d, "elsewhere", "/CN=elsewhere.test", "ca",
              server_ext.replace("IP:127.0.0.1,DNS:localhost", "DNS:elsewhere.test"))
        _leaf(d, "alice", "/CN=alice", "ca", client_ext)
        _leaf(d, "nocn", "/O=nobody in particular", "ca", client_ext)
        _leaf(d, "expired", "/CN=old", "ca", client_ext, days="-1")
        _leaf(d, "mallory", "/CN=mallory", "otherca", client_ext)
        # the server key under a password, in a keystore of its own
        _run("pkey", "-in", "server.key", "-aes256", "-passout", f"pass:{PASSWORD}",
             "-out", "server.enc.key", cwd=d)
        with open(os.open(self.path("server.enc.keystore.pem"),
                         os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
            for part in ("server.pem", "server.enc.key"):
                with open(self.path(part)) as f:
                    out.write(f.read())

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    @property
    def ca(self) -> str:
        return self.path("ca.pem")

    def keystore(self, name: str) -> str:
        return self.path(f"{name}.keystore.pem")

    def client(self, name: str | None = "alice", **more) -> dict:
        """The ``ssl.*`` client settings of a client showing ``name``'s certificate
        (None: none), trusting the CA."""
        settings = {"ssl.truststore.location": self.ca}
        if name is not None:
            settings["ssl.keystore.location"] = self.keystore(name)
        settings.update(more)
        return settings


def broker_certificate(certs: Certs, name: str) -> str:
    """The keystore of a broker's certificate ``CN=name`` (for 127.0.0.1 and
    localhost, meant for servers and clients alike, as a broker is both to
    the others), signed by ``certs``' CA; made once."""
    keystore = certs.keystore(name)
    if not os.path.exists(keystore):
        _leaf(certs.dir, name, f"/CN={name}", "ca",
              "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
              "extendedKeyUsage=serverAuth,clientAuth\n")
    return keystore
