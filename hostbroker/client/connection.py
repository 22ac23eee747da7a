"""One blocking connection to a broker, over TCP, TCP with TLS, or a Unix socket.

:class:`BrokerConnection` owns a socket and the order of its answers. Requests
may be pipelined: ``send`` as many as wanted, then ``receive`` their answers
in the order sent (the broker answers a connection in the order it received
its requests; a PRODUCE with ``acks = 0`` has no answer and holds no place).
A FIFO of pending ``(correlation_id, api_key)`` tells ``receive`` how to
decode the next frame and which correlation id it must carry. Bound the
number in flight: a broker whose answers fill the socket buffers stops
reading until the client reads, and a client that only sends then waits too.

An answer of exactly 6 bytes is an error frame (no normal answer is that
short, see :mod:`hostbroker.protocol.api`): the broker could not decode the
request and closes the connection, so ``receive`` closes it too and raises
:class:`BrokerError` with the code.

Each answer is read into a new buffer of its own, so what it decodes to
(message sets are views into it) stays valid for as long as it is held. With
``reuse_buffer=True`` answers are read into one buffer the connection keeps
(grown to the largest answer so far) and stay valid only until the next
``receive``: no allocation, zero-fill or page faults per answer, for a
reader that is done with an answer (or has copied what it keeps) before it
reads the next.

After any failure mid-stream (an error frame, a timeout, bytes that do not
decode, a correlation id out of order) the connection is closed rather than
resynchronised: nothing after a broken frame can be trusted. ``connect()``
opens a fresh one.

Something that is not a broker is told apart before anything large is read:
an answer's size prefix must be at least 4 and at most what the request can
bring (``max_response_bytes``, and for a FETCH the sum of its partitions'
``max_bytes`` plus headers), and its first 4 bytes must be the pending
correlation id, checked before its buffer is allocated. Either failure
raises :class:`NotABrokerError` (a ProtocolError) in one line, so an HTTP
server (whose ``HTTP`` reads as a size of 1.2 GB) or a peer sending garbage
is refused at once. The connect, and until a connection's first answer
arrives the wait for it (plus the time the request lets the broker hold
it), are bounded by ``setup_timeout`` instead of ``timeout``: a peer that
does not accept, or accepts and never answers, fails within seconds.

An ``ssl://HOST:PORT`` URI connects over TCP, then makes a TLS handshake
within the connect's timeout (for the whole handshake), with the TLS
settings given (``tls``: the ``ssl.*`` client settings) over the process's
defaults (what a command's ``--command-config`` gives; see
:mod:`hostbroker.client.tls`); by default the broker's certificate must chain to the system's CAs
and name the host of the URI. A failed handshake is an OSError of one line.
Under TLS 1.3 the client's side of the handshake ends before the broker has
checked the client's certificate: a broker that refuses it (or wanted one)
says so with an alert, or closes, after the client sent its first request,
and the client learns it at its first read. That too is an OSError of one
line, ``cannot reach URI: ...`` (as a failed handshake), naming the alert or
saying the broker closed; a TLS error after the first answer is one of
``connection to URI lost: ...``.

The connection is not thread safe; give each thread its own.
"""

from __future__ import annotations

import collections
import socket
import ssl
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from hostbroker.client.errors import BrokerError, ConnectionClosedError
from hostbroker.client.throttle_stats import decode_throttled
from hostbroker.client.tls import handshake, tls_context
from hostbroker.errors import ProtocolError
from hostbroker.protocol import acls, api, logdirs, replication, throttled, topics_admin
from hostbroker.protocol.primitives import Buffer

DEFAULT_TIMEOUT = 30.0
# Bound on the wait for a new connection's first answer (Kafka's
# socket.connection.setup.timeout.ms default).
DEFAULT_SETUP_TIMEOUT = 10.0
DEFAULT_CLIENT_ID = "hostbroker-python"
# The longest a broker holds a PRODUCE v1 or FETCH v2 answer for a quota (its
# quota.max.throttle.ms default): waited for on top of the answer's timeout.
DEFAULT_QUOTA_HOLD = 30.0
# Larger than any fetch answer a sane max_bytes gives; guards the allocation
# against a corrupt size.
DEFAULT_MAX_RESPONSE_BYTES = 1 << 30

