"""The console in a real headless chromium against a real broker: create a topic,
add partitions, change its config and delete it; read a group's lag, a live
group's members and owners (markup a client sent shown as text); the broker
view, the live charts, a topic page's go-to and page size, a malformed link;
and the admin gate refusing a change without the token. What the page did is
read back from the broker over the wire.

One broker serves the module (``console``): each test uses its own topic and
group names and reads only those; the charts test keeps its own
(``own_console``) since the rate series it starts from empty is broker-wide.
A test that makes topics over the wire waits until the console's METADATA
(kept 2 s, maybe read by an earlier test's page) names them.
One chromium serves the module (its start is the dearest part of a test):
each test has a fresh tab, and the tab's storage and cookies and the browser's
log are cleared before the next test."""

from __future__ import annotations

import time
from urllib.parse import quote

import pytest

from tests.console.browser import message, start_browser, stop_browser, table_rows, wait_for
from tests.console.web import ConsoleBroker, get, produce, wait_listed

EVIL = '<img src=x onerror="document.title=\'owned\'">'


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    """Shared: its tests change only their own topics and groups and read only those."""
    broker = ConsoleBroker(tmp_path_factory.mktemp("broker")).start()
    yield broker
    broker.finish()


@pytest.fixture
def own_console(tmp_path):
    """A broker of the test's own: its broker-wide rate series starts empty."""
    root = tmp_path / "broker"
    root.mkdir()
    broker = ConsoleBroker(root).start()
    yield broker
    broker.finish()


class _Chromium:
    """The module's one chromium; started again when a tab could not be cleaned."""

    def __init__(self, profile):
        self.profile = profile
        self.driver = start_browser(profile)

    def restart(self) -> None:
        stop_browser(self.driver, self.profile)
        self.driver = start_browser(self.profile)


@pytest.fixture(scope="module")
def chromium(tmp_path_factory):
    """Shared: each test runs in a fresh tab of it (``browser``)."""
    shared = _Chromium(tmp_path_factory.mktemp("profile"))
    yield shared
    stop_browser(shared.driver, shared.profile)


def _forget(driver, first: str) -> None:
    """Close the test's tab and clear what its pages kept: local storage, cookies
    (the session storage goes with the tab); back to the first, blank tab."""
    from selenium.common.exceptions import NoAlertPresentException

    try:
        driver.switch_to.alert.dismiss()
    except NoAlertPresentException:
        pass
    origin = driver.execute_script("return location.origin")
    if origin and origin.startswith("http"):
        driver.execute_cdp_cmd("Storage.clearDataForOrigin",
                               {"origin": origin, "storageTypes": "all"})
    driver.execute_cdp_cmd("Network.clearBrowserCookies", {})
    driver.close()
    driver.switch_to.window(first)


@pytest.fixture
def browser(chromium):
    """A fresh tab of the module's chromium, with nothing in the browser's log."""
    driver = chromium.driver
    first = driver.current_window_handle
    driver.get_log("browser")  # drained: an earlier test's pages logged it
    driver.switch_to.new_window("tab")
    yield driver
    try:
        _forget(driver, first)
    except Exception:  # noqa: BLE001 - a tab not cleaned: a new browser, nothing kept
        chromium.restart()


def _by():
    from selenium.webdriver.common.by import By

    return By


def _give_token(browser, token: str) -> None:
    By = _by()
    wait_for(lambda: browser.find_element(By.ID, "token-input").is_displayed(),
             "the admin token field")
    browser.find_element(By.ID, "token-input").send_keys(token)
    browser.find_element(By.CSS_SELECTOR, "#token-form button").click()
    wait_for(lambda: browser.find_element(By.ID, "token-state").text == "admin",
             "the token taken")


def _create(browser, name: str, partitions: int) -> None:
    By = _by()
    field = browser.find_element(By.ID, "create-name")
    field.clear()
    field.send_keys(name)
    count = browser.find_element(By.ID, "create-partitions")
    count.clear()
    count.send_keys(str(partitions))
    browser.find_element(By.ID, "create-submit").click()


