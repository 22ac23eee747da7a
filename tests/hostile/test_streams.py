"""The long run's fuzz (:mod:`tests.hostile.stream`), bounded: pipelined
streams of every API on long-lived connections and framing batches, from a
client process, with the invariants checked between rounds.

The checks of each answer are shown to fail against a fake broker that
answers out of order or not at all (a fault the real one cannot be made to
have).
"""

from __future__ import annotations

import socket
import struct
import threading

from hostbroker.errors import ProtocolError
from hostbroker.protocol import api
from hostbroker.log.message import encode_message_set
from tests.hostile import fuzzlib, stream
from tests.hostile.fuzzlib import FuzzContext


def test_pipelined_streams_and_framing_batches(session):
    stats = session.run_streams(seconds=10, max_requests=8_000, check_every=4_000, jobs=1,
                                connections=4)
    assert stats.requests > 0 and stats.answered > 0 and stats.checks >= 1


class FakeBroker:
    """Answers METADATA requests over a Unix socket, its correlation ids off by
    ``shift``, closing after ``answers`` answers; undecodable frames get an
    error frame and the close, like the broker."""

    def __init__(self, path, shift: int = 0, answers: int = 1 << 30):
        self.shift, self.answers = shift, answers
        self.most_at_once = 0  # whole frames one read brought, at most
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(8)
        self.uri = f"unix://{path}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            self._answer(conn)
        except OSError:
            pass  # the client closed first: it has seen what it checks

    def _answer(self, conn: socket.socket) -> None:
        buf = b""
        with conn:
            while True:
                data = conn.recv(1 << 16)
                if not data:
                    return
                buf += data
                at_once = 0
                while len(buf) >= 4 and 0 <= (size := struct.unpack_from(">i", buf)[0]) \
                        <= len(buf) - 4:
                    body, buf = buf[4:4 + size], buf[4 + size:]
                    at_once += 1
                    self.most_at_once = max(self.most_at_once, at_once)
                    cid = api.peek_correlation_id(body)
                    if cid is None:
                        return
                    try:
                        api.decode_request(body, stream.MAX_ENTRIES)
                    except ProtocolError:
                        conn.sendall(api.encode_error_frame(cid, 2))
                        return
                    if self.answers == 0:
                        return
                    self.answers -= 1
                    conn.sendall(api.encode_response(cid + self.shift,
                                                     api.MetadataResponse(0, (), ())))

    def close(self) -> None:
        self.server.close()


def _metadata_batches(uri: str) -> stream.Batches:
    ctx = FuzzContext(["t"], 1)
    pool = stream.Pool.build(7, ctx)
    pool.light = [f for f in pool.light if struct.unpack_from(">h", f, 4)[0] == api.ApiKey.METADATA]
    pool.heavy = []
    return stream.Batches(7, ctx, pool, [uri], heavy=0.0, framing=0.0)


def _mutation_free(batches: stream.Batches) -> list[int]:
    """Batches whose every frame the fake can answer (METADATA or refused)."""
    ok = []
    for batch in range(40):
        _, frames, _ = batches.frames(batch)
        if all(e[0] != "answer" or e[2] == api.ApiKey.METADATA for _, e in frames):
            ok.append(batch)
    return ok[:3]


def test_the_checks_pass_a_broker_that_answers_right(tmp_path):
    fake = FakeBroker(tmp_path / "ok.sock")
    try:
        batches = _metadata_batches(fake.uri)
        chosen = _mutation_free(batches)
        tally = stream.Tally()
        assert batches.run(chosen, tally, concurrency=2) == []
        assert tally.answered > 100 and tally.batches == len(chosen) == 3
    finally:
        fake.close()


