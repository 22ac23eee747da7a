"""A document published to every process: generations, bounds, a torn writer,
and a reader in another process that only ever sees whole documents."""

import pytest

from hostbroker.shm.published import PublishedDocument, TornDocumentError
from hostbroker.shm.region import LayoutError
from tests.shm.procutil import fork, wait_ok


def test_published_documents_move_the_generation(created, names):
    doc = created(PublishedDocument, "pdoc", 64, b"first")
    reader = PublishedDocument.attach(names("pdoc"), readonly=True)
    try:
        assert reader.read() == (1, b"first") and reader.generation == 1
        assert doc.publish(b"second, longer") == 2
        assert reader.read() == (2, b"second, longer")
        assert doc.publish(b"") == 3 and reader.read() == (3, b"")
        with pytest.raises(ValueError, match="more than"):
            doc.publish(b"x" * 65)
        assert reader.read() == (3, b"")  # the current one stays
    finally:
        reader.close()


def test_a_writer_that_died_mid_write_leaves_the_document_whole(created):
    from hostbroker.shm.published import _LENGTH, _STATE
    doc = created(PublishedDocument, "pdoc", 16, b"ok")
    # killed after filling the idle half and its length, before the flip
    idle = 1 - (doc._words[_STATE] & 1)
    start = doc._half(idle)
    doc.region.buf[start:start + 7] = b"garbage"
    doc._words[_LENGTH + idle] = 7
    assert doc.read() == (1, b"ok") and doc.generation == 1
    assert doc.publish(b"new") == 2  # the next writer writes that half again
    assert doc.read() == (2, b"new")
    assert doc.publish(b"newer") == 3 and doc.read() == (3, b"newer")


def test_a_document_that_never_holds_still_is_said(created):
    from hostbroker.shm.published import _LENGTH, _STATE
    doc = created(PublishedDocument, "pdoc", 16, b"ok")
    doc._words[_LENGTH + (doc._words[_STATE] & 1)] = 17  # no length it can hold
    with pytest.raises(TornDocumentError):
        doc.read()
    doc.publish(b"new")
    assert doc.read() == (2, b"new")


def test_another_structure_is_not_taken_for_one(created, names):
    from hostbroker.shm.stats import ApiStats

    created(ApiStats, "astats")
    with pytest.raises(LayoutError):
        PublishedDocument.attach(names("astats"))
    with pytest.raises(ValueError):
        created(PublishedDocument, "pdoc", 4, b"too long")


def test_a_reader_elsewhere_sees_only_whole_documents(created, names):
    doc = created(PublishedDocument, "pdoc", 4096)
    documents = [bytes([i]) * (i * 13 % 4000 + 1) for i in range(1, 200)]
    known = set(documents) | {b""}

    def read_many(name):
        reader = PublishedDocument.attach(name, readonly=True)
        last = 0
        for _ in range(20_000):
            try:
                generation, document = reader.read()
            except TornDocumentError:
                continue
            assert document in known, len(document)
            assert generation >= last
            last = generation
        reader.close()

    pid = fork(read_many, names("pdoc"))
    for _ in range(20):
        for document in documents:
            doc.publish(document)
    wait_ok(pid, timeout=60)
