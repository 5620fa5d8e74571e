"""The stitched split's pieces: range k's encoders continue the single task's file."""

from __future__ import annotations

import pyarrow as pa

from egress.engine.stitch import chunk_bounds
from egress.formats import make_format
from egress.formats.parquet_footer import moved

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def _batch(lo: int, hi: int) -> pa.RecordBatch:
    ids = list(range(lo, hi))
    return pa.record_batch([pa.array(ids, pa.int64()), pa.array([f"n{i}" for i in ids])],
                           schema=SCHEMA)


def _chunk(fmt: object, rows_before: int, offset: int, lo: int, hi: int) -> tuple[bytes, object]:
    enc = fmt.part_encoder(SCHEMA, rows_before, offset)  # type: ignore[attr-defined]
    enc.add(_batch(lo, hi))
    return enc.finish(), enc.meta


def test_chunk_bounds_are_whole_chunks_counted_from_the_first_row() -> None:
    assert chunk_bounds(30_000, 1700, 4) == [4 * 1700, 9 * 1700, 13 * 1700]  # 18 chunks
    assert chunk_bounds(3000, 1000, 4) == [1000, 2000]  # fewer ranges than chunks allow
    assert chunk_bounds(1000, 1000, 4) == []  # one chunk: not split
    assert chunk_bounds(0, 1000, 4) == []


def test_json_range_continues_the_array_at_its_first_row() -> None:
    fmt = make_format("json", {})
    whole = fmt.header(SCHEMA) + _chunk(fmt, 0, 0, 0, 10)[0] + _chunk(fmt, 10, 0, 10, 20)[0]
    first = fmt.header(SCHEMA) + _chunk(fmt, 0, 0, 0, 10)[0]
    second = _chunk(fmt, 10, 0, 10, 20)[0]  # range 2: no header, its rows after ",\n"
    assert first + second == whole
    assert second.startswith(b",\n{")


def test_sql_statements_restart_with_each_chunk() -> None:
    fmt = make_format("sql", {"table": "t", "rows_per_insert": 3})
    assert _chunk(fmt, 0, 0, 10, 20)[0] == _chunk(fmt, 10, 0, 10, 20)[0]


def test_parquet_piece_footer_moved_by_the_bytes_before_it() -> None:
    fmt = make_format("parquet", {"compression": "zstd"})
    b1, m1 = _chunk(fmt, 0, 4, 0, 100)
    b2, m2 = _chunk(fmt, 100, 4 + len(b1), 100, 200)  # the single task's second chunk
    p2, q2 = _chunk(fmt, 100, 0, 100, 200)  # the same rows, first in a range's piece
    assert p2 == b2  # pages hold no offsets
    assert moved(q2, 4 + len(b1)) == m2  # type: ignore[arg-type]
    tail = fmt.footer(SCHEMA, 200, [m1, moved(q2, 4 + len(b1))])  # type: ignore[list-item]
    import io

    import pyarrow.parquet as pq

    table = pq.read_table(io.BytesIO(fmt.header(SCHEMA) + b1 + p2 + tail))
    assert table.column("id").to_pylist() == list(range(200))


def test_local_stitch_killed_midway_leaves_no_final_file_and_redoes(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import hashlib

    import pytest

    from egress.sinks import local
    from egress.sinks.local import LocalSink

    sink = LocalSink(tmp_path, fsync=False)
    pieces = []
    for k, data in enumerate([b"a" * 1000, b"b" * 10, b"", b"c" * 5000]):
        name = f".egress/ranges/t.csv.r0{k + 1}"
        (tmp_path / ".egress/ranges").mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
        pieces.append((name, len(data)))
    want = b"a" * 1000 + b"b" * 10 + b"c" * 5000 + b"END"
    calls = []
    real = local._append_file

    def dying(source, fd, offset, size):  # type: ignore[no-untyped-def]
        calls.append(source)
        if len(calls) == 2:
            raise KeyboardInterrupt  # stands for a kill in the middle of the copy
        return real(source, fd, offset, size)

    monkeypatch.setattr(local, "_append_file", dying)
    with pytest.raises(KeyboardInterrupt):
        sink.stitch_file("t.csv", pieces, b"END", len(want))
    assert not (tmp_path / "t.csv").exists()  # never a half file under the final name
    assert all((tmp_path / p).exists() for p, _ in pieces)
    monkeypatch.setattr(local, "_append_file", real)
    sha = sink.stitch_file("t.csv", pieces, b"END", len(want))
    assert (tmp_path / "t.csv").read_bytes() == want
    assert sha == hashlib.sha256(want).hexdigest()
    assert not any((tmp_path / p).exists() for p, _ in pieces)
    # a redo after the pieces are gone (a kill after the rename, or a second finalizer)
    assert sink.stitch_file("t.csv", pieces, b"END", len(want)) == sha
    sink.remove_staging()
    assert not (tmp_path / ".egress").exists()
