"""``hostbroker produce`` and ``hostbroker consume``: a topic from stdin, a topic to stdout.

``produce`` sends each stdin line (without its ``\\n``) as one message
through a :class:`~hostbroker.client.Producer`, async by default. With a key
separator the part of the line before the first separator is the message's
key: the log format has no key field, so the key only chooses the partition
(the same key, the same partition) and is not stored; the message is the
rest of the line. A topic that does not exist yet is said in one line on
stderr before the first message (the broker creates it on that message,
``auto.create.topics.enable``): a misspelt name does not make a new topic
unnoticed. At the end the producer is flushed; any message not
acknowledged is counted and the command exits 1 with one line saying how
many and why.

``consume`` writes each message's payload to stdout, raw, followed by
``\\n``. Without a group it reads every partition of the topic (or one, with
``--partition``) through a :class:`~hostbroker.client.SimpleConsumer`, from
the log end (the default), the log start (``--from-beginning``) or a given
offset, and keeps no offsets. With ``--group`` it reads through a
:class:`~hostbroker.client.ConsumerConnector`: it starts where the group
committed (``--from-beginning`` applies only where the group has no offset
yet) and commits what it printed when it stops. It is a member of the group
on the broker: several ``consume --group G`` processes split the topic's
partitions, and each commits what it printed of the partitions a rebalance
takes from it. It stops after
``--max-messages``, after ``--timeout-ms`` without a message, or on Ctrl-C
or SIGTERM, which are normal stops (status 0). A closed stdout (``| head``)
stops it quietly. A topic the broker does not have is an error (one line,
status 1) without ``--group``; with it the member waits for the topic, as a
Kafka consumer does, after one line on stderr saying so (a misspelt name
would otherwise wait forever without a word).

Cluster mode (``--zookeeper HOST:PORT[,...][/CHROOT]`` instead of
``--bootstrap``): ``produce`` sends through a producer that finds the
brokers and the topic's sorted ``(broker_id, partition)`` pairs in
ZooKeeper; for a replicated topic (its assignment in ZooKeeper) it sends
each of the topic's global partitions to the broker that leads it, and
follows the leader when it moves (``NOT_LEADER_FOR_PARTITION`` looks the
leaders up again). ``consume --group G`` is a member of the group in ZooKeeper (the
range rebalance gives it its partitions; offsets are kept in ZooKeeper).
``consume`` without ``--group`` reads every partition of every broker
through a group of its own, named ``hostbroker-console-`` and random hex,
that commits nothing and whose nodes are removed when it stops: as
standalone, nothing is kept. A replicated topic (its assignment in
ZooKeeper) is read as without ZooKeeper, by a SimpleConsumer given the
brokers that lead its partitions and its other live replicas, following
each leader as it moves (``--partition P`` and ``--offset``: its partition
P only); with ``--group`` its global partitions are dealt out by the group's
range rebalance and each is read from its leader. For a 0.7-style topic
``--partition`` and ``--offset`` name one broker's partition and need
``--bootstrap``.

An entry that cannot be read (CRC mismatch, a compressed wrapper that does
not decompress or inflates past ``fetch.message.max.bytes``) stops it with
status 1 and one line naming topic, partition and offset, after printing
(and, with a group, committing) every message before it;
``--skip-bad-messages`` (``skip.bad.messages``) skips such an entry with a
warning on stderr instead. An ``--offset`` that is not the start of an entry
(the entry there fails its length or CRC check) is refused in one line.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterable, Iterator
from typing import BinaryIO, TextIO

from hostbroker.commands import (
    DEFAULT_BOOTSTRAP,
    Stopped,
    check_bootstrap,
    check_topic,
    key_values,
    stop_on_sigterm,
)
from hostbroker.exits import EXIT_BROKER, EXIT_OK, CommandError, plural, usage_error

# Typed lines should not wait the producer's default 5 s for a batch to fill.
CONSOLE_PRODUCER_DEFAULTS = {"producer.type": "async", "queue.time": 1000,
                             "client.id": "hostbroker-console-producer"}


# -- cluster mode ----------------------------------------------------------


def check_zookeeper(connect: str, option: str = "--zookeeper") -> str:
    """``connect`` if it is a ZooKeeper connect string, else a usage error naming ``option``.

    Also quiets kazoo's own log, whose connection retries would otherwise
    print a line each on stderr; what fails is said in one line by the command.
    """
    import logging

    from hostbroker.errors import ConfigError
    from hostbroker.zkconnect import parse_connect

    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    try:
        parse_connect(connect, option)
    except ConfigError as exc:
        raise usage_error(str(exc)) from None
    return connect


@contextlib.contextmanager
def zookeeper_errors(option: str = "--zookeeper"):
    """No ZooKeeper server answering, inside the block, becomes a command error (status 1)."""
    from hostbroker.cluster.zk import ZooKeeperUnavailable

    try:
        yield
    except ZooKeeperUnavailable as exc:
        text = str(exc)
        if text.startswith("zookeeper.connect:"):
            text = option + text[len("zookeeper.connect"):]
        raise CommandError(text) from None


def zookeeper_client(connect: str, option: str = "--zookeeper",
                     connection_timeout_ms: int = 6000):
    """A started kazoo client on ``connect`` (10 s session)."""
    from hostbroker.cluster.zk import make_client

    with zookeeper_errors(option):
        return make_client(connect, 10000, connection_timeout_ms, key=option)


@contextlib.contextmanager
def zookeeper_session(connect: str, option: str = "--zookeeper",
                      connection_timeout_ms: int = 6000):
    """:func:`zookeeper_client` for the block, closed after it."""
    client = zookeeper_client(connect, option, connection_timeout_ms)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def delete_group(connect: str, group: str) -> None:
    """Remove ``group``'s nodes (/consumers/[group]) under ``connect``; best effort."""
    from kazoo.exceptions import KazooException

    from hostbroker.cluster import paths

    with zookeeper_session(connect) as client, contextlib.suppress(KazooException):
        client.delete(paths.group_path(group), recursive=True)


