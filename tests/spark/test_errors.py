"""hostbroker/spark/errors.py: what Spark shows of an exception the source raises."""

from __future__ import annotations

import traceback

import pytest

from hostbroker.errors import ConfigError
from hostbroker.spark.errors import shallow, shallow_iter


def deep(exc: BaseException, depth: int = 5):
    if depth:
        deep(exc, depth - 1)
    raise exc


def frames(exc: BaseException) -> set[str]:
    """The functions in ``exc``'s traceback."""
    return {frame.name for frame in traceback.extract_tb(exc.__traceback__)}


@pytest.mark.parametrize("exc", [ConnectionRefusedError("cannot reach tcp://127.0.0.1:1"),
                                 ConfigError("bootstrap: missing")])
def test_ours_and_the_systems_are_cut_to_one_frame_without_a_cause(exc):
    @shallow
    def method():
        try:
            deep(KeyError("inner"))
        except KeyError as inner:
            raise exc from inner

    with pytest.raises(type(exc)) as caught:
        method()
    assert caught.value is exc and frames(caught.value) & {"method", "deep"} == set()
    assert caught.value.__cause__ is None and caught.value.__suppress_context__

    with pytest.raises(type(exc)) as caught:
        list(shallow_iter(deep(exc) for _ in range(1)))
    assert "deep" not in frames(caught.value)


def test_a_fault_keeps_its_whole_traceback_and_cause():
    @shallow
    def method():
        try:
            deep(ValueError("inner"))
        except ValueError as inner:
            raise TypeError("a bug") from inner

    with pytest.raises(TypeError) as caught:
        method()
    assert "method" in frames(caught.value) and isinstance(caught.value.__cause__, ValueError)

    with pytest.raises(KeyError) as caught:
        list(shallow_iter(deep(KeyError("k")) for _ in range(1)))
    assert "deep" in frames(caught.value)
