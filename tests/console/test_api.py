"""The console's JSON API on a real broker: what it shows is what the broker answers,
and what it changes is changed (read back over the wire, not through the console).

The tests share one console broker (``console``, module-scoped): each uses topic and group
names of its own and waits, where it reads a page built from the console's cached METADATA
(at most ``METADATA_TTL_S`` old), until the console knows its topics. Two keep their own
broker (``own_console``): one asserts the whole list of topics (its total and its pages),
one the broker-wide rates series."""

from __future__ import annotations

import time
from urllib.parse import quote

import pytest

from tests.console.web import ConsoleBroker, call, get, produce, wait_listed
from tests.integration.wire_helpers import new_topic

SETTINGS = {"http.console.page.max": 7}


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    """One console broker for the tests that need nothing broker-wide of their own."""
    broker = ConsoleBroker(tmp_path_factory.mktemp("console"), **SETTINGS).start()
    yield broker
    broker.finish()


@pytest.fixture
def own_console(tmp_path):
    """A broker of the test's own: it asserts something broker-wide."""
    broker = ConsoleBroker(tmp_path, **SETTINGS).start()
    yield broker
    broker.finish()


def test_pages_are_served_with_a_strict_policy(console):
    for path, kind in (("/", "text/html"), ("/static/app.js", "text/javascript"),
                       ("/static/style.css", "text/css")):
        status, headers, body = call(console, "GET", path)
        assert status == 200 and headers["content-type"].startswith(kind), path
        assert headers["content-security-policy"] == "default-src 'self'"
        assert b"http://" not in body and b"https://" not in body  # nothing from elsewhere
    status, headers, _ = call(console, "GET", "/api/topics")
    assert headers["content-security-policy"] == "default-src 'self'"


def test_broker_page(console):
    b = get(console, "/api/broker")
    assert b["mode"] == "standalone" and b["state"] == "running" and b["admin"] is True
    assert b["broker_id"] == 0 and b["brokers"][0]["self"] is True
    assert b["page_max"] == 7  # http.console.page.max: the page's biggest page
    kinds = {p["kind"] for p in b["processes"]}
    assert {"writer", "handler", "processor"} <= kinds
    assert all(p["state"] == "ready" for p in b["processes"])
    assert [d["path"] for d in b["log_dirs"]] == [console.settings["log.dirs"]]


def test_create_then_list_and_describe(console):
    orders = new_topic("orders")
    with console.client() as c:
        before = len(c.metadata().topics)
    status, _, body = console.post("/api/topics", {"topic": orders, "partitions": 3,
                                                   "config": {"retention.bytes": 1 << 20}})
    assert status == 201, body
    with console.client() as c:  # the broker has it, as the CLI would see it
        partitions = c.metadata([orders]).topics[0].partitions
        assert sorted(p.partition for p in partitions) == [0, 1, 2]
    end = produce(console, orders, 1, [b"x" * 100] * 10)
    assert get(console, "/api/topics")["total"] == before + 1  # (the change read them again)
    listed = get(console, "/api/topics?filter=" + orders)
    assert listed["total"] == 1
    row = listed["topics"][0]
    assert (row["topic"], row["partitions"], row["replication"]) == (orders, 3, 1)
    assert row["size_bytes"] == end  # byte offsets: the log end less the (zero) start
    topic = get(console, f"/api/topics/{orders}")
    assert topic["total"] == 3
    one = next(p for p in topic["partitions"] if p["partition"] == 1)
    assert (one["log_start_offset"], one["log_end_offset"], one["size_bytes"]) == (0, end, end)
    assert one["error"] == "NONE"
    assert topic["config"] == {"retention.bytes": str(1 << 20)}


def test_topics_are_paged_and_filtered_by_the_broker(own_console):
    console = own_console
    with console.client() as c:
        for i in range(12):
            c.create_topic(f"{'a' if i % 2 else 'b'}-topic-{i:02d}", 1)
    first = get(console, "/api/topics?limit=1000")  # more than http.console.page.max: cut
    assert first["limit"] == 7 and len(first["topics"]) == 7 and first["total"] == 12
    second = get(console, "/api/topics?offset=7&limit=7")
    names = [t["topic"] for t in first["topics"] + second["topics"]]
    assert names == sorted(names) and len(set(names)) == 12
    filtered = get(console, "/api/topics?filter=A-TOPIC")  # by name, any case
    assert filtered["total"] == 6 and all(t["topic"].startswith("a-") for t in filtered["topics"])


