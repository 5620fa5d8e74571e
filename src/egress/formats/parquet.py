"""Parquet: a dataset of large files, each spanning many parts, one row group a part.

A part is encoded by pyarrow as a small file of its own; its row groups' bytes go into
the real file as they are and its footer, moved to where the part lands, is kept in the
checkpoint (``parquet_footer``). The file's footer is written with its last part from
all the parts' footers, so a resumed file is byte-identical to an uninterrupted one and
nothing is ever re-encoded. The footer carries statistics, dictionaries and the codec.

The schema (decimals, time zones, lists, field metadata) is kept as Arrow wrote it,
except that Parquet has no union type: a column whose values keep their own storage
class (SQLite without a declared type) is written as text, as CSV writes it.
Parquet compresses inside the file, so the export's compression picks the codec.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from egress.formats import render
from egress.formats.base import PartBytes
from egress.formats.parquet_codecs import CODECS, DEFAULT_CODEC
from egress.formats.parquet_footer import (
    MAGIC,
    CollectedFile,
    file_tail,
    merged,
    moved,
    split_file,
)
from egress.memory import part_buffer_pool

__all__ = ["CODECS", "DEFAULT_CODEC", "ParquetFormat", "planned_dictionary", "planned_options"]
MiB = 1024 * 1024
#: A row group ends at this many rows or once its rows hold this many bytes in Arrow,
#: whichever comes first. pyarrow encodes a row group from rows held in memory (and a
#: PostgreSQL page is read whole), so its size is most of an export's memory: 16 MiB
#: (55k rows of the bench's 310-byte rows) keeps a SQLite export under 200 MB of peak
#: RSS (PostgreSQL: 187-232 MB); see docs/formats.md.
ROW_GROUP_ROWS = 1_000_000
ROW_GROUP_BYTES = 16 * MiB
#: Uncompressed, a row group's encoding is as large as its rows, and both are held
#: while it is written: half the bytes keep the same peak.
ROW_GROUP_BYTES_UNCOMPRESSED = 8 * MiB
#: zstd's own default level: smaller than Arrow's level 1 at the same speed (bench table)
ZSTD_LEVEL = 3
#: A new file starts once a file holds this many bytes (``--max-file-size`` overrides).
FILE_SIZE = 512 * MiB
#: Arrow's own page bounds: a page ends at 1 MiB or 20,000 rows. A task planned before
#: egress recorded its pages was written with them (so a resume keeps them), and
#: compressed tasks planned now record them. Pages of 3 MiB with no row bound (recorded in
#: the tasks planned by commits 17033bb..aa7d4e7) wrote 9 % less on version 1 of the
#: bench table, whose generated columns repeat at long distances, but only 0.1 % less on
#: version 2 (hashed values), for 10 MB more peak RSS: past 200 MB at 5M rows from SQLite
#: (docs/benchmarks.md).
ARROW_PAGE_BYTES = 1 * MiB
ARROW_PAGE_ROWS = 20_000
#: Room in a part's buffer beyond its rows' Arrow bytes, for page headers, levels,
#: statistics and the footer; an encoding larger still is written again into pieces.
ENCODING_ROOM = 1 * MiB
#: Uncompressed, a page's size changes the file by 0.02 %; its buffers still cost memory.
PAGE_BYTES_UNCOMPRESSED = 1 * MiB
#: pyarrow's writer encodes a chunk of rows in mini-batches of this many rows (its
#: ``write_batch_size``), counted from the chunk's start, and ends a page only between
#: two of them. A part is handed to it in chunks of a multiple of this many rows (but
#: the last), so its bytes do not depend on where a source cut its batches: a resumed
#: part is encoded alike even if its batches were cut elsewhere.
WRITE_BATCH_ROWS = 1024


def planned_options(codec: str) -> dict[str, int | bool]:
    """The layout the planner records in a new task with ``codec``.

    Page bounds, and, compressed, decimals of up to 18 digits stored as integers
    (``INT32``/``INT64``, as DuckDB and Spark write them): their high zero bytes compress
    away: the bench's ``numeric(12,2)`` column took 2.65 MB under zstd, against 2.94 MB as
    fixed-length bytes (1M rows from PostgreSQL). Uncompressed, the 6 bytes of a
    ``decimal(12,2)`` are fewer than an ``INT64``'s 8, so the bytes stay.
    """
    if codec == "none":
        return {"page_bytes": PAGE_BYTES_UNCOMPRESSED, "page_rows": ROW_GROUP_ROWS,
                "decimal_as_integer": False}
    return {"page_bytes": ARROW_PAGE_BYTES, "page_rows": ARROW_PAGE_ROWS,
            "decimal_as_integer": True}


class ParquetFormat:
    name = "parquet"
    extension = "parquet"
    inner_compression = True
    dataset = True

    def __init__(
        self,
        compression: str = DEFAULT_CODEC,
        row_group_rows: int = ROW_GROUP_ROWS,
        row_group_bytes: int | None = None,
        page_bytes: int = ARROW_PAGE_BYTES,
        page_rows: int = ARROW_PAGE_ROWS,
        decimal_as_integer: bool = False,
        dictionary_columns: Sequence[str] | None = None,
    ) -> None:
        if compression not in CODECS:
            raise ValueError(f"unknown Parquet codec {compression!r} (known: "
                             f"{', '.join(CODECS)})")
        if row_group_bytes is None:
            row_group_bytes = (ROW_GROUP_BYTES_UNCOMPRESSED if compression == "none"
                               else ROW_GROUP_BYTES)
        if min(row_group_rows, row_group_bytes, page_bytes, page_rows) < 1:
            raise ValueError("row_group_rows, row_group_bytes, page_bytes and page_rows "
                             "must be positive")
        if not isinstance(decimal_as_integer, bool):
            raise ValueError(f"decimal_as_integer must be true or false, not "
                             f"{decimal_as_integer!r}")
        if dictionary_columns is not None and (
            not isinstance(dictionary_columns, list | tuple | frozenset)
            or not all(isinstance(c, str) for c in dictionary_columns)
        ):
            raise ValueError(f"dictionary_columns must be a list of column names, not "
                             f"{dictionary_columns!r}")
        #: the columns a part may dictionary-encode (see dictionary_columns); None: any
        self.dictionary_among = (None if dictionary_columns is None
                                 else frozenset(dictionary_columns))
        self.codec = CODECS[compression]
        # the defaults are the layout of a task planned before egress recorded one
        self.layout = _Layout(page_bytes, page_rows, decimal_as_integer)
        self.part_bytes: int | None = row_group_bytes
        self.max_part_rows: int | None = row_group_rows
        self.file_size: int | None = FILE_SIZE

    def header(self, schema: pa.Schema) -> bytes:
        return MAGIC

    def part_encoder(self, schema: pa.Schema, rows_before: int, offset: int = 4) -> _ParquetPart:
        return _ParquetPart(schema, self.codec, offset, self.layout, self.dictionary_among)

    def footer(self, schema: pa.Schema, rows_in_file: int, metas: Sequence[bytes] = ()) -> bytes:
        """The end of a file whose parts' footers are ``metas``, in order."""
        if not metas:  # a file of no part: what an empty part's footer would be
            empty = self.part_encoder(schema, 0)
            empty.finish()
            metas = [empty.meta or b""]
        return file_tail(merged(list(metas)))


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


