"""Rich progress bars for one-shot exports: one bar per table.

Each bar shows rows written against the catalog's row estimate, bytes written (after
compression), rows per second and the time left. It implements the ``Progress``
protocol of :mod:`egress.oneshot`, fed after every committed part, so on ``--resume`` a
bar starts where the checkpoint is.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from types import TracebackType

from rich.console import Console, RenderableType
from rich.filesize import decimal
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Column
from rich.text import Text

from egress.domain.checkpoint import Checkpoint


def _no_wrap() -> Column:
    return Column(no_wrap=True)


class RowsColumn(ProgressColumn):
    """``12,345/~1,000,000 rows`` while running (``~``: the catalog's estimate), then
    ``1,000,000 rows``."""

    def __init__(self) -> None:
        super().__init__(table_column=_no_wrap())

    def render(self, task: Task) -> Text:
        done = f"{int(task.completed):,}"
        if task.total is None or task.finished:
            return Text(f"{done} rows", style="progress.download")
        return Text(f"{done}/~{int(task.total):,} rows", style="progress.download")


class BytesColumn(ProgressColumn):
    """Bytes written so far (what lands in the files, i.e. after compression)."""

    def __init__(self) -> None:
        super().__init__(table_column=_no_wrap())

    def render(self, task: Task) -> Text:
        return Text(decimal(int(task.fields.get("bytes", 0))), style="progress.filesize")


class RowRateColumn(ProgressColumn):
    """Rows per second: Rich's moving estimate while running, else this run's average."""

    def __init__(self) -> None:
        super().__init__(table_column=_no_wrap())

    def render(self, task: Task) -> Text:
        speed = None if task.finished else task.speed
        if speed is None:
            speed = task.fields.get("rate")
        if speed is None:
            return Text("– rows/s", style="progress.data.speed")
        return Text(f"{speed:,.0f} rows/s", style="progress.data.speed")


class _Bars(Progress):
    """Rich's Progress plus one line of notice under the bars (e.g. "stopping…")."""

    notice: str | None = None

    def get_renderables(self) -> Iterable[RenderableType]:
        yield self.make_tasks_table(self.tasks)
        if self.notice:
            yield Text(self.notice, style="yellow")


class ExportProgress:
    """Progress bars for ``egress.export(progress=…)``; use as a context manager."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self._bars = _Bars(
            TextColumn("[bold]{task.description}", table_column=_no_wrap()),
            BarColumn(bar_width=None),
            RowsColumn(),
            BytesColumn(),
            RowRateColumn(),
            TimeElapsedColumn(table_column=_no_wrap()),
            TextColumn("ETA", table_column=_no_wrap()),
            TimeRemainingColumn(table_column=_no_wrap()),
            console=self.console,
            refresh_per_second=8,
            expand=True,
        )
        self._tasks: dict[str, TaskID] = {}
        self._totals: dict[str, int | None] = {}
        #: (monotonic time, rows) when each table started in this run, for the average rate
        self._starts: dict[str, tuple[float, int]] = {}
        self._started = False

    def __enter__(self) -> ExportProgress:
        # the display starts with the first table: an early error prints nothing but itself
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._started:
            self._bars.stop()

    def notice(self, text: str) -> None:
        """Show ``text`` under the bars. Only sets an attribute: safe in a signal handler."""
        self._bars.notice = text

    # --- the egress.oneshot.Progress protocol -------------------------------------------

    def table_started(self, table: str, rows_estimate: int | None, checkpoint: Checkpoint) -> None:
        if not self._started:
            self._bars.start()
            self._started = True
        total = None if rows_estimate is None else max(rows_estimate, checkpoint.rows)
        self._totals[table] = total
        self._starts[table] = (time.monotonic(), checkpoint.rows)
        self._tasks[table] = self._bars.add_task(
            table, total=total, completed=checkpoint.rows, bytes=checkpoint.bytes
        )

    def advanced(self, table: str, checkpoint: Checkpoint) -> None:
        task_id = self._tasks[table]
        total = self._totals[table]
        if total is not None and checkpoint.rows > total:
            # more rows than the estimate (rows inserted meanwhile): grow the bar's end
            self._totals[table] = checkpoint.rows
            self._bars.update(task_id, total=checkpoint.rows)
        rate = self._rate(table, checkpoint)
        self._bars.update(task_id, completed=checkpoint.rows, bytes=checkpoint.bytes, rate=rate)

    def table_done(self, table: str, checkpoint: Checkpoint) -> None:
        self._bars.update(
            self._tasks[table],
            total=checkpoint.rows,
            completed=checkpoint.rows,
            bytes=checkpoint.bytes,
            rate=self._rate(table, checkpoint),
        )

    def _rate(self, table: str, checkpoint: Checkpoint) -> float | None:
        # None ("– rows/s") for a table that moved no row in this run (resumed when already
        # written, or first seen done by ``egress jobs wait``), not "0 rows/s"
        started, rows = self._starts[table]
        seconds = time.monotonic() - started
        done = checkpoint.rows - rows
        return done / seconds if seconds > 0 and done > 0 else None
