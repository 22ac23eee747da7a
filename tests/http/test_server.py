"""The HTTP/1.1 connection machine in memory (it has no sockets): requests whole,
a byte at a time and with bytes after them; pipelining and keep-alive; each
bound and timeout with a driven clock; and a fuzz that holds its invariant:
whatever arrives, it answers, waits for more, or closes; it never raises."""

from __future__ import annotations

import json
import random

import pytest

from hostbroker.web.router import Response, Router, json_response, text_response
from hostbroker.web.server import CONTINUE, HttpConnection, Limits

LIMITS = Limits(request_max_bytes=2048, request_timeout=10.0, idle_timeout=60.0,
                response_max_bytes=4096, allowed_hosts=frozenset({"h"}))


def make_router() -> Router:
    r = Router()
    r.add("GET", "/echo", lambda req: json_response({"query": req.query, "peer": req.peer,
                                                     "host": req.headers.get("host")}))
    r.add("POST", "/echo", lambda req: json_response({"body": req.body.decode()}))
    r.add("GET", "/big", lambda req: text_response("x" * 5000))
    r.add("GET", "/custom", lambda req: text_response(
        "c", headers={"X-Frame-Options": "SAMEORIGIN", "Content-Length": "999"}))
    r.add("GET", "/badheader", lambda req: text_response("c", headers={"X-Bad": "a\r\nb: c"}))
    return r


def connection(limits: Limits = LIMITS) -> HttpConnection:
    return HttpConnection(make_router(), limits, "127.0.0.1:5000", now=0.0)


def drain(conn: HttpConnection, now: float = 0.0) -> bytes:
    """What is owed, written; then the next request answered, as the worker's
    next round does."""
    out = written(conn, now)
    conn.advance(now)
    return out


def written(conn: HttpConnection, now: float = 0.0) -> bytes:
    """Everything owed, written as the worker does (one piece at a time)."""
    out = b""
    while conn.output:
        piece = bytes(conn.output)
        out += piece
        conn.sent(len(piece), now)
    return out


