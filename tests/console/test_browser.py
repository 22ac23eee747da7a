"""The console in a real headless chromium against a real broker: create a topic,
add partitions, read a group's lag, and the admin gate refusing a change without
the token. What the page did is read back from the broker over the wire."""

from __future__ import annotations

import importlib.util

import pytest

from tests.console.browser import message, start_browser, stop_browser, table_rows, wait_for
from tests.console.web import ConsoleBroker, produce

TOPICS_ADMIN = importlib.util.find_spec("hostbroker.protocol.topics_admin") is not None


@pytest.fixture
def console(tmp_path):
    root = tmp_path / "broker"
    root.mkdir()
    broker = ConsoleBroker(root).start()
    yield broker
    try:
        broker.stop(timeout=20)
    except Exception:  # noqa: BLE001 - already failing; leave nothing behind
        broker.kill_tree()
    broker.remove_leftovers()


@pytest.fixture
def browser(tmp_path):
    profile = tmp_path / "profile"
    driver = start_browser(profile)
    yield driver
    stop_browser(driver, profile)


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
    if not TOPICS_ADMIN:
        return
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
