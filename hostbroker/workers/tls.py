"""TLS on ``ssl://`` listeners: the server context, and a processor's TLS connections.

Owns:

- :func:`server_context`: the one ``SSLContext`` of a broker, built by the
  supervisor from the ``ssl.*`` settings before any fork (so a missing,
  unreadable, symlinked or bad certificate or key refuses the start in one
  line) and inherited by every processor. The keystore is opened without
  following a link and read through its descriptor.
- :func:`check_inter_broker`, :func:`inter_broker_context`: TLS between brokers
  (``security.inter.broker.protocol`` SSL): the settings it needs, checked
  by the supervisor before any fork, with the principal the other brokers
  will see this one as; and the one client context of this broker's
  connections to brokers (replica fetchers, the controller's senders,
  hb-http over ``ssl://``), built from :mod:`hostbroker.client.tls`.
- :class:`TlsSocket`: an accepted socket after the TLS wrap, with the calls
  the processor makes of a plain one (``recv_into``, ``send``, ``shutdown``,
  ``close``, ``fileno``), a TLS "want read/write" as ``BlockingIOError``.
  ``recv_into`` reads record after record until its target is full or the
  socket has no more; what is left decrypted inside the TLS object
  (:meth:`TlsSocket.pending`) is not seen by epoll, so the processor keeps
  such connections in ``tls_pending`` and reads them without waiting.
- :func:`send_file_piece`: a file piece of an answer (``os.sendfile`` on a
  plain socket) read with ``os.pread`` and written through TLS, in bounded
  chunks (the same chunk again after a "want write", as TLS requires).
- :class:`TlsConnections`, a mixin of
  :class:`~hostbroker.workers.processor.ProcessorWorker`: which hand-offs are
  TLS (the local address they were accepted on), the non-blocking handshake
  in the epoll loop with its deadline (``ssl.handshake.timeout.ms``, counted
  from the hand-off), at most ``ssl.max.handshakes`` handshake steps per round
  of the processor's loop (a step is one ``do_handshake`` on input that came:
  the CPU of the handshake's keys; a connection whose step waits for the
  next round stays watched, so epoll reports it again at once, and the
  loop does not sleep meanwhile; a connection that sends nothing costs no
  step and holds nothing another needs), the
  connection's identity once the handshake is done
  (:func:`hostbroker.security.principals.from_certificate`), and the failures
  said in the broker log at a bounded rate.

A large frame is received straight into its ring record under TLS as over
plain TCP when ``processor.ring.receive`` is on (the record is filled through
:meth:`TlsSocket.recv_into`); only without it (where the whole rest must be
in the socket, by FIONREAD, which counts encrypted bytes) is it gathered in
the connection's buffer (``processor_claims``). PEM files are read by
:mod:`hostbroker.pemfile`.
"""

from __future__ import annotations

import os
import pwd
import re
import socket
import ssl
import sys
import time

from hostbroker import pemfile
from hostbroker.security.principals import from_certificate
from hostbroker.shm import procs
from hostbroker.settings_tls import protocol_list
from hostbroker.workers.peers import UNKNOWN_HOST, peer_host

SEND_CHUNK = 256 * 1024  # the most written through TLS in one call
LOG_LINES_PER_MINUTE = 10  # handshake failures said in the broker log
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                "required": ssl.CERT_REQUIRED}
_WANT = (ssl.SSLWantReadError, ssl.SSLWantWriteError)
_CERTIFICATE = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----\n?", re.S)
ANONYMOUS = "User:ANONYMOUS"


class TlsConfigError(Exception):
    """The ``ssl.*`` settings cannot make a server context: one line says why."""


# -- the server context ----------------------------------------------------------
def open_pem(key: str, path: str) -> int:
    """:func:`hostbroker.pemfile.open_pem`, its refusal a TlsConfigError."""
    try:
        return pemfile.open_pem(key, path)
    except pemfile.PemFileError as e:
        raise TlsConfigError(str(e)) from None


def read_pem(key: str, path: str) -> str:
    """:func:`hostbroker.pemfile.read_pem`, its refusal a TlsConfigError."""
    try:
        return pemfile.read_pem(key, path)
    except pemfile.PemFileError as e:
        raise TlsConfigError(str(e)) from None


