"""One-shot exports in-process: the library's ``egress.export`` and the CLI's ``egress export``.

The same checkpoint protocol as the job system, with the checkpoints kept in
``OUT/.egress/state.json`` instead of a job store: after a crash, a kill or Ctrl-C,
``resume=True`` continues from the last committed part and the output is byte-identical
to an uninterrupted run. Once the manifest and ``_SUCCESS`` are written the state
directory is removed.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from egress.domain.checkpoint import Checkpoint, TaskSpec
from egress.engine.manifest import MANIFEST, SUCCESS, TableResult, build_manifest, write_manifest
from egress.engine.plan import DEFAULT_PART_SIZE, plan_task
from egress.engine.slice import Task, run_slice
from egress.exceptions import ConfigError, ResumeMismatchError
from egress.formats import check_format, get_compression
from egress.sinks.local import LocalSink
from egress.sources import open_source, redact_url
from egress.sources.base import Source

STATE_DIR = ".egress"
STATE_FILE = "state.json"
#: Request fields that must match on --resume.
_COMPARED = ("source", "tables", "format", "compression", "max_file_size", "options")


class Progress(Protocol):
    def table_started(self, table: str, rows_estimate: int | None, checkpoint: Checkpoint) -> None: ...
    def advanced(self, table: str, checkpoint: Checkpoint) -> None: ...
    def table_done(self, table: str, checkpoint: Checkpoint) -> None: ...


@dataclass(frozen=True)
class ExportResult:
    out: Path
    #: True when ``should_stop`` ended the run before every table was done.
    interrupted: bool
    manifest: dict[str, Any] | None


class _StateFile:
    """The one-shot run's request and checkpoints, written atomically after every commit."""

    def __init__(self, root: Path, fsync: bool) -> None:
        self.dir = root / STATE_DIR
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
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(self.data, f)
            f.flush()
            if self.fsync:
                os.fsync(f.fileno())
        os.replace(tmp, self.path)


def export(
    source: str,
    tables: Sequence[str] | None = None,
    *,
    to: str | os.PathLike[str],
    format: str = "csv",
    compression: str = "none",
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
) -> ExportResult:
    """Export ``tables`` (or every table with ``all_tables``) of the database at the
    SQLAlchemy-style URL ``source`` into the directory ``to``.

    Runs slice after slice in this process until done or until ``should_stop()`` is
    true (then the part in hand is committed and ``interrupted`` is set); call again
    with ``resume=True`` to continue.
    """
    check_format(format)
    get_compression(compression)
    if max_file_size is not None and max_file_size <= 0:
        raise ConfigError(f"max file size must be positive, got {max_file_size}")
    if part_rows is not None and part_rows <= 0:
        raise ConfigError(f"part rows must be positive, got {part_rows}")
    if not tables and not all_tables:
        raise ConfigError("name at least one table, or ask for all tables")
    root = Path(to)
    stop = should_stop or (lambda: False)
    sink = LocalSink(root, fsync=fsync)
    state = _StateFile(sink.root, fsync)

    if sink.exists(SUCCESS):
        if resume:
            manifest = json.loads(sink.path(MANIFEST).read_text())
            return ExportResult(sink.root, False, manifest)
        raise ConfigError(f"{sink.root} already holds a completed export; choose another directory")
    if state.exists() and not resume:
        raise ConfigError(
            f"{sink.root} holds an unfinished export; continue it with --resume "
            "or choose another directory"
        )
    if resume and not state.exists():
        raise ConfigError(f"nothing to resume in {sink.root}: no checkpoint found")

    src = open_source(source)
    try:
        names = list(src.tables()) if all_tables else list(dict.fromkeys(tables or ()))
        infos = {name: src.describe(name) for name in names}
        request = {
            "source": redact_url(source),
            "tables": names,
            "format": format,
            "compression": compression,
            "max_file_size": max_file_size,
            "options": options or {},
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
                )
                entry = tasks[name] = {"spec": spec.to_json(), "checkpoint": Checkpoint().to_json()}
                state.save()
            spec = TaskSpec.from_json(entry["spec"])
            cp = Checkpoint.from_json(entry["checkpoint"])
            cp = _run_table(src, sink, state, spec, info, cp, slice_seconds, stop, progress)
            if not cp.done:
                return ExportResult(sink.root, True, None)
            results.append(TableResult(spec, info, cp))
        manifest = build_manifest(
            source=redact_url(source),
            results=results,
            started_at=dt.datetime.fromisoformat(state.data["started_at"]),
            finished_at=dt.datetime.now(dt.UTC),
            destination=sink.location,
        )
        write_manifest(sink, manifest)
        shutil.rmtree(state.dir, ignore_errors=True)
        return ExportResult(sink.root, False, manifest)
    finally:
        src.close()


def _run_table(
    src: Source,
    sink: LocalSink,
    state: _StateFile,
    spec: TaskSpec,
    info: Any,
    cp: Checkpoint,
    slice_seconds: float,
    stop: Callable[[], bool],
    progress: Progress | None,
) -> Checkpoint:
    def commit(new: Checkpoint) -> None:
        state.data["tasks"][spec.table]["checkpoint"] = new.to_json()
        state.save()
        if progress:
            progress.advanced(spec.table, new)

    task = Task(spec=spec, table=info, source=src, sink=sink, commit=commit, should_stop=stop)
    if progress:
        progress.table_started(spec.table, info.row_estimate, cp)
    while not cp.done and not stop():
        cp = run_slice(task, cp, time.monotonic() + slice_seconds)
    if progress and cp.done:
        progress.table_done(spec.table, cp)
    return cp


def _check_same_request(saved: dict[str, Any], request: dict[str, Any]) -> None:
    diffs = [
        f"{key}: checkpoint has {saved.get(key)!r}, asked for {request.get(key)!r}"
        for key in _COMPARED
        if saved.get(key) != request.get(key)
    ]
    if diffs:
        raise ResumeMismatchError(
            "--resume must continue the same export as the checkpoint; " + "; ".join(diffs)
        )
