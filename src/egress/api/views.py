"""Exports as the API shows them: the one export view (egress/export_view.py) rendered
as the API's models.

Rate and ETA are averages since the export started (stateless: any API node answers the
same); the live event stream measures a recent rate instead.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from egress.api.schemas import ExportPublic, ExportSummary, FilePublic, TableProgress
from egress.config import Settings
from egress.domain.jobs import ExportRecord
from egress.export_view import ExportView, export_view, export_views
from egress.store.base import JobStore


def status_url(export_id: str) -> str:
    return f"/v1/exports/{export_id}"


def events_url(export_id: str) -> str:
    return f"/v1/exports/{export_id}/events"


def download_url(export_id: str, name: str) -> str:
    return f"/v1/exports/{export_id}/files/{quote(name)}"


def _time(value: float | None) -> dt.datetime | None:
    return None if value is None else dt.datetime.fromtimestamp(value, dt.UTC)


def _summary(view: ExportView, admin: bool) -> dict[str, Any]:
    rate, eta = view.rate_eta(time.time())
    return {
        "id": view.id, "project": view.project, "status": view.status, "source": view.source,
        "format": view.format, "compression": view.compression,
        "destination": view.destination, "created_by": view.created_by,
        "tables": [TableProgress(**dataclasses.asdict(t)) for t in view.tables],
        "rows": view.rows, "rows_estimate": view.rows_estimate, "bytes": view.bytes,
        "rate": None if rate is None else round(rate, 1),
        "eta_seconds": None if eta is None else round(eta, 1),
        "attempts": sum(t.attempts for t in view.tables),
        "failures": sum(t.failures for t in view.tables),
        "notice": view.notice, "error": view.error,
        # driver text and file paths are for operators only
        "error_detail": view.error_detail if admin else None,
        "created_at": _time(view.created_at), "started_at": _time(view.started_at),
        "finished_at": _time(view.finished_at),
        "status_url": status_url(view.id), "events_url": events_url(view.id),
    }


def export_public(store: JobStore, settings: Settings, export: ExportRecord, *,
                  admin: bool = False) -> ExportPublic:
    """The full view of one export: progress per table and its files."""
    view = export_view(store, export, settings)
    files = [
        FilePublic(table=f.table, name=f.name, rows=f.rows, bytes=f.bytes, crc32c=f.crc32c,
                   sha256=f.sha256, download_url=download_url(export.id, f.name))
        for f in view.files
    ]
    return ExportPublic(**_summary(view, admin), files=files)


def export_summaries(
    store: JobStore, exports: Sequence[ExportRecord], *, admin: bool = False
) -> list[ExportSummary]:
    """Views of many exports from two reads (the records, then all their progress)."""
    return [ExportSummary(**_summary(v, admin)) for v in export_views(store, exports)]
