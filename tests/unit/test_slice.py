"""run_slice: the checkpoint protocol of docs/design.md on a real SQLite table and a local sink.

Checkpoints go through JSON (as a store keeps them) and every resume uses a fresh Task,
source and sink, so nothing survives a "crash" but the committed checkpoint and the
files on disk. The output of every interrupted run must equal, byte for byte, the
output of one uninterrupted run.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import itertools
import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from egress.domain.checkpoint import Checkpoint, TaskSpec
from egress.engine.plan import plan_task
from egress.engine.slice import Task, run_slice
from egress.exceptions import DataError, LeaseLostError
from egress.sinks.local import LocalSink
from egress.sources.sqlite import SqliteSource
from staging import staged_copy

ROWS = 50


class Crash(Exception):
    """Stands for the process dying at the point where it is raised."""


def make_db(path: Path, rows: int = ROWS) -> str:
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price DECIMAL(10,2), "
        "at DATETIME, data BLOB, doc JSON)"
    )
    conn.executemany(
        "INSERT INTO items VALUES (?, ?, ?, ?, ?, ?)",
        [
            (i * 3, f"item, \"{i}\"\n" if i % 7 else None, f"{i}.{i % 100:02d}",
             f"2024-01-{i % 28 + 1:02d} 10:00:00", bytes([i % 256]) * (i % 5),
             json.dumps({"i": i}))
            for i in range(1, rows + 1)
        ],
    )
    conn.commit()
    conn.close()
    return f"sqlite:///{path}"


class Store:
    """Keeps the last committed checkpoint as JSON, as a job store does."""

    def __init__(self) -> None:
        self.saved: str = json.dumps(Checkpoint().to_json())
        self.commits = 0

    def save(self, cp: Checkpoint) -> None:
        self.saved = json.dumps(cp.to_json())
        self.commits += 1

    def load(self) -> Checkpoint:
        return Checkpoint.from_json(json.loads(self.saved))


class ForwardOnlySqlite(SqliteSource):
    """A source whose rows, once read, cannot be read again (as a remote engine's result)."""

    forward_only = True


@contextlib.contextmanager
def task_for(
    url: str, out: Path, spec: TaskSpec, commit: Callable[[Checkpoint], None],
    source_class: type[SqliteSource] = SqliteSource, **kw: object,
) -> Iterator[Task]:
    source = source_class(url)
    try:
        info = source.describe(spec.table)
        yield Task(spec=spec, table=info, source=source, sink=LocalSink(out, fsync=False),
                   commit=commit, **kw)  # type: ignore[arg-type]
    finally:
        source.close()


def plan(url: str, fmt: str, compression: str, **kw: object) -> TaskSpec:
    source = SqliteSource(url)
    try:
        return plan_task(source, source.describe("items"), format=fmt,
                         compression=compression, **kw)  # type: ignore[arg-type]
    finally:
        source.close()


def outputs(out: Path) -> dict[str, bytes]:
    """Every final file under ``out`` (not the staging area)."""
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and ".egress" not in p.relative_to(out).parts
    }


def run_to_end(url: str, out: Path, spec: TaskSpec, store: Store) -> Checkpoint:
    cp = store.load()
    with task_for(url, out, spec, store.save) as task:
        while not cp.done:
            cp = run_slice(task, cp, task.clock() + 60)
    return cp


def baseline(tmp_path: Path, url: str, spec: TaskSpec) -> dict[str, bytes]:
    out = tmp_path / "baseline"
    cp = run_to_end(url, out, spec, Store())
    assert cp.done and cp.rows == ROWS
    return outputs(out)


