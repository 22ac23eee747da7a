"""Batch reads of the hostbroker data source against a real broker and a real Spark."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from hostbroker.client import Producer, SimpleConsumer


def produce(uri, topic, values, *, partition=0, codec="none"):
    with Producer(uri, compression_codec=codec) as producer:
        producer.send_many(topic, values, partition=partition)


def topic_rows(uri, topic, partitions):
    rows = []
    with SimpleConsumer(uri) as consumer:
        for p in partitions:
            for offset, nxt, value in consumer.messages(topic, p, 0, stop_at_end=True):
                rows.append((topic, p, offset, nxt, value))
    return sorted(rows)


def test_batch_read_of_two_topics(spark, broker):
    with broker.client() as client:
        client.create_topic("alpha", 3)
        client.create_topic("beta", 1)
    for p in range(3):
        produce(broker.tcp, "alpha", [f"a{p}-{i}".encode() for i in range(50 + p)], partition=p)
    produce(broker.tcp, "beta", [f"b{i}".encode() * 3 for i in range(40)], codec="gzip")
    produce(broker.tcp, "beta", [b"plain"], codec="none")
    df = (spark.read.format("hostbroker").option("bootstrap", broker.tcp)
          .option("subscribe", "alpha,beta").load())
    got = sorted(tuple(r) for r in df.collect())
    want = topic_rows(broker.tcp, "alpha", range(3)) + topic_rows(broker.tcp, "beta", [0])
    assert got == sorted(want)
    assert len(got) == 50 + 51 + 52 + 41
