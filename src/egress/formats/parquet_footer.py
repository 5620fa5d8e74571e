"""Parquet footers built from the row groups of separately encoded parts.

A Parquet file is ``PAR1``, row groups, then a footer (Thrift ``FileMetaData``) that
says where each row group's pages start. egress encodes each part as a small file of
its own with pyarrow and keeps only its row groups' bytes, which do not depend on where
they land (pages hold no file offsets): the offsets live in the footer alone. So a part
can be written, committed and forgotten; its row-group metadata, moved to the part's
offset in the real file, is kept in the checkpoint; and the file's footer is those
metadata put together, whichever process writes it. pyarrow can neither write a row
group at an offset nor edit a footer, so the footer's bytes are edited here
(``thrift_compact``): the offsets and counts that change are written anew, every other
byte is kept as pyarrow wrote it. Field numbers are parquet-format's
(``parquet.thrift``, vendored unchanged, for reference and the tests).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from egress.formats.thrift_compact import (
    I16,
    I64,
    LIST,
    STRUCT,
    Edit,
    Field,
    ThriftError,
    Visit,
    checked,
    encode_int,
    encode_list_header,
    int_at,
    walk,
    walk_structs,
)

MAGIC = b"PAR1"
_TAIL = struct.Struct("<i")  # footer length, then MAGIC

# parquet-format's field numbers
_META_NUM_ROWS, _META_ROW_GROUPS = 3, 4  # FileMetaData
_GROUP_COLUMNS, _GROUP_FILE_OFFSET, _GROUP_ORDINAL = 1, 5, 7  # RowGroup
_CHUNK_FILE_OFFSET, _CHUNK_META = 2, 3  # ColumnChunk
_CHUNK_PAGE_INDEXES = {4: "offset_index_offset", 6: "column_index_offset"}
#: ColumnMetaData: data_page_offset, index_page_offset, dictionary_page_offset,
#: bloom_filter_offset
_COLUMN_OFFSETS = (9, 10, 11, 14)


class CollectedFile:
    """A file object that pyarrow writes a Parquet file into, kept as the pieces written:
    ``split`` joins the row groups' bytes once (no growing buffer to copy as it grows,
    no second copy to cut the magic and footer off: a part's bytes are a large share
    of an export's memory)."""

    def __init__(self) -> None:
        self._pieces: list[bytes] = []
        self._size = 0
        self.closed = False

    def write(self, data: bytes) -> int:
        self._pieces.append(bytes(data))
        self._size += len(data)
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def split(self) -> tuple[bytes, bytes]:
        """The row groups' bytes and the footer (Thrift bytes) of the file written."""
        head = b"".join(self._pieces[:4])[:4]
        tail = b"".join(self._pieces[-3:])[-8:]
        start, end, length = _bounds(head, tail, self._size)
        body: list[bytes] = []
        footer: list[bytes] = []
        at = 0
        for piece in self._pieces:
            # the parts of this piece that fall in [start, end) and in [end, end + length)
            for lo, hi, into in ((start, end, body), (end, end + length, footer)):
                a, b = max(lo, at), min(hi, at + len(piece))
                if a < b:
                    into.append(piece if (a, b) == (at, at + len(piece))
                                else piece[a - at : b - at])
            at += len(piece)
        self._pieces = []
        return b"".join(body), b"".join(footer)


def _bounds(head: bytes, tail: bytes, size: int) -> tuple[int, int, int]:
    """Where a whole Parquet file of ``size`` bytes, beginning with ``head`` and ending
    with ``tail`` (its last 8 bytes), has its row groups ([start, end)) and its footer's
    length."""
    if size < 12 or head[:4] != MAGIC or tail[4:] != MAGIC:
        raise ValueError("not a whole Parquet file")
    (length,) = _TAIL.unpack(tail[:4])
    if not 0 <= length <= size - 12:
        raise ValueError("not a whole Parquet file: its footer's length is wrong")
    return len(MAGIC), size - 8 - length, length


def split_file(data: Any) -> tuple[Any, bytes]:
    """The row groups and the footer of the whole Parquet file ``data`` (a pyarrow
    Buffer): the row groups as a slice of it (no copy), the footer as bytes."""
    start, end, length = _bounds(data.slice(0, 4).to_pybytes(),
                                 data.slice(max(data.size - 8, 0)).to_pybytes(), data.size)
    return data.slice(start, end - start), data.slice(end, length).to_pybytes()


