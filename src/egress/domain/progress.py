"""Progress of an export as one read of the store sees it: what live events are made of.

Pure values, read for many exports at once by ``JobStore.export_progress_many`` (one
query per poll of the event hub, however many clients watch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from egress.domain.jobs import ExportState, TaskState


def shown_task_state(export: ExportState, task: TaskState) -> str:
    """A task's state as users see it: none of a cancelled export's tables is ``done``
    (or still ``running`` or ``queued``), since its outputs are removed."""
    if export is ExportState.CANCELLED and task is not TaskState.FAILED:
        return str(TaskState.CANCELLED)
    return str(task)


@dataclass(frozen=True)
class TaskProgress:
    table: str
    seq: int
    state: TaskState
    rows: int
    bytes: int
    #: The catalog's row estimate when the export was created (None: unknown).
    rows_estimate: int | None
    attempts: int
    error: str | None
    #: every failure (``attempts`` counts only those since the last progress)
    failures: int = 0


def retry_notice(tables: Sequence[tuple[str, int, str | None]], active: bool) -> str | None:
    """Plain words for an export that keeps going through failures, from ``(table,
    failures, last error)`` of its tables: None when nothing was retried or it ended."""
    retried = [(t, n, e) for t, n, e in tables if n > 0]
    if not active or not retried:
        return None
    parts = []
    for table, failures, error in retried:
        times = "once" if failures == 1 else f"{failures} times"
        last = f"; last error: {error}" if error else ""
        parts.append(f"table {table!r} was retried {times}{last}")
    return "still running: " + "; ".join(parts)


@dataclass(frozen=True)
class ExportProgress:
    id: str
    project: str
    state: ExportState
    error: str | None
    created_at: float
    started_at: float | None
    finished_at: float | None
    #: The latest ``updated_at`` of the export and its tasks (the store's clock): it
    #: grows with every change, so it serves as the version of this reading.
    version: float
    tasks: tuple[TaskProgress, ...]

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.tasks)

    @property
    def bytes(self) -> int:
        return sum(t.bytes for t in self.tasks)
