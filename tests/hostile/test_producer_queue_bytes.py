"""Standing case: a broker that accepts connections and never answers, against
an async producer handed large messages (docs/producer.md, the queue).

The queue is bounded by ``queue.bytes`` as well as by ``queue.size``: while
nothing drains, the producer accepts at most ``queue.bytes`` of data into the
queue plus the one take its sending thread holds, whatever the message count
bound, then refuses with QueueFullError naming ``queue.bytes``; what it
accepted is failed, never lost. A real socket; no broker process.
"""

from __future__ import annotations

import socket

import pytest

from hostbroker.client import Producer, QueueFullError

VALUE = 100_000
QUEUE_BYTES = 1_000_000


def test_a_silent_broker_holds_the_producer_to_queue_bytes():
    with socket.create_server(("127.0.0.1", 0), backlog=16) as listener:
        uri = f"tcp://127.0.0.1:{listener.getsockname()[1]}"
        producer = Producer(uri, producer_type="async", batch_size=5, queue_size=50000,
                            queue_time=60000, queue_bytes=QUEUE_BYTES,
                            message_max_bytes=200_000, queue_enqueue_timeout_ms=0,
                            request_timeout_ms=3000, message_send_max_retries=0)
        accepted = 0
        with pytest.raises(QueueFullError, match=f"queue.bytes {QUEUE_BYTES}"):
            for accepted in range(1000):  # 100 MB, were the count the only bound
                producer.send("t", bytes([accepted % 256]) * VALUE)
        # The queue's bytes, and the one take the thread holds while it waits
        # for an answer that never comes.
        assert accepted * VALUE <= 2 * QUEUE_BYTES
        assert producer.stats["queued"] * VALUE <= QUEUE_BYTES
        with pytest.raises(TimeoutError, match=f"{accepted} messages still outstanding"):
            producer.close(timeout=0.1)