def answers(raw: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """Split a stream of answers (each framed by Content-Length)."""
    out = []
    while raw:
        head, _, rest = raw.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(": ")
            headers[name.lower()] = value
        length = int(headers.get("content-length", 0))
        out.append((status, headers, rest[:length]))
        raw = rest[length:]
    return out


GET = b"GET /echo?a=1 HTTP/1.1\r\nHost: h:1\r\n\r\n"
POST = b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello"


@pytest.mark.parametrize("how", ["whole", "byte by byte"])
def test_a_request_whole_or_a_byte_at_a_time(how):
    conn = connection()
    for raw in (GET, POST):
        if how == "whole":
            conn.received(raw, 0.0)
        else:
            for i in range(len(raw)):
                assert not conn.output
                conn.received(raw[i:i + 1], 0.0)
        [(status, headers, body)] = answers(drain(conn))
        assert status == 200
        assert headers["content-security-policy"] == "default-src 'self'"
        assert headers["cache-control"] == "no-store"
        assert "connection" not in headers  # kept alive
    assert not conn.done and conn.wants_read


def test_pipelined_requests_are_answered_in_order_one_at_a_time():
    conn = connection()
    conn.received(GET + POST + GET.replace(b"a=1", b"a=2"), 0.0)
    first = answers(drain(conn))
    assert [json.loads(b) for _, _, b in first] == [
        {"query": {"a": "1"}, "peer": "127.0.0.1:5000", "host": "h:1"}]
    # the next is answered only once the first is written
    assert json.loads(answers(drain(conn))[0][2]) == {"body": "hello"}
    assert json.loads(answers(drain(conn))[0][2])["query"] == {"a": "2"}
    assert not conn.output


def test_a_written_answer_does_not_answer_the_next_request_until_advanced():
    conn = connection()
    conn.received(GET + GET, 0.0)
    written(conn)
    assert not conn.output and conn.ready  # the worker's next round answers it
    conn.advance(0.0)
    assert answers(written(conn))[0][0] == 200 and not conn.ready
    assert not conn.ready and conn.wants_read


def test_a_part_of_a_request_after_an_answer_is_not_ready_until_whole():
    conn = connection()
    conn.received(GET + b"GET /ec", 0.0)
    written(conn)
    assert conn.ready  # it may be whole: the worker's next round looks
    conn.advance(0.0)
    assert not conn.output and not conn.ready  # a part: no round until more comes
    conn.received(b"ho HTTP/1.1\r\nHost: h\r\n\r\n", 1.0)
    assert answers(written(conn))[0][0] == 200


def test_nothing_more_is_read_while_an_answer_is_owed():
    conn = connection()
    conn.received(GET + GET, 0.0)
    assert conn.output and not conn.wants_read
    conn.sent(10, 0.0)
    assert not conn.wants_read
    drain(conn)
    drain(conn)
    assert conn.wants_read


def test_http_1_0_and_connection_close_end_the_connection_after_the_answer():
    for raw in (b"GET /echo HTTP/1.0\r\nHost: h\r\n\r\n",
                b"GET /echo HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"):
        conn = connection()
        conn.received(raw + GET, 0.0)  # what follows is never answered
        [(status, headers, _)] = answers(drain(conn))
        assert status == 200 and headers["connection"] == "close"
        assert conn.done


def test_head_has_the_headers_of_get_and_no_body():
    conn = connection()
    conn.received(b"HEAD /echo HTTP/1.1\r\nHost: h\r\n\r\n", 0.0)
    raw = drain(conn)
    assert raw.endswith(b"\r\n\r\n") and b"Content-Length: " in raw
    assert int(raw.split(b"Content-Length: ")[1].split(b"\r\n")[0]) > 0


def test_expect_100_continue_is_answered_before_the_body():
    conn = connection()
    conn.received(b"POST /echo HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\n"
                  b"Content-Length: 2\r\n\r\n", 0.0)
    assert drain(conn) == CONTINUE
    conn.received(b"ok", 0.0)
    assert json.loads(answers(drain(conn))[0][2]) == {"body": "ok"}


def test_leading_empty_lines_are_skipped():
    conn = connection()
    conn.received(b"\r\n\r\n" + GET, 0.0)
    assert answers(drain(conn))[0][0] == 200


@pytest.mark.parametrize("raw, status", [
    (b"GET /echo\r\n\r\n", 400),
    (b"GET  /echo HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    (b"GET /echo HTTP/2.0\r\nHost: h\r\n\r\n", 505),
    (b"GET /echo HTTP/1.1 extra\r\nHost: h\r\n\r\n", 400),
    (b"GET /echo FTP/1.1\r\nHost: h\r\n\r\n", 400),
    (b"G(T /echo HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    (b"GET http://evil/ HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    (b"GET * HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    (b"GET /echo#frag HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    (b"GET /echo HTTP/1.1\r\n\r\n", 400),  # no Host
    (b"GET /\xc3\xa9 HTTP/1.1\r\nHost: h\r\n\r\n", 400),  # non-ASCII path
    (b"GET /echo HTTP/1.1\r\nHost: h\r\nX-Name: caf\xc3\xa9\r\n\r\n", 400),
    (b"GET /echo HTTP/1.1\r\nHost: h\r\n folded\r\n\r\n", 400),
    (b"GET /echo HTTP/1.1\r\nHost : h\r\n\r\n", 400),
    (b"GET /echo HTTP/1.1\r\nHost: h\r\nNoColon\r\n\r\n", 400),
    (b"GET /echo HTTP/1.1\r\nHost: h\r\nHost: i\r\n\r\n", 400),
    (b"GET /echo HTTP/1.1\r\nHost: h\r\nX: a\x00b\r\n\r\n", 400),
    (b"GET /echo HTTP/1.1\r\nHost: h\r\nX: a\rb\r\n\r\n", 400),
    (b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", 400),
    (b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n", 400),
    (b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 0x10\r\n\r\n", 400),
    (b"POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501),
    (b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked"
     b"\r\n\r\nabc", 501),
    (b"POST /echo HTTP/1.1\r\nHost: h\r\nExpect: tea\r\nContent-Length: 1\r\n\r\nx", 417),
    (b"GET /echo?a=1&a=2 HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    (b"GET /echo?a=%ff HTTP/1.1\r\nHost: h\r\n\r\n", 400),
])
def test_a_bad_request_is_answered_in_one_line_and_the_connection_closed(raw, status):
    conn = connection()
    conn.received(raw + GET, 0.0)  # nothing after a bad request is trusted
    out = drain(conn)
    got = answers(out)
    assert len(got) == 1, out
    assert got[0][0] == status, out
    error = json.loads(got[0][2])["error"]
    assert error and "\n" not in error
    assert got[0][1]["connection"] == "close" and conn.done


def test_a_bad_path_is_refused_but_the_connection_may_go_on():
    conn = connection()
    conn.received(b"GET /static/../../etc/passwd HTTP/1.1\r\nHost: h\r\n\r\n", 0.0)
    assert answers(drain(conn))[0][0] == 400
    conn.received(GET, 0.0)
    assert answers(drain(conn))[0][0] == 200


def test_headers_past_the_bound_are_431_without_waiting_for_their_end():
    conn = connection()
    conn.received(b"GET /echo HTTP/1.1\r\nHost: h\r\nX: " + b"a" * 3000, 0.0)
    [(status, headers, _)] = answers(drain(conn))
    assert status == 431 and headers["connection"] == "close" and conn.done


def test_a_head_refused_after_its_head_is_answered_without_a_body():
    conn = connection()
    conn.received(b"HEAD /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 999999999999\r\n\r\n",
                  0.0)
    raw = drain(conn)
    assert raw.startswith(b"HTTP/1.1 413 ") and raw.endswith(b"\r\n\r\n") and conn.done


def test_a_body_past_the_bound_is_413_before_it_is_read():
    conn = connection()
    conn.received(b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 999999999999\r\n\r\n",
                  0.0)
    [(status, _, body)] = answers(drain(conn))
    assert status == 413 and b"http.request.max.bytes" in body and conn.done


def test_the_input_held_never_passes_the_request_bound():
    conn = connection()
    while conn.wants_read:
        conn.received(b"GET /echo HTTP/1.1\r\nHost: h\r\nX: " + b"a" * 100, 0.0)
    assert conn.closing and len(conn._in) == 0


def test_an_answer_past_its_bound_becomes_a_500_naming_it():
    conn = connection()
    conn.received(b"GET /big HTTP/1.1\r\nHost: h\r\n\r\n", 0.0)
    [(status, _, body)] = answers(drain(conn))
    assert status == 500 and b"http.response.max.bytes" in body


def test_a_page_may_set_headers_but_never_the_framing_or_a_broken_one():
    conn = connection()
    conn.received(b"GET /custom HTTP/1.1\r\nHost: h\r\n\r\n", 0.0)
    [(status, headers, body)] = answers(drain(conn))
    assert status == 200 and headers["x-frame-options"] == "SAMEORIGIN"
    assert headers["content-length"] == "1" and body == b"c"
    conn.received(b"GET /badheader HTTP/1.1\r\nHost: h\r\n\r\n", 0.0)
    out = drain(conn)
    assert answers(out)[0][0] == 500 and b"X-Bad" not in out.split(b"\r\n\r\n")[0]


def test_a_request_must_be_whole_within_the_request_timeout():
    conn = connection()
    conn.received(b"GET /echo HTTP/1.1\r\n", 0.0)
    for t in (1.0, 5.0, 9.9):  # a byte now and then does not extend it
        conn.received(b"X", t)
        assert not conn.expired(t) and not conn.output
    assert not conn.expired(10.0)  # answers 408 and closes after it
    [(status, headers, _)] = answers(drain(conn, 10.0))
    assert status == 408 and headers["connection"] == "close" and conn.done


def test_the_request_timeout_counts_from_each_request_s_first_byte():
    conn = connection()
    conn.received(GET, 0.0)
    drain(conn, 0.0)
    conn.received(b"GET /ec", 50.0)
    assert not conn.expired(59.0)
    assert not conn.expired(60.0) and answers(drain(conn, 60.0))[0][0] == 408


def test_an_idle_connection_and_an_unread_answer_expire():
    conn = connection()
    conn.received(GET, 0.0)
    drain(conn, 0.0)
    assert not conn.expired(59.0)
    assert conn.expired(60.0)
    unread = connection()
    unread.received(GET, 0.0)
    unread.sent(5, 30.0)  # a little was taken, then nothing
    assert not unread.expired(89.0)
    assert unread.expired(90.0)


def test_empty_lines_between_requests_are_no_progress():
    conn = connection()
    conn.received(GET, 0.0)
    drain(conn, 0.0)
    t = 0.0
    for _ in range(100):  # a CRLF every 59 s does not keep the connection
        t += 59.0
        if conn.expired(t):
            break
        conn.received(b"\r\n", t)
    assert t == 118.0 and conn.expired(t)  # closed a minute after the last answer
    # a CR and an LF apart are no progress either; a request after them is served
    late = connection()
    late.received(b"\r", 30.0)
    late.received(b"\n\r\n", 50.0)
    assert late.expired(60.0)
    fresh = connection()
    fresh.received(b"\r\n", 30.0)
    fresh.received(b"\r\n" + GET, 40.0)
    assert answers(drain(fresh, 40.0))[0][0] == 200
    assert not fresh.expired(99.0) and fresh.expired(100.0)


def test_an_http_1_0_request_gets_no_100_continue():
    conn = connection()
    conn.received(b"POST /echo HTTP/1.0\r\nHost: h\r\nExpect: 100-continue\r\n"
                  b"Content-Length: 2\r\n\r\n", 0.0)
    assert bytes(conn.output) == b""  # it waits for the body, no interim answer
    conn.received(b"ok", 0.0)
    [(status, _, body)] = answers(drain(conn))
    assert status == 200 and json.loads(body) == {"body": "ok"}


def test_end_of_input_answers_what_is_whole_then_closes():
    conn = connection()
    conn.received(GET + b"GET /ec", 0.0)
    conn.received(b"", 0.0)
    assert answers(drain(conn))[0][0] == 200
    assert conn.done


def test_fuzz_never_raises_and_never_holds_more_than_its_bounds():
    rng = random.Random(37)
    pieces = [GET, POST, b"\r\n", b"GET ", b"/echo", b" HTTP/1.1", b"Host: h", b"\r\n\r\n",
              b"Content-Length: 3\r\n", b"Expect: 100-continue\r\n", b"\x00", b"\xff",
              b"Transfer-Encoding: chunked\r\n", b"%2e%2e/", b"?a=1&a=1", b" ", b":"]
    for _ in range(400):
        conn = connection()
        now = 0.0
        for _ in range(rng.randrange(1, 30)):
            if conn.done:
                break
            if conn.wants_read:
                data = b"".join(rng.choice(pieces) for _ in range(rng.randrange(1, 6)))
                if rng.random() < 0.2:
                    data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
                conn.received(data, now)
            elif conn.output:
                conn.sent(rng.randrange(1, len(conn.output) + 1), now)
            now += rng.random() * 3
            conn.expired(now)
            assert len(conn._in) <= LIMITS.request_max_bytes + 64 * 5 * 40
            assert len(conn._out) <= LIMITS.response_max_bytes + 4096


def test_a_request_while_overloaded_is_503_without_running_its_page():
    calls = []
    router = Router()
    router.add("GET", "/echo", lambda req: calls.append(req) or json_response({}))
    reason = ["hb-http holds more than http.output.max.bytes"]
    conn = HttpConnection(router, LIMITS, "127.0.0.1:5000", 0.0,
                          overloaded=lambda: reason[0])
    conn.received(GET, 0.0)
    [(status, headers, body)] = answers(drain(conn))
    assert status == 503 and headers["retry-after"] == "1" and not calls
    assert "http.output.max.bytes" in json.loads(body)["error"]
    assert not conn.closing  # the connection goes on
    reason[0] = None
    conn.received(GET, 0.0)
    assert answers(drain(conn))[0][0] == 200 and len(calls) == 1


def test_an_answer_s_body_is_owed_as_the_page_s_own_object():
    body = b"x" * 3000
    router = Router()
    router.add("GET", "/echo", lambda req: Response(200, "text/plain", body))
    conn = HttpConnection(router, LIMITS, "127.0.0.1:5000", 0.0)
    conn.received(GET, 0.0)
    assert any(obj is body for obj in conn.owed_objects())  # not a copy
    owed = conn.owed
    assert owed == len(written(conn)) > len(body) and conn.owed == 0

