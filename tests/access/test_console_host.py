"""The host of an HTTP client, as the console's ACL check sees it, is what
the Kafka listeners would say for the same peer: an IPv4 client of a
dual-stack listener is its IPv4 address, so ``--allow-host 127.0.0.1``
matches it on both."""

from __future__ import annotations

import pytest

from hostbroker.workers.http.context import admin_host


@pytest.mark.parametrize("peer, host", [
    ("127.0.0.1:5000", "127.0.0.1"),
    ("[::ffff:127.0.0.1]:5000", "127.0.0.1"),
    ("::ffff:127.0.0.1:5000", "127.0.0.1"),
    ("[::1]:80", "::1"),
    ("[fe80::1%eth0]:80", "fe80::1"),
    ("[0:0:0:0:0:0:0:1]:80", "::1"),
    ("localhost", "localhost"),
])
def test_the_admin_host_is_the_listeners_host(peer, host):
    assert admin_host(peer) == host