def moved(footer: bytes, delta: int) -> bytes:
    """``footer`` with every file offset of its row groups moved by ``delta`` bytes."""
    edit = Edit(footer)

    def shift(start: int) -> int:
        value, end = int_at(footer, start)
        edit.replace(start, end, encode_int(value + delta))
        return end

    def column_meta(number: int, kind: int, header: int, start: int) -> int | None:
        return shift(start) if number in _COLUMN_OFFSETS and kind == I64 else None

    def chunk(number: int, kind: int, header: int, start: int) -> int | None:
        if number in _CHUNK_PAGE_INDEXES:
            # page indexes are not written (write_page_index=False): nothing moves them
            raise ValueError("cannot move a Parquet footer that has page indexes")
        if number == _CHUNK_FILE_OFFSET and kind == I64:
            value, end = int_at(footer, start)
            return shift(start) if value else end  # 0: not set (deprecated, optional)
        if number == _CHUNK_META and kind == STRUCT:
            return walk(footer, start, column_meta)
        return None

    def group(number: int, kind: int, header: int, start: int) -> int | None:
        if number == _GROUP_FILE_OFFSET and kind == I64:
            return shift(start)
        if number == _GROUP_COLUMNS and kind == LIST:
            return walk_structs(footer, start, lambda at: walk(footer, at, chunk))
        return None

    def top(number: int, kind: int, header: int, start: int) -> int | None:
        if number == _META_ROW_GROUPS and kind == LIST:
            return walk_structs(footer, start, lambda at: walk(footer, at, group))
        return None

    _whole_footer(footer, top)
    return edit.result()


def _whole_footer(footer: bytes, visit: Visit, spans: list[Field] | None = None) -> None:
    """Walk the whole footer with ``visit`` (its top-level fields into ``spans``, if
    given); bytes that are not one struct are refused."""
    end = checked(lambda: walk(footer, 0, visit, spans))
    if end != len(footer):
        raise ThriftError("bytes left after the footer's struct")


def merged(footers: Sequence[bytes]) -> bytes:
    """One footer with the row groups of ``footers``, in order (their offsets are
    already where the groups are in the file); the schema and key-value metadata are
    the first one's (every part of a file has the same)."""
    if not footers:
        raise ValueError("no footers to merge")
    return _merged(tuple(footers))


@lru_cache(maxsize=2)  # the planning dry run and the commit ask for the same footer
def _merged(footers: tuple[bytes, ...]) -> bytes:
    groups: list[bytes] = []
    rows, first = _take_row_groups(footers[0], groups)
    rows += sum(_take_row_groups(footer, groups)[0] for footer in footers[1:])
    head = footers[0]
    out: list[bytes] = []
    for f in first:  # the first footer's fields, in its order
        out.append(head[f.header:f.start])
        if f.id == _META_NUM_ROWS:
            out.append(encode_int(rows))
        elif f.id == _META_ROW_GROUPS:
            out += (encode_list_header(STRUCT, len(groups)), *groups)
        else:
            out.append(head[f.start:f.end])
    out.append(b"\x00")  # the struct's stop
    return b"".join(out)


def _take_row_groups(footer: bytes, groups: list[bytes]) -> tuple[int, list[Field]]:
    """Append ``footer``'s row groups to ``groups``, each with its ordinal (its place in
    the file: the same in every footer it is in) renumbered; return its row count and
    its top-level fields."""
    rows = 0

    def group_at(at: int) -> int:
        edit = Edit(footer)

        def ordinal(number: int, kind: int, header: int, start: int) -> int | None:
            if number != _GROUP_ORDINAL or kind != I16:
                return None
            end = int_at(footer, start)[1]
            edit.replace(start, end, encode_int(len(groups)))
            return end

        end = walk(footer, at, ordinal)
        groups.append(edit.result(at, end))
        return end

    def top(number: int, kind: int, header: int, start: int) -> int | None:
        nonlocal rows
        if number == _META_NUM_ROWS and kind == I64:
            rows, end = int_at(footer, start)
            return end
        if number == _META_ROW_GROUPS and kind == LIST:
            return walk_structs(footer, start, group_at)
        return None

    spans: list[Field] = []
    _whole_footer(footer, top, spans)
    if not any(f.id == _META_ROW_GROUPS for f in spans):
        raise ValueError("not a Parquet footer: no list of row groups")
    return rows, spans


def file_tail(footer: bytes) -> bytes:
    """What ends a file whose footer is ``footer``."""
    return footer + _TAIL.pack(len(footer)) + MAGIC
