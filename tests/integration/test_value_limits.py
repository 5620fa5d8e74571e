"""One oversized row cannot take a worker down: a text or binary value above the limit
(``max_value_bytes``), or one part's rows above ``max_page_bytes``, stop the export at
once with a permanent error naming the table, the column and the row's key — before the
value is encoded — and the process's memory stays bounded."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from egress.config import Settings
from egress.domain.jobs import ExportState
from egress.exceptions import ValueTooLargeError
from egress.manager import ExportRequest, create_export
from egress.store.sql import SqlJobStore
from egress.worker.loop import Worker
from jobsharness import write_home
from peakrss import PEAK_MIB_EXPRESSION

MiB = 1024 * 1024


def _db(path: Path, big_bytes: int) -> str:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE docs (id INTEGER PRIMARY KEY, title TEXT, body TEXT)")
    conn.executemany("INSERT INTO docs VALUES (?, ?, ?)",
                     [(i, f"t{i}", "x" * 100) for i in range(1, 200)])
    # a text of big_bytes made by SQLite itself (hex of a zeroblob: no Python copy)
    conn.execute("UPDATE docs SET body = hex(zeroblob(?)) WHERE id = 77", (big_bytes // 2,))
    conn.commit()
    conn.close()
    return f"sqlite:///{path}"


def test_a_300_mb_value_fails_the_export_with_bounded_memory(tmp_path: Path) -> None:
    source = _db(tmp_path / "big.db", 300 * MiB)
    script = f"""
import json, egress
try:
    egress.export({source!r}, ["docs"], to={str(tmp_path / 'out')!r}, format="jsonl")
    error = None
except Exception as exc:
    error = [type(exc).__name__, str(exc)]
print(json.dumps({{"error": error,
                   "peak_mib": {PEAK_MIB_EXPRESSION}}}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    kind, message = result["error"]
    assert kind == "ValueTooLargeError"
    assert "table 'docs', column 'body', the row with key [77]" in message
    assert "314,572,800 bytes, above the limit of 67,108,864" in message
    # the value is read (the driver and Arrow's conversion hold about three copies of it,
    # ~1 GB, 1.2 GB seen at the peak) but never encoded: encoding it took the process to
    # 1.65 GB before the limit
    assert result["peak_mib"] < 1350, result
    assert not (tmp_path / "out" / "docs.jsonl").exists()


def test_the_cli_names_the_row_and_takes_a_limit(tmp_path: Path) -> None:
    source = _db(tmp_path / "small.db", 4000)
    cli = [sys.executable, "-m", "egress.cli", "export", "--source", source, "--table", "docs",
           "--format", "csv"]
    refused = subprocess.run([*cli, "--out", str(tmp_path / "a"), "--max-value-size", "1KiB",
                              "--progress", "none"],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 3, refused.stderr
    assert refused.stderr.strip().splitlines() == [
        "egress: error: table 'docs', column 'body', the row with key [77]: a value of 4,000 "
        "bytes, above the limit of 1,024 (export.max_value_bytes); leave the column out "
        "(columns) or the row out (filters), or raise the limit"]
    fine = subprocess.run([*cli, "--out", str(tmp_path / "b"), "-q"], capture_output=True,
                          text=True, timeout=120)
    assert fine.returncode == 0, fine.stderr


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    source = _db(tmp_path / "src.db", 4000)
    return write_home(tmp_path / "home", store_url=f"sqlite:///{tmp_path / 's.db'}",
                      sources={"main": source},
                      worker={"poll_seconds": 0.05, "max_attempts": 4, "backoff_seconds": 0.1})


def _run(settings: Settings) -> tuple[str, SqlJobStore]:
    store = SqlJobStore(settings.store_url)
    store.migrate()
    export, _ = create_export(store, settings, ExportRequest(source="main", tables=("docs",)),
                              project="p")
    thread = threading.Thread(target=Worker(store, settings).run,
                              kwargs={"exit_when_idle": True})
    thread.start()
    thread.join(60)
    assert not thread.is_alive()
    return export.id, store


@pytest.mark.parametrize(("limit", "words"), [
    ({"max_value_bytes": 1000}, "column 'body', the row with key [77]: a value of 4,000 bytes"),
    ({"max_page_bytes": 5000}, "above the limit of 5,000 for one part"),
])
def test_a_worker_fails_the_task_at_once(settings: Settings, limit: dict, words: str) -> None:
    limited = dataclasses.replace(settings, export=dataclasses.replace(settings.export, **limit))
    export_id, store = _run(limited)
    try:
        export = store.export_get("p", export_id)
        [task] = store.task_list(export_id)
    finally:
        store.close()
    assert export is not None and export.state is ExportState.FAILED
    assert task.attempts == 1 and words in (export.error or "")
    assert not ValueTooLargeError.transient