_SIZE = struct.Struct(">i")
# A FETCH answer's bytes besides the message sets: header and array counts,
# and per partition its topic name (at most 32 KiB) and fixed fields.
_FETCH_ANSWER_OVERHEAD = 64
_FETCH_PARTITION_OVERHEAD = 2 + 32767 + 4 + 2 + 8 + 4 + 8


_REPLICATION_REQUESTS = frozenset(replication.REPLICATION_REQUEST_TYPES.values()) \
    | frozenset(logdirs.LOGDIRS_REQUEST_TYPES.values()) \
    | frozenset(topics_admin.TOPICS_ADMIN_REQUEST_TYPES.values()) \
    | frozenset(acls.ACLS_REQUEST_TYPES.values()) \
    | frozenset(throttled.THROTTLED_REQUEST_TYPES.values())
_REPLICATION_RESPONSES = {**replication.REPLICATION_RESPONSE_TYPES,
                          **logdirs.LOGDIRS_RESPONSE_TYPES,
                          **topics_admin.TOPICS_ADMIN_RESPONSE_TYPES,
                          **acls.ACLS_RESPONSE_TYPES,
                          **throttled.THROTTLED_RESPONSE_TYPES}
_THROTTLED_RESPONSES = frozenset(throttled.THROTTLED_RESPONSE_TYPES.values())
_FETCHES = (api.FetchRequest, replication.FetchRequestV1, throttled.FetchRequestV2)
_PRODUCES = (api.ProduceRequest, throttled.ProduceRequestV1)


class NotABrokerError(ProtocolError):
    """The peer's answer cannot be a broker's: a size prefix out of bounds, or a
    correlation id that is not the pending request's."""
# Small answers are read many at a time into this buffer; a large one goes
# straight into its own frame buffer.
_INPUT_BUFFER_BYTES = 64 * 1024

# Buffers per sendmsg: Linux refuses more than 1024 (IOV_MAX).
_IOV_MAX = 1024

_URI_FORMS = "tcp://HOST:PORT, ssl://HOST:PORT, unix:///ABS/PATH or unix://./REL/PATH"

def parse_uri(uri: str) -> tuple[socket.AddressFamily, str | tuple[str, int]]:
    """``(family, address)`` for a broker URI, ready for ``socket.connect``.

    ``tcp://HOST:PORT`` (an IPv6 literal in brackets: ``tcp://[::1]:9092``),
    ``ssl://HOST:PORT`` (the same, with TLS),
    ``unix:///ABS/PATH``, or ``unix://./REL/PATH`` (relative to the current
    directory). Raises ValueError for anything else.
    """
    scheme, separator, rest = uri.partition("://")
    if separator and scheme in ("tcp", "ssl"):
        host, colon, port = rest.rpartition(":")
        family = socket.AF_INET
        if host.startswith("[") and host.endswith("]"):
            host, family = host[1:-1], socket.AF_INET6
        if colon and host and "/" not in rest and port.isdigit() and 0 < int(port) < 65536:
            return family, (host, int(port))
    elif separator and scheme == "unix":
        if rest.startswith(("/", "./")) and rest not in ("/", "./"):
            return socket.AF_UNIX, rest
    raise ValueError(f"bad broker URI {uri!r}: expected {_URI_FORMS}")


class _Pending(NamedTuple):
    correlation_id: int
    api_key: api.ApiKey
    # How long the broker may rightly hold the answer (long-poll fetch,
    # acks=-1 produce), on top of the connection's timeout.
    broker_wait: float
    # The largest answer the request can bring (None: max_response_bytes).
    max_size: int | None = None
    # A request of another version than 0 (replication): the answer's class.
    response_cls: type | None = None


def _max_answer(request: api.Request) -> int | None:
    if isinstance(request, _FETCHES):
        return (_FETCH_ANSWER_OVERHEAD + sum(_FETCH_PARTITION_OVERHEAD + max(p.max_bytes, 0)
                                             for p in request.partitions))
    return None


