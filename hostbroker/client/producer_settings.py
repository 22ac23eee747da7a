"""The producer's settings: :data:`PRODUCER_SETTINGS`, declared once (the
table in docs/producer.md is generated from it and resolved by
:mod:`hostbroker.client.settings`), and the codec ids the
``compression.codec`` names stand for.

Declarations only, no I/O. The checks between two settings (``batch.size``
against ``queue.size``, ``max.request.bytes`` and ``queue.bytes`` against
``message.max.bytes``)
are made by the Producer's constructor, which knows a request's framing.
"""

from __future__ import annotations

from hostbroker.client.connection import DEFAULT_CLIENT_ID
from hostbroker.client.settings import QUOTA_HOLD_SETTING, TLS_SETTINGS
from hostbroker.cluster.zkread import SETTINGS as ZK_READ_SETTINGS
from hostbroker.config import Setting, at_least, one_of
from hostbroker.log.message import CODEC_GZIP, CODEC_NONE, CODEC_SNAPPY, MIN_LENGTH_V1


PRODUCER_SETTINGS: tuple[Setting, ...] = (
    Setting("broker.list", str, "tcp://127.0.0.1:9092",
            "Brokers to produce to: tcp://HOST:PORT or unix:///PATH URIs. The bootstrap "
            "argument overrides it.", kind="list"),
    Setting("client.id", str, DEFAULT_CLIENT_ID, "Names this client in every request."),
    Setting("producer.type", str, "sync",
            "sync: send() waits for the answer; async: send() queues, a thread sends batches.",
            one_of("sync", "async")),
    Setting("request.required.acks", int, 1,
            "0: no answer; 1: answered once in the page cache (the leader's, for a "
            "replicated topic); -1: answered once flushed and, for a replicated topic, "
            "held by every in-sync replica (refused NOT_ENOUGH_REPLICAS, retriable, while "
            "fewer than min.insync.replicas are in sync).",
            lambda v: None if v in (0, 1, -1) else "must be 0, 1 or -1"),
    Setting("request.timeout.ms", int, 10000,
            "How long the broker may wait for an acks=-1 flush, and how long the client "
            "waits on a socket (connect, send, answer).", at_least(1)),
    Setting("compression.codec", str, "none",
            "none, gzip or snappy: one compressed wrapper per batch and partition.",
            one_of("none", "gzip", "snappy")),
    Setting("batch.size", int, 200, "Async: messages sent together in one batch.",
            at_least(1)),
    Setting("queue.time", int, 5000,
            "Async: longest time (ms) a message waits in the queue for its batch to fill.",
            at_least(0)),
    Setting("queue.size", int, 50000,
            "Async: messages the queue holds at most (their bytes: queue.bytes). While "
            "every request in flight waits for its answer, what gathers here is what the "
            "next requests carry.", at_least(1)),
    Setting("queue.bytes", int, 32 * 1024 * 1024,
            "Async: bytes of values and keys the queue holds at most (at least "
            "message.max.bytes). A send that would pass it waits like one to a full "
            "queue.size.", at_least(1)),
    Setting("queue.enqueue.timeout.ms", int, -1,
            "Async, queue full: -1 blocks until there is room, 0 raises QueueFullError at "
            "once, N waits N ms then raises.",
            lambda v: None if v >= -1 else "must be -1, 0 or more"),
    Setting("message.send.max.retries", int, 3,
            "Times a message set is sent again after a retriable error.", at_least(0)),
    Setting("retry.backoff.ms", int, 100,
            "Wait before a retry (metadata is refreshed first when the error calls for it).",
            at_least(0)),
    Setting("max.in.flight.requests.per.connection", int, 5,
            "Unanswered requests per broker connection (pipelining).", at_least(1)),
    Setting("message.max.bytes", int, 1000000,
            "Largest entry (length field) sent; a bigger message is refused before it is "
            "queued. Compressed batches are split so that each wrapper fits it, and so "
            "does the message set it inflates to.",
            lambda v: None if MIN_LENGTH_V1 <= v < 2**31 else "must be between 6 and 2**31-1"),
    Setting("max.request.bytes", int, 1048576,
            "Largest PRODUCE request; bigger batches are split into several requests "
            "(smaller requests keep the broker's pipeline busier).",
            lambda v: None if v < 2**31 else "must be below 2**31"),
    Setting("topic.metadata.refresh.interval.ms", int, 600000,
            "Ask the brokers for a topic's partitions again after this long.", at_least(0)),
    Setting("max.failures.kept", int, 1000,
            "Failed message sets a DeliveryError lists (all are counted).", at_least(1)),
    Setting("zookeeper.connect", str, "",
            "host:port[,host:port...][/chroot]: find brokers and partitions through "
            "ZooKeeper instead of broker.list (not together with broker.list or a "
            "bootstrap); empty: broker.list."),
    Setting("zookeeper.session.timeout.ms", int, 6000,
            "With zookeeper.connect: the ZooKeeper session timeout.", at_least(1)),
    Setting("zookeeper.connection.timeout.ms", int, 6000,
            "With zookeeper.connect: how long the constructor waits for a ZooKeeper "
            "server, and at most how long a new topic's registration is waited for "
            "after the produce that created it.", at_least(1)),
    QUOTA_HOLD_SETTING,
) + ZK_READ_SETTINGS + TLS_SETTINGS  # (zookeeper.connect: the bounds of what is read there)

CODECS = {"none": CODEC_NONE, "gzip": CODEC_GZIP, "snappy": CODEC_SNAPPY}
