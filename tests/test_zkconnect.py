"""zookeeper.connect strings: the pure parser, no ZooKeeper needed."""

from __future__ import annotations

import pytest

from hostbroker.errors import ConfigError
from hostbroker.zkconnect import parse_connect


@pytest.mark.parametrize("text, hosts, chroot", [
    ("a:1,b:2/x/y", [("a", 1), ("b", 2)], "/x/y"),
    (" 127.0.0.1:2181 ", [("127.0.0.1", 2181)], ""),
    ("a:1, b:65535", [("a", 1), ("b", 65535)], ""),
    ("[::1]:2181/hb", [("::1", 2181)], "/hb"),
])
def test_good_strings(text, hosts, chroot):
    assert parse_connect(text) == (hosts, chroot)


@pytest.mark.parametrize("bad, what", [
    ("", "empty"), ("a", "'a' is not host:port"), ("a:0", "'a:0'"),
    ("a:1,,b:2", "'' is not host:port"), ("a:1/x/", "chroot '/x/'"),
    ("a:1/x//y", "chroot"), ("a:x", "'a:x'"),
    ("a:65536", "'a:65536' is not host:port"), ("a:-1", "'a:-1'"), ("a:+1", "'a:\\+1'"),
    ("h:\u00b2", "is not host:port"),                 # a superscript digit: isdigit() but not int()
    ("h:\u0662\u0661\u0668\u0661", "is not host:port"),  # Arabic-Indic 2181
    ("h :2181", "'h :2181' is not host:port"),      # whitespace kept in the host
    ("h\tx:2181", "is not host:port"),
    ("h:2181 ", None), ("h: 2181", "is not host:port"), ("h:", "'h:' is not host:port"),
])
def test_bad_strings_raise_one_line(bad, what):
    if what is None:                       # the whole string is stripped first: accepted
        assert parse_connect(bad) == ([("h", 2181)], "")
        return
    with pytest.raises(ConfigError, match=what) as caught:
        parse_connect(bad)
    assert "\n" not in str(caught.value)