def test_create_topic_and_add_partitions(console, browser):
    By = _by()
    browser.get(console.origin + "/#/topics")
    _give_token(browser, console.token)
    _create(browser, "made-in-browser", 2)
    wait_for(lambda: "created topic made-in-browser" in message(browser), "the created message")
    row = wait_for(lambda: [r for r in table_rows(browser, "topics")
                            if r and r[0] == "made-in-browser"], "the new topic's row")[0]
    assert row[1] == "2"
    with console.client() as c:
        assert len(c.metadata(["made-in-browser"]).topics[0].partitions) == 2
    browser.find_element(By.LINK_TEXT, "made-in-browser").click()
    wait_for(lambda: len(table_rows(browser, "partitions")) == 2, "the topic's two partitions")
    field = browser.find_element(By.ID, "add-partitions")
    field.clear()
    field.send_keys("4")
    browser.find_element(By.ID, "add-partitions-submit").click()
    wait_for(lambda: len(table_rows(browser, "partitions")) == 4, "four partitions shown")
    with console.client() as c:
        assert len(c.metadata(["made-in-browser"]).topics[0].partitions) == 4
    browser.find_element(By.ID, "config-set").send_keys("retention.ms=3600000")
    browser.find_element(By.ID, "config-submit").click()
    wait_for(lambda: ["retention.ms", "3600000"] in table_rows(browser, "topic-config"),
             "the override shown")
    with console.client() as c:
        (described,) = c.describe_topic_configs(["made-in-browser"])
    assert {e.key: e.value for e in described.configs} == {"retention.ms": "3600000"}