CASES = [
    ("csv", "gzip", {"part_rows": 4, "max_file_size": 300}),
    ("json", "zstd", {"part_rows": 5, "max_file_size": 400}),
    ("jsonl", "none", {"part_rows": 3}),
    ("sql", "gzip", {"part_rows": 6, "max_file_size": 900, "options": {"rows_per_insert": 4}}),
    ("parquet", "zstd", {"part_rows": 7}),
    ("parquet", "snappy", {"part_rows": 6, "max_file_size": 4000}),
    ("csv", "zstd", {"part_rows": 2, "min_part_bytes": 120}),
]


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize(("fmt", "compression", "kw"), CASES)
def test_crash_at_every_commit_resumes_byte_identical(
    tmp_path: Path, fmt: str, compression: str, kw: dict, when: str
) -> None:
    """A crash before a commit is stored (part in the sink, checkpoint not: the part is
    rewritten) or right after it (e.g. between committing a closing part and completing
    the file: completion is redone) leaves output identical to an uninterrupted run."""
    url = make_db(tmp_path / "src.db")
    spec = plan(url, fmt, compression, **kw)
    want = baseline(tmp_path, url, spec)
    if "max_file_size" in kw:
        assert len(want) > 1
    if fmt == "parquet":  # files of many row groups, each a part
        groups = [pq.ParquetFile(io.BytesIO(data)).metadata.num_row_groups
                  for data in want.values()]
        assert max(groups) > 1
        assert sum(pq.read_table(io.BytesIO(d)).num_rows for d in want.values()) == ROWS
    total = Store()
    run_to_end(url, tmp_path / "count", spec, total)

    for crash_at in range(1, total.commits + 1):
        out = tmp_path / f"crash-{crash_at}"
        store = Store()
        calls = 0

        def commit(cp: Checkpoint, crash_at: int = crash_at, store: Store = store) -> None:
            nonlocal calls
            calls += 1
            if calls == crash_at and when == "before":
                raise Crash
            store.save(cp)
            if calls == crash_at:
                raise Crash

        with pytest.raises(Crash), task_for(url, out, spec, commit) as task:
            cp = store.load()
            while not cp.done:
                cp = run_slice(task, cp, task.clock() + 60)
        done = run_to_end(url, out, spec, store)
        assert done.rows == ROWS
        assert outputs(out) == want, f"crash at commit {crash_at} ({when})"


def test_slices_of_one_part_each_equal_one_long_slice(tmp_path: Path) -> None:
    url = make_db(tmp_path / "src.db")
    spec = plan(url, "csv", "gzip", part_rows=4, max_file_size=250)
    want = baseline(tmp_path, url, spec)
    store = Store()
    out = tmp_path / "sliced"
    slices = 0
    with task_for(url, out, spec, store.save) as task:
        cp = store.load()
        while not cp.done:
            before = store.commits
            cp = run_slice(task, cp, deadline=task.clock() - 1)  # deadline already passed
            slices += 1
            # every slice makes progress, and stops after its first part
            assert store.commits > before
            assert store.load() == cp
    assert slices > 5
    assert outputs(out) == want
    # the concatenated members of each file are one valid gzip stream
    for name, data in want.items():
        assert gzip.decompress(data).startswith(b"id,name,price,at,data,doc\r\n"), name


@pytest.mark.parametrize(("fmt", "compression", "kw"), CASES[:5])
def test_slices_that_keep_reading_share_one_read_ahead_and_write_the_same(
    tmp_path: Path, fmt: str, compression: str, kw: dict
) -> None:
    """The one-shot export's slices (``keep_reading``): the read-ahead runs on from one
    slice into the next, on one thread, and the output is that of one long slice."""
    url = make_db(tmp_path / "src.db")
    spec = plan(url, fmt, compression, **kw)
    want = baseline(tmp_path, url, spec)
    store = Store()
    readers, threads, slices = set(), set(), 0
    with task_for(url, tmp_path / "kept", spec, store.save) as task:
        cp = store.load()
        while not cp.done:
            cp = run_slice(task, cp, deadline=task.clock() - 1, keep_reading=True)
            slices += 1
            if not cp.done:  # kept for the next slice, its thread still running
                pages = task._pages
                assert pages is not None and pages._thread is not None
                readers.add(id(pages))
                threads.add(pages._thread.ident)
        task.close_pages()
        assert task._pages is None
    assert slices > 3 and len(readers) == 1 and len(threads) == 1
    assert cp.rows == ROWS and outputs(tmp_path / "kept") == want


def test_a_slice_that_dropped_a_part_leaves_no_read_ahead_to_reuse(tmp_path: Path) -> None:
    """A dropped part's rows were consumed from the read-ahead but not committed: the
    next slice reads them again from the cursor, not from where the thread went on."""
    url = make_db(tmp_path / "src.db")
    spec = plan(url, "csv", "none", part_rows=5)
    want = baseline(tmp_path, url, spec)
    store, clock = Store(), ManualClock(0.95, 1.0)
    out = tmp_path / "dropped"
    with task_for(url, out, spec, store.save, clock=clock, grace=0.5) as task:
        cp = run_slice(task, store.load(), deadline=1.0, keep_reading=True)
        assert store.commits == 1 and cp.rows == 5  # the second part was dropped
        task.clock = ManualClock(0.0, 0.0)
        while not cp.done:
            cp = run_slice(task, cp, deadline=60.0, keep_reading=True)
        task.close_pages()
    assert cp.rows == ROWS and outputs(out) == want


