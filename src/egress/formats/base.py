"""The Format protocol: how a part of rows becomes bytes, and what frames a file.

A file is ``header + part bytes… + footer``. Everything an encoder writes depends only
on the rows, on how many rows and bytes the file already holds, and on the ``meta`` of
the parts before it (the cross-part state kept in the checkpoint: Parquet's row-group
metadata), never on the clock, so a resumed run writes the same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeAlias

import numpy as np
import pyarrow as pa

#: A part's bytes as an encoder hands them over: ``bytes``, or a read-only pyarrow
#: ``Buffer`` holding them (Parquet: what pyarrow wrote, without a copy). Both are
#: bytes-like for what the engine and the sinks do with a part: ``len``, ``bytes + part``,
#: ``b"".join``, hashlib, google_crc32c and ``os.pwrite``; not ``part + bytes``, and not
#: every library's "bytes" (boto3 takes a file or bytes: sinks/s3.py makes bytes).
PartBytes: TypeAlias = "bytes | pa.Buffer"


class PartEncoder(Protocol):
    """Encodes the batches of one part, in order."""

    def add(self, batch: pa.RecordBatch) -> None: ...

    @property
    def size(self) -> int:
        """Bytes encoded so far (before compression)."""
        ...

    def finish(self) -> PartBytes: ...

    #: What the file's footer will need of this part (set by ``finish``; None: nothing).
    meta: bytes | None


class Format(Protocol):
    name: str
    extension: str
    #: The format compresses inside its files (Parquet): no outer compression.
    inner_compression: bool
    #: Files are a dataset directory ``table/part-00001.ext``, not ``table.ext``.
    dataset: bool
    #: Bytes (as read, in Arrow) a part aims at, instead of the export's part size.
    part_bytes: int | None
    #: Most rows in one part (a row group).
    max_part_rows: int | None
    #: Start a new file at this size when the export sets none.
    file_size: int | None

    def header(self, schema: pa.Schema) -> bytes:
        """Bytes at the start of every output file."""
        ...

    def part_encoder(self, schema: pa.Schema, rows_before: int, offset: int = 0) -> PartEncoder:
        """An encoder for a part that follows ``rows_before`` rows in the same file and
        starts at byte ``offset`` of it."""
        ...

    def footer(self, schema: pa.Schema, rows_in_file: int, metas: Sequence[bytes] = ()) -> bytes:
        """Bytes at the end of every output file; ``metas`` are its parts' ``meta``."""
        ...


class TextFormat:
    """What the text formats (CSV, JSON, SQL) share: framing by header and footer,
    parts of the export's part size, outer compression, one file per table."""

    inner_compression = False
    dataset = False
    part_bytes: int | None = None
    max_part_rows: int | None = None
    file_size: int | None = None


class TextPartEncoder:
    """Collects the encoded bytes of each batch; shared by the text formats."""

    meta: bytes | None = None

    def __init__(self) -> None:
        self._chunks: list[bytes | memoryview] = []
        self._size = 0

    def append(self, data: bytes | memoryview) -> None:
        self._chunks.append(data)
        self._size += len(data)

    @property
    def size(self) -> int:
        return self._size

    def finish(self) -> bytes:
        return b"".join(self._chunks)  # the one copy of the part's bytes


def concat_strings(array: pa.Array) -> bytes | memoryview:
    """All values of a string array, back to back: a view of its data buffer, no copy
    (the part encoder copies every batch's view once, into the part)."""
    if len(array) == 0:
        return b""
    if array.null_count:
        raise ValueError("cannot concatenate a string array with nulls")
    offsets = value_offsets(array)
    data = array.buffers()[2]
    if data is None:  # every value is empty
        return b""
    start, end = int(offsets[0]), int(offsets[-1])
    return memoryview(data.slice(start, end - start))


def value_offsets(array: pa.Array) -> np.ndarray:
    """The offsets of a (slice of a) string or binary array into its data buffer."""
    width = np.int64 if pa.types.is_large_string(array.type) or pa.types.is_large_binary(
        array.type
    ) else np.int32
    offsets = np.frombuffer(array.buffers()[1], dtype=width)
    return offsets[array.offset : array.offset + len(array) + 1]
