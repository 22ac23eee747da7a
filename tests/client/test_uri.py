import socket

import pytest

from hostbroker.client import parse_uri


@pytest.mark.parametrize(
    "uri, expected",
    [
        ("tcp://127.0.0.1:9092", (socket.AF_INET, ("127.0.0.1", 9092))),
        ("tcp://broker.example:1", (socket.AF_INET, ("broker.example", 1))),
        ("tcp://[::1]:65535", (socket.AF_INET6, ("::1", 65535))),
        ("unix:///run/hostbroker.sock", (socket.AF_UNIX, "/run/hostbroker.sock")),
        ("unix://./data/hostbroker.sock", (socket.AF_UNIX, "./data/hostbroker.sock")),
    ],
)
def test_good_uris(uri, expected):
    assert parse_uri(uri) == expected


@pytest.mark.parametrize(
    "uri",
    [
        "", "127.0.0.1:9092", "tcp://127.0.0.1", "tcp://:9092", "tcp://host:0", "tcp://host:65536",
        "tcp://host:port", "tcp://host:9092/x", "tcp://host:-1", "udp://host:9092",
        "unix://", "unix:///", "unix://./", "unix://relative/path", "unix:/abs", "file:///x",
    ],
)
def test_bad_uris_are_one_line_value_errors(uri):
    with pytest.raises(ValueError) as info:
        parse_uri(uri)
    assert "\n" not in str(info.value) and repr(uri) in str(info.value)
