"""Declaring a protocol structure once and getting its codec from it.

A request or response body is a frozen dataclass whose fields are annotated
with their wire type (``topic: String``, ``offset: Int64``), in wire order, and
decorated with :func:`wire_struct` (see :mod:`~hostbroker.protocol.bodies`).
:func:`wire_struct` reads those annotations and attaches a :class:`WireType`
(``cls.__wire__``) that reads and writes the structure; ``Array[X]`` is an
int32 count followed by that many ``X``. The declaration is the only place a
layout is written down, so encoder and decoder cannot drift apart.

Strings: ``String`` rejects the null string (length -1) as an invalid request,
because a name such as a topic or group has no null value; ``NullableString``
allows it where "absent" means something (client id, error message, commit
metadata, a broker's host or unix path, a log dir). ``MessageSet`` is the
``bytes`` type and likewise refuses null.

Error codes decode to :class:`ErrorCode` members; a code this version does not
know stays a plain ``int`` rather than failing the whole response.
"""

from __future__ import annotations

import dataclasses
import struct
import typing
from collections.abc import Callable
from typing import Annotated, Any

from hostbroker.errors import ErrorCode, ProtocolError
from hostbroker.protocol.primitives import Buffer, Reader, Writer


@dataclasses.dataclass(frozen=True, slots=True)
class WireType:
    """How one wire type is read and written, and its smallest encoded size.

    ``fixed`` is set for the fixed-size types: ``(struct code, converter or
    None)``, so that :func:`wire_struct` reads neighbouring ones in one
    unpack."""

    name: str
    read: Callable[[Reader], Any]
    write: Callable[[Writer, Any], None]
    min_size: int
    fixed: tuple[str, Callable[[int], Any] | None] | None = None


def _read_string(reader: Reader) -> str:
    value = reader.string()
    if value is None:
        raise ProtocolError("null string where a value is required")
    return value


def _read_message_set(reader: Reader) -> memoryview:
    value = reader.bytes()
    if value is None:
        raise ProtocolError("null message set")
    return value


_CODES = {code.value: code for code in ErrorCode}


def error_code(value: int) -> ErrorCode | int:
    """``value`` as an :class:`ErrorCode` when it is one we know, else as is."""
    return _CODES.get(value, value)


INT8 = WireType("int8", Reader.int8, Writer.int8, 1, ("b", None))
INT16 = WireType("int16", Reader.int16, Writer.int16, 2, ("h", None))
INT32 = WireType("int32", Reader.int32, Writer.int32, 4, ("i", None))
INT64 = WireType("int64", Reader.int64, Writer.int64, 8, ("q", None))
STRING = WireType("string", _read_string, Writer.string, 2)
NULLABLE_STRING = WireType("nullable string", Reader.string, Writer.string, 2)
BYTES = WireType("bytes", _read_message_set, Writer.bytes, 4)
ERROR_CODE = WireType("error code", lambda r: error_code(r.int16()), Writer.int16, 2,
                      ("h", error_code))

Int8 = Annotated[int, INT8]
Int16 = Annotated[int, INT16]
Int32 = Annotated[int, INT32]
Int64 = Annotated[int, INT64]
String = Annotated[str, STRING]
NullableString = Annotated[str | None, NULLABLE_STRING]
MessageSet = Annotated[Buffer, BYTES]
ErrorCodeField = Annotated[ErrorCode | int, ERROR_CODE]


def array_of(item: WireType) -> WireType:
    return WireType(
        f"[{item.name}]",
        lambda reader: reader.array(item.read, item.min_size),
        lambda writer, values: writer.array(values, item.write),
        4,
    )


def wire_type_of(annotation: Any) -> WireType:
    """The wire type behind an annotation: ``Int32``, ``Array[X]`` or a struct."""
    for meta in getattr(annotation, "__metadata__", ()):
        if isinstance(meta, WireType):
            return meta
    wire = getattr(annotation, "__wire__", None)
    if isinstance(wire, WireType):
        return wire
    raise TypeError(f"{annotation!r} has no wire type")


class Array:
    """``Array[X]``: a tuple of ``X`` on the Python side, ``[X]`` on the wire."""

    def __class_getitem__(cls, item: Any) -> Any:
        return Annotated[tuple[item, ...], array_of(wire_type_of(item))]


def _slot_setters(cls: type, names: tuple[str, ...]) -> list | None:
    """Each field's slot setter, when ``cls`` is a slotted dataclass whose
    ``__init__`` does nothing but set its fields (no ``__post_init__``);
    else None."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.init or hasattr(cls, "__post_init__"):
        return None
    slots = [cls.__dict__.get(name) for name in names]
    if not all(type(slot).__name__ == "member_descriptor" for slot in slots):
        return None
    return [slot.__set__ for slot in slots]


def _struct_reader(cls: type, names: tuple[str, ...],
                   field_types: tuple[WireType, ...]) -> Callable[[Reader], Any]:
    """The function that reads a ``cls`` off the wire, field by field in wire
    order, except that neighbouring fixed-size fields are read in one
    ``struct`` unpack (:meth:`Reader.fixed`): a partition of a METADATA answer
    (five ints, a string) is one unpack and one string read, not six calls.
    A slotted dataclass is then made by setting its slots, as its frozen
    ``__init__`` would through ``object.__setattr__``, at a third of the cost.
    Generated as source, as :mod:`dataclasses` does for ``__init__``."""
    env: dict[str, Any] = {"cls": cls, "new": object.__new__}
    lines, args = [], []
    i = 0
    while i < len(field_types):
        run = i
        while run < len(field_types) and field_types[run].fixed is not None:
            run += 1
        if run - i < 2:  # a field of its own
            env[f"r{i}"] = field_types[i].read
            lines.append(f"v{i} = r{i}(reader)")
            args.append(f"v{i}")
            i += 1
            continue
        env[f"s{i}"] = struct.Struct(">" + "".join(w.fixed[0] for w in field_types[i:run]))
        env[f"w{i}"] = f"{cls.__name__} fields"
        lines.append(f"{', '.join(f'v{j}' for j in range(i, run))}, = reader.fixed(s{i}, w{i})")
        for j in range(i, run):
            convert = field_types[j].fixed[1]
            if convert is not None:
                env[f"c{j}"] = convert
            args.append(f"c{j}(v{j})" if convert is not None else f"v{j}")
        i = run
    setters = _slot_setters(cls, names)
    if setters is None:
        lines.append(f"return cls({', '.join(args)})")
    else:
        lines.append("o = new(cls)")
        for j, (setter, arg) in enumerate(zip(setters, args)):
            env[f"f{j}"] = setter
            lines.append(f"f{j}(o, {arg})")
        lines.append("return o")
    source = "def read(reader):\n" + "".join(f"    {line}\n" for line in lines)
    exec(source, env)  # noqa: S102 - generated from the class's own annotations
    return env["read"]


def wire_struct(cls: type) -> type:
    """Attach ``cls.__wire__``, the codec built from the field annotations."""
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = [(f.name, wire_type_of(hints[f.name])) for f in dataclasses.fields(cls)]
    field_types = tuple(wire for _, wire in fields)
    names = tuple(name for name, _ in fields)
    read = _struct_reader(cls, names, field_types)

    def write(writer: Writer, value: Any) -> None:
        for name, wire in zip(names, field_types):
            wire.write(writer, getattr(value, name))

    cls.__wire__ = WireType(cls.__name__, read, write, sum(w.min_size for w in field_types))
    return cls
