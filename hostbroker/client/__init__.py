"""The Python client of hostbroker, on top of the sans-IO ``hostbroker.protocol``.

- ``connection``  BrokerConnection: one blocking socket (TCP or Unix), pipelined
                  requests answered in order; parse_uri
- ``simple``      SimpleClient: one method per API, one request at a time
- ``errors``      BrokerError (an error code from the broker),
                  ConnectionClosedError, and the producers' and consumers' errors
- ``consumer``    SimpleConsumer: fetch partitions at offsets the caller keeps;
                  ``consumer_leaders``, its connections, one per leader of a
                  replicated partition; ``fetched``, FetchedSet: one
                  partition's fetched message set, read entry by entry
- ``group``       ConsumerConnector: a group's partitions as streams, offsets
                  committed to the broker; its parts know it only as a
                  protocol (``group_assignments``, ``group_coordinator``,
                  ``group_cluster``, ``group_plugins``)
- ``streams``     KafkaStream and the fetcher threads that feed streams (every
                  partition read, fairly)
- ``producer``    Producer (sync or async with a bounded queue), RecordMetadata,
                  ProducerCallbacks, SentRequest, PRODUCER_SETTINGS; its parts:
                  ``producer_settings``, ``producer_batches`` (encoding and
                  compression), ``producer_queue`` (the async queue and sending
                  thread), ``producer_requests`` (requests, answers, retries)
- ``partitioner`` Partitioner, DefaultPartitioner, stable_hash
- ``encoder``     Encoder, DefaultEncoder
- ``cluster``     Cluster: topic metadata from the brokers of a broker list
- ``leaders``     LeaderMap: where each partition of a replicated topic is led
                  (ZooKeeper's state nodes, or METADATA v1 of a broker list);
                  producers and consumers follow it

Producers and consumers with batching, partitioners and groups build on
``BrokerConnection`` (docs/architecture.md).
"""

from hostbroker.client.connection import BrokerConnection, NotABrokerError, connect, parse_uri
from hostbroker.client.errors import BrokerError, ConnectionClosedError
from hostbroker.client.simple import SimpleClient

from hostbroker.client.consumer import CONSUMER_SETTINGS, EARLIEST, LATEST, SimpleConsumer
from hostbroker.client.errors import (ConsumerTimeoutError, DecompressedTooLargeError,
                                      InvalidEntryError, MessageSizeTooLargeError,
                                      OffsetOutOfRangeError)
from hostbroker.client.fetched import FetchedSet
from hostbroker.client.group import (GROUP_SETTINGS, Blacklist, BrokerOffsetStorage,
                                     ConsumerConnector, KafkaStream, MessageAndMetadata,
                                     OffsetStorage, PartitionAssignor, RoundRobinAssignor,
                                     TopicFilter, Whitelist)

from hostbroker.client.encoder import DefaultEncoder, Encoder
from hostbroker.client.errors import (DeliveryError, DeliveryFailure, ProducerError,
                                      QueueFullError, RecordTooLargeError)
from hostbroker.client.partitioner import DefaultPartitioner, Partitioner, stable_hash
from hostbroker.client.producer import (PRODUCER_SETTINGS, Producer, ProducerCallbacks,
                                        RecordMetadata, SentRequest)

__all__ = [
    "BrokerConnection",
    "BrokerError",
    "ConnectionClosedError",
    "NotABrokerError",
    "SimpleClient",
    "connect",
    "parse_uri",
    # consumers
    "CONSUMER_SETTINGS",
    "EARLIEST",
    "GROUP_SETTINGS",
    "LATEST",
    "Blacklist",
    "BrokerOffsetStorage",
    "ConsumerConnector",
    "ConsumerTimeoutError",
    "DecompressedTooLargeError",
    "FetchedSet",
    "InvalidEntryError",
    "KafkaStream",
    "MessageAndMetadata",
    "MessageSizeTooLargeError",
    "OffsetOutOfRangeError",
    "OffsetStorage",
    "PartitionAssignor",
    "RoundRobinAssignor",
    "SimpleConsumer",
    "TopicFilter",
    "Whitelist",
    # producers
    "PRODUCER_SETTINGS",
    "DefaultEncoder",
    "DefaultPartitioner",
    "DeliveryError",
    "DeliveryFailure",
    "Encoder",
    "Partitioner",
    "Producer",
    "ProducerCallbacks",
    "ProducerError",
    "QueueFullError",
    "RecordMetadata",
    "RecordTooLargeError",
    "SentRequest",
    "stable_hash",
]