#: Rows of a part that decide which of its columns are dictionary-encoded.
DICTIONARY_SAMPLE = 10_000


def dictionary_columns(table: pa.Table, among: Collection[str] | None = None) -> list[str]:
    """The columns worth a dictionary: at most one distinct value in two among the
    first rows. Trying one on every column (pyarrow's default) costs the hashing of
    unique values until the dictionary outgrows its page, then falls back; on the bench
    table that was 2.3× the encoding time and 14 % more bytes. Decided from the part's
    own rows, so a resumed part is encoded alike.

    ``among``: the only columns considered (the task's plan: ``planned_dictionary``).
    Counting the distinct values of every column of every part took ~10 ms a part of the
    bench table, 0.9 s of the encoder's CPU in 5M rows, nearly all on columns never
    chosen (keys, timestamps, free text)."""
    sample = table.slice(0, DICTIONARY_SAMPLE)
    wanted = []
    for field, column in zip(sample.schema, sample.columns, strict=True):
        kind = field.type
        if len(column) == 0 or pa.types.is_boolean(kind) or pa.types.is_nested(kind):
            continue  # booleans are bit-packed; nested columns have their own paths
        if among is not None and field.name not in among:
            continue
        if pc.count_distinct(column, mode="all").as_py() * 2 <= len(column):
            wanted.append(field.name)
    return wanted


