"""Parquet: files of many parts, one row group each, whose footer is built from the
parts' metadata; deterministic, and keeping the Arrow schema."""

from __future__ import annotations

import datetime as dt
import decimal
import io
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from egress.formats.parquet import ParquetFormat, planned_dictionary
from egress.formats.thrift_compact import fields, read_int
from egress.sources.base import LOGICAL_TYPE, SOURCE_TYPE

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False, metadata={SOURCE_TYPE: b"INTEGER"}),
    pa.field("price", pa.decimal128(10, 2)),
    pa.field("at", pa.timestamp("us", tz="UTC")),
    pa.field("doc", pa.string(), metadata={LOGICAL_TYPE: b"json"}),
    pa.field("any", pa.sparse_union([pa.field("integer", pa.int64()),
                                     pa.field("text", pa.string())])),
])


def batch(n: int) -> pa.RecordBatch:
    any_values = pa.UnionArray.from_sparse(
        pa.array([i % 2 for i in range(n)], pa.int8()),
        [pa.array([i if i % 2 == 0 else None for i in range(n)], pa.int64()),
         pa.array([f"t{i}" if i % 2 else None for i in range(n)], pa.string())],
        field_names=["integer", "text"],
    )
    return pa.record_batch(
        [pa.array(range(n)), pa.array([decimal.Decimal(i) / 4 for i in range(n)],
                                      pa.decimal128(10, 2)),
         pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.UTC)] * n, pa.timestamp("us", tz="UTC")),
         pa.array(['{"a":1}'] * n), any_values],
        schema=SCHEMA,
    )


def encode(fmt: ParquetFormat, parts: list[list[pa.RecordBatch]],
           schema: pa.Schema = SCHEMA) -> bytes:
    """A file as the engine writes it: header, parts each at its offset, footer."""
    out, rows, metas = fmt.header(schema), 0, []
    for batches in parts:
        enc = fmt.part_encoder(schema, rows, len(out))
        for b in batches:
            enc.add(b)
            rows += b.num_rows
        out += enc.finish()
        assert enc.meta is not None
        metas.append(enc.meta)
    return out + fmt.footer(schema, rows, metas)


def test_a_file_of_parts_has_one_row_group_a_part_and_keeps_the_schema() -> None:
    data = encode(ParquetFormat("zstd"), [[batch(3), batch(2)], [batch(4)], [batch(1)]])
    table = pq.read_table(io.BytesIO(data))
    assert table.num_rows == 10
    assert table.column("id").to_pylist() == [0, 1, 2, 0, 1, 0, 1, 2, 3, 0]
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [5, 4, 1]
    # statistics of each row group are where the reader finds them
    assert meta.row_group(1).column(0).statistics.max == 3
    assert table.schema.field("price").type == pa.decimal128(10, 2)
    assert table.schema.field("at").type == pa.timestamp("us", tz="UTC")
    assert table.schema.field("id").metadata == {SOURCE_TYPE: b"INTEGER"}
    assert table.schema.field("doc").metadata == {LOGICAL_TYPE: b"json"}
    # Parquet has no union: a value of any storage class is written as its text
    assert table.schema.field("any").type == pa.string()
    assert table.column("any").to_pylist()[:5] == ["0", "t1", "2", "0", "t1"]


def test_duckdb_reads_the_file_and_its_row_groups() -> None:
    data = encode(ParquetFormat("zstd"), [[batch(300)], [batch(200)]])
    con = duckdb.connect()
    path = io.BytesIO(data)
    table = pq.read_table(path)
    with open_tmp(data) as name:
        assert con.sql(f"SELECT count(*), sum(id) FROM '{name}'").fetchall() == [
            (500, sum(range(300)) + sum(range(200)))]
        groups = con.sql(
            f"SELECT row_group_id, row_group_num_rows, compression FROM "
            f"parquet_metadata('{name}') WHERE path_in_schema = 'id' ORDER BY 1").fetchall()
    assert groups == [(0, 300, "ZSTD"), (1, 200, "ZSTD")]
    assert table.num_rows == 500


def test_deterministic() -> None:
    parts = [[batch(10)], [batch(7)]]
    assert encode(ParquetFormat(), parts) == encode(ParquetFormat(), parts)


def test_zstd_by_default() -> None:
    meta = pq.ParquetFile(io.BytesIO(encode(ParquetFormat(), [[batch(4)]]))).metadata
    assert meta.row_group(0).column(0).compression == "ZSTD"


