"""Exports as the API shows them: records and progress turned into Public models.

Rate and ETA are averages since the export started (stateless: any API node answers the
same); the live event stream measures a recent rate instead.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from egress import manager
from egress.api.schemas import ExportPublic, ExportSummary, FilePublic, TableProgress
from egress.config import Settings
from egress.domain.jobs import ExportRecord, ExportState
from egress.domain.progress import ExportProgress, retry_notice, shown_task_state
from egress.store.base import JobStore

ACTIVE_STATES = ("queued", "running")


def status_url(export_id: str) -> str:
    return f"/v1/exports/{export_id}"


def events_url(export_id: str) -> str:
    return f"/v1/exports/{export_id}/events"


def download_url(export_id: str, name: str) -> str:
    return f"/v1/exports/{export_id}/files/{quote(name)}"


def _time(value: float | None) -> dt.datetime | None:
    return None if value is None else dt.datetime.fromtimestamp(value, dt.UTC)


def _rate_eta(
    status: str, rows: int, remaining: int | None, started: float | None,
    finished: float | None, now: float,
) -> tuple[float | None, float | None]:
    if started is None:
        return None, None
    elapsed = (finished or now) - started
    rate = rows / elapsed if elapsed > 0 and rows else None
    if status == ExportState.COMPLETED:
        return rate, 0.0
    if status not in ACTIVE_STATES or remaining is None or not rate:
        return rate, None
    return rate, remaining / rate


def _summary(export: ExportRecord, tables: list[TableProgress], admin: bool) -> dict[str, Any]:
    rows = sum(t.rows for t in tables)
    estimates = [t.rows_estimate for t in tables]
    known = None not in estimates
    remaining = sum(max((t.rows_estimate or 0) - t.rows, 0) for t in tables
                    if t.status in ACTIVE_STATES) if known else None
    rate, eta = _rate_eta(str(export.state), rows, remaining, export.started_at,
                          export.finished_at, time.time())
    return {
        "id": export.id,
        "project": export.project,
        "status": export.status,
        "source": export.source,
        "format": export.format,
        "compression": export.compression,
        "destination": export.destination,
        "created_by": export.created_by,
        "tables": tables,
        "rows": rows,
        "rows_estimate": sum(e or 0 for e in estimates) if known else None,
        "bytes": sum(t.bytes for t in tables),
        "rate": None if rate is None else round(rate, 1),
        "eta_seconds": None if eta is None else round(eta, 1),
        "attempts": sum(t.attempts for t in tables),
        "failures": sum(t.failures for t in tables),
        "notice": retry_notice([(t.table, t.failures, t.error) for t in tables],
                               export.state in (ExportState.QUEUED, ExportState.RUNNING)),
        "error": export.error,
        # driver text and file paths are for operators only
        "error_detail": export.error_detail if admin else None,
        "created_at": _time(export.created_at),
        "started_at": _time(export.started_at),
        "finished_at": _time(export.finished_at),
        "status_url": status_url(export.id),
        "events_url": events_url(export.id),
    }


def export_public(store: JobStore, settings: Settings, export: ExportRecord, *,
                  admin: bool = False) -> ExportPublic:
    """The full view of one export: progress per table and its files."""
    view = manager.export_view(store, export, settings)
    tables = [TableProgress(**t) for t in view["tables"]]
    files = [
        FilePublic(table=f["table"], name=f["name"], rows=f["rows"], bytes=f["bytes"],
                   crc32c=f["crc32c"], sha256=f["sha256"],
                   download_url=download_url(export.id, f["name"]))
        for f in view["files"]
    ]
    return ExportPublic(**_summary(export, tables, admin), files=files)


def export_summaries(
    store: JobStore, exports: Sequence[ExportRecord], *, admin: bool = False
) -> list[ExportSummary]:
    """Views of many exports from two reads (the records, then all their progress)."""
    progress: dict[str, ExportProgress] = store.export_progress_many([e.id for e in exports])
    out = []
    for export in exports:
        p = progress.get(export.id)
        tables = [
            TableProgress(table=t.table, status=shown_task_state(export.state, t.state),
                          rows=t.rows,
                          rows_estimate=t.rows_estimate, bytes=t.bytes, attempts=t.attempts,
                          failures=t.failures, error=t.error)
            for t in (p.tasks if p else ())
        ]
        out.append(ExportSummary(**_summary(export, tables, admin)))
    return out