def planned_dictionary(schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> list[str]:
    """The columns a task's parts may dictionary-encode, planned once from its first
    rows (``batches``: up to DICTIONARY_SAMPLE of them, of ``schema``): those a part
    beginning with these rows would choose. A column many-valued there stays plain in
    every part of the task; each part checks the chosen ones again on its own rows."""
    part = _ParquetPart(schema, "none", 4, _Layout(1, 1, False))
    for batch in batches:
        part.add(batch)
    return dictionary_columns(part.table())


@dataclass(frozen=True)
class _Layout:
    """How a task's parts are written: where a data page ends (at this many encoded
    bytes or rows), and whether decimals of up to 18 digits are stored as integers."""

    page_bytes: int
    page_rows: int
    decimal_as_integer: bool


class _ParquetPart:
    """The rows of one part as one row group, for the file at byte ``offset``."""

    def __init__(self, schema: pa.Schema, codec: str, offset: int, layout: _Layout,
                 among: Collection[str] | None = None) -> None:
        self._schema, self._codec, self._offset = parquet_schema(schema), codec, offset
        self._layout, self._among = layout, among
        self._unions = [i for i, f in enumerate(schema) if pa.types.is_union(f.type)]
        #: chunks of a multiple of WRITE_BATCH_ROWS rows, and the rows short of the next
        self._batches: list[pa.RecordBatch] = []
        self._short: list[pa.RecordBatch] = []
        self._size = 0
        #: the part's footer (Thrift), its offsets where the part lands; set by finish
        self.meta: bytes | None = None

    def add(self, batch: pa.RecordBatch) -> None:
        if self._unions:
            columns = list(batch.columns)
            for i in self._unions:
                columns[i] = render.text(columns[i], batch.schema.field(i))
            batch = pa.RecordBatch.from_arrays(columns, schema=self._schema)
        self._size += batch.nbytes
        if self._short:  # complete the short chunk first: a copy of under 1,024 rows
            have = sum(b.num_rows for b in self._short)
            head = batch.slice(0, WRITE_BATCH_ROWS - have)
            self._short.append(head)
            batch = batch.slice(head.num_rows)
            if have + head.num_rows < WRITE_BATCH_ROWS:
                return
            self._batches.append(pa.concat_batches(self._short))
            self._short = []
        whole = batch.num_rows - batch.num_rows % WRITE_BATCH_ROWS
        if whole:
            self._batches.append(batch.slice(0, whole))
        if whole < batch.num_rows:
            self._short = [batch.slice(whole)]

    @property
    def size(self) -> int:
        return self._size

    def table(self) -> pa.Table:
        """The rows added, as the encoder hands them to pyarrow."""
        return pa.Table.from_batches(self._batches + self._short, schema=self._schema)

    def finish(self) -> PartBytes:
        """The row group's bytes: a read-only view of the buffer pyarrow wrote them
        into (no copy), or bytes if they outgrew it."""
        if self._short:
            self._batches.append(pa.concat_batches(self._short))
        table = pa.Table.from_batches(self._batches, schema=self._schema)
        self._batches = self._short = []  # the encoded row group replaces them in memory
        use_dictionary = dictionary_columns(table, self._among)
        # pyarrow writes into a buffer sized for the rows (memory it does not touch is
        # never paged in); joining a part's pieces instead copied ~8 MB a part, 0.5 s of
        # CPU in 5M rows uncompressed (docs/benchmarks.md, session 27)
        buffer = pa.allocate_buffer(self._size + ENCODING_ROOM, memory_pool=part_buffer_pool())
        sink = pa.FixedSizeBufferWriter(buffer)
        try:
            self._write(table, use_dictionary, sink)
            body, footer = split_file(buffer.slice(0, sink.tell()))
        except OSError as exc:
            if "out of bounds" not in str(exc):
                raise
            # larger than its rows in Arrow (say, Arrow dictionaries written plain):
            # written again, into pieces; the same bytes
            pieces = CollectedFile()
            self._write(table, use_dictionary, pieces)
            body, footer = pieces.split()
        del table
        # the row group starts right after the magic in its own file, at offset in ours
        self.meta = moved(footer, self._offset - len(MAGIC))
        return body

    def _write(self, table: pa.Table, use_dictionary: list[str], sink: object) -> None:
        with pq.ParquetWriter(sink, self._schema, compression=self._codec,
                              write_batch_size=WRITE_BATCH_ROWS,
                              compression_level=ZSTD_LEVEL if self._codec == "zstd" else None,
                              use_dictionary=use_dictionary,
                              data_page_size=self._layout.page_bytes,
                              max_rows_per_page=self._layout.page_rows,
                              store_decimal_as_integer=self._layout.decimal_as_integer,
                              write_statistics=True, write_page_index=False) as writer:
            if table.num_rows:  # no rows: a file of no row group
                writer.write_table(table, row_group_size=table.num_rows)
