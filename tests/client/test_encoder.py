"""The default encoder, and what the producer does with what it returns
(checked before any connection is made: the broker URI here has nothing behind it)."""

import pytest

from hostbroker.client import (DefaultEncoder, DeliveryError, Encoder, Producer, ProducerCallbacks,
                               RecordTooLargeError)
from hostbroker.errors import ErrorCode, InvalidTopicError

NOWHERE = "unix:///nonexistent/hostbroker-test.sock"


def test_bytes_pass_through_untouched():
    value = b"\x00\xffpayload"
    assert DefaultEncoder().encode(value) is value


def test_str_is_utf8():
    assert DefaultEncoder().encode("héllo ✓") == "héllo ✓".encode("utf-8")
    assert DefaultEncoder().encode("") == b""


def test_buffers_are_copied():
    buffer = bytearray(b"abc")
    encoded = DefaultEncoder().encode(buffer)
    buffer[0] = ord("z")
    assert encoded == b"abc" and type(encoded) is bytes
    assert DefaultEncoder().encode(memoryview(b"xyz")[1:]) == b"yz"


@pytest.mark.parametrize("value", [42, None, 1.5, ["a"], {"a": 1}])
def test_other_types_refused_with_the_type_named(value):
    with pytest.raises(TypeError, match=type(value).__name__):
        DefaultEncoder().encode(value)


def test_base_encoder_must_be_overridden():
    with pytest.raises(NotImplementedError):
        Encoder().encode(b"x")


class Upper(Encoder):
    def encode(self, value):
        return str(value).upper().encode()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_producer_refuses_before_any_io(mode):
    with Producer(NOWHERE, producer_type=mode, message_max_bytes=100) as producer:
        with pytest.raises(TypeError, match="int"):
            producer.send("t", 42)
        with pytest.raises(TypeError, match="float"):
            producer.send_many("t", [b"ok", 1.5])
        with pytest.raises(TypeError, match="int"):
            producer.send("t", b"v", key=7)
        # message.max.bytes bounds the entry's length field: 6 header bytes + payload.
        with pytest.raises(RecordTooLargeError) as info:
            producer.send("t", b"x" * 95)
        assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE
        with pytest.raises(RecordTooLargeError):
            producer.send_many("t", [b"x", b"x" * 95])
        with pytest.raises(InvalidTopicError):
            producer.send("bad/topic", b"v")
        with pytest.raises(ValueError, match="partition must be None or an int >= 0"):
            producer.send("t", b"v", partition=-1)
        with pytest.raises(ValueError, match="got '1'"):
            producer.send_many("t", [b"v"], partition="1")
        assert producer.stats["enqueued"] == 0


def test_custom_encoder_applies_to_values_and_keys():
    seen = []

    class Record(ProducerCallbacks):
        def on_enqueued(self, topic, partition, value):
            seen.append((topic, partition, value))

    producer = Producer(NOWHERE, producer_type="async", message_send_max_retries=0,
                        encoder=Upper(), callbacks=Record())
    producer.send("t", "value", key="key")
    producer.send_many("t", ["a", 1], partition=0)
    assert seen == [("t", None, b"VALUE"), ("t", 0, b"A"), ("t", 0, b"1")]
    # Nothing listens at NOWHERE: the messages end failed, and close() says so.
    with pytest.raises(DeliveryError) as info:
        producer.close()
    assert info.value.message_count == 3
    assert isinstance(info.value.failures[0].error, OSError)
