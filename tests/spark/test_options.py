"""The data source's options, checked without Spark: every problem is one line naming it."""

from __future__ import annotations

import json
import re

import pytest

from hostbroker.spark.options import (EARLIEST, LATEST, OptionError, parse_offsets, read_options,
                                      write_options)

B = {"bootstrap": "tcp://127.0.0.1:9092"}


def read(streaming=False, **options):
    # Spark lower-cases the keys it hands a data source
    return read_options({k.lower(): v for k, v in {**B, **options}.items()}, streaming=streaming)


def test_defaults_of_batch_and_stream():
    batch = read(subscribe="a, b,a")
    assert batch.subscribe == ("a", "b")
    assert (batch.starting, batch.ending, batch.fail_on_data_loss) == ("earliest", "latest", True)
    assert read(True, subscribe="a").starting == "latest"
    assert batch.client == {}


def test_offsets_json_and_subscriptions():
    opts = read(assign='{"t": [2, 0, 2]}', startingOffsets='{"t": {"0": 15, "2": -2}}',
                endingOffsets='{"t": {"2": -1}}', maxBytesPerPartition="4096",
                failOnDataLoss="FALSE")
    assert opts.assign == {"t": (0, 2)}
    assert opts.starting == {"t": {0: 15, 2: EARLIEST}} and opts.ending == {"t": {2: LATEST}}
    assert opts.max_bytes_per_partition == 4096 and opts.fail_on_data_loss is False
    pattern = read(subscribePattern="logs-.*")
    assert pattern.wants("logs-a") and not pattern.wants("xlogs-a") and not pattern.wants("other")
    assert parse_offsets(" Earliest ", "x") == "earliest"


def test_client_settings_pass_through_checked():
    opts = read(subscribe="a", **{"hostbroker.fetch.size": "4194304",
                                  "hostbroker.check.crcs": "false"})
    assert opts.client == {"fetch.size": 4194304, "check.crcs": False}
    w = write_options({**B, "acks": "all", "compression": "GZIP", "hostbroker.batch.size": "50"},
                      streaming=False)
    assert (w.acks, w.compression, w.client) == (-1, "gzip", {"batch.size": 50})


def test_spark_own_options_are_ignored():
    assert read(True, subscribe="a", checkpointLocation="/x", queryName="q").subscribe == ("a",)


@pytest.mark.parametrize("options, streaming, message", [
    ({"subscribe": "a", "Colour": "red"}, False, "option colour: unknown option"),
    ({"subscribe": "a", "path": "/x"}, False, "option path: this source takes no path"),
    ({"subscribe": "a", "bootstrap": " "}, False, "option bootstrap: required"),
    ({"subscribe": "a", "bootstrap": "http://x"}, False, "option bootstrap: bad broker URI"),
    ({"subscribe": "a", "zookeeper.connect": "h:2181"}, False,
     "option bootstrap: conflicts with zookeeper.connect: give only one"),
    ({"subscribe": "a", "zookeeper.connection.timeout.ms": "500"}, False,
     "option zookeeper.connection.timeout.ms: only with zookeeper.connect"),
    ({"subscribe": "", }, False, "option subscribe: names no topic"),
    ({"subscribe": "a", "subscribePattern": "a"}, False,
     "option subscribe: conflicts with subscribePattern"),
    ({"assign": '{"a": [-1]}'}, False, "option assign: topic 'a': expected a list"),
    ({"assign": "[1]"}, False, "option assign: expected JSON"),
    ({"subscribe": "a", "startingOffsets": '{"a": {"x": 1}}'}, False,
     "option startingOffsets: topic 'a': 'x' is not a partition number"),
    ({"subscribe": "a", "startingOffsets": '{"a": {"0": -3}}'}, False,
     "option startingOffsets: a/0: -3 is not a byte offset"),
    ({"subscribe": "a", "startingOffsets": '{"a": {"0": 1.5}}'}, False, "is not a byte offset"),
    ({"subscribe": "a", "endingOffsets": "earliest"}, False,
     "option endingOffsets: earliest cannot be used here"),
    ({"subscribe": "a", "endingOffsets": '{"a": {"0": -2}}'}, False, "a/0: -2 cannot be used"),
    ({"assign": '{"a": [0]}', "startingOffsets": '{"a": {"1": 5}}'}, False,
     "option startingOffsets: a/1 is not assigned"),
    ({"subscribe": "a", "startingOffsets": "earliest", "startingTimestamp": "5"}, False,
     "option startingTimestamp: conflicts with startingOffsets"),
    ({"subscribe": "a", "startingTimestamp": "soon"}, False,
     "option startingTimestamp: 'soon' is not milliseconds"),
    ({"subscribe": "a", "startingTimestamp": "9", "endingTimestamp": "5"}, False,
     "option endingTimestamp: is before startingTimestamp"),
    ({"subscribe": "a", "endingTimestamp": "5"}, True,
     "option endingTimestamp: not an option of a streaming read"),
    ({"subscribe": "a", "maxBytesPerTrigger": "x"}, True,
     "option maxBytesPerTrigger: 'x' is not a whole number"),
    ({"subscribe": "a", "topic": "t"}, False, "option topic: not an option of a read"),
    ({"subscribe": "a", "hostbroker.nope": "1"}, False,
     "option hostbroker.nope: not a usable consumer setting"),
    ({"subscribe": "a", "hostbroker.broker.list": "tcp://h:1"}, False,
     "option hostbroker.broker.list: set by this source itself \\(use bootstrap\\)"),
])
def test_each_bad_read_option_is_one_line_naming_it(options, streaming, message):
    with pytest.raises(OptionError, match=message) as caught:
        read(streaming, **options)
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith("hostbroker data source: option ")