def _ssl_reason(e: Exception) -> str:
    if isinstance(e, ssl.SSLError):
        return (e.reason or e.strerror or str(e)).replace("_", " ").lower()
    return getattr(e, "strerror", None) or str(e)


def _key_kept_private(fd: int, path: str) -> None:
    """Refuse a keystore whose private key is not encrypted while group or
    others may read the file (as ssh refuses such a key)."""
    mode = os.fstat(fd).st_mode & 0o777
    if not mode & 0o077:
        return
    text = os.pread(fd, pemfile.MAX_PEM_BYTES, 0)
    if b"PRIVATE KEY-----" in text and b"ENCRYPTED" not in text:
        raise TlsConfigError(f"ssl.keystore.location: {path}: its private key is not "
                             f"encrypted and group or others may read the file (mode "
                             f"{mode:04o}): make it 0600 or 0400")


def apply_policy(ctx: ssl.SSLContext, config) -> None:
    """The broker's TLS policy onto ``ctx`` (its listeners' and its own client
    context to brokers alike): the versions of ``ssl.enabled.protocols``, the
    ciphers of ``ssl.cipher.suites``, no compression, no renegotiation."""
    versions = sorted(_VERSIONS[name] for name in protocol_list(config["ssl.enabled.protocols"]))
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
    ctx.options |= ssl.OP_NO_COMPRESSION | getattr(ssl, "OP_NO_RENEGOTIATION", 0)
    if config["ssl.cipher.suites"]:
        try:
            ctx.set_ciphers(config["ssl.cipher.suites"])
        except ssl.SSLError:
            raise TlsConfigError(f"ssl.cipher.suites: {config['ssl.cipher.suites']!r} names "
                                 "no cipher OpenSSL has") from None


def load_keystore(ctx: ssl.SSLContext, config, private: bool = False) -> None:
    """The broker's certificate chain and key (``ssl.keystore.location``,
    ``ssl.key.password``) into ``ctx``, read through a descriptor opened
    without following a link; ``private``: refuse an unencrypted key others
    may read. TlsConfigError in one line."""
    keystore = config["ssl.keystore.location"]
    password = config["ssl.key.password"].encode()
    fd = open_pem("ssl.keystore.location", keystore)
    try:
        if private:
            _key_kept_private(fd, keystore)
        # through the descriptor opened above: the file checked is the file read
        ctx.load_cert_chain(f"/proc/self/fd/{fd}", password=lambda: password)
    except (ssl.SSLError, OSError, ValueError) as e:
        raise TlsConfigError(
            f"ssl.keystore.location: {keystore}: not a usable certificate chain and key "
            f"({_ssl_reason(e)}; a PEM file of the certificate chain, then the key"
            f"{', with ssl.key.password' if not password else ''})") from None
    finally:
        os.close(fd)


def server_context(config) -> ssl.SSLContext:
    """The context of every ``ssl://`` listener, from the ``ssl.*`` settings;
    TlsConfigError names the setting and the problem in one line."""
    if not config["ssl.keystore.location"]:
        raise TlsConfigError("ssl.keystore.location: an ssl:// listener needs the "
                             "broker's certificate and key (a PEM file)")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    apply_policy(ctx, config)
    load_keystore(ctx, config, private=True)
    auth = config["ssl.client.auth"]
    truststore = config["ssl.truststore.location"]
    if auth != "none" and not truststore:
        raise TlsConfigError(f"ssl.truststore.location: the CAs of client certificates must "
                             f"be named when ssl.client.auth is {auth}")
    ctx.verify_mode = _CLIENT_AUTH[auth]
    if truststore:
        try:
            _load_truststore(ctx, truststore)
        except ValueError as e:
            raise TlsConfigError(str(e)) from None
    return ctx


def _load_truststore(ctx: ssl.SSLContext, truststore: str) -> None:
    from hostbroker.client.tls import load_truststore  # (not in every worker's imports)

    load_truststore(ctx, truststore)


# -- between brokers --------------------------------------------------------------
def inter_broker_ssl(config) -> bool:
    """Whether this broker reaches the others over their ``ssl://`` listeners."""
    return config["security.inter.broker.protocol"] == "SSL"


