"""The Format protocol: how a part of rows becomes bytes, and what frames a file.

A file is ``header + part bytes… + footer``. Everything an encoder writes depends only
on the rows and on how many rows the file already holds (the cross-part state kept in
the checkpoint), never on the clock, so a resumed run writes the same bytes.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import pyarrow as pa


class PartEncoder(Protocol):
    """Encodes the batches of one part, in order."""

    def add(self, batch: pa.RecordBatch) -> None: ...

    @property
    def size(self) -> int:
        """Bytes encoded so far (before compression)."""
        ...

    def finish(self) -> bytes: ...


class Format(Protocol):
    name: str
    extension: str
    #: Each part is a complete file of its own (Parquet); no header, footer or compression.
    self_contained: bool

    def header(self, schema: pa.Schema) -> bytes:
        """Bytes at the start of every output file."""
        ...

    def part_encoder(self, schema: pa.Schema, rows_before: int) -> PartEncoder:
        """An encoder for a part that follows ``rows_before`` rows in the same file."""
        ...

    def footer(self, schema: pa.Schema, rows_in_file: int) -> bytes:
        """Bytes at the end of every output file."""
        ...


class TextPartEncoder:
    """Collects the encoded bytes of each batch; shared by the text formats."""

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
