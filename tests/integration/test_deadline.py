"""A slice honours its deadline on a large table and leaves a consistent checkpoint.

One million rows (made by a recursive CTE in SQLite). A slice with a 0.2 s deadline must
return within about half a second, its checkpoint must agree with the data and with the
staged file, and slices run to completion from there must write the same bytes as one
long slice.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from egress.domain.checkpoint import Checkpoint, TaskSpec
from egress.engine.plan import plan_task
from egress.engine.slice import Task, run_slice
from egress.sinks.local import LocalSink
from egress.sources.sqlite import SqliteSource
from staging import staged_copy

ROWS = 1_000_000
DEADLINE = 0.2
#: The slice's grace (0.25 s) plus the last part's compression and commit.
RETURN_WITHIN = 0.5


@pytest.fixture(scope="module")
def big_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("big") / "big.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE big (id INTEGER PRIMARY KEY, name TEXT, score REAL, day DATE)")
    conn.execute(
        f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {ROWS}) "
        "INSERT INTO big SELECT i * 2, 'name-' || i, i * 0.25, "
        "date('2020-01-01', '+' || (i % 1000) || ' days') FROM n"
    )
    conn.commit()
    conn.close()
    return f"sqlite:///{path}"


class Store:
    def __init__(self) -> None:
        self.saved = json.dumps(Checkpoint().to_json())

    def save(self, cp: Checkpoint) -> None:
        self.saved = json.dumps(cp.to_json())

    def load(self) -> Checkpoint:
        return Checkpoint.from_json(json.loads(self.saved))


def make_task(url: str, out: Path, spec: TaskSpec, store: Store) -> tuple[Task, SqliteSource]:
    source = SqliteSource(url)
    task = Task(spec=spec, table=source.describe("big"), source=source,
                sink=LocalSink(out, fsync=False), commit=store.save)
    return task, source


def final_files(out: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and ".egress" not in p.relative_to(out).parts
    }


def test_short_slice_returns_on_time_with_a_consistent_checkpoint(
    big_db: str, tmp_path: Path
) -> None:
    source = SqliteSource(big_db)
    spec = plan_task(source, source.describe("big"), format="csv", compression="gzip",
                     part_rows=20_000, max_file_size=2_000_000)
    source.close()

    # one long slice: the reference output
    reference = tmp_path / "reference"
    store = Store()
    task, src = make_task(big_db, reference, spec, store)
    try:
        cp = run_slice(task, store.load(), time.monotonic() + 600)
    finally:
        src.close()
    assert cp.done and cp.rows == ROWS
    want = final_files(reference)
    assert len(want) > 1

    out = tmp_path / "sliced"
    store = Store()
    task, src = make_task(big_db, out, spec, store)
    try:
        started = time.monotonic()
        cp = run_slice(task, store.load(), started + DEADLINE)
        elapsed = time.monotonic() - started
        assert elapsed < RETURN_WITHIN, f"a {DEADLINE} s slice took {elapsed:.3f} s"
        assert 0 < cp.rows < ROWS and not cp.done
        # what was returned is what was committed
        assert cp == store.load()
        # rows committed == the cursor's position in the table
        (cursor,) = cp.cursor  # type: ignore[misc]
        with sqlite3.connect(big_db.removeprefix("sqlite:///")) as conn:
            (position,) = conn.execute("SELECT count(*) FROM big WHERE id <= ?",
                                       (cursor,)).fetchone()
        assert position == cp.rows
        # files and parts add up to the totals, and the staged file holds exactly the
        # committed parts
        open_rows = cp.open_file.rows if cp.open_file else 0
        open_size = cp.open_file.size if cp.open_file else 0
        assert sum(f.rows for f in cp.files) + open_rows == cp.rows
        assert sum(f.size for f in cp.files) + open_size == cp.bytes
        for record in cp.files:
            assert (out / record.name).stat().st_size == record.size
            assert (out / record.name).read_bytes() == want[record.name]
        if cp.open_file is not None:
            of = cp.open_file
            assert sum(p.rows for p in of.parts) == of.rows
            assert sum(p.size for p in of.parts) == of.size
            assert staged_copy(out, of.name).stat().st_size == of.size  # sealed

        # slice after slice to the end: the same bytes as the one long slice
        slices = 1
        while not cp.done:
            cp = run_slice(task, cp, time.monotonic() + DEADLINE)
            slices += 1
    finally:
        src.close()
    assert slices > 2
    assert cp.rows == ROWS
    assert final_files(out) == want
