"""Just enough of Thrift's compact protocol to edit encoded structs without decoding them.

Parquet's footer is a Thrift struct in the compact protocol
(https://github.com/apache/thrift/blob/master/doc/specs/thrift-compact-protocol.md).
egress only ever changes a few integers in it (offsets, a row count, row-group ordinals)
and joins lists of row groups, so it reads a struct as the byte spans of its fields and
writes the changed integers back in place of their old encoding: every other byte is
copied as it was, unknown fields included. Decoding the whole footer into objects and
encoding it again (thriftpy2, in pure Python) cost ~3.4 ms a row group, 0.6 s of an
export of 5M rows and ~0.3 s at its end (docs/benchmarks.md, session 27).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, TypeVar

T = TypeVar("T")

STOP, TRUE, FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = range(13)
#: integer types, zigzag varints on the wire
INTEGERS = (I16, I32, I64)


class ThriftError(ValueError):
    """Bytes that are not the compact encoding of a Thrift struct."""


class Field(NamedTuple):
    """One field of an encoded struct: ``data[header:start]`` is its header,
    ``data[start:end]`` its value."""

    id: int
    type: int
    header: int
    start: int
    end: int


#: What a struct walk asks of each field: given its id, type, header and value offsets,
#: the offset after the value if it read the value itself, or None to have it skipped.
Visit = Callable[[int, int, int, int], "int | None"]


def varint(data: bytes, at: int) -> tuple[int, int]:
    """The unsigned varint at ``at`` and the offset after it."""
    byte = data[at]
    if byte < 0x80:
        return byte, at + 1
    value, shift = byte & 0x7F, 7
    while True:
        at += 1
        byte = data[at]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at + 1
        shift += 7
        if shift > 63:
            raise ThriftError("a varint longer than 10 bytes")


def encode_varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_int(data: bytes, field: Field) -> int:
    """An integer field's value (zigzag-decoded)."""
    if field.type not in INTEGERS:
        raise ThriftError(f"field {field.id} is not an integer (type {field.type})")
    return int_at(data, field.start)[0]


def int_at(data: bytes, at: int) -> tuple[int, int]:
    """The integer (zigzag varint) at ``at`` and the offset after it."""
    raw, end = varint(data, at)
    return (raw >> 1) ^ -(raw & 1), end


def encode_int(value: int) -> bytes:
    """An integer's encoding (zigzag, then varint; the same for i16, i32 and i64)."""
    return encode_varint(value << 1 if value >= 0 else (-value << 1) - 1)


def walk(data: bytes, at: int, visit: Visit | None = None,
         spans: list[Field] | None = None) -> int:
    """Walk the struct encoded at ``at``: ``visit`` (if any) is offered each field,
    ``spans`` (if any) gets each field's offsets. Returns the offset after its stop.
    Every byte is read once, and only the fields ``visit`` reads are decoded."""
    last = 0
    while True:
        head = data[at]
        header, at = at, at + 1
        kind = head & 0x0F
        if kind == STOP:
            return at
        if head >> 4:
            last += head >> 4
        else:
            last, at = int_at(data, at)
        end = None if visit is None else visit(last, kind, header, at)
        if end is None:
            end = skip(data, at, kind)
        if spans is not None:
            spans.append(Field(last, kind, header, at, end))
        at = end


def fields(data: bytes, at: int = 0) -> tuple[list[Field], int]:
    """The fields of the struct encoded at ``at``, and the offset after its stop byte."""
    found: list[Field] = []
    end = walk(data, at, spans=found)
    return found, end


def list_header(data: bytes, at: int) -> tuple[int, int, int]:
    """A list's (or set's) element type and size, and where its first element starts."""
    head = data[at]
    size, at = head >> 4, at + 1
    if size == 15:
        size, at = varint(data, at)
    return head & 0x0F, size, at


def encode_list_header(kind: int, size: int) -> bytes:
    return bytes([size << 4 | kind]) if size < 15 else bytes([0xF0 | kind]) + encode_varint(size)


def walk_structs(data: bytes, at: int, each: Callable[[int], int]) -> int:
    """Walk a list of structs at ``at``: ``each`` walks the element at an offset and
    returns the offset after it. Returns the offset after the list."""
    kind, size, at = list_header(data, at)
    if size and kind != STRUCT:
        raise ThriftError(f"a list of type {kind} where structs were expected")
    for _ in range(size):
        at = each(at)
    return at


def skip(data: bytes, at: int, kind: int, element: bool = False) -> int:
    """The offset after a value of type ``kind`` at ``at``."""
    if kind == STRUCT:
        return walk(data, at)
    if kind in INTEGERS:
        while data[at] & 0x80:
            at += 1
        return at + 1
    if kind == BINARY:
        length, at = varint(data, at)
        if at + length > len(data):
            raise ThriftError("a binary value runs past the end of the bytes")
        return at + length
    if kind in (LIST, SET):
        item, size, at = list_header(data, at)
        if item in INTEGERS:
            for _ in range(size):
                while data[at] & 0x80:
                    at += 1
                at += 1
            return at
        for _ in range(size):
            at = skip(data, at, item, element=True)
        return at
    if kind in (TRUE, FALSE):
        return at + 1 if element else at  # a field's boolean is in its header
    if kind == BYTE:
        return at + 1
    if kind == DOUBLE:
        return at + 8
    if kind == MAP:
        size, at = varint(data, at)
        if size:
            types, at = data[at], at + 1
            for _ in range(size):
                at = skip(data, at, types >> 4, element=True)
                at = skip(data, at, types & 0x0F, element=True)
        return at
    raise ThriftError(f"unknown Thrift compact type {kind}")


def checked(read: Callable[[], T]) -> T:
    """``read()``, bytes that end too soon refused as not Thrift."""
    try:
        return read()
    except IndexError:
        raise ThriftError("a Thrift struct runs past the end of the bytes") from None


class Edit:
    """Bytes with some of their spans replaced, put together once."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._changes: list[tuple[int, int, bytes]] = []

    def replace(self, start: int, end: int, by: bytes) -> None:
        self._changes.append((start, end, by))

    def result(self, start: int = 0, end: int | None = None) -> bytes:
        """``data[start:end]`` with the replacements (all inside that span) made."""
        end = len(self._data) if end is None else end
        out: list[bytes] = []
        at = start
        for lo, hi, by in sorted(self._changes, key=lambda c: c[0]):
            out += (self._data[at:lo], by)
            at = hi
        out.append(self._data[at:end])
        return b"".join(out)
