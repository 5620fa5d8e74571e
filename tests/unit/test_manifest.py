"""The manifest names keys as the user knows them and writes every key value as JSON."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import sqlite3
from pathlib import Path

import pytest

from egress.domain.checkpoint import Checkpoint, FileRecord, TaskSpec
from egress.engine.manifest import MANIFEST, SUCCESS, TableResult, build_manifest, write_manifest
from egress.sinks.local import LocalSink
from egress.sources.sqlite import SqliteSource


@pytest.mark.parametrize(("schema", "names"), [
    ("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)", ["id"]),
    ("CREATE TABLE t (a TEXT, b DATETIME, PRIMARY KEY (b, a))", ["b", "a"]),
    ("CREATE TABLE t (v TEXT)", ["rowid"]),
])
def test_key_columns_and_values(tmp_path: Path, schema: str, names: list[str]) -> None:
    with sqlite3.connect(tmp_path / "db.sqlite") as conn:
        conn.execute(schema)
    conn.close()
    source = SqliteSource(f"sqlite:///{tmp_path / 'db.sqlite'}")
    info = source.describe("t")
    source.close()
    key = (b"\x00\xff", decimal.Decimal("1.50"), dt.datetime(2024, 1, 2, tzinfo=dt.UTC), 7, None)
    record = FileRecord(name="t.csv", rows=1, size=10, crc32c=255, sha256=None, parts=1,
                        first_key=key, last_key=key)
    cp = Checkpoint(cursor=key, rows=1, bytes=10, files=(record,), done=True)
    spec = TaskSpec(table="t", format="csv", compression="none", part_rows=1, base_name="t")
    now = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    manifest = build_manifest(source="sqlite:///db", results=[TableResult(spec, info, cp)],
                              started_at=now, finished_at=now, destination="/out")
    (table,) = manifest["tables"]
    assert table["key_columns"] == names
    written = ["\\x00ff", "1.50", "2024-01-02 00:00:00+00:00", 7, None]
    assert table["key_range"] == {"first": written, "last": written}
    assert manifest["files"][0]["crc32c"] == "000000ff"
    sink = LocalSink(tmp_path / "out", fsync=False)
    write_manifest(sink, manifest)
    assert json.loads(sink.get_object(MANIFEST)) == manifest
    assert sink.exists(SUCCESS)


def _parquet_result(tmp_path: Path, rows_written: int, rows_committed: int,
                    crc32c: int | None = 1) -> tuple[LocalSink, TableResult]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = tmp_path / "out"
    (out / "t").mkdir(parents=True)
    pq.write_table(pa.table({"id": list(range(rows_written))}), out / "t" / "part-00001.parquet")
    size = (out / "t" / "part-00001.parquet").stat().st_size
    with sqlite3.connect(tmp_path / "db.sqlite") as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    conn.close()
    source = SqliteSource(f"sqlite:///{tmp_path / 'db.sqlite'}")
    info = source.describe("t")
    source.close()
    record = FileRecord(name="t/part-00001.parquet", rows=rows_committed, size=size,
                        crc32c=crc32c, sha256=None, parts=1, first_key=(0,), last_key=(1,))
    cp = Checkpoint(cursor=(1,), rows=rows_committed, bytes=size, files=(record,), done=True)
    spec = TaskSpec(table="t", format="parquet", compression="zstd", part_rows=1,
                    base_name="t")
    return LocalSink(out, fsync=False), TableResult(spec, info, cp)


def test_parquet_rows_agree_with_the_footers(tmp_path: Path) -> None:
    from egress.engine.manifest import check_footers

    sink, result = _parquet_result(tmp_path, 7, 7)
    check_footers(sink, [result])  # agrees: nothing raised


def test_a_footer_that_disagrees_with_the_checkpoint_fails_the_export(tmp_path: Path) -> None:
    from egress.engine.manifest import check_footers
    from egress.exceptions import DataError

    sink, result = _parquet_result(tmp_path, 7, 9)
    with pytest.raises(DataError, match="footer counts 7 rows where 9 were committed"):
        check_footers(sink, [result])


def test_files_egress_did_not_write_are_not_read_again(tmp_path: Path) -> None:
    """A remote engine's unload (no CRC of ours) was counted from its footers when it
    ended: the file is not read again (here it is gone, and nothing fails)."""
    from egress.engine.manifest import check_footers

    sink, result = _parquet_result(tmp_path, 7, 7, crc32c=None)
    (tmp_path / "out" / "t" / "part-00001.parquet").unlink()
    check_footers(sink, [result])
