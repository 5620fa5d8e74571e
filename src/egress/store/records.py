"""Rows of the job store's tables to the domain's records and back."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from egress.domain.jobs import ExportRecord, ExportState, TaskRecord, TaskState
from egress.store.base import LeaseEvent


def export_record(row: sa.Row[Any]) -> ExportRecord:
    m = row._mapping
    return ExportRecord(
        id=m["id"],
        project=m["project"],
        source=m["source"],
        tables=tuple(m["tables"]),
        format=m["format"],
        compression=m["compression"],
        destination=m["destination"],
        state=ExportState(m["state"]),
        options=m["options"] or {},
        error=m["error"],
        error_detail=m["error_detail"],
        idempotency_key=m["idempotency_key"],
        request_hash=m["request_hash"],
        callback_url=m["callback_url"],
        created_by=m["created_by"],
        manifest=m["manifest"],
        created_at=m["created_at"],
        started_at=m["started_at"],
        finished_at=m["finished_at"],
        max_duration=None if m["max_duration"] is None else float(m["max_duration"]),
        cancel_requested=bool(m["cancel_requested"]),
        expired_at=m["expired_at"],
        cleaned_at=m["cleaned_at"],
        snapshot_id=m["snapshot_id"],
        snapshot_owner=m["snapshot_owner"],
        snapshot_at=m["snapshot_at"],
    )


def task_record(row: sa.Row[Any]) -> TaskRecord:
    m = row._mapping
    return TaskRecord(
        id=m["id"],
        export_id=m["export_id"],
        project=m["project"],
        table=m["table_name"],
        seq=m["seq"],
        state=TaskState(m["state"]),
        spec=m["spec"],
        checkpoint=m["checkpoint"],
        rows=m["rows"],
        bytes=m["bytes"],
        rows_estimate=m["rows_estimate"],
        attempts=m["attempts"],
        max_attempts=m["max_attempts"],
        failures=m["failures"],
        lease_owner=m["lease_owner"],
        lease_token=m["lease_token"],
        lease_expires_at=m["lease_expires_at"],
        run_after=m["run_after"],
        error=m["error"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        remote_mode=m["remote_mode"],
        query_id=m["query_id"],
        next_uri=m["next_uri"],
        poll_count=m["poll_count"],
        next_poll_at=m["next_poll_at"],
        submitted_at=m["submitted_at"],
        polled_at=m["polled_at"],
        claimed_at=m["claimed_at"],
        result_columns=m["result_columns"],
        remote_note=m["remote_note"],
        key_range=m["key_range"],
    )


def lease_event(row: sa.Row[Any]) -> LeaseEvent:
    m = row._mapping
    return LeaseEvent(
        id=m["id"],
        task_id=m["task_id"],
        export_id=m["export_id"],
        kind=m["kind"],
        lease_token=m["lease_token"],
        worker=m["worker"],
        at=m["at"],
    )


def export_values(export: ExportRecord, export_id: str) -> dict[str, Any]:
    """Columns of a new export taken from the caller's record (times come from the DB)."""
    return {
        "id": export_id,
        "project": export.project,
        "source": export.source,
        "tables": list(export.tables),
        "format": export.format,
        "compression": export.compression,
        "destination": export.destination,
        "state": ExportState.QUEUED.value,
        "options": dict(export.options),
        "error": None,
        "error_detail": None,
        "idempotency_key": export.idempotency_key,
        "request_hash": export.request_hash,
        "callback_url": export.callback_url,
        "created_by": export.created_by,
        "manifest": None,
        "started_at": None,
        "finished_at": None,
        "max_duration": export.max_duration,
        "cancel_requested": False,
    }


def task_values(
    task: TaskRecord, task_id: str, export: ExportRecord, export_id: str
) -> dict[str, Any]:
    return {
        "id": task_id,
        "export_id": export_id,
        "project": export.project,
        "table_name": task.table,
        "seq": task.seq,
        "state": TaskState.QUEUED.value,
        "spec": task.spec,
        "checkpoint": task.checkpoint,
        "rows": task.rows,
        "bytes": task.bytes,
        "rows_estimate": task.rows_estimate,
        "attempts": 0,
        "failures": 0,
        "max_attempts": task.max_attempts,
        "lease_owner": None,
        "lease_token": None,
        "lease_expires_at": None,
        "error": None,
        "remote_mode": task.remote_mode,
        "poll_count": 0,
        "key_range": task.key_range,
    }
