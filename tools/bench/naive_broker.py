#!/usr/bin/env python3
"""What would a naive broker do? One process speaking hostbroker's wire protocol: the baseline.

What a new user would write in an afternoon from docs/spec/protocol.md, and
what ``tools/bench/latency.py`` measures hostbroker against: one process, one
thread per connection, no shared memory. Each partition is one log file
(``DIR/TOPIC-PARTITION/00000000000000000000.log``), appended with
``os.write`` under the partition's lock; a FETCH is answered by reading the
file with ``os.pread``; a FETCH that finds fewer than ``min_bytes`` waits on
the partition's condition variable until an append brings them or
``max_wait_ms`` passes. Like hostbroker it checks every produced entry
(length, magic, attributes, CRC) with ``hostbroker.log.message`` before it
appends, and it reuses hostbroker's pure codecs (``hostbroker.protocol``).

Served: METADATA, PRODUCE (acks 0, 1 and -1, the last with an fdatasync
before the answer), FETCH (long poll), OFFSETS (latest, earliest; any other
time gives the log start), CREATE_TOPIC. Anything else gets an error frame
(UNSUPPORTED_VERSION) and the connection closes, as hostbroker does with a
request it cannot decode. Unknown topics are created on PRODUCE with
``--partitions`` partitions. Offsets are byte positions in the one file, as
in hostbroker.

    python tools/bench/naive_broker.py --listen tcp://127.0.0.1:PORT --data DIR

Runs until SIGTERM or SIGINT. Not for anything but benchmarks.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from hostbroker.errors import ErrorCode, HostbrokerError, ProtocolError  # noqa: E402
from hostbroker.log.message import validate_message_set  # noqa: E402
from hostbroker.protocol import FrameReader, api, throttled  # noqa: E402
from hostbroker.protocol.errors import HeaderTooShortError  # noqa: E402

MAX_MESSAGE_BYTES = 1_000_000
RECV_BYTES = 256 * 1024


class Partition:
    """One log file; ``end`` (its size) moves only under ``cond``."""

    def __init__(self, path: str):
        os.makedirs(path, exist_ok=True)
        self.fd = os.open(os.path.join(path, f"{0:020d}.log"),
                          os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.end = os.fstat(self.fd).st_size
        self.cond = threading.Condition()

    def append(self, data, sync: bool) -> int:
        with self.cond:
            base = self.end
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view):]
            self.end += len(data)
            if sync:
                os.fdatasync(self.fd)
            self.cond.notify_all()
        return base


class Logs:
    """The topics and their partitions, found on disk at start, created on demand."""

    def __init__(self, root: str, partitions: int):
        self.root = root
        self.default_partitions = partitions
        self.topics: dict[str, list[Partition]] = {}
        self.lock = threading.Lock()
        os.makedirs(root, exist_ok=True)
        found: dict[str, int] = {}
        for name in os.listdir(root):
            topic, _, number = name.rpartition("-")
            if topic and number.isdigit():
                found[topic] = max(found.get(topic, 0), int(number) + 1)
        for topic, count in found.items():
            self.create(topic, count)

    def create(self, topic: str, count: int) -> bool:
        with self.lock:
            if topic in self.topics:
                return False
            self.topics[topic] = [Partition(os.path.join(self.root, f"{topic}-{p}"))
                                  for p in range(count)]
            return True

    def get(self, topic: str, partition: int, create: bool = False) -> Partition | None:
        parts = self.topics.get(topic)
        if parts is None and create and topic and "/" not in topic and not topic.startswith("."):
            self.create(topic, self.default_partitions)
            parts = self.topics.get(topic)
        if parts is None or not 0 <= partition < len(parts):
            return None
        return parts[partition]


class Broker:
    def __init__(self, logs: Logs, host: str | None, port: int, unix_path: str | None):
        self.logs = logs
        self.host, self.port, self.unix_path = host, port, unix_path

    # -- the APIs ------------------------------------------------------------

    def metadata(self, request: api.MetadataRequest) -> api.MetadataResponse:
        names = request.topics or tuple(sorted(self.logs.topics))
        topics = []
        for name in names:
            parts = self.logs.topics.get(name)
            if parts is None:
                topics.append(api.MetadataTopic(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ()))
                continue
            topics.append(api.MetadataTopic(name, ErrorCode.NONE, tuple(
                api.MetadataPartition(i, ErrorCode.NONE, 0, 0, p.end, self.logs.root)
                for i, p in enumerate(parts))))
        brokers = (api.MetadataBroker(0, self.host, self.port if self.host else -1,
                                      self.unix_path),)
        return api.MetadataResponse(0, brokers, tuple(topics))

    def produce(self, request: api.ProduceRequest) -> api.ProduceResponse:
        results = []
        for part in request.partitions:
            log = self.logs.get(part.topic, part.partition, create=True)
            if log is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                try:
                    validate_message_set(part.message_set, MAX_MESSAGE_BYTES)
                    code = ErrorCode.NONE
                except HostbrokerError as exc:  # InvalidMessageError, MessageTooLargeError
                    code = exc.code
            if code != ErrorCode.NONE:
                results.append(api.ProducePartitionResult(part.topic, part.partition, code, -1, -1))
                continue
            base = log.append(part.message_set, request.acks == -1)
            results.append(api.ProducePartitionResult(
                part.topic, part.partition, ErrorCode.NONE, base, base + len(part.message_set)))
        return api.ProduceResponse(tuple(results))

    def _available(self, request: api.FetchRequest) -> int:
        total = 0
        for p in request.partitions:
            log = self.logs.get(p.topic, p.partition)
            if log is not None and p.max_bytes > 0:
                total += max(0, min(log.end - p.offset, p.max_bytes))
        return total

    def fetch(self, request: api.FetchRequest) -> list:
        """The answer's buffers: header chunks and the data read from the files."""
        if request.max_wait_ms > 0 and self._available(request) < request.min_bytes:
            deadline = time.monotonic() + request.max_wait_ms / 1000
            # Wait on the first partition's condition: what a simple broker does.
            first = request.partitions[0] if request.partitions else None
            log = first and self.logs.get(first.topic, first.partition)
            while self._available(request) < request.min_bytes:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                if log is None:
                    time.sleep(left)
                    break
                with log.cond:
                    if self._available(request) >= request.min_bytes:
                        break
                    log.cond.wait(left)
        heads, datas = [], []
        for p in request.partitions:
            log = self.logs.get(p.topic, p.partition)
            data = b""
            if log is None:
                code, end = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1
            elif p.max_bytes <= 0:
                code, end = ErrorCode.INVALID_FETCH_SIZE, log.end
            else:
                end = log.end
                if not 0 <= p.offset <= end:
                    code = ErrorCode.OFFSET_OUT_OF_RANGE
                else:
                    code = ErrorCode.NONE
                    data = os.pread(log.fd, min(p.max_bytes, end - p.offset), p.offset)
            heads.append(api.FetchPartitionHeader(p.topic, p.partition, code, end, len(data)))
            datas.append(data)
        return heads, datas

    def offsets(self, request: api.OffsetsRequest) -> api.OffsetsResponse:
        log = self.logs.get(request.topic, request.partition)
        if log is None:
            return api.OffsetsResponse(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ())
        if request.time == api.LATEST_TIME:
            return api.OffsetsResponse(ErrorCode.NONE, (log.end,))
        return api.OffsetsResponse(ErrorCode.NONE, (0,))

    def create_topic(self, request: api.CreateTopicRequest) -> api.AdminResponse:
        if request.partitions < 1:
            return api.AdminResponse(ErrorCode.INVALID_REQUEST, "partitions must be >= 1")
        if not self.logs.create(request.topic, request.partitions):
            return api.AdminResponse(ErrorCode.TOPIC_ALREADY_EXISTS, None)
        return api.AdminResponse(ErrorCode.NONE, None)

    # -- one connection --------------------------------------------------------

    def serve_connection(self, sock: socket.socket) -> None:
        frames = FrameReader()
        buffer = bytearray(RECV_BYTES)
        try:
            while True:
                n = sock.recv_into(buffer)
                if not n:
                    return
                frames.feed(memoryview(buffer)[:n])
                while (frame := frames.next_frame()) is not None:
                    if not self.answer(sock, frame):
                        return
        except (OSError, ProtocolError):
            return
        finally:
            sock.close()

    def answer(self, sock: socket.socket, frame: bytes) -> bool:
        """Answer one request; False when the connection is to close."""
        try:
            header, request, v1 = self.decode(frame)
        except HeaderTooShortError:
            return False
        except ProtocolError as exc:
            sock.sendall(api.encode_error_frame(api.peek_correlation_id(frame), exc.code))
            return False
        cid = header.correlation_id
        if isinstance(request, api.FetchRequest):
            heads, datas = self.fetch(request)
            chunks = api.encode_fetch_response_parts(cid, heads)
            parts = [chunks[0]]
            for data, chunk in zip(datas, chunks[1:]):
                parts += [data, chunk]
            _sendmsg_all(sock, throttled.fetch_v2_parts(parts) if v1 else parts)
            return True
        if isinstance(request, api.ProduceRequest):
            response = self.produce(request)
            if request.acks == 0:
                return True
        elif isinstance(request, api.MetadataRequest):
            response = self.metadata(request)
        elif isinstance(request, api.OffsetsRequest):
            response = self.offsets(request)
        elif isinstance(request, api.CreateTopicRequest):
            response = self.create_topic(request)
        else:
            sock.sendall(api.encode_error_frame(cid, ErrorCode.UNSUPPORTED_VERSION))
            return False
        out = api.encode_response(cid, response)
        sock.sendall(throttled.produce_v1_frame(out) if v1 else out)
        return True

    @staticmethod
    def decode(frame: bytes):
        """Header, body and whether the answer carries a throttle time: PRODUCE v1
        and FETCH v2 (what the client sends by default) are version 0's bodies,
        answered as version 0's with a throttle time of 0 appended."""
        header = api.decode_request_header(frame)
        kind = throttled.THROTTLED_REQUEST_TYPES.get((header.api_key, header.api_version))
        if kind is None:
            return (*api.decode_request(frame), False)
        body = api.decode_body(kind, frame, header.body_offset)
        if kind is throttled.ProduceRequestV1:
            return header, api.ProduceRequest(body.acks, body.timeout_ms, body.partitions), True
        return header, api.FetchRequest(body.max_wait_ms, body.min_bytes, body.partitions), True