# -- produce ---------------------------------------------------------------


def _messages(lines: Iterable[bytes], separator: bytes | None,
              rejected: list[str]) -> Iterator[tuple[int, bytes | None, bytes]]:
    """(line number, key, value) for each line; a line without the separator is
    rejected, not sent."""
    for number, line in enumerate(lines, 1):
        if line.endswith(b"\n"):
            line = line[:-1]
        if separator is None:
            yield number, None, line
            continue
        key, found, value = line.partition(separator)
        if not found:
            rejected.append(f"line {number} has no key separator {separator!r}")
            continue
        yield number, key, value


def producer_config(properties: Iterable[str], chosen: dict, defaults: dict,
                    option: str = "--property") -> dict:
    """A command's producer settings, later wins: ``defaults``, ``--property`` strings,
    the command's own options (``chosen``, dotted keys; None for an option not given).

    The queue is made to hold two batches when ``batch.size`` asks for more
    than its default, so a large batch size alone is not refused.
    """
    from hostbroker.client import PRODUCER_SETTINGS
    from hostbroker.client.settings import resolve

    config = dict(defaults)
    config.update(key_values(option, properties))
    config.update({key: value for key, value in chosen.items() if value is not None})
    if "queue.size" not in config:
        settings = resolve(PRODUCER_SETTINGS, config)
        config["queue.size"] = max(settings["queue.size"], 2 * settings["batch.size"])
    return config


