"""``hostbroker mirror``: a consumer of one broker or cluster feeding a producer of another.

A :class:`~hostbroker.client.ConsumerConnector` on the source subscribes to
every topic whose whole name matches ``--topics`` (a :class:`Whitelist`;
new matching topics are picked up at ``topic.refresh.interval.ms``) with
``--num-streams`` streams, each read by a thread of its own that hands every
message to one async :class:`~hostbroker.client.Producer` on the
destination. Either end is one broker (``--from URI``, ``--to URI``) or a
cluster whose brokers are registered in ZooKeeper (``--from-zookeeper``,
``--to-zookeeper``; :mod:`hostbroker.commands.mirror_target`). A message
goes partition for partition: the source partition of index i (its number
on a broker, its place among a cluster topic's sorted ``(broker_id,
partition)`` pairs) to the destination partition of index i, ``i % count``
when the destination has fewer. Before the first message of a topic is
sent the topic is created on the destination if it does not exist there,
with the source's partition count (on a cluster: on every live broker, with
enough partitions each for the destination to hold as many pairs).

On a source cluster the connector is a member of ``--group`` in ZooKeeper,
so mirrors run with the same group split the source partitions between
them (the range rebalance). Before the connector gives partitions up in a
rebalance, the mirror flushes and commits what it handed over of them, so
the next owner starts where this one stopped.

No loss on restart. Source offsets are committed by the mirror itself, never
by the connector (``auto.commit.enable`` is forced off), every
``--commit-interval-ms`` and when it stops: the stream threads are held at a
gate, the producer is flushed (every message handed to it acknowledged),
then the source offsets of exactly the messages handed over are stored for
the group (keyed ``(topic, partition)``, or ``(topic, partition, broker_id)``
in ZooKeeper for a source cluster). A crash between two commits copies some
messages twice, never skips one (at-least-once). If the flush reports messages that could not be
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

from hostbroker.commands import Stopped, check_bootstrap, describe_error, key_values, StopRequests
from hostbroker.exits import EXIT_BROKER, EXIT_OK, plural, usage_error
from hostbroker.commands.console import check_zookeeper
from hostbroker.errors import ErrorCode

DEFAULT_GROUP = "hostbroker-mirror"
MAX_STREAMS = 64
# How long a stream thread waits for a message before it looks at the stop flag.
_POLL_MS = 200


class _Mirror:
    """The state the stream threads share, and the commit that must see all of it."""

    def __init__(self, source, destination, limit: int | None, timeout_ms: int | None,
                 err: TextIO):
        self.connector = None
        self.producer = None
        self.source = source
        self.destination = destination
        self.err = err
        self.limit = limit
        self.timeout = None if timeout_ms is None else timeout_ms / 1000
        self.stop = threading.Event()
        # Held by a thread while it hands one message over, and by a commit
        # for its whole flush: a commit sees every handed message acknowledged.
        self.gate = threading.Lock()
        # One commit at a time: the main thread's and a rebalance's (on_partitions_revoked).
        self._commit_lock = threading.Lock()
        # Source offset key -> next_offset of the last message handed over.
        self.handed: dict[tuple, int] = {}
        self.committed: dict[tuple, int] = {}
        self.count = 0
        self.last_message = time.monotonic()
        self.errors: list[BaseException] = []
        self._prepared: set[str] = set()  # topics ready on the destination
        self._admin_lock = threading.Lock()

    def destination_partition(self, message) -> int:
        """The destination partition (index) of ``message``'s source partition."""
        topic = message.topic
        index = self.source.index(message)
        if topic not in self._prepared:
            with self._admin_lock:
                if topic not in self._prepared:
                    self.destination.prepare(topic, self.source.count(topic), self.producer,
                                             self.err)
                    self._prepared.add(topic)
        count = self.destination.count(topic)
        return index if index < count else index % count

    def on_partitions_revoked(self, keys) -> None:
        """A rebalance takes partitions away: what was handed over of them is committed
        first (the next owner starts there), then forgotten (no later commit of this
        mirror stores an offset of theirs). Not once the mirror stops: its own final
        commit, or none after a failure. A failure here (the flush) stops the mirror."""
        if self.stop.is_set():
            return
        try:
            self.commit()
        except Exception as exc:  # noqa: BLE001 - reported by the main thread, which stops
            self.errors.append(exc)
            self.stop.set()
        with self.gate:
            for key in keys:
                self.handed.pop(key, None)
                self.committed.pop(key, None)

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
        partition = self.destination_partition(message)
        with self.gate:
            if self.stop.is_set():
                return False
            if not self.connector.owns(self.source.key(message)):
                return True  # given up meanwhile: its next owner copies it
            self.producer.send(message.topic, message.value, partition=partition)
            self.handed[self.source.key(message)] = message.next_offset
            self.count += 1
            self.last_message = time.monotonic()
            if self.limit is not None and self.count >= self.limit:
                self.stop.set()
        return True

    def commit(self) -> None:
        """Flush the producer, then store the source offsets of what it acknowledged."""
        with self._commit_lock:
            with self.gate:
                self.producer.flush()
                changed = {k: o for k, o in self.handed.items() if self.committed.get(k) != o}
            if not changed:
                return
            from hostbroker.client.errors import BrokerError

            try:
                self.connector.offset_storage.commit(self.connector.group, changed)
            except BrokerError as exc:
                if exc.code not in _FENCED:
                    raise
                # This mirror lost its place in the group (its session ended, a later
                # generation formed): the partitions are another's; it copies them again
                # only if the group gives them back, from the group's offsets.
                print(f"hostbroker mirror: commit refused ({exc}); the group's next owner "
                      "copies those messages again", file=self.err)
                with self.gate:
                    for key in changed:
                        self.handed.pop(key, None)
                return
            self.committed.update(changed)