def _sendmsg_all(sock: socket.socket, parts: list) -> None:
    """Send every byte of ``parts`` in order (``sendmsg`` may take only some)."""
    parts = [memoryview(p) for p in parts if len(p)]
    while parts:
        sent = sock.sendmsg(parts)
        while parts and sent >= len(parts[0]):
            sent -= len(parts[0])
            parts.pop(0)
        if parts and sent:
            parts[0] = parts[0][sent:]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--listen", action="append", required=True, metavar="URI",
                    help="tcp://HOST:PORT or unix:///PATH (repeatable)")
    ap.add_argument("--data", required=True, metavar="DIR", help="where the log files go")
    ap.add_argument("--partitions", type=int, default=1,
                    help="partitions of a topic created by PRODUCE (default 1)")
    args = ap.parse_args(argv)
    from hostbroker.client.connection import parse_uri

    listeners = []
    host, port, unix_path = None, -1, None
    for uri in args.listen:
        family, address = parse_uri(uri)
        sock = socket.socket(family, socket.SOCK_STREAM)
        if family == socket.AF_UNIX:
            if os.path.exists(address):
                os.unlink(address)
            unix_path = os.path.abspath(address)
        else:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            host, port = address
        sock.bind(address)
        sock.listen(128)
        listeners.append(sock)
    broker = Broker(Logs(args.data, args.partitions), host, port, unix_path)

    def accept_loop(listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            if conn.family != socket.AF_UNIX:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=broker.serve_connection, args=(conn,), daemon=True).start()

    for listener in listeners:
        threading.Thread(target=accept_loop, args=(listener,), daemon=True).start()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print("naive broker ready", flush=True)
    stop.wait()
    for listener in listeners:
        listener.close()
    if unix_path and os.path.exists(unix_path):
        os.unlink(unix_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