def produce(topic: str, *, key_separator: str | None = None, compression: str | None = None,
            acks: int | None = None, batch_size: int | None = None, sync: bool = False,
            properties: Iterable[str] = (), bootstrap: str = DEFAULT_BOOTSTRAP,
            zookeeper: str | None = None, stdin: BinaryIO | None = None,
            err: TextIO = sys.stderr) -> int:
    """Send stdin's lines to ``topic`` (through the brokers registered in ``zookeeper``
    when given); 0 when every one was acknowledged, else 1."""
    from hostbroker.client import DeliveryError, RecordTooLargeError

    check_topic(topic)
    if key_separator == "":
        raise usage_error("--key-separator must not be empty")
    config = producer_config(properties, {
        "producer.type": "sync" if sync else None,
        "request.required.acks": acks,
        "compression.codec": compression,
        "batch.size": batch_size,
    }, CONSOLE_PRODUCER_DEFAULTS)
    producer = make_producer(config, bootstrap, zookeeper)
    try:
        _say_if_new(producer, topic, bootstrap, err)
    except BaseException:
        producer.close()
        raise
    separator = key_separator.encode() if key_separator is not None else None
    rejected: list[str] = []
    failed: list[DeliveryError] = []
    sent = 0
    stop_on_sigterm()
    try:
        lines = stdin if stdin is not None else sys.stdin.buffer
        for number, key, value in _messages(lines, separator, rejected):
            try:
                producer.send(topic, value, key=key)
            except RecordTooLargeError as exc:
                rejected.append(f"line {number}: {exc}")
                continue
            except DeliveryError as exc:  # sync mode: this message
                failed.append(exc)
            sent += 1
    except (KeyboardInterrupt, Stopped):
        pass
    finally:
        try:
            producer.close()
        except DeliveryError as exc:  # async mode: whatever the queue could not deliver
            failed.append(exc)
    return _produce_status(sent, rejected, failed, err)


def _say_if_new(producer, topic: str, bootstrap: str, err: TextIO) -> None:
    """One line on stderr when ``topic`` does not exist yet: the first message makes the
    broker create it (``auto.create.topics.enable``), which a misspelt name should not
    do unnoticed. Cluster mode asks the producer's picture of ZooKeeper, else METADATA."""
    from hostbroker.client.simple import SimpleClient
    from hostbroker.errors import ErrorCode

    pairs = producer.partitions_for(topic)
    if pairs is None:
        try:
            with SimpleClient(bootstrap, client_id="hostbroker-console-producer") as client:
                (found,) = client.metadata([topic]).topics
        except OSError:
            return  # no broker to ask: the producer's failure will say so, naming it
        missing = found.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    else:
        missing = not pairs
    if missing:
        print(f"hostbroker produce: topic {topic} does not exist; the first message creates "
              "it with the broker's default partitions (auto.create.topics.enable, "
              "num.partitions), unless the broker refuses", file=err, flush=True)


def make_producer(config: dict, bootstrap: str | None, zookeeper: str | None,
                  option: str = "--zookeeper"):
    """A Producer on ``bootstrap``, or on the cluster registered in ``zookeeper``."""
    from hostbroker.client import Producer

    if zookeeper is None:
        return Producer(check_bootstrap(bootstrap or DEFAULT_BOOTSTRAP), config)
    check_zookeeper(zookeeper, option)
    with zookeeper_errors(option):
        return Producer(config={**config, "zookeeper.connect": zookeeper})


def first_failure(error) -> str:
    """What a DeliveryError's first failure says: where, and the error that ended it."""
    if not error.failures:
        return str(error)
    first = error.failures[0]
    where = first.topic if first.partition is None else f"{first.topic}/{first.partition}"
    return f"{where}: {first.error}"


def _produce_status(sent: int, rejected: list[str], failed: list, err: TextIO) -> int:
    lost = sum(exc.message_count for exc in failed)
    if not rejected and not lost:
        return EXIT_OK
    problems = []
    if lost:
        problems.append(f"{lost:,} of {plural(sent, 'message')} not acknowledged "
                        f"(first: {first_failure(failed[0])})")
    if rejected:
        problems.append(f"{plural(len(rejected), 'line')} not sent ({rejected[0]})")
    print("hostbroker produce: " + "; ".join(problems), file=err)
    return EXIT_BROKER


# -- consume ---------------------------------------------------------------


