"""Concurrent scrapes of /metrics less than a second apart share one
rendered body (hostbroker.metrics.route.shared), with a driven clock; a
scrape after the last answer was taken is rendered afresh."""

from __future__ import annotations

from hostbroker.metrics.route import SHARED_S, shared


def test_scrapes_in_flight_within_the_window_get_the_very_same_body():
    now = [100.0]
    rendered = []
    in_flight = set()

    def render():
        rendered.append(now[0])
        return b"body %d\n" % len(rendered)

    body = shared(render, held=lambda b: id(b) in in_flight, clock=lambda: now[0])
    first = body()
    in_flight.add(id(first))  # still being sent to its client
    now[0] += SHARED_S - 0.01
    assert body() is first and rendered == [100.0]  # one rendering, one object
    now[0] += 0.02
    second = body()
    assert second == b"body 2\n" and len(rendered) == 2  # past the window
    now[0] += 0.1
    assert body() == b"body 3\n"  # the last one was taken: rendered afresh
    in_flight.clear()
    now[0] -= 5  # a clock that went back renders afresh
    assert body() == b"body 4\n"
