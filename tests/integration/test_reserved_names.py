"""Outputs never take the names egress writes itself (``manifest.json``, ``_SUCCESS``,
``.egress``): a table or query export so named is renamed with a hash suffix before any
work starts, in one-shot exports (local and S3). Jobs run by the worker:
tests/integration/api/test_api_reserved_names.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import egress
from jobsharness import make_events_db

ROWS = 300


def _db(tmp_path: Path, *tables: str) -> str:
    return make_events_db(tmp_path / "src.db", dict.fromkeys(tables, ROWS))


def _check_local(out: Path, manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The manifest on disk is the manifest, and every file it lists holds its rows."""
    assert json.loads((out / "manifest.json").read_text()) == manifest
    assert (out / "_SUCCESS").is_file() and (out / "_SUCCESS").read_bytes() == b""
    for f in manifest["files"]:
        path = out / f["name"]
        assert path.is_file(), f["name"]
        if path.suffix == ".json":
            assert len(json.loads(path.read_text())) == f["rows"]
        elif path.suffix == ".parquet":
            assert pq.read_table(path).num_rows == f["rows"]
    for t in manifest["tables"]:
        assert sum(f["rows"] for f in manifest["files"] if f["table"] == t["table"]) == ROWS
    return list(manifest["files"])


@pytest.mark.parametrize(("table", "fmt"), [("manifest", "json"), ("_SUCCESS", "parquet"),
                                            ("manifest.json", "parquet")])
def test_a_table_named_like_the_manifest_keeps_its_data(tmp_path: Path, table: str, fmt: str):
    out = tmp_path / "out"
    result = egress.export(_db(tmp_path, table, "other"), [table, "other"], to=out,
                           format=fmt, part_rows=100)
    files = _check_local(out, result.manifest)
    names = [f["name"] for f in files if f["table"] == table]
    assert names and all(n.split("/")[0] not in ("manifest.json", "_SUCCESS") for n in names)
    assert sum(f["rows"] for f in files) == 2 * ROWS


def test_a_query_named_manifest_keeps_its_data(tmp_path: Path):
    out = tmp_path / "out"
    result = egress.export(_db(tmp_path, "events"), to=out, format="json",
                           query="SELECT id, kind FROM events", key=["id"], name="manifest")
    [f] = _check_local(out, result.manifest)
    assert f["name"].startswith("manifest-") and f["name"].endswith(".json")
    assert result.manifest["tables"][0]["table"] == "manifest"


def test_a_table_named_manifest_on_s3(tmp_path: Path, s3):
    result = egress.export(_db(tmp_path, "manifest"), ["manifest"], to=s3.url("exp"),
                           format="json", part_rows=100)
    objects = s3.objects("exp/")
    [f] = result.manifest["files"]
    assert set(objects) == {f["name"], "manifest.json", "_SUCCESS"}
    assert json.loads(objects["manifest.json"]) == result.manifest
    assert len(json.loads(objects[f["name"]])) == ROWS