@pytest.mark.parametrize(("compression", "codec"), [
    ("none", "UNCOMPRESSED"), ("gzip", "GZIP"), ("zstd", "ZSTD"), ("snappy", "SNAPPY"),
])
def test_the_export_compression_picks_the_codec(compression: str, codec: str) -> None:
    data = encode(ParquetFormat(compression), [[batch(4)], [batch(3)]])
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    assert {meta.row_group(i).column(0).compression for i in range(2)} == {codec}


def page_rows(data: bytes, column: int = 0) -> list[int]:
    """The values of each data page of ``column`` in the file's first row group (page
    headers read with formats/thrift_compact.py: PageHeader's field 3 is the
    compressed size, field 5 the DataPageHeader, whose field 1 is num_values)."""
    chunk = pq.ParquetFile(io.BytesIO(data)).metadata.row_group(0).column(column)
    at = chunk.data_page_offset
    end, pages = at + chunk.total_compressed_size, []
    while at < end:
        header, body = fields(data, at)
        found = {f.id: f for f in header}
        page = {f.id: f for f in fields(data, found[5].start)[0]}
        pages.append(read_int(data, page[1]))
        at = body + read_int(data, found[3])
    return pages


def test_pages_end_where_the_task_says() -> None:
    rows = [[batch(50_000)]]
    # a task planned before page bounds were recorded, or now: Arrow's pages of 20,000 rows
    assert page_rows(encode(ParquetFormat("zstd"), rows)) == [20_000, 20_000, 10_000]
    # pages of up to 3 MiB, however many rows (400 kB of ids here), as tasks planned by
    # 17033bb..aa7d4e7 recorded them
    planned = ParquetFormat("zstd", page_bytes=3 * 2**20, page_rows=1_000_000)
    assert page_rows(encode(planned, rows)) == [50_000]
    small = ParquetFormat("zstd", page_bytes=100_000, page_rows=1_000_000)
    assert len(page_rows(encode(small, rows))) == 4  # 100 kB: 12,500 ids a page
    assert pq.read_table(io.BytesIO(encode(planned, rows))).equals(
        pq.read_table(io.BytesIO(encode(ParquetFormat("zstd"), rows))))


def cut(rows: pa.RecordBatch, sizes: list[int]) -> list[pa.RecordBatch]:
    """``rows`` as batches of ``sizes`` rows (the rest in one more), each its own copy."""
    out, at = [], 0
    for size in [*sizes, rows.num_rows]:
        if at < rows.num_rows:
            out.append(pa.concat_batches([rows.slice(at, size)]))
            at += size
    return out


@pytest.mark.parametrize("fmt", [ParquetFormat("none", page_bytes=100_000, page_rows=10**6),
                                 ParquetFormat("zstd")], ids=["bytes-bound-pages", "zstd"])
def test_a_parts_bytes_do_not_depend_on_where_its_batches_were_cut(fmt: ParquetFormat) -> None:
    # a resumed part may be read in batches cut elsewhere (a source that took another
    # query for a page): its bytes must be those of the uninterrupted run all the same
    rows = batch(45_000)
    cuts = [[], [16_383] * 3, [5_001] * 9, [1, 1023, 1024, 7, 20_000], [1] * 2000 + [30_000]]
    encoded = {encode(fmt, [cut(rows, sizes)]) for sizes in cuts}
    assert len(encoded) == 1
    assert pq.read_table(io.BytesIO(encoded.pop())).column("id").to_pylist() == list(
        range(45_000))
    # pyarrow's own writer does depend on them (pages end between its mini-batches)
    direct = set()
    for sizes in cuts[:3]:
        out = io.BytesIO()
        table = pa.Table.from_batches(cut(rows.drop_columns(["any"]), sizes))
        pq.write_table(table, out, data_page_size=100_000, use_dictionary=False)
        direct.add(out.getvalue())
    assert len(direct) > 1


