"""Finishing an export: once every task is done, write the manifest, then mark it completed."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping

from egress.config import Settings
from egress.domain.checkpoint import Checkpoint, TaskSpec
from egress.domain.jobs import ExportState, TaskState
from egress.engine.manifest import (
    TableResult,
    build_manifest,
    check_footers,
    write_manifest,
)
from egress.engine.stitch import stitch_results
from egress.manager import export_source, open_sink
from egress.redact import redact_url
from egress.sources.base import TableInfo
from egress.store.base import WorkerStore

log = logging.getLogger(__name__)


def finalize_export(store: WorkerStore, settings: Settings, export_id: str,
                    described: Mapping[str, TableInfo] | None = None) -> bool:
    """Idempotent: any worker may call it; only one ``export_complete`` succeeds.
    ``described``: tables the caller has described already (the worker that ran the last
    task); the source is opened only for the others, once per table."""
    export = store.export_get(None, export_id)
    if export is None or export.state is not ExportState.RUNNING:
        return False
    tasks = store.task_list(export_id)
    if not tasks or any(t.state is not TaskState.DONE for t in tasks):
        return False
    url = settings.source_url(export.source)
    # a remote engine's tables are described as their result was (no catalog query)
    infos = dict(described or {})
    if any(t.result_columns for t in tasks):
        # here, not with the module: the Trino client's httpx is ~60 ms of every worker's
        # start-up, and only remote exports need it
        from egress.sources.trino import info_from_columns

        infos.update({t.table: info_from_columns(t.table, t.result_columns)
                      for t in tasks if t.result_columns})
    missing = sorted({t.table for t in tasks} - infos.keys())
    if missing:
        source = export_source(settings, export)
        try:
            infos.update({table: source.describe(table) for table in missing})
        finally:
            source.close()
    results = [
        TableResult(TaskSpec.from_json(t.spec or {}), infos[t.table],
                    Checkpoint.from_json(t.checkpoint or {}))
        for t in tasks
    ]
    # no staging area made again: another finalizer may have removed it already
    sink = open_sink(settings, export, staging=False)
    started = export.started_at or export.created_at
    # a stitched split table's ranges joined into its file (idempotent: a redo after a
    # kill finds the file made and the pieces gone)
    results = stitch_results(sink, results)
    check_footers(sink, results)
    manifest = build_manifest(
        source=redact_url(url) if export.source == url else export.source,
        results=results,
        started_at=dt.datetime.fromtimestamp(started, dt.UTC),
        finished_at=dt.datetime.fromtimestamp(store.now(), dt.UTC),
        # the destination's name: its location (a local path, a bucket) is the server's
        destination=export.destination,
        snapshot=None if export.snapshot_id is None else (
            export.snapshot_id, dt.datetime.fromtimestamp(export.snapshot_at or 0.0, dt.UTC)),
    )
    manifest["export_id"] = export.id
    manifest["project"] = export.project
    write_manifest(sink, manifest)
    # No writer is left (every task is done): a late one (a zombie) finds no staging area
    # to write into. Removed before the export is marked completed too, so that a worker
    # killed right after marking it leaves none behind (a redo after a kill before the
    # mark writes the manifest again, and removes it again).
    remove_staging = getattr(sink, "remove_staging", None)
    if remove_staging is not None:
        remove_staging()
    completed = store.export_complete(export_id, manifest)
    again = None if completed else store.export_get(None, export_id)
    if remove_staging is not None and (
            completed or (again is not None and again.state is ExportState.COMPLETED)):
        # again: a finalizer beside this one may have remade it for its manifest
        remove_staging()
    if completed:
        log.info("export completed", extra={
            "export": export_id, "rows": manifest["total_rows"],
            "bytes": manifest["total_bytes"], "files": len(manifest["files"])})
    return completed
