"""A record (``schema.record`` / ``wire_record``) behaves as the frozen, slotted
dataclass it replaces: the same fields, constructor, equality, hash, repr,
immutability, ``replace``, pickling and copying."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from typing import ClassVar

import pytest

from hostbroker.protocol import api, groups
from hostbroker.protocol.primitives import Reader, Writer
from hostbroker.protocol.schema import Array, Int32, NullableString, String, record, wire_record


@wire_record
class Part:
    topic: String
    partition: Int32


@wire_record
class Body:
    """A body with defaults and an array of records."""

    KIND: ClassVar[int] = 7
    name: String
    parts: Array[Part] = ()
    note: NullableString = None


@dataclasses.dataclass(frozen=True, slots=True)
class Reference:
    """The dataclass a Body stands for."""

    KIND: ClassVar[int] = 7
    name: str
    parts: tuple = ()
    note: str | None = None


@record
class Base:
    group: String
    generation: Int32


@wire_record
class Derived(Base):
    member: String = "m"


def test_fields_constructor_and_defaults_are_the_dataclass_s():
    assert dataclasses.is_dataclass(Body)
    assert [f.name for f in dataclasses.fields(Body)] == ["name", "parts", "note"]
    assert Body.KIND == 7
    body = Body("b", parts=(Part("t", 1),))
    assert (body.name, body.parts, body.note) == ("b", (Part("t", 1),), None)
    assert Body(name="b") == Body("b", (), None)
    with pytest.raises(TypeError):
        Body()
    with pytest.raises(TypeError):
        Body("b", (), None, "one too many")
    with pytest.raises(TypeError):
        Body("b", colour="red")
    assert Body.__match_args__ == ("name", "parts", "note")


def test_equality_hash_and_repr_are_by_field_values():
    a, b = Body("x", (Part("t", 0),)), Body("x", (Part("t", 0),))
    assert a == b and hash(a) == hash(b) and not a != b
    assert a != Body("x", (Part("t", 1),)) and a != Body("y", (Part("t", 0),))
    assert Body("x") != Reference("x")  # another class is never equal, as in a dataclass
    assert {a, b} == {a}
    assert repr(a) == repr(Reference("x", (Part("t", 0),))).replace("Reference", "Body")
    assert repr(Part("t", 3)) == "Part(topic='t', partition=3)"


def test_a_record_is_frozen_and_slotted():
    part = Part("t", 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        part.partition = 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        del part.topic
    with pytest.raises(dataclasses.FrozenInstanceError):
        part.other = 1
    assert not hasattr(part, "__dict__")
    assert part == Part("t", 1)


def test_replace_pickle_and_copy_give_equal_records():
    body = Body("b", (Part("t", 1),), "n")
    assert dataclasses.replace(body, note=None) == Body("b", (Part("t", 1),), None)
    assert dataclasses.asdict(body) == {"name": "b", "parts": ({"topic": "t", "partition": 1},),
                                        "note": "n"}
    for again in (pickle.loads(pickle.dumps(body)), copy.copy(body), copy.deepcopy(body)):
        assert again == body and again is not body and type(again) is Body


def test_a_record_s_subclass_takes_its_fields_first():
    derived = Derived("g", 3)
    assert [f.name for f in dataclasses.fields(Derived)] == ["group", "generation", "member"]
    assert (derived.group, derived.generation, derived.member) == ("g", 3, "m")
    assert derived != Base("g", 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        derived.group = "h"
    writer = Writer()
    Derived.__wire__.write(writer, derived)
    assert Derived.__wire__.read(Reader(writer.getvalue())) == derived


def test_the_codec_reads_what_it_writes_into_a_record():
    body = Body("b", (Part("t", 1), Part("u", 2)), None)
    writer = Writer()
    Body.__wire__.write(writer, body)
    read = Body.__wire__.read(Reader(writer.getvalue()))
    assert read == body and type(read) is Body and type(read.parts[1]) is Part


def test_the_protocol_s_bodies_are_records():
    request = groups.HeartbeatRequest("g", 1, "m")
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.generation = 2
    assert request == groups.HeartbeatRequest("g", 1, "m")
    frame = api.encode_request(api.MetadataRequest(("a", "b")), 5, "c")
    assert api.decode_request(frame[4:])[1] == api.MetadataRequest(("a", "b"))


def test_an_undocumented_record_is_documented_by_its_fields_and_bad_fields_are_refused():
    assert Part.__doc__ == "Part(topic, partition)"
    assert Body.__doc__ == "A body with defaults and an array of records."

    class Named:
        f0: Int32

    with pytest.raises(TypeError, match="Named.f0"):
        record(Named)
