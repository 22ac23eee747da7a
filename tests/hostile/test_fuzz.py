"""A seeded, bounded fuzz of every API's bodies over both socket kinds.

Generated requests (hostile values: names at every length limit, edge
integers, fields repeated thousands of times, damaged and compressed message
sets), byte-mutated frames, and the protocol tests' hypothesis strategies. See
:mod:`tests.hostile.fuzzlib` for what each exchange asserts; the ``session``
fixture checks the broker's invariants after each test.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from hostbroker.log.message import encode_message_set
from hostbroker.protocol import api
from tests.hostile import fuzzlib
from tests.hostile.conftest import SEED
from tests.protocol.strategies import requests

BATCHES_PER_API = 40


@pytest.mark.parametrize("api_key", list(fuzzlib.GENERATORS), ids=lambda k: k.name)
def test_fuzz_of_one_api(session, api_key):
    session.run(1_000_000 * (api_key + 1), BATCHES_PER_API, api_key=api_key, check_every=20)


def test_fuzz_of_all_apis_mixed(session):
    session.run(0, 200, check_every=50)


_uris = itertools.count()


@hypothesis_seed(SEED)
@settings(max_examples=150, database=None, deadline=None, phases=[Phase.generate],
          suppress_health_check=list(HealthCheck))
@given(request=requests, mutate=st.booleans(), data=st.randoms(use_true_random=False))
def test_strategies_of_the_protocol_tests(session, request, mutate, data):
    try:
        frame = api.encode_request(request, 4242, "strategies")
    except ValueError:
        return  # a value the wire cannot carry: no client can send it
    if mutate:
        frame = fuzzlib.mutate(data, frame)
    if not session.ctx.allowed(frame):
        return
    uri = session.uris[next(_uris) % 2]
    try:
        fuzzlib.exchange(uri, [frame])
    except fuzzlib.Violation as exc:
        raise fuzzlib.Violation(f"HB_FUZZ_SEED={SEED} request {request!r}: {exc}") from None


def test_everything_acknowledged_survives_a_restart(session):
    """After the fuzz: the witness data, the probes' messages and the commits, restarted."""
    session.check()
    session.restart_and_check()


def test_a_delete_right_behind_produces_waiting_for_their_flush(session):
    """Found by the long run (seed 20261126, batch 1441): PRODUCEs with acks=-1
    pipelined with a DELETE_TOPIC of their topic, over and over."""
    with session.broker.client() as client:
        for round_ in range(30):
            topic = f"fz-race-{round_}"
            client.create_topic(topic, 2)
            frames = [api.encode_request(api.ProduceRequest(acks, 100, tuple(
                api.ProducePartition(topic, p, encode_message_set([b"r" * 100] * 5))
                for p in (0, 1))), 10 + i, "race") for i, acks in enumerate((-1, -2, 1))]
            frames.append(api.encode_request(api.DeleteTopicRequest(topic), 20, "race"))
            try:
                fuzzlib.exchange(session.uris[round_ % 2], frames)
            except fuzzlib.Violation as exc:
                raise fuzzlib.Violation(f"round {round_}: {exc}") from None