def _broker_wait(request: api.Request, quota_hold: float) -> float:
    # A FETCH v2's answer may be held for a quota after its long poll.
    if isinstance(request, _FETCHES):
        hold = quota_hold if isinstance(request, throttled.FetchRequestV2) else 0.0
        return max(request.max_wait_ms, 0) / 1000 + hold
    if isinstance(request, _PRODUCES):
        return _produce_wait(request.acks, request.timeout_ms, getattr(request, "API_VERSION", 0),
                             quota_hold)
    return 0.0


def _produce_wait(acks: int, timeout_ms: int, version: int, quota_hold: float) -> float:
    # acks=-1 waits at the broker (for the flush), and a PRODUCE v1's answer
    # may be held for a quota; other answers are due at once, so the socket
    # keeps one timeout for sends and receives.
    flush = max(timeout_ms, 0) / 1000 if acks == -1 else 0.0
    return flush + (quota_hold if version == throttled.PRODUCE_V1 else 0.0)


class BrokerConnection:
    """A blocking connection; no I/O until :meth:`connect`.

    ``timeout`` bounds each connect, send and wait for an answer (plus the
    time a request lets the broker hold its answer); ``setup_timeout``, when
    shorter, bounds the wait for the first answer of each connection.
    ``quota_hold`` is added to the wait for a PRODUCE v1 or FETCH v2 answer,
    which a broker may hold that long for a quota (the first answer too).
    ``max_response_bytes`` bounds any answer. Usable as a context manager,
    which connects if needed and closes on exit.
    """

    def __init__(
        self,
        uri: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        client_id: str | None = DEFAULT_CLIENT_ID,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        reuse_buffer: bool = False,
        setup_timeout: float = DEFAULT_SETUP_TIMEOUT,
        tls: Mapping[str, Any] | None = None,
        quota_hold: float = DEFAULT_QUOTA_HOLD,
    ):
        self.uri = uri
        self.quota_hold = quota_hold
        self.family, self.address = parse_uri(uri)
        # ssl://: the ssl.* settings (None: the process's defaults), read at connect
        self.tls = (tls or {}) if uri.startswith("ssl://") else None
        self.timeout = timeout
        self.setup_timeout = setup_timeout
        self._answered = False  # whether this connection brought an answer yet
        self.client_id = client_id
        self.max_response_bytes = max_response_bytes
        self.reuse_buffer = reuse_buffer
        self._frame_buffer = bytearray()
        self._sock: socket.socket | None = None
        self._pending: collections.deque[_Pending] = collections.deque()
        self._next_correlation_id = 0
        self._input = bytearray(_INPUT_BUFFER_BYTES)
        self._input_view = memoryview(self._input)
        self._start = 0  # unread input is self._input[self._start:self._end]
        self._end = 0

    def __repr__(self) -> str:
        state = "connected" if self.connected else "closed"
        return f"<BrokerConnection {self.uri} {state}, {len(self._pending)} pending>"

    @property
    def connected(self) -> bool:
        return self._sock is not None

    @property
    def pending(self) -> int:
        """Requests sent whose answers have not been received."""
        return len(self._pending)

    def connect(self) -> BrokerConnection:
        """Open the socket (closing any earlier one and forgetting its pending requests)."""
        self.close()
        self._answered = False
        timeout = min(self.timeout, self.setup_timeout)
        if self.family == socket.AF_UNIX:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(timeout)
                sock.connect(self.address)
            except OSError as exc:
                sock.close()
                raise _unreachable(self.uri, exc, timeout) from None
            except BaseException:
                sock.close()
                raise
        else:
            # Resolves the host name and tries each address it has.
            try:
                sock = socket.create_connection(self.address, timeout=timeout)
            except OSError as exc:
                raise _unreachable(self.uri, exc, timeout) from None
            # Requests are whole frames written at once; Nagle would only
            # hold back the next small one.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.tls is not None:
                sock = self._handshake(sock, timeout)
        self._sock = sock
        return self

    def _handshake(self, sock: socket.socket, timeout: float) -> ssl.SSLSocket:
        """The TLS handshake of a connected socket, within ``timeout`` in all;
        an OSError of one line if it fails."""
        try:
            # (a broker's own connection gives its context ready made)
            context = self.tls if isinstance(self.tls, ssl.SSLContext) else tls_context(self.tls)
        except ValueError as exc:
            sock.close()
            raise OSError(f"cannot reach {self.uri}: {exc}") from None
        try:
            return handshake(context, sock, self.address[0], timeout)
        except ssl.SSLCertVerificationError as exc:
            sock.close()
            raise OSError(f"cannot reach {self.uri}: the broker's certificate is refused: "
                          f"{exc.verify_message or exc.reason}") from None
        except TimeoutError:
            sock.close()
            raise TimeoutError(f"connecting to {self.uri}: no TLS handshake within "
                               f"{timeout:g} s") from None
        except (ssl.SSLError, OSError) as exc:
            sock.close()
            reason = getattr(exc, "reason", None) or exc.strerror or str(exc)
            raise OSError(f"cannot reach {self.uri}: TLS handshake failed: {reason}") from None

    def close(self) -> None:
        """Close the socket; pending answers are lost. Safe to call twice."""
        sock, self._sock = self._sock, None
        self._pending.clear()
        self._start = self._end = 0
        if sock is not None:
            sock.close()

    def __enter__(self) -> BrokerConnection:
        if not self.connected:
            self.connect()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _set_timeout(self, sock: socket.socket, timeout: float) -> None:
        # Each settimeout() is a system call; most requests keep the last one.
        if sock.gettimeout() != timeout:
            sock.settimeout(timeout)

    def _socket(self) -> socket.socket:
        if self._sock is None:
            raise ConnectionClosedError(f"connection to {self.uri} is closed")
        return self._sock

    def send(self, request: api.Request) -> int:
        """Send ``request`` and return its correlation id, without waiting for the answer."""
        correlation_id = self._next_id()
        response_cls = None
        if type(request) in _REPLICATION_REQUESTS:  # METADATA v1 and v2, FETCH v1, ...
            response_cls = _REPLICATION_RESPONSES[(request.API_KEY, request.API_VERSION)]
        self._write([api.encode_request(request, correlation_id, self.client_id)])
        if not (isinstance(request, _PRODUCES) and request.acks == 0):
            self._pending.append(_Pending(correlation_id, request.API_KEY,
                                          _broker_wait(request, self.quota_hold),
                                          _max_answer(request), response_cls))
        return correlation_id

    def _next_id(self) -> int:
        self._socket()  # closed: raise before a correlation id is used
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) & 0x7FFFFFFF
        return correlation_id

    def _write(self, parts: Sequence[Buffer]) -> None:
        """Write a whole frame (in one or more buffers); close the connection on any failure."""
        sock = self._socket()
        try:
            self._set_timeout(sock, self.timeout)
            if len(parts) == 1:
                sock.sendall(parts[0])
            elif self.tls is not None:  # (no sendmsg through TLS)
                sock.sendall(b"".join(parts))
            else:
                _sendmsg_all(sock, parts)
        except ConnectionError as exc:
            self.close()
            raise ConnectionClosedError(f"connection to {self.uri} lost: {exc}") from exc
        except ssl.SSLError as exc:
            self.close()
            raise self._tls_failure(exc) from None
        except OSError:
            # Part of the frame may be out: the stream is unusable.
            self.close()
            raise

    def send_produce(
        self,
        acks: int,
        timeout_ms: int,
        partitions: Sequence[tuple[str, int, Sequence[Buffer]]],
        version: int = 0,
    ) -> int:
        """Send a PRODUCE of ``(topic, partition, message sets)`` and return its correlation id.

        The same request as ``send(ProduceRequest(...))`` with each partition's
        sets joined, but the sets are handed to the kernel as they are
        (``sendmsg`` with the small headers between them): no copy of the
        data is made. ``version`` 1: PRODUCE v1, answered with a throttle time.
        """
        correlation_id = self._next_id()
        self._write(api.encode_produce_request_parts(acks, timeout_ms, partitions,
                                                     correlation_id, self.client_id, version))
        if acks != 0:
            response_cls = (throttled.ProduceResponseV1 if version == throttled.PRODUCE_V1
                            else None)
            self._pending.append(_Pending(correlation_id, api.ApiKey.PRODUCE,
                                          _produce_wait(acks, timeout_ms, version,
                                                        self.quota_hold),
                                          None, response_cls))
        return correlation_id

    def receive(self, api_key: int | None = None) -> api.Response:
        """The answer to the oldest pending request.

        ``api_key``, if given, must be that request's (a check on the caller's
        bookkeeping). With ``reuse_buffer`` the answer's message sets are
        valid only until the next ``receive``. Raises BrokerError for an error frame,
        ConnectionClosedError when the connection is or gets closed,
        ProtocolError for an answer that does not decode or is out of order,
        TimeoutError; after any of these the connection is closed.
        """
        self._socket()
        if not self._pending:
            raise RuntimeError("receive() without a pending request")
        expected = self._pending[0]
        if api_key is not None and api_key != expected.api_key:
            raise ValueError(
                f"the next answer is to {expected.api_key.name}, not {api.ApiKey(api_key).name}"
            )
        self._pending.popleft()
        wait = self.timeout if self._answered else min(self.timeout, self.setup_timeout)
        try:
            frame = self._read_frame(wait + expected.broker_wait, expected)
            self._answered = True
            if api.is_error_frame(frame):
                correlation_id, code = api.decode_error_frame(frame)
                raise BrokerError(
                    code, f"request {correlation_id} refused, connection closed by the broker"
                )
            if expected.response_cls is None:
                correlation_id, response = api.decode_response(expected.api_key, frame)
            elif expected.response_cls in _THROTTLED_RESPONSES:
                correlation_id, response = decode_throttled(frame, expected.response_cls,
                                                            self.uri)
            else:
                correlation_id, response = replication.decode_response(frame,
                                                                       expected.response_cls)
            if correlation_id != expected.correlation_id:
                raise ProtocolError(
                    f"answer carries correlation id {correlation_id},"
                    f" expected {expected.correlation_id}"
                )
        except BaseException:
            self.close()
            raise
        return response

    def request(self, request: api.Request) -> api.Response | None:
        """Send ``request`` and wait for its answer (None for a PRODUCE with acks=0).

        Raises RuntimeError while earlier answers are pending: their order
        belongs to whoever pipelined them.
        """
        if self._pending:
            raise RuntimeError(f"request() with {len(self._pending)} answers pending")
        self.send(request)
        if isinstance(request, _PRODUCES) and request.acks == 0:
            return None
        return self.receive()

    # Reading frames.

    def _read_frame(self, timeout: float, expected: _Pending) -> bytearray | memoryview:
        """The next frame without its size prefix.

        Its size and correlation id are checked against ``expected`` before
        its buffer is allocated (NotABrokerError).

        In a buffer of its own, because decoded message sets are views into
        it and must stay valid after the next answer is read; or, with
        ``reuse_buffer``, in the connection's buffer, replaced (never
        resized, so older views keep their bytes) when an answer outgrows it.
        """
        sock = self._socket()
        self._set_timeout(sock, timeout)
        try:
            self._fill(_SIZE.size)
        except TimeoutError:
            raise TimeoutError(f"no answer from {self.uri} within {timeout:g} s") from None
        (size,) = _SIZE.unpack_from(self._input, self._start)
        limit = self.max_response_bytes
        if expected.max_size is not None:
            limit = min(limit, expected.max_size)
        if not _SIZE.size <= size <= limit:
            raise NotABrokerError(
                f"{self.uri} is not a hostbroker broker: its answer starts "
                f"{bytes(self._input_view[self._start:self._end][:16])!r}, a size of {size} bytes "
                f"(the limit for an answer to {expected.api_key.name} is 4 to {limit})")
        self._start += _SIZE.size
        self._fill(_SIZE.size)
        (correlation_id,) = _SIZE.unpack_from(self._input, self._start)
        if correlation_id != expected.correlation_id:
            raise NotABrokerError(
                f"{self.uri} is not a hostbroker broker, or is out of step: its answer carries "
                f"correlation id {correlation_id}, expected {expected.correlation_id}")
        if self.reuse_buffer:
            if len(self._frame_buffer) < size:
                grown = min(max(size, 2 * len(self._frame_buffer)), self.max_response_bytes)
                self._frame_buffer = bytearray(grown)
            frame = memoryview(self._frame_buffer)[:size]
        else:
            frame = bytearray(size)
        buffered = min(size, self._end - self._start)
        frame[:buffered] = self._input_view[self._start : self._start + buffered]
        self._start += buffered
        view = memoryview(frame)[buffered:]
        while view:
            view = view[self._recv_into(sock, view) :]
        return frame

    def _fill(self, n: int) -> None:
        """Have at least ``n`` bytes (n is small) in the input buffer."""
        if self._end - self._start >= n:
            return
        if self._start:
            unread = self._end - self._start
            # Fewer than n bytes: a copy through bytes() costs nothing and
            # keeps the overlapping move well defined.
            self._input[:unread] = bytes(self._input_view[self._start : self._end])
            self._start, self._end = 0, unread
        while self._end - self._start < n:
            self._end += self._recv_into(self._socket(), self._input_view[self._end :])

    def _recv_into(self, sock: socket.socket, view: memoryview) -> int:
        try:
            received = sock.recv_into(view)
        except ConnectionError as exc:
            raise ConnectionClosedError(f"connection to {self.uri} lost: {exc}") from exc
        except ssl.SSLError as exc:
            raise self._tls_failure(exc) from None
        if not received:
            raise ConnectionClosedError(f"connection to {self.uri} closed by the broker")
        return received

    def _tls_failure(self, exc: ssl.SSLError) -> OSError:
        """``exc`` (a TLS error reading or writing, the handshake done) as an
        OSError of one line naming the broker: before the connection's first
        answer the broker refused it (TLS 1.3 tells a refused or missing
        client certificate only now), after it the connection was lost."""
        if isinstance(exc, ssl.SSLEOFError):
            reason = "the broker closed the TLS connection"
            if not self._answered:
                reason += (" before its first answer (as a broker that requires a client "
                           "certificate does when given none, or one it does not trust)")
        else:
            alert = exc.reason or str(exc)
            reason = f"the broker's TLS alert: {alert.lower().replace('_', ' ')}"
        if self._answered:
            return OSError(f"connection to {self.uri} lost: {reason}")
        return OSError(f"cannot reach {self.uri}: {reason}")