def test_decimals_are_stored_as_integers_where_the_task_says(tmp_path: Path) -> None:
    wide = pa.schema([pa.field("small", pa.decimal128(9, 2)),
                      pa.field("mid", pa.decimal128(18, 4)),
                      pa.field("big", pa.decimal128(30, 0))])
    values = [decimal.Decimal(i) / 4 for i in range(-500, 500)]
    part = pa.record_batch([pa.array(values, wide[0].type), pa.array(values, wide[1].type),
                            pa.array([v * 4 * 10**20 for v in values], wide[2].type)],
                           schema=wide)

    def written(fmt: ParquetFormat) -> bytes:
        enc = fmt.part_encoder(wide, 0, 4)
        enc.add(part)
        body = enc.finish()
        return fmt.header(wide) + body + fmt.footer(wide, part.num_rows, [enc.meta or b""])

    def physical(data: bytes) -> list[str]:
        chunk = pq.ParquetFile(io.BytesIO(data)).metadata.row_group(0)
        return [chunk.column(i).physical_type for i in range(3)]

    # a task planned before the layout was recorded: Arrow's fixed-length bytes
    legacy = written(ParquetFormat("zstd"))
    assert physical(legacy) == ["FIXED_LEN_BYTE_ARRAY"] * 3
    # a task planned now: INT32 up to 9 digits, INT64 up to 18, bytes beyond
    planned = written(ParquetFormat("zstd", decimal_as_integer=True))
    assert physical(planned) == ["INT32", "INT64", "FIXED_LEN_BYTE_ARRAY"]
    # the same values and types come back, in pyarrow and in DuckDB
    table = pq.read_table(io.BytesIO(planned))
    assert table.schema == wide
    assert table.equals(pq.read_table(io.BytesIO(legacy)))
    assert table.column("mid").to_pylist() == values
    path = tmp_path / "planned.parquet"
    path.write_bytes(planned)
    assert duckdb.sql(
        f"SELECT any_value(typeof(small)), any_value(typeof(mid)), sum(small), min(mid) "
        f"FROM '{path}'"
    ).fetchall() == [("DECIMAL(9,2)", "DECIMAL(18,4)", decimal.Decimal("-125.00"),
                      decimal.Decimal("-125.0000"))]


def test_a_decimal_layout_that_is_not_a_flag_is_refused() -> None:
    with pytest.raises(ValueError, match="decimal_as_integer must be true or false, not 'yes'"):
        ParquetFormat(decimal_as_integer="yes")  # type: ignore[arg-type]


def test_bad_page_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="page_bytes and page_rows must be positive"):
        ParquetFormat(page_rows=0)


def test_an_unknown_codec_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match="known: none, gzip, zstd, snappy"):
        ParquetFormat("lz4")


def test_a_file_of_no_rows_is_a_valid_empty_file() -> None:
    for parts in ([], [[]]):
        table = pq.read_table(io.BytesIO(encode(ParquetFormat(), parts)))
        assert table.num_rows == 0 and table.column_names == SCHEMA.names


def test_a_part_at_another_offset_has_the_same_bytes_and_moved_metadata() -> None:
    fmt = ParquetFormat()
    first, second = fmt.part_encoder(SCHEMA, 0, 4), fmt.part_encoder(SCHEMA, 0, 1004)
    for enc in (first, second):
        enc.add(batch(5))
    assert first.finish() == second.finish()
    assert first.meta != second.meta


def test_a_part_is_handed_on_in_the_buffer_pyarrow_wrote_it_into() -> None:
    from egress.memory import part_buffer_pool

    pool = part_buffer_pool()  # jemalloc's, apart from the heap (egress/memory.py)
    assert pool.backend_name == "jemalloc"
    enc = ParquetFormat("none").part_encoder(SCHEMA, 0)
    enc.add(batch(1000))
    before = pool.bytes_allocated()
    body = enc.finish()
    assert isinstance(body, pa.Buffer) and not body.is_mutable
    assert pool.bytes_allocated() >= before + body.size  # held in that pool
    data = ParquetFormat("none").header(SCHEMA) + body + \
        ParquetFormat("none").footer(SCHEMA, 1000, [enc.meta or b""])
    assert pq.ParquetFile(io.BytesIO(data)).read().num_rows == 1000


