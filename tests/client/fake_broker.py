"""A scripted broker on a real socket, for client tests that need no broker.

It accepts connections one after another, cuts what it reads into frames with
the protocol's FrameReader, and hands each decoded request to ``answer``,
which returns the bytes to send back (or b"" for none) or ``CLOSE``. The
answer to a PRODUCE v1 or FETCH v2 (the clients' versions) may be written as
version 0's: the fake appends its throttle time (``throttle_ms``, 0 by
default), unless ``throttle_field=False`` (a broker answering in version 0's
shape).
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable

from hostbroker.protocol import FrameReader, api, throttled
from hostbroker.protocol.replication import decode_any_request

CLOSE = object()


def with_throttle_time(reply: bytes, throttle_ms: int = 0) -> bytes:
    """A version 0 PRODUCE or FETCH answer frame as version 1's or 2's."""
    (size,) = struct.unpack_from(">i", reply)
    if size + 4 != len(reply):
        return reply  # not one whole answer: sent as the test wrote it
    return struct.pack(">i", size + 4) + reply[4:] + struct.pack(">i", throttle_ms)


class FakeBroker:
    def __init__(self, answer: Callable, *, unix_path: str | None = None,
                 throttle_field: bool = True, throttle_ms: int = 0):
        self.answer = answer
        self.throttle_field = throttle_field
        self.throttle_ms = throttle_ms
        self.requests: list = []  # (header, request) in arrival order
        if unix_path is None:
            self._listener = socket.create_server(("127.0.0.1", 0))
            self.uri = f"tcp://127.0.0.1:{self._listener.getsockname()[1]}"
        else:
            self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._listener.bind(unix_path)
            self._listener.listen()
            self.uri = f"unix://{unix_path}"
        self._listener.settimeout(0.05)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(0.05)
                try:
                    self._serve_connection(conn)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client went away: serve the next one

    def _serve_connection(self, conn: socket.socket) -> None:
        reader = FrameReader()
        while not self._stop.is_set():
            try:
                data = conn.recv(65536)
            except TimeoutError:
                continue
            if not data:
                return
            reader.feed(data)
            while (frame := reader.next_frame()) is not None:
                header, request = decode_any_request(frame)
                self.requests.append((header, request))
                reply = self.answer(header, request)
                if reply is CLOSE:
                    return
                if (self.throttle_field
                        and throttled.throttled_answer(header.api_key, header.api_version)
                        and len(reply) > 4 + api.ERROR_FRAME_SIZE):
                    reply = with_throttle_time(reply, self.throttle_ms)
                conn.settimeout(5)
                conn.sendall(reply)
                conn.settimeout(0.05)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._listener.close()
