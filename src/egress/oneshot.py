"""One-shot exports in-process: the library's ``egress.export`` and the CLI's ``egress export``.

The same checkpoint protocol as the job system, with the checkpoints kept in
``OUT/.egress/state.json`` instead of a job store: after a crash, a kill or Ctrl-C,
``resume=True`` continues from the last committed part and the output is byte-identical
to an uninterrupted run. Once the manifest and ``_SUCCESS`` are written the state
directory is removed; a run failing before it started a file removes what it created
(``egress.leftovers``). An export to object storage (``to="s3://bucket/prefix"``) keeps
its checkpoint in a local state directory instead (``state_dir``, by default
``EGRESS_HOME/oneshot/<sha256 of the destination>``): a bucket has no atomic rename.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from egress.config import default_home
from egress.domain.checkpoint import Checkpoint, TaskSpec
from egress.engine.manifest import (
    MANIFEST,
    SUCCESS,
    TableResult,
    build_manifest,
    check_footers,
    write_manifest,
)
from egress.engine.naming import STATE_DIR
from egress.engine.plan import DEFAULT_PART_SIZE, fit_part_budget, plan_task
from egress.engine.sizes import MAX_VALUE_BYTES, SizeLimits
from egress.engine.slice import Task, run_slice
from egress.exceptions import (
    ConfigError,
    EgressError,
    ResultGoneError,
    ResumeMismatchError,
    SinkError,
)
from egress.formats import resolve_compression
from egress.leftovers import Leftovers
from egress.redact import redact_url, without_password
from egress.sinks import is_local, open_sink
from egress.sinks.base import Sink
from egress.sinks.local import LocalSink
from egress.sinks.oserrors import writing
from egress.sources import is_remote, open_source
from egress.sources.base import Source
from egress.sources.query import Query, check_query
from egress.sources.snapshots import SNAPSHOT_AND_SERVER_CSV, HeldSnapshot, hold_snapshot

log = logging.getLogger(__name__)

STATE_FILE = "state.json"
#: Request fields that must match on --resume.
_COMPARED = ("source", "tables", "format", "compression", "max_file_size", "options", "query",
             "snapshot")


class Progress(Protocol):
    def table_started(
        self, table: str, rows_estimate: int | None, checkpoint: Checkpoint
    ) -> None: ...
    def advanced(self, table: str, checkpoint: Checkpoint) -> None: ...
    def table_done(self, table: str, checkpoint: Checkpoint) -> None: ...


@dataclass(frozen=True)
class ExportResult:
    #: The output directory, or the ``s3://bucket/prefix`` URL of an object-storage export.
    out: Path | str
    #: True when ``should_stop`` ended the run before every table was done.
    interrupted: bool
    manifest: dict[str, Any] | None


class _StateFile:
    """The one-shot run's request and checkpoints, written atomically after every commit."""

    def __init__(self, directory: Path, fsync: bool) -> None:
        self.dir = directory
        self.path = self.dir / STATE_FILE
        self.fsync = fsync
        self.data: dict[str, Any] = {}

    def exists(self) -> bool:
        return self.path.exists()

    def load(self) -> None:
        try:
            self.data = json.loads(self.path.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read the checkpoint {self.path}: {exc}") from exc

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        try:
            with writing(self.path, "write the checkpoint"):
                self.dir.mkdir(parents=True, exist_ok=True)
                with open(tmp, "w") as f:
                    # dumps: json.dump encodes in Python, chunk by chunk (~10x slower)
                    f.write(json.dumps(self.data))
                    f.flush()
                    if self.fsync:
                        os.fsync(f.fileno())
                os.replace(tmp, self.path)
        except SinkError:
            with contextlib.suppress(OSError):  # the previous checkpoint stays whole
                tmp.unlink(missing_ok=True)
            raise


def export(
    source: str,
    tables: Sequence[str] | None = None,
    *,
    to: str | os.PathLike[str],
    format: str = "csv",
    compression: str | None = None,
    all_tables: bool = False,
    max_file_size: int | None = None,
    part_size: int = DEFAULT_PART_SIZE,
    part_rows: int | None = None,
    slice_seconds: float = 5.0,
    resume: bool = False,
    options: dict[str, Any] | None = None,
    progress: Progress | None = None,
    should_stop: Callable[[], bool] | None = None,
    fsync: bool = True,
    state_dir: str | os.PathLike[str] | None = None,
    sink_options: dict[str, Any] | None = None,
    query: str | None = None,
    key: Sequence[str] | None = None,
    name: str | None = None,
    query_timeout: float = 300.0,
    max_value_bytes: int = MAX_VALUE_BYTES,
    role: str | None = None,
    client_tags: Sequence[str] = (),
    snapshot: bool = False,
) -> ExportResult:
    """Export ``tables`` (or every table with ``all_tables``) of the database at the
    SQLAlchemy-style URL ``source`` into the directory or ``s3://bucket/prefix`` ``to``.
    ``sink_options`` go to the sink (S3: ``endpoint_url``, ``min_part_bytes``, …; the
    endpoint otherwise comes from ``AWS_ENDPOINT_URL``, credentials from the AWS chain).

    Runs slice after slice in this process until done or until ``should_stop()`` is
    true (then the part in hand is committed and ``interrupted`` is set); call again
    with ``resume=True`` to continue.

    Instead of tables, ``query`` exports the result of one read-only SELECT, paged and
    resumed by ``key`` (result columns that are unique and NOT NULL) into a file named
    after ``name`` (default ``query``); each page's statement stops after
    ``query_timeout`` seconds.

    A row holding a text or binary value above ``max_value_bytes`` stops the export with
    an error naming its table, column and key, before it is encoded.

    A remote engine (``trino://…``) runs the queries as ``role`` (required), with
    ``client_tags``; its result is streamed in this process (docs/trino.md).

    ``snapshot``: every table is read in one snapshot taken when the run starts (PostgreSQL
    sources and SQLite tables; sources/snapshots.py), named in the manifest. A snapshot
    ends with the run: an interrupted snapshot run cannot be resumed, only run again.
    """
    compression = resolve_compression(format, compression)
    if max_file_size is not None and max_file_size <= 0:
        raise ConfigError(f"max file size must be positive, got {max_file_size}")
    if part_rows is not None and part_rows <= 0:
        raise ConfigError(f"part rows must be positive, got {part_rows}")
    if max_value_bytes <= 0:
        raise ConfigError(f"max value size must be positive, got {max_value_bytes}")
    checked = None
    if query is not None:
        if tables or all_tables:
            raise ConfigError("give either tables or a query, not both")
        checked = check_query(query, list(key) if key is not None else None, name)
    elif not tables and not all_tables:
        raise ConfigError("name at least one table, or ask for all tables")
    if snapshot and (options or {}).get("csv_dialect") == "postgres":
        raise ConfigError(SNAPSHOT_AND_SERVER_CSV)
    if (options or {}).get("split") not in (None, False):
        raise ConfigError(
            "split needs workers: a one-shot export reads each table as one task; create a "
            "job instead ('egress jobs create --split N|auto', or POST /v1/exports with "
            "split) and run 'egress worker' processes")
    if snapshot and resume:
        raise ConfigError(
            "a --snapshot export cannot be resumed: its snapshot ended with the run that took "
            "it, and the rest would be read in another one; delete the unfinished output "
            "(or choose another destination) and run the export again")
    stop = should_stop or (lambda: False)
    made = Leftovers.before_open(to)
    sink, state = _open(to, fsync, state_dir, sink_options)
    made.note_state_dir(state.dir)
    try:
        return _export(source, names=tables, all_tables=all_tables, checked=checked,
                       sink=sink, state=state, format=format, compression=compression,
                       max_file_size=max_file_size, part_size=part_size, part_rows=part_rows,
                       slice_seconds=slice_seconds, resume=resume, options=options,
                       progress=progress, stop=stop, query_timeout=query_timeout,
                       limits=SizeLimits(max_value_bytes=max_value_bytes),
                       remote=(role, tuple(client_tags)), snapshot=snapshot)
    except BaseException:
        # a run that committed nothing leaves nothing; otherwise --resume continues it
        made.remove_if_unused(
            e.get("checkpoint", {}) for e in state.data.get("tasks", {}).values())
        raise


def _export(
    source: str,
    *,
    names: Sequence[str] | None,
    all_tables: bool,
    checked: Query | None,
    sink: Sink,
    state: _StateFile,
    format: str,
    compression: str,
    max_file_size: int | None,
    part_size: int,
    part_rows: int | None,
    slice_seconds: float,
    resume: bool,
    options: dict[str, Any] | None,
    progress: Progress | None,
    stop: Callable[[], bool],
    query_timeout: float,
    limits: SizeLimits,
    remote: tuple[str | None, tuple[str, ...]] = (None, ()),
    snapshot: bool = False,
) -> ExportResult:
    tables = names
    out = sink.root if isinstance(sink, LocalSink) else sink.location
    where = sink.location

    if sink.exists(SUCCESS):
        if resume:
            manifest = json.loads(sink.get_object(MANIFEST))
            # a kill during the final cleanup may have left the state directory behind
            shutil.rmtree(state.dir, ignore_errors=True)
            return ExportResult(out, False, manifest)
        raise ConfigError(f"{where} already holds a completed export; choose another destination")
    if state.exists() and not resume:
        raise ConfigError(
            f"{where} holds an unfinished export; continue it with --resume "
            "or choose another destination"
        )
    if resume and not state.exists():
        raise ConfigError(f"nothing to resume in {where}: no checkpoint found in {state.dir}")

    role, client_tags = remote
    if is_remote(source):
        if not role:
            raise ConfigError("missing role: an export from a remote engine runs with the role "
                              "you name (--role ROLE)")
    elif role or client_tags:
        raise ConfigError("--role and --client-tag apply to remote engines (trino://…) only")
    src = open_source(source, checked, query_timeout)
    if role:
        src.role, src.tags = role, client_tags  # type: ignore[attr-defined]  # remote sources
    held: HeldSnapshot | None = None
    try:
        if snapshot:  # before any row is read (planning samples rows too)
            held = hold_snapshot(source, src, query=checked is not None)
        names = list(src.tables()) if all_tables or checked else list(dict.fromkeys(tables or ()))
        infos = {name: src.describe(name) for name in names}
        request = {
            "source": redact_url(source),
            "tables": names,
            "format": format,
            "compression": compression,
            "max_file_size": max_file_size,
            "options": options or {},
            "query": checked.to_json() if checked is not None else None,
            **({"snapshot": True} if snapshot else {}),
        }
        if resume:
            state.load()
            _check_same_request(state.data.get("request", {}), request)
        else:
            state.data = {
                "request": request,
                "started_at": dt.datetime.now(dt.UTC).isoformat(),
                "tasks": {},
            }
            state.save()
        tasks: dict[str, Any] = state.data["tasks"]
        results = []
        for name in names:
            info = infos[name]
            entry = tasks.get(name)
            if entry is None:
                spec = plan_task(
                    src, info, format=format, compression=compression, part_size=part_size,
                    part_rows=part_rows, max_file_size=max_file_size, options=options,
                    min_part_bytes=sink.min_part_bytes, limits=limits,
                )
                spec = fit_part_budget(spec, info, part_size, sink.max_parts)
                entry = tasks[name] = {"spec": spec.to_json(), "checkpoint": Checkpoint().to_json()}
                state.save()
            spec = TaskSpec.from_json(entry["spec"])
            cp = Checkpoint.from_json(entry["checkpoint"])
            try:
                try:
                    cp = _run_table(src, sink, state, spec, info, cp, slice_seconds, stop,
                                    progress, limits)
                except ResultGoneError as exc:
                    # the engine no longer holds the result where the checkpoint stopped:
                    # this table starts over from nothing, never half of each run
                    log.warning("result lost on the engine; the table starts over",
                                extra={"table": name, "error": str(exc)})
                    cp = _discard_table(sink, state, spec.table, cp)
                    cp = _run_table(src, sink, state, spec, info, cp, slice_seconds, stop,
                                    progress, limits)
            except SinkError as exc:
                if not exc.transient:  # e.g. access denied: leave no upload behind
                    _abort_open_files(sink, state)
                raise
            if not cp.done:
                return ExportResult(out, True, None)
            results.append(TableResult(spec, info, cp))
        check_footers(sink, results)
        manifest = build_manifest(
            source=redact_url(source),
            results=results,
            started_at=dt.datetime.fromisoformat(state.data["started_at"]),
            finished_at=dt.datetime.now(dt.UTC),
            destination=sink.location,
            snapshot=None if held is None else (held.id, held.taken_at),
        )
        _abort_leftover_uploads(sink, [f.name for r in results for f in r.checkpoint.files])
        write_manifest(sink, manifest)
        shutil.rmtree(state.dir, ignore_errors=True)
        return ExportResult(out, False, manifest)
    finally:
        if held is not None:
            held.release()
        src.close()


def _discard_table(sink: Sink, state: _StateFile, table: str, cp: Checkpoint) -> Checkpoint:
    if cp.open_file is not None:
        sink.abort_file(cp.open_file.name, cp.open_file.sink_state)
    for f in cp.files:
        sink.delete(f.name)
    fresh = Checkpoint()
    state.data["tasks"][table]["checkpoint"] = fresh.to_json()
    state.save()
    return fresh


def _run_table(
    src: Source,
    sink: Sink,
    state: _StateFile,
    spec: TaskSpec,
    info: Any,
    cp: Checkpoint,
    slice_seconds: float,
    stop: Callable[[], bool],
    progress: Progress | None,
    limits: SizeLimits,
) -> Checkpoint:
    def commit(new: Checkpoint) -> None:
        state.data["tasks"][spec.table]["checkpoint"] = new.to_json()
        state.save()
        if progress:
            progress.advanced(spec.table, new)

    task = Task(spec=spec, table=info, source=src, sink=sink, commit=commit, should_stop=stop,
                limits=limits)
    if progress:
        progress.table_started(spec.table, info.row_estimate, cp)
    try:
        # one process runs every slice of the table: its read-ahead thread runs on from
        # one slice into the next (a new thread per slice re-read a page, and the peak
        # RSS jumped at the slice boundaries: 5M rows SQLite to Parquet, 195-205 MB
        # against 181-190 MB; docs/benchmarks.md)
        while not cp.done and not stop():
            cp = run_slice(task, cp, time.monotonic() + slice_seconds, keep_reading=True)
    except BaseException:
        _abort_unrecorded_uploads(sink, state)
        raise
    finally:
        task.close_pages()
    if progress and cp.done:
        progress.table_done(spec.table, cp)
    return cp


def _comparable(key: str, value: Any) -> Any:
    # The CLI prints the resume command without the password: both forms are the same source.
    if key == "source" and isinstance(value, str):
        return without_password(value)
    return value


def _check_same_request(saved: dict[str, Any], request: dict[str, Any]) -> None:
    diffs = [
        f"{key}: checkpoint has {saved.get(key)!r}, asked for {request.get(key)!r}"
        for key in _COMPARED
        if _comparable(key, saved.get(key)) != _comparable(key, request.get(key))
    ]
    if diffs:
        raise ResumeMismatchError(
            "--resume must continue the same export as the checkpoint; " + "; ".join(diffs)
        )


def discard(
    to: str | os.PathLike[str],
    *,
    state_dir: str | os.PathLike[str] | None = None,
    sink_options: dict[str, Any] | None = None,
) -> int:
    """Cancel an unfinished one-shot export: abort its uploads (every multipart upload
    under the destination prefix, which the export owns: also those a crash left
    unrecorded), delete the files it had completed and forget its checkpoint. Returns the
    number of files deleted. A completed export (with ``_SUCCESS``) is refused."""
    sink, state = _open(to, True, state_dir, sink_options)
    if sink.exists(SUCCESS):
        raise ConfigError(f"{sink.location} holds a completed export; delete its files instead")
    if not state.exists():
        raise ConfigError(
            f"nothing to cancel in {sink.location}: no checkpoint found in {state.dir}"
        )
    state.load()
    deleted = 0
    for entry in state.data.get("tasks", {}).values():
        cp = Checkpoint.from_json(entry["checkpoint"])
        if cp.open_file is not None:
            sink.abort_file(cp.open_file.name, cp.open_file.sink_state)
        for f in cp.files:
            sink.delete(f.name)
            deleted += 1
    _abort_leftover_uploads(sink, None)
    sink.delete(MANIFEST)
    shutil.rmtree(state.dir, ignore_errors=True)
    return deleted


def default_state_dir(location: str) -> Path:
    """Where a one-shot export to ``location`` (an object-storage URL) keeps its checkpoint."""
    return default_home() / "oneshot" / hashlib.sha256(location.encode()).hexdigest()


def _open(
    to: str | os.PathLike[str],
    fsync: bool,
    state_dir: str | os.PathLike[str] | None,
    sink_options: dict[str, Any] | None,
) -> tuple[Sink, _StateFile]:
    settings = dict(sink_options or {})
    if is_local(to):
        settings.setdefault("fsync", fsync)
    sink = open_sink(to, **settings)
    if state_dir is not None:
        directory = Path(state_dir)
    elif isinstance(sink, LocalSink):
        directory = sink.root / STATE_DIR
    else:
        directory = default_state_dir(sink.location)
    return sink, _StateFile(directory, fsync)


def _abort_open_files(sink: Sink, state: _StateFile) -> None:
    for entry in state.data.get("tasks", {}).values():
        of = Checkpoint.from_json(entry["checkpoint"]).open_file
        if of is not None:
            try:
                sink.abort_file(of.name, of.sink_state)
            except EgressError as exc:  # best effort: the reconciler sweeps orphans later
                log.warning("could not abort the upload of %s: %s", of.name, exc)


def _abort_unrecorded_uploads(sink: Sink, state: _StateFile) -> None:
    """After a failed slice: abort the uploads the sink created that no checkpoint of the
    export records (a failure at a file's first part); ``--resume`` could not find them."""
    abort = getattr(sink, "abort_unused_uploads", None)
    if abort is None:
        return
    keep = set()
    for entry in state.data.get("tasks", {}).values():
        of = Checkpoint.from_json(entry["checkpoint"]).open_file
        if of is not None and of.sink_state.get("upload_id"):
            keep.add(of.sink_state["upload_id"])
    try:
        abort(keep)
    except EgressError as exc:  # best effort: --resume or a discard aborts it later
        log.warning("could not abort unrecorded uploads under %s: %s", sink.location, exc)


def _abort_leftover_uploads(sink: Sink, names: Sequence[str] | None) -> None:
    """Uploads that a crash left behind (started, never recorded) of this export's files,
    or of anything under the destination prefix when ``names`` is None."""
    sweep = getattr(sink, "abort_orphaned_uploads", None)
    if sweep is None or names == []:
        return
    try:
        sweep(0, names=names)
    except EgressError as exc:
        log.warning("could not abort leftover uploads under %s: %s", sink.location, exc)