def test_group_lag_in_the_page(console, browser):
    with console.client() as c:
        c.create_topic("clicks", 1)
        end = produce(console, "clicks", 0, [b"c" * 80] * 20)
        c.offset_commit("dashboard", [("clicks", 0, end // 4, None)])
    wait_listed(console, "clicks")
    browser.get(console.origin + "/#/groups/dashboard")
    rows = wait_for(lambda: table_rows(browser, "group-partitions"), "the group's partitions")
    assert rows == [["clicks", "0", "–", str(end // 4), str(end), str(end - end // 4)]]


def test_the_gate_refuses_a_change_without_the_token(console, browser):
    By = _by()
    browser.get(console.origin + "/#/topics")
    wait_for(lambda: browser.find_element(By.ID, "create-topic-form").is_displayed(),
             "the create form")
    # a wrong token: the broker refuses (401) and the page says so, asking again
    browser.execute_script("sessionStorage.setItem('hostbroker-admin-token', 'not-the-token')")
    _create(browser, "not-made", 1)
    wait_for(lambda: message(browser), "the refusal")
    assert "token" in message(browser).lower()
    wait_for(lambda: browser.find_element(By.ID, "token-input").is_displayed(),
             "the token asked for again")
    # no token at all: the page does not send the change
    _create(browser, "not-made-either", 1)
    wait_for(lambda: "enter the admin token" in message(browser), "the page asking for it")
    with console.client() as c:
        names = {t.topic for t in c.metadata().topics}
    assert not names & {"not-made", "not-made-either"}


def test_delete_a_topic_and_read_its_message(console, browser):
    By = _by()
    with console.client() as c:
        before = {t.topic for t in c.metadata().topics}  # the other tests' (shared broker)
        c.create_topic("gone", 1)
        c.create_topic("kept", 1)
    wait_listed(console, "gone", "kept")
    browser.get(console.origin + "/#/topics/gone")
    _give_token(browser, console.token)
    wait_for(lambda: table_rows(browser, "partitions"), "the topic's partitions")
    browser.find_element(By.ID, "delete-confirm").send_keys("gone")
    browser.find_element(By.ID, "delete-submit").click()
    wait_for(lambda: message(browser) == "deleted topic gone", "the deleted message")
    assert browser.execute_script("return location.hash") == "#/topics"
    wait_for(lambda: [r[0] for r in table_rows(browser, "topics")] == sorted(before | {"kept"}),
             "the topics without it")
    time.sleep(1.0)  # the message stays: nothing queued wipes it
    assert message(browser) == "deleted topic gone"
    with console.client() as c:
        assert {t.topic for t in c.metadata().topics} == before | {"kept"}


def test_a_malformed_link_is_said(console, browser):
    By = _by()
    with console.client() as c:
        c.create_topic("fine", 1)
    wait_listed(console, "fine")
    browser.get(console.origin + "/#/topics")
    wait_for(lambda: table_rows(browser, "topics"), "the topics")
    for bad in ("#/topics/%E0", "#/groups/%", "#/groups/a%2"):
        browser.execute_script("location.hash = arguments[0]", bad)
        wait_for(lambda: message(browser).startswith("not a valid link"), f"{bad} refused")
        browser.get(console.origin + "/#/topics/fine")  # a good link reads on
        wait_for(lambda: browser.find_element(By.ID, "topic-name").text == "fine",
                 "the topic after it")
    assert not [e for e in browser.get_log("browser") if "Uncaught" in e["message"]]


def test_a_live_group_with_markup_from_its_client(console, browser):
    """Members, owners and lag of a group with a member, its client id markup and its
    id holding a /: all shown, as text."""
    from hostbroker.client.coordinator_requests import CoordinatorClient

    By = _by()
    group = "team/orders"
    with console.client() as c:
        c.create_topic("orders", 2)
        end = produce(console, "orders", 1, [b"o" * 30] * 6)
        c.offset_commit(group, [("orders", 1, end // 2, None)])  # before it has members
    wait_listed(console, "orders")
    member = CoordinatorClient([console.unix], timeout=10, client_id=EVIL)
    try:
        joined = member.join_group(group, "", {"orders": 1}, session_timeout_ms=120000,
                                   rebalance_timeout_ms=5000)
        member.sync_group(group, joined.generation, joined.member_id)
        browser.get(console.origin + "/#/groups")
        wait_for(lambda: [group, "yes"] in table_rows(browser, "groups"), "the live group")
        browser.find_element(By.LINK_TEXT, group).click()
        members = wait_for(lambda: table_rows(browser, "members"), "the members")
        assert [(m[0], m[1]) for m in members] == [(joined.member_id, EVIL)]
        assert members[0][3] == "orders 0: 0,1"
        rows = wait_for(lambda: table_rows(browser, "group-partitions"), "the partitions")
        owner = f"{joined.member_id}-0"
        assert rows == [["orders", "0", owner, "–", "0", "–"],
                        ["orders", "1", owner, str(end // 2), str(end), str(end - end // 2)]]
        assert browser.find_element(By.ID, "group-name").text == group
        assert "generation" in browser.find_element(By.ID, "group-summary").text
        assert browser.find_elements(By.TAG_NAME, "img") == []
        assert browser.title != "owned"
        # the same group by its link, and its id in the hash
        browser.get(console.origin + "/#/groups/" + quote(group, safe=""))
        wait_for(lambda: table_rows(browser, "group-partitions") == rows, "the page by link")
    finally:
        member.close()


def test_the_broker_view(console, browser):
    By = _by()
    browser.get(console.origin + "/#/broker")
    table = dict(tuple(r) for r in wait_for(lambda: table_rows(browser, "broker-table"),
                                             "the broker table"))
    assert (table["broker id"], table["mode"], table["state"]) == ("0", "standalone", "running")
    assert table["console changes"] == "enabled"
    processes = table_rows(browser, "processes")
    assert {"writer", "handler", "processor"} <= {p[0] for p in processes}
    assert all(p[3] == "ready" for p in processes)
    # one log dir (no dir id: a broker of one dir names none)
    assert table_rows(browser, "log-dirs") == [["–", console.settings["log.dirs"], "online"]]
    assert table_rows(browser, "brokers") == [["0", "127.0.0.1", str(console.port),
                                               console.unix_path, "live"]]
    assert "broker 0" in browser.find_element(By.ID, "broker-summary").text


def _drawn(browser, canvas_id: str) -> int:
    """How many pixels of the canvas are not blank."""
    return browser.execute_script(
        "const c = document.getElementById(arguments[0]);"
        "const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
        "let n = 0; for (let i = 3; i < d.length; i += 4) { if (d[i]) { n++; } } return n;",
        canvas_id)


def test_the_charts_draw_once_two_reads_exist(own_console, browser):
    By = _by()
    with own_console.client() as c:
        c.create_topic("flow", 1)
    browser.get(own_console.origin + "/#/topics")
    wait_for(lambda: table_rows(browser, "topics"), "the topics")
    assert _drawn(browser, "chart-messages_in") == 0  # one read: nothing to draw yet
    for _ in range(3):  # reads a second apart, with messages between (the series is the broker's)
        produce(own_console, "flow", 0, [b"f" * 100] * 20)
        time.sleep(1.1)
        get(own_console, "/api/rates")
    # the page's next poll (every 5 s) has two points or more: a line is drawn
    wait_for(lambda: _drawn(browser, "chart-messages_in") > 0, "the messages chart drawn",
             timeout=15)
    assert _drawn(browser, "chart-bytes_in") > 0
    assert browser.find_element(By.ID, "now-messages_in").text.endswith("/s")
    assert browser.find_element(By.ID, "now-bytes_in").text.endswith("/s")


def test_a_topic_page_goes_to_a_partition_with_a_page_size(console, browser):
    By = _by()
    with console.client() as c:
        c.create_topic("wide", 30)
    wait_listed(console, "wide")
    browser.get(console.origin + "/#/topics/wide")
    wait_for(lambda: len(table_rows(browser, "partitions")) == 30, "all 30 in one page")
    browser.find_element(By.ID, "partition-page-size").send_keys("5")
    browser.find_element(By.ID, "partition-goto").send_keys("12")
    browser.find_element(By.ID, "partition-goto-submit").click()
    wait_for(lambda: [r[0] for r in table_rows(browser, "partitions")] ==
             ["12", "13", "14", "15", "16"], "partitions 12 to 16")
    where = browser.find_element(By.CSS_SELECTOR, "#partitions-pager .where")
    assert where.text == "13–17 of 30"
    browser.find_element(By.CSS_SELECTOR, "#partitions-pager .next").click()
    wait_for(lambda: [r[0] for r in table_rows(browser, "partitions")] ==
             ["17", "18", "19", "20", "21"], "the next page of 5")
    browser.find_element(By.ID, "partition-goto").clear()
    browser.find_element(By.ID, "partition-goto").send_keys("29")
    browser.find_element(By.ID, "partition-goto-submit").click()
    wait_for(lambda: [r[0] for r in table_rows(browser, "partitions")] == ["29"],
             "the last partition")
    assert browser.find_element(By.CSS_SELECTOR, "#partitions-pager .next").get_attribute(
        "disabled")


def test_markup_in_a_refusal_stays_text(console, browser):
    """The broker's refusal names the config key it refused: markup there is shown."""
    By = _by()
    browser.get(console.origin + "/#/topics")
    _give_token(browser, console.token)
    key = "<b>bold</b><script>alert(1)</script>"  # the form's keys hold no =
    browser.find_element(By.ID, "create-configs").send_keys(key + "=1")
    _create(browser, "marked", 1)
    wait_for(lambda: "INVALID_CONFIG" in message(browser), "the refusal")
    assert key in message(browser)  # the key, as text
    assert browser.find_elements(By.TAG_NAME, "b") == []
    assert len(browser.find_elements(By.TAG_NAME, "script")) == 1  # app.js only
    assert browser.title != "owned"
    with console.client() as c:
        assert "marked" not in {t.topic for t in c.metadata().topics}


def test_a_group_page_sorts_by_lag_and_keeps_one_topic(console, browser):
    By = _by()
    with console.client() as c:
        c.create_topic("left", 2)
        c.create_topic("right", 1)
        ends = {("left", p): produce(console, "left", p, [b"l" * 50] * (2 + p)) for p in range(2)}
        ends[("right", 0)] = produce(console, "right", 0, [b"r" * 90] * 4)
        c.offset_commit("sorted", [(t, p, 0, None) for t, p in ends])
    wait_listed(console, "left", "right")
    browser.get(console.origin + "/#/groups/sorted")
    by_name = wait_for(lambda: table_rows(browser, "group-partitions"), "the group's rows")
    assert [(r[0], r[1]) for r in by_name] == [("left", "0"), ("left", "1"), ("right", "0")]
    browser.find_element(By.ID, "group-sort-lag").click()
    browser.find_element(By.ID, "group-rows-submit").click()
    most_first = sorted(ends.items(), key=lambda kv: -kv[1])
    wait_for(lambda: [(r[0], r[1]) for r in table_rows(browser, "group-partitions")] ==
             [(t, str(p)) for (t, p), _ in most_first], "the rows by lag, most first")
    browser.find_element(By.ID, "group-topic").send_keys("left")
    browser.find_element(By.ID, "group-rows-submit").click()
    wait_for(lambda: [(r[0], r[1]) for r in table_rows(browser, "group-partitions")] ==
             [("left", "1"), ("left", "0")], "topic left's rows only, by lag")
