"""Start-up of the ``egress`` commands an operator runs often: wall and CPU seconds.

    .venv/bin/python bench/cli_startup.py --runs 5 \
        --tree before=/path/to/old/checkout/src --tree after=src

For each tree (on ``PYTHONPATH`` in turn, byte-compiled first as installing egress
does), runs ``egress jobs ls``, ``egress tokens ls``, ``egress --help`` and a one-shot
``egress export`` of a 100-row SQLite table in fresh processes, against one home with a
migrated SQLite store, interleaving the trees run by run, and prints the median and
fastest of each. Prints figures; not a test.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS = {
    "jobs ls": ["jobs", "ls"],
    "tokens ls": ["tokens", "ls"],
    "--help": ["--help"],
    "export": ["export", "--source", "sqlite:///{db}", "--table", "t", "--format", "csv",
               "--out", "{out}", "-q"],
}


def _run(tree: Path, argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "egress.cli", *argv], check=True,
                   env={**env, "PYTHONPATH": str(tree)}, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tree", action="append", required=True, metavar="NAME=SRC")
    args = parser.parse_args()
    trees = {name: Path(path).resolve() for name, path in
             (t.split("=", 1) for t in args.tree)}
    for tree in trees.values():
        compileall.compile_dir(str(tree), quiet=1)
    work = Path(tempfile.mkdtemp(prefix="egress-cli-startup-"))
    try:
        db = work / "small.db"
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT)")
            conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, f"n{i}") for i in range(100)])
        env = {k: v for k, v in os.environ.items() if not k.startswith("EGRESS_")}
        env["EGRESS_HOME"] = str(work / "home")
        first = next(iter(trees.values()))
        subprocess.run([sys.executable, "-m", "egress.cli", "migrate"], check=True,
                       env={**env, "PYTHONPATH": str(first)}, stdout=subprocess.DEVNULL)
        figures: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for run in range(args.runs):
            for label, argv in COMMANDS.items():
                for name, tree in trees.items():
                    out = work / f"out-{name}-{run}"
                    filled = [a.format(db=db, out=out) for a in argv]
                    figures.setdefault((label, name), []).append(_run(tree, filled, env))
                    shutil.rmtree(out, ignore_errors=True)
        print(f"{'command':<12}{'tree':<10}{'wall median':>12}{'fastest':>9}"
              f"{'CPU median':>12}{'least':>8}")
        for (label, name), runs in figures.items():
            walls, cpus = [w for w, _ in runs], [c for _, c in runs]
            print(f"{label:<12}{name:<10}{statistics.median(walls):>11.3f}s"
                  f"{min(walls):>8.3f}s{statistics.median(cpus):>11.3f}s{min(cpus):>7.3f}s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
