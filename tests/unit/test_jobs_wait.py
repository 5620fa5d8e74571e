"""``egress jobs wait`` feeds what it reads from the store to the one-shot export's
displays: a table's bar starts when the table has begun, a split table's ranges add up
to one bar, and a table is done once every range of it is."""

from __future__ import annotations

from typing import Any

from egress.cli.jobs_wait import _show, _Shown
from egress.domain.checkpoint import Checkpoint
from egress.export_view import ExportView, TableView


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def table_started(self, table: str, rows_estimate: int | None, checkpoint: Checkpoint
                      ) -> None:
        self.calls.append(("started", table, rows_estimate, checkpoint.rows, checkpoint.bytes))

    def advanced(self, table: str, checkpoint: Checkpoint) -> None:
        self.calls.append(("advanced", table, checkpoint.rows, checkpoint.bytes))

    def table_done(self, table: str, checkpoint: Checkpoint) -> None:
        self.calls.append(("done", table, checkpoint.rows, checkpoint.bytes))


def _table(name: str, status: str, rows: int, estimate: int | None = 100) -> TableView:
    return TableView(table=name, status=status, rows=rows, rows_estimate=estimate,
                     bytes=rows * 10, attempts=0, failures=0, error=None)


def _view(*tables: TableView) -> ExportView:
    return ExportView(id="exp_1", project="default", status="running", source="main",
                      format="csv", compression="none", destination="local",
                      created_by=None, tables=tables, files=(), error=None,
                      error_detail=None, notice=None, created_at=0.0, started_at=1.0,
                      finished_at=None)


def test_tables_start_advance_and_end_as_the_store_shows_them() -> None:
    display, shown = Recorder(), _Shown()
    looks = [
        _view(_table("a", "queued", 0), _table("a", "queued", 0), _table("b", "queued", 0)),
        _view(_table("a", "running", 10), _table("a", "running", 20), _table("b", "queued", 0)),
        _view(_table("a", "done", 100), _table("a", "running", 90), _table("b", "queued", 0)),
        _view(_table("a", "done", 100), _table("a", "done", 100), _table("b", "running", 5)),
        _view(_table("a", "done", 100), _table("a", "done", 100), _table("b", "done", 100)),
        _view(_table("a", "done", 100), _table("a", "done", 100), _table("b", "done", 100)),
    ]
    for view in looks:
        _show(display, view, shown)
    assert display.calls == [
        ("started", "a", 200, 30, 300), ("advanced", "a", 30, 300),
        ("advanced", "a", 190, 1900),
        ("done", "a", 200, 2000), ("started", "b", 100, 5, 50), ("advanced", "b", 5, 50),
        ("done", "b", 100, 1000),
    ]


def test_a_table_seen_first_when_done_or_without_an_estimate() -> None:
    display = Recorder()
    _show(display, _view(_table("a", "done", 7, None), _table("b", "failed", 3, None)), _Shown())
    assert display.calls == [
        ("started", "a", None, 7, 70), ("done", "a", 7, 70),
        ("started", "b", None, 3, 30), ("advanced", "b", 3, 30),
    ]


def test_a_bar_of_a_table_that_moved_no_row_here_shows_no_rate() -> None:
    import io

    from rich.console import Console

    from egress.cli.progress_bars import ExportProgress

    out = io.StringIO()
    with ExportProgress(Console(file=out, width=140, force_terminal=False)) as bars:
        bars.table_started("first", None, Checkpoint(rows=10, bytes=100))
        bars.table_done("first", Checkpoint(rows=10, bytes=100))
        bars.table_started("second", 50, Checkpoint(rows=0))
        bars.table_done("second", Checkpoint(rows=50, bytes=500))
    first = next(line for line in out.getvalue().splitlines() if line.startswith("first"))
    assert "– rows/s" in first and "0 rows/s" not in first
    second = next(line for line in out.getvalue().splitlines() if line.startswith("second"))
    assert "– rows/s" not in second and " rows/s" in second
