"""The two ends of ``hostbroker mirror``: one broker (``--from`` / ``--to URI``) or a
cluster found through ZooKeeper (``--from-zookeeper`` / ``--to-zookeeper``).

Partition for partition. A source partition is known by its *index*: its
partition number on a broker, or its place in the source topic's sorted
``(broker_id, partition)`` pairs in a cluster (a replicated source topic's
partition number: its pairs are ``(REPLICATED, p)``). It is copied to the
destination partition of the same index (a broker's partition number, or a
place in the destination's pairs), ``index % count`` when the destination
has fewer partitions than that.

- :class:`BrokerSource` / :class:`ClusterSource` make the mirror's
  :class:`~hostbroker.client.ConsumerConnector` (a cluster's joins the
  group in ZooKeeper, so mirrors of one group split the partitions), give a
  message's index and the key its offset is committed under
  (``(topic, partition)``, or ``PartitionKey(topic, partition, broker_id)``
  in a cluster), and a topic's partition count.
- :class:`BrokerDestination` / :class:`ClusterDestination` make the
  :class:`~hostbroker.client.Producer` and prepare a topic before its first
  message: a topic missing on a broker is created there with the source's
  partition count; one missing on a cluster is created on every live
  destination broker with ``ceil(source partitions / live brokers)``
  partitions each, then waited for until every one of those brokers
  registered it, so the destination has at least as many pairs.

A cluster's pairs come from a :class:`~hostbroker.cluster.discovery.ClusterView`
kept current by watches. When a source broker leaves, its pairs leave the
list and the indices of the pairs after them shift down; a pair that is no
longer listed keeps the last index it had (a message already fetched from it
still goes somewhere fixed). So every message is copied at least once
whatever happens, and a source partition's messages keep their order in one
destination partition while the source and destination pair sets stay as
they are; across a change, a source partition's later messages may go to
another destination partition.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from typing import TextIO

from hostbroker.exits import CommandError

# How long a topic created on a destination cluster may take to be registered
# by all its brokers (and seen by the producer).
REGISTRATION_WAIT_S = 30.0
_CLIENT_ID = "hostbroker-mirror"


def _wait_for(condition, timeout: float, pause: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)
    return True


class _Cluster:
    """A ClusterView on its own ZooKeeper client, named by its command line option; the
    session and connection timeouts are those of the end's consumer or producer
    settings (``zookeeper.session.timeout.ms``, ``zookeeper.connection.timeout.ms``)."""

    def __init__(self, connect: str, option: str, settings: dict):
        from hostbroker.cluster.discovery import ClusterView
        from hostbroker.cluster.zk import make_client
        from hostbroker.commands.console import check_zookeeper, zookeeper_errors

        self.connect = check_zookeeper(connect, option)
        self.option = option
        with zookeeper_errors(option):
            self.client = make_client(connect, settings["zookeeper.session.timeout.ms"],
                                      settings["zookeeper.connection.timeout.ms"], key=option)
        try:
            self.view = ClusterView(self.client)
        except BaseException:
            self.close_client()
            raise

    @property
    def name(self) -> str:
        return f"zookeeper {self.connect}"

    def pairs(self, topic: str) -> tuple[tuple[int, int], ...]:
        return self.view.snapshot.partitions(topic)

    def close_client(self) -> None:
        self.client.stop()
        self.client.close()

    def close(self) -> None:
        self.view.close()
        self.close_client()


# -- sources ------------------------------------------------------------------


class BrokerSource:
    """One broker: a message's index is its partition number. ``tls``: the
    end's own ssl.* settings (over the process's), for its admin connection."""

    def __init__(self, uri: str, tls: dict | None = None):
        from hostbroker.client import SimpleClient
        from hostbroker.commands import check_bootstrap

        self.name = check_bootstrap(uri, "--from")
        self._admin = SimpleClient(uri, _CLIENT_ID, tls=tls)

    def connector(self, config: dict, listener):
        from hostbroker.client import ConsumerConnector

        return ConsumerConnector(self.name, config, rebalance_listener=listener)

    def index(self, message) -> int:
        return message.partition

    def key(self, message) -> tuple[str, int]:
        return message.topic, message.partition

    def count(self, topic: str) -> int:
        from hostbroker.commands.console import topic_partitions

        return len(topic_partitions(self._admin, topic))

    def close(self) -> None:
        self._admin.close()


class ClusterSource(_Cluster):
    """The brokers registered in a ZooKeeper: a message's index is its pair's place."""

    def __init__(self, connect: str, consumer_config: dict):
        from hostbroker.client.group import GROUP_SETTINGS
        from hostbroker.client.settings import resolve

        super().__init__(connect, "--from-zookeeper", resolve(GROUP_SETTINGS, consumer_config))
        self._lock = threading.Lock()
        self._indexed = None  # the snapshot self._index was last updated from
        self._index: dict[tuple[str, int, int], int] = {}

    def connector(self, config: dict, listener):
        from hostbroker.client import ConsumerConnector
        from hostbroker.commands.console import zookeeper_errors

        with zookeeper_errors(self.option):
            return ConsumerConnector(config={**config, "zookeeper.connect": self.connect},
                                     rebalance_listener=listener)

    def _update(self) -> None:
        snapshot = self.view.snapshot
        if snapshot is self._indexed:
            return
        for topic in snapshot.topic_names():
            for i, (broker_id, partition) in enumerate(snapshot.group_partitions(topic)):
                self._index[(topic, broker_id, partition)] = i
        self._indexed = snapshot

    def index(self, message) -> int:
        where = (message.topic, message.broker_id, message.partition)
        with self._lock:
            self._update()
            found = self._index.get(where)
            if found is None:  # the group's view of the cluster is ahead of ours
                self.view.refresh()
                self._update()
                found = self._index.get(where)
        if found is None:
            raise CommandError(f"{message.topic}: partition {message.partition} of broker "
                               f"{message.broker_id} is not registered in ZooKeeper")
        return found

    def key(self, message):
        from hostbroker.cluster.membership import PartitionKey

        return PartitionKey(message.topic, message.partition, message.broker_id)

    def count(self, topic: str) -> int:
        pairs = (self.view.snapshot.group_partitions(topic)
                 or self.view.refresh().group_partitions(topic))
        if not pairs:
            raise CommandError(f"no live broker registered topic {topic} in ZooKeeper "
                               f"({self.option} {self.connect})")
        return len(pairs)


# -- destinations ---------------------------------------------------------------


class BrokerDestination:
    """One broker: index i is partition i. ``tls``: the end's own ssl.*
    settings (over the process's), for its admin connection."""

    def __init__(self, uri: str, tls: dict | None = None):
        from hostbroker.client import SimpleClient
        from hostbroker.commands import check_bootstrap

        self.name = check_bootstrap(uri, "--to")
        self._admin = SimpleClient(uri, _CLIENT_ID, tls=tls)
        self._counts: dict[str, int] = {}

    def producer(self, settings: dict):
        from hostbroker.client import Producer

        return Producer(self.name, settings)

    def prepare(self, topic: str, source_count: int, producer, err: TextIO) -> None:
        """Create ``topic`` with ``source_count`` partitions unless it exists."""
        from hostbroker.client import BrokerError
        from hostbroker.commands.console import topic_partitions
        from hostbroker.errors import ErrorCode

        try:
            self._counts[topic] = len(topic_partitions(self._admin, topic))
            return
        except CommandError:
            pass
        try:
            self._admin.create_topic(topic, source_count)
        except BrokerError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise
        self._counts[topic] = len(topic_partitions(self._admin, topic))

    def count(self, topic: str) -> int:
        return self._counts[topic]

    def close(self) -> None:
        self._admin.close()


class ClusterDestination(_Cluster):
    """The brokers registered in a ZooKeeper: index i is the topic's i-th pair."""

    def __init__(self, connect: str, producer_settings: dict):
        from hostbroker.client import PRODUCER_SETTINGS
        from hostbroker.client.settings import resolve

        super().__init__(connect, "--to-zookeeper", resolve(PRODUCER_SETTINGS, producer_settings))
        # the end's own ssl.* settings, for the connections that create topics
        self.tls = {k: v for k, v in producer_settings.items() if k.startswith("ssl.")}

    def producer(self, settings: dict):
        from hostbroker.client import Producer
        from hostbroker.commands.console import zookeeper_errors

        with zookeeper_errors(self.option):
            return Producer(config={**settings, "zookeeper.connect": self.connect})

    def prepare(self, topic: str, source_count: int, producer, err: TextIO = sys.stderr) -> None:
        """Create ``topic`` on every live broker unless one registered it; then wait until
        the producer knows its pairs (an explicit partition is a place in its list). A
        replicated topic is used as it is (index i: its partition i, at its leader)."""
        if topic in self.view.snapshot.replicated or topic in self.view.refresh().replicated:
            return
        if not self.pairs(topic) and not self.view.refresh().partitions(topic):
            self._create(topic, source_count, err)
        if not _wait_for(lambda: producer.partitions_for(topic) in (None, self.pairs(topic)),
                         REGISTRATION_WAIT_S):
            raise CommandError(f"the producer did not learn topic {topic} from ZooKeeper "
                               f"within {REGISTRATION_WAIT_S:g} s")

    def _create(self, topic: str, source_count: int, err: TextIO) -> None:
        from hostbroker.client import BrokerError
        from hostbroker.commands.brokers import each_broker
        from hostbroker.errors import ErrorCode

        brokers = [self.view.snapshot.brokers[b] for b in sorted(self.view.snapshot.brokers)]
        if not brokers:
            raise CommandError(f"no live broker is registered in ZooKeeper "
                               f"({self.option} {self.connect})")
        each = math.ceil(source_count / len(brokers))

        def create(info, client) -> None:
            try:
                client.create_topic(topic, each)
            except BrokerError as exc:
                if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    raise

        done, _ = each_broker("create", brokers, create, err, command="mirror", tls=self.tls)
        if not done:
            raise CommandError(f"topic {topic} could not be created on any destination broker")
        if not _wait_for(lambda: {b for b, _ in self.view.refresh().partitions(topic)}
                         >= set(done), REGISTRATION_WAIT_S, pause=0.05):
            raise CommandError(f"topic {topic} was created on brokers "
                               f"{', '.join(map(str, sorted(done)))} but not registered in "
                               f"ZooKeeper within {REGISTRATION_WAIT_S:g} s")

    def count(self, topic: str) -> int:
        count = len(self.view.snapshot.group_partitions(topic))
        if not count:
            raise CommandError(f"no live destination broker holds topic {topic} "
                               f"({self.option} {self.connect})")
        return count


