"""``egress jobs wait`` feeds what it reads from the store to the one-shot export's
displays: a table's bar starts when the table has begun, a split table's ranges add up
to one bar, and a table is done once every range of it is. A store that cannot be
reached for a while does not end the wait; one that refuses does."""

from __future__ import annotations

from typing import Any

import pytest

from egress.cli.jobs_wait import WaitTimeout, _show, _Shown, wait_for_export
from egress.domain.checkpoint import Checkpoint
from egress.exceptions import StoreError
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


class _Export:
    def __init__(self, terminal: bool) -> None:
        self.state = type("State", (), {"terminal": terminal})()


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def _scripted(monkeypatch: pytest.MonkeyPatch, looks: list[Any]) -> None:
    """get_export answers ``looks`` in turn: an exception is raised, True/False is an
    export that has (not) ended."""
    import egress.cli.jobs_wait as jobs_wait

    def get_export(store: Any, project: str, export_id: str) -> _Export:
        look = looks.pop(0)
        if isinstance(look, BaseException):
            raise look
        return _Export(look)

    monkeypatch.setattr(jobs_wait, "get_export", get_export)
    monkeypatch.setattr(jobs_wait, "export_view",
                        lambda store, export, settings: _view(_table("a", "done", 5)))
    monkeypatch.setattr(jobs_wait, "export_views",
                        lambda store, exports: [_view(_table("a", "running", 5))])


class Notices(Recorder):
    def notice(self, text: str) -> None:
        self.calls.append(("notice", text))


def test_a_store_away_for_a_while_does_not_end_the_wait(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    away = StoreError("job store unavailable: connection refused")
    _scripted(monkeypatch, [False, away, away, False, True])
    clock, display = _Clock(), Notices()
    view = wait_for_export(None, None, "default", "exp_1", display,  # type: ignore[arg-type]
                           interval=2.0, timeout=None, clock=clock, sleep=clock.sleep)
    assert view.id == "exp_1" and clock.slept == [2.0] * 4
    notices = [c[1] for c in display.calls if c[0] == "notice"]
    assert notices == ["job store unavailable: connection refused; still waiting (every 2 s)",
                       "the job store answers again"]


def test_a_store_that_refuses_ends_the_wait_and_a_timeout_says_what_it_saw(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    refused = StoreError("job store refused the operation: permission denied")
    refused.transient = False
    _scripted(monkeypatch, [False, refused])
    clock = _Clock()
    with pytest.raises(StoreError, match="refused"):
        wait_for_export(None, None, "default", "exp_1", None,  # type: ignore[arg-type]
                        interval=1.0, timeout=None, clock=clock, sleep=clock.sleep)

    _scripted(monkeypatch, [False, False, False, False])
    clock = _Clock()
    with pytest.raises(WaitTimeout, match="exp_1 is still running") as seen:
        wait_for_export(None, None, "default", "exp_1", None,  # type: ignore[arg-type]
                        interval=1.0, timeout=2.5, clock=clock, sleep=clock.sleep)
    assert clock.slept == [1.0, 1.0, 0.5] and seen.value.view is not None

    _scripted(monkeypatch, [StoreError("job store unavailable: gone")] * 3)
    clock = _Clock()
    with pytest.raises(WaitTimeout, match="could not be read"):
        wait_for_export(None, None, "default", "exp_1", None,  # type: ignore[arg-type]
                        interval=1.0, timeout=1.5, clock=clock, sleep=clock.sleep)
