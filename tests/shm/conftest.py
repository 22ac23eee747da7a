"""Shared fixtures: unique region names that are always removed."""

from __future__ import annotations

import itertools
import os

import pytest

from hostbroker.shm.region import broker_prefix, region_name, remove_stale

_runs = itertools.count()


@pytest.fixture
def names():
    """``names(kind, index=0)`` -> a region name unique to this test; all removed after it."""
    token = f"t{os.getpid()}n{next(_runs)}"
    yield lambda kind, index=0: region_name(token, kind, index)
    remove_stale(broker_prefix(token))


@pytest.fixture
def created(names):
    """``created(cls, kind, *args)`` -> ``cls.create(names(kind), *args)``, closed after the test."""
    made = []

    def create(cls, kind, *args):
        made.append(cls.create(names(kind), *args))
        return made[-1]

    yield create
    for structure in made:
        structure.close()
