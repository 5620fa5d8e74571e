"""Parquet: a dataset of part files, each a complete file with its own footer.

The schema (decimals, time zones, lists, field metadata) is kept as Arrow wrote it,
except that Parquet has no union type: a column whose values keep their own storage
class (SQLite without a declared type) is written as text, as CSV writes it.
Parquet compresses inside the file, so the export's compression picks the codec.
"""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq

from egress.formats import render

CODECS = {"none": "none", "gzip": "gzip", "zstd": "zstd", "snappy": "snappy"}


class ParquetFormat:
    name = "parquet"
    extension = "parquet"
    self_contained = True

    def __init__(self, compression: str = "snappy") -> None:
        self.codec = CODECS.get(compression, "snappy")

    def header(self, schema: pa.Schema) -> bytes:
        return b""

    def footer(self, schema: pa.Schema, rows_in_file: int) -> bytes:
        return b""

    def part_encoder(self, schema: pa.Schema, rows_before: int) -> _ParquetPart:
        return _ParquetPart(schema, self.codec)


def parquet_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with each union column as a string column (Parquet has no unions)."""
    return pa.schema(
        [
            pa.field(f.name, pa.string(), f.nullable, f.metadata) if pa.types.is_union(f.type)
            else f
            for f in schema
        ],
        metadata=schema.metadata,
    )


class _ParquetPart:
    def __init__(self, schema: pa.Schema, codec: str) -> None:
        self._schema, self._codec = parquet_schema(schema), codec
        self._unions = [i for i, f in enumerate(schema) if pa.types.is_union(f.type)]
        self._batches: list[pa.RecordBatch] = []
        self._size = 0

    def add(self, batch: pa.RecordBatch) -> None:
        if self._unions:
            columns = list(batch.columns)
            for i in self._unions:
                columns[i] = render.text(columns[i], batch.schema.field(i))
            batch = pa.RecordBatch.from_arrays(columns, schema=self._schema)
        self._batches.append(batch)
        self._size += batch.nbytes

    @property
    def size(self) -> int:
        return self._size

    def finish(self) -> bytes:
        table = pa.Table.from_batches(self._batches, schema=self._schema)
        out = io.BytesIO()
        pq.write_table(table, out, compression=self._codec, row_group_size=max(1, len(table)))
        return out.getvalue()
