"""The manifest: written last, after every file is final, then the ``_SUCCESS`` marker."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from egress._version import __version__
from egress.domain.checkpoint import Checkpoint, TaskSpec
from egress.domain.keys import Key
from egress.engine.naming import MANIFEST, SUCCESS, assert_data_names_allowed
from egress.exceptions import DataError
from egress.sinks.base import Sink
from egress.sources.base import Column, TableInfo


@dataclass(frozen=True)
class TableResult:
    spec: TaskSpec
    table: TableInfo
    checkpoint: Checkpoint


def check_footers(sink: Sink, results: Sequence[TableResult]) -> None:
    """The rows the manifest gives each Parquet file egress wrote are its footer's, read
    back from the sink (a ranged read of the footer on S3), not only as the checkpoint
    remembers them: a file whose footer disagrees fails the export (its manifest would
    describe another file). A remote engine's files (no CRC of ours) were counted from
    their footers when the unload ended: not read again."""
    parquet = [r for r in results if r.spec.format == "parquet"]
    if not parquet:
        return
    import pyarrow.parquet as pq  # only for Parquet (~15 ms of a text export's run)

    for r in parquet:
        for f in r.checkpoint.files:
            if f.crc32c is None:
                continue
            with sink.open_reader(f.name, f.size) as reader:
                rows = pq.ParquetFile(reader).metadata.num_rows
            if rows != f.rows:
                raise DataError(
                    f"{f.name}: its Parquet footer counts {rows} rows where {f.rows} were "
                    "committed; the file was changed outside egress or is damaged")


def _json_value(v: Any) -> Any:
    if v is None or isinstance(v, int | float | str | bool):
        return v
    if isinstance(v, bytes):
        return "\\x" + v.hex()  # as CSV writes binary
    return str(v)


def _json_key(key: Key | None) -> list[Any] | None:
    return None if key is None else [_json_value(v) for v in key]


def key_names(table: TableInfo) -> list[str]:
    """The key as the user knows it: hidden cursor columns are egress's own."""
    if not table.hidden_columns:
        return list(table.key_columns)
    return list(table.primary_key) or ["rowid"]


def _selected(r: TableResult) -> list[Column]:
    """The exported columns, in output order."""
    if r.spec.columns is None:
        return list(r.table.columns)
    by_name = {c.name: c for c in r.table.columns}
    return [by_name[n] for n in r.spec.columns]


def build_manifest(
    *,
    source: str,
    results: Sequence[TableResult],
    started_at: dt.datetime,
    finished_at: dt.datetime,
    destination: str,
    snapshot: tuple[str | None, dt.datetime] | None = None,
) -> dict[str, Any]:
    """``snapshot``: (id, taken at) of the one snapshot every table was read in
    (``snapshot: true``; the id is None for SQLite's read transaction); the manifest's
    ``snapshot`` is then ``{id, taken_at}``."""
    tables, files = [], []
    for group in _by_table(results):
        r = group[0]
        table_files = []
        for f in (f for g in group for f in g.checkpoint.files):
            entry = {
                "name": f.name,
                "table": r.spec.table,
                "rows": f.rows,
                "bytes": f.size,
                "parts": f.parts,
                "crc32c": None if f.crc32c is None else f"{f.crc32c:08x}",
                "sha256": f.sha256,
                "first_key": None if r.table.opaque_key else _json_key(f.first_key),
                "last_key": None if r.table.opaque_key else _json_key(f.last_key),
            }
            table_files.append(entry)
            files.append(entry)
        written = [g.checkpoint for g in group if g.checkpoint.files]
        first = written[0].files[0].first_key if written else None
        last = written[-1].cursor if written else None
        tables.append(
            {
                "table": r.spec.table,
                "format": r.spec.format,
                "compression": r.spec.compression,
                "rows": sum(g.checkpoint.rows for g in group),
                "bytes": sum(g.checkpoint.bytes for g in group),
                "key_columns": [] if r.table.opaque_key else key_names(r.table),
                "key_range": None if r.table.opaque_key else {
                    "first": _json_key(first), "last": _json_key(last)},
                # a split table: its ranges in key order, each its own files
                **({"split": [_split_entry(g) for g in group]}
                   if r.spec.key_range is not None else {}),
                "schema": [
                    {
                        "name": c.name,
                        "type": str(c.arrow_type),
                        "source_type": c.source_type,
                        "nullable": c.nullable,
                        **({"logical_type": c.logical_type} if c.logical_type else {}),
                    }
                    for c in _selected(r)
                ],
                "files": [f["name"] for f in table_files],
                # only rows matching every filter were exported
                **({"filters": r.spec.predicate.to_json()} if r.spec.predicate else {}),
            }
        )
    return {
        "egress_version": __version__,
        "source": source,
        "destination": destination,
        "started_at": started_at.isoformat(),
        "finished_at": finished_at.isoformat(),
        **({"snapshot": {"id": snapshot[0], "taken_at": snapshot[1].isoformat()}}
           if snapshot is not None else {}),
        "total_rows": sum(r.checkpoint.rows for r in results),
        "total_bytes": sum(r.checkpoint.bytes for r in results),
        "tables": tables,
        "files": files,
    }


def _by_table(results: Sequence[TableResult]) -> list[list[TableResult]]:
    """Results grouped by table: the range tasks of a split table are consecutive."""
    groups: list[list[TableResult]] = []
    for r in results:
        if groups and r.spec.key_range is not None and groups[-1][0].spec.table == r.spec.table:
            groups[-1].append(r)
        else:
            groups.append([r])
    return groups


def _split_entry(r: TableResult) -> dict[str, Any]:
    assert r.spec.key_range is not None
    # a stitched range's rows are in the table's one file
    files = ([r.spec.stitch_name] if r.spec.stitch_name is not None
             else [f.name for f in r.checkpoint.files])
    return {**r.spec.key_range.public(), "rows": r.checkpoint.rows, "files": files}


def write_manifest(sink: Sink, manifest: dict[str, Any]) -> None:
    """Manifest first, marker last: a ``_SUCCESS`` always has a complete manifest beside it.
    Never over a data file of the same name."""
    assert_data_names_allowed(f["name"] for f in manifest["files"])
    sink.put_object(MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())
    sink.put_object(SUCCESS, b"")
