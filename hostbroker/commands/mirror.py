"""``hostbroker mirror``: a consumer of one broker feeding a producer of another.

A :class:`~hostbroker.client.ConsumerConnector` on the source subscribes to
every topic whose whole name matches ``--topics`` (a :class:`Whitelist`;
new matching topics are picked up at ``topic.refresh.interval.ms``) with
``--num-streams`` streams, each read by a thread of its own that hands every
message to one async :class:`~hostbroker.client.Producer` on the
destination. A message keeps its partition number: before the first message
of a topic is sent, the topic is created on the destination with the
source's partition count if it does not exist there (a destination topic
with fewer partitions gets partition ``p % count``).

No loss on restart. Source offsets are committed by the mirror itself, never
by the connector (``auto.commit.enable`` is forced off), every
``--commit-interval-ms`` and when it stops: the stream threads are held at a
gate, the producer is flushed (every message handed to it acknowledged),
then the source offsets of exactly the messages handed over are stored for
the group. A crash between two commits copies some messages twice, never
skips one (at-least-once). If the flush reports messages that could not be
delivered, nothing more is committed and the mirror stops with status 1.

Stops after ``--max-messages``, after ``--timeout-ms`` without a message on
any stream, or on Ctrl-C / SIGTERM (status 0 after the final commit). An
entry of the source that cannot be read (CRC mismatch, a compressed wrapper
that does not decompress or inflates past ``fetch.message.max.bytes``) stops
it with status 1 and one line naming topic, partition and offset; with
``--consumer-property skip.bad.messages=true`` it is skipped with a warning
on stderr.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Iterable
from typing import TextIO

from hostbroker.commands import (
    EXIT_BROKER,
    EXIT_OK,
    CommandError,
    Stopped,
    check_bootstrap,
    describe_error,
    key_values,
    plural,
    stop_on_sigterm,
    usage_error,
)

DEFAULT_GROUP = "hostbroker-mirror"
MAX_STREAMS = 64
# How long a stream thread waits for a message before it looks at the stop flag.
_POLL_MS = 200


class _Mirror:
    """The state the stream threads share, and the commit that must see all of it."""

    def __init__(self, connector, producer, source_admin, destination_admin,
                 limit: int | None, timeout_ms: int | None):
        self.connector = connector
        self.producer = producer
        self.source_admin = source_admin
        self.destination_admin = destination_admin
        self.limit = limit
        self.timeout = None if timeout_ms is None else timeout_ms / 1000
        self.stop = threading.Event()
        # Held by a thread while it hands one message over, and by a commit
        # for its whole flush: a commit sees every handed message acknowledged.
        self.gate = threading.Lock()
        self.handed: dict[tuple[str, int], int] = {}  # next_offset of the last handed message
        self.committed: dict[tuple[str, int], int] = {}
        self.count = 0
        self.last_message = time.monotonic()
        self.errors: list[BaseException] = []
        self._partitions: dict[str, int] = {}  # destination partition count per topic
        self._admin_lock = threading.Lock()

    def destination_partition(self, topic: str, partition: int) -> int:
        count = self._partitions.get(topic)
        if count is None:
            with self._admin_lock:
                count = self._partitions.get(topic) or self._prepare(topic)
                self._partitions[topic] = count
        return partition if partition < count else partition % count

    def _prepare(self, topic: str) -> int:
        """The destination's partition count of ``topic``, creating the topic like the source's."""
        from hostbroker.client import BrokerError
        from hostbroker.commands.console import topic_partitions
        from hostbroker.errors import ErrorCode

        try:
            return len(topic_partitions(self.destination_admin, topic))
        except CommandError:
            pass
        count = len(topic_partitions(self.source_admin, topic))
        try:
            self.destination_admin.create_topic(topic, count)
        except BrokerError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise
        return len(topic_partitions(self.destination_admin, topic))

    def run_stream(self, stream) -> None:
        """A stream thread: hand its messages over until told to stop."""
        from hostbroker.client import ConsumerTimeoutError

        try:
            while not self.stop.is_set():
                try:
                    for message in stream:
                        if not self._hand_over(message):
                            return
                    return  # the connector shut down
                except ConsumerTimeoutError:
                    if self.timeout is not None and time.monotonic() - self.last_message >= self.timeout:
                        self.stop.set()
        except Exception as exc:  # noqa: BLE001 - reported by the main thread, which stops
            self.errors.append(exc)
            self.stop.set()

    def _hand_over(self, message) -> bool:
        """Send one message; False when the mirror is stopping (the message is not sent)."""
        partition = self.destination_partition(message.topic, message.partition)
        with self.gate:
            if self.stop.is_set():
                return False
            self.producer.send(message.topic, message.value, partition=partition)
            self.handed[(message.topic, message.partition)] = message.next_offset
            self.count += 1
            self.last_message = time.monotonic()
            if self.limit is not None and self.count >= self.limit:
                self.stop.set()
        return True

    def commit(self) -> None:
        """Flush the producer, then store the source offsets of what it acknowledged."""
        with self.gate:
            self.producer.flush()
            changed = {tp: o for tp, o in self.handed.items() if self.committed.get(tp) != o}
        if changed:
            self.connector.offset_storage.commit(self.connector.group, changed)
            self.committed.update(changed)


def _check(topics_regex: str, num_streams: int, max_messages, timeout_ms,
           commit_interval_ms: int) -> None:
    try:
        re.compile(topics_regex)
    except re.error as exc:
        raise usage_error(f"--topics {topics_regex!r}: not a regular expression: {exc}") from None
    if not 1 <= num_streams <= MAX_STREAMS:
        raise usage_error(f"--num-streams must be between 1 and {MAX_STREAMS}")
    if max_messages is not None and max_messages < 1:
        raise usage_error("--max-messages must be at least 1")
    if timeout_ms is not None and timeout_ms < 1:
        raise usage_error("--timeout-ms must be at least 1")
    if commit_interval_ms < 1:
        raise usage_error("--commit-interval-ms must be at least 1")


def mirror(*, source: str, destination: str, topics_regex: str, group: str = DEFAULT_GROUP,
           num_streams: int = 1, max_messages: int | None = None, timeout_ms: int | None = None,
           commit_interval_ms: int = 5000, consumer_properties: Iterable[str] = (),
           producer_properties: Iterable[str] = (), out: TextIO = sys.stdout,
           err: TextIO = sys.stderr) -> int:
    """Copy the matching topics from ``source`` to ``destination`` (module docstring)."""
    from hostbroker.client import (ConsumerConnector, InvalidEntryError, Producer, SimpleClient,
                                   Whitelist)
    from hostbroker.commands.console import producer_config

    _check(topics_regex, num_streams, max_messages, timeout_ms, commit_interval_ms)
    check_bootstrap(source, "--from")
    check_bootstrap(destination, "--to")
    consumer_config = key_values("--consumer-property", consumer_properties)
    consumer_config.setdefault("auto.offset.reset", "earliest")
    consumer_config.setdefault("client.id", "hostbroker-mirror")
    consumer_config.update({"group.id": group, "auto.commit.enable": False,
                            "consumer.timeout.ms": min(_POLL_MS, timeout_ms or _POLL_MS)})
    producer_settings = producer_config(
        producer_properties, {}, {"producer.type": "async", "client.id": "hostbroker-mirror"},
        "--producer-property")

    producer = Producer(destination, producer_settings)
    connector = ConsumerConnector(source, consumer_config)
    state = _Mirror(connector, producer, SimpleClient(source, "hostbroker-mirror"),
                    SimpleClient(destination, "hostbroker-mirror"), max_messages, timeout_ms)
    stop_on_sigterm()
    threads: list[threading.Thread] = []
    try:
        streams = connector.create_message_streams_by_filter(Whitelist(topics_regex),
                                                             num_streams)
        threads = [threading.Thread(target=state.run_stream, args=(stream,),
                                    name=f"mirror-stream-{i}", daemon=True)
                   for i, stream in enumerate(streams)]
        for thread in threads:
            thread.start()
        try:
            while not state.stop.wait(commit_interval_ms / 1000):
                state.commit()
        except (KeyboardInterrupt, Stopped):
            pass
        state.stop.set()
        for thread in threads:
            thread.join()
        if all(isinstance(e, InvalidEntryError) for e in state.errors):
            # A source entry that cannot be read stops the copy cleanly: what
            # was handed over before it is flushed and committed.
            state.commit()
    finally:
        state.stop.set()
        _close_all(state, threads)
    if state.errors:
        line = describe_error(state.errors[0], None)[0]
        if isinstance(state.errors[0], InvalidEntryError):
            line += " (--consumer-property skip.bad.messages=true skips it)"
        print(f"hostbroker mirror: {line}", file=err)
        return EXIT_BROKER
    topics = sorted({topic for topic, _ in state.committed})
    print(f"mirrored {plural(state.count, 'message')} of {', '.join(topics) or 'no topic'} "
          f"from {source} to {destination}", file=out)
    return EXIT_OK


def _close_all(state: _Mirror, threads: list[threading.Thread]) -> None:
    """Close what the mirror opened; a producer failure found here becomes the error."""
    from hostbroker.client import DeliveryError

    for thread in threads:
        thread.join()
    try:
        state.producer.close()
    except DeliveryError as exc:
        state.errors.append(exc)
    state.connector.shutdown()
    state.source_admin.close()
    state.destination_admin.close()
