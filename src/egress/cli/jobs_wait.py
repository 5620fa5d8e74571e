"""``egress jobs wait``: follow an export of the job store until it ends.

Workers run the export; this only reads the store every ``interval`` seconds and shows
what it finds with the one-shot export's displays (bars on a terminal, plain lines
otherwise: egress.cli.progress_bars, progress_lines), table by table. A table split
into key ranges is shown as one line with its ranges' rows added up. Scripts use the
exit code: 0 once the export has completed, 1 if it failed, was cancelled or expired,
124 if ``timeout`` passed first (the export goes on). A job store that cannot be reached
for a while (a restart, a failover) does not end the wait: a wait of hours must not
tell a script that its export failed when only the store blinked.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from egress.config import Settings
from egress.domain.checkpoint import Checkpoint
from egress.exceptions import StoreError
from egress.export_view import ExportView, TableView, export_view, export_views
from egress.store.base import JobStore
from egress.stored_exports import get_export

#: ``timeout(1)``'s code when its time ran out, for the same reason here.
EXIT_TIMEOUT = 124


class Display(Protocol):
    """The one-shot export's displays (egress.oneshot.Progress, plus a notice line)."""

    def table_started(self, table: str, rows_estimate: int | None, checkpoint: Checkpoint
                      ) -> None: ...
    def advanced(self, table: str, checkpoint: Checkpoint) -> None: ...
    def table_done(self, table: str, checkpoint: Checkpoint) -> None: ...
    def notice(self, text: str) -> None: ...


class WaitTimeout(Exception):
    """``timeout`` seconds passed before the export ended; ``view`` is the last look
    (None: the store could not be read at all meanwhile)."""

    def __init__(self, export_id: str, view: ExportView | None) -> None:
        super().__init__(f"export {export_id} is still {view.status}" if view is not None
                         else f"export {export_id} could not be read: the job store is away")
        self.view = view


@dataclass
class _Shown:
    """What the display was last told about each table."""

    started: set[str] = field(default_factory=set)
    done: set[str] = field(default_factory=set)


def _by_table(view: ExportView) -> dict[str, list[TableView]]:
    tables: dict[str, list[TableView]] = {}
    for t in view.tables:  # a split table's ranges are consecutive tasks of one name
        tables.setdefault(t.table, []).append(t)
    return tables


def _show(display: Display, view: ExportView, shown: _Shown) -> None:
    for name, ranges in _by_table(view).items():
        if name in shown.done:
            continue
        states = {t.status for t in ranges}
        rows, size = sum(t.rows for t in ranges), sum(t.bytes for t in ranges)
        if name not in shown.started:
            if states <= {"queued"} and not rows:
                continue  # not begun: no bar yet, as a one-shot export shows it
            estimates = [t.rows_estimate for t in ranges]
            estimate = None if None in estimates else sum(e or 0 for e in estimates)
            display.table_started(name, estimate, Checkpoint(rows=rows, bytes=size))
            shown.started.add(name)
        checkpoint = Checkpoint(rows=rows, bytes=size)
        if states == {"done"}:
            display.table_done(name, checkpoint)
            shown.done.add(name)
        else:
            display.advanced(name, checkpoint)


def wait_for_export(
    store: JobStore, settings: Settings, project: str, export_id: str,
    display: Display | None, *, interval: float, timeout: float | None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ExportView:
    """Look at the export every ``interval`` seconds until it ends; its last view.
    Raises ``WaitTimeout`` once ``timeout`` seconds passed without an end, and
    ``NotFoundError`` for an export that is not in ``project`` (or was deleted). A store
    that cannot be reached is looked at again on the same schedule (said on the display
    once, and once more when it answers again)."""
    deadline = None if timeout is None else clock() + timeout
    shown = _Shown()
    view: ExportView | None = None
    away = False
    while True:
        try:
            export = get_export(store, project, export_id)
            # while it runs, its progress only (the light read of the listings); its
            # files once it has ended
            view = (export_view(store, export, settings) if export.state.terminal
                    else export_views(store, [export])[0])
        except StoreError as exc:
            if not exc.transient:
                raise
            if not away and display is not None:
                display.notice(f"{exc}; still waiting (every {interval:g} s)")
            away = True
        else:
            if away and display is not None:
                display.notice("the job store answers again")
            away = False
            if display is not None:
                _show(display, view, shown)
            if export.state.terminal:
                return view
        left = None if deadline is None else deadline - clock()
        if left is not None and left <= 0:
            raise WaitTimeout(export_id, None if away else view)
        sleep(interval if left is None else min(interval, left))