class _Output:
    """Payloads to a binary stream, one a line, counted against ``limit``."""

    def __init__(self, out: BinaryIO, limit: int | None):
        self.out = out
        self.limit = limit
        self.count = 0

    @property
    def done(self) -> bool:
        return self.limit is not None and self.count >= self.limit

    def write(self, value: bytes) -> None:
        self.out.write(value)
        self.out.write(b"\n")
        self.count += 1


def _check_consume_options(max_messages, timeout_ms, partition, offset, group,
                           from_beginning) -> None:
    if max_messages is not None and max_messages < 1:
        raise usage_error("--max-messages must be at least 1")
    if timeout_ms is not None and timeout_ms < 1:
        raise usage_error("--timeout-ms must be at least 1")
    if offset is not None and partition is None:
        raise usage_error("--offset needs --partition")
    if offset is not None and offset < 0:
        raise usage_error("--offset must not be negative")
    if offset is not None and from_beginning:
        raise usage_error("--offset and --from-beginning exclude each other")
    if group is not None and (partition is not None or offset is not None):
        raise usage_error("--partition and --offset read without a group; drop --group")


def consume(topic: str, *, from_beginning: bool = False, group: str | None = None,
            max_messages: int | None = None, timeout_ms: int | None = None,
            partition: int | None = None, offset: int | None = None,
            skip_bad_messages: bool = False,
            properties: Iterable[str] = (), bootstrap: str = DEFAULT_BOOTSTRAP,
            zookeeper: str | None = None, stdout: BinaryIO | None = None) -> int:
    """Print ``topic``'s payloads until a stop condition (module docstring); 0 on a normal stop."""
    check_topic(topic)
    _check_consume_options(max_messages, timeout_ms, partition, offset, group, from_beginning)
    config = key_values("--property", properties)
    if skip_bad_messages:
        config["skip.bad.messages"] = True
    output = _Output(stdout if stdout is not None else sys.stdout.buffer, max_messages)
    if zookeeper is None:
        check_bootstrap(bootstrap)
    else:
        check_zookeeper(zookeeper)
    stop_on_sigterm()
    from hostbroker.client import InvalidEntryError

    try:
        if zookeeper is not None:
            return _consume_cluster(topic, group, from_beginning, timeout_ms, config, zookeeper,
                                    output, partition, offset)
        if group is not None:
            if not topic_exists(topic, bootstrap=bootstrap):
                _say_waiting(topic)
            return _consume_group(topic, group, from_beginning, timeout_ms, config, output,
                                  bootstrap=bootstrap)
        return _consume_partitions(topic, from_beginning, timeout_ms, partition, offset, config,
                                   bootstrap, output)
    except InvalidEntryError as exc:
        raise CommandError(f"{exc} (--skip-bad-messages skips it)") from None


def topic_exists(topic: str, *, bootstrap: str | None = None, zookeeper: str | None = None,
                 wait_ms: int = 6000) -> bool:
    """Whether the broker at ``bootstrap`` has ``topic`` (METADATA), or, in cluster mode,
    a live broker registered it in ``zookeeper`` or it is a replicated topic there."""
    if zookeeper is not None:
        from hostbroker.cluster.discovery import read_snapshot

        with zookeeper_session(zookeeper, "--zookeeper", wait_ms) as client:
            return bool(read_snapshot(client).group_partitions(topic))
    from hostbroker.client.simple import SimpleClient
    from hostbroker.errors import ErrorCode

    with SimpleClient(bootstrap, client_id="hostbroker-console-consumer") as client:
        (found,) = client.metadata([topic]).topics
    return found.error_code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def replicated_leaders(topic: str, zookeeper: str, wait_ms: int = 6000) -> list[str]:
    """The URIs of the live brokers that lead a partition of ``topic`` when it is a
    replicated topic (its assignment in ZooKeeper), then of its other live replicas
    (a consumer given them finds each leader again after a failover), else []."""
    from hostbroker.client.leaders import ZooKeeperLeaders
    from hostbroker.cluster.discovery import read_snapshot

    with zookeeper_session(zookeeper, "--zookeeper", wait_ms) as client:
        live = read_snapshot(client).brokers
        found = ZooKeeperLeaders(client, lambda: live, timeout_s=wait_ms / 1000).read(
            [topic])[topic]
    if found is None:
        return []
    others = [live[b].uris()[0] for p in found.partitions for b in p.replicas if b in live]
    return list(dict.fromkeys([*found.uris.values(), *others]))


