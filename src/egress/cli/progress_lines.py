"""Plain progress lines for one-shot exports whose stderr is not a terminal (cron, CI, a log).

A bar redrawn with control characters makes an unreadable log, and no output at all makes
a long export look hung, so this writes one line per table start and end and, in between,
at most one line per ``interval`` seconds per table: rows (against the estimate), bytes,
rows per second and the time left. It implements the ``Progress`` protocol of
:mod:`egress.oneshot`, like the bars of :mod:`egress.cli.progress_bars`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TextIO

from rich.filesize import decimal

from egress.domain.checkpoint import Checkpoint


@dataclass
class _Table:
    estimate: int | None
    started: float  # monotonic time this run started the table
    rows_at_start: int  # rows already committed then (a resumed table)
    last_line: float


def _duration(seconds: float) -> str:
    hours, rest = divmod(round(seconds), 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"


class ProgressLines:
    """Progress as plain lines on a stream (stderr by default); use as a context manager."""

    def __init__(
        self,
        interval: float = 10.0,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval = interval
        self.stream = stream or sys.stderr
        self.clock = clock
        self._tables: dict[str, _Table] = {}

    def __enter__(self) -> ProgressLines:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stream.flush()

    def notice(self, text: str) -> None:
        """A notice (e.g. "stopping…"). Called from a signal handler, so one os.write to the
        stream's file descriptor (no buffered I/O that the interrupted code may hold)."""
        data = f"egress: {text}\n".encode("utf-8", "replace")
        try:
            fd = self.stream.fileno()
        except (AttributeError, OSError, ValueError):  # not a file (tests): plain write
            self.stream.write(data.decode())
            return
        os.write(fd, data)

    # --- the egress.oneshot.Progress protocol -------------------------------------------

    def table_started(self, table: str, rows_estimate: int | None, checkpoint: Checkpoint) -> None:
        now = self.clock()
        self._tables[table] = _Table(rows_estimate, now, checkpoint.rows, now)
        about = "" if rows_estimate is None else f" (~{rows_estimate:,} rows)"
        resumed = f", resuming at {checkpoint.rows:,} rows" if checkpoint.rows else ""
        self._write(f"{table}: started{about}{resumed}")

    def advanced(self, table: str, checkpoint: Checkpoint) -> None:
        state = self._tables[table]
        now = self.clock()
        if now - state.last_line < self.interval:
            return
        state.last_line = now
        self._write(f"{table}: {self._figures(state, checkpoint, now)}")

    def table_done(self, table: str, checkpoint: Checkpoint) -> None:
        state = self._tables[table]
        now = self.clock()
        rate = self._rate(state, checkpoint, now)
        per_second = "" if rate is None else f", {rate:,.0f} rows/s"
        self._write(f"{table}: done, {checkpoint.rows:,} rows, {decimal(checkpoint.bytes)} "
                    f"in {_duration(now - state.started)}{per_second}")

    def _figures(self, state: _Table, checkpoint: Checkpoint, now: float) -> str:
        rows = f"{checkpoint.rows:,} rows"
        estimate = state.estimate
        if estimate is not None and checkpoint.rows <= estimate and estimate > 0:
            rows = f"{checkpoint.rows:,}/~{estimate:,} rows ({checkpoint.rows / estimate:.0%})"
        parts = [rows, decimal(checkpoint.bytes)]
        rate = self._rate(state, checkpoint, now)
        if rate is not None:
            parts.append(f"{rate:,.0f} rows/s")
            if estimate is not None and rate > 0 and checkpoint.rows <= estimate:
                parts.append(f"ETA {_duration((estimate - checkpoint.rows) / rate)}")
        return ", ".join(parts)

    @staticmethod
    def _rate(state: _Table, checkpoint: Checkpoint, now: float) -> float | None:
        seconds = now - state.started
        done = checkpoint.rows - state.rows_at_start
        return done / seconds if seconds > 0 and done > 0 else None

    def _write(self, line: str) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()
