"""One view of an export for every face of egress: the API, ``egress jobs`` and the page.

An :class:`ExportView` is what a user is shown of an export — its state, each table's
progress and retries, the files that exist, the plain error — built from the store in
one place, so the faces differ only in how they render it (JSON models, text, HTML).
Times are seconds since the epoch; each face formats them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from egress.config import Settings
from egress.domain.jobs import ExportRecord, ExportState, TaskRecord
from egress.domain.progress import ExportProgress, TaskProgress, retry_notice, shown_task_state
from egress.domain.ranges import KeyRange
from egress.store.base import JobStore
from egress.stored_exports import export_root

ACTIVE = (ExportState.QUEUED, ExportState.RUNNING)


@dataclass(frozen=True)
class TableView:
    table: str
    #: as users see it: a cancelled export's tables are never ``done``
    status: str
    rows: int
    rows_estimate: int | None
    bytes: int
    #: failures since the table last made progress, and all of them
    attempts: int
    failures: int
    error: str | None
    #: remote engines: the engine's query id, and what happened that users should know
    #: (a restart from nothing, an unload that fell back to direct)
    query_id: str | None = None
    note: str | None = None
    #: a range task of a split table: KeyRange.public() (its place, column and bounds)
    key_range: dict[str, Any] | None = None


@dataclass(frozen=True)
class FileView:
    table: str
    name: str
    #: the local path of a local destination's file, else the name
    path: str
    rows: int
    bytes: int
    crc32c: str | None
    sha256: str | None


@dataclass(frozen=True)
class ExportView:
    id: str
    project: str
    status: str
    source: str
    format: str
    compression: str
    destination: str
    created_by: str | None
    tables: tuple[TableView, ...]
    #: only files that exist: none once the outputs are removed (cancelled, cleaned, expired)
    files: tuple[FileView, ...]
    #: the plain error (API callers see this), and the detail for admins and the CLI
    error: str | None
    error_detail: str | None
    #: while it runs after failures: which tables were retried, how often, the last error
    notice: str | None
    created_at: float
    started_at: float | None
    finished_at: float | None

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.tables)

    @property
    def bytes(self) -> int:
        return sum(t.bytes for t in self.tables)

    @property
    def rows_estimate(self) -> int | None:
        estimates = [t.rows_estimate for t in self.tables]
        return None if None in estimates else sum(e or 0 for e in estimates)

    @property
    def active(self) -> bool:
        return self.status in ("queued", "running")

    def rate_eta(self, now: float) -> tuple[float | None, float | None]:
        """Rows per second since it started, and the seconds left at that rate."""
        if self.started_at is None:
            return None, None
        elapsed = (self.finished_at or now) - self.started_at
        rate = self.rows / elapsed if elapsed > 0 and self.rows else None
        if self.status == "completed":
            return rate, 0.0
        known = self.rows_estimate is not None
        if not self.active or not known or not rate:
            return rate, None
        left = sum(max((t.rows_estimate or 0) - t.rows, 0) for t in self.tables
                   if t.status in ("queued", "running"))
        return rate, left / rate

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (``egress jobs --json``): times as RFC 3339 in UTC, as the API gives."""
        out = dataclasses.asdict(self)
        out["tables"], out["files"] = list(out["tables"]), list(out["files"])
        out.update(rows=self.rows, bytes=self.bytes, rows_estimate=self.rows_estimate)
        for name in ("created_at", "started_at", "finished_at"):
            out[name] = rfc3339(out[name])
        return out


def rfc3339(moment: float | None) -> str | None:
    if moment is None:
        return None
    when = dt.datetime.fromtimestamp(moment, dt.UTC)
    return when.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _tables(export: ExportRecord, tasks: Sequence[TaskRecord | TaskProgress]
            ) -> tuple[TableView, ...]:
    return tuple(
        TableView(table=t.table, status=shown_task_state(export.state, t.state), rows=t.rows,
                  rows_estimate=t.rows_estimate, bytes=t.bytes, attempts=t.attempts,
                  failures=t.failures, error=t.error, query_id=getattr(t, "query_id", None),
                  note=getattr(t, "remote_note", None), key_range=_key_range(t))
        for t in tasks)


def _key_range(task: TaskRecord | TaskProgress) -> dict[str, Any] | None:
    key_range = KeyRange.from_json(getattr(task, "key_range", None))
    return key_range.public() if key_range is not None else None


def _view(export: ExportRecord, tables: tuple[TableView, ...],
          files: tuple[FileView, ...]) -> ExportView:
    return ExportView(
        id=export.id, project=export.project, status=export.status, source=export.source,
        format=export.format, compression=export.compression,
        destination=export.destination, created_by=export.created_by, tables=tables,
        files=files, error=export.error, error_detail=export.error_detail,
        notice=retry_notice([(t.table, t.failures, t.error) for t in tables],
                            export.state in ACTIVE),
        created_at=export.created_at, started_at=export.started_at,
        finished_at=export.finished_at)


def export_view(store: JobStore, export: ExportRecord, settings: Settings) -> ExportView:
    """The full view of one export: its tables and the files that exist (one read)."""
    tasks = store.task_list(export.id)
    dest = settings.destination(export.destination)
    local_root = export_root(settings, export) if dest.get("type", "local") == "local" else None
    files: list[FileView] = []
    # a stitched split table's file is the manifest's (its ranges' pieces are no files of
    # the export): listed once the export is complete
    stitched = {f["name"]: f for f in (export.manifest or {}).get("files", [])}
    for task in ([] if export.outputs_removed else tasks):
        name = (task.spec or {}).get("stitch_name")
        if name is not None:
            f = stitched.pop(name, None)
            if f is not None:
                files.append(FileView(
                    table=task.table, name=name,
                    path=str(local_root / name) if local_root else name, rows=f["rows"],
                    bytes=f["bytes"], crc32c=f["crc32c"], sha256=f["sha256"]))
            continue
        files += [
            FileView(table=task.table, name=f["name"],
                     path=str(local_root / f["name"]) if local_root else f["name"],
                     rows=f["rows"], bytes=f["size"],
                     crc32c=None if f["crc32c"] is None else f"{f['crc32c']:08x}",
                     sha256=f["sha256"])
            for f in (task.checkpoint or {}).get("files", [])]
    return _view(export, _tables(export, tasks), tuple(files))


def export_views(store: JobStore, exports: Sequence[ExportRecord]) -> list[ExportView]:
    """Views of many exports, without files, from one read of their progress."""
    progress: dict[str, ExportProgress] = store.export_progress_many([e.id for e in exports])
    out = []
    for export in exports:
        found = progress.get(export.id)
        out.append(_view(export, _tables(export, found.tasks if found else ()), ()))
    return out