def test_a_part_larger_than_its_rows_in_arrow_is_written_again_alike(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """An encoding that outgrows its buffer (here Arrow dictionaries written plain: a
    long word stored once in Arrow, 5,000 times in the file) is written again into
    pieces, with the same bytes as in a buffer with room enough."""
    from egress.formats import parquet as module

    schema = pa.schema([("id", pa.int64()), ("word", pa.dictionary(pa.int32(), pa.string()))])
    rows = pa.record_batch([pa.array(range(5000), pa.int64()),
                            pa.array(["a long repeated value " * 20] * 5000).dictionary_encode()],
                           schema=schema)

    def encoded() -> tuple[object, bytes | None]:
        enc = ParquetFormat("none", dictionary_columns=[]).part_encoder(schema, 0)
        enc.add(rows)
        return enc.finish(), enc.meta

    tight, tight_meta = encoded()
    assert isinstance(tight, bytes)  # the buffer was too small: pieces
    monkeypatch.setattr(module, "ENCODING_ROOM", 1 << 26)
    roomy, roomy_meta = encoded()
    assert isinstance(roomy, pa.Buffer)
    assert roomy.to_pybytes() == tight and roomy_meta == tight_meta


class open_tmp:
    """A named temporary file holding ``data`` (DuckDB reads paths)."""

    def __init__(self, data: bytes) -> None:
        import tempfile
        self._file = tempfile.NamedTemporaryFile(suffix=".parquet")  # noqa: SIM115
        self._file.write(data)
        self._file.flush()

    def __enter__(self) -> str:
        return self._file.name

    def __exit__(self, *exc: object) -> None:
        self._file.close()


def test_an_export_s_footers_need_no_thrift_library() -> None:
    """Parts' footers are moved and merged as bytes (formats/thrift_compact.py):
    writing a Parquet file imports no Thrift library (thriftpy2 is for the tests)."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import io, sys
        import pyarrow as pa, pyarrow.parquet as pq
        from egress.formats.parquet import ParquetFormat
        fmt = ParquetFormat()
        schema = pa.schema([("a", pa.int64())])
        parts, metas, at = [], [], 4
        for rows in ([1, 2], [3]):
            enc = fmt.part_encoder(schema, 0, at)
            enc.add(pa.record_batch([pa.array(rows)], schema=schema))
            parts.append(enc.finish())
            metas.append(enc.meta)
            at += len(parts[-1])
        data = fmt.header(schema) + b"".join(parts) + fmt.footer(schema, 3, metas)
        # (not pq.read_table: its dataset threads can abort a process at exit,
        # apache/arrow#34314)
        print(pq.ParquetFile(io.BytesIO(data)).read().column("a").to_pylist())
        print(sorted(m for m in sys.modules if "thrift" in m and "compact" not in m))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout.splitlines()
    assert out == ["[1, 2, 3]", "[]"]


def _dictionary_pages(data: bytes) -> list[list[str]]:
    """Per row group, the columns written with a dictionary page."""
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    return [[meta.row_group(g).column(c).path_in_schema
             for c in range(meta.num_columns) if meta.row_group(g).column(c).has_dictionary_page]
            for g in range(meta.num_row_groups)]


def test_parts_consider_for_a_dictionary_only_the_columns_the_task_planned() -> None:
    schema = pa.schema([pa.field("few_then_many", pa.int64()),
                        pa.field("many_then_few", pa.string()), pa.field("flag", pa.bool_())])

    def part(n: int, first: bool) -> pa.RecordBatch:
        many = [f"value {i}" for i in range(n)]
        few = [f"kind {i % 3}" for i in range(n)]
        ints = [i % 3 for i in range(n)] if first else list(range(n))
        return pa.record_batch([pa.array(ints), pa.array(many if first else few),
                                pa.array([i % 2 == 0 for i in range(n)])], schema=schema)

    batches = [part(3000, True), part(3000, False), part(3000, True)]
    # planned from the task's first rows: few-valued columns (booleans are bit-packed)
    planned = planned_dictionary(schema, batches[:1])
    assert planned == ["few_then_many"]

    def file_of(fmt: ParquetFormat) -> bytes:
        return encode(fmt, [[b] for b in batches], schema)

    data = file_of(ParquetFormat("none", dictionary_columns=planned))
    # each part checks the planned columns on its own rows; the string column, few-valued
    # only later, stays plain
    assert _dictionary_pages(data) == [["few_then_many"], [], ["few_then_many"]]
    assert pq.read_table(io.BytesIO(data)).equals(pa.Table.from_batches(batches))
    # unplanned (a task planned by an older version), each part chooses among all
    assert _dictionary_pages(file_of(ParquetFormat("none"))) == [
        ["few_then_many"], ["many_then_few"], ["few_then_many"]]
    assert _dictionary_pages(file_of(ParquetFormat("none", dictionary_columns=[]))) == [
        [], [], []]


@pytest.mark.parametrize("bad", ["kind", [1, 2], 7])
def test_dictionary_columns_that_are_not_a_list_of_names_are_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="dictionary_columns must be a list of column names"):
        ParquetFormat("none", dictionary_columns=bad)  # type: ignore[arg-type]
