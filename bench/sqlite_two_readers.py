"""Would two reading threads move SQLite → Parquet within 1.2× of DuckDB? (issue #12)

    .venv/bin/python bench/sqlite_two_readers.py [--rows 5000000] [--part-rows 55482]

Not egress: a prototype of the data path. One task's parts are read two at a time, each
by its own SqliteSource (ADBC connection) on its own thread; the second part's first key
comes from an index-only step, ``SELECT id … ORDER BY id LIMIT 1 OFFSET part_rows - 1``,
so part boundaries stay those of one reader. Prints wall and CPU time against one reader
paging the same table, on the bench's generated ``events`` table (bench/data.py).
"""

from __future__ import annotations

import argparse
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import data

from egress.memory import use_system_allocator
from egress.sources.base import TableInfo
from egress.sources.sqlite import SqliteSource


def read_part(source: SqliteSource, info: TableInfo, after: int | None, rows: int) -> int:
    return sum(b.num_rows for b in source.read(info, None if after is None else (after,),
                                                rows))


def two_readers(db: Path, rows: int) -> tuple[int, float, float, float]:
    """Rows, wall seconds, CPU seconds, seconds spent finding boundaries."""
    url = f"sqlite:///{db}"
    sources = [SqliteSource(url), SqliteSource(url)]
    info = sources[0].describe(data.TABLE)
    steps = sqlite3.connect(f"file:{db}?mode=ro", uri=True, check_same_thread=False)

    def boundary(after: int | None) -> int | None:
        where = "" if after is None else f"WHERE id > {int(after)}"
        found = steps.execute(f"SELECT id FROM {data.TABLE} {where} ORDER BY id "
                              f"LIMIT 1 OFFSET {int(rows) - 1}").fetchone()
        return None if found is None else int(found[0])

    started, cpu, stepping, total = time.perf_counter(), time.process_time(), 0.0, 0
    after: int | None = None
    with ThreadPoolExecutor(2) as pool:
        while True:
            t = time.perf_counter()
            middle = boundary(after)
            stepping += time.perf_counter() - t
            first = pool.submit(read_part, sources[0], info, after, rows)
            second = pool.submit(read_part, sources[1], info, middle, rows) \
                if middle is not None else None
            total += first.result() + (second.result() if second else 0)
            if middle is None:
                break
            t = time.perf_counter()
            after = boundary(middle)
            stepping += time.perf_counter() - t
            if after is None:
                break
    for source in sources:
        source.close()
    return total, time.perf_counter() - started, time.process_time() - cpu, stepping


def one_reader(db: Path, rows: int) -> tuple[int, float, float]:
    source = SqliteSource(f"sqlite:///{db}")
    info = source.describe(data.TABLE)
    started, cpu, total = time.perf_counter(), time.process_time(), 0
    after = None
    while True:
        got, last = 0, None
        for batch in source.read(info, after, rows):
            got, last = got + batch.num_rows, batch
        total += got
        if got < rows or last is None:
            break
        after = (last.column(0)[-1].as_py(),)
    source.close()
    return total, time.perf_counter() - started, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--part-rows", type=int, default=55_482,
                        help="rows per part (default: a 16 MiB Parquet row group of events)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/egress-bench"))
    args = parser.parse_args()
    use_system_allocator()
    args.workdir.mkdir(parents=True, exist_ok=True)
    db = data.sqlite_db(args.workdir, args.rows)
    for _ in range(2):
        n, wall, cpu = one_reader(db, args.part_rows)
        print(f"one reader:  {n:,} rows in {wall:.2f} s ({cpu:.2f} s CPU)", flush=True)
        n, wall, cpu, stepping = two_readers(db, args.part_rows)
        print(f"two readers: {n:,} rows in {wall:.2f} s ({cpu:.2f} s CPU; finding "
              f"boundaries {stepping:.2f} s of it, serial)", flush=True)


if __name__ == "__main__":
    main()