def _say_waiting(topic: str) -> None:
    # A group member waits for its topic, as a Kafka consumer does (a pipeline may start
    # its consumers first); a misspelt name would wait forever without this line.
    print(f"hostbroker consume: no topic {topic} yet; waiting for it (Ctrl-C stops; "
          "--timeout-ms gives up)", file=sys.stderr, flush=True)


def topic_partitions(client, topic: str) -> list[int]:
    """The partition numbers of ``topic`` from METADATA; a CommandError if it does not exist.
    A replicated topic's are its global partitions, whichever brokers lead them (a
    SimpleConsumer's leader map, METADATA version 1 of its brokers)."""
    from hostbroker.errors import ErrorCode

    leaders = getattr(client, "leaders", None)
    if leaders is not None:
        try:
            replicated = leaders.get(topic)
        except Exception:  # noqa: BLE001 - no broker answers version 1: version 0 says
            replicated = None
        if replicated is not None and replicated.partitions:
            return [p.partition for p in replicated.partitions]
    (found,) = client.metadata([topic]).topics
    if found.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        raise CommandError(f"no topic {topic}")
    return sorted(p.partition for p in found.partitions)


def _consume_partitions(topic, from_beginning, timeout_ms, partition, offset, config, bootstrap,
                        output: _Output) -> int:
    from hostbroker.client import EARLIEST, LATEST, SimpleConsumer

    config.setdefault("client.id", "hostbroker-console-consumer")
    if offset is None:
        config.setdefault("auto.offset.reset", "earliest" if from_beginning else "latest")
    start = EARLIEST if from_beginning else LATEST
    with SimpleConsumer(bootstrap, config) as consumer:
        partitions = topic_partitions(consumer, topic)
        if partition is not None:
            if partition not in partitions:
                raise CommandError(f"topic {topic} has no partition {partition}")
            partitions = [partition]
        if offset is not None:
            _check_entry_start(consumer, topic, partitions[0], offset)
        positions = {p: offset if offset is not None else consumer.offsets_before(topic, p, start)[0]
                     for p in partitions}
        last_message = time.monotonic()
        try:
            while not output.done:
                got = False
                for fetched in consumer.multifetch([(topic, p, o) for p, o in positions.items()]):
                    for _, _, value in fetched:
                        output.write(value)
                        got = True
                        if output.done:
                            break
                    positions[fetched.partition] = fetched.next_offset
                    if output.done:
                        break
                output.out.flush()
                now = time.monotonic()
                if got:
                    last_message = now
                elif timeout_ms is not None and now - last_message >= timeout_ms / 1000:
                    break
        except (KeyboardInterrupt, Stopped):
            pass
        finally:
            output.out.flush()
    return EXIT_OK


def _check_entry_start(consumer, topic: str, partition: int, offset: int) -> None:
    """A CommandError unless ``offset`` is the log end or the start of an entry that passes
    its length and CRC checks (a misplaced offset reads a length and a CRC from the middle
    of another entry)."""
    from hostbroker.client import InvalidEntryError, MessageSizeTooLargeError
    from hostbroker.errors import InvalidMessageError, MessageTooLargeError
    from hostbroker.log.message import LENGTH_SIZE, validate_message_set

    not_start = f"offset {offset} is not the start of an entry in {topic}/{partition}"
    try:
        fetched = consumer.fetch(topic, partition, offset)
    except InvalidEntryError as exc:
        raise CommandError(f"{not_start} ({exc.reason})") from None
    except MessageSizeTooLargeError as exc:
        raise CommandError(f"{not_start} (or its entry, {exc.needed or 'of unknown size'} bytes, "
                           f"is over fetch.message.max.bytes = {exc.limit})") from None
    if not fetched.entries:
        return  # the log end: nothing to check yet
    data = fetched.message_set
    first = LENGTH_SIZE + int.from_bytes(data[:LENGTH_SIZE], "big", signed=True)
    try:
        validate_message_set(data[:first], first)
    except (InvalidMessageError, MessageTooLargeError) as exc:
        reason = str(exc).split(": ", 1)[-1]
        raise CommandError(f"{not_start} ({reason})") from None