def test_lockstep_batches_send_each_request_when_the_last_is_answered(tmp_path):
    for lockstep, one_at_a_time in ((1.0, True), (0.0, False)):
        fake = FakeBroker(tmp_path / f"lockstep-{lockstep}.sock")
        try:
            batches = _metadata_batches(fake.uri)
            batches.lockstep, batches.bursts = lockstep, 0.0
            chosen = _mutation_free(batches)
            assert all((batches.frames(b)[2] is not None) == one_at_a_time for b in chosen)
            tally = stream.Tally()
            assert batches.run(chosen, tally, concurrency=2) == []
            assert tally.answered > 100
            assert (fake.most_at_once == 1) == one_at_a_time, fake.most_at_once
        finally:
            fake.close()


def test_lockstep_batches_with_bursts_send_a_few_at_once_now_and_then(tmp_path):
    fake = FakeBroker(tmp_path / "bursts.sock")
    try:
        batches = _metadata_batches(fake.uri)
        batches.lockstep, batches.bursts = 1.0, 1.0
        chosen = _mutation_free(batches)
        paces = [batches.frames(b)[2] for b in chosen]
        assert all(5 <= p.every <= 60 and 2 <= p.burst <= 4 for p in paces)
        tally = stream.Tally()
        assert batches.run(chosen, tally, concurrency=1) == []
        assert tally.answered > 100
        # bursts at once (one read may take less of one), and never more
        assert 1 < fake.most_at_once <= max(p.burst for p in paces)
    finally:
        fake.close()


def test_the_checks_catch_answers_out_of_order(tmp_path):
    fake = FakeBroker(tmp_path / "shift.sock", shift=1)
    try:
        batches = _metadata_batches(fake.uri)
        failures = batches.run(_mutation_free(batches), stream.Tally(), concurrency=2)
        assert len(failures) == 3 and all("answer for cid" in m
                                          for _, m, _ in failures)
    finally:
        fake.close()


def test_the_checks_catch_a_close_without_an_answer(tmp_path):
    fake = FakeBroker(tmp_path / "close.sock", answers=10)
    try:
        batches = _metadata_batches(fake.uri)
        chosen = _mutation_free(batches)[:1]
        failures = batches.run(chosen, stream.Tally(), concurrency=1)
        assert [(b, "closed without an answer or error frame" in m) for b, m, _ in failures] \
            == [(chosen[0], True)]
    finally:
        fake.close()


def test_offsets_pipelined_with_a_delete_of_their_topic(session):
    """Found by the long run: OFFSETS of a partition whose topic a DELETE_TOPIC
    removes while it is served must be answered (an error code or offsets),
    and the handler must live on."""
    with session.broker.client() as client:
        for round_ in range(20):
            topic = f"fz-offsets-race-{round_}"
            client.create_topic(topic, 2)
            client.produce(topic, 0, encode_message_set([b"o" * 100] * 5))
            frames = [api.encode_request(api.OffsetsRequest(topic, i % 2, -1, 4), 10 + i, "race")
                      for i in range(30)]
            frames.insert(5, api.encode_request(api.DeleteTopicRequest(topic), 9, "race"))
            try:
                fuzzlib.exchange(session.uris[round_ % 2], frames)
            except fuzzlib.Violation as exc:
                raise fuzzlib.Violation(f"round {round_}: {exc}") from None


def test_fetches_pipelined_with_a_delete_of_their_topic(session):
    """Found by the long run (seed 20261126, batch 1): FETCH answers whose
    segment a DELETE_TOPIC behind them removes must still arrive whole (data
    or an error code), never a silent close."""
    with session.broker.client() as client:
        for round_ in range(20):
            topic = f"fz-fetch-race-{round_}"
            client.create_topic(topic, 2)
            for p in (0, 1):
                client.produce(topic, p, encode_message_set([b"f" * 1000] * 200))
            frames = [api.encode_request(api.FetchRequest(0, 0, (
                api.FetchPartition(topic, i % 2, 0, 1 << 20),)), 10 + i, "race") for i in range(20)]
            frames.insert(3, api.encode_request(api.DeleteTopicRequest(topic), 9, "race"))
            try:
                fuzzlib.exchange(session.uris[round_ % 2], frames)
            except fuzzlib.Violation as exc:
                raise fuzzlib.Violation(f"round {round_}: {exc}") from None
