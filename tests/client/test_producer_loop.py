"""The async producer's sending loop, against a stand-in for the Dispatcher."""

from __future__ import annotations

import time

from hostbroker.client import Producer
from hostbroker.client import producer as producer_module
from hostbroker.client.producer_requests import PendingSet

NOWHERE = "tcp://127.0.0.1:9"


class Loaded:
    """Answers every request at once; each batch sent lets the callers queue
    another whole batch (a queue that never drops below batch.size), and the
    first one comes back as a retry due at once."""

    producer: Producer | None = None
    feeds = 50

    def __init__(self, settings, cluster, partitioner, callbacks, stats, done):
        self.cluster = cluster
        self.done = done
        self.retries: list[PendingSet] = []
        self.in_flight: dict = {}
        self.events: list = []

    def full_connection(self):
        return None

    def awaiting_answers(self):
        return False

    def next_retry_at(self):
        return min((s.retry_at for s in self.retries), default=None)

    def send_due_retries(self, now):
        self.events.append("retry")
        self.retries = []

    def step(self, deadline):
        if self.retries and self.next_retry_at() <= time.monotonic():
            self.send_due_retries(time.monotonic())

    def make_sets(self, keyless, items, attempts, chunked, batch_size):
        return [PendingSet(topic, 0, False, values, b"", None, 0)
                for topic, values in keyless.items()]

    def dispatch(self, sets):
        self.events.append(sum(len(s.values) for s in sets))
        if len(self.events) == 1:
            self.retries.append(PendingSet("t", 0, False, [b"again"], b"", None, 0))
        if len(self.events) < self.feeds:
            for _ in range(10):
                self.producer.send("t", b"more")
        for s in sets:
            self.done(s)

    def close(self):
        self.cluster.close()


def test_a_due_retry_goes_out_while_the_queue_stays_full(monkeypatch):
    monkeypatch.setattr(producer_module, "Dispatcher", Loaded)
    producer = Producer(NOWHERE, producer_type="async", batch_size=10, queue_time=60000)
    dispatcher = producer._dispatcher
    dispatcher.producer = producer
    for _ in range(10):
        producer.send("t", b"first")
    producer.flush(30)  # the callers' sends end with the feeds
    producer.close(30)
    assert "retry" in dispatcher.events
    # the retry went out on the pass after the answer that asked for it, not
    # once the callers stopped keeping batch.size queued
    assert dispatcher.events.index("retry") == 1, dispatcher.events
