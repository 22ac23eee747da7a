"""The route a processor gives a request frame: every row of docs/architecture.md's
table ("A request's route"), each with the condition that turns it to the handler."""

from __future__ import annotations

import socket

import pytest

from hostbroker.protocol import api
from hostbroker.protocol import groups as gproto
from hostbroker.workers.connection import Connection
from hostbroker.workers.processor_frames import HEAD, FrameReading
from hostbroker.workers.processor_routes import (ANSWER, FETCH, GROUP_PUT, HANDLER, NAMES,
                                                 NOT_DECODED, PARKED, PUT, Peek, Routes,
                                                 polls_at_writer)

K = api.ApiKey
ALL_ON = dict(answers=True, tls_answers=True, fetch=True, put_max=1 << 20, group_puts=True,
              busy_max=4096, max_parked=10)
TLS = object()  # a connection's TLS state: only whether it has one counts
METERED = object()  # a connection's quota: likewise


@pytest.fixture
def conn():
    a, b = socket.socketpair()
    c = Connection(a, 1, 0, 0.0)
    yield c
    a.close()
    b.close()


def route(conn, key, version=0, size=100, last=True, **settings):
    return NAMES[Routes(**{**ALL_ON, **settings}).route(conn, key, version, size, last)]


@pytest.mark.parametrize("key", [K.METADATA, K.OFFSETS])
def test_metadata_and_offsets_are_answered_here(conn, key):
    assert route(conn, key) == NAMES[ANSWER]
    assert route(conn, key, last=False) == NAMES[ANSWER]  # pipelined too
    conn.pipelining = True
    assert route(conn, key) == NAMES[ANSWER]


@pytest.mark.parametrize("key", [K.METADATA, K.OFFSETS])
def test_metadata_and_offsets_go_to_the_handler(conn, key):
    assert route(conn, key, answers=False) == "handler"  # processor.local.requests off
    assert route(conn, key, version=1) == "handler"  # replication's versions
    conn.tls = TLS
    assert route(conn, key, tls_answers=False) == "handler"  # no ssl:// answers here
    assert route(conn, key) == NAMES[ANSWER]
    conn.decisions = None  # an identity its handler refuses, with the authorizer on
    assert route(conn, key) == NAMES[ANSWER]
    assert route(conn, key, enforcing=True) == "handler"
    conn.decisions, conn.at_handler = object(), 1
    assert route(conn, key) == "handler"


def test_fetch_is_answered_or_parked_here(conn):
    assert route(conn, K.FETCH) == NAMES[FETCH]
    assert route(conn, K.FETCH, version=2) == NAMES[FETCH]  # v2, with a throttle time of 0
    assert route(conn, K.FETCH, last=False) == NAMES[FETCH]
    conn.pipelining = True
    assert route(conn, K.FETCH) == NAMES[FETCH]


def test_fetch_goes_to_the_handler(conn):
    assert route(conn, K.FETCH, fetch=False) == "handler"  # processor.local.fetch off
    assert route(conn, K.FETCH, version=1) == "handler"
    assert route(conn, K.FETCH, version=3) == "handler"
    conn.quota = METERED  # v2 of a metered connection: its throttle time is written in
    assert route(conn, K.FETCH, version=2) == "handler"
    assert route(conn, K.FETCH) == NAMES[FETCH]
    conn.quota, conn.at_handler = None, 2
    assert route(conn, K.FETCH) == "handler"


def test_a_lone_produce_is_put_to_its_writer(conn):
    assert route(conn, K.PRODUCE) == NAMES[PUT]
    assert route(conn, K.PRODUCE, version=1) == NAMES[PUT]
    assert route(conn, K.PRODUCE, size=1 << 20) == NAMES[PUT]  # as large as a record takes


def test_a_produce_goes_to_the_handler(conn):
    assert route(conn, K.PRODUCE, put_max=-1) == "handler"  # processor.direct.produce off
    assert route(conn, K.PRODUCE, size=(1 << 20) + 1) == "handler"  # past a put record
    assert route(conn, K.PRODUCE, last=False) == "handler"  # more read behind it
    assert route(conn, K.PRODUCE, version=2) == "handler"
    conn.quota = METERED
    assert route(conn, K.PRODUCE, version=1) == "handler"
    assert route(conn, K.PRODUCE) == NAMES[PUT]
    conn.quota, conn.pipelining = None, True
    assert route(conn, K.PRODUCE) == "handler"
    conn.pipelining, conn.at_handler = False, 1
    assert route(conn, K.PRODUCE) == "handler"


@pytest.mark.parametrize("key", [K.OFFSET_COMMIT, K.OFFSET_FETCH, gproto.GroupApiKey.HEARTBEAT])
def test_group_requests_are_put_to_the_coordinator(conn, key):
    assert route(conn, key) == NAMES[GROUP_PUT]
    assert route(conn, key, version=1) == NAMES[GROUP_PUT]  # (it decodes every version)
    assert route(conn, key, group_puts=False) == "handler"  # processor.direct.groups off
    assert route(conn, key, last=False) == "handler"
    conn.pipelining = True
    assert route(conn, key) == "handler"
    conn.pipelining, conn.at_handler = False, 1
    assert route(conn, key) == "handler"


