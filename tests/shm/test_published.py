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


def test_a_writer_that_died_mid_write_is_ended_by_the_next(created):
    doc = created(PublishedDocument, "pdoc", 16, b"ok")
    doc._words[2] += 1  # seq odd: as a writer killed between its two stores leaves it
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
