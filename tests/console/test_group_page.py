"""The group page's deadline (hostbroker/console/group_page.py): the console
of a real broker's shared memory and connection, in this process, with a
clock the test moves (the one fake: a slow broker cannot be made to order)."""

from __future__ import annotations

import pytest

from hostbroker.console.api import Console
from hostbroker.console.group_page import PAGE_DEADLINE_S, group_page
from hostbroker.web.router import HttpError, Request
from tests.integration.conftest import make_broker  # noqa: F401 - fixture
from tests.metrics.scrape import context_of


class _Clock:
    """Each reading is ``step`` seconds after the last."""

    def __init__(self, step: float):
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def _page(console, group: str, **query):
    return group_page(console, Request("GET", "/api/group", {"group": group, **query}, {}, b"",
                                       "127.0.0.1"))


@pytest.fixture
def committed(make_broker):
    broker = make_broker()
    with broker.client() as c:
        c.create_topic("t", 3)
        c.offset_commit("g", [("t", 1, 0, None)])
    context = context_of(broker)
    yield context
    context.close()


def test_a_page_within_its_deadline_is_answered(committed):
    console = Console(committed, clock=_Clock(PAGE_DEADLINE_S / 100))
    assert _page(console, "g").status == 200
    assert committed.broker_client().connection.timeout == committed.broker_timeout_s


def test_a_page_past_its_deadline_is_504_and_the_connection_keeps_its_timeout(committed):
    # the clock moves 40 % of the deadline at each reading: the page runs out
    # after DESCRIBE_GROUP and LIST_OFFSET_GROUPS, before it reads the topics
    console = Console(committed, clock=_Clock(PAGE_DEADLINE_S * 0.4))
    with pytest.raises(HttpError) as info:
        _page(console, "g")
    assert info.value.status == 504
    assert f"longer than {PAGE_DEADLINE_S:g} s" in str(info.value)
    assert committed.broker_client().connection.timeout == committed.broker_timeout_s
