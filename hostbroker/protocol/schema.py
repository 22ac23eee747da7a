"""Declaring a protocol structure once and getting its codec from it.

A request or response body is a frozen dataclass whose fields are annotated
with their wire type (``topic: String``, ``offset: Int64``), in wire order, and
decorated with :func:`wire_record` (see :mod:`~hostbroker.protocol.bodies`),
which makes it as ``@dataclass(frozen=True, slots=True)`` would, in a fifth of
the time (:func:`record`). It reads those annotations and attaches a :class:`WireType`
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
import operator
import re
import struct
import sys
from collections.abc import Callable
from typing import Annotated, Any

from hostbroker.errors import ErrorCode, ProtocolError
from hostbroker.protocol.primitives import Buffer, Reader, Writer


@dataclasses.dataclass(frozen=True, slots=True)
class WireType:
    """How one wire type is read and written, and its smallest encoded size.

    ``fixed`` is set for the fixed-size types: ``(struct code, converter or
    None)``, so that :func:`wire_record` reads neighbouring ones in one
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


_EVALUATED: dict[tuple[str, str], Any] = {}


def _annotation(cls: type, field: dataclasses.Field) -> Any:
    """A field's annotation, evaluated in its module once per distinct text
    (what ``typing.get_type_hints`` gives, at a fraction of its cost)."""
    if not isinstance(field.type, str):
        return field.type
    key = (cls.__module__, field.type)
    if key not in _EVALUATED:
        _EVALUATED[key] = eval(field.type, vars(sys.modules[cls.__module__]))  # noqa: S307
    return _EVALUATED[key]


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: Any, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


def _record_eq(self: Any, other: Any) -> Any:
    if other.__class__ is self.__class__:
        return self._record_values(self) == self._record_values(other)
    return NotImplemented


def _record_hash(self: Any) -> int:
    return hash(self._record_values(self))


def _record_repr(self: Any) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._record_names)
    return f"{self.__class__.__qualname__}({shown})"


def _record_getstate(self: Any) -> list[Any]:
    return [getattr(self, name) for name in self._record_names]


def _record_setstate(self: Any, state: list[Any]) -> None:
    for name, value in zip(self._record_names, state):
        object.__setattr__(self, name, value)


_RECORD_METHODS = {
    "__setattr__": _frozen_setattr, "__delattr__": _frozen_delattr, "__eq__": _record_eq,
    "__hash__": _record_hash, "__repr__": _record_repr, "__getstate__": _record_getstate,
    "__setstate__": _record_setstate,
}


def _setter(cls: type, name: str) -> Callable[[Any, Any], None]:
    slot = getattr(cls, name)
    if type(slot).__name__ != "member_descriptor":
        raise TypeError(f"{cls.__name__}.{name} is not a slot")
    return slot.__set__


def _reader_lines(cls: type, field_types: tuple[WireType, ...],
                  env: dict[str, Any]) -> list[str]:
    """The body of ``read(reader)``: field by field in wire order, except that
    neighbouring fixed-size fields are read in one ``struct`` unpack
    (:meth:`Reader.fixed`): a partition of a METADATA answer (five ints, a
    string) is one unpack and one string read, not six calls. The record is
    then made by setting its slots, at a third of the cost of ``__init__``."""
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
    lines.append("o = new(cls)")
    lines += [f"f{j}(o, {arg})" for j, arg in enumerate(args)]
    lines.append("return o")
    return lines


def _make_record(cls: type, wire: bool) -> type:
    undocumented = cls.__doc__ is None
    if undocumented:
        cls.__doc__ = ""  # (dataclass would work one out with inspect, slowly)
    cls = dataclasses.dataclass(cls, init=False, repr=False, eq=False, slots=True)
    fields = dataclasses.fields(cls)
    names = tuple(f.name for f in fields)
    if undocumented:
        cls.__doc__ = f"{cls.__name__}({', '.join(names)})"
    env: dict[str, Any] = {"cls": cls, "new": object.__new__}
    params = []
    for j, f in enumerate(fields):
        if f.default_factory is not dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{f.name}: a record takes no default_factory")
        if re.fullmatch(r"self|cls|new|[fd]\d+", f.name):
            raise TypeError(f"{cls.__name__}.{f.name}: a name the generated __init__ uses")
        env[f"f{j}"] = _setter(cls, f.name)
        if f.default is dataclasses.MISSING:
            params.append(f.name)
        else:
            env[f"d{j}"] = f.default
            params.append(f"{f.name}=d{j}")
    source = (f"def __init__(self, {', '.join(params)}):\n"
              + "".join(f"    f{j}(self, {name})\n" for j, name in enumerate(names))
              + "    pass\n")
    field_types = ()
    if wire:
        field_types = tuple(wire_type_of(_annotation(cls, f)) for f in fields)
        source += "def read(reader):\n" + "".join(
            f"    {line}\n" for line in _reader_lines(cls, field_types, env))
    exec(source, env)  # noqa: S102 - generated from the class's own annotations
    init = env["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = init
    cls._record_names = names
    cls._record_values = (operator.attrgetter(*names) if names
                          else staticmethod(lambda value: ()))
    for name, method in _RECORD_METHODS.items():
        setattr(cls, name, method)
    if wire:
        def write(writer: Writer, value: Any) -> None:
            for name, wire_type in zip(names, field_types):
                wire_type.write(writer, getattr(value, name))

        cls.__wire__ = WireType(cls.__name__, env["read"], write,
                                sum(w.min_size for w in field_types))
    return cls


def record(cls: type) -> type:
    """``cls`` as a frozen, slotted dataclass, as ``@dataclass(frozen=True,
    slots=True)`` makes one: ``dataclasses.fields()`` and ``replace()``, ``==``
    and ``hash`` by field values, its ``repr``, ``FrozenInstanceError`` on an
    assignment; pickled and copied by its fields.

    Made from one generated source (``__init__``, and a :func:`wire_record`'s
    reader) and methods all records share, where ``dataclasses`` compiles six
    functions a class: the protocol's hundred-odd bodies are made at every
    import, by every broker start and every command-line tool, in a fifth of
    the time. A base class of records is a record too; fields take no
    ``default_factory``."""
    return _make_record(cls, wire=False)


def wire_record(cls: type) -> type:
    """A :func:`record` with its codec: ``cls.__wire__``, built from the field
    annotations (their wire types, in wire order)."""
    return _make_record(cls, wire=True)
