"""kill -9 at random moments, then --resume: the output equals an uninterrupted run's.

For each format the CLI runs in a subprocess on a 200k-row table (plus a small table and
a rowid-keyed one) with small parts and short slices, and is SIGKILLed at ``KILLS`` moments
drawn from ``random.Random(seed)`` within the run's measured duration; each time it is
restarted with ``--resume``. After every kill the output directory may only hold files
equal to the reference's (no partial file under a final name); at the end the files'
SHA-256 equal the reference's and the rows read back from them are each key exactly once.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from egress.cli.demo_data import build_demo_db
from progresswatch import StateRows

pytestmark = pytest.mark.slow

SEED = 20_240_611
KILLS = 20
EVENTS = 200_000
USERS = 2_000  # DemoSizes.for_rows(EVENTS).users
TABLES = ("events", "users", "edge_cases")

CASES = [
    pytest.param("csv", "gzip", ("--max-file-size", "2MB"), id="csv-gzip-split"),
    pytest.param("csv", "none", (), id="csv"),
    pytest.param("jsonl", "gzip", (), id="jsonl-gzip"),
    pytest.param("json", "none", ("--max-file-size", "10MB"), id="json-split"),
    pytest.param("sql", "gzip", (), id="sql-gzip"),
    # files of many parts (row groups of 5,000 rows), several files: kills land inside a
    # file and between files
    pytest.param("parquet", "zstd", ("--max-file-size", "600KB"), id="parquet"),
]


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_demo_db(tmp_path_factory.mktemp("kill-db") / "demo.db", rows=EVENTS).resolve()


def command(
    source: str, out: Path, fmt: str, compression: str, extra: tuple[str, ...]
) -> list[str]:
    tables = [arg for t in TABLES for arg in ("--table", t)]
    return [
        sys.executable, "-m", "egress.cli", "export", "--source", source, *tables,
        "--format", fmt, "--out", str(out), "--compression", compression,
        "--part-rows", "5000", "--slice-seconds", "0.3", "--quiet", *extra,
    ]


def snapshot(out: Path) -> dict[str, bytes]:
    """Every file outside the state directory, by path relative to ``out``."""
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.relative_to(out).parts[0] != ".egress"
    }


def data_files(files: dict[str, bytes]) -> dict[str, str]:
    return {
        name: hashlib.sha256(data).hexdigest()
        for name, data in files.items()
        if name not in ("manifest.json", "_SUCCESS")
    }


def check_after_kill(out: Path, reference: dict[str, bytes]) -> None:
    """What a reader may see in the middle of an export: only complete, final files."""
    files = snapshot(out)
    for name, data in files.items():
        assert name in reference, f"unexpected file {name!r} after a kill"
        if name == "manifest.json":  # holds times: compare what it says about the files
            assert json.loads(data)["files"] == json.loads(reference[name])["files"]
        else:
            assert data == reference[name], f"{name} differs from the reference after a kill"
    if "_SUCCESS" in files:
        assert "manifest.json" in files  # the marker is written last


def start_over(out: Path, work: float) -> float:
    """An export finished before enough kills: it starts over from scratch, with kill
    moments drawn from a window half as long. The window comes from the reference run's
    duration, and a reference slowed by a loaded machine would otherwise let every later,
    faster run complete before its kills. Returns the new window."""
    shutil.rmtree(out)
    return work / 2


def run_to_completion(cmd: list[str], out: Path) -> float:
    """An uninterrupted run; returns how long it took to write its first state."""
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    first_state: float | None = None
    while proc.poll() is None:
        if first_state is None and (out / ".egress" / "state.json").exists():
            first_state = time.monotonic() - started
        time.sleep(0.005)
    _, stderr = proc.communicate()
    assert proc.returncode == 0, stderr
    return first_state if first_state is not None else 0.3


def wait_until_open(proc: subprocess.Popen[str], path: Path, timeout: float = 60) -> None:
    """Until the process has opened ``path``: its start-up (imports) is over. Kill moments
    are drawn from then on, so a busy machine's slow start-ups cannot swallow them all."""
    fds, target = Path(f"/proc/{proc.pid}/fd"), str(path)
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            if any(os.readlink(fd) == target for fd in fds.iterdir()):
                return
        except OSError:
            pass  # an fd closed while listing, or the process just ended
        time.sleep(0.002)


def wait_for_commit(proc: subprocess.Popen[str], out: Path, timeout: float = 60) -> None:
    """Until the process has committed a part of its own: every such round makes progress."""
    committed = StateRows(out)
    before = committed()
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        if committed() > before:
            return
        time.sleep(0.003)


