"""kill -9 during an export from MariaDB, then --resume: the output equals an uninterrupted run's.

As tests/acceptance/test_kill.py does for SQLite: the CLI runs in a subprocess on a
table of 40k rows with a composite primary key and most MariaDB types, with small parts
and short slices, and is SIGKILLed at ``KILLS`` moments drawn from ``random.Random(seed)``;
each time it is restarted with ``--resume``. After every kill the output directory may
only hold files equal to the reference's; at the end every file's SHA-256 equals the
reference's, and the reference holds every row once, in key order.
"""

from __future__ import annotations

import csv
import gzip
import io
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_kill import (
    check_after_kill,
    data_files,
    run_to_completion,
    snapshot,
    start_over,
    wait_for_commit,
)

from mariadbserver import MariaDbServer

pytestmark = [pytest.mark.slow, pytest.mark.mariadb]

SEED = 20_250_107
KILLS = 8
ROWS = 40_000
GROUP = 1000  # rows per value of the first key column

CASES = [
    pytest.param("csv", "gzip", (), id="csv-gzip"),
    pytest.param("jsonl", "none", ("--max-file-size", "3MB"), id="jsonl-split"),
    pytest.param("sql", "gzip", (), id="sql-gzip"),
    pytest.param("parquet", "zstd", ("--max-file-size", "400KB"), id="parquet"),
]


@pytest.fixture(scope="module")
def source_url(mariadb_server: MariaDbServer) -> str:
    url = mariadb_server.create_database("kill_source")
    mariadb_server.execute(
        "CREATE TABLE events (g int NOT NULL, k varchar(12) NOT NULL, amount decimal(14,4), "
        "ratio double, at datetime(6), ts timestamp(6) NULL, note text, raw varbinary(20), "
        "flag boolean, doc json, PRIMARY KEY (g, k))",
        f"INSERT INTO events SELECT seq DIV {GROUP}, CONCAT('k', LPAD(seq % {GROUP}, 5, '0')), "
        "seq / 7, seq / 3, TIMESTAMP '2024-01-01 00:00:00' + INTERVAL seq SECOND, "
        "TIMESTAMP '2024-01-01 00:00:00' + INTERVAL seq * 1001 MICROSECOND, "
        "CONCAT('note ', seq, IF(seq % 97 = 0, ' é😀,\"\\n', '')), UNHEX(SHA1(seq)), seq % 2, "
        f"JSON_OBJECT('n', seq) FROM seq_0_to_{ROWS - 1}",
        "CREATE TABLE small (id int PRIMARY KEY, name varchar(20))",
        "INSERT INTO small SELECT seq, CONCAT('n', seq) FROM seq_1_to_50",
        database="kill_source",
    )
    return url


def command(source: str, out: Path, fmt: str, compression: str,
            extra: tuple[str, ...]) -> list[str]:
    return [
        sys.executable, "-m", "egress.cli", "export", "--source", source,
        "--table", "events", "--table", "small", "--format", fmt, "--out", str(out),
        "--compression", compression, "--part-rows", "2000", "--slice-seconds", "0.3",
        "--quiet", *extra,
    ]


def check_reference(out: Path, fmt: str, compression: str) -> None:
    """The reference run holds every row of ``events`` once, in key order."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        files = sorted((out / "events").glob("*.parquet"))
        assert len(files) > 1
        table = pq.ParquetDataset([str(f) for f in files]).read()
        keys = list(zip(table.column("g").to_pylist(), table.column("k").to_pylist(),
                        strict=True))
    elif fmt == "csv":
        raw = (out / "events.csv.gz").read_bytes()
        rows = list(csv.reader(io.StringIO(gzip.decompress(raw).decode(), newline="")))[1:]
        keys = [(int(r[0]), r[1]) for r in rows]
    else:
        return  # the same rows as the others: the files are compared byte for byte
    expected = [(n // GROUP, f"k{n % GROUP:05d}") for n in range(ROWS)]
    assert keys == sorted(expected)


@pytest.mark.parametrize(("fmt", "compression", "extra"), CASES)
def test_kill_and_resume_from_mariadb_is_exactly_once(
    source_url: str, tmp_path: Path, fmt: str, compression: str, extra: tuple[str, ...]
) -> None:
    ref_dir, out = tmp_path / "reference", tmp_path / "out"
    started = time.monotonic()
    startup = run_to_completion(command(source_url, ref_dir, fmt, compression, extra), ref_dir)
    work = max(0.2, time.monotonic() - started - startup)
    reference = snapshot(ref_dir)
    check_reference(ref_dir, fmt, compression)

    rng = random.Random(f"{SEED}:{fmt}:{compression}")
    cmd = command(source_url, out, fmt, compression, extra)
    kills = completions = 0
    for _ in range(10 * KILLS):  # bounded: normally ~KILLS + 1 rounds
        resume = (out / ".egress" / "state.json").exists()
        proc = subprocess.Popen([*cmd, "--resume"] if resume else cmd,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        # a few kills during start-up, most after the process's first commit
        moment = rng.random()
        if moment >= 0.15:
            wait_for_commit(proc, out)
        try:
            proc.wait(timeout=rng.uniform(0, startup) if moment < 0.15
                      else rng.uniform(0, work / KILLS))
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
    print(f"mariadb {fmt}-{compression}: {kills} kills, {completions} completions")
    assert kills >= KILLS and completions >= 1
    if (out / ".egress").exists():  # killed during the final clean-up: --resume ends it
        subprocess.run([*cmd, "--resume"], check=True, capture_output=True)
    final = snapshot(out)
    assert set(final) == set(reference)
    assert data_files(final) == data_files(reference)
