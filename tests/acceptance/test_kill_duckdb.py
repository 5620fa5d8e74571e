"""kill -9 at random moments, then --resume, from a DuckDB source: the output equals an
uninterrupted run's, byte for byte (as test_kill.py checks for SQLite).

The CLI exports a 100k-row table keyed by its primary key and a 20k-row table without
one (read in rowid order) from a DuckDB file, in small parts and short slices, and is
SIGKILLed at ``KILLS`` moments drawn from ``random.Random(seed)``; each time it is
restarted with ``--resume``. At the end the files' SHA-256 equal the reference's and the
rows read back are each key exactly once, in key order.
"""

from __future__ import annotations

import gzip
import io
import json
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from test_kill import (
    check_after_kill,
    data_files,
    run_to_completion,
    snapshot,
    start_over,
    wait_for_commit,
    wait_until_open,
)

pytestmark = pytest.mark.slow

SEED = 20_260_611
KILLS = 8
EVENTS = 100_000
LOG = 20_000
TABLES = ("events", "log")

#: a SQL dump row's first value: an integer or a quoted string
FIRST_VALUE = re.compile(r"\((-?\d+|'(?:[^']|'')*')[,)]")

CASES = [
    pytest.param("jsonl", "gzip", (), id="jsonl-gzip"),
    pytest.param("sql", "zstd", (), id="sql-zstd"),
    pytest.param("parquet", "zstd", ("--max-file-size", "600KB"), id="parquet"),
]


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("kill-duckdb") / "kill.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TYPE kind AS ENUM ('click', 'view', 'buy')")
    con.execute(f"""
        CREATE TABLE events (id BIGINT PRIMARY KEY, ts TIMESTAMPTZ, kind kind,
          amount DECIMAL(12,2), big HUGEINT, note VARCHAR, tags VARCHAR[]);
        INSERT INTO events SELECT g, TIMESTAMPTZ '2024-01-01 00:00:00+00' + g * INTERVAL '1 s',
          (['click', 'view', 'buy'])[1 + g % 3]::kind, (hash(g) % 100000) / 100,
          g * 100000000000000000000000, md5(g::VARCHAR) || ' é ' || (g % 7), ['t' || (g % 5)]
        FROM range(1, {EVENTS + 1}) r(g);
        CREATE TABLE log (line VARCHAR, n INTEGER);
        INSERT INTO log SELECT 'line ' || g, g FROM range(0, {LOG}) r(g);
    """)
    con.close()
    return path.resolve()


def command(source: str, out: Path, fmt: str, compression: str,
            extra: tuple[str, ...]) -> list[str]:
    tables = [arg for t in TABLES for arg in ("--table", t)]
    return [
        sys.executable, "-m", "egress.cli", "export", "--source", source, *tables,
        "--format", fmt, "--out", str(out), "--compression", compression,
        "--part-rows", "5000", "--slice-seconds", "0.3", "--quiet", *extra,
    ]


def first_columns(out: Path, fmt: str, compression: str, table: str) -> list[object]:
    """The first column of every row of ``table``'s files, in file order."""
    manifest = json.loads((out / "manifest.json").read_text())
    names = next(t["files"] for t in manifest["tables"] if t["table"] == table)
    values: list[object] = []
    for name in names:
        raw = (out / name).read_bytes()
        if fmt == "parquet":
            values += pq.read_table(io.BytesIO(raw)).column(0).to_pylist()
            continue
        if compression == "gzip":
            raw = gzip.decompress(raw)
        elif compression == "zstd":
            import zstandard

            with zstandard.ZstdDecompressor().stream_reader(
                io.BytesIO(raw), read_across_frames=True
            ) as reader:
                raw = reader.read()
        if fmt == "jsonl":
            values += [next(iter(json.loads(line).values())) for line in raw.decode().splitlines()]
        else:  # a SQL dump: a row per line, "(first, …),"; the dump loading back into
            # DuckDB is tests/integration/test_roundtrip_duckdb.py's (here 100k rows of
            # INSERT took DuckDB 20–40 s to parse)
            for line in raw.decode().splitlines():
                if line.startswith("("):
                    found = FIRST_VALUE.match(line)
                    assert found is not None, line
                    text = found.group(1)
                    values.append(text[1:-1].replace("''", "'") if text.startswith("'")
                                  else int(text))
    return values


def check_rows(out: Path, fmt: str, compression: str) -> None:
    events = first_columns(out, fmt, compression, "events")
    assert events == list(range(1, EVENTS + 1))  # every row once, in key order
    log = first_columns(out, fmt, compression, "log")
    assert log == [f"line {g}" for g in range(LOG)]  # rowid order: insertion order


@pytest.mark.parametrize(("fmt", "compression", "extra"), CASES)
def test_kill_and_resume_from_duckdb_is_exactly_once(
    database: Path, tmp_path: Path, fmt: str, compression: str, extra: tuple[str, ...]
) -> None:
    source = f"duckdb:///{database}"
    ref_dir, out = tmp_path / "reference", tmp_path / "out"
    started = time.monotonic()
    startup = run_to_completion(command(source, ref_dir, fmt, compression, extra), ref_dir)
    work = max(0.2, time.monotonic() - started - startup)
    reference = snapshot(ref_dir)
    check_rows(ref_dir, fmt, compression)

    rng = random.Random(f"{SEED}:{fmt}:{compression}:{extra}")
    cmd = command(source, out, fmt, compression, extra)
    kills = completions = 0
    for _ in range(10 * KILLS):  # bounded: normally ~KILLS + 1 rounds
        resume = (out / ".egress" / "state.json").exists()
        proc = subprocess.Popen([*cmd, "--resume"] if resume else cmd,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
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
        else:
            assert proc.returncode == 0, stderr
        completions += 1
        assert data_files(snapshot(out)) == data_files(reference)
        if kills >= KILLS:
            break
        work = start_over(out, work)  # finished before enough kills
    print(f"duckdb {fmt}-{compression}: {kills} kills, {completions} completions")
    assert kills >= KILLS and completions >= 1

    if (out / ".egress").exists():  # killed during the final clean-up: --resume ends it
        subprocess.run([*cmd, "--resume"], check=True, capture_output=True)
    final = snapshot(out)
    assert set(final) == set(reference)
    # the reference's rows were checked above; these files are its bytes, in its order
    assert data_files(final) == data_files(reference)
    assert json.loads(final["manifest.json"])["files"] \
        == json.loads(reference["manifest.json"])["files"]