def test_a_failed_slice_stops_the_read_ahead_it_would_have_kept(tmp_path: Path) -> None:
    url = make_db(tmp_path / "src.db")
    spec = plan(url, "jsonl", "none", part_rows=5)

    def commit(cp: Checkpoint) -> None:
        raise Crash

    with task_for(url, tmp_path / "out", spec, commit) as task, pytest.raises(Crash):
        try:
            run_slice(task, Checkpoint(), deadline=task.clock() + 60, keep_reading=True)
        finally:
            assert task._pages is None


def test_should_stop_ends_the_slice_at_a_part_boundary(tmp_path: Path) -> None:
    url = make_db(tmp_path / "src.db")
    spec = plan(url, "json", "none", part_rows=5)
    want = baseline(tmp_path, url, spec)
    store = Store()
    out = tmp_path / "stopped"
    asked = itertools.count(1)
    # asked before each part: the fourth time, three parts are in hand (encoded, or being
    # stored by the committer thread), and all three are committed before the slice ends
    with task_for(url, out, spec, store.save, should_stop=lambda: next(asked) > 3) as task:
        cp = run_slice(task, store.load(), task.clock() + 60)
    assert store.commits == 3 and not cp.done
    assert cp == store.load()
    assert cp.rows == 15 and cp.cursor == (45,)  # three parts of five rows, ids 3..45
    assert cp.open_file is not None and cp.open_file.rows == 15
    assert len(cp.open_file.parts) == 3
    assert outputs(out) == {}  # nothing final yet
    run_to_end(url, out, spec, store)
    assert outputs(out) == want


class ManualClock:
    """A clock the test moves: it reads ``now``, and ``tick`` is added after every reading."""

    def __init__(self, now: float, tick: float) -> None:
        self.now, self.tick = now, tick
        self.readings = 0

    def __call__(self) -> float:
        now = self.now
        self.now += self.tick
        self.readings += 1
        return now


def run_with_clock(tmp_path: Path, name: str, after_first: tuple[float, float],
                   source_class: type[SqliteSource] = SqliteSource,
                   ) -> tuple[Checkpoint, Store, Path]:
    """One slice (deadline 1.0, grace 0.5) whose clock reads ``after_first`` = (now, tick)
    once the first part is in hand. A slice reads its clock only after it has handed
    its first part over (until then there is no part it could drop or stop after)."""
    url = make_db(tmp_path / "src.db") if not (tmp_path / "src.db").exists() \
        else f"sqlite:///{tmp_path / 'src.db'}"
    spec = plan(url, "csv", "none", part_rows=5)
    store, clock = Store(), ManualClock(*after_first)
    out = tmp_path / name
    with task_for(url, out, spec, store.save, source_class, clock=clock, grace=0.5) as task:
        cp = run_slice(task, store.load(), deadline=1.0)
    assert clock.readings > 0
    return cp, store, out


def test_no_part_starts_after_the_deadline(tmp_path: Path) -> None:
    cp, store, _ = run_with_clock(tmp_path, "out", (1.0, 0.0))
    assert store.commits == 1 and cp.rows == 5 and cp == store.load()


def test_part_overrunning_deadline_plus_grace_is_dropped(tmp_path: Path) -> None:
    # the second part starts before the deadline and is still being read at 1.95 > 1.5
    cp, store, out = run_with_clock(tmp_path, "out", (0.95, 1.0))
    assert store.commits == 1 and cp.rows == 5 and cp == store.load()
    # nothing of the dropped part reached the sink
    assert cp.open_file is not None
    assert staged_copy(out, cp.open_file.name).stat().st_size == cp.open_file.size


def test_a_forward_only_source_finishes_the_part_in_hand_however_late(
        tmp_path: Path) -> None:
    # the same clock as above: the second part is read past deadline + grace, yet it is
    # committed (its rows cannot be read again), and no part starts after it
    cp, store, out = run_with_clock(tmp_path, "out", (0.95, 1.0), ForwardOnlySqlite)
    assert store.commits == 2 and cp.rows == 10 and cp == store.load()
    assert cp.open_file is not None
    assert staged_copy(out, cp.open_file.name).stat().st_size == cp.open_file.size


def test_part_in_hand_is_finished_within_grace(tmp_path: Path) -> None:
    # the second part is read by 1.15 (past the deadline, within the grace): committed
    cp, store, _ = run_with_clock(tmp_path, "out", (0.95, 0.2))
    assert store.commits == 2 and cp.rows == 10 and cp == store.load()