@pytest.mark.parametrize("options, message", [
    ({"compression": "lz4"}, "option compression: 'lz4' must be one of none, gzip, snappy"),
    ({"acks": "2"}, "option acks: '2' must be 0, 1, -1 or all"),
    ({"subscribe": "a"}, "option subscribe: not an option of a batch write"),
    ({"topic": "  "}, "option topic: '' is not a topic name"),
    ({"hostbroker.compression.codec": "gzip"}, "set by this source itself \\(use compression\\)"),
])
def test_each_bad_write_option_is_one_line_naming_it(options, message):
    with pytest.raises(OptionError, match=message):
        write_options({**B, **options}, streaming=False)


def test_option_errors_are_value_errors_for_spark():
    with pytest.raises(ValueError, match=re.escape("option acks")):
        write_options({**B, "acks": "x"}, streaming=True)


def cluster(streaming=False, **options):
    spelled = {"zookeeper.connect": "127.0.0.1:2181/hb", **options}
    return read_options({k.lower(): v for k, v in spelled.items()}, streaming=streaming)


def test_cluster_mode_names_partitions_broker_partition():
    opts = cluster(assign='{"t": ["2-0", "1-3", "1-3"]}', startingOffsets='{"t": {"1-3": 42}}',
                   endingOffsets='{"t": {"2-0": -1}}', **{"zookeeper.connection.timeout.ms": "700"})
    assert (opts.cluster, opts.bootstrap, opts.zookeeper) == (True, (), "127.0.0.1:2181/hb")
    assert opts.assign == {"t": ((1, 3), (2, 0))} and opts.zookeeper_timeout_ms == 700
    assert opts.starting == {"t": {(1, 3): 42}} and opts.ending == {"t": {(2, 0): LATEST}}
    assert parse_offsets('{"t": {"3-1": -2}}', "x", cluster=True) == {"t": {(3, 1): EARLIEST}}
    assert not read(subscribe="a").cluster
    w = write_options({"zookeeper.connect": "z:1", "topic": "t"}, streaming=True)
    assert (w.cluster, w.zookeeper, w.bootstrap) == (True, "z:1", ())


def test_cluster_mode_names_a_replicated_partition_minus_1_p():
    """A replicated topic's partition P is (-1, P), "-1-P" (docs/spark.md); a checkpoint
    names it so too (tests/spark/test_cluster.py: the stream module needs pyspark)."""
    opts = cluster(assign='{"r": ["-1-1", "-1-0"], "t": ["1-0"]}',
                   startingOffsets='{"r": {"-1-1": 42}}')
    assert opts.assign == {"r": ((-1, 0), (-1, 1)), "t": ((1, 0),)}
    assert opts.starting == {"r": {(-1, 1): 42}}
    for name in ("-2-0", "-1-", "-1-x", "--1-0"):
        with pytest.raises(OptionError, match="is not BROKER-PARTITION"):
            cluster(assign=json.dumps({"r": [name]}))


@pytest.mark.parametrize("options, message", [
    ({"subscribe": "a", "startingOffsets": '{"a": {"0": 1}}'},
     "option startingOffsets: topic 'a': '0' is not BROKER-PARTITION"),
    ({"assign": '{"a": [0]}'}, "option assign: topic 'a': 0 is not BROKER-PARTITION"),
    ({"assign": '{"a": ["1-x"]}'}, "option assign: topic 'a': '1-x' is not BROKER-PARTITION"),
    ({"assign": '{"a": ["1-0"]}', "startingOffsets": '{"a": {"2-0": 5}}'},
     "option startingOffsets: a/2-0 is not assigned"),
    ({"subscribe": "a", "endingOffsets": '{"a": {"1-0": -2}}'},
     "option endingOffsets: a/1-0: -2 cannot be used here"),
    ({"subscribe": "a", "zookeeper.connect": "nohost"},
     "option zookeeper.connect: 'nohost' is not host:port"),
    ({"subscribe": "a", "zookeeper.connection.timeout.ms": "0"},
     "option zookeeper.connection.timeout.ms: 0 is not milliseconds"),
])
def test_each_bad_cluster_option_is_one_line_naming_it(options, message):
    with pytest.raises(OptionError, match=message) as caught:
        cluster(**options)
    assert "\n" not in str(caught.value)


def test_broker_partition_names_need_zookeeper():
    with pytest.raises(OptionError, match="'1-0' is not a partition number \\(BROKER-PARTITION "
                       "names need zookeeper.connect\\)"):
        read(subscribe="a", startingOffsets='{"a": {"1-0": 0}}')
    with pytest.raises(OptionError, match="names need zookeeper.connect"):
        read(assign='{"a": ["1-0"]}')
    with pytest.raises(OptionError, match="hostbroker.zookeeper.connect: set by this source "
                       "itself \\(use zookeeper.connect\\)"):
        write_options({"zookeeper.connect": "z:1", "hostbroker.zookeeper.connect": "z:2"},
                      streaming=False)
