"""The admin gate and its token file: every refusal, in the gate's order, and
every token file the start refuses (real files; the gate is called as the
Router calls it)."""

from __future__ import annotations

import json
import os

import pytest

from hostbroker.config import Config
from hostbroker.web.auth import AdminGate, AdminTokenError, load_admin_token
from hostbroker.web.router import Request

TOKEN = b"s3cret-token-0123456789"
GOOD = {"host": "127.0.0.1:9644", "origin": "http://127.0.0.1:9644",
        "authorization": "Bearer " + TOKEN.decode(), "content-type": "application/json",
        "x-hostbroker-console": "1"}


def post(**changes) -> Request:
    headers = dict(GOOD)
    for key, value in changes.items():
        key = key.replace("_", "-")
        if value is None:
            headers.pop(key, None)
        else:
            headers[key] = value
    return Request("POST", "/api/topics", {}, headers, b"{}", "127.0.0.1:1")


def refusal(gate, request) -> tuple[int, str] | None:
    answer = gate(request)
    return None if answer is None else (answer.status, json.loads(answer.body)["error"])


def test_the_console_s_own_request_passes():
    gate = AdminGate(True, TOKEN)
    assert gate(post()) is None
    assert gate(post(content_type="application/json; charset=utf-8")) is None
    assert gate(post(origin=None, referer="http://127.0.0.1:9644/#topics")) is None
    assert gate(post(origin="https://127.0.0.1:9644")) is None  # behind a TLS proxy


def test_off_unless_enabled_whatever_the_request_carries():
    status, message = refusal(AdminGate(False, None), post())
    assert status == 403 and "http.admin.enable" in message


@pytest.mark.parametrize("authorization", [
    None, "", "Bearer", "Bearer wrong-token-0123456789", "Basic " + TOKEN.decode(),
    "Bearer " + TOKEN.decode()[:-1], "Bearer " + TOKEN.decode() + "x", "Bearer sécret",
])
def test_no_or_a_wrong_token_is_401(authorization):
    answer = AdminGate(True, TOKEN)(post(authorization=authorization))
    assert answer.status == 401 and answer.headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("changes, words", [
    ({"origin": "http://evil.example"}, "Origin"),
    ({"origin": "http://127.0.0.1:9645"}, "Origin"),
    ({"origin": "null"}, "Origin"),
    ({"origin": "http://127.0.0.1:9644/path"}, "Origin"),
    ({"origin": "http://user@127.0.0.1:9644"}, "Origin"),
    ({"origin": "file://127.0.0.1:9644"}, "Origin"),
    ({"origin": None}, "Origin or Referer"),
    ({"origin": None, "referer": "http://evil.example/127.0.0.1:9644"}, "Referer"),
    ({"origin": None, "referer": "http://127.0.0.1:9644.evil.example/"}, "Referer"),
    ({"host": None}, "Host"),
    ({"content_type": None}, "application/json"),
    ({"content_type": "text/plain"}, "application/json"),
    ({"content_type": "application/x-www-form-urlencoded"}, "application/json"),
    ({"content_type": "multipart/form-data; boundary=x"}, "application/json"),
    ({"x_hostbroker_console": None}, "X-Hostbroker-Console"),
    ({"x_hostbroker_console": "0"}, "X-Hostbroker-Console"),
])
def test_what_another_site_could_send_is_403(changes, words):
    status, message = refusal(AdminGate(True, TOKEN), post(**changes))
    assert status == 403 and words in message, message


def test_the_token_is_checked_before_the_origin():
    # a request without the token learns nothing about the rest of the checks
    status, _ = refusal(AdminGate(True, TOKEN), post(authorization=None, origin="http://x"))
    assert status == 401


def config(path, enabled=True) -> Config:
    return Config.build(overrides=[f"http.admin.enable={str(enabled).lower()}",
                                   f"http.admin.token.file={path}"])


def token_file(tmp_path, data: bytes = TOKEN + b"\n", mode: int = 0o600):
    path = tmp_path / "admin.token"
    path.write_bytes(data)
    os.chmod(path, mode)
    return path


def test_a_good_token_file_is_read_less_its_newline(tmp_path):
    assert load_admin_token(config(token_file(tmp_path))) == TOKEN
    assert load_admin_token(config(token_file(tmp_path, TOKEN + b"\r\n"))) == TOKEN
    assert load_admin_token(config(token_file(tmp_path, mode=0o400))) == TOKEN


def test_nothing_is_read_when_the_admin_is_off(tmp_path):
    assert load_admin_token(config(tmp_path / "missing", enabled=False)) is None


@pytest.mark.parametrize("case, words", [
    ("unset", "required when http.admin.enable is true"),
    ("missing", "cannot read"),
    ("symlink", "is a symbolic link"),
    ("directory", "not a regular file"),
    ("group readable", "open to group or others"),
    ("other readable", "open to group or others"),
    ("group executable", "open to group or others"),
    ("short", "shorter than 16"),
    ("empty", "shorter than 16"),
    ("two lines", "visible ASCII"),
    ("space", "visible ASCII"),
    ("not ascii", "visible ASCII"),
    ("huge", "longer than 4096 bytes"),
])
def test_a_token_file_that_cannot_be_used_refuses_in_one_line(tmp_path, case, words):
    good = token_file(tmp_path)
    make = {  # each case writes its own file (one at a time: they share the name)
        "unset": lambda: "",
        "missing": lambda: tmp_path / "nope",
        "directory": lambda: tmp_path,
        "group readable": lambda: token_file(tmp_path, mode=0o640),
        "other readable": lambda: token_file(tmp_path, mode=0o604),
        "group executable": lambda: token_file(tmp_path, mode=0o610),
        "short": lambda: token_file(tmp_path, b"0123456789abcde\n"),
        "empty": lambda: token_file(tmp_path, b""),
        "two lines": lambda: token_file(tmp_path, TOKEN + b"\n" + TOKEN + b"\n"),
        "space": lambda: token_file(tmp_path, b"0123456789 abcdefgh"),
        "not ascii": lambda: token_file(tmp_path, "0123456789abcdéf".encode()),
        "huge": lambda: token_file(tmp_path, b"a" * 5000),
    }.get(case)
    path = make() if make is not None else None
    if case == "symlink":
        path = tmp_path / "link.token"
        os.symlink(good, path)
    with pytest.raises(AdminTokenError) as e:
        load_admin_token(config(path))
    message = str(e.value)
    assert message.startswith("http.admin.token.file") and words in message, message
    assert "\n" not in message


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
def test_a_token_file_owned_by_another_user_refuses_in_one_line(tmp_path):
    path = token_file(tmp_path)
    assert load_admin_token(config(path)) == TOKEN  # root's own file: used
    os.chown(path, 4321, -1)
    with pytest.raises(AdminTokenError) as e:
        load_admin_token(config(path))
    message = str(e.value)
    assert message.startswith("http.admin.token.file") and "owned by uid 4321" in message
    assert "\n" not in message