def inter_broker_context(config, check_host: bool = True) -> ssl.SSLContext:
    """The one client context of this broker's connections to brokers (replica
    fetchers, the controller, hb-http over ``ssl://``): this broker's
    certificate shown, the other's verified against ``ssl.truststore.location``
    (without one, hb-http reaching its own broker trusts that broker's own
    certificate chain), its host checked by
    ``ssl.endpoint.identification.algorithm`` unless ``check_host`` is false
    (hb-http on loopback), the broker's policy applied (:func:`apply_policy`).
    TlsConfigError in one line when the files cannot make it."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    apply_policy(ctx, config)
    ctx.check_hostname = check_host and config["ssl.endpoint.identification.algorithm"] == "https"
    truststore = config["ssl.truststore.location"]
    try:
        if truststore:
            _load_truststore(ctx, truststore)
        else:
            chain = "".join(_CERTIFICATE.findall(read_pem("ssl.keystore.location",
                                                          config["ssl.keystore.location"])))
            ctx.load_verify_locations(cadata=chain)
            ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # (its own leaf trusted)
    except (ssl.SSLError, ValueError) as e:
        raise TlsConfigError(str(e)) from None
    load_keystore(ctx, config)
    return ctx


def check_inter_broker(config) -> str | None:
    """With ``security.inter.broker.protocol`` SSL, the principal the other
    brokers see this one as (``User:<CN>`` of its certificate), None with
    PLAINTEXT. TlsConfigError in one line when a setting it needs is missing
    (an ``ssl://`` listener, an ``ssl://`` entry in ``advertised.listeners``
    when that is set, the keystore, the truststore, ``ssl.client.auth`` other
    than none) or its own certificate would not be taken by a broker of the
    same settings (tried here, a handshake in memory with this broker's own
    listener context, before anything starts)."""
    if not inter_broker_ssl(config):
        return None
    for key in ("ssl.keystore.location", "ssl.truststore.location"):
        if not config[key]:
            raise TlsConfigError(f"security.inter.broker.protocol SSL: {key} must be named "
                                 "(this broker's certificate and key; the CAs of the other "
                                 "brokers' certificates)")
    if config["ssl.client.auth"] == "none":
        raise TlsConfigError("security.inter.broker.protocol SSL: ssl.client.auth is none, so "
                             "no broker asks another for its certificate and each is "
                             "User:ANONYMOUS to the others: set it to required (or requested)")
    if not any(uri.startswith("ssl://") for uri in config.listeners):
        raise TlsConfigError("security.inter.broker.protocol SSL: listeners has no ssl:// "
                             "listener for the other brokers to reach")
    advertised = config["advertised.listeners"]
    if advertised.strip() and not any(uri.strip().startswith("ssl://")
                                      for uri in advertised.split(",")):
        raise TlsConfigError("security.inter.broker.protocol SSL: advertised.listeners has "
                             "no ssl:// entry, so this broker would register no ssl:// "
                             "listener for the other brokers to reach")
    return own_principal(config)


def own_principal(config, server_hostname: str | None = None) -> str:
    """``User:<CN>`` of this broker's certificate as a broker of the same
    settings sees it when this one connects (a handshake in memory with the
    context of its own ``ssl://`` listeners, :func:`server_context`); with
    ``server_hostname``, the certificate must name that host too.
    TlsConfigError in one line when it would not be taken; ``User:ANONYMOUS``
    when the listener asks for no certificate (``ssl.client.auth`` none)."""
    server = server_context(config)
    if server.verify_mode == ssl.CERT_NONE:
        return ANONYMOUS
    client = inter_broker_context(config, check_host=server_hostname is not None)
    if server_hostname is not None:
        client.check_hostname = True
    try:
        certificate = _handshake_in_memory(client, server, server_hostname)
        return str(from_certificate(certificate, UNKNOWN_HOST).principal)
    except ssl.SSLCertVerificationError as e:
        if server_hostname is not None and "match" in str(e.verify_message):
            raise TlsConfigError(f"the certificate of ssl.keystore.location does not name "
                                 f"{server_hostname}, the host this broker registers for "
                                 f"its ssl:// listener") from None
        raise TlsConfigError(_not_taken(e)) from None
    except (ssl.SSLError, ValueError) as e:
        raise TlsConfigError(_not_taken(e)) from None


def _not_taken(e: Exception) -> str:
    return (f"the certificate of ssl.keystore.location is not one the brokers take as a "
            f"client's ({_ssl_reason(e)}): it must chain to ssl.truststore.location, be "
            f"meant for clients and servers alike, and have a CN")


def inter_broker_warnings(config, principal: str | None) -> list[str]:
    """The lines a broker of ``security.inter.broker.protocol`` SSL says at
    start (``principal``: :func:`check_inter_broker`'s): its certificate does
    not name the ssl:// host it registers (with
    ``ssl.endpoint.identification.algorithm`` https, the other brokers will
    refuse it), or its CN is also a login name on this host (a local user of
    that name connecting over the Unix socket is the same principal)."""
    if principal is None:
        return []
    lines = []
    host = registered_ssl_host(config)
    if host and config["ssl.endpoint.identification.algorithm"] == "https":
        try:
            own_principal(config, host)
        except TlsConfigError as e:
            lines.append(f"{e}: the other brokers will refuse it (name the host in the "
                         f"certificate, or set advertised.listeners)")
    name = principal.partition(":")[2]
    try:
        pwd.getpwnam(name)
    except (KeyError, ValueError):
        pass
    else:
        lines.append(f"this broker's principal {principal} is also a login name on this "
                     f"host: a local user {name} reaching a unix:// listener is the same "
                     f"principal (and a super user, if {principal} is one); give the brokers "
                     f"certificates whose CN cannot be a login name (e.g. "
                     f"{name}.brokers.example)")
    return lines


def registered_ssl_host(config) -> str | None:
    """The host this broker registers for its ``ssl://`` listener: that of
    ``advertised.listeners``, else of the first bound one (a wildcard: this
    host's name, as ``registry.advertised_info`` says)."""
    from hostbroker.config import parse_listener, split_list

    for setting in (config["advertised.listeners"], ",".join(config.listeners)):
        for uri in split_list(setting):
            if uri.startswith("ssl://"):
                host = parse_listener(uri)[1]
                return socket.getfqdn() if host in ("", "0.0.0.0", "::") else host
    return None


def _handshake_in_memory(client: ssl.SSLContext, server: ssl.SSLContext,
                         server_hostname: str | None = None) -> dict:
    """The client certificate ``server`` verified in a handshake with ``client``,
    run through memory buffers (no socket)."""
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    c = client.wrap_bio(c_in, c_out, server_hostname=server_hostname)
    s = server.wrap_bio(s_in, s_out, server_side=True)
    done = [False, False]
    for _ in range(16):
        for i, (end, out, into) in enumerate(((c, c_out, s_in), (s, s_out, c_in))):
            if not done[i]:
                try:
                    end.do_handshake()
                    done[i] = True
                except _WANT:
                    pass
            into.write(out.read())
        if all(done):
            break
    if not all(done):
        raise ValueError("the handshake did not end")
    certificate = s.getpeercert()
    if not certificate:
        raise ValueError("no certificate was shown")
    return certificate


def tls_listener_addresses(listeners) -> list[tuple[int, str, int]]:
    """``(family, host, port)`` as bound of the ``ssl://`` ones of ``listeners``
    (``[(uri, bound socket)]``): what a hand-off is matched against."""
    found = []
    for uri, sock in listeners:
        if uri.startswith("ssl://"):
            host, port = sock.getsockname()[:2]
            found.append((sock.family, host, port))
    return found


def accepted_on(addresses, sock: socket.socket) -> bool:
    """Whether ``sock`` was accepted on one of the listener ``addresses``."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6) or not addresses:
        return False
    try:
        host, port = sock.getsockname()[:2]
    except OSError:
        return False
    for family, bound_host, bound_port in addresses:
        if port != bound_port:
            continue
        # (a listener takes sockets of its own family only: an IPv4 client of
        # a dual-stack [::] one is an IPv6 socket from ::ffff:a.b.c.d)
        if family == sock.family and bound_host in ("0.0.0.0", "::", host):
            return True
    return False


# -- one TLS connection -----------------------------------------------------------
class TlsSocket:
    """An accepted, non-blocking socket wrapped for TLS; see the module doc."""

    __slots__ = ("ssl", "fd", "family")

    def __init__(self, wrapped: ssl.SSLSocket):
        self.ssl = wrapped
        self.fd = wrapped.fileno()
        self.family = wrapped.family

    def fileno(self) -> int:
        return self.fd

    def getpeername(self):
        return self.ssl.getpeername()

    def getsockname(self):
        return self.ssl.getsockname()

    def getsockopt(self, *args):
        return self.ssl.getsockopt(*args)

    def do_handshake(self) -> None:
        self.ssl.do_handshake()

    def getpeercert(self):
        return self.ssl.getpeercert()

    def version(self) -> str | None:
        return self.ssl.version()

    def pending(self) -> int:
        try:
            return self.ssl.pending()
        except (ValueError, OSError):
            return 0

    def recv_into(self, target, nbytes: int = 0) -> int:
        """Plaintext into ``target`` (its first ``nbytes``), record after record
        until it is full or nothing more is there; 0 at the end of the
        stream; BlockingIOError when nothing came."""
        view = memoryview(target)
        if nbytes:
            view = view[:nbytes]
        total, size = 0, len(view)
        try:
            while total < size:
                try:
                    n = self.ssl.recv_into(view[total:])
                except _WANT:
                    if total:
                        break
                    raise BlockingIOError from None
                except BlockingIOError:  # after shutdown: the plain socket's reads
                    if total:
                        break
                    raise
                if not n:
                    break
                total += n
        finally:
            view.release()
        return total

    def send(self, data, flags: int = 0) -> int:
        """Up to :data:`SEND_CHUNK` bytes of ``data`` through TLS (``flags``
        such as MSG_MORE have no meaning there); BlockingIOError when the
        socket takes none now (the same bytes must come again)."""
        try:
            return self.ssl.send(data[:SEND_CHUNK])
        except _WANT:
            raise BlockingIOError from None

    def shutdown(self, how: int) -> None:
        """Say close_notify when the socket takes it, then shut the socket;
        what comes after is read (and dropped) as plain bytes."""
        try:
            self.ssl.unwrap()
        except (ssl.SSLError, OSError, ValueError):
            pass
        socket.socket.shutdown(self.ssl, how)

    def close(self) -> None:
        self.ssl.close()


def send_file_piece(sock: TlsSocket, fd: int, position: int, left: int) -> int:
    """Write the next bytes of a file piece (``left`` of them from ``position``
    of ``fd``) through TLS: the bytes written (0: the file ended early)."""
    data = os.pread(fd, min(left, SEND_CHUNK), position)
    if not data:
        return 0
    return sock.send(data)


class TlsState:
    """A TLS connection's handshake: its deadline, and whether it is done."""

    __slots__ = ("deadline", "handshaking")

    def __init__(self, deadline: float):
        self.deadline = deadline
        self.handshaking = True


class LogLimit:
    """At most ``per_minute`` lines a minute; the lines held back are counted
    and said with the next one that goes."""

    def __init__(self, per_minute: int = LOG_LINES_PER_MINUTE, clock=time.monotonic):
        self.per_minute = per_minute
        self.clock = clock
        self.window = 0.0
        self.said = 0
        self.held = 0

    def line(self, text: str) -> str | None:
        now = self.clock()
        if now - self.window >= 60.0:
            self.window, self.said = now, 0
        if self.said >= self.per_minute:
            self.held += 1
            return None
        self.said += 1
        if self.held:
            text += f" ({self.held} more not shown)"
            self.held = 0
        return text


# -- the processor's part ---------------------------------------------------------
class TlsConnections:
    """TLS handshakes and reads of a processor; see the module doc."""

    def _init_tls(self, plan, config) -> None:
        """Before the listeners close: which of them are TLS."""
        self.tls_context = getattr(plan, "tls", None)
        self.tls_addresses = tls_listener_addresses(plan.listeners) if self.tls_context else []
        self.tls_timeout = config["ssl.handshake.timeout.ms"] / 1000
        self.tls_max = config["ssl.max.handshakes"]  # handshake steps a loop round
        self.tls_steps = 0  # taken this round (the loop sets it to 0 each round)
        self.tls_owed = False  # a step waits for the next round: do not sleep
        self.tls_pending: set = set()  # connections with plaintext inside their TLS object
        self.tls_hurry = False  # one of them may read now: do not sleep
        self.tls_log = LogLimit()

    def _adopt_tls(self, conn) -> None:
        """A connection just adopted: wrapped for TLS when it came to an ``ssl://``
        listener, and its handshake started (its ClientHello may be there
        already; watched for it otherwise)."""
        if not self.tls_addresses or not accepted_on(self.tls_addresses, conn.sock):
            return
        try:
            wrapped = self.tls_context.wrap_socket(conn.sock, server_side=True,
                                                   do_handshake_on_connect=False)
        except (ssl.SSLError, OSError, ValueError):
            self._close(conn)
            return
        conn.sock = TlsSocket(wrapped)
        conn.tls = TlsState(self.now + self.tls_timeout)
        self._handshake(conn)

    def _handshake(self, conn) -> None:
        """One step of ``conn``'s handshake (epoll said it may move), unless
        this round has taken its ``ssl.max.handshakes`` steps: then it stays
        watched, and epoll (level-triggered) reports it again next round."""
        state = conn.tls
        if self.tls_steps >= self.tls_max:
            self.tls_owed = True  # do not sleep: the step is owed
            return
        self.tls_steps += 1
        try:
            conn.sock.do_handshake()
        except ssl.SSLWantReadError:
            self._handshake_wants(conn, write=False)
            return
        except ssl.SSLWantWriteError:
            self._handshake_wants(conn, write=True)
            return
        except (ssl.SSLError, OSError, ValueError) as e:
            self._tls_refused(conn, _ssl_reason(e))
            return
        try:
            host = peer_host(conn.sock)
        except OSError:
            host = UNKNOWN_HOST
        try:
            identity = from_certificate(conn.sock.getpeercert(), host)
        except ValueError as e:
            self._tls_refused(conn, str(e))
            return
        self._identify(conn, identity)  # its handler is told first (processor_access)
        state.handshaking = False
        conn.active = self.now
        conn.reading, conn.writing = True, False
        self._apply_interest(conn, lazy=False)
        if conn.sock.pending():
            self.tls_pending.add(conn)

    def _handshake_wants(self, conn, write: bool) -> None:
        conn.reading, conn.writing = not write, write
        self._apply_interest(conn, lazy=False)
        conn.active = self.now

    def _tls_refused(self, conn, reason: str) -> None:
        """Close ``conn`` whose handshake failed: counted in the processor's
        errors, and said in the log at a bounded rate."""
        self.count(procs.ERRORS)
        try:
            host = peer_host(conn.sock)
        except OSError:
            host = UNKNOWN_HOST
        line = self.tls_log.line(f"hostbroker: {self.name}: TLS handshake with {host} "
                                 f"failed: {reason}; connection closed")
        if line is not None:
            print(line, file=sys.stderr, flush=True)
        self._close(conn)

    def _tls_closed(self, conn) -> None:
        """``conn`` (a TLS connection) is closed: its reads go."""
        self.tls_pending.discard(conn)

    def _tls_expired(self, conn) -> bool:
        """Close ``conn`` if its handshake is past its deadline; whether it is
        still handshaking (the idle and read deadlines do not apply then)."""
        if not conn.tls.handshaking:
            return False
        if self.now > conn.tls.deadline:
            self._tls_refused(conn, "not done within ssl.handshake.timeout.ms")
        return True

    def _tls_round(self) -> None:
        """Each loop round: read the connections whose TLS object holds
        plaintext epoll cannot see."""
        if not self.tls_pending:
            self.tls_hurry = False
            return
        for conn in list(self.tls_pending):
            if self.by_fd.get(conn.fd) is not conn or not conn.sock.pending():
                self.tls_pending.discard(conn)
            elif conn.reading and not conn.lingering:
                self.tls_pending.discard(conn)
                self._read(conn)  # (adds it again if it still holds some)
        self.tls_hurry = any(c.reading for c in self.tls_pending)

    def _tls_reading_on(self, conn) -> None:
        """``conn`` may read again: plaintext its TLS object already holds is
        read in this round's ``_tls_round`` or the next without a sleep (epoll
        will not wake the loop for it: the socket may be empty)."""
        if not conn.tls.handshaking and conn.sock.pending():
            self.tls_pending.add(conn)
            self.tls_hurry = True

    def _tls_read_more(self, conn) -> None:
        """After a read of ``conn``: remember it if its TLS object holds more."""
        if conn.sock.pending():
            self.tls_pending.add(conn)
