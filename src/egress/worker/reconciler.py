"""The reconciler: cheap, idempotent housekeeping that runs inside every worker."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from egress.config import Settings
from egress.domain.jobs import ExportState
from egress.manager import export_id_in, remove_outputs
from egress.metrics import STALE_CLAIMS_RESET
from egress.sinks import sink_from_destination
from egress.store.base import WorkerStore
from egress.worker.finalize import finalize_export
from egress.worker.remote import RemoteWork

log = logging.getLogger(__name__)


@dataclass
class ReconcileReport:
    rescued: int = 0
    overdue: int = 0
    finalized: int = 0
    cleaned: int = 0
    aborted_uploads: int = 0
    expired: int = 0


_last_sweep: dict[str, float] = {}


def sweep_orphaned_uploads(settings: Settings, now: float | None = None,
                           store: WorkerStore | None = None) -> int:
    """Abort multipart uploads under each S3 destination's prefix that are older than
    ``orphan_upload_seconds`` (at least the exports' ``max_duration``, so no running
    export can own them): what a crash between CreateMultipartUpload and the checkpoint
    commit leaves behind. With ``store``, an upload under the folder of an export that is
    still queued or running is never aborted, whatever its age says. Runs at most once
    per ``orphan_sweep_seconds``."""
    now = time.time() if now is None else now
    age = max(settings.export.orphan_upload_seconds, settings.export.max_duration)
    owned = None if store is None else _owned_by_live_export(store)
    aborted = 0
    for name, dest in settings.destinations.items():
        if dest.get("type") != "s3":
            continue
        if now - _last_sweep.get(name, 0.0) < settings.export.orphan_sweep_seconds:
            continue
        _last_sweep[name] = now
        try:
            sink = sink_from_destination(dest)
            aborted += sink.abort_orphaned_uploads(  # type: ignore[attr-defined]  # S3 only
                age, owned=owned)
        except Exception as exc:  # the next sweep tries again
            log.warning("orphan upload sweep failed", extra={"destination": name,
                                                             "error": str(exc)})
    return aborted


def _owned_by_live_export(store: WorkerStore) -> Callable[[str], bool]:
    """Whether an upload's name under its destination (``manager.export_id_in``) is in
    the folder of an export that is not finished.
    Its slices may have created the upload a moment ago and not recorded it yet, and the
    upload's start time cannot rule that out: it is the server's clock, not ours, and
    some servers report none (moto gives every upload one fixed date in 2010)."""
    live: dict[str, bool] = {}

    def owned(name: str) -> bool:
        export_id = export_id_in(name)
        if export_id is None:
            return False
        if export_id not in live:
            export = store.export_get(None, export_id)
            live[export_id] = export is not None and not export.state.terminal
        return live[export_id]

    return owned


def reconcile_once(store: WorkerStore, settings: Settings,
                   remote: RemoteWork | None = None) -> ReconcileReport:
    report = ReconcileReport()
    # Tasks whose worker died (or froze) past its lease go back in the queue; so do
    # remote tasks claimed long ago and never submitted (their worker is stuck).
    report.rescued = store.task_rescue_expired()
    report.rescued += (remote or RemoteWork(store, settings)).reconcile()
    if report.rescued:
        STALE_CLAIMS_RESET.inc(report.rescued)
        log.info("requeued tasks with expired leases", extra={"count": report.rescued})
    for export in store.export_list_overdue():
        limit = export.max_duration or settings.export.max_duration
        if store.export_fail(
            export.id, f"exceeded maximum duration ({limit:g}s): the export did not "
                       "finish in time"
        ):
            report.overdue += 1
    for export in store.export_list_finalizable():
        try:
            if finalize_export(store, settings, export.id):
                report.finalized += 1
        except Exception as exc:  # retried on the next round
            log.warning("finalizing failed", extra={"export": export.id, "error": str(exc)})
    now = store.now()
    for export in store.export_list_cancelled_with_outputs():
        # A failed export keeps its partial outputs for a while so that a retry continues
        # from its checkpoints; a cancelled one is cleaned at once.
        if export.state is ExportState.FAILED and (
            now - (export.finished_at or now) < settings.export.failed_retention_seconds
        ):
            continue
        # Mark first: a retry after this starts the export over instead of continuing
        # from parts that are about to be removed.
        if store.export_mark_cleaned(export.id):
            remove_outputs(store, settings, export)
            report.cleaned += 1
    if settings.export.retention_days is not None:
        for export in store.export_list_expirable(settings.export.retention_days * 86400):
            # mark first: downloads answer "expired" instead of a file that half exists
            if store.export_expire(export.id):
                remove_outputs(store, settings, export)
                report.expired += 1
    report.aborted_uploads = sweep_orphaned_uploads(settings, store=store)
    return report
