"""The async producer's bounded queue and its sending thread.

:class:`AsyncQueue` is the async half of
:class:`~hostbroker.client.Producer` (its base class; it is not used alone,
and uses the state the Producer's constructor sets up). In async mode
``send`` and ``send_many`` append to a queue of at most ``queue.size``
messages and ``queue.bytes`` bytes of values and keys, under the producer's
lock (a send that would pass either bound blocks the caller, or raises
QueueFullError at once or after ``queue.enqueue.timeout.ms``, naming the
bound); the sending thread frees the bytes with the messages it takes. One
thread, ``hostbroker-producer``, takes a batch when ``batch.size`` messages
are queued, ``queue.time`` ms passed since the oldest was queued, a send
found no room, or a flush or close asks, and hands it to the Dispatcher,
which only this thread touches from then on. While every broker connection
has ``max.in.flight.requests.per.connection`` requests unanswered, the
thread waits for the oldest answer *before* it takes more: meanwhile the
queue keeps filling, and the next take is every whole batch queued, so that
the next requests carry all of it (cut at ``max.request.bytes``). The
in-flight window then grows with the wait for an answer, which is what keeps
acks=-1 to replicated topics (an answer only once every in-sync replica has
the data) from being bound by its latency. When the thread stops on an
exception, or close() ran out of time, everything outstanding fails.

The queue, the counters flush() waits on and the conditions are guarded by
the producer's lock.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from hostbroker.client.errors import DeliveryError, DeliveryFailure, ProducerError, QueueFullError
from hostbroker.client.producer_batches import (
    Encoded,
    as_pieces,
    flatten_pieces,
    split_by_size,
    take_batch,
)
from hostbroker.client.producer_requests import PendingSet
from hostbroker.client.producer_settings import CODECS
from hostbroker.log.message import CODEC_NONE


def piece_bytes(piece) -> int:
    """Bytes of the values of a send_many piece (a list of values or an Encoded set)."""
    return sum(map(len, piece.values if type(piece) is Encoded else piece))


def held_bytes(keyless: dict[str, list], chunked: set[str], items: list[tuple]) -> int:
    """Bytes the queue holds, as send counts them: every value, and the key of
    each item once."""
    total = 0
    for topic, values in keyless.items():
        if topic in chunked:
            total += sum(len(v) if type(v) is bytes else piece_bytes(v) for v in values)
        else:
            total += sum(map(len, values))
    for _, key, _, value in items:
        total += ((0 if key is None else len(key))
                  + (len(value) if type(value) is bytes else piece_bytes(value)))
    return total


class AsyncQueue:
    """Async mode of the Producer: the queue, the sending thread, and how they stop."""

    def _init_async(self, settings) -> None:
        # The queue: values with neither key nor partition, per topic (one list
        # append per send), and (topic, key, partition, value or [values]) items.
        self._keyless: dict[str, list] = {}
        self._chunked: set[str] = set()  # topics whose keyless list holds Encoded elements
        self._items: list[tuple] = []
        self._codec = CODECS[settings["compression.codec"]]
        self._queued = 0  # messages in the queue
        # queue.bytes less the bytes of their values and keys (see held_bytes):
        # one number for send() to subtract from and compare.
        self._room_bytes = settings["queue.bytes"]
        # Messages ever taken off the queue by the sending thread, and ever
        # acknowledged or failed: flush() waits for ended == taken + queued.
        self._taken = 0
        self._ended = 0
        # queue.size, or -1 once closing or stopped: send() compares one number.
        self._limit = settings["queue.size"]
        self._first_at = 0.0  # when the queue last went from empty to not empty
        self._queue_size = settings["queue.size"]
        self._queue_bytes = settings["queue.bytes"]
        self._batch_size = settings["batch.size"]
        self._queue_time = settings["queue.time"] / 1000
        self._enqueue_timeout = settings["queue.enqueue.timeout.ms"]
        self._wake = threading.Condition(self._lock)  # the sending thread waits on it
        self._room = threading.Condition(self._lock)  # callers wait for room in the queue
        self._idle = threading.Condition(self._lock)  # flush() waits for nothing outstanding
        self._room_waiters = 0
        self._full = False  # a send found no room: take now
        self._flushers = 0
        self._closing = False
        self._fatal: BaseException | None = None
        self._abort: BaseException | None = None  # close() ran out of time: fail what is left
        self._refusing = False  # closing or fatal: send() must not queue
        self.send = self._send_async
        self.send_many = self._send_many_async
        self._thread = threading.Thread(target=self._run, name="hostbroker-producer", daemon=True)
        self._thread.start()

    def _send_async(self, topic: str, value: Any, key: Any = None,
                    partition: int | None = None) -> None:
        # The common case (bytes, a topic seen before, no key) costs a lock,
        # a list append and a few counters. acquire/release: measured at half
        # the cost of ``with`` on this path. ``size`` (the bytes queue.bytes
        # counts) is taken by the size check on that path.
        if topic not in self._plain_topics or type(value) is not bytes or key is not None \
                or partition is not None or (size := len(value)) > self._max_value_bytes:
            value, key = self._encode(topic, value, key, partition)
            size = len(value) if key is None else len(value) + len(key)
        lock = self._lock
        lock.acquire()
        try:
            queued = self._queued
            room = self._room_bytes - size
            if queued >= self._limit or room < 0:
                self._wait_for_room(1, size)
                queued = self._queued
                room = self._room_bytes - size
            self._room_bytes = room
            if key is None and partition is None:
                values = self._keyless.get(topic)
                if values is None:
                    self._keyless[topic] = [value]
                else:
                    values.append(value)
            else:
                self._items.append((topic, key, partition, value))
            queued = self._queued = queued + 1
            if queued == 1:
                self._first_at = time.monotonic()
                self._wake.notify()
            elif queued == self._batch_size:
                self._wake.notify()
        finally:
            lock.release()
        if self._on_enqueued is not None:
            self._on_enqueued(topic, partition, value)

    def _send_many_async(self, topic: str, values, key: Any = None,
                         partition: int | None = None) -> None:
        values, key = self._encode_many(topic, values, key, partition)
        batch = self._batch_size
        keyless = key is None and partition is None
        pieces: list = [values[i:i + batch] for i in range(0, len(values), batch)]
        if self._codec == CODEC_NONE:
            # Encoded here, while the sending thread waits on its sockets: it
            # then only routes the set. Compressed batches are built there,
            # one wrapper per batch and partition.
            budget = min(self._dispatcher.set_budget(topic), self._queue_bytes)
            pieces = [Encoded(part) for piece in pieces for part in split_by_size(piece, budget)]
        else:
            # No piece holds more than queue.bytes (one value never does:
            # queue.bytes is at least message.max.bytes).
            pieces = [part for piece in pieces for part in split_by_size(piece, self._queue_bytes)]
        key_bytes = 0 if key is None else len(key)
        for piece in pieces:
            n = len(piece)
            size = piece_bytes(piece) + key_bytes
            lock = self._lock
            lock.acquire()
            try:
                if self._queued + n > self._limit or size > self._room_bytes:
                    self._wait_for_room(n, size)
                self._room_bytes -= size
                if keyless:
                    queued = self._keyless.get(topic)
                    if type(piece) is Encoded:
                        self._chunked.add(topic)
                        if queued is None:
                            self._keyless[topic] = [piece]
                        else:
                            queued.append(piece)
                    elif queued is None:
                        self._keyless[topic] = list(piece)
                    else:
                        queued += piece
                else:
                    self._items.append((topic, key, partition, piece))
                before = self._queued
                self._queued = before + n
                if before == 0:
                    self._first_at = time.monotonic()
                if before == 0 or before < batch <= before + n:
                    self._wake.notify()
            finally:
                lock.release()
            if self._on_enqueued is not None:
                for value in (piece.values if type(piece) is Encoded else piece):
                    self._on_enqueued(topic, partition, value)

    def _not_in_sending_thread(self, what: str) -> None:
        """A hook run by the sending thread must not wait for that thread: refuse."""
        if threading.current_thread() is self._thread:
            raise ProducerError(f"{what} from a callback in the sending thread would wait "
                                "for that thread")

    def _wait_for_room(self, n: int, size: int) -> None:
        """Called with the lock held and the queue too full for ``n`` more messages
        of ``size`` bytes. A piece whose key makes it larger than queue.bytes
        enters an empty queue (its values alone fit: see _send_many_async)."""
        self._not_in_sending_thread("a send to a full queue")
        timeout = self._enqueue_timeout
        if not self._full:
            # Perhaps full by queue.bytes with fewer than batch.size messages
            # queued: the sending thread takes now, not after queue.time.
            self._full = True
            self._wake.notify()
        self._room_waiters += 1
        try:
            room = self._room.wait_for(
                lambda: self._refusing or (
                    self._queued + n <= self._queue_size
                    and (size <= self._room_bytes or not self._queued)),
                None if timeout < 0 else timeout / 1000)
        finally:
            self._room_waiters -= 1
        if self._fatal is not None:
            raise ProducerError("the producer's sending thread stopped") from self._fatal
        if self._refusing:
            raise ProducerError("the producer is closed")
        if not room:
            if self._queued + n > self._queue_size:
                raise QueueFullError(
                    f"queue full: {self._queued} of queue.size {self._queue_size} messages"
                    f" waiting (queue.enqueue.timeout.ms {timeout})")
            raise QueueFullError(
                f"queue full: {self._queue_bytes - self._room_bytes} of queue.bytes "
                f"{self._queue_bytes} bytes"
                f" waiting, {size} more sent (queue.enqueue.timeout.ms {timeout})")

    def _take(self) -> tuple[dict, list, set] | None:
        """The next batch to send (empty when the dispatcher has work; None: time to stop)."""
        with self._lock:
            while True:
                if self._abort is not None:
                    return None
                queued = self._queued
                now = time.monotonic()
                if queued and (queued >= self._batch_size or self._flushers or self._closing
                               or self._full
                               or now >= self._first_at + self._queue_time):
                    return self._pop_batch()
                dispatcher = self._dispatcher
                if dispatcher.awaiting_answers():
                    return {}, [], set()
                next_retry = dispatcher.next_retry_at()
                if next_retry is not None and next_retry <= now:
                    return {}, [], set()
                if self._closing and not queued and next_retry is None:
                    return None
                waits = []
                if queued:
                    waits.append(self._first_at + self._queue_time - now)
                if next_retry is not None:
                    waits.append(next_retry - now)
                self._wake.wait(min(waits) if waits else None)

    def _pop_batch(self) -> tuple[dict, list, set]:
        """batch.size messages off the queue, or every whole batch when more are
        waiting (lock held)."""
        if self._queued <= self._batch_size:
            keyless, self._keyless = self._keyless, {}
            chunked, self._chunked = self._chunked, set()
            items, self._items = self._items, []
            self._taken += self._queued
            self._queued = 0
            self._room_bytes = self._queue_bytes
        else:
            # Behind: take every whole batch at once, so that the requests
            # carry them all (fewer requests and thread switches per message,
            # and a window that grows with the wait for answers); the rest of
            # a batch waits to fill.
            batches = self._queued // self._batch_size
            keyless, items, chunked, count = take_batch(
                self._keyless, self._chunked, self._items, self._batch_size * batches)
            self._taken += count
            self._queued -= count
            # Counted on what is left: less than a batch.
            self._room_bytes = self._queue_bytes - held_bytes(self._keyless, self._chunked,
                                                              self._items)
            self._first_at = time.monotonic()
        self._full = False
        if self._room_waiters:
            self._room.notify_all()
        return keyless, items, chunked

    def _run(self) -> None:
        dispatcher = self._dispatcher
        try:
            while True:
                full = dispatcher.full_connection()
                if full is not None:
                    # Every slot of every connection is taken: wait for the
                    # oldest answer first, while the queue fills, then take it
                    # all. (One connection with a free slot: take now. A set
                    # for a connection whose slots are all taken still waits in
                    # dispatch for that broker's oldest answer, and the other
                    # brokers' sets behind it.)
                    dispatcher.receive(full)
                    continue
                now = time.monotonic()
                due = dispatcher.next_retry_at()
                if due is not None and due <= now and self._abort is None:
                    # Retries first: a queue kept at batch.size or more by the
                    # callers would otherwise be taken on every pass, and a
                    # set waiting to be retried never sent.
                    dispatcher.send_due_retries(now)
                    continue
                batch = self._take()
                if batch is None:
                    if self._abort is not None:
                        # close() ran out of time and no longer closes what
                        # this thread still uses: it is closed here.
                        try:
                            self._stop_with(self._abort, report=True)
                        finally:
                            dispatcher.close()
                    return
                keyless, items, chunked = batch
                if keyless or items:
                    dispatcher.dispatch(dispatcher.make_sets(keyless, items, 0, chunked,
                                                             self._batch_size))
                else:
                    dispatcher.step(None)
        except BaseException as exc:  # noqa: BLE001 - recorded, raised to callers, then stop
            self._stop_with(exc)

    def _stop_with(self, exc: BaseException, report: bool = False) -> None:
        """Stop sending: everything outstanding fails with ``exc``.

        After an exception in the sending thread (``report`` False) the
        callbacks are not called again (one of them may be what failed);
        after close() ran out of time they are.
        """
        with self._lock:
            if not report:
                self._fatal = exc
            self._refusing = True
            self._limit = -1
            keyless, self._keyless = self._keyless, {}
            items, self._items = self._items, []
            self._taken += self._queued
            self._queued = 0
            self._room_bytes = self._queue_bytes
            self._room.notify_all()
        keyless_items = [(topic, None, None, piece) for topic, values in keyless.items()
                         for piece in as_pieces(values)]
        lost = ProducerError(f"the producer's sending thread stopped: {exc!r}")
        lost.__cause__ = exc
        dispatcher = self._dispatcher
        pending = [s for q in dispatcher.in_flight.values() for _, groups in q
                   for group in groups for s in group] + dispatcher.retries
        for q in dispatcher.in_flight.values():
            q.clear()
        dispatcher.retries = []
        for item in items + keyless_items:
            value = item[3]
            values = flatten_pieces([value if type(value) is not bytes else [value]])
            pending.append(PendingSet(item[0], item[2], True, values, b"", None, -1))
        for s in pending:
            s.error = lost
            self._stats["failed"] += len(s.values)
            if report:
                failure = DeliveryError([DeliveryFailure(s.topic, s.slot, s.values, lost)])
                self._callbacks.on_failed(s.request, failure)
            self._set_done(s)
        with self._lock:
            # Messages the failure caught between two of the lists above.
            missing = self._taken - self._ended
            self._failed_messages += missing
            self._stats["failed"] += missing
            self._ended = self._taken
            self._idle.notify_all()
