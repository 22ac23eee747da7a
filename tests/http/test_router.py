"""The route table: one route per path, whole-path matching, and what is
answered for a path no route takes (in memory: the Router has no I/O)."""

from __future__ import annotations

import json

import pytest

from hostbroker.web.router import (HttpError, Request, Router, document, error_response,
                                            json_response, split_path, text_response)


def request(method: str, path: str, **headers) -> Request:
    return Request(method, path, {}, {k.replace("_", "-"): v for k, v in headers.items()},
                   b"", "127.0.0.1:1")


def body(response) -> dict:
    return json.loads(response.body)


@pytest.fixture
def router() -> Router:
    r = Router(gate=lambda req: error_response(403, "gated"))
    r.add("GET", "/", lambda req: text_response("home"))
    r.add("GET", "/api/topics", lambda req: json_response({"list": True}))
    r.add("GET", "/api/topics/{topic}", lambda req: json_response(req.params))
    r.add("POST", "/api/topics", lambda req: json_response({"made": True}), admin=True)
    r.add("GET", "/static/*", lambda req: json_response(req.params))
    return r


def test_routes_match_whole_paths_and_give_their_parameters(router):
    assert router.dispatch(request("GET", "/")).body == b"home"
    assert body(router.dispatch(request("GET", "/api/topics"))) == {"list": True}
    assert body(router.dispatch(request("GET", "/api/topics/orders.v2"))) == {"topic": "orders.v2"}
    assert body(router.dispatch(request("GET", "/api/topics/a%20b"))) == {"topic": "a b"}
    assert body(router.dispatch(request("GET", "/static/app.js"))) == {"*": "app.js"}
    # no prefix match: a longer path is not the shorter route's
    assert router.dispatch(request("GET", "/api/topics/t/extra")).status == 404
    assert router.dispatch(request("GET", "/api")).status == 404


def test_head_is_answered_as_get(router):
    assert router.dispatch(request("HEAD", "/")).body == b"home"


@pytest.mark.parametrize("path", [
    "/static/../etc/passwd", "/../etc/passwd", "/static/%2e%2e/etc/passwd",
    "/static/%2E%2E/%2E%2E/etc/passwd", "/static/./app.js", "//etc/passwd", "/api/topics/",
    "/static/a%2fb", "/static/a%5cb", "/static/a%00b", "/static/%ff", "/static/a%0ab",
])
def test_a_path_that_could_climb_or_smuggle_is_refused_before_routing(router, path):
    response = router.dispatch(request("GET", path))
    assert response.status == 400, (path, response)
    assert "\n" not in body(response)["error"]


def test_unknown_paths_methods_and_wrong_methods(router):
    missing = router.dispatch(request("GET", "/nope"))
    assert missing.status == 404 and body(missing) == {"error": "no such page"}
    wrong = router.dispatch(request("POST", "/"))
    assert wrong.status == 405 and wrong.headers["Allow"] == "GET, HEAD"
    assert router.dispatch(request("GET", "/api/topics")).status == 200
    unknown = router.dispatch(request("DELETE", "/nowhere"))
    assert unknown.status == 501


def test_admin_routes_pass_the_gate_first(router):
    assert router.dispatch(request("POST", "/api/topics")).status == 403
    open_router = Router(gate=lambda req: None)
    open_router.add("POST", "/x", lambda req: json_response({"ok": 1}), admin=True)
    assert open_router.dispatch(request("POST", "/x")).status == 200


def test_one_route_per_path(router):
    with pytest.raises(ValueError, match="already routed"):
        router.add("GET", "/api/topics/{name}", lambda req: None)
    with pytest.raises(ValueError, match="already routed"):
        router.add("GET", "/", lambda req: None)
    with pytest.raises(ValueError):
        router.add("PUT", "/x", lambda req: None)
    with pytest.raises(ValueError):
        router.add("GET", "/a//b", lambda req: None)
    with pytest.raises(ValueError, match="gate"):
        Router().add("POST", "/x", lambda req: None, admin=True)


def test_a_literal_route_wins_over_a_pattern():
    r = Router()
    r.add("GET", "/api/topics/{topic}", lambda req: text_response("pattern"))
    r.add("GET", "/api/topics/new", lambda req: text_response("literal"))
    assert r.dispatch(request("GET", "/api/topics/new")).body == b"literal"
    assert r.dispatch(request("GET", "/api/topics/old")).body == b"pattern"


def test_a_failing_page_answers_500_in_one_line_and_is_reported():
    seen = []
    r = Router()
    r.on_error = lambda req, e: seen.append((req.path, type(e)))

    def broken(req):
        raise RuntimeError("secret\ndetail")

    def refusing(req):
        raise HttpError(409, "the topic exists")

    r.add("GET", "/broken", broken)
    r.add("GET", "/refusing", refusing)
    response = r.dispatch(request("GET", "/broken"))
    assert response.status == 500 and "secret" not in response.body.decode()
    assert seen == [("/broken", RuntimeError)]
    refused = r.dispatch(request("GET", "/refusing"))
    assert refused.status == 409 and body(refused) == {"error": "the topic exists"}


def test_split_path():
    assert split_path("/") == ()
    assert split_path("/a/b%20c") == ("a", "b c")
    with pytest.raises(ValueError):
        split_path("a")


def test_request_json_refuses_what_is_not_json():
    good = Request("POST", "/", {}, {}, b'{"a": 1}', "p")
    assert good.json() == {"a": 1}
    with pytest.raises(HttpError) as e:
        Request("POST", "/", {}, {}, b"\xff{", "p").json()
    assert e.value.status == 400


@pytest.mark.parametrize("body, words", [
    (b"[" * 100000 + b"]" * 100000, "not JSON"),  # too deep to decode: 400, not a 500
    (b'[1, 2]', "must be a JSON object"),
    (b'"text"', "must be a JSON object"),
    (b'{"a": ', "not JSON"),
])
def test_one_body_parser_refuses_with_400_what_is_not_an_object(body, words):
    with pytest.raises(HttpError) as e:
        document(Request("POST", "/", {}, {}, body, "p"))
    assert e.value.status == 400 and words in e.value.message
    assert document(Request("POST", "/", {}, {}, b" \r\n", "p")) == {}


def test_the_console_s_changes_parse_bodies_with_the_router_s_parser():
    from hostbroker.console import changes

    assert changes.document is document
