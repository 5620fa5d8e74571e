"""Start-up of a PostgreSQL export: the whole process of exporting a tiny table.

    .venv/bin/python bench/startup.py --rows 1000 --runs 7 \
        --tree before=/path/to/old/checkout/src --tree after=src

Loads ``events`` with ``--rows`` rows into a throwaway PostgreSQL server (the tests'
``pgserver``), byte-compiles each tree (as installing egress does), then runs, for each
format, ``egress.export`` in a fresh process with each tree on ``PYTHONPATH`` in turn,
and prints the median and fastest wall time per tree. With so few rows nearly all of it
is start-up: Python, imports, connections, catalog, planning, the first part and the
manifest. Prints figures; not a test.
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHILD = (
    "import sys, egress\n"
    "from egress.memory import use_system_allocator\n"
    "use_system_allocator()\n"
    "egress.export(sys.argv[1], ['events'], to=sys.argv[2], format=sys.argv[3])\n"
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--formats", default="csv,parquet")
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=SRC",
                        help="a source tree to time (repeatable; default: this checkout)")
    args = parser.parse_args()
    trees = dict(t.split("=", 1) for t in args.tree) or {"this": str(HERE.parent / "src")}
    sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]
    import data

    from pgserver import running_server  # the tests' throwaway server

    for tree in trees.values():
        compileall.compile_dir(str(Path(tree) / "egress"), quiet=1)
    work = Path(tempfile.mkdtemp(prefix="egress-startup-"))
    child = work / "child.py"
    child.write_text(CHILD)
    try:
        with running_server() as pg:
            url = data.load_postgres(pg.url, "bench", args.rows)
            for fmt in args.formats.split(","):
                times: dict[str, list[float]] = {name: [] for name in trees}
                for _ in range(args.runs):
                    for name, tree in trees.items():  # in turn: load drifts alike
                        out = work / "out"
                        shutil.rmtree(out, ignore_errors=True)
                        started = time.perf_counter()
                        subprocess.run([sys.executable, str(child), url, str(out), fmt],
                                       env={**os.environ, "PYTHONPATH": tree}, check=True)
                        times[name].append(time.perf_counter() - started)
                print(fmt + ": " + ", ".join(
                    f"{name} median {statistics.median(t):.3f} s (fastest {min(t):.3f} s)"
                    for name, t in times.items()), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
