"""The client's TLS context and its PEM files (hostbroker.client.tls): a
keystore others may read is warned of once per path, and a certificate
replaced at the same path is read again by the next connection."""

from __future__ import annotations

import logging
import os
import shutil

from hostbroker.client.tls import tls_context


def _copy(src: str, dst: str, mode: int) -> str:
    shutil.copyfile(src, dst + ".new")
    os.chmod(dst + ".new", mode)
    os.replace(dst + ".new", dst)  # (a new inode, as a rotation writes)
    return dst


def test_a_keystore_readable_by_others_is_warned_once_per_path(certs, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="hostbroker.client.tls")
    private = _copy(certs.keystore("alice"), str(tmp_path / "private.pem"), 0o600)
    tls_context({"ssl.truststore.location": certs.ca, "ssl.keystore.location": private})
    assert caplog.records == []
    shared = _copy(certs.keystore("alice"), str(tmp_path / "shared.pem"), 0o644)
    for algorithm in ("https", ""):  # two contexts of the same file: said once
        tls_context({"ssl.truststore.location": certs.ca, "ssl.keystore.location": shared,
                     "ssl.endpoint.identification.algorithm": algorithm})
    said = [r.getMessage() for r in caplog.records]
    assert said == [f"ssl.keystore.location: {shared}: readable by others (mode 644) or not "
                    "owned by this user: its key should be mode 0600"]


def test_a_certificate_replaced_at_its_path_is_read_again(certs, tmp_path):
    path = _copy(certs.keystore("alice"), str(tmp_path / "client.pem"), 0o600)
    settings = {"ssl.truststore.location": certs.ca, "ssl.keystore.location": path}
    first = tls_context(settings)
    assert tls_context(settings) is first  # unchanged: the context is kept
    _copy(certs.keystore("nocn"), path, 0o600)
    assert tls_context(settings) is not first
