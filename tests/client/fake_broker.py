"""A scripted broker on a real socket, for client tests that need no broker.

It accepts connections one after another, cuts what it reads into frames with
the protocol's FrameReader, and hands each decoded request to ``answer``,
which returns the bytes to send back (or b"" for none) or ``CLOSE``.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

from hostbroker.protocol import FrameReader, decode_request

CLOSE = object()


class FakeBroker:
    def __init__(self, answer: Callable, *, unix_path: str | None = None):
        self.answer = answer
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
                header, request = decode_request(frame)
                self.requests.append((header, request))
                reply = self.answer(header, request)
                if reply is CLOSE:
                    return
                conn.settimeout(5)
                conn.sendall(reply)
                conn.settimeout(0.05)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._listener.close()
