"""One egress export in a process of its own, for a clean peak RSS: ``egress.export``
with a progress object that records the time and row count of every committed part.

    python bench/child.py SOURCE_URL TABLE FORMAT COMPRESSION OUT_DIR TIMINGS_JSON \
        [--profile F] [--no-fsync]

Writes to TIMINGS_JSON ``{"started": [t0, cpu0], "commits": [[t, rows, bytes, cpu], …]}``
(monotonic seconds and this process's CPU seconds). With ``--profile F`` the export runs
under cProfile and the stats go to F. ``--no-fsync``: parts and checkpoints are written
but not flushed to the disk (``egress.export(fsync=False)``; to measure what durability
costs, bench/durability_cost.py).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import time
from typing import Any

import egress
from egress.memory import skip_final_collections, use_system_allocator


class CommitRecorder:
    """The ``egress.oneshot.Progress`` protocol, keeping (time, rows, bytes) per commit."""

    def __init__(self) -> None:
        self.started: tuple[float, float] | None = None
        self.commits: list[tuple[float, int, int, float]] = []

    def table_started(self, table: str, rows_estimate: int | None, checkpoint: Any) -> None:
        self.started = (time.monotonic(), time.process_time())

    def advanced(self, table: str, checkpoint: Any) -> None:
        # a file's completion commits again with the same row count: keep one per count
        if not self.commits or self.commits[-1][1] != checkpoint.rows:
            self.commits.append(
                (time.monotonic(), checkpoint.rows, checkpoint.bytes, time.process_time())
            )

    def table_done(self, table: str, checkpoint: Any) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("source", "table", "format", "compression", "out", "timings"):
        parser.add_argument(name)
    parser.add_argument("--profile")
    parser.add_argument("--no-fsync", action="store_true")
    args = parser.parse_args()
    recorder = CommitRecorder()
    use_system_allocator()  # as the egress CLI and worker do

    # ``csvpg``: CSV in the postgres dialect (the server writes the rows)
    fmt, options = ("csv", {"csv_dialect": "postgres"}) if args.format == "csvpg" else (
        args.format, {})

    def run() -> None:
        egress.export(
            args.source, [args.table], to=args.out, format=fmt,
            compression=args.compression, progress=recorder, options=options,
            fsync=not args.no_fsync,
        )

    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(run)
        profiler.dump_stats(args.profile)
    else:
        run()
    with open(args.timings, "w") as f:
        json.dump({"started": recorder.started, "commits": recorder.commits}, f)
    skip_final_collections()  # as the egress command does before its process exits


if __name__ == "__main__":
    main()
