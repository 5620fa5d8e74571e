"""Parquet data pages against file size and peak RSS: SQLite → Parquet, one process each.

    .venv/bin/python bench/parquet_pages.py --rows 1000000 --runs 2 \
        --pages legacy,2MiB,3MiB,4MiB,chunk

Each case is one ``egress.export`` of the bench's ``events`` table (bench/data.py, the
SQLite file cached by bench/run.py) in a fresh process, with the page bounds as library
options: ``legacy`` is the layout of tasks planned before egress recorded page bounds
(Arrow's 1 MiB / 20,000 rows), ``NMiB`` a page ends at N MiB with no row bound, ``chunk``
a column chunk is one page (DuckDB's layout). ``--duckdb`` adds DuckDB's ``COPY`` of the
same table, for its file size. Prints the file's bytes and each run's wall time and peak
RSS (``wait4``); not a test.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
MiB = 1024 * 1024
CHILD = (
    "import sys, egress\n"
    "from egress.memory import use_system_allocator\n"
    "use_system_allocator()\n"
    "egress.export(sys.argv[1], ['events'], to=sys.argv[2], format='parquet',\n"
    "              compression=sys.argv[3],\n"
    "              options={'page_bytes': int(sys.argv[4]), 'page_rows': int(sys.argv[5])})\n"
)


def bounds(case: str) -> tuple[int, int]:
    """(page_bytes, page_rows) of a case name."""
    if case == "legacy":
        return MiB, 20_000
    if case == "chunk":
        return 1 << 40, 1 << 40
    if case.endswith("MiB"):
        return int(float(case[:-3]) * MiB), 1 << 40
    raise SystemExit(f"unknown page case {case!r}: legacy, chunk or NMiB (3MiB, 0.5MiB…)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--compression", default="zstd")
    parser.add_argument("--pages", default="legacy,2MiB,3MiB,4MiB,chunk")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/egress-bench"))
    parser.add_argument("--duckdb", action="store_true")
    parser.add_argument("--source", help="a database URL holding the events table instead "
                        "of the cached SQLite file (e.g. a PostgreSQL database loaded by "
                        "bench/data.py's load_postgres); --duckdb reads SQLite only")
    args = parser.parse_args()
    sys.path[:0] = [str(HERE)]
    import data
    import tools
    from measure import compile_egress, measure, output_size

    compile_egress()
    db = None if args.source else data.sqlite_db(args.workdir, args.rows)
    source = args.source or f"sqlite:///{db}"
    work = Path(tempfile.mkdtemp(prefix="egress-pages-"))
    child = work / "child.py"
    child.write_text(CHILD)
    try:
        print(f"{args.rows:,} rows from {db.name if db else args.source}, {args.compression}:")
        for case in args.pages.split(","):
            page_bytes, page_rows = bounds(case)
            runs, size = [], 0
            for _ in range(args.runs):
                out = work / "out"
                shutil.rmtree(out, ignore_errors=True)
                m = measure([sys.executable, str(child), source, str(out),
                             args.compression, str(page_bytes), str(page_rows)])
                if m.error:
                    print(f"  {case}: {m.error}")
                    return 1
                size = output_size(out)[0]
                runs.append(f"{m.seconds:.2f} s / {m.peak_rss_mb:.0f} MB")
            print(f"  {case:>7}: {size:,} bytes; runs (wall / peak RSS): {', '.join(runs)}")
        if args.duckdb and db:
            out = work / "duck.parquet"
            python = tools.ensure_duckdb_env(tools.DEFAULT_DUCKDB_ENV)
            tool = tools.duckdb_tool(python, "sqlite", str(db), "events", out,
                                     args.compression)
            subprocess.run(tool.argv, check=True)
            print(f"  DuckDB COPY: {out.stat().st_size:,} bytes")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