_FENCED = (ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID)


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


def _one_of(uri: str | None, zookeeper: str | None, end: str) -> None:
    if (uri is None) == (zookeeper is None):
        raise usage_error(f"give exactly one of --{end} URI and --{end}-zookeeper "
                          "HOST:PORT[,...][/CHROOT]")


def _tls_of(properties: dict) -> dict:
    """An end's own ssl.* properties: they win over --command-config's for that
    end's every connection (its admin one too)."""
    return {k: v for k, v in properties.items() if k.startswith("ssl.")}


def _ends(source, source_zookeeper, destination, destination_zookeeper, consumer_config,
          producer_settings):
    """The source and destination ends (mirror_target), or a command error; nothing is
    left open when one of them fails."""
    from hostbroker.commands.mirror_target import (BrokerDestination, BrokerSource,
                                                   ClusterDestination, ClusterSource)

    if source is not None:
        check_bootstrap(source, "--from")
    if destination is not None:
        check_bootstrap(destination, "--to")
    if source_zookeeper is not None:
        check_zookeeper(source_zookeeper, "--from-zookeeper")
    if destination_zookeeper is not None:
        check_zookeeper(destination_zookeeper, "--to-zookeeper")
    src = (ClusterSource(source_zookeeper, consumer_config) if source is None
           else BrokerSource(source, _tls_of(consumer_config)))
    try:
        dst = (ClusterDestination(destination_zookeeper, producer_settings)
               if destination is None else BrokerDestination(destination,
                                                             _tls_of(producer_settings)))
    except BaseException:
        src.close()
        raise
    return src, dst


def mirror(*, source: str | None = None, destination: str | None = None, topics_regex: str,
           source_zookeeper: str | None = None, destination_zookeeper: str | None = None,
           group: str = DEFAULT_GROUP, num_streams: int = 1, max_messages: int | None = None,
           timeout_ms: int | None = None, commit_interval_ms: int = 5000,
           consumer_properties: Iterable[str] = (), producer_properties: Iterable[str] = (),
           out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Copy the matching topics from the source broker or cluster to the destination one
    (module docstring)."""
    from hostbroker.client import InvalidEntryError, Whitelist
    from hostbroker.commands.console import producer_config

    _check(topics_regex, num_streams, max_messages, timeout_ms, commit_interval_ms)
    _one_of(source, source_zookeeper, "from")
    _one_of(destination, destination_zookeeper, "to")
    consumer_config = key_values("--consumer-property", consumer_properties)
    consumer_config.setdefault("auto.offset.reset", "earliest")
    consumer_config.setdefault("client.id", "hostbroker-mirror")
    consumer_config.update({"group.id": group, "auto.commit.enable": False,
                            "consumer.timeout.ms": min(_POLL_MS, timeout_ms or _POLL_MS)})
    producer_settings = producer_config(
        producer_properties, {}, {"producer.type": "async", "client.id": "hostbroker-mirror"},
        "--producer-property")

    src, dst = _ends(source, source_zookeeper, destination, destination_zookeeper,
                     consumer_config, producer_settings)
    state = _Mirror(src, dst, max_messages, timeout_ms, err)
    threads: list[threading.Thread] = []
    try:
        state.producer = dst.producer(producer_settings)
        stops = StopRequests()
        state.connector = src.connector(consumer_config, state)
        streams = state.connector.create_message_streams_by_filter(Whitelist(topics_regex),
                                                             num_streams)
        threads = [threading.Thread(target=state.run_stream, args=(stream,),
                                    name=f"mirror-stream-{i}", daemon=True)
                   for i, stream in enumerate(streams)]
        for thread in threads:
            thread.start()
        try:
            while True:
                with stops.waiting():
                    if state.stop.wait(commit_interval_ms / 1000):
                        break
                state.commit()  # not cut short by a stop: that waits for the next wait
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
    topics = sorted({key[0] for key in state.committed})
    of = f" of {', '.join(topics)}" if topics else ""
    print(f"mirrored {plural(state.count, 'message')}{of} from {src.name} to {dst.name}",
          file=out)
    return EXIT_OK


def _close_all(state: _Mirror, threads: list[threading.Thread]) -> None:
    """Close what the mirror opened; a producer failure found here becomes the error."""
    from hostbroker.client import DeliveryError

    for thread in threads:
        thread.join()
    try:
        if state.producer is not None:
            state.producer.close()
    except DeliveryError as exc:
        state.errors.append(exc)
    finally:
        try:
            if state.connector is not None:
                state.connector.shutdown()
        finally:
            state.source.close()
            state.destination.close()