def _sendmsg_all(sock: socket.socket, parts: Sequence[Buffer]) -> None:
    """Write every byte of ``parts``, in order, with as few ``sendmsg`` calls as the kernel
    takes (at most _IOV_MAX buffers each)."""
    views = [memoryview(part) for part in parts if len(part)]
    first = 0
    while first < len(views):
        sent = sock.sendmsg(views[first : first + _IOV_MAX])
        while sent:
            size = views[first].nbytes
            if sent < size:
                views[first] = views[first][sent:]
                break
            sent -= size
            first += 1


def _unreachable(uri: str, exc: OSError, timeout: float) -> OSError:
    """``exc`` (a failed connect to ``uri``) again, of the same class and errno, saying
    in its one line which broker could not be reached and why, reason first: a
    producer's or a Spark task's error then names the URI."""
    if isinstance(exc, TimeoutError):
        return TimeoutError(f"connecting to {uri}: no answer within {timeout:g} s")
    reason = exc.strerror or str(exc)
    if exc.errno is not None:
        reason = f"[Errno {exc.errno}] {reason}"
    named = type(exc)(f"cannot reach {uri}: {reason}")
    named.errno = exc.errno  # strerror stays None: str() is the line above
    named.broker_uri, named.broker_reason = uri, exc.strerror or str(exc)
    return named


def connect(uri: str, **options: Any) -> BrokerConnection:
    """A connected :class:`BrokerConnection` (options as for its constructor)."""
    return BrokerConnection(uri, **options).connect()


def connect_first(uris: Sequence[str], make: Callable[[str], BrokerConnection]) -> BrokerConnection:
    """``make(uri)`` connected, for the first of ``uris`` that accepts; the last
    failure (an OSError) when none does."""
    failure: OSError | None = None
    for uri in uris:
        connection = make(uri)
        try:
            connection.connect()
        except OSError as exc:
            failure = exc
            continue
        return connection
    assert failure is not None, "no broker URI to connect to"
    raise failure