def _consume_cluster(topic, group, from_beginning, timeout_ms, config, zookeeper,
                     output: _Output, partition: int | None = None,
                     offset: int | None = None) -> int:
    """``consume --zookeeper``: in ``group``, or in a group of its own that keeps nothing;
    a replicated topic without a group (``partition``, ``offset``: of it only)."""
    import uuid

    from hostbroker.client.group import GROUP_SETTINGS
    from hostbroker.client.settings import resolve

    wait = resolve(GROUP_SETTINGS, config)["zookeeper.connection.timeout.ms"]
    if group is None:
        leaders = replicated_leaders(topic, zookeeper, wait)
        if leaders:  # a replicated topic: every partition (or the one) read from its leader
            return _consume_partitions(topic, from_beginning, timeout_ms, partition, offset,
                                       config, leaders, output)
        if partition is not None or offset is not None:
            raise usage_error(f"--partition and --offset name one broker's partition of "
                              f"topic {topic}, which is not replicated: give that broker "
                              "with --bootstrap instead of --zookeeper")
    exists = topic_exists(topic, zookeeper=zookeeper, wait_ms=wait)
    if group is not None:
        if not exists:
            _say_waiting(topic)
        return _consume_group(topic, group, from_beginning, timeout_ms, config, output,
                              zookeeper=zookeeper)
    if not exists:  # as standalone, without a group a topic that is not there is an error
        raise CommandError(f"no topic {topic} (no live broker registered it in ZooKeeper)")
    own = f"hostbroker-console-{uuid.uuid4().hex[:12]}"
    return _consume_group(topic, own, from_beginning, timeout_ms, config, output,
                          zookeeper=zookeeper, commit=False)


def _consume_group(topic, group, from_beginning, timeout_ms, config, output: _Output, *,
                   bootstrap: str | None = None, zookeeper: str | None = None,
                   commit: bool = True) -> int:
    from hostbroker.client import ConsumerConnector, ConsumerTimeoutError, InvalidEntryError

    config.setdefault("client.id", "hostbroker-console-consumer")
    config["group.id"] = group
    config.setdefault("auto.offset.reset", "earliest" if from_beginning else "latest")
    # In a group on the broker a member commits what it printed of the partitions a
    # rebalance takes (auto.commit.enable), so neither it nor their next owner prints
    # them again; in ZooKeeper it commits when it stops.
    config.setdefault("auto.commit.enable", zookeeper is None)
    if timeout_ms is not None:
        config["consumer.timeout.ms"] = timeout_ms
    if zookeeper is None:
        connector = ConsumerConnector(bootstrap, config)
    else:
        if not commit:
            config["auto.commit.enable"] = False
        with zookeeper_errors():
            connector = ConsumerConnector(config={**config, "zookeeper.connect": zookeeper})
    save = connector.commit_offsets if commit else (lambda: None)
    try:
        (stream,) = connector.create_message_streams({topic: 1})[topic]
        try:
            for message in stream:
                output.write(message.value)
                # The stream may block next; what was printed must be seen now.
                output.out.flush()
                if output.done:
                    break
        except ConsumerTimeoutError:
            pass
        except (KeyboardInterrupt, Stopped):
            pass
        except InvalidEntryError:
            save()  # what was printed, up to the bad entry
            raise
        output.out.flush()
        save()
    finally:
        connector.shutdown()
        if zookeeper is not None and not commit:
            delete_group(zookeeper, group)  # a group of its own: nothing is kept
    return EXIT_OK
