"""kill -9 during a postgres-dialect CSV export of a PostgreSQL table, then --resume.

The CLI runs in a subprocess with small parts and short slices and is SIGKILLed at
``KILLS`` moments drawn from ``random.Random(SEED)``; each time it is restarted with
``--resume``. A kill may leave only files equal to the reference's; at the end the files
equal an uninterrupted run's byte for byte (as tests/acceptance/test_kill.py checks for
egress's own formats on SQLite).
"""

from __future__ import annotations

import gzip
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
from test_kill import start_over, wait_for_commit

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

SEED = 20_241_125
KILLS = 12
ROWS = 60_000


def snapshot(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.relative_to(out).parts[0] != ".egress"}


@pytest.mark.parametrize("compression", ["gzip", "none"])
def test_kill_and_resume_is_byte_identical(pg_url: str, tmp_path: Path,
                                           compression: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE events (id bigint PRIMARY KEY, at timestamptz NOT NULL, "
                     "note text, ok boolean)")
        conn.execute(f"""INSERT INTO events SELECT i,
            timestamptz '2024-01-01 00:00:00+00' + i * interval '1.5 s',
            CASE WHEN i % 9 = 0 THEN NULL ELSE 'note, "' || i || E'"\\n' || repeat('x', i % 40)
            END, i % 3 = 0 FROM generate_series(1, {ROWS}) AS i""")
    cmd = [sys.executable, "-m", "egress.cli", "export", "--source", pg_url, "--table",
           "events", "--format", "csv", "--csv-dialect", "postgres", "--compression",
           compression, "--part-rows", "2000",
           "--max-file-size", "150KB" if compression == "gzip" else "1MB",
           "--slice-seconds", "0.2", "--quiet"]
    ref_dir, out = tmp_path / "reference", tmp_path / "out"
    started = time.monotonic()
    subprocess.run([*cmd, "--out", str(ref_dir)], check=True, capture_output=True)
    work = max(0.2, time.monotonic() - started)
    reference = snapshot(ref_dir)
    data = {k: v for k, v in reference.items() if k not in ("manifest.json", "_SUCCESS")}
    assert len(data) > 1  # several files: kills land inside a file and between files
    text = b"".join(gzip.decompress(v) if compression == "gzip" else v
                    for _, v in sorted(data.items()))
    assert text.count(b"\nid,at,note,ok\n") == len(data) - 1  # a header in every file

    rng = random.Random(f"{SEED}:{compression}")
    kills = 0
    for _ in range(10 * KILLS):  # bounded: normally ~KILLS + 1 rounds
        resume = ["--resume"] if (out / ".egress" / "state.json").exists() else []
        proc = subprocess.Popen([*cmd, "--out", str(out), *resume],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if rng.random() >= 0.2:
            wait_for_commit(proc, out)
        try:
            proc.wait(timeout=rng.uniform(0, work / KILLS))
        except subprocess.TimeoutExpired:
            proc.kill()
        _, stderr = proc.communicate()
        if proc.returncode == -signal.SIGKILL:
            kills += 1
            for name, got in snapshot(out).items():  # only complete, final files
                assert name in reference, name
                if name not in ("manifest.json", "_SUCCESS"):
                    assert got == reference[name], f"{name} differs after a kill"
            if not (out / "_SUCCESS").exists():
                continue
        else:
            assert proc.returncode == 0, stderr
        done = {k: v for k, v in snapshot(out).items() if k not in ("manifest.json", "_SUCCESS")}
        assert done == data
        if kills >= KILLS:
            break
        work = start_over(out, work)  # finished before enough kills
    assert kills >= KILLS