def keys_in(out: Path, fmt: str, compression: str, table: str) -> list[object]:
    """The first column (the key) of every row of ``table``'s files, in file order."""
    manifest = json.loads((out / "manifest.json").read_text())
    names = next(t["files"] for t in manifest["tables"] if t["table"] == table)
    keys: list[object] = []
    for name in names:
        raw = (out / name).read_bytes()
        if compression == "gzip" and fmt != "parquet":
            raw = gzip.decompress(raw)
        if fmt == "csv":
            rows = list(csv.reader(io.StringIO(raw.decode(), newline="")))[1:]
            keys += [r[0] for r in rows]
        elif fmt == "jsonl":
            keys += [next(iter(json.loads(line).values())) for line in raw.decode().splitlines()]
        elif fmt == "json":
            keys += [next(iter(obj.values())) for obj in json.loads(raw)]
        elif fmt == "sql":
            conn = sqlite3.connect(":memory:")
            conn.executescript(raw.decode())
            keys += [r[0] for r in conn.execute(f'SELECT * FROM "{table}" ORDER BY rowid')]
            conn.close()
        else:
            import pyarrow.parquet as pq

            keys += pq.read_table(io.BytesIO(raw)).column(0).to_pylist()
    return keys


def check_parquet_layout(out: Path) -> None:
    """DuckDB reads every file and sees row groups of 5,000 rows (the part rows), zstd."""
    import duckdb

    files = sorted(str(p) for p in (out / "events").glob("*.parquet"))
    assert len(files) > 1
    con = duckdb.connect()
    listed = ", ".join(f"'{f}'" for f in files)
    assert con.sql(f"SELECT count(*) FROM read_parquet([{listed}])").fetchall() == [(EVENTS,)]
    for f in files:
        groups = con.sql(f"SELECT DISTINCT row_group_id, row_group_num_rows, compression "
                         f"FROM parquet_metadata('{f}') ORDER BY 1").fetchall()
        assert len(groups) > 1
        assert {g[2] for g in groups} == {"ZSTD"}
        assert {g[1] for g in groups[:-1]} == {5000}


def check_rows(out: Path, fmt: str, compression: str) -> None:
    events = [int(k) for k in keys_in(out, fmt, compression, "events")]  # type: ignore[call-overload]
    assert events == list(range(1, EVENTS + 1))  # every row once, in key order
    users = [int(k) for k in keys_in(out, fmt, compression, "users")]  # type: ignore[call-overload]
    assert users == list(range(1, USERS + 1))
    assert len(keys_in(out, fmt, compression, "edge_cases")) == 12
    if fmt == "parquet":
        check_parquet_layout(out)


@pytest.mark.parametrize(("fmt", "compression", "extra"), CASES)
def test_kill_and_resume_is_exactly_once(
    database: Path, tmp_path: Path, fmt: str, compression: str, extra: tuple[str, ...]
) -> None:
    source = f"sqlite:///{database}"
    ref_dir, out = tmp_path / "reference", tmp_path / "out"
    started = time.monotonic()
    startup = run_to_completion(command(source, ref_dir, fmt, compression, extra), ref_dir)
    work = max(0.2, time.monotonic() - started - startup)
    reference = snapshot(ref_dir)
    assert not (ref_dir / ".egress").exists()
    check_rows(ref_dir, fmt, compression)

    rng = random.Random(f"{SEED}:{fmt}:{compression}:{extra}")
    cmd = command(source, out, fmt, compression, extra)
    kills = completions = 0
    for _ in range(10 * KILLS):  # bounded: normally ~KILLS + 1 rounds
        resume = (out / ".egress" / "state.json").exists()
        proc = subprocess.Popen(
            [*cmd, "--resume"] if resume else cmd,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        # Kill moments: a few during start-up (before or while the state is first written),
        # some once the source is open (often before this process commits anything), most
        # after its first commit (so each round makes progress) plus up to a KILLS-th of
        # the work: about KILLS kills happen before the export completes.
        moment = rng.random()
        in_startup, in_work = rng.uniform(0, startup), rng.uniform(0, work / KILLS)
        if moment >= 0.1:
            wait_until_open(proc, database)
        if moment >= 0.25:
            wait_for_commit(proc, out)
        try:
            proc.wait(timeout=in_startup if moment < 0.1 else in_work)
        except subprocess.TimeoutExpired:
            proc.kill()
        _, stderr = proc.communicate()
        if proc.returncode == -signal.SIGKILL:
            kills += 1
            check_after_kill(out, reference)
            if not (out / "_SUCCESS").exists():
                continue
            # killed after the marker: the export is complete (a --resume would say so)
        else:
            assert proc.returncode == 0, stderr
        completions += 1
        assert data_files(snapshot(out)) == data_files(reference)
        if kills >= KILLS:
            break
        work = start_over(out, work)  # finished before enough kills
    print(f"{fmt}-{compression}: {kills} kills, {completions} completions")
    assert kills >= KILLS and completions >= 1

    if (out / ".egress").exists():  # killed during the final clean-up: --resume ends it
        subprocess.run([*cmd, "--resume"], check=True, capture_output=True)
    assert not (out / ".egress").exists()
    final = snapshot(out)
    assert set(final) == set(reference)
    assert data_files(final) == data_files(reference)
    check_rows(out, fmt, compression)
