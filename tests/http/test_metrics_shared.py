"""Scrapes of /metrics less than a second apart share one rendered body
(hostbroker.metrics.route.shared), with a driven clock."""

from __future__ import annotations

from hostbroker.metrics.route import SHARED_S, shared


def test_scrapes_within_the_window_get_the_very_same_body():
    now = [100.0]
    rendered = []

    def render():
        rendered.append(now[0])
        return b"body %d\n" % len(rendered)

    body = shared(render, clock=lambda: now[0])
    first = body()
    now[0] += SHARED_S - 0.01
    assert body() is first and rendered == [100.0]  # one rendering, one object
    now[0] += 0.02
    second = body()
    assert second == b"body 2\n" and len(rendered) == 2
    now[0] -= 5  # a clock that went back renders afresh, never serves the future
    assert body() == b"body 3\n"