@pytest.mark.parametrize("key", [K.LEADER_AND_ISR, gproto.GroupApiKey.JOIN_GROUP,
                                 gproto.GroupApiKey.SYNC_GROUP, 9999])
def test_every_other_request_goes_to_the_handler(conn, key):
    assert route(conn, key) == "handler"
    assert route(conn, key, version=1) == "handler"


def put_candidate(conn, key, version, need=300_000, head_bytes=HEAD.size, **settings):
    """Whether a large frame whose first ``head_bytes`` have come may be
    received into a put ring record: the decision told from its head."""
    head = HEAD.pack(need - 4, key, version, 7)[:head_bytes]
    processor = FrameReading.__new__(FrameReading)  # only its route decision is asked
    processor.routes = Routes(**{**ALL_ON, **settings})
    return processor._put_candidate(conn, need, head)


def test_a_large_produce_is_told_a_put_from_its_head(conn):
    assert put_candidate(conn, K.PRODUCE, 0)
    assert put_candidate(conn, K.PRODUCE, 1)
    assert not put_candidate(conn, K.PRODUCE, 2)
    assert not put_candidate(conn, K.PRODUCE, 0, head_bytes=HEAD.size - 1)  # head not all here
    assert not put_candidate(conn, K.PRODUCE, 0, need=(1 << 20) + 5)  # past a put record
    assert not put_candidate(conn, K.FETCH, 0)
    assert not put_candidate(conn, K.OFFSET_COMMIT, 0)
    conn.quota = METERED  # a metered connection's v1 is the handler's: into its ring record
    assert not put_candidate(conn, K.PRODUCE, 1)
    assert put_candidate(conn, K.PRODUCE, 0)
    conn.quota, conn.pipelining = None, True
    assert not put_candidate(conn, K.PRODUCE, 0)


def confirm(route_, **peek):
    return NAMES[Routes(**ALL_ON).confirm(route_, Peek(**peek))]


def test_a_put_is_confirmed_from_what_its_frame_says():
    assert confirm(PUT) == NAMES[PUT]
    assert confirm(PUT, size=4096, asleep=False) == NAMES[PUT]  # small: a busy writer takes it
    assert confirm(PUT, size=-1) == NAMES[PUT]  # only its first bytes here, the writer asleep


def test_a_put_goes_to_the_handler_after_a_look_into_its_frame():
    assert NAMES[Routes(**ALL_ON).confirm(PUT, NOT_DECODED)] == "handler"
    assert confirm(PUT, allowed=False) == "handler"  # WRITE refused: the handler answers it
    assert confirm(PUT, acks=0) == "handler"
    assert confirm(PUT, acks=-1) == "handler"
    assert confirm(PUT, partitions=2) == "handler"
    assert confirm(PUT, online=False) == "handler"
    assert confirm(PUT, size=4097, asleep=False) == "handler"  # busy writer, above busy.max
    assert confirm(PUT, size=-1, asleep=False) == "handler"  # busy writer, size not known yet


def test_a_fetch_is_answered_or_parked_after_a_look_into_its_frame():
    assert confirm(FETCH) == NAMES[FETCH]
    assert confirm(FETCH, wait=True, parked_parts=10) == NAMES[PARKED]
    assert confirm(FETCH, parked_here=True, parked_parts=11) == NAMES[FETCH]  # no wait: answered
    assert NAMES[Routes(**ALL_ON).confirm(FETCH, NOT_DECODED)] == "handler"  # or over a bound
    assert confirm(FETCH, allowed=False) == "handler"  # READ refused
    assert confirm(FETCH, wait=True, parked_here=True) == "handler"  # one parked per connection
    assert confirm(FETCH, wait=True, parked_parts=11) == "handler"  # processor.fetch.max.parked


def test_a_group_put_is_confirmed_unless_refused():
    assert confirm(GROUP_PUT) == NAMES[GROUP_PUT]
    assert confirm(GROUP_PUT, allowed=False) == "handler"
    assert NAMES[Routes(**ALL_ON).confirm(GROUP_PUT, NOT_DECODED)] == "handler"


def test_where_a_fetch_the_handler_took_waits():
    assert polls_at_writer(True, True, 1, True, False)  # at its partition's writer
    assert not polls_at_writer(False, True, 1, True, False)  # fetch.writer.polls off
    assert not polls_at_writer(True, False, 1, True, False)  # v1 (replication) or v2
    assert not polls_at_writer(True, True, 2, True, False)
    assert not polls_at_writer(True, True, 0, True, False)
    assert not polls_at_writer(True, True, 1, False, False)  # not ONLINE, or unknown
    assert not polls_at_writer(True, True, 1, True, True)  # replicated


def test_the_handler_is_the_only_false_route():
    # the processor's frame loop tests the route for truth before comparing it
    assert [bool(r) for r in (HANDLER, ANSWER, FETCH, PUT, GROUP_PUT, PARKED)] == \
        [False] + [True] * 5


def test_peek_keeps_the_order_its_hot_paths_fill_positionally():
    # _put_peek and _fetch_here build a Peek positionally (the cost of keywords)
    assert Peek._fields == ("decoded", "allowed", "acks", "partitions", "online", "size",
                            "asleep", "wait", "parked_here", "parked_parts")
