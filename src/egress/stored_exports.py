"""Use cases on the exports already in the job store: find, list, cancel, retry and
delete one, and where its files are.

The use cases that read a source (create, plan) are in ``egress.manager``, which also
offers these. Here nothing imports a source, a format or the engine, so the commands
that need only these (``egress jobs ls``, ``show``, ``cancel``; ``egress tokens``) start
without loading pyarrow.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Sequence
from pathlib import Path

from egress.config import Settings
from egress.domain.checkpoint import Checkpoint
from egress.domain.filenames import MANIFEST, SUCCESS
from egress.domain.jobs import ExportRecord, ExportState, TaskState
from egress.exceptions import ConfigError, NotFoundError
from egress.sinks import sink_from_destination
from egress.sinks.base import Sink
from egress.sinks.local import LocalSink
from egress.store.base import JobStore, WorkerStore

DEFAULT_PROJECT = "default"
_PROJECT = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


def check_project(name: str) -> str:
    if not _PROJECT.match(name):
        raise ConfigError(
            f"bad project name {name!r}: use 1–63 lowercase letters, digits, '-' or '_', "
            "starting with a letter or digit"
        )
    return name


def get_export(store: JobStore, project: str, export_id: str) -> ExportRecord:
    export = store.export_get(project, export_id)
    if export is None:
        raise NotFoundError(f"no export {export_id!r} in project {project!r}")
    return export


def list_exports(
    store: JobStore,
    project: str,
    *,
    states: Sequence[ExportState] | None = None,
    limit: int = 50,
    before_id: str | None = None,
) -> list[ExportRecord]:
    return store.export_list(project, states=states, limit=limit, before_id=before_id)


def cancel_export(store: JobStore, project: str, export_id: str) -> ExportRecord:
    export = store.export_cancel(project, export_id)
    if export is None:
        raise NotFoundError(f"no export {export_id!r} in project {project!r}")
    return export


def retry_export(store: JobStore, project: str, export_id: str,
                 settings: Settings | None = None) -> ExportRecord:
    """A failed export continues from its checkpoints; one that read a snapshot starts
    over (its files are removed first: its snapshot died with it, and the rows already
    written are of that snapshot, never to be mixed with a new one). ``settings``: needed
    for the latter."""
    export = get_export(store, project, export_id)
    if export.state is not ExportState.FAILED:
        raise ConfigError(f"only a failed export can be retried; {export_id} is {export.state}")
    if export.options.get("snapshot") and export.cleaned_at is None:
        if settings is None:
            raise ConfigError("retrying a snapshot export removes its files: pass the settings")
        if any(t.state.value == "running" for t in store.task_list(export_id)):
            raise ConfigError(f"export {export_id} still has a task stopping after its "
                              "failure; retry in a few seconds")
        remove_outputs(store, settings, export)
        store.export_mark_cleaned(export_id)  # every task then starts over (export_retry)
    retried = store.export_retry(project, export_id)
    if retried is None:
        raise NotFoundError(f"no export {export_id!r} in project {project!r}")
    if retried.state is ExportState.FAILED:
        raise ConfigError(
            f"export {export_id} still has a task stopping after its failure; "
            "retry in a few seconds"
        )
    return retried


def delete_export(store: JobStore, settings: Settings, project: str, export_id: str) -> None:
    """Remove an ended export's files, then its record (its tasks and lease log go with
    it). A task still stopping after a cancel (a worker finishing its part in hand, a
    remote engine's query being stopped) could write again after the files were
    removed: the export is then left whole, and the caller told to try again."""
    export = get_export(store, project, export_id)
    if not export.state.terminal:
        raise ConfigError(f"cancel export {export_id} before deleting it (it is {export.state})")
    stopping = f"export {export_id} still has a task stopping after it ended; delete it " \
               "again in a few seconds"
    if any(t.state in (TaskState.RUNNING, TaskState.SUBMITTED)
           for t in store.task_list(export_id)):
        raise ConfigError(stopping)
    remove_outputs(store, settings, export)
    if not store.export_delete(project, export_id):
        # gone meanwhile (another delete); else the store saw a task of it still
        # running, which the read above had not
        if store.export_get(project, export_id) is None:
            raise NotFoundError(f"no export {export_id!r} in project {project!r}")
        raise ConfigError(stopping)


def export_root(settings: Settings, export: ExportRecord) -> Path:
    """Where a local destination keeps one export's files: ``PATH/PROJECT/EXPORT_ID``."""
    dest = settings.destination(export.destination)
    return Path(dest["path"]) / check_project(export.project) / export.id


def open_sink(settings: Settings, export: ExportRecord, *, staging: bool = True) -> Sink:
    """The sink of one export: ``PATH/PROJECT/EXPORT_ID`` or ``s3://BUCKET/PREFIX/PROJECT/ID``
    (``staging``: a local sink makes its staging area; a finalizer's does not)."""
    dest = settings.destination(export.destination)
    if dest.get("type", "local") == "local":
        return LocalSink(export_root(settings, export), staging=staging)
    return sink_from_destination(dest).for_export(check_project(export.project), export.id)


def export_id_in(name: str) -> str | None:
    """The export whose folder holds ``name``, a path under a destination as ``open_sink``
    lays them out (``PROJECT/EXPORT_ID/FILE``); None for a path outside that layout."""
    segments = name.split("/")
    return segments[1] if len(segments) >= 3 and segments[1] else None


def remove_outputs(store: WorkerStore, settings: Settings, export: ExportRecord) -> None:
    """Remove every file of an export (cancelled, failed for good, or deleted), and abort
    its multipart uploads."""
    dest = settings.destination(export.destination)
    if dest.get("type", "local") == "local":
        shutil.rmtree(export_root(settings, export), ignore_errors=True)
        return
    sink = open_sink(settings, export)
    for task in store.task_list(export.id):
        if not task.checkpoint:
            continue
        cp = Checkpoint.from_json(task.checkpoint)
        if cp.open_file is not None:
            sink.abort_file(cp.open_file.name, cp.open_file.sink_state)
        for f in cp.files:
            sink.delete(f.name)
        stitched = (task.spec or {}).get("stitch_name")
        if stitched:  # a stitched split's file, if the finalize that made it then failed
            sink.delete(stitched)
    abort = getattr(sink, "abort_orphaned_uploads", None)
    if abort is not None:
        abort(0.0)  # uploads a crash left unrecorded: the export owns its whole prefix
    for name in (SUCCESS, MANIFEST):
        sink.delete(name)
