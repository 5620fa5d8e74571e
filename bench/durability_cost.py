"""What durability costs an export that writes a lot: egress with and without ``fsync``,
and DuckDB's ``COPY`` with and without flushing its file to the disk afterwards.

    .venv/bin/python bench/durability_cost.py --rows 5000000 --format parquet --rounds 3

egress flushes every part to the disk before its checkpoint says it is there (the
exactly-once protocol: a checkpoint never names bytes a crash could lose). DuckDB's
``COPY … TO`` returns with its file in the page cache, dirty, for the kernel to write
back later. When the output is large (uncompressed Parquet of the 5M-row table is
~1.4 GB) the difference is the disk's write speed, not CPU. Each round runs, in a fresh
process each and in turns:

- egress (``bench/child.py``), parts flushed (as always);
- egress with ``--no-fsync`` (a measurement only: no user can ask for it);
- DuckDB's ``COPY`` of the same SQLite table (as ``bench/run.py`` runs it), then an
  ``fsync`` of its file from this process, timed apart: what DuckDB's output would take
  to be on the disk.

Before each run the outputs of the previous one are deleted and ``sync`` empties the
page cache's dirty pages, so every run starts from the same state. Last, the disk's own
speed: the same number of bytes written and flushed by this process. Prints figures;
not a test.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import data
import tools
from measure import Measured, compile_egress, measure, output_size

CHILD = Path(__file__).resolve().parent / "child.py"
DUCKDB_CODECS = {"none": "uncompressed", "zstd": "zstd", "snappy": "snappy"}


def settle(*paths: Path) -> None:
    """Delete ``paths`` and write every dirty page back: the next run starts clean."""
    for path in paths:
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    os.sync()


def egress_run(source: str, fmt: str, codec: str, out: Path, *, flush: bool) -> Measured:
    cmd = [sys.executable, str(CHILD), f"sqlite:///{source}", data.TABLE, fmt, codec,
           str(out), str(out.parent / "timings.json")]
    return measure(cmd + ([] if flush else ["--no-fsync"]))


def duckdb_run(python: Path, source: Path, codec: str, out: Path) -> tuple[Measured, float]:
    """DuckDB's COPY, then how long an ``fsync`` of the file it left took."""
    tool = tools.duckdb_tool(python, "sqlite", str(source), data.TABLE, out,
                             DUCKDB_CODECS[codec])
    measured = measure(tool.argv)
    started = time.perf_counter()
    fd = os.open(out, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return measured, time.perf_counter() - started


def disk_write(path: Path, nbytes: int) -> float:
    """Seconds to write ``nbytes`` (random bytes, 8 MiB at a time) and flush them."""
    block = os.urandom(8 << 20)
    started = time.perf_counter()
    with open(path, "wb") as f:
        for _ in range(max(1, nbytes // len(block))):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
    seconds = time.perf_counter() - started
    path.unlink()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--format", default="parquet",
                        help="FORMAT[.COMPRESSION] as bench/run.py takes (default parquet.none)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/egress-bench"))
    parser.add_argument("--duckdb-env", type=Path, default=tools.DEFAULT_DUCKDB_ENV)
    args = parser.parse_args()
    fmt, _, codec = args.format.partition(".")
    codec = codec or "none"
    if fmt != "parquet" or codec not in DUCKDB_CODECS:
        parser.error(f"--format must be parquet.{{{','.join(DUCKDB_CODECS)}}} (DuckDB's "
                     f"COPY is the comparison), got {args.format!r}")

    args.workdir.mkdir(parents=True, exist_ok=True)
    source = data.sqlite_db(args.workdir, args.rows)
    python = tools.ensure_duckdb_env(args.duckdb_env)
    compile_egress()
    work = args.workdir / "durability"
    work.mkdir(exist_ok=True)
    out, duck = work / "egress", work / "duckdb.parquet"
    # a warm page cache for every reader, read in blocks: a child forked from a process
    # that held the whole file would report that peak as its own (ru_maxrss outlives exec)
    with open(source, "rb") as f:
        while f.read(1 << 24):
            pass

    figures: dict[str, list[float]] = {}

    def keep(name: str, value: float) -> None:
        figures.setdefault(name, []).append(value)

    size = 0
    for round_ in range(1, args.rounds + 1):
        for flush in (True, False):
            settle(out, duck)
            m = egress_run(str(source), fmt, codec, out, flush=flush)
            if m.error:
                raise SystemExit(f"egress failed: {m.error}")
            size = output_size(out)[0]
            label = "egress, parts flushed" if flush else "egress, --no-fsync"
            keep(f"{label}: wall s", m.seconds)
            keep(f"{label}: CPU s", m.cpu_seconds)
            print(f"round {round_}: {label}: {m.seconds:.2f} s wall, {m.cpu_seconds:.2f} s "
                  f"CPU, {m.peak_rss_mb:.0f} MB RSS, {size / 1e6:.0f} MB", flush=True)
        settle(out, duck)
        m, flushing = duckdb_run(python, source, codec, duck)
        if m.error:
            raise SystemExit(f"DuckDB failed: {m.error}")
        keep("DuckDB COPY: wall s", m.seconds)
        keep("DuckDB COPY: CPU s", m.cpu_seconds)
        keep("DuckDB's file flushed afterwards: s", flushing)
        keep("DuckDB COPY + flush: wall s", m.seconds + flushing)
        print(f"round {round_}: DuckDB COPY: {m.seconds:.2f} s wall, {m.cpu_seconds:.2f} s "
              f"CPU, then {flushing:.2f} s to flush its {duck.stat().st_size / 1e6:.0f} MB",
              flush=True)
    settle(out, duck)
    for _ in range(args.rounds):
        keep("the disk: the same bytes written and flushed, s",
             disk_write(work / "disk.probe", size))
        os.sync()

    print(f"\n{args.rows:,} rows, {fmt} {codec}, {args.rounds} rounds (median, min–max):")
    for name, values in figures.items():
        print(f"  {name}: {statistics.median(values):.2f} ({min(values):.2f}–"
              f"{max(values):.2f})")
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
