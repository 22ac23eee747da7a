"""The server context and the start it refuses: every bad keystore in one line, exit 78."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys

import pytest

from hostbroker.config import Config
from hostbroker.errors import ConfigError, ExitStatus
from hostbroker.listeners import parse_listener
from hostbroker.security.principals import ANONYMOUS, Principal, from_certificate
from hostbroker.workers.tls import LogLimit, TlsConfigError, accepted_on, server_context
from tests.ports import free_port
from tests.tls.certs import PASSWORD


def _config(**settings) -> Config:
    return Config.build(overrides=[f"{k.replace('_', '.')}={v}" for k, v in settings.items()])


def _serve(tmp_path, **settings) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "hostbroker", "serve", "--set", f"log.dirs={tmp_path}/logs",
            "--set", f"listeners=ssl://127.0.0.1:{free_port()}", "--set", "http.listeners="]
    for key, value in settings.items():
        args += ["--set", f"{key}={value}"]
    return subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=60)


def test_ssl_listener_parses_beside_tcp_and_unix():
    assert parse_listener("ssl://127.0.0.1:9093") == ("ssl", "127.0.0.1", 9093)
    assert parse_listener("ssl://[::1]:9093") == ("ssl", "::1", 9093)
    with pytest.raises(ValueError, match="ssl://HOST:PORT"):
        parse_listener("ssl://nohost")
    with pytest.raises(ValueError, match=r"ssl://\[::1\]"):
        parse_listener("ssl://::1:9093")


def test_start_refused_in_one_line(tmp_path, certs):
    cases = {
        "no keystore": ({}, "ssl.keystore.location: an ssl:// listener needs"),
        "missing": ({"ssl.keystore.location": str(tmp_path / "nope.pem")},
                    "No such file or directory"),
        "bad key": ({"ssl.keystore.location": certs.path("server.pem")},
                    "not a usable certificate chain and key"),
    }
    for name, (settings, said) in cases.items():
        done = _serve(tmp_path, **settings)
        assert done.returncode == ExitStatus.REFUSED, (name, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and said in lines[0], (name, done.stderr)
        assert "Traceback" not in done.stderr


def test_server_context_refuses_bad_files(tmp_path, certs):
    base = {"ssl.truststore.location": certs.ca}
    link = tmp_path / "link.pem"
    os.symlink(certs.keystore("server"), link)
    garbage = tmp_path / "garbage.pem"
    garbage.write_bytes(b"\xff\x00 not a pem")
    with pytest.raises(TlsConfigError, match="is a symbolic link"):
        server_context(_config(**base, **{"ssl.keystore.location": link}))
    with pytest.raises(TlsConfigError, match="not a usable certificate chain"):
        server_context(_config(**base, **{"ssl.keystore.location": garbage}))
    with pytest.raises(TlsConfigError, match="not a regular file"):
        server_context(_config(**base, **{"ssl.keystore.location": tmp_path}))
    # a key under a password: refused without it or with another, taken with it
    enc = {"ssl.keystore.location": certs.keystore("server.enc")}
    with pytest.raises(TlsConfigError, match="with ssl.key.password"):
        server_context(_config(**base, **enc))
    with pytest.raises(TlsConfigError):
        server_context(_config(**base, **enc, **{"ssl.key.password": "wrong"}))
    ctx = server_context(_config(**base, **enc, **{"ssl.key.password": PASSWORD}))
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    with pytest.raises(TlsConfigError, match="ssl.truststore.location: .*not a PEM file"):
        server_context(_config(**{"ssl.keystore.location": certs.keystore("server"),
                                  "ssl.truststore.location": garbage}))
    with pytest.raises(TlsConfigError, match="ssl.truststore.location: .*no CA certificate"):
        server_context(_config(**{"ssl.keystore.location": certs.keystore("server"),
                                  "ssl.truststore.location": certs.path("alice.csr")}))
    # a key not encrypted in a file group or others may read: refused
    open_key = tmp_path / "open.keystore.pem"
    open_key.write_bytes(open(certs.keystore("server"), "rb").read())
    open_key.chmod(0o644)
    with pytest.raises(TlsConfigError, match="not encrypted and group or others may read"):
        server_context(_config(**base, **{"ssl.keystore.location": open_key}))
    open_key.chmod(0o600)
    server_context(_config(**base, **{"ssl.keystore.location": open_key}))
    sealed = tmp_path / "sealed.keystore.pem"  # encrypted: its mode does not matter
    sealed.write_bytes(open(certs.keystore("server.enc"), "rb").read())
    sealed.chmod(0o644)
    server_context(_config(**base, **{"ssl.keystore.location": sealed,
                                      "ssl.key.password": PASSWORD}))
    # the system's public CAs are never the CAs of client certificates
    for auth in ("required", "requested"):
        with pytest.raises(TlsConfigError, match=f"ssl.truststore.location: the CAs of "
                                                 f"client certificates must be named when "
                                                 f"ssl.client.auth is {auth}"):
            server_context(_config(**{"ssl.keystore.location": certs.keystore("server"),
                                      "ssl.client.auth": auth}))
    assert server_context(_config(**{"ssl.keystore.location": certs.keystore("server"),
                                     "ssl.client.auth": "none"})).verify_mode == ssl.CERT_NONE
    with pytest.raises(TlsConfigError, match="ssl.cipher.suites"):
        server_context(_config(**base, **{"ssl.keystore.location": certs.keystore("server"),
                                          "ssl.cipher.suites": "NO-SUCH-CIPHER"}))


def test_server_pem_files_that_are_not_regular_files_refused_at_once(tmp_path, certs):
    """A FIFO or a device as keystore or truststore: refused in one line, not waited on."""
    fifo = tmp_path / "fifo.pem"
    os.mkfifo(fifo)
    for bad in (str(fifo), "/dev/zero"):
        with pytest.raises(TlsConfigError, match="ssl.keystore.location: .*not a regular file"):
            server_context(_config(**{"ssl.keystore.location": bad,
                                      "ssl.truststore.location": certs.ca}))
        with pytest.raises(TlsConfigError,
                           match="ssl.truststore.location: .*not a regular file"):
            server_context(_config(**{"ssl.keystore.location": certs.keystore("server"),
                                      "ssl.truststore.location": bad}))


def test_settings_refuse_old_protocols_and_unknown_auth():
    with pytest.raises(ConfigError, match="ssl.enabled.protocols.*nothing older than TLSv1.2"):
        _config(**{"ssl.enabled.protocols": "TLSv1.1,TLSv1.2"})
    with pytest.raises(ConfigError, match="ssl.client.auth"):
        _config(**{"ssl.client.auth": "maybe"})
    ctx_config = _config(**{"ssl.enabled.protocols": "TLSv1.3", "ssl.client.auth": "none"})
    assert ctx_config["ssl.enabled.protocols"] == "TLSv1.3"


def test_principal_of_the_certificates_made(certs):
    """from_certificate on what a verified handshake gives, for each certificate made."""
    def peercert(name):
        server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server.load_cert_chain(certs.keystore("server"))
        server.load_verify_locations(certs.ca)
        server.verify_mode = ssl.CERT_OPTIONAL
        client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        client.load_verify_locations(certs.ca)
        if name:
            client.load_cert_chain(certs.keystore(name))
        c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
        c = client.wrap_bio(c_in, c_out, server_hostname="localhost")
        s = server.wrap_bio(s_in, s_out, server_side=True)
        for _ in range(10):
            for side in (c, s):
                try:
                    side.do_handshake()
                except ssl.SSLWantReadError:
                    pass
            s_in.write(c_out.read())
            c_in.write(s_out.read())
        return s.getpeercert()

    assert from_certificate(peercert("alice"), "10.0.0.1").principal == Principal("User", "alice")
    assert from_certificate(peercert(None), "10.0.0.1").principal == ANONYMOUS
    with pytest.raises(ValueError, match="no common name"):
        from_certificate(peercert("nocn"), "10.0.0.1")


def test_log_limit_holds_back_a_flood_and_counts_it():
    now = [0.0]
    limit = LogLimit(3, clock=lambda: now[0])
    said = [limit.line(f"line {i}") for i in range(10)]
    assert said[:3] == ["line 0", "line 1", "line 2"] and said[3:] == [None] * 7
    now[0] = 61.0
    assert limit.line("again") == "again (7 more not shown)"


def test_a_hand_off_is_tls_by_the_address_it_came_to():
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = listener.accept()
            with accepted:
                assert accepted_on([(socket.AF_INET, "127.0.0.1", port)], accepted)
                assert accepted_on([(socket.AF_INET, "0.0.0.0", port)], accepted)
                assert not accepted_on([(socket.AF_INET, "127.0.0.1", port + 1)], accepted)
                assert not accepted_on([(socket.AF_INET, "127.0.0.2", port)], accepted)
                assert not accepted_on([], accepted)
                # a wildcard of the other family is another listener
                assert not accepted_on([(socket.AF_INET6, "::", port)], accepted)
            del client
    with socket.socket(socket.AF_INET6) as listener:
        listener.bind(("::1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with socket.create_connection(("::1", port)) as client:
            accepted, _ = listener.accept()
            with accepted:
                assert accepted_on([(socket.AF_INET6, "::1", port)], accepted)
                assert accepted_on([(socket.AF_INET6, "::", port)], accepted)
                assert not accepted_on([(socket.AF_INET, "0.0.0.0", port)], accepted)
            del client
