"""The broker settings of TLS listeners (``ssl://HOST:PORT``; docs/security.md,
"TLS"), declared here and concatenated into :data:`hostbroker.config.SETTINGS`,
so ``serve --help``, validation and the table in docs/configuration.md come from
them as from every other setting.

Each row is ``(key, type, default, meaning, check)``, ``check`` a function of
the value that returns a problem or None. They are plain rows, not
:class:`~hostbroker.config.Setting` objects, because ``config`` builds its one
declaration from them at import (this module imports nothing of it). What the
files hold is checked when the supervisor builds the server context
(:mod:`hostbroker.workers.tls`), before any fork.
"""

from __future__ import annotations

from collections.abc import Callable

# The protocol versions a listener may offer, by the names Kafka uses; nothing
# older than TLS 1.2 is accepted.
PROTOCOLS = ("TLSv1.2", "TLSv1.3")
INTER_BROKER = ("PLAINTEXT", "SSL")
CLIENT_AUTH = ("none", "requested", "required")
MAX_PATH_BYTES = 4096


def protocol_list(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _protocols_problem(value: str) -> str | None:
    names = protocol_list(value)
    if not names:
        return "must name at least one of " + ", ".join(PROTOCOLS)
    for name in names:
        if name not in PROTOCOLS:
            return (f"{name!r} is not accepted: one or more of " + ", ".join(PROTOCOLS)
                    + " (nothing older than TLSv1.2)")
    return None


def _path_problem(value: str) -> str | None:
    if "\0" in value:
        return "holds a NUL byte"
    if len(value.encode(errors="surrogateescape")) > MAX_PATH_BYTES:
        return f"longer than {MAX_PATH_BYTES} bytes"
    return None


def _one_of(*choices: str) -> Callable[[str], str | None]:
    return lambda v: None if v in choices else "must be one of " + ", ".join(choices)


def _between(lo: int, hi: int) -> Callable[[int], str | None]:
    return lambda v: None if lo <= v <= hi else f"must be between {lo} and {hi}"


def _ciphers_problem(value: str) -> str | None:
    if any(ord(c) < 0x20 for c in value) or len(value) > 4096:
        return "must be an OpenSSL cipher list (printable, at most 4096 characters)"
    return None


TLS_SETTINGS: tuple[tuple[str, type, object, str, Callable | None], ...] = (
    ("ssl.keystore.location", str, "",
     "PEM file of the broker's TLS certificate chain (its own certificate first) followed "
     "by its private key, read once at start (an unreadable, missing, symlinked or bad file, "
     "or a key that does not match, refuses the start in one line, as does a key not "
     "encrypted in a file group or others may read). Required when a listener is ssl://.",
     _path_problem),
    ("ssl.key.password", str, "",
     "Password of the private key in ssl.keystore.location when it is encrypted (empty: "
     "the key is not encrypted). Never printed; give it in the --config file (mode 0600), "
     "not with --set, which every local user sees in the process list.", None),
    ("ssl.truststore.location", str, "",
     "PEM file of the CA certificates a client certificate must chain to (ssl:// "
     "listeners), read once at start, as the keystore. Must be named when "
     "ssl.client.auth is required or requested (the system's public CAs are never taken "
     "for client certificates); empty only with ssl.client.auth none.",
     _path_problem),
    ("ssl.client.auth", str, "required",
     "Whether an ssl:// client must show a certificate: required (a client without a valid "
     "one is refused at the handshake), requested (checked when shown; a client without "
     "one is User:ANONYMOUS), none (not asked for; every client is User:ANONYMOUS).",
     _one_of(*CLIENT_AUTH)),
    ("ssl.enabled.protocols", str, "TLSv1.2,TLSv1.3",
     "TLS versions an ssl:// listener accepts, a comma list of TLSv1.2 and TLSv1.3 "
     "(older ones are never accepted).", _protocols_problem),
    ("ssl.cipher.suites", str, "",
     "OpenSSL cipher list for TLS 1.2 on ssl:// listeners (empty: Python's default, which "
     "leaves out weak ciphers); TLS 1.3 suites are OpenSSL's defaults.", _ciphers_problem),
    ("ssl.handshake.timeout.ms", int, 10000,
     "Longest a TLS handshake may take, from the connection's hand-off to its processor: "
     "a client that has not finished by then is closed and holds nothing more; and this "
     "broker's own handshakes to other brokers (security.inter.broker.protocol SSL: "
     "replica fetchers, the controller's requests), after which it tries again later.",
     _between(100, 600000)),
    ("security.inter.broker.protocol", str, "PLAINTEXT",
     "How this broker reaches the others of its cluster (replica fetchers, the controller's "
     "requests): PLAINTEXT (their tcp:// listener, or the Unix socket on the same host, as "
     "User:ANONYMOUS) or SSL (their ssl:// listener, showing this broker's certificate of "
     "ssl.keystore.location and verifying theirs against ssl.truststore.location: each "
     "broker is User:<CN of its certificate> to the others). SSL needs an ssl:// listener "
     "(in advertised.listeners too when that is set), the keystore, the truststore and "
     "ssl.client.auth other than none, or the start is refused. Brokers may differ while a "
     "cluster switches one broker at a time (docs/cluster.md).", _one_of(*INTER_BROKER)),
    ("ssl.endpoint.identification.algorithm", str, "https",
     "With security.inter.broker.protocol SSL: https, another broker's certificate must "
     "name the host it registered for its ssl:// listener; empty, only its chain to "
     "ssl.truststore.location is checked.", _one_of("https", "")),
    ("ssl.max.handshakes", int, 8,
     "TLS handshake steps (a do_handshake on input that came: the key computations, about "
     "1-5 ms of CPU each) one processor runs in one round of its loop; further ones wait "
     "for the next round, so the other connections of a processor wait at most this many "
     "steps between two of their turns. A connection that sends nothing takes no step.",
     _between(1, 65536)),
)