def test_a_topics_partitions_are_paged(console):
    wide = new_topic("wide")
    with console.client() as c:
        c.create_topic(wide, 16)
    first = get(console, f"/api/topics/{wide}?limit=7")
    rest = get(console, f"/api/topics/{wide}?offset=7&limit=100")
    beyond = get(console, f"/api/topics/{wide}?offset=16")
    assert (first["total"], first["limit"], rest["limit"]) == (16, 7, 7)
    assert [p["partition"] for p in first["partitions"]] == list(range(7))
    assert [p["partition"] for p in rest["partitions"]] == list(range(7, 14))
    assert beyond["partitions"] == [] and beyond["total"] == 16


def test_a_topic_page_goes_to_a_partition(console):
    wide = new_topic("wide")
    with console.client() as c:
        c.create_topic(wide, 16)
    at = get(console, f"/api/topics/{wide}?partition=10&limit=3")
    assert (at["offset"], at["limit"], at["total"]) == (10, 3, 16)
    assert [p["partition"] for p in at["partitions"]] == [10, 11, 12]
    cut = get(console, f"/api/topics/{wide}?partition=12&limit=500")  # page.max is 7
    assert (cut["offset"], cut["limit"]) == (12, 7)
    assert [p["partition"] for p in cut["partitions"]] == [12, 13, 14, 15]
    past = get(console, f"/api/topics/{wide}?partition=40")
    assert (past["offset"], past["partitions"]) == (16, [])
    for bad in ("-1", "x", "1.5", "9" * 20):
        status, _, body = call(console, "GET", f"/api/topics/{wide}?partition={bad}")
        assert status == 400 and "partition" in body["error"], (bad, body)


