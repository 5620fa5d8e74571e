"""A one-shot export that fails before committing anything leaves nothing behind (no
``OUT/.egress``, no empty ``OUT`` it created); one that committed parts keeps its
checkpoint for ``--resume`` (see also test_disk_errors.py); a refused run never touches
the export already in ``OUT``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobsharness import make_events_db

CLI = [sys.executable, "-m", "egress.cli"]


def _export(source: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "export", "--source", source, "--format", "csv", "--out", str(out), "--quiet",
         *extra], capture_output=True, text=True, timeout=120, env=dict(os.environ))


@pytest.fixture
def source(tmp_path: Path) -> str:
    return make_events_db(tmp_path / "src.db", {"t": 500})


@pytest.mark.parametrize("case", ["missing source", "unknown table", "a later unknown table"])
def test_a_failed_export_leaves_nothing(source: str, tmp_path: Path, case: str) -> None:
    args = {"missing source": (f"sqlite:///{tmp_path / 'nowhere.db'}", "--table", "t"),
            "unknown table": (source, "--table", "nope"),
            "a later unknown table": (source, "--table", "t", "--table", "nope")}[case]
    kept = tmp_path / "kept"  # a directory that was there before: it stays, untouched
    kept.mkdir()
    (kept / "notes.txt").write_text("mine")
    for out in (tmp_path / "new" / "out", kept):
        result = _export(args[0], out, *args[1:])
        assert result.returncode == 3, result.stderr
        assert not (out / ".egress").exists(), case
    assert not (tmp_path / "new" / "out").exists()
    assert sorted(p.name for p in kept.iterdir()) == ["notes.txt"]


def test_a_refused_export_leaves_the_finished_one_as_it_was(source: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert _export(source, out, "--table", "t").returncode == 0
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    again = _export(source, out, "--table", "t")
    assert again.returncode == 2 and "already holds a completed export" in again.stderr
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    assert not (out / ".egress").exists()


def test_an_unfinished_export_keeps_its_checkpoint_when_a_run_is_refused(
    source: str, tmp_path: Path
) -> None:
    import egress

    out = tmp_path / "out"
    calls = iter(range(10**6))
    result = egress.export(source, ["t"], to=out, format="csv", part_rows=100,
                           should_stop=lambda: next(calls) > 2)
    assert result.interrupted and (out / ".egress" / "state.json").is_file()
    refused = _export(source, out, "--table", "t")
    assert refused.returncode == 2 and "--resume" in refused.stderr
    assert (out / ".egress" / "state.json").is_file()
    assert _export(source, out, "--table", "t", "--resume").returncode == 0
    assert (out / "_SUCCESS").is_file() and not (out / ".egress").exists()


def test_a_job_whose_source_is_gone_leaves_no_folder(tmp_path: Path) -> None:
    """The worker opens the source before the destination: a failed task that could not
    read anything creates no ``PATH/PROJECT/EXPORT_ID/.egress/staging``."""
    from egress.config import load_settings
    from egress.domain.jobs import ExportState
    from egress.manager import ExportRequest, create_export, export_root
    from egress.store.sql import SqlJobStore
    from egress.worker.loop import Worker
    from jobsharness import write_home

    db = tmp_path / "src.db"
    source = make_events_db(db, {"t": 100})
    write_home(tmp_path / "home", store_url=f"sqlite:///{tmp_path / 'home' / 'egress.db'}",
               sources={"main": source},
               worker={"poll_seconds": 0.05, "max_attempts": 1, "backoff_seconds": 0.1})
    settings = load_settings(tmp_path / "home", env={})
    store = SqlJobStore(settings.store_url)
    try:
        store.migrate()
        export, _ = create_export(store, settings, ExportRequest(source="main", tables=("t",)))
        db.unlink()  # gone between the request and the run
        assert Worker(store, settings).run(exit_when_idle=True) == 0
        failed = store.export_get(None, export.id)
        assert failed is not None and failed.state is ExportState.FAILED, failed
        assert not export_root(settings, export).exists()
    finally:
        store.close()
