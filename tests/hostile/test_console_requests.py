"""Hostile requests to the console (hostbroker/console/), on a real broker.

Each attack the console closes, and what must hold after it: a clear 4xx
(never a 500, never a file's bytes), nothing changed on the broker, and the
broker still answering. The attacks: a path reaching the file system through
``/static``; a change without the admin gate's token, header, content type or
origin (cross-site requests); a change while console changes are off; bodies
and parameters of the wrong shape, size or type; and markup in a name the page
shows (it must stay text).
"""

from __future__ import annotations

import json

import pytest

from tests.console.web import ConsoleBroker, call, get

PRECIOUS = b"[build-system]"  # pyproject.toml's first line: a file outside the package


@pytest.fixture
def console(tmp_path):
    broker = ConsoleBroker(tmp_path).start()
    yield broker
    broker.finish()


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One broker for the requests that must change nothing (each test checks it)."""
    broker = ConsoleBroker(tmp_path_factory.mktemp("console")).start()
    yield broker
    broker.finish()


def _topics(broker) -> set[str]:
    with broker.client() as c:
        return {t.topic for t in c.metadata().topics}


@pytest.mark.parametrize("path", [
    "/static/../pyproject.toml", "/static/%2e%2e/%2e%2e/pyproject.toml",
    "/static/..%2f..%2fpyproject.toml", "/static/app.js%00.txt", "/static/index.html",
    "/static/APP.JS", "/static/app.js/", "/static//etc/passwd", "/static/%2fetc%2fpasswd",
    "/static/__init__.py", "/static/api.py", "/static", "/index.html",
])
def test_no_path_reaches_a_file(shared, path):
    status, _, body = call(shared, "GET", path)
    assert status in (400, 404), (path, status)
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    assert PRECIOUS not in raw and b"root:" not in raw and b"import" not in raw


def _refused(console, headers_change: dict, drop: tuple = (), body=None, status=None):
    headers = console.admin_headers(**headers_change)
    for name in drop:
        headers.pop(name, None)
    payload = json.dumps(body or {"topic": "smuggled", "partitions": 1}).encode()
    got, _, answer = call(console, "POST", "/api/topics", payload, headers)
    assert got == status if status else got in (401, 403), (headers, got, answer)
    assert "error" in answer
    return got


def test_the_gate_refuses_every_change_without_all_its_marks(console):
    _refused(console, {}, drop=("Authorization",), status=401)
    _refused(console, {"Authorization": "Bearer " + "0" * len(console.token)}, status=401)
    _refused(console, {"Authorization": f"Bearer {console.token}x"}, status=401)
    _refused(console, {"Authorization": f"Basic {console.token}"}, status=401)
    # cross-site: another origin, no origin at all, a form's content type, no console header
    _refused(console, {"Origin": "http://evil.example"}, status=403)
    _refused(console, {"Origin": "http://127.0.0.1:1"}, status=403)
    _refused(console, {}, drop=("Origin",), status=403)
    _refused(console, {"Content-Type": "text/plain"}, status=403)
    _refused(console, {"Content-Type": "application/x-www-form-urlencoded"}, status=403)
    _refused(console, {}, drop=("X-Hostbroker-Console",), status=403)
    # every change route is behind it, not only create
    with console.client() as c:
        c.create_topic("kept", 1)
    for path in ("/api/topics/kept/delete", "/api/topics/kept/partitions",
                 "/api/topics/kept/config"):
        got, _, _ = call(console, "POST", path, b'{"partitions": 2}',
                         {"Content-Type": "application/json", "X-Hostbroker-Console": "1",
                          "Origin": console.origin})
        assert got == 401, path
    assert _topics(console) == {"kept"}
    with console.client() as c:
        assert len(c.metadata(["kept"]).topics[0].partitions) == 1
    # the page is still served
    assert get(console, "/api/topics")["total"] == 1


def test_changes_are_off_unless_enabled(tmp_path):
    broker = ConsoleBroker(tmp_path, admin=False).start()
    try:
        got, _, answer = broker.post("/api/topics", {"topic": "nope", "partitions": 1})
        assert got == 403 and "error" in answer
        assert "nope" not in _topics(broker)
        assert get(broker, "/api/broker")["admin"] is False
        assert get(broker, "/api/topics")["total"] == 0  # reading stays open
    finally:
        broker.finish()


@pytest.mark.parametrize("body", [
    b"{not json", b"\xff\xfe", b"[" * 30_000 + b"]" * 30_000, b"[]", b'"topic"', b"42",
    json.dumps({"topic": "t", "partitions": "3"}).encode(),
    json.dumps({"topic": "t", "partitions": True}).encode(),
    json.dumps({"topic": "t", "partitions": 2 ** 40}).encode(),
    json.dumps({"topic": "t", "partitions": 0}).encode(),
    json.dumps({"topic": "t", "partitions": 1.5}).encode(),
    json.dumps({"topic": "../../etc", "partitions": 1}).encode(),
    json.dumps({"topic": "x" * 300, "partitions": 1}).encode(),
    json.dumps({"topic": ["t"], "partitions": 1}).encode(),
    json.dumps({"partitions": 1}).encode(),
    json.dumps({"topic": "t", "config": {"retention.ms": {"a": 1}}}).encode(),
    json.dumps({"topic": "t", "config": ["retention.ms=1"]}).encode(),
    json.dumps({"topic": "t", "replication_factor": 99}).encode(),
    json.dumps({"topic": "t", "replication_factor": "2"}).encode(),
    # fields the change does not take: a typo is not a default
    json.dumps({"topic": "t", "partitons": 8}).encode(),
    json.dumps({"topic": "t", "partitions": 8, "replication-factor": 3}).encode(),
    json.dumps({"name": "t", "topic": "t", "partitions": 1}).encode(),
    json.dumps({"topic": "t", "partitions": 1, "x" * 40_000: 1}).encode(),
    json.dumps({"topic": "t", "partitions": 1, "\ud800": 1}).encode(),
    # config keys and values the wire cannot carry, or that are not text
    json.dumps({"topic": "t", "partitions": 1, "config": {"a" * 40_000: "1"}}).encode(),
    json.dumps({"topic": "t", "partitions": 1, "config": {"k" * 256: "1"}}).encode(),
    json.dumps({"topic": "t", "partitions": 1, "config": {"retention.ms": "9" * 40_000}}).encode(),
    json.dumps({"topic": "t", "partitions": 1, "config": {"retention.ms": "\ud800"}}).encode(),
    json.dumps({"topic": "t", "partitions": 1, "config": {"\udfff": "1"}}).encode(),
    json.dumps({"topic": "t", "partitions": 1, "config": {"": "1"}}).encode(),
])
def test_bad_bodies_are_400(shared, body):
    got, _, answer = call(shared, "POST", "/api/topics", body, shared.admin_headers())
    assert got == 400 and answer["error"] and "\n" not in answer["error"], (body[:60], answer)
    assert len(answer["error"]) < 400  # one line naming the field, not the field back
    assert _topics(shared) == set()
    assert "Traceback" not in shared.log()


def test_unknown_fields_are_named(shared):
    for path, body, field in (("/api/topics", {"topic": "t", "partitons": 8}, "partitons"),
                              ("/api/topics/t/partitions", {"partitions": 2, "count": 3},
                               "count"),
                              ("/api/topics/t/config", {"set": {}, "remove": ["a"]}, "remove"),
                              ("/api/topics/t/delete", {"force": True}, "force")):
        got, _, answer = shared.post(path, body)
        assert got == 400 and f"unknown field '{field}'" in answer["error"], (path, answer)
    assert _topics(shared) == set()


def test_bad_change_bodies_are_400(console):
    with console.client() as c:
        c.create_topic("target", 2)
    for path, body in (("/api/topics/target/partitions", {"partitions": -5}),
                       ("/api/topics/target/partitions", {"partitions": "9"}),
                       ("/api/topics/target/partitions", {}),
                       ("/api/topics/target/config", {}),
                       ("/api/topics/target/config", {"delete": "retention.ms"}),
                       ("/api/topics/target/config", {"set": {"": "1"}}),
                       ("/api/topics/target/config", {"delete": ["\ud800"]}),
                       ("/api/topics/target/config", {"delete": ["b" * 40_000]}),
                       ("/api/topics/target/config", {"delete": ["c" * 256]}),
                       ("/api/topics/target/config", {"set": {"retention.ms": "\udbff"}}),
                       ("/api/topics/target/config", {"set": {"retention.ms": "1"},
                                                      "delete": ["\ud800"]}),
                       ("/api/topics/target/config", {"set": {"d" * 40_000: "1"}}),
                       ("/api/topics/target/config", {"set": {"retention.ms": "1"},
                                                      "unset": ["x"]}),
                       ("/api/topics/target/partitions", {"partitions": 3, "topic": "x"}),
                       ("/api/topics/..%2f..%2fetc/delete", {})):
        got, _, answer = console.post(path, body)
        assert got == 400 and "\n" not in answer["error"], (path, str(body)[:80], got, answer)
    assert _topics(console) == {"target"}
    with console.client() as c:
        assert len(c.metadata(["target"]).topics[0].partitions) == 2
        (described,) = c.describe_topic_configs(["target"])
    assert list(described.configs) == []  # nothing of the refused bodies was set
    assert "Traceback" not in console.log()


@pytest.mark.parametrize("query", [
    "offset=-1", "offset=abc", "limit=0", "limit=1e3", "offset=" + "9" * 40,
    "filter=" + "f" * 300, "offset=1&offset=2", "offset=%C2%B2", "limit=%D9%A3",
])
def test_bad_listing_parameters_are_400(shared, query):
    for path in ("/api/topics", "/api/groups"):
        got, _, answer = call(shared, "GET", f"{path}?{query}")
        assert got == 400 and answer["error"], (path, query, answer)


def test_names_out_of_bounds_are_refused(shared):
    got, _, _ = call(shared, "GET", "/api/group?group=" + "g" * 300)
    assert got == 400
    got, _, _ = call(shared, "GET", "/api/topics/" + "t" * 300)
    assert got == 400
    assert get(shared, "/api/topics")["total"] == 0


def test_markup_in_a_group_name_stays_text(console, tmp_path):
    """A group id is any string a client likes: the page shows it, never runs it."""
    from tests.console.browser import start_browser, stop_browser, table_rows, wait_for

    evil = '<img src=x onerror="document.title=\'owned\'">'
    with console.client() as c:
        c.create_topic("seen", 1)
        c.offset_commit(evil, [("seen", 0, 0, None)])
    profile = tmp_path / "profile"
    browser = start_browser(profile)
    try:
        from urllib.parse import quote

        from selenium.webdriver.common.by import By

        browser.get(console.origin + "/#/groups/" + quote(evil, safe=""))
        wait_for(lambda: table_rows(browser, "group-partitions"), "the group's partitions")
        assert browser.find_element(By.ID, "group-name").text == evil
        assert browser.find_elements(By.TAG_NAME, "img") == []
        assert browser.title != "owned"
    finally:
        stop_browser(browser, profile)
