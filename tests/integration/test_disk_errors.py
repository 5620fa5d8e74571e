"""A full or read-only disk, for real (a small tmpfs, a read-only remount): the CLI says
so in one line and exits with 4 (the destination) on every path — the staged data, the
checkpoint, the manifest — and what was committed is kept for ``--resume``."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import egress
from egress.cli.errors import EXIT_DESTINATION, exit_code_for
from egress.domain.checkpoint import Checkpoint
from egress.exceptions import SinkError
from jobsharness import make_events_db
from mounts import fill, read_only, resize, tmpfs

CLI = [sys.executable, "-m", "egress.cli"]
ROWS = 20_000  # about 3 MB of CSV: more than the 1 MiB file system holds


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> str:
    return make_events_db(tmp_path_factory.mktemp("disk-src") / "src.db", {"t": ROWS})


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300,
                          env=env or dict(os.environ))


def _assert_one_line(result: subprocess.CompletedProcess[str], *words: str) -> str:
    assert result.returncode == EXIT_DESTINATION, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr  # never a traceback
    assert lines[0].startswith("egress: error: "), lines[0]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def _digests(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file() and p.name != "manifest.json"}


def test_a_full_disk_is_one_line_exit_4_and_resumes(source: str, tmp_path: Path) -> None:
    args = ["export", "--source", source, "--table", "t", "--format", "csv",
            "--part-rows", "1000", "--quiet"]
    reference = tmp_path / "reference"
    assert _cli(*args, "--out", str(reference)).returncode == 0
    with tmpfs(tmp_path / "disk", "1m") as disk:
        out = disk / "out"
        line = _assert_one_line(_cli(*args, "--out", str(out)), "no space left", "resume")
        assert str(out) in line
        resize(disk, "64m")  # space freed: the committed parts are still there
        resumed = _cli(*args, "--out", str(out), "--resume")
        assert resumed.returncode == 0, resumed.stderr
        assert _digests(out) == _digests(reference)
        assert not (out / ".egress").exists()


def test_a_full_disk_for_the_checkpoint_of_an_s3_export(source: str, tmp_path: Path, s3) -> None:
    """An export to S3 keeps its checkpoint in EGRESS_HOME: a full disk there too."""
    with tmpfs(tmp_path / "home", "256k") as home:
        fill(home)
        result = _cli("export", "--source", source, "--table", "t", "--format", "csv",
                      "--out", s3.url("full"), "--quiet",
                      env={**os.environ, "EGRESS_HOME": str(home)})
        _assert_one_line(result, "no space left", "checkpoint", str(home))
    assert s3.uploads("full/") == [] and s3.objects("full/") == {}


class _ReadOnlyWhenDone:
    """Progress that makes the output's file system read-only once the last table is
    done: the next write is the manifest's."""

    def __init__(self, disk: Path) -> None:
        self.disk = disk

    def table_started(self, table: str, rows_estimate: int | None, cp: Checkpoint) -> None:
        pass

    def advanced(self, table: str, cp: Checkpoint) -> None:
        pass

    def table_done(self, table: str, cp: Checkpoint) -> None:
        read_only(self.disk)


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_read_only_disk_when_the_manifest_is_written(
    source: str, tmp_path: Path, fmt: str
) -> None:
    with tmpfs(tmp_path / "disk", "64m") as disk:
        out = disk / "out"
        progress: Any = _ReadOnlyWhenDone(disk)
        with pytest.raises(SinkError, match="read-only") as info:
            egress.export(source, ["t"], to=out, format=fmt, part_rows=5000, progress=progress)
        assert "manifest.json" in str(info.value) and str(out) in str(info.value)
        assert exit_code_for(info.value) == EXIT_DESTINATION
        assert not (out / "manifest.json").exists() and not (out / "_SUCCESS").exists()


def test_a_part_larger_than_the_free_space_is_no_space_not_a_short_write(
    source: str, tmp_path: Path
) -> None:
    """A part of 3 MB on a 1 MiB disk: ``pwrite`` writes what fits and returns the count.
    That is ENOSPC, said as such, and the checkpoint (kept on another disk here, so that
    it can be written) never counts bytes that are not on disk."""
    state_dir = tmp_path / "state"
    with tmpfs(tmp_path / "disk", "1m") as disk:
        out = disk / "out"
        with pytest.raises(SinkError, match="no space left") as info:
            egress.export(source, ["t"], to=out, format="csv", part_rows=ROWS,
                          state_dir=state_dir)
        assert exit_code_for(info.value) == EXIT_DESTINATION
        staged = sum(f.stat().st_size for f in out.rglob("*.csv"))
        state = state_dir / "state.json"  # gone if nothing was committed at all
        saved = json.loads(state.read_text()) if state.exists() else {"tasks": {}}
        for entry in saved["tasks"].values():
            assert entry["checkpoint"].get("bytes", 0) <= staged