def test_delete(console):
    going = new_topic("going")
    with console.client() as c:
        before = len(c.metadata().topics)
        c.create_topic(going, 1)
    status, _, body = console.post(f"/api/topics/{going}/delete", {})
    assert status == 200, body
    deadline = time.monotonic() + 10
    while get(console, "/api/topics?filter=" + going)["total"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert get(console, "/api/topics?filter=" + going)["total"] == 0
    assert get(console, "/api/topics")["total"] == before
    assert call(console, "GET", f"/api/topics/{going}")[0] == 404


def test_broker_refusals_come_back_named(console):
    there, refused, absent = new_topic("there"), new_topic("refused"), new_topic("absent")
    with console.client() as c:
        c.create_topic(there, 1)
    status, _, body = console.post("/api/topics", {"topic": there, "partitions": 1})
    assert status == 409 and "TOPIC_ALREADY_EXISTS" in body["error"]
    status, _, body = console.post("/api/topics", {"topic": refused, "partitions": 1,
                                                   "config": {"no.such.key": "1"}})
    assert status == 400 and "no.such.key" in body["error"], body
    status, _, body = console.post(f"/api/topics/{absent}/delete", {})
    assert status == 404, body


def test_group_lag(console):
    events, readers, nobody = new_topic("events"), new_topic("readers"), new_topic("nobody")
    with console.client() as c:
        c.create_topic(events, 2)
        ends = [produce(console, events, p, [b"e" * 50] * (p + 3)) for p in (0, 1)]
        committed = ends[0] // 3
        c.offset_commit(readers, [(events, 0, committed, None)])
    wait_listed(console, events)
    # a group with committed offsets only is listed
    assert {"group": readers, "members": False} in \
        get(console, "/api/groups?filter=" + readers)["groups"]
    g = get(console, "/api/group?group=" + readers)
    assert g["members"] == [] and g["total"] == 1
    row = g["partitions"][0]
    assert (row["topic"], row["partition"], row["committed"], row["high_watermark"],
            row["lag"]) == \
        (events, 0, committed, ends[0], ends[0] - committed)
    assert g["total_lag"] == ends[0] - committed
    assert call(console, "GET", "/api/group?group=" + nobody)[0] == 404


def _offset_fetches(console) -> float:
    """OFFSET_FETCH answers the broker has counted, read from its shared memory
    (not through /metrics, whose group lag refresh sends OFFSET_FETCHes)."""
    from hostbroker.metrics.collectors import ApiCollector
    from tests.metrics.scrape import Parsed, collected, context_of

    context = context_of(console)
    try:
        found = Parsed(collected(ApiCollector(context))).series(
            "hostbroker_requests_total", api="offset_fetch")
    finally:
        context.close()
    return found[0].value if found else 0.0


def test_an_unknown_group_is_404_without_reading_any_offset(console):
    wide, someone, nobody = new_topic("wide"), new_topic("someone"), new_topic("nobody")
    with console.client() as c:
        c.create_topic(wide, 50)
        c.offset_commit(someone, [(wide, 7, 0, None)])
    wait_listed(console, wide)
    # (a count read now, relative: the module's broker has answered others' OFFSET_FETCHes)
    before = _offset_fetches(console)
    status, _, body = call(console, "GET", "/api/group?group=" + nobody)
    assert status == 404 and f"no group {nobody}" in body["error"], body
    time.sleep(0.5)  # (a processor counts an answer as it hands it over)
    assert _offset_fetches(console) == before
    # a group that exists is read with OFFSET_FETCH: the count can move
    assert get(console, "/api/group?group=" + someone)["total"] == 1
    assert wait_until(lambda: _offset_fetches(console) > before)


def wait_until(check, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_group_rows_sorted_by_lag_and_of_one_topic(console):
    names = new_topic("sorter")  # left sorts before right, as the plain names did
    left, right, sorter, absent = (f"{names}-{n}" for n in ("left", "right", "group", "absent"))
    with console.client() as c:
        c.create_topic(left, 3)
        c.create_topic(right, 2)
        ends = {(left, p): produce(console, left, p, [b"l" * 40] * (p + 2)) for p in range(3)}
        ends.update({(right, p): produce(console, right, p, [b"r" * 90] * 3)
                     for p in range(2)})
        committed = {(left, 0): 0, (left, 1): ends[(left, 1)], (left, 2): 10,
                     (right, 1): 5}
        c.offset_commit(sorter, [(t, p, o, None) for (t, p), o in committed.items()])
    wait_listed(console, left, right)
    lags = {k: ends[k] - o for k, o in committed.items()}
    by_name = get(console, f"/api/group?group={sorter}")
    assert [(r["topic"], r["partition"]) for r in by_name["partitions"]] == sorted(committed)
    by_lag = get(console, f"/api/group?group={sorter}&sort=lag")
    assert [r["lag"] for r in by_lag["partitions"]] == sorted(lags.values(), reverse=True)
    assert by_lag["partitions"][0]["topic"] == right  # the most behind
    first = get(console, f"/api/group?group={sorter}&sort=lag&limit=2&offset=1")["partitions"]
    assert [r["lag"] for r in first] == sorted(lags.values(), reverse=True)[1:3]
    one = get(console, f"/api/group?group={sorter}&topic={left}&sort=lag")
    assert {r["topic"] for r in one["partitions"]} == {left} and one["total"] == 3
    assert one["total_lag"] == sum(v for k, v in lags.items() if k[0] == left)
    assert get(console, f"/api/group?group={sorter}&topic={absent}")["total"] == 0
    for query, word in (("sort=size", "sort"), ("topic=a/b", "")):
        status, _, body = call(console, "GET", f"/api/group?group={sorter}&{query}")
        assert status == 400 and word in body["error"], (query, body)


def test_group_with_members_shows_them(console):
    from hostbroker.client.coordinator_requests import CoordinatorClient

    stream, live = new_topic("stream"), new_topic("live")
    with console.client() as c:
        c.create_topic(stream, 2)
    wait_listed(console, stream)
    member = CoordinatorClient([console.unix], timeout=10, client_id="reader-1")
    try:
        joined = member.join_group(live, "", {stream: 1}, session_timeout_ms=30000,
                                   rebalance_timeout_ms=5000)
        member.sync_group(live, joined.generation, joined.member_id)
        listed = get(console, "/api/groups?filter=" + live)
        assert {"group": live, "members": True} in listed["groups"]
        g = get(console, "/api/group?group=" + live)
        assert [m["client_id"] for m in g["members"]] == ["reader-1"]
        owned = sorted(p for a in g["members"][0]["assignment"] for p in a["partitions"])
        assert owned == [0, 1]
        assert {r["partition"] for r in g["partitions"] if r["owner"]} == {0, 1}
    finally:
        member.close()


ODD_GROUP_IDS = ("team/orders", "..", ".", "back\\slash", "tab\there", "bell\x07", "%2F", "ü/..")


def test_a_group_of_any_id_opens(console):
    """A group id is any 1 to 255 bytes: ids a path segment could not hold open too.
    (No other test of the module uses these ids: they stay as they are, being the point.)"""
    odd = new_topic("odd")
    with console.client() as c:
        c.create_topic(odd, 1)
        end = produce(console, odd, 0, [b"o" * 20] * 4)
        for n, group in enumerate(ODD_GROUP_IDS):
            c.offset_commit(group, [(odd, 0, n, None)])
    wait_listed(console, odd)
    total = get(console, "/api/groups")["total"]  # the module's other tests' groups too
    assert total >= len(ODD_GROUP_IDS)
    listed = {g["group"] for at in range(0, total, 7)  # pages of http.console.page.max (7)
              for g in get(console, f"/api/groups?offset={at}")["groups"]}
    assert set(ODD_GROUP_IDS) <= listed
    for n, group in enumerate(ODD_GROUP_IDS):
        g = get(console, "/api/group?group=" + quote(group, safe=""))
        assert g["group"] == group
        assert [(r["topic"], r["committed"], r["lag"]) for r in g["partitions"]] == \
            [(odd, n, end - n)]
    for query in ("", "group=", "group=" + "g" * 256, "group=%ED%A0%80"):
        status, _, body = call(console, "GET", "/api/group?" + query)
        assert status == 400 and body["error"], (query, body)
    # the old shape of the route is gone: one route per request kind
    assert call(console, "GET", "/api/groups/team")[0] == 404


def test_rates_follow_produce(own_console):
    console = own_console
    with console.client() as c:
        c.create_topic("busy", 1)
    get(console, "/api/rates")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        produce(console, "busy", 0, [b"r" * 200] * 50)
        time.sleep(1.1)
        series = get(console, "/api/rates")["series"]
        if series["messages_in"] and series["messages_in"][-1][1] > 0:
            break
    assert series["messages_in"][-1][1] > 0 and series["bytes_in"][-1][1] > 0
    assert all(len(points) <= 120 for points in series.values())


def _busy_row(console, busy: str) -> dict:
    (row,) = get(console, "/api/topics?filter=" + busy)["topics"]
    return row


def test_topic_rates_from_the_partition_stats(console):
    names = new_topic("rates")
    busy, idle = f"{names}-busy", f"{names}-idle"
    with console.client() as c:
        c.create_topic(busy, 2)
        c.create_topic(idle, 1)
    wait_listed(console, busy, idle)  # the first read: no rate yet
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        produce(console, busy, 1, [b"p" * 100] * 40)
        with console.client() as c:
            c.fetch(busy, 1, 0, 1 << 20)
        time.sleep(1.1)
        row = _busy_row(console, busy)
        if row["messages_in_per_s"] and row["bytes_out_per_s"]:
            break
    assert row["messages_in_per_s"] > 0 and row["bytes_in_per_s"] > 0
    assert row["bytes_out_per_s"] > 0
    detail = get(console, f"/api/topics/{busy}")
    rates = {p["partition"]: p["messages_in_per_s"] for p in detail["partitions"]}
    assert rates[1] > 0 and rates[0] in (0, None)
    (idle_row,) = get(console, "/api/topics?filter=" + idle)["topics"]
    assert idle_row["messages_in_per_s"] in (0, None)


def test_add_partitions_and_change_config(console):
    growing, nowhere = new_topic("growing"), new_topic("nowhere")
    with console.client() as c:
        c.create_topic(growing, 2)
    status, _, body = console.post(f"/api/topics/{growing}/partitions", {"partitions": 5})
    assert status == 200, body
    with console.client() as c:
        assert len(c.metadata([growing]).topics[0].partitions) == 5
    status, _, body = console.post(f"/api/topics/{growing}/partitions", {"partitions": 3})
    assert status == 400, body  # partitions only grow
    status, _, body = console.post(f"/api/topics/{growing}/config",
                                   {"set": {"retention.ms": "3600000"}})
    assert status == 200, body
    assert get(console, f"/api/topics/{growing}")["config"] == {"retention.ms": "3600000"}
    status, _, body = console.post(f"/api/topics/{growing}/config",
                                   {"set": {"retention.bytes": 4096}, "delete": ["retention.ms"]})
    assert status == 200, body
    assert get(console, f"/api/topics/{growing}")["config"] == {"retention.bytes": "4096"}
    status, _, body = console.post(f"/api/topics/{growing}/config",
                                   {"set": {"retention.ms": "soon"}})
    assert status == 400 and "retention.ms" in body["error"], body
    status, _, body = console.post(f"/api/topics/{nowhere}/partitions", {"partitions": 3})
    assert status == 404, body