def test_lost_lease_stops_writing_at_once(tmp_path: Path) -> None:
    url = make_db(tmp_path / "src.db")
    spec = plan(url, "csv", "none", part_rows=5)
    sizes: list[int] = []

    def record(cp: Checkpoint) -> None:
        if cp.open_file is not None:
            sizes.append(cp.open_file.size)

    with task_for(url, tmp_path / "full", spec, record) as task:
        run_slice(task, Checkpoint(), task.clock() + 60)
    store = Store()

    def commit(cp: Checkpoint) -> None:
        if store.commits == 2:
            raise LeaseLostError("another worker owns the task")
        store.save(cp)

    out = tmp_path / "out"
    with task_for(url, out, spec, commit) as task, pytest.raises(LeaseLostError):
        run_slice(task, store.load(), task.clock() + 60)
    cp = store.load()
    assert cp.rows == 10 and cp.open_file is not None and cp.open_file.size == sizes[1]
    # the third part was stored before its commit failed (the next owner replaces it);
    # nothing was written after that
    assert staged_copy(out, cp.open_file.name).stat().st_size == sizes[2]


def test_table_ending_on_a_part_boundary_adds_no_empty_part(tmp_path: Path) -> None:
    url = make_db(tmp_path / "src.db", rows=12)
    spec = plan(url, "jsonl", "gzip", part_rows=4)
    store = Store()
    parts: list[list[int]] = []

    def commit(cp: Checkpoint) -> None:
        store.save(cp)
        if cp.open_file is not None:
            parts.append([p.size for p in cp.open_file.parts])

    out = tmp_path / "out"
    with task_for(url, out, spec, commit) as task:
        cp = run_slice(task, store.load(), task.clock() + 60)
    assert cp.done and cp.rows == 12
    assert len(parts[-1]) == 3 and all(parts[-1])  # three parts of four rows, none empty
    (record,) = cp.files
    assert record.parts == 3 and record.rows == 12
    lines = gzip.decompress((out / record.name).read_bytes()).decode().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [i * 3 for i in range(1, 13)]


def test_min_part_bytes_counts_the_compressed_bytes(tmp_path: Path) -> None:
    url = make_db(tmp_path / "src.db", rows=200)
    spec = plan(url, "csv", "gzip", part_rows=3, min_part_bytes=400)
    store = Store()
    snapshots: list[Checkpoint] = []

    def commit(cp: Checkpoint) -> None:
        store.save(cp)
        snapshots.append(cp)

    with task_for(url, tmp_path / "out", spec, commit) as task:
        cp = run_slice(task, store.load(), task.clock() + 60)
    assert cp.done
    last_open = next(s.open_file for s in reversed(snapshots) if s.open_file)
    sizes = [p.size for p in last_open.parts]
    assert len(sizes) > 2
    # every part but the last reaches the minimum in stored (compressed) bytes
    assert all(size >= 400 for size in sizes[:-1])
    # 3 rows of this table compress to far less than 400 bytes: parts grew
    assert all(p.rows > 3 and p.rows % 3 == 0 for p in last_open.parts[:-1])
    (record,) = cp.files
    data = (tmp_path / "out" / record.name).read_bytes()
    assert gzip.decompress(data).count(b"\r\n") == 201  # header and 200 rows


def test_null_in_a_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "nullkey.db"
    conn = sqlite3.connect(path)
    # SQLite lets a rowid table hold NULL in a non-integer primary key
    conn.execute("CREATE TABLE items (code TEXT PRIMARY KEY, v INTEGER)")
    conn.executemany("INSERT INTO items VALUES (?, ?)", [(None, 1), (None, 2), ("a", 3)])
    conn.commit()
    conn.close()
    url = f"sqlite:///{path}"
    spec = plan(url, "csv", "none", part_rows=1)
    with task_for(url, tmp_path / "out", spec, Store().save) as task, \
            pytest.raises(DataError, match="NULL in its key"):
        run_slice(task, Checkpoint(), task.clock() + 60)


def test_finish_file_is_idempotent(tmp_path: Path) -> None:
    url = make_db(tmp_path / "src.db", rows=5)
    spec = plan(url, "csv", "none", part_rows=10)
    store = Store()
    closing: list[Checkpoint] = []

    def commit(cp: Checkpoint) -> None:
        store.save(cp)
        if cp.open_file is not None and cp.open_file.closed:
            closing.append(cp)
            raise Crash  # committed, but the file was never made final

    out = tmp_path / "out"
    with task_for(url, out, spec, commit) as task, pytest.raises(Crash):
        run_slice(task, store.load(), task.clock() + 60)
    assert outputs(out) == {}
    with task_for(url, out, spec, store.save) as task:
        first = task.finish_file(closing[0])
        again = task.finish_file(closing[0])  # a second completion changes nothing
    assert first == again and first.done
    (record,) = first.files
    assert outputs(out) == {record.name: (out / record.name).read_bytes()}
    assert record.rows == 5 and record.sha256 is not None
