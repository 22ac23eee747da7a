from hostbroker.workers import envelopes as env


def test_response_round_trip_with_bytes_and_file_pieces():
    pieces = [b"head", env.FilePiece("/d/t_0/00000000000000000000.kafka", 12, 3456), b"", b"tail"]
    parts = env.encode_response(7 << 56 | 99, 41, env.RESP_CLOSE_AFTER, pieces, 2**63 + 5)
    conn_id, seq, flags, back, stamp = env.decode_response(b"".join(parts))
    assert (conn_id, seq, flags, stamp) == (7 << 56 | 99, 41, env.RESP_CLOSE_AFTER, 2**63 + 5)
    assert back == pieces


def test_append_header_and_payload():
    head, data = env.encode_append(5, 3, "t" * 249, 99_999, 1, -1, 1000, 123456789,
                                   memoryview(b"xyz"), 2**62 + 1)
    message = head + bytes(data)
    op, token = env.decode_op(message)
    assert (op, token) == (env.OP_APPEND, 5)
    append = env.decode_append(memoryview(message))
    assert append[:8] == (5, 3, 1, -1, 1000, 123456789, "t" * 249, 99_999)
    assert append.message_set == b"xyz"
    assert append.stamp_ns == 2**62 + 1


def test_append_direct_names_where_its_answer_goes():
    direct = env.Direct(processor=3, conn_id=2**63 + 7, seq=2**32 - 1, correlation_id=-5)
    head, data = env.encode_append(9, 1, "topic", 4, 0, 1, 2, 77, memoryview(b"set"), 11,
                                   direct)
    message = memoryview(head + bytes(data))
    assert env.decode_op(message) == (env.OP_APPEND_DIRECT, 9)
    append = env.decode_append(message)
    assert append.direct == direct
    assert (append.topic, append.partition, append.message_set, append.stamp_ns) == (
        "topic", 4, b"set", 11)
    # a plain append carries none
    head, data = env.encode_append(9, 1, "topic", 4, 0, 1, 2, 77, memoryview(b"set"))
    assert env.decode_append(memoryview(head + bytes(data))).direct is None


def test_a_put_is_an_append_direct_the_writer_counts_itself():
    direct = env.Direct(processor=2, conn_id=2**50 + 1, seq=9, correlation_id=77)
    head, data = env.encode_put(3, "topic", 1, 1234, memoryview(b"the set"), 55, direct)
    append = env.decode_append(memoryview(head + bytes(data)))
    assert env.decode_op(head) == (env.OP_PUT, 0)
    assert (append.slot, append.topic, append.partition, append.index, append.acks,
            append.count, append.deadline_ms, append.stamp_ns, append.direct, append.ref) == (
        3, "topic", 1, 0, 1, 0, 1234, 55, direct, None)
    assert bytes(append.message_set) == b"the set"


def test_append_refs_name_the_ring_bytes_instead_of_carrying_them():
    ref = env.Ref(processor=3, offset=4096 + 12, length=1 << 20, handler_epoch=7)
    direct = env.Direct(processor=1, conn_id=2**40 + 5, seq=17, correlation_id=-3)
    for d, op in ((None, env.OP_APPEND_REF), (direct, env.OP_APPEND_DIRECT_REF)):
        head, data = env.encode_append(9, 1, "topic", 4, 2, 1, 5, 77, memoryview(b"big set"),
                                       11, d, ref)
        assert data == b""  # the set stays where it is
        append = env.decode_append(memoryview(head + data))
        assert env.decode_op(head) == (op, 9) and op in env.APPEND_OPS
        assert (append.ref, append.direct, append.topic, append.partition, append.index,
                append.count, append.stamp_ns) == (ref, d, "topic", 4, 2, 5, 11)
        assert bytes(append.message_set) == b""


def test_json_commands():
    head, body = env.encode_json(env.OP_OFFSETS, 9, {"op": "fetch", "keys": [["g", "t", 0]]})
    message = head + body
    assert env.decode_op(message) == (env.OP_OFFSETS, 9)
    assert env.decode_json(message) == {"op": "fetch", "keys": [["g", "t", 0]]}
