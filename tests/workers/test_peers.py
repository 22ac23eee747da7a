"""A connection's identity from the kernel, over real sockets (and, as root, a
real peer of another uid)."""

import os
import shutil
import socket
import subprocess
import tempfile

import pytest

from hostbroker.security.principals import ANONYMOUS, UNIX_HOST, Principal, user_principal
from hostbroker.workers.peers import peer_credentials, peer_identity


def test_a_unix_peer_is_its_user_and_groups(tmp_path):
    path = str(tmp_path / "s")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(1)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(path)
            accepted, _ = listener.accept()
            with accepted:
                pid, uid, gid = peer_credentials(accepted)
                identity = peer_identity(accepted)
    assert (pid, uid, gid) == (os.getpid(), os.getuid(), os.getgid())
    assert identity.principal == user_principal(os.getuid()) and identity.host == UNIX_HOST


def test_a_tcp_peer_is_anonymous_from_its_address():
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        with socket.socket(family, socket.SOCK_STREAM) as listener:
            listener.bind((host, 0))
            listener.listen(1)
            with socket.create_connection(listener.getsockname()[:2]):
                accepted, _ = listener.accept()
                with accepted:
                    identity = peer_identity(accepted)
        assert identity.principal == ANONYMOUS and identity.host == host


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can start a peer of another uid")
def test_a_peer_of_another_uid_is_that_user():
    where = tempfile.mkdtemp(prefix="hb-peer-", dir="/tmp")  # a dir that uid can reach
    path = os.path.join(where, "s")
    try:
        os.chmod(where, 0o711)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(path)
            os.chmod(path, 0o777)
            listener.listen(1)
            listener.settimeout(20)
            code = (f"import socket; s = socket.socket(socket.AF_UNIX); s.connect({path!r}); "
                    "s.recv(1)")
            # the system python: the venv may be in a tree that uid cannot enter
            child = subprocess.Popen(["/usr/bin/python3", "-c", code], user=65534, group=65534,
                                     cwd="/")
            try:
                accepted, _ = listener.accept()
                with accepted:
                    identity = peer_identity(accepted)
            finally:
                child.kill()
                child.wait()
    finally:
        shutil.rmtree(where, ignore_errors=True)
    assert identity.principal == user_principal(65534) != Principal("User", "root")
